"""The kernel's side of a grader's check: one exercise's answers, written as plain data.

The grader runs :func:`export_answers` in the notebook's kernel (in its sandbox) right after an
exercise's cell. It reads the answers by the names of the exercise's check call, runs the
exercise's ``collect`` on them with the seed the grader chose, and writes the plain-data text
(:mod:`course_utils.checkers.plain`) to a new file. Nothing here decides a grade, holds a key or
knows an answer: the grader judges the file in its own process. A notebook that changes this
code only changes what its own answers look like.
"""
import os

from course_utils.checkers import exercises
from course_utils.checkers.plain import dumps

__all__ = ["export_answers"]


def export_answers(chapter, exercise, seed, path):
    """Write the answers of exercise ``exercise`` (``"q1"``) of ``chapter`` to the new file ``path``.

    The answers are the notebook's variables named in the exercise's check call; when one is not
    defined, the file says which (``{"state": "missing", "names": [...]}``).

    Raises:
        FileExistsError: ``path`` exists already (the grader names a new file for every check).

    Example (not run by the doctests: it runs in a kernel that ran the exercise's cells):
        >>> export_answers(4, "q1", 1234, "/tmp/q1.json")   # in a kernel that ran chapter 4's exercise cells  # doctest: +SKIP
    """
    from IPython import get_ipython

    namespace = get_ipython().user_ns
    item = getattr(exercises(chapter), exercise)
    missing = [name for name in item.arguments if name not in namespace]
    if missing:
        text = dumps({"state": "missing", "names": missing})
    else:
        text = item.export(*[namespace[name] for name in item.arguments], seed=seed)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
