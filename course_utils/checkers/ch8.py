"""Chapter 8 · Keras 3 on JAX: the exercises' graders and hints.

Exercise 1's answers are data. Exercise 2's answer is a Keras 3 ``LayoutMap``: its ``collect`` reads
it by duck typing (iteration over keys, ``.axes``, ``.device_mesh``) into tuples, and its ``judge``
needs neither JAX, Keras nor TensorFlow. Exercise 4 (``ch8_build.py``) runs the learner's training
step with Keras on JAX in ``collect``; its ``judge`` uses NumPy only. Nothing here imports JAX,
Keras or TensorFlow at module level.
"""
import math
import re

from .answers import as_int, as_shape
from .core import Exercise, Feedback, chapter
from .ch8_build import BudgetStep
from .ch8_run import key_text

UNSHARDED_WORDS = ("unsharded", "UNSHARDED")
# Exercise 2's model: Flatten -> Dense(256, name="d1") -> Dense(128, name="d2") -> Dense(10, name="d3"), named "mlp3".
PORT_SHAPES = {"mlp3/d1/kernel": (784, 256), "mlp3/d1/bias": (256,), "mlp3/d2/kernel": (256, 128),
               "mlp3/d2/bias": (128,), "mlp3/d3/kernel": (128, 10), "mlp3/d3/bias": (10,)}
MESH_AXES = {"batch": 4, "model": 2}
RULES = ("match", "search", "fullmatch")  # tf_keras, Keras 3.13, Keras 3.15


def _reference_port_axes():
    """Exercise 2's answer: each weight's axes under chapter 5's tf_keras map (None: replicated)."""
    return {"mlp3/d1/kernel": (None, "model"), "mlp3/d1/bias": ("model",), "mlp3/d2/kernel": ("model", None),
            "mlp3/d2/bias": None, "mlp3/d3/kernel": None, "mlp3/d3/bias": None}


def _reference_mystery():
    """Exercise 1's answer: the array (8 x 6) is placed with PartitionSpec("batch", None) on the 4 x 2 mesh; its
    spec, the shape of each device's piece, and how many devices hold each piece (the mesh axis the spec does not
    name replicates it)."""
    return ("batch", None), (8 // MESH_AXES["batch"], 6), MESH_AXES["model"]


class ReadSharding(Exercise):
    title = "Read a JAX sharding and name its layout"
    points = 3
    none_is_answer = True  # (None, None) is a meaningful (wrong) answer; the placeholders are `...`
    hints = (
        "Print mystery.sharding: a NamedSharding is a mesh plus a PartitionSpec, one entry per array axis.",
        "A PartitionSpec entry None means 'not split along this array axis': DTensor writes it as "
        "UNSHARDED ('unsharded'), Keras as None. Each device's piece is in mystery.addressable_shards.",
        "A block is held by every device whose coordinates differ only along mesh axes the spec does not "
        "name: count the devices whose shard has the same .index.",
    )

    def grade(self, keras_axes, dtensor_specs, shard_shape, copies):
        fb = Feedback()
        spec, true_shape, true_copies = _reference_mystery()

        given = tuple(keras_axes) if isinstance(keras_axes, (list, tuple)) else keras_axes
        if given == spec:
            fb.right("the Keras TensorLayout axes")
        elif isinstance(given, tuple) and any(a in UNSHARDED_WORDS or a == "None" for a in given):
            fb.wrong("Keras writes 'not split' as the Python value None, not as a string.")
        elif isinstance(given, tuple) and sorted(map(str, given)) == sorted(map(str, spec)):
            fb.wrong("Those are the right names in the wrong order: entry i is the mesh axis that splits array axis i.")
        else:
            fb.wrong("The Keras axes are one entry per array axis, the same entries as the PartitionSpec.",
                     answer=f"keras_axes = {spec!r}")

        want_dtensor = ["unsharded" if axis is None else axis for axis in spec]
        got = list(dtensor_specs) if isinstance(dtensor_specs, (list, tuple)) else dtensor_specs
        if isinstance(got, list) and [("unsharded" if a in UNSHARDED_WORDS else a) for a in got] == want_dtensor:
            fb.right("the DTensor sharding specs")
        elif isinstance(got, list) and None in got:
            fb.wrong("DTensor has no None in its sharding specs: 'not split' is dtensor.UNSHARDED, the string "
                     "'unsharded'.")
        else:
            fb.wrong("DTensor's sharding specs name the same mesh axes as the PartitionSpec, one per array axis.",
                     answer=f"dtensor_specs = {want_dtensor!r}")

        shape = as_shape(shard_shape)
        if shape == true_shape and as_int(copies) == true_copies:
            fb.right("each piece's shape and how many devices hold it")
        elif shape != true_shape:
            fb.wrong("The shape of one device's piece: divide each split array axis by the size of the mesh axis "
                     "that splits it; an axis that is not split stays whole.",
                     answer=f"shard_shape = {true_shape}")
        else:
            fb.wrong("Count again how many devices hold the same piece: the mesh axes the spec does not name "
                     "replicate it.", answer=f"copies = {true_copies}")
        return fb


def _keys_and_axes(layout_map):
    """The keys of a Keras 3 LayoutMap, in order, each with its axes (exact-key lookup returns its layout):
    ``[(key, axes), ...]``; a compiled pattern as its text."""
    return [(key_text(key), tuple(layout_map[key].axes)) for key in list(layout_map)]


# tf_keras' names of the same weights, as chapter 5's LayoutMap keys them ("d1.kernel").
TF_KERAS_NAMES = tuple(path.split("/", 1)[1].replace("/", ".") for path in PORT_SHAPES)


def _in_tf_keras_form(key):
    """Whether ``key`` names a weight the tf_keras way ('d1.kernel') and fits no Keras 3 path as a whole."""
    try:
        return (any(re.fullmatch(key, name) for name in TF_KERAS_NAMES)
                and not any(re.fullmatch(key, path) for path in PORT_SHAPES))
    except re.error:
        return False


def _as_layout(axes, rank):
    """A weight's axes as the tf_keras map would compare them: None when replicated, else one entry per axis.

    JAX reads a PartitionSpec shorter than the array as unsplit on the axes it leaves out, so
    ``(None,)`` and ``(None, None)`` on a matrix, like no key at all, replicate it; ``("model",)`` on a
    matrix is ``("model", None)``. Axes longer than the weight make Keras fail: they stay as given.
    """
    if axes is None or len(axes) > rank:
        return axes
    axes = tuple(axes) + (None,) * (rank - len(axes))
    return None if all(axis is None for axis in axes) else axes


class PortLayoutMap(Exercise):
    title = "Port a tf_keras LayoutMap to Keras 3"
    points = 3
    hints = (
        "Keras 3 looks up variable.path, such as 'mlp3/d1/kernel', and each key must fit a whole path.",
        "Write one key per weight, as a pattern for the whole path, e.g. '.*/d1/kernel'. Then re.match, "
        "re.search and re.fullmatch all agree on it, so the map works on Keras 3.13 and 3.15.",
        "Each value is a tuple of mesh axis names or None, one per weight axis: (None, 'model') splits the "
        "columns. Weights that stay replicated need no key (a key with only None does the same).",
    )

    def collect(self, layout_map, seed=0):
        """What crosses: ``{"type": the answer's type name, "keys": [(key, axes), ...] in the map's order,
        or None when the answer is no map of layouts, "mesh": (shape, axis names) of its device mesh, or
        None}``. Nothing in the answer depends on ``seed``."""
        data = {"type": type(layout_map).__name__, "keys": None, "mesh": None}
        try:
            data["keys"] = _keys_and_axes(layout_map)
        except (TypeError, AttributeError, KeyError):
            return data
        device_mesh = getattr(layout_map, "device_mesh", None)
        if device_mesh is not None:
            data["mesh"] = (tuple(device_mesh.shape), tuple(device_mesh.axis_names))
        return data

    def judge(self, data, seed=0):
        """Matches the keys that :meth:`collect` sent against the weights' paths under each rule, as
        tf_keras and Keras 3 do, and compares the layouts found with the tf_keras map's."""
        fb = Feedback()
        if data["keys"] is None:
            fb.wrong("layout_map must be a keras.distribution.LayoutMap with a TensorLayout (a tuple of axes) per key.")
            return fb
        keys = {key: tuple(axes) for key, axes in data["keys"]}
        if not keys:
            fb.wrong("The map has no keys yet: add one per weight that the tf_keras map splits.")
            return fb
        if data["mesh"] is not None:
            shape, axis_names = (tuple(part) for part in data["mesh"])
            if (shape, axis_names) != ((4, 2), ("batch", "model")):
                fb.wrong(f"The map is built on a {' x '.join(map(str, shape))} mesh with axes {axis_names}; chapter "
                         f"5's map is on a 4 x 2 mesh ('batch', 'model'): build it on the notebook's device_mesh.")
                return fb
        port_axes = _reference_port_axes()
        old_form = sorted(key for key in keys if _in_tf_keras_form(key))
        found = {rule: {} for rule in RULES}
        for rule in RULES:
            for path, shape in PORT_SHAPES.items():
                matching = [key for key in keys if getattr(re, rule)(key, path)]
                found[rule][path] = ("several" if len(matching) > 1 else
                                     _as_layout(keys[matching[0]], len(shape)) if matching else None)
        if any(value == "several" for rule in RULES for value in found[rule].values()):
            fb.wrong("Some path matches several keys: Keras 3 raises ValueError there (tf_keras took the first). "
                     "Make each key fit one weight only.")
            return fb
        fullmatch = found["fullmatch"]
        if fullmatch == port_axes:
            fb.right("every weight gets the layout of the tf_keras map", points=2)
        else:
            wrong = [path for path, axes in port_axes.items() if fullmatch[path] != axes]
            too_long = [path for path in wrong if fullmatch[path] is not None
                        and len(fullmatch[path]) > len(PORT_SHAPES[path])]
            if old_form:
                fb.wrong(f"The key(s) {old_form} are still in tf_keras' form ('d1.kernel'): Keras 3 paths use '/' "
                         f"and start with the model's name, as printed above the exercise.")
            if too_long:
                fb.wrong(f"These weights get more axes than they have (Keras fails to place them): {too_long}.")
            fb.wrong(f"Under Keras 3.15's rule (re.fullmatch) these weights get another layout than the tf_keras "
                     f"map gives them: {wrong}.",
                     answer="'.*/d1/kernel': (None, 'model'), '.*/d1/bias': ('model',), '.*/d2/kernel': ('model', None)")
        if all(found[rule] == fullmatch for rule in RULES):
            fb.right("the map means the same under re.match, re.search and re.fullmatch")
        else:
            fb.wrong("Your keys mean different things under re.match (tf_keras), re.search (Keras 3.13) and "
                     "re.fullmatch (Keras 3.15): write each key as a pattern for the whole path.")
        return fb


def _reference_bytes_per_device(layouts=None, mesh_axes=MESH_AXES, shapes=PORT_SHAPES, bytes_per_number=4):
    """The bytes of exercise 2's weights on each device under ``layouts`` (by default the tf_keras map's;
    every device holds the same): exercise 3's answer."""
    layouts = _reference_port_axes() if layouts is None else layouts
    total = 0
    for path, shape in shapes.items():
        axes = layouts[path] or (None,) * len(shape)
        total += bytes_per_number * math.prod(size // (mesh_axes[axis] if axis else 1) for size, axis in zip(shape, axes))
    return total


class PredictBytes(Exercise):
    title = "Predict the bytes each device holds"
    points = 2
    hints = (
        "Go weight by weight: divide each axis the layout splits by the size of its mesh axis (model = 2), "
        "multiply the sizes, and count 4 bytes per float32.",
        "Weights without a key are replicated: every device holds all of them. Adam's slots would double "
        "and triple this; here only the weights count.",
    )

    def grade(self, weight_bytes_per_device, weight_bytes_total):
        fb = Feedback()
        per_device, total = as_int(weight_bytes_per_device), as_int(weight_bytes_total)
        want_total = _reference_bytes_per_device({path: None for path in PORT_SHAPES})
        want = _reference_bytes_per_device()
        if total == want_total:
            fb.right("the model's size")
        elif total is not None and total * 4 == want_total:
            fb.wrong("That is the number of weights; a float32 takes 4 bytes.")
        else:
            fb.wrong("Add up all six weights' sizes (784·256 + 256 + ...) at 4 bytes each.",
                     answer=f"weight_bytes_total = {want_total}")
        if per_device == want:
            fb.right("the bytes on each device")
        elif per_device is not None and per_device * 2 == want_total:
            fb.wrong("Half of everything would mean every weight is split over 'model'; the replicated ones "
                     "(d2's bias, d3) are held whole on every device.")
        elif per_device is not None and per_device * 8 in (want, want_total):
            fb.wrong("Only the 'model' axis (size 2) splits these weights; 'batch' splits the data, not them.")
        else:
            fb.wrong("Go weight by weight: split axes divided by 2, replicated weights whole.",
                     answer=f"weight_bytes_per_device = {want}")
        return fb




# Exercise 4: the checker's own model, mesh, budget and batch (other sizes and names than the notebook's).


CHAPTER = chapter(8, "Keras 3 on JAX", [ReadSharding, PortLayoutMap, PredictBytes, BudgetStep], uses_tensorflow=False)
