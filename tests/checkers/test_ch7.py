"""Chapter 7's checkers: the right answers, typical wrong answers, and truths checked against the real libraries."""
import numpy as np
import pytest

from course_utils.checkers import ch7, ch7_bubble, ch7_lookup, ch7_restore, exercises
from helpers import assert_correct, assert_hint, grade, holding, sandbox_copy, stripped_exercise

FOUND = {"kernel, tf_keras": ".*dense_1/kernel", "kernel, keras_3_13": "ValueError",
         "kernel, keras_3_15": ".*dense_1/kernel", "bias, tf_keras": "replicated",
         "bias, keras_3_13": "dense_1", "bias, keras_3_15": "replicated"}


XY = [("x", 2), ("y", 4)]


def packed_variable(mesh_dims, specs, value):
    """A DVariable built from ``value`` directly: no checkpoint is restored into it."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from course_utils import make_mesh, pack_batch

    return dtensor.DVariable(pack_batch(tf.constant(value), dtensor.Layout(specs, make_mesh(mesh_dims))))


@pytest.fixture(scope="module")
def checkpoint_path(cpus8, tmp_path_factory):
    """The exercise notebook's checkpoint: saved_value() on batch=4 x model=2, split by columns, saved as w."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    saved = packed_variable([("batch", 4), ("model", 2)], [dtensor.UNSHARDED, "model"], ch7_restore.saved_value())
    return tf.train.Checkpoint(w=saved).save(str(tmp_path_factory.mktemp("ch7") / "w"))


def restorer(mesh_dims=XY, specs=("y", "x"), name="w", dtype="float32"):
    """A learner's restore_blocks: a zero DVariable in the given layout, with the checkpoint restored into it."""
    def restore_blocks(path):
        import tensorflow as tf
        from tensorflow.experimental import dtensor

        from course_utils import make_mesh

        layout = dtensor.Layout(list(specs), make_mesh(mesh_dims))
        variable = dtensor.DVariable(dtensor.call_with_layout(tf.zeros, layout, shape=list(ch7_restore.SAVED_SHAPE),
                                                              dtype=dtype))
        tf.train.Checkpoint(**{name: variable}).restore(path)
        return variable
    return restore_blocks


def test_ch7_q1_restore_on_another_mesh(checkpoint_path):
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    assert_correct(grade(7, "q1", restorer()))
    assert "✗" not in grade(7, "q1", restorer()).message
    assert_correct(grade(7, "q1", restorer([("y", 4), ("x", 2)])))  # the same axes, the other order: the same blocks
    assert_hint(grade(7, "q1", restorer(specs=(U, U))), "is replicated", points=2)
    assert_hint(grade(7, "q1", restorer(specs=("x", "y"))), "whatever the order of the mesh's axes", points=2)
    assert_hint(grade(7, "q1", restorer(specs=("y", U))), "split only one tensor axis", points=2)
    assert_hint(grade(7, "q1", restorer([("rows", 8)], ("rows", U))), "the chapter's mesh rows=8", points=1)
    assert_hint(grade(7, "q1", restorer([("batch", 4), ("model", 2)], ("batch", U))), "asks for x=2 x y=4",
                points=1)
    assert_hint(grade(7, "q1", restorer(name="weights")), "still holds zeros", "under the name", points=2)
    # restorer(dtype="float64") fails inside restore(), and DTensor then refuses every operation in this process:
    # its feedback is checked on the error's text (test_ch7_q1_errors_of_a_failed_restore)
    ones = np.ones(ch7_restore.SAVED_SHAPE, "float32")
    assert_hint(grade(7, "q1", lambda path: packed_variable(XY, ["y", "x"], ones)),
                "other values than the weight saved at checkpoint_path", points=2)
    assert_hint(grade(7, "q1", lambda path: ch7_restore.saved_value()), "should return a dtensor.DVariable")
    assert_hint(grade(7, "q1", lambda path: 1 / 0), "restore_blocks raised ZeroDivisionError", "of its own")
    assert_hint(grade(7, "q1", restorer()(checkpoint_path)), "should be a function")  # the variable, not the function
    unanswered = grade(7, "q1", None)
    assert unanswered.status == "unanswered"


def test_ch7_q1_the_restore_itself_is_checked(checkpoint_path, tmp_path):
    """The set-up cell imports saved_value(): packing it again, restoring the notebook's checkpoint, or reading the
    checker's checkpoint and packing it, is not restoring the checkpoint the function is given."""
    import tensorflow as tf

    assert ch7_restore.was_restored(restorer()(checkpoint_path))
    assert not ch7_restore.was_restored(packed_variable(XY, ["y", "x"], ch7_restore.saved_value()))
    assert not ch7_restore.was_restored(object()) and not ch7_restore.was_restored(ch7_restore.saved_value())

    def own_checkpoint(path):  # saved_value() packed, saved by the learner, restored from the learner's own file
        mine = tf.train.Checkpoint(w=packed_variable(XY, ["y", "x"], ch7_restore.saved_value())).save(
            str(tmp_path / "mine"))
        return restorer()(mine)

    result = grade(7, "q1", own_checkpoint)
    assert_hint(result, "the notebook's weight (saved_value())", "checkpoint of its own", points=2)
    assert "restored from the checkpoint" not in result.message
    assert_hint(grade(7, "q1", lambda path: restorer()(checkpoint_path)), "the notebook's weight", points=2)

    def read_and_pack(path):
        return packed_variable(XY, ["y", "x"], tf.train.load_variable(path, "w/.ATTRIBUTES/VARIABLE_VALUE"))

    assert_hint(grade(7, "q1", read_and_pack), "no checkpoint was restored into it", points=2)


def test_ch7_q2_a_mixed_up_rule_is_named_without_the_answer():
    """The learner's review (issue 37): an answer another function of re, or the other way of treating several
    matches, would give is told so on the first try; the first try names no right key."""
    ex = exercises(7).q2
    first = lambda **wrong: ex._evaluate((dict(FOUND, **wrong),), {}, first_try=True).message  # noqa: E731
    searched = first(**{"kernel, tf_keras": "dense_1", "bias, tf_keras": "dense_1"})  # re.match read as re.search
    assert "That is what re.search (anywhere in the path) would find; tf_keras uses re.match, which matches from " \
           "the START of the path only." in searched
    first_wins = first(**{"kernel, keras_3_13": "dense_1"})  # Keras 3 taking the first key, as tf_keras does
    assert "That is what tf_keras's rule would give" in first_wins and "keras_3_13 treats several keys" in first_wins
    assert "re.search (anywhere" in first(**{"kernel, keras_3_15": "ValueError", "bias, keras_3_15": "dense_1"})
    assert "That is what re.match (from the START" in first(**{"kernel, keras_3_13": ".*dense_1/kernel"})
    assert "re.match (from the START" in first(**{"bias, keras_3_13": "replicated"})
    plain = first(**{"kernel, tf_keras": "ValueError"})  # one key matches from the start: no mix-up gives it
    assert "That is what" not in plain and "does not raise" not in plain
    assert ".*dense_1/kernel" not in searched and "ValueError" not in first_wins  # the right answers stay unsaid


def test_ch7_q1_errors_of_a_failed_restore():
    ex = exercises(7).q1
    dtype = ex.judge({"kind": "error", "error": "InvalidArgumentError: 2 root error(s) found. (0) INVALID_ARGUMENT: "
                      "tensor_name = w/.ATTRIBUTES/VARIABLE_VALUE; expected dtype double does not equal original "
                      "dtype float"})
    assert "dtype is not the saved weight's (float32)" in dtype.render() and dtype.points == 0
    cancelled = ex.judge({"kind": "error", "error": "CancelledError: Function was cancelled before it was started"})
    assert "restart the kernel" in cancelled.render()
    packed_float64 = packed_variable(XY, ["y", "x"], ch7_restore.saved_value().astype("float64"))
    assert_hint(grade(7, "q1", lambda path: packed_float64), "is float64", points=2)


def test_ch7_q1_first_wrong_check_holds_the_layout_back(checkpoint_path):
    first = exercises(7).q1._evaluate((restorer(specs=("x", "y")),), {}, first_try=True).message
    assert "['y', 'x']" not in first, first
    assert "['y', 'x']" in grade(7, "q1", restorer(specs=("x", "y"))).message


def test_ch7_q2_truth_is_what_tf_keras_and_keras_3_do(mesh42, keras2):
    """tf_keras' and this Keras 3's LayoutMap find what the checker expects (Keras 3.13's re.search: chapter 7 shows it on Colab's set)."""
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    layouts = [dtensor.Layout([U, "model"], mesh42), dtensor.Layout(["model", U], mesh42)]
    tf_keras_map = keras2.dtensor.experimental.LayoutMap(mesh42)
    for key, layout in zip(ch7_lookup.KEYS, layouts):
        tf_keras_map[key] = layout
    for part, path in ch7_lookup.PATHS.items():
        found = tf_keras_map[path]
        name = "replicated" if found is None else ch7_lookup.KEYS[layouts.index(found)]
        assert name == FOUND[f"{part}, tf_keras"] == ch7_lookup._reference_layout_map_lookup("tf_keras", path)

    import keras
    from keras import distribution as kd

    if not keras.__version__.startswith("3.15"):
        pytest.skip(f"this test reads Keras 3.15's rule; Keras {keras.__version__} is installed")
    mesh = kd.DeviceMesh((4, 2), ("batch", "model"), devices=kd.list_devices()[:8])
    keras_map = kd.LayoutMap(mesh)
    keras_map[ch7_lookup.KEYS[0]], keras_map[ch7_lookup.KEYS[1]] = (None, "model"), ("model", None)
    for part, path in ch7_lookup.PATHS.items():
        try:
            found = keras_map[path]
            name = "replicated" if found is None else ch7_lookup.KEYS[0 if tuple(found.axes) == (None, "model") else 1]
        except ValueError:
            name = "ValueError"
        assert name == FOUND[f"{part}, keras_3_15"] == ch7_lookup._reference_layout_map_lookup("keras_3_15", path)
    assert {k: ch7_lookup._reference_layout_map_lookup(k.split(", ")[1], ch7_lookup.PATHS[k.split(", ")[0]])
            for k in FOUND} == FOUND


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

    assert ch7_bubble._reference_speedup(4, 12) == 3.2 and ch7_bubble._reference_fewest_micro_batches(8, 10) == 63
    assert ch7_bubble._reference_speedup(4, 12) == 4 * (1 - ch7_bubble._reference_bubble(4, 12))  # d * (1 - bubble)
    assert_correct(grade(7, "q4", 3.2, 63))
    for speedup in (np.float32(3.2), np.array(3.2), tf.constant(3.2), Fraction(16, 5), 48 / 15, "3.2", "3.2x",
                    " 3.2 × ", 4 * (1 - 3 / 15)):
        assert_correct(grade(7, "q4", speedup, np.int64(63)))  # anything float() takes, and 'times'
    assert_correct(grade(7, "q4", 3.2, 63.0))
    assert_correct(grade(7, "q4", 3.2, "63"))


def test_ch7_q4_wrong_answers_get_aimed_hints():
    assert_hint(grade(7, "q4", 4, 63), "no bubble", points=1)  # the ideal speed-up: copies the stage count
    assert_hint(grade(7, "q4", 15 / 48, 63), "FASTER", points=1)  # inverted
    for share in (0.8, 0.2):  # 1 - bubble(4, 12), bubble(4, 12): what copying the chapter's bubble() gives
        assert_hint(grade(7, "q4", share, 63), "a share of the step", points=1)
    assert_hint(grade(7, "q4", 48 / 16, 63), "one slot too long", points=1)  # m + d slots
    assert_hint(grade(7, "q4", "three", 63), "give a number", points=1)
    assert_hint(grade(7, "q4", 2.5, 63), "count the slots", points=1)
    assert_hint(grade(7, "q4", 3.2, 62), "idles 10.1% of the step", "more than 10%", points=1)
    assert "idles" not in grade(7, "q4", 4, 62).message  # the idle share only once the slots are counted right
    assert_hint(grade(7, "q4", 3.2, 0), "positive number", points=1)
    assert_hint(grade(7, "q4", 3.2, 100), "fewer would too", points=1)
    assert_hint(grade(7, "q4", 3.2, 10), "more than 10%", points=1)
    assert_hint(grade(7, "q4", 3.2, "sixty"), "whole number", points=1)


def test_ch7_more_right_forms():
    import re

    assert_correct(grade(7, "q2", dict(FOUND, **{"kernel, keras_3_13": "valueerror", "bias, keras_3_15": "Replicated",
                                                 "kernel, tf_keras": re.compile(".*dense_1/kernel"),
                                                 "bias, tf_keras": "no key: replicated"})))
    assert_correct(grade(7, "q2", dict(FOUND, **{"kernel, keras_3_13": " Raises ValueError ",
                                                 "bias, tf_keras": set()})))
    kinds = {"a": "TP", "b": "PP", "c": "CP", "d": "Expert parallelism (MoE)"}
    for beyond in ("b and c", "bc", ("b", "c"), frozenset("bc"), ["C", " b "], "{'b', 'c'}"):
        assert_correct(grade(7, "q3", kinds, beyond))
    assert_correct(grade(7, "q3", {"a": "Megatron-style tensor parallel", "b": "pipeline model parallelism",
                                   "c": "Sequence Parallelism", "d": "mixture-of-experts"}, {"b", "c"}))
    assert_correct(grade(7, "q3", {"a": "tensor model parallelism", "b": "GPipe", "c": "ring attention",
                                   "d": "experts"}, {"b", "c"}))
    assert_hint(grade(7, "q3", kinds, None), "is missing", points=4)  # None: no case beyond layouts, an answer
    assert_hint(grade(7, "q3", kinds, "none"), "is missing", points=4)


def test_ch7_q4_first_wrong_check_does_not_give_the_formula():
    ex = exercises(7).q4
    for answer in ((0.3, 10), (4, 10), (0.8, 62), (3.0, 62)):
        first = ex._evaluate(answer, {}, first_try=True).message
        assert "(8 - 1)" not in first and "63" not in first and "idles 1" not in first and "3.2" not in first, first
        assert "slots;" not in first, first
    assert "idles 10.1% of the step" in ex._evaluate((3.2, 62), {}, first_try=True).message  # slots counted right


def test_ch7_graded_feedback_keeps_answers_back():
    result = exercises(7, mode="graded").q4.evaluate(0.3, 10)
    assert result.points == 0 and "63" not in result.message and "3.2" not in result.message
    result = exercises(7, mode="graded").q3.evaluate({"a": "tensor", "b": "pipeline", "c": "sequence", "d": "expert"},
                                                     {"b", "d"})
    assert result.points == 4 and "They are b" not in result.message


def test_ch7_first_wrong_check_holds_the_answer_back(capsys):
    from course_utils.checkers import chapter_definition

    fresh = chapter_definition(7).bind()
    assert all(exercise.teach_first for exercise in fresh)
    fresh.q4.check(0.3, 10)
    first = capsys.readouterr().out
    assert "speedup = " not in first and "micro_batches = 63" not in first and "a second wrong check" in first
    fresh.q4.check(0.3, 10)
    assert "micro_batches = 63" in capsys.readouterr().out


def test_ch7_q1_is_correct_with_another_seed(checkpoint_path):
    """The checker saves its own checkpoint from the seed: right for any seed, and the data of one seed is wrong for
    another."""
    ex = exercises(7).q1
    assert_correct(ex.judge_export(ex.export(restorer(), seed=12345), seed=12345))
    result = ex.judge_export(ex.export(restorer(), seed=0), seed=12345)
    assert result.points < result.max_points and "other values" in result.message, result.message


@pytest.mark.parametrize("name, cls", [("q1", "RestoreOnAnotherMesh")])
def test_ch7_stripped_copy_still_collects(checkpoint_path, name, cls):
    module, _ = sandbox_copy("ch7_restore")
    assert "judge" not in vars(getattr(module, cls)) and "restore_uid" in vars(module)
    stripped = stripped_exercise("ch7_restore", cls, 7, name)
    assert_correct(exercises(7).q1.judge_export(stripped.export(restorer(), seed=7), seed=7))


# --- the graded sandbox's copy of this module states no answer ------------------------------------

@pytest.mark.parametrize("name", ["ch7", "ch7_restore", "ch7_lookup", "ch7_bubble"])
def test_ch7_the_sandbox_copy_states_no_answer(name):
    module, undefined = sandbox_copy(name)
    assert not undefined, undefined
    for gone in ("layout_map_lookup", "DESCRIPTIONS", "BEYOND_LAYOUTS", "bubble", "fewest_micro_batches",
                 "_reference_layout_map_lookup", "_reference_descriptions", "_reference_beyond_layouts",
                 "_reference_bubble", "_reference_speedup", "_reference_fewest_micro_batches"):
        assert not hasattr(module, gone), gone
    found = {f"{part}, {rule}": ch7_lookup._reference_layout_map_lookup(rule, path)
             for part, path in ch7_lookup.PATHS.items() for rule in ch7_lookup.RULES}
    for answer in (found, ch7._reference_descriptions(), ch7._reference_beyond_layouts(),
                   ch7_bubble._reference_speedup(4, 12), ch7_bubble._reference_fewest_micro_batches(8, 10)):
        assert not holding(module, answer), answer
    if name == "ch7":
        assert module.CASES == tuple(ch7._reference_descriptions())
    for cls in vars(module).values():  # this module's own exercises (the others are stripped in their own copies)
        if isinstance(cls, type) and cls.__module__ == module.__name__ and hasattr(cls, "hints"):
            assert not {"grade", "judge"} & set(vars(cls)) and cls.hints, cls.__name__


# --- exercise 2 is a prediction: re and a LayoutMap print its answer -------------------------------

def test_ch7_q2_counts_only_before_re_is_imported(monkeypatch):
    """Issue 37: a check made while the notebook's namespace holds re (or a LayoutMap class) scores 0 and says why;
    the exercise notebook imports re only in the cell after the check."""
    import re
    import sys

    assert_correct(grade(7, "q2", FOUND))
    monkeypatch.setitem(vars(sys.modules["__main__"]), "re", re)
    result = grade(7, "q2", FOUND)
    assert result.points == 0 and "`match` and `search` and `fullmatch`" in result.message, result.message
    assert "counts only when it is checked before the tool is imported" in result.message
    monkeypatch.delitem(vars(sys.modules["__main__"]), "re")
    monkeypatch.setitem(vars(sys.modules["__main__"]), "search", re.search)  # an alias counts too
    assert grade(7, "q2", FOUND).points == 0


def test_ch7_q2_the_notebook_imports_re_only_after_the_check():
    import nbformat

    from course_utils.tools.checkout import checkout_root

    for folder in ("solutions", "exercises"):
        nb = nbformat.read(checkout_root() / folder / "07_where_next.ipynb", as_version=4)
        ids = [cell.get("id") for cell in nb.cells]
        before = "\n".join(cell.source for cell in nb.cells[:ids.index("ch7-q2")] if cell.cell_type == "code")
        assert "import re" not in before and "LayoutMap" not in before, folder


# --- exercise 5: experts with a capacity, built and measured ---------------------------------------

def moe_answer(capacity="per group", returns="grouped", route="all-to-all", fixed_mesh=None):
    """A moe_layer a learner could write; the defaults make a right one. capacity: "per group", "none" (every token
    kept, the chapter's way), "whole batch" (counted over all tokens). returns: "grouped" ([G, S, f]) or "flat"
    ([T, f]). route: "all-to-all" (relayouts), "gather" (every device gathers all slots), "no capacity slots" (the
    chapter's dispatch [G, S, E, S]: a slot per token)."""
    def moe_layer(tokens, expert_of, experts, cap, mesh):
        import tensorflow as tf
        from tensorflow.experimental import dtensor

        from course_utils import pack_batch

        U = dtensor.UNSHARDED
        mesh = fixed_mesh or mesh
        groups, count = mesh.dim_size("model"), experts.shape[0]
        per_group, d = tokens.shape[0] // groups, tokens.shape[1]
        slots = per_group if capacity == "none" or route == "no capacity slots" else cap
        chosen = np.eye(count, dtype=np.float32)[expert_of]
        if capacity == "whole batch":
            rank = (np.cumsum(chosen, axis=0) - 1) * chosen
            chosen, rank = chosen.reshape(groups, per_group, count), rank.reshape(groups, per_group, count)
        else:
            chosen = chosen.reshape(groups, per_group, count)
            rank = (np.cumsum(chosen, axis=1) - 1) * chosen
        dispatch = np.zeros((groups, per_group, count, slots), np.float32)
        g, s, e = np.nonzero(chosen)
        limit = per_group if capacity == "none" else cap
        kept = rank[g, s, e] < limit
        dispatch[g[kept], s[kept], e[kept], rank[g, s, e][kept].astype(int)] = 1.0

        def on_model(value):
            return pack_batch(value, dtensor.Layout(["model"] + [U] * (value.ndim - 1), mesh))

        @tf.function
        def layer(dispatch, grouped, weights):
            by_group = tf.einsum("gsec,gsd->egcd", dispatch, grouped)
            target = (dtensor.Layout.replicated(mesh, 4) if route == "gather" else
                      dtensor.Layout(["model", U, U, U], mesh))
            computed = tf.einsum("egcd,edf->egcf", dtensor.relayout(by_group, target), weights)
            back = dtensor.relayout(computed, dtensor.Layout([U, "model", U, U], mesh))
            return tf.einsum("gsec,egcf->gsf", dispatch, back)

        out = layer(on_model(dispatch), on_model(tokens.reshape(groups, per_group, d)), on_model(experts))
        return tf.reshape(out, [tokens.shape[0], -1]) if returns == "flat" else out

    return moe_layer


def test_ch7_q5_truth_the_layer_and_its_traffic(cpus8):
    """The checker's reference on one case by hand, and the cases drop tokens (so a capacity that drops none is told
    apart)."""
    from course_utils.checkers import ch7_moe

    tokens = np.arange(8, dtype="float32").reshape(4, 2)
    experts = np.stack([np.eye(2), 2 * np.eye(2)]).astype("float32")
    out = ch7_moe._reference_moe(tokens, np.array([0, 0, 1, 0]), experts, capacity=1, groups=2)
    np.testing.assert_array_equal(out, [[0, 1], [0, 0], [8, 10], [6, 7]])  # group 0: token 1 is expert 0's second
    for case in ch7_moe.MOE_CASES:
        tokens, expert_of, experts = ch7_moe.moe_case(case)
        groups = dict(case["mesh"])["model"]
        kept = ch7_moe._reference_moe(tokens, expert_of, experts, case["capacity"], groups)
        assert np.any(np.all(kept == 0, axis=1)), case  # some tokens dropped
        assert not np.allclose(kept, ch7_moe._reference_moe(tokens, expert_of, experts, case["capacity"], groups,
                                                            per_group=False)), case


def test_ch7_q5_right_forms(cpus8):
    result = grade(7, "q5", moe_answer())
    assert_correct(result)
    assert "✗" not in result.message
    assert_correct(grade(7, "q5", moe_answer(returns="flat")))


@pytest.mark.parametrize("options, fragments, points", [
    ({"capacity": "none"}, ["every token got its expert's output", "dropped", "a slot for every token"], 1),
    ({"capacity": "whole batch"}, ["counted over the whole batch", "per group"], 2),
    ({"route": "gather"}, ["an all-gather ran"], 2),
    ({"route": "no capacity slots"}, ["a slot for every token of the group"], 3),
])
def test_ch7_q5_wrong_answers(cpus8, options, fragments, points):
    assert_hint(grade(7, "q5", moe_answer(**options)), *fragments, points=points)


def test_ch7_q5_other_answers(cpus8):
    from course_utils import make_mesh

    assert grade(7, "q5", None).status == "unanswered"
    assert_hint(grade(7, "q5", "moe"), "should be a function")
    assert_hint(grade(7, "q5", lambda tokens, expert_of, experts, capacity, mesh: tokens), "not a DTensor",
                "nothing moved between devices", points=0)
    assert_hint(grade(7, "q5", lambda tokens, expert_of, experts: tokens), "moe_layer raised TypeError")
    assert_hint(grade(7, "q5", moe_answer(fixed_mesh=make_mesh([("batch", 4), ("model", 2)]))),
                "not on the mesh passed in", points=3)  # right on the first case's mesh; wrong on the second


def test_ch7_q5_first_try_and_graded_keep_the_fix_back(cpus8):
    answer = moe_answer(capacity="none")
    first = exercises(7).q5._evaluate((answer,), {}, first_try=True).message
    assert "count the tokens routed to each expert" not in first and "bytes (d and f numbers" not in first, first
    graded = exercises(7, mode="graded").q5.evaluate(answer).message
    assert "count the tokens routed to each expert" not in graded


def test_ch7_q5_another_seed_and_the_stripped_copy(cpus8):
    ex = exercises(7).q5
    assert_correct(ex.judge_export(ex.export(moe_answer(), seed=12345), seed=12345))
    result = ex.judge_export(ex.export(moe_answer(), seed=0), seed=12345)
    assert result.points < result.max_points, result.message
    stripped = stripped_exercise("ch7_moe", "ExpertsWithCapacity", 7, "q5")
    assert_correct(ex.judge_export(stripped.export(moe_answer(), seed=7), seed=7))
    module, undefined = sandbox_copy("ch7_moe")
    assert not undefined and "_reference_moe" not in vars(module)
