"""Chapter 4 · exercises 1 and 2: a mesh whose axis order puts a layer's units on chosen devices, with the layer's
layouts on it; a tensor packed by hand with a layout that splits both mesh axes, in the mesh's device order."""
import re

from .answers import UNSHARDED, global_numpy, mesh_dims, short_error, specs
from ..meshes import mesh_text
from .core import Exercise, Feedback

MESH = [("batch", 4), ("model", 2)]  # the chapter's mesh (exercises 2 to 4 use it)


def by_label(answer, labels, aliases=None):
    """``answer`` with the keys that name one of ``labels`` in another spelling ('A', '(a)', ' a ', 'A_Held',
    'a-held', or a key of ``aliases``) renamed to that label; other keys and non-dicts are returned as they are."""
    if not isinstance(answer, dict):
        return answer
    renamed = {}
    for key, value in answer.items():
        label = key
        if isinstance(key, str):
            spelled = key.strip().strip("()[]'\".:").strip().lower().replace("-", "_").replace(" ", "_")
            spelled = (aliases or {}).get(spelled, spelled)
            if spelled in labels and spelled not in answer:
                label = spelled
        renamed[label if label not in renamed else key] = value
    return renamed


# Exercise 1: a dense layer h = x @ w + b, 784 inputs -> 128 units; its units over 'model', its examples over
# 'batch'; the mesh's axis order must put units 0-63 on CPU:0-3 and units 64-127 on CPU:4-7.
LAYER_AXES = {"batch": 4, "model": 2}
LAYER_TENSORS = {"w": "w [784, 128]: inputs x units", "b": "b [128]: units", "h": "h [N, 128]: examples x units"}
LAYER_RANKS = {"w": 2, "b": 1, "h": 2}
LAYER_ALIASES = {"w_layout": "w", "weight": "w", "kernel": "w", "b_layout": "b", "bias": "b", "h_layout": "h",
                 "output": "h", "outputs": "h", "out": "h", "activations": "h", "y": "h"}
HALVES = ([0, 1, 2, 3], [4, 5, 6, 7])  # the CPUs asked for units 0-63 and for units 64-127 (the question says so)


def cpu_number(device):
    """The number of a CPU device name ('/job:localhost/.../device:CPU:5' -> 5), else None."""
    found = re.search(r"CPU:(\d+)\s*$", str(device), re.IGNORECASE)
    return int(found.group(1)) if found else None


def model_halves(mesh):
    """The CPU numbers at 'model' index 0 and at index 1 of ``mesh``: where a layout [U, 'model'] puts the first and
    the second half of a matrix's columns."""
    devices = mesh.local_devices()
    halves = ([], [])
    for device_id, location in mesh.unravel_index().items():
        halves[location["model"]].append(cpu_number(devices[device_id]))
    return sorted(halves[0]), sorted(halves[1])


def _cpus_text(numbers):
    """'CPU:4-CPU:7' for consecutive numbers, else 'CPU:1, CPU:3, ...'."""
    if len(numbers) > 2 and list(numbers) == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"CPU:{numbers[0]}-CPU:{numbers[-1]}"
    return ", ".join(f"CPU:{n}" for n in numbers)


def _reference_layer_specs():
    """Exercise 1's layouts: w's units over 'model', b's units likewise, h's examples over 'batch' and units over
    'model'."""
    return {"w": [UNSHARDED, "model"], "b": ["model"], "h": ["batch", "model"]}


def _reference_layer_mesh():
    """Exercise 1's mesh: 'model' first, so that it varies slowest and each half of the units is on 4 neighbours."""
    return [("model", 2), ("batch", 4)]


def _grade_layer_mesh(fb, mesh):
    """Add a line about exercise 1's mesh; return whether it puts each half of the units where the question asks."""
    if not (hasattr(mesh, "dim_names") and hasattr(mesh, "local_devices")):
        fb.wrong(f"mesh should be a dtensor.Mesh (dtensor.create_mesh or make_mesh), not a {type(mesh).__name__}.")
        return False
    dims = mesh_dims(mesh)
    if dict(dims) != LAYER_AXES or len(dims) != 2:
        fb.wrong(f"mesh is {mesh_text(dims)}; the layer needs a 2-D mesh with the axes batch (4) and model (2).")
        return False
    cpus = [cpu_number(device) for device in mesh.local_devices()]
    if sorted(c for c in cpus if c is not None) != list(range(8)):
        fb.wrong("mesh should use the 8 CPUs, CPU:0 to CPU:7 (devices=cpus).")
        return False
    first, second = model_halves(mesh)
    if (first, second) == HALVES:
        fb.right(f"mesh: {mesh_text(dims)}: units 0-63 of w on {_cpus_text(first)}, 64-127 on {_cpus_text(second)}")
        return True
    right_order = _reference_layer_mesh()
    reveal = f"Put 'model' first: dtensor.create_mesh({right_order}, devices=cpus)."
    if cpus == list(range(8)):
        fb.wrong(f"mesh is {mesh_text(dims)}: it does not put units 64-127 on CPU:4-7. A mesh numbers its "
                 f"devices row-major, the LAST axis varying fastest (mesh.unravel_index() lists each device's "
                 f"coordinates): where does this mesh put them?",
                 answer=f"This mesh puts them on {_cpus_text(second)}. {reveal}")
    else:
        fb.wrong(f"mesh puts units 64-127 on {_cpus_text(second)}. Take the CPUs in order (devices=cpus) and let "
                 f"the order of the mesh's axes decide where each half goes.", answer=reveal)
    return False


def _judge_layer_specs(key, given):
    """Why ``given`` (the specs of exercise 1's tensor ``key``, of the right rank) is wrong: (why, reveal)."""
    right = _reference_layer_specs()[key]
    reveal = f"{key}: {right}."
    if all(spec == UNSHARDED for spec in given):
        return {"w": "w is replicated: every device would hold the columns of all 128 units, but each computes only "
                     "half of them.",
                "b": "b is replicated: every device holds all 128 biases, but it adds only those of the units it "
                     "computes.",
                "h": "h is replicated: every device would hold every example and every unit, but each computes "
                     "only its own examples and units."}[key], reveal
    if key in ("w", "b") and "batch" in given:
        return (f"{key}'s layout uses 'batch', the mesh axis that splits the EXAMPLES. {key} belongs to the layer: "
                f"every device along 'batch' needs the same part of it, which a layout says by not naming 'batch'.",
                reveal)
    if key == "w" and given == ["model", UNSHARDED]:
        return ("w's layout splits its ROWS (axis 0, the 784 inputs). The specs follow w's axes (inputs, then "
                "units), whatever the order of the mesh's axes: which axis of w holds the units?",
                "The units are axis 1: [UNSHARDED, 'model'].")
    if key == "h" and given == ["model", "batch"]:
        return ("h's specs are in the order of your MESH's axes. A layout has one spec per axis of the TENSOR, in "
                "the tensor's order: h is (examples, units).", reveal)
    if key == "h" and given == ["batch", UNSHARDED]:
        return ("h keeps all 128 units whole on every device, but each device computes only the units of its own "
                "columns of w.", reveal)
    if key == "h" and given == [UNSHARDED, "model"]:
        return "h's examples are not split, but the layer splits its examples over 'batch'.", reveal
    return f"{key}'s layout does not split {LAYER_TENSORS[key]} as the layer does.", reveal


def _grade_layer_layout(fb, key, raw, mesh):
    """Add a line about the layout of exercise 1's tensor ``key``; return whether it is right."""
    from tensorflow.experimental import dtensor

    rank = LAYER_RANKS[key]
    if isinstance(raw, (tuple, list)) and any(spec is None for spec in raw):
        fb.wrong(f"{key}: {tuple(raw)!r} is Keras 3's keras.distribution form (None for an axis that is not split). "
                 f"DTensor wants a dtensor.Layout(sharding_specs, mesh), with dtensor.UNSHARDED where Keras 3 "
                 f"writes None.")
        return False
    if raw is None or raw is Ellipsis:
        fb.wrong(f"{key}: not answered yet.")
        return False
    if not isinstance(raw, dtensor.Layout):
        fb.wrong(f"{key}: give a dtensor.Layout(sharding_specs, mesh), not a {type(raw).__name__}.")
        return False
    given, right = specs(raw), _reference_layer_specs()[key]
    if len(given) != rank:
        axes = "one axis" if rank == 1 else f"{rank} axes"
        fb.wrong(f"{key}: {len(given)} spec(s) {given}, but {LAYER_TENSORS[key].split(':')[0]} has {axes}. A layout "
                 f"has one spec per TENSOR axis, not one per mesh axis; the mesh axes it does not name replicate "
                 f"the tensor.")
        return False
    if given != right:
        why, reveal = _judge_layer_specs(key, given)
        fb.wrong(f"{key}: {given}: {why}", answer=reveal)
        return False
    on = raw.mesh
    if mesh_dims(on) != mesh_dims(mesh) or list(on.local_devices()) != list(mesh.local_devices()):
        fb.wrong(f"{key}: the specs are right, but the layout lives on another mesh ({mesh_text(mesh_dims(on))}); "
                 f"build it on your mesh.")
        return False
    fb.right(f"{key}: {given}")
    return True


class MeshAndLayout(Exercise):
    title = "Choose the mesh's axis order, and lay out a layer"
    points = 2
    hints = (
        "Where does a 2-D mesh put each device? mesh.unravel_index() gives each device's coordinates. And a Layout "
        "has one sharding spec per TENSOR axis, in the tensor's own order, whatever the order of the mesh's axes.",
        "Devices are numbered row-major: the LAST mesh axis varies fastest. For the layouts, name each tensor's axes "
        "first (w: inputs, units; b: units; h: examples, units): the units go over 'model', the examples over "
        "'batch', and a mesh axis that a layout does not name replicates the tensor.",
    )

    def grade(self, mesh, layout):
        from tensorflow.experimental import dtensor

        fb = Feedback()
        mesh_ok = _grade_layer_mesh(fb, mesh)
        if isinstance(layout, dtensor.Layout):
            fb.wrong(f"layout is one Layout ({specs(layout)}); give a dict with a dtensor.Layout for each of the "
                     f"layer's tensors: {{'w': ..., 'b': ..., 'h': ...}}.")
            return fb
        if isinstance(layout, (tuple, list)) and len(layout) == 3 and not any(isinstance(item, str) or item is None
                                                                              for item in layout):
            layout = dict(zip(LAYER_TENSORS, layout))  # (w, b, h), in the order asked
        layout = by_label(layout, LAYER_TENSORS, LAYER_ALIASES)
        if not isinstance(layout, dict):
            fb.wrong(f"layout should be a dict with the keys {list(LAYER_TENSORS)} (a dtensor.Layout each), not a "
                     f"{type(layout).__name__}.")
            return fb
        extra = [key for key in layout if key not in LAYER_TENSORS]
        if extra:
            fb.note(f"layout: key(s) {extra} not asked for (the keys are {list(LAYER_TENSORS)}): left out.")
        learner_mesh = mesh if hasattr(mesh, "local_devices") and hasattr(mesh, "dim_names") else None
        right = 0
        for key in LAYER_TENSORS:
            if key not in layout:
                fb.wrong(f"layout: missing key '{key}' ({LAYER_TENSORS[key]}).")
                continue
            raw = layout[key]
            mesh_of = learner_mesh if learner_mesh is not None else getattr(raw, "mesh", None)
            if mesh_of is None:
                fb.wrong(f"{key}: give a dtensor.Layout(sharding_specs, mesh), not a {type(raw).__name__}.")
                continue
            right += _grade_layer_layout(fb, key, raw, mesh_of)
        fb.points = int(mesh_ok) + int(right == len(LAYER_TENSORS))
        return fb


# Exercise 2: x [4, 8] packed by hand on the chapter's mesh with the layout ['model', 'batch'] (the question's).
PACK_SHAPE = (4, 8)


def _reference_pack_blocks(x):
    """The blocks of x under ['model', 'batch'] on batch=4 x model=2, in device order: device i sits at
    (batch=i // 2, model=i % 2) and holds x's rows block i % 2 and its columns block i // 2."""
    rows, cols = PACK_SHAPE[0] // 2, PACK_SHAPE[1] // 4
    return [x[(i % 2) * rows:(i % 2 + 1) * rows, (i // 2) * cols:(i // 2 + 1) * cols] for i in range(8)]


def _judge_pack_slip(fb, components, x, expected):
    """Add the line that says what is wrong with the components (the layout is right)."""
    import numpy as np

    sizes = dict(MESH)
    rows, cols = PACK_SHAPE[0] // sizes["model"], PACK_SHAPE[1] // sizes["batch"]
    shapes = sorted({tuple(c.shape) for c in components})
    blocks = {(r, c): x[r * rows:(r + 1) * rows, c * cols:(c + 1) * cols] for r in range(2) for c in range(4)}
    reading = [blocks[r, c] for r in range(2) for c in range(4)]
    x_blocks = {b.tobytes() for b in blocks.values()}
    shown = "; ".join(f"CPU:{i} (batch {i // 2}, model {i % 2}): rows {rows * (i % 2)}:{rows * (i % 2 + 1)}, "
                      f"columns {cols * (i // 2)}:{cols * (i // 2 + 1)}" for i in range(4))
    if shapes == [(rows, cols)] and len(components) == 8:
        held = [c.tobytes() for c in components]
        if all(np.array_equal(c, r) for c, r in zip(components, reading)):
            fb.wrong("the components are x's blocks in x's reading order (along the first row of blocks, then the "
                     "second): the order of a mesh with 'model' first. dtensor.pack takes them in THIS mesh's "
                     "device order: batch=4 x model=2 is numbered row-major, 'model' (the last axis) varying "
                     "fastest, and here 'model' picks x's ROWS block.", answer=f"{shown}; ...")
        elif set(held) == x_blocks:
            bad = [i for i, (c, e) in enumerate(zip(components, expected)) if not np.array_equal(c, e)]
            fb.wrong(f"the 8 blocks are x's, but the ones on CPU {bad} are on the wrong devices: list them in the "
                     f"mesh's device order (mesh.local_device_locations()[i] gives device i's coordinates).",
                     answer=f"{shown}; ...")
        elif set(held) <= x_blocks:
            fb.wrong(f"only {len(set(held))} different blocks among the 8 components. ['model', 'batch'] names both "
                     f"mesh axes, so nothing is replicated: every device holds a different block of x.",
                     answer=f"{shown}; ...")
        else:
            fb.wrong("some components hold values that are not a block of x: cut x itself.")
    elif shapes == [(PACK_SHAPE[0] // sizes["batch"], PACK_SHAPE[1] // sizes["model"])]:
        fb.wrong(f"each component has shape {shapes[0]}: you cut x's rows by 'batch' and its columns by 'model'. "
                 f"The specs follow x's axes: under ['model', 'batch'] the rows (axis 0) are cut by 'model' and the "
                 f"columns (axis 1) by 'batch'.", answer=f"Each device holds a ({rows}, {cols}) block.")
    elif len(shapes) == 1 and shapes[0][0] == PACK_SHAPE[0]:
        fb.wrong(f"each component holds all {PACK_SHAPE[0]} rows of x: you cut only its columns. The layout splits "
                 f"the rows too, over 'model', so the two devices of a 'batch' row hold different blocks.",
                 answer=f"Each device holds a ({rows}, {cols}) block: {shown}; ...")
    elif len(shapes) == 1 and shapes[0][1] == PACK_SHAPE[1]:
        fb.wrong(f"each component holds all {PACK_SHAPE[1]} columns of x: you cut only its rows. The layout splits "
                 f"the columns too, over 'batch'.", answer=f"Each device holds a ({rows}, {cols}) block: {shown}; ...")
    else:
        fb.wrong(f"the components have shape(s) {shapes}; under ['model', 'batch'] each device holds x's rows "
                 f"divided by the size of 'model' and its columns divided by the size of 'batch'.",
                 answer=f"Each device holds a ({rows}, {cols}) block.")


class PackByHand(Exercise):
    title = "Pack by hand, split over both mesh axes"
    points = 2
    hints = (
        "dtensor.pack takes one component per device, in the mesh's device order (CPU:0 to CPU:7). The layout names "
        "both mesh axes, so no device shares its block with another.",
        "mesh.local_device_locations()[i] gives device i's coordinates; on batch=4 x model=2 the last axis, 'model', "
        "varies fastest. The specs follow x's axes: the device at (batch=b, model=m) holds x's rows block m and its "
        "columns block b.",
    )

    def grade(self, components):
        import numpy as np

        fb = Feedback()
        x = np.arange(np.prod(PACK_SHAPE), dtype="float32").reshape(PACK_SHAPE)
        if hasattr(components, "shape"):
            fb.wrong("components should be the LIST of blocks that dtensor.pack takes, one per device in the mesh's "
                     "device order, not one tensor.")
            return fb
        if not isinstance(components, (list, tuple)):
            fb.wrong(f"components should be a list of 8 blocks of x, one per device; got a {type(components).__name__}.")
            return fb
        try:
            components = [global_numpy(c) for c in components]
        except Exception as err:
            fb.wrong(f"Could not read the components as arrays ({short_error(err)}).")
            return fb
        if len(components) != 8:
            fb.wrong(f"{len(components)} components: dtensor.pack takes one per device of the mesh, 8 here.")
            return fb
        expected = _reference_pack_blocks(x)
        if all(c.shape == e.shape and np.array_equal(c, e) for c, e in zip(components, expected)):
            fb.right("components: the device at (batch=b, model=m) holds rows 2m:2m+2 and columns 2b:2b+2 of x",
                     points=2)
        else:
            _judge_pack_slip(fb, components, x, expected)
        return fb
