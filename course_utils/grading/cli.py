"""Grade a folder of handed-in exercise notebooks: ``python3 course.py grade SUBMISSIONS_DIR``.

Every ``.ipynb`` in the folder is run top to bottom in its own process and its own Jupyter
kernel (an error in a cell does not stop the later cells), with a time limit per notebook
enforced from outside. The points do not come from anything the notebook prints or writes: before
the first cell, the grader installs its own copy of the checkers in the kernel; after the cell of
each exercise (and again at the end) it checks the answers itself, by the names of the exercise's
check call, and accepts only results signed with a key the notebook never sees (see
:mod:`course_utils.grading`). The chapter is read from the notebook's cells (and its metadata).

It writes ``SUBMISSIONS_DIR/grades.csv`` with the columns of :data:`COLUMNS` (one row per
exercise per submission) and prints a summary per submission and per exercise.

Exit status: 0 when the folder was graded (whatever the notebooks did), 2 for bad usage.
"""
import argparse
import hashlib
import os
import secrets
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from course_utils.grading import records
from course_utils.grading.report import COLUMNS, summary, write_csv
from course_utils.grading.sandbox import ENTRY
from course_utils.grading.submission import (NotANotebook, identify_chapter, read_notebook, saved_hint_levels,
                                             suspicious_code)
from course_utils.notebook_runner import run_in_child

__all__ = ["COLUMNS", "DEFAULT_TIMEOUT", "find_notebooks", "grade_folder", "grade_notebook", "main"]

DEFAULT_TIMEOUT = 300
CSV_NAME = "grades.csv"
PACKAGE_DIR = Path(__file__).resolve().parent
SANDBOX = PACKAGE_DIR / "grading" / "sandbox.py"


def package_digests():
    """SHA-256 of every ``.py`` file of ``course_utils``, by path relative to the package folder."""
    return {p.relative_to(PACKAGE_DIR).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _not_graded(submission, why, chapter="", flags=""):
    return [{"submission": submission, "chapter": chapter, "exercise": "", "points": 0, "max_points": 0,
             "status": f"not graded: {why}", "hints": "", "flags": flags, "feedback": ""}]


def _kernel_env(keras, dtensor):
    from course_utils.checkers.core import GRADER_RUN_ENV
    from course_utils.notebook_setup import setup_environment

    env = dict(os.environ, COURSE_OFFLINE="1", **{GRADER_RUN_ENV: "1"}, **setup_environment(keras, dtensor))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def _status(record, exercise, outcome, timeout, answer_cell, cell_ids):
    """The status of an exercise from its best record (or its absence) and how the run went."""
    report = outcome.get("report", {})
    if record is not None:
        status, extra = record["status"], record["extra"]
        if status == "tampered":
            return f"not checked: the notebook replaced {extra.splitlines()[0]}" + (
                f" (and {len(extra.splitlines()) - 1} more)" if len(extra.splitlines()) > 1 else "") + \
                ", which the checkers rely on"
        if status == "missing":
            raised = report.get("cell_errors", {}).get(answer_cell)
            if raised:
                return f"not checked: its cell raised {raised}"
            where = "" if answer_cell in cell_ids else f" (the exercise's cell {answer_cell} is not in the notebook)"
            return f"not checked: {extra} is not defined{where}"
        if status == "error":
            return f"not checked: the checker failed ({extra[:100]})"
        return status
    if report.get("boot_error"):
        return f"not checked: the grader could not start in the kernel ({report['boot_error'][:100]})"
    if outcome["kind"] == "timeout":
        return f"not checked: time limit ({timeout:g} s) reached before its check ran"
    if outcome["kind"] == "kernel died":
        return "not checked: the kernel died before its check ran"
    if outcome["kind"] == "failed":
        return f"not checked: the notebook could not be run ({outcome.get('detail', '')[:100]})"
    if exercise in report.get("check_errors", {}):
        return f"not checked: the notebook interfered with the grader's check ({report['check_errors'][exercise][:80]})"
    return "not checked: its check did not run"


def grade_notebook(path, submission, timeout=DEFAULT_TIMEOUT, chapter=None, hint_cost=0.0, digests=None):
    """Run one handed-in notebook under the grader and return its rows for ``grades.csv``.

    Args:
        path: the notebook file.
        submission: its name in the table (the path relative to the submissions folder).
        timeout: seconds the whole notebook may take, kernel start included.
        chapter: grade it as this chapter (default: the chapter its cells and metadata name).
        hint_cost: points taken off an exercise per hint level the student used.
        digests: :func:`package_digests` (computed once per folder by :func:`grade_folder`).

    Returns:
        ``(rows, note)``: one row per exercise (dicts keyed by ``COLUMNS``), or one "not graded"
        row, and a short note about the run (its time, a time-out, the cells that raised errors).

    Example:
        >>> rows, note = grade_notebook(Path("submissions/alice_04.ipynb"), "alice_04.ipynb", timeout=120)
        >>> rows[0]["points"], rows[0]["status"]
        (2, 'correct')
    """
    from course_utils.checkers import CHAPTER_MODULES, chapter_definition
    from course_utils.checkers.notebook_cells import CHAPTERS

    try:
        nb = read_notebook(path)
    except NotANotebook as err:
        return _not_graded(submission, f"not a readable notebook ({str(err)[:100]})"), ""
    answer_cells = {number: {e["cell"] for e in CHAPTERS[number]["exercises"].values()} for number in CHAPTER_MODULES}
    number, chapter_note = identify_chapter(nb, answer_cells, chapter)
    flags = suspicious_code(nb) + ([chapter_note] if chapter_note else [])
    if number is None:
        return _not_graded(submission, "the notebook has no course.chapter metadata and none of its cells is an "
                                       "exercise cell", flags="; ".join(flags)), ""
    if number not in CHAPTER_MODULES:
        return _not_graded(submission, f"chapter {number} has no graded exercises", number, "; ".join(flags)), ""
    definition, cells = chapter_definition(number), CHAPTERS[number]
    max_points = definition.max_points()
    checks = [{"exercise": name, "cell": cells["exercises"][name]["cell"], "max_points": points}
              for name, points in max_points.items()]
    key = secrets.token_bytes(32)
    digests = digests or package_digests()
    mode = "graded" if nb.metadata.get("course", {}).get("mode") == "graded" else "self-study"
    with tempfile.TemporaryDirectory(prefix="course-grade-") as scratch:
        results = Path(scratch) / "results"
        results.touch(mode=0o600)
        payload = {
            "cells": [{"cell_type": c.cell_type, "source": c.source, "id": c.get("id")} for c in nb.cells],
            "chapter": number, "checks": checks, "key": key.hex(), "entry": ENTRY,
            "sandbox_digest": digests["grading/sandbox.py"], "kernel_config_path": str(Path(scratch) / "kernel.json"),
            "kernel_config": {"key": key.hex(), "results": str(results), "package_dir": str(PACKAGE_DIR),
                              "digests": digests, "chapter": number, "mode": mode},
        }
        outcome = run_in_child("course_utils.grading.session:grade_cells", payload, timeout,
                               env=_kernel_env(cells["keras"], cells["dtensor"]))
        lines = results.read_text(errors="replace").splitlines(keepends=True)
    decoded = [records.decode(key, line) for line in lines]
    valid = [r for r in decoded if r is not None]
    if len(valid) < len(decoded):
        flags.append(f"{len(decoded) - len(valid)} forged line(s) in the grader's results")
    if outcome.get("report", {}).get("check_errors"):
        flags.append("the notebook interfered with the grader's checks")
    report = next((r for r in valid if r["at"] == "report"), None)
    if report is not None:
        own, *changed = report["extra"].split("\n")
        if own and not Path(own).resolve().is_relative_to(PACKAGE_DIR):
            flags.append(f"imports another course_utils ({own})")
        if changed:
            flags.append("replaced " + ", ".join(changed[:5]) + (" ..." if len(changed) > 5 else ""))
    hints = saved_hint_levels(nb, number)
    for name, level in outcome.get("report", {}).get("hints", {}).items():
        hints[name] = max(level, hints.get(name, 0))
    cell_ids = {c.get("id") for c in nb.cells}
    rows = []
    for item in checks:
        name = item["exercise"]
        mine = [r for r in valid if r["exercise"] == name]
        # The check right after the exercise's cell counts, unless the second chance at the end scored more.
        best = max(mine, key=lambda r: (r["points"], r["at"] == "after")) if mine else None
        points = max(0, min(best["points"], item["max_points"])) if best else 0
        points = max(0.0, points - hint_cost * hints.get(name, 0)) if hint_cost else points
        rows.append({"submission": submission, "chapter": number, "exercise": name, "points": points,
                     "max_points": item["max_points"],
                     "status": _status(best, name, outcome, timeout, item["cell"], cell_ids),
                     "hints": hints.get(name, ""), "flags": "; ".join(flags),
                     "feedback": best["feedback"] if best else ""})
    note = f"{outcome['seconds']:.1f} s" + (f", {outcome['kind']}" if outcome["kind"] != "completed" else "")
    cell_errors = outcome.get("report", {}).get("cell_errors", {})
    if cell_errors:
        cell, error = next(iter(cell_errors.items()))
        note += f", {len(cell_errors)} cell(s) raised an error (first: cell {cell}, {error[:120]})"
    return rows, note


def find_notebooks(folder, recursive=False):
    """The ``.ipynb`` files to grade, sorted; hidden folders (``.ipynb_checkpoints``) are skipped.

    Example:
        >>> find_notebooks("submissions")
        [PosixPath('submissions/alice_04.ipynb'), PosixPath('submissions/bob_04.ipynb')]
    """
    folder = Path(folder)
    candidates = folder.rglob("*.ipynb") if recursive else folder.glob("*.ipynb")
    return sorted(p for p in candidates
                  if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts))


def grade_folder(folder, timeout=DEFAULT_TIMEOUT, recursive=False, jobs=None, echo=print, output=None, chapter=None,
                 hint_cost=0.0):
    """Grade every notebook in ``folder`` and write the table to ``output`` (default ``folder/grades.csv``).

    Args:
        folder: the folder of handed-in notebooks.
        timeout: seconds each notebook may take.
        recursive: also grade notebooks in subfolders.
        jobs: how many notebooks to run at the same time (default: one per CPU core).
        echo: where progress lines go.
        output: the CSV file to write.
        chapter: grade every notebook as this chapter (default: each notebook's own).
        hint_cost: points taken off per hint level used (default 0: hints are free).

    Returns:
        The rows written, as dicts keyed by ``COLUMNS``.

    Example:
        >>> rows = grade_folder("submissions", timeout=120)   # writes submissions/grades.csv
    """
    folder = Path(folder)
    jobs = jobs or os.cpu_count() or 1
    notebooks = find_notebooks(folder, recursive)
    digests = package_digests()
    echo(f"Grading {len(notebooks)} notebook(s) in {folder} (time limit {timeout:g} s each, {jobs} at a time).")
    done = []

    def grade_one(path):
        submission = path.relative_to(folder).as_posix()
        rows, note = grade_notebook(path, submission, timeout, chapter, hint_cost, digests)
        graded = not rows[0]["status"].startswith("not graded")
        result = f"{sum(r['points'] for r in rows):g}/{sum(r['max_points'] for r in rows)} points" if graded \
            else rows[0]["status"]
        done.append(submission)
        echo(f"  [{len(done)}/{len(notebooks)}] {submission}: {result}" + (f" ({note})" if note else "")
             + (" FLAGGED" if rows[0]["flags"] else ""))
        return rows

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        rows = [row for notebook_rows in pool.map(grade_one, notebooks) for row in notebook_rows]
    write_csv(rows, Path(output) if output else folder / CSV_NAME)
    return rows


def main(argv=None):
    """The command line (see ``--help``). Returns 0 when the folder was graded, 2 for bad usage."""
    parser = argparse.ArgumentParser(
        prog="python3 course.py grade",
        description="Run every handed-in exercise notebook in a folder, each in its own kernel with a time "
                    "limit, check every exercise with the grader's own checkers, and write FOLDER/grades.csv.")
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
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        print(f"error: {folder} is not a folder. Give the folder that holds the handed-in notebooks.", file=sys.stderr)
        return 2
    if args.timeout <= 0 or (args.jobs is not None and args.jobs < 1) or args.hint_cost < 0:
        print("error: --timeout must be a positive number of seconds, --jobs at least 1 and --hint-cost not "
              "negative.", file=sys.stderr)
        return 2
    from course_utils.checkers import CHAPTER_MODULES

    if args.chapter is not None and args.chapter not in CHAPTER_MODULES:
        print(f"error: --chapter {args.chapter}: there are graded exercises for chapters {sorted(CHAPTER_MODULES)}.",
              file=sys.stderr)
        return 2
    output = Path(args.output) if args.output else folder / CSV_NAME
    try:
        output.open("a").close()
    except OSError as err:
        print(f"error: cannot write the table to {output} ({err}). Use --output to choose another file.",
              file=sys.stderr)
        return 2
    rows = grade_folder(folder, timeout=args.timeout, recursive=args.recursive, jobs=args.jobs, output=output,
                        chapter=args.chapter, hint_cost=args.hint_cost)
    print()
    print(summary(rows) if rows else "No notebooks found (only *.ipynb files are graded).")
    print(f"\nWrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
