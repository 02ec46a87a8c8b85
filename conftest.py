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
    parser.addoption("--colab-outputs", help="a folder to write each notebook the Colab-like environment ran, with "
                                             "its outputs (a failed one up to its failing cell)")


_NBVAL_CELLS = {}  # notebook path: {code cell number: (its outputs or None where it failed, seconds)}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if report.when == "call" and hasattr(item, "cell_num") and hasattr(item, "test_outputs"):
        outputs = item.test_outputs if report.passed else None
        _NBVAL_CELLS.setdefault(str(item.path), {})[item.cell_num] = (outputs, report.duration)


def pytest_sessionfinish(session):
    """Write each notebook nbval ran with every cell passing to ``--executed-notebooks``, with its outputs and
    ``metadata.course_run`` (the seconds its cells took, the cores, the date): the website renders these."""
    folder = session.config.getoption("--executed-notebooks", default=None)
    if not folder:
        return
    import datetime
    from pathlib import Path

    import nbformat

    for path, cells in _NBVAL_CELLS.items():
        nb = nbformat.read(path, as_version=4)
        code = [cell for cell in nb.cells if cell.cell_type == "code"]
        if sorted(cells) != list(range(len(code))) or any(outputs is None for outputs, _ in cells.values()):
            continue  # a cell failed or did not run: no executed copy
        for number, cell in enumerate(code):
            cell.outputs, cell.execution_count = cells[number][0], number + 1
        nb.metadata["course_run"] = {"seconds": round(sum(seconds for _, seconds in cells.values()), 1),
                                     "cores": os.cpu_count(), "date": datetime.date.today().isoformat(),
                                     "how": "tests"}
        target = Path(folder) / Path(path).parent.name / Path(path).name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
