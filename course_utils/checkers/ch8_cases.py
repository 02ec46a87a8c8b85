"""Chapter 8 · exercise 4's cases, and the run of a learner's ``train_one_step`` on them (the collecting side).

:func:`collect_case` calls the learner's function with Keras on JAX (its helpers are in ``ch8_run.py``), prices the
placement it chose from the compiled step (``ch8_sent.py``) and returns what it found as plain data;
``ch8_build.BudgetStep.judge`` judges it.
"""
import copy
import math

from .answers import short_error
from .ch8_run import _ModelMaker, _call_with_time_limit, _device_ids, describe_builds, describe_step
from .ch8_sent import step_collectives


BUDGET_MODEL = "tower"
BUDGET_INPUT = (10, 10, 1)
BUDGET_LAYERS = (("h1", 96, "relu"), ("out", 10, None))  # Dense layers: name, units, activation (two: compiled fast)
BUDGET_MESH = ((2, 4), ("data", "model"))  # the first axis splits the batch
BUDGET_BYTES = 12_000  # whole: 42 664 bytes; h1's kernel split 4 ways: 13 864; both kernels split: 10 984
BUDGET_BATCH = 48  # more than fit's default batch of 32: fit without batch_size runs two steps
BUDGET_SECONDS = 60  # the learner's call: a stuck all-reduce (some jax versions, few cores) becomes a hint
TIGHT = {"model": BUDGET_MODEL, "input": BUDGET_INPUT, "layers": BUDGET_LAYERS, "mesh": BUDGET_MESH,
         "bytes": BUDGET_BYTES, "batch": BUDGET_BATCH}
# Issue 37: a second case, run once the first returns, whose budget the whole model fits (4 552 bytes): the budget is
# a decision, and splitting nothing is its answer here: with 512 examples, 128 per group, every split sends more bytes
# per step than none (what it adds over 'cols' or 'rows' outweighs the gradient bytes it saves; test_ch8.py measures).
# Another model, mesh, axis names and batch.
ROOMY = {"model": "stack", "input": (6, 6, 1), "layers": (("s1", 24, "relu"), ("s2", 10, None)),
         "mesh": ((4, 2), ("rows", "cols")), "bytes": 20_000, "batch": 512}
# A third case, run once the second returns: the second's model, mesh and budget with 16 examples, 4 per group. The
# whole model still fits, but now a split sends fewer bytes than none (the chapter's pair 3 610 B, nothing split
# 6 834 B: the logits it adds up are small, the gradients it no longer adds up are not), so that only a priced choice
# passes all three (not "nothing if it fits, else the pair", nor "always the pair", nor "always nothing").
FEW = {**ROOMY, "batch": 16}
_SENT = {}  # the collectives measured per case and placement in this process: a check run again compiles nothing


def budget_case(seed=0, case=TIGHT):
    """The starting weights ``{path: array}`` and a batch (images, labels) for one case of exercise 4 (:data:`TIGHT`,
    :data:`ROOMY` or :data:`FEW`), drawn from ``seed`` (NumPy, float32)."""
    import numpy as np

    rng = np.random.default_rng(seed if case is TIGHT else [seed, 4] if case is ROOMY else [seed, 5])
    values, fan_in = {}, math.prod(case["input"])
    for name, units, _ in case["layers"]:
        values[f"{case['model']}/{name}/kernel"] = rng.normal(0, fan_in ** -0.5, (fan_in, units)).astype("float32")
        values[f"{case['model']}/{name}/bias"] = rng.normal(0, 0.1, units).astype("float32")
        fan_in = units
    images = rng.random((case["batch"], *case["input"]), dtype=np.float32)
    return values, images, rng.integers(0, case["layers"][-1][1], case["batch"]).astype("int32")


def collect_case(train_one_step, devices, case, seed):
    """Call ``train_one_step`` on one case (a time limit of ``BUDGET_SECONDS``) and describe what it did: the keys
    :meth:`.ch8_build.BudgetStep.collect` lists, as plain data."""
    from keras import distribution as kd

    device_mesh = kd.DeviceMesh(shape=case["mesh"][0], axis_names=case["mesh"][1], devices=devices[:8])
    values, images, labels = budget_case(seed, case)
    make_model = _ModelMaker(values, case["model"], case["input"], case["layers"])
    outcome = _call_with_time_limit(train_one_step, (make_model, device_mesh, case["bytes"], images, labels),
                                    BUDGET_SECONDS)
    builds = list(make_model.builds)
    returned = outcome.get("value")
    pair = isinstance(returned, tuple) and len(returned) == 2

    def build_of(value):
        return next((index for index, build in enumerate(builds) if value is not None and build["model"] is value),
                    None)

    data = {"mesh_devices": _device_ids(device_mesh),
            "outcome": "timeout" if outcome.get("timeout") else "error" if "error" in outcome else "value",
            "returned": {"type": type(returned).__name__, "ellipsis": returned is Ellipsis, "pair": pair,
                         "model_is_none": pair and returned[0] is None,
                         "model_build": build_of(returned[0]) if pair else None,
                         "loss_build": build_of(returned[1]) if pair else None},
            "builds": describe_builds(builds, list(values)), "step": None,
            "sent": _measure_sent(make_model, builds, build_of(returned[0]) if pair else None, images, labels,
                                  split_only=case is ROOMY)}
    if "error" in outcome:
        error = outcome["error"]
        data.update(error=short_error(error), attribute_error=isinstance(error, AttributeError))
    elif data["outcome"] == "value" and data["returned"]["model_build"] is not None:
        data["step"] = describe_step(*returned)
    return data


def _measure_sent(make_model, builds, returned_build, images, labels, split_only=False):
    """Per build of ``builds``: the collectives of one compiled step (:func:`.ch8_sent.step_collectives`) under its
    distribution (a ModelParallel's layouts with the batch along the mesh's first axis, as the exercise asks, so
    that a wrong batch_dim_name is told once), for the build the judge reads (the model returned, else the last
    built under a distribution); None for the others, or the error's text where Keras or JAX could not place it.
    With ``split_only`` (the roomy case, whose feedback prices only a split), a model with every weight whole on
    every device is not compiled again (a compile takes a second or two)."""
    sent = [None] * len(builds)
    placed = [index for index, build in enumerate(builds) if build["distribution"] is not None]
    index = returned_build if returned_build is not None and returned_build in placed else (
        placed[-1] if placed else None)
    if index is not None and split_only:
        model = builds[index]["model"]
        try:
            whole = all(shard.data.nbytes == weight.value.nbytes for weight in model.weights
                        for shard in weight.value.addressable_shards)
        except Exception:
            whole = False
        index = None if whole else index
    if index is not None:
        from keras import distribution as kd

        distribution = builds[index]["distribution"]
        if isinstance(distribution, kd.ModelParallel):  # the placement's price: the batch along the first axis
            distribution = kd.ModelParallel(layout_map=distribution._layout_map,
                                            batch_dim_name=distribution.device_mesh.axis_names[0])
        sent[index] = _collectives_once(make_model, distribution, images.shape, labels.shape)
    return sent


def _collectives_once(make_model, distribution, images_shape, labels_shape):
    """:func:`.ch8_sent.step_collectives` (or the error's text), measured once per process for each model and
    ModelParallel distribution: the same mesh, batch axis and LayoutMap (its keys and layouts as written) place every
    variable the same way, whatever the starting weights."""
    from keras import distribution as kd

    key = None
    if isinstance(distribution, kd.ModelParallel):
        try:
            mesh = distribution.device_mesh
            key = repr((make_model.model_name, make_model.input_shape, make_model.layers, tuple(images_shape),
                        tuple(labels_shape), tuple(mesh.shape), tuple(mesh.axis_names), _device_ids(mesh),
                        distribution.batch_dim_name,
                        [(repr(pattern), getattr(layout, "axes", layout))
                         for pattern, layout in distribution._layout_map._layout_map.items()]))
        except Exception:  # a map Keras could not read back: measured every time
            key = None
    if key in _SENT:
        return copy.deepcopy(_SENT[key])
    try:
        found = step_collectives(make_model, distribution, images_shape, labels_shape)
    except Exception as err:
        found = short_error(err)
    if key is not None:
        _SENT[key] = copy.deepcopy(found)
    return found
