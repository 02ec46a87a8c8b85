"""Where the course's checkout is, for the maintainer tools (the build and the benchmark).

These tools read and write the notebooks in ``notebooks/``, ``solutions/`` and ``exercises/``
next to the package, so they only work from a clone of the course. Installed elsewhere (for
example by the Colab set-up cell's ``pip install``), the package has no notebooks beside it, and
:func:`checkout_root` says so instead of failing later with a missing file.
"""
import tomllib
from pathlib import Path

__all__ = ["NotACheckoutError", "checkout_root", "course_config"]

PACKAGE_PARENT = Path(__file__).resolve().parents[2]  # the folder that holds course_utils
NOTEBOOK_FOLDERS = ("notebooks", "solutions", "exercises")


class NotACheckoutError(RuntimeError):
    """The course_utils package in use is not inside a clone of the course."""


def checkout_root(root=PACKAGE_PARENT):
    """The folder of the course's clone that holds this package.

    Raises:
        NotACheckoutError: ``root`` has no ``pyproject.toml`` and ``solutions/`` folder; the message
            says to run the tool from a clone (``python3 course.py build``).

    Example:
        >>> (checkout_root() / "notebooks").is_dir()
        True
    """
    root = Path(root)
    if not (root / "pyproject.toml").is_file() or not (root / "solutions").is_dir():
        raise NotACheckoutError(
            f"The course's maintainer tools (build, benchmark) work on a clone of the course, but this "
            f"course_utils is installed in {root}, which has no notebooks. Clone the course and run the tool "
            f"there, e.g. `python3 course.py build`.")
    return root


def course_config(root=PACKAGE_PARENT):
    """The ``[tool.course]`` table of ``pyproject.toml``: ``repository`` and ``branch``.

    Raises:
        NotACheckoutError: not run from a clone of the course.
        ValueError: ``repository`` does not look like ``owner/name``.

    Example:
        >>> course_config()["branch"]
        'main'
    """
    import re

    config = tomllib.loads((checkout_root(root) / "pyproject.toml").read_text())["tool"]["course"]
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", config.get("repository", "")):
        raise ValueError("[tool.course] repository in pyproject.toml must look like 'owner/name'.")
    config.setdefault("branch", "main")
    return config
