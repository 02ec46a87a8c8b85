"""The grader survives hostile submissions and writes the score table.

The small notebooks here call the chapter 3 checkers (pure Python, no TensorFlow), so that
each kernel starts in about a second. The last test grades the real exercise and solution
notebooks.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from course_utils import checks, grade

ROOT = Path(__file__).resolve().parent.parent
IMPORT_CHECKS = """
from course_utils.checks import exercises
ex = exercises(3)
"""
RIGHT = {
    "q1": f"ex.q1.check({json.dumps(json.dumps(checks.CH3_MWMS))})",
    "q2": f"ex.q2.check({json.dumps(json.dumps(checks.CH3_PS))})",
    "q3": f"ex.q3.check({checks.CH3_FAULTS!r})",
    "q4": "ex.q4.check([False, True, True, False, True, False])",
}
MAX = checks.registry()[3]
TIME_LIMIT = 30  # seconds per notebook in the hostile run: the endless loop costs this much


def write_notebook(path, cells, chapter=3):
    nb = nbformat.v4.new_notebook()
    if chapter is not None:
        nb.metadata["course"] = {"chapter": chapter, "keras": "tf_keras"}
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(nb, path)


def read_grades(folder):
    with open(folder / "grades.csv", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == ["submission", "chapter", "exercise", "points", "max_points", "status"]
        rows = list(reader)
    table = {}
    for row in rows:
        table.setdefault(row["submission"], {})[row["exercise"]] = (int(row["points"]), int(row["max_points"]),
                                                                    row["status"])
    return rows, table


def run_grader(folder, *options, env=None):
    return subprocess.run([sys.executable, "-m", "course_utils.grade", str(folder), *options], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A folder of small hostile submissions, graded once by the command line."""
    folder = tmp_path_factory.mktemp("submissions")
    write_notebook(folder / "alice renamed.ipynb", [IMPORT_CHECKS, *RIGHT.values()])
    write_notebook(folder / "syntax.ipynb", [
        IMPORT_CHECKS, RIGHT["q1"], "def broken(:\n    pass", RIGHT["q2"],
        "ex.q3.check({'stop_signal': 'SIGTERM', 'restores': 'B', 'peer_killed': 'B'})",
        "# ex.q4.check([False, True, True, False, True, False])  (commented out)"])
    write_notebook(folder / "exception.ipynb", [
        IMPORT_CHECKS, "tf_config = undefined_name\nex.q1.check(tf_config)", RIGHT["q2"], "raise RuntimeError('boom')",
        RIGHT["q4"]])
    write_notebook(folder / "kernel_dies.ipynb", [IMPORT_CHECKS, RIGHT["q1"], "import os\nos._exit(1)", RIGHT["q2"]])
    # Reordered: q3's check runs before its answer exists; q1 is checked right, then wrong (the last counts).
    write_notebook(folder / "reordered.ipynb", [
        IMPORT_CHECKS, RIGHT["q4"], "ex.q3.check(answers)", f"answers = {checks.CH3_FAULTS!r}", RIGHT["q1"],
        "ex.q1.check('{}')", "ex.q2.check(None)"])
    write_notebook(folder / "environment.ipynb", [
        IMPORT_CHECKS,
        "import os\nassert os.environ.get('TFDS_DATA_DIR') == '/data/from/the/grader', os.environ.get('TFDS_DATA_DIR')\n"
        "assert os.environ.get('COURSE_OFFLINE') == '1'\n" + RIGHT["q4"]])
    write_notebook(folder / "no_metadata.ipynb", [IMPORT_CHECKS, RIGHT["q4"]], chapter=None)
    write_notebook(folder / "no_metadata_no_checks.ipynb", ["print('hello')"], chapter=None)
    write_notebook(folder / "chapter7.ipynb", ["print('not an exercise notebook')"], chapter=7)
    (folder / "not_a_notebook.ipynb").write_text("This is my essay, not a notebook.")
    (folder / "corrupt.ipynb").write_text('{"cells": [{"cell_type": "code", "source": "1 +')
    (folder / "notes.txt").write_text("ignored: only .ipynb files are graded")
    # An endless loop after q1, in a kernel that has started a child process of its own.
    write_notebook(folder / "endless_loop.ipynb", [
        IMPORT_CHECKS, RIGHT["q1"],
        "import json, os, subprocess\n"
        "child = subprocess.Popen(['sleep', '600'])\n"
        f"open({str(folder.parent / (folder.name + '-pids.json'))!r}, 'w').write(json.dumps([os.getpid(), child.pid]))\n"
        "while True:\n    pass",
        RIGHT["q2"]])
    (folder / "late").mkdir()
    write_notebook(folder / "late" / "bob.ipynb", [IMPORT_CHECKS, RIGHT["q1"]])
    env = dict(os.environ, TFDS_DATA_DIR="/data/from/the/grader")
    env.pop("COURSE_OFFLINE", None)  # the grader sets it for the kernels
    start = time.monotonic()
    result = run_grader(folder, "--timeout", str(TIME_LIMIT), "--jobs", "2", env=env)
    return folder, result, time.monotonic() - start


def test_grader_exits_zero_and_writes_one_row_per_exercise(hostile):
    folder, result, seconds = hostile
    print(f"graded the hostile folder in {seconds:.1f} s")
    assert result.returncode == 0, result.stdout + result.stderr
    rows, table = read_grades(folder)
    graded = ["alice renamed.ipynb", "endless_loop.ipynb", "environment.ipynb", "exception.ipynb",
              "kernel_dies.ipynb", "no_metadata.ipynb", "reordered.ipynb", "syntax.ipynb"]
    not_graded = ["chapter7.ipynb", "corrupt.ipynb", "no_metadata_no_checks.ipynb", "not_a_notebook.ipynb"]
    assert sorted(table) == sorted(graded + not_graded)  # notes.txt and late/ are not graded
    for name in graded:
        assert list(table[name]) == list(MAX), name
        assert all(row[1] == MAX[q] for q, row in table[name].items())
    assert len(rows) == 4 * len(graded) + len(not_graded)


def test_right_answers_score_full_marks_even_renamed(hostile):
    _, table = read_grades(hostile[0])
    assert table["alice renamed.ipynb"] == {q: (m, m, "correct") for q, m in MAX.items()}


def test_syntax_error_and_commented_check(hostile):
    _, table = read_grades(hostile[0])
    rows = table["syntax.ipynb"]
    assert rows["q1"] == (2, 2, "correct") and rows["q2"] == (2, 2, "correct")
    assert rows["q3"] == (2, 3, "partial")
    assert rows["q4"] == (0, 6, "not checked: no cell calls ex.q4.check(...)")


def test_exception_in_a_cell(hostile):
    _, table = read_grades(hostile[0])
    rows = table["exception.ipynb"]
    assert rows["q1"] == (0, 2, "not checked: its cell raised NameError: name 'undefined_name' is not defined")
    assert rows["q2"][2] == "correct" and rows["q4"][2] == "correct"  # later cells still ran
    assert rows["q3"] == (0, 3, "not checked: no cell calls ex.q3.check(...)")


def test_kernel_that_dies(hostile):
    _, table = read_grades(hostile[0])
    rows = table["kernel_dies.ipynb"]
    assert rows["q1"] == (2, 2, "correct")
    assert rows["q2"] == (0, 2, "not checked: the kernel died before its check ran")


def test_reordered_cells_and_last_record_wins(hostile):
    _, table = read_grades(hostile[0])
    rows = table["reordered.ipynb"]
    assert rows["q4"] == (6, 6, "correct")
    assert rows["q3"] == (0, 3, "not checked: its cell raised NameError: name 'answers' is not defined")
    assert rows["q1"] == (0, 2, "incorrect")  # right first, then wrong: the last check counts
    assert rows["q2"] == (0, 2, "unanswered")


def test_kernels_inherit_the_data_folder_and_offline_mode(hostile):
    _, table = read_grades(hostile[0])
    assert table["environment.ipynb"]["q4"] == (6, 6, "correct")


def test_files_that_cannot_be_graded(hostile):
    _, table = read_grades(hostile[0])
    assert table["no_metadata.ipynb"]["q4"] == (6, 6, "correct")  # chapter taken from its checks
    assert table["no_metadata_no_checks.ipynb"][""][2] == ("not graded: the notebook has no course.chapter "
                                                          "metadata and no check ran")
    assert table["chapter7.ipynb"][""][2] == "not graded: chapter 7 has no graded exercises"
    for name in ("not_a_notebook.ipynb", "corrupt.ipynb"):
        points, max_points, status = table[name][""]
        assert (points, max_points) == (0, 0) and status.startswith("not graded: not a readable notebook"), status


def test_summary_per_submission_and_per_exercise(hostile):
    out = hostile[1].stdout
    assert "Per submission" in out and "Per exercise" in out and "Wrote " in out
    assert "alice renamed.ipynb" in out and "13/13" in out
    assert "3.q4" in out
    assert "not a readable notebook" in out


def test_time_limit_kills_the_notebook_and_its_kernel(hostile):
    folder, result, _ = hostile
    _, table = read_grades(folder)
    rows = table["endless_loop.ipynb"]
    assert rows["q1"] == (2, 2, "correct")  # checked before the loop: kept
    assert rows["q2"] == (0, 2, f"not checked: time limit ({TIME_LIMIT} s) reached before its check ran")
    assert "endless_loop.ipynb: 2/13 points" in result.stdout and "timeout" in result.stdout
    for pid in json.loads((folder.parent / f"{folder.name}-pids.json").read_text()):
        status = Path(f"/proc/{pid}/status")  # the kernel and the process it started are gone
        assert not status.exists() or "\nState:\tZ" in status.read_text(), pid


def test_recursive_grades_subfolders(tmp_path):
    (tmp_path / "bob").mkdir()
    (tmp_path / ".ipynb_checkpoints").mkdir()
    write_notebook(tmp_path / "bob" / "03.ipynb", [IMPORT_CHECKS, RIGHT["q4"]])
    write_notebook(tmp_path / ".ipynb_checkpoints" / "03-checkpoint.ipynb", [IMPORT_CHECKS, RIGHT["q4"]])
    assert grade.find_notebooks(tmp_path) == []
    rows = grade.grade_folder(tmp_path, timeout=120, recursive=True, echo=lambda *a: None)
    assert {(r["submission"], r["exercise"], r["points"]) for r in rows if r["points"]} == {("bob/03.ipynb", "q4", 6)}


def test_bad_usage_exits_non_zero(tmp_path, capsys):
    assert grade.main([str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert grade.main([str(tmp_path), "--timeout", "0"]) == 2
    assert grade.main([str(tmp_path), "--output", str(tmp_path / "missing" / "grades.csv")]) == 2
    assert "cannot write the table" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        grade.main([])
    assert exit_info.value.code == 2


def test_empty_folder_writes_header_only(tmp_path, capsys):
    assert grade.main([str(tmp_path)]) == 0
    assert (tmp_path / "grades.csv").read_text().strip() == ",".join(grade.COLUMNS)
    assert "No notebooks found" in capsys.readouterr().out
    assert grade.main([str(tmp_path), "--output", str(tmp_path / "elsewhere.csv")]) == 0
    assert (tmp_path / "elsewhere.csv").read_text().strip() == ",".join(grade.COLUMNS)


def test_untouched_exercises_score_zero_and_solutions_full_marks(tmp_path):
    """Executes the real notebooks: the twelve of them in one grader run, two at a time."""
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        shutil.copy(path, tmp_path / f"solution_{path.name}")
    for path in sorted((ROOT / "exercises").glob("*.ipynb")):
        shutil.copy(path, tmp_path / f"exercise_{path.name}")
    assert len(list(tmp_path.glob("*.ipynb"))) == 12
    start = time.monotonic()
    rows = grade.grade_folder(tmp_path, timeout=300, jobs=2, echo=print)
    print(f"graded 12 real notebooks in {time.monotonic() - start:.1f} s")
    registry = checks.registry()
    for submission in sorted({r["submission"] for r in rows}):
        mine = [r for r in rows if r["submission"] == submission]
        chapter = mine[0]["chapter"]
        assert [r["exercise"] for r in mine] == list(registry[chapter]), submission
        if submission.startswith("solution_"):
            assert all(r["status"] == "correct" and r["points"] == r["max_points"] for r in mine), mine
        else:
            assert all(r["status"] == "unanswered" and r["points"] == 0 for r in mine), mine
