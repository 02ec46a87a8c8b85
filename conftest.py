"""Settings for the whole test run, applied before any notebook kernel starts."""
import os

import pytest

os.environ["COURSE_OFFLINE"] = "1"  # a test never downloads: load_mnist fails fast instead
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_addoption(parser):
    # `python3 course.py test` passes these to the environment tests in tests/environments/.
    parser.addoption("--colab-python", help="the Python of the Colab-like environment (.venv-colab)")
    parser.addoption("--chromium", help="the Chromium to drive JupyterLab with (default: chromium on PATH)")
    parser.addoption("--executed-notebooks", help="a folder to write each notebook nbval ran, with its outputs, "
                                                  "when all its cells passed (the website is built from them)")


_NBVAL_OUTPUTS = {}  # notebook path: {code cell number: its outputs, or None where the cell failed}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when == "call" and hasattr(item, "cell_num") and hasattr(item, "test_outputs"):
        _NBVAL_OUTPUTS.setdefault(str(item.path), {})[item.cell_num] = item.test_outputs if report.passed else None


def pytest_sessionfinish(session):
    folder = session.config.getoption("--executed-notebooks", default=None)
    if not folder:
        return
    import nbformat
    from pathlib import Path

    for path, outputs in _NBVAL_OUTPUTS.items():
        nb = nbformat.read(path, as_version=4)
        code = [cell for cell in nb.cells if cell.cell_type == "code"]
        if sorted(outputs) != list(range(len(code))) or any(o is None for o in outputs.values()):
            continue  # a cell failed or did not run: no executed copy
        for number, cell in enumerate(code):
            cell.outputs, cell.execution_count = outputs[number], number + 1
        target = Path(folder) / Path(path).parent.name / Path(path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
