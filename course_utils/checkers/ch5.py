"""Chapter 5 · DTensor with Keras (tf_keras): the exercises' graders and hints."""
import math
import re
import sys

from .answers import (UNSHARDED, as_bytes, checker_mesh, global_numpy, grade_items, layout_of, mesh_dims,
                      short_error, specs)
from ..costs import matmul_cost
from ..meshes import mesh_text
from .core import Exercise, Feedback, chapter
from .ch5_build import BuildOnMesh


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


CHAPTER = chapter(5, "DTensor with Keras", [Seeds, ShardedDense, LayoutMapKeys, PackTrainingBatch, MemoryBudget,
                                            BuildOnMesh])
