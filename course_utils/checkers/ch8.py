"""Chapter 8 · Keras 3 on JAX: the exercises' graders and hints.

Exercise 1's answers are data. Exercise 2's answer is a Keras 3 ``LayoutMap``: its ``collect`` reads
it by duck typing (iteration over keys, ``.axes``, ``.device_mesh``) into tuples, and its ``judge``
needs neither JAX, Keras nor TensorFlow. Exercise 4 (``ch8_build.py``) runs the learner's training
step with Keras on JAX in ``collect``; its ``judge`` uses NumPy only. Nothing here imports JAX,
Keras or TensorFlow at module level.
"""
import math
import re

from .answers import as_int, as_number, as_shape
from .core import Exercise, Feedback, chapter
from .ch8_build import BudgetStep
from .ch8_run import key_text

UNSHARDED_WORD = "unsharded"  # DTensor's 'not split' (dtensor.UNSHARDED), read in any case
# Exercise 1's array: a 6 x 12 arange, placed on the chapter's 4 x 2 mesh; its PartitionSpec is the answer.
MYSTERY_SHAPE = (6, 12)
# Exercise 2's model: Flatten -> Dense(256, name="d1") -> Dense(128, name="d2") -> Dense(10, name="d3"), named "mlp3".
PORT_SHAPES = {"mlp3/d1/kernel": (784, 256), "mlp3/d1/bias": (256,), "mlp3/d2/kernel": (256, 128),
               "mlp3/d2/bias": (128,), "mlp3/d3/kernel": (128, 10), "mlp3/d3/bias": (10,)}
MESH_AXES = {"batch": 4, "model": 2}
RULES = ("match", "search", "fullmatch")  # tf_keras, Keras 3.13, Keras 3.15
# The chapter's own map (section 2, for its 2-layer model), as the same keys would place mlp3's weights: a learner
# who copies it instead of porting the colleague's map of exercise 2.
CHAPTER_MAP_AXES = {"mlp3/d1/kernel": (None, "model"), "mlp3/d1/bias": ("model",), "mlp3/d2/kernel": ("model", None),
                    "mlp3/d2/bias": None, "mlp3/d3/kernel": None, "mlp3/d3/bias": None}


def _reference_port_axes():
    """Exercise 2's answer: each weight's axes under the colleague's tf_keras map (None: replicated). tf_keras
    tries the keys in the order they were inserted and takes the first that matches: 'd3.kernel' (replicated)
    comes before 'd.*kernel' (rows over 'model'), which takes d1's and d2's kernels; no key names a bias."""
    return {"mlp3/d1/kernel": ("model", None), "mlp3/d1/bias": None, "mlp3/d2/kernel": ("model", None),
            "mlp3/d2/bias": None, "mlp3/d3/kernel": None, "mlp3/d3/bias": None}


def _reference_mystery():
    """Exercise 1's answer: the array (6 x 12) is placed with PartitionSpec(None, "batch") on the 4 x 2 mesh; its
    spec, the shape of each device's piece, and how many devices hold each piece (the mesh axis the spec does not
    name replicates it)."""
    return (None, "batch"), (MYSTERY_SHAPE[0], MYSTERY_SHAPE[1] // MESH_AXES["batch"]), MESH_AXES["model"]


def _axes_data(value):
    """A layout's axes as plain data: a PartitionSpec as a tuple, a TensorLayout's ``axes``, a
    DTensor Layout's ``sharding_specs``, a NumPy array as a list, NumPy strings as str; anything else as it is."""
    if hasattr(value, "sharding_specs"):
        value = list(value.sharding_specs)
    elif hasattr(value, "axes") and not isinstance(value, (str, bytes)):
        value = tuple(value.axes)
    elif type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        value = value.tolist()
    elif type(value).__name__ == "PartitionSpec":  # JAX's: a tuple subclass in older versions, iterable in all
        value = tuple(value)
    if isinstance(value, (list, tuple)):
        items = [str(axis) if isinstance(axis, str) else axis for axis in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def _entry(axis):
    """One entry of a spec as the grader compares it: None, 'unsharded' (any case), 'None' for the string, or a
    mesh axis name (spaces and quotes stripped)."""
    if not isinstance(axis, str):
        return axis
    text = axis.strip().strip("'\"").strip()
    return UNSHARDED_WORD if text.lower() == UNSHARDED_WORD else text


def _shape_text(shape):
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


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

    def collect(self, keras_axes, dtensor_specs, shard_shape, copies, seed=0):
        """The answers as plain data: a PartitionSpec, TensorLayout or Layout as its axes (:func:`_axes_data`),
        the rest as given. Nothing depends on ``seed``."""
        return [_axes_data(keras_axes), _axes_data(dtensor_specs), shard_shape, copies]

    def grade(self, keras_axes, dtensor_specs, shard_shape, copies):
        fb = Feedback()
        spec, true_shape, true_copies = _reference_mystery()
        self._grade_keras_axes(fb, keras_axes, spec)
        self._grade_dtensor_specs(fb, dtensor_specs, [UNSHARDED_WORD if axis is None else axis for axis in spec])
        self._grade_piece(fb, as_shape(shard_shape), as_int(copies), true_shape, true_copies)
        return fb

    @staticmethod
    def _grade_keras_axes(fb, keras_axes, spec):
        given = tuple(_entry(a) for a in keras_axes) if isinstance(keras_axes, (list, tuple)) else keras_axes
        if given == spec:
            fb.right("the Keras TensorLayout axes")
        elif isinstance(given, tuple) and any(a in (UNSHARDED_WORD, "None") for a in given):
            fb.wrong("keras_axes: Keras writes 'not split' as the Python value None, not as a string.")
        elif isinstance(given, tuple) and len(given) != len(spec):
            fb.wrong(f"keras_axes: give one entry per ARRAY axis: mystery has {len(MYSTERY_SHAPE)} axes, you gave "
                     f"{len(given)} entries.")
        elif isinstance(given, tuple) and sorted(map(str, given)) == sorted(map(str, spec)):
            fb.wrong("keras_axes: entry i says how array axis i is split. Which of mystery's two axes does its "
                     "PartitionSpec split?", answer=f"The names are right, in the wrong order: keras_axes = {spec!r}.")
        else:
            fb.wrong("keras_axes: the Keras axes are one entry per array axis, the same entries as the PartitionSpec.",
                     answer=f"keras_axes = {spec!r}")

    @staticmethod
    def _grade_dtensor_specs(fb, dtensor_specs, want):
        got = [_entry(a) for a in dtensor_specs] if isinstance(dtensor_specs, (list, tuple)) else dtensor_specs
        if got == want:
            fb.right("the DTensor sharding specs")
        elif isinstance(got, list) and (None in got or "None" in got):
            fb.wrong("dtensor_specs: DTensor has no None in its sharding specs. How does DTensor write 'not split'?",
                     answer="As dtensor.UNSHARDED, the string 'unsharded'.")
        elif isinstance(got, list) and sorted(map(str, got)) == sorted(map(str, want)):
            fb.wrong("dtensor_specs: like a PartitionSpec, the sharding specs have one entry per TENSOR axis, in the "
                     "tensor's order (not the mesh's).",
                     answer=f"The names are right, in the wrong order: dtensor_specs = {want!r}.")
        else:
            fb.wrong("dtensor_specs: DTensor's sharding specs name the same mesh axes as the PartitionSpec, one per "
                     "array axis.", answer=f"dtensor_specs = {want!r}")

    @staticmethod
    def _grade_piece(fb, shape, copies, true_shape, true_copies):
        devices = math.prod(MESH_AXES.values())
        if shape == true_shape and copies == true_copies:
            fb.right("each piece's shape and how many devices hold it")
            return
        if shape != true_shape:
            rows, columns = MYSTERY_SHAPE
            why = {MYSTERY_SHAPE: "that is the whole array: each device holds a piece of it",
                   (rows, columns // MESH_AXES["model"]): "you divided by the size of 'model'; which mesh axis does "
                                                          "the spec name?",
                   (rows, columns // devices): f"you divided by all {devices} devices; only the mesh axis the spec "
                                               f"names splits the array"}.get(shape)
            if why is None and shape is not None and len(shape) == 2 and shape[1] == columns and shape[0] < rows:
                why = "you split the rows; which array axis does the spec split?"
            fb.wrong(f"shard_shape: {why}" + ("" if why.endswith("?") else ".") if why else
                     "shard_shape: divide each split array axis by the size of the mesh axis that splits it; an axis "
                     "that is not split stays whole.", answer=f"shard_shape = {true_shape}")
            if copies == true_copies:
                return
        why = {1: "a mesh axis the spec does not name does not split the array: what does it do to the pieces?",
               MESH_AXES["batch"]: "that is the size of 'batch', the mesh axis that splits the array: devices "
                                   "along it hold DIFFERENT pieces. Which devices hold the same piece?",
               devices: f"not all {devices} devices hold the same piece: the spec splits the array over one mesh "
                        f"axis"}.get(copies, "count the devices whose shard has the same .index: they differ only "
                                             "along mesh axes the spec does not name")
        fb.wrong(f"copies: {why}" + ("" if why.endswith("?") else "."), answer=f"copies = {true_copies}")


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
        "First work out which layout the tf_keras map gives each of the six weights: tf_keras tries its keys in the "
        "order they were inserted, with re.match on names such as 'd3.kernel', and the first key that matches wins.",
        "Keras 3 looks up variable.path, such as 'mlp3/d1/kernel', and raises ValueError when several keys match "
        "one path. Write one key per weight you split, as a pattern for the whole path, e.g. '.*/d1/kernel': then "
        "re.match, re.search and re.fullmatch all agree on it, so the map works on Keras 3.13 and 3.15.",
        "Each value is a tuple of mesh axis names or None, one per weight axis, as DTensor's sharding specs: "
        "('model', None) splits the rows (axis 0), (None, 'model') the columns. Weights that stay replicated need no "
        "key (a key with only None does the same).",
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
                # an exact key wins before any pattern, in tf_keras and in Keras 3 (LayoutMap.__getitem__)
                matching = [path] if path in keys else [key for key in keys if getattr(re, rule)(key, path)]
                found[rule][path] = ("several" if len(matching) > 1 else
                                     _as_layout(keys[matching[0]], len(shape)) if matching else None)
        several = [(path, rule) for rule in RULES[1:] for path in PORT_SHAPES if found[rule][path] == "several"]
        if several:
            path, rule = several[0]
            if old_form:
                fb.wrong(f"The key(s) {old_form} are still in tf_keras' form ('d1.kernel'): Keras 3 paths use '/' "
                         f"and start with the model's name, as printed above the exercise.")
            fb.wrong(f"{path!r} matches several keys under re.{rule} (Keras {'3.13' if rule == 'search' else '3.15'}): "
                     f"Keras 3 raises ValueError there, where tf_keras took the first key inserted. Make each key fit "
                     f"the weights it means, and only those.")
            return fb
        fullmatch = found["fullmatch"]
        if fullmatch == port_axes:
            fb.right("every weight gets the layout of the tf_keras map", points=2)
        else:
            self._judge_wrong_layouts(fb, fullmatch, port_axes, old_form)
        if all(found[rule] == fullmatch for rule in RULES):
            fb.right("the map means the same under re.match, re.search and re.fullmatch")
        else:
            fb.wrong("Your keys mean different things under re.match (tf_keras), re.search (Keras 3.13) and "
                     "re.fullmatch (Keras 3.15): write each key as a pattern for the whole path.")
        return fb

    @staticmethod
    def _judge_wrong_layouts(fb, fullmatch, port_axes, old_form):
        """Why the layouts found under re.fullmatch are not the tf_keras map's: the typical mistakes first."""
        wrong = [path for path, axes in port_axes.items() if fullmatch[path] != axes]
        answer = ("Keys: '.*/d1/kernel': ('model', None), '.*/d2/kernel': ('model', None); d3's kernel and every bias "
                  "stay whole (no key).")
        if fullmatch == CHAPTER_MAP_AXES:
            fb.wrong("That is the chapter's map (section 2, for its own model), not the colleague's: port the map "
                     "shown above the exercise, weight by weight.", answer=answer)
            return
        too_long = [path for path in wrong if fullmatch[path] is not None
                    and len(fullmatch[path]) > len(PORT_SHAPES[path])]
        transposed = [path for path in wrong if fullmatch[path] is not None and port_axes[path] is not None
                      and tuple(reversed(fullmatch[path])) == port_axes[path]]
        if old_form:
            fb.wrong(f"The key(s) {old_form} are still in tf_keras' form ('d1.kernel'): Keras 3 paths use '/' "
                     f"and start with the model's name, as printed above the exercise.")
        if too_long:
            fb.wrong(f"These weights get more axes than they have (Keras fails to place them): {too_long}.")
        if transposed:
            fb.wrong(f"These weights get the other axis split than the tf_keras map splits: {transposed}. Entry i of "
                     f"a layout is for weight axis i, as in DTensor's sharding_specs.", answer=answer)
        split_first = [path for path in wrong if port_axes[path] is None and fullmatch[path] is not None
                       and path.endswith("/d3/kernel")]
        if split_first:
            fb.wrong(f"Your map splits {split_first[0]}, which one of the colleague's keys also matches. But tf_keras "
                     f"tries the keys in the order they were inserted and takes the FIRST that matches: which key "
                     f"decides 'd3.kernel'?", answer="'d3.kernel' comes first: d3's kernel stays whole. " + answer)
        rest = [path for path in wrong if path not in transposed + split_first]
        if rest or not (transposed or split_first):
            fb.wrong(f"Under Keras 3.15's rule (re.fullmatch) these weights get another layout than the tf_keras "
                     f"map gives them: {rest or wrong}.", answer=answer)


def _reference_bytes_per_device(layouts=None, mesh_axes=MESH_AXES, shapes=PORT_SHAPES, bytes_per_number=4):
    """The bytes of exercise 2's weights on each device under ``layouts`` (by default the tf_keras map's;
    every device holds the same): exercise 3's answer."""
    layouts = _reference_port_axes() if layouts is None else layouts
    return sum(_bytes_of(path, layouts, mesh_axes, shapes, bytes_per_number) for path in shapes)


def _bytes_of(path, layouts, mesh_axes=MESH_AXES, shapes=PORT_SHAPES, bytes_per_number=4):
    """The bytes of one weight that each device holds under ``layouts`` (None or no entry: whole)."""
    shape = shapes[path]
    axes = layouts.get(path) or (None,) * len(shape)
    return bytes_per_number * math.prod(size // (mesh_axes[axis] if axis else 1) for size, axis in zip(shape, axes))


UNITS = ((2 ** 20, "MiB"), (2 ** 10, "KiB"), (10 ** 6, "MB"), (10 ** 3, "kB"))


class PredictBytes(Exercise):
    title = "Predict the bytes each device holds"
    points = 2
    hints = (
        "Go weight by weight: how much of each weight does one device keep under the layouts of exercise 2, and how "
        "many bytes does one float32 take?",
        "An axis split over 'model' (size 2) is halved on each device; 'batch' splits only the data; a weight without "
        "a key is whole on every device. Count 4 bytes per float32, and only model.weights: no optimizer slots or "
        "counters. Add up all six weights, biases included.",
    )

    def grade(self, weight_bytes_per_device, weight_bytes_total):
        fb = Feedback()
        whole = {path: None for path in PORT_SHAPES}
        want_total, want = _reference_bytes_per_device(whole), _reference_bytes_per_device()
        self._grade_count(fb, "weight_bytes_total", as_number(weight_bytes_total), weight_bytes_total, want_total, whole,
                          other=want)
        self._grade_count(fb, "weight_bytes_per_device", as_number(weight_bytes_per_device), weight_bytes_per_device,
                          want, _reference_port_axes(), other=want_total)
        return fb

    @staticmethod
    def _grade_count(fb, name, given, raw, want, layouts, other):
        """One of the two counts: right, or the typical mistake it makes (``layouts``: the weights' layouts that
        give ``want``; ``other``: the other count's right value)."""
        if given is not None and abs(given - want) < 0.5:
            fb.right(name)
            return
        answer = f"{name} = {want}"
        if given is None:
            fb.wrong(f"{name}: give a number of bytes, got {raw!r}.")
            return

        def near(value):
            return abs(given - value) < 0.5

        per_weight = {path: _bytes_of(path, layouts) for path in PORT_SHAPES}
        biases = sum(nbytes for path, nbytes in per_weight.items() if path.endswith("/bias"))
        unit = next((unit for factor, unit in UNITS
                     if 0 < given < want / 100 and abs(given * factor - want) <= 0.01 * want), None)
        left_out = next((path for path, nbytes in per_weight.items() if near(want - nbytes)), None)
        if near(want / 4):
            fb.wrong(f"{name}: that counts the numbers (parameters), not their bytes.",
                     answer=f"A float32 takes 4 bytes: {answer}.")
        elif unit:
            fb.wrong(f"{name}: that looks like {unit}; the exercise asks for bytes (a whole number).", answer=answer)
        elif near(want + 8) or near(want + 12):
            fb.wrong(f"{name}: your count includes {int(round(given - want))} bytes that are no weight: a scalar "
                     f"such as the optimizer's step counter (iterations, an int64, 8 bytes). Count model.weights "
                     f"only.")
        elif near(want - biases):
            fb.wrong(f"{name}: your sum leaves out the biases; every weight counts, the small ones too.")
        elif left_out:
            chapter_share = name != "weight_bytes_total" and near(_reference_bytes_per_device(CHAPTER_MAP_AXES))
            fb.wrong(f"{name}: your sum leaves out {left_out}; every weight counts, the small ones too."
                     + (" (Or it is one device's share under the chapter's map, which splits d1's bias, not under the "
                        "colleague's map of exercise 2.)" if chapter_share else ""))
        elif name == "weight_bytes_total":
            why = ("that is one device's share; the total counts every weight whole" if near(other) else
                   "add up the bytes of all six weights, whole, biases included")
            fb.wrong(f"{name}: {why}.", answer=f"784 x 256 + 256 + ... numbers at 4 bytes per float32: {answer}")
        else:
            PredictBytes._grade_share(fb, name, given, want, other, near, answer)

    @staticmethod
    def _grade_share(fb, name, given, want, total, near, answer):
        """The per-device count's typical mistakes: wrong axes, wrong layouts."""
        port = _reference_port_axes()
        by_batch = {path: tuple("batch" if axis else None for axis in axes) if axes else None
                    for path, axes in port.items()}
        toggled = {}
        for path, shape in PORT_SHAPES.items():
            if len(shape) == 2:
                flipped = None if port[path] else ("model", None)
                toggled[path] = _reference_bytes_per_device({**port, path: flipped})
        flip = next((path for path, value in toggled.items() if near(value)), None)
        if near(total):
            fb.wrong(f"{name}: that is the whole model; the map of exercise 2 splits some weights over 'model'.")
        elif near(total / 2):
            fb.wrong(f"{name}: half of everything would mean every weight is split over 'model'; weights without a key "
                     f"are held whole on every device.", answer=answer)
        elif near(total / 8) or near(_reference_bytes_per_device(port, {"batch": 4, "model": 8})):
            fb.wrong(f"{name}: 'batch' splits the data, not the weights: a weight is split only along the mesh axes "
                     f"its layout names.", answer=f"Only 'model' (size 2) splits these weights: {answer}.")
        elif near(_reference_bytes_per_device(port, {"batch": 4, "model": 4})) or near(
                _reference_bytes_per_device(by_batch)):
            fb.wrong(f"{name}: the split weights are divided by 4, the size of 'batch'; the layouts of exercise 2 "
                     f"split them over 'model'.", answer=answer)
        elif near(_reference_bytes_per_device(CHAPTER_MAP_AXES)):
            fb.wrong(f"{name}: that is one device's share under the chapter's map (d1 by columns, its bias, d2 by "
                     f"rows), not under the colleague's map of exercise 2.", answer=answer)
        elif flip:
            fb.wrong(f"{name}: your count treats {flip} {'as whole' if port[flip] else 'as split'}: check which "
                     f"weights the map of exercise 2 splits.",
                     answer=f"{flip} is {'split over model' if port[flip] else 'whole'} there: {answer}.")
        else:
            fb.wrong(f"{name}: go weight by weight: an axis split over 'model' is halved, weights without a key are "
                     f"whole.", answer=answer)


# Exercise 4: the checker's own model, mesh, budget and batch (other sizes and names than the notebook's).


CHAPTER = chapter(8, "Keras 3 on JAX", {
    "q1": ReadSharding, "q2": PortLayoutMap, "q3": PredictBytes, "q4": BudgetStep}, uses_tensorflow=False)
