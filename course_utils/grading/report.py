"""The grader's outputs: the CSV table and the readable summary per submission and per exercise."""
import csv

from course_utils.checkers.core import CORRECT, INCORRECT, PARTIAL, UNANSWERED

__all__ = ["COLUMNS", "STATUS_ORDER", "summary", "write_csv"]

COLUMNS = ["submission", "chapter", "exercise", "points", "max_points", "status", "hints", "flags", "feedback"]
STATUS_ORDER = [CORRECT, PARTIAL, INCORRECT, UNANSWERED, "not checked"]


def write_csv(rows, path):
    """Write the rows (dicts keyed by ``COLUMNS``) to ``path`` as CSV with exactly those columns."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def _one_line(text, limit=120):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _submission_line(submission, mine, width):
    first = mine[0]
    if first["status"].startswith("not graded"):
        return f"  {submission:<{width}}  {str(first['chapter'] or '-'):<7}  {'-':<8}  {first['status']}"
    got, total = sum(r["points"] for r in mine), sum(r["max_points"] for r in mine)
    kinds = [r["status"].split(":")[0] for r in mine]
    breakdown = ", ".join(f"{kinds.count(k)} {k}" for k in STATUS_ORDER + sorted(set(kinds) - set(STATUS_ORDER))
                          if kinds.count(k))
    reasons = sorted({r["status"].split(": ", 1)[1] for r in mine if r["status"].startswith("not checked: ")})
    if reasons:
        breakdown += " (" + "; ".join(_one_line(reason, 70) for reason in reasons[:2]) + ")"
    line = f"  {submission:<{width}}  {first['chapter']!s:<7}  {f'{got:g}/{total}':<8}  {breakdown}"
    return line + (f"\n  {'':<{width}}  FLAGGED: {_one_line(first['flags'], 150)}" if first["flags"] else "")


def summary(rows):
    """A readable summary of the rows: one line per submission (and its flags), then one per exercise.

    Example:
        >>> print(summary(grade_folder("submissions")))
        Per submission
          submission      chapter  points    breakdown
          alice_04.ipynb  4        10/12     3 correct, 1 partial
        ...
    """
    submissions = list(dict.fromkeys(row["submission"] for row in rows))
    width = max([len(s) for s in submissions] + [10])
    lines = ["Per submission", f"  {'submission':<{width}}  chapter  points    breakdown"]
    for submission in submissions:
        lines.append(_submission_line(submission, [r for r in rows if r["submission"] == submission], width))
    exercises = list(dict.fromkeys((r["chapter"], r["exercise"]) for r in rows if r["exercise"]))
    if exercises:
        header = "  ".join(f"{status:<{max(7, len(status))}}" for status in STATUS_ORDER)
        lines += ["", "Per exercise", f"  exercise  max  mean   {header}  hints used"]
        for chapter, exercise in sorted(exercises):
            mine = [r for r in rows if (r["chapter"], r["exercise"]) == (chapter, exercise)]
            mean = sum(r["points"] for r in mine) / len(mine)
            counts = "  ".join(f"{sum(r['status'].startswith(status) for r in mine):<{max(7, len(status))}}"
                               for status in STATUS_ORDER)
            lines.append(f"  {f'{chapter}.{exercise}':<8}  {mine[0]['max_points']:<3}  {mean:<5.2f}  {counts}  "
                         f"{sum(bool(r['hints']) for r in mine)}")
    return "\n".join(lines)
