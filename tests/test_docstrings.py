"""Every docstring example of course_utils runs, as doctest runs it: an example that no longer tells the truth fails.

The examples are found without importing anything (collecting imports no TensorFlow); each test imports its module
and runs that one docstring's examples, with ``ELLIPSIS`` and ``NORMALIZE_WHITESPACE``. An example that cannot run
cheaply here (it starts a cluster, reads a trace of a training run, grades a folder) says why in its docstring and
marks its lines ``# doctest: +SKIP``; the lines around it still run.
"""
import ast
import doctest
import importlib
from pathlib import Path

import pytest

from course_utils.data import mnist_is_prepared

PACKAGE = Path(__file__).resolve().parents[1] / "course_utils"
NEEDS = {"course_utils.data.load_mnist": (mnist_is_prepared, "set TFDS_DATA_DIR to the prepared MNIST")}


def docstrings_with_examples(package=PACKAGE):
    """``[(module name, doctest name)]`` of every docstring of ``package`` that has a ``>>>`` example, read from
    the sources (the module, its classes, functions and methods, named as :class:`doctest.DocTestFinder` names
    them)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")

        def visit(node, name):
            if ">>>" in (ast.get_docstring(node, clean=False) or ""):
                found.append((module, name))
            for child in getattr(node, "body", []):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and (
                        isinstance(node, (ast.Module, ast.ClassDef))):
                    visit(child, f"{name}.{child.name}")

        visit(ast.parse(path.read_text(encoding="utf-8")), module)
    return found


@pytest.mark.parametrize("module, name", docstrings_with_examples(), ids=lambda value: value)
def test_docstring_examples_run(module, name):
    if name in NEEDS and not NEEDS[name][0]():
        pytest.skip(NEEDS[name][1])
    tests = {test.name: test for test in doctest.DocTestFinder().find(importlib.import_module(module), module)}
    assert name in tests, f"doctest does not find {name} (a docstring of an object it skips?)"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = []
    runner.run(tests[name], out=report.append)
    assert runner.failures == 0, "".join(report)


def test_the_examples_are_found_with_their_names():
    found = docstrings_with_examples()
    assert ("course_utils.costs", "course_utils.costs.ring_bytes_sent") in found
    assert ("course_utils.cluster", "course_utils.cluster") in found  # a package's docstring
    assert ("course_utils.checkers.core", "course_utils.checkers.core.Feedback") in found  # a class's
    assert len(found) == len(set(found)) > 50
