"""Running notebooks in a child process with a hard time limit (shared by the grader and the benchmark)."""
import json
from pathlib import Path

import nbformat

from course_utils.tools.notebook_runner import run_in_child

DRIVER = "course_utils.tools.notebook_runner:run_notebook_cells"


def write(path, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, path)
    return str(path)


def test_runs_every_cell_and_reports_the_first_error(tmp_path):
    ok = run_in_child(DRIVER, {"notebook": write(tmp_path / "ok.ipynb", "x = 6 * 7", "assert x == 42")}, timeout=120)
    assert ok["kind"] == "completed" and ok["report"] == {"status": "ok"} and ok["seconds"] > 0
    bad = run_in_child(DRIVER, {"notebook": write(tmp_path / "bad.ipynb", "1 / 0", "print('not reached')")}, 120)
    assert bad["report"]["status"] == "ZeroDivisionError: division by zero"


def test_time_limit_kills_the_kernel_and_what_it_started(tmp_path):
    pids = tmp_path / "pids.json"
    loop = write(tmp_path / "loop.ipynb", "import json, os, subprocess, time\nchild = subprocess.Popen(['sleep', '600'])\n"
                 f"open({str(pids)!r}, 'w').write(json.dumps([os.getpid(), child.pid]))\nwhile True:  # endless, without taking a core from the other tests\n    time.sleep(0.1)")
    outcome = run_in_child(DRIVER, {"notebook": loop}, timeout=20)  # room for a slow kernel start under load (no TensorFlow here)
    assert outcome["kind"] == "timeout" and outcome["report"] == {}
    for pid in json.loads(pids.read_text()):
        status = Path(f"/proc/{pid}/status")
        assert not status.exists() or "\nState:\tZ" in status.read_text(), pid


def test_a_dying_kernel_is_reported(tmp_path):
    outcome = run_in_child(DRIVER, {"notebook": write(tmp_path / "die.ipynb", "import os\nos._exit(3)")}, 120)
    assert outcome["kind"] == "kernel died"


def test_kernels_talk_over_private_unix_sockets_so_two_starting_at_once_cannot_collide(tmp_path):
    """Over TCP, two kernels starting at once could pick the same free port; over ipc each has its own folder."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    import nbval.kernel

    from course_utils.tools.notebook_runner import KernelSession, private_ipc_address

    assert os.path.dirname(private_ipc_address()) != os.path.dirname(private_ipc_address())
    manager = nbval.kernel.KernelManager(kernel_name="python3")  # nbval's, as tests/conftest.py sets it up
    assert manager.transport == "ipc" and manager.ip.endswith("/kernel")

    def run(index):
        with KernelSession(tmp_path, dict(os.environ)) as session:
            assert session._km.transport == "ipc"
            return session.execute(f"print({index} * 7)").outputs[0]["text"]

    with ThreadPoolExecutor(2) as pool:
        assert list(pool.map(run, [1, 2])) == ["7\n", "14\n"]


def test_a_cell_keeps_at_most_a_mebibyte_of_output(tmp_path):
    """A notebook that prints gigabytes cannot fill the memory of the process that drives its kernel."""
    import os

    from course_utils.tools.notebook_runner import OUTPUT_LIMIT, KernelSession

    with KernelSession(tmp_path, dict(os.environ)) as session:
        cell = session.execute("for _ in range(40):\n    print('x' * 100_000)")
        kept = "".join(o.get("text", "") for o in cell.outputs)
        assert OUTPUT_LIMIT - 200_000 < len(kept) <= OUTPUT_LIMIT + 200 and "the rest was dropped" in kept
        assert session.execute("print('next')").outputs[0]["text"] == "next\n"  # the next cell starts afresh
