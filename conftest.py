"""Settings for the whole test run, applied before any notebook kernel starts."""
import os

os.environ["COURSE_OFFLINE"] = "1"  # a test never downloads: load_mnist fails fast instead
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_addoption(parser):
    # `python3 course.py test` passes these to the environment tests in tests/environments/.
    parser.addoption("--colab-python", help="the Python of the Colab-like environment (.venv-colab)")
    parser.addoption("--chromium", help="the Chromium to drive JupyterLab with (default: chromium on PATH)")
