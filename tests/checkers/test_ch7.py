"""Chapter 7's checkers: the right answers, typical wrong answers, and truths checked against the real libraries."""
import numpy as np
import pytest

from course_utils.checkers import ch7, exercises
from helpers import assert_correct, assert_hint, grade, holding, sandbox_copy, stripped_exercise

FOUND = {"kernel, tf_keras": ".*dense_1/kernel", "kernel, keras_3_13": "ValueError",
         "kernel, keras_3_15": ".*dense_1/kernel", "bias, tf_keras": "replicated",
         "bias, keras_3_13": "dense_1", "bias, keras_3_15": "replicated"}


def packed_variable(mesh_dims, specs, value):
    """A DVariable built from ``value`` directly: no checkpoint is restored into it."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from course_utils import make_mesh, pack_batch

    return dtensor.DVariable(pack_batch(tf.constant(value), dtensor.Layout(specs, make_mesh(mesh_dims))))


@pytest.fixture(scope="module")
def checkpoint_path(cpus8, tmp_path_factory):
    """Exercise 1's checkpoint: saved_value() on batch=4 x model=2, split by columns, saved as w."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    saved = packed_variable([("batch", 4), ("model", 2)], [dtensor.UNSHARDED, "model"], ch7.saved_value())
    return tf.train.Checkpoint(w=saved).save(str(tmp_path_factory.mktemp("ch7") / "w"))


def restored_from(path, mesh_dims, specs):
    """A zero DVariable in the given layout, with the checkpoint restored into it (as the exercise asks)."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from course_utils import make_mesh

    zeros = dtensor.call_with_layout(tf.zeros, dtensor.Layout(specs, make_mesh(mesh_dims)), shape=list(ch7.SAVED_SHAPE))
    variable = dtensor.DVariable(zeros)
    tf.train.Checkpoint(w=variable).restore(path).assert_consumed()
    return variable


def test_ch7_q1_restore_on_another_mesh(checkpoint_path):
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    restored = restored_from(checkpoint_path, [("rows", 8)], ["rows", U])
    assert_correct(grade(7, "q1", restored))
    assert "✗" not in grade(7, "q1", restored).message
    assert_hint(grade(7, "q1", restored_from(checkpoint_path, [("rows", 8)], [U, U])), "is replicated", points=2)
    assert_hint(grade(7, "q1", restored_from(checkpoint_path, [("rows", 8)], [U, "rows"])), "the rows", points=2)
    assert_hint(grade(7, "q1", restored_from(checkpoint_path, [("batch", 4), ("model", 2)], ["batch", U])),
                "asks for rows=8", points=1)  # the layout names 'batch', not 'rows'
    zeros = np.zeros(ch7.SAVED_SHAPE, "float32")
    assert_hint(grade(7, "q1", packed_variable([("rows", 8)], ["rows", U], zeros)), "still holds zeros", points=2)
    assert_hint(grade(7, "q1", packed_variable([("rows", 8)], ["rows", U], ch7.saved_value() + 1)), "other values",
                points=2)
    assert_hint(grade(7, "q1", ch7.saved_value()), "should be a dtensor.DVariable")


def test_ch7_q1_the_restore_itself_is_checked(checkpoint_path):
    """The set-up cell imports saved_value(): packing it again is not restoring the checkpoint."""
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    packed = packed_variable([("rows", 8)], ["rows", U], ch7.saved_value())
    assert not ch7.was_restored(packed) and ch7.was_restored(restored_from(checkpoint_path, [("rows", 8)], ["rows", U]))
    assert_hint(grade(7, "q1", packed), "no checkpoint was restored into it", points=2)
    as_float64 = packed_variable([("rows", 8)], ["rows", U], ch7.saved_value().astype("float64"))
    assert_hint(grade(7, "q1", as_float64), "restored is float64", points=2)
    assert not ch7.was_restored(object()) and not ch7.was_restored(ch7.saved_value())


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
        assert name == FOUND[f"{part}, tf_keras"] == ch7._reference_layout_map_lookup("tf_keras", path)

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
        assert name == FOUND[f"{part}, keras_3_15"] == ch7._reference_layout_map_lookup("keras_3_15", path)
    assert {k: ch7._reference_layout_map_lookup(k.split(", ")[1], ch7.PATHS[k.split(", ")[0]]) for k in FOUND} == FOUND


def test_ch7_q2_layout_map_rules():
    assert_correct(grade(7, "q2", FOUND))
    assert_correct(grade(7, "q2", dict(FOUND, **{"kernel, keras_3_13": ValueError})))
    assert_correct(grade(7, "q2", dict(FOUND, **{"kernel, keras_3_13": ValueError("matches several keys")})))
    for no_key in (None, (), [], "none", "no key"):  # "no key" answers: replicated
        assert_correct(grade(7, "q2", dict(FOUND, **{"bias, tf_keras": no_key, "bias, keras_3_15": no_key})))
    assert_hint(grade(7, "q2", dict(FOUND, **{"bias, keras_3_13": None})), "re.search", points=5)  # an answer, wrong
    assert_hint(grade(7, "q2", dict(FOUND, **{"bias, tf_keras": ...})), "bias, tf_keras: not answered yet", points=5)
    assert grade(7, "q2", {key: ... for key in FOUND}).status == "unanswered"
    assert grade(7, "q2", {key: None for key in FOUND}).points == 2  # None is "replicated", right twice
    assert_hint(grade(7, "q2", dict(FOUND, **{"kernel, tf_keras": "dense_1"})), "re.match", "take the first", points=5)
    assert_hint(grade(7, "q2", dict(FOUND, **{"kernel, keras_3_13": ".*dense_1/kernel"})), "count the matches", points=5)
    assert_hint(grade(7, "q2", dict(FOUND, **{"bias, keras_3_15": "dense_1"})), "re.fullmatch", points=5)
    assert_hint(grade(7, "q2", dict(FOUND, **{"bias, tf_keras": "mlp/dense_1/bias"})), "answer one of", points=5)


def test_ch7_q3_truth_a_relayout_between_axes_runs_an_all_to_all(mesh42):
    """Why d (GShard's dispatch) is within layouts: DTensor's relayout moves a split from one axis to another."""
    from tensorflow.experimental import dtensor

    from course_utils import collectives_run_by, pack_batch

    U = dtensor.UNSHARDED
    by_token = pack_batch(np.arange(64, dtype="float32").reshape(8, 8), dtensor.Layout(["model", U], mesh42))
    runs = collectives_run_by(lambda: dtensor.relayout(by_token, dtensor.Layout([U, "model"], mesh42)))
    assert [(run.kind, run.axes) for run in runs] == [("all-to-all", ("model",))]
    assert ch7._reference_beyond_layouts() == {"b", "c"}


def test_ch7_q3_name_the_parallelism():
    kinds = {"a": "tensor", "b": "pipeline", "c": "sequence", "d": "expert"}
    assert_correct(grade(7, "q3", kinds, {"b", "c"}))
    assert_correct(grade(7, "q3", {"a": "Model parallelism", "b": "pipeline-parallel", "c": "context", "d": "MoE"},
                         "b, c"))
    assert_correct(grade(7, "q3", dict(kinds, c="ring attention"), ["c", "B"]))
    assert "✗" not in grade(7, "q3", kinds, {"b", "c"}).message
    assert_hint(grade(7, "q3", dict(kinds, a="data"), {"b", "c"}), "read again", points=4)
    assert_hint(grade(7, "q3", dict(kinds, c="spatial"), {"b", "c"}), "read again", points=4)
    assert_hint(grade(7, "q3", dict(kinds, d=3), {"b", "c"}), "name one kind", points=4)
    assert_hint(grade(7, "q3", kinds, {"b", "d"}), "GShard's way", "relayout runs itself", "is missing", points=4)
    assert_hint(grade(7, "q3", kinds, {"b", "c", "d"}), "GShard's way", points=4)
    assert_hint(grade(7, "q3", kinds, {"b"}), "order in time", "is missing", points=4)
    assert_hint(grade(7, "q3", kinds, {"a", "b", "c"}), "IS a layout", points=4)
    assert_hint(grade(7, "q3", kinds, {"b", "c", "e"}), "not among the cases", points=4)
    assert_hint(grade(7, "q3", kinds, 7), "give a set of letters", points=4)


def test_ch7_q4_pipeline_bubble():
    import tensorflow as tf
    from fractions import Fraction

    assert ch7._reference_bubble(4, 12) == 0.2 and ch7._reference_fewest_micro_batches(8, 0.1) == 63
    assert_correct(grade(7, "q4", 0.2, 63))
    for idle in (np.float32(0.2), np.array(0.2), tf.constant(0.2), Fraction(1, 5), 3 / 15, "0.2"):
        assert_correct(grade(7, "q4", idle, np.int64(63)))  # anything float() takes
    assert_correct(grade(7, "q4", 0.2, 63.0))
    for quarter in (3 / 12, 4 / 16):  # (d - 1) / m and d / (m + d): the same 0.25, the same diagnosis
        result = grade(7, "q4", quarter, 63)
        assert_hint(result, "0.25 counts the slots of the step wrong", points=1)
        assert "not m" not in result.message
    assert_hint(grade(7, "q4", 20, 63), "not a percentage", points=1)
    assert_hint(grade(7, "q4", "a fifth", 63), "give a number", points=1)
    assert_hint(grade(7, "q4", 0.5, 63), "count the slots", points=1)
    assert_hint(grade(7, "q4", 0.2, 62), "idles 10.1% of the step", "more than 10 %", points=1)
    assert_hint(grade(7, "q4", 0.2, 0), "positive number", points=1)
    assert_hint(grade(7, "q4", 0.2, 100), "fewer would too", points=1)
    assert_hint(grade(7, "q4", 0.2, 10), "more than 10 %", points=1)
    assert_hint(grade(7, "q4", 0.2, "sixty"), "whole number", points=1)


def test_ch7_graded_feedback_keeps_answers_back():
    result = exercises(7, mode="graded").q4.evaluate(0.3, 10)
    assert result.points == 0 and "63" not in result.message and "0.2" not in result.message
    result = exercises(7, mode="graded").q3.evaluate({"a": "tensor", "b": "pipeline", "c": "sequence", "d": "expert"},
                                                     {"b", "d"})
    assert result.points == 4 and "They are b" not in result.message


def test_ch7_first_wrong_check_holds_the_answer_back(capsys):
    from course_utils.checkers import chapter_definition

    fresh = chapter_definition(7).bind()
    assert all(exercise.teach_first for exercise in fresh)
    fresh.q4.check(0.3, 10)
    first = capsys.readouterr().out
    assert "idle = " not in first and "micro_batches = 63" not in first and "a second wrong check" in first
    fresh.q4.check(0.3, 10)
    assert "micro_batches = 63" in capsys.readouterr().out


def test_ch7_q1_is_correct_with_another_seed(checkpoint_path):
    """The checkpoint is the notebook's, not drawn from the seed: a grader's seed changes nothing."""
    from tensorflow.experimental import dtensor

    ex = exercises(7).q1
    restored = restored_from(checkpoint_path, [("rows", 8)], ["rows", dtensor.UNSHARDED])
    assert_correct(ex.judge_export(ex.export(restored, seed=12345), seed=12345))


@pytest.mark.parametrize("name, cls", [("q1", "RestoreOnAnotherMesh")])
def test_ch7_stripped_copy_still_collects(checkpoint_path, name, cls):
    from tensorflow.experimental import dtensor

    module, _ = sandbox_copy("ch7")
    assert "judge" not in vars(getattr(module, cls)) and "restore_uid" in vars(module)
    stripped = stripped_exercise("ch7", cls, 7, name)
    answer = restored_from(checkpoint_path, [("rows", 8)], ["rows", dtensor.UNSHARDED])
    assert_correct(exercises(7).q1.judge_export(stripped.export(answer, seed=7), seed=7))


# --- the graded sandbox's copy of this module states no answer ------------------------------------

def test_ch7_the_sandbox_copy_states_no_answer():
    module, undefined = sandbox_copy("ch7")
    assert not undefined
    for gone in ("layout_map_lookup", "DESCRIPTIONS", "BEYOND_LAYOUTS", "bubble", "fewest_micro_batches",
                 "_reference_layout_map_lookup", "_reference_descriptions", "_reference_beyond_layouts",
                 "_reference_bubble", "_reference_fewest_micro_batches"):
        assert not hasattr(module, gone), gone
    found = {f"{part}, {rule}": ch7._reference_layout_map_lookup(rule, path)
             for part, path in ch7.PATHS.items() for rule in ch7.RULES}
    for answer in (found, ch7._reference_descriptions(), ch7._reference_beyond_layouts(),
                   ch7._reference_bubble(4, 12), ch7._reference_fewest_micro_batches(8, 0.1)):
        assert not holding(module, answer), answer
    assert module.CASES == tuple(ch7._reference_descriptions())
    for cls in module.CHAPTER.exercises:
        assert not {"grade", "judge"} & set(vars(cls)) and cls.hints, cls.__name__
