"""Chapter 13's checker: a model's gradients packed by TensorFlow's rule for bytes_per_pack (q1), a training step that
all-reduces in those packs, run and measured (q2): the right answer in
several forms, the typical mistakes with the hints they get, the reference against TensorFlow's own function, and what
graded feedback holds back."""
import random

import pytest

from course_utils.checkers import ch13, exercises
from helpers import assert_correct, assert_hint, grade, holding, sandbox_copy


# ----------------------------------------------------------------------------------------------- q1: packs
def packs_loop(sizes, bytes_per_pack):
    if bytes_per_pack == 0:
        return [sum(sizes)]
    packs, held = [], 0
    for floats in sizes[::-1]:
        if not packs or held > bytes_per_pack:
            packs.append(0)
            held = 0
        packs[-1] += floats
        held += 4 * floats
    return packs


def packs_with_tensorflows_function(sizes, bytes_per_pack):
    import tensorflow as tf
    from tensorflow.python.distribute import cross_device_utils

    grouped = cross_device_utils.group_by_size([tf.zeros([n]) for n in reversed(sizes)], bytes_per_pack)
    return [sum(int(t.shape[0]) for t in pack) for pack in grouped]


def packs_with_a_generator(sizes, bytes_per_pack):
    packs = []
    for floats in reversed(sizes):
        if packs and bytes_per_pack and 4 * sum(packs[-1]) > bytes_per_pack:
            packs.append([])
        packs[-1:] = packs[-1:] or [[]]
        packs[-1].append(floats)
    return [sum(pack) for pack in packs]


@pytest.mark.parametrize("answer", [packs_loop, packs_with_a_generator])
def test_ch13_q1_right_in_several_forms(answer):
    assert_correct(grade(13, "q1", answer))


def test_ch13_q1_tensorflows_own_packing_is_refused():
    """The exercise says: write the rule yourself, no TensorFlow call."""
    assert_hint(grade(13, "q1", packs_with_tensorflows_function), "calls TensorFlow's group_by_size",
                "write the rule yourself")


def forward(sizes, bytes_per_pack):  # no reversal
    return packs_loop(sizes[::-1], bytes_per_pack)[::-1]


def at_least(sizes, bytes_per_pack):  # closes a pack once it holds bytes_per_pack, not more
    if bytes_per_pack == 0:
        return [sum(sizes)]
    packs, held = [], 0
    for floats in sizes[::-1]:
        if not packs or held >= bytes_per_pack:
            packs.append(0)
            held = 0
        packs[-1] += floats
        held += 4 * floats
    return packs


@pytest.mark.parametrize("answer, fragment", [
    (forward, "cut in the model's order"),
    (lambda sizes, b: packs_loop(sizes, b)[::-1], "in the wrong order"),
    (at_least, "MORE than"),
    (lambda sizes, b: ch13._reference_packs(sizes, b, looking_ahead=True), "before a gradient would take it past"),
    (lambda sizes, b: ch13._reference_packs(sizes, b, bytes_per_float=1), "as if each float were one byte"),
    (lambda sizes, b: [4 * p for p in packs_loop(sizes, b)], "in bytes"),
    (lambda sizes, b: packs_loop(sizes, b) if b else list(reversed(sizes)), "bytes_per_pack=0 is a special case"),
    (lambda sizes, b: [[n] for n in sizes], "not a list of whole numbers"),
    (lambda sizes, b: 1 / 0, "raised ZeroDivisionError"),
])
def test_ch13_q1_typical_mistakes_are_named(answer, fragment):
    assert_hint(grade(13, "q1", answer), fragment)


def test_ch13_q1_the_reference_is_tensorflows_rule():
    """The reference packs as TensorFlow's own function does (on the reversed gradients), on the checker's cases and
    on many more; and the chapter's model gives the packs its graph showed."""
    for seed in range(30):
        for sizes, bytes_per_pack in ch13.pack_cases(seed):
            assert ch13._reference_packs(sizes, bytes_per_pack) == packs_with_tensorflows_function(sizes, bytes_per_pack)
    rng = random.Random(0)
    for _ in range(50):
        sizes = [rng.randint(1, 5000) for _ in range(rng.randint(1, 7))]
        bytes_per_pack = rng.choice([0, 1, rng.randint(1, 4 * sum(sizes))])
        assert ch13._reference_packs(sizes, bytes_per_pack) == packs_with_tensorflows_function(sizes, bytes_per_pack)
    assert ch13._reference_packs([50176, 64, 640, 10], 1000) == [650, 50240]  # the chapter's n08 cell


def test_ch13_q1_graded_feedback_hides_the_packs():
    result = exercises(13, mode="graded").q1.evaluate(at_least)
    assert result.points == 0 and "MORE than" in result.message and "Here the packs are" not in result.message


# ----------------------------------------------------------------------------------------------- the sandbox copy
def test_ch13_the_sandbox_copy_states_no_answer():
    module, undefined = sandbox_copy("ch13")
    assert not undefined
    assert not hasattr(module, "_reference_packs")
    assert not holding(module, [650, 50240])
    for cls in module.CHAPTER.exercises:  # exercise 2 comes from the real ch13_step here (its copy: the test below)
        assert cls.hints and (cls.__module__ != module.__name__ or not {"grade", "judge"} & set(vars(cls))), cls


# ----------------------------------------------------------------------------------------------- q2: a packed step
def packed_step(all_reduce="packs", loss="global", reduce_op="sum", aggregate_again=False, bytes_per_pack=None,
                aggregation_flag="skip_gradients_aggregation", wrap=True):
    """A make_packed_step, right by default; each argument makes one typical change. Its loss is tf_keras's, as in
    the exercise notebook (tf.keras is Keras 3 in this process). TensorFlow is imported when the step is made, not
    when the tests are collected (tests/test_test_session.py)."""
    def make_packed_step(strategy, model, optimizer, bytes_per_pack_given):
        import tensorflow as tf
        import tf_keras

        size = bytes_per_pack_given if bytes_per_pack is None else bytes_per_pack
        options = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=size)
        loss_fn = tf_keras.losses.SparseCategoricalCrossentropy(  # its default reduction refuses to run here
            from_logits=True, **({} if loss.startswith("keras default") else {"reduction": "none"}))

        def replica_step(x, y):
            with tf.GradientTape() as tape:
                per_example = loss_fn(y, model(x, training=True))
                value = tf.reduce_mean(per_example) if loss == "own batch" else \
                    per_example if loss == "keras default" else tf.nn.compute_average_loss(per_example)
            gradients = tape.gradient(value, model.trainable_variables)
            context = tf.distribute.get_replica_context()
            if all_reduce == "packs":
                gradients = context.all_reduce(reduce_op, gradients, options=options)
            elif all_reduce == "each":
                gradients = [context.all_reduce(reduce_op, g, options=options) for g in gradients]
            elif all_reduce == "no options":
                gradients = context.all_reduce(reduce_op, gradients)
            if all_reduce == "apply_gradients" or aggregate_again:
                optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            else:
                optimizer.apply_gradients(zip(gradients, model.trainable_variables), **{aggregation_flag: (
                    aggregation_flag == "skip_gradients_aggregation")})

        def train_step(x, y):
            strategy.run(replica_step, args=(x, y))
        return tf.function(train_step) if wrap else train_step
    return make_packed_step


@pytest.mark.parametrize("answer", [
    packed_step(),
    packed_step(wrap=False),  # a plain function: the checker calls it from its own tf.function
    packed_step(loss="own batch", reduce_op="mean"),  # each replica's mean, averaged over the replicas
    packed_step(aggregation_flag="experimental_aggregate_gradients"),  # the older name, False
])
def test_ch13_q2_right_in_several_forms(cpus8, answer):
    assert_correct(grade(13, "q2", answer))


@pytest.mark.parametrize("answer, fragments, points", [
    (packed_step(all_reduce="apply_gradients"), ["ran 1 all-reduce, of [380] floats", "options given"], 0),
    (packed_step(all_reduce="no options"), ["one pack of all 380 floats"], 0),
    (packed_step(aggregate_again=True), ["all-reduced twice", "apply_gradients all-reduces"], 0),
    (packed_step(all_reduce="each"), ["one all-reduce per gradient", "ONE all_reduce call"], 0),
    (packed_step(bytes_per_pack=40), ["other packs"], 0),
    (packed_step(all_reduce="none", aggregation_flag="skip_gradients_aggregation"), ["all-reduced nothing"], 0),
    (packed_step(loss="own batch"), ["2 times as far", "its OWN batch"], 1),
    (packed_step(reduce_op="mean"), ["0.5 times as far", "AND the gradients averaged"], 1),
    (lambda strategy, model, optimizer, b: None, ["returned a NoneType"], 0),
    (lambda strategy, model, optimizer, b: (lambda x, y: 1 / 0), ["raised ZeroDivisionError"], 0),
    (packed_step(loss="keras default"), ["refuses inside a strategy", "reduction='none'"], 0),
    (packed_step(loss="keras default, averaged"), ["one loss per example", "reduction='none'"], 0),
])
def test_ch13_q2_typical_mistakes_are_named(cpus8, answer, fragments, points):
    assert_hint(grade(13, "q2", answer), *fragments, points=points)


def test_ch13_q2_first_wrong_check_keeps_the_answer(cpus8):
    result = exercises(13, mode="graded").q2.evaluate(packed_step(aggregate_again=True))
    assert result.points == 0 and "twice" in result.message and "skip_gradients_aggregation=True" not in result.message


def test_ch13_q2_cases_cut_several_packs_and_the_solution_passes_them(cpus8):
    """Every drawn case has at least two packs, fewer than the gradients; the right step scores on other seeds."""
    from course_utils.checkers import ch13_step

    for seed in range(200):
        shape, bytes_per_pack = ch13_step.packed_case(seed)
        sizes = ch13_step.gradient_sizes(shape)
        assert 2 <= len(ch13._reference_packs(sizes, bytes_per_pack)) < len(sizes), seed
    q2 = exercises(13).q2
    for seed in (1, 7):
        assert_correct(q2.judge_export(q2.export(packed_step(), seed=seed), seed))


def test_ch13_q2_the_chapters_pack_size_is_named(cpus8):
    """Seed 5: 1,000 bytes (the chapter's) cut [485, 312], not one pack of all (seed 0's model is too small for that)."""
    q2 = exercises(13).q2
    assert_hint(q2.judge_export(q2.export(packed_step(bytes_per_pack=1000), seed=5), 5),
                "bytes_per_pack=1000 (the chapter's)", "not of the bytes_per_pack the step was made with (335)")


def test_ch13_q2_the_sandbox_copy_states_no_answer():
    module, undefined = sandbox_copy("ch13_step")
    assert not undefined
    for gone in ("_reference_change", "_judge_packs", "_judge_change"):
        assert not hasattr(module, gone), gone
    assert not holding(module, [36, 136, 208])  # seed 0's packs
    assert module.PackedStep.hints and not {"grade", "judge"} & set(vars(module.PackedStep))
