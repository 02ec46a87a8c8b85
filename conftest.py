"""Settings for the whole test run, applied before any notebook kernel starts, and the check that the run tests
this checkout's course_utils."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
os.environ["COURSE_OFFLINE"] = "1"  # a test never downloads: load_mnist fails fast instead
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
WHERE_FROM = "import course_utils, os; print(os.path.dirname(os.path.dirname(os.path.abspath(course_utils.__file__))))"


def other_checkout(root, env):
    """Why the tests of the checkout ``root`` would not test its own ``course_utils``, or None.

    Two Pythons must import it from ``root``: this test run, and one started in ``root/notebooks`` with ``env`` (as
    nbval starts the chapters' kernels, where ``root`` is not on the path: a virtual environment with another
    checkout's package installed, e.g. an editable install borrowed from another clone, would give them that one).

    Example:
        >>> other_checkout(ROOT, dict(os.environ, PYTHONPATH=str(ROOT))) is None
        True
    """
    import course_utils

    found = {"this test run": Path(course_utils.__file__).resolve().parent.parent}
    kernel = subprocess.run([sys.executable, "-c", WHERE_FROM], cwd=Path(root) / "notebooks", env=env,
                            capture_output=True, text=True)
    found["a kernel started in notebooks/"] = Path(kernel.stdout.strip() or "(none: it cannot import course_utils)")
    wrong = {who: folder for who, folder in found.items() if folder != Path(root).resolve()}
    if not wrong:
        return None
    return (f"The tests of {root} would not test its own course_utils: " + "; ".join(
        f"{who} imports it from {folder}" for who, folder in wrong.items()) + f". Put this checkout first on the "
        f"path (`export PYTHONPATH={root}`), or install it into the environment (`pip install -e {root}`).")


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # once, in the controller (not in each pytest-xdist worker)
        problem = other_checkout(ROOT, os.environ)
        if problem:
            raise pytest.UsageError(problem)


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
