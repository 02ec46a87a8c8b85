"""Chapter 6, exercises 4 and 5 (the hand-written Adam's step counter, the broken training step), and the
helpers that exercises 1 to 3 share with them.

Each ``collect`` runs the learner's code on inputs drawn from the check's seed and sends what it produced;
each ``judge`` draws the same inputs again and computes its references itself (``reference_adam``,
``_reference_sgd_change``, which the sandbox's copy of this module does not have).
"""
import math

import numpy as np

from .answers import UNSHARDED, checker_mesh, global_numpy, layout_of, on_mesh, short_error
from .core import Exercise, Feedback

ADAM_RATE, ADAM_STEPS, ADAM_SHAPE = 0.1, 3, (8, 4)
ADAM_WARMUP = 4  # exercise 4's warm-up: the rate times min(1, t / 4), 1/4, 2/4, 3/4 over the three steps



def _float32_adam_drift(lr, steps, beta_2=0.999):
    """How far a float32 Adam's weights may drift from the float64 reference in ``steps`` steps, per weight.

    The bias correction sqrt(1 - beta_2 ** t) is where float32 loses most: float32's beta_2 is off by its own
    rounding (1.29e-8 for 0.999), beta_2 ** t by up to t times that plus a half-ulp (2**-25) per multiplication,
    and 1 - beta_2 ** t (about t / 1000) magnifies the error ~1000 / t times; the square root halves it. In the
    first 3 steps an update is at most 1.004 lr, so step t is off by 1.004 lr delta_t / (2 (1 - beta_2 ** t)).
    """
    beta_2_error = abs(float(np.float32(beta_2)) - beta_2)
    return sum(1.004 * lr * (t * beta_2_error + (t - 1) * 2 ** -25) / (2 * (1 - beta_2 ** t))
               for t in range(1, steps + 1))


ADAM_RTOL = 1e-4  # float32's rounding of w itself
# Twice the drift bound (3.7e-6) for the other float32 roundings; measured on the mesh: up to 2.3e-6.
ADAM_ATOL = 2 * _float32_adam_drift(ADAM_RATE, ADAM_STEPS)
BROKEN_RATE = 0.1  # the exercise's LEARNING_RATE
BROKEN_SPECS = {"w1": [UNSHARDED, "model"], "b1": ["model"], "w2": ["model", UNSHARDED], "b2": [UNSHARDED]}
REFERENCE_BATCH, FIXED_BATCHES = 16, (16, 32)  # two batch sizes: a fix by a constant factor only fits one of them
MISSING, NOT_CALLABLE, ERROR = "missing", "not callable", "error"


def _not_callable(answer):
    """What crosses for an answer that should be a function or a class: ``None`` or the type's name."""
    return {"kind": MISSING if answer is None else NOT_CALLABLE, "type": type(answer).__name__}


def _raised(err):
    """What crosses for a function that raised: the error, cut to 300 characters, and the end of its message, where
    TensorFlow's errors from inside a tf.function say what went wrong."""
    return {"kind": ERROR, "error": short_error(err), "tail": " ".join(str(err).split())[-300:]}


def _checker_weight(shape=(8, 4), sharding=(UNSHARDED, "model"), value=None):
    """A DVariable of ``shape`` with the layout ``sharding`` on the checker's mesh (``value`` or 0, 0.1, 0.2,
    ...), and that layout."""
    import numpy as np
    from tensorflow.experimental import dtensor

    layout = dtensor.Layout(list(sharding), checker_mesh())
    if value is None:
        value = np.arange(np.prod(shape), dtype="float32").reshape(shape) / 10.0
    return dtensor.DVariable(on_mesh(np.asarray(value, dtype="float32"), layout)), layout


def _host_counters(optimizer):
    """The optimizer's scalar variables that live on one device instead of on the mesh."""
    import tensorflow as tf

    if isinstance(optimizer, tf.Module):
        variables = optimizer.variables
    else:
        variables = [v for v in vars(optimizer).values() if isinstance(v, tf.Variable)]
    return [v for v in variables if v.shape.rank == 0 and layout_of(v.read_value()) is None]


def _mesh_counters(optimizer):
    """The values of the optimizer's scalar variables that live on the mesh (a step counter, usually)."""
    import tensorflow as tf

    if isinstance(optimizer, tf.Module):
        variables = optimizer.variables
    else:
        variables = [v for v in vars(optimizer).values() if isinstance(v, tf.Variable)]
    return [float(global_numpy(v)) for v in variables if v.shape.rank == 0 and layout_of(v.read_value()) is not None]


def _adam_case(seed):
    """The starting weight and the gradients of the three steps of a q4 check (NumPy, float32)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    w0 = rng.normal(size=ADAM_SHAPE).astype("float32")
    return w0, [rng.normal(size=ADAM_SHAPE).astype("float32") for _ in range(ADAM_STEPS)]


def _same_values(got, want, rtol, atol=1e-6):
    import numpy as np

    got = np.asarray(got)
    return got.shape == np.shape(want) and got.dtype.kind in "biuf" and bool(np.allclose(got, want, rtol, atol))


def reference_adam(w0, grads, lr, frozen_step=None, beta_1=0.9, beta_2=0.999, epsilon=1e-7, algorithm_1=False,
                   warmup_steps=None, frozen_warmup=None):
    """The weights after each step of Keras' Adam; ``frozen_step`` keeps t constant (the bug). ``algorithm_1``: the
    paper's Algorithm 1, epsilon added to the bias-corrected sqrt(v_hat) (tf_keras' ``adaptive_epsilon=True``, the
    chapter's Adam); by default Keras', epsilon added to sqrt(v) (the form just before Section 2.1 of the paper).
    ``warmup_steps``: the rate is ``lr * min(1, t / warmup_steps)`` (exercise 4's warm-up), its t frozen at
    ``frozen_warmup`` when given (a warm-up that still reads a Python counter)."""
    import numpy as np

    w, m, v, history = w0.astype("float64"), np.zeros_like(w0, "float64"), np.zeros_like(w0, "float64"), []
    for i, g in enumerate(grads, start=1):
        t = frozen_step or i
        rate = lr * min(1.0, (frozen_warmup or t) / warmup_steps) if warmup_steps else lr
        m = m + (g - m) * (1 - beta_1)
        v = v + (g * g - v) * (1 - beta_2)
        if algorithm_1:
            w = w - rate * (m / (1 - beta_1 ** t)) / (np.sqrt(v / (1 - beta_2 ** t)) + epsilon)
        else:
            w = w - rate * math.sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t) * m / (np.sqrt(v) + epsilon)
        history.append(w.copy())
    return history


class FrozenStep(Exercise):
    title = "Fix the frozen step counter"
    points = 3
    hints = (
        "Which value does `self.step` have inside the graph of a tf.function? Python code runs only while the "
        "function is traced.",
        "Keep the step in a variable that belongs to the mesh (a replicated scalar DVariable, like the chapter's "
        "mesh_scalar), add 1 to it with assign_add inside apply, and compute from its value, with TensorFlow ops, "
        "everything that depends on the step: the bias correction AND the warm-up.",
    )

    def collect(self, adam_class, seed=0):
        """Runs ``adam_class([weight], learning_rate=0.1, warmup_steps=4)`` and three ``apply([gradient])`` calls inside a
        tf.function, on a weight and gradients drawn from ``seed``.

        What crosses: ``{"kind": "steps", "history": [the weight's value after each step], "counters": [the
        values of the optimizer's scalar variables off the mesh], "mesh_counters": [those of its scalar variables on
        the mesh], "devices": the mesh's device count,
        "traced_apply": whether the class's apply is a tf.function}``; or the error it raised, as text; or
        the type's name of an answer that is not callable.
        """
        import tensorflow as tf

        if not callable(adam_class):
            return _not_callable(adam_class)
        w0, grads = _adam_case(seed)
        weight, layout = _checker_weight(ADAM_SHAPE, value=w0)
        history = []
        try:
            optimizer = adam_class([weight], learning_rate=ADAM_RATE, warmup_steps=ADAM_WARMUP)
            # Inside tf.function, as in a training step: an eager apply would hide a Python counter.
            update = tf.function(lambda gradients: optimizer.apply(gradients))
            for g in grads:
                update([on_mesh(g, layout)])
                history.append(global_numpy(weight))
        except Exception as err:
            return _raised(err)
        try:
            counters = [float(global_numpy(counter)) for counter in _host_counters(optimizer)]
        except Exception:
            counters = []
        try:
            mesh_counters = _mesh_counters(optimizer)
        except Exception:
            mesh_counters = []
        return {"kind": "steps", "history": history, "counters": counters, "mesh_counters": mesh_counters,
                "devices": layout.mesh.num_local_devices(),
                "traced_apply": hasattr(getattr(type(optimizer), "apply", None), "get_concrete_function")}

    def judge(self, data, seed=0):
        """Compares the weights that crossed with :func:`reference_adam` on the inputs of ``seed``, and with
        Adam's frozen-counter bug (t = 1 or 2 at every step)."""
        fb = Feedback()
        if data["kind"] in (MISSING, NOT_CALLABLE):
            fb.wrong("Give your fixed optimizer class (the class itself, e.g. FixedAdam).")
            return fb
        if data["kind"] == ERROR:
            message = str(data["error"])
            if "int64" in message + data.get("tail", "") and "float" in message + data.get("tail", ""):
                fb.wrong(f"Your optimizer raised {message}. An integer step cannot be a power of a float beta: "
                         f"beta_1 ** t needs t as a float.",
                         answer="Keep the step as float32 (mesh_scalar(tf.float32, mesh)) or use "
                                "tf.cast(t, tf.float32).")
            else:
                fb.wrong(f"Your optimizer raised {message}. It is called as adam_class([weight], learning_rate=0.1, "
                         f"warmup_steps={ADAM_WARMUP}), with BuggyAdam's constructor, then .apply([gradient]) three "
                         f"times inside a tf.function, as a training step would.")
            return fb
        w0, grads = _adam_case(seed)
        history = list(data["history"])
        if len(history) != len(grads):
            raise ValueError(f"{len(history)} weight values for {len(grads)} steps")
        matches = {form: [_same_values(h, r, ADAM_RTOL, ADAM_ATOL) for h, r in
                          zip(history, reference_adam(w0, grads, ADAM_RATE, algorithm_1=form == "Algorithm 1",
                                                      warmup_steps=ADAM_WARMUP))]
                   for form in ("Keras' default", "Algorithm 1")}
        form, ok = max(matches.items(), key=lambda item: sum(item[1]))
        if all(ok):
            where = ("epsilon added to sqrt(v)" if form == "Keras' default" else
                     "Algorithm 1's epsilon, added to sqrt(v_hat): adaptive_epsilon=True")
            fb.right(f"three steps inside tf.function match Keras' Adam ({where}; bias correction with t = 1, 2, 3), "
                     f"warmed up over {ADAM_WARMUP} steps.", points=3)
            return fb
        import numpy as np

        mesh_counters = [float(value) for value in data.get("mesh_counters", [])]
        nan_step = next((index for index, h in enumerate(history) if not np.all(np.isfinite(np.asarray(h)))), None)
        if nan_step == 0:
            never = bool(mesh_counters) and all(value == 0 for value in mesh_counters)
            fb.wrong("The weight became NaN at the first step: the bias correction divided by 1 - beta_1**t = 0, so t "
                     "was 0 when it was computed. "
                     + ("Your step variable still holds 0 after 3 calls: nothing adds 1 to it." if never else
                        "Is the counter increased BEFORE the correction reads it?"),
                     answer="In apply: self.step.assign_add(1.0) first, then t = self.step.read_value().")
            return fb
        for value in data["counters"]:
            if float(value) > len(grads):
                fb.wrong(f"Your step counter is an ordinary tf.Variable: after {len(grads)} calls it holds "
                         f"{float(value):g}, not {len(grads)}. It lives on one device, outside the mesh, and every "
                         f"one of the {int(data['devices'])} devices that run apply adds its own 1, without "
                         f"coordination.",
                         answer="Make it a DVariable with a replicated scalar layout on the weights' mesh, e.g. "
                                "mesh_scalar(tf.float32, mesh): one variable of the mesh, incremented once per call.")
                return fb
        def same(**wrong):  # the weights of every step are those of Adam with this mistake, either epsilon
            return any(all(_same_values(h, r, ADAM_RTOL, ADAM_ATOL) for h, r in
                           zip(history, reference_adam(w0, grads, ADAM_RATE, algorithm_1=flag, **wrong)))
                       for flag in (False, True))

        if same():
            fb.wrong("Your steps are Adam's without the warm-up: this Adam's rate is learning_rate * min(1, t / "
                     "warmup_steps), which the chapter's Adam does not have. Keep BuggyAdam's update, warm-up "
                     "included, and fix only what freezes.")
            return fb
        for frozen in (1, 2):
            if same(warmup_steps=ADAM_WARMUP, frozen_warmup=frozen):
                fb.wrong(f"Your bias correction follows the step, but your warm-up stays at t = {frozen}: it still "
                         f"reads a number that changes only while apply is traced. The warm-up depends on the step "
                         f"too.", answer="Compute it from the same variable: tf.minimum(1.0, t / self.warmup_steps).")
                return fb
        for frozen in (1, 2):
            wrongs = [reference_adam(w0, grads, ADAM_RATE, frozen_step=frozen, algorithm_1=flag,
                                     warmup_steps=ADAM_WARMUP, frozen_warmup=frozen) for flag in (False, True)]
            if any(all(_same_values(h, r, ADAM_RTOL, ADAM_ATOL) for h, r in zip(history, wrong)) for wrong in wrongs):
                eager = "" if data["traced_apply"] is True else (
                    " Removing @tf.function only hides this: a training step runs apply inside a tf.function, "
                    "and so does this checker.")
                if mesh_counters and all(value == 0 for value in mesh_counters):
                    fb.wrong(f"Your Adam uses t = {frozen} at every step, and your step variable on the mesh still "
                             f"holds 0 after {len(grads)} calls: nothing adds 1 to it. An expression such as "
                             f"self.step + 1 computes a new tensor; it does not change the variable.",
                             answer="In apply: self.step.assign_add(1.0), then t = self.step.read_value().")
                    return fb
                fb.wrong(f"Your Adam uses t = {frozen} at every step: the step counter is frozen. A Python number "
                         f"changed inside a tf.function changes only while the function is TRACED; later calls replay "
                         f"the graph with the value baked in.{eager}",
                         answer="Keep the step in a variable on the mesh (self.step = mesh_scalar(tf.float32, mesh); "
                                "self.step.assign_add(1.0)) and compute the bias correction and the warm-up from it "
                                "with TensorFlow ops.")
                return fb
        if ok[0]:
            fb.right("step 1 matches Keras' Adam", points=1)
            fb.wrong("steps 2 and 3 do not; check how the step count t and the moments m and v carry over from one "
                     "step to the next.")
        else:
            fb.wrong(f"the first step already differs from Keras' Adam (lr=0.1, warmed up over {ADAM_WARMUP} steps), "
                     f"with either placement of epsilon.",
                     answer="Check the update m += (g - m) * (1 - beta_1), v += (g*g - v) * (1 - beta_2), "
                            "w -= lr * min(1, t / warmup_steps) * sqrt(1 - beta_2**t) / (1 - beta_1**t) * m / "
                            "(sqrt(v) + epsilon) (or Algorithm 1's, with m_hat / (sqrt(v_hat) + epsilon)).")
        return fb


def _broken_case(seed, part, batch):
    """Starting values and a batch (NumPy) for a 12 -> 8 -> 10 classifier, other sizes than the notebook's;
    ``part`` tells apart the draws of one check (0 for my_reference, the batch size for fixed_step)."""
    import numpy as np

    rng = np.random.default_rng([int(seed), int(part)])
    values = {"w1": rng.normal(0, 0.3, (12, 8)), "b1": rng.normal(0, 0.1, 8),
              "w2": rng.normal(0, 0.3, (8, 10)), "b2": rng.normal(0, 0.1, 10)}
    values = {name: value.astype("float32") for name, value in values.items()}
    return values, rng.normal(size=(batch, 12)).astype("float32"), rng.integers(0, 10, batch)


def _reference_sgd_change(values, images, labels, bias_scale=1.0):
    """-rate x the gradient of the mean softmax cross-entropy, by hand; ``bias_scale`` scales b2's (the bug: 1/N)."""
    import numpy as np

    pre = images @ values["w1"] + values["b1"]
    hidden = np.maximum(pre, 0)
    logits = hidden @ values["w2"] + values["b2"]
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(labels)), labels] -= 1
    d_logits = p / len(labels)
    d_pre = (d_logits @ values["w2"].T) * (pre > 0)
    gradients = {"w1": images.T @ d_pre, "b1": d_pre.sum(axis=0), "w2": hidden.T @ d_logits,
                 "b2": d_logits.sum(axis=0) * bias_scale}
    return {name: -BROKEN_RATE * g for name, g in gradients.items()}


def _differs(got, want):
    """The names whose change in ``got`` is not ``want``'s (another shape counts as different)."""
    return sorted(name for name in want if not _same_values(got[name], want[name], rtol=1e-3))


def _collect_reference(my_reference, seed):
    import numpy as np
    from tensorflow.experimental import dtensor

    if not callable(my_reference):
        return _not_callable(my_reference)
    values, images, labels = _broken_case(seed, 0, REFERENCE_BATCH)
    mesh = checker_mesh()
    try:
        got = my_reference({n: v.copy() for n, v in values.items()},
                           on_mesh(images, dtensor.Layout(["batch", UNSHARDED], mesh)),
                           on_mesh(labels, dtensor.Layout(["batch"], mesh)))
        return {"kind": "changes", "changes": {name: np.asarray(got[name], dtype="float64") for name in values}}
    except Exception as err:
        return _raised(err)


def _collect_names(broken_variable):
    import tensorflow as tf

    if isinstance(broken_variable, tf.Variable):
        return {"kind": "variable"}
    names = broken_variable if isinstance(broken_variable, (list, tuple, set)) else [broken_variable]
    return {"kind": "names", "names": [str(n) for n in names if n is not None]}


def _run_fixed_step(fixed_step, values, images, labels):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    mesh = checker_mesh()
    params = {name: dtensor.DVariable(on_mesh(value, dtensor.Layout(BROKEN_SPECS[name], mesh)))
              for name, value in values.items()}
    fixed_step(params, on_mesh(images, dtensor.Layout(["batch", UNSHARDED], mesh)),
               on_mesh(labels.astype("int64"), dtensor.Layout(["batch"], mesh)))
    if set(params) != set(values) or not all(isinstance(v, tf.Variable) for v in params.values()):
        raise TypeError("fixed_step changed the dict params itself; update its variables in place with assign_sub")
    return {name: global_numpy(v) - values[name] for name, v in params.items()}


def _collect_fixed_step(fixed_step, seed):
    if not callable(fixed_step):
        return _not_callable(fixed_step)
    changes = {}
    for batch in FIXED_BATCHES:
        values, images, labels = _broken_case(seed, batch, batch)
        try:
            changes[batch] = _run_fixed_step(fixed_step, values, images, labels)
        except Exception as err:
            return {**_raised(err), "batch": batch}
    return {"kind": "changes", "changes": changes}


VARIABLE_WORDS = {"w1": ("hidden", "kernel"), "b1": ("hidden", "bias"), "w2": ("output", "kernel"),
                  "b2": ("output", "bias")}


def _variable_names(text):
    """The variable names (w1, b1, w2, b2) that an answer names: 'b2', "params['b2']", 'b2:0', 'B2 (the output
    bias)', or a description such as 'the output layer's bias'."""
    import re

    text = str(text).lower()
    found = set(re.findall(r"(?<![a-z0-9])([wb][12])(?![0-9])", text))
    if found:
        return found
    words = {"kernel": ("kernel", "weight", "matrix"), "bias": ("bias",), "hidden": ("hidden", "first"),
             "output": ("output", "last", "second", "logit")}
    return {name for name, (layer, kind) in VARIABLE_WORDS.items()
            if any(w in text for w in words[layer]) and any(w in text for w in words[kind])}


class BrokenVariable(Exercise):
    title = "Find the broken variable"
    points = 4
    hints = (
        "Which reference can tell whether broken_step is right? Running broken_step again (eagerly, which DTensor "
        "cannot even do for this gradient) repeats its own code, bug included. Compute the expected change of every "
        "variable with code that shares nothing with broken_step.",
        "my_reference(values, images, labels): make plain tf.Variables from values, write the forward pass with "
        "plain ops (relu(images @ w1 + b1) @ w2 + b2), take the mean sparse softmax cross-entropy, differentiate "
        "with tf.GradientTape and return -LEARNING_RATE * gradient per name. Then read check_step's WRONG line.",
        "The broken line is in output_layer's backward: what is the gradient of a bias that is added to every "
        "example of the batch?",
    )

    def collect(self, my_reference, broken_variable, fixed_step, seed=0):
        """Calls my_reference on starting values and a batch of 16 drawn from ``seed``, and fixed_step on
        DVariables and batches of 16 and 32 drawn from it.

        What crosses: ``{"reference": {"kind": "changes", "changes": {name: array}}, "broken": {"kind": "names",
        "names": [str(...) of each name given]} (or {"kind": "variable"} for a tf.Variable), "fixed": {"kind":
        "changes", "changes": {batch: {name: new value - starting value}}}}``; a function that raised sends
        ``{"kind": "error", "error": text}`` (fixed_step's also the batch size), an answer that is not
        callable its type's name.
        """
        return {"reference": _collect_reference(my_reference, seed), "broken": _collect_names(broken_variable),
                "fixed": _collect_fixed_step(fixed_step, seed)}

    def judge(self, data, seed=0):
        """my_reference (2 points) and fixed_step (1) against :func:`_reference_sgd_change` on the inputs of
        ``seed``; broken_variable (1) against the name of the broken variable."""
        fb = Feedback()
        reference_ok = self._judge_reference(fb, data["reference"], seed)
        name_ok = self._judge_broken_name(fb, data["broken"], reference_ok)
        self._judge_fixed_step(fb, data["fixed"], seed, name_ok)
        return fb

    def _judge_reference(self, fb, data, seed):
        """Grade my_reference (2 points); return whether it is right."""
        import numpy as np

        if data["kind"] in (MISSING, NOT_CALLABLE):
            fb.wrong("my_reference: not answered yet." if data["kind"] == MISSING else
                     "my_reference should be a function (values, images, labels) -> {name: expected change}.")
            return False
        if data["kind"] == ERROR:
            message = str(data["error"])
            if "expecting a DTensor" in message or "copy_to_mesh" in message:
                fb.wrong("my_reference raised an error of DTensor's: it ran a DTensor computation one operation at "
                         "a time, which DTensor cannot do for every gradient. And a reference that runs broken_step "
                         "(or its output_layer) would repeat its bug anyway. Compute on one device, from "
                         "value_of(images), value_of(labels) and the NumPy values.")
            else:
                fb.wrong(f"my_reference raised {message}. check_step calls it as my_reference(values, images, "
                         f"labels): values is a dict of NumPy arrays, images and labels are the step's DTensors "
                         f"(value_of(images) gives the whole batch as NumPy); it returns each variable's expected "
                         f"change.")
            return False
        values, images, labels = _broken_case(seed, 0, REFERENCE_BATCH)
        got = {name: np.asarray(data["changes"][name], dtype="float64") for name in values}
        want = _reference_sgd_change(values, images, labels)
        wrong = _differs(got, want)
        if not wrong:
            fb.right("my_reference: it agrees with an independent SGD step on the checker's own model "
                     "(12 -> 8 -> 10, a batch of 16)", points=2)
            return True
        ratios = {name: float(np.median(got[name][np.abs(want[name]) > 1e-9] / want[name][np.abs(want[name]) > 1e-9]))
                  for name in want}
        if wrong == ["b2"] and not _differs(got, _reference_sgd_change(values, images, labels,
                                                                       bias_scale=1 / len(labels))):
            fb.wrong("my_reference agrees with broken_step where broken_step is wrong: it shares broken_step's bug, "
                     "so the check cannot see it. A reference must not reuse the code it checks.",
                     answer="It agrees on b2. Write the output layer with plain ops (hidden @ w2 + b2) and let "
                            "tf.GradientTape differentiate it; do not call output_layer.")
        elif not _differs({n: got[n] - values[n] for n in got}, want):
            fb.wrong("my_reference returns the new values of the variables; check_step compares CHANGES "
                     "(new value - starting value).")
        elif not _differs({n: -g for n, g in got.items()}, want):
            fb.wrong("my_reference returns +learning rate x gradient: SGD moves each variable against its gradient.")
        elif not _differs({n: -BROKEN_RATE * g for n, g in got.items()}, want):
            fb.wrong("my_reference returns the gradients; check_step compares CHANGES: -learning rate x gradient.")
        elif len(set(round(r, 3) for r in ratios.values())) == 1 and not _differs(
                {n: g / ratios[n] for n, g in got.items()}, want):
            factor = next(iter(ratios.values()))
            why = (f"{factor:g} is the checker's batch size: the loss is summed over the batch, not averaged"
                   if abs(factor - len(labels)) < 1e-3 else
                   "a fixed batch size in the code? The checker's batch has 16 examples: take the mean over the "
                   "batch you are given")
            fb.wrong(f"my_reference's changes are all {factor:g} x the right ones ({why}).")
        elif wrong == ["b2"]:  # naming it would give broken_variable away
            fb.wrong(f"my_reference's expected change of one variable is not one SGD step (learning rate "
                     f"{BROKEN_RATE}) of the mean cross-entropy on the whole batch.", answer="It is b2's.")
        else:
            fb.wrong(f"my_reference's expected changes of {', '.join(wrong)} are not one SGD step "
                     f"(learning rate {BROKEN_RATE}) of the mean cross-entropy on the whole batch.")
        return False

    def _judge_broken_name(self, fb, data, reference_ok):
        """Grade broken_variable (1 point); return whether it is right."""
        if data["kind"] == "variable":
            fb.wrong("broken_variable: give the variable's NAME (a string such as the ones check_step prints), not "
                     "the variable itself.")
            return False
        names = sorted({name for text in data["names"] for name in _variable_names(text)})
        unsure = "" if reference_ok else (" (your reference is not right yet, so check_step's WRONG lines cannot be "
                                          "trusted)")
        if not data["names"]:
            fb.wrong("broken_variable: not answered yet.")
        elif names == ["b2"]:
            fb.right("broken_variable: b2, the output layer's bias")
            return True
        elif len(names) > 1:
            fb.wrong(f"broken_variable: {names}; one variable is wrong. Run check_step with your reference and read "
                     f"which line says WRONG{unsure}.")
        elif not names:
            fb.wrong(f"broken_variable: {data['names'][0]!r} names none of the variables w1, b1, w2, b2. Give the "
                     f"name check_step prints on its WRONG line.")
        else:
            fb.wrong(f"broken_variable: {names[0]!r} changes as a right SGD step changes it. Run check_step with "
                     f"your reference and read which line says WRONG{unsure}.")
        return False

    def _judge_fixed_step(self, fb, data, seed, name_ok=True):
        import numpy as np

        if data["kind"] in (MISSING, NOT_CALLABLE):
            fb.wrong("fixed_step: not answered yet." if data["kind"] == MISSING else
                     "fixed_step should be a function (params, images, labels) that updates params in place.")
            return
        if data["kind"] == ERROR:
            message = str(data["error"])
            if "expecting a DTensor" in message or "copy_to_mesh" in message:
                fb.wrong("fixed_step raised an error of DTensor's: run one operation at a time, DTensor cannot "
                         "compute every gradient. Make it a tf.function, as broken_step is.")
            else:
                fb.wrong(f"fixed_step raised {message}. It is called as fixed_step(params, images, labels) with a "
                         f"dict of DVariables (w1, b1, w2, b2) on the mesh and a batch-sharded batch of "
                         f"{int(data['batch'])}.")
            return
        results = {}
        for batch in FIXED_BATCHES:
            values, images, labels = _broken_case(seed, batch, batch)
            got, want = data["changes"][batch], _reference_sgd_change(values, images, labels)
            results[batch] = (_differs(got, want),
                              _differs(got, _reference_sgd_change(values, images, labels, bias_scale=1 / batch)),
                              np.asarray(got["b2"], dtype="float64"), want["b2"])
        wrong = sorted(set(results[16][0]) | set(results[32][0]))
        if not wrong:
            fb.right("fixed_step: one right SGD step of every variable, for batches of 16 and 32")
            return
        if not results[16][1] and not results[32][1]:
            fb.wrong("fixed_step still makes broken_step's mistake.",
                     answer="It updates b2 with its gradient divided by the batch size once more.")
            return
        ratios = [float(np.median(got / want)) for _, _, got, want in results.values()
                  if got.shape == want.shape and np.all(np.abs(want) > 1e-9)]
        if wrong == ["b2"] and len(ratios) == 2 and abs(ratios[0] - ratios[1]) > 0.1:
            fb.wrong(f"fixed_step gets {'b2' if name_ok else 'one variable'} right for one batch size only (its "
                     f"change is {ratios[0]:.3g}x the right one with 16 examples, {ratios[1]:.3g}x with 32): scaling "
                     f"by a number fixes one batch size. Fix the gradient where it is computed.",
                     answer="In output_layer's backward, the bias's gradient is the SUM of d_logits over the batch "
                            "(tf.reduce_sum(d_logits, axis=0)): d_logits already carries the loss's 1/N.")
        elif name_ok:
            fb.wrong(f"fixed_step: {', '.join(wrong)} do{'es' if len(wrong) == 1 else ''} not change as one SGD "
                     f"step (learning rate {BROKEN_RATE}) should.")
        else:  # the names would give broken_variable away
            fb.wrong(f"fixed_step: {len(wrong)} variable{'s do' if len(wrong) > 1 else ' does'} not change as one "
                     f"SGD step (learning rate {BROKEN_RATE}) should.", answer=f"They are {', '.join(wrong)}.")
