"""Chapter 9 · Watch and feed a distributed job: the exercises' graders and hints."""
import random
import re

from .answers import grade_items, grade_statements, is_placeholder, quiet_tensorflow, short_error
from .core import Exercise, Feedback, chapter

# Exercise 1: the learner's dataset_fn, called by the checker as each of two workers calls it, with the InputContext
# MultiWorkerMirroredStrategy makes there. The notebook's data are the ids 0 ... EXAMPLES - 1 (load_examples()), its
# global batch GLOBAL_BATCH. Every per-replica batch the checker asks for divides the EXAMPLES / WORKERS examples of a
# worker, so that drop_remainder=True loses nothing. A third run calls it as each of WIDER_PIPELINES workers, to catch
# a number of workers typed in (EXAMPLES / WIDER_PIPELINES is still a multiple of every per-replica batch).
GLOBAL_BATCH, EXAMPLES, WORKERS = 64, 640, 2
REPLICA_CHOICES = (4, 8, 16)  # replicas in sync the checker may ask for: per-replica batches of 16, 8 and 4
NOTEBOOK_REPLICAS = (8, 4)  # the two it asks for in a learner's kernel (the chapter's 8 virtual CPUs first)
EPOCHS_READ = 2  # the checker reads at most this many epochs' worth of examples from each pipeline
WIDER_PIPELINES, WIDER_REPLICAS = 4, 4  # the third run: 4 workers of one replica each (per-replica batches of 16)


def replicas_for(seed):
    """The two numbers of replicas in sync for which exercise 1's checker calls the learner's dataset_fn.

    Args:
        seed: 0 in a learner's kernel (the notebook's 8 replicas, then 4); the grader's own seed when grading.

    Returns:
        A tuple of two different numbers from REPLICA_CHOICES.

    Example:
        >>> replicas_for(0)
        (8, 4)
    """
    if seed == 0:
        return NOTEBOOK_REPLICAS
    return tuple(random.Random(seed).sample(REPLICA_CHOICES, 2))


def _context_text(replicas, index, pipelines=WORKERS):
    return (f"tf.distribute.InputContext(num_input_pipelines={pipelines}, input_pipeline_id={index}, "
            f"num_replicas_in_sync={replicas})")


def _shards_whole_batches(dataset):
    """Whether a ShardDataset stage lies above (nearer the output than) a batching stage of ``dataset``: the pipeline
    shards batches, not examples. Walks the dataset's Python objects (``_inputs()``), at most 200 of them."""
    stack, visited = [(dataset, False)], 0
    while stack and visited < 200:
        node, shard_above = stack.pop()
        visited += 1
        name = type(node).__name__
        if shard_above and "Batch" in name and "Unbatch" not in name:
            return True
        try:
            inputs = list(node._inputs())
        except Exception:  # not a tf.data dataset of this TensorFlow: nothing to say
            inputs = []
        stack.extend((child, shard_above or name == "_ShardDataset") for child in inputs)
    return False


def _read_pipeline(dataset_fn, replicas, index, pipelines=WORKERS):
    """Call ``dataset_fn`` as worker ``index`` of ``pipelines`` with ``replicas`` in sync and read its dataset, at most
    EPOCHS_READ x EXAMPLES examples. One of: {"raised": error, "when": "called" | "read"}; {"type": type name of what
    it returned}; {"element": the element spec, when elements are not 1-D integer batches}; {"batches": the ids of
    each batch, "more": whether the dataset had more, "shards_batches": see _shards_whole_batches}."""
    import tensorflow as tf

    context = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=index,
                                         num_replicas_in_sync=replicas)
    try:
        dataset = dataset_fn(context)
    except Exception as err:
        return {"raised": short_error(err), "when": "called"}
    if not isinstance(dataset, tf.data.Dataset):
        return {"type": type(dataset).__name__}
    specs = tf.nest.flatten(dataset.element_spec)
    if len(specs) != 1 or not isinstance(specs[0], tf.TensorSpec) or not specs[0].dtype.is_integer \
            or specs[0].shape.rank != 1:
        return {"element": str(dataset.element_spec)[:200]}
    batches, examples, more = [], 0, False
    try:
        for batch in dataset:
            if examples >= EPOCHS_READ * EXAMPLES:
                more = True
                break
            ids = [int(value) for value in tf.nest.flatten(batch)[0].numpy()]
            batches.append(ids)
            examples += len(ids)
    except Exception as err:
        return {"raised": short_error(err), "when": "read"}
    return {"batches": batches, "more": more, "shards_batches": _shards_whole_batches(dataset)}


def _judge_batch_sizes(pipelines, replicas):
    """What the batch sizes of one run are: ("right" | "global" | "per worker" | "other" | "none", the sorted sizes
    of the full batches, each pipeline's last batch left out)."""
    per_replica = GLOBAL_BATCH // replicas
    full, last = [], []
    for pipeline in pipelines:
        sizes = [len(batch) for batch in pipeline["batches"]]
        if sizes:
            full += sizes[:-1] if len(sizes) > 1 else sizes
            last.append(sizes[-1])
    if not full:
        return "none", []
    sizes = sorted(set(full))
    if sizes == [per_replica] and all(size <= per_replica for size in last):
        return "right", sizes
    if sizes == [GLOBAL_BATCH]:
        return "global", sizes
    if sizes == [GLOBAL_BATCH // WORKERS]:
        return "per worker", sizes
    return "other", sizes


def _judge_shards(pipelines, replicas):
    """What one run's two pipelines read, every id the checker read from them (a repeated pipeline's later epochs
    included): ("right" | "not sharded" | "same part" | "overlap" | "by replicas" | "missing" | "foreign" | "empty",
    details)."""
    sets = [{value for batch in pipeline["batches"] for value in batch} for pipeline in pipelines]
    everything = set(range(EXAMPLES))
    foreign = sorted((sets[0] | sets[1]) - everything)
    if foreign:
        return "foreign", {"values": foreign[:3]}
    empty = [index for index, ids in enumerate(sets) if not ids]
    if empty:
        return "empty", {"pipeline": empty[0]}
    shared, union = sets[0] & sets[1], sets[0] | sets[1]
    if sets[0] == sets[1] == everything:
        return "not sharded", {}
    if sets[0] == sets[1]:
        return "same part", {"size": len(shared)}
    if shared:
        return "overlap", {"shared": len(shared), "missing": len(everything - union)}
    if union == everything:
        return "right", {"sizes": [len(ids) for ids in sets]}
    if union == {i for i in everything if i % replicas < WORKERS}:
        return "by replicas", {"read": len(union)}
    return "missing", {"read": len(union), "missing": len(everything - union)}


def _judge_wider_cover(wider):
    """Whether the WIDER_PIPELINES pipelines of the third run read disjoint parts, none of them empty, that together
    cover all the ids: (True, "") or (False, a few words on what went wrong there)."""
    sets = []
    for index, pipeline in enumerate(wider["pipelines"]):
        called = f"dataset_fn({_context_text(wider['replicas'], index, WIDER_PIPELINES)})"
        if "raised" in pipeline:
            verb = "raised" if pipeline.get("when") == "called" else "gave a dataset whose reading raised"
            error = re.sub(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:.*$", "", str(pipeline["raised"]))
            return False, f"{called} {verb} {error.rstrip('.')}"
        if "batches" not in pipeline:
            return False, f"{called} returned no dataset of batches of ids"
        sets.append({value for batch in pipeline["batches"] for value in batch})
    everything, union = set(range(EXAMPLES)), set().union(*sets)
    shared = {value for i, ids in enumerate(sets) for other in sets[i + 1:] for value in ids & other}
    idle = [index for index, ids in enumerate(sets) if not ids]
    if union == everything and not shared and not idle:
        return True, ""
    missing, foreign = len(everything - union), len(union - everything)
    problems = [text for text, found in ((f"share {len(shared)} examples", shared),
                                         (f"leave {missing} unread", missing),
                                         (f"give pipeline {idle[0] if idle else 0} no example at all", idle),
                                         (f"read {foreign} values that are no ids", foreign)) if found]
    return False, f"the {WIDER_PIPELINES} pipelines {' and '.join(problems)}"


def _judge_whole_batches_alternate(pipelines):
    """Whether pipeline i's batches are the batches i, i + WORKERS, ... of the ids in order, all of one size (the last
    may be smaller): the ids were batched, then the batches split between the workers."""
    sizes = [len(batch) for pipeline in pipelines for batch in pipeline["batches"][:1]]
    if not sizes or len(set(sizes)) != 1:
        return False
    size = sizes[0]
    for index, pipeline in enumerate(pipelines):
        batches = pipeline["batches"]
        for k, batch in enumerate(batches[:-1] if len(batches) > 1 else batches):
            start = (WORKERS * k + index) * size
            if batch != list(range(start, start + size)):
                return False
    return True


def _crash_hint(error):
    if "InputContext" in error and "has no attribute" in error:
        return (" An InputContext has num_input_pipelines, input_pipeline_id, num_replicas_in_sync and "
                "get_per_replica_batch_size(global_batch_size).")
    if "not divisible" in error:
        return " get_per_replica_batch_size takes the GLOBAL batch, GLOBAL_BATCH."
    if "is not defined" in error:
        return " Define everything dataset_fn uses in the notebook (GLOBAL_BATCH, load_examples) before you check."
    return ""


class DatasetFnForTwoWorkers(Exercise):
    title = "A dataset_fn for two workers"
    points = 4
    hints = (
        "Each worker calls dataset_fn once with its own InputContext. Which of its fields says how many pipelines "
        "share the data, which one is this worker's, and which gives the batch one replica needs? And what does each "
        "element of the dataset become: a worker's batch, or a replica's?",
        "Split the examples with dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id) "
        "right after load_examples(), before anything that costs work, then batch by "
        "input_context.get_per_replica_batch_size(GLOBAL_BATCH). Shuffle after the shard (or with the same seed on "
        "every worker before it).",
        "def dataset_fn(input_context):\n"
        "    batch = input_context.get_per_replica_batch_size(GLOBAL_BATCH)\n"
        "    examples = load_examples().shard(input_context.num_input_pipelines, input_context.input_pipeline_id)\n"
        "    return examples.batch(batch)",
    )

    def collect(self, dataset_fn, seed=0):
        """Calls ``dataset_fn`` as each of the WORKERS workers does, for each number of replicas of
        :func:`replicas_for` (``seed``), then as each of WIDER_PIPELINES workers (WIDER_REPLICAS in sync), and reads
        what it returns. What crosses: {"not callable": type name} or {"runs": [{"replicas": R, "pipelines": [what
        _read_pipeline found, per worker]}, ...], "wider": {"replicas": WIDER_REPLICAS, "pipelines": [...]}}."""
        if not callable(dataset_fn):
            return {"not callable": type(dataset_fn).__name__}
        with quiet_tensorflow():
            return {"runs": [{"replicas": replicas,
                              "pipelines": [_read_pipeline(dataset_fn, replicas, index) for index in range(WORKERS)]}
                             for replicas in replicas_for(seed)],
                    "wider": {"replicas": WIDER_REPLICAS,
                              "pipelines": [_read_pipeline(dataset_fn, WIDER_REPLICAS, index, WIDER_PIPELINES)
                                            for index in range(WIDER_PIPELINES)]}}

    def judge(self, data, seed=0):
        """Grades the data of :meth:`collect`: the batch sizes against GLOBAL_BATCH / replicas, the two pipelines'
        examples against a disjoint cover of the ids (and the WIDER_PIPELINES pipelines' too: that run is judged for
        nothing else), and whether whole batches were sharded."""
        fb = Feedback()
        if "not callable" in data:
            fb.wrong(f"dataset_fn should be a function of an InputContext that returns a tf.data.Dataset; got a "
                     f"{data['not callable']}." + (" Pass the function itself, not the dataset it returns."
                                                   if "Dataset" in str(data["not callable"]) else ""))
            return fb
        runs = data["runs"]
        if [run["replicas"] for run in runs] != list(replicas_for(seed)) or "wider" not in data:
            raise ValueError("the answers were read in other runs than this check makes")
        if self._judge_unusable(fb, runs):
            return fb
        self._judge_sizes(fb, runs)
        shards = [_judge_shards(run["pipelines"], run["replicas"]) for run in runs]
        sharded = all(kind == "right" for kind, _ in shards)
        wider, wider_details = _judge_wider_cover(data["wider"]) if sharded else (True, "")
        if sharded and not wider:
            fb.wrong(f"With {WIDER_PIPELINES} pipelines your shards overlap or miss examples: read the number of "
                     f"pipelines from input_context. (Called as each of {WIDER_PIPELINES} workers, {wider_details}.)",
                     answer="Shard with dataset.shard(input_context.num_input_pipelines, "
                            "input_context.input_pipeline_id).")
        elif sharded:
            fb.right(f"the two pipelines read disjoint parts ({' and '.join(map(str, shards[0][1]['sizes']))} "
                     f"examples) that together cover all {EXAMPLES} examples", points=2)
        else:
            kind, details = next((kind, details) for kind, details in shards if kind != "right")
            replicas = runs[[k for k, _ in shards].index(kind)]["replicas"]
            self._judge_explain_shards(fb, kind, details, replicas)
        if sharded:
            whole = any(pipeline["shards_batches"] for run in runs for pipeline in run["pipelines"]) or \
                all(_judge_whole_batches_alternate(run["pipelines"]) for run in runs)
            if whole:
                fb.wrong("Your pipelines split whole batches between the workers: each worker builds every batch of "
                         "the dataset (reads, preprocesses and batches all its examples) and throws away every other "
                         f"one. That is {WORKERS} times the input work on {WORKERS} workers (n times on n), what "
                         "AutoShardPolicy.DATA does, and the input pipeline was the expensive part of the chapter's "
                         "step.", answer="Shard the examples first, right after load_examples(), then batch.")
            else:
                fb.right("the examples are split before batching: each worker reads and batches only its own")
        return fb

    @staticmethod
    def _judge_unusable(fb, runs):
        """Says what is wrong when a pipeline could not be used at all (raised, no dataset, other elements)."""
        for run in runs:
            for index, pipeline in enumerate(run["pipelines"]):
                called = f"dataset_fn({_context_text(run['replicas'], index)})"
                if "raised" in pipeline:
                    error = str(pipeline["raised"])
                    what = "raised" if pipeline.get("when") == "called" else "returned a dataset whose reading raised"
                    fb.wrong(f"{called} {what} {error}.{_crash_hint(error)}")
                    return True
                if "type" in pipeline:
                    kind = str(pipeline["type"])
                    fb.wrong(f"{called} returned a {kind}; it must return a tf.data.Dataset."
                             + (" The strategy makes the distributed dataset from what dataset_fn returns: don't call "
                                "the strategy inside it." if "Distributed" in kind else ""))
                    return True
                if "element" in pipeline:
                    fb.wrong(f"The elements of the dataset {called} returns are {pipeline['element']}; each should "
                             f"be a batch of the ids load_examples() gives (a 1-D tensor of int64): batch the "
                             f"examples, don't change them.")
                    return True
        return False

    @staticmethod
    def _judge_sizes(fb, runs):
        found = [_judge_batch_sizes(run["pipelines"], run["replicas"]) for run in runs]
        replicas = [run["replicas"] for run in runs]
        wanted = [GLOBAL_BATCH // r for r in replicas]
        if all(kind == "right" for kind, _ in found):
            fb.right(f"each element is one replica's batch: {wanted[0]} examples for {replicas[0]} replicas, "
                     f"{wanted[1]} for {replicas[1]}")
            return
        index = next(i for i, (kind, _) in enumerate(found) if kind != "right")
        kind, sizes = found[index]
        said = f"With {replicas[index]} replicas in sync your batches hold {', '.join(map(str, sizes))} examples"
        answer = ("Batch by input_context.get_per_replica_batch_size(GLOBAL_BATCH): "
                  "GLOBAL_BATCH // num_replicas_in_sync.")
        if kind == "none":
            fb.wrong("The pipelines gave no batches at all.")
        elif kind == "global":
            fb.wrong(f"{said}: the GLOBAL batch. With distribute_datasets_from_function each element goes to ONE "
                     f"replica, so a step would use {GLOBAL_BATCH} x {replicas[index]} examples.", answer=answer)
        elif kind == "per worker":
            fb.wrong(f"{said}: the global batch divided by the number of workers. Each element goes to one replica, "
                     f"and a worker has several.", answer=answer)
        elif found[0][1] == found[1][1]:  # the same sizes for two numbers of replicas: a number typed in
            fb.wrong(f"Your batches hold {', '.join(map(str, sizes))} examples whether {replicas[0]} or {replicas[1]} "
                     f"replicas are in sync: the per-replica batch depends on the replicas. Read it from "
                     f"input_context.", answer=answer)
        else:
            fb.wrong(f"{said}; each of the {replicas[index]} replicas needs {wanted[index]}.", answer=answer)

    @staticmethod
    def _judge_explain_shards(fb, kind, details, replicas):
        shard = "Shard with dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)."
        if kind == "not sharded":
            fb.wrong(f"Both pipelines read all {EXAMPLES} examples: each worker trains on the whole dataset, so every "
                     f"example is used once per worker ({WORKERS} times) per epoch and a global batch holds copies.",
                     answer=shard)
        elif kind == "same part":
            fb.wrong(f"Both pipelines read the same {details['size']} examples: each worker must take a different "
                     f"part.", answer="The part's index is input_context.input_pipeline_id.")
        elif kind == "overlap":
            fb.wrong(f"The two pipelines share {details['shared']} examples and leave {details['missing']} unread. Do "
                     f"they shuffle before they shard? Each worker shuffles in its own order unless both use the same "
                     f"seed, and then their shards are not complementary.",
                     answer="Shard first and shuffle within the shard (or shuffle with the same seed on every worker).")
        elif kind == "by replicas":
            fb.wrong(f"Your pipelines read {details['read']} of the {EXAMPLES} examples (with {replicas} replicas): "
                     f"the ids whose remainder by {replicas} is below {WORKERS}. You split the data into "
                     f"num_replicas_in_sync parts, but there are only num_input_pipelines pipelines to read them.",
                     answer="Split into input_context.num_input_pipelines parts.")
        elif kind == "foreign":
            fb.wrong(f"Your pipelines give values that are not ids of load_examples() ({details['values']}): batch "
                     f"the examples as load_examples() gives them.")
        elif kind == "empty":
            fb.wrong(f"Pipeline {details['pipeline']} gave no examples.", answer=shard)
        else:
            fb.wrong(f"Together the two pipelines read {details['read']} of the {EXAMPLES} examples; "
                     f"{details['missing']} are read by no worker.", answer=shard)


# Exercise 2: what each of two workers' copy of a pipeline reads under the default auto-shard policy, AUTO, for the
# three cases of SHARDING_CASES, each answered with one of the words of READINGS. The chapter runs the same cases with
# input_ops.auto_shard_dataset(dataset, 2, worker, 2), the sharding step the strategy applies to each worker's copy
# (after it rebatches each global batch into per-replica pieces; the cases are unbatched, so DATA keeps every 2nd
# element).
SHARDING_CASES = {  # the exercise's cases, as the notebook lists them
    "four_files": "tf.data.TFRecordDataset([f0, f1, f2, f3]): four TFRecord files of records",
    "mnist_train": 'tfds.load("mnist", split="train", as_supervised=True): MNIST\'s training split, straight from TFDS',
    "in_memory": "tf.data.Dataset.range(8): the numbers 0 to 7, in memory",
}
READINGS = {  # the menu of answers, as the notebook lists it (every case is one of them)
    "by file": "each worker reads only files of its own: worker 0 the files 0, 2, ..., worker 1 the files 1, 3, ...",
    "by element": "each worker reads all the data and keeps every 2nd element: worker 0 the elements 0, 2, 4, ..., "
                  "worker 1 the elements 1, 3, 5, ...",
    "everything": "nothing is split: both workers read and keep all the data",
    "error": "a worker's pipeline raises an error when it is read",
}
READING_WORDS = {  # what else a learner may type for each answer (compared in lower case, spaces collapsed)
    "by file": ("file", "files", "by files", "per file", "file based", "file sharding", "shard by file",
                "sharded by file", "split by file", "by file name"),
    "by element": ("element", "elements", "by elements", "per element", "by element every 2nd",
                   "every 2nd element", "every second element", "by data", "data", "data based", "data sharding",
                   "shard by element", "sharded by element", "split by element", "shard by data", "sharded by data",
                   "by example", "by examples", "by record", "by records"),
    "everything": ("all", "all the data", "every worker reads everything", "each worker reads everything",
                   "both read everything", "both workers read everything", "no split", "not split", "no sharding",
                   "not sharded", "unsharded", "off"),
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
    """Exercise 2's answer."""
    return {"four_files": "by file", "mnist_train": "error", "in_memory": "by element"}


def _reference_reading_why():
    """Why each wrong answer of exercise 2 is wrong (it rules the answer out without naming the right one)."""
    everything = ("Under AUTO, the default, the strategy does shard each worker's copy of the pipeline: only OFF "
                  "leaves it whole.")
    return {
        ("four_files", "by element"): "AUTO shards by DATA (every 2nd element) only when tf.data finds NO file-reading "
                                      "source in the pipeline, and a TFRecordDataset is one.",
        ("four_files", "everything"): everything,
        ("four_files", "error"): "FILE sharding fails only with fewer files than workers; here 4 files meet 2 workers.",
        ("mnist_train", "by element"): "AUTO does not fall back from FILE to DATA because the files are too few: it "
                                       "falls back only when it finds no file-reading source at all, and TFDS reads "
                                       "MNIST with a TFRecord reader.",
        ("mnist_train", "by file"): "AUTO does choose FILE sharding here (TFDS reads a TFRecord file). Count the "
                                    "files: what does FILE sharding do with fewer files than workers?",
        ("mnist_train", "everything"): everything + " A pipeline with few files is sharded too.",
        ("in_memory", "by file"): "range(8) reads no file: there is no list of files to split.",
        ("in_memory", "everything"): everything + " In-memory data are sharded too.",
        ("in_memory", "error"): "The FILE sharding error needs a file-reading source, and range(8) has none.",
    }


def _reference_reading_answers():
    """What exercise 2's right answers are, as the chapter showed them."""
    return {
        "four_files": "It is 'by file': worker 0 reads f0 and f2, worker 1 f1 and f3, each opening only its own files "
                      "(the chapter's AUTO and FILE rows on 2 workers).",
        "mnist_train": "It is 'error': MNIST's training split is ONE file, so worker 0 fails with 'Could not apply "
                       "FILE based sharding: the dataset only has 1 file(s)' and worker 1 silently gets nothing. That "
                       "is why load_mnist sets AutoShardPolicy.DATA.",
        "in_memory": "It is 'by element': with no file to split, AUTO shards by DATA: worker 0 gets 0, 2, 4, 6 and "
                     "worker 1 gets 1, 3, 5, 7.",
    }


class WhoReadsWhat(Exercise):
    title = "Who reads what"
    points = 3
    hints = (
        "For each case ask what tf.data asks under AUTO: does the pipeline read files (a file-reading source such as "
        "TFRecordDataset)? If it does, how many files are there for how many workers?",
        "Under AUTO, tf.data looks for a file-reading source. Found: it shards by FILE (worker i reads the files i, "
        "i + 2, ...), which needs at least as many files as workers. Not found: it shards by DATA. It does not switch "
        "from FILE to DATA because there are too few files. The chapter's 'Who reads what' cells ran every case.",
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
                return (f"{raw!r}: AUTO is the policy in all three cases; say what it does here, with one of {menu}.",
                        "")
            return f"{raw!r}: answer with one of {menu}.", ""

        return grade_items(Feedback(), readings, _reference_readings(), explain, lambda v: v,
                           f"each one of {menu}")


# Exercise 3: true or false, about TensorBoard's logs under a strategy and about reading a trace.
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
    """Exercise 3's answer: whether each statement of LOG_STATEMENTS is true, and why."""
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
    "q1": DatasetFnForTwoWorkers, "q2": WhoReadsWhat, "q3": WhereTheLogsGo})
