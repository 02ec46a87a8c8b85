"""Chapter 8's checkers: JAX shardings, a ported LayoutMap, bytes per device."""
import numpy as np
import pytest

from course_utils.checkers import exercises
from helpers import assert_correct, assert_hint, grade


@pytest.fixture(scope="module")
def mystery(jax8):
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax8.devices()[:8]).reshape(4, 2), ("batch", "model"))
    return jax8.device_put(np.arange(48, dtype=np.float32).reshape(8, 6), NamedSharding(mesh, PartitionSpec("batch", None)))


@pytest.fixture(scope="module")
def new_map():
    from keras import distribution as kd

    mesh = kd.DeviceMesh(shape=(4, 2), axis_names=("batch", "model"), devices=[f"cpu:{i}" for i in range(8)])

    def make(entries):
        layout_map = kd.LayoutMap(mesh)
        for key, axes in entries.items():
            layout_map[key] = axes
        return layout_map
    return make


RIGHT_MAP = {".*/d1/kernel": (None, "model"), ".*/d1/bias": ("model",), ".*/d2/kernel": ("model", None)}


def test_ch8_q1_knows_what_jax_does_with_the_exercise_array(mystery):
    from course_utils.checkers import ch8

    indices = [tuple((s.start, s.stop) for s in shard.index) for shard in mystery.addressable_shards]
    assert tuple(mystery.sharding.spec) == ch8.MYSTERY_SPEC
    assert tuple(mystery.addressable_shards[0].data.shape) == ch8.MYSTERY_SHARD_SHAPE
    assert indices.count(indices[0]) == ch8.MYSTERY_COPIES


def test_ch8_q1_reads_the_sharding():
    assert_correct(grade(8, "q1", ("batch", None), ["batch", "unsharded"], (2, 6), 2))
    assert_correct(grade(8, "q1", ["batch", None], ("batch", "UNSHARDED"), [2, 6], 2))


@pytest.mark.parametrize("answer, fragment, points", [
    ((("batch", "None"), ["batch", "unsharded"], (2, 6), 2), "the Python value None", 2),
    (((None, "batch"), ["batch", "unsharded"], (2, 6), 2), "wrong order", 2),
    ((("batch", None), ["batch", None], (2, 6), 2), "DTensor has no None", 2),
    ((("batch", None), ["batch", "unsharded"], (8, 6), 2), "divide each split array axis", 2),
    ((("batch", None), ["batch", "unsharded"], (2, 6), 1), "Count again", 2),
    (((None, None), ["unsharded", "unsharded"], (8, 6), 8), "one entry per array axis", 0),
])
def test_ch8_q1_wrong_answers(answer, fragment, points):
    assert_hint(grade(8, "q1", *answer), fragment, points=points)


def test_ch8_q1_graded_mode_keeps_the_answer_back():
    result = exercises(8, mode="graded").q1.evaluate((None, "batch"), ["x"], (8, 6), 2)
    assert result.points == 0 and "('batch', None)" not in result.message and "(2, 6)" not in result.message


def test_ch8_q2_port(new_map):
    assert_correct(grade(8, "q2", new_map(RIGHT_MAP)))
    assert_correct(grade(8, "q2", new_map({"mlp3/d1/kernel": (None, "model"), "mlp3/d1/bias": ("model",),
                                           "mlp3/d2/kernel": ("model", None)})))


@pytest.mark.parametrize("entries, fragment, points", [
    ({"d1.kernel": (None, "model"), "d1.bias": ("model",), "d2.kernel": ("model", None)}, "tf_keras' form", 0),
    ({"d1/kernel": (None, "model"), "d1/bias": ("model",), "d2/kernel": ("model", None)}, "re.fullmatch", 0),
    ({**RIGHT_MAP, ".*kernel": ("model", None)}, "several keys", 0),
    ({".*/d1/kernel": ("model", None), ".*/d1/bias": ("model",), ".*/d2/kernel": (None, "model")}, "another layout", 1),
    ({".*d1/kernel": (None, "model"), ".*d1/bias": ("model",), ".*d2/kernel": ("model", None), "mlp3/d3": (None,)},
     "mean different things", 2),
    ({}, "no keys yet", 0),
])
def test_ch8_q2_wrong_maps(new_map, entries, fragment, points):
    assert_hint(grade(8, "q2", new_map(entries)), fragment, points=points)


def test_ch8_q2_not_a_layout_map():
    assert_hint(grade(8, "q2", {"a": 1}), "must be a keras.distribution.LayoutMap")


def test_ch8_q3_bytes():
    total = 4 * (784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10)
    per_device = 4 * (784 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10)
    assert_correct(grade(8, "q3", per_device, total))
    assert_hint(grade(8, "q3", per_device, total // 4), "a float32 takes 4 bytes", points=1)
    assert_hint(grade(8, "q3", total // 2, total), "replicated ones", points=1)
    assert_hint(grade(8, "q3", total // 8, total), "'batch' splits the data", points=1)
    graded = exercises(8, mode="graded").q3.evaluate(1, 2)
    assert graded.points == 0 and str(per_device) not in graded.message
