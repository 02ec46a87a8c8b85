"""Exercise and solution notebooks: one source, every exercise checked, no solution leaked.

(That regenerating exercises/ from solutions/ changes nothing is checked in test_build.py.)
"""
import re

import nbformat

from course_utils.checkers import registry
from course_utils.tools.checkout import checkout_root


def test_every_chapter_with_exercises_has_a_solution_notebook_that_checks_them_all():
    solutions = sorted((checkout_root() / "solutions").glob("*.ipynb"))
    chapters = {}
    for path in solutions:
        nb = nbformat.read(path, as_version=4)
        chapters[nb.metadata["course"]["chapter"]] = nb
        assert path.name.startswith(f"{nb.metadata['course']['chapter']:02d}_"), path.name
    assert sorted(chapters) == sorted(registry())
    for chapter, exercises in registry().items():
        code = "\n".join(c.source for c in chapters[chapter].cells if c.cell_type == "code")
        for name in exercises:
            assert re.search(rf"^ex\.{name}\.check\(", code, re.MULTILINE), (chapter, name)
            assert "# BEGIN SOLUTION" in code


def test_exercise_notebooks_contain_no_solution_code():
    for path in sorted((checkout_root() / "exercises").glob("*.ipynb")):
        text = path.read_text()
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text, path.name
        assert "# YOUR CODE HERE" in text, path.name
