"""Chapter 4's checkers: the right answer, typical wrong answers and the hints they get."""
import json
import math

import numpy as np
import pytest

from course_utils.checkers import ch4, exercises
from course_utils.checkers.answers import global_numpy
from helpers import assert_correct, assert_hint, grade


def test_ch4_q1_mesh_and_layout(mesh42, cpus8):
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    assert_correct(grade(4, "q1", mesh42, dtensor.Layout([U, "model"], mesh42)))
    assert_hint(grade(4, "q1", mesh42, dtensor.Layout(["model", U], mesh42)), "splits the ROWS", points=1)
    assert_hint(grade(4, "q1", mesh42, dtensor.Layout([U, U], mesh42)), "fully replicated", points=1)
    assert_hint(grade(4, "q1", mesh42, dtensor.Layout([U, "batch"], mesh42)), "splits the DATA", points=1)
    assert_hint(grade(4, "q1", mesh42, dtensor.Layout(["model"], mesh42)), "a matrix has 2 axes", points=1)
    swapped = dtensor.create_mesh([("model", 2), ("batch", 4)], devices=cpus8)
    assert_hint(grade(4, "q1", swapped, dtensor.Layout([U, "model"], swapped)), "in the order asked")
    flat = dtensor.create_mesh([("batch", 8)], devices=cpus8)
    assert_hint(grade(4, "q1", flat, dtensor.Layout([U, "model"], mesh42)), "1-D", points=1)
    assert_hint(grade(4, "q1", mesh42, "['unsharded', 'model']"), "should be a dtensor.Layout", points=1)


def test_ch4_q2_pack_by_hand(mesh42):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    x = tf.reshape(tf.range(24, dtype=tf.float32), ch4.X_SHAPE)
    layout = dtensor.Layout(["batch", U], mesh42)
    pieces = tf.split(x, 4)
    assert_correct(grade(4, "q2", dtensor.pack([p for p in pieces for _ in range(2)], layout)))
    from course_utils import pack_batch

    assert_correct(grade(4, "q2", pack_batch(x, layout)))
    assert_hint(grade(4, "q2", dtensor.pack(pieces + pieces, layout)), "row-major", points=1)
    assert_hint(grade(4, "q2", pack_batch(x, dtensor.Layout(["model", U], mesh42))), "splits the batch over 'model'")
    assert_hint(grade(4, "q2", pack_batch(x, dtensor.Layout([U, U], mesh42))), "replicated")
    assert_hint(grade(4, "q2", x), "ordinary tensor")
    assert_hint(grade(4, "q2", pack_batch(x + 1, layout)), "hold the wrong rows", points=1)
    flat = dtensor.create_mesh([("batch", 8)], devices=mesh42.local_devices())
    assert_hint(grade(4, "q2", dtensor.pack(tf.split(x, 8), dtensor.Layout(["batch", U], flat))), "batch=4 x model=2")


def test_ch4_q3_shard_shapes_and_copies(mesh42):
    from course_utils import pack_batch
    from tensorflow.experimental import dtensor

    shapes = {k: shape for k, (_, shape, _) in ch4.SHARDS.items()}
    copies = {k: n for k, (_, _, n) in ch4.SHARDS.items()}
    # The claims, measured: the shard each device holds, and how many devices hold each distinct shard.
    t = np.arange(96, dtype="float32").reshape(ch4.T_SHAPE)
    for key, (specs, shape, n) in ch4.SHARDS.items():
        components = [c.numpy() for c in dtensor.unpack(pack_batch(t, dtensor.Layout(specs, mesh42)))]
        assert {c.shape for c in components} == {shape}, key
        assert len({c.tobytes() for c in components}) == 8 // n, key
    assert_correct(grade(4, "q3", shapes, copies))
    assert_correct(grade(4, "q3", {k: list(v) for k, v in shapes.items()}, {k: np.int64(v) for k, v in copies.items()}))
    assert_hint(grade(4, "q3", dict(shapes, a=(8, 12)), copies), "that is the global shape", points=3)
    assert_hint(grade(4, "q3", dict(shapes, c=(2, 6)), copies), "wrong mesh axis", points=3)
    assert_hint(grade(4, "q3", shapes, dict(copies, b=2)), "8 devices / the number of distinct shards", points=3)
    assert_hint(grade(4, "q3", dict(shapes, d=None), dict(copies, d=None)), "d: not answered yet", points=3)
    assert_hint(grade(4, "q3", dict(shapes, a="2x12"), copies), "tuple of ints", points=3)
    assert_hint(grade(4, "q3", shapes, [2, 4, 1, 8]), "copies: give a dict")


def test_ch4_q4_answers_are_what_dtensor_runs(mesh42):
    import tensorflow as tf
    from course_utils import collectives_run_by, pack_batch
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    layouts = {"a": (["batch", U], [U, U]), "b": (["batch", U], [U, "model"]), "c": (["batch", "model"], ["model", U]),
               "d": (["batch", U], ["model", U]), "e": (["batch", "model"], [U, "model"])}
    x = np.arange(32, dtype="float32").reshape(8, 4)
    w = np.arange(24, dtype="float32").reshape(4, 6)
    for key, (x_specs, w_specs) in layouts.items():
        xs, ws = pack_batch(x, dtensor.Layout(x_specs, mesh42)), pack_batch(w, dtensor.Layout(w_specs, mesh42))
        assert np.allclose(global_numpy(tf.matmul(xs, ws)), x @ w), key
        runs = [(run.kind, run.axes[0]) for run in collectives_run_by(lambda: tf.matmul(xs, ws))]
        assert runs == ([] if ch4.MATMULS[key][1] == "none" else [ch4.MATMULS[key][1]]), (key, runs)


def test_ch4_q4_collectives():
    right = {k: truth for k, (_, truth, _) in ch4.MATMULS.items()}
    assert_correct(grade(4, "q4", right))
    assert_correct(grade(4, "q4", dict(right, a="None", c=["AllReduce", "model"], e=("all_gather", "'model'"))))
    assert_hint(grade(4, "q4", dict(right, c="none")), "cannot finish alone", points=4)
    assert_hint(grade(4, "q4", dict(right, b=("all-reduce", "model"))), "does any device hold only part", points=4)
    assert_hint(grade(4, "q4", dict(right, d=("all-reduce", "batch"))), "which mesh axis splits", points=4)
    assert_hint(grade(4, "q4", dict(right, e=("all-reduce", "model"))), "another collective", points=4)
    assert_hint(grade(4, "q4", dict(right, a=True)), "answer 'none' or a pair", points=4)
    assert_hint(grade(4, "q4", dict(right, d=None)), "d: not answered yet", points=4)


def test_ch4_q4_graded_feedback_keeps_the_answer_back():
    right = {k: truth for k, (_, truth, _) in ch4.MATMULS.items()}
    result = exercises(4, mode="graded").q4.evaluate(dict(right, e=("all-reduce", "model")))
    assert result.points == 4 and "another collective" in result.message
    assert ch4.MATMULS["e"][2] not in result.message  # the explanation names the answer: self-study only


W_BYTES = 4096 * 4096 * 4
COSTS = {"a_held": W_BYTES, "a_sent": 1.5 * W_BYTES, "b_held": W_BYTES // 2, "b_sent": 0.75 * W_BYTES + 2**22}


def test_ch4_q5_truth_comes_from_the_cost_model():
    assert ch4.layout_costs() == {key: round(value) for key, value in COSTS.items()}


def test_ch4_q5_layout_cost():
    assert_correct(grade(4, "q5", COSTS))
    assert_correct(grade(4, "q5", {key: np.int64(value) for key, value in COSTS.items()}))
    assert_hint(grade(4, "q5", dict(COSTS, a_held=4096 * 4096)), "a float32 takes 4 bytes", points=3)
    assert_hint(grade(4, "q5", dict(COSTS, b_held=W_BYTES)), "each device holds half of w", points=3)
    assert_hint(grade(4, "q5", dict(COSTS, a_sent=0.75 * W_BYTES)), "not (n-1)/n", points=3)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=0.75 * W_BYTES)), "Add both", points=3)  # forgot dx over model
    assert_hint(grade(4, "q5", dict(COSTS, a_sent=2 * W_BYTES)), "find each all-reduce", points=3)  # n, not (n-1)/n
    assert_hint(grade(4, "q5", dict(COSTS, a_sent="96 MiB")), "give a number of bytes", points=3)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=None)), "b_sent: not answered yet", points=3)
