"""Each chapter executed once for the website: in a fresh kernel, into a cache keyed by what its outputs depend
on, or taken from the chapters the test run executed."""
import datetime
import hashlib
import json
import os
import time
from pathlib import Path

import nbformat

PACKAGE = Path(__file__).resolve().parents[2]  # course_utils/: the helpers the chapters import


class ExecutionError(RuntimeError):
    """A chapter could not be executed; the message names the notebook, the cell and what to do."""


def code_key(nb, root):
    """The cache key of a chapter: a hash of its code cells, of the helpers it imports (``course_utils``'s
    sources, the maintainers' tools left out) and of ``requirements.txt``; a change to any of them runs it again.
    (The prose is not in the key: it is taken from the notebook at each build.)"""
    digest = hashlib.sha256(json.dumps([c.source for c in nb.cells if c.cell_type == "code"]).encode())
    helpers = sorted(p for p in PACKAGE.rglob("*.py") if "tools" not in p.relative_to(PACKAGE).parts)
    for path in [*helpers, Path(root) / "requirements.txt"]:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def with_outputs(nb, ran):
    """``nb`` with the outputs and execution counts of the executed notebook ``ran`` (the same code cells, in
    order) and its run-time record; its text and metadata stay ``nb``'s own."""
    for cell, done in zip([c for c in nb.cells if c.cell_type == "code"],
                          [c for c in ran.cells if c.cell_type == "code"], strict=True):
        cell.outputs, cell.execution_count = done.outputs, done.execution_count
    if "course_run" in ran.metadata:
        nb.metadata["course_run"] = ran.metadata["course_run"]
    return nb


def execute(path, cache, root):
    """The chapter at ``path`` with every code cell's outputs: from ``cache`` (a folder) when nothing it depends
    on changed (:func:`code_key`), else run cell by cell in a fresh kernel started in its folder, timed, and
    cached. ``nb.metadata["course_run"]`` records the run: seconds, cores, date.

    Raises:
        ExecutionError: a cell raised, ran out of time, or killed its kernel; the message names the notebook and
            the cell (numbered from 1, as JupyterLab's "Run All" meets them).
    """
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    from ..notebook_runner import KernelSession, cell_error

    nb = nbformat.read(path, as_version=4)
    cached = Path(cache) / f"{path.stem}-{code_key(nb, root)}.ipynb"
    if cached.is_file():
        return with_outputs(nb, nbformat.read(cached, as_version=4))
    print(f"executing {path.parent.name}/{path.name} ...", flush=True)
    start = time.perf_counter()
    with KernelSession(path.parent, dict(os.environ), cell_timeout=600) as session:
        for number, cell in enumerate((c for c in nb.cells if c.cell_type == "code"), start=1):
            where = f"{path.parent.name}/{path.name}, code cell {number} (id {cell.get('id')}, starting " \
                    f"{(cell.source.strip().splitlines() or [''])[0]!r})"
            try:
                ran = session.execute(cell.source)
            except (CellTimeoutError, DeadKernelError) as err:
                raise ExecutionError(f"{where}: {type(err).__name__}: {str(err)[:300]}") from None
            cell.outputs, cell.execution_count = ran.outputs, number
            error = cell_error(ran)
            if error:
                raise ExecutionError(f"{where} raised {error[0]}: {error[1][:500]}\nRun the notebook in JupyterLab "
                                     f"to see it fail, fix it, then build again: only the chapters that changed "
                                     f"run again.")
    nb.metadata["course_run"] = {"seconds": round(time.perf_counter() - start, 1), "cores": os.cpu_count(),
                                 "date": datetime.date.today().isoformat(), "how": "built"}
    Path(cache).mkdir(parents=True, exist_ok=True)
    for old in Path(cache).glob(f"{path.stem}-*.ipynb"):
        old.unlink()
    nbformat.write(nb, cached)
    return nb


def executed_copy(path, executed, root):
    """The chapter ``path`` with the outputs of its copy in the folder ``executed`` (``notebooks/<name>.ipynb``,
    executed by the tests), or None where there is none or it ran other code than the chapter's."""
    ran = Path(executed) / "notebooks" / path.name if executed else None
    if not ran or not ran.is_file():
        return None
    ran, nb = nbformat.read(ran, as_version=4), nbformat.read(path, as_version=4)
    code = lambda notebook: [c.source for c in notebook.cells if c.cell_type == "code"]
    return with_outputs(nb, ran) if code(ran) == code(nb) else None
