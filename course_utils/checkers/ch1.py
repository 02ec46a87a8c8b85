"""Chapter 1 · Tensors and devices: the exercises' graders and hints."""
import re

from .answers import as_bool_list, as_float, as_int, close, grade_items, short_error
from .core import Exercise, Feedback, chapter

# Exercise 1: where each matmul of the exercise's code runs (a CPU index), or ERROR when its
# block raises before the matmul exists. The code, on the CPU_COUNT logical CPUs:
#   a on CPU:2;  b: no block;  c: CPU:6 inside CPU:1;  d: inside CPU:1 after the CPU:6 block, input c;
#   e: CPU:9 (missing) inside CPU:4;  f: inside CPU:3, after asking for 4 CPUs instead of 8.
ERROR = "error"
CPU_COUNT = 8
OUTER_BLOCK = {"c": 1, "e": 4}                  # the enclosing block of a nested one
MISSING_CPU = 9


def _reference_placements():
    """Exercise 1's answer: the CPU each matmul runs on, or ERROR."""
    return {"b": 0, "c": 6, "d": 1, "e": 0, "f": ERROR}


def _reference_input_devices():
    """Where each matmul's input lives (d's input is c, so this says where c ran)."""
    return {"b": 2, "c": 2, "d": 6, "e": 2}


def _reference_placement_reasons():
    """Why each matmul runs where it does: these give the answer away (shown in self-study mode only)."""
    return {
        "b": "It runs on CPU:0, the default device: no tf.device block is open on that line, and a is copied there.",
        "c": "It runs on CPU:6: the innermost block wins.",
        "d": "It runs on CPU:1: the CPU:6 block has ended, the CPU:1 block is still open, and c is copied there.",
        "e": "It runs on CPU:0: soft placement drops the request for CPU:9 and TensorFlow takes its first choice, "
             "as if nothing had been requested.",
        "f": f"It is 'error': a exists, so the runtime already runs with {CPU_COUNT} CPUs, and asking for 4 raises "
             "RuntimeError (Virtual devices cannot be modified after being initialized) before f is computed.",
    }


def _placement(value):
    """A prediction as a CPU index or ERROR; None when it can't be read."""
    if isinstance(value, BaseException) or (isinstance(value, type) and issubclass(value, BaseException)):
        return ERROR
    name = getattr(value, "name", value)  # a tf.config.LogicalDevice
    if isinstance(name, str):
        text = name.strip().lower()
        if "error" in text or text == "raises":
            return ERROR
        found = re.fullmatch(r"(?:.*/)?(?:device:)?cpu:(\d+)|(\d+)", text)
        return int(found[1] or found[2]) if found else None
    return as_int(value)


def _judge_placement_mistake(key, given):
    """Why the prediction ``given`` for item ``key`` is wrong, without saying what is right."""
    if key == "f":
        return ("look at the line before the matmul: it asks for a different device configuration. Has the "
                "runtime started by then?")
    if given == ERROR:
        return ("none of the lines before it raises: nothing there changes the device configuration, and soft "
                "placement is on.")
    if given == OUTER_BLOCK.get(key):
        if key == "e":
            return ("soft placement does not fall back to the enclosing block: the inner block's request replaced "
                    "the outer one, and that request cannot be met.")
        return "the outer block is open, but a block nested inside it overrides it."
    if given == _reference_input_devices().get(key):
        return (f"its input lives on CPU:{given}, but an operation does not follow its input tensors (only an "
                "operation on a variable itself runs where the variable lives, and this code has no variables).")
    if given == MISSING_CPU:
        return f"there is no CPU:{MISSING_CPU} (the CPUs are 0 to {CPU_COUNT - 1}), and soft placement is on."
    if not 0 <= given < CPU_COUNT:
        return f"there is no CPU:{given}: the CPUs are 0 to {CPU_COUNT - 1}."
    if key == "d" and given == 0:
        return "leaving the inner block does not close the block around it."
    return "which tf.device block is in force on that line, and can its device be used?"


def _judge_explain_placement(key, given, raw):
    if given is None:
        text = repr(raw)
        text = text if len(text) <= 40 else text[:40] + "..."
        return f"give the index of a CPU (an int from 0 to {CPU_COUNT - 1}) or {ERROR!r}, not {text}.", ""
    return f"you predicted {given!r}: {_judge_placement_mistake(key, given)}", _reference_placement_reasons()[key]


class PredictPlacement(Exercise):
    title = "Predict where each operation runs"
    points = 2
    hints = (
        "For each line ask: which tf.device block is in force here, and does that device exist? The devices of an "
        "operation's input tensors play no part (only an operation on a variable itself, such as reading or "
        "updating it, runs where the variable lives, and this code has no variables).",
        "Nested blocks: the innermost wins until it ends. A device that does not exist: soft placement drops the "
        "request and TensorFlow takes its first choice, as with no block at all.",
        f"And the last block: the runtime started when `a` was created, with {CPU_COUNT} CPUs. What does "
        "set_logical_device_configuration do with a different configuration once the runtime runs?",
    )

    def grade(self, predictions):
        placements = _reference_placements()
        fb = grade_items(Feedback(), predictions, placements, _judge_explain_placement, _placement,
                         "the CPU index each matmul runs on, or 'error'")
        right = fb.points
        if isinstance(predictions, dict) and len(predictions) > 1:
            given = [_placement(v) for v in predictions.values()]
            if len(set(given)) == 1 and given[0] is not None:
                fb.note("You gave the same answer for every line, but the lines differ in which blocks are open "
                        "and whether their device exists.")
        fb.points = 2 if right == len(placements) else 1 if right == len(placements) - 1 else 0
        return fb


CALLS = ["f(tf.constant(1))", "f(tf.constant(2))", "f(tf.constant(1.0))", "f(3)", "f(tf.constant([1, 2]))",
         "f(3)", "f(tf.constant([3, 4]))"]
QUESTIONS = [  # what to think about when the prediction for a call is wrong (no answer in it)
    "what could a tf.function reuse before anything was ever traced?",
    "compare it with call 1: which of value, dtype and shape changed, and which of them does a trace depend on?",
    "compare it with calls 1 and 2: which of value, dtype and shape changed?",
    "a Python number is not a tensor: by what does it enter the signature?",
    "compare its tensor with the ones f has seen: is anything about it new?",
    "has f seen this exact Python argument before?",
    "compare it with call 5: which of value, dtype and shape changed?",
]


def _reference_traces():
    """Exercise 2's answer: whether each call of CALLS traces."""
    return [True, False, True, True, True, False, False]


def _reference_why_traces():
    """Why each call traces or not: these give the answer away (shown in self-study mode only)."""
    return [
        "The first call always traces: there is no concrete function yet.",
        "tf.constant(2) has the same dtype (int32) and shape () as tf.constant(1). A tf.function keys its traces on "
        "the dtype and shape of tensor arguments, not on their values, so call 1's trace is reused.",
        "tf.constant(1.0) is a float32, a dtype f has not seen: this call traces.",
        "A Python number is part of the signature by its *value*, and 3 has not been seen: this call traces.",
        "The shape (2,) is new, so this call traces a new concrete function.",
        "The Python value 3 was seen in call 4, so its trace is reused.",
        "Same dtype (int32) and shape (2,) as call 5: its trace is reused. The values [3, 4] don't matter.",
    ]


class PredictTracing(Exercise):
    title = "Predict which calls trace"
    points = 2
    hints = (
        "A tf.function keeps one trace per input signature. What is the signature of a tensor argument, and what "
        "is the signature of a Python number?",
        "For a tensor argument the signature is its dtype and shape; for a Python argument it is the value itself.",
        "Write each call's signature next to it (for example int32, shape () for call 1). A call traces exactly "
        "when its signature has not appeared in an earlier call.",
    )

    def grade(self, predictions):
        fb = Feedback()
        values = as_bool_list(fb, predictions, len(CALLS), "call", "True = this call traces")
        if values is None:
            return fb
        if any(v is None for v in values):
            fb.wrong("Use True or False for every call (None means you have not answered that call yet).")
            return fb
        traces, why = _reference_traces(), _reference_why_traces()
        wrong = [i for i, (v, t) in enumerate(zip(values, traces)) if v != t]
        if not wrong:
            fb.right(f"Traces happen on calls {[i + 1 for i, t in enumerate(traces) if t]}: a new trace for each new "
                     f"input signature (dtype and shape of tensors, value of Python arguments).", points=2)
            return fb
        if all(values):
            fb.note("Not every call traces: tf.function reuses a trace when the input signature repeats.")
        elif not any(values):
            fb.note("Some calls must trace: a tf.function has no graph until it has traced once.")
        elif sum(values) == 1 and values[0]:
            fb.note("A tf.function traces again whenever it sees a new input signature, not only once.")
        for i in wrong:
            fb.wrong(f"call {i + 1}, {CALLS[i]}: {QUESTIONS[i]}", answer=why[i])
        fb.points = 1 if len(wrong) == 1 else 0
        return fb


W, X = 2.0, 3.0  # y = w * x**2 = 18: dy/dw = x**2 = 9, dy/dx = 2 * w * x = 12


class GradientTape(Exercise):
    title = "Gradients with GradientTape"
    points = 2
    none_is_answer = True
    hints = (
        "Which values does a tape watch by itself, and which must you ask it to watch?",
        "A tape records operations on trainable variables automatically; a tf.constant must be watched with "
        "tape.watch(x). Compute y inside the `with` block, then tape.gradient(y, [w, x]).",
    )

    def _grade_one(self, fb, name, raw, value, right, other):
        """One gradient: ``right`` is its value, ``other`` the other gradient's right value."""
        if raw is Ellipsis:
            fb.wrong(f"{name}: not answered yet.")
        elif raw is None:
            if name == "grad_w":
                fb.wrong("grad_w is None: w must be used to compute y inside the tape's `with` block.")
            else:
                fb.wrong("grad_x is None: x is a tf.constant, and a tape only watches trainable variables "
                         "automatically.", answer="Call tape.watch(x) inside the `with` block, before computing y.")
        elif type(raw) in (int, float):  # NumPy numbers (from .numpy()) are fine
            fb.wrong(f"{name} is a plain Python number: pass the tensor that tape.gradient returned (a value worked "
                     f"out by hand is not what this exercise asks for).")
        elif value is None:
            return
        elif close(value, right):
            fb.right(f"{name} = {value:g}")
        elif close(value, W * X ** 2):
            fb.wrong(f"{name} = {value:g} is y itself, not its derivative: use tape.gradient.")
        elif close(value, other):
            fb.wrong(f"{name} = {value:g} is the derivative with respect to the other input.")
        elif name == "grad_x" and value == 0:
            fb.wrong("grad_x = 0: the tape did not record x (a constant), so asking for zeros instead of None hides "
                     "the problem; it is not dy/dx.", answer="Call tape.watch(x) inside the `with` block.")
        else:
            fb.wrong(f"{name} = {value:g} is not the derivative of y = w * x**2.",
                     answer="dy/dw is x**2 and dy/dx is 2*w*x.")

    def grade(self, grad_w, grad_x):
        fb = Feedback()
        right_w, right_x = X ** 2, 2 * W * X
        if grad_w is None and grad_x is None:
            fb.wrong("Both gradients are None: the tape recorded nothing. Compute y *inside* the "
                     "`with tf.GradientTape() as tape:` block.")
            return fb
        values = {}
        for name, value in (("grad_w", grad_w), ("grad_x", grad_x)):
            values[name] = None
            if value is not None and value is not Ellipsis:
                try:
                    values[name] = as_float(value)
                except Exception as err:
                    fb.wrong(f"{name}: expected one number (a scalar tensor), {short_error(err)}.")
        gw, gx = values["grad_w"], values["grad_x"]
        if close(gw, right_x) and close(gx, right_w):
            fb.wrong("The two gradients are swapped: tape.gradient returns them in the order of the sources you "
                     "list.", answer="tape.gradient(y, [w, x]) returns dy/dw first.")
            return fb
        self._grade_one(fb, "grad_w", grad_w, gw, right_w, right_x)
        self._grade_one(fb, "grad_x", grad_x, gx, right_x, right_w)
        return fb


CHAPTER = chapter(1, "Tensors and devices", [PredictPlacement, PredictTracing, GradientTape])
