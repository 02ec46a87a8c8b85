"""Chapter 6, exercise 4 (the hand-written Adam's step counter): its checker and hints.

``collect`` runs the learner's optimizer on a weight and gradients drawn from the check's seed and sends the weight
after each step; ``judge`` draws the same inputs again and computes the right weights itself (``reference_adam``,
which the sandbox's copy of this module does not have).
"""
import math

import numpy as np

from .answers import global_numpy, layout_of, on_mesh
from .ch6_answers import ERROR, MISSING, NOT_CALLABLE, _checker_weight, _not_callable, _raised, _same_values
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


def _scalar_variables(optimizer):
    """The optimizer's scalar variables: those a tf.Module tracks, else the tf.Variables among its attributes."""
    import tensorflow as tf

    if isinstance(optimizer, tf.Module):
        variables = optimizer.variables
    else:
        variables = [v for v in vars(optimizer).values() if isinstance(v, tf.Variable)]
    return [v for v in variables if v.shape.rank == 0]


def _host_counters(optimizer):
    """The optimizer's scalar variables that live on one device instead of on the mesh."""
    return [v for v in _scalar_variables(optimizer) if layout_of(v.read_value()) is None]


def _mesh_counters(optimizer):
    """The values of the optimizer's scalar variables that live on the mesh (a step counter, usually)."""
    return [float(global_numpy(v)) for v in _scalar_variables(optimizer) if layout_of(v.read_value()) is not None]


def _adam_case(seed):
    """The starting weight and the gradients of the three steps of a q4 check (NumPy, float32)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    w0 = rng.normal(size=ADAM_SHAPE).astype("float32")
    return w0, [rng.normal(size=ADAM_SHAPE).astype("float32") for _ in range(ADAM_STEPS)]


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
