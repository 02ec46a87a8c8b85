"""The grader's outputs: the CSV table (with its SHA-256 beside it) and the readable summary per
submission and per exercise."""
import csv
import hashlib
import io
import os
import tempfile
from pathlib import Path

from course_utils.checkers.core import CORRECT, INCORRECT, PARTIAL, UNANSWERED

__all__ = ["COLUMNS", "STATUS_ORDER", "digest_path", "summary", "verify_digest", "write_csv"]

COLUMNS = ["submission", "chapter", "exercise", "points", "max_points", "status", "hints", "flags", "feedback",
           "sandbox"]
STATUS_ORDER = [CORRECT, PARTIAL, INCORRECT, UNANSWERED, "not checked"]


def digest_path(path):
    """Where the SHA-256 of the table at ``path`` is written: ``grades.csv`` -> ``grades.csv.sha256``."""
    path = Path(path)
    return path.with_name(path.name + ".sha256")


def _replace(path, data):
    """Write ``data`` to a new file beside ``path`` and rename it onto ``path``: a reader sees the old
    or the new file, never half of one, and a symbolic link at ``path`` is replaced, not followed."""
    path = Path(path)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def write_csv(rows, path):
    """Write the rows (dicts keyed by ``COLUMNS``) to ``path`` as CSV with exactly those columns, and
    its SHA-256 to ``path.sha256`` in ``sha256sum`` format (check with ``sha256sum -c grades.csv.sha256``).
    Each file is replaced in one step. Returns the SHA-256 (hex).

    Example:
        >>> table = Path(tempfile.mkdtemp()) / "grades.csv"
        >>> digest = write_csv([], table)  # the header alone
        >>> table.with_name("grades.csv.sha256").read_text() == f"{digest}  grades.csv\\n"
        True
    """
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    data = text.getvalue().encode("utf-8")
    digest = hashlib.sha256(data).hexdigest()
    _replace(path, data)
    _replace(digest_path(path), f"{digest}  {Path(path).name}\n".encode())
    return digest


def verify_digest(path):
    """Whether the table at ``path`` still has the SHA-256 written beside it (False when either is missing).

    Example:
        >>> table = Path(tempfile.mkdtemp()) / "grades.csv"
        >>> _ = write_csv([], table)
        >>> verify_digest(table), verify_digest(table.with_name("other.csv"))
        (True, False)
    """
    try:
        expected = digest_path(path).read_text().split()[0]
        return hashlib.sha256(Path(path).read_bytes()).hexdigest() == expected
    except (OSError, IndexError):
        return False


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
        >>> row = dict(submission="alice_04.ipynb", chapter=4, exercise="q1", points=2, max_points=2,
        ...            status="correct", hints="", flags="", feedback="")
        >>> print(summary([row, dict(row, exercise="q2", points=0, status="incorrect", hints="1")]))
        Per submission
          submission      chapter  points    breakdown
          alice_04.ipynb  4        2/4       1 correct, 1 incorrect
        <BLANKLINE>
        Per exercise
          exercise  max  mean   correct  partial  incorrect  unanswered  not checked  hints used
          4.q1      2    2.00   1        0        0          0           0            0
          4.q2      2    0.00   0        0        1          0           0            1
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
