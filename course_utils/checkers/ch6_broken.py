"""Chapter 6, exercise 5 (find the broken variable of a training step): its checker and hints.

``collect`` runs the learner's reference and fixed step on starting values and batches drawn from the check's seed
and sends the changes they produced; ``judge`` draws the same inputs again and computes the right changes itself
(``_reference_sgd_change``, which the sandbox's copy of this module does not have).
"""
from .answers import UNSHARDED, checker_mesh, global_numpy, on_mesh
from .ch6_answers import ERROR, MISSING, NOT_CALLABLE, _not_callable, _raised, _same_values
from .core import Exercise, Feedback

BROKEN_RATE = 0.1  # the exercise's LEARNING_RATE
BROKEN_SPECS = {"w1": [UNSHARDED, "model"], "b1": ["model"], "w2": ["model", UNSHARDED], "b2": [UNSHARDED]}
REFERENCE_BATCH, FIXED_BATCHES = 16, (16, 32)  # two batch sizes: a fix by a constant factor only fits one of them


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
