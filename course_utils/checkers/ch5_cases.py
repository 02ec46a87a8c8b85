"""Chapter 5 · exercise 6's cases, and the run of a learner's ``build_on_mesh`` on them (the collecting side).

:func:`collect_build_case` builds, steps and measures one case in the learner's kernel and returns what it
found as plain data; ``ch5_build.BuildOnMesh.judge`` judges it.
"""
from .answers import global_numpy, layout_of, short_error

BUILD_RATE = 1e-3  # the exercise's LEARNING_RATE
ADAM_BETAS, ADAM_EPSILON = (0.9, 0.999), 1e-7  # tf_keras' Adam defaults
BUILD_NAMES = ("d1.kernel", "d1.bias", "d2.kernel", "d2.bias")
BUILD_CASES = (  # the mesh (batch, model), the hidden width, the global batch, the budget per device, a seed;
    # no one placement of exercise 5's table, and no rule that takes the first that fits in some order of the table
    # (its own, the reverse, least held first, most held first), is right in every case (tests/checkers/test_ch5.py)
    # 784 rows do not divide by 3: nothing can split d1.kernel's rows over 'batch' (FSDP-style, 2-D); only tensor
    # parallelism fits (305 408 B; data parallel 610 688 B).
    {"mesh": (3, 2), "hidden": 64, "batch": 12, "budget": 400 * 2**10, "seed": 11},
    # 30 units do not divide by 4: nothing can split them over 'model' (tensor parallel, 2-D); only FSDP-style fits
    # (145 208 B; data parallel 286 328 B). No one placement passes both cases.
    {"mesh": (2, 4), "hidden": 30, "batch": 16, "budget": 200 * 2**10, "seed": 12},
    # A roomy budget: data parallel (238 628 B) and FSDP-style (62 228 B) fit; 25 units do not divide by 2, so
    # nothing splits them over 'model'. Data parallel sends the fewest bytes per step: the budget asks for no split.
    # Its second step alone runs under the profiler (each trace takes a while): a check stays within a few seconds.
    {"mesh": (4, 2), "hidden": 25, "batch": 8, "budget": 512 * 2**10, "seed": 13, "measure": True},
    # Data parallel (305 408 B) misses the budget; FSDP-style (154 880 B), tensor parallel (152 768 B) and 2-D
    # (77 504 B) fit, and tensor parallel sends the fewest bytes (50 976 B; 2-D 101 152, FSDP-style 201 984): the
    # first that fits in the table's order, and the one that holds the most or the least, send more.
    {"mesh": (2, 2), "hidden": 32, "batch": 8, "budget": 200 * 2**10, "seed": 14},
)
COMBINING = "DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION"


def _build_mesh(shape):
    """A batch x model mesh of ``shape`` on this process's first logical CPUs."""
    from .answers import mesh_on_first_cpus

    return mesh_on_first_cpus([("batch", shape[0]), ("model", shape[1])])


def build_case(case, seed=0):
    """The starting weights (NumPy), two batches and the budget of one of the checker's cases, drawn from ``seed``."""
    import numpy as np

    rng = np.random.default_rng([case["seed"], seed])
    hidden = case["hidden"]
    weights = {"d1.kernel": rng.normal(0, 0.05, (784, hidden)), "d1.bias": rng.normal(0, 0.05, hidden),
               "d2.kernel": rng.normal(0, 0.1, (hidden, 10)), "d2.bias": rng.normal(0, 0.1, 10)}
    weights = {name: value.astype("float32") for name, value in weights.items()}
    batches = [(rng.random((case["batch"], 28, 28, 1), dtype="float32"),
                rng.integers(0, 10, case["batch"]).astype("int64")) for _ in range(2)]
    return weights, batches


def _adam_slots(optimizer, variable):
    """tf_keras' Adam slots (m, v) of ``variable``, or None."""
    try:
        index = optimizer._index_dict[optimizer._var_key(variable)]
        return optimizer._momentums[index], optimizer._velocities[index]
    except (AttributeError, KeyError, IndexError, TypeError):
        return None


def collect_build_case(build_on_mesh, case, seed):
    """Build, step and measure one case; what was found, as plain data (nothing is judged here).

    A dict with ``mesh`` (the Mesh passed) and, as far as the learner's code let it go: ``build_error``, or
    ``triple`` False, or ``shapes``, ``dtypes`` and ``layouts`` of the model's trainable variables,
    ``optimizer_mesh`` (the optimizer's ``_mesh``), then ``step_error`` or ``loss`` (as step returned it),
    ``held`` and ``in_weights`` (``bytes_per_device`` of the model and optimizer, and of the model) or
    ``bytes_error``, ``after`` (each variable's global value after the step), ``slots`` (Adam's m and v of
    each, or None), ``iterations``, and ``second_error`` or, for a case that says ``measure``, ``runs`` ((kind,
    axes, tensor bytes) of each collective of the second step; the other cases run it unprofiled).
    """
    from ..memory import bytes_per_device
    from ..profiling import collectives_run_by

    mesh = _build_mesh(case["mesh"])
    weights, ((images, labels), (more_images, more_labels)) = build_case(case, seed)
    found = {"mesh": mesh}
    try:
        built = build_on_mesh(mesh, {name: value.copy() for name, value in weights.items()}, case["budget"])
    except Exception as err:
        found["build_error"] = short_error(err)
        return found
    found["triple"] = isinstance(built, (tuple, list)) and len(built) == 3 and callable(built[2])
    if not found["triple"]:
        return found
    model, optimizer, step = built
    variables = list(getattr(model, "trainable_variables", None) or [])
    found.update(shapes=[tuple(v.shape) for v in variables], dtypes=[v.dtype for v in variables],
                 layouts=[layout_of(v) for v in variables], optimizer_mesh=getattr(optimizer, "_mesh", None))
    try:
        found["loss"] = step(images.copy(), labels.copy())
    except Exception as err:
        found["step_error"] = short_error(err)
        return found
    try:
        found.update(held=bytes_per_device([model, optimizer]), in_weights=bytes_per_device(model))
    except (TypeError, ValueError) as err:
        found["bytes_error"] = short_error(err)
    found["after"] = [global_numpy(variable) for variable in variables]
    found["slots"] = [None if pair is None else [global_numpy(s) for s in pair]
                      for pair in (_adam_slots(optimizer, variable) for variable in variables)]
    iterations = getattr(optimizer, "iterations", None)
    found["iterations"] = None if iterations is None else global_numpy(iterations)
    try:
        if case.get("measure"):
            runs = collectives_run_by(lambda: step(more_images.copy(), more_labels.copy()))
            found["runs"] = [(run.kind, tuple(run.axes), run.tensor_bytes) for run in runs]
        else:
            global_numpy(step(more_images.copy(), more_labels.copy()))  # waits for every device
    except Exception as err:
        found["second_error"] = short_error(err)
    return found
