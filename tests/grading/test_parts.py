"""The grader's parts on their own: the hand-out package, export and judging, reading a submission, the summary."""
import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from course_utils.checkers import exercises
from course_utils.grading.export import export_answers
from course_utils.grading.handout import handout_package
from course_utils.grading.session import judge_file
from course_utils.grading.report import COLUMNS, summary, write_csv
from course_utils.grading.scan import scan_cells
from course_utils.grading.submission import NotANotebook, identify_chapter, read_notebook, saved_hint_levels
from course_utils.notebook_setup import setup_source

ROOT = Path(__file__).resolve().parents[2]

def test_the_handout_package_has_no_solutions_and_no_judging_code(tmp_path):
    copy = handout_package(ROOT / "course_utils", tmp_path)
    every = lambda package: [exercise for chapter in json.loads((package / "checkers" / "notebook_cells.json").read_text())[
        "chapters"].values() for exercise in chapter["exercises"].values()]
    assert {e["solution"] for e in every(copy)} == {""} and all(e["call"].startswith("ex.q") for e in every(copy))
    assert all(e["solution"] for e in every(ROOT / "course_utils"))  # the package's own copy keeps them
    for module in sorted((copy / "checkers").glob("ch*.py")):
        tree = ast.parse(module.read_text())
        names = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        assert not {n for n in names if n in ("grade", "judge") or n.startswith(("_grade", "_judge", "reference",
                                                                                  "_reference"))}, module.name
    code = ("from course_utils.checkers import exercises, registry\n"
            "from course_utils.checkers.core import notebook_cells\n"
            "import course_utils\n"
            "print(sum(len(exercises(n)) for n in registry()), course_utils.__file__,\n"
            "      repr(notebook_cells()[1]['exercises']['q1']['solution']))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    from course_utils.checkers import exercises, registry
    every_exercise = sum(len(exercises(n)) for n in registry())  # as the full package counts them
    assert done.stdout.split() == [str(every_exercise), str(copy / "__init__.py"), "''"]  # the copy's own data


def test_export_writes_a_new_file_and_the_driver_judges_it(tmp_path, monkeypatch):
    import types

    import IPython

    shell = types.SimpleNamespace(user_ns={"tf_config": None})  # the kernel's namespace, as export reads it
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    export_answers(3, "q4", 5, tmp_path / "a.json")
    record = judge_file(exercises(3).q4, tmp_path / "a.json", 5)
    assert record["status"] == "missing" and record["extra"] == "statements"
    shell.user_ns["statements"] = [False, True, True, False, True, False]
    export_answers(3, "q4", 5, tmp_path / "b.json")
    assert judge_file(exercises(3).q4, tmp_path / "b.json", 5)["points"] == 6
    with pytest.raises(FileExistsError):
        export_answers(3, "q4", 5, tmp_path / "b.json")
    os.symlink(tmp_path / "b.json", tmp_path / "link.json")
    assert judge_file(exercises(3).q4, tmp_path / "link.json", 5)["status"] == "no answers"
    (tmp_path / "garbage.json").write_text("{not json")
    assert judge_file(exercises(3).q4, tmp_path / "garbage.json", 5)["status"] == "incorrect"


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


def test_code_that_reaches_for_the_grader_is_found_but_not_in_the_stamped_setup_cell():
    stamp = setup_source("tf_keras", {"repository": "a/b", "branch": "main"})
    sources = [stamp, "import gc  # a comment: sys.modules", "objs = gc.get_objects()",
               "f.__closure__[0].cell_contents", "# sys.modules in a comment only"]
    assert scan_cells(list(enumerate(sources, start=2)), stamp) == ["gc. (cells 3, 4)", "__closure__ (cell 5)"]
    # the set-up cell is left out only when it is byte for byte the stamp: more code in it is read
    edited = stamp + "\nimport gc  # git+https://github.com/a/b@main"
    assert scan_cells([(2, edited)], stamp) == ["sys.modules (cell 2)", "importlib (cell 2)", "gc. (cell 2)"]


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


def test_replacing_a_course_utils_function_is_flagged():
    sources = ["import course_utils.memory as memory\nmemory.bytes_per_device = lambda v: {}",
               "from course_utils.checkers import ch5_cases\nch5_cases.layout_of = print",
               "x = memory.bytes_per_device(v)  # reading one is fine\nif a.b == c.d: pass"]
    assert scan_cells(list(enumerate(sources, start=1))) == [
        "changes course_utils: checkers.ch5_cases.layout_of, memory.bytes_per_device (cells 1, 2)"]


def test_the_handout_package_is_never_copied_over_an_existing_one(tmp_path):
    handout_package(ROOT / "course_utils", tmp_path)
    with pytest.raises(FileExistsError):
        handout_package(ROOT / "course_utils", tmp_path)


def test_the_handout_package_has_no_hint_texts_but_keeps_their_number(tmp_path):
    from course_utils.checkers import registry
    from course_utils.grading.handout import HIDDEN_HINT

    copy = handout_package(ROOT / "course_utils", tmp_path)
    text = "\n".join(path.read_text() for path in copy.rglob("*.py"))
    hints = [(chapter, item) for chapter in registry() for item in exercises(chapter)]
    for chapter, item in hints:
        for hint in type(item).hints:
            assert hint[:50] not in text, (chapter, item.name, hint)
    code = ("from course_utils.checkers import exercises, registry\n"
            "print(sorted({h for n in registry() for e in exercises(n) for h in type(e).hints}), "
            "[len(e.hints) for n in registry() for e in exercises(n)])")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)), timeout=120)
    assert done.stdout.strip() == f"{[HIDDEN_HINT]!r} {[len(item.hints) for _, item in hints]!r}", done.stderr[-2000:]


def test_the_driver_serves_a_hint_only_for_a_request_it_logs():
    from course_utils.grading.session import serve_hint

    items, logged = {item.name: item for item in exercises(3)}, []
    assert serve_hint("course-hint 3.q1 2", items, logged.append) == items["q1"].hint_body(2)  # filled: {{name}}
    for prompt in ("course-hint 3.q1 9", "course-hint 4.q1 1", "course-hint 3.q9 1", "your name?", "x" * 10 ** 6):
        assert serve_hint(prompt, items, logged.append) == ""
    assert logged == [{"hint": "q1", "level": 2}]


def test_judging_has_a_memory_budget(tmp_path):
    """In a fresh process, as the grader's judging runs: a process that has already freed memory (a pytest worker
    after other tests) reuses it, so the budget would not see the allocation."""
    code = textwrap.dedent(f"""
        import numpy as np
        from pathlib import Path
        from course_utils.checkers import exercises
        from course_utils.checkers.plain import dumps
        from course_utils.grading import session
        from course_utils.grading.session import judge_file

        big = Path({str(tmp_path / "big.json")!r})
        big.write_text(dumps({{"state": "answered", "data": [np.ones(12 << 17)]}}))  # 12 MiB
        assert judge_file(exercises(3).q4, big, 5)["status"] == "incorrect"  # judged: not 6 booleans
        session.JUDGE_MEMORY = 8 << 20
        record = judge_file(exercises(3).q4, big, 5)
        assert record["status"] == "too large", record
        assert record["extra"] == "reading and judging them took more than 8 MiB", record
        space = bytearray(64 << 20)  # the budget ended with the judging
        print("ok", len(space) == 64 << 20)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.stdout.split()[-2:] == ["ok", "True"], done.stdout[-2000:] + done.stderr[-2000:]


def test_notebooks_are_read_without_nbformat_and_a_repeated_cell_id_names_its_first_cell_only():
    from course_utils.grading.submission import parse_notebook

    cell = {"cell_type": "code", "source": ["x = ", "1"], "metadata": {}, "outputs": [], "id": "ch3-q1"}
    nb = parse_notebook(json.dumps({"nbformat": 4, "metadata": {"course": {"chapter": 3}}, "cells": [cell, cell]}))
    assert [c["id"] for c in nb["cells"]] == ["ch3-q1", None] and nb["cells"][0]["source"] == "x = 1"
    for text, why in (('{"nbformat": 3, "cells": []}', "nbformat 3"), ('{"nbformat": 4, "cells": [1]}', "cell 1"),
                      ('{"nbformat": 4, "cells": [{"cell_type": "code", "source": 5}]}', "source")):
        with pytest.raises(NotANotebook, match=why):
            parse_notebook(text)
