"""Grade a folder of handed-in exercise notebooks: ``python -m course_utils.grade SUBMISSIONS_DIR``.

Every ``.ipynb`` in the folder is executed top to bottom in its own process and its own Jupyter
kernel (errors in a cell don't stop the later cells), with a time limit per notebook that is
enforced from outside: when it runs out, the notebook's whole process group and its kernel's are
killed. The checkers the notebook calls (``ex.q1.check(...)``) append their results to a file
named by ``COURSE_GRADE_FILE``; the last result per exercise counts. The chapter comes from the
notebook's metadata (``course.chapter``), so renamed files grade the same.

It writes ``SUBMISSIONS_DIR/grades.csv`` with the columns
``submission,chapter,exercise,points,max_points,status`` (one row per exercise per submission;
an exercise whose check never ran gets 0 points and a status that says why) and prints a summary
per submission and per exercise.

Statuses: ``correct``, ``partial``, ``incorrect``, ``unanswered`` (the checker ran);
``not checked: <why>`` (it did not: its cell raised, the time limit was reached, the kernel died,
no cell calls it); ``not graded: <why>`` (the whole file: not a readable notebook, no chapter).

Exit status: 0 when the folder was graded (whatever the notebooks did), 2 for bad usage.
"""
import argparse
import asyncio
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["COLUMNS", "DEFAULT_TIMEOUT", "find_notebooks", "grade_folder", "grade_notebook", "main", "summary",
           "write_csv"]

COLUMNS = ["submission", "chapter", "exercise", "points", "max_points", "status"]
DEFAULT_TIMEOUT = 300
GRADE_FILE_ENV = "COURSE_GRADE_FILE"  # the same name as course_utils.checks.GRADE_FILE_ENV
CSV_NAME = "grades.csv"
# Executes one notebook (see _run_one) without importing the course_utils package, so that this
# process stays light: the notebook's own kernel imports TensorFlow if it needs it.
_RUNNER = "import runpy, sys; runpy.run_path(sys.argv[1], run_name='__course_grade_runner__')"


# --------------------------------------------------------------------------------------------
# Running one notebook (in a child process)
# --------------------------------------------------------------------------------------------

def _run_one(notebook_path, result_path, pid_path, cell_timeout):
    """Execute a notebook in a fresh kernel; write what happened to ``result_path`` as JSON."""
    import nbformat
    from jupyter_client.manager import AsyncKernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    outcome = {"kind": "completed", "detail": "", "errors": [], "kernel_stopped": False}
    nb = nbformat.read(notebook_path, as_version=4)
    workdir = Path(result_path).parent / "kernel-cwd"  # inside the caller's scratch folder, which it removes
    workdir.mkdir()

    async def execute():
        km = AsyncKernelManager(kernel_name="python3")
        await km.start_kernel(cwd=str(workdir), env=dict(os.environ))
        pid = getattr(km.provisioner, "pid", None)
        if pid:
            Path(pid_path).write_text(str(pid))
        client = NotebookClient(nb, km=km, timeout=cell_timeout, allow_errors=True, startup_timeout=120,
                                resources={"metadata": {"path": str(workdir)}})
        try:
            await client.async_execute()
        except DeadKernelError:
            outcome["kind"], outcome["detail"] = "kernel died", ""
        except CellTimeoutError:
            outcome["kind"] = "timeout"
        except Exception as err:  # nbclient's own failures, e.g. a kernel that never started
            outcome["kind"], outcome["detail"] = "failed", f"{type(err).__name__}: {err}"
        finally:
            try:
                await km.shutdown_kernel(now=True)
                outcome["kernel_stopped"] = True
            except Exception:
                pass

    asyncio.run(execute())
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                outcome["errors"].append({"cell": index, "ename": output.get("ename", ""),
                                          "evalue": output.get("evalue", "")})
    Path(result_path).write_text(json.dumps(outcome))
    return 0


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _execute(notebook_path, grade_file, timeout):
    """Run one notebook in a child process with a time limit. Returns the outcome dict."""
    scratch = Path(tempfile.mkdtemp(prefix="course-grade-"))
    result_path, pid_path, log_path = scratch / "result.json", scratch / "kernel.pid", scratch / "runner.log"
    env = dict(os.environ)
    env[GRADE_FILE_ENV] = str(grade_file)
    env.setdefault("COURSE_OFFLINE", "1")  # grading never downloads data
    cmd = [sys.executable, "-c", _RUNNER, str(Path(__file__).resolve()), str(notebook_path), str(result_path),
           str(pid_path), str(timeout)]
    start = time.monotonic()
    try:
        with open(log_path, "wb") as log:
            runner = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
            try:
                runner.wait(timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(runner.pid)
                runner.wait()
        kernel_pid = int(pid_path.read_text()) if pid_path.exists() else None
        if timed_out:
            if kernel_pid:
                _kill_group(kernel_pid)
            return {"kind": "timeout", "detail": "", "errors": [], "seconds": time.monotonic() - start}
        if result_path.exists():
            outcome = json.loads(result_path.read_text())
        else:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-3:]
            outcome = {"kind": "failed", "detail": " ".join(tail)[-300:] or f"exit status {runner.returncode}",
                       "errors": []}
        if kernel_pid and not outcome.get("kernel_stopped"):
            _kill_group(kernel_pid)
        outcome["seconds"] = time.monotonic() - start
        return outcome
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# Grading
# --------------------------------------------------------------------------------------------

def _chapter_of(nb):
    course = nb.get("metadata", {}).get("course", {})
    chapter = course.get("chapter") if isinstance(course, dict) else None
    if isinstance(chapter, str) and chapter.strip().isdigit():
        chapter = int(chapter)
    return chapter if isinstance(chapter, int) and not isinstance(chapter, bool) else None


def _read_records(path):
    """The checkers' records: {(chapter, exercise): record}, the last one per exercise winning."""
    records = {}
    if not path.exists():
        return records
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
            key = (int(record["chapter"]), str(record["exercise"]))
            records[key] = {"points": int(record["points"]), "status": str(record["status"])}
        except (ValueError, KeyError, TypeError):
            continue
    return records


def _one_line(text, limit=120):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _why_not_checked(exercise, outcome, cells, timeout):
    """Why the check of ``exercise`` left no record, from how the run ended and the cells' errors."""
    kind = outcome["kind"]
    if kind == "timeout":
        return f"not checked: time limit ({timeout:g} s) reached before its check ran"
    if kind == "kernel died":
        return "not checked: the kernel died before its check ran"
    if kind == "failed":
        return f"not checked: the notebook could not be run ({_one_line(outcome.get('detail', ''), 100)})"
    call = re.compile(rf"\b{exercise}\s*\.\s*check\s*\(")
    errors = {e["cell"]: e for e in outcome.get("errors", [])}
    calling = [i for i, cell in enumerate(cells)
               if cell.get("cell_type") == "code"
               and any(call.search(line.split("#", 1)[0]) for line in _source(cell).splitlines())]
    if not calling:
        return f"not checked: no cell calls ex.{exercise}.check(...)"
    for index in calling:
        if index in errors:
            error = errors[index]
            return f"not checked: its cell raised {error['ename']}: {_one_line(error['evalue'], 100)}"
    return "not checked: its check did not run"


def _source(cell):
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _not_graded(submission, why, chapter=""):
    return [{"submission": submission, "chapter": chapter, "exercise": "", "points": 0, "max_points": 0,
             "status": f"not graded: {why}"}]


def grade_notebook(path, submission, timeout=DEFAULT_TIMEOUT, registry=None):
    """Execute one handed-in notebook and return its rows for ``grades.csv`` (dicts keyed by COLUMNS).

    Args:
        path: the notebook file.
        submission: its name in the table (the path relative to the submissions folder).
        timeout: seconds the whole notebook may take, kernel start included.
        registry: ``{chapter: {exercise: max_points}}``; default ``course_utils.checks.registry()``.

    Returns:
        ``(rows, note)``: one row per exercise of the notebook's chapter (or one "not graded" row)
        and a short note about the run for the summary.

    Example:
        >>> rows, note = grade_notebook(Path("submissions/alice_04.ipynb"), "alice_04.ipynb", timeout=120)
        >>> rows[0]
        {'submission': 'alice_04.ipynb', 'chapter': 4, 'exercise': 'q1', 'points': 2, 'max_points': 2, 'status': 'correct'}
    """
    if registry is None:
        from course_utils.checks import registry as checks_registry

        registry = checks_registry()
    try:
        with open(path, encoding="utf-8") as f:
            nb = json.load(f)
        if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
            raise ValueError("no list of cells")
        import nbformat

        nbformat.reads(json.dumps(nb), as_version=4)
    except Exception as err:
        return _not_graded(submission, f"not a readable notebook ({_one_line(f'{type(err).__name__}: {err}', 100)})"), ""
    chapter = _chapter_of(nb)
    if chapter is not None and chapter not in registry:
        return _not_graded(submission, f"chapter {chapter} has no graded exercises", chapter), ""
    with tempfile.TemporaryDirectory(prefix="course-grade-records-") as scratch:
        grade_file = Path(scratch) / "records.jsonl"
        outcome = _execute(path, grade_file, timeout)
        records = _read_records(grade_file)
    note = f"{outcome.get('seconds', 0):.1f} s"
    if outcome["kind"] != "completed":
        note += f", {outcome['kind']}"
    if chapter is None:
        seen = sorted({c for c, _ in records if c in registry})
        if len(seen) != 1:
            return _not_graded(submission, "the notebook has no course.chapter metadata"
                               + (" and its checks name no single chapter" if records else " and no check ran")), note
        chapter = seen[0]
        note += ", chapter taken from its checks (no course.chapter metadata)"
    rows = []
    for exercise, max_points in registry[chapter].items():
        record = records.get((chapter, exercise))
        if record is not None:
            points, status = max(0, min(record["points"], max_points)), record["status"]
        else:
            points, status = 0, _why_not_checked(exercise, outcome, nb["cells"], timeout)
        rows.append({"submission": submission, "chapter": chapter, "exercise": exercise, "points": points,
                     "max_points": max_points, "status": status})
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


def grade_folder(folder, timeout=DEFAULT_TIMEOUT, recursive=False, registry=None, jobs=1, echo=print, output=None):
    """Grade every notebook in ``folder``, write the table to ``output`` (default ``folder/grades.csv``).

    Args:
        folder: the folder of handed-in notebooks.
        timeout: seconds each notebook may take.
        recursive: also grade notebooks in subfolders.
        registry: ``{chapter: {exercise: max_points}}``; default ``course_utils.checks.registry()``.
        jobs: how many notebooks to run at the same time (each in its own process and kernel).
        echo: where progress lines go.
        output: the CSV file to write.

    Returns:
        The rows written, as dicts keyed by ``COLUMNS``.

    Example:
        >>> rows = grade_folder("submissions", timeout=120, jobs=2)   # writes submissions/grades.csv
    """
    from concurrent.futures import ThreadPoolExecutor

    folder = Path(folder)
    if registry is None:
        from course_utils.checks import registry as checks_registry

        registry = checks_registry()
    notebooks = find_notebooks(folder, recursive)
    echo(f"Grading {len(notebooks)} notebook(s) in {folder} (time limit {timeout:g} s each"
         + (f", {jobs} at a time" if jobs > 1 else "") + ").")
    done = []

    def grade_one(path):
        submission = path.relative_to(folder).as_posix()
        notebook_rows, note = grade_notebook(path, submission, timeout, registry)
        got = sum(r["points"] for r in notebook_rows)
        total = sum(r["max_points"] for r in notebook_rows)
        graded = not notebook_rows[0]["status"].startswith("not graded")
        result = f"{got}/{total} points" if graded else notebook_rows[0]["status"]
        done.append(submission)
        echo(f"  [{len(done)}/{len(notebooks)}] {submission}: {result}" + (f" ({note})" if note else ""))
        return notebook_rows

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        rows = [row for notebook_rows in pool.map(grade_one, notebooks) for row in notebook_rows]
    write_csv(rows, Path(output) if output else folder / CSV_NAME)
    return rows


def write_csv(rows, path):
    """Write the rows (dicts keyed by ``COLUMNS``) to ``path`` as CSV with exactly those columns."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def summary(rows):
    """A readable summary of the rows: one line per submission, then one per exercise.

    Example:
        >>> print(summary(grade_folder("submissions")))
        Per submission
          submission      chapter  points    breakdown
          alice_04.ipynb  4        10/12     3 correct, 1 partial
        ...
    """
    lines = []
    submissions = []
    for row in rows:
        if row["submission"] not in submissions:
            submissions.append(row["submission"])
    width = max([len(s) for s in submissions] + [10])
    lines.append("Per submission")
    lines.append(f"  {'submission':<{width}}  chapter  points    breakdown")
    for submission in submissions:
        mine = [r for r in rows if r["submission"] == submission]
        if mine[0]["status"].startswith("not graded"):
            lines.append(f"  {submission:<{width}}  {str(mine[0]['chapter'] or '-'):<7}  {'-':<8}  {mine[0]['status']}")
            continue
        got, total = sum(r["points"] for r in mine), sum(r["max_points"] for r in mine)
        kinds = [r["status"].split(":")[0] for r in mine]
        order = ["correct", "partial", "incorrect", "unanswered", "not checked"]
        breakdown = ", ".join(f"{kinds.count(k)} {k}" for k in order + sorted(set(kinds) - set(order))
                              if kinds.count(k))
        reasons = sorted({r["status"].split(": ", 1)[1] for r in mine if r["status"].startswith("not checked: ")})
        if reasons:
            breakdown += " (" + "; ".join(_one_line(reason, 70) for reason in reasons[:2]) + ")"
        lines.append(f"  {submission:<{width}}  {mine[0]['chapter']!s:<7}  {f'{got}/{total}':<8}  {breakdown}")
    exercises = []
    for row in rows:
        key = (row["chapter"], row["exercise"])
        if row["exercise"] and key not in exercises:
            exercises.append(key)
    if exercises:
        lines.append("")
        lines.append("Per exercise")
        lines.append("  exercise  max  mean   correct  partial  incorrect  unanswered  not checked")
        for chapter, exercise in sorted(exercises):
            mine = [r for r in rows if (r["chapter"], r["exercise"]) == (chapter, exercise)]
            mean = sum(r["points"] for r in mine) / len(mine)
            count = lambda prefix: sum(r["status"].startswith(prefix) for r in mine)
            lines.append(f"  {f'{chapter}.{exercise}':<8}  {mine[0]['max_points']:<3}  {mean:<5.2f}  "
                         f"{count('correct'):<7}  {count('partial'):<7}  {count('incorrect'):<9}  "
                         f"{count('unanswered'):<10}  {count('not checked')}")
    return "\n".join(lines)


def main(argv=None):
    """The command line: ``python -m course_utils.grade FOLDER [--timeout S] [--jobs N] [--recursive]
    [--output FILE]``. Returns the exit status: 0 when the folder was graded, 2 for bad usage."""
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.grade",
        description="Execute every handed-in exercise notebook in a folder, each in its own kernel with a "
                    "time limit, and write the scores to FOLDER/grades.csv.")
    parser.add_argument("folder", help="the folder of handed-in .ipynb files")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds each notebook may run, kernel start included (default {DEFAULT_TIMEOUT})")
    parser.add_argument("--jobs", type=int, default=1,
                        help="how many notebooks to run at the same time (default 1; at most one per CPU core)")
    parser.add_argument("--recursive", action="store_true",
                        help="also grade notebooks in subfolders (e.g. one folder per student)")
    parser.add_argument("--output", help=f"where to write the table (default FOLDER/{CSV_NAME})")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        print(f"error: {folder} is not a folder. Give the folder that holds the handed-in notebooks.",
              file=sys.stderr)
        return 2
    if args.timeout <= 0 or args.jobs < 1:
        print("error: --timeout must be a positive number of seconds and --jobs at least 1.", file=sys.stderr)
        return 2
    output = Path(args.output) if args.output else folder / CSV_NAME
    try:
        output.open("a").close()
    except OSError as err:
        print(f"error: cannot write the table to {output} ({err}). Use --output to choose another file.",
              file=sys.stderr)
        return 2
    rows = grade_folder(folder, timeout=args.timeout, recursive=args.recursive, jobs=args.jobs, output=output)
    print()
    print(summary(rows) if rows else "No notebooks found (only *.ipynb files are graded).")
    print(f"\nWrote {output}")
    return 0


if __name__ == "__course_grade_runner__":
    sys.exit(_run_one(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])))
elif __name__ == "__main__":
    sys.exit(main())
