"""Chapter 6 · Core-API MLP with a hand-written Adam: the exercises' graders and hints."""
import math

from .answers import UNSHARDED, checker_mesh, close, global_numpy, layout_of, on_mesh, short_error, specs
from .core import Exercise, Feedback, chapter

WRONG_LIMITS = {
    "sqrt(1 / fan_in) is LeCun's scale; Xavier (Glorot) uses both fans.": lambda a, b: math.sqrt(1 / a),
    "sqrt(2 / (fan_in + fan_out)) is the STANDARD DEVIATION of Xavier normal, not the limit of Xavier uniform.":
        lambda a, b: math.sqrt(2 / (a + b)),
    "sqrt(6 / fan_in) is He's uniform limit (for ReLU); Xavier uses both fans.": lambda a, b: math.sqrt(6 / a),
    "Mind the brackets: sqrt(6) / (fan_in + fan_out) is not what the formula says.": lambda a, b: math.sqrt(6) / (a + b),
    "You forgot the square root.": lambda a, b: 6 / (a + b),
}
FANS = ((784, 700), (10, 20))
SEED, OTHER_SEED = [1, 2], [3, 4]
MAX_CDF_DISTANCE = 0.05  # Kolmogorov-Smirnov distance to U(-limit, limit); 2048 uniform values exceed it with p < 1e-4


def _cdf_distance_to_uniform(values, limit):
    """The largest gap between the sample's cumulative distribution and that of U(-limit, limit)."""
    import numpy as np

    x = np.sort(values.ravel())
    uniform = (x + limit) / (2 * limit)
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - uniform), np.max(uniform - np.arange(n) / n)))


def _grade_limit(fb, xavier_limit):
    if not callable(xavier_limit):
        fb.wrong("xavier_limit: not answered yet." if xavier_limit is None else
                 "xavier_limit should be a function (fan_in, fan_out) -> float.")
        return
    try:
        got = [float(xavier_limit(a, b)) for a, b in FANS]
    except Exception as err:
        fb.wrong(f"xavier_limit raised {short_error(err)}")
        return
    right = [math.sqrt(6 / (a + b)) for a, b in FANS]
    if all(close(g, r, 1e-6) for g, r in zip(got, right)):
        fb.right(f"xavier_limit(784, 700) = {right[0]:.5f}")
        return
    why = next((text for text, f in WRONG_LIMITS.items()
                if all(close(g, f(a, b), 1e-6) for g, (a, b) in zip(got, FANS))),
               f"xavier_limit(784, 700) = {got[0]:.5f} is not the Xavier uniform limit.")
    fb.wrong(f"xavier_limit: {why}", answer="A uniform distribution on [-limit, limit] has variance limit**2 / 3; "
                                         "Xavier wants 2 / (fan_in + fan_out), so limit = sqrt(6 / (fan_in + fan_out)).")


class XavierInit(Exercise):
    title = "Xavier initialisation of a DVariable"
    points = 3
    hints = (
        "Xavier (Glorot) uniform samples U(-limit, limit); the limit depends on both fans.",
        "limit = sqrt(6 / (fan_in + fan_out)). Create the value on the mesh with dtensor.call_with_layout (wrap the "
        "random op in tf.function) and make it a dtensor.DVariable.",
    )

    def grade(self, xavier_limit, init_weight):
        import numpy as np
        import tensorflow as tf
        from tensorflow.experimental import dtensor

        fb = Feedback()
        _grade_limit(fb, xavier_limit)
        if not callable(init_weight):
            fb.wrong("init_weight: not answered yet." if init_weight is None else
                     "init_weight should be a function (shape, layout, seed) -> DVariable.")
            return fb
        layout = dtensor.Layout([UNSHARDED, "model"], checker_mesh())
        shape, limit = [64, 32], math.sqrt(6 / (64 + 32))
        try:
            w1, w2 = init_weight(shape, layout, SEED), init_weight(shape, layout, SEED)
            w3 = init_weight(shape, layout, OTHER_SEED)
        except Exception as err:
            message = short_error(err)
            if "matching rank" in message or "StatelessRandomGetKeyCounter" in message:
                fb.wrong(f"init_weight raised {message}. In eager mode call_with_layout applies the layout to every "
                         f"op of the random function, including its seed handling.",
                         answer="Wrap the random op in tf.function, e.g. dtensor.call_with_layout("
                                "tf.function(tf.random.stateless_uniform), layout, shape=..., seed=..., ...).")
            else:
                fb.wrong(f"init_weight raised {message}")
            return fb
        if not isinstance(w1, tf.Variable):
            fb.wrong(f"init_weight should return a variable, so that the optimizer can update it, not a "
                     f"{type(w1).__name__}.", answer="Wrap the value in dtensor.DVariable(...).")
            return fb
        w_layout = layout_of(w1.read_value())
        if w_layout is None:
            fb.wrong("init_weight returned an ordinary tf.Variable on one device, not a variable on the mesh.",
                     answer="Create the initial value on the mesh with dtensor.call_with_layout(..., layout, ...) and "
                            "wrap it in dtensor.DVariable.")
            return fb
        if specs(w_layout) != specs(layout):
            fb.wrong(f"init_weight ignored the layout it was given: the weight has {specs(w_layout)}, expected "
                     f"{specs(layout)}.", answer="Pass `layout` to call_with_layout.")
            return fb
        values = global_numpy(w1)
        if tuple(values.shape) != tuple(shape):
            fb.wrong(f"init_weight returned shape {list(values.shape)} for shape {shape}.")
        elif np.abs(values).max() > limit * (1 + 1e-5):
            fb.wrong(f"init_weight: values up to {np.abs(values).max():.3f} exceed the Xavier limit {limit:.3f} for "
                     f"shape {shape}.", answer="Sample uniformly in [-limit, limit] with limit = "
                                               "xavier_limit(fan_in, fan_out).")
        elif values.min() >= 0:
            fb.wrong("init_weight: all values are >= 0; the range is symmetric.", answer="minval=-limit.")
        elif np.abs(values).max() < 0.8 * limit:
            fb.wrong(f"init_weight: the values only reach {np.abs(values).max():.3f}, the Xavier limit for shape "
                     f"{shape} is {limit:.3f}. Use the whole range [-limit, limit].")
        elif _cdf_distance_to_uniform(values, limit) > MAX_CDF_DISTANCE:
            middle = float(np.mean(np.abs(values) < limit / 2))
            fb.wrong(f"init_weight: the values stay within [-{limit:.3f}, {limit:.3f}] but are not spread uniformly: "
                     f"{middle:.0%} of them lie in the middle half [-limit/2, limit/2], where a uniform distribution "
                     f"puts 50%. Xavier UNIFORM draws every value in the range with the same probability.",
                     answer="Use tf.random.stateless_uniform(shape, seed, minval=-limit, maxval=limit).")
        elif not np.array_equal(values, global_numpy(w2)):
            fb.wrong("init_weight: the same seed gave different weights, so two clients would start from different "
                     "models.", answer="Use a stateless random op (tf.random.stateless_uniform) with seed=seed.")
        elif np.array_equal(values, global_numpy(w3)):
            fb.wrong(f"init_weight: the seeds {SEED} and {OTHER_SEED} gave identical weights: your function ignores "
                     f"its `seed` argument, so every layer would start from the same numbers.",
                     answer="Pass seed=seed to the stateless random op.")
        else:
            fb.right(f"init_weight: a DVariable with layout {specs(w_layout)}, uniform in [-{limit:.3f}, {limit:.3f}], "
                     f"reproducible from its seed", points=2)
        return fb


SHAPES = [(784, 700), (700, 500), (500, 10)]
BUGGY_SHAPES = [(784, 700), (700, 10), (10, 10)]


class HiddenSizeBug(Exercise):
    title = "Fix the hidden-size bug"
    points = 2
    hints = (
        "Print the shapes of model.trainable_variables. Are they 784 -> 700 -> 500 -> 10?",
        "Which line changes hidden_layer_2_size after it was set to 500?",
    )

    def grade(self, model):
        fb = Feedback()
        if isinstance(model, type):
            fb.wrong("Pass an instance of your fixed model, e.g. MLP(mesh), not the class.")
            return fb
        variables = getattr(model, "trainable_variables", None)
        if variables is None:
            fb.wrong(f"Pass the model (a tf.Module), not a {type(model).__name__}.")
            return fb
        shapes = [tuple(v.shape) for v in variables if len(v.shape) == 2]
        if sorted(shapes) == sorted(SHAPES):
            fb.right(f"the kernels are {SHAPES}: 784 -> 700 -> 500 -> 10.", points=2)
        elif sorted(shapes) == sorted(BUGGY_SHAPES):
            fb.wrong(f"the kernels are still {BUGGY_SHAPES}: the network is 784 -> 700 -> 10 -> 10. Find the line "
                     f"that overwrites the second hidden size with the number of classes.")
        else:
            fb.wrong(f"the kernels are {sorted(shapes)}; expected {SHAPES} (784 -> 700 -> 500 -> 10).")
        return fb


def _checker_weight(shape=(8, 4)):
    import numpy as np
    from tensorflow.experimental import dtensor

    layout = dtensor.Layout([UNSHARDED, "model"], checker_mesh())
    value = np.arange(np.prod(shape), dtype="float32").reshape(shape) / 10.0
    return dtensor.DVariable(on_mesh(value, layout)), layout


class SlotLayouts(Exercise):
    title = "Adam's slots in the weights' layouts"
    points = 2
    hints = (
        "A slot is updated elementwise together with its weight. How should it be split?",
        "Exactly like the weight: dtensor.fetch_layout(variable), and zeros made on the mesh with "
        "dtensor.call_with_layout.",
    )

    def grade(self, make_slots):
        import numpy as np
        import tensorflow as tf

        fb = Feedback()
        if not callable(make_slots):
            fb.wrong("make_slots should be a function variable -> (m, v).")
            return fb
        weight, layout = _checker_weight()
        try:
            slots = make_slots(weight)
        except Exception as err:
            fb.wrong(f"make_slots raised {short_error(err)}")
            return fb
        if not isinstance(slots, (tuple, list)) or len(slots) != 2:
            fb.wrong(f"make_slots should return a pair (m, v), got {type(slots).__name__}.")
            return fb
        m, v = slots
        if m is v:
            fb.wrong("m and v are the same object: Adam keeps two separate moments, so create two variables.")
            return fb
        for name, slot in (("m", m), ("v", v)):
            if not isinstance(slot, tf.Variable):
                fb.wrong(f"{name} is a {type(slot).__name__}, not a variable; slots are updated in place with "
                         f"assign.", answer="Wrap the zeros in dtensor.DVariable.")
                continue
            slot_layout = layout_of(slot.read_value())
            if slot_layout is None:
                fb.wrong(f"{name} is an ordinary tf.Variable on one device, not on the mesh.",
                         answer="Create its zeros with dtensor.call_with_layout(tf.zeros, "
                                "dtensor.fetch_layout(variable), shape=...).")
            elif tuple(slot.shape) != tuple(weight.shape):
                fb.wrong(f"{name} has shape {tuple(slot.shape)}; a slot has the weight's shape {tuple(weight.shape)}.")
            elif slot_layout != layout:
                slot_specs = specs(slot_layout)
                why = ("it is replicated: every device would hold the whole moment, although it only ever updates "
                       "its own shard of the weight" if all(s == UNSHARDED for s in slot_specs) else
                       f"it has {slot_specs}, the weight has another layout")
                fb.wrong(f"{name}: {why}.", answer="Give the slot the weight's layout, dtensor.fetch_layout(variable).")
            elif np.any(global_numpy(slot) != 0):
                fb.wrong(f"{name} should start at zero.")
            else:
                fb.right(f"{name}: zeros in the weight's layout {specs(slot_layout)}")
        return fb


def reference_adam(w0, grads, lr, frozen_step=None, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
    """The weights after each step of Keras' Adam; ``frozen_step`` keeps t constant (the bug)."""
    import numpy as np

    w, m, v, history = w0.astype("float64"), np.zeros_like(w0, "float64"), np.zeros_like(w0, "float64"), []
    for i, g in enumerate(grads, start=1):
        t = frozen_step or i
        m = m + (g - m) * (1 - beta_1)
        v = v + (g * g - v) * (1 - beta_2)
        w = w - lr * math.sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t) * m / (np.sqrt(v) + epsilon)
        history.append(w.copy())
    return history


def _host_counters(optimizer):
    """The optimizer's scalar variables that live on one device instead of on the mesh."""
    import tensorflow as tf

    if isinstance(optimizer, tf.Module):
        variables = optimizer.variables
    else:
        variables = [v for v in vars(optimizer).values() if isinstance(v, tf.Variable)]
    return [v for v in variables if v.shape.rank == 0 and layout_of(v.read_value()) is None]


class FrozenStep(Exercise):
    title = "Fix the frozen step counter"
    points = 3
    hints = (
        "Which value does `self.step` have inside the graph of a tf.function? Python code runs only while the "
        "function is traced.",
        "Keep the step in a variable that belongs to the mesh (a replicated scalar DVariable, like the chapter's "
        "mesh_scalar), add 1 to it with assign_add inside apply, and compute the bias correction from its value "
        "with TensorFlow ops.",
    )

    def grade(self, adam_class):
        import numpy as np
        import tensorflow as tf

        fb = Feedback()
        if not callable(adam_class):
            fb.wrong("Give your fixed optimizer class (the class itself, e.g. FixedAdam).")
            return fb
        weight, layout = _checker_weight()
        w0 = global_numpy(weight)
        rng = np.random.default_rng(3)
        grads = [rng.normal(size=w0.shape).astype("float32") for _ in range(3)]
        lr = 0.1
        try:
            optimizer = adam_class([weight], learning_rate=lr)
            # Inside tf.function, as in a training step: an eager apply would hide a Python counter.
            update = tf.function(lambda gradients: optimizer.apply(gradients))
            history = []
            for g in grads:
                update([on_mesh(g, layout)])
                history.append(global_numpy(weight))
        except Exception as err:
            message = short_error(err)
            if "NoneType" in message and "callable" in message:
                fb.wrong(f"Your optimizer raised {message}. It calls make_slots from exercise 3: solve that first.")
            else:
                fb.wrong(f"Your optimizer raised {message}. It is called as adam_class([weight], learning_rate=0.1), "
                         f"then .apply([gradient]) three times inside a tf.function, as a training step would.")
            return fb
        ok = [np.allclose(h, r, rtol=1e-4, atol=1e-6) for h, r in zip(history, reference_adam(w0, grads, lr))]
        if all(ok):
            fb.right("three steps inside tf.function match Keras' Adam (bias correction with t = 1, 2, 3).", points=3)
            return fb
        for counter in _host_counters(optimizer):
            value = float(global_numpy(counter))
            if value > len(grads):
                fb.wrong(f"Your step counter is an ordinary tf.Variable: after {len(grads)} calls it holds {value:g}, "
                         f"not {len(grads)}. It lives on one device, outside the mesh, and every one of the "
                         f"{layout.mesh.num_local_devices()} devices that run apply adds its own 1, without "
                         f"coordination.",
                         answer="Make it a DVariable with a replicated scalar layout on the weights' mesh, e.g. "
                                "mesh_scalar(tf.float32, mesh): one variable of the mesh, incremented once per call.")
                return fb
        for frozen in (1, 2):
            wrong = reference_adam(w0, grads, lr, frozen_step=frozen)
            if all(np.allclose(h, r, rtol=1e-4, atol=1e-6) for h, r in zip(history, wrong)):
                eager = "" if hasattr(getattr(type(optimizer), "apply", None), "get_concrete_function") else (
                    " Removing @tf.function only hides this: a training step runs apply inside a tf.function, "
                    "and so does this checker.")
                fb.wrong(f"Your Adam uses t = {frozen} at every step: the step counter is frozen. A Python number "
                         f"changed inside a tf.function changes only while the function is TRACED; later calls replay "
                         f"the graph with the value baked in.{eager}",
                         answer="Keep the step in a variable on the mesh (self.step = mesh_scalar(tf.float32, mesh); "
                                "self.step.assign_add(1.0)) and compute the bias correction from it with TensorFlow "
                                "ops.")
                return fb
        if ok[0]:
            fb.right("step 1 matches Keras' Adam", points=1)
            fb.wrong("steps 2 and 3 do not; check how the step count t and the moments m and v carry over from one "
                     "step to the next.")
        else:
            fb.wrong("the first step already differs from Keras' Adam (lr=0.1).",
                     answer="Check the update m += (g - m) * (1 - beta_1), v += (g*g - v) * (1 - beta_2), "
                            "w -= lr * sqrt(1 - beta_2**t) / (1 - beta_1**t) * m / (sqrt(v) + epsilon).")
        return fb


BROKEN_RATE = 0.1  # the exercise's LEARNING_RATE
BROKEN_SPECS = {"w1": [UNSHARDED, "model"], "b1": ["model"], "w2": ["model", UNSHARDED], "b2": [UNSHARDED]}


def _broken_case(seed, batch):
    """Starting values and a batch (NumPy) for a 12 -> 8 -> 10 classifier: other sizes than the notebook's."""
    import numpy as np

    rng = np.random.default_rng(seed)
    values = {"w1": rng.normal(0, 0.3, (12, 8)), "b1": rng.normal(0, 0.1, 8),
              "w2": rng.normal(0, 0.3, (8, 10)), "b2": rng.normal(0, 0.1, 10)}
    values = {name: value.astype("float32") for name, value in values.items()}
    return values, rng.normal(size=(batch, 12)).astype("float32"), rng.integers(0, 10, batch)


def _sgd_change(values, images, labels, bias_scale=1.0):
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
    import numpy as np

    return sorted(name for name in want if not np.allclose(got[name], want[name], rtol=1e-3, atol=1e-6))


def _grade_reference(fb, reference_step):
    """Grade my_reference (2 points); return whether it is right."""
    import numpy as np
    from tensorflow.experimental import dtensor

    if not callable(reference_step):
        fb.wrong("my_reference: not answered yet." if reference_step is None else
                 "my_reference should be a function (values, images, labels) -> {name: expected change}.")
        return False
    values, images, labels = _broken_case(seed=5, batch=16)
    mesh = checker_mesh()
    try:
        got = reference_step({n: v.copy() for n, v in values.items()},
                             on_mesh(images, dtensor.Layout(["batch", UNSHARDED], mesh)),
                             on_mesh(labels, dtensor.Layout(["batch"], mesh)))
        got = {name: np.asarray(got[name], dtype="float64") for name in values}
    except Exception as err:
        message = short_error(err)
        if "expecting a DTensor" in message or "copy_to_mesh" in message:
            fb.wrong("my_reference raised an error of DTensor's: it ran a DTensor computation one operation at a "
                     "time, which DTensor cannot do for every gradient. And a reference that runs broken_step (or "
                     "its output_layer) would repeat its bug anyway. Compute on one device, from value_of(images), "
                     "value_of(labels) and the NumPy values.")
        else:
            fb.wrong(f"my_reference raised {message}. check_step calls it as my_reference(values, images, labels): "
                     f"values is a dict of NumPy arrays, images and labels are the step's DTensors (value_of(images) "
                     f"gives the whole batch as NumPy); it returns each variable's expected change.")
        return False
    want = _sgd_change(values, images, labels)
    wrong = _differs(got, want)
    ratios = {name: float(np.median(got[name][np.abs(want[name]) > 1e-9] / want[name][np.abs(want[name]) > 1e-9]))
              for name in want}
    if not wrong:
        fb.right("my_reference: it agrees with an independent SGD step on the checker's own model "
                 "(12 -> 8 -> 10, a batch of 16)", points=2)
        return True
    if wrong == ["b2"] and not _differs(got, _sgd_change(values, images, labels, bias_scale=1 / len(labels))):
        fb.wrong("my_reference agrees with broken_step where broken_step is wrong: it shares broken_step's bug, so "
                 "the check cannot see it. A reference must not reuse the code it checks.",
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
               "a fixed batch size in the code? The checker's batch has 16 examples: take the mean over the batch "
               "you are given")
        fb.wrong(f"my_reference's changes are all {factor:g} x the right ones ({why}).")
    else:
        fb.wrong(f"my_reference's expected changes of {', '.join(wrong)} are not one SGD step "
                 f"(learning rate {BROKEN_RATE}) of the mean cross-entropy on the whole batch.")
    return False


def _grade_broken_name(fb, broken_variable, reference_ok):
    import tensorflow as tf

    if isinstance(broken_variable, tf.Variable):
        fb.wrong("broken_variable: give the variable's NAME (a string such as the ones check_step prints), not the "
                 "variable itself.")
        return
    names = broken_variable if isinstance(broken_variable, (list, tuple, set)) else [broken_variable]
    names = [str(n).strip().strip("'\"").split("[")[-1].strip("]'\"").lower() for n in names if n is not None]
    unsure = "" if reference_ok else " (your reference is not right yet, so check_step's WRONG lines cannot be trusted)"
    if not names:
        fb.wrong("broken_variable: not answered yet.")
    elif names == ["b2"]:
        fb.right("broken_variable: b2, the output layer's bias")
    elif len(names) > 1:
        fb.wrong(f"broken_variable: {sorted(names)}; one variable is wrong. Run check_step with your reference and "
                 f"read which line says WRONG{unsure}.")
    else:
        fb.wrong(f"broken_variable: {names[0]!r} changes as a right SGD step changes it. Run check_step with your "
                 f"reference and read which line says WRONG{unsure}.")


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


def _grade_fixed_step(fb, fixed_step):
    if not callable(fixed_step):
        fb.wrong("fixed_step: not answered yet." if fixed_step is None else
                 "fixed_step should be a function (params, images, labels) that updates params in place.")
        return
    results = {}
    for batch in (16, 32):  # two batch sizes: a fix by a constant factor only fits one of them
        values, images, labels = _broken_case(seed=batch, batch=batch)
        try:
            got = _run_fixed_step(fixed_step, values, images, labels)
        except Exception as err:
            message = short_error(err)
            if "expecting a DTensor" in message or "copy_to_mesh" in message:
                fb.wrong("fixed_step raised an error of DTensor's: run one operation at a time, DTensor cannot "
                         "compute every gradient. Make it a tf.function, as broken_step is.")
            else:
                fb.wrong(f"fixed_step raised {message}. It is called as fixed_step(params, images, labels) with a "
                         f"dict of DVariables (w1, b1, w2, b2) on the mesh and a batch-sharded batch of {batch}.")
            return
        results[batch] = (_differs(got, _sgd_change(values, images, labels)),
                          _differs(got, _sgd_change(values, images, labels, bias_scale=1 / batch)),
                          got["b2"], _sgd_change(values, images, labels)["b2"])
    wrong = sorted(set(results[16][0]) | set(results[32][0]))
    if not wrong:
        fb.right("fixed_step: one right SGD step of every variable, for batches of 16 and 32")
        return
    if not results[16][1] and not results[32][1]:
        fb.wrong("fixed_step still makes broken_step's mistake.",
                 answer="It updates b2 with its gradient divided by the batch size once more.")
        return
    import numpy as np

    ratios = [float(np.median(got / want)) for _, _, got, want in results.values() if np.all(np.abs(want) > 1e-9)]
    if wrong == ["b2"] and len(ratios) == 2 and abs(ratios[0] - ratios[1]) > 0.1:
        fb.wrong(f"fixed_step gets b2 right for one batch size only (b2's change is {ratios[0]:.3g}x the right one "
                 f"with 16 examples, {ratios[1]:.3g}x with 32): scaling by a number fixes one batch size. Fix the "
                 f"gradient where it is computed.",
                 answer="In output_layer's backward, the bias's gradient is the SUM of d_logits over the batch "
                        "(tf.reduce_sum(d_logits, axis=0)): d_logits already carries the loss's 1/N.")
    else:
        fb.wrong(f"fixed_step: {', '.join(wrong)} do{'es' if len(wrong) == 1 else ''} not change as one SGD step "
                 f"(learning rate {BROKEN_RATE}) should.")


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

    def grade(self, my_reference, broken_variable, fixed_step):
        fb = Feedback()
        reference_ok = _grade_reference(fb, my_reference)
        _grade_broken_name(fb, broken_variable, reference_ok)
        _grade_fixed_step(fb, fixed_step)
        return fb


CHAPTER = chapter(6, "Core-API MLP with a hand-written Adam",
                  [XavierInit, HiddenSizeBug, SlotLayouts, FrozenStep, BrokenVariable])
