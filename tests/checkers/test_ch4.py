"""Chapter 4's checkers: the right answer, typical wrong answers and the hints they get."""
import math

import numpy as np
import pytest

from course_utils.checkers import ch4, ch4_budget_cases, ch4_layouts, exercises
from course_utils.checkers.answers import global_numpy
from helpers import assert_correct, assert_hint, grade, holding, sandbox_copy, stripped_exercise


def first_try(name, *args):
    """A first wrong check's result in self-study mode: what is wrong, without the parts that give the answer."""
    return getattr(exercises(4), name)._evaluate(args, {}, first_try=True)


def _layer_layouts(mesh, w=("unsharded", "model"), b=("model",), h=("batch", "model")):
    """Exercise 1's dict of layouts on ``mesh`` (the right specs unless told)."""
    from tensorflow.experimental import dtensor

    return {"w": dtensor.Layout(list(w), mesh), "b": dtensor.Layout(list(b), mesh), "h": dtensor.Layout(list(h), mesh)}


@pytest.fixture(scope="module")
def model_first(cpus8):
    from tensorflow.experimental import dtensor

    return dtensor.create_mesh([("model", 4), ("batch", 2)], devices=cpus8)


@pytest.fixture(scope="module")
def batch_first(cpus8):
    """The chapter's order of the axes (batch first), on exercise 1's sizes."""
    from tensorflow.experimental import dtensor

    return dtensor.create_mesh([("batch", 2), ("model", 4)], devices=cpus8)


def test_ch4_q1_the_question_is_what_dtensor_does(model_first, batch_first):
    """The question's claims, measured: on model=4 x batch=2 units 32q to 32q+31 of w (and their biases) are on CPU:2q
    and CPU:2q+1; the chapter's order, batch first, puts them on CPU:q and CPU:q+4; h's blocks are each device's
    examples and units."""
    from course_utils import pack_batch
    from course_utils.checkers.ch4_layouts import UNIT_BLOCK, WANTED_BLOCKS, model_blocks
    from tensorflow.experimental import dtensor

    w = np.arange(784 * 128, dtype="float32").reshape(784, 128)
    layouts = _layer_layouts(model_first)
    w_blocks = [c.numpy() for c in dtensor.unpack(pack_batch(w, layouts["w"]))]
    b_blocks = [c.numpy() for c in dtensor.unpack(pack_batch(np.arange(128, dtype="float32"), layouts["b"]))]
    for cpu in range(8):
        block = next(q for q, cpus in enumerate(WANTED_BLOCKS) if cpu in cpus)
        units = slice(UNIT_BLOCK * block, UNIT_BLOCK * (block + 1))
        np.testing.assert_array_equal(w_blocks[cpu], w[:, units])
        np.testing.assert_array_equal(b_blocks[cpu], np.arange(128)[units])
    assert WANTED_BLOCKS == ([0, 1], [2, 3], [4, 5], [6, 7]) and model_blocks(model_first) == WANTED_BLOCKS
    assert model_blocks(batch_first) == ([0, 4], [1, 5], [2, 6], [3, 7])
    h = np.arange(8 * 128, dtype="float32").reshape(8, 128)
    h_blocks = [c.numpy() for c in dtensor.unpack(pack_batch(h, layouts["h"]))]
    for cpu, where in enumerate(model_first.local_device_locations()):
        b, m = where["batch"], where["model"]
        rows, units = slice(4 * b, 4 * b + 4), slice(UNIT_BLOCK * m, UNIT_BLOCK * (m + 1))
        np.testing.assert_array_equal(h_blocks[cpu], h[rows, units])
    assert [list(s) for s in ch4_layouts._reference_layer_specs().values()] == [
        list(layouts[k].sharding_specs) for k in ("w", "b", "h")]
    assert ch4_layouts._reference_layer_mesh() == [("model", 4), ("batch", 2)]


def test_ch4_q1_right_forms(model_first):
    from course_utils import make_mesh
    from tensorflow.experimental import dtensor

    assert_correct(grade(4, "q1", model_first, _layer_layouts(model_first)))
    by_type = dtensor.create_mesh([("model", 4), ("batch", 2)], device_type="CPU")
    assert_correct(grade(4, "q1", by_type, _layer_layouts(by_type)))
    made = make_mesh([("model", 4), ("batch", 2)])
    assert_correct(grade(4, "q1", made, _layer_layouts(made)))
    layouts = _layer_layouts(model_first)
    assert_correct(grade(4, "q1", model_first, (layouts["w"], layouts["b"], layouts["h"])))  # (w, b, h) in order
    assert_correct(grade(4, "q1", model_first, [layouts["w"], layouts["b"], layouts["h"]]))
    assert_correct(grade(4, "q1", model_first, {"W": layouts["w"], " bias ": layouts["b"], "h_layout": layouts["h"]}))


def test_ch4_q1_a_permuted_device_list_is_refused(cpus8):
    """Issue 37: the chapter's axis order (batch first) with the CPUs listed so that each block of units lands where
    the question says passed, though the exercise asks for the CPUs in their order: the axis order must do it."""
    from course_utils.checkers.ch4_layouts import WANTED_BLOCKS, model_blocks
    from tensorflow.experimental import dtensor

    permuted = dtensor.create_mesh([("batch", 2), ("model", 4)], devices=[cpus8[i] for i in (0, 2, 4, 6, 1, 3, 5, 7)])
    assert model_blocks(permuted) == WANTED_BLOCKS  # it does put the blocks where the question says
    result = grade(4, "q1", permuted, _layer_layouts(permuted))
    assert_hint(result, "lists the CPUs in another order (0, 2, 4, 6, 1, 3, 5, 7)", "devices=cpus",
                "ORDER OF THE MESH'S AXES", "Put 'model' first", points=1)
    assert "'model' first" not in first_try("q1", permuted, _layer_layouts(permuted)).message


def test_ch4_q1_the_chapters_order(batch_first):
    """The chapter's batch-first order (copied from its cell) puts each block on CPU:q and CPU:q+4: the mesh point is
    lost, and the first try does not say which order is right."""
    result = grade(4, "q1", batch_first, _layer_layouts(batch_first))
    assert_hint(result, "units 32-63 on CPU:1, CPU:5", "LAST axis varying fastest", "Put 'model' first", points=1)
    shown = first_try("q1", batch_first, _layer_layouts(batch_first)).message
    assert "LAST axis varying fastest" in shown and "'model' first" not in shown and "('model', 4)" not in shown, shown
    assert "CPU:1, CPU:5" not in shown, shown  # where the chapter's order puts them is the question's own sub-question


def test_ch4_q1_the_chapters_mesh_is_refused(mesh42):
    """Copying the chapter's cells (its batch=4 x model=2 mesh, one column-split Layout) scores nothing."""
    from tensorflow.experimental import dtensor

    result = grade(4, "q1", mesh42, dtensor.Layout([dtensor.UNSHARDED, "model"], mesh42))
    assert_hint(result, "mesh is batch=4 x model=2", "batch (2) and model (4)", "layout is one Layout",
                "{'w': ..., 'b': ..., 'h': ...}", points=0)


def test_ch4_q1_wrong_layouts(model_first):
    U = "unsharded"
    rows = _layer_layouts(model_first, w=("model", U))
    assert_hint(grade(4, "q1", model_first, rows), "splits its ROWS", "whatever the order of the mesh's axes",
                "The units are axis 1", points=1)
    assert "axis 1" not in first_try("q1", model_first, rows).message
    per_mesh_axis = _layer_layouts(model_first, b=(U, "model"))
    assert_hint(grade(4, "q1", model_first, per_mesh_axis), "b [128] has one axis",
                "one spec per TENSOR axis, not one per mesh axis", points=1)
    mesh_order = _layer_layouts(model_first, h=("model", "batch"))
    assert_hint(grade(4, "q1", model_first, mesh_order), "in the order of your MESH's axes", "h: ['batch', 'model']",
                points=1)
    assert "['batch', 'model']" not in first_try("q1", model_first, mesh_order).message
    assert_hint(grade(4, "q1", model_first, _layer_layouts(model_first, w=(U, "batch"))), "uses 'batch'", points=1)
    assert_hint(grade(4, "q1", model_first, _layer_layouts(model_first, b=("batch",))), "uses 'batch'", points=1)
    replicated_bias = _layer_layouts(model_first, b=(U,))
    assert_hint(grade(4, "q1", model_first, replicated_bias), "b is replicated", "b: ['model']", points=1)
    assert "b: ['model']" not in first_try("q1", model_first, replicated_bias).message
    assert_hint(grade(4, "q1", model_first, _layer_layouts(model_first, w=(U, U))), "w is replicated",
                "only 32 of them", points=1)
    assert_hint(grade(4, "q1", model_first, _layer_layouts(model_first, h=("batch", U))), "keeps all 128 units",
                points=1)
    assert_hint(grade(4, "q1", model_first, _layer_layouts(model_first, h=(U, "model"))), "examples are not split",
                points=1)
    assert_hint(grade(4, "q1", model_first, _layer_layouts(model_first, w=(U, "model", U))), "w [784, 128] has 2 axes",
                points=1)


def test_ch4_q1_other_slips(model_first, batch_first, cpus8):
    from tensorflow.experimental import dtensor

    layouts = _layer_layouts(model_first)
    assert_hint(grade(4, "q1", model_first, _layer_layouts(batch_first)), "lives on another mesh", points=1)
    assert_hint(grade(4, "q1", model_first, dict(layouts, w=(None, "model"))), "Keras 3's keras.distribution form",
                "dtensor.UNSHARDED", points=1)
    assert_hint(grade(4, "q1", model_first, dict(layouts, b=["model"])), "give a dtensor.Layout", points=1)
    assert_hint(grade(4, "q1", model_first, dict(layouts, h=None)), "h: not answered yet", points=1)
    assert_hint(grade(4, "q1", model_first, {"w": layouts["w"], "b": layouts["b"]}), "missing key 'h'", points=1)
    extra_key = grade(4, "q1", model_first, dict(layouts, x=layouts["h"]))
    assert_correct(extra_key)  # a full score prints no ✗ line: the extra key is a note
    assert "['x'] not asked for" in extra_key.message and "✗" not in extra_key.message
    flat = dtensor.create_mesh([("batch", 8)], devices=cpus8)
    assert_hint(grade(4, "q1", flat, layouts), "the layer needs a 2-D mesh", points=0)
    assert_hint(grade(4, "q1", "model, batch", layouts), "should be a dtensor.Mesh", points=1)
    assert grade(4, "q1", None, {"w": None, "b": None, "h": None}).status == "unanswered"


# Exercise 2: pack_by_hand(x, layout), run on the checker's cases.
def _pack(order="device", cut="split", tool=None):
    """A pack_by_hand: ``order`` "device" (the mesh's device order) or "reading" (x's blocks row by row, each block
    repeated for the devices that share it); ``cut`` "split" or "slice"; ``tool`` a function that makes the DTensor
    for it (pack_batch, ...)."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    def pack_by_hand(x, layout):
        if tool is not None:
            return tool(x, layout)
        mesh = layout.mesh
        if order == "reading":
            first, second = layout.sharding_specs
            rows = tf.split(x, mesh.dim_size(first), axis=0) if first != dtensor.UNSHARDED else [x]
            blocks = [piece for row in rows
                      for piece in (tf.split(row, mesh.dim_size(second), axis=1) if second != dtensor.UNSHARDED else [row])]
            return dtensor.pack([block for block in blocks for _ in range(mesh.size // len(blocks))], layout)
        blocks = []
        for where in mesh.local_device_locations():
            block = x
            for axis, spec in enumerate(layout.sharding_specs):
                if spec == dtensor.UNSHARDED:
                    continue
                if cut == "split":
                    block = tf.split(block, mesh.dim_size(spec), axis=axis)[where[spec]]
                else:
                    step = x.shape[axis] // mesh.dim_size(spec)
                    index = [slice(None), slice(None)]
                    index[axis] = slice(where[spec] * step, (where[spec] + 1) * step)
                    block = block[tuple(index)]
            blocks.append(block)
        return dtensor.pack(blocks, layout)
    return pack_by_hand


def test_ch4_q2_the_cases_are_what_pack_batch_cuts(cpus8):
    """The checker's blocks are the ones the course's pack_batch cuts (and dtensor.pack takes), in every case."""
    from course_utils import pack_batch
    from tensorflow.experimental import dtensor

    for case in ch4_layouts.PACK_CASES:
        layout = ch4_layouts._pack_layout(case)
        x = ch4_layouts._pack_data(case, 3)
        expected, _ = ch4_layouts._reference_pack_blocks(case, 3)
        for mine, theirs in zip(expected, dtensor.unpack(pack_batch(x, layout))):
            np.testing.assert_array_equal(mine, theirs.numpy())
    assert {case[1] for case in ch4_layouts.PACK_CASES} >= {(("batch", 4), ("model", 2)), (("rows", 2), ("columns", 2))}


def test_ch4_q2_pack_by_hand(cpus8):
    assert_correct(grade(4, "q2", _pack()))
    assert_correct(grade(4, "q2", _pack(cut="slice")))


def test_ch4_q2_a_chapter_tool_is_not_packing_by_hand(cpus8):
    """Issue 37: unpack(pack_batch(x, split_layout)) passed "pack by hand" without working out any block. A function
    that lets a tool cut or place the blocks scores 0, by name, by alias or in a helper it calls."""
    from course_utils import pack_batch
    from tensorflow.experimental import dtensor

    def unpacked(x, layout):
        return dtensor.pack(dtensor.unpack(pack_batch(x, layout)), layout)
    assert_hint(grade(4, "q2", unpacked), "pack_by_hand calls pack_batch", "By hand means", points=0)
    copied = _pack(tool=lambda x, layout: dtensor.copy_to_mesh(x, layout))  # in a lambda it calls: found too
    assert_hint(grade(4, "q2", copied), "calls copy_to_mesh", points=0)
    move = dtensor.relayout

    def relaid(x, layout):
        return move(dtensor.copy_to_mesh(x, dtensor.Layout.replicated(layout.mesh, rank=2)), layout)
    assert_hint(grade(4, "q2", relaid), "copy_to_mesh, relayout", points=0)


NOTEBOOK_PACKING = """
import tensorflow as tf
from tensorflow.experimental import dtensor
from course_utils import pack_batch

def shard_slices(x, layout, where):  # the learner's own helper, named like the course's tool
    block = x
    for axis, spec in enumerate(layout.sharding_specs):
        if spec != dtensor.UNSHARDED:
            block = tf.split(block, layout.mesh.dim_size(spec), axis=axis)[where[spec]]
    return block

def own_helper(x, layout):
    return dtensor.pack([shard_slices(x, layout, where) for where in layout.mesh.local_device_locations()], layout)

def by_default(x, layout, _cut=pack_batch):
    return _cut(x, layout)

def looked_up(x, layout):
    return getattr(dtensor, "copy_" + "to_mesh")(x, layout)

def looked_up_in_course_utils(x, layout):
    import course_utils.packing
    return getattr(course_utils.packing, "pack_" + "batch")(x, layout)

class Packer:
    def __init__(self):
        self.cut = pack_batch

    def __call__(self, x, layout):
        return self.cut(x, layout)

class Placer:
    def __call__(self, x, layout):
        return dtensor.copy_to_mesh(x, layout)
"""


def test_ch4_q2_a_tool_reached_otherwise_is_found_and_a_namesake_is_not(cpus8):
    """The fresh-eyes review of issue 37: a tool as a default argument, looked up at run time, or held by a callable
    object passed "by hand"; a learner's own helper named shard_slices was refused."""
    from course_utils import packing
    from tensorflow.dtensor.python import api

    notebook = {"__name__": "__main__"}
    exec(NOTEBOOK_PACKING, notebook)
    assert_correct(grade(4, "q2", notebook["own_helper"]))
    for name, tool in [("by_default", "pack_batch"), ("looked_up", "copy_to_mesh"),
                       ("looked_up_in_course_utils", "pack_batch")]:
        assert_hint(grade(4, "q2", notebook[name]), f"pack_by_hand calls {tool}", "By hand means", points=0)
    assert_hint(grade(4, "q2", notebook["Packer"]()), "pack_by_hand calls pack_batch", points=0)
    assert_hint(grade(4, "q2", notebook["Placer"]()), "pack_by_hand calls copy_to_mesh", points=0)
    import course_utils
    from tensorflow.experimental import dtensor

    # the stand-ins are gone after the check: every module holds the tools again
    assert (dtensor.copy_to_mesh, vars(course_utils).get("pack_batch", packing.pack_batch)) == (
        api.copy_to_mesh, packing.pack_batch)


def test_ch4_q2_wrong_blocks(cpus8):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    reading = grade(4, "q2", _pack(order="reading"))
    assert_hint(reading, "case A", "some are on the wrong devices", "LAST mesh axis varying fastest",
                "device 1 (batch 0, model 1): rows 2:4, columns 0:2", points=0)
    assert "device 1 (batch 0, model 1)" not in first_try("q2", _pack(order="reading")).message

    def rows_only(x, layout):  # the chapter's hand packing: the first spec only
        mesh, spec = layout.mesh, layout.sharding_specs[0]
        if spec == dtensor.UNSHARDED:
            return dtensor.pack([x] * mesh.size, layout)
        rows = tf.split(x, mesh.dim_size(spec), axis=0)
        return dtensor.pack([rows[where[spec]] for where in mesh.local_device_locations()], layout)
    assert_hint(grade(4, "q2", rows_only), "case A", "x's axis 1 is left whole, though the layout splits it over "
                "'batch'", "case D", points=0)
    assert "case C" not in grade(4, "q2", rows_only).message

    def swapped(x, layout):  # each axis cut by the other mesh axis's size
        mesh = layout.mesh
        names = mesh.dim_names
        blocks = []
        for where in mesh.local_device_locations():
            block = x
            for axis, spec in enumerate(layout.sharding_specs):
                if spec != dtensor.UNSHARDED:
                    other = names[1 - names.index(spec)]
                    block = tf.split(block, mesh.dim_size(other), axis=axis)[where[other]]
            blocks.append(block)
        return dtensor.pack(blocks, layout)
    assert_hint(grade(4, "q2", swapped), "cut by the size of another mesh axis", points=0)

    def one_copy(x, layout):  # every device packs the first device's block
        return dtensor.pack([dtensor.unpack(_pack()(x, layout))[0]] * layout.mesh.size, layout)
    assert_hint(grade(4, "q2", one_copy), "only 1 different blocks", points=0)

    def shifted(x, layout):
        return _pack()(x + 1, layout)
    assert_hint(grade(4, "q2", shifted), "not the block of x their device should hold", points=0)


def test_ch4_q2_what_the_function_returns(cpus8):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    def blocks_only(x, layout):
        return dtensor.unpack(_pack()(x, layout))
    assert_hint(grade(4, "q2", blocks_only), "returned a list of", "return dtensor.pack(blocks, layout)", points=0)
    assert_hint(grade(4, "q2", lambda x, layout: x), "returned a tensor that is not a DTensor", points=0)
    replicated = lambda x, layout: dtensor.copy_to_mesh(x, dtensor.Layout.replicated(layout.mesh, rank=2))
    assert_hint(grade(4, "q2", replicated), "calls copy_to_mesh", points=0)
    assert_hint(grade(4, "q2", lambda x, layout: 1 / 0), "raised ZeroDivisionError", points=0)
    assert_hint(grade(4, "q2", lambda x, layout: x.numpy()), "returned a ndarray", points=0)
    assert_hint(grade(4, "q2", tf.split), "case A", points=0)  # a library function, called as one
    assert_hint(grade(4, "q2", 3), "should be a function")
    assert grade(4, "q2", None).status == "unanswered"


def test_ch4_q2_another_seed(cpus8):
    ex = exercises(4).q2
    assert_correct(ex.judge_export(ex.export(_pack(), seed=99), seed=99))
    assert ex.judge_export(ex.export(_pack(), seed=0), seed=99).points == 0  # blocks of another x


def test_ch4_q3_shard_shapes_and_copies(cpus8):
    from course_utils import pack_batch
    from tensorflow.experimental import dtensor

    shard_mesh = dtensor.create_mesh(ch4.SHARD_MESH, devices=cpus8)
    shapes = {k: shape for k, (shape, _) in ch4._reference_shards().items()}
    copies = {k: n for k, (_, n) in ch4._reference_shards().items()}
    assert shapes == {"a": (4, 12, 16), "b": (8, 3, 8), "c": (2, 12, 16), "d": (8, 12, 16)}
    assert copies == {"a": 4, "b": 1, "c": 2, "d": 8}
    # The claims, measured: the shard each device holds, and how many devices hold each distinct shard.
    t = np.arange(math.prod(ch4.T_SHAPE), dtype="float32").reshape(ch4.T_SHAPE)
    for key, (shape, n) in ch4._reference_shards().items():
        specs = ch4.SHARD_LAYOUTS[key]
        components = [c.numpy() for c in dtensor.unpack(pack_batch(t, dtensor.Layout(specs, shard_mesh)))]
        assert {c.shape for c in components} == {shape}, key
        assert len({c.tobytes() for c in components}) == 8 // n, key
    assert_correct(grade(4, "q3", shapes, copies))
    assert_correct(grade(4, "q3", {k: list(v) for k, v in shapes.items()}, {k: np.int64(v) for k, v in copies.items()}))
    assert_hint(grade(4, "q3", dict(shapes, a=ch4.T_SHAPE), copies), "that is the global shape", points=3)
    assert_hint(grade(4, "q3", dict(shapes, c=(4, 12, 16)), copies), "wrong mesh axis", "the chapter's mesh had them",
                points=3)
    assert_hint(grade(4, "q3", shapes, dict(copies, b=3)), "8 devices / the number of distinct shards", points=3)
    assert_hint(grade(4, "q3", shapes, dict(copies, a=2)), "number of DIFFERENT pieces", points=3)
    assert_hint(grade(4, "q3", dict(shapes, b=(3, 8)), copies), "the tensor has 3 axes", points=3)
    assert_hint(grade(4, "q3", dict(shapes, d=None), dict(copies, d=None)), "d: not answered yet", points=3)
    assert_hint(grade(4, "q3", dict(shapes, a="two by twelve"), copies), "tuple of ints", points=3)
    assert_hint(grade(4, "q3", shapes, [4, 1, 2, 8]), "copies: give a dict")


def test_ch4_q3_readable_forms():
    shapes = {k: shape for k, (shape, _) in ch4._reference_shards().items()}
    copies = {k: n for k, (_, n) in ch4._reference_shards().items()}
    assert_correct(grade(4, "q3", dict(shapes, a="4x12x16", b="(8, 3, 8)", c="2 × 12 × 16", d=" 8, 12, 16 "), copies))
    assert_correct(grade(4, "q3", {k.upper(): v for k, v in shapes.items()}, {f"({k})": v for k, v in copies.items()}))
    assert_correct(grade(4, "q3", shapes, {k: float(v) for k, v in copies.items()}))
    assert_correct(grade(4, "q3", shapes, {k: f" {v}" for k, v in copies.items()}))


def _prediction_answers(name):
    """The right answers of exercise 3, 4 or 5."""
    return {"q3": ({k: shape for k, (shape, _) in ch4._reference_shards().items()},
                   {k: n for k, (_, n) in ch4._reference_shards().items()}),
            "q4": ({k: truth for k, (truth, _) in ch4._reference_collectives().items()},),
            "q5": (COSTS,)}[name]


@pytest.mark.parametrize("name, spec", [("q3", "course_utils.viz:visualize_sharding"),
                                        ("q3", "course_utils.explorer:explore_layout"),
                                        ("q3", "course_utils.explorer:layout_explorer"),
                                        ("q4", "course_utils.profiling:collectives_run_by"),
                                        ("q5", "course_utils.costs:matmul_cost")])
def test_ch4_predictions_count_only_before_the_tool_that_prints_them(name, spec, monkeypatch):
    """Exercises 3, 4 and 5 ask for a prediction that visualize_sharding (or explore_layout), collectives_run_by and
    matmul_cost print: a check made while the notebook holds the tool, under any name but IPython's own, scores 0 and
    says so, without saying how the answer would score; the same answer scores before."""
    import importlib

    from course_utils.checkers import reach

    module_name, _, tool = spec.partition(":")
    answers = _prediction_answers(name)
    exercise = getattr(exercises(4), name)
    assert spec in exercise.revealed_by
    namespace = {"_": importlib.import_module(module_name), "_i3": "from course_utils import " + tool}
    monkeypatch.setattr(reach, "learner_namespace", lambda: namespace)
    assert_correct(exercise.evaluate(*answers))
    namespace["_vs"] = getattr(importlib.import_module(module_name), tool)  # a private alias is an import too
    result = exercise.evaluate(*answers)
    assert_hint(result, f"had imported or used `{tool}` before this check", "predict", "not counted", points=0)
    assert "would earn" not in result.message and "Judged anyway" not in result.message


def test_ch4_each_prediction_names_every_tool_that_would_print_its_answer():
    """The question's text names every tool of its revealed_by (exercise 3: visualize_sharding, explore_layout and
    layout_explorer), in the exercise notebook and on every variant: a learner is told which tools to leave alone
    until the check."""
    import random
    from pathlib import Path

    import nbformat

    from course_utils.checkers.core import notebook_cells
    from course_utils.checkers.reach import tool_name

    nb = nbformat.read(Path(__file__).resolve().parents[2] / "exercises" / "04_meshes_and_layouts.ipynb", as_version=4)
    ids = [cell.get("id") for cell in nb.cells]
    for exercise in exercises(4):
        cell = ids.index(notebook_cells()[4]["exercises"][exercise.name]["cell"])
        question = next(c.source for c in reversed(nb.cells[:cell])
                        if c.cell_type == "markdown" and c.source.startswith("## Exercise"))
        for spec in exercise.revealed_by:
            assert f"`{tool_name(spec)}`" in question, (exercise.name, spec)
    assert len(ch4.SHARD_TOOLS) == 3
    rng = random.Random(37)
    for _ in range(5):
        text = ch4.ShardShapes(4, "q3", params=ch4.ShardShapes.draw(rng)).rendered_cells(solutions=False)["c11"]
        assert all(f"`{tool_name(spec)}`" in text for spec in ch4.SHARD_TOOLS)


def test_ch4_a_prediction_tool_used_then_deleted_still_counts(cpus8, monkeypatch):
    """The fresh-eyes review of issue 37: import visualize_sharding (or matmul_cost), use it, del it, then check. The
    tools record the notebook's calls; a checker's own calls (matmul_cost for exercise 5's reference) do not count."""
    from course_utils import costs, viz
    from course_utils.checkers import reach
    from tensorflow.experimental import dtensor

    monkeypatch.setattr(reach, "learner_namespace", lambda: {})
    assert_correct(exercises(4).q5.evaluate(*_prediction_answers("q5")))  # the checker called matmul_cost itself
    viz.visualize_sharding(dtensor.Layout(["batch", dtensor.UNSHARDED, dtensor.UNSHARDED],
                                          dtensor.create_mesh([("batch", 2), ("model", 4)], devices=cpus8)))
    assert_hint(exercises(4).q3.evaluate(*_prediction_answers("q3")), "used `visualize_sharding`", points=0)
    costs.matmul_cost([8, 4], ["batch", "unsharded"], [4, 4], ["unsharded", "model"], {"batch": 2, "model": 4})
    assert_hint(exercises(4).q5.evaluate(*_prediction_answers("q5")), "used `matmul_cost`", points=0)
    reach.forget_calls()
    assert_correct(exercises(4).q3.evaluate(*_prediction_answers("q3")))


def test_ch4_the_exercise_notebook_imports_each_tool_after_its_prediction():
    """In the exercise notebook, the first cell that names a tool comes after the cell of each exercise it would give
    away (the grader collects an exercise's answers right after its cell)."""
    from pathlib import Path

    import nbformat

    from course_utils.checkers.core import notebook_cells
    from course_utils.checkers.reach import tool_name

    root = Path(__file__).resolve().parents[2]
    nb = nbformat.read(root / "exercises" / "04_meshes_and_layouts.ipynb", as_version=4)
    code = [(c.get("id"), "\n".join(line.split("#")[0] for line in c.source.splitlines()))
            for c in nb.cells if c.cell_type == "code"]
    ids = [cell_id for cell_id, _ in code]
    for exercise in exercises(4):
        cell = ids.index(notebook_cells()[4]["exercises"][exercise.name]["cell"])
        uses = {spec: [i for i, (_, source) in enumerate(code) if tool_name(spec) in source]
                for spec in exercise.revealed_by}
        assert not exercise.revealed_by or any(uses.values()), exercise.name  # the notebook shows the answer later
        for spec, cells in uses.items():
            assert not cells or min(cells) > cell, (exercise.name, spec, [ids[i] for i in cells])


Q4_LAYOUTS = {"a": (["model", "unsharded"], ["unsharded", "unsharded"]),
              "b": (["model", "unsharded"], ["unsharded", "batch"]),
              "c": (["unsharded", "batch"], ["batch", "unsharded"]),
              "d": (["batch", "unsharded"], ["model", "unsharded"]),
              "e": (["batch", "unsharded"], ["batch", "unsharded"])}
CHAPTER_CASES = [(["batch", "unsharded"], ["unsharded", "unsharded"]), (["batch", "unsharded"], ["unsharded", "model"]),
                 (["batch", "model"], ["model", "unsharded"]), (["batch", "model"], ["unsharded", "model"])]


@pytest.fixture(scope="module")
def q4_runs(mesh42):
    """What DTensor really runs for each case of exercise 4: {case: the list collectives_run_by returns}."""
    import tensorflow as tf
    from course_utils import collectives_run_by, pack_batch
    from tensorflow.experimental import dtensor

    x = np.arange(32, dtype="float32").reshape(8, 4)
    w = np.arange(32, dtype="float32").reshape(4, 8)
    runs = {}
    for key, (x_specs, w_specs) in Q4_LAYOUTS.items():
        xs, ws = pack_batch(x, dtensor.Layout(x_specs, mesh42)), pack_batch(w, dtensor.Layout(w_specs, mesh42))
        assert np.allclose(global_numpy(tf.matmul(xs, ws)), x @ w), key
        runs[key] = collectives_run_by(lambda: tf.matmul(xs, ws))
    return runs


def test_ch4_q4_answers_are_what_dtensor_runs(q4_runs):
    for key, runs in q4_runs.items():
        truth = ch4._reference_collectives()[key][0]
        assert [(run.kind, run.axes[0]) for run in runs] == ([] if truth == "none" else [truth]), (key, runs)
    # Case d's other plan (gather w whole along k) also gives the right y, but DTensor does not run it.
    assert ch4._reference_other_plans()["d"] != ch4._reference_collectives()["d"][0]
    assert [(run.kind, run.axes) for run in q4_runs["d"]] == [("all-reduce", ("model",))]


def test_ch4_q4_accepts_what_collectives_run_by_returns(q4_runs):
    assert_correct(grade(4, "q4", q4_runs))  # lists of CollectiveRun, [] for none
    printed = {key: [(run.kind, run.axes) for run in runs] for key, runs in q4_runs.items()}  # as the chapter prints
    assert_correct(grade(4, "q4", printed))
    assert_correct(grade(4, "q4", {key: pairs[0] if pairs else () for key, pairs in printed.items()}))


def test_ch4_q4_cases_are_not_the_chapters():
    """Item 4: no case of exercise 4 is one of the chapter's four printed cases (its table of c62b)."""
    import re

    cases = {key: tuple(re.findall(r"\[[^]]*\]", text)) for key, text in ch4.MATMUL_CASES.items()}
    assert len(set(cases.values())) == 5
    for x_specs, w_specs in CHAPTER_CASES:
        assert (x_specs, w_specs) not in Q4_LAYOUTS.values()
    assert {key: (list(x), list(w)) for key, (x, w) in Q4_LAYOUTS.items()} == Q4_LAYOUTS


def test_ch4_q4_collectives():
    right = {k: truth for k, (truth, _) in ch4._reference_collectives().items()}
    assert_correct(grade(4, "q4", right))
    assert_correct(grade(4, "q4", dict(right, a="None", c=["AllReduce", "batch"], e=("all_gather", "'batch'"))))
    for no_collective in (None, (), [], "none", "no communication"):
        assert_correct(grade(4, "q4", dict(right, a=no_collective, b=no_collective)))
    assert_correct(grade(4, "q4", dict(right, c=("all-reduce", ("batch",)), d=[("all-reduce", ("model",))])))
    assert_hint(grade(4, "q4", dict(right, c="none")), "cannot finish alone", points=4)
    assert_hint(grade(4, "q4", dict(right, c=None)), "cannot finish alone", points=4)  # None is an answer: none
    assert_hint(grade(4, "q4", dict(right, a=("all-reduce", "model"))), "does any device hold only part", points=4)
    assert_hint(grade(4, "q4", dict(right, b=("all-gather", "batch"))), "does any device hold only part", points=4)
    assert_hint(grade(4, "q4", dict(right, d=("all-reduce", "batch"))), "which mesh axis splits", points=4)
    assert_hint(grade(4, "q4", dict(right, c=("all-reduce", "model"))), "which mesh axis splits", points=4)
    assert_hint(grade(4, "q4", dict(right, c=("all-reduce", ("batch", "model")))), "which mesh axis splits", points=4)
    assert_hint(grade(4, "q4", dict(right, c=("all-gather", "batch"))), "not the collective DTensor runs",
                "partial sums", points=4)
    assert_hint(grade(4, "q4", dict(right, e=("all-reduce", "batch"))), "not the collective DTensor runs",
                "WHICH examples", points=4)
    other_plan = grade(4, "q4", dict(right, d=("all-gather", "model")))
    assert_hint(other_plan, "a plan that gives the right y", "not the one DTensor runs", points=4)
    # the tool that would show it voids the later checks of this exercise: the hint says so (the fresh-eyes review)
    assert "voids the checks of this exercise that come after" in other_plan.message
    assert "Check with collectives_run_by" not in other_plan.message
    assert_hint(grade(4, "q4", dict(right, a=True)), "answer 'none'", points=4)
    assert_hint(grade(4, "q4", dict(right, d=...)), "d: not answered yet", points=4)
    # Only `...` is a placeholder: a dict of empty answers is graded (two of them are right).
    assert_hint(grade(4, "q4", {key: [] for key in right}), "cannot finish alone", points=2)
    assert grade(4, "q4", {key: ... for key in right}).status == "unanswered"


def test_ch4_q4_readable_forms():
    right = {k: truth for k, (truth, _) in ch4._reference_collectives().items()}
    texts = {"a": "none", "b": "No collective", "c": "all-reduce over batch", "d": "AllReduce('model')",
             "e": "all_gather over the batch axis"}
    assert_correct(grade(4, "q4", texts))
    assert_correct(grade(4, "q4", {f"({key.upper()})": value for key, value in right.items()}))
    assert_correct(grade(4, "q4", {f" {key} ": value for key, value in right.items()}))


def test_ch4_q4_first_try_names_neither_the_collective_nor_the_other_option():
    """A binary choice: on the first try the message for a wrong kind must not name the kind that ran."""
    right = {k: truth for k, (truth, _) in ch4._reference_collectives().items()}
    for key, wrong in (("c", ("all-gather", "batch")), ("e", ("all-reduce", "batch")), ("d", ("all-gather", "model")),
                       ("c", ("all-reduce", "model")), ("a", ("all-reduce", "model"))):
        result = first_try("q4", dict(right, **{key: wrong}))
        line = next(line for line in result.message.splitlines() if line.strip().startswith(f"✗ {key}:"))
        truth = right[key]
        assert ch4._reference_collectives()[key][1] not in result.message, (key, result.message)
        if truth != "none":
            assert truth[0] not in line.split(":", 1)[1].replace(ch4.MATMUL_CASES[key], ""), (key, line)


def test_ch4_q4_graded_feedback_keeps_the_answer_back():
    right = {k: truth for k, (truth, _) in ch4._reference_collectives().items()}
    result = exercises(4, mode="graded").q4.evaluate(dict(right, e=("all-reduce", "batch")))
    assert result.points == 4 and "not the collective DTensor runs" in result.message
    # the explanation names the answer: self-study only
    assert ch4._reference_collectives()["e"][1] not in result.message


def test_ch4_first_wrong_check_teaches_before_it_tells(capsys):
    """core.Exercise.teach_first: the first wrong check() holds the answer back; the second shows it."""
    from course_utils.checkers import chapter_definition

    fresh = chapter_definition(4).bind()  # a kernel's checkers, with no checks yet
    right = {k: truth for k, (truth, _) in ch4._reference_collectives().items()}
    wrong = dict(right, e=("all-reduce", "batch"))
    fresh.q4.check(wrong)
    first = capsys.readouterr().out
    assert "not the collective DTensor runs" in first and ch4._reference_collectives()["e"][1] not in first
    assert "a second wrong check shows the answer" in first and "ex.q4.hint()" in first
    fresh.q4.check(wrong)
    second = capsys.readouterr().out
    assert ch4._reference_collectives()["e"][1] in second and "a second wrong check" not in second
    assert fresh.q4.wrong_checks == 2
    fresh.q4.check(right)
    assert capsys.readouterr().out.startswith("Correct! 5/5 points.")
    # evaluate() (the grader's and the tests' way in) always gives the mode's full feedback.
    assert ch4._reference_collectives()["e"][1] in chapter_definition(4).bind().q4.evaluate(wrong).message
    # Elements for bytes: the first check says so and holds back the size of a float32; the second gives it.
    fresh.q5.check(dict(COSTS, a_held=4096 * 4096))
    assert "elements" in (out := capsys.readouterr().out) and "4 bytes" not in out and "first try" in out
    fresh.q5.check(dict(COSTS, a_held=4096 * 4096))
    assert "A float32 takes 4 bytes" in capsys.readouterr().out
    # A first wrong check with nothing to hold back gets no note.
    chapter_definition(4).bind().q5.check(dict(COSTS, a_held=64))
    assert "looks like MiB" in (out := capsys.readouterr().out) and "first try" not in out
    # Graded hand-outs hold answers back on every check, with no note.
    graded = chapter_definition(4).bind(mode="graded")
    graded.q4.check(wrong)
    graded.q4.check(wrong)
    out = capsys.readouterr().out
    assert ch4._reference_collectives()["e"][1] not in out and "first try" not in out


def test_every_chapter_teaches_before_it_tells(capsys):
    """Every chapter's exercises teach first; in chapter 3 too, a second wrong check shows the whole feedback, a
    first one holds back whatever gives the answer away (written so as not to depend on chapter 3's wording)."""
    from course_utils.checkers import chapter_definition

    for number in range(1, 9):
        try:
            chapter = chapter_definition(number)
        except (KeyError, ValueError):
            continue
        assert all(cls.teach_first for cls in chapter.exercises), number
    wrong = [True, True, True, False, True, False]
    full = chapter_definition(3).bind().q4.evaluate(wrong).message
    fresh = chapter_definition(3).bind()
    fresh.q4.check(wrong)
    first = capsys.readouterr().out
    fresh.q4.check(wrong)
    second = capsys.readouterr().out
    assert full in second and "a second wrong check" not in second
    assert ("a second wrong check shows the answer" in first) == (full not in first)


def test_ch4_right_answers_print_no_wrong_line(model_first):
    results = [grade(4, "q1", model_first, _layer_layouts(model_first)),
               grade(4, "q3", {k: shape for k, (shape, _) in ch4._reference_shards().items()},
                     {k: n for k, (_, n) in ch4._reference_shards().items()}),
               grade(4, "q4", {k: truth for k, (truth, _) in ch4._reference_collectives().items()}),
               grade(4, "q5", COSTS)]
    for result in results:
        assert result.status == "correct" and "✗" not in result.message, str(result)


W_BYTES = 4096 * 4096 * 4
MIB = 2**20
COSTS = {"a_held": W_BYTES, "b_held": W_BYTES // 4, "b_sent": 16 * MIB + 12 * MIB, "even_at": 4096, "below": "b"}


def test_ch4_q5_truth_comes_from_the_cost_model():
    assert ch4._reference_layout_costs() == COSTS
    # by hand: (a) sends its whole dw over 'batch' (n = 2) whatever N is; (b) a quarter of it, plus dx's partial sums
    # over 'model' (n = 4), x's rows on one device (N / 2) by 4096 floats
    a_sent, b_dw = 2 * 1 / 2 * W_BYTES, 2 * 1 / 2 * W_BYTES / 4
    b_dx = lambda n: 2 * 3 / 4 * (n // 2 * 4096 * 4)
    assert b_dw + b_dx(1024) == COSTS["b_sent"] and b_dw + b_dx(COSTS["even_at"]) == a_sent


def test_ch4_q5_is_not_the_chapters_case():
    """Item 4: the chapter prices x @ w on batch=4 x model=2; copying its numbers gives none of the answers."""
    chapter = ch4._reference_costs_on([("batch", 4), ("model", 2)], 1024)
    assert chapter["b_held"] != COSTS["b_held"] and round(chapter["b_sent"]) != COSTS["b_sent"]
    assert ch4._reference_even_at([("batch", 4), ("model", 2)]) != COSTS["even_at"]


def test_ch4_q5_layout_cost():
    assert_correct(grade(4, "q5", COSTS))
    assert_correct(grade(4, "q5", {key: np.int64(value) if key != "below" else value for key, value in COSTS.items()}))
    assert_correct(grade(4, "q5", dict(COSTS, b_sent=16 * MIB + 1024 * 2 * 3 / 4 * 2048 * 4, even_at=4096.0)))
    assert_correct(grade(4, "q5", {key.upper().replace("_", " "): value for key, value in COSTS.items()}))
    assert_hint(grade(4, "q5", dict(COSTS, a_held=4096 * 4096)), "elements", "A float32 takes 4 bytes", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_held=W_BYTES)), "that is all of w", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_held=W_BYTES // 2)), "divided w by 2", "THIS mesh", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_held=W_BYTES // 8)), "all 8 devices", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, a_held=W_BYTES // 2)), "which mesh axis divides it", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=14 * MIB)), "not (n-1)/n", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=16 * MIB)), "one of the backward pass's collectives", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=12 * MIB)), "one of the backward pass's collectives", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=40 * MIB)), "x's rows on ONE device", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=76 * MIB)), "dw's B is one device's block", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=52 * MIB)), "the chapter's batch=4 x model=2 mesh", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=64 * MIB)), "(a)'s backward traffic", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=2 * W_BYTES)), "find each all-reduce", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, even_at=2048)), "one 'batch' group", points=4)
    # even_at computed from a b_sent that all-reduced the whole dx: the hint points at that slip, not at N
    whole_dx = grade(4, "q5", dict(COSTS, b_sent=40 * MIB, even_at=2048))
    assert_hint(whole_dx, "x's rows on ONE device", "follows from your b_sent", points=3)
    assert "one 'batch' group" not in whole_dx.message
    assert_correct(grade(4, "q5", dict(COSTS, a_held="67108864", b_held=" 16,777,216 ", even_at="4096")))  # text
    assert_hint(grade(4, "q5", dict(COSTS, even_at=12288)), "the chapter's batch=4 x model=2 mesh", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, even_at=64 * MIB)), "not of bytes", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, even_at=1000)), "as a function of N", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent="28 MiB")), "give a number of bytes", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, even_at="4k")), "give a number of examples", points=4)
    # Units: answers in MiB, KiB or MB are named as such, rounded ones too.
    assert_hint(grade(4, "q5", dict(COSTS, a_held=64)), "looks like MiB", "give bytes", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=28.0, b_held=16)), "looks like MiB", points=3)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=28 * 1024)), "looks like KiB", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=29.36)), "looks like MB", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, a_held=67.1)), "looks like MB", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=None)), "b_sent: not answered yet", points=4)
    # below: the layout that sends less for a small batch, by its letter
    assert_correct(grade(4, "q5", dict(COSTS, below=" (B) ")))
    assert_hint(grade(4, "q5", dict(COSTS, below="a")), "for a small global batch", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, below="c")), "the letter of a layout", points=4)
    assert_hint(grade(4, "q5", dict(COSTS, below=2)), "the letter of a layout", points=4)


@pytest.mark.parametrize("slip, hidden", [
    (dict(a_held=4096 * 4096), "4 bytes"),
    (dict(b_held=W_BYTES), "quarter"),
    (dict(b_held=W_BYTES // 2), "quarter"),
    (dict(b_held=W_BYTES // 8), "w / 4"),
    (dict(b_sent=16 * MIB), "12,582,912"),
    (dict(b_sent=40 * MIB), "512 x 4096"),
    (dict(b_sent=76 * MIB), "quarter"),
])
def test_ch4_q5_first_try_holds_the_numbers_back(slip, hidden):
    """'half of w', 'a float32 takes 4 bytes' and the block sizes are the answer: shown from the second try on."""
    shown = first_try("q5", dict(COSTS, **slip)).message
    assert hidden not in shown and "first try" in shown, shown
    assert hidden in grade(4, "q5", dict(COSTS, **slip)).message


def test_only_ellipses_is_the_placeholder_where_none_is_an_answer():
    from course_utils.checkers.answers import only_ellipses

    assert only_ellipses(...) and only_ellipses({"a": ..., "b": ...}) and only_ellipses([..., ...])
    assert not any(only_ellipses(value) for value in (None, (), [], {}, {"a": None, "b": ...}, {"a": []}, "none"))


# Exercise 6: a product built to a memory budget. Each learner below is a sharded_product(mesh, x, w, budget).
def _right_choice(mesh, x, w, budget):
    """The solution's rule: (x specs, w specs, predicted collective)."""
    U, model = "unsharded", mesh.dim_size("model")
    if w.nbytes <= budget:
        return ["batch", U], [U, U], "none"
    if w.shape[1] % model == 0:
        return ["batch", U], [U, "model"], "none"
    return ["batch", "model"], ["model", U], ("all-reduce", "model")


def _learner(choose=_right_choice, place="pack_batch", give_y="dtensor", give_layouts="layout", result="tuple",
             predict=None):
    """A sharded_product built from a rule; the options write it as learners do, right or wrong."""
    import tensorflow as tf
    from course_utils import pack_batch
    from tensorflow.experimental import dtensor

    product = tf.function(tf.matmul)

    def sharded_product(mesh, x, w, budget):
        x_specs, w_specs, collective = choose(mesh, x, w, budget)
        if predict is not None:
            collective = predict(collective)
        x_layout, w_layout = dtensor.Layout(x_specs, mesh), dtensor.Layout(w_specs, mesh)
        if place == "copy_to_mesh":
            x_on, w_on = dtensor.copy_to_mesh(tf.constant(x), x_layout), dtensor.copy_to_mesh(tf.constant(w), w_layout)
        elif place == "w_plus_one":  # a placement that changes w's values
            x_on, w_on = pack_batch(x, x_layout), pack_batch(w + 1, w_layout)
        else:
            x_on, w_on = pack_batch(x, x_layout), pack_batch(w, w_layout)
        y = product(x_on, w_on)
        y = {"dtensor": lambda: y, "replicated": lambda: dtensor.relayout(y, dtensor.Layout.replicated(mesh, rank=2)),
             "block": lambda: dtensor.unpack(y)[0], "blocks": lambda: dtensor.unpack(y), "numpy": lambda: y.numpy(),
             "host": lambda: dtensor.relayout(y, dtensor.Layout.replicated(mesh, rank=2)).numpy()}[give_y]()
        layouts = {"layout": (x_layout, w_layout), "specs": (x_specs, tuple(w_specs)), "dtensor": (x_on, w_on)}
        x_out, w_out = layouts[give_layouts]
        if result == "dict":
            return {"y": y, "x_layout": x_out, "w_layout": w_out, "collective": collective}
        if result == "three":
            return y, x_out, w_out
        return y, x_out, w_out, collective
    return sharded_product


def _choose(x_specs_if, w_specs_of):
    """A rule from two functions of (mesh, w, budget); the prediction is what the cost model says DTensor runs."""
    from course_utils import matmul_cost

    def choose(mesh, x, w, budget):
        x_specs, w_specs = x_specs_if(mesh, w, budget), w_specs_of(mesh, w, budget)
        cost = matmul_cost(x.shape, x_specs, w.shape, w_specs, mesh)
        return x_specs, w_specs, [(c.kind, c.axes) for c in cost.collectives]
    return choose


U4 = "unsharded"
BATCH_X = lambda mesh, w, budget: ["batch", U4]


def test_ch4_q6_cases_are_what_the_exercise_says(mesh42):
    """Each case: the budget is met by splitting w over 'model' alone; A fits whole, B and C do not; the least
    a layout within the budget sends, by the cost model, is what the run of every such layout shows."""
    for case in ch4_budget_cases.BUDGET_CASES:
        name, dims, x_shape, w_shape, budget = case
        model, w_bytes = dict(dims)["model"], 4 * math.prod(w_shape)
        assert w_bytes // model <= budget and (w_bytes <= budget) == (name == "A"), case
        mesh = ch4_budget_cases._case_mesh(dims)
        least, cheapest = ch4_budget_cases.reference_cheapest_layouts(case)
        measured = {}
        for x_specs in ch4_budget_cases.X_CHOICES:
            for w_specs in ch4_budget_cases.W_CHOICES:
                sizes = zip(x_shape + w_shape, x_specs + w_specs)
                if all(size % model == 0 for size, spec in sizes if spec == "model"):
                    run = ch4_budget_cases._reference_measure(case, mesh, x_specs, w_specs)
                    if run["held"] <= budget:
                        measured[(tuple(x_specs), tuple(w_specs))] = run["sent"]
        assert min(measured.values()) == least, (case, measured)
        assert sorted((tuple(x), tuple(w)) for x, w in cheapest) == sorted(k for k, v in measured.items() if v == least)
    cheapest_of = ch4_budget_cases.reference_cheapest_layouts
    assert cheapest_of(ch4_budget_cases.BUDGET_CASES[0])[0] == 0 == cheapest_of(ch4_budget_cases.BUDGET_CASES[1])[0]
    assert cheapest_of(ch4_budget_cases.BUDGET_CASES[2]) == (120, [(["batch", U4], ["model", U4]),
                                                            (["batch", "model"], ["model", U4])])


def test_ch4_q6_right_forms(mesh42):
    assert_correct(grade(4, "q6", _learner()))
    assert_correct(grade(4, "q6", _learner(result="dict")))
    assert_correct(grade(4, "q6", _learner(give_layouts="specs")))  # lists of sharding specs
    assert_correct(grade(4, "q6", _learner(give_layouts="dtensor")))  # the placed DTensors: their layouts count
    assert_correct(grade(4, "q6", _learner(give_y="replicated")))  # y gathered on the mesh
    assert_correct(grade(4, "q6", _learner(place="copy_to_mesh")))

    def units_first(mesh, x, w, budget):  # another rule: split the units whenever 'model' divides them
        if w.shape[1] % mesh.dim_size("model") == 0:
            return ["batch", U4], [U4, "model"], None
        if w.nbytes <= budget:
            return ["batch", U4], [U4, U4], ()
        return ["batch", U4], ["model", U4], [("all-reduce", ("model",))]  # only w splits the contracted axis
    assert_correct(grade(4, "q6", _learner(units_first)))
    for none, all_reduce in ((None, ("all-reduce", ("model",))), ((), ["AllReduce", "model"]),
                             ([], [("all-reduce", "model")]), ("no collective", ("all_reduce", "'model'")),
                             (set(), {("all-reduce", "model")})):
        assert_correct(grade(4, "q6", _learner(predict=lambda c: none if c == "none" else all_reduce)))


def test_ch4_q6_over_the_budget(mesh42):
    replicate = lambda mesh, x, w, budget: (["batch", U4], [U4, U4], "none")
    result = grade(4, "q6", _learner(replicate))
    assert_hint(result, "case B", "case C", "over the budget", "w is within the budget; fix those first", points=2)
    assert "case A" not in result.message
    no_batch = lambda mesh, x, w, budget: ([U4, U4],) + _right_choice(mesh, x, w, budget)[1:]
    assert_hint(grade(4, "q6", _learner(no_batch)), "x is a batch of examples", points=2)


def test_ch4_q6_sends_more_than_needed(mesh42):
    def never_replicate(mesh, x, w, budget):  # splits w although the whole w fits in case A
        if w.shape[1] % mesh.dim_size("model") == 0:
            return ["batch", U4], [U4, "model"], "none"
        return ["batch", "model"], ["model", U4], ("all-reduce", "model")
    result = grade(4, "q6", _learner(never_replicate))
    assert_hint(result, "case A", "needs no collective at all", "partial sums", points=3)
    assert "Here: x ['batch', U] @ w [U, U]." in result.message
    # x's features split over 'model' when w holds them whole (A: an all-reduce) or is split on its units (B:
    # an all-gather), each predicted right: only the communication is wrong.
    split_features = _choose(lambda mesh, w, budget: ["batch", "model"],
                             lambda mesh, w, budget: _right_choice(mesh, w, w, budget)[1])
    result = grade(4, "q6", _learner(split_features))
    assert_hint(result, "case A", "partial sums to add", "case B", "they are gathered first", points=3)


def test_ch4_q6_a_mesh_axis_that_does_not_divide(mesh42):
    columns = lambda mesh, x, w, budget: (["batch", U4], [U4, "model"], "none")  # budget ignored
    assert_hint(grade(4, "q6", _learner(columns)), "case A", "case C", "does not divide evenly",
                "'model' (size 4) does not divide w's 6 columns", points=1)

    def no_size_check(mesh, x, w, budget):  # replicate if it fits, else split the units
        return (["batch", U4], [U4, U4] if w.nbytes <= budget else [U4, "model"], "none")
    result = grade(4, "q6", _learner(no_size_check))
    assert_hint(result, "case C", "'model' (size 4) does not divide w's 10 columns",
                "it counts once your function runs in every case", points=1)
    assert "case A" not in result.message and "case B" not in result.message


def test_ch4_q6_wrong_predictions(mesh42):
    gather = _learner(predict=lambda c: ("all-gather", "model") if c != "none" else c)
    assert_hint(grade(4, "q6", gather), "case C", "which is not what it ran", "another collective",
                "It ran an all-reduce over 'model'.", points=3)
    shown = exercises(4).q6._evaluate((gather,), {}, first_try=True).message
    assert "which is not what it ran" in shown and "another collective" not in shown and "It ran" not in shown
    assert_hint(grade(4, "q6", _learner(predict=lambda c: "none")), "cannot finish alone", points=3)
    assert_hint(grade(4, "q6", _learner(predict=lambda c: ("all-reduce", "model"))), "case A", "case B",
                "does any device hold only part", points=3)
    assert_hint(grade(4, "q6", _learner(predict=lambda c: ("all-reduce", "batch") if c != "none" else c)),
                "which mesh axis splits", points=3)
    assert_hint(grade(4, "q6", _learner(predict=lambda c: "some all-reduce")), "give the prediction as",
                points=3)
    # Written as text, a prediction is read: 'none', 'all-reduce over model'.
    assert_correct(grade(4, "q6", _learner(predict=lambda c: "all-reduce over model" if c != "none" else "no")))

    def one_operand(mesh, x, w, budget):  # only w splits the contracted axis, and an all-gather is predicted
        x_specs, w_specs, collective = _right_choice(mesh, x, w, budget)
        if w_specs[0] == "model":
            return ["batch", U4], w_specs, ("all-gather", "model")
        return x_specs, w_specs, collective
    assert_hint(grade(4, "q6", _learner(one_operand)), "only one operand splits the contracted axis",
                "cutting the matching part", points=3)


def test_ch4_q6_w_split_over_batch_is_named(mesh42):
    """w over 'batch' (a weight split like the data): the hint is about w, not about x's examples."""
    def w_rows_over_batch(mesh, x, w, budget):
        return ["batch", U4], ["batch", U4], "none"
    result = grade(4, "q6", _learner(w_rows_over_batch))
    assert_hint(result, "case B", "which divides x's 4 examples: it does not divide w's 6 rows", "Is w split over "
                "'batch'? 'batch' splits the data", points=1)
    assert "are your layouts on that mesh" not in result.message

    def w_columns_over_batch(mesh, x, w, budget):  # 'batch' divides w's columns in every case
        return ["batch", U4], [U4, "batch"], "none"
    result = grade(4, "q6", _learner(w_columns_over_batch))
    assert "w is split over 'batch'" in result.message and result.points < 4, result.message


def test_ch4_q6_a_measurement_is_not_a_prediction(mesh42):
    import tensorflow as tf
    from course_utils import collectives_run_by, pack_batch
    from tensorflow.experimental import dtensor

    def measures(mesh, x, w, budget):
        x_specs, w_specs, _ = _right_choice(mesh, x, w, budget)
        x_on, w_on = pack_batch(x, dtensor.Layout(x_specs, mesh)), pack_batch(w, dtensor.Layout(w_specs, mesh))
        runs = collectives_run_by(lambda: tf.matmul(x_on, w_on))
        return tf.matmul(x_on, w_on), x_on, w_on, runs
    assert_hint(grade(4, "q6", measures), "case C", "collectives_run_by measured", "predict it from", points=3)

    def measures_as_pairs(mesh, x, w, budget):  # the measurement turned into the prediction's own form
        y, x_on, w_on, runs = measures(mesh, x, w, budget)
        return y, x_on, w_on, [(run.kind, run.axes) for run in runs] or "none"
    assert_hint(grade(4, "q6", measures_as_pairs), "sharded_product calls collectives_run_by",
                "a measurement, not a prediction", points=3)


def test_ch4_q6_a_product_computed_on_the_host_is_refused(mesh42):
    """The fresh-eyes review of issue 37: y = pack_batch(x @ w, replicated layout), computed on the host, scored 4/4.
    A host value equal to x @ w (or a block of it) put on the mesh is refused; y gathered on the mesh is not."""
    import tensorflow as tf
    from course_utils import pack_batch
    from tensorflow.experimental import dtensor

    right = _learner()

    def on_the_host(mesh, x, w, budget):
        _, x_layout, w_layout, collective = right(mesh, x, w, budget)
        return pack_batch(x @ w, dtensor.Layout.replicated(mesh, rank=2)), x_layout, w_layout, collective

    def blocks_on_the_host(mesh, x, w, budget):
        y, x_layout, w_layout, collective = right(mesh, x, w, budget)
        layout = dtensor.fetch_layout(y)
        rows = np.split(x @ w, mesh.dim_size("batch"), axis=0)
        blocks = [tf.constant(rows[where["batch"]]) for where in mesh.local_device_locations()]
        if layout.sharding_specs[1] != "unsharded":
            return on_the_host(mesh, x, w, budget)
        return dtensor.pack(blocks, layout), x_layout, w_layout, collective
    for learner in (on_the_host, blocks_on_the_host):
        assert_hint(grade(4, "q6", learner), "computed on the host and then placed on the mesh", points=3)
    assert_correct(grade(4, "q6", _learner(give_y="replicated")))


def test_ch4_q6_a_measuring_tool_that_never_runs_is_no_measurement(mesh42):
    """Only a call that runs makes the prediction a measurement (a debug branch that never runs does not)."""
    from course_utils import collectives_run_by

    right = _learner()

    def with_debug(mesh, x, w, budget, debug=False):
        if debug:
            print(collectives_run_by(lambda: None))
        return right(mesh, x, w, budget)
    assert_correct(grade(4, "q6", with_debug))


def test_ch4_q6_the_result(mesh42):
    assert_hint(grade(4, "q6", _learner(give_y="block")), "one device's block of x @ w", points=3)
    assert_hint(grade(4, "q6", _learner(give_y="blocks")), "list of 8 per-device blocks", points=3)
    assert_hint(grade(4, "q6", _learner(give_y="host")), "a host value", points=3)
    assert_hint(grade(4, "q6", _learner(give_y="numpy")), "UnimplementedError", "Only a replicated DTensor")
    assert_hint(grade(4, "q6", _learner(place="w_plus_one")), "differs from x @ w", points=3)


def test_ch4_q6_what_the_function_returns(mesh42, cpus8):
    from tensorflow.experimental import dtensor

    assert_hint(grade(4, "q6", _learner(result="three")), "return four values")
    assert_hint(grade(4, "q6", "sharded_product"), "should be a function")
    assert grade(4, "q6", None).status == "unanswered"
    fixed = _learner()
    own_mesh = dtensor.create_mesh([("batch", 4), ("model", 2)], devices=cpus8)
    # Layouts on a mesh of its own: case A cannot split x's 6 examples over its 'batch' of 4; case C's layouts are
    # not on the mesh passed in; case B's mesh has the same axes and devices as its own, so B is right.
    assert_hint(grade(4, "q6", lambda mesh, x, w, budget: fixed(own_mesh, x, w, budget)),
                "'batch' of size 2, which divides x's 6 examples: are your layouts on that mesh?",
                "lives on a mesh batch=4 x model=2, not on the mesh the checker passed", points=1)


def test_ch4_q6_graded_feedback_keeps_the_answer_back(mesh42):
    gather = _learner(predict=lambda c: ("all-gather", "model") if c != "none" else c)

    def never_replicate(mesh, x, w, budget):
        choice = _right_choice(mesh, x, w, 0)
        return choice if choice[1] == [U4, "model"] else (["batch", "model"], ["model", U4], ("all-reduce", "model"))
    for learner, answer in ((gather, "It ran an all-reduce"), (_learner(never_replicate), "Here: x"),
                            (_learner(lambda mesh, x, w, budget: (["batch", U4], [U4, U4], "none")), "Split w over")):
        shown = exercises(4).q6.evaluate(learner).message
        assert answer in shown, shown
        graded = exercises(4, mode="graded").q6.evaluate(learner)
        assert graded.points < 4 and answer not in graded.message


def test_ch4_q6_right_answer_prints_no_wrong_line(mesh42):
    result = grade(4, "q6", _learner())
    assert result.status == "correct" and "✗" not in result.message, str(result)


def test_ch4_q6_right_with_another_seed(mesh42):
    ex = exercises(4).q6
    assert_correct(ex.judge_export(ex.export(_learner(), seed=12345), seed=12345))


def test_ch4_q6_data_of_another_seed_is_not_enough(mesh42):
    """x and w come from the seed: y collected for seed 0 is not x @ w of seed 12345."""
    ex = exercises(4).q6
    result = ex.judge_export(ex.export(_learner(), seed=0), seed=12345)
    assert_hint(result, "differs from x @ w", points=3)


BUDGET_MODULES = ("ch4_build", "ch4_budget_cases", "ch4_budget_hints")  # exercise 6's checker


@pytest.mark.parametrize("module, cls, name", [("ch4_build", "BudgetProduct", "q6")])
def test_ch4_stripped_checkers_still_collect(mesh42, module, cls, name):
    import sys

    with pytest.MonkeyPatch.context() as patch:  # the stripped checker imports the stripped helpers, as in a sandbox
        for helper in BUDGET_MODULES[1:]:  # ch4_budget_cases first: ch4_budget_hints imports it
            copy, _ = sandbox_copy(helper)
            patch.setitem(sys.modules, copy.__name__, copy)
        stripped = stripped_exercise(module, cls, 4, name)
    text = stripped.export(_learner(), seed=7)
    assert_correct(getattr(exercises(4), name).judge_export(text, seed=7))


def test_ch4_q5_numpy_floats_are_bytes():
    import numpy as np

    from course_utils.checkers.answers import as_bytes

    assert as_bytes(np.float32(67108864)) == 67108864 and as_bytes(np.array(2.0)) == 2
    assert as_bytes(True) is None and as_bytes("64") == 64 and as_bytes(float("nan")) is None
    assert_correct(grade(4, "q5", {k: np.float32(v) if k != "below" else v for k, v in COSTS.items()}))


# --- the graded sandbox's copy of this module states no answer ------------------------------------

def test_ch4_the_sandbox_copy_states_no_answer():
    module, undefined = sandbox_copy("ch4")
    assert not undefined
    for gone in ("SHARDS", "MATMULS", "OTHER_PLANS", "layout_costs", "_reference_shards", "_reference_collectives",
                 "_reference_other_plans", "_reference_layout_costs", "_reference_costs_on", "_reference_even_at",
                 "_reference_cost_slips"):
        assert not hasattr(module, gone), gone
    collectives = ch4._reference_collectives()
    for answer in (ch4._reference_shards(), collectives, ch4._reference_layout_costs(),
                   {k: truth for k, (truth, _) in collectives.items()}, ch4._reference_other_plans()):
        assert not holding(module, answer), answer
    assert module.MATMUL_CASES == ch4.MATMUL_CASES and module.SHARD_LAYOUTS == ch4.SHARD_LAYOUTS
    for cls in module.CHAPTER.exercises:  # BudgetProduct comes from the real ch4_build here
        assert cls.hints and (cls.__module__ != module.__name__ or not {"grade", "judge"} & set(vars(cls)))


@pytest.mark.parametrize("name", BUDGET_MODULES)
def test_ch4_the_sandbox_copies_of_exercise_6_state_no_answer(name):
    module, undefined = sandbox_copy(name)
    assert not undefined
    assert not [key for key in vars(module) if key.startswith(("reference", "_reference", "_judge", "_grade"))]
    if hasattr(module, "BudgetProduct"):
        assert module.BudgetProduct.hints and not {"grade", "judge"} & set(vars(module.BudgetProduct))


def test_ch4_the_sandbox_copy_of_exercises_1_and_2_states_no_answer():
    module, undefined = sandbox_copy("ch4_layouts")
    assert not undefined
    for gone in ("_reference_layer_specs", "_reference_layer_mesh", "_grade_layer_mesh", "_grade_layer_layout",
                 "_judge_layer_specs", "_reference_pack_blocks", "_judge_pack_case", "_judge_pack_answer"):
        assert not hasattr(module, gone), gone
    layer_specs = ch4_layouts._reference_layer_specs()
    for answer in (layer_specs, ch4_layouts._reference_layer_mesh(), *layer_specs.values()):
        assert not holding(module, answer), answer
    for cls in (module.MeshAndLayout, module.PackByHand):
        assert cls.hints and not {"grade", "judge"} & set(vars(cls))
    # What the question states stays: the CPUs asked for each block of units, the cases to pack.
    assert module.WANTED_BLOCKS == ch4_layouts.WANTED_BLOCKS and module.PACK_CASES == ch4_layouts.PACK_CASES


@pytest.mark.parametrize("module, cls, name, answer", [("ch4_layouts", "PackByHand", "q2", _pack)])
def test_ch4_stripped_copy_collects_what_the_grader_judges(module, cls, name, answer, cpus8):
    stripped = stripped_exercise(module, cls, 4, name)
    assert_correct(getattr(exercises(4), name).judge_export(stripped.export(answer(), seed=5), seed=5))


def test_ch4_q4_the_question_shows_the_cases_the_checker_judges():
    """The exercise's table and the checker's cases are written twice (markdown and MATMUL_CASES): they must agree."""
    import re
    from pathlib import Path

    import nbformat

    from course_utils.checkers.ch4 import MATMUL_CASES

    root = Path(__file__).resolve().parents[2]
    for folder in ("solutions", "exercises"):
        nb = nbformat.read(root / folder / "04_meshes_and_layouts.ipynb", as_version=4)
        question = next(c.source for c in nb.cells if c.get("id") == "c14")
        assert "`x` of shape `[8, 4]` and `w` of shape `[4, 8]`" in question
        for key, case in MATMUL_CASES.items():
            x_specs, w_specs = re.fullmatch(r"x (\[.*\]) @ w (\[.*\])", case).groups()
            assert f"| **{key}** | `{x_specs}` | `{w_specs}` |" in question, (folder, key, case)
