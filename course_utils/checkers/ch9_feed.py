"""Chapter 9 · the build-and-run exercises on feeding a job, each run by the checker on inputs of its own: a
``dataset_fn`` that reads files (exercise 1) and a shuffled, cached pipeline under ``DATA`` sharding (exercise 2).

What the checker reads crosses as plain data: the example ids each simulated worker's pipeline gave, in order, and
how often the checker's ``decode`` ran. Every example of the checker's data is its id, so who read what is visible.
"""
import random
import tempfile
from collections import Counter
from pathlib import Path

from .answers import quiet_tensorflow, short_error
from .core import Exercise, Feedback
from .reach import tools_used_by

EPOCHS_READ = 2  # the checker reads each pipeline for two epochs: a shuffle must change the order between them
# How much of its files' own record order a shuffled epoch may keep (see file_order_kept). Measured on 240 and 160
# examples per pipeline: a buffer as large as the pipeline's share keeps about 0.0 (at most 0.09 in 16 runs), 100
# about 0.1, 32 about 0.4 (0.6 after an interleave), 16 about 0.65, 2 or shuffling only the file names 0.99 to 1.
ORDER_KEPT_MOST = 0.5


def write_job_files(folder, files, records_per_file):
    """Write a job's training data as TFRecord files; record ``r`` of file ``f`` is the example id
    ``f * records_per_file + r``, as text (``tf.strings.to_number`` reads it back).

    Args:
        folder: an existing folder to write into.
        files: how many files.
        records_per_file: how many records each file holds.

    Returns:
        The paths of the files, as strings, in file order (``part-00-of-12.tfrecord``, ...).

    Raises:
        ValueError: ``files`` or ``records_per_file`` is not a positive whole number.

    Example:
        >>> paths = write_job_files(tempfile.mkdtemp(), files=2, records_per_file=3)  # ids 0 1 2 | 3 4 5
        >>> [Path(p).name for p in paths]
        ['part-00-of-02.tfrecord', 'part-01-of-02.tfrecord']
    """
    for name, value in (("files", files), ("records_per_file", records_per_file)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}.")
    import tensorflow as tf

    paths = []
    for f in range(files):
        path = str(Path(folder) / f"part-{f:02d}-of-{files:02d}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for r in range(records_per_file):
                writer.write(str(f * records_per_file + r).encode())
        paths.append(path)
    return paths


def _flat_ids(batch):
    return [int(value) for value in batch.numpy().reshape(-1)]


def _is_id_batches(dataset):
    """None when the elements of ``dataset`` are 1-D integer batches, else the element spec as text."""
    import tensorflow as tf

    specs = tf.nest.flatten(dataset.element_spec)
    if len(specs) == 1 and isinstance(specs[0], tf.TensorSpec) and specs[0].dtype.is_integer \
            and specs[0].shape.rank == 1:
        return None
    return str(dataset.element_spec)[:200]


def _built(build, *args):
    """``(dataset, None)`` when ``build(*args)`` returns a dataset of 1-D integer batches, else ``(None, what went
    wrong)``: {"raised": error, "when": "called"}, {"type": type name} or {"element": the element spec}."""
    import tensorflow as tf

    try:
        dataset = build(*args)
    except Exception as err:
        return None, {"raised": short_error(err), "when": "called"}
    if not isinstance(dataset, tf.data.Dataset):
        return None, {"type": type(dataset).__name__}
    element = _is_id_batches(dataset)
    return (None, {"element": element}) if element else (dataset, None)


def _judge_unusable(fb, read, called, element_hint, crash_hint=lambda error: ""):
    """Says what is wrong when a pipeline could not be read (see :func:`_built` and :func:`_read`); whether it was."""
    if "raised" in read:
        what = "raised" if read["when"] == "called" else "gave a dataset whose reading raised"
        fb.wrong(f"{called} {what} {read['raised']}.{crash_hint(str(read['raised']))}")
    elif "type" in read:
        fb.wrong(f"{called} returned a {read['type']}; it must return a tf.data.Dataset."
                 + (" The strategy makes the distributed dataset from what dataset_fn returns: don't call the "
                    "strategy inside it." if "Distributed" in read["type"] else ""))
    elif "element" in read:
        fb.wrong(f"The elements of what {called} returned are {read['element']}: {element_hint}")
    else:
        return False
    return True


def _read(dataset, most):
    """The batches of ``dataset`` as lists of ids, at most ``most`` ids (then "more": True), or what raised."""
    batches, count = [], 0
    try:
        for batch in dataset:
            if count >= most:
                return {"batches": batches, "more": True}
            batches.append(_flat_ids(batch))
            count += len(batches[-1])
    except Exception as err:
        return {"raised": short_error(err), "when": "read"}
    return {"batches": batches, "more": False}


def _epochs(ids, more, per_epoch):
    """The first two epochs of a pipeline's ids: halves of what it gave, or ``per_epoch`` each if it never ended."""
    length = per_epoch if more else len(ids) // EPOCHS_READ
    return [ids[e * length:(e + 1) * length] for e in range(EPOCHS_READ)]


def file_order_kept(ids, records_per_file):
    """How much of each file's own record order a pipeline's epoch kept: the mean, over the files it read, of the rank
    correlation between a record's index in its file and its place in the epoch (1: every file read in order, as
    when only the file names are shuffled or the shuffle buffer is tiny; about 0: the records well mixed).

    Args:
        ids: the example ids in the order the pipeline gave them; id ``f * records_per_file + r`` is record ``r``
            of file ``f`` (:func:`write_job_files`).
        records_per_file: the records each file holds.

    Example:
        >>> file_order_kept([0, 1, 2, 10, 11, 12], 10), file_order_kept([2, 1, 0, 12, 11, 10], 10)
        (1.0, -1.0)
    """
    import numpy as np

    by_file = {}
    for example in ids:
        by_file.setdefault(example // records_per_file, []).append(example % records_per_file)
    kept = [np.corrcoef(np.arange(len(records)), np.argsort(np.argsort(records)))[0, 1]
            for records in by_file.values() if len(records) > 2]
    return round(float(np.mean(kept)), 3) if kept else 0.0


def _coverage(parts, everything):
    """How the workers' (or pipelines') id lists ``parts`` cover ``everything``: one of "right", "foreign", "empty",
    "not sharded", "same part", "overlap", "missing", with counts (covered, read by more than one, missing)."""
    sets = [set(part) for part in parts]
    counts = Counter(value for ids in sets for value in ids)
    union = set(counts)
    details = {"covered": len(union & everything), "shared": sum(1 for n in counts.values() if n > 1),
               "missing": len(everything - union), "sizes": [len(ids) for ids in sets]}
    if union - everything:
        return "foreign", dict(details, values=sorted(union - everything)[:3])
    if any(not ids for ids in sets):
        return "empty", dict(details, pipeline=[not ids for ids in sets].index(True))
    if all(ids == everything for ids in sets):
        return "not sharded", details
    if all(ids == sets[0] for ids in sets):
        return "same part", details
    if details["shared"]:
        return "overlap", details
    return ("right" if union == everything else "missing"), details


# Exercise 1: make_dataset_fn(files, global_batch) -> dataset_fn, called by the checker with files it writes itself
# (Q1_FILES files of Q1_RECORDS_PER_FILE records) and its own global batch, as each input pipeline of two jobs calls
# it: two workers, then a chief and two workers (three pipelines, the chief first), each job with its own number of
# replicas in sync. Every per-replica batch divides every pipeline's share of the examples (240 and 160), so that each
# epoch ends with a full batch.
Q1_FILES, Q1_RECORDS_PER_FILE, Q1_GLOBAL_BATCH = 12, 40, 80
Q1_EXAMPLES = Q1_FILES * Q1_RECORDS_PER_FILE
Q1_PIPELINES = (2, 3)  # two workers; a chief and two workers
Q1_REPLICA_CHOICES = (4, 8, 16)  # per-replica batches of 20, 10 and 5
Q1_NOTEBOOK_REPLICAS = (8, 4)  # the runs' replicas in a learner's kernel (seed 0)


def q1_runs(seed):
    """The (input pipelines, replicas in sync) of each run exercise 1's checker makes.

    Args:
        seed: 0 in a learner's kernel; the grader's own seed when grading.

    Example:
        >>> q1_runs(0)
        [(2, 8), (3, 4)]
    """
    replicas = Q1_NOTEBOOK_REPLICAS if seed == 0 else random.Random(seed).sample(Q1_REPLICA_CHOICES, len(Q1_PIPELINES))
    return list(zip(Q1_PIPELINES, replicas))


def _pipeline_name(pipelines, index):
    """Who calls pipeline ``index`` of a run with ``pipelines`` pipelines: the chief comes first in the job with one."""
    if pipelines == 3:
        return "the chief" if index == 0 else f"worker {index - 1}"
    return f"worker {index}"


def _context_text(pipelines, index, replicas):
    return (f"{_pipeline_name(pipelines, index)}'s dataset_fn(InputContext(num_input_pipelines={pipelines}, "
            f"input_pipeline_id={index}, num_replicas_in_sync={replicas}))")


def _read_q1_pipeline(dataset_fn, pipelines, index, replicas):
    import tensorflow as tf

    context = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=index,
                                         num_replicas_in_sync=replicas)
    dataset, problem = _built(dataset_fn, context)
    return problem or _read(dataset.repeat(EPOCHS_READ), EPOCHS_READ * Q1_EXAMPLES)


def _pipeline_epochs(run):
    """Each pipeline's ids of a run of exercise 1, as its two epochs."""
    return [_epochs([i for b in read["batches"] for i in b], read["more"], Q1_EXAMPLES // run["pipelines"])
            for read in run["reads"]]


def _judge_q1_sizes(fb, runs):
    """1 point when every batch of every run is one replica's batch (global batch / replicas in sync)."""
    for run in runs:
        wanted = Q1_GLOBAL_BATCH // run["replicas"]
        sizes = sorted({len(batch) for read in run["reads"] for batch in read["batches"]})
        if sizes != [wanted]:
            said = f"With {run['replicas']} replicas in sync your batches hold {', '.join(map(str, sizes))} examples"
            if sizes == [Q1_GLOBAL_BATCH]:
                why = ("the GLOBAL batch. With distribute_datasets_from_function each element goes to ONE replica, "
                       f"so a step would use {Q1_GLOBAL_BATCH} x {run['replicas']} examples")
            elif sizes == [Q1_GLOBAL_BATCH // run["pipelines"]]:
                why = "the global batch divided by the number of pipelines; each element goes to one replica"
            else:
                why = f"each of the {run['replicas']} replicas needs {wanted} (global_batch / replicas in sync)"
            fb.wrong(f"{said}: {why}.", answer="Batch by input_context.get_per_replica_batch_size(global_batch).")
            return
    fb.right("each element is one replica's batch: " + ", ".join(
        f"{Q1_GLOBAL_BATCH // run['replicas']} examples for {run['replicas']} replicas" for run in runs))


def _judge_q1_cover(fb, runs):
    """2 points when, in every run and both epochs, the pipelines read disjoint parts covering every example. Returns
    whether they did."""
    everything = set(range(Q1_EXAMPLES))
    for run in runs:
        epochs = _pipeline_epochs(run)
        for epoch in range(EPOCHS_READ):
            twice = [len(pipeline[epoch]) - len(set(pipeline[epoch])) for pipeline in epochs]
            if any(twice):
                index = [n > 0 for n in twice].index(True)
                fb.wrong(f"{_pipeline_name(run['pipelines'], index).capitalize()}'s pipeline gave {twice[index]} of "
                         f"its examples twice within one epoch ({len(epochs[index][epoch])} examples, epoch "
                         f"{epoch + 1}), so it missed as many. Does its shuffle come after a repeat()? It then mixes "
                         f"the epochs. Or does it read a file twice?",
                         answer="Shuffle before repeat() (or leave repeat() out: a training loop starts each epoch "
                                "anew).")
                return False
            kind, d = _coverage([pipeline[epoch] for pipeline in epochs], everything)
            if kind == "right":
                continue
            where = (f"Called as the {run['pipelines']} pipelines of "
                     f"{'a chief and two workers' if run['pipelines'] == 3 else str(run['pipelines']) + ' workers'}, "
                     f"epoch {epoch + 1}")
            shard = ("Shard the list of files: from_tensor_slices(files).shard(input_context.num_input_pipelines, "
                     "input_context.input_pipeline_id), before reading it.")
            if kind == "not sharded":
                fb.wrong(f"{where}: every pipeline read all {Q1_EXAMPLES} examples: each worker trains on the whole "
                         f"dataset, every example {run['pipelines']} times an epoch.", answer=shard)
            elif kind == "same part":
                fb.wrong(f"{where}: every pipeline read the same {d['sizes'][0]} examples: each needs a part of its "
                         f"own.", answer="The part's index is input_context.input_pipeline_id.")
            elif kind == "overlap":
                fb.wrong(f"{where}: the pipelines together read {d['covered']} of the {Q1_EXAMPLES} examples, "
                         f"{d['shared']} of them more than once. Do they shuffle (or list_files, which shuffles by "
                         f"default) before they shard? Each pipeline draws its own order, so their shards do not fit "
                         f"together. Or is the number of pipelines typed in?",
                         answer="Shard first, then shuffle within the shard; read the number of pipelines from "
                                "input_context.num_input_pipelines.")
            elif kind == "empty":
                fb.wrong(f"{where}: {_pipeline_name(run['pipelines'], d['pipeline'])}'s pipeline gave no example.",
                         answer=shard)
            elif kind == "foreign":
                fb.wrong(f"{where}: your pipelines give values that are no ids of the files' records "
                         f"({d['values']}): parse each record and batch the ids, don't change them.")
            else:
                by_replicas = all({i // Q1_RECORDS_PER_FILE for i in pipeline[epoch]} == set(range(index, Q1_FILES,
                                                                                                  run["replicas"]))
                                  for index, pipeline in enumerate(epochs))
                fb.wrong(f"{where}: together the pipelines read {d['covered']} of the {Q1_EXAMPLES} examples, none "
                         f"twice: {d['missing']} are read by no one."
                         + (f" Each read the files of a shard in {run['replicas']}, the replicas in sync: there is one "
                            f"input pipeline per worker, and it feeds all of that worker's replicas."
                            if by_replicas else ""), answer=shard)
            return False
    fb.right(f"in every run and both epochs the pipelines read disjoint parts that cover all {Q1_EXAMPLES} examples "
             f"(3 pipelines: the chief and two workers)", points=2)
    return True


def _judge_q1_by_file(fb, runs):
    """1 point when, in every epoch, no two pipelines of a run read examples of the same file (each opens only files of
    its own; which ones may change from epoch to epoch)."""
    for run in runs:
        for epoch in range(EPOCHS_READ):
            files = [{i // Q1_RECORDS_PER_FILE for i in pipeline[epoch]} for pipeline in _pipeline_epochs(run)]
            every_file = set.intersection(*files)
            shared = {f for a in range(len(files)) for b in range(a + 1, len(files)) for f in files[a] & files[b]}
            if shared:
                fb.wrong(f"Your pipelines split the examples, not the files: with {run['pipelines']} pipelines, "
                         f"{len(shared)} of the {Q1_FILES} files are read by more than one pipeline"
                         f"{' (every file by every pipeline)' if len(every_file) == Q1_FILES else ''}. Each worker "
                         f"then reads and parses files only to throw most of their records away: what DATA sharding "
                         f"costs.", answer="Shard the list of file names before reading them, so each pipeline opens "
                                           "its own files.")
                return
    fb.right("each pipeline opens only files of its own: the file names are split before reading")


def _judge_q1_shuffle(fb, runs):
    """1 point when every pipeline of the first run gives its examples shuffled, in a new order each epoch."""
    run = runs[0]
    for index, (first, second) in enumerate(_pipeline_epochs(run)):
        who = _pipeline_name(run["pipelines"], index)
        if first == sorted(first):
            fb.wrong(f"{who.capitalize()}'s pipeline gives its examples in the files' order: nothing shuffles them.",
                     answer="Shuffle after the shard (any seed, or none), e.g. .shuffle(buffer_size) after parsing.")
            return
        if first == second:
            fb.wrong(f"{who.capitalize()}'s pipeline gives its examples in the same order in both epochs: a shuffle "
                     f"must draw a new order each epoch.",
                     answer="Keep reshuffle_each_iteration=True, the default, and shuffle after any cache().")
            return
        kept = file_order_kept(first, Q1_RECORDS_PER_FILE)
        if kept > ORDER_KEPT_MOST:
            fb.wrong(f"{who.capitalize()}'s pipeline reads each file's records in nearly their order (a rank "
                     f"correlation of {kept:.2f} between a record's place in its file and in the epoch; a good "
                     f"shuffle gives about 0): shuffling only the file names, or a shuffle buffer much smaller than "
                     f"a file's {Q1_RECORDS_PER_FILE} records, leaves the examples almost unmixed.",
                     answer="Shuffle the examples after parsing, with a buffer that holds many files' records (here "
                            "a pipeline holds at most 240 examples: shuffle(1000) holds them all).")
            return
    fb.right("the examples come shuffled, well mixed, in a new order each epoch")


class DatasetFnFromFiles(Exercise):
    title = "A dataset_fn that reads files"
    points = 5
    hints = (
        "Each pipeline should open only files of its own: which list can you split before reading anything? And "
        "where does the shuffle go, so that the pipelines' parts still fit together?",
        "Split the list of file names with input_context.num_input_pipelines and input_context.input_pipeline_id, "
        "read your files (interleave or flat_map of tf.data.TFRecordDataset), parse, shuffle, and batch by "
        "input_context.get_per_replica_batch_size(global_batch). Shard before you shuffle.",
        "def make_dataset_fn(files, global_batch):\n"
        "    def dataset_fn(input_context):\n"
        "        mine = tf.data.Dataset.from_tensor_slices(files).shard(input_context.num_input_pipelines,\n"
        "                                                               input_context.input_pipeline_id)\n"
        "        examples = mine.interleave(tf.data.TFRecordDataset, cycle_length=2).map(parse).shuffle(1000)\n"
        "        return examples.batch(input_context.get_per_replica_batch_size(global_batch))\n"
        "    return dataset_fn",
    )

    def collect(self, make_dataset_fn, seed=0):
        """Writes the checker's files, makes the learner's dataset_fn from them and Q1_GLOBAL_BATCH, and reads what
        it returns for every pipeline of every run of :func:`q1_runs` (``seed``), two epochs each."""
        if not callable(make_dataset_fn):
            return {"not callable": type(make_dataset_fn).__name__}
        with quiet_tensorflow(), tempfile.TemporaryDirectory(prefix="ch9_q1_") as folder:
            files = write_job_files(folder, Q1_FILES, Q1_RECORDS_PER_FILE)
            try:
                dataset_fn = make_dataset_fn(list(files), Q1_GLOBAL_BATCH)
            except Exception as err:
                return {"made": short_error(err)}
            if not callable(dataset_fn):
                return {"made a": type(dataset_fn).__name__}
            return {"runs": [{"pipelines": pipelines, "replicas": replicas,
                              "reads": [_read_q1_pipeline(dataset_fn, pipelines, index, replicas)
                                        for index in range(pipelines)]}
                             for pipelines, replicas in q1_runs(seed)]}

    def judge(self, data, seed=0):
        """Grades what :meth:`collect` read: batch sizes (1), a disjoint cover per epoch (2), files split (1),
        shuffled each epoch (1)."""
        fb = Feedback()
        if "not callable" in data:
            fb.wrong(f"Pass make_dataset_fn, a function of (files, global_batch) that returns your dataset_fn; got a "
                     f"{data['not callable']}.")
            return fb
        if "made" in data:
            fb.wrong(f"make_dataset_fn(files, global_batch) raised {data['made']}. It takes the list of file names "
                     f"and the global batch, and returns a dataset_fn (a function of one InputContext).")
            return fb
        if "made a" in data:
            fb.wrong(f"make_dataset_fn(files, global_batch) returned a {data['made a']}; it must return your "
                     f"dataset_fn, a function of one InputContext that returns a tf.data.Dataset.")
            return fb
        runs = data["runs"]
        if [(run["pipelines"], run["replicas"]) for run in runs] != q1_runs(seed):
            raise ValueError("the answers were read in other runs than this check makes")
        for run in runs:
            for index, read in enumerate(run["reads"]):
                called = _context_text(run["pipelines"], index, run["replicas"])
                if _judge_unusable(fb, read, called, "each should be a batch of the example ids the records hold (a "
                                   "1-D tensor of integers): parse each record with parse(), then batch.", _crash_hint):
                    return fb
        _judge_q1_sizes(fb, runs)
        if _judge_q1_cover(fb, runs):
            _judge_q1_by_file(fb, runs)
        _judge_q1_shuffle(fb, runs)
        return fb


def _crash_hint(error):
    if "InputContext" in error and "has no attribute" in error:
        return (" An InputContext has num_input_pipelines, input_pipeline_id, num_replicas_in_sync and "
                "get_per_replica_batch_size(global_batch_size).")
    if "not divisible" in error:
        return " get_per_replica_batch_size takes the GLOBAL batch, the global_batch make_dataset_fn was given."
    if "is not defined" in error:
        return " Define everything your functions use (parse, for one) before you check."
    if "num_shards" in error or "Index must be" in error:
        return " Is a number of pipelines typed in? Read it from input_context.num_input_pipelines."
    if "StringToNumber" in error or "string to number" in error.lower():
        return " A record holds an id as text: parse it with parse() (tf.strings.to_number), once per record."
    return ""


# Exercise 2: make_pipeline(records, decode, global_batch), the pipeline every worker of a job builds and hands to
# experimental_distribute_dataset; its source cannot be split by file, so the strategy shards it by DATA. The checker
# gives it Q2_EXAMPLES records (the ids) and a decode of its own that counts its calls, builds it afresh for each
# simulated worker, and shards it as the strategy does (rebatch each global batch into per-replica pieces, keep the
# worker's own: input_ops.auto_shard_dataset). Q2_GLOBAL_BATCH splits evenly over every number of workers x
# Q2_REPLICAS_PER_WORKER, and Q2_EXAMPLES is a whole number of global batches.
Q2_EXAMPLES, Q2_GLOBAL_BATCH, Q2_REPLICAS_PER_WORKER = 240, 24, 2
Q2_WORKER_CHOICES = (2, 3, 4)
Q2_NOTEBOOK_WORKERS = (2, 3)


def q2_runs(seed):
    """The numbers of workers of exercise 2's two runs.

    Example:
        >>> q2_runs(0)
        (2, 3)
    """
    return Q2_NOTEBOOK_WORKERS if seed == 0 else tuple(random.Random(seed).sample(Q2_WORKER_CHOICES, 2))


def _read_q2_worker(make_pipeline, decode, workers, worker):
    import tensorflow as tf
    from tensorflow.python.data.experimental.ops import distribute as data_distribute
    from tensorflow.python.distribute import input_ops

    dataset, problem = _built(make_pipeline, tf.data.Dataset.range(Q2_EXAMPLES), decode, Q2_GLOBAL_BATCH)
    if problem:
        return problem
    batch = int(data_distribute.compute_batch_size(dataset))  # what the strategy reads as the global batch
    if batch != Q2_GLOBAL_BATCH:
        return {"batch": batch}
    sizes = data_distribute.batch_sizes_for_worker(Q2_GLOBAL_BATCH, workers, Q2_REPLICAS_PER_WORKER, worker)
    try:
        pieces = input_ops.auto_shard_dataset(dataset.repeat(EPOCHS_READ).rebatch(sizes), workers, worker,
                                              workers * Q2_REPLICAS_PER_WORKER)
    except Exception as err:
        return {"raised": short_error(err), "when": "read"}
    return _read(pieces, EPOCHS_READ * Q2_EXAMPLES)


def _read_q2_copy(make_pipeline, decode):
    """One worker's copy of the pipeline, before the strategy shards it: {"ids": its first pass, at most Q2_EXAMPLES
    (one epoch, unless it repeats itself), "out of order": :func:`_out_of_order`}; {} when it cannot be built or read
    (the sharded reads say why)."""
    import tensorflow as tf

    dataset, problem = _built(make_pipeline, tf.data.Dataset.range(Q2_EXAMPLES), decode, Q2_GLOBAL_BATCH)
    read = problem or _read(dataset, Q2_EXAMPLES)  # one pass; endless if the pipeline repeats itself
    if "batches" not in read:
        return {}
    ids = [i for batch in read["batches"] for i in batch][:Q2_EXAMPLES]
    return {"ids": ids, "out of order": _out_of_order(dataset)}


def _out_of_order(dataset):
    """What lets ``dataset`` give its elements in an order that may differ from one run (one worker) to the next, in
    words: each kind of op of its graph made with ``deterministic=False``, and its options if they say False."""
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef.FromString(dataset._as_serialized_graph().numpy())  # private, as tf.data's own tests
    nodes = [*graph.node, *(node for function in graph.library.function for node in function.node_def)]
    kinds = {"ParallelMap": "a map", "ParallelInterleave": "an interleave", "ParallelBatch": "a batch"}
    found = sorted({next((text for kind, text in kinds.items() if node.op.startswith(kind)), node.op)
                    + " with deterministic=False" for node in nodes if node.attr["deterministic"].s == b"false"})
    return found + (["its options (deterministic = False)"] if dataset.options().deterministic is False else [])


# Values that differ from one worker process to the next but not between the simulated workers of q2, which share one
# process: a seed made from them passes the simulation, not a cluster. (A seed drawn anew on each call, from random or
# secrets, already differs between the simulated workers, and the coverage check shows it.)
PER_PROCESS_VALUES = ("os:getpid", "time:time", "time:time_ns", "time:monotonic", "time:perf_counter",
                      "builtins:hash", "builtins:id")


class ShuffleUnderData(Exercise):
    title = "Shuffle and cache under DATA sharding"
    points = 4
    hints = (
        "Under DATA the strategy shards your pipeline at its very end, after everything you wrote: what must be true "
        "of the order in which each worker's copy gives the examples? And where must cache() stand so that every "
        "epoch gets a new order without decoding again?",
        "Decode, cache, then shuffle with a seed that is the same on every worker (a number you write, not one each "
        "worker draws), then batch by global_batch.",
        "def make_pipeline(records, decode, global_batch):\n"
        "    examples = records.map(decode).cache()\n"
        "    return examples.shuffle(10_000, seed=7).batch(global_batch)",
    )

    def collect(self, make_pipeline, seed=0):
        """Builds the learner's pipeline once per simulated worker of each run of :func:`q2_runs` (``seed``), shards
        it as the strategy does, and reads two epochs; counts the calls of the checker's decode on each worker."""
        if not callable(make_pipeline):
            return {"not callable": type(make_pipeline).__name__}
        import tensorflow as tf

        with quiet_tensorflow():
            decoded = tf.Variable(0, dtype=tf.int64, trainable=False)

            def decode(record):
                """Stands for decoding a record: the checker counts its calls."""
                decoded.assign_add(1)
                return record

            runs = []
            for workers in q2_runs(seed):
                reads = []
                for worker in range(workers):
                    decoded.assign(0)
                    reads.append(dict(_read_q2_worker(make_pipeline, decode, workers, worker),
                                      decoded=int(decoded.numpy())))
                runs.append({"workers": workers, "reads": reads})
            copy = _read_q2_copy(make_pipeline, decode)
        return {"runs": runs, "per_process": tools_used_by(make_pipeline, PER_PROCESS_VALUES), **copy}

    def judge(self, data, seed=0):
        """Grades what :meth:`collect` read: every example once per epoch across the workers (2), a new order each
        epoch (1), each record decoded once per worker (1)."""
        fb = Feedback()
        if "not callable" in data:
            fb.wrong(f"Pass make_pipeline, a function of (records, decode, global_batch) that returns a "
                     f"tf.data.Dataset; got a {data['not callable']}.")
            return fb
        runs = data["runs"]
        if tuple(run["workers"] for run in runs) != q2_runs(seed):
            raise ValueError("the answers were read in other runs than this check makes")
        for run in runs:
            for worker, read in enumerate(run["reads"]):
                called = f"make_pipeline(records, decode, {Q2_GLOBAL_BATCH}) on worker {worker} of {run['workers']}"
                if _judge_unusable(fb, read, called, "batch the decoded examples by global_batch "
                                   "(experimental_distribute_dataset takes global batches and splits each over the "
                                   "replicas)."):
                    return fb
                if "batch" in read:
                    fb.wrong(f"{called} gives batches of {read['batch'] if read['batch'] > 0 else 'no one size'}"
                             f"{' examples' if read['batch'] > 0 else ''}; the strategy splits each global batch over "
                             f"the replicas: batch by global_batch ({Q2_GLOBAL_BATCH} here), once, at the end.")
                    return fb
        everything = set(range(Q2_EXAMPLES))
        copy = data.get("ids") or []
        if len(copy) > len(set(copy)):
            fb.wrong(f"One worker's copy of your pipeline, before the strategy shards it, gives "
                     f"{len(copy) - len(set(copy))} examples twice in its first {len(copy)}, and misses as many: "
                     f"its shuffle comes after a repeat(), which mixes the epochs. The workers' shares then miss "
                     f"examples and repeat others, whatever the seed.",
                     answer="Shuffle before repeat() (or leave repeat() out: a training loop starts each epoch anew).")
        elif data.get("out of order"):
            fb.wrong(f"Your pipeline may give its elements out of order: {', '.join(data['out of order'])}. "
                     f"Each worker's copy may then give another order, whatever the seed, and "
                     f"the DATA shares would not fit together. This check's workers share one process, where the "
                     f"order often happens to agree; on a cluster it need not.",
                     answer="Leave deterministic at its default (True) in every map and interleave before the shard.")
        elif data.get("per_process"):
            fb.wrong(f"Your pipeline calls {', '.join(data['per_process'])}, whose value differs between processes. "
                     f"This check's workers share one process, so their orders agree here; on a cluster each worker "
                     f"is a process of its own, its copy would shuffle in another order, and the workers would read "
                     f"some examples twice and miss others.",
                     answer="Give the shuffle the same fixed seed on every worker: shuffle(buffer_size, "
                            "seed=<a number you write>).")
        else:
            self._judge_cover(fb, runs, everything)
        first = runs[0]["reads"][0]
        epoch_1, epoch_2 = _epochs([i for b in first["batches"] for i in b], first["more"],
                                   Q2_EXAMPLES // runs[0]["workers"])
        if epoch_1 == sorted(epoch_1):
            fb.wrong("Worker 0 gets its examples in the records' order: nothing shuffles them.",
                     answer="Shuffle the decoded examples before batching.")
        elif epoch_1 == epoch_2:
            fb.wrong("Worker 0 gets its examples in the same order in both epochs. A cache() after the shuffle replays "
                     "the first epoch's order from the cache (and reshuffle_each_iteration=False does the same).",
                     answer="Cache before you shuffle, and keep reshuffle_each_iteration=True (the default).")
        else:
            fb.right("a new order each epoch")
        decodes = sorted({read["decoded"] for run in runs for read in run["reads"]})
        if decodes == [Q2_EXAMPLES]:
            fb.right(f"each worker decoded each of the {Q2_EXAMPLES} records once, for both epochs (under DATA every "
                     f"worker reads everything)")
        elif min(decodes) >= EPOCHS_READ * Q2_EXAMPLES:
            fb.wrong(f"A worker decoded {max(decodes)} records for {EPOCHS_READ} epochs of {Q2_EXAMPLES}: every epoch "
                     f"decodes again.", answer="Cache after decoding: records.map(decode).cache().")
        elif max(decodes) == 0:
            fb.wrong("Your pipeline never calls decode: map it over the records.")
        else:
            fb.wrong(f"The workers decoded {', '.join(map(str, decodes))} records for {EPOCHS_READ} epochs of "
                     f"{Q2_EXAMPLES}: decode every record, once (map(decode), then cache()).")
        return fb

    @staticmethod
    def _judge_cover(fb, runs, everything):
        """2 points when in each run and epoch the workers together read every example exactly once."""
        for run in runs:
            epochs = [_epochs([i for b in read["batches"] for i in b], read["more"], Q2_EXAMPLES // run["workers"])
                      for read in run["reads"]]
            for epoch in range(EPOCHS_READ):
                kind, d = _coverage([worker[epoch] for worker in epochs], everything)
                if kind == "right":
                    continue
                where = f"With {run['workers']} workers, epoch {epoch + 1}"
                if kind in ("overlap", "same part"):
                    fb.wrong(f"{where}: the workers together read {d['covered']} of the {Q2_EXAMPLES} examples, "
                             f"{d['shared']} of them more than once. Under DATA the strategy cuts each global batch "
                             f"of a worker's OWN copy into pieces and keeps that worker's pieces, so the pieces fit "
                             f"together only if every worker's copy gives the examples in the same order.",
                             answer="Give the shuffle the same fixed seed on every worker: shuffle(buffer_size, "
                                    "seed=<a number you write>).")
                elif kind == "not sharded":
                    fb.wrong(f"{where}: every worker read all {Q2_EXAMPLES} examples: did you switch auto-sharding "
                             f"OFF? The strategy must shard this pipeline (DATA).")
                elif kind == "foreign":
                    fb.wrong(f"{where}: your pipeline gives values that are no records' ids ({d['values']}): decode "
                             f"and batch them, don't change them.")
                else:
                    fb.wrong(f"{where}: the workers together read {d['covered']} of the {Q2_EXAMPLES} examples, none "
                             f"twice: does your pipeline drop examples (take, shard, filter, drop_remainder with a "
                             f"batch that does not divide them)? The strategy shards it; don't shard it yourself.")
                return False
        fb.right(f"in every run and both epochs the workers together read each of the {Q2_EXAMPLES} examples exactly "
                 f"once", points=2)
        return True
