"""Chapter 4's checkers: the right answer, typical wrong answers and the hints they get."""
import json
import math

import numpy as np
import pytest

from course_utils.checkers import ch4
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


def test_ch4_q4_collectives(mesh42):
    import tensorflow as tf
    from course_utils import pack_batch
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    right = {k: truth for k, (_, truth, _) in ch4.MATMULS.items()}
    assert right == {"a": False, "b": False, "c": True, "d": True}
    # Measured: in case c each device's local product is only a partial sum of its block of y.
    x = np.arange(32, dtype="float32").reshape(8, 4)
    w = np.arange(24, dtype="float32").reshape(4, 6)
    xs = pack_batch(x, dtensor.Layout(["batch", "model"], mesh42))
    ws = pack_batch(w, dtensor.Layout(["model", U], mesh42))
    local = [a.numpy() @ b.numpy() for a, b in zip(dtensor.unpack(xs), dtensor.unpack(ws))]
    assert not np.allclose(local[0], (x @ w)[:2]) and np.allclose(local[0] + local[1], (x @ w)[:2])
    y = tf.matmul(xs, ws)
    assert dtensor.fetch_layout(y).sharding_specs == ["batch", U]
    assert np.allclose(global_numpy(y), x @ w)
    assert_correct(grade(4, "q4", right))
    assert_hint(grade(4, "q4", dict(right, c=False)), "CONTRACTED axis", points=3)
    assert_hint(grade(4, "q4", dict(right, b=True)), "No communication", points=3)
    assert_hint(grade(4, "q4", dict(right, a="yes")), "answer True or False", points=3)
