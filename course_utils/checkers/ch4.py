"""Chapter 4 · DTensor meshes and layouts: the exercises' graders and hints."""
import math
import re

from .answers import (UNSHARDED, as_bytes, as_int, as_shape, grade_items, is_placeholder, layout_of,
                      mesh_dims, only_ellipses, short_error, specs)
from ..costs import matmul_cost
from ..meshes import mesh_text
from .core import Exercise, Feedback, chapter
from .ch4_build import BudgetProduct, read_collective

MESH = [("batch", 4), ("model", 2)]
MESH_TEXT = mesh_text(MESH)


def by_label(answer, labels):
    """``answer`` with the keys that name one of ``labels`` in another spelling ('A', '(a)', ' a ', 'A_Held',
    'a-held') renamed to that label; other keys and non-dicts are returned as they are."""
    if not isinstance(answer, dict):
        return answer
    renamed = {}
    for key, value in answer.items():
        label = key
        if isinstance(key, str):
            spelled = key.strip().strip("()[]'\".:").strip().lower().replace("-", "_").replace(" ", "_")
            if spelled in labels and spelled not in answer:
                label = spelled
        renamed[label if label not in renamed else key] = value
    return renamed


_SHAPE_TEXT = re.compile(r"^[\s(\[]*\d+(?:\s*(?:[x×*,]|\s)\s*\d+)*[\s,)\]]*$", re.IGNORECASE)


def read_shape(raw):
    """A shape as a tuple of ints: what ``as_shape`` reads, and text such as '2x12', '2 × 12' or '(2, 12)'."""
    if isinstance(raw, str) and _SHAPE_TEXT.match(raw):
        return tuple(int(n) for n in re.findall(r"\d+", raw))
    return as_shape(raw)


def unit_slip(raw, right):
    """What is wrong when ``raw`` is the number of bytes ``right`` written in MiB, KiB or MB (rounded to three
    digits or so), else None."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    for unit, size in (("MiB", 2**20), ("KiB", 2**10), ("MB", 10**6)):
        if right and math.isclose(value * size, right, rel_tol=5e-3):
            return f"that looks like {unit}: give bytes (1 {unit} = {size:,} bytes; Python can multiply for you)."
    return None


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
        if isinstance(layout, (tuple, list)) and any(spec is None for spec in layout):
            fb.wrong(f"layout is {tuple(layout)!r}: Keras 3's keras.distribution form (None for an axis that is not "
                     f"split). DTensor wants a dtensor.Layout(sharding_specs, mesh), with dtensor.UNSHARDED where "
                     f"Keras 3 writes None.")
            return fb
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
            fb.wrong(f"layout {given} splits the ROWS (axis 0, the 784 inputs), not the columns: which tensor axis "
                     f"holds the 128 columns?", answer="The columns are axis 1: [UNSHARDED, 'model'].")
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
        shapes = {tuple(c.shape) for c in components}
        if len(components) == 8 and all(np.array_equal(c, s) for c, s in zip(components, pieces + pieces)):
            fb.wrong("components are in the wrong device order. A 2-D mesh numbers its devices row-major: the last "
                     "axis ('model') varies fastest (mesh.local_device_locations() lists each device's coordinates).",
                     answer="CPU:0 = (batch 0, model 0), CPU:1 = (batch 0, model 1), CPU:2 = (batch 1, model 0), ...: "
                            "each batch piece appears twice IN A ROW.")
        elif len(components) == 8 and shapes == {(1, 3)}:
            fb.wrong("each component holds 1 row: you cut x into 8 pieces, one per device. The layout splits the rows "
                     "over 'batch' only: how many different pieces does it make, and which devices share one?",
                     answer="4 pieces of 2 rows (tf.split(x, 4)), each given to the 2 devices of its 'batch' row: "
                            "[p0, p0, p1, p1, p2, p2, p3, p3].")
        elif len(components) == 8 and shapes != {(2, 3)}:
            fb.wrong(f"the components have shape(s) {sorted(shapes)}; under the layout ['batch', U] each device holds "
                     f"x's rows divided by the size of 'batch', and every column.")
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
        shard_shapes, copies = by_label(shard_shapes, SHARD_LAYOUTS), by_label(copies, SHARD_LAYOUTS)
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
            given_shape = read_shape(raw_shape)
            given_copies = int(raw_copies) if isinstance(raw_copies, str) and raw_copies.strip().isdigit() else \
                as_int(raw_copies)
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
            if given_copies is None:
                why.append(f"give the number of copies as an int, got {raw_copies!r}")
            elif given_copies != copy and given_copies == 8 // copy:
                why.append(f"{given_copies} is the number of DIFFERENT pieces; the question asks how many devices "
                           f"hold each one")
            elif given_copies != copy:
                why.append(f"{given_copies} copies is not 8 devices / the number of distinct shards")
            if why:
                fb.wrong(f"{key} {layout_specs}: " + "; ".join(why) + ".")
            else:
                fb.right(f"{key} {layout_specs}: shard {shape}, {copy} cop{'y' if copy == 1 else 'ies'}")
        return fb


MATMUL_CASES = {  # exercise 4's cases: x's layout @ w's layout (x [8, 4], w [4, 8]), none of them the chapter's
    "a": "x ['model', U] @ w [U, U]",
    "b": "x ['model', U] @ w [U, 'batch']",
    "c": "x [U, 'batch'] @ w ['batch', U]",
    "d": "x ['batch', U] @ w ['model', U]",
    "e": "x ['batch', U] @ w ['batch', U]",
}


def _reference_collectives():
    """Exercise 4's answer: per case of MATMUL_CASES, the collective DTensor runs (measured in the tests), and why."""
    return {
        "a": ("none",
              "x is split by rows (over 'model') and w is replicated: each device multiplies its own rows of x by "
              "the whole w and gets its own rows of y, laid out ['model', U]. No communication."),
        "b": ("none",
              "each device has its rows of x (over 'model') with the whole contracted axis, and its columns of w "
              "(over 'batch'): it computes its own block of y, laid out ['model', 'batch']. No communication."),
        "c": (("all-reduce", "batch"),
              "both operands split the CONTRACTED axis k over 'batch': each device computes only part of every dot "
              "product, and the partial sums are added across 'batch': an all-reduce over 'batch'. The name of a "
              "mesh axis does not decide its job; the tensor axis it splits does."),
        "d": (("all-reduce", "model"),
              "only w splits the contracted axis: DTensor takes the matching columns of x on each device (no "
              "communication for that), multiplies, and adds the partial sums: an all-reduce over 'model'."),
        "e": (("all-gather", "batch"),
              "'batch' splits x's rows AND w's rows (the contracted axis k): the device holding k-block j of w holds "
              "examples j, so no other device computes the rest of the sums for its examples; there are no partial "
              "sums to add. w must be made whole along k first: an all-gather of w over 'batch' (the gather FSDP "
              "pays, chapter 5), then each device multiplies locally."),
    }


def _reference_other_plans():
    """Case d has a second plan that gives the right y: gather w whole along k. DTensor does not run it."""
    return {"d": ("all-gather", "model")}


_KIND_NOTES = {  # per case, a question aimed at the case when the axis is right and the kind is not
    "c": " Here every device holds a k-block of both operands for the same output entries.",
    "e": " Here look at WHICH examples the devices holding the other k-blocks of w hold: could they finish the sums "
         "for this device's rows?",
}


class WhichCollective(Exercise):
    title = "Which collective, over which mesh axis?"
    points = 5
    none_is_answer = True  # None, () and [] mean "no collective"; the placeholders are `...`
    hints = (
        "y[i, j] = sum over k of x[i, k] * w[k, j]. Which tensor axis is summed over, and which mesh axis splits it "
        "in each operand? A mesh axis's name does not decide its job: 'batch' can split k too.",
        "No device needs the others when each holds the WHOLE contracted axis of what it multiplies. When "
        "partial sums over k are left on several devices, they must be added; when an operand must be whole "
        "along k but is split, it must be gathered first.",
        "The mesh axis of the collective is the one that splits the contracted axis k. In case d, DTensor "
        "moves no operand that it can avoid moving: cutting x's columns to match w's rows costs nothing. In case "
        "e, 'batch' splits x's examples too: the devices that hold the other k-blocks of w hold other examples.",
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
                return f"{case}: does any device hold only part of the contracted axis k?", why
            if given == "none":
                return f"{case}: some device holds only part of the contracted axis k, so it cannot finish alone.", why
            if given[1] != truth[1]:
                return f"{case}: which mesh axis splits the contracted axis k here?", why
            return (f"{case}: not the collective DTensor runs. After multiplying the blocks it holds, would a device "
                    f"have partial sums over k that other devices complete, or could it not multiply yet?"
                    f"{_KIND_NOTES.get(key, '')}", why)

        return grade_items(Feedback(), by_label(collectives, MATMUL_CASES), expected, explain, read_collective,
                           "'none' or (collective, mesh axis) per matmul", unanswered=only_ellipses)


# Exercise 5: y = x @ w with x (N, 4096) and w (4096, 4096) in float32 on a batch=2 x model=4 mesh (the chapter
# priced a batch=4 x model=2 one), for N = COST_BATCH, and the batch size at which the two layouts send as much.
COST_MESH = [("batch", 2), ("model", 4)]
COST_FEATURES = 4096
COST_BATCH = 1024
COST_LAYOUTS = {"a": (["batch", UNSHARDED], [UNSHARDED, UNSHARDED]),  # data parallel
                "b": (["batch", UNSHARDED], [UNSHARDED, "model"])}   # w split on its output columns
COST_KEYS = ("a_held", "b_held", "b_sent", "even_at")
COST_BYTES = ("a_held", "b_held", "b_sent")  # the keys whose answers are bytes (even_at is a number of examples)


def _reference_costs_on(mesh, examples):
    """{"a_held", "b_held", "a_sent", "b_sent"}: w's bytes on one device and the bytes one device sends per step
    (forward and backward products), for ``examples`` rows of x on ``mesh``, by the cost model."""
    found = {}
    for case, (x_specs, w_specs) in COST_LAYOUTS.items():
        cost = matmul_cost([examples, COST_FEATURES], x_specs, [COST_FEATURES] * 2, w_specs, dict(mesh))
        found[f"{case}_held"] = cost.bytes_held["w"]
        found[f"{case}_sent"] = sum(c.bytes_sent_per_device for p in [cost.forward, *cost.backward]
                                    for c in p.collectives)
    return found


def _reference_even_at(mesh):
    """The global batch size at which (a) and (b) send the same bytes per step on ``mesh``: (a) does not depend on
    it, (b) grows linearly with it (its dx all-reduce)."""
    one, two = _reference_costs_on(mesh, COST_BATCH), _reference_costs_on(mesh, 2 * COST_BATCH)
    if one["a_sent"] != two["a_sent"]:
        raise AssertionError("(a)'s traffic should not depend on the batch size")
    per_example = (two["b_sent"] - one["b_sent"]) / COST_BATCH
    return round(COST_BATCH + (one["a_sent"] - one["b_sent"]) / per_example)


def _reference_layout_costs():
    """Exercise 5's answer: {"a_held", "b_held", "b_sent", "even_at"}."""
    costs = _reference_costs_on(COST_MESH, COST_BATCH)
    return {"a_held": costs["a_held"], "b_held": costs["b_held"], "b_sent": round(costs["b_sent"]),
            "even_at": _reference_even_at(COST_MESH)}


def _reference_cost_slips():
    """Per key, the typical wrong answers: [(value, what is wrong, the part that gives the answer away)]."""
    truth = _reference_layout_costs()
    sizes = dict(COST_MESH)
    batch, model = sizes["batch"], sizes["model"]
    w_bytes = 4 * COST_FEATURES ** 2
    dx_block = COST_BATCH // batch * COST_FEATURES * 4
    dw_term = 2 * (batch - 1) / batch * (w_bytes // model)
    dx_term = 2 * (model - 1) / model * dx_block
    chapter = _reference_costs_on([("batch", 4), ("model", 2)], COST_BATCH)
    other_mesh = ("that is the price on the chapter's batch=4 x model=2 mesh; this mesh is batch=2 x model=4: "
                  "the sizes that divide w and the group sizes n change.")
    both = ("that is one of the backward pass's collectives. In (b), which backward products contract an axis "
            "that a mesh axis splits? Each one leaves partial sums to all-reduce: add them all.")
    slips = {
        "a_held": [
            (w_bytes // 2, "in (a) w's layout is [U, U]: which mesh axis divides it?", "None: each device holds all "
             "of w, 4096 x 4096 x 4 B."),
            (w_bytes // 8, "in (a) w's layout is [U, U]: which mesh axis divides it?", "None: each device holds all "
             "of w, 4096 x 4096 x 4 B."),
        ],
        "b_held": [
            (w_bytes, "that is all of w; in (b) a mesh axis splits w's columns. Which one, and what is its size on "
             "this mesh?", "'model' (size 4): each device holds a quarter of w."),
            (w_bytes // 2, "you divided w by 2. Which mesh axis splits w's columns in (b), and what is its size on "
             "THIS mesh (not the chapter's)?", "'model' has 4 devices here: each device holds a quarter of w."),
            (w_bytes // 8, "you divided w by all 8 devices; in (b) only one mesh axis splits w. What does a mesh "
             "axis that the layout does not name do to w?", "'batch' replicates w: w / 4 ('model' only)."),
        ],
        "b_sent": [
            (round(dw_term), both, f"dw's block all-reduced over 'batch' ({dw_term:,.0f} B) and dx's block over "
             f"'model' ({dx_term:,.0f} B)."),
            (round(dx_term), both, f"dw's block all-reduced over 'batch' ({dw_term:,.0f} B) and dx's block over "
             f"'model' ({dx_term:,.0f} B)."),
            (round((dw_term + dx_term) / 2), "an all-reduce over n devices sends 2 (n-1)/n · B from each device (a "
             "reduce-scatter, then an all-gather), not (n-1)/n · B.", ""),
            (round(dw_term + 2 * (model - 1) / model * dx_block * batch), "dx's B is one device's block of partial "
             "sums: x's rows on ONE device (N divided by the size of 'batch') by 4096 features.",
             f"dx's block: {COST_BATCH // batch} x {COST_FEATURES} x 4 B = {dx_block:,} B."),
            (round(2 * (batch - 1) / batch * w_bytes + dx_term), "dw's B is one device's block of partial sums, and "
             "dw comes out in w's layout: is it all of w?", "dw's block is w's block: a quarter of w."),
            (round(chapter["b_sent"]), other_mesh, ""),
            (round(2 * (batch - 1) / batch * w_bytes), "that is (a)'s backward traffic, its whole dw all-reduced over "
             "'batch'; price (b)'s layout.", ""),
        ],
        "even_at": [
            (truth["even_at"] // batch, "that is the examples of one 'batch' group; give the global batch size N "
             "(x's rows).", ""),
            (_reference_even_at([("batch", 4), ("model", 2)]), other_mesh, ""),
        ],
    }
    return slips


class LayoutCost(Exercise):
    title = "What does a layout cost? Bytes held and bytes sent"
    points = 4
    hints = (
        "Bytes held: the elements of w's block on one device, times the bytes of a float32. A mesh axis that "
        "splits an axis of w divides it; the others replicate it. Use THIS mesh's sizes.",
        "The backward pass runs dx = dy · wᵀ and dw = xᵀ · dy. dw contracts over the batch, which 'batch' "
        "splits: each device's dw block is a partial sum, all-reduced over 'batch'. In (b), dx contracts over "
        "w's output columns, which 'model' splits: dx's block is all-reduced over 'model' too. The forward "
        "product of (a) and (b) sends nothing.",
        "A ring all-reduce over n devices sends 2 (n-1)/n · B from each device, where B is the bytes of the "
        "block the group adds up (dw's block, or dx's block: x's rows on one device by 4096 features). For "
        "even_at, write both totals as functions of N: (a)'s does not depend on N, (b)'s dx term grows with it.",
    )

    def grade(self, costs):
        truth = _reference_layout_costs()
        slips = _reference_cost_slips()

        def explain(key, given, raw):
            right = truth[key]
            if given is None:
                what = "examples" if key == "even_at" else "bytes"
                return (f"give a number of {what} (an int, or an expression such as 4096 * 4096 * 4), got "
                        f"{raw!r}.", "")
            if key in COST_BYTES and given * 4 == right:
                return "that counts the float32 numbers (elements) of w's block, not bytes.", "A float32 takes 4 bytes."
            for value, why, reveal in slips[key]:
                if given == value:
                    return why, reveal
            if key == "even_at":
                if given > 10 ** 6:
                    return "even_at is a number of examples (x's rows), not of bytes.", ""
                return ("write what each layout sends per step as a function of N: which of (b)'s terms grows with "
                        "N, and does (a)'s? Then find the N at which they are equal.", "")
            if unit_slip(raw, right):
                return unit_slip(raw, right), ""
            if key.endswith("_held"):
                return "w's block on one device, in bytes: divide by the size of each mesh axis that splits w.", ""
            return "find each all-reduce of the backward pass, its B and its n, and add 2 (n-1)/n · B.", ""

        return grade_items(Feedback(), by_label(costs, COST_KEYS), truth, explain, as_bytes,
                           "one number per key: bytes, or examples for even_at")


# Exercise 6: a product built to a memory budget. The checker's own cases (other meshes, sizes and budgets
# than the notebook's examples), each of them feasible with w split over 'model' alone.


CHAPTER = chapter(4, "DTensor meshes and layouts", [MeshAndLayout, PackByHand, ShardShapes, WhichCollective,
                                                     LayoutCost, BudgetProduct])
