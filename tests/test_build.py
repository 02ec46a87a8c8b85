"""Every notebook opens with the Colab badge and set-up cell made from the one configured repository."""
import copy
from pathlib import Path

import nbformat
import pytest

from course_utils.tools import build
from course_utils.tools.checkout import NOTEBOOK_FOLDERS, course_config
from course_utils.notebook_setup import setup_source

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for folder in NOTEBOOK_FOLDERS for p in (ROOT / folder).glob("*.ipynb"))


def test_there_are_notebooks():
    assert any(p.parent.name == "notebooks" for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_badge_and_setup_cells_agree_with_the_config(path):
    config = course_config(ROOT)
    nb = nbformat.read(path, as_version=4)
    relative = path.relative_to(ROOT).as_posix()
    badge, setup = nb.cells[0], nb.cells[1]
    assert badge.id == build.BADGE_ID and badge.source == build.badge_source(relative, config)
    assert f"github/{config['repository']}/blob/{config['branch']}/{relative}" in badge.source
    assert setup.id == build.SETUP_ID and setup.source == setup_source(nb.metadata["course"]["keras"], config, nb.metadata["course"].get("dtensor", False))
    assert isinstance(nb.metadata["course"]["chapter"], int)


def test_notebooks_are_clean_and_exercises_in_sync():
    assert build.main(["--verify"]) == 0, "run `python3 course.py build` and commit the result"


def test_exercise_notebooks_get_the_how_it_works_cell_after_their_title():
    for path in NOTEBOOKS:
        ids = [cell.id for cell in nbformat.read(path, as_version=4).cells]
        assert (build.HOW_ID in ids) == (path.parent.name != "notebooks"), path
        if build.HOW_ID in ids:
            assert ids.index(build.HOW_ID) == 3, path


def test_graded_handouts_hide_solutions(tmp_path):
    written = build.write_graded_handouts(ROOT, tmp_path)
    assert [p.name for p in written] == sorted(p.name for p in (ROOT / "exercises").glob("*.ipynb"))
    for path in written:
        nb = nbformat.read(path, as_version=4)
        assert nb.metadata["course"]["mode"] == "graded"
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert ".solution()" not in code and "BEGIN SOLUTION" not in code
        assert f'ex = exercises({nb.metadata["course"]["chapter"]}, mode="graded")' in code
        how = next(c for c in nb.cells if c.get("id") == build.HOW_ID)
        assert "(graded)" in how.source and "solution()" not in how.source


def test_exercise_cells_are_read_from_the_solution_notebook():
    nb = nbformat.v4.new_notebook(metadata={"course": {"chapter": 9, "keras": "keras3"}})
    nb.cells = [nbformat.v4.new_code_cell("a = 1\n# BEGIN SOLUTION  # PLACEHOLDER: b = None\nb = a + 1\n# END SOLUTION\n"
                                          "ex.q1.check(b)")]
    nb.cells[0].id = "c07"
    assert build.exercise_cells(nb) == {"keras": "keras3", "dtensor": False, "setup": "", "exercises": {
        "q1": {"cell": "c07", "call": "ex.q1.check(b)", "solution": "a = 1\nb = a + 1"}}}
    stamped = build.stamp(copy.deepcopy(nb), "solutions/09_x.ipynb", {"repository": "a/b", "branch": "main"})
    setup = stamped.cells[1]
    assert build.exercise_cells(stamped)["setup"] == setup.source and setup.id == build.SETUP_ID  # the grader's stamp
    nb.cells.append(nbformat.v4.new_code_cell("ex.q1.check(b)"))
    with pytest.raises(ValueError, match="q1 is checked in cells c07 and"):
        build.exercise_cells(nb)
    nb.cells = nb.cells[1:]
    with pytest.raises(ValueError, match="no # BEGIN SOLUTION block"):
        build.exercise_cells(nb)


def test_exercise_replaces_solution_blocks_with_placeholders():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "def f():\n    # BEGIN SOLUTION  # PLACEHOLDER: return None\n    return 42\n    # END SOLUTION\n"
        "# BEGIN SOLUTION\nx = 1\n# END SOLUTION\nprint(x)")]
    assert build.make_exercise(nb).cells[0].source == (
        "def f():\n    return None  # YOUR CODE HERE\n...  # YOUR CODE HERE\nprint(x)")


def test_clean_strips_outputs_and_personal_metadata_and_keeps_the_slides():
    nb = nbformat.v4.new_notebook(metadata={"course": {"chapter": 1, "keras": "keras3"}, "widgets": {}, "colab": {}})
    cell = nbformat.v4.new_code_cell("1", execution_count=3, outputs=[nbformat.v4.new_output("stream", text="1")])
    slides = [{"title": "One", "show": "output"}]
    cell.metadata = {"scrolled": True, "tags": ["x"], "slides": slides, "slideshow": {"slide_type": "slide"}}
    nb.cells = [cell]
    cleaned = build.clean(nb)
    assert set(cleaned.metadata) == {"course", "kernelspec"}
    assert cleaned.cells[0].outputs == [] and cleaned.cells[0].execution_count is None
    assert cleaned.cells[0].metadata == {"tags": ["x"], "slides": slides}  # the deck's, written by the author


def test_command_line_tools_do_not_import_tensorflow():
    import subprocess
    import sys

    code = "import sys, course_utils.tools.build, course_utils.grading.cli; print('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_a_new_exercise_name_reaches_the_cells_file_before_the_checkers_are_imported(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook(metadata={"course": {"chapter": 9, "keras": "keras3"}})
    nb.cells = [nbformat.v4.new_code_cell("# BEGIN SOLUTION  # PLACEHOLDER: b = None\nb = 2\n# END SOLUTION\n"
                                          "ex.q7.check(b)")]
    cells_path = tmp_path / build.CELLS_PATH
    cells_path.parent.mkdir(parents=True)
    cells_path.write_text(build.cells_file_text({9: {"exercises": {"q1": {}}}}))
    monkeypatch.setattr(build.notebook_cells, "cache_clear", lambda: None)
    build._write_new_exercise_names(tmp_path, [nb])
    assert list(build.json.loads(cells_path.read_text())["chapters"]["9"]["exercises"]) == ["q7"]
    before = cells_path.stat().st_mtime_ns
    build._write_new_exercise_names(tmp_path, [nb])  # the names agree now: nothing is written
    assert cells_path.stat().st_mtime_ns == before
