"""Signed check records: how a result leaves the student's kernel without being forgeable.

The grader makes a secret key for each run. Inside the kernel only the grader's private checker
code knows it (see ``kernel_side.py``); it writes one line per check it ran, with an HMAC-SHA256 of the
line under that key. The grader accepts a line only if its signature is right, so a line the
notebook wrote itself, or changed, is rejected (and reported).

HMAC is written out here with a hash function passed in, so that the kernel side can use the
hash function it captured before any student code ran, not whatever ``hmac`` or ``hashlib``
holds later.
"""
import hashlib

__all__ = ["FIELDS", "check_token", "decode", "encode", "hmac_sha256"]

FIELDS = ("seq", "exercise", "at", "points", "max_points", "status", "feedback", "extra")
_BLOCK = 64


def hmac_sha256(key, data, sha256=hashlib.sha256):
    """HMAC-SHA256 of ``data`` under ``key`` (both bytes), as hex; the same as ``hmac.new(...).hexdigest()``.

    Example:
        >>> import hmac
        >>> hmac_sha256(b"k", b"msg") == hmac.new(b"k", b"msg", "sha256").hexdigest()
        True
    """
    if len(key) > _BLOCK:
        key = sha256(key).digest()
    key = key + b"\0" * (_BLOCK - len(key))
    inner = sha256(bytes(k ^ 0x36 for k in key) + data).digest()
    return sha256(bytes(k ^ 0x5C for k in key) + inner).hexdigest()


def check_token(key, seq, exercise, at, sha256=hashlib.sha256):
    """The token that authorises check number ``seq`` of ``exercise`` (``at`` is "after", "end" or "report").

    The grader puts it in the cell that asks the kernel for a check; the kernel side accepts only
    the next number in sequence with its right token, so a notebook can neither replay an old
    request nor make up a new one.
    """
    return hmac_sha256(key, f"token|{seq}|{exercise}|{at}".encode(), sha256)[:32]


def encode(key, record, sha256=hashlib.sha256):
    """One signed line for ``record`` (a dict with :data:`FIELDS`); text fields are hex-encoded."""
    values = [str(record[name]) if name not in ("feedback", "extra") else str(record[name]).encode().hex()
              for name in FIELDS]
    body = "|".join(values)
    return f"{body}|{hmac_sha256(key, body.encode(), sha256)}\n"


def decode(key, line):
    """The record of a signed line, or None when the line is malformed or its signature is wrong.

    Example:
        >>> line = encode(b"k", dict(seq=1, exercise="q1", at="after", points=2, max_points=2,
        ...                          status="correct", feedback="ok", extra=""))
        >>> decode(b"k", line)["points"], decode(b"other key", line)
        (2, None)
    """
    import hmac

    parts = line.rstrip("\n").split("|")
    if len(parts) != len(FIELDS) + 1:
        return None
    body, signature = "|".join(parts[:-1]), parts[-1]
    if not hmac.compare_digest(hmac_sha256(key, body.encode()), signature):
        return None
    record = dict(zip(FIELDS, parts[:-1]))
    try:
        for name in ("seq", "points", "max_points"):
            record[name] = int(record[name])
        for name in ("feedback", "extra"):
            record[name] = bytes.fromhex(record[name]).decode()
    except ValueError:
        return None
    return record
