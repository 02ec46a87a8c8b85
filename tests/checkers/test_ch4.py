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


Q4_LAYOUTS = {"a": (["batch", "unsharded"], ["unsharded", "unsharded"]),
              "b": (["batch", "unsharded"], ["unsharded", "model"]),
              "c": (["batch", "model"], ["model", "unsharded"]),
              "d": (["batch", "unsharded"], ["model", "unsharded"]),
              "e": (["batch", "model"], ["unsharded", "model"])}


@pytest.fixture(scope="module")
def q4_runs(mesh42):
    """What DTensor really runs for each case of exercise 4: {case: the list collectives_run_by returns}."""
    import tensorflow as tf
    from course_utils import collectives_run_by, pack_batch
    from tensorflow.experimental import dtensor

    x = np.arange(32, dtype="float32").reshape(8, 4)
    w = np.arange(24, dtype="float32").reshape(4, 6)
    runs = {}
    for key, (x_specs, w_specs) in Q4_LAYOUTS.items():
        xs, ws = pack_batch(x, dtensor.Layout(x_specs, mesh42)), pack_batch(w, dtensor.Layout(w_specs, mesh42))
        assert np.allclose(global_numpy(tf.matmul(xs, ws)), x @ w), key
        runs[key] = collectives_run_by(lambda: tf.matmul(xs, ws))
    return runs


def test_ch4_q4_answers_are_what_dtensor_runs(q4_runs):
    for key, runs in q4_runs.items():
        truth = ch4.MATMULS[key][1]
        assert [(run.kind, run.axes[0]) for run in runs] == ([] if truth == "none" else [truth]), (key, runs)
    # Case d's other plan (gather w whole along k) also gives the right y, but DTensor does not run it.
    assert ch4.OTHER_PLANS["d"] != ch4.MATMULS["d"][1]
    assert [(run.kind, run.axes) for run in q4_runs["d"]] == [("all-reduce", ("model",))]


def test_ch4_q4_accepts_what_collectives_run_by_returns(q4_runs):
    assert_correct(grade(4, "q4", q4_runs))  # lists of CollectiveRun, [] for none
    printed = {key: [(run.kind, run.axes) for run in runs] for key, runs in q4_runs.items()}  # as the chapter prints
    assert_correct(grade(4, "q4", printed))
    assert_correct(grade(4, "q4", {key: pairs[0] if pairs else () for key, pairs in printed.items()}))


def test_ch4_q4_collectives():
    right = {k: truth for k, (_, truth, _) in ch4.MATMULS.items()}
    assert_correct(grade(4, "q4", right))
    assert_correct(grade(4, "q4", dict(right, a="None", c=["AllReduce", "model"], e=("all_gather", "'model'"))))
    for no_collective in (None, (), [], "none", "no communication"):
        assert_correct(grade(4, "q4", dict(right, a=no_collective, b=no_collective)))
    assert_correct(grade(4, "q4", dict(right, c=("all-reduce", ("model",)), d=[("all-reduce", ("model",))])))
    assert_hint(grade(4, "q4", dict(right, c="none")), "cannot finish alone", points=4)
    assert_hint(grade(4, "q4", dict(right, c=None)), "cannot finish alone", points=4)  # None is an answer: none
    assert_hint(grade(4, "q4", dict(right, b=("all-reduce", "model"))), "does any device hold only part", points=4)
    assert_hint(grade(4, "q4", dict(right, d=("all-reduce", "batch"))), "which mesh axis splits", points=4)
    assert_hint(grade(4, "q4", dict(right, c=("all-reduce", ("batch", "model")))), "which mesh axis splits", points=4)
    assert_hint(grade(4, "q4", dict(right, e=("all-reduce", "model"))), "another collective", points=4)
    assert_hint(grade(4, "q4", dict(right, d=("all-gather", "model"))), "a plan that gives the right y",
                "not the one DTensor runs", points=4)
    assert_hint(grade(4, "q4", dict(right, a=True)), "answer 'none'", points=4)
    assert_hint(grade(4, "q4", dict(right, d=...)), "d: not answered yet", points=4)
    # Only `...` is a placeholder: a dict of empty answers is graded (two of them are right).
    assert_hint(grade(4, "q4", {key: [] for key in right}), "cannot finish alone", points=2)
    assert grade(4, "q4", {key: ... for key in right}).status == "unanswered"


def test_ch4_q4_graded_feedback_keeps_the_answer_back():
    right = {k: truth for k, (_, truth, _) in ch4.MATMULS.items()}
    result = exercises(4, mode="graded").q4.evaluate(dict(right, e=("all-reduce", "model")))
    assert result.points == 4 and "another collective" in result.message
    assert ch4.MATMULS["e"][2] not in result.message  # the explanation names the answer: self-study only


def test_ch4_first_wrong_check_teaches_before_it_tells(capsys):
    """core.Exercise.teach_first: the first wrong check() holds the answer back; the second shows it."""
    from course_utils.checkers import chapter_definition

    fresh = chapter_definition(4).bind()  # a kernel's checkers, with no checks yet
    right = {k: truth for k, (_, truth, _) in ch4.MATMULS.items()}
    wrong = dict(right, e=("all-reduce", "model"))
    fresh.q4.check(wrong)
    first = capsys.readouterr().out
    assert "another collective" in first and ch4.MATMULS["e"][2] not in first
    assert "a second wrong check shows the answer" in first and "ex.q4.hint()" in first
    fresh.q4.check(wrong)
    second = capsys.readouterr().out
    assert ch4.MATMULS["e"][2] in second and "a second wrong check" not in second
    assert fresh.q4.wrong_checks == 2
    fresh.q4.check(right)
    assert capsys.readouterr().out.startswith("Correct! 5/5 points.")
    # evaluate() (the grader's and the tests' way in) always gives the mode's full feedback.
    assert ch4.MATMULS["e"][2] in chapter_definition(4).bind().q4.evaluate(wrong).message
    # A first wrong check with nothing to hold back gets no note.
    fresh.q5.check(dict(COSTS, a_held=4096 * 4096))
    assert "a float32 takes 4 bytes" in (out := capsys.readouterr().out) and "first try" not in out
    # Graded hand-outs hold answers back on every check, with no note.
    graded = chapter_definition(4).bind(mode="graded")
    graded.q4.check(wrong)
    graded.q4.check(wrong)
    out = capsys.readouterr().out
    assert ch4.MATMULS["e"][2] not in out and "first try" not in out


def test_every_chapter_teaches_before_it_tells(capsys):
    """Chapter 3 too: the first wrong check holds the answer back; the second shows it."""
    from course_utils.checkers import chapter_definition

    fresh = chapter_definition(3).bind()
    assert fresh.q4.teach_first
    fresh.q4.check([True, True, True, False, True, False])
    first = capsys.readouterr().out
    assert "It is False: It is data parallelism" not in first and "a second wrong check shows the answer" in first
    fresh.q4.check([True, True, True, False, True, False])
    assert "It is False: It is data parallelism" in capsys.readouterr().out


def test_ch4_right_answers_print_no_wrong_line(mesh42):
    from tensorflow.experimental import dtensor

    results = [grade(4, "q1", mesh42, dtensor.Layout([dtensor.UNSHARDED, "model"], mesh42)),
               grade(4, "q3", {k: shape for k, (_, shape, _) in ch4.SHARDS.items()},
                     {k: n for k, (_, _, n) in ch4.SHARDS.items()}),
               grade(4, "q4", {k: truth for k, (_, truth, _) in ch4.MATMULS.items()}), grade(4, "q5", COSTS)]
    for result in results:
        assert result.status == "correct" and "✗" not in result.message, str(result)


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
    # Units: answers in MiB, KiB or MB are named as such.
    assert_hint(grade(4, "q5", dict(COSTS, a_held=64)), "looks like MiB", "give bytes", points=3)
    assert_hint(grade(4, "q5", dict(COSTS, a_sent=96.0, b_held=32)), "looks like MiB", points=2)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=52 * 1024)), "looks like KiB", points=3)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=54.525952)), "looks like MB", points=3)
    assert_hint(grade(4, "q5", dict(COSTS, a_sent=100.7)), "looks like MB", points=3)
    assert_hint(grade(4, "q5", dict(COSTS, b_sent=None)), "b_sent: not answered yet", points=3)


def test_only_ellipses_is_the_placeholder_where_none_is_an_answer():
    from course_utils.checkers.answers import only_ellipses

    assert only_ellipses(...) and only_ellipses({"a": ..., "b": ...}) and only_ellipses([..., ...])
    assert not any(only_ellipses(value) for value in (None, (), [], {}, {"a": None, "b": ...}, {"a": []}, "none"))
