"""Run a notebook's cells in a fresh Jupyter kernel, in a child process with a hard time limit.

The grader and the benchmark share this. :func:`run_in_child` starts
``python -m course_utils.notebook_runner DRIVER`` in its own process group; the child starts a
kernel (:class:`KernelSession`), hands it to the driver function, and writes the driver's result
as JSON. When the time limit runs out, the child's process group and the kernel's are killed
(SIGKILL), so an endless loop or a process the notebook started cannot outlive the run.

A driver is ``"module:function"``; it is called as ``function(session, payload, report)`` in the
child and fills the dict ``report`` as it goes (so that what it found survives a kernel that dies). The payload reaches the child on its standard input, not
in a file, so nothing in it is left on disk for the notebook to read.
"""
import asyncio
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["KernelSession", "run_in_child", "run_notebook_cells"]


class KernelSession:
    """A Jupyter kernel started in ``workdir`` with ``env``, running cells one at a time.

    Example:
        >>> with KernelSession("/tmp/work", dict(os.environ)) as session:
        ...     cell = session.execute("print(6 * 7)")
        >>> cell.outputs[0]["text"]
        '42\\n'
    """

    def __init__(self, workdir, env, cell_timeout=None):
        self.workdir, self.env, self.cell_timeout = str(workdir), env, cell_timeout
        self.kernel_pid = None
        self._loop = asyncio.new_event_loop()

    def __enter__(self):
        import nbformat
        from jupyter_client.manager import AsyncKernelManager
        from nbclient import NotebookClient

        self._km = AsyncKernelManager(kernel_name="python3")
        self._loop.run_until_complete(self._km.start_kernel(cwd=self.workdir, env=self.env))
        self.kernel_pid = getattr(self._km.provisioner, "pid", None)
        self._client = NotebookClient(nbformat.v4.new_notebook(), km=self._km, timeout=self.cell_timeout,
                                      allow_errors=True, startup_timeout=120,
                                      resources={"metadata": {"path": self.workdir}})
        self._loop.run_until_complete(self._client.async_start_new_kernel_client())
        return self

    def execute(self, source):
        """Run ``source`` as a cell and return it (an nbformat cell) with its outputs.

        Raises:
            nbclient.exceptions.DeadKernelError: the kernel died.
            nbclient.exceptions.CellTimeoutError: the cell ran longer than ``cell_timeout``.
        """
        import nbformat

        cell = nbformat.v4.new_code_cell(source)
        self._client.nb.cells.append(cell)
        self._loop.run_until_complete(self._client.async_execute_cell(cell, len(self._client.nb.cells) - 1))
        return cell

    def __exit__(self, *exc_info):
        try:
            self._loop.run_until_complete(self._km.shutdown_kernel(now=True))
        except Exception:  # the kernel may already be dead; the caller kills its process group anyway
            pass
        self._loop.close()
        return False


def cell_error(cell):
    """``(ename, evalue)`` of the first error output of an executed cell, or None."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return output.get("ename", ""), output.get("evalue", "")
    return None


def run_notebook_cells(session, payload, report):
    """A driver: run the code cells of the notebook at ``payload["notebook"]`` in order, stopping at
    the first error; ``report["status"]`` is ``"ok"`` or ``"<ename>: <evalue>"``."""
    import nbformat

    nb = nbformat.read(payload["notebook"], as_version=4)
    report["status"] = "ok"
    for cell in nb.cells:
        if cell.cell_type == "code":
            error = cell_error(session.execute(cell.source))
            if error:
                report["status"] = f"{error[0]}: {error[1]}"[:200]
                return


def _kill_group(pgid, wait_seconds=5.0):
    """SIGKILL the process group ``pgid``, then wait (at most ``wait_seconds``) until it is gone.

    A signal is delivered asynchronously: without the wait, a killed process may still run for a
    moment after ``killpg`` returns. Zombies count as gone (they no longer run).
    """
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:  # the group is already gone, or not ours
        return
    deadline = time.monotonic() + wait_seconds
    while _group_runs(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _group_runs(pgid):
    """Whether a process of the group ``pgid`` still runs (is not a zombie)."""
    import psutil

    for process in psutil.process_iter(["status"]):
        try:
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False


def run_in_child(driver, payload, timeout, env=None, cell_timeout=None):
    """Run ``driver`` on a fresh kernel in a child process; kill everything after ``timeout`` seconds.

    Args:
        driver: ``"module:function"`` (see the module docstring).
        payload: a JSON-serialisable dict for the driver.
        timeout: seconds for the whole run, kernel start included.
        env: the kernel's (and child's) environment; default ``os.environ``.
        cell_timeout: seconds one cell may take (default: no limit but ``timeout``).

    Returns:
        A dict: ``kind`` (``"completed"``, ``"timeout"``, ``"kernel died"`` or ``"failed"``),
        ``detail``, ``seconds``, and under ``report`` what the driver reported (empty after a time-out).

    Example:
        >>> run_in_child("course_utils.notebook_runner:run_notebook_cells",
        ...              {"notebook": "notebooks/00_welcome.ipynb"}, timeout=120)["report"]
        {'status': 'ok'}
    """
    scratch = Path(tempfile.mkdtemp(prefix="course-run-"))
    result_path, pid_path, log_path = scratch / "result.json", scratch / "kernel.pid", scratch / "child.log"
    (scratch / "kernel-cwd").mkdir()
    cmd = [sys.executable, "-m", "course_utils.notebook_runner", driver, str(scratch), str(cell_timeout or 0)]
    start = time.monotonic()
    try:
        with open(log_path, "wb") as log:
            child = subprocess.Popen(cmd, env=dict(env if env is not None else os.environ), stdin=subprocess.PIPE,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            child.stdin.write(json.dumps(payload).encode())
            child.stdin.close()
            try:
                child.wait(timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(child.pid)
                child.wait()
        if pid_path.exists():
            _kill_group(int(pid_path.read_text()))  # the kernel leads its own process group
        outcome = {"kind": "timeout", "detail": "", "report": {}} if timed_out else (
            json.loads(result_path.read_text()) if result_path.exists() else
            {"kind": "failed", "report": {},
             "detail": " ".join(log_path.read_text(errors="replace").split()[-40:])[-300:]
             or f"exit status {child.returncode}"})
        outcome["seconds"] = time.monotonic() - start
        return outcome
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _child_main(driver, scratch, cell_timeout):
    """The child's side of :func:`run_in_child`."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    scratch = Path(scratch)
    payload = json.loads(sys.stdin.read())
    module, function = driver.split(":")
    drive = getattr(importlib.import_module(module), function)
    outcome = {"kind": "completed", "detail": "", "report": {}}
    try:
        with KernelSession(scratch / "kernel-cwd", dict(os.environ), cell_timeout or None) as session:
            if session.kernel_pid:
                (scratch / "kernel.pid").write_text(str(session.kernel_pid))
            drive(session, payload, outcome["report"])
    except DeadKernelError:
        outcome["kind"] = "kernel died"
    except CellTimeoutError:
        outcome["kind"] = "timeout"
    except Exception as err:  # nbclient's own failures, e.g. a kernel that never started
        outcome["kind"], outcome["detail"] = "failed", f"{type(err).__name__}: {err}"
    (scratch / "result.json").write_text(json.dumps(outcome))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
