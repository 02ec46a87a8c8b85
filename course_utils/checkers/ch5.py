"""Chapter 5 · DTensor with Keras (tf_keras): the exercises' checkers and hints.

Exercises 1-4 and 6 take code or live tf_keras objects: their ``collect`` runs the code (on inputs drawn
from the check's seed) or reads the objects, and sends plain data (kernels, layouts, shapes, DTensors,
error messages); their ``judge`` never imports tf_keras. Exercises 1 and 2 live in ``ch5_layers.py``,
exercise 6 in ``ch5_build.py`` (its cases and their run in ``ch5_cases.py``); 3, 4 and 5 here.
"""
import math
import re

from .answers import UNSHARDED, as_bytes, global_numpy, grade_items, layout_of, mesh_dims, short_error, specs
from ..costs import matmul_cost
from ..meshes import mesh_text
from .core import Exercise, Feedback, chapter
from .ch5_build import BuildOnMesh
from .ch5_layers import NOTEBOOK_MESH, Seeds, ShardedDense

PACK_SHAPES = ((16, 28, 28, 1), (16,))  # the batch exercise 4 packs: images and labels


def _reference_paths():
    """The sharding specs exercise 3 asks for, per variable path."""
    return {"hidden.kernel": [UNSHARDED, "model"], "hidden.bias": ["model"], "logits.kernel": ["model", UNSHARDED],
            "logits.bias": [UNSHARDED]}


def layout_map_lookup(items, path):
    """The layout tf_keras' LayoutMap gives ``path`` from its ``[(key, layout), ...]`` (in insertion order): an
    exact key, else the first key that re.match-es (``LayoutMap.__getitem__``); None when no key matches."""
    for key, layout in items:
        if key == path:
            return layout
    for key, layout in items:
        if re.match(key, path):
            return layout
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

    def collect(self, layout_map, seed=0):
        """Read the map's keys and their layouts, in insertion order (the order tf_keras tries them in).

        Crosses: ``{"kind": None, "type": name}`` for something that is neither a LayoutMap nor a dict, else
        ``{"kind": "LayoutMap" or "dict", "items": [[key, value], ...]}`` (Layouts cross as data).
        """
        if hasattr(layout_map, "_layout_map"):
            kind = "LayoutMap"
        elif isinstance(layout_map, dict):
            kind = "dict"
        else:
            return {"kind": None, "type": type(layout_map).__name__}
        return {"kind": kind, "items": [[key, layout_map[key]] for key in list(layout_map.keys())]}

    def judge(self, data, seed=0):
        """Feedback on the layout tf_keras' lookup gives each of the model's four variables (one point each)."""
        from tensorflow.experimental import dtensor

        fb = Feedback()
        if data["kind"] not in ("LayoutMap", "dict"):
            fb.wrong(f"Give a tf.keras.dtensor.experimental.LayoutMap (or a dict of regex -> Layout), not a "
                     f"{str(data.get('type'))[:60]}.")
            return fb
        items = [tuple(item) for item in data["items"]]
        if not all(len(item) == 2 for item in items):
            raise ValueError("the map's items should be pairs")
        keys = [key for key, _ in items]
        bad = [k for k in keys if not isinstance(k, str)]
        if bad:
            fb.wrong(f"LayoutMap keys are strings (regular expressions), got {bad!r}.")
            return fb
        for path, right in _reference_paths().items():
            try:
                layout = layout_map_lookup(items, path)
            except re.error as err:
                fb.wrong(f"A key is not a valid regular expression: {err}.")
                fb.points = 0
                return fb
            given = specs(layout) if isinstance(layout, dtensor.Layout) else None
            if given is not None and mesh_dims(layout.mesh) != NOTEBOOK_MESH:
                fb.wrong(f"{path}: its layout lives on a mesh {mesh_text(mesh_dims(layout.mesh))}, not on the "
                         f"exercise's {mesh_text(NOTEBOOK_MESH)} (`mesh` in the notebook).")
                continue
            if given == right or (path == "logits.bias" and (layout is None or given == [UNSHARDED])):
                fb.right(f"{path}: {given or 'no key matches, so replicated'}")
            else:
                self._judge_explain(fb, path, right, layout, given, keys)
        return fb

    @staticmethod
    def _judge_explain(fb, path, right, layout, given, keys):
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

    @staticmethod
    def _batch(seed):
        """The images (float32) and labels (int64) the checker packs, drawn from ``seed``."""
        import numpy as np

        rng = np.random.default_rng([seed, 4])
        images = rng.random(PACK_SHAPES[0], dtype="float32")
        labels = rng.integers(0, 10, size=PACK_SHAPES[1]).astype("int64")
        return images, labels

    def collect(self, pack_fn, seed=0):
        """Call ``pack_fn`` on a batch drawn from ``seed``.

        Crosses: ``{"callable": False}``, or ``{"callable": True, "error": message}`` when it raised, or
        ``{"callable": True, "result": what it returned}`` (DTensors cross with their layout and per-device blocks).
        """
        if not callable(pack_fn):
            return {"callable": False}
        images, labels = self._batch(seed)
        try:
            result = pack_fn(images, labels)
        except Exception as err:
            return {"callable": True, "error": short_error(err)}
        return {"callable": True, "result": result}

    def judge(self, data, seed=0):
        """Feedback on the two packed tensors: batch-sharded layouts of their ranks on a batch x model mesh, and
        the global values of the batch drawn from ``seed``."""
        import numpy as np

        fb = Feedback()
        if not data["callable"]:
            fb.wrong("pack_fn should be a function (images, labels) -> (packed_images, packed_labels).")
            return fb
        if "error" in data:
            message = str(data["error"])[:400]
            if "rank" in message:
                fb.wrong(f"pack_fn raised {message}. Images have rank 4 and labels rank 1: each needs a layout of "
                         f"its own rank.", answer="e.g. Layout.batch_sharded(mesh, 'batch', rank=1) for the labels.")
            else:
                fb.wrong(f"pack_fn raised {message}")
            return fb
        result = data["result"]
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            fb.wrong("pack_fn should return a pair (packed_images, packed_labels).")
            return fb
        images, labels = self._batch(seed)
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
            elif global_numpy(value).shape != original.shape or not np.allclose(global_numpy(value), original):
                fb.wrong(f"{name}: the packed global value differs from the input batch; pack exactly the given "
                         f"tensor.")
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


def _reference_budget_memory():
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
        truth = _reference_budget_memory()
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
