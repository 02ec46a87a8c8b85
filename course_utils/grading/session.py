"""The grading run of one notebook, in the child process of :func:`~course_utils.tools.notebook_runner.run_in_child`.

:func:`grade_cells` is the driver. It runs the student's code cells in order in a fresh kernel
(in the sandbox, see ``sandbox.py``). Right after the cell that holds an exercise in the exercise
notebook (found by its cell id), it asks the kernel for that exercise's answers: the kernel runs
the exercise's ``collect`` (``export.py``) on a seed the driver draws now, and writes the result as
plain data to a file of a name the driver also draws now. The driver reads that file and judges
it here, in this process, which never runs the student's code (``Exercise.judge_export``). At the
end it asks again for every exercise that did not get full marks (its answer may be defined in a
later cell). Each result is appended to the grader's results file as it is judged, so a notebook
that later hangs or kills its kernel keeps the grades it earned.
"""
import importlib
import json
import os
import re
import secrets
import threading
from pathlib import Path

from course_utils.checkers import chapter_definition
from course_utils.checkers.plain import PlainDataError, loads
from course_utils.tools.notebook_runner import cell_error, read_small_file

HINT_LINE = re.compile(r"Hint (\d+)/\d+ \((\d+)\.(q\d+)\)")
EXPORT_LIMIT = 160 << 20  # bytes of one export file (plain data of at most 64 MiB of arrays, in base64 and JSON)


def hint_levels(texts, chapter):
    """The highest hint level asked for per exercise of ``chapter`` in some output texts: ``{"q1": 2}``."""
    levels = {}
    for text in texts:
        for level, number, name in HINT_LINE.findall(text):
            if int(number) == chapter:
                levels[name] = max(levels.get(name, 0), int(level))
    return levels


def output_texts(cell):
    """The text a cell printed (streams and plain-text results)."""
    texts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            texts.append(output.get("text", ""))
        elif "data" in output:
            texts.append(output["data"].get("text/plain", ""))
    return ["".join(t) if isinstance(t, list) else t for t in texts]


def export_request(chapter, exercise, seed, path):
    """The code the driver runs in the kernel to have one exercise's answers written to ``path``."""
    return (f"__import__('course_utils.grading.export', fromlist=['export_answers'])"
            f".export_answers({int(chapter)}, {exercise!r}, {int(seed)}, {str(path)!r})")


def judge_file(item, path, seed):
    """The record of one check: the export at ``path`` (written by the kernel) judged by ``item``.

    Returns a dict with ``points``, ``max_points``, ``status`` (an exercise status, ``"missing"``
    with the names in ``extra``, or ``"no answers"`` when the kernel wrote nothing readable) and
    ``feedback``.
    """
    text = read_small_file(path, limit=EXPORT_LIMIT)
    record = {"points": 0, "max_points": item.max_points, "feedback": "", "extra": ""}
    if text is None:
        return {**record, "status": "no answers"}
    try:
        export = loads(text.decode("utf-8", errors="replace"))
        names = export.get("names") if export.get("state") == "missing" else None
        if isinstance(names, list):
            return {**record, "status": "missing", "extra": ", ".join(map(str, names))[:200]}
    except (PlainDataError, AttributeError, TypeError):
        pass  # judge_export says that it could not read the answers
    try:
        result = item.judge_export(text.decode("utf-8", errors="replace"), seed)
    except (Exception, SystemExit) as err:  # judge_export catches what an answer can cause; this is a last guard
        return {**record, "status": "incorrect", "feedback": f"The grader could not judge these answers ({err!r:.200})."}
    return {**record, "points": result.points, "status": result.status, "feedback": result.message}


def grade_cells(session, payload, report):
    """The driver (see the module docstring). ``payload`` holds the student's cells, the chapter, the
    hand-out's mode, the checks to run (``{"exercise", "cell", "max_points"}``), ``exports`` (the
    folder the kernel writes its answers to, as the kernel sees it and as this process does) and
    ``results`` (the grader's file, out of the kernel's reach, that gets one JSON line per check).
    ``report`` gets ``cell_errors`` and ``check_errors`` (``{cell id or exercise: "Error: ..."}``) and
    ``hints`` (the highest hint level each exercise printed)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # judging may start TensorFlow (to read DTensors back)
    report.update(cell_errors={}, check_errors={}, hints={})
    chapter = payload["chapter"]
    definition = chapter_definition(chapter)
    if definition.uses_tensorflow:  # judging reads tensors back: import TensorFlow while the notebook runs
        threading.Thread(target=importlib.import_module, args=("tensorflow",), daemon=True).start()
    items = {item.name: item for item in definition.bind(payload["mode"])}
    exports = Path(payload["exports"])
    best = {}

    def check(exercise, at):
        seed, name = secrets.randbelow(2 ** 31), f"{exercise}-{at}-{secrets.token_hex(8)}.json"
        ran = session.execute(export_request(chapter, exercise, seed, exports / name))
        error = cell_error(ran)
        if error:
            report["check_errors"][exercise] = f"{error[0]}: {error[1]}"[:300]
        record = {"exercise": exercise, "at": at, **judge_file(items[exercise], exports / name, seed)}
        if record["status"] == "no answers" and not error:
            report["check_errors"][exercise] = "the kernel wrote no answers"
        with open(payload["results"], "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if record["points"] >= best.get(exercise, -1):
            best[exercise] = record["points"]

    by_cell = {}
    for item in payload["checks"]:
        by_cell.setdefault(item["cell"], []).append(item)
    for index, cell in enumerate(payload["cells"]):
        if cell["cell_type"] != "code":
            continue
        ran = session.execute(cell["source"])
        error = cell_error(ran)
        if error:
            report["cell_errors"][cell.get("id") or f"#{index}"] = f"{error[0]}: {error[1]}"[:300]
        for name, level in hint_levels(output_texts(ran), chapter).items():
            report["hints"][name] = max(level, report["hints"].get(name, 0))
        for item in by_cell.get(cell.get("id"), []):
            check(item["exercise"], "after")
    for item in payload["checks"]:
        if best.get(item["exercise"], -1) < item["max_points"]:
            check(item["exercise"], "end")


def read_results(path):
    """The records :func:`grade_cells` appended to ``path`` (its lines that are complete JSON)."""
    records = []
    for line in (read_small_file(path) or b"").decode(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by a time-out
        if isinstance(record, dict) and {"exercise", "at", "points", "status"} <= set(record):
            records.append(record)
    return records

