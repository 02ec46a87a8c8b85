"""Grade a folder of handed-in exercise notebooks: ``python3 course.py grade SUBMISSIONS_DIR``.

The grader first reads every ``.ipynb`` in the folder once (a symbolic link, a FIFO or another
special file is not followed or opened, but gets its row). Then it runs each notebook top to bottom
in its own Jupyter kernel (an error in a cell does not stop the later cells), with a time limit per
notebook enforced from outside, and by default in its own bubblewrap sandbox
(:mod:`course_utils.grading.sandbox`: no view of the other submissions, the grader or the network;
every process it started is killed when it ends). The kernel imports a copy of ``course_utils``
without solutions or judging code (:mod:`course_utils.grading.handout`). The points do not come from
anything the notebook prints: after the cell of each exercise (and again at the end) the grader asks
the kernel for that exercise's answers as plain data, by the names of the exercise's check call (for
an answer that is code: what it computes on inputs the grader draws at that moment), and judges them
in its own process, which runs none of the notebook's code (:mod:`course_utils.grading.session`).
The chapter is read from the notebook's cells (and its metadata).

It writes ``SUBMISSIONS_DIR/grades.csv`` with the columns of :data:`COLUMNS` (one row per
exercise per submission), rewritten as each submission's results arrive, and its SHA-256 in
``grades.csv.sha256``; at the end it prints a summary per submission and per exercise.

Exit status: 0 when the folder was graded (whatever the notebooks did), 2 for bad usage or a
sandbox that was asked for and cannot start.
"""
import argparse
import os
import sys
import tempfile
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from course_utils.grading.report import COLUMNS, digest_path, summary, write_csv
from course_utils.grading.session import read_results
from course_utils.grading.sandbox import MEMORY_LIMIT, Box, SandboxUnavailable, check_available
from course_utils.grading.submission import (NotANotebook, identify_chapter, parse_notebook, read_submission,
                                             saved_hint_levels, suspicious_code)
from course_utils.tools.notebook_runner import run_in_child

__all__ = ["COLUMNS", "DEFAULT_TIMEOUT", "NOT_SANDBOXED", "SANDBOXES", "find_notebooks", "grade_folder",
           "grade_notebook", "main", "printable", "resolve_sandbox"]

DEFAULT_TIMEOUT = 300
CSV_NAME = "grades.csv"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
SANDBOXES = ("auto", "bwrap", "none")
NOT_SANDBOXED = ("WARNING: not sandboxed (--sandbox none). Each notebook ran with your user's permissions: it could "
                 "read and change your files, the other submissions, the grader and grades.csv, use the network, "
                 "and leave processes running. Use it only for notebooks you trust.")


def resolve_sandbox(requested="auto"):
    """Which sandbox the notebooks run in: ``("bwrap", "")`` or ``("none", warning)``.

    Args:
        requested: ``"bwrap"`` (the sandbox or an error), ``"none"``, or ``"auto"`` (the sandbox
            where it works, otherwise none with the reason in the warning).

    Raises:
        SandboxUnavailable: ``"bwrap"`` was asked for and cannot start here.
        ValueError: ``requested`` is not one of :data:`SANDBOXES`.

    Example:
        >>> resolve_sandbox("auto")
        ('bwrap', '')
    """
    if requested not in SANDBOXES:
        raise ValueError(f"sandbox must be one of {SANDBOXES}, not {requested!r}")
    if requested == "none":
        return "none", NOT_SANDBOXED
    try:
        check_available()
    except SandboxUnavailable as err:
        if requested == "bwrap":
            raise
        return "none", f"{NOT_SANDBOXED} (The sandbox cannot start here: {err}.)"
    return "bwrap", ""


def _not_graded(submission, why, chapter="", flags="", sandbox=""):
    return [{"submission": submission, "chapter": chapter, "exercise": "", "points": 0, "max_points": 0,
             "status": f"not graded: {why}", "hints": "", "flags": flags, "feedback": "", "sandbox": sandbox}]


def _kernel_env(keras, dtensor, sandboxed=False):
    from course_utils.checkers.core import GRADER_RUN_ENV
    from course_utils.notebook_setup import setup_environment

    env = dict(os.environ, COURSE_OFFLINE="1", **{GRADER_RUN_ENV: "1"}, **setup_environment(keras, dtensor))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if sandboxed and not env.get("TFDS_DATA_DIR") and (Path.home() / "tensorflow_datasets").is_dir():
        env["TFDS_DATA_DIR"] = str(Path.home() / "tensorflow_datasets")  # HOME is /tmp in the sandbox
    return env


def _status(record, exercise, outcome, timeout, answer_cell, cell_ids):
    """The status of an exercise from its best record (or its absence) and how the run went."""
    report = outcome.get("report", {})
    if record is not None:
        status, extra = record["status"], record.get("extra", "")
        if status == "missing":
            raised = report.get("cell_errors", {}).get(answer_cell)
            if raised:
                return f"not checked: its cell raised {raised}"
            where = "" if answer_cell in cell_ids else f" (the exercise's cell {answer_cell} is not in the notebook)"
            return f"not checked: {extra} is not defined{where}"
        if status == "no answers":
            why = report.get("check_errors", {}).get(exercise, "the kernel wrote no answers")
            return f"not checked: the notebook interfered with the grader's request for its answers ({why[:80]})"
        return status
    if outcome["kind"] == "timeout":
        return f"not checked: time limit ({timeout:g} s) reached before its check ran"
    if outcome["kind"] == "kernel died":
        return "not checked: the kernel died before its check ran"
    if outcome["kind"] == "failed":
        return f"not checked: the notebook could not be run ({outcome.get('detail', '')[:100]})"
    return "not checked: its check did not run"


def _handout(scratch):
    """A stripped copy of the package for the kernels (:mod:`course_utils.grading.handout`), readable by any user."""
    from course_utils.grading.handout import handout_package

    folder = Path(scratch) / "handout"
    folder.mkdir(mode=0o755)
    os.chmod(scratch, 0o755)
    return handout_package(PACKAGE_DIR, folder)


def grade_notebook(path, submission, timeout=DEFAULT_TIMEOUT, chapter=None, hint_cost=0.0, handout=None,
                   sandbox="auto", data=None, memory_limit=MEMORY_LIMIT):
    """Run one handed-in notebook under the grader and return its rows for ``grades.csv``.

    Args:
        path: the notebook file.
        submission: its name in the table (the path relative to the submissions folder).
        timeout: seconds the whole notebook may take, kernel start included.
        chapter: grade it as this chapter (default: the chapter its cells and metadata name).
        hint_cost: points taken off an exercise per hint level used.
        handout: the package copy the kernel imports (made once per folder by :func:`grade_folder`;
            default: made now).
        sandbox: ``"auto"``, ``"bwrap"`` or ``"none"`` (see :func:`resolve_sandbox`).
        data: the file's bytes, already read (default: read ``path`` now, see
            :func:`~course_utils.grading.submission.read_submission`), or the ``NotANotebook`` that reading raised.
        memory_limit: bytes of address space per process in the sandbox.

    Returns:
        ``(rows, note)``: one row per exercise (dicts keyed by ``COLUMNS``), or one "not graded"
        row, and a short note about the run (its time, a time-out, the cells that raised errors).

    Raises:
        SandboxUnavailable: ``sandbox="bwrap"`` and the sandbox cannot start here.

    Example (not run by the doctests: it grades a submission in a sandbox; tests/grading do):
        >>> rows, note = grade_notebook(Path("submissions/alice_04.ipynb"), "alice_04.ipynb", timeout=120)  # doctest: +SKIP
        >>> rows[0]["points"], rows[0]["status"], rows[0]["sandbox"]  # doctest: +SKIP
        (2, 'correct', 'bwrap')
    """
    from course_utils.checkers import CHAPTER_MODULES, chapter_definition
    from course_utils.checkers.core import notebook_cells

    chapters = notebook_cells()

    mode = resolve_sandbox(sandbox)[0]
    try:
        if data is None:
            data = read_submission(path)
        if isinstance(data, NotANotebook):
            raise data
        nb = parse_notebook(data)
    except NotANotebook as err:
        return _not_graded(submission, f"not a readable notebook ({str(err)[:100]})", sandbox=mode), ""
    answer_cells = {number: {e["cell"] for e in chapters[number]["exercises"].values()} for number in CHAPTER_MODULES}
    number, chapter_note = identify_chapter(nb, answer_cells, chapter)
    flags = suspicious_code(nb) + ([chapter_note] if chapter_note else [])
    if number is None:
        return _not_graded(submission, "the notebook has no course.chapter metadata and none of its cells is an "
                                       "exercise cell", flags="; ".join(flags), sandbox=mode), ""
    if number not in CHAPTER_MODULES:
        return _not_graded(submission, f"chapter {number} has no graded exercises", number, "; ".join(flags),
                           mode), ""
    cells = chapters[number]
    max_points = chapter_definition(number).max_points()
    checks = [{"exercise": name, "cell": cells["exercises"][name]["cell"], "max_points": points}
              for name, points in max_points.items()]
    hand_out = "graded" if nb.metadata.get("course", {}).get("mode") == "graded" else "self-study"
    env = _kernel_env(cells["keras"], cells["dtensor"], sandboxed=mode == "bwrap")
    with tempfile.TemporaryDirectory(prefix="course-grade-", ignore_cleanup_errors=True) as scratch:
        handout = Path(handout) if handout else _handout(scratch)
        results = Path(scratch) / "results.jsonl"  # written by the driver, out of the kernel's reach
        if mode == "bwrap":
            box = Box(Path(scratch) / "box", memory_limit=memory_limit, read_only=[env.get("TFDS_DATA_DIR", "")],
                      package=handout)
            box.prepare(data, Path(submission).name)
            exports = box.exports
            spec = {"argv": box.kernel_argv(env), "workdir": str(box.work), "connection_dir": str(box.conn),
                    "owner": box.owner}
            kernel_env = None
        else:
            exports, spec = Path(scratch) / "exports", None
            exports.mkdir()
            kernel_env = env
        payload = {"cells": [{"cell_type": c.cell_type, "source": c.source, "id": c.get("id")} for c in nb.cells],
                   "chapter": number, "mode": hand_out, "checks": checks, "exports": str(exports),
                   "results": str(results)}
        outcome = run_in_child("course_utils.grading.session:grade_cells", payload, timeout, env=kernel_env,
                               sandbox=spec, kernel_path=None if spec else str(handout.parent))
        records = read_results(results)
    if outcome.get("report", {}).get("check_errors"):
        flags.append("the notebook interfered with the grader's requests for its answers")
    if outcome.get("sandbox_gone") is False:
        flags.append("some of its processes were still running 10 s after they were killed")
    hints = saved_hint_levels(nb, number)
    for name, level in outcome.get("report", {}).get("hints", {}).items():
        hints[name] = max(level, hints.get(name, 0))
    cell_ids = {c.get("id") for c in nb.cells}
    rows = []
    for item in checks:
        name = item["exercise"]
        mine = [r for r in records if r["exercise"] == name]
        # The check right after the exercise's cell counts, unless the second chance at the end scored more.
        best = max(mine, key=lambda r: (r["points"], r["at"] == "after")) if mine else None
        points = max(0, min(best["points"], item["max_points"])) if best else 0
        points = max(0.0, points - hint_cost * hints.get(name, 0)) if hint_cost else points
        rows.append({"submission": submission, "chapter": number, "exercise": name, "points": points,
                     "max_points": item["max_points"],
                     "status": _status(best, name, outcome, timeout, item["cell"], cell_ids),
                     "hints": hints.get(name, ""), "flags": "; ".join(flags),
                     "feedback": best["feedback"] if best else "", "sandbox": mode})
    note = f"{outcome['seconds']:.1f} s" + (f", {outcome['kind']}" if outcome["kind"] != "completed" else "")
    cell_errors = outcome.get("report", {}).get("cell_errors", {})
    if cell_errors:
        cell, error = next(iter(cell_errors.items()))
        note += f", {len(cell_errors)} cell(s) raised an error (first: cell {cell}, {error[:120]})"
    return rows, note


def printable(value):
    """``value`` with the control characters a notebook may have put in its text (terminal escape codes that
    could rewrite the grader's output) shown as ``?``; line breaks and tabs are kept. Non-strings unchanged.

    Example:
        >>> printable("boom\\x1b[2K\\r[1/3] bob: 16/16")
        'boom?[2K?[1/3] bob: 16/16'
    """
    if not isinstance(value, str):
        return value
    return "".join(c if c in "\n\t" or (c >= " " and c != "\x7f" and not "\x80" <= c <= "\x9f") else "?"
                   for c in value)


def find_notebooks(folder, recursive=False):
    """The ``.ipynb`` entries to grade, sorted; hidden folders (``.ipynb_checkpoints``) are skipped, and
    so are folders named ``*.ipynb``. Symbolic links, FIFOs and other special files named ``*.ipynb``
    are listed (each gets a "not graded" row); a symbolic link to a folder is never entered.

    Example:
        >>> folder = Path(tempfile.mkdtemp())
        >>> for name in ("bob_04.ipynb", "alice_04.ipynb", "notes.txt", ".ipynb_checkpoints/bob_04.ipynb"):
        ...     (folder / name).parent.mkdir(exist_ok=True)
        ...     _ = (folder / name).write_text("{}")
        >>> [path.name for path in find_notebooks(folder, recursive=True)]
        ['alice_04.ipynb', 'bob_04.ipynb']
    """
    folder = Path(folder)
    found = []
    for parent, subfolders, names in os.walk(folder, followlinks=False):
        subfolders[:] = sorted(d for d in subfolders if recursive and not d.startswith("."))
        # os.walk lists a symbolic link to a folder among the folders: a *.ipynb one is a submission too
        for name in names + [d for d in os.listdir(parent) if os.path.islink(os.path.join(parent, d))
                             and os.path.isdir(os.path.join(parent, d))]:
            if name.endswith(".ipynb") and not name.startswith("."):
                found.append(Path(parent) / name)
    return sorted(set(found))


class _Table:
    """``grades.csv`` as results arrive: rewritten (with its digest) after each submission, rows in
    the order of the notebooks, so that a run that stops early keeps every grade it finished."""

    def __init__(self, path, order):
        self.path, self.order, self.done, self.lock = Path(path), order, {}, threading.Lock()

    def rows(self):
        return [row for name in self.order if name in self.done for row in self.done[name]]

    def add(self, submission, rows, echo):
        with self.lock:
            self.done[submission] = rows
            try:
                write_csv(self.rows(), self.path)
            except OSError as err:  # tried again after the next submission and at the end
                echo(f"  (could not write {self.path} yet: {err})")


def grade_folder(folder, timeout=DEFAULT_TIMEOUT, recursive=False, jobs=None, echo=print, output=None, chapter=None,
                 hint_cost=0.0, sandbox="auto", memory_limit=MEMORY_LIMIT):
    """Grade every notebook in ``folder`` and write the table to ``output`` (default ``folder/grades.csv``).

    Every notebook is read once before any runs. The table (and its SHA-256, in ``output.sha256``)
    is rewritten as each submission's results arrive. A submission the grader itself fails on gets a
    "not graded" row; the run goes on.

    Args:
        folder: the folder of handed-in notebooks.
        timeout: seconds each notebook may take.
        recursive: also grade notebooks in subfolders.
        jobs: how many notebooks to run at the same time (default: one per CPU core).
        echo: where progress lines go.
        output: the CSV file to write.
        chapter: grade every notebook as this chapter (default: each notebook's own).
        hint_cost: points taken off per hint level used (default 0: hints are free).
        sandbox: ``"auto"`` (default), ``"bwrap"`` or ``"none"`` (see :func:`resolve_sandbox`).
        memory_limit: bytes of address space per process in the sandbox.

    Returns:
        The rows written, as dicts keyed by ``COLUMNS``.

    Raises:
        SandboxUnavailable: ``sandbox="bwrap"`` and the sandbox cannot start here (nothing is run).

    Example (not run by the doctests: it grades a folder of submissions; tests/grading do):
        >>> rows = grade_folder("submissions", timeout=120)   # writes submissions/grades.csv  # doctest: +SKIP
    """
    folder = Path(folder)
    mode, warning = resolve_sandbox(sandbox)
    jobs = jobs or os.cpu_count() or 1
    notebooks = find_notebooks(folder, recursive)
    names = {path: path.relative_to(folder).as_posix() for path in notebooks}
    contents = {}
    for path in notebooks:  # read once, before any notebook runs
        try:
            contents[path] = read_submission(path)
        except NotANotebook as err:
            contents[path] = err
    scratch = tempfile.TemporaryDirectory(prefix="course-handout-", ignore_cleanup_errors=True)
    handout = _handout(scratch.name)
    table = _Table(Path(output) if output else folder / CSV_NAME, [names[p] for p in notebooks])
    echo(f"Grading {len(notebooks)} notebook(s) in {folder} (time limit {timeout:g} s each, {jobs} at a time, "
         f"sandbox: {mode}).")
    if warning:
        echo(warning)

    def grade_one(path):
        submission = names[path]
        try:
            rows, note = grade_notebook(path, submission, timeout, chapter, hint_cost, handout, mode, contents[path],
                                        memory_limit)
        except Exception as err:  # a bug of the grader's, or a submission it did not foresee: the run goes on
            echo(printable("".join(traceback.format_exception(err)).rstrip()))
            rows, note = _not_graded(submission, f"the grader failed on it ({type(err).__name__}: {str(err)[:100]})",
                                     sandbox=mode), ""
        rows, note = [{key: printable(value) for key, value in row.items()} for row in rows], printable(note)
        table.add(submission, rows, echo)
        graded = not rows[0]["status"].startswith("not graded")
        result = f"{sum(r['points'] for r in rows):g}/{sum(r['max_points'] for r in rows)} points" if graded \
            else rows[0]["status"]
        echo(f"  [{len(table.done)}/{len(notebooks)}] {printable(submission)}: {result}"
             + (f" ({note})" if note else "") + (" FLAGGED" if rows[0]["flags"] else ""))
        return rows

    with scratch, ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(grade_one, notebooks))
    write_csv(table.rows(), table.path)
    return table.rows()


def main(argv=None):
    """The command line (see ``--help``). Returns 0 when the folder was graded, 2 for bad usage or
    a sandbox that was asked for and cannot start."""
    parser = argparse.ArgumentParser(
        prog="python3 course.py grade",
        description="Run every handed-in exercise notebook in a folder, each in its own kernel and sandbox with a "
                    "time limit, check every exercise with the grader's own checkers, and write FOLDER/grades.csv "
                    "(and its SHA-256 in FOLDER/grades.csv.sha256).")
    parser.add_argument("folder", help="the folder of handed-in .ipynb files")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds each notebook may run, kernel start included (default {DEFAULT_TIMEOUT})")
    parser.add_argument("--jobs", type=int, default=None,
                        help=f"notebooks run at the same time (default: one per CPU core, here {os.cpu_count()})")
    parser.add_argument("--chapter", type=int, default=None, help="grade every notebook as this chapter")
    parser.add_argument("--hint-cost", type=float, default=0.0,
                        help="points taken off an exercise per hint level used (default 0)")
    parser.add_argument("--recursive", action="store_true",
                        help="also grade notebooks in subfolders (e.g. one folder per student)")
    parser.add_argument("--output", help=f"where to write the table (default FOLDER/{CSV_NAME})")
    parser.add_argument("--sandbox", choices=SANDBOXES, default="auto",
                        help="bwrap: run each notebook's kernel in its own bubblewrap sandbox (an error if it cannot "
                             "start); none: no sandbox, the notebooks run with your permissions (a warning in the "
                             "output and the table); auto (default): bwrap where it works, otherwise none")
    parser.add_argument("--memory-limit", type=float, default=MEMORY_LIMIT / 2 ** 30,
                        help=f"GiB of memory (address space) each process in a sandbox may map "
                             f"(default {MEMORY_LIMIT / 2 ** 30:g})")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        print(f"error: {folder} is not a folder. Give the folder that holds the handed-in notebooks.", file=sys.stderr)
        return 2
    if args.timeout <= 0 or (args.jobs is not None and args.jobs < 1) or args.hint_cost < 0 or args.memory_limit <= 0:
        print("error: --timeout and --memory-limit must be positive, --jobs at least 1 and --hint-cost not "
              "negative.", file=sys.stderr)
        return 2
    from course_utils.checkers import CHAPTER_MODULES

    if args.chapter is not None and args.chapter not in CHAPTER_MODULES:
        print(f"error: --chapter {args.chapter}: there are graded exercises for chapters {sorted(CHAPTER_MODULES)}.",
              file=sys.stderr)
        return 2
    output = Path(args.output) if args.output else folder / CSV_NAME
    try:
        if output.is_dir():
            raise IsADirectoryError(f"{output} is a folder")
        tempfile.TemporaryFile(dir=output.parent).close()  # the table is written beside itself, then renamed
    except OSError as err:
        print(f"error: cannot write the table to {output} ({err}). Use --output to choose another file.",
              file=sys.stderr)
        return 2
    try:
        mode, warning = resolve_sandbox(args.sandbox)
    except SandboxUnavailable as err:
        print(f"error: --sandbox bwrap: {err}. Install bubblewrap, or grade with --sandbox none only notebooks "
              f"you trust.", file=sys.stderr)
        return 2
    rows = grade_folder(folder, timeout=args.timeout, recursive=args.recursive, jobs=args.jobs, output=output,
                        chapter=args.chapter, hint_cost=args.hint_cost, sandbox=mode,
                        memory_limit=int(args.memory_limit * 2 ** 30))
    print()
    print(summary(rows) if rows else "No notebooks found (only *.ipynb files are graded).")
    if warning:
        print(f"\n{warning}")
    digest = write_csv(rows, output)  # the same table again: its digest, whatever happened to the file since
    print(f"\nWrote {output} (SHA-256 {digest}, also in {digest_path(output).name}: keep it to notice a later "
          f"edit; check with `sha256sum -c {digest_path(output).name}` in its folder)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
