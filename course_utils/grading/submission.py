"""What the grader reads from a handed-in notebook before running it: is it a notebook, which
chapter is it, which hints did the student print, and does its code reach for the grader."""
import json
import os
import re
import stat

from course_utils.grading.session import hint_levels, output_texts
from course_utils.notebook_setup import is_stamped_setup

__all__ = ["MAX_NOTEBOOK_BYTES", "NotANotebook", "identify_chapter", "parse_notebook", "read_notebook",
           "read_submission", "saved_hint_levels", "suspicious_code"]

MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024

# Code that a notebook needs only to reach into the grader or the kernel's memory. Finding it
# proves nothing, but it is where an instructor should look.
SUSPICIOUS = {
    "gc.": r"\bgc\s*\.", "sys.modules": r"sys\s*\.\s*modules", "sys.meta_path": r"meta_path",
    "__closure__": r"__closure__", "__globals__": r"__globals__", "frame inspection": r"_getframe|f_locals|f_globals",
    "ctypes": r"\bctypes\b", "builtins": r"\bbuiltins\b", "importlib": r"\bimportlib\b",
    "the grader's names": r"_course_grader|course_grader__|COURSE_GRAD|export_answers|grading\s*\.\s*export",
    "/proc/": r"/proc/",
    "settrace/setprofile": r"settrace|setprofile", "exception hooks": r"excepthook|set_custom_exc",
    "user_ns": r"user_ns", "os.write/os.open": r"os\s*\.\s*(write|open|dup2?)\b",
    "replaces a course_utils function": r"(?m)^\s*[\w.]*\b(course_utils|checkers|profiling|memory|costs|step_check"
                                        r"|ch\d\w*)\s*\.\s*\w+\s*=(?!=)",
}


class NotANotebook(ValueError):
    """The file is not a notebook the grader can run."""


def read_submission(path, limit=MAX_NOTEBOOK_BYTES):
    """The bytes of a handed-in file, read without following a symbolic link and without blocking.

    Raises:
        NotANotebook: the file is a symbolic link, a folder, a FIFO or another special file, is
            larger than ``limit`` bytes, or cannot be read (the reason is in the message).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> path = Path(tempfile.mkdtemp()) / "alice_04.ipynb"
        >>> _ = path.write_text('{"cells": []}')
        >>> read_submission(path)[:1]
        b'{'
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if os.path.islink(path):
            raise NotANotebook(f"a symbolic link (to {os.readlink(path)}), not a file: it is not followed") from err
        raise NotANotebook(f"cannot be read ({err.strerror})") from err
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a special file"
            raise NotANotebook(f"{kind}, not a regular file")
        data = os.read(fd, limit + 1)
        while len(data) <= limit:
            chunk = os.read(fd, limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
        if len(data) > limit:
            raise NotANotebook(f"larger than {limit // (1024 * 1024)} MB")
        return data
    except OSError as err:
        raise NotANotebook(f"cannot be read ({err.strerror})") from err
    finally:
        os.close(fd)


def parse_notebook(data):
    """The notebook in ``data`` (bytes or text) as a dict, checked to be valid nbformat 4.

    Raises:
        NotANotebook: unreadable JSON, no list of cells, or not valid nbformat (the reason is in
            the message).
    """
    import nbformat

    try:
        nb = json.loads(data)
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
            raise ValueError("no list of cells")
        if not all(isinstance(cell, dict) for cell in nb["cells"]):
            raise ValueError("a cell that is not a JSON object")
        return nbformat.reads(json.dumps(nb), as_version=4)
    except Exception as err:
        raise NotANotebook(f"{type(err).__name__}: {err}") from err


def read_notebook(path):
    """The notebook at ``path`` as a dict, checked to be valid nbformat 4 (see :func:`read_submission`
    and :func:`parse_notebook`).

    Raises:
        NotANotebook: not a regular file, too large, unreadable JSON, no list of cells, or not
            valid nbformat (the reason is in the message).
    """
    return parse_notebook(read_submission(path))


def _source(cell):
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def identify_chapter(nb, answer_cells, forced=None):
    """Which chapter's exercises a notebook holds, and a note when that is not simply its metadata.

    The metadata ``course.chapter`` says which chapter a notebook claims to be; its cells say which
    it is: an exercise notebook keeps the ids of the cells in which its exercises are answered.

    Args:
        nb: the notebook.
        answer_cells: ``{chapter: {cell ids of its exercises}}``.
        forced: the chapter the instructor named (``--chapter``), which wins.

    Returns:
        ``(chapter, note)``; ``chapter`` is None when neither metadata nor cells name a graded chapter.
    """
    course = nb.get("metadata", {}).get("course", {})
    claimed = course.get("chapter") if isinstance(course, dict) else None
    claimed = int(claimed) if isinstance(claimed, str) and claimed.strip().isdigit() else claimed
    if isinstance(claimed, bool) or not isinstance(claimed, int):
        claimed = None
    ids = {cell.get("id") for cell in nb.get("cells", [])}
    found = {chapter: len(cells & ids) for chapter, cells in answer_cells.items()}
    structural = max(found, key=found.get) if found and max(found.values()) else None
    if forced is not None:
        note = f"metadata says chapter {claimed}" if claimed not in (None, forced) else ""
        return forced, note
    if claimed in answer_cells and (found.get(claimed) or structural is None):
        return claimed, ""
    if structural is not None:
        why = "has no course.chapter metadata" if claimed is None else f"metadata says chapter {claimed}"
        return structural, f"{why}, but its cells are chapter {structural}'s"
    return claimed, ""


def saved_hint_levels(nb, chapter):
    """The hint levels the student's own session printed, from the outputs saved in the notebook."""
    return hint_levels([text for cell in nb.get("cells", []) for text in output_texts(cell)], chapter)


def suspicious_code(nb):
    """Which :data:`SUSPICIOUS` patterns the notebook's code cells contain, with their cell numbers
    (the stamped set-up cell, which tests for ``google.colab`` in ``sys.modules``, is left out).

    Example:
        >>> suspicious_code({"cells": [{"cell_type": "code", "source": "import gc; gc.get_objects()"}]})
        ['gc. (cell 1)']
    """
    hits = {}
    for number, cell in enumerate(nb.get("cells", []), start=1):
        if cell.get("cell_type") != "code" or is_stamped_setup(_source(cell)):
            continue
        code = "\n".join(line.split("#", 1)[0] for line in _source(cell).splitlines())
        for name, pattern in SUSPICIOUS.items():
            if re.search(pattern, code):
                hits.setdefault(name, []).append(number)
    return [f"{name} (cell{'s' if len(cells) > 1 else ''} {', '.join(map(str, cells))})" for name, cells in hits.items()]
