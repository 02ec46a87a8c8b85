"""Chapter 7's checkers: the right answers, typical wrong answers, and truths checked against the real libraries."""
import numpy as np
import pytest

from course_utils.checkers import ch7, exercises
from helpers import assert_correct, assert_hint, grade

FOUND = {"kernel, tf_keras": ".*dense_1/kernel", "kernel, keras_3_13": "ValueError",
         "kernel, keras_3_15": ".*dense_1/kernel", "bias, tf_keras": "replicated",
         "bias, keras_3_13": "dense_1", "bias, keras_3_15": "replicated"}


def restored_variable(mesh_dims, specs, value):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from course_utils import make_mesh, pack_batch

    return dtensor.DVariable(pack_batch(tf.constant(value), dtensor.Layout(specs, make_mesh(mesh_dims))))


def test_ch7_q1_restore_on_another_mesh(cpus8):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from course_utils import make_mesh, pack_batch

    U = dtensor.UNSHARDED
    saved = dtensor.DVariable(pack_batch(ch7.saved_value(), dtensor.Layout([U, "model"], make_mesh([("batch", 4), ("model", 2)]))))
    zeros = np.zeros(ch7.SAVED_SHAPE, "float32")
    restored = restored_variable([("rows", 8)], ["rows", U], zeros)
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        path = tf.train.Checkpoint(w=saved).save(f"{folder}/w")
        tf.train.Checkpoint(w=restored).restore(path).assert_consumed()
    assert_correct(grade(7, "q1", restored))
    assert_hint(grade(7, "q1", restored_variable([("rows", 8)], ["rows", U], zeros)), "still holds zeros", points=2)
    assert_hint(grade(7, "q1", restored_variable([("rows", 8)], [U, U], ch7.saved_value())), "is replicated", points=2)
    assert_hint(grade(7, "q1", restored_variable([("rows", 8)], [U, "rows"], ch7.saved_value())), "the rows", points=2)
    assert_hint(grade(7, "q1", restored_variable([("batch", 4), ("model", 2)], ["batch", U], ch7.saved_value())),
                "asks for rows=8", points=1)  # the layout names 'batch', not 'rows'
    assert_hint(grade(7, "q1", restored_variable([("rows", 8)], ["rows", U], ch7.saved_value() + 1)), "other values",
                points=2)
    assert_hint(grade(7, "q1", ch7.saved_value()), "should be a dtensor.DVariable")


def test_ch7_q2_truth_is_what_tf_keras_and_keras_3_do(mesh42, keras2):
    """tf_keras' and this Keras 3's LayoutMap find what the checker expects (Keras 3.13's re.search: chapter 7 shows it on Colab's set)."""
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    layouts = [dtensor.Layout([U, "model"], mesh42), dtensor.Layout(["model", U], mesh42)]
    tf_keras_map = keras2.dtensor.experimental.LayoutMap(mesh42)
    for key, layout in zip(ch7.KEYS, layouts):
        tf_keras_map[key] = layout
    for part, path in ch7.PATHS.items():
        found = tf_keras_map[path]
        name = "replicated" if found is None else ch7.KEYS[layouts.index(found)]
        assert name == FOUND[f"{part}, tf_keras"] == ch7.layout_map_lookup("tf_keras", path)

    import keras
    from keras import distribution as kd

    if not keras.__version__.startswith("3.15"):
        pytest.skip(f"this test reads Keras 3.15's rule; Keras {keras.__version__} is installed")
    mesh = kd.DeviceMesh((4, 2), ("batch", "model"), devices=kd.list_devices()[:8])
    keras_map = kd.LayoutMap(mesh)
    keras_map[ch7.KEYS[0]], keras_map[ch7.KEYS[1]] = (None, "model"), ("model", None)
    for part, path in ch7.PATHS.items():
        try:
            found = keras_map[path]
            name = "replicated" if found is None else ch7.KEYS[0 if tuple(found.axes) == (None, "model") else 1]
        except ValueError:
            name = "ValueError"
        assert name == FOUND[f"{part}, keras_3_15"] == ch7.layout_map_lookup("keras_3_15", path)
    assert {k: ch7.layout_map_lookup(k.split(", ")[1], ch7.PATHS[k.split(", ")[0]]) for k in FOUND} == FOUND


def test_ch7_q2_layout_map_rules():
    assert_correct(grade(7, "q2", FOUND))
    assert_correct(grade(7, "q2", dict(FOUND, **{"kernel, keras_3_13": ValueError})))
    assert_hint(grade(7, "q2", dict(FOUND, **{"kernel, tf_keras": "dense_1"})), "re.match", "take the first", points=5)
    assert_hint(grade(7, "q2", dict(FOUND, **{"kernel, keras_3_13": ".*dense_1/kernel"})), "count the matches", points=5)
    assert_hint(grade(7, "q2", dict(FOUND, **{"bias, keras_3_15": "dense_1"})), "re.fullmatch", points=5)
    assert_hint(grade(7, "q2", dict(FOUND, **{"bias, tf_keras": "mlp/dense_1/bias"})), "answer one of", points=5)
    assert_hint(grade(7, "q2", dict(FOUND, **{"bias, tf_keras": None})), "not answered yet", points=5)


def test_ch7_q3_name_the_parallelism():
    kinds = {"a": "tensor", "b": "pipeline", "c": "sequence", "d": "expert"}
    assert_correct(grade(7, "q3", kinds, {"b", "d"}))
    assert_correct(grade(7, "q3", {"a": "Model parallelism", "b": "pipeline-parallel", "c": "context", "d": "MoE"}, "b, d"))
    assert_hint(grade(7, "q3", dict(kinds, a="data"), {"b", "d"}), "read again", points=4)
    assert_hint(grade(7, "q3", dict(kinds, c="spatial"), {"b", "d"}), "read again", points=4)
    assert_hint(grade(7, "q3", dict(kinds, d=3), {"b", "d"}), "name one kind", points=4)
    assert_hint(grade(7, "q3", kinds, {"b"}), "another sends tokens", points=4)
    assert_hint(grade(7, "q3", kinds, {"a", "b", "d"}), "IS a layout", points=4)
    assert_hint(grade(7, "q3", kinds, 7), "give a set of letters", points=4)


def test_ch7_q4_pipeline_bubble():
    assert ch7.bubble(4, 12) == 0.2 and ch7.fewest_micro_batches(8, 0.1) == 63
    assert_correct(grade(7, "q4", 0.2, 63))
    assert_hint(grade(7, "q4", 0.25, 63), "not m", points=1)
    assert_hint(grade(7, "q4", 20, 63), "not a percentage", points=1)
    assert_hint(grade(7, "q4", 0.2, 62), "one short", points=1)
    assert_hint(grade(7, "q4", 0.2, 100), "fewer would too", points=1)
    assert_hint(grade(7, "q4", 0.2, "sixty"), "smallest whole m", points=1)


def test_ch7_graded_feedback_keeps_answers_back():
    result = exercises(7, mode="graded").q4.evaluate(0.3, 10)
    assert result.points == 0 and "63" not in result.message and "0.2" not in result.message
