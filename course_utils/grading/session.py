"""The grading run of one notebook, in the child process of :func:`~course_utils.notebook_runner.run_in_child`.

:func:`grade_cells` is the driver. In a fresh kernel it first installs the grader's sandbox
(``kernel_side.py``), then runs the student's code cells in order. Right after the cell that
holds an exercise in the exercise notebook (found by its cell id), it asks the grader's side to
check that exercise; at the end it checks again every exercise that did not get full marks (its
answer may be defined in a later cell), then asks for a report. Whatever the cells do, the results
come only from the signed lines the grader's side writes (``records.py``), which the grader
verifies. With the bubblewrap sandbox (``sandbox.py``) only the kernel is in it; this driver runs
outside, as the grader.
"""
import json
import os
import re

from course_utils.grading import records
from course_utils.grading.kernel_side import bootstrap_source
from course_utils.notebook_runner import cell_error, read_small_file

HINT_LINE = re.compile(r"Hint (\d+)/\d+ \((\d+)\.(q\d+)\)")


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


def _signed(results_path, key):
    """The valid records in the results file so far (none when it is no longer a regular file)."""
    text = (read_small_file(results_path) or b"").decode(errors="replace")
    return [r for r in (records.decode(key, line) for line in text.splitlines()) if r is not None]


def grade_cells(session, payload, report):
    """The driver (see the module docstring). ``payload`` holds the student's cells, the chapter, the
    checks to run (``{"exercise", "cell", "max_points"}``), the key, the settings of the grader's side
    and ``kernel_owner`` (``(uid, gid)`` to give the settings file to the sandbox's user, or None).
    ``report`` gets ``boot_error`` or ``cell_errors`` and ``check_errors`` (``{cell id: "Error: ..."}``)
    and ``hints`` (the highest hint level each exercise printed)."""
    key = bytes.fromhex(payload["key"])
    config_path = payload["kernel_config_path"]
    with open(os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
        json.dump(payload["kernel_config"], f)
    if payload.get("kernel_owner"):
        os.chown(config_path, *payload["kernel_owner"])
    boot = session.execute(bootstrap_source(payload["kernel_side_digest"], config_path))
    error = cell_error(boot)
    if error:
        report["boot_error"] = f"{error[0]}: {error[1]}"[:300]
        return
    report.update(cell_errors={}, check_errors={}, hints={})
    results, state = payload["kernel_config"]["results"], {"seq": 0}

    def check(exercise, at):
        state["seq"] += 1
        token = records.check_token(key, state["seq"], exercise, at)
        cell = session.execute(f"{payload['entry']}({state['seq']}, {exercise!r}, {at!r}, {token!r})")
        error = cell_error(cell)
        if error:
            report["check_errors"][exercise or at] = f"{error[0]}: {error[1]}"[:300]
        elif not any(r["seq"] == state["seq"] for r in _signed(results, key)):
            report["check_errors"][exercise or at] = "the check ran but recorded nothing"

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
        for name, level in hint_levels(output_texts(ran), payload["chapter"]).items():
            report["hints"][name] = max(level, report["hints"].get(name, 0))
        for item in by_cell.get(cell.get("id"), []):
            check(item["exercise"], "after")
    for item in payload["checks"]:
        done = _signed(results, key)
        if not any(r["exercise"] == item["exercise"] and r["points"] == item["max_points"] for r in done):
            check(item["exercise"], "end")
    check("", "report")
