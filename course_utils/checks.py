"""Checkers for the graded exercises (``exercises/NN_*.ipynb``), in the style of Kaggle's learntools.

In an exercise notebook::

    from course_utils.checks import exercises
    ex = exercises(4)              # the checkers of chapter 4
    ex.q1.check(mesh, layout)      # prints "Correct!" or a hint aimed at your mistake
    ex.q1.hint()                   # a nudge
    ex.q1.solution()               # the answer, with the reasoning
    ex.summary()                   # your points so far in this kernel

A checker never raises because of an answer: a wrong type, a function that crashes, a tensor on
the wrong mesh all give a hint. An answer still left at its placeholder (``None``, ``...``, or a
dict/list of those) prints "Not answered yet" and scores 0.

Every check appends one JSON line ``{"chapter", "exercise", "points", "max_points", "status"}``
to the file named by the environment variable ``COURSE_GRADE_FILE`` when it is set (the grader,
``python -m course_utils.grade``, sets it); the last line per exercise counts. Without the
variable nothing is written.

This module imports TensorFlow only inside the checkers that need it, so the registry
(:func:`registry`) and the pure-Python checkers are cheap to use.
"""
import inspect
import json
import math
import os
import re
from dataclasses import dataclass

__all__ = [
    "CHAPTER_TITLES",
    "GRADE_FILE_ENV",
    "ChapterExercises",
    "Exercise",
    "Result",
    "exercises",
    "is_placeholder",
    "registry",
]

GRADE_FILE_ENV = "COURSE_GRADE_FILE"
CORRECT, PARTIAL, INCORRECT, UNANSWERED = "correct", "partial", "incorrect", "unanswered"
CHAPTER_TITLES = {
    1: "Tensors and devices",
    2: "Strategies on one machine",
    3: "Beyond one process",
    4: "DTensor meshes and layouts",
    5: "DTensor with Keras",
    6: "Core-API MLP with a hand-written Adam",
}
UNSHARDED = "unsharded"  # the value of dtensor.UNSHARDED, without importing TensorFlow
OK, NO = "✓", "✗"


# --------------------------------------------------------------------------------------------
# The machinery: results, exercises, the registry
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Result:
    """The outcome of one check: points out of ``max_points``, a status and the feedback text.

    ``status`` is ``"correct"`` (full points), ``"partial"``, ``"incorrect"`` (0 points) or
    ``"unanswered"`` (the placeholder is still there).
    """

    points: int
    max_points: int
    status: str
    message: str

    def __str__(self):
        score = f"{self.points}/{self.max_points} point{'s' if self.max_points != 1 else ''}"
        head = {
            CORRECT: f"Correct! {score}.",
            PARTIAL: f"Partly correct: {score}.",
            INCORRECT: f"Incorrect: {score}.",
            UNANSWERED: f"Not answered yet: {score}.",
        }[self.status]
        return head + ("\n" + self.message if self.message else "")


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


def _short(err, limit=300):
    """One line about an exception, cut to ``limit`` characters (TensorFlow's can be huge)."""
    text = " ".join(str(err).split())
    if len(text) > limit:
        text = text[:limit] + " ..."
    return f"{type(err).__name__}: {text}"


class Exercise:
    """One graded exercise: ``check(...)``, ``hint()``, ``solution()``.

    Args:
        chapter: the chapter number.
        name: ``"q1"``, ``"q2"``, ...
        title: a few words about the exercise.
        max_points: the points for a fully correct answer.
        grader: a function taking the answers and returning ``(points, lines_of_feedback)``.
        hint: the text that ``hint()`` prints.
        solution: the text that ``solution()`` prints.
        call: how to call ``check``, for messages, e.g. ``"ex.q1.check(mesh, layout)"``.
        none_is_answer: ``None`` counts as an answer (only ``...`` is a placeholder).
    """

    def __init__(self, chapter, name, title, max_points, grader, hint, solution, call, none_is_answer=False):
        self.chapter = chapter
        self.name = name
        self.title = title
        self.max_points = max_points
        self._grader = grader
        self._hint = hint.strip()
        self._solution = solution.strip()
        self.call = call
        self.none_is_answer = none_is_answer
        self.last_result = None

    def __repr__(self):
        return f"<Exercise {self.chapter}.{self.name}: {self.title} ({self.max_points} points); use {self.call}>"

    def evaluate(self, *args, **kwargs):
        """Grade an answer and return a :class:`Result`, without printing or recording it."""
        answers = list(args) + list(kwargs.values())
        if not answers or all(is_placeholder(a, self.none_is_answer) for a in answers):
            return Result(0, self.max_points, UNANSWERED,
                          f"Replace the placeholder(s) with your answer and run the cell again "
                          f"(call it as {self.call}). Stuck? ex.{self.name}.hint() gives a nudge.")
        try:
            inspect.signature(self._grader).bind(*args, **kwargs)
        except TypeError as err:
            return Result(0, self.max_points, INCORRECT,
                          f"This check is called as {self.call} ({err}).")
        try:
            points, lines = self._grader(*args, **kwargs)
        except Exception as err:  # a checker never raises because of an answer
            return Result(0, self.max_points, INCORRECT,
                          f"The checker could not use your answer ({_short(err)}). "
                          f"It is called as {self.call}; see ex.{self.name}.hint().")
        points = max(0, min(int(points), self.max_points))
        status = CORRECT if points == self.max_points else PARTIAL if points else INCORRECT
        if isinstance(lines, str):
            lines = [lines]
        return Result(points, self.max_points, status, "\n".join(f"  {line}" for line in lines if line))

    def check(self, *args, **kwargs):
        """Grade the answer, print the feedback, and record the result for the grader."""
        result = self.evaluate(*args, **kwargs)
        self.last_result = result
        print(result)
        _record(self.chapter, self.name, result)

    def hint(self):
        """Print a hint."""
        print(f"Hint ({self.chapter}.{self.name}): {self._hint}")

    def solution(self):
        """Print the solution and why it is right."""
        print(f"Solution ({self.chapter}.{self.name}):\n{self._solution}")


def _record(chapter, name, result):
    path = os.environ.get(GRADE_FILE_ENV)
    if not path:
        return
    line = json.dumps({"chapter": chapter, "exercise": name, "points": result.points,
                       "max_points": result.max_points, "status": result.status})
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError as err:
        print(f"(The result could not be recorded in {path}: {_short(err)})")


class ChapterExercises:
    """The exercises of one chapter, as attributes ``q1``, ``q2``, ... (iterable, in order)."""

    def __init__(self, chapter, items):
        self.chapter = chapter
        self.title = CHAPTER_TITLES[chapter]
        self._items = list(items)
        for item in self._items:
            setattr(self, item.name, item)

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __repr__(self):
        lines = [f"Chapter {self.chapter} exercises ({self.title}):"]
        lines += [f"  {e.name}: {e.title} ({e.max_points} points) -> {e.call}" for e in self._items]
        return "\n".join(lines)

    def summary(self):
        """Print the points of the exercises checked so far in this kernel."""
        total = sum(e.max_points for e in self._items)
        got = 0
        print(f"Chapter {self.chapter} · {self.title}")
        for e in self._items:
            r = e.last_result
            got += r.points if r else 0
            state = f"{r.points}/{r.max_points} ({r.status})" if r else f"0/{e.max_points} (not checked yet)"
            print(f"  {e.name}  {e.title:<45} {state}")
        print(f"  Total: {got}/{total} points")


_CHAPTERS = {}


def exercises(chapter):
    """The checkers of ``chapter`` (1-6), as an object with attributes ``q1``, ``q2``, ...

    The same object is returned each time, so ``summary()`` sees every check of the kernel.

    Raises:
        ValueError: there are no exercises for that chapter.

    Example:
        >>> ex = exercises(3)
        >>> ex.q4.check([False, True, True, False, True, False])   # prints "Correct! 6/6 points." and why
    """
    if chapter not in _DEFINITIONS:
        raise ValueError(f"There are exercises for chapters {sorted(_DEFINITIONS)}, not {chapter!r}.")
    if chapter not in _CHAPTERS:
        _CHAPTERS[chapter] = ChapterExercises(chapter, [Exercise(chapter, **d) for d in _DEFINITIONS[chapter]])
    return _CHAPTERS[chapter]


def registry():
    """Every chapter's exercises and their maximum points: ``{chapter: {"q1": points, ...}}``.

    The grader uses it to give 0 points to exercises whose check never ran.

    Example:
        >>> registry()[4]
        {'q1': 2, 'q2': 2, 'q3': 4, 'q4': 4}
    """
    return {chapter: {d["name"]: d["max_points"] for d in defs} for chapter, defs in _DEFINITIONS.items()}


# --------------------------------------------------------------------------------------------
# Small helpers shared by the checkers (TensorFlow is imported lazily)
# --------------------------------------------------------------------------------------------

def _tf():
    import tensorflow as tf

    return tf


def _dtensor():
    from tensorflow.experimental import dtensor

    return dtensor


def _layout_of(value):
    """The DTensor layout of a tensor or variable, or None if it is not a DTensor."""
    dtensor = _dtensor()
    try:
        return dtensor.fetch_layout(value)
    except Exception:
        return None


def _specs(layout):
    return list(layout.sharding_specs)


def _mesh_dims(mesh):
    return [(name, mesh.dim_size(name)) for name in mesh.dim_names]


def _fmt_dims(dims):
    return " x ".join(f"{n}={s}" for n, s in dims) or "(no axes)"


def _global_numpy(value):
    """The full (global) value of a tensor, variable, DTensor or array as a NumPy array."""
    import numpy as np

    tf = _tf()
    dtensor = _dtensor()
    if isinstance(value, tf.Variable):
        value = value.read_value()
    layout = _layout_of(value) if isinstance(value, tf.Tensor) else None
    if layout is not None:
        replicated = dtensor.Layout.replicated(layout.mesh, rank=len(layout.sharding_specs))
        return dtensor.unpack(dtensor.relayout(value, replicated))[0].numpy()
    if isinstance(value, tf.Tensor):
        return value.numpy()
    return np.asarray(value)


def _as_float(value):
    """A Python float from a number, a scalar tensor or array; ValueError otherwise."""
    array = _global_numpy(value)
    if array.size != 1:
        raise ValueError(f"expected one number, got shape {list(array.shape)}")
    return float(array.reshape(()))


def _as_bool(value):
    """``True``/``False`` (also NumPy bools and 0/1), else None."""
    if isinstance(value, bool):
        return value
    if type(value).__module__ == "numpy" and type(value).__name__ in ("bool", "bool_"):
        return bool(value)
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    return None


def _as_int(value):
    """An int from an int or an integral NumPy number, else None."""
    if isinstance(value, bool):
        return None
    try:
        if int(value) == value:
            return int(value)
    except (TypeError, ValueError, OverflowError):
        pass
    return None


def _as_shape(value):
    """A tuple of ints from a tuple, list or TensorShape, else None."""
    try:
        if hasattr(value, "as_list"):
            value = value.as_list()
        shape = tuple(value)
        ints = tuple(_as_int(s) for s in shape)
        if all(i is not None for i in ints):
            return ints
    except TypeError:
        pass
    return None


def _close(a, b, rel=1e-4):
    return a is not None and b is not None and math.isclose(a, b, rel_tol=rel, abs_tol=1e-7)


class _quiet_tensorflow:
    """Silence TensorFlow's Python warnings (retracing, eager strategy) while a checker runs."""

    def __enter__(self):
        self._logger = _tf().get_logger()
        self._level = self._logger.level
        self._logger.setLevel("ERROR")

    def __exit__(self, *exc):
        self._logger.setLevel(self._level)


def _logical_cpus():
    tf = _tf()
    return [d.name for d in tf.config.list_logical_devices("CPU")]


_MESH_CACHE = {}


def _checker_mesh():
    """A 'batch' x 'model' mesh on this process's logical CPUs (4 x 2 with the course's 8 CPUs)."""
    cpus = _logical_cpus()
    key = tuple(cpus)
    if key not in _MESH_CACHE:
        model = 2 if len(cpus) >= 2 else 1
        batch = min(4, len(cpus) // model)
        devices = cpus[: batch * model]
        _MESH_CACHE[key] = _dtensor().create_mesh([("batch", batch), ("model", model)], devices=devices)
    return _MESH_CACHE[key]


def _choice_dict(answer, keys, what):
    """Check that ``answer`` is a dict with exactly ``keys``; returns a list of problems."""
    if not isinstance(answer, dict):
        return [f"{NO} Give a dict with the keys {list(keys)} ({what}), not a {type(answer).__name__}."]
    missing = [k for k in keys if k not in answer]
    extra = [k for k in answer if k not in keys]
    problems = []
    if missing:
        problems.append(f"{NO} Missing key(s) {missing}: answer every item.")
    if extra:
        problems.append(f"{NO} Unknown key(s) {extra}: the keys are {list(keys)}.")
    return problems


def _grade_items(answer, expected, explain, normalize, what):
    """Grade a dict of independent items, one point each.

    ``expected`` maps key -> right value; ``explain(key, given)`` says why ``given`` is wrong
    (``given`` is the normalised answer or None when it can't be read); ``normalize`` turns an
    answer into something comparable (or None).
    """
    problems = _choice_dict(answer, expected, what)
    if problems and not isinstance(answer, dict):
        return 0, problems
    points, lines = 0, list(problems)
    for key, right in expected.items():
        if key not in answer:
            continue
        raw = answer[key]
        if is_placeholder(raw):
            lines.append(f"{NO} {key}: not answered yet.")
            continue
        given = normalize(raw)
        if given == right:
            points += 1
            lines.append(f"{OK} {key}")
        else:
            lines.append(f"{NO} {key}: {explain(key, given, raw)}")
    return points, lines


# --------------------------------------------------------------------------------------------
# Chapter 1 · Tensors and devices
# --------------------------------------------------------------------------------------------

CH1_A = [[1.0, 2.0], [3.0, 4.0]]
CH1_B = [[0.0, 1.0], [1.0, 0.0]]
CH1_DEVICE_INDEX = 5


def _ch1_q1(cpus, product):
    import numpy as np

    tf = _tf()
    points, lines = 0, []
    try:
        names = [getattr(d, "name", d) for d in cpus]
        names = [n for n in names if isinstance(n, str)]
    except TypeError:
        names = None
    if names is None or not names:
        lines.append(f"{NO} cpus: give the list of logical CPU names (what configure_virtual_cpus(8) or "
                     f"tf.config.list_logical_devices('CPU') returns), not a {type(cpus).__name__}.")
    elif len(names) != 8 or not all("CPU" in n.upper() for n in names):
        have = len(_logical_cpus())
        lines.append(f"{NO} cpus: your list has {len(names)} CPU device(s); the exercise asks for 8 virtual CPUs. "
                     f"This kernel has {have}. Devices can only be configured before TensorFlow's runtime starts: "
                     f"restart the kernel and configure them first.")
    else:
        points += 1
        lines.append(f"{OK} cpus: 8 logical CPUs")

    expected = np.array(CH1_A) @ np.array(CH1_B)
    if isinstance(product, np.ndarray):
        lines.append(f"{NO} product is a NumPy array. .numpy() copies the result to the host and forgets where it "
                     f"was computed; pass the tf.Tensor itself.")
        return points, lines
    if not isinstance(product, (tf.Tensor, tf.Variable)):
        lines.append(f"{NO} product should be the tf.Tensor that tf.matmul returned, not a {type(product).__name__}.")
        return points, lines
    value = product.numpy()
    if value.shape != expected.shape or not np.allclose(value, expected):
        if value.shape == expected.shape and np.allclose(value, np.array(CH1_A) * np.array(CH1_B)):
            why = "that is the elementwise product a * b; the exercise asks for the matrix product tf.matmul(a, b) (or a @ b)."
        elif value.shape == expected.shape and np.allclose(value, np.array(CH1_B) @ np.array(CH1_A)):
            why = "that is b @ a; matrix products don't commute: compute tf.matmul(a, b)."
        else:
            why = f"expected tf.matmul(a, b) = {expected.tolist()}, got {value.tolist()}."
        lines.append(f"{NO} product: {why}")
        return points, lines
    spec = tf.DeviceSpec.from_string(product.device or "")
    if (spec.device_type or "").upper() == "CPU" and spec.device_index == CH1_DEVICE_INDEX:
        points += 1
        lines.append(f"{OK} product: computed on {product.device}")
    elif spec.device_index in (0, None):
        lines.append(f"{NO} product was computed on {product.device or 'the default device'}, TensorFlow's default "
                     f"choice. Run the matmul inside `with tf.device(cpus[{CH1_DEVICE_INDEX}]):` so it is placed on "
                     f"CPU:{CH1_DEVICE_INDEX}.")
    else:
        lines.append(f"{NO} product was computed on CPU:{spec.device_index}, the task asks for CPU:{CH1_DEVICE_INDEX}. "
                     f"Device indices count from 0, so it is cpus[{CH1_DEVICE_INDEX}].")
    return points, lines


CH1_CALLS = ["f(tf.constant(1))", "f(tf.constant(2))", "f(tf.constant([1, 2]))", "f(tf.constant([3, 4]))",
             "f(3)", "f(3)", "f(4)"]
CH1_TRACES = [True, False, True, False, True, False, True]
CH1_WHY = [
    "The first call always traces: there is no concrete function yet.",
    "tf.constant(2) has the same dtype (int32) and shape () as tf.constant(1). A tf.function keys its traces "
    "on the dtype and shape of tensor arguments, not on their values, so call 1's trace is reused.",
    "The shape (2,) is new, so this call traces a new concrete function.",
    "Same dtype and shape (2,) as the previous call: its trace is reused. The values [3, 4] don't matter.",
    "A Python number is part of the signature by its *value*, and 3 has not been seen: this call traces.",
    "The Python value 3 was seen by the previous call, so its trace is reused.",
    "4 is a new Python value, so this call traces again. That is why loops pass tensors, not Python numbers, "
    "to a tf.function.",
]


def _ch1_q2(predictions):
    if isinstance(predictions, (str, bytes, dict)) or not hasattr(predictions, "__len__"):
        return 0, [f"Give a list of {len(CH1_CALLS)} booleans, one per call (True = this call traces)."]
    values = [_as_bool(p) for p in predictions]
    if len(values) != len(CH1_CALLS):
        return 0, [f"Give one True/False per call: {len(CH1_CALLS)} values, not {len(values)}."]
    if any(v is None for v in values):
        return 0, ["Use True or False for every call (None means you have not answered that call yet)."]
    wrong = [i for i, (v, t) in enumerate(zip(values, CH1_TRACES)) if v != t]
    if not wrong:
        return 2, [f"Traces happen on calls {[i + 1 for i, t in enumerate(CH1_TRACES) if t]}: a new trace for each "
                   f"new input signature (dtype and shape of tensors, value of Python arguments)."]
    lines = []
    if all(values):
        lines.append("Not every call traces: tf.function reuses a trace when the input signature repeats.")
    elif sum(values) == 1 and values[0]:
        lines.append("A tf.function traces again whenever it sees a new input signature, not only once.")
    lines += [f"{NO} call {i + 1}, {CH1_CALLS[i]}: {CH1_WHY[i]}" for i in wrong]
    return (1 if len(wrong) == 1 else 0), lines


CH1_W, CH1_X = 2.0, 3.0  # y = w * x**2 = 18: dy/dw = x**2 = 9, dy/dx = 2 * w * x = 12


def _ch1_q3(grad_w, grad_x):
    right_w, right_x = CH1_X ** 2, 2 * CH1_W * CH1_X
    points, lines = 0, []
    if grad_w is None and grad_x is None:
        return 0, [f"{NO} Both gradients are None: the tape recorded nothing. Compute y *inside* the "
                   f"`with tf.GradientTape() as tape:` block."]
    values = {}
    for name, value in (("grad_w", grad_w), ("grad_x", grad_x)):
        if value is None or value is Ellipsis:
            values[name] = None
            continue
        try:
            values[name] = _as_float(value)
        except Exception as err:
            values[name] = None
            lines.append(f"{NO} {name}: expected one number (a scalar tensor), {_short(err)}.")
    gw, gx = values["grad_w"], values["grad_x"]
    if _close(gw, right_x) and _close(gx, right_w):
        return 0, [f"{NO} The two gradients are swapped: tape.gradient(y, [w, x]) returns them in the order "
                   f"of the sources you list, dy/dw first."]
    if grad_w is Ellipsis:
        lines.append(f"{NO} grad_w: not answered yet.")
    elif grad_w is None:
        lines.append(f"{NO} grad_w is None: w must be used to compute y inside the tape's `with` block.")
    elif _close(gw, right_w):
        points += 1
        lines.append(f"{OK} grad_w = dy/dw = x**2 = {right_w:g}")
    elif gw is not None:
        lines.append(f"{NO} grad_w = {gw:g}; dy/dw of y = w * x**2 is x**2.")
    if grad_x is Ellipsis:
        lines.append(f"{NO} grad_x: not answered yet.")
    elif grad_x is None:
        lines.append(f"{NO} grad_x is None: x is a tf.constant, and a tape only watches trainable variables "
                     f"automatically. Call tape.watch(x) inside the `with` block, before computing y.")
    elif _close(gx, right_x):
        points += 1
        lines.append(f"{OK} grad_x = dy/dx = 2*w*x = {right_x:g}")
    elif gx is not None:
        if _close(gx, CH1_W * CH1_X ** 2):
            lines.append(f"{NO} grad_x = {gx:g} is y itself, not its derivative: use tape.gradient.")
        else:
            lines.append(f"{NO} grad_x = {gx:g}; dy/dx of y = w * x**2 is 2*w*x.")
    return points, lines


# --------------------------------------------------------------------------------------------
# Chapter 2 · Strategies on one machine
# --------------------------------------------------------------------------------------------

CH2_PER_REPLICA, CH2_BASE_LR, CH2_REPLICAS = 64, 0.001, 8


def _ch2_q1(strategy, global_batch_size, learning_rate):
    tf = _tf()
    points, lines = 0, []
    if not isinstance(strategy, tf.distribute.MirroredStrategy):
        lines.append(f"{NO} strategy: the exercise asks for a tf.distribute.MirroredStrategy, "
                     f"got {type(strategy).__name__}.")
    elif strategy.num_replicas_in_sync != CH2_REPLICAS:
        lines.append(f"{NO} strategy has {strategy.num_replicas_in_sync} replica(s); build it over the 8 virtual "
                     f"CPUs (tf.distribute.MirroredStrategy(cpus)).")
    else:
        points += 1
        lines.append(f"{OK} strategy: MirroredStrategy with 8 replicas")
    right_batch = CH2_PER_REPLICA * CH2_REPLICAS
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int):
        lines.append(f"{NO} global_batch_size should be a whole number (an int), got {global_batch_size!r}.")
    elif global_batch_size == right_batch:
        points += 1
        lines.append(f"{OK} global_batch_size = {CH2_PER_REPLICA} x {CH2_REPLICAS} = {right_batch}")
    elif global_batch_size == CH2_PER_REPLICA:
        lines.append(f"{NO} global_batch_size = {CH2_PER_REPLICA} is the per-replica batch. The dataset is batched "
                     f"with the GLOBAL batch, which the strategy splits: per-replica x num_replicas_in_sync.")
    elif global_batch_size == CH2_PER_REPLICA // CH2_REPLICAS:
        lines.append(f"{NO} global_batch_size = {global_batch_size}: you divided. Each of the {CH2_REPLICAS} replicas "
                     f"keeps its {CH2_PER_REPLICA} examples, so the global batch is {CH2_PER_REPLICA} x replicas.")
    else:
        lines.append(f"{NO} global_batch_size = {global_batch_size}; it is the per-replica batch times "
                     f"strategy.num_replicas_in_sync.")
    try:
        lr = float(learning_rate)
    except (TypeError, ValueError):
        lines.append(f"{NO} learning_rate should be a number, got {learning_rate!r}.")
        return points, lines
    right_lr = CH2_BASE_LR * CH2_REPLICAS
    if _close(lr, right_lr, 1e-6):
        points += 1
        lines.append(f"{OK} learning_rate = {CH2_BASE_LR} x {CH2_REPLICAS} = {right_lr:g} (linear scaling)")
    elif _close(lr, CH2_BASE_LR, 1e-6):
        lines.append(f"{NO} learning_rate is not scaled. With an {CH2_REPLICAS}x larger global batch an epoch has "
                     f"{CH2_REPLICAS}x fewer steps; the linear scaling rule multiplies the learning rate by the "
                     f"same factor.")
    elif _close(lr, CH2_BASE_LR / CH2_REPLICAS, 1e-6):
        lines.append(f"{NO} learning_rate: you divided by the number of replicas; the linear scaling rule "
                     f"multiplies (bigger batch, bigger steps).")
    elif _close(lr, CH2_BASE_LR * right_batch, 1e-6):
        lines.append(f"{NO} learning_rate: scale by how much the batch grew ({right_batch} / {CH2_PER_REPLICA} = "
                     f"{CH2_REPLICAS}), not by the global batch size itself.")
    else:
        lines.append(f"{NO} learning_rate = {lr:g}; scale the base rate by global batch / base batch.")
    return points, lines


CH2_GLOBAL_BATCH = 64
_STRATEGY_CACHE = {}


def _checker_strategy():
    """A MirroredStrategy over this process's logical CPUs (at most 8, a divisor of 64)."""
    tf = _tf()
    cpus = _logical_cpus()
    n = max(k for k in (1, 2, 4, 8) if k <= len(cpus))
    key = tuple(cpus[:n])
    if key not in _STRATEGY_CACHE:
        _STRATEGY_CACHE[key] = tf.distribute.MirroredStrategy(list(key))
    return _STRATEGY_CACHE[key]


def _reference_loss_data():
    import numpy as np

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(CH2_GLOBAL_BATCH, 10)).astype("float32")
    labels = rng.integers(0, 10, size=(CH2_GLOBAL_BATCH,)).astype("int64")
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    per_example = -log_probs[np.arange(CH2_GLOBAL_BATCH), labels]
    return labels, logits, per_example


def _normalize_reduce_op(op):
    value = getattr(op, "value", op)
    return value.upper() if isinstance(value, str) else None


def _ch2_q2(compute_loss, reduce_op):
    import numpy as np

    tf = _tf()
    points, lines = 0, []
    if compute_loss is None:
        lines.append(f"{NO} compute_loss: not answered yet.")
    elif not callable(compute_loss):
        lines.append(f"{NO} compute_loss should be a function (labels, logits) -> loss, got {type(compute_loss).__name__}.")
    else:
        with _quiet_tensorflow():
            strategy = _checker_strategy()
        n = strategy.num_replicas_in_sync
        labels, logits, per_example = _reference_loss_data()
        expected = float(per_example.mean())
        label_parts, logit_parts = np.split(labels, n), np.split(logits, n)
        try:
            dist_labels = strategy.experimental_distribute_values_from_function(
                lambda ctx: tf.constant(label_parts[ctx.replica_id_in_sync_group]))
            dist_logits = strategy.experimental_distribute_values_from_function(
                lambda ctx: tf.constant(logit_parts[ctx.replica_id_in_sync_group]))

            @tf.function
            def summed_loss(labels, logits):
                per_replica = strategy.run(compute_loss, args=(labels, logits))
                return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            with _quiet_tensorflow():
                total = summed_loss(dist_labels, dist_logits).numpy()
        except Exception as err:
            message = _short(err)
            if "Reduction" in str(err):
                lines.append(f"{NO} compute_loss raised inside strategy.run: {message}. Keras losses must not average "
                             f"by themselves under a strategy: create the loss with reduction=NONE (one value per "
                             f"example) and average with tf.nn.compute_average_loss.")
            else:
                lines.append(f"{NO} compute_loss raised inside strategy.run: {message}")
            total = None
        if total is not None:
            if np.ndim(total) != 0:
                lines.append(f"{NO} compute_loss must return one scalar per replica; it returned shape "
                             f"{list(np.shape(total))}. Average the per-example losses with "
                             f"tf.nn.compute_average_loss.")
            else:
                total = float(total)
                if _close(total, expected):
                    points += 2
                    lines.append(f"{OK} compute_loss: summed over the {n} replicas it gives the mean loss of the "
                                 f"global batch ({expected:.4f}), so the summed gradients are the gradient of "
                                 f"the mean.")
                elif n > 1 and _close(total, expected * n):
                    lines.append(f"{NO} compute_loss averages over the per-replica batch ({CH2_GLOBAL_BATCH // n} "
                                 f"examples). The strategy SUMS the replicas' gradients, so this is {n}x too large. "
                                 f"Divide by the global batch: tf.nn.compute_average_loss(per_example_loss, "
                                 f"global_batch_size=GLOBAL_BATCH_SIZE).")
                elif _close(total, expected * CH2_GLOBAL_BATCH):
                    lines.append(f"{NO} compute_loss returns the sum of the per-example losses; divide it by the "
                                 f"global batch size with tf.nn.compute_average_loss(..., global_batch_size=...).")
                elif _close(total, expected / n) and n > 1:
                    lines.append(f"{NO} compute_loss is {n}x too small: it divides by the global batch and again "
                                 f"by the number of replicas. tf.nn.compute_average_loss already does the right "
                                 f"division.")
                else:
                    lines.append(f"{NO} compute_loss summed over the replicas gives {total:.4f}, expected the mean "
                                 f"cross-entropy {expected:.4f}. The model outputs logits: use from_logits=True "
                                 f"(or tf.nn.sparse_softmax_cross_entropy_with_logits).")
    op = _normalize_reduce_op(reduce_op)
    if reduce_op is None:
        lines.append(f"{NO} reduce_op: not answered yet.")
    elif op == "SUM":
        points += 1
        lines.append(f"{OK} reduce_op: SUM. Each replica's loss is already divided by the global batch, so their "
                     f"sum is the mean over the global batch.")
    elif op == "MEAN":
        lines.append(f"{NO} reduce_op: MEAN would divide by the number of replicas a second time (each replica's "
                     f"loss is already divided by the GLOBAL batch), reporting 1/{CH2_REPLICAS} of the true loss.")
    else:
        lines.append(f"{NO} reduce_op should be tf.distribute.ReduceOp.SUM or .MEAN, got {reduce_op!r}.")
    return points, lines


_STRATEGY_NAMES = {
    "mirroredstrategy": "MirroredStrategy",
    "multiworkermirroredstrategy": "MultiWorkerMirroredStrategy",
    "collectiveallreducestrategy": "MultiWorkerMirroredStrategy",
    "parameterserverstrategy": "ParameterServerStrategy",
    "parameterserverstrategyv2": "ParameterServerStrategy",
    "onedevicestrategy": "OneDeviceStrategy",
    "centralstoragestrategy": "CentralStorageStrategy",
    "tpustrategy": "TPUStrategy",
    "multidevicestrategy": "MultiDeviceStrategy",
    "dtensor": "DTensor",
    "tf.experimental.dtensor": "DTensor",
}

CH2_SCENARIOS = {
    "a": ("One machine with 4 GPUs. Synchronous data parallelism; every GPU keeps its own copy of every variable.",
          "MirroredStrategy"),
    "b": ("Two machines with 4 GPUs each. Synchronous data parallelism over all 8 GPUs.",
          "MultiWorkerMirroredStrategy"),
    "c": ("Dozens of preemptible machines. Workers should not wait for each other (asynchronous updates), and a "
          "huge embedding table should be split over a few servers.", "ParameterServerStrategy"),
    "d": ("A laptop with one GPU. The strategy.scope() code should run unchanged, with all variables and all "
          "computation placed on one device that you name, and no mirroring.", "OneDeviceStrategy"),
    "e": ("One machine with several GPUs, synchronous training, but the variables are kept in one place (the "
          "CPU) instead of being mirrored on every GPU.", "CentralStorageStrategy"),
    "f": ("A single weight matrix is too large for one device's memory: each weight must be split over "
          "several devices (model parallelism).", "DTensor"),
}
_STRATEGY_WHY = {
    "MultiDeviceStrategy": "tf.distribute has no MultiDeviceStrategy (a name that circulates); several devices "
                           "on one machine is MirroredStrategy.",
    "TPUStrategy": "TPUStrategy is for TPUs; no scenario here has one.",
}
_SCENARIO_WHY = {
    ("a", "MultiWorkerMirroredStrategy"): "MultiWorkerMirroredStrategy is for several machines (each process "
                                          "needs TF_CONFIG); one machine with several GPUs uses MirroredStrategy.",
    ("a", "CentralStorageStrategy"): "CentralStorageStrategy keeps ONE copy of the variables on the CPU; here "
                                     "every GPU keeps its own mirror.",
    ("b", "MirroredStrategy"): "MirroredStrategy only uses the devices of its own machine. Two machines need "
                               "MultiWorkerMirroredStrategy (one process per machine, TF_CONFIG).",
    ("b", "ParameterServerStrategy"): "ParameterServerStrategy is asynchronous; the scenario asks for "
                                      "synchronous training, which is MultiWorkerMirroredStrategy.",
    ("c", "MultiWorkerMirroredStrategy"): "MultiWorkerMirroredStrategy is synchronous: every step waits for all "
                                          "workers (all-reduce), and a lost worker fails the step.",
    ("c", "DTensor"): "Splitting an embedding table over servers is what ParameterServerStrategy's variable "
                      "partitioning does, together with asynchronous workers.",
    ("d", "MirroredStrategy"): "MirroredStrategy with one device works, but the strategy made for 'everything "
                               "on this one named device, no mirroring' is OneDeviceStrategy.",
    ("e", "MirroredStrategy"): "MirroredStrategy keeps a copy of every variable on every device; keeping them "
                               "in one place on the CPU is CentralStorageStrategy.",
    ("e", "ParameterServerStrategy"): "ParameterServerStrategy needs a cluster of worker and parameter-server "
                                      "processes and is asynchronous; one machine, synchronous, variables on "
                                      "the CPU is CentralStorageStrategy.",
    ("f", "ParameterServerStrategy"): "ParameterServerStrategy is data parallelism: every worker still computes "
                                      "with the whole model. Splitting each weight over devices is model "
                                      "parallelism: DTensor (chapters 4-6).",
    ("f", "CentralStorageStrategy"): "CentralStorageStrategy is synchronous data parallelism with the variables "
                                     "on the CPU, not model parallelism. Splitting weights over devices is "
                                     "DTensor.",
    ("f", "MirroredStrategy"): "MirroredStrategy copies the WHOLE model to every device; it cannot split a "
                               "weight. That is DTensor's job.",
    ("f", "MultiWorkerMirroredStrategy"): "MultiWorkerMirroredStrategy also copies the whole model to every "
                                          "device. Splitting a weight is DTensor's job.",
}


def _normalize_strategy(value):
    if isinstance(value, type):
        value = value.__name__
    elif not isinstance(value, str):
        value = type(value).__name__
    text = value.strip().lower().replace("()", "")
    for prefix in ("tf.distribute.experimental.", "tf.distribute.", "experimental.", "tf."):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.replace(" ", "").replace("_", "")
    if text.startswith("dtensor") or text == "experimental.dtensor":
        return "DTensor"
    return _STRATEGY_NAMES.get(text, value)


def _ch2_q3(choices):
    expected = {k: right for k, (_, right) in CH2_SCENARIOS.items()}

    def explain(key, given, raw):
        if (key, given) in _SCENARIO_WHY:
            return _SCENARIO_WHY[(key, given)]
        if given in _STRATEGY_WHY:
            return _STRATEGY_WHY[given]
        if given not in _STRATEGY_NAMES.values():
            return (f"{raw!r} is not one of the choices: MirroredStrategy, MultiWorkerMirroredStrategy, "
                    f"ParameterServerStrategy, OneDeviceStrategy, CentralStorageStrategy, DTensor.")
        return f"{given} does not fit: {CH2_SCENARIOS[key][0]}"

    return _grade_items(choices, expected, explain, _normalize_strategy, "one strategy name per scenario")


# --------------------------------------------------------------------------------------------
# Chapter 3 · Beyond one process
# --------------------------------------------------------------------------------------------

CH3_MWMS_WORKERS = ["localhost:12345", "localhost:12346", "localhost:12347"]
CH3_MWMS = {"cluster": {"worker": CH3_MWMS_WORKERS}, "task": {"type": "worker", "index": 2}}
CH3_PS_CLUSTER = {"chief": ["localhost:20000"], "worker": ["localhost:20001", "localhost:20002"],
                  "ps": ["localhost:20003"]}
CH3_PS = {"cluster": CH3_PS_CLUSTER, "task": {"type": "ps", "index": 0}}
_ROLE_ALIASES = {"parameter_server": "ps", "parameterserver": "ps", "parameter-server": "ps", "server": "ps",
                 "workers": "worker", "chiefs": "chief", "master": "chief"}


def _grade_tf_config(tf_config, expected, task_words):
    """Grade a TF_CONFIG string against ``expected``: 1 point for the cluster, 1 for the task."""
    points, lines = 0, []
    if isinstance(tf_config, dict):
        lines.append(f"{NO} TF_CONFIG is an environment variable, so its value must be a STRING: "
                     f"json.dumps(your_dict). (The content is graded below, but a dict earns at most 1 point.)")
        config, cap = tf_config, 1
    elif isinstance(tf_config, (str, bytes)):
        try:
            config = json.loads(tf_config)
        except ValueError as err:
            return 0, [f"{NO} Not valid JSON ({err}). Build a dict and json.dumps it instead of writing JSON "
                       f"by hand."]
        cap = 2
    else:
        return 0, [f"{NO} Give TF_CONFIG as a JSON string (json.dumps of a dict), not a {type(tf_config).__name__}."]
    if not isinstance(config, dict):
        return 0, [f"{NO} TF_CONFIG must be a JSON object with the keys 'cluster' and 'task'."]
    extra = [k for k in config if k not in ("cluster", "task")]
    if extra:
        lines.append(f"{NO} Unknown top-level key(s) {extra}: TF_CONFIG has exactly 'cluster' and 'task'.")
    cluster, task = config.get("cluster"), config.get("task")
    right_cluster = expected["cluster"]
    if not isinstance(cluster, dict):
        lines.append(f"{NO} 'cluster' is missing or not a dict of role -> list of 'host:port' strings.")
    elif cluster == right_cluster:
        points += 1
        lines.append(f"{OK} cluster")
    else:
        why = []
        for role in cluster:
            if role in _ROLE_ALIASES:
                why.append(f"the role is called {_ROLE_ALIASES[role]!r}, not {role!r}")
            elif role not in right_cluster:
                if role == "chief":
                    why.append("this cluster has no chief: worker 0 does the chief's extra work (checkpoints, logs)")
                else:
                    why.append(f"there is no {role!r} role in this cluster")
        for role, addresses in right_cluster.items():
            given = cluster.get(role)
            if given is None:
                if role == "chief":
                    why.append("the 'chief' is missing: with ParameterServerStrategy the chief runs the "
                               "ClusterCoordinator and must be in the cluster")
                elif not any(_ROLE_ALIASES.get(r) == role for r in cluster):
                    why.append(f"the {role!r} role is missing")
            elif not isinstance(given, list) or not all(isinstance(a, str) for a in given):
                why.append(f"{role!r} must be a list of 'host:port' strings, e.g. {addresses[:1]}")
            elif given != addresses:
                if sorted(given) == sorted(addresses):
                    why.append(f"the {role!r} list is in another order: every process needs the identical, "
                               f"identically ordered list, because a task index means a position in it")
                else:
                    why.append(f"{role!r} should be {addresses}, got {given}")
        lines.append(f"{NO} cluster: " + ("; ".join(why) if why else f"expected {right_cluster}") + ".")
    right_task = expected["task"]
    if not isinstance(task, dict):
        lines.append(f"{NO} 'task' is missing or not a dict like {{'type': ..., 'index': ...}}.")
    elif task == right_task:
        points += 1
        lines.append(f"{OK} task: {task_words}")
    else:
        why = []
        ttype, index = task.get("type"), task.get("index")
        if ttype != right_task["type"]:
            alias = _ROLE_ALIASES.get(ttype) if isinstance(ttype, str) else None
            why.append(f"the role is called {alias!r}" if alias == right_task["type"]
                       else f"this process is {task_words}, so 'type' is {right_task['type']!r}, not {ttype!r}")
        if isinstance(index, str):
            why.append(f"'index' must be a number (int), not the string {index!r}")
        elif index != right_task["index"]:
            if isinstance(index, int) and index == right_task["index"] + 1:
                why.append(f"indices count from 0: {task_words} has index {right_task['index']}")
            else:
                why.append(f"'index' should be {right_task['index']} ({task_words}), not {index!r}")
        extra = [k for k in task if k not in ("type", "index")]
        if extra:
            why.append(f"unknown key(s) {extra} in 'task'")
        lines.append(f"{NO} task: " + "; ".join(why) + ".")
    return min(points, cap), lines


def _ch3_q1(tf_config):
    return _grade_tf_config(tf_config, CH3_MWMS, "the third worker")


def _ch3_q2(tf_config):
    return _grade_tf_config(tf_config, CH3_PS, "the parameter server")


CH3_FAULTS = {"stop_signal": "SIGKILL", "restores": "B", "peer_killed": "B"}
_CH3_FAULT_WHY = {
    ("stop_signal", "SIGTERM"): "once a MultiWorkerMirroredStrategy worker has built its strategy, TensorFlow's "
                                "preemption notifier catches SIGTERM and the process keeps running (chapter 3 "
                                "showed terminate() failing). SIGKILL cannot be caught.",
    ("stop_signal", "SIGINT"): "SIGINT (Ctrl-C) can be caught and handled like SIGTERM; only SIGKILL cannot be "
                               "caught or ignored.",
    ("restores", "A"): "BackupAndRestore saves a full training checkpoint: the weights, the optimizer's state "
                       "(Adam's moments, its step counter) and the training progress.",
    ("restores", "C"): "it does not save the position inside the dataset iterator: with save_freq='epoch' the "
                       "interrupted epoch is run again from its start.",
    ("restores", "D"): "fit() restores automatically when it starts and finds a backup in backup_dir (and "
                       "deletes the backup when training finishes).",
    ("peer_killed", "A"): "synchronous training needs every worker in every all-reduce; the survivor cannot go "
                          "on alone.",
    ("peer_killed", "C"): "the survivor's collective fails within seconds (UnavailableError; a hung peer is "
                          "detected by heartbeats in about 10 s). Only at START-UP does a worker wait for a "
                          "missing peer with no time limit.",
}


def _normalize_signal(value):
    name = getattr(value, "name", None)
    if isinstance(name, str) and name.startswith("SIG"):
        return name
    if isinstance(value, int) and not isinstance(value, bool):
        return {9: "SIGKILL", 15: "SIGTERM", 2: "SIGINT"}.get(value, str(value))
    if isinstance(value, str):
        text = value.strip().upper()
        if text.isdigit():
            return _normalize_signal(int(text))
        return text if text.startswith("SIG") else "SIG" + text
    return value


def _normalize_letter(value):
    return value.strip().upper().rstrip(")").strip() if isinstance(value, str) else value


def _ch3_q3(answers):
    def normalize_item(key):
        return _normalize_signal if key == "stop_signal" else _normalize_letter

    if not isinstance(answers, dict):
        return _grade_items(answers, CH3_FAULTS, None, None, "see the questions")
    normalized = {k: (normalize_item(k)(v) if not is_placeholder(v) else v) for k, v in answers.items()}

    def explain(key, given, raw):
        if (key, given) in _CH3_FAULT_WHY:
            return _CH3_FAULT_WHY[(key, given)]
        if key == "stop_signal":
            return f"{raw!r}: answer with a signal name such as 'SIGTERM' or 'SIGKILL'."
        return f"{raw!r}: answer with one of the letters A, B, C, D."

    return _grade_items(normalized, CH3_FAULTS, explain, lambda v: v, "see the questions")


CH3_STATEMENTS = [
    ("ParameterServerStrategy is model parallelism: each worker trains a different part of the model.", False,
     "It is data parallelism: every worker runs the whole model on its own batches; only the variables live on "
     "(and may be sharded over) the parameter servers."),
    ("With MultiWorkerMirroredStrategy all workers hold identical weights after every training step.", True,
     "Every step all-reduces the gradients, so every worker applies the same update to the same weights."),
    ("With ParameterServerStrategy, when one worker process is killed, training goes on with the others.", True,
     "The ClusterCoordinator reschedules the lost worker's functions on the remaining workers (a killed "
     "parameter server, however, fails the job with UnavailableError)."),
    ("MultiWorkerMirroredStrategy needs Kubernetes (or another cluster manager) to find its peers.", False,
     "Each process reads the cluster and its own role from TF_CONFIG; chapter 3 ran two workers on localhost "
     "with nothing else."),
    ("In asynchronous training a worker may compute its gradient from weights that other workers have updated "
     "since it read them (a stale gradient).", True,
     "Nobody waits for anybody, so updates from other workers can land between a worker's read and its write."),
    ("Each process may list the workers in its own order, as long as its own task index points to itself.", False,
     "Every process must get the identical, identically ordered cluster list: indices are positions in it."),
]


def _ch3_q4(statements):
    if isinstance(statements, (str, bytes, dict)) or not hasattr(statements, "__len__"):
        return 0, [f"Give a list of {len(CH3_STATEMENTS)} booleans, one per statement (True = the statement is true)."]
    values = [_as_bool(s) for s in statements]
    if len(values) != len(CH3_STATEMENTS):
        return 0, [f"Give one True/False per statement: {len(CH3_STATEMENTS)} values, not {len(values)}."]
    points, lines = 0, []
    for i, (value, (_, truth, why)) in enumerate(zip(values, CH3_STATEMENTS)):
        if value is None:
            lines.append(f"{NO} statement {i + 1}: not answered yet (use True or False).")
        elif value == truth:
            points += 1
            lines.append(f"{OK} statement {i + 1}")
        else:
            lines.append(f"{NO} statement {i + 1} is {truth}: {why}")
    return points, lines


# --------------------------------------------------------------------------------------------
# Chapter 4 · DTensor meshes and layouts
# --------------------------------------------------------------------------------------------

CH4_MESH = [("batch", 4), ("model", 2)]


def _grade_mesh(mesh):
    """(ok, line) for a mesh that should be batch=4 x model=2."""
    if not (hasattr(mesh, "dim_names") and hasattr(mesh, "dim_size")):
        return False, f"{NO} mesh should be a dtensor.Mesh (dtensor.create_mesh or make_mesh), not a {type(mesh).__name__}."
    dims = _mesh_dims(mesh)
    if dims == CH4_MESH:
        return True, f"{OK} mesh: {_fmt_dims(dims)}"
    if sorted(dims) == sorted(CH4_MESH):
        return False, (f"{NO} mesh is {_fmt_dims(dims)}: list the axes in the order asked, "
                       f"[('batch', 4), ('model', 2)]. The order decides which devices share a 'batch' row.")
    if len(dims) == 1:
        return False, f"{NO} mesh is 1-D ({_fmt_dims(dims)}); the exercise asks for a 2-D mesh batch=4 x model=2."
    return False, f"{NO} mesh is {_fmt_dims(dims)}; the exercise asks for batch=4 x model=2."


def _ch4_q1(mesh, layout):
    dtensor = _dtensor()
    points, lines = 0, []
    mesh_ok, line = _grade_mesh(mesh)
    points += mesh_ok
    lines.append(line)
    if not isinstance(layout, dtensor.Layout):
        lines.append(f"{NO} layout should be a dtensor.Layout, not a {type(layout).__name__}.")
        return points, lines
    specs = _specs(layout)
    right = [UNSHARDED, "model"]
    if len(specs) != 2:
        lines.append(f"{NO} layout has {len(specs)} sharding spec(s) {specs}; a matrix has 2 axes, so give one "
                     f"spec per axis.")
    elif specs == right and _mesh_dims(layout.mesh) == CH4_MESH:
        points += 1
        lines.append(f"{OK} layout: {specs}: each device holds all 784 rows and 64 of the 128 columns")
    elif specs == right:
        lines.append(f"{NO} layout: the specs are right but it lives on a mesh {_fmt_dims(_mesh_dims(layout.mesh))}; "
                     f"build it on your batch=4 x model=2 mesh.")
    elif specs == ["model", UNSHARDED]:
        lines.append(f"{NO} layout {specs} splits the ROWS (axis 0, the 784 inputs). The columns are axis 1: "
                     f"[dtensor.UNSHARDED, 'model'].")
    elif specs == [UNSHARDED, UNSHARDED]:
        lines.append(f"{NO} layout {specs} is fully replicated: every device holds the whole matrix. Shard axis 1 "
                     f"over 'model'.")
    elif "batch" in specs:
        lines.append(f"{NO} layout {specs} uses 'batch': that mesh axis splits the DATA. The weight's columns are "
                     f"split over 'model' and replicated over 'batch' (by not naming it).")
    else:
        lines.append(f"{NO} layout {specs}; expected [dtensor.UNSHARDED, 'model'].")
    return points, lines


CH4_X_SHAPE = (8, 3)


def _ch4_q2(packed):
    import numpy as np

    from course_utils.packing import shard_slices

    tf = _tf()
    dtensor = _dtensor()
    x = np.arange(np.prod(CH4_X_SHAPE), dtype="float32").reshape(CH4_X_SHAPE)
    if not isinstance(packed, (tf.Tensor, tf.Variable)):
        return 0, [f"{NO} packed should be the DTensor that dtensor.pack returned, not a {type(packed).__name__}."]
    layout = _layout_of(packed)
    if layout is None:
        return 0, [f"{NO} packed is an ordinary tensor, not a DTensor. Build one component per device and call "
                   f"dtensor.pack(components, layout)."]
    points, lines = 0, []
    specs, dims = _specs(layout), _mesh_dims(layout.mesh)
    if dims != CH4_MESH:
        return 0, [f"{NO} packed lives on a mesh {_fmt_dims(dims)}; use the 2-D mesh batch=4 x model=2."]
    if specs == ["batch", UNSHARDED]:
        points += 1
        lines.append(f"{OK} layout {specs}: rows split over 'batch', replicated over 'model'")
    elif specs == ["model", UNSHARDED]:
        lines.append(f"{NO} layout {specs} splits the batch over 'model'. Examples go to 'batch'; every device "
                     f"along 'model' gets the same examples.")
    elif specs == [UNSHARDED, UNSHARDED]:
        lines.append(f"{NO} layout {specs} is replicated: every device holds the whole batch. Shard axis 0 over 'batch'.")
    else:
        lines.append(f"{NO} layout {specs}; expected Layout(['batch', dtensor.UNSHARDED], mesh).")
    try:
        components = [c.numpy() for c in dtensor.unpack(packed)]
    except Exception as err:
        lines.append(f"{NO} Could not read the components back ({_short(err)}).")
        return points, lines
    right_layout = dtensor.Layout(["batch", UNSHARDED], layout.mesh)
    expected = [x[index] for index in shard_slices(x.shape, right_layout)]
    if len(components) == len(expected) and all(
            c.shape == e.shape and np.array_equal(c, e) for c, e in zip(components, expected)):
        if specs == ["batch", UNSHARDED]:
            points += 1
            lines.append(f"{OK} components: device (batch=b, model=m) holds rows 2b and 2b+1, the same for both 'model' indices")
        return points, lines
    if specs != ["batch", UNSHARDED]:
        return points, lines
    pieces = np.split(x, 4)
    swapped = pieces + pieces
    if len(components) == 8 and all(np.array_equal(c, s) for c, s in zip(components, swapped)):
        lines.append(f"{NO} components are in the wrong device order. A 2-D mesh numbers its devices row-major: "
                     f"CPU:0 = (batch 0, model 0), CPU:1 = (batch 0, model 1), CPU:2 = (batch 1, model 0), ... "
                     f"so each batch piece appears twice IN A ROW: [p for p in tf.split(x, 4) for _ in range(2)].")
    elif len(components) == 8 and all(c.shape == (2, 3) for c in components):
        bad = [i for i, (c, e) in enumerate(zip(components, expected)) if not np.array_equal(c, e)]
        lines.append(f"{NO} components on device(s) {bad} hold the wrong rows. The global value must equal x: "
                     f"device (batch=b, model=m) holds x[2*b:2*b+2].")
    else:
        lines.append(f"{NO} the packed value is not x = tf.reshape(tf.range(24.), (8, 3)) split by rows.")
    return points, lines


CH4_T_SHAPE = (8, 12)
CH4_SHARDS = {
    "a": (["batch", UNSHARDED], (2, 12), 2),
    "b": ([UNSHARDED, "model"], (8, 6), 4),
    "c": (["model", "batch"], (4, 3), 1),
    "d": ([UNSHARDED, UNSHARDED], (8, 12), 8),
}


def _ch4_q3(shard_shapes, copies):
    sizes = dict(CH4_MESH)
    swapped_sizes = {"batch": sizes["model"], "model": sizes["batch"]}
    lines = []
    for name, answer in (("shard_shapes", shard_shapes), ("copies", copies)):
        lines += [p.replace("Give a dict", f"{name}: give a dict") for p in _choice_dict(answer, CH4_SHARDS, name)]
    if not isinstance(shard_shapes, dict) or not isinstance(copies, dict):
        return 0, lines
    points = 0
    for key, (specs, shape, copy) in CH4_SHARDS.items():
        raw_shape, raw_copies = shard_shapes.get(key), copies.get(key)
        if is_placeholder(raw_shape) and is_placeholder(raw_copies):
            lines.append(f"{NO} {key}: not answered yet.")
            continue
        given_shape = _as_shape(raw_shape)
        given_copies = _as_int(raw_copies)
        why = []
        if given_shape != shape:
            swapped = tuple(n // swapped_sizes[s] if s != UNSHARDED else n for n, s in zip(CH4_T_SHAPE, specs))
            if given_shape is None:
                why.append(f"give the shard shape as a tuple of ints such as (8, 12), got {raw_shape!r}")
            elif given_shape == CH4_T_SHAPE and specs != [UNSHARDED, UNSHARDED]:
                why.append("that is the global shape; a sharded axis is divided by the size of its mesh axis")
            elif given_shape == swapped and swapped != shape:
                why.append("you divided by the wrong mesh axis: 'batch' has 4 devices and 'model' has 2")
            else:
                why.append(f"axis i of the shard is the global size divided by the size of the mesh axis named in "
                           f"spec i ('unsharded' keeps it whole); shape {given_shape} is not that")
        if given_copies != copy:
            if raw_copies is None or given_copies is None:
                why.append(f"give the number of copies as an int, got {raw_copies!r}")
            else:
                why.append("copies = 8 devices / number of distinct shards = the product of the sizes of the mesh "
                           f"axes the layout does NOT use; {given_copies} is not that")
        if why:
            lines.append(f"{NO} {key} {specs}: " + "; ".join(why) + ".")
        else:
            points += 1
            lines.append(f"{OK} {key} {specs}: shard {shape}, {copy} cop{'y' if copy == 1 else 'ies'}")
    return points, lines


CH4_MATMULS = {
    "a": ("x ['batch', U] @ w [U, U]", False,
          "x is split by rows and w is replicated: each device multiplies its own rows of x by the whole w and "
          "gets its own rows of y. No communication."),
    "b": ("x ['batch', U] @ w [U, 'model']", False,
          "each device has its rows of x with the whole contracted axis, and its columns of w: it computes its "
          "own block of y, laid out ['batch', 'model']. No communication."),
    "c": ("x ['batch', 'model'] @ w ['model', U]", True,
          "both operands split the CONTRACTED axis over 'model': each device computes only part of every dot "
          "product, and the partial sums must be added across 'model' (an all-reduce)."),
    "d": ("x ['batch', U] @ w ['model', U]", True,
          "w is split along the contracted axis while x is not: a device holds only part of w's rows, so it can "
          "compute only a partial sum; DTensor must sum across 'model' (or first all-gather w)."),
}


def _ch4_q4(needs_collective):
    expected = {k: truth for k, (_, truth, _) in CH4_MATMULS.items()}

    def explain(key, given, raw):
        if given is None:
            return f"answer True or False, got {raw!r}."
        return f"{CH4_MATMULS[key][0]} {'needs' if CH4_MATMULS[key][1] else 'does not need'} a collective: " \
               f"{CH4_MATMULS[key][2]}"

    return _grade_items(needs_collective, expected, explain, _as_bool, "True or False per matmul")


# --------------------------------------------------------------------------------------------
# Chapter 5 · DTensor with Keras
# --------------------------------------------------------------------------------------------

def _keras_seed_generator():
    """tf_keras' thread-local seed holder, if tf_keras is loaded (it is what the DTensor seed check reads)."""
    import sys

    backend = sys.modules.get("tf_keras.src.backend")
    return getattr(backend, "_SEED_GENERATOR", None)


def _ch5_q1(init_kernel):
    import numpy as np

    if not callable(init_kernel):
        return 0, [f"{NO} init_kernel should be a function seed -> kernel, got {type(init_kernel).__name__}."]
    holder = _keras_seed_generator()
    saved = getattr(holder, "generator", None) if holder is not None else None
    try:
        if holder is not None:
            holder.generator = None  # as in a fresh process: only a seed set inside init_kernel counts
        kernels = [init_kernel(seed) for seed in (7, 7, 8)]
    except Exception as err:
        message = _short(err)
        if "global seed" in message:
            return 0, [f"{NO} init_kernel raised {message}. In a fresh process (as on every client of a DTensor "
                       f"job) no seed is set: call tf.keras.utils.set_random_seed(seed) inside init_kernel, "
                       f"before creating the layer."]
        return 0, [f"{NO} init_kernel raised {message}"]
    finally:
        if holder is not None and getattr(holder, "generator", None) is None:
            holder.generator = saved
    layouts = [_layout_of(k.read_value() if hasattr(k, "read_value") else k) for k in kernels]
    if any(layout is None for layout in layouts):
        return 0, [f"{NO} init_kernel should return the layer's kernel as a DTensor (a DVariable): create the "
                   f"Dense layer with kernel_layout=... on the mesh and return layer.kernel."]
    values = [_global_numpy(k) for k in kernels]
    if not np.array_equal(values[0], values[1]):
        return 0, [f"{NO} Two calls with the same seed gave different kernels. Set the seed inside init_kernel "
                   f"with tf.keras.utils.set_random_seed(seed) right before building the layer: every client "
                   f"must do exactly this, or their 'replicated' weights silently differ."]
    if np.array_equal(values[0], values[2]):
        return 1, [f"{OK} the same seed gives the same kernel", f"{NO} seeds 7 and 8 gave the same kernel: use "
                   f"the seed argument."]
    return 2, [f"{OK} the same seed gives the same kernel and another seed another kernel: every client that "
               f"sets the same seed builds identical replicated weights."]


def _ch5_q2(layer):
    points, lines = 0, []
    try:
        kernel, bias = layer.kernel, layer.bias
    except AttributeError:
        return 0, [f"{NO} layer has no kernel/bias yet: pass the Dense layer itself, built with "
                   f"layer.build((None, 784)) (or called once on a batch)."]
    if kernel is None or bias is None:
        return 0, [f"{NO} the layer needs a kernel and a bias (use_bias=True) and must be built."]
    shape = tuple(kernel.shape)
    if shape != (784, 128):
        lines.append(f"{NO} the kernel's shape is {shape}; the exercise asks for Dense(128) on 784 inputs: (784, 128).")
    layout = _layout_of(kernel.read_value() if hasattr(kernel, "read_value") else kernel)
    if layout is None:
        return 0, lines + [f"{NO} the kernel is not a DTensor: pass kernel_layout=dtensor.Layout(...) to Dense "
                           f"(tf_keras, TF_USE_LEGACY_KERAS=1)."]
    specs = _specs(layout)
    if "model" not in layout.mesh.dim_names:
        return 0, lines + [f"{NO} the kernel lives on a mesh {_fmt_dims(_mesh_dims(layout.mesh))} without a "
                           f"'model' axis; use the batch x model mesh."]
    if specs == [UNSHARDED, "model"] and shape == (784, 128):
        points += 1
        lines.append(f"{OK} kernel {specs}: each 'model' device holds all inputs and half of the 128 output units")
    elif specs == ["model", UNSHARDED]:
        lines.append(f"{NO} kernel {specs} splits the 784 INPUTS (rows). The exercise splits the output units, "
                     f"the columns: [dtensor.UNSHARDED, 'model'].")
    elif "batch" in specs:
        lines.append(f"{NO} kernel {specs} uses 'batch', the axis that splits the DATA; weights are split over "
                     f"'model' and replicated over 'batch'.")
    elif specs == [UNSHARDED, UNSHARDED]:
        lines.append(f"{NO} kernel {specs} is replicated: that is data parallelism. Shard the columns over 'model'.")
    elif shape == (784, 128):
        lines.append(f"{NO} kernel {specs}; expected [dtensor.UNSHARDED, 'model'].")
    bias_layout = _layout_of(bias.read_value() if hasattr(bias, "read_value") else bias)
    bias_specs = _specs(bias_layout) if bias_layout is not None else None
    if bias_specs == ["model"]:
        points += 1
        lines.append(f"{OK} bias ['model']: each device holds the biases of its own output units")
    elif bias_specs == [UNSHARDED]:
        lines.append(f"{NO} bias is replicated. The bias has one entry per output unit, and the output units are "
                     f"split over 'model': shard the bias the same way, bias_layout=Layout(['model'], mesh).")
    else:
        lines.append(f"{NO} bias layout {bias_specs}; expected ['model'], matching the kernel's columns.")
    return points, lines


CH5_PATHS = {
    "hidden.kernel": [UNSHARDED, "model"],
    "hidden.bias": ["model"],
    "logits.kernel": ["model", UNSHARDED],
    "logits.bias": [UNSHARDED],
}


def _layout_map_lookup(layout_map, path):
    """The layout tf_keras' LayoutMap gives ``path``: an exact key, else the first key that re.match-es."""
    if hasattr(layout_map, "_layout_map"):
        return layout_map[path]
    if path in layout_map:
        return layout_map[path]
    for key in layout_map:
        if isinstance(key, str) and re.match(key, path):
            return layout_map[key]
    return None


def _ch5_q3(layout_map):
    dtensor = _dtensor()
    if not (hasattr(layout_map, "_layout_map") or isinstance(layout_map, dict)):
        return 0, [f"{NO} Give a tf.keras.dtensor.experimental.LayoutMap (or a dict of regex -> Layout), not a "
                   f"{type(layout_map).__name__}."]
    keys = list(layout_map.keys())
    bad = [k for k in keys if not isinstance(k, str)]
    if bad:
        return 0, [f"{NO} LayoutMap keys are strings (regular expressions), got {bad!r}."]
    points, lines = 0, []
    for path, right in CH5_PATHS.items():
        try:
            layout = _layout_map_lookup(layout_map, path)
        except re.error as err:
            return 0, [f"{NO} A key is not a valid regular expression: {err}."]
        specs = _specs(layout) if isinstance(layout, dtensor.Layout) else None
        replicated_ok = path == "logits.bias" and (layout is None or specs == [UNSHARDED])
        if specs == right or replicated_ok:
            points += 1
            lines.append(f"{OK} {path}: {specs or 'no key matches, so replicated'}")
            continue
        matching = [k for k in keys if re.match(k, path)]
        searching = [k for k in keys if re.search(k, path) and k not in matching]
        if layout is None:
            if any("/" in k for k in keys):
                why = ("no key matches. tf_keras names the variable 'hidden.kernel' (layer name, a DOT, attribute), "
                       "not 'hidden/kernel' as in variable.name")
            elif searching:
                why = (f"no key matches: keys are matched with re.match, from the START of the path, so "
                       f"{searching[0]!r} does not match {path!r}; write the full path or start the key with '.*'")
            else:
                why = "no key matches, so this variable stays replicated"
            lines.append(f"{NO} {path}: {why}; it should be {right}.")
        elif specs is not None and len(specs) != len(right):
            lines.append(f"{NO} {path} gets a rank-{len(specs)} layout {specs} from key {matching[0] if matching else '?'!r}: "
                         f"that key also matches this variable (re.match matches prefixes). Give "
                         f"{path.split('.')[0]}'s kernel and bias their own keys, e.g. '{path.split('.')[0]}.kernel'.")
        elif path.startswith("logits") and matching and not matching[0].startswith("logits"):
            lines.append(f"{NO} {path} gets {specs} from key {matching[0] if matching else '?'!r}, meant for the hidden "
                         f"layer: that regex matches the logits layer too. Anchor it to the layer name.")
        elif path == "logits.kernel":
            lines.append(f"{NO} {path} gets {specs}. The hidden layer's outputs (this layer's INPUTS, the rows) are "
                         f"split over 'model', so split this kernel's rows the same way: ['model', UNSHARDED]. "
                         f"Then each device multiplies its half and one all-reduce sums the halves.")
        else:
            lines.append(f"{NO} {path} gets {specs}; it should be {right}.")
    return points, lines


def _ch5_q4(pack_fn):
    import numpy as np

    if not callable(pack_fn):
        return 0, [f"{NO} pack_fn should be a function (images, labels) -> (packed_images, packed_labels)."]
    rng = np.random.default_rng(1)
    images = rng.random((16, 28, 28, 1), dtype="float32")
    labels = rng.integers(0, 10, size=(16,)).astype("int64")
    try:
        result = pack_fn(images, labels)
    except Exception as err:
        message = _short(err)
        if "rank" in message:
            return 0, [f"{NO} pack_fn raised {message}. Images have rank 4 and labels rank 1: each needs a layout "
                       f"of its own rank, e.g. Layout.batch_sharded(mesh, 'batch', rank=1) for the labels."]
        return 0, [f"{NO} pack_fn raised {message}"]
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        return 0, [f"{NO} pack_fn should return a pair (packed_images, packed_labels)."]
    points, lines = 0, []
    for name, value, original, right in (("images", result[0], images, ["batch", UNSHARDED, UNSHARDED, UNSHARDED]),
                                         ("labels", result[1], labels, ["batch"])):
        layout = _layout_of(value)
        if layout is None:
            lines.append(f"{NO} {name} is not a DTensor: pack it onto the mesh (pack_batch or dtensor.pack).")
            continue
        specs = _specs(layout)
        if "model" not in layout.mesh.dim_names:
            lines.append(f"{NO} {name} lives on a mesh {_fmt_dims(_mesh_dims(layout.mesh))}; use the 2-D "
                         f"batch x model mesh, the one the model's weights live on.")
            continue
        if specs != right:
            if "model" in specs:
                why = ("'model' is the axis that splits WEIGHTS; examples are split over 'batch' and each batch "
                       "shard is replicated over 'model'")
            elif "batch" not in specs:
                why = "it is replicated: every device would train on the whole batch. Split axis 0 over 'batch'"
            else:
                why = "shard axis 0 (the examples) over 'batch' and nothing else"
            lines.append(f"{NO} {name} layout {specs}: {why}; expected {right}.")
            continue
        if not np.allclose(_global_numpy(value), original):
            lines.append(f"{NO} {name}: the packed global value differs from the input batch; pack exactly the "
                         f"given tensor.")
            continue
        points += 1
        lines.append(f"{OK} {name}: {specs}")
    return points, lines


# --------------------------------------------------------------------------------------------
# Chapter 6 · Core-API MLP with a hand-written Adam
# --------------------------------------------------------------------------------------------

def _ch6_q1(xavier_limit, init_weight):
    import numpy as np

    tf = _tf()
    dtensor = _dtensor()
    points, lines = 0, []
    if not callable(xavier_limit):
        lines.append(f"{NO} xavier_limit: not answered yet." if xavier_limit is None else
                     f"{NO} xavier_limit should be a function (fan_in, fan_out) -> float.")
    else:
        try:
            got = [float(xavier_limit(a, b)) for a, b in ((784, 700), (10, 20))]
        except Exception as err:
            got = None
            lines.append(f"{NO} xavier_limit raised {_short(err)}")
        if got is not None:
            right = [math.sqrt(6 / (a + b)) for a, b in ((784, 700), (10, 20))]
            alternatives = {
                "sqrt(1 / fan_in) is LeCun's scale; Xavier (Glorot) uses both fans: sqrt(6 / (fan_in + fan_out)).":
                    lambda a, b: math.sqrt(1 / a),
                "sqrt(2 / (fan_in + fan_out)) is the STANDARD DEVIATION of Xavier normal. A uniform distribution "
                "on [-limit, limit] has std limit / sqrt(3), so the uniform limit is sqrt(6 / (fan_in + fan_out)).":
                    lambda a, b: math.sqrt(2 / (a + b)),
                "sqrt(6 / fan_in) is He's uniform limit (for ReLU); Xavier uses both fans: sqrt(6 / (fan_in + fan_out)).":
                    lambda a, b: math.sqrt(6 / a),
                "Mind the brackets: sqrt(6) / (fan_in + fan_out) is not sqrt(6 / (fan_in + fan_out)).":
                    lambda a, b: math.sqrt(6) / (a + b),
                "You forgot the square root: sqrt(6 / (fan_in + fan_out)).": lambda a, b: 6 / (a + b),
            }
            if all(_close(g, r, 1e-6) for g, r in zip(got, right)):
                points += 1
                lines.append(f"{OK} xavier_limit(784, 700) = {right[0]:.5f}")
            else:
                why = next((text for text, f in alternatives.items()
                            if all(_close(g, f(a, b), 1e-6) for g, (a, b) in zip(got, ((784, 700), (10, 20))))),
                           f"xavier_limit(784, 700) = {got[0]:.5f}; expected sqrt(6 / (fan_in + fan_out)).")
                lines.append(f"{NO} xavier_limit: {why}")
    if not callable(init_weight):
        lines.append(f"{NO} init_weight: not answered yet." if init_weight is None else
                     f"{NO} init_weight should be a function (shape, layout, seed) -> DVariable.")
        return points, lines
    mesh = _checker_mesh()
    layout = dtensor.Layout([UNSHARDED, "model"], mesh)
    shape, limit = [64, 32], math.sqrt(6 / (64 + 32))
    try:
        w1 = init_weight(shape, layout, [1, 2])
        w2 = init_weight(shape, layout, [1, 2])
    except Exception as err:
        message = _short(err)
        if "matching rank" in message or "StatelessRandomGetKeyCounter" in message:
            return points, lines + [f"{NO} init_weight raised {message}. In eager mode call_with_layout applies the "
                                    f"layout to every op of the random function, including its seed handling: wrap "
                                    f"the random op in tf.function, e.g. dtensor.call_with_layout("
                                    f"tf.function(tf.random.stateless_uniform), layout, shape=..., seed=..., ...)."]
        return points, lines + [f"{NO} init_weight raised {message}"]
    if not isinstance(w1, tf.Variable):
        return points, lines + [f"{NO} init_weight should return a variable (dtensor.DVariable(...)) so that the "
                                f"optimizer can update it, not a {type(w1).__name__}."]
    w_layout = _layout_of(w1.read_value())
    if w_layout is None:
        return points, lines + [f"{NO} init_weight returned an ordinary tf.Variable on one device. Create the "
                                f"initial value on the mesh with dtensor.call_with_layout(..., layout, ...) and wrap "
                                f"it in dtensor.DVariable."]
    if _specs(w_layout) != [UNSHARDED, "model"]:
        return points, lines + [f"{NO} init_weight ignored the layout it was given: the weight has "
                                f"{_specs(w_layout)}, expected {_specs(layout)}. Pass `layout` to call_with_layout."]
    values = _global_numpy(w1)
    if tuple(values.shape) != tuple(shape):
        return points, lines + [f"{NO} init_weight returned shape {list(values.shape)} for shape {shape}."]
    if np.abs(values).max() > limit * (1 + 1e-5):
        lines.append(f"{NO} init_weight: values up to {np.abs(values).max():.3f} exceed the Xavier limit {limit:.3f} "
                     f"for shape {shape}; sample uniformly in [-limit, limit] with limit = xavier_limit(fan_in, fan_out).")
    elif values.min() >= 0:
        lines.append(f"{NO} init_weight: all values are >= 0; the range is symmetric, minval=-limit.")
    elif np.abs(values).max() < 0.8 * limit:
        lines.append(f"{NO} init_weight: the values only reach {np.abs(values).max():.3f}, the Xavier limit for "
                     f"shape {shape} is {limit:.3f}. Use the whole range [-limit, limit].")
    elif not np.array_equal(values, _global_numpy(w2)):
        lines.append(f"{NO} init_weight: the same seed gave different weights; use a stateless random op with the "
                     f"seed, so every client initialises identically.")
    else:
        points += 2
        lines.append(f"{OK} init_weight: a DVariable with layout {_specs(w_layout)}, uniform in "
                     f"[-{limit:.3f}, {limit:.3f}], reproducible from its seed")
    return points, lines


CH6_SHAPES = [(784, 700), (700, 500), (500, 10)]
CH6_BUGGY_SHAPES = [(784, 700), (700, 10), (10, 10)]


def _ch6_q2(model):
    if isinstance(model, type):
        return 0, [f"{NO} Pass an instance of your fixed model, e.g. MLP(mesh), not the class."]
    variables = getattr(model, "trainable_variables", None)
    if variables is None:
        return 0, [f"{NO} Pass the model (a tf.Module), not a {type(model).__name__}."]
    shapes = [tuple(v.shape) for v in variables if len(v.shape) == 2]
    if sorted(shapes) == sorted(CH6_SHAPES):
        return 2, [f"{OK} the kernels are {CH6_SHAPES}: 784 -> 700 -> 500 -> 10."]
    if sorted(shapes) == sorted(CH6_BUGGY_SHAPES):
        return 0, [f"{NO} the kernels are still {CH6_BUGGY_SHAPES}: the network is 784 -> 700 -> 10 -> 10. Find "
                   f"the line that overwrites the second hidden size with the number of classes, and delete it."]
    return 0, [f"{NO} the kernels are {sorted(shapes)}; expected {CH6_SHAPES} (784 -> 700 -> 500 -> 10)."]


def _checker_weight(shape=(8, 4)):
    import numpy as np

    dtensor = _dtensor()
    tf = _tf()
    mesh = _checker_mesh()
    layout = dtensor.Layout([UNSHARDED, "model"], mesh)
    value = np.arange(np.prod(shape), dtype="float32").reshape(shape) / 10.0
    return dtensor.DVariable(_on_mesh(value, layout)), layout


def _on_mesh(value, layout):
    """A host value as a DTensor with ``layout``."""
    dtensor = _dtensor()
    tf = _tf()
    replicated = dtensor.Layout.replicated(layout.mesh, rank=len(layout.sharding_specs))
    return dtensor.relayout(dtensor.copy_to_mesh(tf.constant(value), replicated), layout)


def _ch6_q3(make_slots):
    import numpy as np

    tf = _tf()
    if not callable(make_slots):
        return 0, [f"{NO} make_slots should be a function variable -> (m, v)."]
    weight, layout = _checker_weight()
    try:
        slots = make_slots(weight)
    except Exception as err:
        return 0, [f"{NO} make_slots raised {_short(err)}"]
    if not isinstance(slots, (tuple, list)) or len(slots) != 2:
        return 0, [f"{NO} make_slots should return a pair (m, v), got {type(slots).__name__}."]
    m, v = slots
    if m is v:
        return 0, [f"{NO} m and v are the same object: Adam keeps two separate moments, so create two variables."]
    points, lines = 0, []
    for name, slot in (("m", m), ("v", v)):
        if not isinstance(slot, tf.Variable):
            lines.append(f"{NO} {name} is a {type(slot).__name__}, not a variable; slots are updated in place with "
                         f"assign, so wrap the zeros in dtensor.DVariable.")
            continue
        slot_layout = _layout_of(slot.read_value())
        if slot_layout is None:
            lines.append(f"{NO} {name} is an ordinary tf.Variable on one device, not on the mesh. Create its zeros "
                         f"with dtensor.call_with_layout(tf.zeros, dtensor.fetch_layout(variable), shape=...).")
            continue
        if tuple(slot.shape) != tuple(weight.shape):
            lines.append(f"{NO} {name} has shape {tuple(slot.shape)}; a slot has the weight's shape {tuple(weight.shape)}.")
            continue
        if slot_layout != layout:
            specs = _specs(slot_layout)
            why = ("it is replicated: every device would hold the whole moment, although it only ever updates its "
                   "own shard of the weight" if all(s == UNSHARDED for s in specs) else
                   f"it has {specs}")
            lines.append(f"{NO} {name}: {why}. Give the slot the weight's layout, dtensor.fetch_layout(variable).")
            continue
        if np.any(_global_numpy(slot) != 0):
            lines.append(f"{NO} {name} should start at zero.")
            continue
        points += 1
        lines.append(f"{OK} {name}: zeros in the weight's layout {_specs(slot_layout)}")
    return points, lines


def _reference_adam(w0, grads, lr, frozen_step=None, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
    """The weights after each step of Keras' Adam; ``frozen_step`` keeps t constant (the bug)."""
    import numpy as np

    w, m, v, history = w0.astype("float64"), np.zeros_like(w0, "float64"), np.zeros_like(w0, "float64"), []
    for i, g in enumerate(grads, start=1):
        t = frozen_step or i
        m = m + (g - m) * (1 - beta_1)
        v = v + (g * g - v) * (1 - beta_2)
        alpha = lr * math.sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t)
        w = w - alpha * m / (np.sqrt(v) + epsilon)
        history.append(w.copy())
    return history


def _ch6_q4(adam_class):
    import numpy as np

    tf = _tf()
    dtensor = _dtensor()
    if not callable(adam_class):
        return 0, [f"{NO} Give your fixed optimizer class (the class itself, e.g. FixedAdam)."]
    weight, layout = _checker_weight()
    w0 = _global_numpy(weight)
    rng = np.random.default_rng(3)
    grads = [rng.normal(size=w0.shape).astype("float32") for _ in range(3)]
    lr = 0.1
    try:
        optimizer = adam_class([weight], learning_rate=lr)
        history = []
        for g in grads:
            optimizer.apply([_on_mesh(g, layout)])
            history.append(_global_numpy(weight))
    except Exception as err:
        message = _short(err)
        if "NoneType" in message and "callable" in message:
            return 0, [f"{NO} Your optimizer raised {message}. It calls make_slots from exercise 3: solve that first."]
        return 0, [f"{NO} Your optimizer raised {message}. It is called as adam_class([weight], learning_rate=0.1), "
                   f"then .apply([gradient]) three times."]
    right = _reference_adam(w0, grads, lr)
    ok = [np.allclose(h, r, rtol=1e-4, atol=1e-6) for h, r in zip(history, right)]
    if all(ok):
        return 3, [f"{OK} three steps match Keras' Adam (bias correction with t = 1, 2, 3)."]
    for frozen in (1, 2):
        wrong = _reference_adam(w0, grads, lr, frozen_step=frozen)
        if all(np.allclose(h, r, rtol=1e-4, atol=1e-6) for h, r in zip(history, wrong)):
            return 0, [f"{NO} Your Adam uses t = {frozen} at every step: the step counter is frozen. A Python "
                       f"number changed inside a tf.function changes only while the function is TRACED; later "
                       f"calls replay the graph with the value baked in. Keep the step in a variable "
                       f"(self.step.assign_add(1)) and compute the bias correction from it with TensorFlow ops."]
    if ok[0]:
        return 1, [f"{OK} step 1 matches Keras' Adam", f"{NO} steps 2 and 3 do not; check how the step count t and "
                   f"the moments m and v carry over from one step to the next."]
    return 0, [f"{NO} the first step already differs from Keras' Adam (lr=0.1): check the update "
               f"m += (g - m) * (1 - beta_1), v += (g*g - v) * (1 - beta_2), "
               f"w -= lr * sqrt(1 - beta_2**t) / (1 - beta_1**t) * m / (sqrt(v) + epsilon)."]


# --------------------------------------------------------------------------------------------
# The exercises of every chapter
# --------------------------------------------------------------------------------------------

_DEFINITIONS = {
    1: [
        dict(name="q1", title="Place a matmul on virtual CPU 5", max_points=2, grader=_ch1_q1,
             call="ex.q1.check(cpus, product)",
             hint="Split the one physical CPU into 8 logical ones BEFORE anything starts TensorFlow's runtime "
                  "(configure_virtual_cpus(8), or tf.config.set_logical_device_configuration). Then compute "
                  "inside `with tf.device(cpus[5]):` and look at product.device.",
             solution="""
cpus = configure_virtual_cpus(8)      # or set_logical_device_configuration + list_logical_devices
with tf.device(cpus[5]):              # index 5 = the sixth logical CPU, '/device:CPU:5'
    product = tf.matmul(a, b)
product.device                        # '/job:localhost/replica:0/task:0/device:CPU:5'
"""),
        dict(name="q2", title="Predict which calls trace", max_points=2, grader=_ch1_q2,
             call="ex.q2.check(predictions)",
             hint="A tf.function keeps one trace per input signature. For a tensor argument the signature is its "
                  "dtype and shape; for a Python argument it is the value itself.",
             solution="""
predictions = [True, False, True, False, True, False, True]
# call 1 traces (first call); call 2 reuses it (same dtype/shape, values don't matter);
# call 3 traces (new shape (2,)); call 4 reuses it; f(3) traces (a Python value is part of
# the signature); f(3) again reuses it; f(4) traces (a new Python value).
"""),
        dict(name="q3", title="Gradients with GradientTape", max_points=2, grader=_ch1_q3,
             call="ex.q3.check(grad_w, grad_x)", none_is_answer=True,
             hint="A tape records operations on trainable variables automatically; a tf.constant must be "
                  "watched with tape.watch(x). Compute y inside the `with` block, then "
                  "tape.gradient(y, [w, x]).",
             solution="""
with tf.GradientTape() as tape:
    tape.watch(x)                  # x is a constant: watch it explicitly
    y = w * x ** 2
grad_w, grad_x = tape.gradient(y, [w, x])   # x**2 = 9.0 and 2*w*x = 12.0
"""),
    ],
    2: [
        dict(name="q1", title="Global batch and scaled learning rate", max_points=3, grader=_ch2_q1,
             call="ex.q1.check(strategy, global_batch_size, learning_rate)",
             hint="The dataset is batched with the GLOBAL batch; the strategy splits it over "
                  "strategy.num_replicas_in_sync replicas. The linear scaling rule multiplies the learning rate "
                  "by the factor the batch grew.",
             solution="""
strategy = tf.distribute.MirroredStrategy(cpus)                            # 8 replicas
global_batch_size = PER_REPLICA_BATCH * strategy.num_replicas_in_sync     # 64 * 8 = 512
learning_rate = BASE_LEARNING_RATE * strategy.num_replicas_in_sync        # 0.001 * 8 = 0.008
"""),
        dict(name="q2", title="Loss scaling in a custom distributed step", max_points=3, grader=_ch2_q2,
             call="ex.q2.check(compute_loss, reduce_op)",
             hint="Inside strategy.run each replica sees only its slice of the batch, and the replicas' "
                  "gradients are SUMMED. Divide the per-example losses by the global batch size "
                  "(tf.nn.compute_average_loss) so that the sum is the mean of the whole batch.",
             solution="""
loss_object = tf.keras.losses.SparseCategoricalCrossentropy(
    from_logits=True, reduction=tf.keras.losses.Reduction.NONE)      # one loss per example

def compute_loss(labels, logits):
    per_example_loss = loss_object(labels, logits)
    return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH_SIZE)

reduce_op = tf.distribute.ReduceOp.SUM   # each replica's loss is already divided by the global batch
"""),
        dict(name="q3", title="Pick the right strategy", max_points=6, grader=_ch2_q3,
             call="ex.q3.check(choices)",
             hint="Ask: one machine or several? synchronous or asynchronous? are the variables mirrored, kept "
                  "on the CPU, or on parameter servers? is each WEIGHT split (model parallelism), which no "
                  "tf.distribute strategy does?",
             solution="""
choices = {"a": "MirroredStrategy",            # one machine, mirrored variables, all-reduce
           "b": "MultiWorkerMirroredStrategy", # several machines, synchronous (TF_CONFIG)
           "c": "ParameterServerStrategy",     # asynchronous, variables (sharded) on PS
           "d": "OneDeviceStrategy",           # everything on one named device
           "e": "CentralStorageStrategy",      # synchronous, variables on the CPU
           "f": "DTensor"}                     # model parallelism: split each weight (chapters 4-6)
"""),
    ],
    3: [
        dict(name="q1", title="TF_CONFIG for a multi-worker task", max_points=2, grader=_ch3_q1,
             call="ex.q1.check(tf_config)",
             hint="TF_CONFIG is a JSON string with 'cluster' (the same in every process: role -> ordered list "
                  "of 'host:port') and 'task' (this process: its role and its index in that list, from 0).",
             solution="""
tf_config = json.dumps({
    "cluster": {"worker": ["localhost:12345", "localhost:12346", "localhost:12347"]},
    "task": {"type": "worker", "index": 2},      # the third worker
})
"""),
        dict(name="q2", title="TF_CONFIG for a parameter server", max_points=2, grader=_ch3_q2,
             call="ex.q2.check(tf_config)",
             hint="A ParameterServerStrategy cluster has three roles: 'chief' (runs the ClusterCoordinator), "
                  "'worker' and 'ps'. Every process gets the same cluster; only 'task' differs.",
             solution="""
tf_config = json.dumps({
    "cluster": {"chief": ["localhost:20000"],
                "worker": ["localhost:20001", "localhost:20002"],
                "ps": ["localhost:20003"]},
    "task": {"type": "ps", "index": 0},
})
"""),
        dict(name="q3", title="Stopping, losing and restoring workers", max_points=3, grader=_ch3_q3,
             call="ex.q3.check(answers)",
             hint="Chapter 3 stopped a worker for real: which signal did it take, what did the other worker "
                  "see, and where did fit() continue after the restart?",
             solution="""
answers = {"stop_signal": "SIGKILL",  # the strategy's preemption handler catches SIGTERM
           "restores": "B",           # weights + optimizer state + epoch (or step) counter
           "peer_killed": "B"}        # the survivor fails fast with UnavailableError; restart the job
"""),
        dict(name="q4", title="Synchronous versus asynchronous", max_points=6, grader=_ch3_q4,
             call="ex.q4.check(statements)",
             hint="Synchronous = everybody all-reduces every step (MultiWorkerMirroredStrategy); asynchronous "
                  "= workers push updates to parameter servers without waiting (ParameterServerStrategy). "
                  "Both are data parallelism.",
             solution="""
statements = [False, True, True, False, True, False]
""" + "\n".join(f"# {i + 1}. {truth}: {why}" for i, (_, truth, why) in enumerate(CH3_STATEMENTS))),
    ],
    4: [
        dict(name="q1", title="A 2-D mesh and a column-sharded layout", max_points=2, grader=_ch4_q1,
             call="ex.q1.check(mesh, layout)",
             hint="A Layout has one sharding spec per tensor axis: a mesh axis name splits that tensor axis, "
                  "dtensor.UNSHARDED keeps it whole. Mesh axes the layout does not name replicate.",
             solution="""
mesh = dtensor.create_mesh([("batch", 4), ("model", 2)], devices=cpus)    # or make_mesh(...)
layout = dtensor.Layout([dtensor.UNSHARDED, "model"], mesh)              # columns over 'model'
"""),
        dict(name="q2", title="Pack a batch by hand on a 2-D mesh", max_points=2, grader=_ch4_q2,
             call="ex.q2.check(packed)",
             hint="dtensor.pack needs one component per device, in the mesh's device order (row-major: the "
                  "last mesh axis varies fastest). Devices that differ only in 'model' get the same rows.",
             solution="""
layout = dtensor.Layout(["batch", dtensor.UNSHARDED], mesh)
pieces = tf.split(x, 4)                                  # one piece per 'batch' index
components = [p for p in pieces for _ in range(2)]       # twice in a row: model 0 and model 1
packed = dtensor.pack(components, layout)
"""),
        dict(name="q3", title="Predict shard shapes and copies", max_points=4, grader=_ch4_q3,
             call="ex.q3.check(shard_shapes, copies)",
             hint="Divide each tensor axis by the size of the mesh axis named in its spec. The number of copies "
                  "of each shard is the product of the sizes of the mesh axes the layout does not use.",
             solution="""
shard_shapes = {"a": (2, 12), "b": (8, 6), "c": (4, 3), "d": (8, 12)}
copies = {"a": 2, "b": 4, "c": 1, "d": 8}
"""),
        dict(name="q4", title="Which matmul needs a collective?", max_points=4, grader=_ch4_q4,
             call="ex.q4.check(needs_collective)",
             hint="y[i, j] = sum over k of x[i, k] * w[k, j]. Communication is needed when a device holds only "
                  "part of the k (contracted) axis of an operand.",
             solution="""
needs_collective = {"a": False, "b": False, "c": True, "d": True}
""" + "\n".join(f"# {k}. {text}: {why}" for k, (text, _, why) in CH4_MATMULS.items())),
    ],
    5: [
        dict(name="q1", title="Seeds for DTensor-aware layers", max_points=2, grader=_ch5_q1,
             call="ex.q1.check(init_kernel)",
             hint="tf_keras refuses to initialise a DTensor layer without a global seed, because every client "
                  "must draw the same 'replicated' weights. Set it inside the function.",
             solution="""
def init_kernel(seed):
    tf.keras.utils.set_random_seed(seed)        # the same on every client, before building
    layer = tf.keras.layers.Dense(4, kernel_layout=dtensor.Layout.replicated(mesh, 2),
                                  bias_layout=dtensor.Layout.replicated(mesh, 1))
    layer.build((None, 6))
    return layer.kernel
"""),
        dict(name="q2", title="kernel_layout for model parallelism", max_points=2, grader=_ch5_q2,
             call="ex.q2.check(layer)",
             hint="A Dense kernel has shape (inputs, units). Split the units (axis 1) over 'model'; the bias has "
                  "one entry per unit, so it follows the kernel's columns.",
             solution="""
layer = tf.keras.layers.Dense(
    128, kernel_layout=dtensor.Layout([dtensor.UNSHARDED, "model"], mesh),
    bias_layout=dtensor.Layout(["model"], mesh))
layer.build((None, 784))
"""),
        dict(name="q3", title="LayoutMap regex keys", max_points=4, grader=_ch5_q3,
             call="ex.q3.check(layout_map)",
             hint="tf_keras names a functional model's variables 'layer_name.attribute' (e.g. 'hidden.kernel') "
                  "and looks a key up exactly, then as a regex with re.match, which anchors at the START.",
             solution="""
layout_map = tf.keras.dtensor.experimental.LayoutMap(mesh=mesh)
layout_map["hidden.kernel"] = dtensor.Layout([dtensor.UNSHARDED, "model"], mesh)  # split the units
layout_map["hidden.bias"] = dtensor.Layout(["model"], mesh)
layout_map["logits.kernel"] = dtensor.Layout(["model", dtensor.UNSHARDED], mesh)  # split the inputs
# logits.bias matches no key, so it is replicated
"""),
        dict(name="q4", title="Pack a training batch onto the mesh", max_points=2, grader=_ch5_q4,
             call="ex.q4.check(pack_fn)",
             hint="Images (rank 4) and labels (rank 1) each need a batch-sharded layout of their own rank on the "
                  "same batch x model mesh as the model.",
             solution="""
def pack_fn(images, labels):
    images = pack_batch(images, dtensor.Layout.batch_sharded(mesh, "batch", rank=4))
    labels = pack_batch(labels, dtensor.Layout.batch_sharded(mesh, "batch", rank=1))
    return images, labels
"""),
    ],
    6: [
        dict(name="q1", title="Xavier initialisation of a DVariable", max_points=3, grader=_ch6_q1,
             call="ex.q1.check(xavier_limit, init_weight)",
             hint="Xavier (Glorot) uniform samples U(-limit, limit) with limit = sqrt(6 / (fan_in + fan_out)). "
                  "Create the value on the mesh with dtensor.call_with_layout (wrap the random op in "
                  "tf.function) and make it a dtensor.DVariable.",
             solution="""
def xavier_limit(fan_in, fan_out):
    return math.sqrt(6.0 / (fan_in + fan_out))

def init_weight(shape, layout, seed):
    limit = xavier_limit(*shape)
    value = dtensor.call_with_layout(tf.function(tf.random.stateless_uniform), layout,
                                     shape=shape, seed=seed, minval=-limit, maxval=limit)
    return dtensor.DVariable(value)
"""),
        dict(name="q2", title="Fix the hidden-size bug", max_points=2, grader=_ch6_q2,
             call="ex.q2.check(model)",
             hint="Print the shapes of model.trainable_variables. Which line changes hidden_layer_2_size after "
                  "it was set to 500?",
             solution="""
# Delete the line `hidden_layer_2_size = 10`: it overwrites the second hidden size with the
# number of classes, so the network became 784 -> 700 -> 10 -> 10 instead of 784 -> 700 -> 500 -> 10.
"""),
        dict(name="q3", title="Adam's slots in the weights' layouts", max_points=2, grader=_ch6_q3,
             call="ex.q3.check(make_slots)",
             hint="A slot is updated elementwise together with its weight, so it should be split exactly like "
                  "the weight: dtensor.fetch_layout(variable).",
             solution="""
def make_slots(variable):
    layout = dtensor.fetch_layout(variable)
    def zeros():
        return dtensor.DVariable(dtensor.call_with_layout(tf.zeros, layout, shape=variable.shape,
                                                          dtype=variable.dtype))
    return zeros(), zeros()
"""),
        dict(name="q4", title="Fix the frozen step counter", max_points=3, grader=_ch6_q4,
             call="ex.q4.check(FixedAdam)",
             hint="Which value does `self.step` have inside the graph of a tf.function? Python code runs only "
                  "while the function is traced.",
             solution="""
# In __init__: keep the step in a (replicated) variable instead of a Python int:
#     self.step = dtensor.DVariable(dtensor.call_with_layout(
#         tf.zeros, dtensor.Layout.replicated(mesh, 0), shape=[], dtype=tf.float32))
# In apply (a tf.function):
#     self.step.assign_add(1.0)
#     t = self.step.read_value()
#     alpha = self.learning_rate * tf.sqrt(1 - self.beta_2 ** t) / (1 - self.beta_1 ** t)
"""),
    ],
}
