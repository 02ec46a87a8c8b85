"""Reading learners' answers: placeholders, numbers, shapes, tensors and DTensors.

Everything here is forgiving about the *type* of an answer (a NumPy bool is a bool, a
``TensorShape`` is a shape) and returns ``None`` when an answer cannot be read, so that the
graders can say what they expected instead of raising. TensorFlow is imported only inside the
functions that need it.
"""
import math
import numbers
import re

import numpy as np

from ..meshes import UNSHARDED

__all__ = ["UNSHARDED", "as_bool", "as_bool_list", "as_bytes", "as_collective", "as_float", "as_int", "as_number",
           "as_shape", "checker_mesh", "close", "global_numpy", "grade_items", "grade_statements", "is_placeholder",
           "layout_of", "logical_cpus", "mesh_dims", "on_mesh", "only_ellipses", "quiet_tensorflow", "short_error",
           "specs"]


def is_placeholder(value, none_is_answer=False):
    """Whether ``value`` is still an exercise placeholder rather than an answer.

    ``...`` always is; ``None`` is unless ``none_is_answer`` (for exercises where ``None`` is a
    meaningful wrong answer, such as a gradient the tape did not record). A list, tuple or dict
    is a placeholder when it is empty or all its items are.

    Example:
        >>> is_placeholder({"a": None, "b": None}), is_placeholder([True, None])
        (True, False)
    """
    if value is Ellipsis or (value is None and not none_is_answer):
        return True
    if isinstance(value, dict):
        return all(is_placeholder(v, none_is_answer) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(is_placeholder(v, none_is_answer) for v in value)
    return False


def only_ellipses(value):
    """Whether ``value`` is ``...``, or a non-empty dict, list or tuple of ``...`` only.

    The placeholder test of exercises in which ``None``, ``()`` and ``[]`` are answers (such as
    "no collective" or "no key"): their placeholders are ``...``.

    Example:
        >>> only_ellipses({"a": ..., "b": ...}), only_ellipses({"a": None, "b": ...}), only_ellipses(())
        (True, False, False)
    """
    if value is Ellipsis:
        return True
    items = list(value.values()) if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else None
    return bool(items) and all(only_ellipses(item) for item in items)


def short_error(err, limit=300):
    """One line about an exception, cut to ``limit`` characters (TensorFlow's can be huge).

    Example:
        >>> short_error(ValueError("bad\\n  shape"))
        'ValueError: bad shape'
    """
    text = " ".join(str(err).split())
    if len(text) > limit:
        text = text[:limit] + " ..."
    return f"{type(err).__name__}: {text}"


BOOL_WORDS = {"true": True, "t": True, "yes": True, "false": False, "f": False, "no": False}


def as_bool(value):
    """``True``/``False`` from a bool, a NumPy bool, 0/1 or a word such as ``"True"``, ``" false"`` or ``"yes"``
    (any case, spaces around); else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return BOOL_WORDS.get(value.strip().lower())
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    return None


def as_bool_list(feedback, answer, count, item, meaning):
    """``answer`` as a list of ``count`` booleans (``None`` where one is not a bool), one per ``item``.

    When ``answer`` is not a list of ``count`` values, adds a hint to ``feedback`` saying what to
    give and returns None.

    Example:
        >>> from course_utils.checkers.core import Feedback
        >>> as_bool_list(Feedback(), [True, 0], 2, "call", "True = this call traces")
        [True, False]
    """
    if isinstance(answer, (str, bytes, dict)) or not hasattr(answer, "__len__"):
        feedback.wrong(f"Give a list of {count} booleans, one per {item} ({meaning}).")
        return None
    values = [as_bool(a) for a in answer]
    if len(values) != count:
        feedback.wrong(f"Give one True/False per {item}: {count} values, not {len(values)}.")
        return None
    return values


def grade_statements(feedback, statements, truths, ideas, points_for=None):
    """Grade a list of True/False answers against ``truths`` (``[(bool, why), ...]``) into ``feedback``.

    Naming a wrong True/False would name its right value, so the feedback counts the wrong ones and
    names the ``ideas`` to revisit (one per statement); which statements they are, and why, is the
    answer part (``answer=``, held back where the mode asks).

    Args:
        points_for: ``{number judged right: points}``; default one point per statement judged right.

    Example:
        >>> from course_utils.checkers.core import Feedback
        >>> fb = Feedback()
        >>> grade_statements(fb, [True, "false"], [(True, "why 1"), (True, "why 2")], ["idea 1", "idea 2"])
        >>> fb.points, fb.render(graded=True)
        (1, '  ✓ 1 of the 2 statements judged right\\n  ✗ 1 statement is judged wrong. Revisit: idea 2.')
    """
    values = as_bool_list(feedback, statements, len(truths), "statement", "True = the statement is true")
    if values is None:
        return
    missing = [i for i, value in enumerate(values, start=1) if value is None]
    if missing:
        feedback.wrong(f"statement(s) {missing}: not answered yet (use True or False; the words 'True' and 'False' "
                       f"do too).")
    right = [i for i, value in enumerate(values) if value is not None and value == truths[i][0]]
    wrong = [i for i, value in enumerate(values) if value is not None and value != truths[i][0]]
    if right:
        points = len(right) if points_for is None else points_for.get(len(right), 0)
        feedback.right(f"{len(right)} of the {len(truths)} statements judged right", points=points)
    if wrong:
        count = "1 statement is" if len(wrong) == 1 else f"{len(wrong)} statements are"
        feedback.wrong(f"{count} judged wrong. Revisit: " + "; ".join(ideas[i] for i in wrong) + ".",
                       answer=" ".join(f"Statement {i + 1} is {truths[i][0]}: {truths[i][1]}" for i in wrong))


def as_number(value, percent=False):
    """A finite float from anything ``float()`` takes (ints, floats, NumPy numbers, 0-d arrays and tensors,
    ``Fraction``) or from text a learner might type: ``"4096"``, ``" 0.2 "``, ``"940_584"``, ``"940,584"``,
    ``"940 584"`` (thousands grouped), and with ``percent=True`` (for shares) ``"20%"`` (0.2); else None (bools
    and bytes are not numbers here).

    Example: ``as_number("1,024") == 1024.0``; ``as_number("64 MiB") is None``.
    """
    if isinstance(value, (bool, np.bool_, bytes)):
        return None
    scale = 1.0
    if isinstance(value, str):
        value = value.strip().replace("_", "")
        if percent and value.endswith("%"):
            value, scale = value[:-1].strip(), 0.01
        if re.fullmatch(r"[+-]?\d{1,3}([ ,]\d{3})+(\.\d*)?", value):
            value = value.replace(",", "").replace(" ", "")
    try:
        number = float(value) * scale
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def as_int(value):
    """An int from an int, an integral NumPy number or float, or text such as ``"2"`` (see :func:`as_number`);
    else None (bools are not ints here)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)  # exact, however large
    number = as_number(value)
    return int(number) if number is not None and number == int(number) else None


def as_bytes(value):
    """A whole number of bytes from a number or numeric text (see :func:`as_number`: an int, a float such as
    ``2 * 3 / 4 * n``, a NumPy number or 0-d array, ``"4096"``; rounded); else None (``"96 MiB"`` is not bytes)."""
    number = as_number(value)
    return None if number is None else round(number)


SHAPE_TEXT = re.compile(r"^[\s(\[]*\d+(?:\s*(?:[x×*,]|\s)\s*\d+)*[\s,)\]]*$", re.IGNORECASE)


def as_shape(value):
    """A tuple of ints from a tuple, list, NumPy array or ``TensorShape``, or from text such as ``"(6, 3)"``,
    ``"2x12"`` or ``"4 × 3"``; else None."""
    if isinstance(value, str):
        return tuple(int(n) for n in re.findall(r"\d+", value)) if SHAPE_TEXT.match(value) else None
    try:
        if hasattr(value, "as_list"):
            value = value.as_list()
        ints = tuple(as_int(s) for s in tuple(value))
        if all(i is not None for i in ints):
            return ints
    except TypeError:
        pass
    return None


def close(a, b, rel=1e-4):
    """Whether two numbers (either may be None) are equal up to ``rel`` (and 1e-7 absolute)."""
    return a is not None and b is not None and math.isclose(a, b, rel_tol=rel, abs_tol=1e-7)


def layout_of(value):
    """The DTensor layout of a tensor or variable, or None if it is not a DTensor."""
    from tensorflow.experimental import dtensor

    try:
        return dtensor.fetch_layout(value)
    except Exception:
        return None


def specs(layout):
    """A layout's sharding specs as a list."""
    return list(layout.sharding_specs)


def mesh_dims(mesh):
    """A mesh's axes as ``[(name, size), ...]``."""
    return [(name, mesh.dim_size(name)) for name in mesh.dim_names]


def global_numpy(value):
    """The full (global) value of a tensor, variable, DTensor or array as a NumPy array."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    if isinstance(value, tf.Variable):
        value = value.read_value()
    layout = layout_of(value) if isinstance(value, tf.Tensor) else None
    if layout is not None:
        replicated = dtensor.Layout.replicated(layout.mesh, rank=len(layout.sharding_specs))
        return dtensor.unpack(dtensor.relayout(value, replicated))[0].numpy()
    if isinstance(value, tf.Tensor):
        return value.numpy()
    return np.asarray(value)


def as_float(value):
    """A Python float from a number, a scalar tensor or array; ValueError otherwise."""
    array = global_numpy(value)
    if array.size != 1:
        raise ValueError(f"expected one number, got shape {list(array.shape)}")
    return float(array.reshape(()))


class quiet_tensorflow:
    """Silence TensorFlow's Python warnings (retracing, eager strategy) while a checker runs."""

    def __enter__(self):
        import tensorflow as tf

        self._logger = tf.get_logger()
        self._level = self._logger.level
        self._logger.setLevel("ERROR")

    def __exit__(self, *exc):
        self._logger.setLevel(self._level)


def logical_cpus():
    """The names of this process's logical CPUs."""
    import tensorflow as tf

    return [d.name for d in tf.config.list_logical_devices("CPU")]


def first_cpus(count):
    """The names of this process's first ``count`` logical CPUs, for a checker's mesh or strategy.

    Raises:
        RuntimeError: the process has fewer (a kernel that skipped the notebook's first cell); the message says to
            run it in a fresh kernel.

    Example:
        >>> first_cpus(2)  # the course's 8 virtual CPUs
        ['/device:CPU:0', '/device:CPU:1']
    """
    cpus = logical_cpus()
    if len(cpus) < count:
        raise RuntimeError(f"the checker needs {count} logical CPUs and this kernel has {len(cpus)}: run the "
                           "notebook's first cell (configure_virtual_cpus(8)) in a fresh kernel, then check again.")
    return cpus[:count]


_MESH_CACHE = {}


def mesh_on_first_cpus(dims):
    """A mesh of ``dims`` (``[(axis, size), ...]``) on this process's first logical CPUs, made once per process.

    Raises:
        RuntimeError: the process has fewer logical CPUs than the mesh has devices (:func:`first_cpus`).

    Example:
        >>> mesh_on_first_cpus([("batch", 2), ("model", 2)]).shape()
        [2, 2]
    """
    from tensorflow.experimental import dtensor

    dims = tuple((axis, size) for axis, size in dims)
    cpus = first_cpus(math.prod(size for _, size in dims))
    key = (tuple(cpus), dims)
    if key not in _MESH_CACHE:
        _MESH_CACHE[key] = dtensor.create_mesh(list(dims), devices=cpus)
    return _MESH_CACHE[key]


def checker_mesh():
    """A 'batch' x 'model' mesh on this process's logical CPUs (4 x 2 with the course's 8 CPUs)."""
    cpus = logical_cpus()
    model = 2 if len(cpus) >= 2 else 1
    return mesh_on_first_cpus([("batch", min(4, len(cpus) // model)), ("model", model)])


def on_mesh(value, layout):
    """A host value as a DTensor with ``layout``."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    replicated = dtensor.Layout.replicated(layout.mesh, rank=len(layout.sharding_specs))
    return dtensor.relayout(dtensor.copy_to_mesh(tf.constant(value), replicated), layout)


def grade_items(feedback, answer, expected, explain, normalize, what, unanswered=is_placeholder):
    """Grade a dict of independent items, one point each, into ``feedback``.

    Args:
        feedback: the :class:`~course_utils.checkers.core.Feedback` to add lines to.
        answer: the learner's dict.
        expected: ``{key: right value}``.
        explain: ``(key, given, raw) -> (why, answer)``: why ``given`` is wrong, and the part of
            the explanation that gives the right answer away (may be ``""``).
        normalize: turns an item into something comparable with the right value (or None).
        what: a few words on what each item is, for the message about a wrong type.
        unanswered: ``raw -> bool``, whether an item is still its placeholder (``is_placeholder`` by
            default; ``only_ellipses`` where ``None``, ``()`` or ``[]`` is an answer).
    """
    if not isinstance(answer, dict):
        feedback.wrong(f"Give a dict with the keys {list(expected)} ({what}), not a {type(answer).__name__}.")
        return feedback
    missing = [k for k in expected if k not in answer]
    extra = [k for k in answer if k not in expected]
    if missing:
        feedback.wrong(f"Missing key(s) {missing}: answer every item.")
    if extra:
        feedback.wrong(f"Unknown key(s) {extra}: the keys are {list(expected)}.")
    for key, right in expected.items():
        if key not in answer:
            continue
        raw = answer[key]
        if unanswered(raw):
            feedback.wrong(f"{key}: not answered yet.")
            continue
        given = normalize(raw)
        if given == right:
            feedback.right(key)
        else:
            why, reveal = explain(key, given, raw)
            feedback.wrong(f"{key}: {why}", answer=reveal)
    return feedback


NO_COLLECTIVE = ("none", "no", "nothing", "no collective", "no communication", "[]", "()")
KINDS = {"allreduce": "all-reduce", "allgather": "all-gather", "reducescatter": "reduce-scatter"}


def as_collective(raw):
    """'none', or (kind, mesh axis) with the kind spelled 'all-reduce', 'all-gather' or 'reduce-scatter'.

    Reads what a learner writes and what ``collectives_run_by`` gives: ``None``, ``()``, ``[]`` or
    ``"none"`` for no collective; ``("all-reduce", "model")``, ``("all-reduce", ("model",))`` (a
    ``CollectiveRun``'s ``(kind, axes)``), a list holding one such pair, or a ``CollectiveRun``.
    Several mesh axes stay a tuple (a wrong axis, not an unreadable answer); anything else is None.
    """
    if raw is None:
        return "none"
    if hasattr(raw, "kind") and hasattr(raw, "axes"):  # a CollectiveRun
        raw = (raw.kind, tuple(raw.axes))
    if isinstance(raw, str):
        return "none" if raw.strip().lower() in NO_COLLECTIVE else None
    if not isinstance(raw, (list, tuple)):
        return None
    if not raw:
        return "none"
    if len(raw) == 1 and not isinstance(raw[0], str):  # [("all-reduce", ("model",))], as collectives_run_by lists them
        inner = raw[0]
        readable = hasattr(inner, "kind") or isinstance(inner, (list, tuple)) and len(inner) == 2
        return as_collective(inner) if readable else None
    if len(raw) != 2 or not isinstance(raw[0], str):
        return None
    kind, axes = raw[0].lower().replace("_", "").replace("-", "").replace(" ", ""), raw[1]
    axes = [axes] if isinstance(axes, str) else list(axes) if isinstance(axes, (list, tuple)) else None
    if not axes or not all(isinstance(axis, str) for axis in axes):
        return None
    axes = tuple(axis.strip().strip("'\"").lower() for axis in axes)
    return (KINDS.get(kind, kind), axes[0] if len(axes) == 1 else axes)
