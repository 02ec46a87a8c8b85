"""Chapter 9 · exercise 2, a shuffled, cached pipeline under ``DATA`` sharding: the checker builds the learner's
pipeline once per simulated worker, with a ``decode`` of its own that counts its calls, shards each copy as the
strategy does, and reads two epochs of each worker's share (:mod:`.ch9_read`).
"""
import random

from .answers import quiet_tensorflow, short_error
from .ch9_read import EPOCHS_READ, _built, _coverage, _epochs, _read
from .core import Exercise, Feedback
from .reach import tools_used_by

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
        from .ch9_read import _judge_unusable  # imported here: the graded sandbox's ch9_read has no _judge functions

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
