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
The chapter is read from the notebook's cells (and its metadata); the feedback's mode and the
cost of a hint come from the command line, never from the notebook.
The grading of one notebook is :func:`~course_utils.grading.notebook.grade_notebook`; this module
reads the folder, runs the notebooks side by side and keeps the table.

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
from dataclasses import replace
from pathlib import Path

from course_utils.grading.notebook import (DEFAULT_TIMEOUT, FEEDBACK_MODES, Settings, grade_notebook, make_handout,
                                           not_graded, resolve_sandbox)
from course_utils.grading.roster import RosterError, default_key_path, load_key, read_roster, student_of
from course_utils.grading.report import COLUMNS, digest_path, printable, summary, write_csv
from course_utils.grading.sandbox import DISK_LIMIT, MEMORY_LIMIT, NOT_SANDBOXED, SANDBOXES, SandboxUnavailable
from course_utils.grading.submission import NotANotebook, read_submission

__all__ = ["COLUMNS", "DEFAULT_TIMEOUT", "NOT_SANDBOXED", "SANDBOXES", "Settings", "find_notebooks", "grade_folder",
           "grade_notebook", "main", "printable", "resolve_sandbox"]

CSV_NAME = "grades.csv"


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


def grade_folder(folder, recursive=False, jobs=None, echo=print, output=None, settings=None, roster=None, key=None,
                 **options):
    """Grade every notebook in ``folder`` and write the table to ``output`` (default ``folder/grades.csv``).

    Every notebook is read once before any runs (and kept in the grader's temporary folder, not in its
    memory, until its turn). The table (and its SHA-256, in ``output.sha256``)
    is rewritten as each submission's results arrive. A submission the grader itself fails on gets a
    "not graded" row; the run goes on. Every line of progress is one line per submission, whatever
    its file name or errors hold (:func:`~course_utils.grading.report.printable`).

    Args:
        folder: the folder of handed-in notebooks.
        recursive: also grade notebooks in subfolders.
        jobs: how many notebooks to run at the same time (default: one per CPU core).
        echo: where progress lines go.
        output: the CSV file to write.
        settings: the run's :class:`~course_utils.grading.notebook.Settings` (default: made from
            ``options``: ``timeout``, ``chapter``, ``hint_cost``, ``feedback``, ``sandbox``,
            ``memory_limit``, ``disk_limit``).
        roster, key: the roster's ids and the course key (:mod:`course_utils.grading.roster`): each submission is
            graded as the student its path names, against their variant; one that names no id (or several) gets
            a "not graded" row that says so. Without them, every exercise has its defaults.

    Returns:
        The rows written, as dicts keyed by ``COLUMNS``.

    Raises:
        SandboxUnavailable: ``sandbox="bwrap"`` and the sandbox cannot start here (nothing is run).

    Example (not run by the doctests: it grades a folder of submissions; tests/grading do):
        >>> rows = grade_folder("submissions", timeout=120)   # writes submissions/grades.csv  # doctest: +SKIP
    """
    folder = Path(folder)
    settings = settings or Settings(**options)
    mode, warning = resolve_sandbox(settings.sandbox)
    settings = replace(settings, sandbox=mode)
    jobs = jobs or os.cpu_count() or 1
    notebooks = find_notebooks(folder, recursive)
    names = {path: path.relative_to(folder).as_posix() for path in notebooks}
    scratch = tempfile.TemporaryDirectory(prefix="course-handout-", ignore_cleanup_errors=True)
    handout = make_handout(scratch.name)
    contents = {}
    for number, path in enumerate(notebooks):  # read once, before any notebook runs; kept on disk, not in memory
        try:
            data = read_submission(path)
        except NotANotebook as err:
            contents[path] = err
            continue
        contents[path] = Path(scratch.name) / f"submission-{number}.ipynb"
        with os.fdopen(os.open(contents[path], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(data)
    table = _Table(Path(output) if output else folder / CSV_NAME, [names[p] for p in notebooks])
    echo(f"Grading {len(notebooks)} notebook(s) in {printable(str(folder))} (time limit {settings.timeout:g} s each, "
         f"{jobs} at a time, sandbox: {mode}, feedback: {settings.feedback}).")
    if warning:
        echo(warning)

    def grade_one(path):
        submission = names[path]
        try:
            student = student_of(submission, roster) if roster is not None else None
            data = contents[path] if isinstance(contents[path], NotANotebook) else contents[path].read_bytes()
            rows, note = grade_notebook(path, submission, settings, handout, data, student=student, key=key)
        except RosterError as err:  # a submission whose name is no roster id's (or several ids')
            rows, note = not_graded(submission, f"its name maps to no single student: {err}", sandbox=mode), ""
        except Exception as err:  # a bug of the grader's, or a submission it did not foresee: the run goes on
            echo(f"  the grader failed on {printable(submission)}: "
                 + printable("".join(traceback.format_exception(err)).rstrip()))
            rows, note = not_graded(submission, f"the grader failed on it ({type(err).__name__}: {str(err)[:100]})",
                                    sandbox=mode), ""
        rows, note = [{name: printable(value) for name, value in row.items()} for row in rows], printable(note)
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
    parser.add_argument("--feedback", choices=FEEDBACK_MODES, default=FEEDBACK_MODES[0],
                        help="the feedback written to the table: graded (default: what is wrong, never the right "
                             "answer) or self-study (also the right answer); a notebook's metadata does not change it")
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
    parser.add_argument("--disk-limit", type=float, default=DISK_LIMIT / 2 ** 30,
                        help=f"GiB a sandbox may write in all (its folders, /tmp and /dev/shm; held in memory, never "
                             f"on your disk; default {DISK_LIMIT / 2 ** 30:g})")
    parser.add_argument("--roster", metavar="ROSTER.csv",
                        help="grade each submission as the student its file or folder name names (the roster's `id` "
                             "column), against that student's own variant of the questions (the per-student hand-outs "
                             "of `build --graded-handouts OUT --roster ROSTER.csv`)")
    parser.add_argument("--key", metavar="FILE",
                        help=f"the course key the hand-outs were made with (default {default_key_path()}); only "
                             f"with --roster; it never enters a sandbox")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        print(f"error: {folder} is not a folder. Give the folder that holds the handed-in notebooks.", file=sys.stderr)
        return 2
    if min(args.timeout, args.memory_limit, args.disk_limit) <= 0 or (args.jobs is not None and args.jobs < 1) \
            or args.hint_cost < 0:
        print("error: --timeout, --memory-limit and --disk-limit must be positive, --jobs at least 1 and --hint-cost "
              "not negative.", file=sys.stderr)
        return 2
    from course_utils.checkers import CHAPTER_MODULES

    if args.chapter is not None and args.chapter not in CHAPTER_MODULES:
        print(f"error: --chapter {args.chapter}: there are graded exercises for chapters {sorted(CHAPTER_MODULES)}.",
              file=sys.stderr)
        return 2
    roster = key = None
    if args.key and not args.roster:
        print("error: --key is used with --roster (the students whose variants it draws).", file=sys.stderr)
        return 2
    if args.roster:
        try:
            roster = [student["id"] for student in read_roster(args.roster)]
            key, key_path, _ = load_key(args.key)
        except RosterError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"Grading against the variants of {len(roster)} student(s) of {args.roster}, drawn with the course key "
              f"{key_path}.")
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
    settings = Settings(timeout=args.timeout, chapter=args.chapter, hint_cost=args.hint_cost, feedback=args.feedback,
                        sandbox=mode, memory_limit=int(args.memory_limit * 2 ** 30),
                        disk_limit=int(args.disk_limit * 2 ** 30))
    rows = grade_folder(folder, recursive=args.recursive, jobs=args.jobs, output=output, settings=settings,
                        roster=roster, key=key)
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
