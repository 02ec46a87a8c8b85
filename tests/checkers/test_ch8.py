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


REPLICATED_KEYS = {".*/d2/bias": (None,), ".*/d3/kernel": (None, None), ".*/d3/bias": (None,)}


@pytest.mark.parametrize("entries", [
    RIGHT_MAP,
    {"mlp3/d1/kernel": (None, "model"), "mlp3/d1/bias": ("model",), "mlp3/d2/kernel": ("model", None)},
    {".+/d1/kernel": (None, "model"), ".+/d1/bias": ("model",), ".+/d2/kernel": ("model", None)},
    {**RIGHT_MAP, **REPLICATED_KEYS},  # explicit replicated keys: the same as no key
    {**RIGHT_MAP, ".*/d3/kernel": (None,)},  # JAX leaves the axes a spec does not reach unsplit
    {".*/d1/kernel": (None, "model"), ".*/d1/bias": ("model",), ".*/d2/kernel": ("model",)},
])
def test_ch8_q2_port(new_map, entries):
    result = grade(8, "q2", new_map(entries))
    assert_correct(result)
    assert "✗" not in result.message and "tf_keras' form" not in result.message


def test_ch8_q2_explicit_replicated_axes_are_no_key_to_jax(jax8):
    """Why (None,) and (None, None) are accepted: JAX places such a weight exactly as a weight without a key."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from course_utils.checkers import ch8

    mesh = Mesh(np.array(jax8.devices()[:8]).reshape(4, 2), ("batch", "model"))
    whole = NamedSharding(mesh, PartitionSpec())
    for spec, ndim in (((None,), 1), ((None,), 2), ((None, None), 2)):
        assert NamedSharding(mesh, PartitionSpec(*spec)).is_equivalent_to(whole, ndim), spec
    rows_split = NamedSharding(mesh, PartitionSpec("model", None))
    assert NamedSharding(mesh, PartitionSpec("model")).is_equivalent_to(rows_split, 2)
    assert ch8._as_layout((None, None), 2) is None and ch8._as_layout(("model",), 2) == ("model", None)
    assert ch8._as_layout((None, None), 1) == (None, None)  # more axes than the weight: Keras fails to place it


@pytest.mark.parametrize("entries, fragment, points", [
    ({"d1.kernel": (None, "model"), "d1.bias": ("model",), "d2.kernel": ("model", None)}, "tf_keras' form", 0),
    ({"d1/kernel": (None, "model"), "d1/bias": ("model",), "d2/kernel": ("model", None)}, "re.fullmatch", 0),
    ({**RIGHT_MAP, ".*kernel": ("model", None)}, "several keys", 0),
    ({".*/d1/kernel": ("model", None), ".*/d1/bias": ("model",), ".*/d2/kernel": (None, "model")}, "another layout", 1),
    ({".*d1/kernel": (None, "model"), ".*d1/bias": ("model",), ".*d2/kernel": ("model", None), "mlp3/d3": ("model",)},
     "mean different things", 2),  # re.match and re.search split d3 by its key; re.fullmatch finds no key for it
    ({}, "no keys yet", 0),
    ({**RIGHT_MAP, ".*/d3/bias": (None, None)}, "more axes than they have", 1),
    ({**RIGHT_MAP, ".*/d1/kernel": (None, None)}, "another layout", 1),  # replicated where the map splits
])
def test_ch8_q2_wrong_maps(new_map, entries, fragment, points):
    assert_hint(grade(8, "q2", new_map(entries)), fragment, points=points)


def test_ch8_q2_not_a_layout_map():
    assert_hint(grade(8, "q2", {"a": 1}), "must be a keras.distribution.LayoutMap")


def test_ch8_q2_tf_keras_form_is_named_only_for_tf_keras_keys():
    from course_utils.checkers import ch8

    assert [ch8._in_tf_keras_form(key) for key in ("d1.kernel", "d2.bias", ".+/d1/kernel", ".*d1.kernel",
                                                   "mlp3/d1/kernel", "d1/kernel", "(")] == [
        True, True, False, False, False, False, False]


def test_ch8_first_wrong_check_holds_the_answer_back(capsys, new_map):
    from course_utils.checkers import chapter_definition

    fresh = chapter_definition(8).bind()
    assert all(exercise.teach_first for exercise in fresh)
    swapped = {".*/d1/kernel": ("model", None), ".*/d1/bias": ("model",), ".*/d2/kernel": (None, "model")}
    fresh.q2.check(new_map(swapped))
    first = capsys.readouterr().out
    assert "another layout" in first and "'.*/d1/kernel': (None, 'model')" not in first
    fresh.q2.check(new_map(swapped))
    assert "'.*/d1/kernel': (None, 'model')" in capsys.readouterr().out


def test_ch8_q3_bytes():
    total = 4 * (784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10)
    per_device = 4 * (784 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10)
    assert_correct(grade(8, "q3", per_device, total))
    assert_hint(grade(8, "q3", per_device, total // 4), "a float32 takes 4 bytes", points=1)
    assert_hint(grade(8, "q3", total // 2, total), "replicated ones", points=1)
    assert_hint(grade(8, "q3", total // 8, total), "'batch' splits the data", points=1)
    graded = exercises(8, mode="graded").q3.evaluate(1, 2)
    assert graded.points == 0 and str(per_device) not in graded.message
