"""Chapter 9 · exercise 1, a ``dataset_fn`` that reads files: the checker writes TFRecord files of its own
(:func:`write_job_files`, which the notebook uses too), makes the learner's ``dataset_fn`` from them, and reads what
it returns for each input pipeline of two simulated jobs (:mod:`.ch9_read`), two epochs each.
"""
import random
import tempfile
from pathlib import Path

from .answers import quiet_tensorflow, short_error
from .ch9_read import EPOCHS_READ, _built, _coverage, _epochs, _read
from .core import Exercise, Feedback

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
        from .ch9_read import _judge_unusable  # imported here: the graded sandbox's ch9_read has no _judge functions

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
