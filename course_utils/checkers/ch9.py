"""Chapter 9 · Watch and feed a distributed job: the exercises' graders and hints.

Exercises 1 and 2 (the learner's pipelines, run by the checker) live in :mod:`.ch9_files` and :mod:`.ch9_pipeline`;
this module holds the prediction (exercise 3) and the true-or-false statements (exercise 4), which need no
TensorFlow to check.
"""
import functools
import itertools
import re

from . import ch9_texts
from .answers import grade_items, grade_statements, is_placeholder
from .ch9_files import DatasetFnFromFiles
from .ch9_pipeline import ShuffleUnderData
from .core import Exercise, Feedback, chapter
from .variants import NUMBER_WORDS

# Exercise 3: what each of a job's workers' copy of a pipeline reads under the default auto-shard policy, AUTO, for the
# cases of SHARDING_CASES, none of which the chapter ran, each answered with one of the words of READINGS. The cases
# are made from files[:n], n TFRecord files, n per case; the exercise notebook's "Watch it" cell runs them with
# input_ops.auto_shard_dataset(dataset, workers, worker, workers), the sharding step the strategy applies to each
# worker's copy (after it rebatches; the cases are unbatched, so DATA keeps every workers-th element). It varies per
# student (:mod:`.variants`): the workers and each case's files. Measured (test_variants runs the watch cell): a case
# with fewer files (or, by DATA, elements) than workers fails on the workers 0 .. n-1 with "Could not apply FILE based
# sharding", even when it shards by DATA, and the workers n .. workers-1 read nothing.
WHO_WORKERS, WHO_MANY_FILES, WHO_FEW_FILES = 4, 6, 3
READINGS_TOOLS = ("tensorflow.python.distribute.input_ops:auto_shard_dataset",  # what prints exercise 3's answer
                  "tensorflow.python.data.experimental.ops.distribute:_AutoShardDataset")  # the dataset it makes
SHARDING_CASES = ("many_files", "few_files", "interleaved", "whole_files")  # the exercise's cases, in its order
FILE_CASES = ("many_files", "few_files", "interleaved")  # the cases with a file-reading dataset (FILE, or its error)
DRAWN_WORKERS = range(2, 7)  # a variant's workers; each case's files: 1 to 2 x workers - 1 (too few below workers)
FAILING_SETS = [  # the cases a variant makes fail: any set in which "few_files" fails when "many_files" does, but the
    set(cases) for size in range(len(SHARDING_CASES) + 1)  # defaults' (a copy of the self-study answer would pass)
    for cases in itertools.combinations(SHARDING_CASES, size)
    if ("many_files" not in cases or "few_files" in cases) and cases != ("few_files",)]


def _nth(n):
    """2 -> '2nd', 4 -> '4th' (for the small numbers of workers here)."""
    return f"{n}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(n, 'th')}"


def _readings_menu(workers=WHO_WORKERS):
    """The menu of answers, as the notebook lists it for ``workers`` workers (every case is one of them)."""
    return {
        "by file": f"each worker reads only files of its own: worker i the files i, i + {workers}, ...",
        "by element": f"each worker reads all the data and keeps every {_nth(workers)} element: worker 0 the elements "
                      f"0, {workers}, {2 * workers}, ..., worker 1 the elements 1, {workers + 1}, ...",
        "everything": "nothing is split: every worker reads and keeps all the data",
        "error": "a worker's pipeline raises an error when it is read",
    }


READINGS = _readings_menu()  # the defaults' menu (its keys are the answers of every variant)
READING_WORDS = {  # what else a learner may type for each answer (compared in lower case, spaces collapsed)
    "by file": ("file", "files", "by files", "per file", "file based", "file sharding", "shard by file",
                "sharded by file", "split by file", "by file name"),
    "by element": ("element", "elements", "by elements", "per element", "by data", "data", "data based",
                   "data sharding", "shard by element", "sharded by element", "split by element", "shard by data",
                   "sharded by data", "by example", "by examples", "by record", "by records"),
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


@functools.lru_cache(maxsize=None)
def _reading_of(workers):
    """{plain words: answer} of every spelling :data:`READING_WORDS` and the menu for ``workers`` workers allow."""
    menu = _readings_menu(workers)
    return {_plain_words(text): reading for reading, words in READING_WORDS.items()
            for text in (reading, *words, menu[reading])}


def _normalize_reading(value, workers=WHO_WORKERS):
    """One of READINGS from what a learner typed: "by file", " By File ", "FILE", "AutoShardPolicy.DATA",
    "by element (every 2nd)", "error: worker 0 fails", "every worker reads everything", a line of the menu for
    ``workers`` workers copied whole, ..., or else text that holds the keyword (READING_KEYWORDS) of exactly one answer
    ("worker 0 errors", "element-wise"); other text as :func:`_plain_words` gives it, anything else unchanged.

    Example:
        >>> _normalize_reading("AutoShardPolicy.DATA"), _normalize_reading("By element (every 2nd)")
        ('by element', 'by element')
    """
    if not isinstance(value, str):
        return value
    text, known = _plain_words(value), _reading_of(workers)
    if text in known:
        return known[text]
    head = re.split(r"[:(;,]", text, maxsplit=1)[0].strip()  # "by element (every 2nd)", "error: worker 0 fails"
    if head in known:
        return known[head]
    found = [reading for reading, keyword in READING_KEYWORDS.items() if re.search(keyword, text)]
    return found[0] if len(found) == 1 else text  # "error on worker 0", "element-wise"; "all the files": neither


def _kept_code(workers, guarded):
    """The watch cell's count of the elements one worker keeps of whole_files; ``guarded``: catching its error (the
    variants', whose whole_files may fail; the defaults' cell as it was)."""
    kept = f'kept = len(list(input_ops.auto_shard_dataset(cases["whole_files"], {workers}, worker, {workers})))'
    if not guarded:
        return kept
    return (f"try:\n{' ' * 16}{kept}\n{' ' * 12}except tf.errors.OpError as err:\n{' ' * 16}"
            f"kept = f\"none ({{type(err).__name__}})\"")


def _shard_defaults():
    return {"workers": WHO_WORKERS, "many_files": WHO_MANY_FILES, "few_files": WHO_FEW_FILES,
            "interleaved": WHO_MANY_FILES, "whole_files": WHO_MANY_FILES}


def _reference_readings(params=None):
    """Exercise 3's answer for ``params`` (default: the defaults): a case with fewer files than workers fails (by FILE
    and, measured, by DATA too); else the cases with a file-reading dataset shard by FILE, whole_files by DATA."""
    p = params or _shard_defaults()
    return {case: "error" if p[case] < p["workers"] else "by file" if case in FILE_CASES else "by element"
            for case in SHARDING_CASES}


def _workers_text(first, last, verb=("", "")):
    """(0, 2, ('fails', 'fail')) -> 'workers 0-2 fail'; (3, 3, ('gets nothing', ...)) -> 'worker 3 gets nothing'."""
    if first == last:
        return f"worker {first} {verb[0]}".rstrip()
    names = f"workers {first}-{last}" if last > first + 1 else f"workers {first} and {last}"
    return f"{names} {verb[1]}".rstrip()


def _files(n, what="files"):
    """(1, 'files') -> '1 file'; (3, 'TFRecord files') -> '3 TFRecord files'."""
    return f"{n} {what[:-1] if n == 1 else what}"


def _error_text(files, workers):
    """Who fails, and who reads nothing, when ``files`` files (or elements) meet ``workers`` workers."""
    failing = _workers_text(0, files - 1, ("fails", "fail"))
    return f"{failing}, {_workers_text(files, workers - 1, ('gets nothing', 'get nothing'))}"


def _files_of_workers(files, workers):
    """[[the files worker 0 opens], ...] when ``files`` files are split by FILE over ``workers`` workers."""
    return [list(range(worker, files, workers)) for worker in range(workers)]


def _reference_reading_why(params=None):
    """Why each wrong answer of exercise 3 is wrong (it rules the answer out without naming the right one)."""
    p = params or _shard_defaults()
    workers, truth = p["workers"], _reference_readings(p)
    everything = ("Under AUTO, the default, the strategy does shard each worker's copy of the pipeline: only OFF "
                  "leaves it whole.")
    reader = {"many_files": "a TFRecordDataset", "few_files": "a TFRecordDataset",
              "interleaved": "the TFRecordDataset inside interleave's function"}
    why = {}
    for case in SHARDING_CASES:
        n = p[case]
        why[case, "everything"] = everything + (" A pipeline with few files is sharded too." if n < workers else "")
        enough = f"Here {_files(n)} meet {workers} workers" + (": that they do not divide evenly is no error." if
                                                             n % workers else ".")
        if case in FILE_CASES and truth[case] == "by file":
            why[case, "by element"] = (
                "The auto-shard rewrite looks inside the function of interleave (and of flat_map) too, for a reader "
                "that reads the function's argument." if case == "interleaved" else
                "AUTO shards by DATA (every element to one worker) only when tf.data finds NO file-reading dataset "
                "in the pipeline, and a TFRecordDataset is one.")
            why[case, "error"] = f"FILE sharding fails only with fewer files than workers. {enough}"
        elif case in FILE_CASES:
            why[case, "by element"] = ("AUTO does not fall back from FILE to DATA because the files are too few: it "
                                       "falls back only when it finds no file-reading dataset at all.")
            why[case, "by file"] = (f"AUTO does choose FILE sharding here ({reader[case]}). Count the files: what "
                                    f"does FILE sharding do with fewer files than workers?")
        elif truth[case] == "by element":
            why[case, "by file"] = ("tf.io.read_file is an operation inside a map, not a file-reading dataset: which "
                                    "reader can tf.data find in this pipeline to split by file?")
            why[case, "error"] = (f"Sharding fails only when there are fewer elements than workers. Here {n} "
                                  f"elements (whole files) meet {workers} workers.")
        else:
            why[case, "by element"] = (f"Count the elements: {_files(n, 'whole files')} for {workers} workers. tf.data "
                                       f"does shard this pipeline by DATA, but the shard it inserts then makes the "
                                       f"same check as the FILE one the chapter read in the source: that every worker "
                                       f"can get at least one element. What does that check do on a worker that gets "
                                       f"one?")
            why[case, "by file"] = ("tf.io.read_file is an operation inside a map, not a file-reading dataset; and "
                                    f"count the elements: {_files(n, 'whole files')} for {workers} workers.")
    return why


def _reference_reading_answers(params=None):
    """What exercise 3's right answers are, and why, as the exercise notebook's "Watch it" cell shows them."""
    p = params or _shard_defaults()
    workers, truth, answers = p["workers"], _reference_readings(p), {}
    for case in SHARDING_CASES:
        n = p[case]
        if truth[case] == "error":
            answers[case] = (f"It is 'error': {_files(n)} for {workers} workers. Every worker that gets "
                             f"{'a file' if case in FILE_CASES else 'an element'} fails with 'Could not apply FILE "
                             f"based sharding' (the message says FILE even when tf.data shards by DATA), and "
                             f"{_workers_text(n, workers - 1)}, which {'gets' if n == workers - 1 else 'get'} none, "
                             f"silently {'reads' if n == workers - 1 else 'read'} nothing.")
        elif case == "whole_files":
            answers[case] = (f"It is 'by element': tf.data finds no file-reading dataset, so AUTO shards by DATA at "
                             f"the end: every worker reads all {n} files and keeps every {_nth(workers)}. The elements "
                             f"are whole files, so worker 0 keeps the files {_files_of_workers(n, workers)[0]}, as by "
                             f"file, but only after reading all {n}.")
        elif case == "interleaved":
            answers[case] = ("It is 'by file': the rewrite finds the TFRecordDataset inside interleave's function, "
                             "reading its argument, and shards the list of file names before it: each worker opens "
                             f"only its own files ({_file_groups(n, workers)}).")
        else:
            answers[case] = (f"It is 'by file': worker i opens the files i, i + {workers}, ... only: "
                             f"{_file_groups(n, workers)}.")
    return answers


def _file_groups(files, workers):
    """'worker 0 the files [0, 4], worker 1 [1, 5], worker 2 [2], worker 3 [3]'."""
    groups = _files_of_workers(files, workers)
    return ", ".join([f"worker 0 the files {groups[0]}", *(f"worker {w} {g}" for w, g in enumerate(groups) if w)])


def _reference_solution_comment(case, p):
    """The comment of ``case``'s line in the solution cell (the defaults' as the notebook had them)."""
    workers, n, truth = p["workers"], p[case], _reference_readings(p)[case]
    if case == "whole_files":
        return ("read_file is no reader dataset: DATA, " +
                (f"each worker reads all {n} files" if truth != "error" else
                 f"but {_files(n)} for {workers} workers: {_error_text(n, workers)}"))
    if truth == "by file" and case == "interleaved":
        again = " again" if _reference_readings(p)["many_files"] == "by file" else ""
        return f"the reader inside interleave's function is found: FILE{again}"
    if truth == "by file":
        groups = " | ".join(", ".join(map(str, group)) for group in _files_of_workers(n, workers))
        return f"a file reader, and enough files: AUTO shards by FILE ({groups})"
    found = {"many_files": "a file reader: FILE", "few_files": "still FILE",
             "interleaved": "the reader inside interleave's function is found: FILE"}[case]
    return f"{found}, but {_files(n)} for {workers} workers: {_error_text(n, workers)}"


class WhoReadsWhat(Exercise):
    title = "Who reads what"
    points = len(SHARDING_CASES)  # one per case
    # A prediction: the sharding step itself (the chapter's what_auto_shard_gives calls it) prints the answer, so the
    # check counts only before input_ops (or the data_distribute module, which holds the dataset it makes) is in reach.
    revealed_by = READINGS_TOOLS
    defaults = _shard_defaults()
    templates = {"c10": ch9_texts.READINGS_QUESTION, "ch9-q3": ch9_texts.READINGS_SOLUTION,
                 "c13": ch9_texts.READINGS_WATCH_TEXT, "c14": ch9_texts.READINGS_WATCH}
    hints = (
        "For each case ask what tf.data asks under AUTO: does the pipeline hold a dataset that reads files (such as "
        "TFRecordDataset, also inside the function of interleave or flat_map)? If it does, how many files are there "
        "for how many workers?",
        "Under AUTO, tf.data looks for a file-reading source. Found: it shards by FILE (worker i reads the files i, "
        "i + n, ...), which needs at least as many files as workers. Not found: it shards by DATA, at the very end of "
        "the pipeline. It does not switch from FILE to DATA because there are too few files. An operation that reads "
        "a file (tf.io.read_file) is no file-reading dataset. Either way, every worker must get at least one file or "
        "element.",
    )

    @staticmethod
    def draw(rng):
        """Which cases fail first, evenly over FAILING_SETS; then workers 2-6 (3-6 when both record cases fail) and,
        per case, 1 to workers - 1 files when it fails, workers to 2 x workers - 1 when it does not ("many_files"
        more than "few_files")."""
        failing = rng.choice(FAILING_SETS)
        both = {"many_files", "few_files"} <= failing
        workers = rng.choice([w for w in DRAWN_WORKERS if w >= 3 or not both])
        pools = {case: range(1, workers) if case in failing else range(workers, 2 * workers) for case in SHARDING_CASES}
        if ("many_files" in failing) == ("few_files" in failing):
            few, many = sorted(rng.sample(pools["few_files"], 2))
        else:
            few, many = rng.choice(pools["few_files"]), rng.choice(pools["many_files"])
        return {"workers": workers, "many_files": many, "few_files": few,
                "interleaved": rng.choice(pools["interleaved"]), "whole_files": rng.choice(pools["whole_files"])}

    def text_values(self):
        p = self.params
        most, workers = max(p[case] for case in SHARDING_CASES), p["workers"]
        same = lambda case: f"the same {p[case]} files" if p[case] == p["many_files"] else _files(p[case])  # noqa: E731
        slices = "tf.data.Dataset.from_tensor_slices(files[:{}])"
        interleave = f"{slices.format(p['interleaved'])}.interleave(tf.data.TFRecordDataset, "
        indent = " " * len(f'            "interleaved": {interleave}')
        names_note = ("" if p == _shard_defaults() else " The keys only name the cases: the table's code says how "
                      "many files each one reads.")
        return {**p, "names_note": names_note, "workers_word": NUMBER_WORDS[workers], "most": most,
                "most_word": NUMBER_WORDS.get(most, most),
                "nth": _nth(workers), "twice": 2 * workers, "plus_one": workers + 1,
                "many_files_code": f"tf.data.TFRecordDataset(files[:{p['many_files']}])",
                "few_files_code": f"tf.data.TFRecordDataset(files[:{p['few_files']}])",
                "many_files_text": f"the records of {_files(p['many_files'], 'TFRecord files')}",
                "few_files_text": f"the records of {_files(p['few_files'], 'TFRecord files')}",
                "interleaved_code": interleave + "cycle_length=2)",
                "interleaved_text": f"the records of {same('interleaved')}, two files read side by side",
                "interleaved_watch": f"{interleave.rstrip()}\n{indent[:-len('tf.data.TFRecordDataset, ')]}"
                                     f"cycle_length=2)",
                "whole_files_code": f"{slices.format(p['whole_files'])}.map(tf.io.read_file)",
                "whole_files_text": f"each of {same('whole_files')} read whole, as one element",
                "whole_files_watch": f"{slices.format(p['whole_files'])}.map(read_whole)",
                "kept": _kept_code(workers, guarded=p != _shard_defaults())}

    def reference_values(self):
        truth, lines = _reference_readings(self.params), []
        for number, case in enumerate(SHARDING_CASES):
            start = "readings = {" if number == 0 else " " * 12
            end = "}" if number == len(SHARDING_CASES) - 1 else ","
            comment = _reference_solution_comment(case, self.params)
            lines.append(f'{start}"{case}": "{truth[case]}"{end}'.ljust(42) + f"# {comment}")
        return {"readings_code": "\n".join(lines)}

    def grade(self, readings):
        workers = self.params["workers"]
        if isinstance(readings, dict):
            readings = {k: (v if is_placeholder(v) else _normalize_reading(v, workers)) for k, v in readings.items()}
        why, answers = _reference_reading_why(self.params), _reference_reading_answers(self.params)
        menu = ", ".join(repr(reading) for reading in READINGS)

        def explain(case, given, raw):
            if isinstance(given, str) and (case, given) in why:
                return why[(case, given)], answers[case]
            if given == "auto":
                return (f"{raw!r}: AUTO is the policy in every case; say what it does here, with one of {menu}.",
                        "")
            return f"{raw!r}: answer with one of {menu}.", ""

        return grade_items(Feedback(), readings, _reference_readings(self.params), explain, lambda v: v,
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
