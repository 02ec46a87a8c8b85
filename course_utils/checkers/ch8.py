"""Chapter 8 · Keras 3 on JAX: the exercises' graders and hints.

Exercises 1 and 3's answers are data. Exercise 2's answer is a function that ports a tf_keras ``LayoutMap``
(``ch8_port.py``: its ``collect`` calls it on the checker's maps and models, its ``judge`` needs only ``re``).
Exercise 4 (``ch8_build.py``, its cases in ``ch8_cases.py``) runs the learner's training step with Keras on JAX in
``collect``; its ``judge`` uses NumPy only. Nothing here imports JAX, Keras or TensorFlow at module level.
"""
import itertools
import math

from . import ch8_texts
from .answers import as_int, as_number, as_shape
from .core import Exercise, Feedback, chapter
from .variants import NUMBER_WORDS
from .ch8_build import BudgetStep
from .ch8_port import COLLEAGUE_MAP, PortAnyLayoutMap

UNSHARDED_WORD = "unsharded"  # DTensor's 'not split' (dtensor.UNSHARDED), read in any case
# Exercise 1's array: an arange of the variant's shape, placed on the chapter's 4 x 2 mesh with the variant's
# PartitionSpec (the answer). The chapter's Rosetta showed these five rank-2 layouts; a variant is none of them.
MYSTERY_SHAPE = (6, 12)
ROSETTA_LAYOUTS = ((None, "model"), ("model", None), ("batch", None), ("batch", "model"), (None, None))
MYSTERY_SIZES = (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24)  # a variant's axis lengths (divisible where a mesh axis splits)
# Exercise 2's model: Flatten -> Dense(256, name="d1") -> Dense(128, name="d2") -> Dense(10, name="d3"), named "mlp3".
PORT_SHAPES = {"mlp3/d1/kernel": (784, 256), "mlp3/d1/bias": (256,), "mlp3/d2/kernel": (256, 128),
               "mlp3/d2/bias": (128,), "mlp3/d3/kernel": (128, 10), "mlp3/d3/bias": (10,)}
MESH_AXES = {"batch": 4, "model": 2}
# Exercise 3's meshes, neither of which this machine's 8 devices can build, so that the chapter's way of measuring
# (c33: the shards' bytes of a model built on the mesh) cannot print the answers: 'model' of 16 devices, and a pod.
WIDE_AXES = {"batch": 2, "model": 16}
POD_AXES = {"batch": 8, "model": 8}
# The chapter's own map (section 2, for its 2-layer model), as the same keys would place mlp3's weights: a learner
# who copies it instead of porting the colleague's map of exercise 2.
CHAPTER_MAP_AXES = {"mlp3/d1/kernel": (None, "model"), "mlp3/d1/bias": ("model",), "mlp3/d2/kernel": ("model", None),
                    "mlp3/d2/bias": None, "mlp3/d3/kernel": None, "mlp3/d3/bias": None}


def _reference_port_axes():
    """Each weight's axes under the colleague's tf_keras map (None: replicated), which exercise 3 counts: tf_keras
    tries the keys in the order they were inserted and takes the first that matches: 'd3.kernel' (replicated)
    comes before 'd.*kernel' (rows over 'model'), which takes d1's and d2's kernels; no key names a bias."""
    from .ch8_port import _reference_tf_keras_axes

    return _reference_tf_keras_axes(COLLEAGUE_MAP, PORT_SHAPES)


def _reference_mystery(params=None):
    """Exercise 1's answer: the array (by default 6 x 12) is placed with its PartitionSpec (by default
    (None, "batch")) on the 4 x 2 mesh; its spec, the shape of each device's piece, and how many devices hold each
    piece (the mesh axes the spec does not name replicate it)."""
    params = params or ReadSharding.defaults
    spec = tuple(params["spec"])
    shape = tuple(n // MESH_AXES[axis] if axis else n for n, axis in zip(params["shape"], spec))
    return spec, shape, math.prod(size for axis, size in MESH_AXES.items() if axis not in spec)


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


def _axis_name(index, rank):
    """How a hint names array axis ``index``: the rows and the columns of a matrix, else by number."""
    return ("the rows", "the columns")[index] if rank == 2 else f"array axis {index}"


class ReadSharding(Exercise):
    title = "Read a JAX sharding and name its layout"
    points = 3
    none_is_answer = True  # (None, None) is a meaningful (wrong) answer; the placeholders are `...`
    defaults = {"shape": list(MYSTERY_SHAPE), "spec": [None, "batch"]}
    templates = {"c02": ch8_texts.SHARDING_QUESTION, "c03": ch8_texts.SHARDING_ARRAY,
                 "ch8-q1": ch8_texts.SHARDING_SOLUTION}
    hints = (
        "Print mystery.sharding: a NamedSharding is a mesh plus a PartitionSpec, one entry per array axis.",
        "A PartitionSpec entry None means 'not split along this array axis': DTensor writes it as "
        "UNSHARDED ('unsharded'), Keras as None. Each device's piece is in mystery.addressable_shards.",
        "A block is held by every device whose coordinates differ only along mesh axes the spec does not "
        "name: count the devices whose shard has the same .index.",
    )

    @staticmethod
    def draw(rng):
        """A rank-2 or rank-3 array and a spec that names one or both mesh axes, none of the chapter's Rosetta layouts
        nor the self-study one; every split axis divisible by its mesh axis."""
        specs = [spec for rank in (2, 3) for spec in itertools.product((None, "batch", "model"), repeat=rank)
                 if any(spec) and len(set(filter(None, spec))) == sum(map(bool, spec))
                 and spec not in ROSETTA_LAYOUTS and list(spec) != ReadSharding.defaults["spec"]]
        spec = rng.choice(specs)
        shape = [rng.choice([n for n in MYSTERY_SIZES if not axis or n % MESH_AXES[axis] == 0 and n > MESH_AXES[axis]])
                 for axis in spec]
        return {"shape": shape, "spec": list(spec)}

    def text_values(self):
        shape, spec = self.params["shape"], self.params["spec"]
        return {"shape_text": " × ".join(map(str, shape)), "size": math.prod(shape),
                "shape_args": ", ".join(map(str, shape)),
                "spec_args": ", ".join("None" if axis is None else f'"{axis}"' for axis in spec)}

    def reference_values(self):
        spec, piece, copies = _reference_mystery(self.params)
        shape, rank = self.params["shape"], len(spec)
        notes = []
        for index, (n, axis) in enumerate(zip(shape, spec)):
            name = _axis_name(index, rank)
            if axis is None:
                notes.append(f"the {n} {name[4:]} stay whole" if rank == 2 else f"{name} ({n}) stays whole")
            elif rank == 2:
                notes.append(f"{n} {name[4:]} over {axis} ({MESH_AXES[axis]}) -> {n // MESH_AXES[axis]} {name[4:]}")
            else:
                notes.append(f"{name}: {n} over {axis} ({MESH_AXES[axis]}) -> {n // MESH_AXES[axis]}")
        left = [axis for axis in MESH_AXES if axis not in spec]
        copies_note = (f"'{left[0]}' (size {MESH_AXES[left[0]]}) is not named: each piece sits on "
                       + ("a pair of devices" if copies == 2 else f"{copies} devices") if left else
                       "both mesh axes are named: every device holds a piece of its own")
        return {"keras_axes": "(" + ", ".join("None" if a is None else f'"{a}"' for a in spec) + ")",
                "dtensor_specs": "[" + ", ".join(f'"{UNSHARDED_WORD if a is None else a}"' for a in spec) + "]",
                "shard_shape": _shape_text(piece), "shard_note": "; ".join(notes), "copies": copies,
                "copies_note": copies_note}

    def collect(self, keras_axes, dtensor_specs, shard_shape, copies, seed=0):
        """The answers as plain data: a PartitionSpec, TensorLayout or Layout as its axes (:func:`_axes_data`),
        the rest as given. Nothing depends on ``seed``."""
        return [_axes_data(keras_axes), _axes_data(dtensor_specs), shard_shape, copies]

    def grade(self, keras_axes, dtensor_specs, shard_shape, copies):
        fb = Feedback()
        spec, true_shape, true_copies = _reference_mystery(self.params)
        self._grade_keras_axes(fb, keras_axes, spec)
        self._grade_dtensor_specs(fb, dtensor_specs, [UNSHARDED_WORD if axis is None else axis for axis in spec])
        self._grade_piece(fb, as_shape(shard_shape), as_int(copies), true_shape, true_copies, self.params)
        return fb

    @staticmethod
    def _grade_keras_axes(fb, keras_axes, spec):
        given = tuple(_entry(a) for a in keras_axes) if isinstance(keras_axes, (list, tuple)) else keras_axes
        rank = NUMBER_WORDS.get(len(spec), str(len(spec)))
        if given == spec:
            fb.right("the Keras TensorLayout axes")
        elif isinstance(given, tuple) and any(a in (UNSHARDED_WORD, "None") for a in given):
            fb.wrong("keras_axes: Keras writes 'not split' as the Python value None, not as a string.")
        elif isinstance(given, tuple) and len(given) != len(spec):
            fb.wrong(f"keras_axes: give one entry per ARRAY axis: mystery has {len(spec)} axes, you gave "
                     f"{len(given)} entries.")
        elif isinstance(given, tuple) and sorted(map(str, given)) == sorted(map(str, spec)):
            question = (f"Which of mystery's {rank} axes does its PartitionSpec split?"
                        if sum(map(bool, spec)) == 1 else f"Which mesh axis splits which of mystery's {rank} axes?")
            fb.wrong(f"keras_axes: entry i says how array axis i is split. {question}",
                     answer=f"The names are right, in the wrong order: keras_axes = {spec!r}.")
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
    def _grade_piece(fb, shape, copies, true_shape, true_copies, params):
        devices = math.prod(MESH_AXES.values())
        if shape == true_shape and copies == true_copies:
            fb.right("each piece's shape and how many devices hold it")
            return
        full, spec = tuple(params["shape"]), tuple(params["spec"])
        named = [axis for axis in spec if axis]
        if shape != true_shape:
            why = ReadSharding._grade_shape_slip(shape, full, spec, devices)
            fb.wrong(f"shard_shape: {why}" + ("" if why.endswith("?") else ".") if why else
                     "shard_shape: divide each split array axis by the size of the mesh axis that splits it; an axis "
                     "that is not split stays whole.", answer=f"shard_shape = {true_shape}")
            if copies == true_copies:
                return
        splitting = math.prod(MESH_AXES[axis] for axis in named)
        how = "one mesh axis" if len(named) == 1 else "both mesh axes"
        if copies == 1:
            why = "a mesh axis the spec does not name does not split the array: what does it do to the pieces?"
        elif copies == devices:
            why = f"not all {devices} devices hold the same piece: the spec splits the array over {how}"
        elif len(named) == 1 and copies == splitting:
            why = (f"that is the size of '{named[0]}', the mesh axis that splits the array: devices along it hold "
                   f"DIFFERENT pieces. Which devices hold the same piece?")
        elif copies in [MESH_AXES[axis] for axis in named]:
            axis = next(axis for axis in named if MESH_AXES[axis] == copies)
            why = (f"that is the size of '{axis}', a mesh axis the spec names: devices along it hold DIFFERENT "
                   f"pieces. Which devices hold the same piece?")
        else:
            why = ("count the devices whose shard has the same .index: they differ only along mesh axes the spec does "
                   "not name")
        fb.wrong(f"copies: {why}" + ("" if why.endswith("?") else "."), answer=f"copies = {true_copies}")

    @staticmethod
    def _grade_shape_slip(shape, full, spec, devices):
        """What a wrong shard shape says of how it was worked out, or None."""
        if shape is None or len(shape) != len(full):
            return None
        named = [axis for axis in spec if axis]
        other = {"batch": "model", "model": "batch"}
        swapped = tuple(n // MESH_AXES[other[axis]] if axis else n for n, axis in zip(full, spec))
        by_all = tuple(n // devices if axis else n for n, axis in zip(full, spec))
        if shape == full:
            return "that is the whole array: each device holds a piece of it"
        if shape == swapped:
            return (f"you divided by the size of '{other[named[0]]}'; which mesh axis does the spec name?"
                    if len(named) == 1 else
                    "you swapped the two mesh axes' sizes; which mesh axis does the spec name for each array axis?")
        if len(named) == 1 and shape == by_all:
            return f"you divided by all {devices} devices; only the mesh axis the spec names splits the array"
        whole = [index for index, axis in enumerate(spec) if axis is None and shape[index] < full[index]]
        if whole:
            name = _axis_name(whole[0], len(full))
            return f"you split {name}, which the spec keeps whole; which array axis does it split?"
        return None


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
    title = "Predict the bytes each device holds on meshes larger than this machine"
    points = 3
    # A prediction: matmul_cost prices a kernel on mesh sizes alone (the pod's too) and prints the bytes each device
    # holds; the check counts only while the notebook has not imported it.
    revealed_by = ("course_utils.costs:matmul_cost",)
    hints = (
        "Go weight by weight: how much of each weight does one device keep under the colleague's layouts, and how "
        "many bytes does one float32 take? On the pod, the same layouts meet a mesh whose axes have other sizes.",
        "An axis split over 'model' is divided by the size of 'model' (16 on the 2 x 16 mesh, 8 on the pod); 'batch' "
        "splits only "
        "the data; a weight without a key is whole on every device. Count 4 bytes per float32, and only "
        "model.weights: no optimizer slots or counters. Add up all six weights, biases included.",
    )

    def grade(self, weight_bytes_per_device, weight_bytes_total, pod_bytes_per_device):
        fb = Feedback()
        whole = {path: None for path in PORT_SHAPES}
        want_total, want = _reference_bytes_per_device(whole), _reference_bytes_per_device(mesh_axes=WIDE_AXES)
        self._grade_count(fb, "weight_bytes_total", as_number(weight_bytes_total), weight_bytes_total, want_total, whole,
                          other=want)
        self._grade_count(fb, "weight_bytes_per_device", as_number(weight_bytes_per_device), weight_bytes_per_device,
                          want, _reference_port_axes(), other=want_total)
        self._grade_pod(fb, as_number(pod_bytes_per_device), pod_bytes_per_device, want, want_total)
        return fb

    @staticmethod
    def _grade_pod(fb, given, raw, here, total):
        """The per-device count on the 8 x 8 pod: right, or the typical mistake (the 4 x 2 mesh's share, 'batch'
        dividing the weights too, the counts of the first part)."""
        name, layouts = "pod_bytes_per_device", _reference_port_axes()
        want = _reference_bytes_per_device(layouts, POD_AXES)
        if given is not None and abs(given - want) < 0.5:
            fb.right(f"{name}: the same layouts on a batch=8 x model=8 pod")
            return
        answer = f"{name} = {want}"

        def near(value):
            return given is not None and abs(given - value) < 0.5

        if given is None:
            fb.wrong(f"{name}: give a number of bytes, got {raw!r}.")
        elif near(here) or near(_reference_bytes_per_device(layouts)):
            mesh = "the 2 x 16 mesh" if near(here) else "the notebook's 4 x 2 mesh"
            fb.wrong(f"{name}: that is one device's share on {mesh}. On the pod, 'model' has "
                     f"{POD_AXES['model']} devices: what is each split axis divided by there?", answer=answer)
        elif near(total):
            fb.wrong(f"{name}: that is the whole model; the colleague's map splits some weights over 'model' on the "
                     f"pod too.")
        elif (near(_reference_bytes_per_device(layouts, {"batch": 8, "model": 64})) or near(total / 64)
              or near(total // 64)):
            fb.wrong(f"{name}: 'batch' splits the data, not the weights: a weight is split only along the mesh axes "
                     f"its layout names, and 'model' has {POD_AXES['model']} devices.", answer=answer)
        elif near(want / 4):
            fb.wrong(f"{name}: that counts the numbers (parameters), not their bytes.",
                     answer=f"A float32 takes 4 bytes: {answer}.")
        else:
            fb.wrong(f"{name}: go weight by weight with the colleague's layouts: an axis split over 'model' is divided "
                     f"by {POD_AXES['model']} on the pod, a weight without a key is whole.", answer=answer)

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

        per_weight = {path: _bytes_of(path, layouts, WIDE_AXES) for path in PORT_SHAPES}
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
            chapter_share = name != "weight_bytes_total" and near(_reference_bytes_per_device(CHAPTER_MAP_AXES,
                                                                                              WIDE_AXES))
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
        """The per-device count's typical mistakes on the 2 x 16 mesh: wrong axes, wrong layouts, the notebook's mesh."""
        port, model, batch = _reference_port_axes(), WIDE_AXES["model"], WIDE_AXES["batch"]
        by_batch = {path: tuple("batch" if axis else None for axis in axes) if axes else None
                    for path, axes in port.items()}
        toggled = {}
        for path, shape in PORT_SHAPES.items():
            if len(shape) == 2:
                flipped = None if port[path] else ("model", None)
                toggled[path] = _reference_bytes_per_device({**port, path: flipped}, WIDE_AXES)
        flip = next((path for path, value in toggled.items() if near(value)), None)
        if near(total):
            fb.wrong(f"{name}: that is the whole model; the map of exercise 2 splits some weights over 'model'.")
        elif near(total / model):
            fb.wrong(f"{name}: a {model}th of everything would mean every weight is split over 'model'; weights "
                     f"without a key are held whole on every device.", answer=answer)
        elif near(_reference_bytes_per_device(port)):
            fb.wrong(f"{name}: that is one device's share on the notebook's 4 x 2 mesh, where 'model' has "
                     f"{MESH_AXES['model']} devices; on this mesh it has {model}.", answer=answer)
        elif near(total / (model * batch)) or near(_reference_bytes_per_device(port, {"batch": batch,
                                                                                     "model": model * batch})):
            fb.wrong(f"{name}: 'batch' splits the data, not the weights: a weight is split only along the mesh axes "
                     f"its layout names.", answer=f"Only 'model' (size {model}) splits these weights: {answer}.")
        elif near(_reference_bytes_per_device(port, {"batch": batch, "model": batch})) or near(
                _reference_bytes_per_device(by_batch, WIDE_AXES)):
            fb.wrong(f"{name}: the split weights are divided by {batch}, the size of 'batch'; the layouts of "
                     f"exercise 2 split them over 'model'.", answer=answer)
        elif near(_reference_bytes_per_device(CHAPTER_MAP_AXES, WIDE_AXES)):
            fb.wrong(f"{name}: that is one device's share under the chapter's map (d1 by columns, its bias, d2 by "
                     f"rows), not under the colleague's map of exercise 2.", answer=answer)
        elif flip:
            fb.wrong(f"{name}: your count treats {flip} {'as whole' if port[flip] else 'as split'}: check which "
                     f"weights the map of exercise 2 splits.",
                     answer=f"{flip} is {'split over model' if port[flip] else 'whole'} there: {answer}.")
        else:
            fb.wrong(f"{name}: go weight by weight: an axis split over 'model' is divided by {model} on this mesh, "
                     f"weights without a key are whole.", answer=answer)


# Exercise 4: the checker's own model, mesh, budget and batch (other sizes and names than the notebook's).


CHAPTER = chapter(8, "Keras 3 on JAX", {
    "q1": ReadSharding, "q2": PortAnyLayoutMap, "q3": PredictBytes, "q4": BudgetStep}, uses_tensorflow=False)
