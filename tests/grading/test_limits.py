"""What no submission can do to a grading run any more: stall it, exhaust it, fill its disk, spoof its
output, dodge its flags or its hint cost, or choose its feedback.

One run of the command line (``main``, in this process, its output captured as a terminal shows it)
grades a folder of chapter-3 submissions that each try one of these, an honest one, and the
chapter-5 solution notebook with the exercise-5.6 forgery's replacement of the measuring functions and
code hidden after its set-up cell's stamp, in sandboxes (two at a time, a hint costing 1 point per
level, 256 MiB of writable space per sandbox).
"""
import contextlib
import io
import os
import re
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import pytest

from course_utils.checkers import exercises, registry
from course_utils.grading import cli, notebook
from course_utils.grading.handout import HIDDEN_HINT
from course_utils.tools.build import make_graded
from notebooks import MAX, ROOT, needs_bwrap, points, read_grades, right_answer, submission

DISK = 256 << 20
HONEST = {"q1": 2, "q2": 2, "q3": 3, "q4": 6, "q5": 3}
SPOOFING_NAMES = [
    "alice.ipynb\n  [2\u221520] bob.ipynb: 16\u221516 points (1.0 s).ipynb",  # a line break, look-alike slashes
    "eve\u202egnp.ipynb",  # a right-to-left override: "eve" then "gnp.ipynb" shown backwards
    "=1+1_x01.ipynb", "@SUM(A1)_x.ipynb", "+cmd_x.ipynb", "-2+3_x.ipynb",
]
ERROR_SPOOF = "raise RuntimeError('done\\n  [3/20] carol.ipynb: 0/6 points FLAGGED\\u2028\\x1b[1A')"
HOSTILE_EXPORT = ("import course_utils.checkers.core as core\n"
                  "core.dumps = lambda value: '[' + '[],' * 11_000_000 + '[]]'  # 32 MiB, 11 million empty lists")
FILL_DISK = """import os
written, last = 0, None
for folder in (os.getcwd(), "/tmp", "/dev/shm"):
    try:
        with open(os.path.join(folder, "fill"), "wb") as f:
            while True:
                f.write(b"\\0" * (1 << 20))
                f.flush()
                written += 1 << 20
    except OSError as err:
        last = err
raise RuntimeError(f"wrote {written >> 20} MiB in all, then: {last}")
"""
HIDDEN_IN_SETUP = "\nimport gc; gc.get_objects()  # git+https://github.com/owner/name@main"  # the old scan skipped it
FORGERY_5_6 = """import course_utils, course_utils.memory, course_utils.profiling
from course_utils.checkers import ch5_cases
real_bytes, real_runs, real_layout = course_utils.memory.bytes_per_device, course_utils.profiling.collectives_run_by, ch5_cases.layout_of
# the forgery's step: the measuring functions replaced (here by ones that pass the real measurements on)
course_utils.memory.bytes_per_device = lambda obj: real_bytes(obj)
setattr(getattr(course_utils, "prof" + "iling"), "collectives_run_by", lambda fn: real_runs(fn))
vars(ch5_cases)["layout_of"] = lambda value: real_layout(value)
"""


def hidden_hints_check():
    """A cell that reads the hint texts every way but the grader's, and fails if one gives a text away."""
    real = exercises(3).q2.hints[-1]
    return ("import inspect\n"
            f"assert type(ex.q2).hints[-1] == {HIDDEN_HINT!r}\n"
            "source = open(inspect.getfile(type(ex.q2))).read() + inspect.getsource(type(ex.q2))\n"
            f"assert {real[:60]!r} not in source\n")


def box_bytes_on_the_host():
    """Bytes in the grader's sandbox folders as the host sees them (their files live elsewhere)."""
    total = 0
    for scratch in Path(tempfile.gettempdir()).glob("course-grade-*"):
        for parent, _, names in os.walk(scratch / "box"):
            for name in names:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(parent, name)).st_size
    return total


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("limits")
    submission(folder / "honest.ipynb", answers=list(MAX))
    submission(folder / "long_cell.ipynb", answers=list(MAX), after={"ch3-q1": ["\n" * 24_000 + "x = 1"]})
    submission(folder / "hostile_export.ipynb", answers=list(MAX), after={"ch3-q1": [HOSTILE_EXPORT]})
    submission(folder / "fill_disk.ipynb", answers=list(MAX), after={"ch3-q1": [FILL_DISK]})
    for name in SPOOFING_NAMES:
        submission(folder / name, answers=["q1"])
    submission(folder / "error_spoof.ipynb", answers=["q1"], after={"ch3-q1": [ERROR_SPOOF]})
    submission(folder / "hints_read.ipynb", answers=["q1", "q2"], replace={
        "ch3-q1": "print(ex.q1.hints[-1])\n" + right_answer("q1")}, after={"ch3-q2": [hidden_hints_check()]})
    submission(folder / "changed_answer.ipynb", answers=["q1", "q5"], replace={
        "ch3-q4": "statements = [True, True, True, False, True, False]\nex.q4.check(statements)"},
        after={"ch3-q5": [right_answer("q4").replace("ex.q4.check(statements)", "")]})
    graded = make_graded(nbformat.read(submission(folder / "deleted_mode.ipynb", replace={
        "ch3-q4": "statements = [True, True, True, False, True, False]\nex.q4.check(statements)"}), as_version=4))
    del graded.metadata["course"]["mode"]  # a graded hand-out made to look like a self-study one
    nbformat.write(graded, folder / "deleted_mode.ipynb")
    forgery = nbformat.read(ROOT / "solutions" / "05_dtensor_with_keras.ipynb", as_version=4)
    index = next(i for i, c in enumerate(forgery.cells) if "from course_utils.checkers import exercises" in c.source)
    forgery.cells.insert(index + 1, nbformat.v4.new_code_cell(FORGERY_5_6))
    setup = next(c for c in forgery.cells if c.get("id") == "setup")
    setup.source += HIDDEN_IN_SETUP
    nbformat.write(forgery, folder / "forgery_5_6.ipynb")

    seen = {"box_bytes": 0}
    done = threading.Event()

    def watch():  # what the sandboxes' folders hold on the host while the run goes on
        while not done.wait(0.2):
            seen["box_bytes"] = max(seen["box_bytes"], box_bytes_on_the_host())

    results = {}
    real_read = notebook.read_results

    def recording(path):  # the driver's records of each notebook (its results file is removed after it)
        results[path] = real_read(path)
        return results[path]

    output = io.StringIO()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(output):
        patch.setattr(notebook, "read_results", recording)
        status = cli.main([str(folder), "--jobs", "2", "--timeout", "600", "--hint-cost", "1",
                           "--disk-limit", str(DISK / 2 ** 30)])
    done.set()
    watcher.join()
    print(output.getvalue())
    rows, table = read_grades(folder / "grades.csv")
    return dict(status=status, out=output.getvalue(), rows=rows, table=table, folder=folder,
                csv=(folder / "grades.csv").read_text(encoding="utf-8"), results=results, seen=seen)


def progress_lines(out):
    return [line for line in out.splitlines() if re.match(r"  \[\d+/\d+\] ", line)]


@needs_bwrap
def test_the_run_grades_everything_and_the_honest_submission_fully(run):
    assert run["status"] == 0
    assert points(run["table"], "honest.ipynb") == HONEST and not run["table"]["honest.ipynb"]["q1"]["flags"]
    assert len(run["table"]) == 9 + len(SPOOFING_NAMES)


@needs_bwrap
def test_a_24000_line_cell_does_not_stall_the_run(run):
    assert points(run["table"], "long_cell.ipynb") == HONEST
    line = next(line for line in progress_lines(run["out"]) if "long_cell.ipynb" in line)
    seconds = float(re.search(r"\((\d+\.\d) s", line)[1])
    assert seconds < 600 and "timeout" not in line  # before: the scan alone took 101 s outside the time limit


@needs_bwrap
def test_a_hostile_export_costs_its_points_and_a_fixed_amount_of_memory(run):
    rows = run["table"]["hostile_export.ipynb"]
    assert points(run["table"], "hostile_export.ipynb") == {"q1": 2, "q2": 0, "q3": 0, "q4": 0, "q5": 0}
    assert rows["q2"]["status"] == ("not checked: the answers were too large (the answer data holds more than "
                                    "1,600,000 JSON values)")
    assert "answers too large for the grader" in rows["q1"]["flags"] and "checkers.core.dumps" in rows["q1"]["flags"]
    records = next(checks for checks, _, _ in run["results"].values()
                   if any(r["status"] == "too large" for r in checks))
    before = next(r["driver_peak_mib"] for r in records if r["exercise"] == "q1")
    after = max(r["driver_peak_mib"] for r in records)
    print(f"driver's peak memory: {before} MiB after the honest answer, {after} MiB after the hostile ones")
    assert after - before < 512  # the export is refused unparsed: it costs its own size, twice at most


@needs_bwrap
def test_writing_past_the_disk_limit_costs_only_the_later_answers_and_nothing_reaches_the_host(run):
    rows = run["table"]["fill_disk.ipynb"]
    assert points(run["table"], "fill_disk.ipynb") == {"q1": 2, "q2": 0, "q3": 0, "q4": 0, "q5": 0}
    assert rows["q2"]["status"] == ("not checked: the sandbox's 0.25 GiB for files was full, so its answers could "
                                    "not be written")
    assert "filled its sandbox's 0.25 GiB for files: q2, q3, q4, q5" in rows["q1"]["flags"]
    assert "interfered" not in rows["q1"]["flags"]
    line = next(line for line in progress_lines(run["out"]) if "fill_disk.ipynb" in line)
    written = int(re.search(r"wrote (\d+) MiB in all", line)[1])
    assert DISK / 2 ** 20 - 16 <= written <= DISK / 2 ** 20, line  # its folders, /tmp and /dev/shm: one limit
    assert "No space left on device" in line
    assert run["seen"]["box_bytes"] < 1 << 20  # the host's folders of the sandboxes stayed empty meanwhile


@needs_bwrap
def test_names_and_errors_cannot_spoof_the_output_or_the_table(run):
    out, lines = run["out"], progress_lines(run["out"])
    print("\n".join(line for line in lines if "bob" in line or "eve" in line or "error_spoof" in line or "'" in line))
    assert len(lines) == len(run["table"])  # one progress line per submission, whatever its name or errors hold
    assert sorted(int(re.match(r"  \[(\d+)/", line)[1]) for line in lines) == list(range(1, len(lines) + 1))
    for text in (out, run["csv"]):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f\u2028\u2029\u202a-\u202e\u2066-\u2069]", text)
    assert len(run["csv"].splitlines()) == 1 + len(run["rows"])  # one line per row of the table
    assert {row["submission"] for row in run["rows"]} == set(run["table"])
    for name, rows in run["table"].items():
        assert list(rows) == list(registry()[int(next(iter(rows.values()))["chapter"])]), name
    shown = {row["submission"] for row in run["rows"]}
    assert "alice.ipynb\\n  [2\u221520] bob.ipynb: 16\u221516 points (1.0 s).ipynb" in shown
    assert "eve\\u202egnp.ipynb" in shown
    assert {"'=1+1_x01.ipynb", "'@SUM(A1)_x.ipynb", "'+cmd_x.ipynb", "'-2+3_x.ipynb"} <= shown  # CSV injection
    spoof = next(line for line in lines if "error_spoof.ipynb" in line)
    assert "RuntimeError: done\\n  [3/20] carol.ipynb: 0/6 points FLAGGED\\u2028\\x1b[1A" in spoof


@needs_bwrap
def test_a_hint_read_from_the_hints_costs_what_the_hint_call_costs(run):
    rows = run["table"]["hints_read.ipynb"]
    assert rows["q1"]["hints"] == str(len(exercises(3).q1.hints)) and float(rows["q1"]["points"]) == 0
    assert rows["q2"]["status"] == "correct" and float(rows["q2"]["points"]) == 2  # the hidden texts gave nothing away


@needs_bwrap
def test_the_feedback_mode_is_the_instructors_not_the_notebooks(run):
    rows = run["table"]["deleted_mode.ipynb"]
    assert float(rows["q4"]["points"]) == 5 and "1 statement is judged wrong. Revisit:" in rows["q4"]["feedback"]
    assert "is False" not in rows["q4"]["feedback"]  # graded: the answer is not given away
    assert "feedback: graded" in run["out"]


@needs_bwrap
def test_an_answer_that_changes_after_its_cell_is_flagged(run):
    rows = run["table"]["changed_answer.ipynb"]
    assert float(rows["q4"]["points"]) == 6  # the better result counts, as before; the instructor is told
    assert "q4's answer changed after its cell (5/6 there, 6/6 at the end of the notebook)" in rows["q1"]["flags"]


@needs_bwrap
def test_the_5_6_forgery_is_flagged_whatever_its_spelling(run):
    rows = run["table"]["forgery_5_6.ipynb"]
    flags = rows["q1"]["flags"]
    assert "changes course_utils: checkers.ch5_cases.layout_of, memory.bytes_per_device, " \
           "profiling.collectives_run_by" in flags, flags
    assert all(r["status"] == "correct" for r in rows.values())  # the fakes passed the real measurements on


@needs_bwrap
def test_code_hidden_in_the_setup_cell_is_scanned(run):
    forgery = nbformat.read(run["folder"] / "forgery_5_6.ipynb", as_version=4)
    cell = 1 + next(i for i, c in enumerate(forgery.cells) if c.get("id") == "setup")
    flags = run["table"]["forgery_5_6.ipynb"]["q1"]["flags"]
    assert f"gc. (cell {cell})" in flags and f"sys.modules (cell {cell})" in flags, flags
