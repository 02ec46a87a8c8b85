"""The course package a graded notebook's sandbox imports: the checkers without their judging half.

A graded kernel needs ``course_utils`` to run (set-up, data, pictures) and its exercises' hints
and ``collect`` methods, but nothing that knows an answer. :func:`handout_package` copies the
package and removes, from every checker module (``checkers/*.py``):

- the methods named ``grade`` or ``judge``, and the methods and module-level functions whose names
  start with ``_grade`` or ``_judge``;
- the module-level functions and classes, and the methods, whose names start with ``reference`` or ``_reference``
  (an exercise's ``reference_values``: its answer, written into a variant's solution cell);
- the solution code of every exercise (``notebook_cells.json`` keeps each check call and cell id);
- the text of every hint: each class's ``hints`` tuple keeps its length, each text becomes
  :data:`HIDDEN_HINT`. A graded kernel gets a hint's text from the grader, which records the
  request (:meth:`~course_utils.checkers.core.Exercise.hint_text`), so a hint costs what it says
  however the notebook reads it.

So the rule for a checker module is: what computes or states a right answer lives in one of
those; ``collect`` (which runs in the sandbox) and what it calls never use them; and hints are
written as a tuple in the class body.
"""
import ast
import json
import shutil
from pathlib import Path

from course_utils.checkers.core import CELLS_FILE

__all__ = ["HIDDEN_HINT", "handout_package", "strip_checker_source", "strip_solutions"]

HIDDEN_HINT = "(hint text served by the grader)"
JUDGING_METHODS = ("grade", "judge", "draw")  # draw: a variant's parameters, drawn by the grader and the build only
JUDGING_PREFIXES = ("_grade", "_judge")
REFERENCE_PREFIXES = ("reference", "_reference")


def _judging(node, in_class):
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    if in_class:
        return node.name in JUDGING_METHODS or node.name.startswith(JUDGING_PREFIXES + REFERENCE_PREFIXES)
    return node.name.startswith(REFERENCE_PREFIXES + JUDGING_PREFIXES)


def _hide_hints(node, class_name):
    """A class body's ``hints = (...)`` with each text replaced by :data:`HIDDEN_HINT` (other statements unchanged).

    Raises:
        ValueError: ``hints`` is not a tuple written out, whose length the copy could keep.
    """
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    if not any(isinstance(target, ast.Name) and target.id == "hints" for target in targets):
        return node
    if not isinstance(node.value, ast.Tuple) or any(isinstance(e, ast.Starred) for e in node.value.elts):
        raise ValueError(f"{class_name}.hints must be a tuple of texts written out in the class body, so that the "
                         f"grader's hand-out can keep their number and leave out their texts")
    node.value = ast.Tuple([ast.Constant(HIDDEN_HINT) for _ in node.value.elts], ast.Load())
    return node


def strip_checker_source(source):
    """``source`` (a checker module) without its judging methods, reference functions and hint texts.

    Raises:
        ValueError: a class's ``hints`` is not a tuple written out (see :func:`_hide_hints`).

    Example:
        >>> print(strip_checker_source("class Q:\\n    def grade(self):\\n        return 42\\n    hints = ('x',)\\n"))
        class Q:
            hints = ('(hint text served by the grader)',)
    """
    tree = ast.parse(source)
    tree.body = [node for node in tree.body if not _judging(node, in_class=False)]
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            node.body = [_hide_hints(item, node.name) for item in node.body
                         if not _judging(item, in_class=True)] or [ast.Pass()]
    return ast.unparse(tree) + "\n"


def strip_solutions(text):
    """The JSON text of ``notebook_cells.json`` with every exercise's ``"solution"`` emptied.

    Example:
        >>> strip_solutions('{"chapters": {"3": {"exercises": {"q1": {"call": "ex.q1.check(x)", "solution": "x = 1"}}}}}')
        '{"chapters": {"3": {"exercises": {"q1": {"call": "ex.q1.check(x)", "solution": ""}}}}}'
    """
    cells = json.loads(text)
    for chapter in cells["chapters"].values():
        for exercise in chapter["exercises"].values():
            exercise["solution"] = ""
    return json.dumps(cells, ensure_ascii=False)


def handout_package(package_dir, destination):
    """Copy the package ``package_dir`` (``course_utils``) into ``destination/course_utils``, stripped
    as the module docstring says, and return the copy's folder.

    Raises:
        FileExistsError: ``destination/course_utils`` exists already.

    Example:
        >>> import course_utils, tempfile
        >>> copy = handout_package(Path(course_utils.__file__).parent, Path(tempfile.mkdtemp()))
        >>> "def judge" in (copy / "checkers" / "ch6.py").read_text()
        False
    """
    target = Path(destination) / Path(package_dir).name
    shutil.copytree(package_dir, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    cells = target / "checkers" / CELLS_FILE
    cells.write_text(strip_solutions(cells.read_text(encoding="utf-8")), encoding="utf-8")
    for module in sorted((target / "checkers").glob("*.py")):
        if module.name not in ("__init__.py", "core.py", "answers.py", "plain.py"):
            module.write_text(strip_checker_source(module.read_text(encoding="utf-8")), encoding="utf-8")
    return target
