"""Chapter 5 · DTensor with Keras (tf_keras): the exercises' graders and hints."""
import math
import os
import re
import sys

from .answers import (UNSHARDED, as_bytes, as_float, checker_mesh, close, global_numpy, grade_items, layout_of,
                      mesh_dims, quiet_tensorflow, short_error, specs)
from ..costs import matmul_cost
from ..meshes import mesh_text
from .core import Exercise, Feedback, chapter


def _keras_seed_generator():
    """tf_keras' thread-local seed holder, if tf_keras is loaded (it is what the DTensor seed check reads)."""
    backend = sys.modules.get("tf_keras.src.backend")
    return getattr(backend, "_SEED_GENERATOR", None)


def _variable_layout(variable):
    return layout_of(variable.read_value() if hasattr(variable, "read_value") else variable)


class Seeds(Exercise):
    title = "Seeds for DTensor-aware layers"
    points = 2
    hints = (
        "What does tf_keras ask for before it initialises a DTensor layer, and why must every client do the same?",
        "tf_keras refuses to initialise a DTensor layer without a global seed, because every client must draw the "
        "same 'replicated' weights. Set it inside the function, with the seed you are given.",
    )

    def grade(self, init_kernel):
        import numpy as np

        fb = Feedback()
        if not callable(init_kernel):
            fb.wrong(f"init_kernel should be a function seed -> kernel, got {type(init_kernel).__name__}.")
            return fb
        holder = _keras_seed_generator()
        saved = getattr(holder, "generator", None) if holder is not None else None
        try:
            if holder is not None:
                holder.generator = None  # as in a fresh process: only a seed set inside init_kernel counts
            kernels = [init_kernel(seed) for seed in (7, 7, 8)]
        except Exception as err:
            message = short_error(err)
            if "global seed" in message:
                fb.wrong(f"init_kernel raised {message}. In a fresh process (as on every client of a DTensor job) no "
                         f"seed is set.", answer="Call tf.keras.utils.set_random_seed(seed) inside init_kernel, "
                                                 "before creating the layer.")
            else:
                fb.wrong(f"init_kernel raised {message}")
            return fb
        finally:
            if holder is not None and getattr(holder, "generator", None) is None:
                holder.generator = saved
        if any(_variable_layout(k) is None for k in kernels):
            fb.wrong("init_kernel should return the layer's kernel as a DTensor (a DVariable): create the Dense layer "
                     "with kernel_layout=... on the mesh and return layer.kernel.")
            return fb
        values = [global_numpy(k) for k in kernels]
        if not np.array_equal(values[0], values[1]):
            fb.wrong("Two calls with the same seed gave different kernels: every client must build identical "
                     "'replicated' weights, or they silently differ.",
                     answer="Set the seed inside init_kernel with tf.keras.utils.set_random_seed(seed) right before "
                            "building the layer.")
            return fb
        fb.right("the same seed gives the same kernel")
        if np.array_equal(values[0], values[2]):
            fb.wrong("seeds 7 and 8 gave the same kernel: use the seed argument.")
        else:
            fb.right("another seed gives another kernel: every client that sets the same seed builds identical "
                     "replicated weights.")
        return fb


class ShardedDense(Exercise):
    title = "kernel_layout for model parallelism"
    points = 2
    hints = (
        "A Dense kernel has shape (inputs, units). Which axis holds the output units?",
        "Split the units (axis 1) over 'model'; the bias has one entry per unit, so it follows the kernel's columns.",
    )

    def grade(self, layer):
        fb = Feedback()
        try:
            kernel, bias = layer.kernel, layer.bias
        except AttributeError:
            fb.wrong("layer has no kernel/bias yet: pass the Dense layer itself, built with layer.build((None, 784)) "
                     "(or called once on a batch).")
            return fb
        if kernel is None or bias is None:
            fb.wrong("the layer needs a kernel and a bias (use_bias=True) and must be built.")
            return fb
        shape = tuple(kernel.shape)
        if shape != (784, 128):
            fb.wrong(f"the kernel's shape is {shape}; the exercise asks for Dense(128) on 784 inputs: (784, 128).")
        layout = _variable_layout(kernel)
        if layout is None:
            fb.wrong("the kernel is not a DTensor: pass kernel_layout=dtensor.Layout(...) to Dense (tf_keras, "
                     "TF_USE_LEGACY_KERAS=1).")
            return fb
        given = specs(layout)
        if "model" not in layout.mesh.dim_names:
            fb.wrong(f"the kernel lives on a mesh {mesh_text(mesh_dims(layout.mesh))} without a 'model' axis; use the "
                     f"batch x model mesh.")
            return fb
        if mesh_dims(layout.mesh) != mesh_dims(checker_mesh()):
            fb.wrong(f"the kernel lives on a mesh {mesh_text(mesh_dims(layout.mesh))}; the exercise's mesh is "
                     f"{mesh_text(mesh_dims(checker_mesh()))} (`mesh` in the notebook): with a 'batch' axis too, every "
                     f"weight is replicated over 'batch' while the data is split over it.")
            return fb
        if given == [UNSHARDED, "model"] and shape == (784, 128):
            fb.right(f"kernel {given}: each 'model' device holds all inputs and half of the 128 output units")
        elif given == ["model", UNSHARDED]:
            fb.wrong(f"kernel {given} splits the 784 INPUTS (rows). The exercise splits the output units.")
        elif "batch" in given:
            fb.wrong(f"kernel {given} uses 'batch', the axis that splits the DATA; weights are split over 'model' "
                     f"and replicated over 'batch'.")
        elif given == [UNSHARDED, UNSHARDED]:
            fb.wrong(f"kernel {given} is replicated: that is data parallelism.")
        elif shape == (784, 128):
            fb.wrong(f"kernel {given} does not split the output units over 'model'.")
        bias_layout = _variable_layout(bias)
        bias_specs = specs(bias_layout) if bias_layout is not None else None
        if bias_specs == ["model"]:
            fb.right("bias ['model']: each device holds the biases of its own output units")
        elif bias_specs == [UNSHARDED]:
            fb.wrong("bias is replicated. The bias has one entry per output unit, and the output units are split "
                     "over 'model'.", answer="Shard the bias the same way, bias_layout=Layout(['model'], mesh).")
        else:
            fb.wrong(f"bias layout {bias_specs} does not match the kernel's columns.")
        return fb


PATHS = {
    "hidden.kernel": [UNSHARDED, "model"],
    "hidden.bias": ["model"],
    "logits.kernel": ["model", UNSHARDED],
    "logits.bias": [UNSHARDED],
}


def layout_map_lookup(layout_map, path):
    """The layout tf_keras' LayoutMap gives ``path``: an exact key, else the first key that re.match-es."""
    if hasattr(layout_map, "_layout_map"):
        return layout_map[path]
    if path in layout_map:
        return layout_map[path]
    for key in layout_map:
        if isinstance(key, str) and re.match(key, path):
            return layout_map[key]
    return None


class LayoutMapKeys(Exercise):
    title = "LayoutMap regex keys"
    points = 4
    hints = (
        "How does tf_keras name a functional model's variables, and how does LayoutMap match a key against a name?",
        "tf_keras names them 'layer_name.attribute' (e.g. 'hidden.kernel') and looks a key up exactly, then as a "
        "regex with re.match, which anchors at the START.",
        "The hidden layer's outputs are split over 'model'; the logits layer receives them as its INPUTS.",
    )

    def grade(self, layout_map):
        from tensorflow.experimental import dtensor

        fb = Feedback()
        if not (hasattr(layout_map, "_layout_map") or isinstance(layout_map, dict)):
            fb.wrong(f"Give a tf.keras.dtensor.experimental.LayoutMap (or a dict of regex -> Layout), not a "
                     f"{type(layout_map).__name__}.")
            return fb
        keys = list(layout_map.keys())
        bad = [k for k in keys if not isinstance(k, str)]
        if bad:
            fb.wrong(f"LayoutMap keys are strings (regular expressions), got {bad!r}.")
            return fb
        for path, right in PATHS.items():
            try:
                layout = layout_map_lookup(layout_map, path)
            except re.error as err:
                fb.wrong(f"A key is not a valid regular expression: {err}.")
                fb.points = 0
                return fb
            given = specs(layout) if isinstance(layout, dtensor.Layout) else None
            if given is not None and mesh_dims(layout.mesh) != mesh_dims(checker_mesh()):
                fb.wrong(f"{path}: its layout lives on a mesh {mesh_text(mesh_dims(layout.mesh))}, not on the "
                         f"exercise's {mesh_text(mesh_dims(checker_mesh()))} (`mesh` in the notebook).")
                continue
            if given == right or (path == "logits.bias" and (layout is None or given == [UNSHARDED])):
                fb.right(f"{path}: {given or 'no key matches, so replicated'}")
            else:
                self._explain(fb, path, right, layout, given, keys)
        return fb

    @staticmethod
    def _explain(fb, path, right, layout, given, keys):
        matching = [k for k in keys if re.match(k, path)]
        searching = [k for k in keys if re.search(k, path) and k not in matching]
        if layout is None:
            if any("/" in k for k in keys):
                why = ("no key matches. tf_keras names the variable 'hidden.kernel' (layer name, a DOT, attribute), "
                       "not 'hidden/kernel' as in variable.name")
            elif searching:
                why = (f"no key matches: keys are matched with re.match, from the START of the path, so "
                       f"{searching[0]!r} does not match {path!r}; write the full path or start the key with '.*'")
            else:
                why = "no key matches, so this variable stays replicated"
            fb.wrong(f"{path}: {why}.", answer=f"It should be {right}.")
        elif given is not None and len(given) != len(right):
            layer = path.split(".")[0]
            fb.wrong(f"{path} gets a rank-{len(given)} layout {given} from key {matching[0] if matching else '?'!r}: "
                     f"that key also matches this variable (re.match matches prefixes). Give {layer}'s kernel and "
                     f"bias their own keys, e.g. '{layer}.kernel'.")
        elif path.startswith("logits") and matching and not matching[0].startswith("logits"):
            fb.wrong(f"{path} gets {given} from key {matching[0]!r}, meant for the hidden layer: that regex matches "
                     f"the logits layer too. Anchor it to the layer name.")
        elif path == "logits.kernel":
            fb.wrong(f"{path} gets {given}. The hidden layer's outputs (this layer's INPUTS, the rows) are split "
                     f"over 'model'.", answer="Split this kernel's rows the same way: ['model', UNSHARDED]. Then "
                                              "each device multiplies its half and one all-reduce sums the halves.")
        else:
            fb.wrong(f"{path} gets {given}.", answer=f"It should be {right}.")


class PackTrainingBatch(Exercise):
    title = "Pack a training batch onto the mesh"
    points = 2
    hints = (
        "Images and labels have different ranks. What does each need?",
        "Images (rank 4) and labels (rank 1) each need a batch-sharded layout of their own rank on the same "
        "batch x model mesh as the model.",
    )

    def grade(self, pack_fn):
        import numpy as np

        fb = Feedback()
        if not callable(pack_fn):
            fb.wrong("pack_fn should be a function (images, labels) -> (packed_images, packed_labels).")
            return fb
        rng = np.random.default_rng(1)
        images = rng.random((16, 28, 28, 1), dtype="float32")
        labels = rng.integers(0, 10, size=(16,)).astype("int64")
        try:
            result = pack_fn(images, labels)
        except Exception as err:
            message = short_error(err)
            if "rank" in message:
                fb.wrong(f"pack_fn raised {message}. Images have rank 4 and labels rank 1: each needs a layout of "
                         f"its own rank.", answer="e.g. Layout.batch_sharded(mesh, 'batch', rank=1) for the labels.")
            else:
                fb.wrong(f"pack_fn raised {message}")
            return fb
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            fb.wrong("pack_fn should return a pair (packed_images, packed_labels).")
            return fb
        for name, value, original, right in (("images", result[0], images, ["batch", UNSHARDED, UNSHARDED, UNSHARDED]),
                                             ("labels", result[1], labels, ["batch"])):
            layout = layout_of(value)
            if layout is None:
                fb.wrong(f"{name} is not a DTensor: pack it onto the mesh (pack_batch or dtensor.pack).")
                continue
            given = specs(layout)
            if "model" not in layout.mesh.dim_names:
                fb.wrong(f"{name} lives on a mesh {mesh_text(mesh_dims(layout.mesh))}; use the 2-D batch x model mesh, "
                         f"the one the model's weights live on.")
            elif given != right:
                if "model" in given:
                    why = ("'model' is the axis that splits WEIGHTS; examples are split over 'batch' and each batch "
                           "shard is replicated over 'model'")
                elif "batch" not in given:
                    why = "it is replicated: every device would train on the whole batch"
                else:
                    why = "shard axis 0 (the examples) over 'batch' and nothing else"
                fb.wrong(f"{name} layout {given}: {why}.", answer=f"Expected {right}.")
            elif not np.allclose(global_numpy(value), original):
                fb.wrong(f"{name}: the packed global value differs from the input batch; pack exactly the given tensor.")
            else:
                fb.right(f"{name}: {given}")
        return fb


# Exercise 5: Flatten -> Dense(2048, "d1") -> Dense(10, "d2") with Adam, a global batch of 128 on batch=4 x model=2.
BUDGET_MESH = {"batch": 4, "model": 2}
BUDGET_BATCH, BUDGET_HIDDEN = 128, 2048
BUDGET_BYTES = 10 * 2**20
BUDGET_SHAPES = {"d1.kernel": (784, BUDGET_HIDDEN), "d1.bias": (BUDGET_HIDDEN,),
                 "d2.kernel": (BUDGET_HIDDEN, 10), "d2.bias": (10,)}
BUDGET_PLACEMENTS = {  # specs of d1.kernel, d1.bias, d2.kernel, d2.bias: the chapter's four placements
    "data parallel": ([UNSHARDED, UNSHARDED], [UNSHARDED], [UNSHARDED, UNSHARDED], [UNSHARDED]),
    "FSDP-style": (["batch", UNSHARDED], [UNSHARDED], [UNSHARDED, UNSHARDED], [UNSHARDED]),
    "tensor parallel": ([UNSHARDED, "model"], ["model"], ["model", UNSHARDED], [UNSHARDED]),
    "2-D": (["batch", "model"], ["model"], ["model", UNSHARDED], [UNSHARDED]),
}


def budget_memory():
    """Bytes one device holds per placement: the weights and Adam's two slots in their layouts (counter left out)."""
    return {name: 3 * sum(4 * math.prod(shape) // math.prod(BUDGET_MESH.get(s, 1) for s in spec)
                          for shape, spec in zip(BUDGET_SHAPES.values(), specs))
            for name, specs in BUDGET_PLACEMENTS.items()}


def budget_bytes_sent(on_cpu=True):
    """Bytes one device sends per training step, per placement, as DTensor runs the collectives on CPU.

    Priced with ``matmul_cost``: d1's product and its weight gradient (the first layer needs no
    input gradient), then d2's product and both gradients; each gradient in its weight's layout.
    With ``on_cpu=False``, each collective is priced by the ring formula of its own kind, as
    hardware with a native all-gather and reduce-scatter would run it (exercise 5 is about these CPUs).
    """
    sent = {}
    for name, (d1_kernel, _, d2_kernel, _) in BUDGET_PLACEMENTS.items():
        d1 = matmul_cost([BUDGET_BATCH, 784], ["batch", UNSHARDED], BUDGET_SHAPES["d1.kernel"], d1_kernel,
                         BUDGET_MESH, dw_specs=d1_kernel)
        d2 = matmul_cost([BUDGET_BATCH, BUDGET_HIDDEN], d1.output_specs, BUDGET_SHAPES["d2.kernel"], d2_kernel,
                         BUDGET_MESH, dw_specs=d2_kernel)
        products = [d1.forward, d1.backward[1], d2.forward, *d2.backward]
        sent[name] = round(sum(c.bytes_sent_on_cpu if on_cpu else c.bytes_sent_per_device
                               for p in products for c in p.collectives))
    return sent


def _placement_name(raw):
    if not isinstance(raw, str):
        return None
    words = raw.strip().lower().replace("_", " ").replace("-", " ")
    for name in BUDGET_PLACEMENTS:
        if words == name.lower().replace("-", " ") or words == name.lower().replace("-", " ").split()[0]:
            return name
    return None


class MemoryBudget(Exercise):
    title = "The cheapest placement that fits a memory budget"
    points = 5
    hints = (
        "Bytes one device holds for a weight: 4 bytes per number, divided by the size of every mesh axis "
        "that splits it. Adam keeps two slots per weight in the same layout: three times the weights' bytes.",
        "Work weight by weight (d1.kernel, d1.bias, d2.kernel, d2.bias) with the specs of each placement, "
        "then add them up and multiply by 3.",
        "A placement fits when its total is at most the budget. Among those, take the one that sends the "
        "fewest bytes per step on these CPUs (the first column printed above the exercise), not the one that "
        "holds the least.",
    )

    def grade(self, memory, choice):
        fb = Feedback()
        truth = budget_memory()
        weights_only = {name: total // 3 for name, total in truth.items()}

        def explain(name, given, raw):
            if given is None:
                return f"give a number of bytes, got {raw!r}.", ""
            if given == weights_only[name]:
                return "that is the weights alone: add Adam's two slots, each as big as the weight.", ""
            if given * 4 == truth[name]:
                return "count bytes, not numbers: a float32 takes 4 bytes.", ""
            return "add, weight by weight, 4 bytes per number divided by the mesh axes that split it; times 3.", ""

        grade_items(fb, memory, truth, explain, as_bytes, "bytes per device, one number per placement")
        fitting = [name for name, total in truth.items() if total <= BUDGET_BYTES]
        sent = budget_bytes_sent()
        best = min(fitting, key=sent.get)
        picked = _placement_name(choice)
        if picked == best:
            fb.right(f"choice: {best}")
        elif picked is None:
            fb.wrong(f"choice: name one of {list(BUDGET_PLACEMENTS)}, got {choice!r}.")
        elif picked not in fitting:
            fb.wrong(f"choice: {picked} holds more than the budget of {BUDGET_BYTES:,} bytes per device.")
        elif truth[picked] == min(truth[name] for name in fitting):
            fb.wrong("choice: it fits and holds the least, but it is not the one that sends the fewest bytes per step "
                     "on these CPUs.", answer=f"choice = {best!r}")
        else:
            fb.wrong("choice: it fits, but another placement that fits sends fewer bytes per step on these CPUs.",
                     answer=f"choice = {best!r}")
        return fb


# Exercise 6: build_on_mesh(mesh, weights, budget) -> (model, optimizer, step), run on the checker's own cases.
BUILD_RATE = 1e-3  # the exercise's LEARNING_RATE
ADAM_BETAS, ADAM_EPSILON = (0.9, 0.999), 1e-7  # tf_keras' Adam defaults
BUILD_NAMES = ("d1.kernel", "d1.bias", "d2.kernel", "d2.bias")
BUILD_CASES = (  # the mesh (batch, model), the hidden width, the global batch, the budget per device, a seed
    {"mesh": (4, 2), "hidden": 128, "batch": 32, "budget": 400 * 2**10, "seed": 11},
    {"mesh": (2, 4), "hidden": 256, "batch": 16, "budget": 2**20, "seed": 12},
)
COMBINING = "DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION"
REDUCTIONS = ("all-reduce", "merged all-reduce", "reduce-scatter")
PLAIN_OPTIMIZER = ("the optimizer is not on a mesh: in a DTensor program its two slots per weight and its step "
                   "counter must live on the mesh too, in the weights' layouts (the chapter's DTensor optimizers).")
DTENSOR_ADAM = "Use tf.keras.dtensor.experimental.optimizers.Adam(LEARNING_RATE, mesh=mesh)."
_BUILD_MESHES = {}


class _Stop(Exception):
    """A case cannot go on: the message says why, ``answer`` what gives the fix away."""

    def __init__(self, message, answer=""):
        super().__init__(message)
        self.message, self.answer = message, answer


def _build_mesh(shape):
    from tensorflow.experimental import dtensor

    from .answers import logical_cpus

    cpus = logical_cpus()
    size = shape[0] * shape[1]
    if len(cpus) < size:
        raise _Stop(f"the checker needs {size} logical CPUs and this kernel has {len(cpus)}: run the notebook's "
                    f"first cell (configure_virtual_cpus(8)) before anything else.")
    key = (tuple(cpus[:size]), shape)
    if key not in _BUILD_MESHES:
        _BUILD_MESHES[key] = dtensor.create_mesh([("batch", shape[0]), ("model", shape[1])], devices=cpus[:size])
    return _BUILD_MESHES[key]


def build_case(case):
    """The starting weights (NumPy), two batches and the budget of one of the checker's cases."""
    import numpy as np

    rng = np.random.default_rng(case["seed"])
    hidden = case["hidden"]
    weights = {"d1.kernel": rng.normal(0, 0.05, (784, hidden)), "d1.bias": rng.normal(0, 0.05, hidden),
               "d2.kernel": rng.normal(0, 0.1, (hidden, 10)), "d2.bias": rng.normal(0, 0.1, 10)}
    weights = {name: value.astype("float32") for name, value in weights.items()}
    batches = [(rng.random((case["batch"], 28, 28, 1), dtype="float32"),
                rng.integers(0, 10, case["batch"]).astype("int64")) for _ in range(2)]
    return weights, batches


def mlp_reference(weights, images, labels):
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


def adam_first_step(weights, gradients, rate=BUILD_RATE):
    """{name: (weight, m, v)} after tf_keras' Adam's first step from zero slots."""
    import numpy as np

    beta_1, beta_2 = ADAM_BETAS
    alpha = rate * math.sqrt(1 - beta_2) / (1 - beta_1)
    after = {}
    for name, g in gradients.items():
        m, v = (1 - beta_1) * g, (1 - beta_2) * g * g
        after[name] = (weights[name] - alpha * m / (np.sqrt(v) + ADAM_EPSILON), m, v)
    return after


def _specs_text(spec_list):
    return "[" + ", ".join("U" if s == UNSHARDED else repr(s) for s in spec_list) + "]"


def _mesh_text(case):
    return mesh_text(list(zip(("batch", "model"), case["mesh"])))


def _case_text(case):
    return f"{_mesh_text(case)}, width {case['hidden']}, budget {case['budget']:,} B"


def _why_it_raised(err, case, stage):
    """An aimed hint for an exception from the learner's code: (message, answer)."""
    message = short_error(err)
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
        return (f"{stage} failed: {what} ({type(err).__name__} from DTensor). A layout splits a sharded axis into "
                f"equal blocks, one per device of its mesh axis, so the axis's size must divide by that mesh axis's "
                f"size. Choose the layouts from the mesh you are given: here 'batch' has {case['mesh'][0]} devices "
                f"and 'model' {case['mesh'][1]}, and d2 has 10 outputs.",
                "Leave d2's outputs (d2.kernel's columns, d2.bias) unsharded.")
    if "same mesh" in message or "mesh propagation" in message:
        return (f"{stage} raised {message} Two meshes met in one step: build the model, the optimizer and the "
                f"batch on the mesh passed to build_on_mesh ({where} here), not on the notebook's `mesh`.", "")
    if "rank" in message:
        return (f"{stage} raised {message} Images have rank 4 and labels rank 1: each needs a batch-sharded layout "
                f"of its own rank (exercise 4).", "")
    return (f"{stage} raised {message} The checker calls build_on_mesh(mesh, weights, budget) with a mesh {where}, "
            f"weights of width {case['hidden']} and a budget of its own, then step(images, labels) with NumPy arrays "
            f"(images {case['batch']} x 28 x 28 x 1 float32, labels int64).", "")


def _adam_slots(optimizer, variable):
    """tf_keras' Adam slots (m, v) of ``variable``, or None."""
    try:
        index = optimizer._index_dict[optimizer._var_key(variable)]
        return optimizer._momentums[index], optimizer._velocities[index]
    except (AttributeError, KeyError, IndexError, TypeError):
        return None


def _run_build_case(build_on_mesh, case):
    """Build, step, measure and record one case; return what was found (raises _Stop when it cannot go on)."""
    from ..memory import bytes_per_device
    from ..profiling import collectives_run_by

    mesh = _build_mesh(case["mesh"])
    weights, ((images, labels), (more_images, more_labels)) = build_case(case)
    hidden = case["hidden"]
    try:
        built = build_on_mesh(mesh, {name: value.copy() for name, value in weights.items()}, case["budget"])
    except Exception as err:
        raise _Stop(*_why_it_raised(err, case, "build_on_mesh")) from None
    if not isinstance(built, (tuple, list)) or len(built) != 3 or not callable(built[2]):
        raise _Stop("build_on_mesh should return a triple (model, optimizer, step), step a function "
                    "step(images, labels) that runs one training step and returns its loss.")
    model, optimizer, step = built
    variables = list(getattr(model, "trainable_variables", None) or [])
    shapes = [tuple(v.shape) for v in variables]
    expected = [tuple(weights[name].shape) for name in BUILD_NAMES]
    if shapes != expected:
        raise _Stop(f"the model's trainable weights have shapes {shapes}; for weights of width {hidden} they are "
                    f"{expected} (d1.kernel, d1.bias, d2.kernel, d2.bias). Take the width from the weights you are "
                    f"given: Flatten, Dense(width, relu), Dense(10).")
    layouts = [layout_of(v) for v in variables]
    if any(layout is None for layout in layouts):
        plain = [name for name, layout in zip(BUILD_NAMES, layouts) if layout is None]
        raise _Stop(f"{', '.join(plain)} {'is' if len(plain) == 1 else 'are'} not on a mesh: give every Dense layer "
                    f"its kernel_layout and bias_layout (or build the model under a LayoutMap's scope).")
    if any(layout.mesh != mesh for layout in layouts):
        raise _Stop(f"the model's weights live on a mesh {mesh_text(mesh_dims(layouts[0].mesh))}, not on the mesh "
                    f"passed in ({mesh_text(mesh_dims(mesh))}): build everything on build_on_mesh's `mesh` argument, "
                    f"not on the notebook's.")
    optimizer_mesh = getattr(optimizer, "_mesh", None)  # tf_keras' optimizers keep the mesh they were given here
    if optimizer_mesh is None:
        raise _Stop(PLAIN_OPTIMIZER, DTENSOR_ADAM)
    if optimizer_mesh != mesh:
        raise _Stop(f"the optimizer lives on a mesh {mesh_text(mesh_dims(optimizer_mesh))}, not on the mesh passed in "
                    f"({mesh_text(mesh_dims(mesh))}): build everything on build_on_mesh's `mesh` argument, not on "
                    f"the notebook's.")
    try:
        loss = step(images.copy(), labels.copy())
    except Exception as err:
        raise _Stop(*_why_it_raised(err, case, "step(images, labels)")) from None
    if loss is None:
        raise _Stop("step(images, labels) returned None: return the step's loss.")
    try:
        loss = as_float(loss)
    except Exception as err:
        raise _Stop(f"step's result is not one number ({short_error(err)}): return the loss of the step, the mean "
                    f"over the whole batch.") from None
    try:
        held = bytes_per_device([model, optimizer])
        in_weights = bytes_per_device(model)
    except (TypeError, ValueError) as err:
        raise _Stop(f"{PLAIN_OPTIMIZER} ({short_error(err)})", DTENSOR_ADAM) from None
    found = {"mesh": mesh, "case": case, "loss": loss, "weights": weights, "images": images, "labels": labels,
             "held": max(held.values()), "in_weights": max(in_weights.values()),
             "specs": [specs(layout) for layout in layouts], "after": {}, "slots": {}}
    for name, variable in zip(BUILD_NAMES, variables):
        found["after"][name] = global_numpy(variable).astype("float64")
        slots = _adam_slots(optimizer, variable)
        found["slots"][name] = None if slots is None else tuple(global_numpy(s).astype("float64") for s in slots)
    iterations = getattr(optimizer, "iterations", None)
    found["iterations"] = None if iterations is None else int(global_numpy(iterations))
    try:
        runs = collectives_run_by(lambda: step(more_images.copy(), more_labels.copy()))
    except Exception as err:
        raise _Stop(f"a second call of step raised {short_error(err)}: step must run again on another batch of the "
                    f"same size.") from None
    found["runs"] = [(run.kind, tuple(run.axes), run.tensor_bytes) for run in runs]
    return found


def _loss_problem(found):
    """Why the first step's loss differs from one device's, or None."""
    import numpy as np

    per_example, _ = mlp_reference(found["weights"], found["images"], found["labels"])
    right, got = float(per_example.mean()), found["loss"]
    if close(got, right, 1e-4):
        return None
    if not math.isfinite(got) or got == 0:
        return f"the loss is {got}; one device computes {right:.5f} from the same weights and batch."
    groups = found["mesh"].dim_size("batch")
    slices = np.split(per_example, groups)
    if any(close(got, float(part.mean()), 1e-4) for part in slices):
        return (f"the loss {got:.5f} is the mean over one 'batch' group's slice of the batch "
                f"({len(slices[0])} of {len(per_example)} examples); one device computes {right:.5f} over all of them. "
                f"Return the loss of the step, computed from the whole batch on the mesh: DTensor sums it over the "
                f"groups for you.")
    ratio = got / right
    if abs(ratio - round(ratio)) < 1e-3 * abs(ratio) or abs(1 / ratio - round(1 / ratio)) < 1e-3 / abs(ratio):
        return (f"the loss {got:.5f} is {ratio:.4g} x the mean one device computes ({right:.5f}). A DTensor step is "
                f"written for the global batch: the plain mean over all {len(per_example)} examples, with no "
                f"per-replica scaling (that was tf.distribute's custom loop, chapter 2).")
    return (f"the loss {got:.5f} differs from the one device computes from the same weights and batch "
            f"({right:.5f}).")


def _close_values(got, want):
    import numpy as np

    scale = float(np.abs(want).max(initial=0.0))
    return got.shape == want.shape and np.allclose(got, want, rtol=1e-3, atol=1e-3 * scale + 1e-9)


def _variables_problem(found):
    """Why the weights and Adam's slots after the step differ from one Adam step on one device, or None."""
    import numpy as np

    _, gradients = mlp_reference(found["weights"], found["images"], found["labels"])
    expected = adam_first_step({n: v.astype("float64") for n, v in found["weights"].items()}, gradients)
    if found["iterations"] is not None and found["iterations"] != 1:
        return (f"after the checker's first call of step, the optimizer has counted {found['iterations']} steps. "
                f"build_on_mesh must not train: the checker's first step must be the model's first.", "")
    missing = [name for name in BUILD_NAMES if found["slots"][name] is None]
    if missing:
        return (f"the optimizer keeps no Adam slots for {', '.join(missing)}: the exercise trains with Adam (its "
                f"other settings at their defaults).", DTENSOR_ADAM)
    start = found["weights"]
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
    if os.environ.get(COMBINING) != "0":
        return (f"{', '.join(wrong_weights + [f'm({n})' for n in wrong_m] + [f'v({n})' for n in wrong_v])} did not "
                f"change as one Adam step on one device changes them, and this kernel runs with DTensor's all-reduce "
                f"combining on: the chapter's stale-update bug. The set-up cell must set {COMBINING}=0 before "
                f"TensorFlow starts (restart the kernel and run it first).", "")
    m_ratios = [float(np.median(found["slots"][n][0][np.abs(expected[n][1]) > 1e-9] /
                                expected[n][1][np.abs(expected[n][1]) > 1e-9])) for n in BUILD_NAMES]
    if wrong_m and max(m_ratios) - min(m_ratios) < 1e-3 * abs(m_ratios[0]) and abs(m_ratios[0] - 1) > 1e-2:
        return (f"Adam's first moment m holds {m_ratios[0]:.4g} x the gradient of the mean loss over the batch (for "
                f"every weight): the loss the gradients come from is scaled. Differentiate the plain mean over the "
                f"whole batch.", "")
    if wrong_weights and not (wrong_m or wrong_v):
        changes = [float(np.median(np.abs(found["after"][n] - start[n]))) for n in BUILD_NAMES]
        wanted = [float(np.median(np.abs(expected[n][0] - start[n]))) for n in BUILD_NAMES]
        ratios = [c / w for c, w in zip(changes, wanted) if w > 0]
        if ratios and max(ratios) - min(ratios) < 0.05 * max(ratios) and abs(ratios[0] - 1) > 0.05:
            return (f"the gradients and Adam's slots are right, but every weight moved {ratios[0]:.3g} x as far as "
                    f"one Adam step with learning rate LEARNING_RATE = {BUILD_RATE:g} moves it: check the "
                    f"optimizer's learning rate (its other settings at their defaults).", "")
    wrong = sorted(set(wrong_weights) | {f"m({n})" for n in wrong_m} | {f"v({n})" for n in wrong_v})
    return (f"{', '.join(wrong)} did not change as one Adam step (learning rate {BUILD_RATE:g}) of the mean "
            f"cross-entropy over the whole batch changes them on one device.", "")


def _memory_line(fb, found):
    """One point per case: what each device holds against the budget, and, if over, which idea is missing."""
    case, held, in_weights = found["case"], found["held"], found["in_weights"]
    budget = case["budget"]
    placed = ", ".join(f"{n} {_specs_text(s)}" for n, s in zip(BUILD_NAMES, found["specs"]))
    what = f"{_case_text(case)}: each device holds {held:,} B ({in_weights:,} in weights, " \
           f"{held - in_weights:,} in Adam's state) with {placed}"
    if held <= budget:
        fb.right(what)
        return
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
    fb.wrong(f"{what}: over the budget; {why}.{slots}",
             answer="Split d1.kernel over both axes, Layout(['batch', 'model'], mesh), with d1.bias and d2.kernel's "
                    "rows over 'model': that fits every budget of the checker.")


class BuildOnMesh(Exercise):
    title = "Build it on the mesh, step it, measure it"
    points = 5
    hints = (
        "Which weight holds nearly all the bytes, and how many bytes does Adam add per weight? Choose the layouts "
        "from the mesh and the weights you are given (their sizes), not from the notebook's; and start the model "
        "from `weights`.",
        "Estimate each placement of exercise 5 as there (4 bytes per number, divided by the sizes of the mesh axes "
        "that split it, times 3 for Adam's slots, plus its 8-byte counter; mesh.dim_size('model') gives a size) and "
        "take one that fits the budget and whose sharded axes divide. Build the Dense layers with kernel_layout and "
        "bias_layout, copy each weight in with variable.assign(pack_batch(value, variable.layout)), make the DTensor "
        "Adam with mesh=mesh, and let step pack the batch split over 'batch' and run a tf.function training step.",
        "A placement that fits every budget of the checker: d1.kernel Layout(['batch', 'model'], mesh), d1.bias "
        "Layout(['model'], mesh), d2.kernel Layout(['model', dtensor.UNSHARDED], mesh), d2.bias replicated. In step: "
        "train_step(pack_batch(images, dtensor.Layout.batch_sharded(mesh, 'batch', rank=4)), "
        "pack_batch(labels, dtensor.Layout.batch_sharded(mesh, 'batch', rank=1))).",
    )

    def grade(self, build_on_mesh):
        fb = Feedback()
        if not callable(build_on_mesh):
            fb.wrong("build_on_mesh should be a function (mesh, weights, budget) -> (model, optimizer, step).")
            return fb
        results = []
        with quiet_tensorflow():
            for case in BUILD_CASES:
                try:
                    results.append(_run_build_case(build_on_mesh, case))
                except _Stop as stop:
                    for found in results:
                        _memory_line(fb, found)
                    fb.wrong(f"{_case_text(case)}: {stop.message}", answer=stop.answer)
                    return fb
        for found in results:
            _memory_line(fb, found)
        problems = [(found, _loss_problem(found)) for found in results]
        bad = next(((f, p) for f, p in problems if p), None)
        if bad is None:
            fb.right("the first step's loss equals one device's from the same weights and batch ("
                     + ", ".join(f"{f['loss']:.5f}" for f in results) + ")")
        else:
            fb.wrong(f"{_case_text(bad[0]['case'])}: {bad[1]}")
        problems = [(found, _variables_problem(found)) for found in results]
        bad = next(((f, p) for f, p in problems if p), None)
        if bad is None:
            fb.right("every weight, both Adam slots of each and the step counter changed as one Adam step on one "
                     "device changes them")
        else:
            fb.wrong(f"{_case_text(bad[0]['case'])}: {bad[1][0]}", answer=bad[1][1])
        for found in results:
            fb.note(f"{_mesh_text(found['case'])}, one more step ran: " + _runs_text(found["runs"]))
        unsplit = [found for found in results if not any(_sums_the_loss_over_batch(*run) for run in found["runs"])]
        if not unsplit:
            fb.right("in each step the loss was summed over the 'batch' groups (an all-reduce over 'batch' of 4 "
                     "bytes): the batch is split over 'batch'")
        else:
            fb.wrong(f"{_mesh_text(unsplit[0]['case'])}: the step summed no loss over 'batch' (no all-reduce of the "
                     f"4-byte loss over 'batch' ran), so every 'batch' group computed the loss of the whole batch: no "
                     f"data parallelism. Split the batch over 'batch' (its first axis); DTensor then sums the groups' "
                     f"losses and gradients.",
                     answer="pack_batch(images, dtensor.Layout.batch_sharded(mesh, 'batch', rank=4)), and rank=1 "
                            "for the labels.")
        return fb


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


CHAPTER = chapter(5, "DTensor with Keras", [Seeds, ShardedDense, LayoutMapKeys, PackTrainingBatch, MemoryBudget,
                                            BuildOnMesh])
