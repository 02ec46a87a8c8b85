"""What the grader reads from a handed-in notebook before running it: is it a notebook, which
chapter is it, which hints did the student print, and does its code reach for the grader."""
import json
import re

from course_utils.grading.session import hint_levels, output_texts
from course_utils.notebook_setup import is_stamped_setup

__all__ = ["NotANotebook", "identify_chapter", "read_notebook", "saved_hint_levels", "suspicious_code"]

# Code that a notebook needs only to reach into the grader or the kernel's memory. Finding it
# proves nothing, but it is where an instructor should look.
SUSPICIOUS = {
    "gc.": r"\bgc\s*\.", "sys.modules": r"sys\s*\.\s*modules", "sys.meta_path": r"meta_path",
    "__closure__": r"__closure__", "__globals__": r"__globals__", "frame inspection": r"_getframe|f_locals|f_globals",
    "ctypes": r"\bctypes\b", "builtins": r"\bbuiltins\b", "importlib": r"\bimportlib\b",
    "the grader's names": r"_course_grader|course_grader__|COURSE_GRAD", "/proc/": r"/proc/",
    "settrace/setprofile": r"settrace|setprofile", "exception hooks": r"excepthook|set_custom_exc",
    "user_ns": r"user_ns", "os.write/os.open": r"os\s*\.\s*(write|open|dup2?)\b",
}


class NotANotebook(ValueError):
    """The file is not a notebook the grader can run."""


def read_notebook(path):
    """The notebook at ``path`` as a dict, checked to be valid nbformat 4.

    Raises:
        NotANotebook: unreadable JSON, no list of cells, or not valid nbformat (the reason is in
            the message).
    """
    import nbformat

    try:
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
            raise ValueError("no list of cells")
        return nbformat.reads(json.dumps(nb), as_version=4)
    except Exception as err:
        raise NotANotebook(f"{type(err).__name__}: {err}") from err


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
