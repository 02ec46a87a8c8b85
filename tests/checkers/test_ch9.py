"""Chapter 9's checkers: a dataset_fn that reads files (q1), a shuffled and cached pipeline under DATA sharding (q2),
who reads what under AUTO (q3) and where the logs go (q4): the right answers in several forms, the typical wrong
answers with the hints they get, and what graded feedback holds back."""
import random

import pytest

from course_utils.checkers import ch9, ch9_files, ch9_pipeline, exercises
from helpers import assert_correct, assert_hint, grade, holding, sandbox_copy, stripped_exercise


def parse(record):
    """The exercise notebook's parse: a record of the job's files -> the example's id."""
    import tensorflow as tf

    return tf.strings.to_number(record, out_type=tf.int64)


def factory(build):
    """make_dataset_fn(files, global_batch) from build(files, context, per_replica_batch) -> dataset."""
    def make_dataset_fn(files, global_batch):
        def dataset_fn(context):
            return build(files, context, context.get_per_replica_batch_size(global_batch))
        return dataset_fn
    return make_dataset_fn


def mine(files, context):
    """The file names of this pipeline: files i, i + n, ... (shard of the names)."""
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(files).shard(context.num_input_pipelines, context.input_pipeline_id)


def q1_right_answers():
    """make_dataset_fn written in several right ways."""
    import tensorflow as tf

    def solution(files, c, batch):
        names = mine(files, c).shuffle(len(files))
        examples = names.interleave(tf.data.TFRecordDataset, cycle_length=2, num_parallel_calls=tf.data.AUTOTUNE)
        return examples.map(parse).shuffle(1_000).batch(batch).prefetch(tf.data.AUTOTUNE)

    def flat_map_then_shuffle(files, c, batch):
        return mine(files, c).flat_map(tf.data.TFRecordDataset).map(parse).shuffle(500).batch(batch)

    def list_files_not_shuffled(files, c, batch):
        names = tf.data.Dataset.list_files(files, shuffle=False).shard(c.num_input_pipelines, c.input_pipeline_id)
        return names.interleave(tf.data.TFRecordDataset).map(parse).shuffle(1_000).batch(batch)

    def same_seed_before_the_shard(files, c, batch):  # the rule under DATA, applied to the names: the same order
        names = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files), seed=3)
        names = names.shard(c.num_input_pipelines, c.input_pipeline_id)
        examples = names.interleave(tf.data.TFRecordDataset).map(parse)
        return examples.shuffle(1_000, seed=c.input_pipeline_id).batch(batch)

    def contiguous_files(files, c, batch):
        share = len(files) // c.num_input_pipelines
        names = files[share * c.input_pipeline_id: share * (c.input_pipeline_id + 1)]
        return tf.data.TFRecordDataset(names).map(parse).shuffle(1_000).batch(batch, drop_remainder=True)

    def repeated(files, c, batch):
        return mine(files, c).interleave(tf.data.TFRecordDataset).map(parse).shuffle(300).repeat().batch(batch)

    return [factory(build) for build in (solution, flat_map_then_shuffle, list_files_not_shuffled,
                                         same_seed_before_the_shard, contiguous_files, repeated)]


@pytest.mark.parametrize("index", range(6))
def test_ch9_q1_right_in_several_forms(index):
    assert_correct(grade(9, "q1", q1_right_answers()[index]))


def test_ch9_q1_right_for_every_run_the_grader_draws():
    q1 = exercises(9).q1
    drawn = set()
    for seed in range(1, 6):
        drawn |= {replicas for _, replicas in ch9_files.q1_runs(seed)}
        assert_correct(q1.judge_export(q1.export(q1_right_answers()[0], seed=seed), seed))
    assert drawn == set(ch9_files.Q1_REPLICA_CHOICES)
    assert ch9_files.q1_runs(0) == [(2, 8), (3, 4)]
    shares = [ch9_files.Q1_EXAMPLES // pipelines for pipelines in ch9_files.Q1_PIPELINES]
    assert all(share % (ch9_files.Q1_GLOBAL_BATCH // r) == 0 for share in shares for r in ch9_files.Q1_REPLICA_CHOICES)


def test_ch9_q1_the_chapters_dataset_fn_copied_reads_every_file():
    """Chapter cell f05's dataset_fn, put on the files: right sizes, a disjoint cover, but every pipeline reads
    every file."""
    import tensorflow as tf

    def records_sharded(files, c, batch):
        return tf.data.TFRecordDataset(files).map(parse).shard(c.num_input_pipelines, c.input_pipeline_id) \
            .shuffle(1_000).batch(batch)

    assert_hint(grade(9, "q1", factory(records_sharded)), "split the examples, not the files",
                "every file by every pipeline", "what DATA sharding costs", points=4)


def test_ch9_q1_shuffles_the_files_before_sharding_them():
    import tensorflow as tf

    def unseeded(files, c, batch):
        names = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files))
        return names.shard(c.num_input_pipelines, c.input_pipeline_id).flat_map(tf.data.TFRecordDataset) \
            .map(parse).shuffle(500).batch(batch)

    def seed_per_pipeline(files, c, batch):
        names = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files), seed=c.input_pipeline_id)
        return names.shard(c.num_input_pipelines, c.input_pipeline_id).flat_map(tf.data.TFRecordDataset) \
            .map(parse).shuffle(500).batch(batch)

    def list_files_shuffles(files, c, batch):  # list_files shuffles unless told not to
        names = tf.data.Dataset.list_files(files).shard(c.num_input_pipelines, c.input_pipeline_id)
        return names.flat_map(tf.data.TFRecordDataset).map(parse).shuffle(500).batch(batch)

    for build in (unseeded, seed_per_pipeline, list_files_shuffles):
        assert_hint(grade(9, "q1", factory(build)), "more than once", "shuffle (or list_files", points=2)


def test_ch9_q1_a_shuffle_after_repeat_mixes_the_epochs():
    """The files are sharded right, but the shuffle after repeat() mixes the epochs: a pipeline gives examples twice
    within one epoch. The check said 'none twice: shard the list of files' (it counted sets)."""
    import tensorflow as tf

    def shuffle_after_repeat(files, c, batch):
        return mine(files, c).interleave(tf.data.TFRecordDataset).map(parse).repeat().shuffle(1_000).batch(batch)

    result = grade(9, "q1", factory(shuffle_after_repeat))
    assert_hint(result, "twice within one epoch", "after a repeat()", points=2)
    assert "Shard the list of files" not in result.message


def test_ch9_q1_sharded_by_the_replicas_instead_of_the_pipelines():
    import tensorflow as tf

    def by_replicas(files, c, batch):
        names = tf.data.Dataset.from_tensor_slices(files).shard(c.num_replicas_in_sync, c.input_pipeline_id)
        return names.interleave(tf.data.TFRecordDataset).map(parse).shuffle(1_000).batch(batch)

    assert_hint(grade(9, "q1", factory(by_replicas)), "read by no one", "a shard in 8, the replicas in sync",
                "one input pipeline per worker", points=2)


def test_ch9_q1_does_not_shard():
    import tensorflow as tf

    def everything(files, c, batch):
        return tf.data.TFRecordDataset(files).map(parse).shuffle(1_000).batch(batch)

    assert_hint(grade(9, "q1", factory(everything)), "every pipeline read all 480 examples", points=2)


def test_ch9_q1_number_of_pipelines_typed_in():
    import tensorflow as tf

    def two(files, c, batch):
        names = tf.data.Dataset.from_tensor_slices(files).shard(2, c.input_pipeline_id)
        return names.flat_map(tf.data.TFRecordDataset).map(parse).shuffle(500).batch(batch)

    def two_modulo(files, c, batch):
        names = tf.data.Dataset.from_tensor_slices(files).shard(2, c.input_pipeline_id % 2)
        return names.flat_map(tf.data.TFRecordDataset).map(parse).shuffle(500).batch(batch)

    assert_hint(grade(9, "q1", factory(two)), "worker 1's dataset_fn",
                "num_input_pipelines=3, input_pipeline_id=2", "Is a number of pipelines typed in")
    assert_hint(grade(9, "q1", factory(two_modulo)), "a chief and two workers", "more than once",
                "Or is the number of pipelines typed in", points=2)


def test_ch9_q1_batch_sizes():
    import tensorflow as tf

    def global_batch(files, c, batch):
        return mine(files, c).flat_map(tf.data.TFRecordDataset).map(parse).shuffle(500).batch(80)

    def typed_in(files, c, batch):
        return mine(files, c).flat_map(tf.data.TFRecordDataset).map(parse).shuffle(500).batch(10)

    assert_hint(grade(9, "q1", factory(global_batch)), "the GLOBAL batch", "ONE replica", points=4)
    assert_hint(grade(9, "q1", factory(typed_in)), "With 4 replicas in sync your batches hold 10 examples",
                "each of the 4 replicas needs 20", points=4)


def test_ch9_q1_shuffle_missing_or_frozen():
    import tensorflow as tf

    def no_shuffle(files, c, batch):
        return mine(files, c).flat_map(tf.data.TFRecordDataset).map(parse).batch(batch)

    def interleaved_no_shuffle(files, c, batch):  # not in file order, but the same order every epoch
        return mine(files, c).interleave(tf.data.TFRecordDataset, cycle_length=3).map(parse).batch(batch)

    def frozen(files, c, batch):
        examples = mine(files, c).flat_map(tf.data.TFRecordDataset).map(parse)
        return examples.shuffle(500, reshuffle_each_iteration=False).batch(batch)

    assert_hint(grade(9, "q1", factory(no_shuffle)), "Worker 0's pipeline gives its examples in the files' order",
                points=4)
    for build in (interleaved_no_shuffle, frozen):
        assert_hint(grade(9, "q1", factory(build)), "the same order in both epochs", "reshuffle_each_iteration",
                    points=4)


def test_ch9_q1_a_shuffle_that_leaves_the_files_in_order():
    import tensorflow as tf

    def names_only(files, c, batch):  # a new order of files each epoch, each file's records in order
        return mine(files, c).shuffle(len(files)).flat_map(tf.data.TFRecordDataset).map(parse).batch(batch)

    def buffer_of_two(files, c, batch):
        return mine(files, c).flat_map(tf.data.TFRecordDataset).map(parse).shuffle(2).batch(batch)

    def small_buffer_after_interleave(files, c, batch):
        return mine(files, c).interleave(tf.data.TFRecordDataset, cycle_length=2).map(parse).shuffle(8).batch(batch)

    for build in (names_only, buffer_of_two, small_buffer_after_interleave):
        assert_hint(grade(9, "q1", factory(build)), "in nearly their order", "a buffer that holds many files",
                    points=4)


def test_ch9_file_order_kept():
    from course_utils.checkers.ch9_files import file_order_kept

    assert file_order_kept(list(range(80)), 40) == 1.0
    assert file_order_kept([3, 2, 1, 0, 7, 6, 5, 4], 4) == -1.0
    assert abs(file_order_kept(random.Random(0).sample(range(400), 400), 40)) < 0.2
    assert file_order_kept([0, 40], 40) == 0.0  # no file gave three records: nothing to tell


def test_ch9_q1_unusable_answers():
    import tensorflow as tf

    def dataset_fn(context):  # a dataset_fn passed where make_dataset_fn belongs
        return tf.data.Dataset.range(10).batch(2)

    assert_hint(grade(9, "q1", dataset_fn), "make_dataset_fn(files, global_batch) raised TypeError",
                "returns a dataset_fn")
    assert_hint(grade(9, "q1", lambda files, batch: tf.data.TFRecordDataset(files)), "returned a TFRecordDatasetV2")
    assert_hint(grade(9, "q1", factory(lambda files, c, batch: mine(files, c).flat_map(tf.data.TFRecordDataset)
                                       .batch(batch))), "parse each record with parse()")
    assert_hint(grade(9, "q1", factory(lambda files, c, batch: [1, 2])), "returned a list", "tf.data.Dataset")
    assert_hint(grade(9, "q1", factory(lambda files, c, batch: c.num_workers)), "raised AttributeError",
                "An InputContext has num_input_pipelines")
    assert_hint(grade(9, "q1", tf.data.Dataset.range(3)), "Pass make_dataset_fn")
    assert grade(9, "q1", None).status == "unanswered"


def test_ch9_q1_first_try_and_graded_feedback_hold_the_answer_back():
    from course_utils.checkers import GRADED

    import tensorflow as tf

    wrong = factory(lambda files, c, batch: tf.data.TFRecordDataset(files).map(parse).shuffle(1_000).batch(batch))
    first = exercises(9).q1._evaluate((wrong,), {}, first_try=True).message
    graded = exercises(9, mode=GRADED).q1.evaluate(wrong).message
    for message in (first, graded):
        assert "every pipeline read all 480 examples" in message and "from_tensor_slices(files).shard" not in message
    assert "from_tensor_slices(files).shard" in exercises(9).q1.evaluate(wrong).message


def test_ch9_q1_sandbox_copy_collects_what_the_grader_judges():
    import tensorflow as tf

    copy = stripped_exercise("ch9_files", "DatasetFnFromFiles", 9, "q1")
    real = exercises(9).q1
    wrong = factory(lambda files, c, batch: mine(files, c).flat_map(tf.data.TFRecordDataset).map(parse).batch(batch))
    for answer, status in ((q1_right_answers()[0], "correct"), (wrong, "partial")):
        assert real.judge_export(copy.export(answer, seed=3), 3).status == status


def test_ch9_q1_write_job_files(tmp_path):
    import tensorflow as tf

    paths = ch9_files.write_job_files(str(tmp_path), 3, 4)
    assert [p.split("/")[-1] for p in paths] == ["part-00-of-03.tfrecord", "part-01-of-03.tfrecord",
                                                 "part-02-of-03.tfrecord"]
    assert [int(parse(r)) for r in tf.data.TFRecordDataset(paths)] == list(range(12))
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises(ValueError, match="positive whole number"):
            ch9_files.write_job_files(str(tmp_path), bad, 4)


# --- exercise 2: shuffle and cache under DATA sharding -------------------------------------------------------------

def q2_right_answers():
    import tensorflow as tf

    def solution(records, decode, global_batch):
        return records.map(decode).cache().shuffle(10_000, seed=7).batch(global_batch)

    def smaller_buffer_and_prefetch(records, decode, global_batch):
        examples = records.map(decode, num_parallel_calls=tf.data.AUTOTUNE).cache()
        return examples.shuffle(64, seed=1, reshuffle_each_iteration=True).batch(global_batch).prefetch(2)

    def drop_remainder(records, decode, global_batch):
        return records.map(decode).cache().shuffle(1_000, seed=3).batch(global_batch, drop_remainder=True)

    return [solution, smaller_buffer_and_prefetch, drop_remainder]


@pytest.mark.parametrize("index", range(3))
def test_ch9_q2_right_in_several_forms(index):
    assert_correct(grade(9, "q2", q2_right_answers()[index]))


def test_ch9_q2_right_for_every_run_the_grader_draws():
    q2 = exercises(9).q2
    drawn = set()
    for seed in range(1, 6):
        drawn |= set(ch9_pipeline.q2_runs(seed))
        assert_correct(q2.judge_export(q2.export(q2_right_answers()[0], seed=seed), seed))
    assert drawn == set(ch9_pipeline.Q2_WORKER_CHOICES) and ch9_pipeline.q2_runs(0) == (2, 3)
    assert all(ch9_pipeline.Q2_GLOBAL_BATCH % (w * ch9_pipeline.Q2_REPLICAS_PER_WORKER) == 0
               for w in ch9_pipeline.Q2_WORKER_CHOICES) and ch9_pipeline.Q2_EXAMPLES % ch9_pipeline.Q2_GLOBAL_BATCH == 0


def test_ch9_q2_an_unseeded_shuffle_reads_examples_twice():
    import random

    def unseeded(records, decode, global_batch):
        return records.map(decode).cache().shuffle(10_000).batch(global_batch)

    def a_seed_each_worker_draws(records, decode, global_batch):
        return records.map(decode).cache().shuffle(10_000, seed=random.randrange(2**31)).batch(global_batch)

    for answer in (unseeded, a_seed_each_worker_draws):
        assert_hint(grade(9, "q2", answer), "With 2 workers, epoch 1", "more than once",
                    "keeps that worker's pieces", "same fixed seed", points=2)


def test_ch9_q2_a_shuffle_after_repeat_is_named_not_taken_for_a_missing_seed():
    """Seeded, but shuffled after repeat(): each copy's epoch repeats some examples. The check told the learner to
    give the shuffle a fixed seed, which it had."""
    def shuffle_after_repeat(records, decode, global_batch):
        return records.map(decode).cache().repeat().shuffle(1_000, seed=7).batch(global_batch)

    result = grade(9, "q2", shuffle_after_repeat)
    assert_hint(result, "before the strategy shards it", "after a repeat()", points=2)
    assert "same fixed seed" not in result.message


def test_ch9_q2_an_order_left_to_chance_is_refused():
    """deterministic=False (in a map, an interleave, or the options) lets each worker's copy give another order, which
    the simulated workers, in one process, often do not show; deterministic=True written out is right."""
    import tensorflow as tf

    def parallel_map(records, decode, global_batch):
        return records.map(decode, num_parallel_calls=4, deterministic=False).cache().shuffle(1_000, seed=7) \
            .batch(global_batch)

    def by_options(records, decode, global_batch):
        options = tf.data.Options()
        options.deterministic = False
        return records.map(decode).cache().shuffle(1_000, seed=7).batch(global_batch).with_options(options)

    def interleaved(records, decode, global_batch):
        examples = records.batch(10).interleave(tf.data.Dataset.from_tensor_slices, num_parallel_calls=2,
                                                deterministic=False)
        return examples.map(decode).cache().shuffle(1_000, seed=7).batch(global_batch)

    for answer, what in ((parallel_map, "a map with deterministic=False"), (by_options, "its options"),
                         (interleaved, "an interleave with deterministic=False")):
        assert_hint(grade(9, "q2", answer), "out of order", what, "whatever the seed", points=2)

    def written_out(records, decode, global_batch):
        return records.map(decode, num_parallel_calls=4, deterministic=True).cache().shuffle(1_000, seed=7) \
            .batch(global_batch)

    assert_correct(grade(9, "q2", written_out))


def test_ch9_q2_a_seed_that_differs_between_processes_is_refused():
    """The check's simulated workers share one process, so a seed drawn from the process (its id, the clock, a
    string's hash) would agree between them: the checker looks for those calls."""
    import os
    import time

    def pid_seed(records, decode, global_batch):
        return records.map(decode).cache().shuffle(10_000, seed=os.getpid()).batch(global_batch)

    def hash_seed(records, decode, global_batch):
        return records.map(decode).cache().shuffle(10_000, seed=hash("data") % 2**31).batch(global_batch)

    def clock_seed(records, decode, global_batch):
        return records.map(decode).cache().shuffle(10_000, seed=int(time.time())).batch(global_batch)

    for answer, called in ((pid_seed, "getpid"), (hash_seed, "hash"), (clock_seed, "time")):
        assert_hint(grade(9, "q2", answer), f"Your pipeline calls {called}", "differs between processes",
                    "same fixed seed", points=2)


def test_ch9_q2_cache_and_shuffle_in_the_wrong_places():
    def cache_after_shuffle(records, decode, global_batch):
        return records.map(decode).shuffle(10_000, seed=7).cache().batch(global_batch)

    def no_cache(records, decode, global_batch):
        return records.map(decode).shuffle(10_000, seed=7).batch(global_batch)

    def cache_before_decode(records, decode, global_batch):
        return records.cache().map(decode).shuffle(10_000, seed=7).batch(global_batch)

    def no_shuffle(records, decode, global_batch):
        return records.map(decode).cache().batch(global_batch)

    def frozen(records, decode, global_batch):
        return records.map(decode).cache().shuffle(10_000, seed=7, reshuffle_each_iteration=False).batch(global_batch)

    assert_hint(grade(9, "q2", cache_after_shuffle), "the same order in both epochs", "A cache() after the shuffle",
                points=3)
    assert_hint(grade(9, "q2", frozen), "the same order in both epochs", points=3)
    for answer in (no_cache, cache_before_decode):
        assert_hint(grade(9, "q2", answer), "decoded 480 records for 2 epochs of 240", points=3)
    assert_hint(grade(9, "q2", no_shuffle), "in the records' order", points=3)


def test_ch9_q2_batches_and_sharding_of_its_own():
    import tensorflow as tf

    def unbatched(records, decode, global_batch):
        return records.map(decode).cache().shuffle(10_000, seed=7)

    def typed_in_batch(records, decode, global_batch):
        return records.map(decode).cache().shuffle(10_000, seed=7).batch(32)

    def sharding_off(records, decode, global_batch):
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return records.map(decode).cache().shuffle(10_000, seed=7).batch(global_batch).with_options(options)

    def shards_itself(records, decode, global_batch):
        return records.map(decode).cache().shard(2, 0).shuffle(10_000, seed=7).batch(global_batch)

    assert_hint(grade(9, "q2", unbatched), "batch the decoded examples by global_batch")
    assert_hint(grade(9, "q2", typed_in_batch), "gives batches of 32 examples", "batch by global_batch (24 here)")
    assert_hint(grade(9, "q2", sharding_off), "every worker read all 240 examples", "OFF", points=2)
    assert_hint(grade(9, "q2", shards_itself), "none twice", "don't shard it yourself", points=2)


def test_ch9_q2_unusable_answers_and_placeholder():
    assert grade(9, "q2", None).status == "unanswered"
    assert_hint(grade(9, "q2", "records.shuffle()"), "Pass make_pipeline")
    assert_hint(grade(9, "q2", lambda records, decode, global_batch: [1]), "returned a list")
    assert_hint(grade(9, "q2", lambda records, decode: records), "raised TypeError")


def test_ch9_q2_first_try_and_graded_feedback_hold_the_answer_back():
    def unseeded(records, decode, global_batch):
        return records.map(decode).cache().shuffle(10_000).batch(global_batch)

    first = exercises(9).q2._evaluate((unseeded,), {}, first_try=True).message
    graded = exercises(9, mode="graded").q2.evaluate(unseeded).message
    for message in (first, graded):
        assert "more than once" in message and "seed=<a number you write>" not in message
    assert "seed=<a number you write>" in exercises(9).q2.evaluate(unseeded).message


def test_ch9_q2_sandbox_copy_collects_what_the_grader_judges():
    copy = stripped_exercise("ch9_pipeline", "ShuffleUnderData", 9, "q2")
    real = exercises(9).q2
    def no_cache(records, decode, global_batch):
        return records.map(decode).shuffle(1_000, seed=1).batch(global_batch)

    for answer, status in ((q2_right_answers()[0], "correct"), (no_cache, "partial")):
        assert real.judge_export(copy.export(answer, seed=4), 4).status == status


def test_ch9_q1_q2_each_check_is_quick():
    import time

    for name, answer in (("q1", q1_right_answers()[0]), ("q2", q2_right_answers()[0])):
        started = time.perf_counter()
        grade(9, name, answer)
        assert time.perf_counter() - started < 20, name  # about 1-2 s on a quiet machine; a bound for a busy one


# --- exercise 3: who reads what under AUTO -------------------------------------------------------------------------

READINGS_RIGHT = ch9._reference_readings()


def test_ch9_q3_right_in_every_form_the_menu_allows():
    assert READINGS_RIGHT == {"many_files": "by file", "few_files": "error", "interleaved": "by file",
                              "whole_files": "by element"}
    assert set(READINGS_RIGHT) == set(ch9.SHARDING_CASES) and set(READINGS_RIGHT.values()) <= set(ch9.READINGS)
    assert ch9.WHO_FEW_FILES < ch9.WHO_WORKERS <= ch9.WHO_MANY_FILES
    assert_correct(grade(9, "q3", dict(READINGS_RIGHT)))
    forms = {
        "many_files": ["By File", "  by   file ", "FILE", "file", "files", "by-file", "by_file", "AutoShardPolicy.FILE",
                       "tf.data.experimental.AutoShardPolicy.FILE", "per file", "'by file'", "by file.",
                       "by file: worker 0 reads f0, f4", ch9.READINGS["by file"]],
        "few_files": ["ERROR", " error ", "an error", "fails", "a worker fails", "worker 0 fails", "raises",
                      "InvalidArgumentError", "error: workers 0 to 2 fail", ch9.READINGS["error"], "error on worker 0",
                      "worker 0 errors", "InvalidArgument", "it fails on worker 0"],
        "whole_files": ["By Element", "by element (every 4th)", "DATA", "data", "AutoShardPolicy.DATA", "by data",
                        "every 4th element", "elements", "by example", "by record", ch9.READINGS["by element"].upper(),
                        "element-wise", "sharded element by element"],
    }
    for case, spellings in forms.items():
        for spelling in spellings:
            assert_correct(grade(9, "q3", dict(READINGS_RIGHT, **{case: spelling})))
    for spelling in ("everything", "Everything", "OFF", "AutoShardPolicy.OFF", "no split", "every worker reads "
                     "everything", "all"):
        assert ch9._normalize_reading(spelling) == "everything", spelling


def test_ch9_q3_keywords_decide_only_when_one_answer_matches():
    for text in ("all the files", "every element of all the data", "error or every element", "worker 1", "auto",
                 "sharded", "by worker"):
        assert ch9._normalize_reading(text) not in ch9.READINGS, text
    assert_hint(grade(9, "q3", dict(READINGS_RIGHT, many_files="all the files")), "answer with one of", points=3)


@pytest.mark.parametrize("case, given", sorted(ch9._reference_reading_why()))
def test_ch9_q3_each_typical_wrong_answer_gets_its_hint(case, given):
    assert given != READINGS_RIGHT[case]
    why, answer = ch9._reference_reading_why()[case, given], ch9._reference_reading_answers()[case]
    assert_hint(grade(9, "q3", dict(READINGS_RIGHT, **{case: given})), f"{case}: ", why, answer, points=3)


def test_ch9_q3_every_wrong_choice_has_a_targeted_hint():
    assert {(case, given) for case in ch9.SHARDING_CASES for given in ch9.READINGS
            if given != READINGS_RIGHT[case]} == set(ch9._reference_reading_why())


def test_ch9_q3_answers_it_cannot_read():
    assert_hint(grade(9, "q3", dict(READINGS_RIGHT, many_files="AUTO")), "AUTO is the policy in every case", points=3)
    assert_hint(grade(9, "q3", dict(READINGS_RIGHT, few_files="worker 1")),
                "'worker 1': answer with one of 'by file', 'by element', 'everything', 'error'", points=3)
    assert_hint(grade(9, "q3", dict(READINGS_RIGHT, whole_files=None)), "whole_files: not answered yet", points=3)
    assert_hint(grade(9, "q3", {"many_files": "by file"}), "Missing key(s)", points=1)
    assert_hint(grade(9, "q3", ["by file", "error", "by file", "by element"]), "Give a dict with the keys")
    assert grade(9, "q3", dict.fromkeys(READINGS_RIGHT)).status == "unanswered"


def test_ch9_q3_first_try_and_graded_feedback_hold_the_answer_back():
    answers = ch9._reference_reading_answers()
    wrong = {"many_files": "by element", "few_files": "by file", "interleaved": "by element", "whole_files": "by file"}
    first = exercises(9).q3._evaluate((wrong,), {}, first_try=True).message
    graded = exercises(9, mode="graded").q3.evaluate(wrong).message
    for message in (first, graded):
        assert "looks inside the function of interleave" in message and "is an operation inside a map" in message
        assert "It is '" not in message and not any(text in message for text in answers.values())
    assert "It is 'by element'" in exercises(9).q3.evaluate(wrong).message


def _each_worker_reads(dataset, workers=ch9.WHO_WORKERS):
    """What each worker's copy of ``dataset`` reads under its own policy (AUTO), or the error, as the exercise's
    "Watch it" cell shards it."""
    import tensorflow as tf
    from tensorflow.python.distribute import input_ops

    result = []
    for index in range(workers):
        try:
            result.append([element for element in input_ops.auto_shard_dataset(dataset, workers, index, workers)
                           .as_numpy_iterator()])
        except tf.errors.OpError as err:
            result.append(type(err).__name__)
    return result


def test_ch9_q3_the_answers_are_what_tensorflow_does(tmp_path):
    import re

    import tensorflow as tf

    files = [str(tmp_path / f"f{i}.tfrecord") for i in range(ch9.WHO_MANY_FILES)]
    for i, path in enumerate(files):
        with tf.io.TFRecordWriter(path) as writer:
            for r in range(2):
                writer.write(f"f{i}r{r}".encode())
    files_of = lambda reads: sorted({record.decode()[:2] for record in reads})  # noqa: E731
    many = _each_worker_reads(tf.data.TFRecordDataset(files))
    assert [files_of(reads) for reads in many] == [["f0", "f4"], ["f1", "f5"], ["f2"], ["f3"]]  # by file
    few = _each_worker_reads(tf.data.TFRecordDataset(files[:ch9.WHO_FEW_FILES]))
    assert few == ["InvalidArgumentError"] * ch9.WHO_FEW_FILES + [[]]  # error (and the last worker gets nothing)
    interleaved = _each_worker_reads(tf.data.Dataset.from_tensor_slices(files).interleave(tf.data.TFRecordDataset,
                                                                                          cycle_length=2))
    assert [files_of(reads) for reads in interleaved] == [["f0", "f4"], ["f1", "f5"], ["f2"], ["f3"]]  # by file
    read = tf.Variable(0, dtype=tf.int64)

    def counted(name):
        read.assign_add(1)
        return tf.io.read_file(name)

    whole = tf.data.Dataset.from_tensor_slices(files).map(counted)
    for worker in range(ch9.WHO_WORKERS):
        read.assign(0)
        kept = _each_worker_reads(whole)[worker]
        assert sorted({m.decode() for element in kept for m in re.findall(rb"f\d", element)}) == \
            [f"f{i}" for i in range(worker, ch9.WHO_MANY_FILES, ch9.WHO_WORKERS)]
    read.assign(0)
    from tensorflow.python.distribute import input_ops

    list(input_ops.auto_shard_dataset(whole, ch9.WHO_WORKERS, 0, ch9.WHO_WORKERS))
    assert int(read.numpy()) == ch9.WHO_MANY_FILES  # by element: worker 0 read all six files to keep two


def test_ch9_q3_counts_only_before_the_sharding_step(monkeypatch):
    """input_ops.auto_shard_dataset (which the chapter's what_auto_shard_gives calls) prints exercise 3's answer: a
    check made while the notebook holds it, its module, or data_distribute (the module of the dataset it makes)
    scores 0 and says why; a right prediction checked before earns full marks."""
    from tensorflow.python.data.experimental.ops import distribute as data_distribute
    from tensorflow.python.distribute import input_ops

    from course_utils.checkers import reach

    namespace = {}
    monkeypatch.setattr(reach, "learner_namespace", lambda: namespace)
    q3 = exercises(9).q3
    assert "tensorflow.python.distribute.input_ops:auto_shard_dataset" in q3.revealed_by
    assert_correct(q3.evaluate(dict(READINGS_RIGHT)))
    for name, value, shown in (("input_ops", input_ops, "auto_shard_dataset"),  # the chapter's import
                               ("shard", input_ops.auto_shard_dataset, "auto_shard_dataset"),  # an alias
                               ("data_distribute", data_distribute, "_AutoShardDataset")):  # the strategy's input code
        namespace.clear()
        namespace[name] = value
        result = q3.evaluate(dict(READINGS_RIGHT))
        assert_hint(result, f"had imported or used `{shown}`", "was not counted", points=0)
        assert "by file" not in result.message and "It is" not in result.message  # nothing of the answer
    namespace.clear()
    assert_correct(q3.evaluate(dict(READINGS_RIGHT)))


def _names_bound_at_top(source):
    """The names a cell's code binds in the notebook's namespace by an import (not those inside a def or class)."""
    import ast

    names, todo = set(), list(ast.parse(source).body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo.extend(child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt))
    return names


def test_ch9_q3_the_exercise_notebook_imports_the_sharding_step_only_after_the_check():
    """No cell before exercise 3's check binds input_ops or data_distribute (exercise 2's watch cell imports them
    inside a function); the watch cell after it imports input_ops only once the answer is shown."""
    import ast
    from pathlib import Path

    import nbformat

    for folder in ("solutions", "exercises"):
        nb = nbformat.read(Path(__file__).resolve().parents[2] / folder / "09_watch_and_feed.ipynb", as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        ids = [c.get("id") for c in code]
        before = code[:ids.index("ch9-q3")]
        assert all(not {"input_ops", "data_distribute"} & _names_bound_at_top(c.source) for c in before), folder
        assert all("what_auto_shard_gives" not in c.source for c in before), folder
        watch = ast.parse(code[ids.index("c14")].source)
        guard = next(node for node in watch.body
                     if isinstance(node, ast.If) and "answer_shown" in ast.unparse(node.test))
        assert "not ex.q3.answer_shown()" in ast.unparse(guard.test)
        assert "input_ops" in _names_bound_at_top("\n".join(ast.unparse(n) for n in guard.orelse)), folder
        outside = [n for n in watch.body if n is not guard]
        assert "input_ops" not in _names_bound_at_top("\n".join(ast.unparse(n) for n in outside)), folder


def test_ch9_q3_the_notebooks_show_the_defaults_cells():
    """The exercise's cells are its templates filled with the defaults (``python3 course.py build`` writes them)."""
    from pathlib import Path

    import nbformat

    from course_utils.checkers import chapter_definition

    root, cells = Path(__file__).resolve().parents[2], chapter_definition(9).rendered_cells()
    for folder in ("solutions", "exercises"):
        nb = nbformat.read(root / folder / "09_watch_and_feed.ipynb", as_version=4)
        shown = {cell.get("id"): cell.source for cell in nb.cells}
        for cell in ("c10", "c13", "c14"):
            assert shown[cell] == cells[cell], (folder, cell)
        assert "**four workers**" in shown["c10"] and "every 4th element" in shown["c10"]


# --- exercise 4: where the logs go ---------------------------------------------------------------------------------

LOG_TRUTHS = [truth for truth, _ in ch9._reference_log_statements()]


def test_ch9_q4_right_in_every_form():
    assert LOG_TRUTHS == [False, False, True, True, False]
    assert len(LOG_TRUTHS) == len(ch9.LOG_STATEMENTS) == len(ch9.LOG_STATEMENT_IDEAS)
    assert_correct(grade(9, "q4", LOG_TRUTHS))
    assert_correct(grade(9, "q4", tuple(LOG_TRUTHS)))
    assert_correct(grade(9, "q4", [str(truth) for truth in LOG_TRUTHS]))
    assert_correct(grade(9, "q4", [f" {str(truth).lower()} " for truth in LOG_TRUTHS]))
    assert_correct(grade(9, "q4", [int(truth) for truth in LOG_TRUTHS]))
    assert_correct(grade(9, "q4", ["yes" if truth else "no" for truth in LOG_TRUTHS]))


@pytest.mark.parametrize("index, fragments", [
    (0, ["whose event files chapter 3 found", "Statement 1 is False", "workertemp_<i>/"]),
    (1, ["how many traces the 2-epoch fit with profile_batch=20 in this chapter's 'Watch' section",
         "Statement 2 is False", "over the whole fit"]),
    (2, ["which workers start the profiler", "Statement 3 is True", "logdir=self.log_dir on every worker"]),
    (3, ["how many launches of train_function this chapter's 'Watch' section counted", "Statement 4 is True",
         "ONE function call"]),
    (4, ["how many process rows the DTensor trace of this chapter's 'Watch' section had", "Statement 5 is False",
         "/host:CPU"]),
])
def test_ch9_q4_one_statement_wrong_earns_1_point_and_its_idea(index, fragments):
    flipped = list(LOG_TRUTHS)
    flipped[index] = not flipped[index]
    assert_hint(grade(9, "q4", flipped), "4 of the 5 statements judged right", "1 statement is judged wrong",
                *fragments, points=1)


def test_ch9_q4_more_wrong_earn_nothing_and_malformed_answers():
    two_wrong = [not LOG_TRUTHS[0], not LOG_TRUTHS[1]] + LOG_TRUTHS[2:]
    assert_hint(grade(9, "q4", two_wrong), "3 of the 5 statements judged right", "2 statements are judged wrong")
    assert_hint(grade(9, "q4", [True] * 5), "3 statements are judged wrong")
    assert_hint(grade(9, "q4", LOG_TRUTHS[:4] + [None]), "statement(s) [5]: not answered yet", points=1)
    assert_hint(grade(9, "q4", ["maybe"] + LOG_TRUTHS[1:]), "statement(s) [1]: not answered yet", "the words 'True'",
                points=1)
    assert_hint(grade(9, "q4", LOG_TRUTHS[:4]), "5 values, not 4")
    assert_hint(grade(9, "q4", "False, False, True, True, False"), "Give a list of 5 booleans")
    assert grade(9, "q4", [None] * 5).status == "unanswered"


def test_ch9_q4_first_try_and_graded_name_ideas_not_statements():
    wrong = [not truth for truth in LOG_TRUTHS]
    first = exercises(9).q4._evaluate((wrong,), {}, first_try=True).message
    graded = exercises(9, mode="graded").q4.evaluate(wrong).message
    for message in (first, graded):
        assert "5 statements are judged wrong" in message and "Revisit:" in message
        assert "Statement" not in message and "statement 1" not in message.lower()
        for _, why in ch9._reference_log_statements():
            assert why not in message
    assert "Statement 5 is False" in exercises(9).q4.evaluate(wrong).message


def test_ch9_q4_statements_match_the_installed_tf_keras():
    """Statements 1 to 3 as tf_keras's TensorBoard callback implements them (the chapters' cells show them run)."""
    import inspect

    import tf_keras

    callback = tf_keras.callbacks.TensorBoard
    assert "write_dirpath" in inspect.getsource(callback._get_log_write_dir)  # 1: the others' summaries: a temp folder
    assert "logdir=self.log_dir" in inspect.getsource(callback._start_trace)  # 3: every worker profiles into log_dir
    assert "self._global_train_batch = 0" in inspect.getsource(callback.on_train_begin)  # 2: counted over the fit
    assert "_global_train_batch" not in inspect.getsource(callback.on_epoch_begin)


# --- the graded sandbox's copy of these modules states no answer ---------------------------------------------------

def test_ch9_the_sandbox_copies_state_no_answer():
    module, undefined = sandbox_copy("ch9")
    assert not undefined
    for gone in ("_reference_readings", "_reference_reading_why", "_reference_reading_answers",
                 "_reference_log_statements"):
        assert not hasattr(module, gone), gone
    for answer in (READINGS_RIGHT, LOG_TRUTHS, tuple(LOG_TRUTHS)):
        assert not holding(module, answer), answer
    assert module.LOG_STATEMENTS == ch9.LOG_STATEMENTS and module.READINGS == ch9.READINGS
    assert module.SHARDING_CASES == ch9.SHARDING_CASES
    for cls in module.CHAPTER.exercises:  # exercises 1 and 2 come from the real ch9_files and ch9_pipeline here
        assert cls.hints and (cls.__module__ != module.__name__ or not {"grade", "judge"} & set(vars(cls)))
    for name, exercise in (("ch9_read", None), ("ch9_files", "DatasetFnFromFiles"),
                           ("ch9_pipeline", "ShuffleUnderData")):
        copy, undefined = sandbox_copy(name)
        assert not undefined and not [left for left in vars(copy) if left.startswith("_judge")], name
        if exercise:
            cls = getattr(copy, exercise)
            assert cls.hints and "collect" in vars(cls) and not {"grade", "judge"} & set(vars(cls)), exercise


def test_ch9_q3_q4_need_no_tensorflow_to_check(monkeypatch):
    """Checking exercises 3 and 4 imports no TensorFlow: with every import of it made to fail, they still grade."""
    import sys

    class NoTensorFlow:
        """A finder that refuses to import TensorFlow."""

        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "tensorflow" or name.startswith("tensorflow."):
                raise ImportError(f"{name}: exercises 3 and 4 must not import TensorFlow")
            return None

    for name in [name for name in sys.modules if name == "tensorflow" or name.startswith("tensorflow.")]:
        monkeypatch.delitem(sys.modules, name)  # put back after the test
    monkeypatch.setattr(sys, "meta_path", [NoTensorFlow()] + sys.meta_path)
    ex = exercises(9)
    assert_correct(ex.q3.evaluate(dict(READINGS_RIGHT)))
    assert_correct(ex.q4.evaluate(LOG_TRUTHS))
    assert_hint(ex.q3.evaluate(dict(READINGS_RIGHT, many_files="by element")), "a TFRecordDataset is one", points=3)
    assert_hint(ex.q4.evaluate([True] * 5), "3 statements are judged wrong")


def test_ch9_q3_the_self_study_question_has_no_note_on_the_keys():
    """The defaults' keys say what their cases are (6 files, 3 files for 4 workers): only a variant, whose keys may
    belie their names, says that they only name the cases (the learner's review, issue 37)."""
    q3 = exercises(9).q3
    assert q3.text_values()["names_note"] == "" and "The keys only name the cases" not in q3.rendered_cells()["c10"]
