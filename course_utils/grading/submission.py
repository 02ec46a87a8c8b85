"""What the grader reads from a handed-in notebook before running it: is it a notebook, which
chapter is it, and which hints did the student's own session print.

Everything here takes time and memory in proportion to the file, with caps: a file of more than
:data:`MAX_NOTEBOOK_BYTES`, that could hold more than :data:`MAX_NOTEBOOK_VALUES` JSON values or
that has more than :data:`MAX_CELLS` cells is refused before it costs more. (What the code reaches
for is read later, in the notebook's own time, by :mod:`course_utils.grading.scan`.)
"""
import os
import re
import stat

from course_utils.checkers.plain import PlainDataError, loads_json

__all__ = ["MAX_CELLS", "MAX_NOTEBOOK_BYTES", "MAX_NOTEBOOK_VALUES", "NotANotebook", "hint_levels", "identify_chapter",
           "output_texts", "parse_notebook", "read_notebook", "read_submission", "saved_hint_levels"]

MAX_NOTEBOOK_BYTES = 50 * 1024 * 1024
MAX_NOTEBOOK_VALUES = 2_000_000  # JSON values (an exercise notebook with its outputs has about 5,000)
MAX_CELLS = 5_000                # an exercise notebook has about 40
CELL_TYPES = ("code", "markdown", "raw")
HINT_LINE = re.compile(r"Hint (\d{1,3})/\d{1,3} \((\d{1,3})\.(q\d{1,3})\)")


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


def _text(value, what):
    """A notebook's multi-line text field: a string, or a list of strings joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(part, str) for part in value):
        return "".join(value)
    raise NotANotebook(f"{what} is neither a string nor a list of strings")


def _cell(cell, number, seen):
    if not isinstance(cell, dict) or cell.get("cell_type") not in CELL_TYPES:
        raise NotANotebook(f"cell {number} is not a notebook cell (a JSON object with a cell_type of {CELL_TYPES})")
    cell_id = cell.get("id")
    if not isinstance(cell_id, str) or cell_id in seen:
        cell_id = None  # a repeated id names only its first cell: the exercise's check runs after that one only
    else:
        seen.add(cell_id)
    outputs = cell.get("outputs") if cell["cell_type"] == "code" else None
    return {"cell_type": cell["cell_type"], "id": cell_id, "source": _text(cell.get("source", ""), f"cell {number}'s source"),
            "outputs": [o for o in outputs if isinstance(o, dict)] if isinstance(outputs, list) else []}


def parse_notebook(data):
    """The notebook in ``data`` (bytes or text): ``{"metadata": {...}, "cells": [...]}``, each cell a dict of
    ``cell_type``, ``id`` (None for a missing or repeated one), ``source`` (text) and ``outputs``.

    Raises:
        NotANotebook: not UTF-8, over a cap (see the module docstring), not JSON, or not an nbformat 4
            notebook (the reason is in the message).

    Example:
        >>> parse_notebook(b'{"nbformat": 4, "metadata": {}, "cells": [{"cell_type": "code", "source": ["1 +", " 1"]}]}')["cells"][0]["source"]
        '1 + 1'
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        nb = loads_json(text, MAX_NOTEBOOK_BYTES, MAX_NOTEBOOK_VALUES, "the file")
    except (UnicodeDecodeError, PlainDataError) as err:
        raise NotANotebook(f"{type(err).__name__}: {err}") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotANotebook("no list of cells")
    if nb.get("nbformat") != 4:
        raise NotANotebook(f"nbformat {nb.get('nbformat')!r}, not 4 (save it with Jupyter 4 or later)")
    if len(nb["cells"]) > MAX_CELLS:
        raise NotANotebook(f"more than {MAX_CELLS:,} cells")
    seen = set()
    metadata = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
    return {"metadata": metadata, "cells": [_cell(cell, n, seen) for n, cell in enumerate(nb["cells"], start=1)]}


def read_notebook(path):
    """The notebook at ``path`` (see :func:`read_submission` and :func:`parse_notebook`).

    Raises:
        NotANotebook: not a regular file, too large, or not a notebook (the reason is in the message).
    """
    return parse_notebook(read_submission(path))


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


def output_texts(cell):
    """The text a cell printed (streams and plain-text results)."""
    texts = []
    for output in cell.get("outputs", []):
        text = output.get("text", "") if output.get("output_type") == "stream" else (
            output["data"].get("text/plain", "") if isinstance(output.get("data"), dict) else "")
        if isinstance(text, list):
            text = "".join(part for part in text if isinstance(part, str))
        texts.append(text if isinstance(text, str) else "")
    return texts


def hint_levels(texts, chapter):
    """The highest hint level asked for per exercise of ``chapter`` in some output texts: ``{"q1": 2}``."""
    levels = {}
    for text in texts:
        for level, number, name in HINT_LINE.findall(text):
            if int(number) == chapter:
                levels[name] = max(levels.get(name, 0), int(level))
    return levels


def saved_hint_levels(nb, chapter):
    """The hint levels the student's own session printed, from the outputs saved in the notebook."""
    return hint_levels([text for cell in nb.get("cells", []) for text in output_texts(cell)], chapter)
