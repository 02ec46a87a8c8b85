"""Chapter 13's checker: a model's gradients packed by TensorFlow's rule for bytes_per_pack (q1): the right answer in
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
    for cls in module.CHAPTER.exercises:
        assert not {"grade", "judge"} & set(vars(cls)) and cls.hints, cls.__name__
