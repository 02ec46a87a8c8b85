"""Chapter 5 · DTensor with Keras (tf_keras): the exercises' checkers and hints.

Exercises 1-4 and 6 take code or a live tf_keras object: their ``collect`` runs the code (on inputs drawn
from the check's seed) or reads the object, and sends plain data (kernels, layouts, shapes, DTensors,
error messages); their ``judge`` never imports tf_keras. Exercises 1 and 2 live in ``ch5_layers.py``,
exercise 4 in ``ch5_pack.py``, exercise 5 in ``ch5_budget.py``, exercise 6 in ``ch5_build.py`` (its cases and their
run in ``ch5_cases.py``); 3 here.
"""
import re

from .answers import UNSHARDED, mesh_dims, specs
from ..meshes import mesh_text
from .core import Exercise, Feedback, chapter
from .ch5_budget import MemoryBudget
from .ch5_build import BuildOnMesh
from .ch5_layers import NOTEBOOK_MESH, EmbeddingTable, Seeds
from .ch5_pack import PadTheLastBatch

# Exercise 3: the notebook's model has two gated blocks (up_i and gate_i, multiplied element by element, then
# down_i) and logits; the chapter's Megatron pair has no gate. The checker looks the keys up for the same model with
# a third block, so keys that name the blocks one by one fall short.
LAYOUT_MAP_BLOCKS = 3
LAYOUT_MAP_GROUPS = ("up and gate kernels", "up and gate biases", "down kernels", "down biases and logits")


def layout_map_paths(blocks=LAYOUT_MAP_BLOCKS):
    """{group: [variable paths]} of the model with ``blocks`` blocks, as tf_keras names them."""
    numbers = range(1, blocks + 1)
    splits = [f"{kind}_{i}" for i in numbers for kind in ("up", "gate")]
    downs = [f"down_{i}" for i in numbers]
    return {"up and gate kernels": [f"{n}.kernel" for n in splits],
            "up and gate biases": [f"{n}.bias" for n in splits],
            "down kernels": [f"{n}.kernel" for n in downs],
            "down biases and logits": [f"{n}.bias" for n in downs] + ["logits.kernel", "logits.bias"]}


def _reference_paths():
    """The sharding specs exercise 3 asks for, per variable path (None: replicated, by a key or by none): a gate's
    output multiplies its up layer's element by element, so it is split like it."""
    right = {"up and gate kernels": [UNSHARDED, "model"], "up and gate biases": ["model"],
             "down kernels": ["model", UNSHARDED], "down biases and logits": None}
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


def _unsplit(layout):
    """Whether a layout the lookup gave (a dtensor.Layout, or None for no key) splits nothing."""
    return layout is None or not hasattr(layout, "sharding_specs") or set(specs(layout)) == {UNSHARDED}


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
        "One key can serve several layers. And which layout lets a gate's output multiply the up layer's output "
        "without moving anything between devices?",
        "tf_keras names them 'layer_name.attribute' (e.g. 'up_1.kernel') and looks a key up exactly, then as a "
        "regex with re.match, which anchors at the START only: the key 'up' matches 'up_1.bias' too. An element-wise "
        "product is local only when both factors are split the same way.",
        "In each block the down layer's inputs are the product of up's and gate's outputs, both split over 'model' "
        "along their units; down's own outputs are partial sums that DTensor adds up, so its bias stays whole. A key "
        "such as r'(up|gate)_\\d+\\.kernel' matches the up and gate kernels of every block.",
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
        split_like_up = kind in ("up", "gate")
        first_block = path.replace(f"_{LAYOUT_MAP_BLOCKS}.", "_1.")
        if kind == "gate" and all(_unsplit(layout_map_lookup(items, p)) for p in {path, first_block}):
            fb.wrong(f"{path} is replicated: every device computes all of the gate's units and holds its whole "
                     f"kernel, though it multiplies only its own share of them with the up layer's split output. "
                     f"Which layout gives each device just the gate units it multiplies?",
                     answer=f"The up layer's: {want}. Then each device multiplies the same units of both.")
            return
        if given is None:
            searching = [k for k in keys if re.search(k, path)]
            if any("/" in k for k in keys):
                why = ("no key matches. tf_keras names the variable 'up_1.kernel' (layer name, a DOT, attribute), "
                       "not 'up_1/kernel' as in variable.name")
            elif searching:
                why = (f"no key matches: keys are matched with re.match, from the START of the path, so "
                       f"{searching[0]!r} does not match {path!r}")
            elif first_block != path and layout_map_lookup(items, first_block) is not None:
                why = (f"no key matches. Your keys name the blocks one by one, and the checker's model has a block "
                       f"more than the notebook's (up_{LAYOUT_MAP_BLOCKS}, gate_{LAYOUT_MAP_BLOCKS}, "
                       f"down_{LAYOUT_MAP_BLOCKS}): write keys that match the {kind} layers of every block")
            else:
                why = "no key matches, so this variable stays replicated"
            fb.wrong(f"{path}: {why}.", answer=f"It should be {want}.")
            return
        culprit = matching[0] if matching else "?"
        caught = [p for p in right if right[p] != want and re.match(culprit, p)] if matching else []
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
            fb.wrong(f"{path} gets {given}. A down layer's INPUTS are the gated up layer's outputs, which are split "
                     f"over 'model': which axis of its kernel meets them?",
                     answer="Split this kernel's rows the same way: ['model', UNSHARDED]. Then each device "
                            "multiplies its half and one all-reduce sums the halves.")
        elif kind == "down" and attribute == "bias":
            fb.wrong(f"{path} gets {given}. What does each device hold of a down layer's outputs after its product: "
                     f"a slice of them, or partial sums of all of them?",
                     answer="Partial sums of all of them, added over 'model': the bias is added to the whole "
                            "output, so leave it replicated (no key).")
        elif split_like_up and attribute == "bias" and set(given) == {UNSHARDED}:
            fb.wrong(f"{path} is replicated, but the {kind} layer's output units are split over 'model'; each device "
                     f"adds the biases of its own units.", answer="['model'].")
        elif split_like_up and attribute == "kernel" and given == ["model", UNSHARDED]:
            fb.wrong(f"{path} gets {given}: that splits its inputs, which every device holds whole. The exercise "
                     f"splits the output units of the {kind} layers.", answer=f"By columns: {want}.")
        else:
            fb.wrong(f"{path} gets {given}.", answer=f"It should be {want or 'replicated'}.")


# Exercise 6: build_on_mesh(mesh, weights, budget) -> (model, optimizer, step), run on the checker's own cases.


CHAPTER = chapter(5, "DTensor with Keras", {
    "q1": Seeds, "q2": EmbeddingTable, "q3": LayoutMapKeys, "q4": PadTheLastBatch, "q5": MemoryBudget,
    "q6": BuildOnMesh})
