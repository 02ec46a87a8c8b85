"""Chapter 8 · the build-and-measure exercise: one training step within a memory budget with ModelParallel on JAX (exercise 4)."""
import math
import re

from .answers import short_error
from .core import Exercise, Feedback


BUDGET_MODEL = "tower"
BUDGET_INPUT = (10, 10, 1)
BUDGET_LAYERS = (("h1", 96, "relu"), ("h2", 64, "relu"), ("out", 10, None))  # Dense layers: name, units, activation
BUDGET_MESH = ((2, 4), ("data", "model"))  # the first axis splits the batch
BUDGET_BYTES = 24_000  # whole: 66 216 bytes; h1's kernel split 4 ways: 37 416; both kernels split: 18 984
BUDGET_BATCH = 48  # more than fit's default batch of 32: fit without batch_size runs two steps
BUDGET_SEED = 11
BUDGET_SECONDS = 60  # the learner's call: a stuck all-reduce (some jax versions, few cores) becomes a hint
KERAS_RULES = ("search", "fullmatch")  # Keras 3.13 (Colab), Keras 3.15


def _budget_case():
    """The starting weights ``{path: array}`` and a batch for exercise 4 (NumPy, float32)."""
    import numpy as np

    rng = np.random.default_rng(BUDGET_SEED)
    values, fan_in = {}, math.prod(BUDGET_INPUT)
    for name, units, _ in BUDGET_LAYERS:
        values[f"{BUDGET_MODEL}/{name}/kernel"] = rng.normal(0, fan_in ** -0.5, (fan_in, units)).astype("float32")
        values[f"{BUDGET_MODEL}/{name}/bias"] = rng.normal(0, 0.1, units).astype("float32")
        fan_in = units
    images = rng.random((BUDGET_BATCH, *BUDGET_INPUT), dtype=np.float32)
    return values, images, rng.integers(0, BUDGET_LAYERS[-1][1], BUDGET_BATCH).astype("int32")


def _numpy_step(values, images, labels):
    """The mean cross-entropy of the logits and its gradient per weight, on one device in float64."""
    import numpy as np

    inputs, pres = [images.reshape(len(images), -1).astype("float64")], []
    for name, _, activation in BUDGET_LAYERS:
        pre = inputs[-1] @ values[f"{BUDGET_MODEL}/{name}/kernel"] + values[f"{BUDGET_MODEL}/{name}/bias"]
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
    for index in reversed(range(len(BUDGET_LAYERS))):
        name = BUDGET_LAYERS[index][0]
        gradients[f"{BUDGET_MODEL}/{name}/kernel"] = inputs[index].T @ d
        gradients[f"{BUDGET_MODEL}/{name}/bias"] = d.sum(axis=0)
        if index:
            d = (d @ values[f"{BUDGET_MODEL}/{name}/kernel"].T) * (pres[index - 1] > 0)
    return loss, gradients


class _ModelMaker:
    """``make_model`` for the learner's function: the checker's model with the checker's starting weights.

    Each call notes the Keras distribution it ran under (before building, so that a layout Keras
    cannot place is still seen) and the model it built.
    """

    def __init__(self, values):
        self.values, self.builds = values, []

    def __call__(self):
        import keras
        from keras import distribution as kd

        build = {"distribution": kd.distribution(), "model": None, "held": None}
        self.builds.append(build)
        model = keras.Sequential(
            [keras.Input(BUDGET_INPUT), keras.layers.Flatten()]
            + [keras.layers.Dense(units, activation=activation, name=name)
               for name, units, activation in BUDGET_LAYERS],
            name=BUDGET_MODEL)
        for weight in model.weights:
            weight.assign(self.values[weight.path])
        build["model"] = model
        try:
            build["held"] = _bytes_held(model)  # as built: a step that fails half-way can leave no values to read
        except Exception:
            pass
        return model


def _call_with_time_limit(function, args, seconds):
    """``function(*args)`` in a helper thread: ``{"value": ...}``, ``{"error": ...}`` or ``{"timeout": True}``.

    Keras keeps its current distribution per thread, so a ``set_distribution`` in the learner's
    function stays in that thread.
    """
    import threading

    outcome = {}

    def run():
        try:
            outcome["value"] = function(*args)
        except BaseException as err:  # handed back to the checker
            outcome["error"] = err

    worker = threading.Thread(target=run, name="ch8-q4-train_one_step", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        return {"timeout": True}
    return outcome


def _loss_number(loss):
    """The number in what ``train_on_batch`` or ``fit`` returned: a float, [loss, metrics...], a dict, a History."""
    import numpy as np

    if hasattr(loss, "history") and isinstance(loss.history, dict):
        loss = loss.history["loss"][-1]
    elif isinstance(loss, dict):
        loss = loss["loss"]
    elif isinstance(loss, (list, tuple)) and loss:
        loss = loss[0]
    array = np.asarray(loss, dtype="float64")
    if array.size != 1:
        raise ValueError(f"a loss has one number, not {array.size}")
    return float(array.reshape(-1)[0])


def _bytes_held(model):
    """What each device holds of a model's weights, read from their shards: ``{device id: bytes}``,
    ``{device id: {path: bytes}}`` and ``{path: bytes of the whole weight}``."""
    held, per_weight, whole = {}, {}, {}
    for weight in model.weights:
        array = weight.value
        whole[weight.path] = array.nbytes
        for shard in array.addressable_shards:
            device = shard.device.id
            held[device] = held.get(device, 0) + shard.data.nbytes
            per_weight.setdefault(device, {})[weight.path] = shard.data.nbytes
    return held, per_weight, whole


def _device_ids(mesh):
    """The ids of a Keras DeviceMesh's devices in mesh order, whether it was given names ('cpu:3') or JAX devices."""
    import numpy as np

    try:
        return [device.id for device in np.ravel(mesh.backend_mesh.devices)]
    except Exception:
        return [str(device) for device in np.ravel(mesh.devices)]


def _same_mesh(mesh, given):
    return (tuple(mesh.shape) == tuple(given.shape) and tuple(mesh.axis_names) == tuple(given.axis_names)
            and _device_ids(mesh) == _device_ids(given))


def _grade_distribution(fb, build, device_mesh):
    from keras import distribution as kd

    distribution = build["distribution"] if build else None
    batch_axis, weight_axis = device_mesh.axis_names
    if build is None:
        fb.wrong("train_one_step never called make_model(): the checker can only measure the model make_model builds "
                 "(with the checker's starting weights).")
    elif distribution is None:
        fb.wrong("The model was built outside any distribution: make_model() ran with no distribution current, so "
                 "every weight lives on one device. Build it inside `with distribution.scope():`.")
    elif isinstance(distribution, kd.DataParallel):
        fb.wrong("DataParallel keeps every weight whole on every device and splits only the batch: ModelParallel "
                 "with a LayoutMap splits weights.")
    elif not isinstance(distribution, kd.ModelParallel):
        fb.wrong(f"The model was built under {type(distribution).__name__}; this exercise asks for ModelParallel.")
    elif not _same_mesh(distribution.device_mesh, device_mesh):
        fb.wrong(f"The distribution's mesh is {tuple(distribution.device_mesh.shape)} with axes "
                 f"{tuple(distribution.device_mesh.axis_names)}, not the device_mesh you were given "
                 f"({tuple(device_mesh.shape)}, {tuple(device_mesh.axis_names)}): build the LayoutMap on device_mesh.")
    elif distribution.batch_dim_name not in device_mesh.axis_names:
        fb.wrong(f"batch_dim_name={distribution.batch_dim_name!r} is not an axis of the mesh "
                 f"{tuple(device_mesh.axis_names)}: Keras cannot split the batch along it.",
                 answer=f"The batch goes along the mesh's first axis: batch_dim_name=device_mesh.axis_names[0] "
                        f"({batch_axis!r} here).")
    elif distribution.batch_dim_name != batch_axis:
        fb.wrong(f"batch_dim_name={distribution.batch_dim_name!r} splits the batch along the mesh axis meant for the "
                 f"weights; the first axis, {batch_axis!r}, is the one for the batch.",
                 answer="batch_dim_name=device_mesh.axis_names[0]")
    else:
        fb.right(f"ModelParallel on the given mesh, the batch split along {batch_axis!r}")
        return True
    return False


def _layout_problems(layout_map, paths_and_shapes, mesh):
    """What keeps Keras from placing the weights under ``layout_map`` (as the installed Keras matches keys)."""
    sizes = dict(zip(mesh.axis_names, mesh.shape))
    problems = []
    for path, shape in paths_and_shapes.items():
        try:
            layout = layout_map[path]
        except (ValueError, re.error):
            continue  # several keys, or a key that is no pattern: the keys' check names them
        if layout is None:
            continue
        axes = tuple(layout.axes)
        unknown = [axis for axis in axes if axis is not None and axis not in sizes]
        if unknown:
            problems.append(f"{path!r} gets {axes}: {unknown} {'is' if len(unknown) == 1 else 'are'} not an axis of "
                            f"the mesh {tuple(mesh.axis_names)}")
        elif len(axes) > len(shape):
            problems.append(f"{path!r} gets {len(axes)} axes {axes} but has {len(shape)}")
        else:
            for size, axis in zip(shape, axes):
                if axis is not None and size % sizes[axis]:
                    problems.append(f"{path!r} has {size} entries along an axis that {axes} splits over {axis!r}, "
                                    f"which has {sizes[axis]} devices: the size must divide the entries")
    return problems


def _in_tf_keras_form_for(key, paths):
    """Whether ``key`` is written the tf_keras way ('d1.kernel': a dot, no '/') and fits no Keras 3 path as a whole."""
    try:
        return ("/" not in key and re.search(r"\.\*?(kernel|bias)$", key) is not None
                and not any(re.fullmatch(key, path) for path in paths))
    except re.error:
        return False


def _grade_keys(fb, layout_map, paths, problems):
    """Whether every key matches weights, the same ones under re.search (Keras 3.13) and re.fullmatch (Keras 3.15),
    and gives them layouts Keras can place (``problems``, from :func:`_layout_problems`)."""
    keys = list(layout_map)
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
        parts.insert(0, f"{old_form} {'is' if len(old_form) == 1 else 'are'} in tf_keras' form ('d1.kernel'): Keras 3 "
                        f"matches keys against variable.path, which uses '/' and starts with the model's name.")
    if dead:
        parts.append(f"{dead} match{'es' if len(dead) == 1 else ''} no weight: the weights you meant to split stay "
                     f"whole, silently.")
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
        fb.wrong(f"The LayoutMap does not place the weights as you meant. {' '.join(parts)} The weights' paths are "
                 f"{list(paths)}.",
                 answer="Write one key per weight you split, for its whole path, e.g. re.escape(weight.path) "
                        "(re.search and re.fullmatch then agree on it), with one entry per axis of the weight.")
    else:
        fb.right("every key matches weights, the same ones under re.search (Keras 3.13) and re.fullmatch (Keras 3.15)")


def _grade_budget(fb, measured, budget):
    held, per_weight, whole = measured
    worst = max(held, key=held.get)
    if len(held) == 1 and held[worst] > budget:
        fb.wrong(f"Every weight is on device {worst} alone ({held[worst]} bytes, budget {budget}): a model built "
                 f"outside the distribution is not on the mesh.")
    elif held[worst] <= budget:
        fb.right(f"every device holds at most {held[worst]} bytes of weights (budget {budget}), read from the shards",
                 points=2)
        return
    if len(held) == 1:
        return
    pieces = ", ".join(f"{path} {nbytes} of {whole[path]}"
                       for path, nbytes in sorted(per_weight[worst].items(), key=lambda item: -item[1]))
    if all(per_weight[worst][path] == whole[path] for path in whole) and len(held) > 1:
        fb.wrong(f"Every device holds every weight whole ({held[worst]} bytes, budget {budget}): nothing is split.")
    else:
        fb.wrong(f"Device {worst} holds {held[worst]} bytes of weights, over the budget of {budget}. Bytes of each "
                 f"weight on it: {pieces}.",
                 answer="Split the biggest weights that are still whole, or split them more ways, until the sum "
                        "fits.")


def _reads_probabilities(model):
    """Whether the model was compiled with a cross-entropy that reads outputs as probabilities (from_logits=False)."""
    loss = getattr(model, "loss", None)
    if isinstance(loss, str):
        return "crossentropy" in loss  # Keras' string losses take probabilities
    try:
        return loss.get_config().get("from_logits") is False
    except Exception:
        return False


def _grade_step(fb, model, loss, values, images, labels):
    import numpy as np

    want, gradients = _numpy_step(values, images, labels)
    try:
        got = _loss_number(loss)
    except Exception as err:
        fb.wrong(f"The loss {type(loss).__name__} is not a number ({short_error(err)}): return the loss of the step "
                 f"(fit's History or train_on_batch's result).")
        return
    after = {weight.path: np.asarray(weight.value, dtype="float64") for weight in model.trainable_weights}
    changes = {path: after[path] - values[path] for path in after}
    try:
        steps = int(np.asarray(model.optimizer.iterations.value))
    except Exception:  # not compiled: no optimizer, no steps
        steps = 0
    unchanged = sorted(path for path, change in changes.items() if not np.any(change))
    uphill = sorted(path for path, change in changes.items()
                    if np.any(change) and float(np.sum(change * gradients[path])) >= 0)
    same_loss = abs(got - want) <= 1e-4 * max(1.0, abs(want))
    if steps > 1:
        fb.wrong(f"The optimizer ran {steps} steps, not one: fit without batch_size cuts the {len(images)} examples "
                 f"into batches of 32.",
                 answer="One step on the whole batch: fit(images, labels, batch_size=len(images), epochs=1).")
    elif len(unchanged) == len(changes):
        fb.wrong("The weights did not change: train_one_step ran no training step on the model it returned.")
    elif _reads_probabilities(model):
        fb.wrong("The model was compiled with a cross-entropy that reads its outputs as probabilities "
                 "(from_logits=False), but its last Dense layer gives logits: the loss and its gradients are not the "
                 "cross-entropy of the logits.",
                 answer="loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)")
    elif same_loss and not unchanged and not uphill:
        fb.right(f"one training step: its loss {got:.6f} equals the checker's NumPy loss from the same weights and "
                 f"batch ({want:.6f}), and every weight moved downhill")
    elif same_loss:
        fb.wrong(f"The loss is right, but one step should move every weight downhill; {unchanged + uphill} did not.")
    elif abs(got - _numpy_step(after, images, labels)[0]) <= 1e-4 * max(1.0, abs(want)):
        fb.wrong("That is the loss of the weights after the step (evaluate runs after training): return the loss "
                 "the step itself computed, at the starting weights.")
    else:
        fb.wrong(f"The loss {got:.6f} is not the mean cross-entropy of the logits on the whole batch at the starting "
                 f"weights (the checker's NumPy gives another number).",
                 answer=f"The checker's NumPy loss is {want:.6f}: return the loss the training step reports.")


class BudgetStep(Exercise):
    title = "Fit a budget, train one step, check the loss"
    points = 5
    hints = (
        "Call make_model() once outside any distribution and print each weight's path, shape and value.nbytes: which "
        "weights must be split, over the mesh's second axis, for one device's share to fit budget_bytes? That is "
        "exercise 3's arithmetic and exercise 2's keys, for a model you only meet inside the function.",
        "Keys: one per weight you split, a pattern for its whole path (re.escape(weight.path) means the same under "
        "re.search and re.fullmatch); value: a tuple with device_mesh.axis_names[1] on an axis whose size that mesh "
        "axis divides, None elsewhere. Then kd.ModelParallel(layout_map=..., batch_dim_name=device_mesh.axis_names[0]) "
        "and, inside its scope(): model = make_model(), compile, then one step: fit(images, labels, "
        "batch_size=len(images), epochs=1); its History holds the loss.",
        "The heart of it: for weight in sorted(probe.weights, key=lambda w: w.value.nbytes, reverse=True): while the "
        "bytes per device are over the budget, set layout_map[re.escape(weight.path)] = (None, ..., model_axis, ...) "
        "on an axis it divides, and count that weight as value.nbytes // ways. Return model, "
        "history.history['loss'][0].",
    )

    def unanswered(self, answer):
        """The placeholder, or the hand-out's function whose body is still ``return ...`` (no names, no locals)."""
        code = getattr(answer, "__code__", None)
        if code is not None:
            return not code.co_names and code.co_nlocals == code.co_argcount and Ellipsis in code.co_consts
        return super().unanswered(answer)

    def grade(self, train_one_step):
        fb = Feedback()
        if not callable(train_one_step):
            fb.wrong("train_one_step should be a function (make_model, device_mesh, budget_bytes, images, labels) "
                     "-> (model, loss).")
            return fb
        import keras
        from keras import distribution as kd

        devices = kd.list_devices()
        if keras.backend.backend() != "jax" or len(devices) < 8:
            fb.wrong(f"Keras runs on {keras.backend.backend()} with {len(devices)} device(s); this exercise needs JAX "
                     f"with 8: restart the kernel and run the set-up cell first.")
            return fb
        device_mesh = kd.DeviceMesh(shape=BUDGET_MESH[0], axis_names=BUDGET_MESH[1], devices=devices[:8])
        values, images, labels = _budget_case()
        make_model = _ModelMaker(values)
        outcome = _call_with_time_limit(train_one_step, (make_model, device_mesh, BUDGET_BYTES, images, labels),
                                        BUDGET_SECONDS)
        returned = outcome.get("value")
        if returned is Ellipsis and not make_model.builds:
            fb.wrong("train_one_step still returns the placeholder `...`: write its body.")
            return fb
        stuck = (f"train_one_step did not return within {BUDGET_SECONDS} s: the devices' all-reduce is probably "
                 f"stuck (a problem of some jax versions on CPUs with few cores; the chapter's guard explains it). "
                 f"Restart the kernel, install the jax the course pins and try again.")
        if outcome.get("timeout") and not make_model.builds:
            fb.wrong(stuck)
            return fb
        model = loss = None
        if isinstance(returned, tuple) and len(returned) == 2:
            model, loss = returned
        built = [build for build in make_model.builds if build["model"] is not None or build["distribution"]]
        build = next((b for b in make_model.builds if model is not None and b["model"] is model), None)
        if build is None:  # the function failed, or returned something else: judge the last build on a mesh
            build = next((b for b in reversed(built) if b["distribution"] is not None), built[-1] if built else None)
        distribution = build["distribution"] if build else None

        _grade_distribution(fb, build, device_mesh)
        layout_map = getattr(distribution, "_layout_map", None) if isinstance(distribution, kd.ModelParallel) else None
        measured = None
        if build is not None and build["model"] is not None:
            try:  # what the devices hold now, after the step
                measured = _bytes_held(build["model"])
            except Exception:  # a step that failed half-way can leave Keras variables without values
                measured = build["held"]
        if measured is not None:
            _grade_budget(fb, measured, BUDGET_BYTES)
        elif build is not None:
            fb.wrong("Each device's bytes: not measured, make_model() could not build the model on the mesh"
                     + (" (see the LayoutMap below)." if layout_map is not None else "."))
        if layout_map is not None:
            shapes = {path: value.shape for path, value in values.items()}
            _grade_keys(fb, layout_map, list(values), _layout_problems(layout_map, shapes, distribution.device_mesh))
        elif build is not None:
            fb.wrong("The LayoutMap: none to check without a ModelParallel distribution.")

        if outcome.get("timeout"):
            fb.wrong(stuck)
        elif "error" in outcome:
            error = outcome["error"]
            keras_313 = (isinstance(error, AttributeError)
                         and "'NoneType' object has no attribute 'shape'" in str(error)
                         and build is not None and build["distribution"] is not None)
            fb.wrong(f"train_one_step raised {short_error(error)}. "
                     + ("Keras 3.13's train_on_batch fails like this under a distribution (it tries to place the "
                        "sample_weight you did not give): run the step with fit(images, labels, "
                        "batch_size=len(images), epochs=1) instead." if keras_313 else
                        f"The checker calls it as train_one_step(make_model, device_mesh, {BUDGET_BYTES}, images, "
                        f"labels) with a {tuple(device_mesh.shape)} mesh with axes {tuple(device_mesh.axis_names)} and "
                        f"a batch of {BUDGET_BATCH}."))
        elif model is None:
            fb.wrong(f"train_one_step returned {type(returned).__name__}; return two things: model, loss.")
        elif not any(b["model"] is model for b in make_model.builds):
            fb.wrong("Return the model first, then the loss: return model, loss."
                     if any(b["model"] is loss for b in make_model.builds) else
                     "The model returned is not one that make_model() built: return the model you trained.")
        else:
            _grade_step(fb, model, loss, values, images, labels)
        return fb
