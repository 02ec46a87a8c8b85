"""Chapter 4 · exercises 1 and 2: a mesh whose axis order puts a layer's units on chosen devices, with the layer's
layouts on it; a function that packs a matrix by hand for any layout, in the mesh's device order."""
import re

from .answers import UNSHARDED, global_numpy, layout_of, mesh_dims, mesh_on_first_cpus, quiet_tensorflow, short_error, specs
from ..meshes import mesh_text
from .core import Exercise, Feedback
from .reach import calls_recorded, tools_used_by


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


# Exercise 1: a dense layer h = x @ w + b, LAYER_INPUTS -> LAYER_UNITS; its units over 'model', its examples over
# 'batch', on a mesh of other sizes than the chapter's; the mesh's axis order (the CPUs in their order) must put each
# block of units on the CPUs the question names.
LAYER_AXES = {"batch": 2, "model": 4}
LAYER_INPUTS, LAYER_UNITS = 784, 128
LAYER_TENSORS = {"w": f"w [{LAYER_INPUTS}, {LAYER_UNITS}]: inputs x units", "b": f"b [{LAYER_UNITS}]: units",
                 "h": f"h [N, {LAYER_UNITS}]: examples x units"}
LAYER_RANKS = {"w": 2, "b": 1, "h": 2}
LAYER_ALIASES = {"w_layout": "w", "weight": "w", "kernel": "w", "b_layout": "b", "bias": "b", "h_layout": "h",
                 "output": "h", "outputs": "h", "out": "h", "activations": "h", "y": "h"}
UNIT_BLOCK = LAYER_UNITS // LAYER_AXES["model"]
# What the question asks: units block q (units UNIT_BLOCK*q to UNIT_BLOCK*(q+1) - 1) on CPU:2q and CPU:2q+1.
WANTED_BLOCKS = tuple([LAYER_AXES["batch"] * q + i for i in range(LAYER_AXES["batch"])]
                      for q in range(LAYER_AXES["model"]))


def cpu_number(device):
    """The number of a CPU device name ('/job:localhost/.../device:CPU:5' -> 5), else None."""
    found = re.search(r"CPU:(\d+)\s*$", str(device), re.IGNORECASE)
    return int(found.group(1)) if found else None


def model_blocks(mesh):
    """The CPU numbers at each 'model' index of ``mesh``, in order: where a layout [U, 'model'] puts each block of a
    matrix's columns."""
    devices = mesh.local_devices()
    blocks = tuple([] for _ in range(mesh.dim_size("model")))
    for device_id, location in mesh.unravel_index().items():
        blocks[location["model"]].append(cpu_number(devices[device_id]))
    return tuple(sorted(block) for block in blocks)


def _cpus_text(numbers):
    """'CPU:4-CPU:7' for consecutive numbers, else 'CPU:1, CPU:3, ...'."""
    if len(numbers) > 2 and list(numbers) == list(range(numbers[0], numbers[0] + len(numbers))):
        return f"CPU:{numbers[0]}-CPU:{numbers[-1]}"
    return ", ".join(f"CPU:{n}" for n in numbers)


def _blocks_text(blocks):
    """Where each block of units is: 'units 0-31 on CPU:0, CPU:1; units 32-63 on ...'."""
    return "; ".join(f"units {UNIT_BLOCK * q}-{UNIT_BLOCK * (q + 1) - 1} on {_cpus_text(cpus)}"
                     for q, cpus in enumerate(blocks))


def _reference_layer_specs():
    """Exercise 1's layouts: w's units over 'model', b's units likewise, h's examples over 'batch' and units over
    'model'."""
    return {"w": [UNSHARDED, "model"], "b": ["model"], "h": ["batch", "model"]}


def _reference_layer_mesh():
    """Exercise 1's mesh: 'model' first, so that it varies slowest and each block of units is on neighbours."""
    return [("model", LAYER_AXES["model"]), ("batch", LAYER_AXES["batch"])]


def _grade_layer_mesh(fb, mesh):
    """Add a line about exercise 1's mesh; return whether it puts each block of units where the question asks, with
    the CPUs in their order."""
    if not (hasattr(mesh, "dim_names") and hasattr(mesh, "local_devices")):
        fb.wrong(f"mesh should be a dtensor.Mesh (dtensor.create_mesh or make_mesh), not a {type(mesh).__name__}.")
        return False
    dims = mesh_dims(mesh)
    if dict(dims) != LAYER_AXES or len(dims) != 2:
        wanted = " and ".join(f"{name} ({size})" for name, size in LAYER_AXES.items())
        fb.wrong(f"mesh is {mesh_text(dims)}; the layer needs a 2-D mesh with the axes {wanted}.")
        return False
    cpus = [cpu_number(device) for device in mesh.local_devices()]
    if sorted(c for c in cpus if c is not None) != list(range(8)):
        fb.wrong("mesh should use the 8 CPUs, CPU:0 to CPU:7 (devices=cpus).")
        return False
    reveal = f"Put 'model' first: dtensor.create_mesh({_reference_layer_mesh()}, devices=cpus)."
    if cpus != list(range(8)):
        fb.wrong(f"mesh lists the CPUs in another order ({', '.join(map(str, cpus))}). The exercise asks for them in "
                 f"their order (devices=cpus) and for the ORDER OF THE MESH'S AXES to decide where each block of "
                 f"units goes: with the CPUs in order, which axis order puts them there?", answer=reveal)
        return False
    blocks = model_blocks(mesh)
    if blocks == WANTED_BLOCKS:
        fb.right(f"mesh: {mesh_text(dims)}: {_blocks_text(blocks)}")
        return True
    fb.wrong(f"mesh is {mesh_text(dims)}: it does not put each block of {UNIT_BLOCK} units on the CPUs the question "
             f"names. A mesh numbers its devices row-major, the LAST axis varying fastest (mesh.unravel_index() lists "
             f"each device's coordinates): where does this mesh put them?",
             answer=f"This mesh puts {_blocks_text(blocks)}. {reveal}")
    return False


def _judge_layer_specs(key, given):
    """Why ``given`` (the specs of exercise 1's tensor ``key``, of the right rank) is wrong: (why, reveal)."""
    right = _reference_layer_specs()[key]
    reveal = f"{key}: {right}."
    if all(spec == UNSHARDED for spec in given):
        return {"w": f"w is replicated: every device would hold the columns of all {LAYER_UNITS} units, but each "
                     f"computes only {UNIT_BLOCK} of them.",
                "b": f"b is replicated: every device holds all {LAYER_UNITS} biases, but it adds only those of the "
                     f"units it computes.",
                "h": "h is replicated: every device would hold every example and every unit, but each computes "
                     "only its own examples and units."}[key], reveal
    if key in ("w", "b") and "batch" in given:
        return (f"{key}'s layout uses 'batch', the mesh axis that splits the EXAMPLES. {key} belongs to the layer: "
                f"every device along 'batch' needs the same part of it, which a layout says by not naming 'batch'.",
                reveal)
    if key == "w" and given == ["model", UNSHARDED]:
        return (f"w's layout splits its ROWS (axis 0, the {LAYER_INPUTS} inputs). The specs follow w's axes (inputs, "
                f"then units), whatever the order of the mesh's axes: which axis of w holds the units?",
                "The units are axis 1: [UNSHARDED, 'model'].")
    if key == "h" and given == ["model", "batch"]:
        return ("h's specs are in the order of your MESH's axes. A layout has one spec per axis of the TENSOR, in "
                "the tensor's order: h is (examples, units).", reveal)
    if key == "h" and given == ["batch", UNSHARDED]:
        return (f"h keeps all {LAYER_UNITS} units whole on every device, but each device computes only the units of "
                f"its own columns of w.", reveal)
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
        "Devices are numbered row-major: the LAST mesh axis varies fastest. With the CPUs in order, the devices that "
        "share one 'model' index are neighbours only if 'model' varies slowest. For the layouts, name each tensor's "
        "axes first (w: inputs, units; b: units; h: examples, units): the units go over 'model', the examples over "
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


# Exercise 2: pack_by_hand(x, layout), for any layout of a matrix on a 2-D mesh, run on the checker's cases (other
# meshes, shapes and layouts than the chapter's), with the blocks cut by the learner's code: none of the tools that
# cut or place them (HAND_TOOLS).
PACK_CASES = (  # (name, mesh axes, x's shape, layout)
    ("A", (("batch", 4), ("model", 2)), (4, 8), ("model", "batch")),    # both axes, in the other order than the mesh's
    ("B", (("batch", 2), ("model", 4)), (6, 8), ("batch", "model")),
    ("C", (("batch", 2), ("model", 4)), (8, 3), ("model", UNSHARDED)),  # 'batch' replicates
    ("D", (("rows", 2), ("columns", 2)), (4, 6), (UNSHARDED, "rows")),  # a mesh of 4 CPUs with other axis names
)
HAND_TOOLS = ("course_utils.packing:pack_batch", "course_utils.packing:shard_slices",
              "tensorflow.dtensor.python.api:copy_to_mesh", "tensorflow.dtensor.python.api:relayout",
              "tensorflow.dtensor.python.api:call_with_layout")


def _pack_case_text(case):
    name, dims, shape, layout_specs = case
    shown = "[" + ", ".join("U" if s == UNSHARDED else repr(s) for s in layout_specs) + "]"
    return f"case {name} (mesh {mesh_text(dims)}, x {shape}, layout {shown})"


def _pack_data(case, seed):
    """x of a case, drawn from the check's seed (float32)."""
    import numpy as np

    name, _, shape, _ = case
    return np.random.default_rng([seed, ord(name)]).standard_normal(shape).astype("float32")


def _pack_layout(case):
    from tensorflow.experimental import dtensor

    _, dims, _, layout_specs = case
    return dtensor.Layout(list(layout_specs), mesh_on_first_cpus(dims))


def _collect_pack(pack_by_hand, case, seed):
    """Call the learner's function on one case; what it gave, as plain data: {"error": ...}, {"blocks": arrays}
    (a list of blocks, not packed), {"returned": type name} or {"specs", "mesh", "blocks"} of the DTensor."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    try:
        out = pack_by_hand(tf.constant(_pack_data(case, seed)), _pack_layout(case))
    except Exception as err:
        return {"error": short_error(err).split(" Input tensor is:")[0]}  # not the DTensor's dump
    layout = layout_of(out) if isinstance(out, tf.Tensor) else None
    if layout is not None:
        return {"specs": specs(layout), "mesh": [list(dim) for dim in mesh_dims(layout.mesh)],
                "blocks": [block.numpy() for block in dtensor.unpack(out)]}
    if isinstance(out, (list, tuple)) and out and all(hasattr(block, "shape") for block in out):
        return {"blocks": [global_numpy(block) for block in out], "unpacked": True}
    return {"returned": "a tensor that is not a DTensor" if isinstance(out, tf.Tensor) else f"a {type(out).__name__}"}


def _reference_pack_blocks(case, seed):
    """The blocks a case's layout gives each device, in the mesh's device order (row-major: the last axis varies
    fastest), and each device's coordinates and slices."""
    import itertools

    name, dims, shape, layout_specs = case
    x, sizes = _pack_data(case, seed), dict(dims)
    blocks, where = [], []
    for position in itertools.product(*[range(n) for _, n in dims]):
        location = dict(zip(sizes, position))
        cut = []
        for size, spec in zip(shape, layout_specs):
            step = size if spec == UNSHARDED else size // sizes[spec]
            start = 0 if spec == UNSHARDED else location[spec] * step
            cut.append(slice(start, start + step))
        blocks.append(x[tuple(cut)])
        where.append((location, cut))
    return blocks, where


def _judge_pack_answer(case, where):
    """The part that gives a case away: what the first devices hold."""
    shown = []
    for index, (location, cut) in enumerate(where[:3]):
        at = ", ".join(f"{axis} {i}" for axis, i in location.items())
        shown.append(f"device {index} ({at}): rows {cut[0].start}:{cut[0].stop}, columns {cut[1].start}:{cut[1].stop}")
    return "; ".join(shown) + "; ..."


def _judge_pack_case(found, case, seed):
    """None when the case's DTensor is right, else (what is wrong, the part that gives the answer away)."""
    import numpy as np

    head = f"{_pack_case_text(case)}:"
    if "error" in found:
        return f"{head} pack_by_hand raised {found['error']}", ""
    if "returned" in found:
        return f"{head} pack_by_hand returned {str(found['returned'])[:60]}; return the DTensor dtensor.pack gives.", ""
    expected, where = _reference_pack_blocks(case, seed)
    blocks = [np.asarray(b) for b in found["blocks"]]
    answer = _judge_pack_answer(case, where)
    if found.get("unpacked"):
        return (f"{head} pack_by_hand returned a list of {len(blocks)} blocks; return dtensor.pack(blocks, layout), "
                f"the DTensor."), ""
    _, dims, shape, layout_specs = case
    if [list(s) for s in found["mesh"]] != [list(d) for d in dims] or list(found["specs"]) != list(layout_specs):
        return (f"{head} the DTensor has the layout {found['specs']} on a mesh {mesh_text(found['mesh'])}: pack the "
                f"blocks with the layout pack_by_hand receives."), ""
    if all(b.shape == e.shape and np.array_equal(b, e) for b, e in zip(blocks, expected)):
        return None
    want, got = expected[0].shape, blocks[0].shape
    if {b.shape for b in blocks} == {want}:
        held = [b.tobytes() for b in blocks]
        wanted = [e.tobytes() for e in expected]
        if sorted(held) == sorted(wanted):
            return (f"{head} the blocks are x's, but some are on the wrong devices: dtensor.pack takes them in the "
                    f"mesh's device order, numbered row-major, the LAST mesh axis varying fastest "
                    f"(mesh.local_device_locations()[i] gives device i's coordinates).", answer)
        if set(held) < set(wanted):
            return (f"{head} only {len(set(held))} different blocks among the {len(blocks)}, though the layout gives "
                    f"{len(set(wanted))}: devices that differ along a mesh axis the layout names hold different "
                    f"blocks.", answer)
        if len(set(held)) > len(set(wanted)):
            return (f"{head} {len(set(held))} different blocks, though the layout gives {len(set(wanted))}: a mesh "
                    f"axis the layout does not name replicates x, so the devices along it hold the same block.",
                    answer)
        return f"{head} some blocks hold values that are not the block of x their device should hold: cut x itself.", \
            answer
    sizes = dict(dims)
    why = []
    for axis, (n, spec, g, w) in enumerate(zip(shape, layout_specs, got, want)):
        if g == w:
            continue
        if spec == UNSHARDED:
            why.append(f"x's axis {axis} is cut, though the layout leaves it whole (UNSHARDED: every device holds all "
                       f"of it)")
        elif g == n:
            why.append(f"x's axis {axis} is left whole, though the layout splits it over {spec!r}")
        elif any(g == n // size for axis_name, size in sizes.items() if axis_name != spec):
            why.append(f"x's axis {axis} is cut by the size of another mesh axis than {spec!r}, the one its spec "
                       f"names (the specs follow x's axes, not the mesh's)")
        else:
            why.append(f"x's axis {axis} ({n}) is cut into pieces of {g}, not into {sizes[spec]} pieces of {w}")
    return (f"{head} the blocks have shape {tuple(got)}, not {tuple(want)}: " + "; ".join(why) + "."), answer


class PackByHand(Exercise):
    title = "Pack by hand, for any layout"
    points = 2
    hints = (
        "dtensor.pack takes one block per device, in the mesh's device order. For each device, which part of each "
        "axis of x does it hold? The layout's spec for that axis names the mesh axis that splits it (or none), and "
        "the device's coordinate along that mesh axis picks the piece.",
        "Loop over mesh.local_device_locations() (device i's coordinates, as a dict of mesh axis -> index). For each "
        "axis of x whose spec is a mesh axis, tf.split it into mesh.dim_size(spec) pieces and keep piece "
        "location[spec]; an UNSHARDED axis stays whole. Then dtensor.pack(blocks, layout).",
    )

    def collect(self, pack_by_hand, seed=0):
        """Runs ``pack_by_hand`` on every case of PACK_CASES with x drawn from ``seed``. What crosses: {"callable":
        False, "type": name}, or {"callable": True, "used": the tools of HAND_TOOLS it calls (by name or alias, see
        :func:`.reach.tools_used_by`; or looked up while it ran, :func:`.reach.calls_recorded`),
        "cases": per case what :func:`_collect_pack` found}."""
        if not callable(pack_by_hand):
            return {"callable": False, "type": type(pack_by_hand).__name__}
        from .. import packing  # noqa: F401 - loaded, so that its tools are among those calls_recorded watches

        with quiet_tensorflow(), calls_recorded(HAND_TOOLS) as called:
            cases = [_collect_pack(pack_by_hand, case, seed) for case in PACK_CASES]
        used = tools_used_by(pack_by_hand, HAND_TOOLS)
        return {"callable": True, "used": used + [name for name in called if name not in used], "cases": cases}

    def judge(self, data, seed=0):
        """Grades what :meth:`collect` found against the blocks of each case for ``seed``."""
        fb = Feedback()
        if not data["callable"]:
            fb.wrong(f"pack_by_hand should be a function (x, layout) -> DTensor, not a {str(data['type'])[:60]}.")
            return fb
        cases = data["cases"]
        if type(cases) is not list or len(cases) != len(PACK_CASES):
            raise ValueError(f"{len(PACK_CASES)} cases expected")
        used = [str(name) for name in data["used"]][:5] if type(data["used"]) is list else []
        if used:
            fb.wrong(f"pack_by_hand calls {', '.join(used)}, which cuts (or places) the blocks for you. By hand means "
                     f"that your code cuts x into each device's block (tf.split, or slicing) and gives the list to "
                     f"dtensor.pack: this check gives no points while it does.")
            return fb
        problems = [(case, _judge_pack_case(found, case, seed)) for found, case in zip(cases, PACK_CASES)]
        wrong = [(case, problem) for case, problem in problems if problem]
        for case, (text, answer) in wrong:
            fb.wrong(text, answer=answer)
        if not wrong:
            fb.right(f"every case: each device holds its block of x, in the mesh's device order (cases "
                     f"{', '.join(case[0] for case in PACK_CASES)})", points=2)
        elif all(sum(spec != UNSHARDED for spec in case[3]) == 2 for case, _ in wrong):
            fb.right("the layouts that split one axis of x: each device holds its block", points=1)
        return fb
