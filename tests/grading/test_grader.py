"""The grader survives hostile submissions, says why an exercise was not checked, and writes the table.

Most submissions are chapter 3 notebooks (pure-Python checkers, quick kernels); one test per chapter
grades its real exercise and solution notebooks.
"""
import secrets
import shutil
import time

import nbformat
import pytest

from course_utils.tools.build import make_graded
from course_utils.checkers import registry
from course_utils.grading import cli as grade
from notebooks import (BWRAP_WORKS, EXERCISE, MAX, ROOT, needs_bwrap, points, processes_with, read_grades, right_answer,
                       submission)

ALL_RIGHT = list(MAX)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A folder of hostile submissions, graded once by the command line."""
    folder = tmp_path_factory.mktemp("submissions")
    submission(folder / "alice renamed.ipynb", answers=ALL_RIGHT)
    submission(folder / "syntax.ipynb", answers=["q1", "q2"], replace={
        "ch3-q3": "answers = {'stop_signal': 'SIGTERM', 'restores': 'B', 'peer_killed': 'B'}\ndef broken(:\n    pass"})
    submission(folder / "exception.ipynb", answers=["q2", "q4"], replace={
        "ch3-q1": "tf_config = undefined_name\nex.q1.check(tf_config)"}, after={"ch3-q2": ["raise RuntimeError('boom')"]})
    submission(folder / "kernel_dies.ipynb", answers=["q1", "q2"], after={"ch3-q1": ["import os\nos._exit(1)"]})
    submission(folder / "answer_in_a_later_cell.ipynb", answers=["q4"], replace={"ch3-q3": "ex.q3.check(answers)"},
               after={"ch3-q4": [right_answer("q3")]})
    submission(folder / "environment.ipynb", replace={"ch3-q4": (
        "import os\nassert os.environ['TFDS_DATA_DIR'] == '/data/from/the/grader'\n"
        "assert os.environ['COURSE_OFFLINE'] == '1'\n" + right_answer("q4"))})
    submission(folder / "no_metadata.ipynb", answers=["q4"], metadata={})
    submission(folder / "hinted.ipynb", answers=["q1"], replace={"ch3-q2": "ex.q2.hint(2)\n" + right_answer("q2")})
    submission(folder / "escape_codes.ipynb", answers=["q1"], replace={
        "ch3-q4": "raise RuntimeError('\\x1b[2K\\r\\x1b[1A  [1/3] someone_else.ipynb: 0/16 points')"})
    nb = nbformat.v4.new_notebook(metadata={"course": {}})
    nb.cells = [nbformat.v4.new_code_cell("print('hello')")]
    nbformat.write(nb, folder / "no_metadata_no_exercises.ipynb")
    nb.metadata["course"] = {"chapter": 0, "keras": "keras3"}  # the welcome chapter has no exercises
    nbformat.write(nb, folder / "chapter0.ipynb")
    (folder / "not_a_notebook.ipynb").write_text("This is my essay, not a notebook.")
    (folder / "corrupt.ipynb").write_text('{"cells": [{"cell_type": "code", "source": "1 +')
    (folder / "notes.txt").write_text("ignored: only .ipynb files are graded")
    (folder / "late").mkdir()
    submission(folder / "late" / "bob.ipynb", answers=["q1"])
    import os
    import subprocess
    import sys

    env = dict(os.environ, TFDS_DATA_DIR="/data/from/the/grader")
    env.pop("COURSE_OFFLINE", None)  # the grader sets it for the kernels
    result = subprocess.run([sys.executable, "-m", "course_utils.grading", str(folder), "--timeout", "240", "--jobs", "2"],
                            cwd=ROOT, capture_output=True, text=True, env=env, timeout=900)
    return folder, result


def table(hostile):
    return read_grades(hostile[0] / "grades.csv")[1]


def test_grader_exits_zero_and_writes_one_row_per_exercise(hostile):
    folder, result = hostile
    assert result.returncode == 0, result.stdout + result.stderr
    rows, graded = read_grades(folder / "grades.csv")
    assert list(rows[0]) == grade.COLUMNS
    not_graded = ["chapter0.ipynb", "corrupt.ipynb", "no_metadata_no_exercises.ipynb", "not_a_notebook.ipynb"]
    assert len(graded) == 13 and "late/bob.ipynb" not in graded  # notes.txt and late/ are not graded
    for name, exercises in graded.items():
        if name not in not_graded:
            assert {q: int(r["max_points"]) for q, r in exercises.items()} == MAX, name


def test_right_answers_score_full_marks_even_renamed(hostile):
    assert points(table(hostile), "alice renamed.ipynb") == MAX
    assert all(r["status"] == "correct" and r["feedback"] for r in table(hostile)["alice renamed.ipynb"].values())


def test_a_syntax_error_costs_only_its_own_exercise(hostile):
    rows = table(hostile)["syntax.ipynb"]
    assert points(table(hostile), "syntax.ipynb") == {"q1": 2, "q2": 2, "q3": 0, "q4": 0, "q5": 0}
    assert rows["q3"]["status"].startswith("not checked: its cell raised SyntaxError: invalid syntax")
    assert rows["q4"]["status"] == "unanswered"


def test_an_exception_in_a_cell(hostile):
    rows = table(hostile)["exception.ipynb"]
    assert rows["q1"]["status"] == "not checked: its cell raised NameError: name 'undefined_name' is not defined"
    assert rows["q2"]["status"] == "correct" and rows["q4"]["status"] == "correct"  # later cells still ran


def test_a_kernel_that_dies(hostile):
    rows = table(hostile)["kernel_dies.ipynb"]
    assert rows["q1"]["status"] == "correct"
    assert rows["q2"]["status"] == "not checked: the kernel died before its check ran"


def test_an_answer_defined_in_a_later_cell_counts(hostile):
    assert points(table(hostile), "answer_in_a_later_cell.ipynb") == {"q1": 0, "q2": 0, "q3": 3, "q4": 6, "q5": 0}


def test_kernels_inherit_the_data_folder_and_offline_mode(hostile):
    assert table(hostile)["environment.ipynb"]["q4"]["status"] == "correct"


def test_terminal_escape_codes_of_a_notebook_reach_neither_the_output_nor_the_table(hostile):
    folder, result = hostile
    assert "\x1b" not in result.stdout and "\r" not in result.stdout
    rows = table(hostile)["escape_codes.ipynb"]
    assert rows["q4"]["status"].startswith("not checked: its cell raised RuntimeError: ?[2K??[1A"), rows["q4"]
    assert not any("\x1b" in value for row in rows.values() for value in row.values())


def test_hints_are_counted(hostile):
    rows = table(hostile)["hinted.ipynb"]
    assert rows["q2"]["hints"] == "2" and rows["q1"]["hints"] == ""
    assert rows["q2"]["status"] == "correct"


def test_files_that_cannot_be_graded(hostile):
    graded = table(hostile)
    assert points(graded, "no_metadata.ipynb")["q4"] == 6  # the chapter is read from its cells
    assert "has no course.chapter metadata, but its cells are chapter 3's" in graded["no_metadata.ipynb"]["q4"]["flags"]
    assert graded["no_metadata_no_exercises.ipynb"][""]["status"].startswith("not graded: the notebook has no")
    assert graded["chapter0.ipynb"][""]["status"] == "not graded: chapter 0 has no graded exercises"
    for name in ("not_a_notebook.ipynb", "corrupt.ipynb"):
        assert graded[name][""]["status"].startswith("not graded: not a readable notebook")


def test_summary_per_submission_and_per_exercise(hostile):
    out = hostile[1].stdout
    assert "Per submission" in out and "Per exercise" in out and "Wrote " in out
    full = sum(MAX.values())
    assert "alice renamed.ipynb" in out and f"{full}/{full}" in out and "3.q4" in out
    assert "not a readable notebook" in out


@pytest.mark.parametrize("sandbox", [pytest.param("bwrap", marks=needs_bwrap), "none"])
def test_time_limit_kills_the_notebook_and_its_kernel(tmp_path, sandbox):
    marker = f"sleeper-{secrets.token_hex(6)}"  # in the command line of the process the notebook starts
    submission(tmp_path / "endless_loop.ipynb", answers=["q1"], after={"ch3-q1": [
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', {marker!r}])\n"
        "while True:  # endless, without taking a core from the other tests\n    time.sleep(0.1)"]})
    rows, note = grade.grade_notebook(tmp_path / "endless_loop.ipynb", "endless_loop.ipynb", timeout=20,
                                      sandbox=sandbox)
    assert "timeout" in note
    statuses = {r["exercise"]: (r["points"], r["status"]) for r in rows}
    assert statuses["q1"] == (2, "correct")  # checked before the loop: kept
    assert statuses["q2"] == (0, "not checked: time limit (20 s) reached before its check ran")
    assert {r["sandbox"] for r in rows} == {sandbox}
    assert processes_with(marker) == []  # the process the notebook started is gone (its kernel too)


def test_graded_handouts_record_feedback_without_answers_and_hints_can_cost(tmp_path):
    folder = tmp_path / "graded"
    folder.mkdir()
    path = submission(folder / "carol.ipynb", replace={
        "ch3-q4": "statements = [True, True, True, False, True, False]\nex.q4.check(statements)",
        "ch3-q1": "ex.q1.hint()\n" + right_answer("q1")})
    nbformat.write(make_graded(nbformat.read(path, as_version=4)), path)
    rows = {r["exercise"]: r for r in grade.grade_folder(folder, timeout=240, echo=print, hint_cost=0.5)}
    assert rows["q4"]["points"] == 5 and "1 statement is judged wrong. Revisit:" in rows["q4"]["feedback"]
    assert "is False" not in rows["q4"]["feedback"]  # graded mode: the answer is not given away
    assert rows["q1"]["points"] == 1.5 and rows["q1"]["hints"] == 1  # 2 points minus 0.5 for one hint


def test_chapter_option_overrides_the_notebook(tmp_path):
    submission(tmp_path / "a.ipynb", answers=ALL_RIGHT, metadata={"chapter": 1, "keras": "keras3"})
    rows = grade.grade_folder(tmp_path, timeout=240, chapter=3, echo=print)
    assert sum(r["points"] for r in rows) == sum(MAX.values()) and "metadata says chapter 1" in rows[0]["flags"]


def test_recursive_grades_subfolders(tmp_path):
    (tmp_path / "bob").mkdir()
    (tmp_path / ".ipynb_checkpoints").mkdir()
    submission(tmp_path / "bob" / "03.ipynb", answers=["q4"])
    submission(tmp_path / ".ipynb_checkpoints" / "03-checkpoint.ipynb", answers=["q4"])
    assert grade.find_notebooks(tmp_path) == []
    assert grade.find_notebooks(tmp_path, recursive=True) == [tmp_path / "bob" / "03.ipynb"]


def test_bad_usage_exits_non_zero(tmp_path, capsys):
    assert grade.main([str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert grade.main([str(tmp_path), "--timeout", "0"]) == 2
    assert grade.main([str(tmp_path), "--chapter", "10"]) == 2
    assert "graded exercises for chapters" in capsys.readouterr().err
    assert grade.main([str(tmp_path), "--output", str(tmp_path / "missing" / "grades.csv")]) == 2
    assert "cannot write the table" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        grade.main([])
    assert exit_info.value.code == 2


def test_empty_folder_writes_header_only(tmp_path, capsys):
    assert grade.main([str(tmp_path)]) == 0
    assert (tmp_path / "grades.csv").read_text().strip() == ",".join(grade.COLUMNS)
    assert "No notebooks found" in capsys.readouterr().out


@pytest.mark.parametrize("chapter", sorted(registry()))  # [N]: `python3 course.py test --chapter N` runs one
def test_untouched_exercises_score_zero_and_solutions_full_marks(tmp_path, chapter):
    """Runs the real solution and exercise notebooks of a chapter side by side, each in its sandbox where bubblewrap
    works (on CI it does); every solution cell must run without error."""
    for folder, prefix in (("solutions", "solution_"), ("exercises", "exercise_")):
        for path in sorted((ROOT / folder).glob(f"{chapter:02d}_*.ipynb")):
            shutil.copy(path, tmp_path / f"{prefix}{path.name}")
    start = time.monotonic()
    notes = []
    rows = grade.grade_folder(tmp_path, timeout=300, jobs=2, echo=notes.append)
    print("\n".join(notes))
    # The solutions run here in full (their teaching asserts too), so nbval need not run them again.
    assert not [n for n in notes if "solution_" in n and "raised an error" in n], notes
    print(f"graded {len(list(tmp_path.glob('*.ipynb')))} real notebooks in {time.monotonic() - start:.1f} s")
    assert {r["sandbox"] for r in rows} == {"bwrap" if BWRAP_WORKS else "none"} and {r["chapter"] for r in rows} == {chapter}
    for submission_name in sorted({r["submission"] for r in rows}):
        mine = [r for r in rows if r["submission"] == submission_name]
        assert [r["exercise"] for r in mine] == list(registry()[mine[0]["chapter"]]), submission_name
        assert not mine[0]["flags"], (submission_name, mine[0]["flags"])
        if submission_name.startswith("solution_"):
            assert all(r["status"] == "correct" and r["points"] == r["max_points"] for r in mine), mine
        else:
            # 0 everywhere; "incorrect" rather than "unanswered" where the hand-out is code to repair (3.q5)
            assert all(r["points"] == 0 and r["status"] in ("unanswered", "incorrect") for r in mine), mine
            assert [r["exercise"] for r in mine if r["status"] == "incorrect"] in ([], ["q5"]), mine
    assert EXERCISE.exists()


def test_the_note_names_cells_that_raised(tmp_path):
    submission(tmp_path / "raises.ipynb", answers=["q1"], after={"ch3-q1": ["raise ValueError('boom')"]})
    rows, note = grade.grade_notebook(tmp_path / "raises.ipynb", "raises.ipynb", timeout=120)
    assert "1 cell(s) raised an error" in note and "ValueError: boom" in note, note
    assert {r["exercise"]: r["points"] for r in rows}["q1"] == 2  # the error does not stop later checks
