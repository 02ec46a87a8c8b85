"""The grader's parts on their own: signed records, reading a submission, the summary."""
import hmac

import nbformat
import pytest

from course_utils.grading import records
from course_utils.grading.report import COLUMNS, summary, write_csv
from course_utils.grading.submission import (NotANotebook, identify_chapter, read_notebook, saved_hint_levels,
                                             suspicious_code)
from course_utils.notebook_setup import setup_source

KEY = b"k" * 32
RECORD = dict(seq=3, exercise="q2", at="after", points=1, max_points=2, status="partial",
              feedback="  ✓ a | b\n  ✗ c", extra="")


def test_hmac_is_the_standard_one():
    for key in (b"", b"short", b"x" * 64, b"y" * 100):
        assert records.hmac_sha256(key, b"data") == hmac.new(key, b"data", "sha256").hexdigest()


def test_records_round_trip_and_reject_any_change():
    line = records.encode(KEY, RECORD)
    assert records.decode(KEY, line) == RECORD
    assert records.decode(b"another key", line) is None
    assert records.decode(KEY, line.replace("|1|2|", "|2|2|")) is None  # points changed
    assert records.decode(KEY, "1|q1|after|2|2|correct|||" + "0" * 64) is None
    assert records.decode(KEY, "not a record") is None


def test_check_tokens_differ_per_request():
    tokens = {records.check_token(KEY, seq, q, at) for seq in (1, 2) for q in ("q1", "q2") for at in ("after", "end")}
    assert len(tokens) == 8


def notebook(chapter=3, ids=(), sources=()):
    nb = nbformat.v4.new_notebook(metadata={"course": {"chapter": chapter}} if chapter is not None else {})
    for cell_id in ids:
        cell = nbformat.v4.new_code_cell("x = 1")
        cell.id = cell_id
        nb.cells.append(cell)
    nb.cells += [nbformat.v4.new_code_cell(source) for source in sources]
    return nb


ANSWERS = {1: {"ch1-q1", "ch1-q2"}, 3: {"ch3-q1", "ch3-q2"}}


def test_the_chapter_comes_from_metadata_and_cells():
    assert identify_chapter(notebook(3, ["ch3-q1"]), ANSWERS) == (3, "")
    assert identify_chapter(notebook(1, ["ch3-q1", "ch3-q2"]), ANSWERS) == (
        3, "metadata says chapter 1, but its cells are chapter 3's")
    assert identify_chapter(notebook(None, ["ch3-q1"]), ANSWERS) == (
        3, "has no course.chapter metadata, but its cells are chapter 3's")
    assert identify_chapter(notebook(7), ANSWERS) == (7, "")
    assert identify_chapter(notebook(None), ANSWERS) == (None, "")
    assert identify_chapter(notebook(1, ["ch1-q1"]), ANSWERS, forced=3) == (3, "metadata says chapter 1")


def test_suspicious_code_is_found_but_not_in_the_stamped_setup_cell():
    nb = notebook(sources=[setup_source("tf_keras", {"repository": "a/b", "branch": "main"}),
                           "import gc  # a comment: sys.modules", "objs = gc.get_objects()",
                           "f.__closure__[0].cell_contents", "# sys.modules in a comment only"])
    assert suspicious_code(nb) == ["gc. (cell 3)", "__closure__ (cell 4)"]


def test_hints_printed_in_saved_outputs():
    nb = notebook()
    nb.cells[0:0] = [nbformat.v4.new_code_cell("ex.q1.hint(2)", outputs=[
        nbformat.v4.new_output("stream", text="Hint 2/3 (3.q1): ...\nHint 1/2 (4.q2): other chapter")])]
    assert saved_hint_levels(nb, 3) == {"q1": 2}


def test_unreadable_notebooks(tmp_path):
    (tmp_path / "essay.ipynb").write_text("not json")
    (tmp_path / "nocells.ipynb").write_text('{"metadata": {}}')
    for name in ("essay.ipynb", "nocells.ipynb"):
        with pytest.raises(NotANotebook):
            read_notebook(tmp_path / name)


def test_summary_shows_flags_and_csv_has_the_columns(tmp_path):
    row = dict(submission="eve.ipynb", chapter=3, exercise="q1", points=2, max_points=2, status="correct", hints="",
               flags="gc. (cell 3)", feedback="  ✓ ok")
    text = summary([row, dict(row, exercise="q2", points=0, status="not checked: the kernel died before its check ran")])
    assert "eve.ipynb" in text and "2/4" in text and "FLAGGED: gc. (cell 3)" in text and "3.q2" in text
    write_csv([row], tmp_path / "g.csv")
    assert (tmp_path / "g.csv").read_text().splitlines()[0] == ",".join(COLUMNS)
