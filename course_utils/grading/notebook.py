"""The grading of one handed-in notebook: :func:`grade_notebook` reads it, runs it under the driver
(:mod:`course_utils.grading.session`, in its sandbox) within its time limit, and turns what the driver
recorded into the notebook's rows of ``grades.csv``.

Whatever the notebook holds, what it costs the grader is bounded: reading it is linear in its size,
with caps (:mod:`course_utils.grading.submission`); everything else (the scan of its code, its run,
the judging of its answers) happens in the driver's process, within the notebook's own time limit,
which counts from the moment the grader starts on it.
"""
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from course_utils.checkers.core import CORRECT, GRADED, INCORRECT, PARTIAL, SELF_STUDY
from course_utils.grading.sandbox import (DISK_LIMIT, MEMORY_LIMIT, NOT_SANDBOXED, SANDBOXES, Box, SandboxUnavailable,
                                          check_available)
from course_utils.grading.session import JUDGE_MEMORY, read_results
from course_utils.grading.submission import NotANotebook, identify_chapter, parse_notebook, read_submission, \
    saved_hint_levels
from course_utils.tools.notebook_runner import run_in_child

__all__ = ["DEFAULT_TIMEOUT", "FEEDBACK_MODES", "Settings", "grade_notebook", "make_handout", "not_graded",
           "resolve_sandbox"]

DEFAULT_TIMEOUT = 300
FEEDBACK_MODES = (GRADED, SELF_STUDY)
PACKAGE_DIR = Path(__file__).resolve().parents[1]
JUDGED = (CORRECT, PARTIAL, INCORRECT)


@dataclass(frozen=True)
class Settings:
    """What the instructor chose for a run (the command line's options), the same for every notebook.

    ``feedback`` is the mode of the feedback in the table: ``"graded"`` (what is wrong, never the right
    answer) or ``"self-study"``; a notebook's own metadata never chooses it.

    Example:
        >>> Settings(timeout=120, hint_cost=0.5).feedback
        'graded'
    """

    timeout: float = DEFAULT_TIMEOUT
    chapter: int = None
    hint_cost: float = 0.0
    feedback: str = GRADED
    sandbox: str = "auto"
    memory_limit: int = MEMORY_LIMIT
    disk_limit: int = DISK_LIMIT

    def __post_init__(self):
        if self.feedback not in FEEDBACK_MODES:
            raise ValueError(f"feedback must be one of {FEEDBACK_MODES}, not {self.feedback!r}")


def resolve_sandbox(requested="auto"):
    """Which sandbox the notebooks run in: ``("bwrap", "")`` or ``("none", warning)``.

    Args:
        requested: ``"bwrap"`` (the sandbox or an error), ``"none"``, or ``"auto"`` (the sandbox
            where it works, otherwise none with the reason in the warning).

    Raises:
        SandboxUnavailable: ``"bwrap"`` was asked for and cannot start here.
        ValueError: ``requested`` is not one of :data:`~course_utils.grading.sandbox.SANDBOXES`.

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


def not_graded(submission, why, chapter="", flags="", sandbox=""):
    """The one row of a submission that was not graded."""
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


def _gib(nbytes):
    return f"{nbytes / 2 ** 30:g} GiB"


def _status(record, exercise, outcome, settings, answer_cell, cell_ids):
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
        if status == "too large":
            return f"not checked: the answers were too large ({extra})"
        if status == "disk full":
            return (f"not checked: the sandbox's {_gib(settings.disk_limit)} for files was full, so its answers "
                    f"could not be written")
        return status
    if outcome["kind"] == "timeout":
        return f"not checked: time limit ({settings.timeout:g} s) reached before its check ran"
    if outcome["kind"] == "kernel died":
        return "not checked: the kernel died before its check ran"
    if outcome["kind"] == "failed":
        return f"not checked: the notebook could not be run ({outcome.get('detail', '')[:100]})"
    return "not checked: its check did not run"


def make_handout(scratch):
    """A stripped copy of the package for the kernels (:mod:`course_utils.grading.handout`), readable by any user."""
    from course_utils.grading.handout import handout_package

    folder = Path(scratch) / "handout"
    folder.mkdir(mode=0o755)
    os.chmod(scratch, 0o755)
    return handout_package(PACKAGE_DIR, folder)


def _answer_flags(records, settings):
    """Flags about the answers: too large for the grader, a full sandbox, an answer judged differently at the
    end of the notebook than after its cell."""
    flags = []
    for status, flag in (("too large", f"answers too large for the grader (over its caps or {JUDGE_MEMORY >> 20} MiB)"),
                         ("disk full", f"filled its sandbox's {_gib(settings.disk_limit)} for files")):
        names = sorted({r["exercise"] for r in records if r["status"] == status})
        if names:
            flags.append(f"{flag}: {', '.join(names)}")
    for name in dict.fromkeys(r["exercise"] for r in records):
        after = [r for r in records if r["exercise"] == name and r["at"] == "after" and r["status"] in JUDGED]
        end = [r for r in records if r["exercise"] == name and r["at"] == "end" and r["status"] in JUDGED]
        if after and end and after[0]["points"] != end[0]["points"]:
            flags.append(f"{name}'s answer changed after its cell ({after[0]['points']:g}/{after[0]['max_points']} "
                         f"there, {end[0]['points']:g}/{end[0]['max_points']} at the end of the notebook)")
    return flags


def grade_notebook(path, submission, settings=None, handout=None, data=None, student=None, key=None, **options):
    """Run one handed-in notebook under the grader and return its rows for ``grades.csv``.

    Args:
        path: the notebook file.
        submission: its name in the table (the path relative to the submissions folder).
        settings: the run's :class:`Settings` (default: made from ``options``, e.g. ``timeout=120``).
        handout: the package copy the kernel imports (made once per folder by
            :func:`~course_utils.grading.cli.grade_folder`; default: made now).
        data: the file's bytes, already read (default: read ``path`` now, see
            :func:`~course_utils.grading.submission.read_submission`), or the ``NotANotebook`` that reading raised.
        student, key: grade it as this roster id's, against that student's variant, drawn from the course ``key``
            (bytes; :mod:`course_utils.grading.roster`): the key stays here, the kernel gets the parameters.
            Without them, every exercise has its defaults (the self-study notebooks).

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
    settings = settings or Settings(**options)
    started = time.monotonic()  # the notebook's time limit counts from here
    mode = resolve_sandbox(settings.sandbox)[0]
    try:
        if data is None:
            data = read_submission(path)
        if isinstance(data, NotANotebook):
            raise data
        nb = parse_notebook(data)
    except NotANotebook as err:
        return not_graded(submission, f"not a readable notebook ({str(err)[:100]})", sandbox=mode), ""
    answer_cells = {number: {e["cell"] for e in chapters[number]["exercises"].values()} for number in CHAPTER_MODULES}
    number, chapter_note = identify_chapter(nb, answer_cells, settings.chapter)
    flags = [chapter_note] if chapter_note else []
    if number is None:
        return not_graded(submission, "the notebook has no course.chapter metadata and none of its cells is an "
                                      "exercise cell", flags="; ".join(flags), sandbox=mode), ""
    if number not in CHAPTER_MODULES:
        return not_graded(submission, f"chapter {number} has no graded exercises", number, "; ".join(flags), mode), ""
    cells = chapters[number]
    max_points = chapter_definition(number).max_points()
    checks = [{"exercise": name, "cell": cells["exercises"][name]["cell"], "max_points": points}
              for name, points in max_points.items()]
    hints = saved_hint_levels(nb, number)  # what the student's own session printed (in the notebook's time)
    from course_utils.checkers.variants import VARIANT_ENV, student_variant
    from course_utils.grading.roster import variant_flags

    env = _kernel_env(cells["keras"], cells["dtensor"], sandboxed=mode == "bwrap")
    env.pop(VARIANT_ENV, None)  # only the grader's own choice, never one left in the instructor's environment
    variant = None
    if student is not None:
        variant = student_variant(chapter_definition(number), key, student)
        flags += variant_flags(nb, chapter_definition(number), variant, student)
        env[VARIANT_ENV] = json.dumps(variant)  # the parameters only (not secret): the kernel's collect uses them
    with tempfile.TemporaryDirectory(prefix="course-grade-", ignore_cleanup_errors=True) as scratch:
        handout = Path(handout) if handout else make_handout(scratch)
        results = Path(scratch) / "results.jsonl"  # written by the driver, out of the kernel's reach
        if mode == "bwrap":
            box = Box(Path(scratch) / "box", memory_limit=settings.memory_limit, disk_limit=settings.disk_limit,
                      read_only=[env.get("TFDS_DATA_DIR", "")], package=handout)
            box.prepare(data, Path(submission).name)
            exports = box.exports
            spec = {"argv": box.kernel_argv(env), "workdir": str(box.work), "connection_dir": str(box.conn),
                    "owner": box.owner, "box": box.mount_spec()}
            kernel_env = None
        else:
            exports, spec = Path(scratch) / "exports", None
            exports.mkdir()
            kernel_env = env
        payload = {"cells": [{"cell_type": c["cell_type"], "source": c["source"], "id": c["id"]} for c in nb["cells"]],
                   "chapter": number, "mode": settings.feedback, "variant": variant, "checks": checks, "exports": str(exports),
                   "results": str(results), "stamp": cells.get("setup"),
                   "disk_limit": settings.disk_limit if mode == "bwrap" else None}
        left = max(1.0, settings.timeout - (time.monotonic() - started))
        outcome = run_in_child("course_utils.grading.session:grade_cells", payload, left, env=kernel_env,
                               sandbox=spec, kernel_path=None if spec else str(handout.parent))
        records, served, scanned = read_results(results)
    flags += scanned + _answer_flags(records, settings)
    if outcome.get("report", {}).get("check_errors"):
        flags.append("the notebook interfered with the grader's requests for its answers")
    if outcome.get("sandbox_gone") is False:
        flags.append("some of its processes were still running 10 s after they were killed")
    for name, level in served.items():
        hints[name] = max(level, hints.get(name, 0))
    cell_ids = {c["id"] for c in nb["cells"]}
    rows = []
    for item in checks:
        name = item["exercise"]
        mine = [r for r in records if r["exercise"] == name]
        # The check right after the exercise's cell counts, unless the second chance at the end scored more.
        best = max(mine, key=lambda r: (r["points"], r["at"] == "after")) if mine else None
        points = max(0, min(best["points"], item["max_points"])) if best else 0
        points = max(0.0, points - settings.hint_cost * hints.get(name, 0)) if settings.hint_cost else points
        rows.append({"submission": submission, "chapter": number, "exercise": name, "points": points,
                     "max_points": item["max_points"],
                     "status": _status(best, name, outcome, settings, item["cell"], cell_ids),
                     "hints": hints.get(name, ""), "flags": "; ".join(flags),
                     "feedback": best["feedback"] if best else "", "sandbox": mode})
    note = f"{time.monotonic() - started:.1f} s" + (f", {outcome['kind']}" if outcome["kind"] != "completed" else "")
    cell_errors = outcome.get("report", {}).get("cell_errors", {})
    if cell_errors:
        cell, error = next(iter(cell_errors.items()))
        note += f", {len(cell_errors)} cell(s) raised an error (first: cell {cell}, {error[:120]})"
    return rows, note
