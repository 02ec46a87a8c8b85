"""Chapter 9's checkers: the dataset_fn of a two-worker job (q1), who reads what under AUTO (q2) and where the logs go
(q3): the right answers in several forms, the typical wrong answers with the hints they get, and what graded feedback
holds back."""
import pytest

from course_utils.checkers import ch9, exercises
from course_utils.data import mnist_is_prepared
from helpers import assert_correct, assert_hint, grade, holding, sandbox_copy, stripped_exercise

GLOBAL_BATCH, EXAMPLES = ch9.GLOBAL_BATCH, ch9.EXAMPLES


def load_examples():
    """The exercise notebook's data: the ids of its 640 examples, in order."""
    import tensorflow as tf

    return tf.data.Dataset.range(EXAMPLES)


def right_answers():
    """dataset_fn written in several right ways."""
    import tensorflow as tf

    def shard_then_batch(input_context):
        examples = load_examples().shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return examples.batch(input_context.get_per_replica_batch_size(GLOBAL_BATCH))

    def enumerate_and_filter(input_context):
        pipelines, mine = input_context.num_input_pipelines, input_context.input_pipeline_id
        examples = load_examples().enumerate().filter(lambda k, x: k % pipelines == mine).map(lambda k, x: x)
        return examples.batch(GLOBAL_BATCH // input_context.num_replicas_in_sync)

    def shard_shuffle_prefetch(input_context):
        examples = load_examples().shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        examples = examples.shuffle(EXAMPLES, seed=input_context.input_pipeline_id)
        return examples.batch(input_context.get_per_replica_batch_size(GLOBAL_BATCH)).prefetch(tf.data.AUTOTUNE)

    def same_seed_shuffle_before_shard(input_context):
        examples = load_examples().shuffle(EXAMPLES, seed=7, reshuffle_each_iteration=False)
        examples = examples.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return examples.batch(input_context.get_per_replica_batch_size(GLOBAL_BATCH), drop_remainder=True)

    def contiguous_halves(input_context):
        share = EXAMPLES // input_context.num_input_pipelines
        examples = load_examples().skip(share * input_context.input_pipeline_id).take(share)
        return examples.batch(input_context.get_per_replica_batch_size(GLOBAL_BATCH))

    def repeated(input_context):
        examples = load_examples().shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return examples.shuffle(64).repeat().batch(input_context.get_per_replica_batch_size(GLOBAL_BATCH))

    def repeat_then_shuffle(input_context):  # later epochs mix into the first: every id read still counts
        examples = load_examples().shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return examples.repeat().shuffle(100).batch(input_context.get_per_replica_batch_size(GLOBAL_BATCH))

    return [shard_then_batch, enumerate_and_filter, shard_shuffle_prefetch, same_seed_shuffle_before_shard,
            contiguous_halves, repeated, repeat_then_shuffle]


def shard(input_context):
    return load_examples().shard(input_context.num_input_pipelines, input_context.input_pipeline_id)


def per_replica(input_context):
    return input_context.get_per_replica_batch_size(GLOBAL_BATCH)


@pytest.mark.parametrize("index", range(7))
def test_ch9_q1_right_in_several_forms(index):
    answer = right_answers()[index]
    assert_correct(grade(9, "q1", answer))


def test_ch9_q1_right_for_every_number_of_replicas_the_grader_draws():
    answer = right_answers()[0]
    q1 = exercises(9).q1
    drawn = set()
    for seed in range(1, 8):
        drawn |= set(ch9.replicas_for(seed))
        result = q1.judge_export(q1.export(answer, seed=seed), seed)
        assert_correct(result)
    assert drawn == set(ch9.REPLICA_CHOICES)
    assert ch9.replicas_for(0) == (8, 4) and all(len(set(ch9.replicas_for(seed))) == 2 for seed in range(20))


def test_ch9_q1_right_forms_pass_the_run_with_more_pipelines_too():
    """Every right form reads a disjoint cover of the ids when WIDER_PIPELINES workers call it (the third run)."""
    q1 = exercises(9).q1
    for answer in right_answers():
        data = q1.collect(answer)
        assert len(data["wider"]["pipelines"]) == ch9.WIDER_PIPELINES == 4
        assert ch9._judge_wider_cover(data["wider"]) == (True, ""), answer.__name__
    assert all((EXAMPLES // ch9.WIDER_PIPELINES) % (GLOBAL_BATCH // r) == 0
               for r in ch9.REPLICA_CHOICES + (ch9.WIDER_REPLICAS,))


def test_ch9_q1_number_of_workers_typed_in():
    """Right with 2 pipelines, but the 2 is typed in: the run with 4 pipelines finds it (an error, an overlap or ids
    read by no worker), and the disjoint-cover points go."""
    def shard_by_two(c):
        return load_examples().shard(2, c.input_pipeline_id).batch(per_replica(c))

    def shard_by_two_modulo(c):
        return load_examples().shard(2, c.input_pipeline_id % 2).batch(per_replica(c))

    def halves_typed_in(c):
        return load_examples().skip(320 * c.input_pipeline_id).take(320).batch(per_replica(c))

    for answer, detail in ((shard_by_two, "raised"), (shard_by_two_modulo, "the 4 pipelines share 640 examples."),
                           (halves_typed_in, "give pipeline 2 no example at all")):
        result = grade(9, "q1", answer)
        assert_hint(result, "With 4 pipelines your shards overlap or miss examples",
                    "read the number of pipelines from input_context", detail, "split before batching", points=2)
        assert "disjoint parts" not in result.message


def test_ch9_q1_batches_by_the_global_batch():
    result = grade(9, "q1", lambda c: shard(c).batch(GLOBAL_BATCH))
    assert_hint(result, "the GLOBAL batch", "ONE replica", points=3)


def test_ch9_q1_batches_per_worker():
    result = grade(9, "q1", lambda c: shard(c).batch(GLOBAL_BATCH // c.num_input_pipelines))
    assert_hint(result, "divided by the number of workers", points=3)


def test_ch9_q1_batch_size_typed_in():
    result = grade(9, "q1", lambda c: shard(c).batch(8))  # right for the notebook's 8 replicas only
    assert_hint(result, "whether 8 or 4 replicas", points=3)


def test_ch9_q1_does_not_shard():
    result = grade(9, "q1", lambda c: load_examples().batch(per_replica(c)))
    assert_hint(result, "Both pipelines read all 640 examples", points=1)
    result = grade(9, "q1", lambda c: load_examples().shuffle(64).repeat().batch(per_replica(c)))
    assert_hint(result, "Both pipelines read all 640 examples", points=1)


def test_ch9_q1_shards_by_the_number_of_replicas():
    result = grade(9, "q1", lambda c: load_examples().shard(c.num_replicas_in_sync, c.input_pipeline_id)
                   .batch(per_replica(c)))
    assert_hint(result, "num_replicas_in_sync parts", "160 of the 640", points=1)


def test_ch9_q1_same_part_on_both_workers():
    result = grade(9, "q1", lambda c: load_examples().shard(c.num_input_pipelines, 0).batch(per_replica(c)))
    assert_hint(result, "the same 320 examples", points=1)


def test_ch9_q1_shards_after_batching():
    """Right sizes and a disjoint cover, but every worker builds every batch: found from the pipeline's stages, and
    from the data alone when the split is a filter over batches."""
    def shard_after_batch(c):
        return load_examples().batch(per_replica(c)).shard(c.num_input_pipelines, c.input_pipeline_id)

    def filter_after_batch(c):
        batches = load_examples().batch(per_replica(c)).enumerate()
        return batches.filter(lambda k, b: k % c.num_input_pipelines == c.input_pipeline_id).map(lambda k, b: b)

    for answer in (shard_after_batch, filter_after_batch):
        result = grade(9, "q1", answer)
        assert_hint(result, "split whole batches", "throws away every other one", points=3)


def test_ch9_q1_shuffles_differently_before_sharding():
    def unseeded(c):
        return load_examples().shuffle(EXAMPLES).shard(c.num_input_pipelines, c.input_pipeline_id).batch(per_replica(c))

    def seed_per_worker(c):
        return load_examples().shuffle(EXAMPLES, seed=c.input_pipeline_id).shard(
            c.num_input_pipelines, c.input_pipeline_id).batch(per_replica(c))

    for answer in (unseeded, seed_per_worker):
        assert_hint(grade(9, "q1", answer), "shuffle before they shard", points=1)


def test_ch9_q1_returns_no_dataset():
    import tensorflow as tf

    assert_hint(grade(9, "q1", lambda c: list(range(10))), "returned a list", "tf.data.Dataset")
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    assert_hint(grade(9, "q1", lambda c: strategy.experimental_distribute_dataset(shard(c).batch(8))),
                "don't call the strategy")
    assert_hint(grade(9, "q1", lambda c: None), "returned a NoneType")
    assert_hint(grade(9, "q1", shard), "a batch of the ids")  # not batched
    assert_hint(grade(9, "q1", load_examples().batch(8)), "Pass the function itself")


def test_ch9_q1_crashes():
    assert_hint(grade(9, "q1", lambda c: shard(c).batch(GLOBAL_BATCH // c.num_workers)),
                "raised AttributeError", "input_pipeline_id=0", "An InputContext has num_input_pipelines")
    assert_hint(grade(9, "q1", lambda c: shard(c).batch(c.get_per_replica_batch_size(60))), "takes the GLOBAL batch")
    assert_hint(grade(9, "q1", lambda c: shard(c).map(lambda x: 1 // (x - 600)).batch(per_replica(c))),
                "whose reading raised")


def test_ch9_q1_placeholder_and_first_try():
    assert grade(9, "q1", None).status == "unanswered"
    q1 = exercises(9).q1
    wrong = lambda c: load_examples().batch(per_replica(c))  # noqa: E731 - not sharded
    first = q1._evaluate((wrong,), {}, first_try=True).message
    assert "Both pipelines read all 640 examples" in first and "input_pipeline_id)" not in first
    assert "dataset.shard(input_context.num_input_pipelines" in grade(9, "q1", wrong).message


def test_ch9_q1_graded_feedback_never_states_the_answer():
    from course_utils.checkers import GRADED

    q1 = exercises(9, mode=GRADED).q1
    for wrong in (lambda c: load_examples().batch(per_replica(c)), lambda c: shard(c).batch(GLOBAL_BATCH)):
        message = q1.evaluate(wrong).message
        assert "get_per_replica_batch_size(GLOBAL_BATCH)" not in message and ".shard(input_context" not in message


def test_ch9_q1_sandbox_copy_collects_what_the_grader_judges():
    """The graded sandbox holds the checker without its judging half: its collect gives the data the real judge
    grades."""
    copy = stripped_exercise("ch9", "DatasetFnForTwoWorkers", 9, "q1")
    real = exercises(9).q1
    for answer, status in ((right_answers()[0], "correct"), (lambda c: shard(c).batch(GLOBAL_BATCH), "partial")):
        assert real.judge_export(copy.export(answer, seed=3), 3).status == status


def test_ch9_q1_each_check_is_quick():
    import time

    started = time.perf_counter()
    grade(9, "q1", right_answers()[2])
    assert time.perf_counter() - started < 20  # about 0.2 s here; a generous bound for a busy machine


# --- exercise 2: who reads what under AUTO -------------------------------------------------------------------------

READINGS_RIGHT = ch9._reference_readings()


def test_ch9_q2_right_in_every_form_the_menu_allows():
    assert READINGS_RIGHT == {"four_files": "by file", "mnist_train": "error", "in_memory": "by element"}
    assert set(READINGS_RIGHT) == set(ch9.SHARDING_CASES) and set(READINGS_RIGHT.values()) <= set(ch9.READINGS)
    assert_correct(grade(9, "q2", dict(READINGS_RIGHT)))
    forms = {
        "four_files": ["By File", "  by   file ", "FILE", "file", "files", "by-file", "by_file", "AutoShardPolicy.FILE",
                       "tf.data.experimental.AutoShardPolicy.FILE", "per file", "'by file'", "by file.",
                       "by file: worker 0 reads f0, f2; worker 1 reads f1, f3", ch9.READINGS["by file"]],
        "mnist_train": ["ERROR", " error ", "an error", "fails", "a worker fails", "worker 0 fails", "raises",
                        "InvalidArgumentError", "error: worker 0 fails, worker 1 gets nothing", ch9.READINGS["error"],
                        "error on worker 0", "worker 0 errors", "InvalidArgument", "worker 0 raises an error",
                        "it fails on worker 0"],
        "in_memory": ["By Element", "by element (every 2nd)", "DATA", "data", "AutoShardPolicy.DATA", "by data",
                      "every 2nd element", "every second element", "elements", "by example", "by record",
                      "by element: 0, 2, 4, 6 | 1, 3, 5, 7", ch9.READINGS["by element"].upper(), "element-wise",
                      "element wise", "sharded element by element"],
    }
    for case, spellings in forms.items():
        for spelling in spellings:
            assert_correct(grade(9, "q2", dict(READINGS_RIGHT, **{case: spelling})))
    for spelling in ("everything", "Everything", "OFF", "AutoShardPolicy.OFF", "no split", "every worker reads "
                     "everything", "all"):
        assert ch9._normalize_reading(spelling) == "everything", spelling
    for spelling in ("file-wise", "one file per worker"):
        assert ch9._normalize_reading(spelling) == "by file", spelling


def test_ch9_q2_keywords_decide_only_when_one_answer_matches():
    """Text that holds the keywords of two answers, or of none, is not read as an answer (and gets the menu)."""
    for text in ("all the files", "every element of all the data", "error or every element", "worker 1", "auto",
                 "sharded", "by worker"):
        assert ch9._normalize_reading(text) not in ch9.READINGS, text
    assert_hint(grade(9, "q2", dict(READINGS_RIGHT, four_files="all the files")), "answer with one of", points=2)


@pytest.mark.parametrize("case, given, fragments", [
    ("four_files", "by element", ["only when tf.data finds NO file-reading source", "a TFRecordDataset is one",
                                  "worker 0 reads f0 and f2"]),
    ("four_files", "everything", ["only OFF leaves it whole", "worker 0 reads f0 and f2"]),
    ("four_files", "error", ["fewer files than workers", "4 files meet 2 workers"]),
    ("mnist_train", "by element", ["does not fall back from FILE to DATA because the files are too few",
                                   "TFRecord reader", "Could not apply FILE based sharding", "load_mnist sets"]),
    ("mnist_train", "by file", ["does choose FILE sharding here", "Count the files", "worker 1 silently gets nothing"]),
    ("mnist_train", "everything", ["only OFF leaves it whole", "few files is sharded too"]),
    ("in_memory", "by file", ["range(8) reads no file", "worker 0 gets 0, 2, 4, 6"]),
    ("in_memory", "everything", ["In-memory data are sharded too", "AUTO shards by DATA"]),
    ("in_memory", "error", ["needs a file-reading source", "range(8) has none"]),
])
def test_ch9_q2_each_typical_wrong_answer_gets_its_hint(case, given, fragments):
    assert given != READINGS_RIGHT[case]
    assert_hint(grade(9, "q2", dict(READINGS_RIGHT, **{case: given})), f"{case}: ", *fragments, points=2)


def test_ch9_q2_every_wrong_choice_has_a_targeted_hint():
    why = ch9._reference_reading_why()
    assert {(case, given) for case in ch9.SHARDING_CASES for given in ch9.READINGS
            if given != READINGS_RIGHT[case]} == set(why)


def test_ch9_q2_answers_it_cannot_read():
    assert_hint(grade(9, "q2", dict(READINGS_RIGHT, four_files="AUTO")), "AUTO is the policy in all three cases",
                points=2)
    assert_hint(grade(9, "q2", dict(READINGS_RIGHT, four_files="AutoShardPolicy.AUTO")), "AUTO is the policy",
                points=2)
    assert_hint(grade(9, "q2", dict(READINGS_RIGHT, mnist_train="worker 1")),
                "'worker 1': answer with one of 'by file', 'by element', 'everything', 'error'", points=2)
    assert_hint(grade(9, "q2", dict(READINGS_RIGHT, four_files=["f0", "f2"])), "answer with one of", points=2)
    assert_hint(grade(9, "q2", dict(READINGS_RIGHT, in_memory=None)), "in_memory: not answered yet", points=2)
    assert_hint(grade(9, "q2", {"four_files": "by file", "mnist_train": "error"}), "Missing key(s) ['in_memory']",
                points=2)
    assert_hint(grade(9, "q2", dict(READINGS_RIGHT, c="by file")), "Unknown key(s) ['c']", points=3)
    assert_hint(grade(9, "q2", ["by file", "error", "by element"]), "Give a dict with the keys")
    assert grade(9, "q2", {"four_files": None, "mnist_train": None, "in_memory": None}).status == "unanswered"


def test_ch9_q2_first_try_and_graded_feedback_hold_the_answer_back():
    answers = ch9._reference_reading_answers()
    wrong = {"four_files": "by element", "mnist_train": "by element", "in_memory": "by file"}
    first = exercises(9).q2._evaluate((wrong,), {}, first_try=True).message
    graded = exercises(9, mode="graded").q2.evaluate(wrong).message
    for message in (first, graded):
        assert "does not fall back from FILE to DATA" in message and "range(8) reads no file" in message
        for text in answers.values():
            assert text not in message
        assert "It is '" not in message and "Could not apply" not in message and "0, 2, 4, 6" not in message
    assert "It is 'error'" in exercises(9).q2.evaluate(wrong).message  # self-study, after a first try: the answer


needs_mnist = pytest.mark.skipif(not mnist_is_prepared(), reason="set TFDS_DATA_DIR to the prepared MNIST")


def _auto_sharded(dataset, shown):
    """What each of two workers reads of ``dataset`` under its own policy (AUTO here), as the chapter shards it."""
    import tensorflow as tf
    from tensorflow.python.distribute import input_ops

    result = []
    for index in range(2):
        try:
            result.append([shown(element) for element in input_ops.auto_shard_dataset(dataset, 2, index, 2).take(8)])
        except tf.errors.OpError as err:
            result.append(err.message)
    return result


def test_ch9_q2_the_answers_are_what_tensorflow_does(tmp_path):
    """The cases of files and of in-memory data, run as the chapter runs them (MNIST: the next test)."""
    import tensorflow as tf

    files = [str(tmp_path / f"f{i}.tfrecord") for i in range(4)]
    for i, path in enumerate(files):
        with tf.io.TFRecordWriter(path) as writer:
            for r in range(2):
                writer.write(f"f{i}r{r}".encode())
    by_file = _auto_sharded(tf.data.TFRecordDataset(files), lambda record: record.numpy().decode()[:2])
    assert [sorted(set(reads)) for reads in by_file] == [["f0", "f2"], ["f1", "f3"]]  # "by file"
    by_element = _auto_sharded(tf.data.Dataset.range(8), lambda number: int(number))
    assert by_element == [[0, 2, 4, 6], [1, 3, 5, 7]]  # "by element"
    assert tf.data.Dataset.range(8).options().experimental_distribute.auto_shard_policy == \
        tf.data.experimental.AutoShardPolicy.AUTO


@needs_mnist
def test_ch9_q2_mnist_from_tfds_fails_on_worker_0():
    import tensorflow_datasets as tfds

    from course_utils.data import mnist_data_dir

    train = tfds.load("mnist", split="train", as_supervised=True, data_dir=str(mnist_data_dir()), download=False)
    # A fresh dataset: sharding the same TFDS dataset object a second time, worker 0 gets nothing, silently.
    worker0, worker1 = _auto_sharded(train, lambda pair: int(pair[1]))
    assert "Could not apply FILE based sharding: the dataset only has 1 file(s)" in worker0 and worker1 == []


# --- exercise 3: where the logs go ---------------------------------------------------------------------------------

LOG_TRUTHS = [truth for truth, _ in ch9._reference_log_statements()]


def test_ch9_q3_right_in_every_form():
    assert LOG_TRUTHS == [False, False, True, True, False]
    assert len(LOG_TRUTHS) == len(ch9.LOG_STATEMENTS) == len(ch9.LOG_STATEMENT_IDEAS)
    assert_correct(grade(9, "q3", LOG_TRUTHS))
    assert_correct(grade(9, "q3", tuple(LOG_TRUTHS)))
    assert_correct(grade(9, "q3", [str(truth) for truth in LOG_TRUTHS]))  # "False", "True", ...
    assert_correct(grade(9, "q3", [f" {str(truth).lower()} " for truth in LOG_TRUTHS]))
    assert_correct(grade(9, "q3", [int(truth) for truth in LOG_TRUTHS]))
    assert_correct(grade(9, "q3", ["yes" if truth else "no" for truth in LOG_TRUTHS]))


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
def test_ch9_q3_one_statement_wrong_earns_1_point_and_its_idea(index, fragments):
    flipped = list(LOG_TRUTHS)
    flipped[index] = not flipped[index]
    assert_hint(grade(9, "q3", flipped), "4 of the 5 statements judged right", "1 statement is judged wrong",
                *fragments, points=1)


def test_ch9_q3_more_wrong_earn_nothing_and_malformed_answers():
    two_wrong = [not LOG_TRUTHS[0], not LOG_TRUTHS[1]] + LOG_TRUTHS[2:]
    assert_hint(grade(9, "q3", two_wrong), "3 of the 5 statements judged right", "2 statements are judged wrong")
    assert_hint(grade(9, "q3", [True] * 5), "3 statements are judged wrong")
    assert_hint(grade(9, "q3", LOG_TRUTHS[:4] + [None]), "statement(s) [5]: not answered yet", points=1)
    assert_hint(grade(9, "q3", ["maybe"] + LOG_TRUTHS[1:]), "statement(s) [1]: not answered yet", "the words 'True'",
                points=1)
    assert_hint(grade(9, "q3", LOG_TRUTHS[:4]), "5 values, not 4")
    assert_hint(grade(9, "q3", "False, False, True, True, False"), "Give a list of 5 booleans")
    assert grade(9, "q3", [None] * 5).status == "unanswered"


def test_ch9_q3_first_try_and_graded_name_ideas_not_statements():
    wrong = [not truth for truth in LOG_TRUTHS]
    first = exercises(9).q3._evaluate((wrong,), {}, first_try=True).message
    graded = exercises(9, mode="graded").q3.evaluate(wrong).message
    for message in (first, graded):
        assert "5 statements are judged wrong" in message and "Revisit:" in message
        assert "Statement" not in message and "statement 1" not in message.lower()
        for _, why in ch9._reference_log_statements():
            assert why not in message
    assert "Statement 5 is False" in exercises(9).q3.evaluate(wrong).message


def test_ch9_q3_statements_match_the_installed_tf_keras():
    """Statements 1 to 3 as tf_keras's TensorBoard callback implements them (the chapters' cells show them run)."""
    import inspect

    import tf_keras

    callback = tf_keras.callbacks.TensorBoard
    assert "write_dirpath" in inspect.getsource(callback._get_log_write_dir)  # 1: the others' summaries: a temp folder
    assert "logdir=self.log_dir" in inspect.getsource(callback._start_trace)  # 3: every worker profiles into log_dir
    assert "self._global_train_batch = 0" in inspect.getsource(callback.on_train_begin)  # 2: counted over the fit
    assert "_global_train_batch" not in inspect.getsource(callback.on_epoch_begin)


# --- the graded sandbox's copy of this module states no answer -----------------------------------------------------

def test_ch9_the_sandbox_copy_states_no_answer():
    module, undefined = sandbox_copy("ch9")
    assert not undefined
    for gone in ("_reference_readings", "_reference_reading_why", "_reference_reading_answers",
                 "_reference_log_statements"):
        assert not hasattr(module, gone), gone
    for answer in (READINGS_RIGHT, LOG_TRUTHS, tuple(LOG_TRUTHS)):
        assert not holding(module, answer), answer
    assert module.LOG_STATEMENTS == ch9.LOG_STATEMENTS and module.READINGS == ch9.READINGS
    for cls in module.CHAPTER.exercises:
        assert not {"grade", "judge"} & set(vars(cls)) and cls.hints, cls.__name__


def test_ch9_q2_q3_need_no_tensorflow_to_check(monkeypatch):
    """Checking exercises 2 and 3 imports no TensorFlow: with every import of it made to fail, they still grade."""
    import sys

    class NoTensorFlow:
        """A finder that refuses to import TensorFlow."""

        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "tensorflow" or name.startswith("tensorflow."):
                raise ImportError(f"{name}: exercises 2 and 3 must not import TensorFlow")
            return None

    for name in [name for name in sys.modules if name == "tensorflow" or name.startswith("tensorflow.")]:
        monkeypatch.delitem(sys.modules, name)  # put back after the test
    monkeypatch.setattr(sys, "meta_path", [NoTensorFlow()] + sys.meta_path)
    ex = exercises(9)
    assert_correct(ex.q2.evaluate(dict(READINGS_RIGHT)))
    assert_correct(ex.q3.evaluate(LOG_TRUTHS))
    assert_hint(ex.q2.evaluate(dict(READINGS_RIGHT, four_files="by element")), "a TFRecordDataset is one", points=2)
    assert_hint(ex.q3.evaluate([True] * 5), "3 statements are judged wrong")
