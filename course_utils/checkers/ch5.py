"""Chapter 5 · DTensor with Keras (tf_keras): the exercises' checkers and hints.

Exercises 1-4 and 6 take code or a live tf_keras object: their ``collect`` runs the code (on inputs drawn
from the check's seed) or reads the object, and sends plain data (kernels, layouts, shapes, DTensors,
error messages); their ``judge`` never imports tf_keras. Exercises 1 and 2 live in ``ch5_layers.py``,
exercise 5 in ``ch5_budget.py``, exercise 6 in ``ch5_build.py`` (its cases and their run in ``ch5_cases.py``);
3 and 4 here.
"""
import re

from .answers import UNSHARDED, global_numpy, layout_of, mesh_dims, short_error, specs
from ..meshes import mesh_text
from .core import Exercise, Feedback, chapter
from .ch5_budget import MemoryBudget
from .ch5_build import BuildOnMesh
from .ch5_layers import NOTEBOOK_MESH, EmbeddingTable, Seeds

# Exercise 4: a row-by-row recurrent model's batch, time-major: images (time step, example, pixel), labels (example,).
PACK_SHAPES = ((28, 16, 28), (28, 16))  # time-major images and their per-row tags: examples on axis 1


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
    title = "Pack a time-major batch onto the mesh"
    points = 2
    hints = (
        "Batch-sharding splits the axis that holds the EXAMPLES over 'batch'. Which axis is that in each tensor here?",
        "Both tensors are time-major: the images (time step, example, pixel), the tags (time step, example). Their "
        "examples are axis 1, not axis 0. Each needs a layout of its own rank on the batch x model mesh, "
        "replicated over 'model'.",
        "dtensor.Layout.batch_sharded takes the tensor axis to split as `axis=`; or write the sharding specs out, one "
        "per tensor axis, with dtensor.UNSHARDED for the axes that stay whole.",
    )

    @staticmethod
    def _batch(seed):
        """The time-major images (float32) and per-row tags (int64) the checker packs, drawn from ``seed``."""
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
        """Feedback on the two packed tensors: the time-major images split over 'batch' along their example axis,
        the labels along theirs, on a batch x model mesh, and the global values of the batch drawn from ``seed``."""
        fb = Feedback()
        if not data["callable"]:
            fb.wrong("pack_fn should be a function (images, labels) -> (packed_images, packed_labels).")
            return fb
        if "error" in data:
            message = str(data["error"])[:400].rstrip(". ")
            if "rank" in message:
                fb.wrong(f"pack_fn raised {message}. Here the images have rank 3 (time step, example, pixel) and the "
                         f"labels rank 2 (time step, example): each needs a layout of its own rank.")
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
        ranks = [len(getattr(value, "shape", ())) for value in result]
        if ranks == [2, 3]:
            fb.wrong("pack_fn returned the labels first (rank 2) and the images second (rank 3): return "
                     "(packed_images, packed_labels), in the order of pack_fn's arguments (images, labels).")
            return fb
        for name, value, original in zip(("images", "labels"), result, self._batch(seed)):
            self._judge_packed(fb, name, value, original)
        return fb

    @staticmethod
    def _judge_packed(fb, name, value, original):
        import numpy as np

        layout = layout_of(value)
        if layout is None:
            fb.wrong(f"{name} is not a DTensor: pack it onto the mesh (pack_batch or dtensor.pack).")
            return
        if "model" not in layout.mesh.dim_names:
            fb.wrong(f"{name} lives on a mesh {mesh_text(mesh_dims(layout.mesh))}; use the 2-D batch x model mesh, "
                     f"the one the model's weights live on.")
            return
        packed = global_numpy(value)
        if packed.shape != original.shape and packed.shape == tuple(np.swapaxes(original, 0, 1).shape):
            fb.wrong(f"{name}: you transposed them to put the examples first. The step's recurrent layer reads both "
                     f"time-major, as given: pack each tensor as it is and split the axis that holds its examples.")
            return
        if packed.shape != original.shape or not np.allclose(packed, original):
            fb.wrong(f"{name}: the packed global value differs from the input batch; pack exactly the given tensor.")
            return
        given = specs(layout)
        axis = 1  # the axis that holds the examples, in both time-major tensors
        right = [UNSHARDED] * len(original.shape)
        right[axis] = "batch"
        if given == right:
            fb.right(f"{name}: {given}")
            return
        what = {0: "the 28 time steps (rows of every image)", 2: "the 28 pixels of each row"}
        if "model" in given:
            why = ("it uses 'model', the axis that splits WEIGHTS: the devices of a 'model' group work on the same "
                   "examples")
        elif "batch" not in given:
            why = ("it is replicated: every device would train on the whole batch" if name == "images" else
                   "it is replicated: every device holds every example's tags, not those of its own examples")
        elif given.count("batch") == 1 and given.index("batch") != axis:
            why = (f"'batch' splits axis {given.index('batch')}, {what.get(given.index('batch'), 'not the examples')}: "
                   f"each device would hold part of EVERY example, while its labels belong to a slice of the "
                   f"examples. Which axis holds the examples here")
        else:
            why = "it splits more than the examples"
        fb.wrong(f"{name} layout {given}: {why}{'?' if why.endswith('here') else '.'}",
                 answer=f"Expected {right}: the examples (axis {axis}) over 'batch', replicated over 'model' "
                        f"(Layout.batch_sharded(mesh, 'batch', rank={len(right)}, axis=1)).")


# Exercise 6: build_on_mesh(mesh, weights, budget) -> (model, optimizer, step), run on the checker's own cases.


CHAPTER = chapter(5, "DTensor with Keras", {
    "q1": Seeds, "q2": EmbeddingTable, "q3": LayoutMapKeys, "q4": PackTrainingBatch, "q5": MemoryBudget,
    "q6": BuildOnMesh})
