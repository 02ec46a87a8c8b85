"""Chapter 8 · the build-and-measure exercise: one training step within a memory budget with ModelParallel on JAX (exercise 4).

``collect`` runs the learner's ``train_one_step`` on the cases of ``ch8_cases.py`` with Keras on JAX and sends what
it did as plain data; ``judge`` (here) reads that data with NumPy only (no Keras, no JAX).
"""
import math
import re

from . import ch8_cases
from .core import Exercise, Feedback
from .ch8_cases import BUDGET_BATCH, BUDGET_BYTES, BUDGET_MESH, FEW, ROOMY, TIGHT, budget_case, collect_case
from .ch8_sent import bytes_sent

KERAS_RULES = ("search", "fullmatch")  # Keras 3.13 (Colab), Keras 3.15


def _reference_numpy_step(values, images, labels, case=TIGHT):
    """The mean cross-entropy of the logits and its gradient per weight, on one device in float64."""
    import numpy as np

    model, layers = case["model"], case["layers"]
    inputs, pres = [images.reshape(len(images), -1).astype("float64")], []
    for name, _, activation in layers:
        pre = inputs[-1] @ values[f"{model}/{name}/kernel"] + values[f"{model}/{name}/bias"]
        pres.append(pre)
        inputs.append(np.maximum(pre, 0) if activation == "relu" else pre)
    logits = inputs[-1]
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = float(-log_p[np.arange(len(labels)), labels].mean())
    d = np.exp(log_p)
    d[np.arange(len(labels)), labels] -= 1
    d /= len(labels)
    gradients = {}
    for index in reversed(range(len(layers))):
        name = layers[index][0]
        gradients[f"{model}/{name}/kernel"] = inputs[index].T @ d
        gradients[f"{model}/{name}/bias"] = d.sum(axis=0)
        if index:
            d = (d @ values[f"{model}/{name}/kernel"].T) * (pres[index - 1] > 0)
    return loss, gradients


def _reference_fewest_sent(case):
    """The fewest bytes one device sends per step among the placements that fit ``case`` (every layout of every
    weight over the mesh's axes that divide it, measured from the compiled step: tests/checkers/test_ch8.py
    enumerates them): the chapter's pair (the first kernel by columns, the second by rows) in the tight case,
    nothing split in the roomy one, and in the roomy one with 16 examples the pair (or the first kernel by columns
    alone, or the second by rows alone, which send as few)."""
    return {id(TIGHT): 12_140, id(ROOMY): 6_834, id(FEW): 3_610}[id(case)]


def _in_tf_keras_form_for(key, paths):
    """Whether ``key`` is written the tf_keras way ('d1.kernel': a dot, no '/') and fits no Keras 3 path as a whole."""
    try:
        return ("/" not in key and re.search(r"\.\*?(kernel|bias)$", key) is not None
                and not any(re.fullmatch(key, path) for path in paths))
    except re.error:
        return False


def _reads_probabilities(setting):
    """Whether a model's loss (:func:`.ch8_run._loss_setting`) is a cross-entropy that reads outputs as
    probabilities (from_logits=False)."""
    if isinstance(setting.get("name"), str):
        return "crossentropy" in setting["name"]  # Keras' string losses take probabilities
    return setting.get("from_logits") is False


def _judge_why_more_steps(calls, examples):
    """Why the model's fit and train_on_batch calls (:func:`.ch8_run._noting_calls`) ran more than one step."""
    calls = list(calls)
    if len(calls) > 1:
        return f"the model was trained {len(calls)} times ({', '.join(call['method'] for call in calls)})."
    if not calls or calls[0]["method"] != "fit":
        return "one step is one batch of all the examples, once."
    call = calls[0]
    size, epochs, steps = call.get("batch_size"), call.get("epochs"), call.get("steps_per_epoch")
    if steps is not None and steps > 1:
        return f"fit(..., steps_per_epoch={steps}) runs {steps} steps per epoch."
    if size is None and examples > 32:
        return f"fit without batch_size cuts the {examples} examples into batches of 32."
    if size is not None and size < examples:
        return f"batch_size={size} cuts the {examples} examples into {math.ceil(examples / size)} batches."
    if epochs is not None and epochs > 1:
        return f"epochs={epochs} runs the whole batch {epochs} times, one step each."
    return "one step is one batch of all the examples, once."


STUCK = ("train_one_step did not return within {seconds} s: the devices' all-reduce is probably stuck (a problem "
         "of some jax versions on CPUs with few cores; the chapter's guard explains it). Restart the kernel, install "
         "the jax the course pins and try again.")


class BudgetStep(Exercise):
    title = "Fit a budget, train one step, check the loss"
    points = 6
    hints = (
        "Call make_model() once outside any distribution and print each weight's path, shape and value.nbytes: which "
        "placements keep one device's share within budget_bytes? Of those, which sends the fewest bytes per step? "
        "That is exercise 3's arithmetic, section 4's ring formula and exercise 2's keys, for a model you only meet "
        "inside the function.",
        "Keys: one per weight you split, a pattern for its whole path (re.escape(weight.path) means the same under "
        "re.search and re.fullmatch); value: a tuple with device_mesh.axis_names[1] on an axis whose size that mesh "
        "axis divides, None elsewhere. Then kd.ModelParallel(layout_map=..., batch_dim_name=device_mesh.axis_names[0]) "
        "and, inside its scope(): model = make_model(), compile, then one step: fit(images, labels, "
        "batch_size=len(images), epochs=1); its History holds the loss.",
        "The heart of it: price two placements, nothing split and the chapter's pair (the first Dense kernel by "
        "columns with its bias, the second by rows). With g and w the mesh's sizes, one device holds `held` bytes "
        "and sends about 2 (g-1)/g * held for the gradients, plus, for the pair, 2 (w-1)/w * 4 * len(images) / g * "
        "(the second layer's units) for the logits. Keep those within the budget, take the one that sends the "
        "fewest, and return model, history.history['loss'][0].",
    )

    def unanswered(self, answer):
        """The placeholder, or the hand-out's function whose body is still ``return ...`` (no names, no locals)."""
        code = getattr(answer, "__code__", None)
        if code is not None:
            return not code.co_names and code.co_nlocals == code.co_argcount and Ellipsis in code.co_consts
        return super().unanswered(answer)

    def collect(self, train_one_step, seed=0):
        """Runs ``train_one_step(make_model, device_mesh, BUDGET_BYTES, images, labels)`` with Keras on JAX, the
        starting weights and the batch drawn from ``seed``, within ``ch8_cases.BUDGET_SECONDS``.

        What crosses: ``"callable"`` and ``"type"`` (the answer's); ``"backend"`` and ``"devices"`` (Keras'
        backend and device count: the function runs only on JAX with 8 devices); ``"mesh_devices"`` (the ids
        of the mesh given); ``"outcome"`` ("value", "error" or "timeout"), ``"error"`` (the exception, as
        text) and ``"attribute_error"``; ``"returned"`` (its type's name, whether it is ``...``, a pair, a pair
        whose model is None, and which build the model (or the loss) is); ``"builds"`` (per call of
        make_model: :func:`.ch8_run.describe_builds`); ``"step"`` (:func:`.ch8_run.describe_step` of the
        model returned, when make_model built it); ``"sent"`` (per build, the collectives of a step compiled under
        its distribution, for the build judged: :func:`.ch8_cases._measure_sent`), all for :data:`TIGHT`; ``"roomy"``: the
        same for :data:`ROOMY`, run once the first case returned (else None); ``"few"``: the same for :data:`FEW`,
        run once the second returned (else None).
        """
        data = {"callable": callable(train_one_step), "type": type(train_one_step).__name__}
        if not data["callable"]:
            return data
        import keras
        from keras import distribution as kd

        devices = kd.list_devices()
        data.update(backend=keras.backend.backend(), devices=len(devices))
        if data["backend"] != "jax" or len(devices) < 8:
            return data
        data.update(collect_case(train_one_step, devices, TIGHT, seed))
        data["roomy"] = collect_case(train_one_step, devices, ROOMY, seed) if data["outcome"] == "value" else None
        data["few"] = (collect_case(train_one_step, devices, FEW, seed)
                       if data["roomy"] is not None and data["roomy"]["outcome"] == "value" else None)
        return data

    def judge(self, data, seed=0):
        """Judges what :meth:`collect` sent: the distribution the model was built under, the bytes each device
        holds, the LayoutMap's keys and the step (its loss and the weights' moves against a NumPy reference
        step computed here from ``seed``)."""
        fb = Feedback()
        if not data["callable"]:
            fb.wrong("train_one_step should be a function (make_model, device_mesh, budget_bytes, images, labels) "
                     "-> (model, loss).")
            return fb
        if data["backend"] != "jax" or data["devices"] < 8:
            fb.wrong(f"Keras runs on {data['backend']} with {data['devices']} device(s); this exercise needs JAX "
                     f"with 8: restart the kernel and run the set-up cell first.")
            return fb
        values, images, labels = budget_case(seed)
        builds, returned, outcome = data["builds"], data["returned"], data["outcome"]
        if returned["ellipsis"] and not builds:
            fb.wrong("train_one_step still returns the placeholder `...`: write its body.")
            return fb
        stuck = STUCK.format(seconds=ch8_cases.BUDGET_SECONDS)  # read now: a test shortens it
        if outcome == "timeout" and not builds:
            fb.wrong(stuck)
            return fb
        has_model = returned["pair"] and not returned["model_is_none"]
        build = builds[returned["model_build"]] if has_model and returned["model_build"] is not None else None
        if build is None:  # the function failed, or returned something else: judge the last build on a mesh
            built = [b for b in builds if b["built"] or b["distribution"]]
            build = next((b for b in reversed(built) if b["distribution"] is not None), built[-1] if built else None)
        distribution = build["distribution"] if build else None

        self._judge_distribution(fb, build, data["mesh_devices"])
        layout_map = distribution["layout_map"] if distribution and distribution["kind"] == "ModelParallel" else None
        measured = build["held"] if build is not None and build["built"] else None
        if measured is not None:
            if self._judge_budget(fb, measured, BUDGET_BYTES):
                self._judge_sent(fb, data["sent"][next(i for i, b in enumerate(builds) if b is build)], TIGHT)
        elif build is not None:
            fb.wrong("Each device's bytes: not measured, make_model() could not build the model on the mesh"
                     + (" (see the LayoutMap below)." if layout_map is not None else "."))
        if layout_map is not None:
            shapes = {path: value.shape for path, value in values.items()}
            self._judge_keys(fb, list(layout_map["keys"]), list(values),
                             self._judge_layout_problems(layout_map["lookup"], shapes, distribution["mesh"]))
        elif build is not None:
            fb.wrong("The LayoutMap: none to check without a ModelParallel distribution.")

        if outcome == "timeout":
            fb.wrong(stuck)
        elif outcome == "error":
            keras_313 = (data["attribute_error"] is True and build is not None and build["distribution"] is not None
                         and "'NoneType' object has no attribute 'shape'" in data["error"])
            fb.wrong(f"train_one_step raised {data['error']}. "
                     + ("Keras 3.13's train_on_batch fails like this under a distribution (it tries to place the "
                        "sample_weight you did not give): run the step with fit(images, labels, "
                        "batch_size=len(images), epochs=1) instead." if keras_313 else
                        f"The checker calls it as train_one_step(make_model, device_mesh, {BUDGET_BYTES}, images, "
                        f"labels) with a {BUDGET_MESH[0]} mesh with axes {BUDGET_MESH[1]} and a batch of "
                        f"{BUDGET_BATCH}."))
        elif not has_model:
            fb.wrong(f"train_one_step returned {returned['type']}; return two things: model, loss.")
        elif returned["model_build"] is None:
            fb.wrong("Return the model first, then the loss: return model, loss."
                     if returned["loss_build"] is not None else
                     "The model returned is not one that make_model() built: return the model you trained.")
        else:
            self._judge_step(fb, data["step"], values, images, labels, build.get("calls", []))
        found = [self._judge_roomy(fb, data.get("roomy"), seed, ROOMY)]
        if data.get("roomy") is not None:
            found.append(self._judge_roomy(fb, data.get("few"), seed, FEW))
        if all(found):  # one point for the two cases whose budget the whole model fits
            fb.right("; ".join(found))
        return fb

    @staticmethod
    def _judge_roomy(fb, roomy, seed, case):
        """A case whose budget the whole model fits (:data:`ROOMY`, :data:`FEW`): of the placements that fit, one that
        sends the fewest bytes (in :data:`ROOMY` nothing split, in :data:`FEW` a split), and the step's loss is the
        NumPy loss of its own model and batch. Returns the right line's text, or None when it told what is wrong."""
        (shape, names), third = case["mesh"], case is FEW
        values, images, labels = budget_case(seed, case)
        whole = sum(value.nbytes for value in values.values())
        where = (f"The {'third' if third else 'second'} case (a {shape} mesh with axes {names}, a model of {whole} "
                 f"bytes, a budget of {case['bytes']}, {case['batch']} examples)")
        if roomy is None:
            fb.wrong(f"{where} runs once train_one_step returns (model, loss) on the "
                     f"{'second' if third else 'first'}.")
            return None
        returned, builds = roomy["returned"], roomy["builds"]
        build = builds[returned["model_build"]] if returned["pair"] and returned["model_build"] is not None else None
        if roomy["outcome"] != "value":
            fb.wrong(f"{where}: train_one_step " + (f"raised {roomy['error']}." if roomy["outcome"] == "error" else
                                                    f"did not return within {ch8_cases.BUDGET_SECONDS} s."))
            return None
        if build is None or roomy["step"] is None or "loss" not in roomy["step"]:
            fb.wrong(f"{where}: train_one_step returned {returned['type']}, not the model make_model() built and "
                     f"the step's loss.")
            return None
        if build["distribution"] is None:
            fb.wrong(f"{where}: the model was built outside any distribution, on one device.")
            return None
        pieces = build["held"][0]
        split = any(held < whole for held in pieces.values())
        collectives = roomy.get("sent", [None] * len(builds))[returned["model_build"]]
        sent = bytes_sent(collectives) if isinstance(collectives, list) else None
        measured = f" Measured from the compiled step, yours sends {sent:,} B per device per step." if sent else ""
        if not third and split:
            device = min(pieces, key=pieces.get)
            fb.wrong(f"{where}: device {device} holds {pieces[device]} of the model's {whole} bytes: weights are split "
                     f"though the whole model fits the budget on every device, and another placement that fits "
                     f"sends fewer bytes per step with {case['batch']} examples: a split adds activations added up "
                     f"over the mesh's second axis, or a weight gathered over the first (a kernel split by columns "
                     f"and not followed by one split by rows gathers its outputs), against a smaller gradient "
                     f"all-reduce.{measured} Of the placements that fit, price each and take the one that sends the "
                     f"fewest bytes.",
                     answer=f"Here none: with {case['batch']} examples every split sends more than nothing split; every "
                            f"weight whole (an empty LayoutMap, or DataParallel) sends "
                            f"{_reference_fewest_sent(case):,} B per device per step on the given mesh.")
            return None
        if third and sent is None:
            fb.wrong(f"{where}: bytes sent per step not measured, the checker could not compile a step of the model "
                     f"under your distribution ({collectives}).")
            return None
        if third and sent > _reference_fewest_sent(case) + 12:
            why = ("every weight is whole, which fits the budget, but fitting is not the question: with only "
                   f"{case['batch']} examples, the activations a split adds up are small, and the gradient all-reduce "
                   "it shrinks is not." if not split else
                   "another placement that fits sends fewer: a kernel split by rows alone makes the devices add up "
                   "and gather activations, and a weight split over the batch axis is gathered every step.")
            fb.wrong(f"{where}: {why}{measured} Price each placement that fits, here too, and take the one that "
                     f"sends the fewest bytes.",
                     answer=f"Here the chapter's pair (the first kernel by columns, the second by rows) sends "
                            f"{_reference_fewest_sent(case):,} B per device per step.")
            return None
        want = _reference_numpy_step(values, images, labels, case)[0]
        got = float(roomy["step"]["loss"])
        if abs(got - want) > 1e-4 * max(1.0, abs(want)) or int(roomy["step"]["steps"] or 0) != 1:
            fb.wrong(f"{where}: the step's loss {got:.6f} after {roomy['step']['steps']} optimizer step(s) is "
                     f"not the one step at the starting weights the checker's NumPy computes.")
            return None
        told = where.replace("The ", "the ", 1)
        if third:
            return (f"{told}: a split that sends the fewest bytes per step ({sent:,} B per device), and one step with "
                    f"the right loss ({got:.6f})")
        return f"{told}: no weight split, as the budget allows, and one step with the right loss ({got:.6f})"

    @staticmethod
    def _judge_distribution(fb, build, given_devices):
        distribution = build["distribution"] if build else None
        shape, axis_names = BUDGET_MESH
        batch_axis = axis_names[0]
        if build is None:
            fb.wrong("train_one_step never called make_model(): the checker can only measure the model make_model "
                     "builds (with the checker's starting weights).")
        elif distribution is None:
            fb.wrong("The model was built outside any distribution: make_model() ran with no distribution current, "
                     "so every weight lives on one device. Build it inside `with distribution.scope():`.")
        elif distribution["kind"] == "DataParallel":
            fb.wrong("DataParallel keeps every weight whole on every device and splits only the batch: ModelParallel "
                     "with a LayoutMap splits weights.")
        elif distribution["kind"] != "ModelParallel":
            fb.wrong(f"The model was built under {distribution['type']}; this exercise asks for ModelParallel.")
        elif (tuple(distribution["mesh"]["shape"]), tuple(distribution["mesh"]["axis_names"]),
              list(distribution["mesh"]["devices"])) != (shape, axis_names, list(given_devices)):
            fb.wrong(f"The distribution's mesh is {tuple(distribution['mesh']['shape'])} with axes "
                     f"{tuple(distribution['mesh']['axis_names'])}, not the device_mesh you were given "
                     f"({shape}, {axis_names}): build the LayoutMap on device_mesh.")
        elif distribution["batch_dim_name"] not in axis_names:
            fb.wrong(f"batch_dim_name={distribution['batch_dim_name']!r} is not an axis of the mesh {axis_names}: "
                     f"Keras cannot split the batch along it.",
                     answer=f"The batch goes along the mesh's first axis: batch_dim_name=device_mesh.axis_names[0] "
                            f"({batch_axis!r} here).")
        elif distribution["batch_dim_name"] != batch_axis:
            fb.wrong(f"batch_dim_name={distribution['batch_dim_name']!r} splits the batch along the mesh axis meant "
                     f"for the weights.",
                     answer=f"The first axis, {batch_axis!r}, is the one for the batch: "
                            f"batch_dim_name=device_mesh.axis_names[0]")
        else:
            fb.right(f"ModelParallel on the given mesh, the batch split along {batch_axis!r}")

    @staticmethod
    def _judge_layout_problems(lookup, paths_and_shapes, mesh):
        """What keeps Keras from placing the weights, from what the installed Keras's lookup gave each path."""
        sizes = dict(zip(mesh["axis_names"], mesh["shape"]))
        problems = []
        for path, shape in paths_and_shapes.items():
            found = lookup[path]
            if found is None or found == "raised":
                continue  # no key; or several keys, or a key that is no pattern: the keys' check names them
            axes = tuple(found)
            unknown = [axis for axis in axes if axis is not None and axis not in sizes]
            if unknown:
                problems.append(f"{path!r} gets {axes}: {unknown} {'is' if len(unknown) == 1 else 'are'} not an "
                                f"axis of the mesh {tuple(mesh['axis_names'])}")
            elif len(axes) > len(shape):
                problems.append(f"{path!r} gets {len(axes)} axes {axes} but has {len(shape)}")
            else:
                for size, axis in zip(shape, axes):
                    if axis is not None and size % sizes[axis]:
                        problems.append(f"{path!r} has {size} entries along an axis that {axes} splits over "
                                        f"{axis!r}, which has {sizes[axis]} devices: the size must divide the entries")
        return problems

    @staticmethod
    def _judge_keys(fb, keys, paths, problems):
        """Whether every key matches weights, the same ones under re.search (Keras 3.13) and re.fullmatch (Keras
        3.15), and gives them layouts Keras can place (``problems``, from :meth:`_judge_layout_problems`)."""
        if not keys:
            fb.wrong("Your LayoutMap has no keys: every weight stays whole on every device.")
            return
        old_form, dead, parts = [], [], []
        for key in keys:
            try:
                found = {rule: [path for path in paths if getattr(re, rule)(key, path)] for rule in KERAS_RULES}
            except (re.error, TypeError):
                parts.append(f"{key!r} is not a regular expression.")
                continue
            if _in_tf_keras_form_for(key, paths):
                old_form.append(key)
            if not found["search"] and not found["fullmatch"]:
                dead.append(key)
            elif found["search"] != found["fullmatch"]:
                parts.append(f"{key!r} matches {found['search'] or 'nothing'} under re.search (Keras 3.13) but "
                             f"{found['fullmatch'] or 'nothing'} under re.fullmatch (Keras 3.15).")
        if old_form:
            parts.insert(0, f"{old_form} {'is' if len(old_form) == 1 else 'are'} in tf_keras' form ('d1.kernel'): "
                            f"Keras 3 matches keys against variable.path, which uses '/' and starts with the model's "
                            f"name.")
        if dead:
            parts.append(f"{dead} match{'es' if len(dead) == 1 else ''} no weight: the weights you meant to split "
                         f"stay whole, silently.")
        several = {}
        for rule in KERAS_RULES:
            for path in paths:
                try:
                    matching = tuple(key for key in keys if getattr(re, rule)(key, path))
                except (re.error, TypeError):
                    continue
                if len(matching) > 1:
                    several.setdefault((path, matching), []).append(f"re.{rule}")
        parts += [f"{path!r} matches several keys {list(matching)} under {' and '.join(rules)}: Keras 3 raises "
                  f"ValueError." for (path, matching), rules in several.items()]
        parts += [problem[0].upper() + problem[1:] + "." for problem in problems]
        if parts:
            fb.wrong(f"The LayoutMap does not place the weights as you meant. {' '.join(parts)} The weights' paths "
                     f"are {list(paths)}.",
                     answer="Write one key per weight you split, for its whole path, e.g. re.escape(weight.path) "
                            "(re.search and re.fullmatch then agree on it), with one entry per axis of the weight.")
        else:
            fb.right("every key matches weights, the same ones under re.search (Keras 3.13) and re.fullmatch "
                     "(Keras 3.15)")

    @staticmethod
    def _judge_budget(fb, measured, budget):
        held, per_weight, whole = measured
        worst = max(held, key=held.get)
        if len(held) == 1 and held[worst] > budget:
            fb.wrong(f"Every weight is on device {worst} alone ({held[worst]} bytes, budget {budget}): a model built "
                     f"outside the distribution is not on the mesh.")
        elif held[worst] <= budget:
            fb.right(f"every device holds at most {held[worst]} bytes of weights (budget {budget}), read from the "
                     f"shards")
            return True
        if len(held) == 1:
            return False
        pieces = ", ".join(f"{path} {nbytes} of {whole[path]}"
                           for path, nbytes in sorted(per_weight[worst].items(), key=lambda item: -item[1]))
        if all(per_weight[worst][path] == whole[path] for path in whole) and len(held) > 1:
            fb.wrong(f"Every device holds every weight whole ({held[worst]} bytes, budget {budget}): nothing is "
                     f"split.")
        else:
            fb.wrong(f"Device {worst} holds {held[worst]} bytes of weights, over the budget of {budget}. Bytes of "
                     f"each weight on it: {pieces}.",
                     answer="Split the biggest weights that are still whole, or split them more ways, until the sum "
                            "fits.")
        return False

    @staticmethod
    def _judge_sent(fb, collectives, case):
        """Of the placements that fit, whether the learner's sends the fewest bytes per step (measured from the
        compiled step, :mod:`.ch8_sent`), against :func:`_reference_fewest_sent`."""
        if not isinstance(collectives, list):
            fb.wrong(f"Bytes sent per step: not measured, the checker could not compile a step of the model under "
                     f"your distribution ({collectives}).")
            return
        sent, fewest = bytes_sent(collectives), _reference_fewest_sent(case)
        if sent <= fewest + 12:  # a few bytes of bookkeeping (the loss) may differ between Keras versions
            fb.right(f"of the placements that fit, one that sends the fewest bytes per step ({sent:,} B per device, "
                     f"measured from the compiled step)")
            return
        ran = ", ".join(f"{op} of {nbytes:,} B over {size} devices" for op, nbytes, size in collectives)
        fb.wrong(f"Your placement fits, but another placement that fits sends fewer bytes per step. Yours sends "
                 f"{sent:,} B per device per step, measured from the compiled step ({ran}; a ring all-reduce of B "
                 f"bytes over n devices sends 2 (n-1)/n B, chapter 8's section 4). A kernel split by rows alone makes "
                 f"the devices add up and gather activations, and a weight split over the batch axis is gathered "
                 f"every step: price each placement that fits before you choose.",
                 answer=f"The chapter's pair sends the fewest: the first layer's kernel by columns (its bias with it "
                        f"or whole), the second's by rows, {fewest:,} B per device per step.")

    @staticmethod
    def _judge_step(fb, step, values, images, labels, calls=()):
        import numpy as np

        want, gradients = _reference_numpy_step(values, images, labels)
        if "loss_error" in step:
            fb.wrong(f"The loss {step['loss_type']} is not a number ({step['loss_error']}): return the loss of the "
                     f"step (fit's History or train_on_batch's result).")
            return
        got = float(step["loss"])
        after = {path: np.asarray(value, dtype="float64") for path, value in step["after"].items()}
        if set(after) != set(values) or any(after[path].shape != values[path].shape for path in after):
            raise ValueError("the weights after the step are not the model's")
        changes = {path: after[path] - values[path] for path in after}
        steps = int(step["steps"] or 0)
        unchanged = sorted(path for path, change in changes.items() if not np.any(change))
        uphill = sorted(path for path, change in changes.items()
                        if np.any(change) and float(np.sum(change * gradients[path])) >= 0)
        same_loss = abs(got - want) <= 1e-4 * max(1.0, abs(want))
        if steps > 1:
            fb.wrong(f"The optimizer ran {steps} steps, not one: {_judge_why_more_steps(calls, len(images))}",
                     answer="One step on the whole batch: fit(images, labels, batch_size=len(images), epochs=1).")
        elif len(unchanged) == len(changes):
            fb.wrong("The weights did not change: train_one_step ran no training step on the model it returned.")
        elif _reads_probabilities(step["loss_setting"]):
            fb.wrong("The model was compiled with a cross-entropy that reads its outputs as probabilities "
                     "(from_logits=False), but its last Dense layer gives logits: the loss and its gradients are "
                     "not the cross-entropy of the logits.",
                     answer="loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)")
        elif same_loss and not unchanged and not uphill:
            fb.right(f"one training step: its loss {got:.6f} equals the checker's NumPy loss from the same weights "
                     f"and batch ({want:.6f}), and every weight moved downhill")
        elif same_loss:
            fb.wrong(f"The loss is right, but one step should move every weight downhill; {unchanged + uphill} did "
                     f"not.")
        elif abs(got - _reference_numpy_step(after, images, labels)[0]) <= 1e-4 * max(1.0, abs(want)):
            fb.wrong("That is the loss of the weights after the step (evaluate runs after training): return the loss "
                     "the step itself computed, at the starting weights.")
        else:
            fb.wrong(f"The loss {got:.6f} is not the mean cross-entropy of the logits on the whole batch at the "
                     f"starting weights (the checker's NumPy gives another number).",
                     answer=f"The checker's NumPy loss is {want:.6f}: return the loss the training step reports.")
