"""Chapter 12's checkers: what three service workers deliver (q1) and three trainers fed full batches by a tf.data service
of the checker's own (q2): the right answers in several forms, the typical wrong answers with the hints they get, and
what graded feedback holds back."""
import time

import pytest

from course_utils.checkers import ch12, exercises
from helpers import assert_correct, assert_hint, grade, holding, sandbox_copy, stripped_exercise

RIGHT_DELIVERIES = {"parallel_epochs, a job per trainer": 6, "parallel_epochs, one shared job": 3,
                    "distributed_epoch, a job per trainer": 2, "distributed_epoch, one shared job": 1}


# ----------------------------------------------------------------------------------------------- q1: predictions
def test_ch12_q1_right_as_numbers_or_text():
    assert_correct(grade(12, "q1", RIGHT_DELIVERIES))
    assert_correct(grade(12, "q1", {case: str(n) for case, n in RIGHT_DELIVERIES.items()}))


def test_ch12_q1_the_chapters_counts_are_rejected_with_the_reason():
    result = grade(12, "q1", dict(ch12.CHAPTER_COUNTS))
    assert_hint(result, "that is the chapter's count", "3 workers and 2 trainers", points=1)  # 2 of 4 happen to match


def test_ch12_q1_workers_and_trainers_swapped_is_named():
    swapped = {"parallel_epochs, a job per trainer": 6, "parallel_epochs, one shared job": 2,
               "distributed_epoch, a job per trainer": 3, "distributed_epoch, one shared job": 1}
    assert_hint(grade(12, "q1", swapped), "multiplied by the trainers where the service workers count", points=1)


def test_ch12_q1_first_try_and_graded_feedback_hold_the_number_back():
    wrong = dict(RIGHT_DELIVERIES, **{"parallel_epochs, one shared job": 2})
    graded = exercises(12, mode="graded").q1.evaluate(wrong)
    assert graded.points == 2 and "It is 3" not in graded.message
    assert "It is 3" in grade(12, "q1", wrong).message  # self-study evaluate() shows it


def test_ch12_q1_placeholder_is_unanswered():
    untouched = {case: None for case in RIGHT_DELIVERIES}
    assert grade(12, "q1", untouched).status == "unanswered"


# ----------------------------------------------------------------------------------------------- q2: the service
def service():
    import tensorflow as tf

    return tf.data.experimental.service


def batch_on_the_service(examples, target, batch_size):
    batches = examples.batch(batch_size, drop_remainder=True)
    return batches.apply(service().distribute("distributed_epoch", target, job_name="train"))


def batch_on_the_trainer(examples, target, batch_size):
    elements = examples.apply(service().distribute("distributed_epoch", target, job_name="train"))
    return elements.batch(batch_size, drop_remainder=True)


def sharding_policy_and_prefetch(examples, target, batch_size):
    policy = service().ShardingPolicy.DYNAMIC  # the name behind "distributed_epoch"
    batches = examples.shuffle(50, seed=1).batch(batch_size, drop_remainder=True)
    return batches.apply(service().distribute(policy, target, job_name="any name")).prefetch(2)


@pytest.mark.parametrize("answer", [batch_on_the_service, batch_on_the_trainer, sharding_policy_and_prefetch])
def test_ch12_q2_right_in_several_forms(answer):
    assert_correct(grade(12, "q2", answer))


def test_ch12_q2_the_chapters_pipeline_gets_short_batches():
    def chapter_pipeline(examples, target, batch_size):
        return examples.batch(batch_size).apply(service().distribute("distributed_epoch", target, job_name="t"))

    assert_hint(grade(12, "q2", chapter_pipeline), "shorter than batch_size", "its last batch is short", points=3)


def test_ch12_q2_parallel_epochs_delivers_copies():
    def parallel(examples, target, batch_size):
        batches = examples.batch(batch_size, drop_remainder=True)
        return batches.apply(service().distribute("parallel_epochs", target, job_name="t"))

    assert_hint(grade(12, "q2", parallel), "delivered more than once", "each one produced the whole dataset", points=2)


def test_ch12_q2_a_job_per_trainer_is_named():
    def own_jobs(examples, target, batch_size):
        return examples.batch(batch_size, drop_remainder=True).apply(service().distribute("distributed_epoch", target))

    assert_hint(grade(12, "q2", own_jobs), "from a job of its own", points=2)


def test_ch12_q2_an_endless_dataset_is_named_not_taken_for_parallel_epochs():
    """A repeat() makes the shared distributed_epoch job endless: every example comes again, which the check once
    blamed on parallel_epochs. parallel_epochs with a job per trainer, the most a dataset that ends delivers (9 times
    here), still ends before the check stops reading, and keeps its own hint."""
    def repeated(examples, target, batch_size):
        batches = examples.batch(batch_size, drop_remainder=True).repeat()
        return batches.apply(service().distribute("distributed_epoch", target, job_name="t"))

    def parallel_own_jobs(examples, target, batch_size):
        return examples.batch(batch_size, drop_remainder=True).apply(service().distribute("parallel_epochs", target))

    result = grade(12, "q2", repeated)
    assert_hint(result, "never ended", "repeat()", points=2)
    assert "parallel_epochs" not in result.message
    assert_hint(grade(12, "q2", parallel_own_jobs), "each one produced the whole dataset", points=2)


def test_ch12_q2_trainers_that_split_the_examples_among_themselves_without_the_service_are_refused():
    """The check's trainers share one process: a counter they share could split the epoch among them, which no
    trainer of a cluster could do. The reviewer's answer (4/4 before)."""
    import itertools

    calls = itertools.count()

    def shared_counter(examples, target, batch_size):
        return examples.shard(3, next(calls) % 3).batch(batch_size, drop_remainder=True)

    assert_hint(grade(12, "q2", shared_counter), "do not read from the service", "DataServiceDataset",
                "share one process", points=0)


def test_ch12_q2_a_typed_batch_size_fails_the_second_run():
    def typed(examples, target, batch_size):
        return examples.batch(8, drop_remainder=True).apply(service().distribute("distributed_epoch", target,
                                                                                    job_name="t"))

    assert_hint(grade(12, "q2", typed), "the batches held [8] examples, not batch_size=6", points=3)


def test_ch12_q2_unbatched_and_broken_answers_get_a_hint():
    unbatched = lambda examples, target, batch_size: examples.apply(service().distribute("distributed_epoch", target,
                                                                                           job_name="t"))
    assert_hint(grade(12, "q2", unbatched), "a batch of ids, a 1-D tensor")
    assert_hint(grade(12, "q2", lambda examples, target, batch_size: [1, 2]), "returned a list")
    assert_hint(grade(12, "q2", lambda examples, target: examples), "raised TypeError")
    assert_hint(grade(12, "q2", 5), "got a int")


def test_ch12_q2_first_wrong_graded_check_says_what_not_how():
    def chapter_pipeline(examples, target, batch_size):
        return examples.batch(batch_size).apply(service().distribute("distributed_epoch", target, job_name="t"))

    result = exercises(12, mode="graded").q2.evaluate(chapter_pipeline)
    assert result.points == 3 and "shorter than batch_size" in result.message
    assert "drop_remainder" not in result.message


def test_ch12_q2_right_for_the_runs_the_grader_draws():
    q2 = exercises(12).q2
    for seed in (3, 11):
        runs = ch12.service_runs(seed)
        assert runs != ch12.service_runs(0) and len(set(runs)) == 2
    # one seed's runs on a service (each export starts two services in this process)
    assert q2.judge_export(q2.export(batch_on_the_service, seed=3), 3).status == "correct"


def test_ch12_q2_sandbox_copy_collects_what_the_grader_judges():
    copy = stripped_exercise("ch12", "FeedThreeTrainers", 12, "q2")
    assert exercises(12).q2.judge_export(copy.export(batch_on_the_trainer, seed=5), 5).status == "correct"


def test_ch12_q2_each_check_is_quick():
    grade(12, "q2", batch_on_the_service)  # TensorFlow's first service in this process
    start = time.perf_counter()
    assert_correct(grade(12, "q2", batch_on_the_service))
    assert time.perf_counter() - start < 15  # about 2 s on a quiet 2-core machine; the bound leaves room for load


# ----------------------------------------------------------------------------------------------- the sandbox copy
def test_ch12_the_sandbox_copy_states_no_answer():
    module, undefined = sandbox_copy("ch12")
    assert not undefined
    for gone in ("_reference_deliveries",):
        assert not hasattr(module, gone), gone
    assert not holding(module, RIGHT_DELIVERIES)
    for cls in module.CHAPTER.exercises:
        assert not {"grade", "judge"} & set(vars(cls)) and cls.hints, cls.__name__
