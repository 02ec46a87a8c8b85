"""The grading run of one notebook, in the child process of :func:`~course_utils.tools.notebook_runner.run_in_child`.

:func:`grade_cells` is the driver. First it scans the notebook's code for what it reaches
(:mod:`course_utils.grading.scan`). Then it runs the student's code cells in order in a fresh
kernel (in the sandbox, see ``sandbox.py``). Right after the cell that holds an exercise in the
exercise notebook (found by its cell id), it asks the kernel for that exercise's answers: the
kernel runs the exercise's ``collect`` (``export.py``) on a seed the driver draws now, and writes
the result as plain data to a file of a name the driver also draws now. The driver reads that file
once, refusing text over the caps of :mod:`course_utils.checkers.plain` unparsed, and judges it
here, in this process, which never runs the student's code (``Exercise.judge_read``), with at most
:data:`JUDGE_MEMORY` more memory. The driver's own TensorFlow (judging reads tensors back) is imported
beside the notebook's first cells, and waited for before the first judging: while ``import tensorflow`` runs
in one thread, TensorFlow is only partly there for another (``from tensorflow.experimental import dtensor``
raises ModuleNotFoundError), which once cost an exercise its points at its cell on a busy machine. At the end
it asks again for every exercise that did not get full marks (its answer may be defined in a later cell). A
hint's text is served to the kernel only by :func:`serve_hint`, which records the request.

Everything the driver learns is appended to the grader's results file as it happens (one JSON
line per event: the scan's flags, each judged check, each hint served), so a notebook that later
hangs or kills its kernel keeps what it earned and what it used.
"""
import contextlib
import importlib
import json
import os
import re
import resource
import secrets
import threading
from pathlib import Path

from course_utils.checkers import chapter_definition
from course_utils.checkers.core import HINT_REQUEST
from course_utils.checkers.plain import MAX_TEXT, PlainDataError, TooLarge, loads
from course_utils.grading.scan import scan_cells
from course_utils.tools.notebook_runner import cell_error, read_small_file

JUDGE_MEMORY = 512 << 20  # bytes of memory the driver may take on to read and judge one export
HINT_ASKED = re.compile(rf"{HINT_REQUEST} (\d+)\.(q\d+) (\d+)")
FULL = 1 << 20  # a sandbox's writable space with less free than this is full


def export_request(chapter, exercise, seed, path):
    """The code the driver runs in the kernel to have one exercise's answers written to ``path``."""
    return (f"__import__('course_utils.grading.export', fromlist=['export_answers'])"
            f".export_answers({int(chapter)}, {exercise!r}, {int(seed)}, {str(path)!r})")


def _data_bytes():
    """This process's data (private writable memory) now, in bytes: what ``RLIMIT_DATA`` counts."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) << 10 for line in f if line.startswith("VmData:"))


@contextlib.contextmanager
def memory_budget(nbytes):
    """While the block runs, this process may take on at most ``nbytes`` more data memory (``RLIMIT_DATA``,
    soft limit; restored after): an allocation past it raises ``MemoryError`` in the block.

    Example:
        >>> with memory_budget(64 << 20):
        ...     bytearray(1 << 30)
        Traceback (most recent call last):
        MemoryError
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = _data_bytes() + nbytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def judge_file(item, path, seed, memory=None):
    """The record of one check: the export at ``path`` (written by the kernel) judged by ``item``.

    The text is parsed once (:func:`course_utils.checkers.plain.loads`, which refuses text over its
    caps unparsed), and read and judged with at most ``memory`` (default :data:`JUDGE_MEMORY`) bytes
    more memory.

    Returns a dict with ``points``, ``max_points``, ``status`` (an exercise status, ``"missing"``
    with the names in ``extra``, ``"no answers"`` when the kernel wrote nothing, or ``"too large"``
    with the reason in ``extra``), ``feedback`` and ``read`` (whether the text was plain data).
    """
    record = {"points": 0, "max_points": item.max_points, "feedback": "", "extra": "", "read": False}
    memory = memory or JUDGE_MEMORY
    data = read_small_file(path, limit=MAX_TEXT + 1)
    if data is None:
        return {**record, "status": "no answers"}
    try:
        with memory_budget(memory):
            try:
                export = loads(data.decode("utf-8", errors="replace"))
            except TooLarge as err:
                return {**record, "status": "too large", "extra": str(err)}
            except PlainDataError:
                export = None  # judge_read says that it could not read the answers
            else:
                record["read"] = True
            del data
            names = export.get("names") if isinstance(export, dict) and export.get("state") == "missing" else None
            if isinstance(names, list):
                return {**record, "status": "missing", "extra": ", ".join(map(str, names))[:200]}
            result = item.judge_read(export, seed)
    except MemoryError:
        return {**record, "status": "too large", "extra": f"reading and judging them took more than {memory >> 20} MiB"}
    except (Exception, SystemExit) as err:  # judge_read catches what an answer can cause; this is a last guard
        return {**record, "status": "incorrect", "feedback": f"The grader could not judge these answers ({err!r:.200})."}
    return {**record, "points": result.points, "status": result.status, "feedback": result.message}


def serve_hint(prompt, items, log):
    """The reply to a kernel's input request: the text of the hint it names (``"course-hint 3.q1 2"``,
    :meth:`~course_utils.checkers.core.Exercise.hint_text`), from the grader's own checkers, after the
    request is logged; an empty text for anything else."""
    asked = HINT_ASKED.fullmatch(str(prompt)[:100])
    item = items.get(asked[2]) if asked else None
    if item is None or int(asked[1]) != item.chapter or not 1 <= int(asked[3]) <= len(type(item).hints):
        return ""
    level = int(asked[3])
    log({"hint": item.name, "level": level})
    return item.hint_body(level)  # the text with the student's own numbers (their variant)


def _log_to(path):
    """A function that appends one JSON line to the results file ``path``."""
    def log(event):
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")
    return log


def grade_cells(session, payload, report):
    """The driver (see the module docstring).

    ``payload`` holds the student's cells (``cell_type``, ``source``, ``id``), the chapter, the
    feedback mode (the instructor's), ``variant`` (the student's parameters, or None for the defaults), the checks to run (``{"exercise", "cell", "max_points"}``),
    ``exports`` (the folder the kernel writes its answers to, as the kernel sees it and as this
    process does), ``results`` (the grader's file, out of the kernel's reach), ``stamp`` (the set-up
    cell as the build stamps it) and ``disk_limit`` (bytes the sandbox may write, or None without
    one). ``report`` gets ``cell_errors`` and ``check_errors`` (``{cell id or exercise: "Error: ..."}``).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # judging may start TensorFlow (to read DTensors back)
    report.update(cell_errors={}, check_errors={})
    log = _log_to(payload["results"])
    chapter = payload["chapter"]
    definition = chapter_definition(chapter)
    loading = None
    if definition.uses_tensorflow:  # judging reads tensors back: import TensorFlow while the notebook runs
        loading = threading.Thread(target=importlib.import_module, args=("tensorflow",), daemon=True)
        loading.start()
    items = {item.name: item for item in definition.bind(payload["mode"], payload.get("variant"))}
    session.on_input = lambda prompt: serve_hint(prompt, items, log)
    code = [(index + 1, cell["source"]) for index, cell in enumerate(payload["cells"]) if cell["cell_type"] == "code"]
    log({"flags": scan_cells(code, payload.get("stamp"))})
    exports = Path(payload["exports"])
    best = {}

    def check(exercise, at):
        seed, name = secrets.randbelow(2 ** 31), f"{exercise}-{at}-{secrets.token_hex(8)}.json"
        ran = session.execute(export_request(chapter, exercise, seed, exports / name))
        error = cell_error(ran)
        if loading is not None:
            loading.join()  # a half-imported TensorFlow would fail the judge (see the module docstring)
        record = {"exercise": exercise, "at": at, **judge_file(items[exercise], exports / name, seed)}
        with contextlib.suppress(OSError):
            os.unlink(exports / name)  # judged: it no longer takes the sandbox's space
        if not record["read"] and _full(exports, payload.get("disk_limit")):
            record["status"] = "disk full"  # the kernel could not write (all of) its answers: no interference
        elif error:
            report["check_errors"][exercise] = f"{error[0]}: {error[1]}"[:300]
        elif record["status"] == "no answers":
            report["check_errors"][exercise] = "the kernel wrote no answers"
        record["driver_peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
        log(record)
        best[exercise] = max(record["points"], best.get(exercise, -1))

    by_cell = {}
    for item in payload["checks"]:
        by_cell.setdefault(item["cell"], []).append(item)
    for index, cell in enumerate(payload["cells"]):
        if cell["cell_type"] != "code":
            continue
        error = cell_error(session.execute(cell["source"]))
        if error:
            report["cell_errors"][cell.get("id") or f"#{index}"] = f"{error[0]}: {error[1]}"[:300]
        for item in by_cell.get(cell.get("id"), []):
            check(item["exercise"], "after")
    for item in payload["checks"]:
        if best.get(item["exercise"], -1) < item["max_points"]:
            check(item["exercise"], "end")


def _full(folder, disk_limit):
    """Whether the sandbox's writable space (the file system of ``folder``, with ``disk_limit``) is full."""
    if not disk_limit:
        return False
    try:
        stats = os.statvfs(folder)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize < FULL


def read_results(path):
    """What :func:`grade_cells` appended to ``path`` (its lines that are complete JSON).

    Returns:
        ``(checks, hints, flags)``: the check records (dicts with ``exercise``, ``at``, ``points``,
        ``status`` ...), the highest hint level served per exercise, and the scan's flags.
    """
    checks, hints, flags = [], {}, []
    for line in (read_small_file(path) or b"").decode(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # a line cut by a time-out
        if not isinstance(event, dict):
            continue
        if {"exercise", "at", "points", "status"} <= set(event):
            checks.append(event)
        elif "hint" in event:
            hints[event["hint"]] = max(int(event["level"]), hints.get(event["hint"], 0))
        elif isinstance(event.get("flags"), list):
            flags += [str(flag) for flag in event["flags"]]
    return checks, hints, flags
