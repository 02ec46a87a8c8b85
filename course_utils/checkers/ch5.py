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
from .ch4 import unit_slip
from .ch5_build import BuildOnMesh
from .ch5_layers import NOTEBOOK_MESH, Seeds, ShardedDense

PACK_SHAPES = ((16, 28, 28, 1), (16,))  # the batch exercise 4 packs: images and labels


# Exercise 3: the notebook's model has two Megatron blocks (up_1, down_1, up_2, down_2) and logits; the checker
# looks the keys up for the same model with a third block, so keys that name the blocks one by one fall short.
LAYOUT_MAP_BLOCKS = 3
LAYOUT_MAP_GROUPS = ("up kernels", "up biases", "down kernels", "down biases and logits")


def layout_map_paths(blocks=LAYOUT_MAP_BLOCKS):
    """{group: [variable paths]} of the model with ``blocks`` blocks, as tf_keras names them."""
    ups, downs = [f"up_{i}" for i in range(1, blocks + 1)], [f"down_{i}" for i in range(1, blocks + 1)]
    return {"up kernels": [f"{n}.kernel" for n in ups], "up biases": [f"{n}.bias" for n in ups],
            "down kernels": [f"{n}.kernel" for n in downs],
            "down biases and logits": [f"{n}.bias" for n in downs] + ["logits.kernel", "logits.bias"]}


def _reference_paths():
    """The sharding specs exercise 3 asks for, per variable path (None: replicated, by a key or by none)."""
    right = {"up kernels": [UNSHARDED, "model"], "up biases": ["model"], "down kernels": ["model", UNSHARDED],
             "down biases and logits": None}
    return {path: right[group] for group, paths in layout_map_paths().items() for path in paths}


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


def _keras3_axes(value):
    """The axes of a Keras 3 ``TensorLayout`` (``keras.distribution``), or None for anything else."""
    if type(value).__name__ == "TensorLayout" and hasattr(value, "axes"):
        return ["keras3", list(value.axes)]
    return None


class LayoutMapKeys(Exercise):
    title = "LayoutMap regex keys"
    points = 4
    hints = (
        "How does tf_keras name a functional model's variables, and how does LayoutMap match a key against a name? "
        "One key can serve several layers.",
        "tf_keras names them 'layer_name.attribute' (e.g. 'up_1.kernel') and looks a key up exactly, then as a "
        "regex with re.match, which anchors at the START only: the key 'up' matches 'up_1.bias' too.",
        "In each block the down layer's inputs are the up layer's outputs, which are split over 'model'; its own "
        "outputs are partial sums that DTensor adds up, so its bias stays whole. A key such as r'up_\\d+\\.kernel' "
        "matches the up kernels of every block.",
    )

    def collect(self, layout_map, seed=0):
        """Read the map's keys and their layouts, in insertion order (the order tf_keras tries them in).

        Crosses: ``{"kind": None, "type": name}`` for something that is neither a LayoutMap nor a dict, else
        ``{"kind": "LayoutMap", "dict" or "keras3", "items": [[key, value], ...]}`` (Layouts cross as data; a
        Keras 3 ``TensorLayout`` as ``["keras3", axes]``).
        """
        if hasattr(layout_map, "_layout_map") and type(layout_map).__module__.startswith("keras."):
            kind, values = "keras3", dict(layout_map._layout_map)
        elif hasattr(layout_map, "_layout_map"):
            kind, values = "LayoutMap", layout_map
        elif isinstance(layout_map, dict):
            kind, values = "dict", layout_map
        else:
            return {"kind": None, "type": type(layout_map).__name__}
        return {"kind": kind, "items": [[key, _keras3_axes(values[key]) or values[key]] for key in list(values.keys())]}

    def judge(self, data, seed=0):
        """Feedback on the layouts tf_keras' lookup gives the variables of the three-block model (one point per
        group of :data:`LAYOUT_MAP_GROUPS`)."""
        from tensorflow.experimental import dtensor

        fb = Feedback()
        if data["kind"] not in ("LayoutMap", "dict", "keras3"):
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
        keras3 = [(key, value) for key, value in items if not isinstance(value, dtensor.Layout)
                  and (data["kind"] == "keras3" or isinstance(value, (list, tuple)))]
        if keras3:
            key, value = keras3[0]
            shown = tuple(value[1]) if isinstance(value, list) and value[:1] == ["keras3"] else value
            form = ("Keras 3's keras.distribution.LayoutMap" if data["kind"] == "keras3" else
                    f"layout_map[{key!r}] = {shown!r}, Keras 3's keras.distribution form (a tuple of mesh axes)")
            fb.wrong(f"That is {form}. This chapter's model is tf_keras (TF_USE_LEGACY_KERAS=1), whose "
                     f"tf.keras.dtensor.experimental.LayoutMap(mesh=mesh) maps each key to a dtensor.Layout on "
                     f"the mesh: one sharding spec per tensor axis, dtensor.UNSHARDED where Keras 3 writes None.",
                     answer=f"For {shown!r}: dtensor.Layout({[UNSHARDED if a is None else a for a in shown]!r}, mesh).")
            return fb
        try:
            for key in keys:
                re.compile(key)
        except re.error as err:
            fb.wrong(f"A key is not a valid regular expression: {err}.")
            return fb
        right = _reference_paths()
        paths = layout_map_paths()
        for group, group_paths in paths.items():
            wrong = []
            for path in group_paths:
                layout = layout_map_lookup(items, path)
                given = specs(layout) if isinstance(layout, dtensor.Layout) else None
                if given is not None and mesh_dims(layout.mesh) != NOTEBOOK_MESH:
                    wrong.append((path, "mesh", layout, given))
                elif not (given == right[path] or (right[path] is None and (given is None or
                                                                             set(given) == {UNSHARDED}))):
                    wrong.append((path, "specs", layout, given))
            if not wrong:
                shown = right[group_paths[0]]
                fb.right(f"{group} ({', '.join(group_paths)}): {shown if shown else 'replicated'}")
                continue
            path, why, layout, given = wrong[0]
            if why == "mesh":
                fb.wrong(f"{path}: its layout lives on a mesh {mesh_text(mesh_dims(layout.mesh))}, not on the "
                         f"exercise's {mesh_text(NOTEBOOK_MESH)} (`mesh` in the notebook).")
            else:
                self._judge_explain(fb, path, right, given, items)
        return fb

    @staticmethod
    def _judge_explain(fb, path, right, given, items):
        keys = [key for key, _ in items]
        want = right[path]
        matching = [k for k in keys if k == path] or [k for k in keys if re.match(k, path)]
        layer, attribute = path.split(".")
        kind = layer.split("_")[0]
        if given is None:
            searching = [k for k in keys if re.search(k, path)]
            first_block = path.replace(f"_{LAYOUT_MAP_BLOCKS}.", "_1.")
            if any("/" in k for k in keys):
                why = ("no key matches. tf_keras names the variable 'up_1.kernel' (layer name, a DOT, attribute), "
                       "not 'up_1/kernel' as in variable.name")
            elif searching:
                why = (f"no key matches: keys are matched with re.match, from the START of the path, so "
                       f"{searching[0]!r} does not match {path!r}")
            elif first_block != path and layout_map_lookup(items, first_block) is not None:
                why = (f"no key matches. Your keys name the blocks one by one, and the checker's model has a block "
                       f"more than the notebook's (up_{LAYOUT_MAP_BLOCKS}, down_{LAYOUT_MAP_BLOCKS}): write keys "
                       f"that match the {kind} layers of every block")
            else:
                why = "no key matches, so this variable stays replicated"
            fb.wrong(f"{path}: {why}.", answer=f"It should be {want}.")
            return
        culprit = matching[0] if matching else "?"
        caught = [p for p in right if p.split(".")[0].split("_")[0] != kind and re.match(culprit, p)] \
            if matching else []
        if len(given) != (1 if attribute == "bias" else 2):
            fb.wrong(f"{path} gets a rank-{len(given)} layout {given} from key {culprit!r}: that key also matches "
                     f"this variable (re.match matches prefixes). Give the kernels and the biases keys of their "
                     f"own, e.g. one that ends in 'kernel'.")
        elif caught and culprit != path:
            fb.wrong(f"{path} gets {given} from key {culprit!r}, a key that matches {caught[0]!r} as well as "
                     f"{path!r}: re.match anchors only the start, and '.' or '.*' match any characters. Make each key "
                     f"match only the layers it is meant for.", answer=f"{path} should be {want or 'replicated'}.")
        elif kind == "logits":
            fb.wrong(f"{path} gets {given}. The logits layer's inputs are the last down layer's outputs, which "
                     f"DTensor has already summed: whole on every device. The exercise keeps this layer replicated.",
                     answer="No key for it: unmatched variables are replicated.")
        elif kind == "down" and attribute == "kernel":
            fb.wrong(f"{path} gets {given}. A down layer's INPUTS are the up layer's outputs, which are split over "
                     f"'model': which axis of its kernel meets them?",
                     answer="Split this kernel's rows the same way: ['model', UNSHARDED]. Then each device "
                            "multiplies its half and one all-reduce sums the halves.")
        elif kind == "down" and attribute == "bias":
            fb.wrong(f"{path} gets {given}. What does each device hold of a down layer's outputs after its product: "
                     f"a slice of them, or partial sums of all of them?",
                     answer="Partial sums of all of them, added over 'model': the bias is added to the whole "
                            "output, so leave it replicated (no key).")
        elif kind == "up" and attribute == "bias" and set(given) == {UNSHARDED}:
            fb.wrong(f"{path} is replicated, but the up layer's output units are split over 'model'; each device "
                     f"adds the biases of its own units.", answer="['model'].")
        elif kind == "up" and attribute == "kernel" and given == ["model", UNSHARDED]:
            fb.wrong(f"{path} gets {given}: that splits its inputs, which every device holds whole. The exercise "
                     f"splits an up layer's output units.", answer=f"By columns: {want}.")
        else:
            fb.wrong(f"{path} gets {given}.", answer=f"It should be {want or 'replicated'}.")


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
        if isinstance(result, dict) and len(result) == 2:  # {"images": ..., "labels": ...}, or by their order
            named = {str(key).lower().strip(): value for key, value in result.items()}
            result = ([named.get(k) for k in ("images", "labels")] if {"images", "labels"} <= set(named) else
                      [named.get(k) for k in ("x", "y")] if {"x", "y"} <= set(named) else list(result.values()))
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            fb.wrong("pack_fn should return a pair (packed_images, packed_labels).")
            return fb
        images, labels = self._batch(seed)
        ranks = [len(getattr(value, "shape", ())) for value in result]
        if ranks == [1, 4]:
            fb.wrong("pack_fn returned the labels first (rank 1) and the images second (rank 4): return "
                     "(packed_images, packed_labels), in the order of pack_fn's arguments (images, labels).")
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
                    why = ("it uses 'model', the axis that splits WEIGHTS: the two devices of a 'model' pair work on "
                           "the same examples")
                elif "batch" not in given:
                    why = "it is replicated: every device would train on the whole batch"
                else:
                    why = (f"'batch' splits axis {given.index('batch')}, which does not hold the examples"
                           if given[0] != "batch" else "it splits more than the examples")
                fb.wrong(f"{name} layout {given}: {why}.",
                         answer=f"Expected {right}: the examples (axis 0) over 'batch', replicated over 'model'.")
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
    return _reference_budget_memory_of(BUDGET_HIDDEN)


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


_PLACEMENT_SPELLINGS = {  # what a learner may call each placement (lower case, '-' and '_' read as spaces)
    "data parallel": ("data parallel", "data parallelism", "data", "dp", "ddp", "replicated"),
    "FSDP-style": ("fsdp style", "fsdp", "fully sharded data parallel", "zero 3", "zero3", "zero stage 3"),
    "tensor parallel": ("tensor parallel", "tensor parallelism", "tensor", "tp", "model parallel",
                        "model parallelism", "megatron"),
    "2-D": ("2 d", "2d", "2 d parallel", "2d parallel", "2 d parallelism", "two d", "2 d (data x model)"),
}


def _placement_name(raw):
    """The placement of :data:`BUDGET_PLACEMENTS` that ``raw`` names ('2-D', '2D', 'FSDP', 'Tensor_Parallel', ...),
    or None."""
    if not isinstance(raw, str):
        return None
    words = " ".join(raw.strip().strip("()[]'\"`.:").lower().replace("_", " ").replace("-", " ").split())
    for name, spellings in _PLACEMENT_SPELLINGS.items():
        if words in spellings or words.replace(" ", "") in {s.replace(" ", "") for s in spellings}:
            return name
    return None


def _by_placement(answer):
    """``answer`` with keys that name a placement in another spelling ('2D', 'fsdp', 'Tensor Parallel') renamed."""
    if not isinstance(answer, dict):
        return answer
    renamed = {}
    for key, value in answer.items():
        name = _placement_name(key)
        renamed[name if name and name not in answer and name not in renamed else key] = value
    return renamed


def _reference_budget_memory_of(hidden):
    """Bytes one device holds per placement for a d1 of ``hidden`` units (the exercise's 2048, or the chapter's 128)."""
    shapes = {"d1.kernel": (784, hidden), "d1.bias": (hidden,), "d2.kernel": (hidden, 10), "d2.bias": (10,)}
    return {name: 3 * sum(4 * math.prod(shape) // math.prod(BUDGET_MESH.get(s, 1) for s in spec)
                          for shape, spec in zip(shapes.values(), specs))
            for name, specs in BUDGET_PLACEMENTS.items()}


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

        chapter_model = _reference_budget_memory_of(128)

        def explain(name, given, raw):
            if given is None:
                return f"give a number of bytes, got {raw!r}.", ""
            if given == weights_only[name]:
                return ("that is the weights alone; the question counts Adam's slots too.",
                        "Adam keeps two slots per weight (m and v), each in the weight's layout: 3 x the weights.")
            if given == 2 * weights_only[name]:
                return ("that counts the weights and one slot per weight: how many slots does Adam keep per weight?",
                        "Two (m and v): 3 x the weights.")
            if given == truth[name] + 8:
                return "that includes Adam's 8-byte step counter, which the question leaves out.", ""
            if given == chapter_model[name] or given == chapter_model[name] + 8:
                return ("those are the bytes of the chapter's MLP (128 hidden units); this exercise's d1 has 2048 "
                        "units.", "")
            if unit_slip(raw, truth[name]) or unit_slip(raw, truth[name] + 8):
                return unit_slip(raw, truth[name]) or unit_slip(raw, truth[name] + 8), ""
            if given * 4 == truth[name]:
                return "that counts float32 numbers (elements), not bytes.", "A float32 takes 4 bytes."
            return ("add, weight by weight, its bytes divided by the size of each mesh axis that splits it; then "
                    "Adam's slots.", "")

        grade_items(fb, _by_placement(memory), truth, explain, as_bytes,
                    "bytes per device, one number per placement")
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
