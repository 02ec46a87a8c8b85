"""Chapter 4 · DTensor meshes and layouts: the exercises' graders and hints."""
import math

from .answers import (UNSHARDED, as_bytes, as_collective, as_int, as_shape, grade_items, is_placeholder, layout_of,
                      mesh_dims, only_ellipses, short_error, specs)
from ..costs import matmul_cost
from ..meshes import mesh_text
from .core import Exercise, Feedback, chapter
from .ch4_build import BudgetProduct

MESH = [("batch", 4), ("model", 2)]
MESH_TEXT = mesh_text(MESH)


def grade_mesh(fb, mesh):
    """Add a line about a mesh that should be :data:`MESH`; return whether it is."""
    if not (hasattr(mesh, "dim_names") and hasattr(mesh, "dim_size")):
        fb.wrong(f"mesh should be a dtensor.Mesh (dtensor.create_mesh or make_mesh), not a {type(mesh).__name__}.")
        return False
    dims = mesh_dims(mesh)
    if dims == MESH:
        fb.right(f"mesh: {mesh_text(dims)}")
        return True
    if sorted(dims) == sorted(MESH):
        fb.wrong(f"mesh is {mesh_text(dims)}: list the axes in the order asked. The order decides which devices "
                 f"share a 'batch' row.")
    elif len(dims) == 1:
        fb.wrong(f"mesh is 1-D ({mesh_text(dims)}); the exercise asks for a 2-D mesh {MESH_TEXT}.")
    else:
        fb.wrong(f"mesh is {mesh_text(dims)}; the exercise asks for {MESH_TEXT}.")
    return False


class MeshAndLayout(Exercise):
    title = "A 2-D mesh and a column-sharded layout"
    points = 2
    hints = (
        "A Layout has one sharding spec per tensor axis: a mesh axis name splits that tensor axis, "
        "dtensor.UNSHARDED keeps it whole.",
        "Mesh axes that the layout does not name replicate the tensor. Which tensor axis holds the columns?",
    )

    def grade(self, mesh, layout):
        from tensorflow.experimental import dtensor

        fb = Feedback()
        grade_mesh(fb, mesh)
        if not isinstance(layout, dtensor.Layout):
            fb.wrong(f"layout should be a dtensor.Layout, not a {type(layout).__name__}.")
            return fb
        given, right = specs(layout), [UNSHARDED, "model"]
        if len(given) != 2:
            fb.wrong(f"layout has {len(given)} sharding spec(s) {given}; a matrix has 2 axes, so give one spec per axis.")
        elif given == right and mesh_dims(layout.mesh) == MESH:
            fb.right(f"layout: {given}: each device holds all 784 rows and 64 of the 128 columns")
        elif given == right:
            fb.wrong(f"layout: the specs are right but it lives on a mesh {mesh_text(mesh_dims(layout.mesh))}; build "
                     f"it on your {MESH_TEXT} mesh.")
        elif given == ["model", UNSHARDED]:
            fb.wrong(f"layout {given} splits the ROWS (axis 0, the 784 inputs); the columns are axis 1.")
        elif given == [UNSHARDED, UNSHARDED]:
            fb.wrong(f"layout {given} is fully replicated: every device holds the whole matrix.")
        elif "batch" in given:
            fb.wrong(f"layout {given} uses 'batch': that mesh axis splits the DATA. A weight is replicated over "
                     f"'batch', by not naming it.")
        else:
            fb.wrong(f"layout {given} does not split the columns over 'model'.")
        return fb


X_SHAPE = (8, 3)


class PackByHand(Exercise):
    title = "Pack a batch by hand on a 2-D mesh"
    points = 2
    hints = (
        "dtensor.pack needs one component per device, in the mesh's device order.",
        "The device order is row-major: the last mesh axis varies fastest. Devices that differ only in 'model' get "
        "the same rows.",
    )

    def grade(self, packed):
        import numpy as np
        import tensorflow as tf
        from tensorflow.experimental import dtensor

        from ..packing import shard_slices

        fb = Feedback()
        x = np.arange(np.prod(X_SHAPE), dtype="float32").reshape(X_SHAPE)
        if not isinstance(packed, (tf.Tensor, tf.Variable)):
            fb.wrong(f"packed should be the DTensor that dtensor.pack returned, not a {type(packed).__name__}.")
            return fb
        layout = layout_of(packed)
        if layout is None:
            fb.wrong("packed is an ordinary tensor, not a DTensor. Build one component per device and call "
                     "dtensor.pack(components, layout).")
            return fb
        given, dims = specs(layout), mesh_dims(layout.mesh)
        if dims != MESH:
            fb.wrong(f"packed lives on a mesh {mesh_text(dims)}; use the 2-D mesh {MESH_TEXT}.")
            return fb
        layout_ok = given == ["batch", UNSHARDED]
        if layout_ok:
            fb.right(f"layout {given}: rows split over 'batch', replicated over 'model'")
        elif given == ["model", UNSHARDED]:
            fb.wrong(f"layout {given} splits the batch over 'model'. Examples go to 'batch'; every device along "
                     f"'model' gets the same examples.")
        elif given == [UNSHARDED, UNSHARDED]:
            fb.wrong(f"layout {given} is replicated: every device holds the whole batch.")
        else:
            fb.wrong(f"layout {given} does not split the rows over 'batch' only.")
        try:
            components = [c.numpy() for c in dtensor.unpack(packed)]
        except Exception as err:
            fb.wrong(f"Could not read the components back ({short_error(err)}).")
            return fb
        expected = [x[index] for index in shard_slices(x.shape, dtensor.Layout(["batch", UNSHARDED], layout.mesh))]
        if len(components) == len(expected) and all(
                c.shape == e.shape and np.array_equal(c, e) for c, e in zip(components, expected)):
            if layout_ok:
                fb.right("components: device (batch=b, model=m) holds rows 2b and 2b+1, the same for both 'model' "
                         "indices")
            return fb
        if not layout_ok:
            return fb
        pieces = np.split(x, 4)
        if len(components) == 8 and all(np.array_equal(c, s) for c, s in zip(components, pieces + pieces)):
            fb.wrong("components are in the wrong device order. A 2-D mesh numbers its devices row-major: CPU:0 = "
                     "(batch 0, model 0), CPU:1 = (batch 0, model 1), CPU:2 = (batch 1, model 0), ...",
                     answer="So each batch piece appears twice IN A ROW.")
        elif len(components) == 8 and all(c.shape == (2, 3) for c in components):
            bad = [i for i, (c, e) in enumerate(zip(components, expected)) if not np.array_equal(c, e)]
            fb.wrong(f"components on device(s) {bad} hold the wrong rows. The global value must equal x.")
        else:
            fb.wrong("the packed value is not x = tf.reshape(tf.range(24.), (8, 3)) split by rows.")
        return fb


T_SHAPE = (8, 12)
SHARD_LAYOUTS = {"a": ["batch", UNSHARDED], "b": [UNSHARDED, "model"], "c": ["model", "batch"],
                 "d": [UNSHARDED, UNSHARDED]}  # exercise 3's layouts of a T_SHAPE tensor on MESH


def _reference_shards():
    """Exercise 3's answer: the shard shape and the number of copies of each layout of SHARD_LAYOUTS."""
    return {"a": ((2, 12), 2), "b": ((8, 6), 4), "c": ((4, 3), 1), "d": ((8, 12), 8)}


class ShardShapes(Exercise):
    title = "Predict shard shapes and copies"
    points = 4
    hints = (
        "Divide each tensor axis by the size of the mesh axis named in its spec.",
        "The number of copies of each shard is the product of the sizes of the mesh axes the layout does not use.",
    )

    def grade(self, shard_shapes, copies):
        fb = Feedback()
        for name, answer in (("shard_shapes", shard_shapes), ("copies", copies)):
            if not isinstance(answer, dict):
                fb.wrong(f"{name}: give a dict with the keys {list(SHARD_LAYOUTS)}, not a {type(answer).__name__}.")
            elif sorted(answer) != sorted(SHARD_LAYOUTS):
                fb.wrong(f"{name}: the keys are {list(SHARD_LAYOUTS)}, got {sorted(answer)}.")
        if not isinstance(shard_shapes, dict) or not isinstance(copies, dict):
            return fb
        sizes = dict(MESH)
        swapped_sizes = {"batch": sizes["model"], "model": sizes["batch"]}
        shards = _reference_shards()
        for key, layout_specs in SHARD_LAYOUTS.items():
            shape, copy = shards[key]
            raw_shape, raw_copies = shard_shapes.get(key), copies.get(key)
            if is_placeholder(raw_shape) and is_placeholder(raw_copies):
                fb.wrong(f"{key}: not answered yet.")
                continue
            given_shape, given_copies = as_shape(raw_shape), as_int(raw_copies)
            why = []
            if given_shape != shape:
                swapped = tuple(n // swapped_sizes[s] if s != UNSHARDED else n for n, s in zip(T_SHAPE, layout_specs))
                if given_shape is None:
                    why.append(f"give the shard shape as a tuple of ints, got {raw_shape!r}")
                elif given_shape == T_SHAPE and layout_specs != [UNSHARDED, UNSHARDED]:
                    why.append("that is the global shape; a sharded axis is divided by the size of its mesh axis")
                elif given_shape == swapped and swapped != shape:
                    why.append("you divided by the wrong mesh axis: 'batch' has 4 devices and 'model' has 2")
                else:
                    why.append(f"shape {given_shape} is not each global size divided by the size of the mesh axis "
                               f"named in its spec")
            if given_copies != copy:
                why.append(f"give the number of copies as an int, got {raw_copies!r}" if given_copies is None else
                           f"{given_copies} copies is not 8 devices / the number of distinct shards")
            if why:
                fb.wrong(f"{key} {layout_specs}: " + "; ".join(why) + ".")
            else:
                fb.right(f"{key} {layout_specs}: shard {shape}, {copy} cop{'y' if copy == 1 else 'ies'}")
        return fb


MATMUL_CASES = {  # exercise 4's cases: x's layout @ w's layout
    "a": "x ['batch', U] @ w [U, U]",
    "b": "x ['batch', U] @ w [U, 'model']",
    "c": "x ['batch', 'model'] @ w ['model', U]",
    "d": "x ['batch', U] @ w ['model', U]",
    "e": "x ['batch', 'model'] @ w [U, 'model']",
}


def _reference_collectives():
    """Exercise 4's answer: per case of MATMUL_CASES, the collective DTensor runs (measured in the tests), and why."""
    return {
        "a": ("none",
              "x is split by rows and w is replicated: each device multiplies its own rows of x by the whole w and "
              "gets its own rows of y. No communication."),
        "b": ("none",
              "each device has its rows of x with the whole contracted axis, and its columns of w: it computes its "
              "own block of y, laid out ['batch', 'model']. No communication."),
        "c": (("all-reduce", "model"),
              "both operands split the CONTRACTED axis over 'model': each device computes only part of every dot "
              "product, and the partial sums are added across 'model': an all-reduce over 'model'."),
        "d": (("all-reduce", "model"),
              "only w splits the contracted axis: DTensor takes the matching columns of x on each device (no "
              "communication for that), multiplies, and adds the partial sums: an all-reduce over 'model'."),
        "e": (("all-gather", "model"),
              "x splits the contracted axis but w needs it whole (w is split on its output columns instead): x's "
              "feature blocks are first gathered across 'model' (an all-gather), then each device multiplies "
              "locally."),
    }


def _reference_other_plans():
    """Case d has a second plan that gives the right y: gather w whole along k. DTensor does not run it."""
    return {"d": ("all-gather", "model")}


class WhichCollective(Exercise):
    title = "Which collective, over which mesh axis?"
    points = 5
    none_is_answer = True  # None, () and [] mean "no collective"; the placeholders are `...`
    hints = (
        "y[i, j] = sum over k of x[i, k] * w[k, j]. Which axis is summed over, and which mesh axis splits it?",
        "No device needs the others when each holds the WHOLE contracted axis of what it multiplies. When "
        "partial sums over k are left on several devices, they must be added; when an operand must be whole "
        "along k but is split, it must be gathered first.",
        "The mesh axis of the collective is the one that splits the contracted axis k. In case d, DTensor "
        "moves no operand that it can avoid moving: cutting x's columns to match w's rows costs nothing.",
    )

    def unanswered(self, answer):
        return only_ellipses(answer)

    def grade(self, collectives):
        collectives_run = _reference_collectives()
        expected = {key: truth for key, (truth, _) in collectives_run.items()}
        other_plans = _reference_other_plans()

        def explain(key, given, raw):
            case, (truth, why) = MATMUL_CASES[key], collectives_run[key]
            if given is None:
                return (f"answer 'none' (or None, []) or a pair such as ('all-reduce', 'batch'), got {raw!r}.", "")
            if given == other_plans.get(key):
                return (f"{case}: gathering w whole along k is a plan that gives the right y, but it is not the one "
                        f"DTensor runs. DTensor moves no operand it can avoid moving: what can each device do with "
                        f"the columns of x it already holds? (Check with collectives_run_by.)", why)
            if truth == "none":
                return f"{case}: does any device hold only part of the contracted axis?", why
            if given == "none":
                return f"{case}: some device holds only part of the contracted axis, so it cannot finish alone.", why
            if given[1] != truth[1]:
                return f"{case}: which mesh axis splits the contracted axis k?", why
            return (f"{case}: the right axis, another collective: an all-reduce adds partial sums, an all-gather "
                    f"makes a split operand whole before a local product.", why)

        return grade_items(Feedback(), collectives, expected, explain, as_collective,
                           "'none' or (collective, mesh axis) per matmul", unanswered=only_ellipses)


# Exercise 5: y = x @ w with x (1024, 4096) and w (4096, 4096) in float32 on the batch=4 x model=2 mesh.
COST_SHAPES = ([1024, 4096], [4096, 4096])
COST_LAYOUTS = {"a": (["batch", UNSHARDED], [UNSHARDED, UNSHARDED]),  # data parallel
                "b": (["batch", UNSHARDED], [UNSHARDED, "model"])}   # w split on its output columns


def _reference_layout_costs():
    """{"a_held": ..., "a_sent": ..., "b_held": ..., "b_sent": ...}: w's bytes per device, backward bytes sent."""
    truth = {}
    for case, (x_specs, w_specs) in COST_LAYOUTS.items():
        cost = matmul_cost(COST_SHAPES[0], x_specs, COST_SHAPES[1], w_specs, dict(MESH))
        truth[f"{case}_held"] = cost.bytes_held["w"]
        truth[f"{case}_sent"] = round(sum(c.bytes_sent_per_device for p in cost.backward for c in p.collectives))
    return truth


class LayoutCost(Exercise):
    title = "What does a layout cost? Bytes held and bytes sent"
    points = 4
    hints = (
        "Bytes held: the elements of w's block on one device, times 4 bytes per float32. A mesh axis that "
        "splits an axis of w divides it; the others replicate it.",
        "The backward pass runs dx = dy · wᵀ and dw = xᵀ · dy. dw contracts over the batch, which 'batch' "
        "splits: each device's dw block is a partial sum, all-reduced over 'batch'. In (b), dx contracts over "
        "w's output columns, which 'model' splits: dx's block is all-reduced over 'model' too.",
        "A ring all-reduce over n devices sends 2 (n-1)/n · B from each device, where B is the bytes of the "
        "block the group adds up (dw's block, or dx's block: x's rows on one device by 4096 features).",
    )

    def grade(self, costs):
        truth = _reference_layout_costs()

        def explain(key, given, raw):
            right = truth[key]
            if given is None:
                return f"give a number of bytes (an int, or an expression such as 4096 * 4096 * 4), got {raw!r}.", ""
            for unit, size, rel in (("MiB", 2**20, 1e-6), ("KiB", 2**10, 1e-6), ("MB", 10**6, 5e-3)):
                if math.isclose(float(raw) * size, right, rel_tol=rel):
                    return (f"that looks like {unit}: give bytes (1 {unit} = {size:,} bytes; Python can multiply "
                            f"for you).", "")
            if given * 4 == right:
                return "count bytes, not numbers: a float32 takes 4 bytes.", ""
            if key.endswith("_held"):
                if key == "b_held" and given == truth["a_held"]:
                    return "in (b) 'model' splits w's columns: each device holds half of w.", ""
                return "w's block on one device, times 4 bytes.", ""
            if given * 2 == right:
                return ("an all-reduce sends 2 (n-1)/n · B per device (a reduce-scatter, then an "
                        "all-gather), not (n-1)/n · B.", "")
            if key == "b_sent" and given < right:
                return ("the backward pass of (b) runs two all-reduces: dw over 'batch' and dx over "
                        "'model'. Add both.", "")
            return "find each all-reduce of the backward pass, its B and its n, and add 2 (n-1)/n · B.", ""

        return grade_items(Feedback(), costs, truth, explain, as_bytes, "bytes, one number per key")


# Exercise 6: a product built to a memory budget. The checker's own cases (other meshes, sizes and budgets
# than the notebook's examples), each of them feasible with w split over 'model' alone.


CHAPTER = chapter(4, "DTensor meshes and layouts", [MeshAndLayout, PackByHand, ShardShapes, WhichCollective,
                                                     LayoutCost, BudgetProduct])
