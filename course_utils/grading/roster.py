"""The instructor's side of per-student variants: the course key, the roster, which student a submission is, and
whether a handed-in notebook is that student's.

Each student of a roster gets their own numbers in the exercises that vary (:mod:`course_utils.checkers.variants`),
drawn from an HMAC of the course key and their id. The key is a file of 32 random bytes that the instructor keeps
(:func:`default_key_path`, outside the hand-outs and submissions folders); it is created by the first
``python3 course.py build --graded-handouts OUT --roster ROSTER.csv`` and read by ``python3 course.py grade
SUBMISSIONS --roster ROSTER.csv``. It stays in the grader's process: a sandboxed kernel gets its student's
parameters (which are not secret), never the key.
"""
import csv
import os
import re
import secrets
from pathlib import Path, PurePosixPath

__all__ = ["KEY_BYTES", "RosterError", "default_key_path", "load_key", "read_roster", "student_of", "variant_flags"]

KEY_BYTES = 32
STUDENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SEPARATORS = "-_. "


class RosterError(ValueError):
    """A roster, a course key or a submission's name the variants cannot work with (the message says what to do)."""


def default_key_path(environ=None):
    """Where the course key lives unless ``--key`` says otherwise: ``$XDG_CONFIG_HOME/tf-distributed-course/
    course.key`` (``~/.config/...``), in the instructor's home, never in a folder handed out or collected.

    Example:
        >>> default_key_path({"XDG_CONFIG_HOME": "/home/me/.config"}).as_posix()
        '/home/me/.config/tf-distributed-course/course.key'
    """
    environ = os.environ if environ is None else environ
    config = Path(environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config / "tf-distributed-course" / "course.key"


def load_key(path=None, create=False):
    """The course key from ``path`` (default :func:`default_key_path`); with ``create``, a new one is written first
    when there is none (32 random bytes, readable by its owner only).

    Returns:
        ``(key, path, created)``.

    Raises:
        RosterError: there is no key and ``create`` is false, it cannot be read, or it is not a course key.

    Example:
        >>> import tempfile
        >>> key, path, created = load_key(Path(tempfile.mkdtemp()) / "course.key", create=True)
        >>> len(key), created, oct(path.stat().st_mode & 0o777)
        (32, True, '0o600')
    """
    path = Path(path) if path else default_key_path()
    created = False
    if create and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
        created = True
    if not path.exists():
        raise RosterError(f"There is no course key at {path}. The per-student hand-outs were made with one (`python3 "
                          f"course.py build --graded-handouts OUT --roster ROSTER.csv` creates it, and prints where): "
                          f"give that file with --key.")
    try:
        key = path.read_bytes()
    except OSError as err:
        raise RosterError(f"Cannot read the course key {path} ({err.strerror}): it must be readable by you, the "
                          f"instructor (chmod 600 {path}), or give another one with --key.") from None
    if len(key) < KEY_BYTES:
        raise RosterError(f"{path} holds {len(key)} bytes, not a course key ({KEY_BYTES} random bytes, written by the "
                          f"first `build --graded-handouts ... --roster ...`). Give the key the hand-outs were made "
                          f"with (--key); a new key would give every student other numbers.")
    return key, path, created


def read_roster(path):
    """The students of a roster CSV: a header with an ``id`` column (and optionally ``name``), one student a row.

    Returns:
        ``[{"id": ..., "name": ...}]`` in the file's order.

    Raises:
        RosterError: the file cannot be read, has no ``id`` column, or an id is empty, repeated (ignoring case: the
            hand-outs' file names must differ on every file system) or not a safe file-name part.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "roster.csv"
        >>> _ = path.write_text("id,name\\nalice,Alice A.\\nbob,Bob B.\\n")
        >>> [s["id"] for s in read_roster(path)]
        ['alice', 'bob']
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            header = [(name or "").strip().lower() for name in reader.fieldnames or []]
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise RosterError(f"Cannot read the roster {path} ({err}): give a CSV file with a header line `id,name`.") \
            from None
    if "id" not in header:
        raise RosterError(f"The roster {path} has no `id` column (its header is {header or 'empty'}): its first line "
                          f"must name the columns, e.g. `id,name`, and each student's id goes in the `id` column.")
    students, seen = [], {}
    for line, row in enumerate(rows, start=2):
        row = {(k or "").strip().lower(): (v or "").strip() for k, v in row.items() if isinstance(v, str)}
        student = row.get("id", "")
        if not STUDENT_ID.fullmatch(student):
            raise RosterError(f"The roster {path}, line {line}: the id {student!r} is not usable: an id is 1 to 64 "
                              f"letters, digits, '.', '_' or '-', starting with a letter or digit (it goes into file "
                              f"names), e.g. 's12345' or 'alice.b'.")
        if student.lower() in seen:
            raise RosterError(f"The roster {path}: the id {student!r} is on lines {seen[student.lower()]} and {line} "
                              f"(ids must differ, ignoring case): give each student one id.")
        seen[student.lower()] = line
        students.append({"id": student, "name": row.get("name", "")})
    if not students:
        raise RosterError(f"The roster {path} has a header but no students: add one line per student.")
    return students


def _names(part, student):
    """Whether ``part`` (a file stem or folder name) names ``student``: it is the id, or holds it between separators."""
    part, student = part.lower(), student.lower()
    if part == student:
        return True
    for start in (m.start() for m in re.finditer(re.escape(student), part)):
        end = start + len(student)
        if (start == 0 or part[start - 1] in SEPARATORS) and (end == len(part) or part[end] in SEPARATORS):
            return True
    return False


def student_of(submission, ids):
    """The roster id a submission is, from where the instructor collected it: its path relative to the submissions
    folder (``alice/04.ipynb``, ``alice_04.ipynb``, ``04_meshes_and_layouts-alice.ipynb``): a folder named as the
    id, or a file name holding the id between separators (``-``, ``_``, ``.``, a space) or as a whole.

    Raises:
        RosterError: no id, or more than one, is named there (the message says how to name the file).

    Example:
        >>> student_of("04_meshes_and_layouts-alice.ipynb", ["alice", "bob"]), student_of("bob/ex4.ipynb", ["alice", "bob"])
        ('alice', 'bob')
    """
    path = PurePosixPath(submission)
    parts = [*path.parent.parts, path.stem]
    found = sorted({student for student in ids for part in parts if _names(part, student)})
    if len(found) > 1:  # "al" and "al-x" both in "al-x_04": the longer one is meant
        longest = [s for s in found if not any(s != other and _names(other, s) for other in found)]
        found = longest if len(longest) == 1 else found
    if len(found) == 1:
        return found[0]
    if found:
        raise RosterError(f"{submission} names the roster ids {found}: rename it (or its folder) after one student.")
    raise RosterError(f"{submission} names no roster id: name the file after its student, as the hand-out was "
                      f"(04_meshes_and_layouts-<id>.ipynb, or <id>_04.ipynb), or put it in a folder named after the "
                      f"id (with --recursive).")


def _normal(text):
    return " ".join(text.split())


def variant_flags(nb, definition, variant, student):
    """Flags for a notebook graded as ``student``'s (``variant``: their parameters, :mod:`.variants`): its metadata
    names another student, or its question texts (the markdown cells of the exercises that vary) are not those of
    this student's variant (another student's hand-out, or the public notebook).

    Example:
        >>> from course_utils.checkers import chapter_definition
        >>> variant_flags({"metadata": {"course": {"student": "bob"}}, "cells": []}, chapter_definition(4), {}, "alice")
        ["its metadata names the student 'bob', but it was collected as alice's"]
    """
    flags = []
    course = nb.get("metadata", {}).get("course", {})
    named = course.get("student") if isinstance(course, dict) else None
    if named is not None and str(named) != student:
        flags.append(f"its metadata names the student {str(named)[:64]!r}, but it was collected as {student}'s")
    texts = definition.rendered_cells(variant, solutions=False)
    owner = {cell: name for name, cls in definition.named.items() for cell in cls.templates}
    other = sorted({owner[c["id"]] for c in nb.get("cells", []) if c.get("cell_type") == "markdown"
                    and c.get("id") in texts and _normal(c["source"]) != _normal(texts[c["id"]])})
    if other:
        flags.append(f"the question text of {', '.join(other)} is not {student}'s variant (another student's "
                     f"hand-out, or the public notebook)")
    return flags
