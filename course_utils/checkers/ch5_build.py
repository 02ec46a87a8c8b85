"""Chapter 5 · the build-and-measure exercise: a model built on a mesh within a memory budget (exercise 6).

``collect`` calls the learner's ``build_on_mesh`` on the checker's cases (``ch5_cases.BUILD_CASES``; weights and
batches drawn from the check's seed), steps the result and measures it; ``judge`` compares what crossed with one
device's step in NumPy (``reference_mlp``, ``reference_adam_first_step``) for the same seed.
"""
import math
import re

from .answers import UNSHARDED, as_float, close, mesh_dims, quiet_tensorflow, short_error, specs
from ..meshes import mesh_text
from .core import Exercise, Feedback
from .ch5_budget import BUDGET_PLACEMENTS, placement_bytes_sent
from .ch5_cases import (ADAM_BETAS, ADAM_EPSILON, BUILD_CASES, BUILD_NAMES, BUILD_RATE, COMBINING, build_case,
                        collect_build_case)

REDUCTIONS = ("all-reduce", "merged all-reduce", "reduce-scatter")
PLAIN_OPTIMIZER = ("the optimizer is not on a mesh: in a DTensor program its two slots per weight and its step "
                   "counter must live on the mesh too, in the weights' layouts (the chapter's DTensor optimizers).")


def _reference_dtensor_adam():
    """The optimizer 5.6 needs, in words (given away only after a wrong try)."""
    return "Use tf.keras.dtensor.experimental.optimizers.Adam(LEARNING_RATE, mesh=mesh)."


class _Stop(Exception):
    """A case cannot go on: the message says why, ``answer`` what gives the fix away."""

    def __init__(self, message, answer=""):
        super().__init__(message)
        self.message, self.answer = message, answer


def reference_mlp(weights, images, labels):
    """One device, float64: the per-example losses and each weight's gradient of their mean."""
    import numpy as np

    w = {name: value.astype("float64") for name, value in weights.items()}
    x = images.reshape(len(images), -1).astype("float64")
    pre = x @ w["d1.kernel"] + w["d1.bias"]
    hidden = np.maximum(pre, 0)
    logits = hidden @ w["d2.kernel"] + w["d2.bias"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(labels))
    d_logits = np.exp(log_p)
    d_logits[rows, labels] -= 1
    d_logits /= len(labels)
    d_pre = (d_logits @ w["d2.kernel"].T) * (pre > 0)
    gradients = {"d1.kernel": x.T @ d_pre, "d1.bias": d_pre.sum(axis=0),
                 "d2.kernel": hidden.T @ d_logits, "d2.bias": d_logits.sum(axis=0)}
    return -log_p[rows, labels], gradients


def reference_adam_first_step(weights, gradients, rate=BUILD_RATE):
    """{name: (weight, m, v)} after tf_keras' Adam's first step from zero slots."""
    import numpy as np

    beta_1, beta_2 = ADAM_BETAS
    alpha = rate * math.sqrt(1 - beta_2) / (1 - beta_1)
    after = {}
    for name, g in gradients.items():
        m, v = (1 - beta_1) * g, (1 - beta_2) * g * g
        after[name] = (weights[name] - alpha * m / (np.sqrt(v) + ADAM_EPSILON), m, v)
    return after


def _judge_placements_that_fit(case, seed=0):
    """The placements of exercise 5's table that ``case``'s mesh divides and whose weights, Adam's two slots and its
    8-byte counter fit the case's budget (the part of a hint that gives the answer away)."""
    weights, _ = build_case(case, seed)
    sizes = dict(zip(("batch", "model"), case["mesh"]))
    fitting = []
    for name, spec_lists in BUDGET_PLACEMENTS.items():
        pairs = [(weights[weight].shape, spec) for weight, spec in zip(BUILD_NAMES, spec_lists)]
        if any(length % sizes[axis] for shape, spec in pairs for length, axis in zip(shape, spec) if axis != UNSHARDED):
            continue
        held = sum(4 * math.prod(shape) // math.prod(sizes.get(axis, 1) for axis in spec) for shape, spec in pairs)
        if 3 * held + 8 <= case["budget"]:
            fitting.append(name)
    return fitting


def _judge_bytes_sent(spec_lists, case):
    """What one device sends per step with ``spec_lists`` in ``case``, by the chapter's cost model on these CPUs
    (exercise 5's first column), or None for specs it cannot price."""
    try:
        return placement_bytes_sent(spec_lists, dict(zip(("batch", "model"), case["mesh"])), case["hidden"],
                                    case["batch"])
    except (ValueError, TypeError, KeyError, IndexError):
        return None


def _judge_cheapest(case):
    """Of exercise 5's placements that fit ``case``, the one that sends the fewest bytes per step, and what it sends."""
    sent = {name: _judge_bytes_sent(BUDGET_PLACEMENTS[name], case) for name in _judge_placements_that_fit(case)}
    cheapest = min(sent, key=sent.get)
    return cheapest, sent[cheapest]


def _judge_fitting_text(case):
    fitting = _judge_placements_that_fit(case)
    text = (f"On {_mesh_text(case)} with this budget, of exercise 5's placements only "
            f"{' and '.join(fitting)} {'fits' if len(fitting) == 1 else 'fit'}, with every sharded axis divisible.")
    if len(fitting) > 1:
        cheapest, sent = _judge_cheapest(case)
        text += f" Of them, {cheapest} sends the fewest bytes per step on these CPUs ({sent:,} B per device)."
    return text


def _specs_text(spec_list):
    return "[" + ", ".join("U" if s == UNSHARDED else repr(s) for s in spec_list) + "]"


def _mesh_text(case):
    return mesh_text(list(zip(("batch", "model"), case["mesh"])))


def _case_text(case):
    return f"{_mesh_text(case)}, width {case['hidden']}, budget {case['budget']:,} B"


def _judge_why_it_raised(message, case, stage):
    """An aimed hint for an exception from the learner's code (``message``: its ``short_error``): (message, answer)."""
    message = str(message)[:400]
    where = _mesh_text(case)
    if "global seed" in message:
        return (f"{stage} raised {message} DTensor layers refuse to initialise without a global seed (exercise 1), "
                f"even when their values are replaced afterwards.",
                "Call tf.keras.utils.set_random_seed(0) before building the layers.")
    if "divisible" in message or "does not divide" in message:
        sizes = (re.search(r"dimension size=(\d+).*dimension=(\d+)", message)
                 or re.search(r"has size (\d+), which mesh dimension '\w+' \(size (\d+)\)", message))
        what = f"an axis of size {sizes[1]} cannot be split into {sizes[2]} equal blocks" if sizes else \
            "a sharded axis does not divide evenly"
        return (f"{stage} failed: {what} ({message.split(':')[0]} from DTensor). A layout splits a sharded axis into "
                f"equal blocks, one per device of its mesh axis, so the axis's size must divide by that mesh axis's "
                f"size. Choose the layouts from the mesh and the weights you are given: here 'batch' has "
                f"{case['mesh'][0]} devices and 'model' {case['mesh'][1]}; d1.kernel has 784 rows and "
                f"{case['hidden']} columns, d2 10 outputs. A placement that one mesh divides, another may not.",
                _judge_fitting_text(case))
    shown = message.split(" Input tensor is:")[0]  # not the DTensor's dump
    if "got a regular tensor" in message and ("AssignVariableOp" in message or stage == "build_on_mesh"):
        return (f"{stage} raised {shown} A DVariable lives on the mesh, and assign() takes a value on the mesh too: "
                f"a NumPy array (a regular tensor) is not copied onto it for you.",
                "Pack each value into its variable's layout first: variable.assign(pack_batch(value, "
                "variable.layout)), or model.set_weights([...]).")
    if "got a regular tensor" in message or "expecting a DTensor" in message:
        return (f"{stage} raised {shown} The training step received the NumPy batch as it is; on a mesh its inputs "
                f"must be DTensors, split over 'batch' (exercise 4).",
                "In step: train_step(pack_batch(images, dtensor.Layout.batch_sharded(mesh, 'batch', rank=4)), "
                "pack_batch(labels, dtensor.Layout.batch_sharded(mesh, 'batch', rank=1))).")
    keras_loop = ("Keras' train_on_batch and fit feed the model through a tf.data iterator, whose batches carry no "
                  "layouts (the chapter's section 'And fit?'): write step as the chapter's training step instead, a "
                  "tf.function that runs the model under a GradientTape and calls optimizer.apply_gradients, on a "
                  "batch packed over 'batch'.")
    keras_answer = ("step(images, labels) returns train_step(pack_batch(images, image_layout), pack_batch(labels, "
                    "label_layout)), with train_step the chapter's @tf.function step.")
    if "_element_layouts" in message or "IteratorGetNext" in message:
        return f"{stage} raised {shown.split(' tensorflow/dtensor')[0]} {keras_loop}", keras_answer
    if "non-single-device and non-replicated" in message:
        return (f"{stage} raised {shown} Something copied a sharded DTensor as if it were one ordinary tensor: "
                f".numpy() or float() of a sharded value does, and so do Keras' train_on_batch and fit, which turn "
                f"their inputs into a dataset. Write step as the chapter's training step: a tf.function that runs "
                f"the model under a GradientTape and calls optimizer.apply_gradients on the packed batch, and "
                f"returns the loss (one number, replicated).", keras_answer)
    if "same mesh" in message or "mesh propagation" in message:
        return (f"{stage} raised {message} Two meshes met in one step: build the model, the optimizer and the "
                f"batch on the mesh passed to build_on_mesh ({where} here), not on the notebook's `mesh`.", "")
    if "rank" in message:
        return (f"{stage} raised {message} Images have rank 4 and labels rank 1: each needs a batch-sharded layout "
                f"of its own rank (exercise 4).", "")
    return (f"{stage} raised {message} The checker calls build_on_mesh(mesh, weights, budget) with a mesh {where}, "
            f"weights of width {case['hidden']} and a budget of its own, then step(images, labels) with NumPy arrays "
            f"(images {case['batch']} x 28 x 28 x 1 float32, labels int64).", "")


def _close_values(got, want):
    import numpy as np

    scale = float(np.abs(want).max(initial=0.0))
    return got.shape == want.shape and np.allclose(got, want, rtol=1e-3, atol=1e-3 * scale + 1e-9)


class BuildOnMesh(Exercise):
    title = "Build it on the mesh, step it, measure it"
    points = 6
    hints = (
        "Which weight holds nearly all the bytes, and how many bytes does Adam add per weight? Choose the layouts "
        "from the mesh and the weights you are given (their sizes), not from the notebook's; and start the model "
        "from `weights`.",
        "Estimate each placement of exercise 5's table as you did there, now for Adam (4 bytes per number, divided "
        "by the sizes of the mesh axes that split it, times 3 for Adam's two slots, plus its 8-byte counter; "
        "mesh.dim_size('model') gives a size); of those that fit the budget and whose sharded axes divide, take "
        "the one that sends the fewest bytes per step on these CPUs, as in exercise 5 (placement_bytes_sent in "
        "course_utils.checkers.ch5_budget prices a placement on any mesh, with matmul_cost for each product). Build the Dense layers with kernel_layout and "
        "bias_layout, copy each weight in with variable.assign(pack_batch(value, variable.layout)), make the DTensor "
        "Adam with mesh=mesh, and let step pack the batch split over 'batch' and run a tf.function training step.",
        "No one placement is right in every case of the checker: on some meshes 784 rows do not divide by the size "
        "of 'batch', or the width does not divide by the size of 'model', and a roomy budget may need no split at "
        "all. Compute, for each placement of exercise 5's table, whether every axis it shards divides, what one "
        "device holds and what it sends per step (placement_bytes_sent in course_utils.checkers.ch5_budget, or "
        "matmul_cost); of those that fit, take the one that sends least. In step: "
        "train_step(pack_batch(images, dtensor.Layout.batch_sharded(mesh, 'batch', rank=4)), "
        "pack_batch(labels, dtensor.Layout.batch_sharded(mesh, 'batch', rank=1))).",
    )

    def collect(self, build_on_mesh, seed=0):
        """Run ``build_on_mesh`` on the checker's cases (weights and batches drawn from ``seed``) and measure it.

        Crosses: ``{"callable": False}``, or ``{"callable": True, "combining": the kernel's
        DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION (None when unset), "cases": [...]}`` with one dict per
        case, in order, up to the first case in which the learner's code raised (see
        :func:`.ch5_cases.collect_build_case`).
        """
        import os

        if not callable(build_on_mesh):
            return {"callable": False}
        cases = []
        with quiet_tensorflow():
            for case in BUILD_CASES:
                cases.append(collect_build_case(build_on_mesh, case, seed))
                if any(key in cases[-1] for key in ("build_error", "step_error", "second_error")) \
                        or not cases[-1]["triple"]:
                    break
        return {"callable": True, "combining": os.environ.get(COMBINING), "cases": cases}

    @staticmethod
    def _judge_case(given, case, seed):
        """What one case found, from what collect sent and the case's inputs for ``seed`` (raises _Stop where the
        original run could not go on, in the order of the checks)."""
        import numpy as np
        from tensorflow.experimental import dtensor

        mesh = given["mesh"]
        if not isinstance(mesh, dtensor.Mesh) or mesh_dims(mesh) != list(zip(("batch", "model"), case["mesh"])):
            raise ValueError("the data names another mesh than the case's")
        weights, ((images, labels), _) = build_case(case, seed)
        if "build_error" in given:
            raise _Stop(*_judge_why_it_raised(given["build_error"], case, "build_on_mesh"))
        if not given["triple"]:
            raise _Stop("build_on_mesh should return a triple (model, optimizer, step), step a function "
                        "step(images, labels) that runs one training step and returns its loss.")
        shapes = [tuple(shape) for shape in given["shapes"]]
        expected = [tuple(weights[name].shape) for name in BUILD_NAMES]
        if shapes != expected:
            raise _Stop(f"the model's trainable weights have shapes {shapes}; for weights of width {case['hidden']} "
                        f"they are {expected} (d1.kernel, d1.bias, d2.kernel, d2.bias). Take the width from the "
                        f"weights you are given: Flatten, Dense(width, relu), Dense(10).")
        layouts = list(given["layouts"])
        if len(layouts) != len(shapes) or not all(layout is None or isinstance(layout, dtensor.Layout)
                                                   for layout in layouts):
            raise ValueError("one layout per variable expected")
        if any(layout is None for layout in layouts):
            plain = [name for name, layout in zip(BUILD_NAMES, layouts) if layout is None]
            raise _Stop(f"{', '.join(plain)} {'is' if len(plain) == 1 else 'are'} not on a mesh: give every Dense "
                        f"layer its kernel_layout and bias_layout (or build the model under a LayoutMap's scope).")
        if any(layout.mesh != mesh for layout in layouts):
            raise _Stop(f"the model's weights live on a mesh {mesh_text(mesh_dims(layouts[0].mesh))}, not on the mesh "
                        f"passed in ({mesh_text(mesh_dims(mesh))}): build everything on build_on_mesh's `mesh` "
                        f"argument, not on the notebook's.")
        optimizer_mesh = given["optimizer_mesh"]
        if not isinstance(optimizer_mesh, dtensor.Mesh):
            raise _Stop(PLAIN_OPTIMIZER, _reference_dtensor_adam())
        if optimizer_mesh != mesh:
            raise _Stop(f"the optimizer lives on a mesh {mesh_text(mesh_dims(optimizer_mesh))}, not on the mesh passed "
                        f"in ({mesh_text(mesh_dims(mesh))}): build everything on build_on_mesh's `mesh` argument, not "
                        f"on the notebook's.")
        if "step_error" in given:
            raise _Stop(*_judge_why_it_raised(given["step_error"], case, "step(images, labels)"))
        if given["loss"] is None:
            raise _Stop("step(images, labels) returned None: return the step's loss.")
        try:
            loss = as_float(given["loss"])
        except Exception as err:
            raise _Stop(f"step's result is not one number ({short_error(err)}): return the loss of the step, the mean "
                        f"over the whole batch.") from None
        if "bytes_error" in given:
            raise _Stop(f"{PLAIN_OPTIMIZER} ({str(given['bytes_error'])[:300]})", _reference_dtensor_adam())
        spec_lists = [specs(layout) for layout in layouts]
        held, in_weights = max(given["held"].values()), max(given["in_weights"].values())
        sizes = dict(zip(("batch", "model"), case["mesh"]))
        least = sum(dtype.size * math.prod(shape) // math.prod(sizes.get(s, 1) for s in spec)
                    for dtype, shape, spec in zip(given["dtypes"], shapes, spec_lists))
        slots = list(given["slots"])
        if in_weights < least or held < in_weights + (2 * least if all(pair is not None for pair in slots) else 0):
            raise ValueError("the bytes per device do not agree with the layouts")
        iterations = given["iterations"]
        after = zip(BUILD_NAMES, given["after"], strict=True)
        found = {"mesh": mesh, "case": case, "loss": loss, "weights": weights, "images": images, "labels": labels,
                 "held": int(held), "in_weights": int(in_weights), "specs": spec_lists,
                 "after": {name: np.asarray(value, dtype="float64") for name, value in after},
                 "slots": {name: None if pair is None else tuple(np.asarray(s, dtype="float64") for s in pair)
                           for name, pair in zip(BUILD_NAMES, slots, strict=True)},
                 "iterations": None if iterations is None else int(np.asarray(iterations))}
        if "second_error" in given:
            raise _Stop(f"a second call of step raised {str(given['second_error'])[:400]}: step must run again on "
                        f"another batch of the same size.")
        if case.get("measure"):
            found["runs"] = [(str(kind), tuple(str(axis) for axis in axes), int(size))
                             for kind, axes, size in given["runs"]]
        return found

    def judge(self, data, seed=0):
        """Feedback on the cases collect ran: memory per case, the loss, the weights and Adam's state after one
        step (against NumPy's step for ``seed``), and the collectives of a second step."""
        fb = Feedback()
        if not data["callable"]:
            fb.wrong("build_on_mesh should be a function (mesh, weights, budget) -> (model, optimizer, step).")
            return fb
        results = []
        given_cases = list(data["cases"])
        if not 1 <= len(given_cases) <= len(BUILD_CASES):
            raise ValueError("no case data")
        with quiet_tensorflow():
            for index, case in enumerate(BUILD_CASES):
                try:
                    if index == len(given_cases):
                        raise ValueError("a case is missing from the data")
                    results.append(self._judge_case(given_cases[index], case, seed))
                except _Stop as stop:
                    self._judge_memories(fb, results)
                    fb.wrong(f"{_case_text(case)}: {stop.message}", answer=stop.answer)
                    return fb
        self._judge_memories(fb, results)
        problems = [(found, self._judge_loss(found)) for found in results]
        bad = next(((f, p) for f, p in problems if p), None)
        if bad is None:
            fb.right("the first step's loss equals one device's from the same weights and batch ("
                     + ", ".join(f"{f['loss']:.5f}" for f in results) + ")")
        else:
            fb.wrong(f"{_case_text(bad[0]['case'])}: {bad[1]}")
        problems = [(found, self._judge_variables(found, data["combining"])) for found in results]
        bad = next(((f, p) for f, p in problems if p), None)
        if bad is None:
            fb.right("every weight, both Adam slots of each and the step counter changed as one Adam step on one "
                     "device changes them")
        else:
            fb.wrong(f"{_case_text(bad[0]['case'])}: {bad[1][0]}", answer=bad[1][1])
        measured = [found for found in results if "runs" in found]
        for found in measured:
            fb.note(f"{_mesh_text(found['case'])}, one more step ran: " + _runs_text(found["runs"]))
        unsplit = [found for found in measured if not any(_sums_the_loss_over_batch(*run) for run in found["runs"])]
        if not unsplit:
            fb.right(f"in the step measured ({', '.join(_mesh_text(found['case']) for found in measured)}) the loss "
                     f"was summed over the 'batch' groups (an all-reduce over 'batch' of 4 bytes): the batch is split "
                     f"over 'batch'")
        else:
            fb.wrong(f"{_mesh_text(unsplit[0]['case'])}: the step summed no loss over 'batch' (no all-reduce of the "
                     f"4-byte loss over 'batch' ran), so every 'batch' group computed the loss of the whole batch: no "
                     f"data parallelism. Split the batch over 'batch' (its first axis); DTensor then sums the groups' "
                     f"losses and gradients.",
                     answer="pack_batch(images, dtensor.Layout.batch_sharded(mesh, 'batch', rank=4)), and rank=1 "
                            "for the labels.")
        return fb

    @staticmethod
    def _judge_loss(found):
        """Why the first step's loss differs from one device's, or None."""
        import numpy as np

        per_example, _ = reference_mlp(found["weights"], found["images"], found["labels"])
        right, got = float(per_example.mean()), found["loss"]
        if close(got, right, 1e-4):
            return None
        if not math.isfinite(got) or got == 0:
            return f"the loss is {got}; one device computes {right:.5f} from the same weights and batch."
        groups = found["case"]["mesh"][0]
        slices = np.split(per_example, groups)
        if any(close(got, float(part.mean()), 1e-4) for part in slices):
            return (f"the loss {got:.5f} is the mean over one 'batch' group's slice of the batch "
                    f"({len(slices[0])} of {len(per_example)} examples); one device computes {right:.5f} over all of "
                    f"them. Return the loss of the step, computed from the whole batch on the mesh: DTensor sums it "
                    f"over the groups for you.")
        ratio = got / right
        if abs(ratio - round(ratio)) < 1e-3 * abs(ratio) or abs(1 / ratio - round(1 / ratio)) < 1e-3 / abs(ratio):
            return (f"the loss {got:.5f} is {ratio:.4g} x the mean one device computes ({right:.5f}). A DTensor step "
                    f"is written for the global batch: the plain mean over all {len(per_example)} examples, with no "
                    f"per-replica scaling (that was tf.distribute's custom loop, chapter 2).")
        return (f"the loss {got:.5f} differs from the one device computes from the same weights and batch "
                f"({right:.5f}).")

    @staticmethod
    def _judge_variables(found, combining):
        """Why the weights and Adam's slots after the step differ from one Adam step on one device, or None."""
        import numpy as np

        _, gradients = reference_mlp(found["weights"], found["images"], found["labels"])
        start = {name: value.astype("float64") for name, value in found["weights"].items()}
        expected = reference_adam_first_step(start, gradients)
        if found["iterations"] is not None and found["iterations"] != 1:
            return (f"after the checker's first call of step, the optimizer has counted {found['iterations']} "
                    f"steps. build_on_mesh must not train: the checker's first step must be the model's first.", "")
        missing = [name for name in BUILD_NAMES if found["slots"][name] is None]
        if missing:
            return (f"the optimizer keeps no Adam slots for {', '.join(missing)}: the exercise trains with Adam "
                    f"(its other settings at their defaults).", _reference_dtensor_adam())
        if any(np.abs(found["after"][n] - start[n]).max() > 20 * BUILD_RATE for n in BUILD_NAMES):
            return ("the weights after the first step are far from the weights the checker gave: the model must "
                    "start from `weights` exactly.",
                    "Copy each one in: variable.assign(pack_batch(value, variable.layout)).")
        # Adam's first step moves a weight by about the learning rate: its change is compared, to 1 % of that.
        wrong_weights = [n for n in BUILD_NAMES
                         if not np.allclose(found["after"][n] - start[n], expected[n][0] - start[n], rtol=0,
                                            atol=1e-2 * BUILD_RATE)]
        wrong_m = [n for n in BUILD_NAMES if not _close_values(found["slots"][n][0], expected[n][1])]
        wrong_v = [n for n in BUILD_NAMES if not _close_values(found["slots"][n][1], expected[n][2])]
        if not (wrong_weights or wrong_m or wrong_v):
            return None
        if combining != "0":
            wrong = wrong_weights + [f"m({n})" for n in wrong_m] + [f"v({n})" for n in wrong_v]
            return (f"{', '.join(wrong)} did not change as one Adam step on one device changes them, and this kernel "
                    f"runs with DTensor's all-reduce combining on: the chapter's stale-update bug. The set-up cell "
                    f"must set {COMBINING}=0 before TensorFlow starts (restart the kernel and run it first).", "")
        m_ratios = [float(np.median(found["slots"][n][0][np.abs(expected[n][1]) > 1e-9] /
                                    expected[n][1][np.abs(expected[n][1]) > 1e-9])) for n in BUILD_NAMES]
        if wrong_m and max(m_ratios) - min(m_ratios) < 1e-3 * abs(m_ratios[0]) and abs(m_ratios[0] - 1) > 1e-2:
            return (f"Adam's first moment m holds {m_ratios[0]:.4g} x the gradient of the mean loss over the batch "
                    f"(for every weight): the loss the gradients come from is scaled. Differentiate the plain mean "
                    f"over the whole batch.", "")
        if wrong_weights and not (wrong_m or wrong_v):
            changes = [float(np.median(np.abs(found["after"][n] - start[n]))) for n in BUILD_NAMES]
            wanted = [float(np.median(np.abs(expected[n][0] - start[n]))) for n in BUILD_NAMES]
            ratios = [c / w for c, w in zip(changes, wanted) if w > 0]
            if ratios and max(ratios) - min(ratios) < 0.05 * max(ratios) and abs(ratios[0] - 1) > 0.05:
                return (f"the gradients and Adam's slots are right, but every weight moved {ratios[0]:.3g} x as far "
                        f"as one Adam step with learning rate LEARNING_RATE = {BUILD_RATE:g} moves it: check the "
                        f"optimizer's learning rate (its other settings at their defaults).", "")
        wrong = sorted(set(wrong_weights) | {f"m({n})" for n in wrong_m} | {f"v({n})" for n in wrong_v})
        return (f"{', '.join(wrong)} did not change as one Adam step (learning rate {BUILD_RATE:g}) of the mean "
                f"cross-entropy over the whole batch changes them on one device.", "")

    @staticmethod
    def _judge_memories(fb, results):
        """The memory points: one per case that one placement alone fits, and one shared by the cases that several
        fit (where the bytes sent decide), earned when every one of them is right."""
        verdicts = [(len(_judge_placements_that_fit(found["case"])) > 1, BuildOnMesh._judge_memory(found))
                    for found in results]
        for several in (False, True):
            group = [verdict for shared, verdict in verdicts if shared == several]
            for index, (ok, text, answer) in enumerate(group):
                if ok:
                    fb.right(text, points=0 if several and (index or not all(v[0] for v in group)) else 1)
                else:
                    fb.wrong(text, answer=answer)

    @staticmethod
    def _judge_memory(found):
        """(right, what to say, the part that gives the answer away) for one case: what each device holds against the
        budget, and, if over, which idea is missing; if it fits, whether it sends the fewest bytes of those that fit."""
        case, held, in_weights = found["case"], found["held"], found["in_weights"]
        budget = case["budget"]
        placed = ", ".join(f"{n} {_specs_text(s)}" for n, s in zip(BUILD_NAMES, found["specs"]))
        what = f"{_case_text(case)}: each device holds {held:,} B ({in_weights:,} in weights, " \
               f"{held - in_weights:,} in Adam's state) with {placed}"
        if held <= budget:
            return BuildOnMesh._judge_choice(found, what)
        hidden = case["hidden"]
        replicated = [all(s == UNSHARDED for s in spec) for spec in found["specs"]]
        if all(replicated):
            why = "every weight is replicated, as in data parallelism, and that does not fit"
        elif replicated[0]:
            share = 100 * 784 * hidden // (784 * hidden + hidden + hidden * 10 + 10)
            why = f"d1.kernel, {share} % of the parameters, is replicated on every device"
        else:
            why = "the layouts do not split the weights enough"
        if replicated[0]:
            why += (". If a LayoutMap gave the layouts: a key that matches no variable leaves it replicated without a "
                    "word; tf_keras looks up 'd1.kernel' (the layer's name, a dot, the attribute)")
        slots = ""
        if in_weights <= budget:
            slots = (f" The weights alone ({in_weights:,} B) would fit: Adam keeps two slots per weight in the "
                     f"weight's layout, so its state is twice the weights' bytes. Count it when you choose.")
        return False, f"{what}: over the budget; {why}.{slots}", _judge_fitting_text(case)

    @staticmethod
    def _judge_choice(found, what):
        """(right, what to say, the answer) for a placement that fits: where several fit, it must send no more bytes
        per step than the cheapest of them (exercise 5's choice: a roomy budget may need no split at all, and the
        first that fits, or the one that holds the most or the least, is not always the cheapest)."""
        case = found["case"]
        if len(_judge_placements_that_fit(case)) < 2:
            return True, what, ""
        cheapest, least = _judge_cheapest(case)
        sent = _judge_bytes_sent(found["specs"], case)
        if sent is not None and sent <= least:
            return True, f"{what}: of the placements that fit, one that sends the fewest bytes per step", ""
        cost = (f"yours sends {sent:,} B per device per step on these CPUs (the chapter's cost model), and "
                if sent is not None else "")
        replicate = ": keep every weight replicated; the budget needs no split" if cheapest == "data parallel" else ""
        return False, (f"{what}: it fits, but more than one placement fits this budget: {cost}another placement of "
                       f"exercise 5's table fits too and sends fewer. Where several fit, take the one that sends the "
                       f"fewest bytes per step, as in exercise 5: compare what each sends, not only what each holds, "
                       f"nor which comes first in the table."), \
            f"Here {cheapest} sends {least:,} B per device per step{replicate}."


def _sums_the_loss_over_batch(kind, axes, tensor_bytes):
    """A reduction over 'batch' of one float32 (the mean loss of a batch split over 'batch'), or, with DTensor's
    combining on, a merged all-reduce over 'batch' that may hold it."""
    return "batch" in axes and (kind == "merged all-reduce" or (kind in REDUCTIONS and tensor_bytes == 4))


def _runs_text(runs):
    if not runs:
        return "no collective"
    from collections import Counter

    counted = Counter((kind, axes) for kind, axes, _ in runs)
    return ", ".join(f"{kind} over {','.join(axes)}" + (f" x{n}" if n > 1 else "")
                     for (kind, axes), n in counted.items())
