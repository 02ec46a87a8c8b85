"""Chapter 9 · Watch and feed a distributed job: the exercises' graders and hints.

Exercises 1 and 2 (the learner's pipelines, run by the checker) live in :mod:`.ch9_files` and :mod:`.ch9_pipeline`;
this module holds the prediction (exercise 3) and the true-or-false statements (exercise 4), which need no
TensorFlow to check.
"""
import re

from .answers import grade_items, grade_statements, is_placeholder
from .ch9_files import DatasetFnFromFiles
from .ch9_pipeline import ShuffleUnderData
from .core import Exercise, Feedback, chapter

# Exercise 3: what each of WHO_WORKERS workers' copy of a pipeline reads under the default auto-shard policy, AUTO,
# for the cases of SHARDING_CASES, none of which the chapter ran, each answered with one of the words of READINGS. The
# cases are made from files[:n], n TFRecord files; the exercise notebook's "Watch it" cell runs them with
# input_ops.auto_shard_dataset(dataset, WHO_WORKERS, worker, WHO_WORKERS), the sharding step the strategy applies to
# each worker's copy (after it rebatches; the cases are unbatched, so DATA keeps every WHO_WORKERS-th element).
WHO_WORKERS, WHO_MANY_FILES, WHO_FEW_FILES = 4, 6, 3
SHARDING_CASES = {  # the exercise's cases, as the notebook lists them
    "many_files": f"tf.data.TFRecordDataset(files[:{WHO_MANY_FILES}]): the records of {WHO_MANY_FILES} TFRecord files",
    "few_files": f"tf.data.TFRecordDataset(files[:{WHO_FEW_FILES}]): the records of {WHO_FEW_FILES} TFRecord files",
    "interleaved": f"tf.data.Dataset.from_tensor_slices(files[:{WHO_MANY_FILES}]).interleave(tf.data.TFRecordDataset, "
                   f"cycle_length=2): the records of the same {WHO_MANY_FILES} files, two files read side by side",
    "whole_files": f"tf.data.Dataset.from_tensor_slices(files[:{WHO_MANY_FILES}]).map(tf.io.read_file): each of the "
                   f"same {WHO_MANY_FILES} files read whole, as one element",
}


def _nth(n):
    """2 -> '2nd', 4 -> '4th' (for the small numbers of workers here)."""
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n, 'th')}"


READINGS = {  # the menu of answers, as the notebook lists it (every case is one of them)
    "by file": f"each worker reads only files of its own: worker i the files i, i + {WHO_WORKERS}, ...",
    "by element": f"each worker reads all the data and keeps every {_nth(WHO_WORKERS)} element: worker 0 the elements "
                  f"0, {WHO_WORKERS}, {2 * WHO_WORKERS}, ..., worker 1 the elements 1, {WHO_WORKERS + 1}, ...",
    "everything": "nothing is split: every worker reads and keeps all the data",
    "error": "a worker's pipeline raises an error when it is read",
}
READING_WORDS = {  # what else a learner may type for each answer (compared in lower case, spaces collapsed)
    "by file": ("file", "files", "by files", "per file", "file based", "file sharding", "shard by file",
                "sharded by file", "split by file", "by file name"),
    "by element": ("element", "elements", "by elements", "per element", f"by element every {_nth(WHO_WORKERS)}",
                   f"every {_nth(WHO_WORKERS)} element", "by data", "data", "data based", "data sharding",
                   "shard by element", "sharded by element", "split by element", "shard by data", "sharded by data",
                   "by example", "by examples", "by record", "by records"),
    "everything": ("all", "all the data", "every worker reads everything", "each worker reads everything",
                   "all workers read everything", "no split", "not split", "no sharding", "not sharded", "unsharded",
                   "off"),
    "error": ("an error", "errors", "fails", "fail", "failure", "a worker fails", "one worker fails",
              "worker 0 fails", "raises", "raises an error", "a worker raises an error", "exception", "crash",
              "crashes", "invalidargumenterror"),
}


READING_KEYWORDS = {  # the last resort of _normalize_reading: the answer whose keyword alone the text holds
    "error": r"\b(error|errors|fails?|raises?|invalidargument\w*)\b",
    "by element": r"\belement",
    "by file": r"\bfiles?\b",
    "everything": r"\b(everything|all)\b",
}


def _plain_words(text):
    """``text`` in lower case, with ``_`` and ``-`` as spaces, spaces collapsed, quotes and a final full stop gone,
    and a leading ``AutoShardPolicy.`` (or ``tf.data.experimental.AutoShardPolicy.``) dropped."""
    text = re.sub(r"\s+", " ", text.replace("_", " ").replace("-", " ")).strip().strip("'\".!").strip().lower()
    return re.sub(r"^(?:tf\.data\.experimental\.)?(?:autoshardpolicy|policy)\.", "", text)


_READING_OF = {_plain_words(text): reading for reading, words in READING_WORDS.items()
               for text in (reading, *words, READINGS[reading])}


def _normalize_reading(value):
    """One of READINGS from what a learner typed: "by file", " By File ", "FILE", "AutoShardPolicy.DATA",
    "by element (every 2nd)", "error: worker 0 fails", "every worker reads everything", a menu line copied whole, ...,
    or else text that holds the keyword (READING_KEYWORDS) of exactly one answer ("worker 0 errors", "element-wise");
    other text as :func:`_plain_words` gives it, anything else unchanged.

    Example:
        >>> _normalize_reading("AutoShardPolicy.DATA"), _normalize_reading("By element (every 2nd)")
        ('by element', 'by element')
    """
    if not isinstance(value, str):
        return value
    text = _plain_words(value)
    if text in _READING_OF:
        return _READING_OF[text]
    head = re.split(r"[:(;,]", text, maxsplit=1)[0].strip()  # "by element (every 2nd)", "error: worker 0 fails"
    if head in _READING_OF:
        return _READING_OF[head]
    found = [reading for reading, keyword in READING_KEYWORDS.items() if re.search(keyword, text)]
    return found[0] if len(found) == 1 else text  # "error on worker 0", "element-wise"; "all the files": neither


def _reference_readings():
    """Exercise 3's answer (for WHO_FEW_FILES < WHO_WORKERS <= WHO_MANY_FILES, as the why and the answers say)."""
    return {"many_files": "by file", "few_files": "error", "interleaved": "by file", "whole_files": "by element"}


def _reference_reading_why():
    """Why each wrong answer of exercise 3 is wrong (it rules the answer out without naming the right one)."""
    everything = ("Under AUTO, the default, the strategy does shard each worker's copy of the pipeline: only OFF "
                  "leaves it whole.")
    return {
        ("many_files", "by element"): "AUTO shards by DATA (every element to one worker) only when tf.data finds NO "
                                      "file-reading dataset in the pipeline, and a TFRecordDataset is one.",
        ("many_files", "everything"): everything,
        ("many_files", "error"): f"FILE sharding fails only with fewer files than workers; here {WHO_MANY_FILES} files "
                                 f"meet {WHO_WORKERS} workers. That the files do not divide evenly is no error.",
        ("few_files", "by element"): "AUTO does not fall back from FILE to DATA because the files are too few: it "
                                     "falls back only when it finds no file-reading dataset at all.",
        ("few_files", "by file"): "AUTO does choose FILE sharding here (a TFRecordDataset). Count the files: what does "
                                  "FILE sharding do with fewer files than workers?",
        ("few_files", "everything"): everything + " A pipeline with few files is sharded too.",
        ("interleaved", "by element"): "The auto-shard rewrite looks inside the function of interleave (and of "
                                       "flat_map) too, for a reader that reads the function's argument.",
        ("interleaved", "everything"): everything,
        ("interleaved", "error"): f"There are {WHO_MANY_FILES} file names for {WHO_WORKERS} workers.",
        ("whole_files", "by file"): "tf.io.read_file is an operation inside a map, not a file-reading dataset: which "
                                    "reader can tf.data find in this pipeline to split by file?",
        ("whole_files", "everything"): everything,
        ("whole_files", "error"): "The FILE sharding error needs a file-reading dataset to shard, and this pipeline "
                                  "has none.",
    }


def _reference_reading_answers():
    """What exercise 3's right answers are, and why, as the exercise notebook's "Watch it" cell shows them."""
    last = WHO_WORKERS - 1
    return {
        "many_files": f"It is 'by file': worker i opens the files i, i + {WHO_WORKERS}, ... only: worker 0 files 0 and "
                      f"{WHO_WORKERS}, worker 1 files 1 and {WHO_WORKERS + 1}, the others one file each.",
        "few_files": f"It is 'error': {WHO_FEW_FILES} files for {WHO_WORKERS} workers. Every worker that gets a file "
                     f"fails with 'Could not apply FILE based sharding', and worker {last}, which gets none, silently "
                     f"reads nothing.",
        "interleaved": "It is 'by file': the rewrite finds the TFRecordDataset inside interleave's function, reading "
                       "its argument, and shards the list of file names before it: each worker opens only its own "
                       "files.",
        "whole_files": f"It is 'by element': tf.data finds no file-reading dataset, so AUTO shards by DATA at the end: "
                       f"every worker reads all {WHO_MANY_FILES} files and keeps every {_nth(WHO_WORKERS)}. The "
                       f"elements are whole files, so worker 0 keeps files 0 and {WHO_WORKERS}, as by file, but only "
                       f"after reading all {WHO_MANY_FILES}.",
    }


class WhoReadsWhat(Exercise):
    title = "Who reads what"
    points = len(SHARDING_CASES)  # one per case
    hints = (
        "For each case ask what tf.data asks under AUTO: does the pipeline hold a dataset that reads files (such as "
        "TFRecordDataset, also inside the function of interleave or flat_map)? If it does, how many files are there "
        "for how many workers?",
        "Under AUTO, tf.data looks for a file-reading source. Found: it shards by FILE (worker i reads the files i, "
        "i + n, ...), which needs at least as many files as workers. Not found: it shards by DATA, at the very end of "
        "the pipeline. It does not switch from FILE to DATA because there are too few files. An operation that reads "
        "a file (tf.io.read_file) is no file-reading dataset.",
    )

    def grade(self, readings):
        if isinstance(readings, dict):
            readings = {k: (v if is_placeholder(v) else _normalize_reading(v)) for k, v in readings.items()}
        why, answers = _reference_reading_why(), _reference_reading_answers()
        menu = ", ".join(repr(reading) for reading in READINGS)

        def explain(case, given, raw):
            if isinstance(given, str) and (case, given) in why:
                return why[(case, given)], answers[case]
            if given == "auto":
                return (f"{raw!r}: AUTO is the policy in every case; say what it does here, with one of {menu}.",
                        "")
            return f"{raw!r}: answer with one of {menu}.", ""

        return grade_items(Feedback(), readings, _reference_readings(), explain, lambda v: v,
                           f"each one of {menu}")


# Exercise 4: true or false, about TensorBoard's logs under a strategy and about reading a trace.
LOG_STATEMENTS = [  # the statements, as the notebook lists them
    "Under MultiWorkerMirroredStrategy each worker's TensorBoard callback leaves its own training scalars in the log "
    "folder, so TensorBoard draws one training curve per worker.",
    "profile_batch=20 counts the steps of each epoch: a fit of 2 epochs writes two traces, one of step 20 of each "
    "epoch.",
    "With profile_batch set, every worker of a MultiWorkerMirroredStrategy job writes a trace of its own, into the log "
    "folder itself: plugins/profile/<date_time>/<host name>.xplane.pb.",
    "The trace of one MirroredStrategy training step over the 8 virtual CPUs shows train_function launched once, for "
    "all 8 replicas together.",
    "The trace of one DTensor training step on the 8 virtual CPUs shows 8 process rows in the trace viewer, one per "
    "device, as 8 GPUs would.",
]
LOG_POINTS_FOR = {5: 2, 4: 1}  # points for the number of statements judged right; fewer earn none


def _reference_log_statements():
    """Exercise 4's answer: whether each statement of LOG_STATEMENTS is true, and why."""
    return [
        (False, "Only the chief's summaries stay: another worker writes its summaries into a temporary workertemp_<i>/ "
                "folder and deletes it when fit ends (chapter 3 found one event file, the chief's). Its scalars are "
                "the same all-reduced numbers anyway."),
        (False, "profile_batch counts the training steps from 1 over the whole fit, and the profiler runs once: the "
                "fit of 2 epochs of 46 steps in this chapter's 'Watch' section left one trace."),
        (True, "The callback starts the profiler with logdir=self.log_dir on every worker (chapter 3 read it in "
               "tf_keras's _start_trace); on a cluster each host's trace has a name of its own, and TensorBoard's "
               "profile tab lets you pick the host."),
        (True, "MirroredStrategy runs a step as ONE function call whose graph holds all 8 replicas, with their "
               "all-reduces inside it. It is DTensor that launches one program per device."),
        (False, "It shows ONE process row, /host:CPU, and each virtual device is threads of that row (a "
                "parallel_device_execute launcher and an eager_async_executor per device). On GPUs each device would "
                "be a row of its own, /device:GPU:<n>."),
    ]


LOG_STATEMENT_IDEAS = [  # what to revisit when a statement is judged wrong, in the order of LOG_STATEMENTS (no verdict)
    "whose event files chapter 3 found in the log folder after its two workers' fit, and where the other worker "
    "wrote its summaries",
    "how many traces the 2-epoch fit with profile_batch=20 in this chapter's 'Watch' section left in plugins/profile",
    "which workers start the profiler, and with which logdir (chapter 3 read tf_keras's _start_trace)",
    "how many launches of train_function this chapter's 'Watch' section counted in the MirroredStrategy trace",
    "how many process rows the DTensor trace of this chapter's 'Watch' section had, and what stood for each device in "
    "it",
]


class WhereTheLogsGo(Exercise):
    title = "Where the logs go"
    points = 2
    hints = (
        "Chapter 3 ran the TensorBoard callback on two workers and listed what stayed in the log folder; this "
        "chapter's 'Watch' section counted the rows, threads and launches of its two traces.",
        "Summaries and profiles follow different rules under a multi-worker strategy (chapter 3, 'Where each "
        "worker's TensorBoard logs go'). profile_batch counts steps over the whole fit. A trace draws a process row "
        "per plane: which planes does a machine with only (virtual) CPUs have?",
    )

    def grade(self, statements):
        """2 points when all statements are judged right, 1 when one is wrong (or unanswered); what the
        feedback says: :func:`grade_statements`."""
        fb = Feedback()
        grade_statements(fb, statements, _reference_log_statements(), LOG_STATEMENT_IDEAS, LOG_POINTS_FOR)
        return fb


CHAPTER = chapter(9, "Watch and feed a distributed job", {
    "q1": DatasetFnFromFiles, "q2": ShuffleUnderData, "q3": WhoReadsWhat, "q4": WhereTheLogsGo})
