"""What one submission can no longer do: to the grader, to the other submissions, to the run.

In the sandbox run, every attacker answers exercise 1 of chapter 3 right (2 points) and tries its
attack in the cell of exercise 4, before that exercise's right answer (6 points): an attack that
raises leaves exercise 4 unanswered, and the status says what it raised. Two honest submissions are
graded in the same run, two at a time. Without the sandbox (``--sandbox none``), the run must still
survive whatever a submission does to its own results file, and whatever sits in the folder.
"""
import hashlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import course_utils
from course_utils.grading import cli, sandbox
from course_utils.grading.report import COLUMNS, digest_path, verify_digest, write_csv
from course_utils.grading.submission import NotANotebook, read_submission
from course_utils.tools.notebook_runner import read_small_file
from notebooks import MAX, ROOT, needs_bwrap, points, processes_with, read_grades, right_answer, submission

ATTACKER = {"q1": 2, "q2": 0, "q3": 0, "q4": 0, "q5": 0}  # exercise 1's real points, nothing else
PACKAGE = Path(course_utils.__file__).resolve().parent
OWN_EXPORTS = """import os, re, shutil
# the folder the grader's requests (kept in the history In) had the kernel write its answers to
own = os.path.dirname(re.findall(r"export_answers\\(.*'([^']+)'\\)", "\\n".join(In))[-1])
shutil.rmtree(own)
"""


def attacks(folder, port, marker):
    """``{name: (code run first in exercise 4's cell or None, [cells added after exercise 1])}``."""
    import numpy

    rewrite_everything = f"""import pathlib
targets = [*pathlib.Path({str(PACKAGE)!r}).rglob("*.py"), pathlib.Path({numpy.__file__!r})]
for target in targets:
    try:
        with open(target, "a") as f:
            f.write("\\nFULL_MARKS = True  # changed by a submission\\n")
    except OSError:
        pass
for where in ({str(PACKAGE)!r}, {str(PACKAGE / "grading")!r}):
    try:
        pathlib.Path(where, "extra.py").write_text("FULL_MARKS = True")
    except OSError:
        pass
"""
    overwrite_neighbours = f"""import os
for attempt in (lambda: os.listdir({str(folder)!r}),
                lambda: open({str(folder / "victim.ipynb")!r}, "w").write("{{}}"),
                lambda: open({str(folder / "planted.ipynb")!r}, "w").write("{{}}"),
                lambda: open({str(folder / "grades.csv")!r}, "w").write("forged")):
    try:
        attempt()
    except OSError:
        pass
"""
    others_results = f"""import glob, os, tempfile
mine = set()
for fd in os.listdir("/proc/self/fd"):
    try:
        mine.add(os.readlink(f"/proc/self/fd/{{fd}}"))
    except OSError:
        pass
others = [path for base in sorted({{"/tmp", tempfile.gettempdir(), {tempfile.gettempdir()!r}}})
          for pattern in ("results.jsonl", "exports/*.json")
          for path in glob.glob(os.path.join(base, "course-grade-*", "**", pattern), recursive=True)
          if path not in mine and not path.startswith(os.path.dirname(os.getcwd()))]  # not its own box
for path in others:
    os.remove(path)
    open(path, "w").close()
assert others, "no other submission's results file is visible"
"""
    kill_kernels = """import os, signal
kernels = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        continue
    if b"ipykernel_launcher" in cmdline and int(pid) not in (os.getpid(), os.getppid()):
        kernels.append(int(pid))
for pid in kernels:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
assert kernels, "no other kernel is visible"
"""
    outlive = f"""import subprocess, sys, time
code = '''
import os, sys, time
if sys.argv[2] == "double" and os.fork():
    os._exit(0)  # the grandchild lives on, its parent gone
while True:
    try:
        with open({str(folder / "grades.csv")!r}, "a") as f:
            f.write("forged,row\\\\n")
    except OSError:
        pass
    time.sleep(0.2)
'''
started = [subprocess.Popen([sys.executable, "-c", code, {marker!r}, how], start_new_session=True)
           for how in ("single", "double")]
time.sleep(1)
assert started[0].poll() is None, "the process did not start"
"""
    return {
        "rewrite_grader": (f"open({str(PACKAGE / 'grading' / 'session.py')!r}, 'a').write('\\nFULL_MARKS = True\\n')",
                           [rewrite_everything]),
        "read_neighbour": (f"print(open({str(folder / 'victim.ipynb')!r}).read()[:100])", [overwrite_neighbours]),
        "replace_neighbours_results": (others_results, []),
        "kill_kernels": (kill_kernels, []),
        "exports_to_file": (OWN_EXPORTS + "open(own, 'w').write('{}')", []),
        "exports_to_fifo": (OWN_EXPORTS + "os.mkfifo(own)", []),
        "move_connection_folder": ("import os\nconn = os.path.join(os.path.dirname(os.getcwd()), 'conn')\n"
                                   "os.rename(conn, conn + '-moved')\nos.symlink('/tmp', conn)", []),
        "network": (f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)", []),
        "outlive": (None, [outlive]),
    }


def attacker(path, first, added):
    replace = {"ch3-q4": first + "\n" + right_answer("q4")} if first else {}
    return submission(path, answers=["q1"], replace=replace, after={"ch3-q1": added})


def _sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def package_digests():
    """SHA-256 of every ``.py`` file of the grader's ``course_utils``, by path relative to the package."""
    return {p.relative_to(PACKAGE).as_posix(): _sha256(p) for p in sorted(PACKAGE.rglob("*.py"))}


@pytest.fixture(scope="module")
def sandboxed(tmp_path_factory):
    """The attackers and two honest submissions, graded once in sandboxes; what they could have changed."""
    import numpy

    folder = tmp_path_factory.mktemp("sandboxed")
    server = socket.create_server(("127.0.0.1", 0))  # a service on the grader's machine
    marker = f"outliver-{secrets.token_hex(6)}"
    for name, (first, added) in attacks(folder, server.getsockname()[1], marker).items():
        attacker(folder / f"{name}.ipynb", first, added)
    submission(folder / "honest.ipynb", answers=list(MAX))
    submission(folder / "victim.ipynb", answers=list(MAX))
    before = {"package": package_digests(), "numpy": _sha256(numpy.__file__),
              "victim": _sha256(folder / "victim.ipynb"), "files": sorted(os.listdir(folder))}
    notes = []
    rows = cli.grade_folder(folder, timeout=120, jobs=2, echo=notes.append, sandbox="bwrap")
    after_run = {"survivors": processes_with(marker), "csv": (folder / "grades.csv").read_bytes()}
    server.setblocking(False)
    try:
        server.accept()
        connected = True
    except BlockingIOError:
        connected = False
    server.close()
    time.sleep(2)  # time for a survivor to write
    yield dict(folder=folder, rows=rows, table=read_grades(folder / "grades.csv")[1], notes="\n".join(notes),
               before=before, after_run=after_run, connected=connected, marker=marker)
    for pid in processes_with(marker):  # only if a test failed: leave nothing behind
        os.kill(pid, 9)


def status(graded, name, exercise="q4"):
    return graded["table"][f"{name}.ipynb"][exercise]["status"]


@needs_bwrap
def test_honest_submissions_are_unaffected(sandboxed):
    for name in ("honest.ipynb", "victim.ipynb"):
        assert points(sandboxed["table"], name) == MAX, sandboxed["notes"]
        assert all(r["status"] == "correct" and not r["flags"] and r["sandbox"] == "bwrap"
                   for r in sandboxed["table"][name].values())
    assert len(sandboxed["table"]) == len(attacks(Path(), 0, "")) + 2


INTERFERED = "not checked: the notebook interfered with the grader's request for its answers"
MOUNT_POINT = ("not checked: its cell raised OSError: [Errno 16] Device or resource busy",
               "not checked: its cell raised OSError: [Errno 30] Read-only file system",
               "not checked: its cell raised PermissionError: [Errno 13] Permission denied")  # as root


@needs_bwrap
@pytest.mark.parametrize("name, status_starts", [
    # the grader's own package is not in the sandbox at all (the kernel imports a stripped copy)
    ("rewrite_grader", "not checked: its cell raised FileNotFoundError: [Errno 2] No such file or directory"),
    ("read_neighbour", "not checked: its cell raised FileNotFoundError: [Errno 2] No such file or directory"),
    ("replace_neighbours_results", "not checked: its cell raised AssertionError: no other submission's results"),
    ("kill_kernels", "not checked: its cell raised AssertionError: no other kernel is visible"),
    # its own folders are mount points: it cannot swap one for a link the grader would follow when it cleans up
    ("move_connection_folder", MOUNT_POINT),
    ("exports_to_file", MOUNT_POINT),  # (without the sandbox it can: see below)
    ("exports_to_fifo", MOUNT_POINT),
    ("network", "not checked: its cell raised ConnectionRefusedError: [Errno 111] Connection refused"),
])
def test_each_attack_fails_in_the_sandbox_and_earns_only_real_points(sandboxed, name, status_starts):
    assert points(sandboxed["table"], f"{name}.ipynb") == ATTACKER
    assert status(sandboxed, name).startswith(status_starts), status(sandboxed, name)


@needs_bwrap
def test_the_grader_and_the_environment_are_unchanged_on_disk(sandboxed):
    import numpy

    before, now = sandboxed["before"]["package"], package_digests()
    assert set(now) == set(before)  # no file added (extra.py)
    grader = [f for f in now if f.startswith("grading/")]
    assert [now[f] for f in grader] == [before[f] for f in grader]  # the grader's own files are unchanged
    # and no file has the line the notebook appends (the rest of the package may be edited while tests run)
    assert not [f for f in now if "changed by a submission" in (PACKAGE / f).read_text()]
    assert _sha256(numpy.__file__) == sandboxed["before"]["numpy"]
    assert points(sandboxed["table"], "rewrite_grader.ipynb") == ATTACKER


@needs_bwrap
def test_other_submissions_are_out_of_sight(sandboxed):
    folder = sandboxed["folder"]
    assert _sha256(folder / "victim.ipynb") == sandboxed["before"]["victim"]
    assert sorted(os.listdir(folder)) == sorted(sandboxed["before"]["files"] + ["grades.csv", "grades.csv.sha256"])


@needs_bwrap
def test_no_network(sandboxed):
    assert not sandboxed["connected"]  # the service on the grader's 127.0.0.1 saw no connection


@needs_bwrap
def test_a_process_in_a_new_session_dies_with_the_notebook(sandboxed):
    assert points(sandboxed["table"], "outlive.ipynb") == ATTACKER
    assert "outlive.ipynb: 2/16 points" in sandboxed["notes"] and "raised an error" not in [
        line for line in sandboxed["notes"].splitlines() if "outlive.ipynb" in line][0]  # both were running
    assert sandboxed["after_run"]["survivors"] == []  # dead when the grader returned
    assert processes_with(sandboxed["marker"]) == []
    folder = sandboxed["folder"]
    assert (folder / "grades.csv").read_bytes() == sandboxed["after_run"]["csv"]  # 2 s later: unchanged
    assert verify_digest(folder / "grades.csv")


@pytest.fixture(scope="module")
def unsandboxed(tmp_path_factory):
    """Without the sandbox: submissions that break their own exports folder, and files that are not
    notebooks, graded by the command line."""
    root = tmp_path_factory.mktemp("unsandboxed")
    folder, outside = root / "submissions", root / "outside"
    folder.mkdir()
    outside.mkdir()
    submission(folder / "honest.ipynb", answers=list(MAX))
    for name in ("exports_to_file", "exports_to_fifo"):
        attacker(folder / f"{name}.ipynb", *attacks(folder, 0, "")[name])
    submission(outside / "someone_else.ipynb", answers=list(MAX))
    os.symlink(outside / "someone_else.ipynb", folder / "link_out.ipynb")
    os.symlink(outside, folder / "linked_folder")
    os.mkfifo(folder / "fifo.ipynb")
    (folder / "garbage.ipynb").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 20)  # not UTF-8
    result = subprocess.run([sys.executable, "-m", "course_utils.grading", str(folder), "--timeout", "120", "--jobs",
                             "2", "--sandbox", "none", "--recursive"], cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    return folder, result


def test_without_the_sandbox_the_run_survives_and_says_so(unsandboxed):
    folder, result = unsandboxed
    assert result.returncode == 0, result.stdout + result.stderr
    rows, graded = read_grades(folder / "grades.csv")
    assert sorted(graded) == ["exports_to_fifo.ipynb", "exports_to_file.ipynb", "fifo.ipynb", "garbage.ipynb",
                              "honest.ipynb", "link_out.ipynb"]  # linked_folder/ not entered
    assert points(graded, "honest.ipynb") == MAX and not graded["honest.ipynb"]["q1"]["flags"]
    assert {row["sandbox"] for row in rows} == {"none"}
    assert result.stdout.count("WARNING: not sandboxed (--sandbox none)") == 2  # at the start and at the end
    assert verify_digest(folder / "grades.csv") and digest_path(folder / "grades.csv").exists()


@pytest.mark.parametrize("name", ["exports_to_file", "exports_to_fifo"])
def test_without_the_sandbox_a_replaced_exports_folder_costs_only_its_own_points(unsandboxed, name):
    graded = read_grades(unsandboxed[0] / "grades.csv")[1]
    assert points(graded, f"{name}.ipynb") == ATTACKER  # exercise 1 was judged before; exercise 4 could not be
    assert graded[f"{name}.ipynb"]["q4"]["status"].startswith(INTERFERED)
    assert "interfered with the grader's requests" in graded[f"{name}.ipynb"]["q1"]["flags"]


@pytest.mark.parametrize("name, why", [
    ("link_out.ipynb", "a symbolic link (to "), ("fifo.ipynb", "a FIFO, not a regular file"),
    ("garbage.ipynb", "UnicodeDecodeError")])
def test_files_that_are_not_notebooks_get_a_row(unsandboxed, name, why):
    row = read_grades(unsandboxed[0] / "grades.csv")[1][name][""]
    assert row["status"].startswith("not graded: not a readable notebook (") and why in row["status"], row["status"]


def test_the_run_goes_on_when_the_grader_fails_and_writes_each_result_as_it_arrives(tmp_path, monkeypatch):
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.ipynb").write_text("{}")
    seen = {}

    def fake(path, submission, *args, **options):
        seen[submission] = (tmp_path / "grades.csv").read_text() if (tmp_path / "grades.csv").exists() else ""
        if submission == "b.ipynb":
            raise RuntimeError("a bug")
        return [dict(submission=submission, chapter=3, exercise="q1", points=2, max_points=2, status="correct",
                     hints="", flags="", feedback="", sandbox="none")], ""

    monkeypatch.setattr(cli, "grade_notebook", fake)
    notes = []
    rows = cli.grade_folder(tmp_path, jobs=1, echo=notes.append, sandbox="none")
    assert [r["submission"] for r in rows] == ["a.ipynb", "b.ipynb", "c.ipynb"]
    assert rows[1]["status"] == "not graded: the grader failed on it (RuntimeError: a bug)"
    assert "a.ipynb" in seen["c.ipynb"] and "b.ipynb" in seen["c.ipynb"]  # written before c ran
    assert "RuntimeError: a bug" in "\n".join(notes)
    assert verify_digest(tmp_path / "grades.csv")


def test_the_digest_shows_a_later_edit_and_a_link_is_replaced_not_followed(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("not the grades")
    os.symlink(target, tmp_path / "grades.csv")
    row = dict(submission="a.ipynb", chapter=3, exercise="q1", points=2, max_points=2, status="correct")
    digest = write_csv([row], tmp_path / "grades.csv")
    assert target.read_text() == "not the grades" and not (tmp_path / "grades.csv").is_symlink()
    assert digest_path(tmp_path / "grades.csv").read_text() == f"{digest}  grades.csv\n"
    assert verify_digest(tmp_path / "grades.csv")
    assert subprocess.run(["sha256sum", "-c", "grades.csv.sha256"], cwd=tmp_path, capture_output=True).returncode == 0
    (tmp_path / "grades.csv").write_text((tmp_path / "grades.csv").read_text().replace(",2,2,", ",9,2,"))
    assert not verify_digest(tmp_path / "grades.csv")
    assert (tmp_path / "grades.csv").read_text().splitlines()[0] == ",".join(COLUMNS)


def test_asking_for_a_sandbox_that_cannot_start(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    sandbox.check_available.cache_clear()
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match="not installed"):
            cli.resolve_sandbox("bwrap")
        assert cli.main([str(tmp_path), "--sandbox", "bwrap"]) == 2
        assert "error: --sandbox bwrap: bubblewrap (bwrap) is not installed" in capsys.readouterr().err
        mode, warning = cli.resolve_sandbox("auto")
        assert mode == "none" and warning.startswith(cli.NOT_SANDBOXED) and "not installed" in warning
        assert cli.main([str(tmp_path)]) == 0 and "WARNING: not sandboxed" in capsys.readouterr().out
    finally:
        sandbox.check_available.cache_clear()
    assert not (tmp_path / "grades.csv").read_text().strip().count("\n")  # header only: no notebooks


def test_the_kernel_gets_only_the_course_variables():
    env = sandbox.kernel_environment({"TF_USE_LEGACY_KERAS": "1", "TFDS_DATA_DIR": "/data", "COURSE_OFFLINE": "1",
                                      "LANG": "C.UTF-8", "AWS_SECRET_ACCESS_KEY": "x", "GITHUB_TOKEN": "y",
                                      "JPY_PARENT_PID": "1234", "PATH": "/home/me/bin"})
    assert {"TF_USE_LEGACY_KERAS", "TFDS_DATA_DIR", "COURSE_OFFLINE", "LANG", "HOME", "PATH"} <= set(env)
    assert not {"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "JPY_PARENT_PID"} & set(env)
    assert env["HOME"] == "/tmp" and "/home/me/bin" not in env["PATH"] and env["PYTHONPATH"] == str(PACKAGE.parent)


def test_the_box_shows_the_package_read_only_and_nothing_of_the_submissions(tmp_path):
    copy = tmp_path / "handout" / "course_utils"
    copy.mkdir(parents=True)
    box = sandbox.Box(tmp_path / "box", read_only=[str(tmp_path / "missing"), str(ROOT / "solutions")], package=copy)
    box.prepare(b"{}", "alice.ipynb")
    args = box.bwrap_args({})
    pairs = {(args[i], args[i + 1]) for i in range(len(args) - 1)}
    for flag in ("--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session", "--clearenv"):
        assert flag in args
    assert ("--ro-bind", str(copy)) in pairs and ("--ro-bind", str(ROOT / "solutions")) in pairs
    assert ("--ro-bind", str(PACKAGE)) not in pairs and ("--bind", str(box.folder)) not in pairs
    assert {("--bind", str(folder)) for folder in (box.work, box.exports, box.conn)} <= pairs
    assert {("--bind", str(box.tmp)), ("--bind", str(box.shm))} <= pairs and ("PYTHONPATH", str(copy.parent)) in pairs
    assert ("--remount-ro", "/dev") in pairs  # bwrap's /dev is a file system of its own (and, run as a user, the sandbox's)
    assert str(tmp_path / "missing") not in args  # only folders that exist, and of the clone only the parts it needs:
    assert not {("--ro-bind", str(ROOT)), ("--bind", str(ROOT)), ("--bind", str(tmp_path))} & pairs
    assert box.folder.is_dir() and not list(box.folder.iterdir())  # the driver mounts its file system there
    spec = box.mount_spec()
    assert Path(spec["notebook"]).read_bytes() == b"{}" and spec["name"] == "alice.ipynb"
    assert spec["size"] == sandbox.DISK_LIMIT and not spec["notebook"].startswith(str(box.folder) + "/")
    assert box.kernel_argv({})[-4:] == [sandbox.PYTHON, "-m", "ipykernel_launcher", "-f"]


def test_launch_sets_the_limits_before_the_command():
    code = ("import resource\nnames = ('AS', 'NPROC', 'FSIZE', 'CORE')\n"
            "print(*[resource.getrlimit(getattr(resource, 'RLIMIT_' + n))[0] for n in names])")
    done = subprocess.run([sys.executable, "-I", "-S", sandbox.__file__, "launch", "--memory", str(6 << 30),
                           "--processes", "500", "--", sys.executable, "-c", code],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == [str(6 << 30), "500", "-1", "0"]  # no limit per file: the sandbox's space has one


@needs_bwrap
def test_check_available_starts_a_sandbox():
    sandbox.check_available.cache_clear()
    assert sandbox.check_available() is None


def test_files_are_read_without_following_links_or_blocking(tmp_path):
    (tmp_path / "a.ipynb").write_text("{}")
    os.symlink(tmp_path / "a.ipynb", tmp_path / "link.ipynb")
    os.mkfifo(tmp_path / "fifo.ipynb")
    (tmp_path / "big.ipynb").write_bytes(b" " * 2000)
    assert read_submission(tmp_path / "a.ipynb") == b"{}" and read_small_file(tmp_path / "a.ipynb") == b"{}"
    for name, why in (("link.ipynb", "symbolic link"), ("fifo.ipynb", "FIFO"), ("missing.ipynb", "cannot be read")):
        with pytest.raises(NotANotebook, match=why):
            read_submission(tmp_path / name)
        assert read_small_file(tmp_path / name) is None
    with pytest.raises(NotANotebook, match="larger than"):
        read_submission(tmp_path / "big.ipynb", limit=1000)
    assert read_small_file(tmp_path) is None and len(read_small_file(tmp_path / "big.ipynb", limit=100)) == 100


def test_find_notebooks_lists_links_and_fifos_but_never_enters_a_linked_folder(tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.ipynb").write_text("{}")
    (tmp_path / "in").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "in" / "linked")
    os.symlink(tmp_path / "outside" / "x.ipynb", tmp_path / "in" / "link.ipynb")
    os.mkfifo(tmp_path / "in" / "fifo.ipynb")
    (tmp_path / "in" / "folder.ipynb").mkdir()
    (tmp_path / "in" / "folder.ipynb" / "y.ipynb").write_text("{}")
    found = [p.relative_to(tmp_path / "in").as_posix() for p in cli.find_notebooks(tmp_path / "in", recursive=True)]
    assert found == ["fifo.ipynb", "folder.ipynb/y.ipynb", "link.ipynb"]
