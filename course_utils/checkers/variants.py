"""Per-student variants of a question: its parameters, drawn from a seed, and the texts made from them.

An exercise that varies declares ``defaults`` (the numbers of the self-study notebooks) and ``draw(rng)`` (a valid
set of parameters drawn with a :class:`random.Random`); its question texts, watch cells and solution cell are
templates by cell id, with ``{{name}}`` where a value goes (:func:`fill`). A student's parameters are drawn from
``HMAC-SHA256(key, "<student id>/<chapter>.<exercise>")`` (:func:`student_rng`): the same key and id give the same
variant, and nobody without the key can tell another student's. Nothing here reads the key: the instructor's side
(:mod:`course_utils.grading.roster`) does, and passes the parameters on, which are not secret.
"""
import hashlib
import hmac
import json
import random
import re

__all__ = ["NUMBER_WORDS", "VARIANT_ENV", "CasesInRandomOrder", "fill", "student_rng", "student_variant",
           "variant_from_env", "variant_label"]

VARIANT_ENV = "COURSE_VARIANT"  # set by the grader in the kernels it runs: the student's parameters, as JSON
PLACE = re.compile(r"\{\{(\w+)\}\}")
MAX_TRIES = 1000  # draws per exercise before a draw that keeps failing its own validity check is a bug
NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}  # in texts


class CasesInRandomOrder:
    """For a question whose cases are shown under the letters a, b, c, ... in an order drawn per student (mixed into
    its :class:`~course_utils.checkers.core.Exercise`): the class sets ``cases`` (a dict keyed by the cases' own
    letters); its parameters are ``{"order": the cases' keys in the order shown}``, and ``defaults`` is their own
    order (the self-study notebooks')."""
    cases = {}

    @classmethod
    def draw(cls, rng):
        """The cases in a random order."""
        return {"order": "".join(rng.sample(sorted(cls.cases), len(cls.cases)))}

    def _shown(self):
        """{letter shown: case (a key of ``cases``)}, in the order shown."""
        return dict(zip(sorted(self.cases), self.params["order"]))


def fill(template, values):
    """``template`` with every ``{{name}}`` replaced by ``str(values[name])``; other braces are left as they are.

    Raises:
        KeyError: the template names a value that ``values`` does not have (the message lists both).

    Example:
        >>> fill("a tensor of shape {{shape}} on {{devices}} devices, a dict {'a': 1}", {"shape": [8, 12], "devices": 8})
        "a tensor of shape [8, 12] on 8 devices, a dict {'a': 1}"
    """
    def value(match):
        if match[1] not in values:
            raise KeyError(f"the template names {{{{{match[1]}}}}}, but its exercise gives only the values "
                           f"{sorted(values)}: add it to the exercise's text_values()")
        return str(values[match[1]])
    return PLACE.sub(value, template)


def student_rng(key, student, chapter, exercise):
    """The :class:`random.Random` of one student's variant of one exercise, seeded with
    ``HMAC-SHA256(key, f"{student}/{chapter}.{exercise}")``.

    Raises:
        TypeError: ``key`` is not bytes.

    Example:
        >>> student_rng(b"k" * 32, "alice", 4, "q3").random() == student_rng(b"k" * 32, "alice", 4, "q3").random()
        True
        >>> student_rng(b"k" * 32, "alice", 4, "q3").random() == student_rng(b"k" * 32, "bob", 4, "q3").random()
        False
    """
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError(f"the course key is bytes (read from its key file), not a {type(key).__name__}")
    digest = hmac.new(bytes(key), f"{student}/{chapter}.{exercise}".encode(), hashlib.sha256).digest()
    return random.Random(int.from_bytes(digest, "big"))


def student_variant(definition, key, student):
    """The parameters of every exercise of a chapter that varies, for one student: ``{name: params}``.

    Each exercise's ``draw`` is called with :func:`student_rng`; a draw equal to the defaults (the self-study
    variant, whose solution is public) is drawn again with the same generator, so it is never given out.

    Args:
        definition: the chapter's :class:`~course_utils.checkers.core.Chapter`.
        key: the course key (bytes).
        student: the student's id.

    Raises:
        RuntimeError: an exercise's ``draw`` keeps giving its defaults (a bug of the draw).

    Example:
        >>> from course_utils.checkers import chapter_definition
        >>> variant = student_variant(chapter_definition(4), b"k" * 32, "alice")
        >>> sorted(variant) == sorted(n for n, c in chapter_definition(4).named.items() if c.defaults)
        True
    """
    found = {}
    for name, cls in definition.named.items():
        if not cls.defaults:
            continue
        rng = student_rng(key, student, definition.number, name)
        for _ in range(MAX_TRIES):
            params = cls.draw(rng)
            if params != cls.defaults:
                break
        else:
            raise RuntimeError(f"{cls.__name__}.draw gave its defaults {MAX_TRIES} times: it must draw other values")
        found[name] = json.loads(json.dumps(params))  # plain data, as it crosses to a kernel
    return found


def variant_label(variant):
    """A short digest of a variant, to count distinct ones: equal variants, equal labels.

    Example:
        >>> variant_label({"q3": {"shape": [8, 12, 16]}}) == variant_label({"q3": {"shape": [8, 12, 16]}})
        True
    """
    return hashlib.sha256(json.dumps(variant, sort_keys=True).encode()).hexdigest()[:12]


def variant_from_env(environ):
    """The variant the grader passed to its kernel in ``environ[VARIANT_ENV]`` (JSON), or None.

    Raises:
        ValueError: the variable holds something other than a JSON object of parameters per exercise.

    Example:
        >>> variant_from_env({VARIANT_ENV: '{"q3": {"shape": [8, 12, 16]}}'})
        {'q3': {'shape': [8, 12, 16]}}
    """
    text = environ.get(VARIANT_ENV)
    if not text:
        return None
    variant = json.loads(text)
    if not isinstance(variant, dict) or not all(isinstance(v, dict) for v in variant.values()):
        raise ValueError(f"{VARIANT_ENV} must be a JSON object {{exercise: {{parameter: value}}}}, got {text[:80]!r}")
    return variant
