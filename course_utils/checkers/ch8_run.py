"""Chapter 8 · the learner's side of exercise 4 (and of exercise 2's keys): run the learner's training step
on the checker's model, and describe as plain data what Keras made of it.

Everything here runs where the answer lives (the learner's kernel, or a graded run's sandbox), inside
``collect``: it reads, it never decides. Keras is imported inside the functions that need it.
"""
import re

from .answers import short_error


def key_text(key):
    """A LayoutMap key as the grader reads it: a compiled pattern as its text, anything else as it is."""
    return key.pattern if isinstance(key, re.Pattern) else key


class _ModelMaker:
    """``make_model`` for the learner's function: the checker's model with the checker's starting weights.

    Each call notes the Keras distribution it ran under (before building, so that a layout Keras
    cannot place is still seen) and the model it built; the checker's own probes (``noted=False``) are not noted.
    """

    def __init__(self, values, model_name, input_shape, layers):
        self.values, self.builds = values, []
        self.model_name, self.input_shape, self.layers = model_name, input_shape, layers

    def __call__(self, noted=True):
        import keras
        from keras import distribution as kd

        build = {"distribution": kd.distribution(), "model": None, "held": None, "calls": []}
        if noted:
            self.builds.append(build)
        model = keras.Sequential(  # zeros, then the checker's values: no random initializer to compile per shape
            [keras.Input(self.input_shape), keras.layers.Flatten()]
            + [keras.layers.Dense(units, activation=activation, name=name, kernel_initializer="zeros")
               for name, units, activation in self.layers],
            name=self.model_name)
        for weight in model.weights:
            weight.assign(self.values[weight.path])
        if not noted:
            return model
        for method in ("fit", "train_on_batch"):  # each call's arguments are noted, so that feedback can name them
            object.__setattr__(model, method, _noting_calls(getattr(model, method), method, build["calls"]))
        build["model"] = model
        try:
            build["held"] = _bytes_held(model)  # as built: a step that fails half-way can leave no values to read
        except Exception:
            pass
        return model


FIT_ARGUMENTS = ("x", "y", "batch_size", "epochs")  # Model.fit's first positional parameters


def _whole_number(value):
    """``value`` as an int when it is a whole number (a NumPy one too), else None."""
    import numbers

    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else None


def _noting_calls(method, name, calls):
    """``method`` (a model's ``fit`` or ``train_on_batch``), noting each call in ``calls`` as plain data first:
    ``{"method", "examples"}`` and, for ``fit``, ``"batch_size"``, ``"epochs"`` and ``"steps_per_epoch"`` as given
    (None when left out)."""
    def noted(*args, **kwargs):
        given = dict(zip(FIT_ARGUMENTS, args), **kwargs)
        note = {"method": name, "examples": len(given["x"]) if hasattr(given.get("x"), "__len__") else None}
        if name == "fit":
            note.update({key: _whole_number(given.get(key)) for key in ("batch_size", "epochs", "steps_per_epoch")})
        calls.append(note)
        return method(*args, **kwargs)

    return noted


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


def describe_distribution(distribution, paths):
    """A Keras distribution as plain data: None, or ``{"kind": "ModelParallel" | "DataParallel" | "other",
    "type": its type's name}`` and, for ModelParallel, ``"mesh"`` (shape, axis names, device ids),
    ``"batch_dim_name"`` and ``"layout_map"``: ``{"keys": [...], "lookup": {path: what the installed
    Keras's lookup gives: a tuple of axes, None, or "raised"}}`` (None when it has no map)."""
    if distribution is None:
        return None
    from keras import distribution as kd

    kind = ("DataParallel" if isinstance(distribution, kd.DataParallel) else
            "ModelParallel" if isinstance(distribution, kd.ModelParallel) else "other")
    described = {"kind": kind, "type": type(distribution).__name__}
    if kind != "ModelParallel":
        return described
    mesh = distribution.device_mesh
    described.update(mesh={"shape": tuple(mesh.shape), "axis_names": tuple(mesh.axis_names),
                           "devices": _device_ids(mesh)},
                     batch_dim_name=distribution.batch_dim_name, layout_map=None)
    layout_map = getattr(distribution, "_layout_map", None)
    if layout_map is not None:
        lookup = {}
        for path in paths:
            try:
                layout = layout_map[path]
            except (ValueError, re.error):  # several keys, or a key that is no pattern
                lookup[path] = "raised"
                continue
            lookup[path] = None if layout is None else tuple(layout.axes)
        described["layout_map"] = {"keys": [key_text(key) for key in list(layout_map)], "lookup": lookup}
    return described


def _loss_setting(model):
    """The loss a model was compiled with: ``{"name": ...}`` for a string, ``{"from_logits": ...}`` from its
    config, or ``{}`` (not compiled, or no config)."""
    loss = getattr(model, "loss", None)
    if isinstance(loss, str):
        return {"name": loss}
    try:
        return {"from_logits": loss.get_config().get("from_logits")}
    except Exception:
        return {}


def describe_step(model, loss):
    """The step's outcome as plain data: ``"loss_type"``, and ``"loss"`` (a float) or ``"loss_error"``;
    with a loss, ``"after"`` (``{path: array}`` of the trainable weights now), ``"steps"`` (the optimizer's
    iterations, None if it has none) and ``"loss_setting"`` (:func:`_loss_setting`)."""
    import numpy as np

    step = {"loss_type": type(loss).__name__}
    try:
        step["loss"] = _loss_number(loss)
    except Exception as err:
        step["loss_error"] = short_error(err)
        return step
    step["after"] = {weight.path: np.asarray(weight.value) for weight in model.trainable_weights}
    try:
        step["steps"] = int(np.asarray(model.optimizer.iterations.value))
    except Exception:  # not compiled: no optimizer
        step["steps"] = None
    step["loss_setting"] = _loss_setting(model)
    return step


def describe_builds(builds, paths):
    """Each model ``make_model()`` began to build: ``{"built": bool, "distribution":
    :func:`describe_distribution`, "held": what its devices hold now (:func:`_bytes_held`), else as
    built, else None, "calls": its fit and train_on_batch calls (:func:`_noting_calls`)}``."""
    described = []
    for build in builds:
        held = None
        if build["model"] is not None:
            try:  # what the devices hold now, after the step
                held = _bytes_held(build["model"])
            except Exception:  # a step that failed half-way can leave Keras variables without values
                held = build["held"]
        described.append({"built": build["model"] is not None, "held": held, "calls": list(build["calls"]),
                          "distribution": describe_distribution(build["distribution"], paths)})
    return described
