"""Build chapter-3 submissions for the grader tests from the real exercise and solution notebooks.

Chapter 3's checkers are pure Python, so each kernel starts in a few seconds."""
import csv
import os
from pathlib import Path

import nbformat
import pytest

from course_utils.checkers import registry
from course_utils.grading.sandbox import SandboxUnavailable, check_available

ROOT = Path(__file__).resolve().parents[2]
EXERCISE = ROOT / "exercises" / "03_beyond_one_process.ipynb"
MAX = registry()[3]  # {exercise: max points} of chapter 3
ANSWER_CELLS = {q: f"ch3-{q}" for q in MAX}
# Cells that only demonstrate (exercise 5's starts two TensorFlow workers): left out of the test
# submissions, which would otherwise each start a cluster the grader does not need.
DEMO_CELLS = ("c17e",)


def right_answer(exercise):
    """The solution notebook's cell for ``exercise``, check call included."""
    solution = nbformat.read(ROOT / "solutions" / EXERCISE.name, as_version=4)
    return next(c.source for c in solution.cells if c.get("id") == ANSWER_CELLS[exercise])


def submission(path, answers=(), replace=None, after=None, metadata=None, drop=()):
    """Write a chapter-3 exercise notebook to ``path``.

    Args:
        answers: exercises whose cell gets the right answer.
        replace: ``{cell id: new source}``.
        after: ``{cell id: [sources of new cells to insert after it]}``.
        metadata: ``course`` metadata to set instead of the real one.
        drop: cell ids to delete (besides :data:`DEMO_CELLS`, always left out).
    """
    nb = nbformat.read(EXERCISE, as_version=4)
    sources = {ANSWER_CELLS[e]: right_answer(e) for e in answers}
    sources.update(replace or {})
    cells = []
    for cell in nb.cells:
        if cell.get("id") in (*drop, *DEMO_CELLS):
            continue
        if cell.get("id") in sources:
            cell.source = sources[cell.id]
        cells.append(cell)
        for number, source in enumerate((after or {}).get(cell.get("id"), [])):
            new = nbformat.v4.new_code_cell(source)
            new.id = f"{cell.id}-added-{number}"
            cells.append(new)
    nb.cells = cells
    if metadata is not None:
        nb.metadata["course"] = metadata
    nbformat.write(nb, path)
    return path


def read_grades(path):
    """``{submission: {exercise: row}}`` from a grades.csv."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    table = {}
    for row in rows:
        table.setdefault(row["submission"], {})[row["exercise"]] = row
    return rows, table


def points(table, name):
    """``{exercise: points}`` of one submission (as numbers)."""
    return {q: float(row["points"]) for q, row in table[name].items()}


def _bwrap_works():
    try:
        check_available()
        return True
    except SandboxUnavailable:
        return False


BWRAP_WORKS = _bwrap_works()
needs_bwrap = pytest.mark.skipif(not BWRAP_WORKS, reason="bubblewrap (bwrap) cannot start a sandbox here")


def processes_with(marker):
    """Host pids of running (not zombie) processes whose command line contains ``marker``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker.encode() in cmdline and state != b"Z" and int(pid) != os.getpid():
            found.append(int(pid))
    return found
