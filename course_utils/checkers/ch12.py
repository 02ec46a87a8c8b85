"""Chapter 12 · Practice at scale, the tf.data service: the exercises' graders and hints.

Exercise 1 predicts what a tf.data service of three workers delivers to two trainers. Exercise 2's answer is code:
the checker starts a tf.data service of its own in the learner's kernel (a dispatcher and workers as in-process
servers, the way TensorFlow's own tests run them), calls the learner's function once per trainer on its own examples,
reads all the trainers' datasets side by side, and judges what each received.
"""
import random
import threading

from .answers import as_int, grade_items, quiet_tensorflow, short_error
from . import ch12_texts
from .core import Exercise, Feedback, chapter
from .variants import NUMBER_WORDS

# Exercise 1: three service workers, two trainers; how many times each example is delivered in all, per way to read.
# It varies per student (:mod:`.variants`): the service's workers and the trainers it feeds.
PREDICT_WORKERS, PREDICT_TRAINERS = 3, 2
CASES = ("parallel_epochs, a job per trainer", "parallel_epochs, one shared job",
         "distributed_epoch, a job per trainer", "distributed_epoch, one shared job")
CHAPTER_WORKERS, CHAPTER_TRAINERS = 2, 2  # the chapter's run
CHAPTER_COUNTS = {CASES[0]: 4, CASES[1]: 2, CASES[2]: 2, CASES[3]: 1}  # the chapter's run: 2 workers, 2 trainers
DRAWN_WORKERS = DRAWN_TRAINERS = range(2, 9)  # a variant's service workers and trainers: 41 variants


def _reference_deliveries(workers=PREDICT_WORKERS, trainers=PREDICT_TRAINERS):
    """Exercise 1's answer: how many times each example is delivered in all, over every trainer, in one epoch."""
    return {CASES[0]: workers * trainers, CASES[1]: workers, CASES[2]: trainers, CASES[3]: 1}


class WhatThreeWorkersDeliver(Exercise):
    title = "What three service workers deliver"
    points = 3
    defaults = {"workers": PREDICT_WORKERS, "trainers": PREDICT_TRAINERS}
    templates = {"e02": ch12_texts.DELIVERIES_QUESTION, "ch12-q1": ch12_texts.DELIVERIES_SOLUTION,
                 "e05": ch12_texts.DELIVERIES_WATCH}
    hints = (
        "The chapter's service had 2 workers and 2 trainers, so each of its 2s could come from either. Which of the "
        "two numbers does the processing mode multiply by, and which does the job?",
        "parallel_epochs: every service worker produces the whole dataset (once per worker). distributed_epoch: the "
        "dispatcher hands each element to one worker (once in all). A job per trainer: every trainer receives all its "
        "job makes. One shared job: the trainers split what the one job makes.",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.title = f"What {NUMBER_WORDS[self.params['workers']]} service workers deliver"

    @staticmethod
    def draw(rng):
        """Service workers and trainers: never as many of each (a swap would go unseen, and the chapter had 2 and 2),
        nor the exercise's 3 and 2."""
        pairs = [(w, t) for w in DRAWN_WORKERS for t in DRAWN_TRAINERS
                 if w != t and (w, t) != (PREDICT_WORKERS, PREDICT_TRAINERS)]
        return dict(zip(("workers", "trainers"), rng.choice(pairs)))

    def text_values(self):
        workers, trainers = self.params["workers"], self.params["trainers"]
        return {**self.params, "workers_word": NUMBER_WORDS[workers], "trainers_word": NUMBER_WORDS[trainers],
                "still": "still " if trainers == CHAPTER_TRAINERS else "",
                "all_trainers": "both trainers" if trainers == 2 else f"all {trainers} trainers",
                "consumers": str(list(range(trainers)))}

    def reference_values(self):
        right = list(_reference_deliveries(self.params["workers"], self.params["trainers"]).values())
        return {"per_trainer_copies": f"{right[0]},".ljust(6), "shared_copies": f"{right[1]},".ljust(9),
                "per_trainer_once": f"{right[2]},".ljust(4)}

    def grade(self, deliveries):
        """3 points for the 4 cases right, 2 for 3, 1 for 2; a wrong case is explained by what the number suggests."""
        workers, trainers = self.params["workers"], self.params["trainers"]
        expected = _reference_deliveries(workers, trainers)
        swapped = _reference_deliveries(trainers, workers)

        def explain(case, given, raw):
            if given is None:
                return f"{raw!r} is not a whole number of times.", ""
            if given == CHAPTER_COUNTS[case] and given != expected[case]:
                return (f"that is the chapter's count, with {CHAPTER_WORKERS} service workers and {CHAPTER_TRAINERS} "
                        f"trainers; here there are {workers} workers and {trainers} trainers."), \
                    f"It is {expected[case]}."
            if given == swapped[case]:
                return ("you multiplied by the trainers where the service workers count, or the other way "
                        "round."), f"It is {expected[case]}."
            return f"{given} is not what this case delivers.", f"It is {expected[case]}."

        fb = Feedback()
        grade_items(fb, deliveries, expected, explain, as_int, "each a whole number of times")
        right = fb.points
        fb.points = {4: 3, 3: 2, 2: 1}.get(right, 0)
        return fb


# Exercise 2: the learner's trainer_dataset(examples, service, batch_size), called once per trainer by the checker on
# a service of its own. Two runs, each (service workers, examples, batch size), with TRAINERS trainers; every run's
# examples leave out fewer than TRAINERS x batch_size with either right fix.
TRAINERS = 3
# No run's examples are a multiple of its batch size: the service workers' shares then cannot all end on a full batch,
# so a pipeline that keeps short batches always gets one (with 96 examples and batches of 8 it got none in the runs
# where every worker's share happened to be a multiple of 8, and the chapter's pipeline was judged right).
NOTEBOOK_RUNS = ((3, 100, 8), (2, 75, 6))
GRADER_RUNS = ((3, 100, 8), (2, 75, 6), (3, 88, 7), (2, 83, 5), (3, 77, 5), (2, 105, 10))
# The checker stops reading once the trainers received this many times the examples: more than any dataset that ends
# delivers (parallel_epochs with a job per trainer: 3 trainers x 3 service workers = 9 times), so only an endless
# one (a repeat()) reaches it.
READ_AT_MOST = 10
READ_SECONDS = 60  # and gives up after this long (a pipeline whose trainers wait for each other forever)


def service_runs(seed):
    """The (service workers, examples, batch size) of the two runs exercise 2's checker makes.

    Example:
        >>> service_runs(0)
        ((3, 100, 8), (2, 75, 6))
    """
    if seed == 0:
        return NOTEBOOK_RUNS
    first, second = random.Random(seed).sample(GRADER_RUNS, 2)
    return first, second


def _start_service(workers):
    """A dispatcher and ``workers`` workers as servers of this process, on ports the system picks."""
    import tensorflow as tf

    service = tf.data.experimental.service
    dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
    address = dispatcher.target.split("://")[1]
    return dispatcher, [service.WorkerServer(service.WorkerConfig(dispatcher_address=address, port=0,
                                                                  heartbeat_interval_ms=100))
                        for _ in range(workers)]


def _read_side_by_side(datasets, examples):
    """Read the trainers' datasets in turn, one element each, until all are done or they received READ_AT_MOST x
    ``examples`` in all. Returns [[batch as a list of ints, ...] per trainer], "more" (stopped at the limit)."""
    iterators, batches, received = [iter(dataset) for dataset in datasets], [[] for _ in datasets], 0
    live = list(range(len(datasets)))
    while live:
        for trainer in list(live):
            try:
                element = next(iterators[trainer])
            except StopIteration:
                live.remove(trainer)
                continue
            values = element.numpy().reshape(-1).tolist() if hasattr(element, "numpy") else None
            if values is None or element.shape.rank != 1:
                raise TypeError(f"a trainer received {element!r}: each element must be a batch of ids, a 1-D tensor")
            batches[trainer].append([int(v) for v in values])
            received += len(values)
            if received >= READ_AT_MOST * examples:
                return batches, True
    return batches, False


def _run_trainers(trainer_dataset, workers, examples, batch_size):
    """One run: a service of ``workers`` workers, TRAINERS datasets from the learner's function, read side by side.
    One of {"raised": error, "when": "called" | "read"}, {"type": what it returned}, {"timed out": seconds}, or
    {"batches": per trainer, "more": bool}."""
    import tensorflow as tf

    dispatcher, servers = _start_service(workers)
    result = {}
    try:
        datasets = []
        for _ in range(TRAINERS):
            try:
                dataset = trainer_dataset(tf.data.Dataset.range(examples), dispatcher.target, batch_size)
            except Exception as err:
                return {"raised": short_error(err), "when": "called"}
            if not isinstance(dataset, tf.data.Dataset):
                return {"type": type(dataset).__name__}
            datasets.append(dataset)
        if not all(_reads_service(dataset) for dataset in datasets):
            return {"no service": True}

        def read():
            try:
                batches, more = _read_side_by_side(datasets, examples)
                result.update(batches=batches, more=more)
            except Exception as err:
                result.update(raised=short_error(err), when="read")

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(READ_SECONDS)
        if reader.is_alive():
            return {"timed out": READ_SECONDS}
        return result
    finally:
        for server in [*servers, dispatcher]:
            server._stop()  # private, as in TensorFlow's tests: frees the ports at once


def _reads_service(dataset):
    """Whether ``dataset`` reads from a tf.data service: a DataServiceDataset op (what
    ``tf.data.experimental.service.distribute`` and ``from_dataset_id`` add) in its graph."""
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef.FromString(dataset._as_serialized_graph().numpy())  # private, as tf.data's own tests
    nodes = [*graph.node, *(node for function in graph.library.function for node in function.node_def)]
    return any(node.op.startswith("DataServiceDataset") for node in nodes)


def _judge_run(run, workers, examples, batch_size):
    """What went wrong in one run, as (points out of 4, [(text, answer)]); (4, []) when all is right."""
    if "raised" in run:
        verb = "raised" if run["when"] == "called" else "gave datasets whose reading raised"
        return 0, [(f"trainer_dataset {verb} {run['raised']}", "")]
    if "type" in run:
        return 0, [(f"trainer_dataset returned a {run['type']}; return the tf.data.Dataset one trainer reads.", "")]
    if "no service" in run:
        return 0, [("the trainers' datasets do not read from the service (their graphs hold no DataServiceDataset): "
                    "in this check the three trainers share one process, so they could split the examples among "
                    "themselves; on a cluster each trainer is a process of its own, and only the service can hand "
                    "out each example once.",
                    "Apply tf.data.experimental.service.distribute(\"distributed_epoch\", service, job_name=...) to "
                    "the batches.")]
    if "timed out" in run:
        return 0, [(f"the trainers still waited for batches after {run['timed out']} s: a coordinated read "
                    f"(consumer_index/num_consumers) waits for every consumer, and needs a dataset that repeats.",
                    "Read one shared job first come, first served: give every trainer the same job_name.")]
    batches = run["batches"]
    counts = [0] * examples
    foreign = 0
    for trainer in batches:
        for batch in trainer:
            for value in batch:
                if 0 <= value < examples:
                    counts[value] += 1
                else:
                    foreign += 1
    problems, points = [], 4
    twice = sum(count > 1 for count in counts)
    if foreign:
        return 0, [(f"the trainers received {foreign} values that are not ids of the examples: pass the examples "
                    f"through (batch them), without changing them.", "")]
    if run["more"]:
        points -= 2
        problems.append((f"the trainers' datasets never ended: they had received {READ_AT_MOST} x the {examples} "
                         f"examples when the check stopped reading. A repeat() makes the job endless, so every "
                         f"example comes again and again.",
                         "Leave out repeat(): one pass delivers one epoch, each example once; the training loop's "
                         "next pass over the dataset starts a new job of the same name (the chapter's epochs)."))
    elif twice:
        points -= 2
        alone = [[v for batch in trainer for v in batch] for trainer in batches]
        if all(len(ids) == len(set(ids)) for ids in alone):  # no trainer got an example twice: they overlap
            problems.append(("the trainers received the same examples, none of them one twice: each trainer "
                             "read a whole epoch, from a job of its own.",
                             "Give the three trainers one job: distribute(..., job_name=\"train\") (any fixed name)."))
        else:
            problems.append((f"{twice} of the {examples} examples were delivered more than once: with "
                             f"{workers} service workers, each one produced the whole dataset.",
                             "parallel_epochs does that; distributed_epoch hands each example to one worker."))
    sizes = sorted({len(batch) for trainer in batches for batch in trainer})
    short = sum(len(batch) < batch_size for trainer in batches for batch in trainer)
    if sizes and sizes != [batch_size]:
        points -= 1
        if short and max(sizes) == batch_size:
            problems.append((f"{short} batch(es) were shorter than batch_size={batch_size}: each service worker "
                             f"batches the examples it was given, and its last batch is short.",
                             "Batch with drop_remainder=True, on the service or on each trainer after distribute."))
        else:
            problems.append((f"the batches held {sizes} examples, not batch_size={batch_size}: use the argument, "
                             f"not a number of your own.", ""))
    delivered = sum(count > 0 for count in counts)
    left_out = examples - delivered
    if not twice and not run["more"] and left_out >= TRAINERS * batch_size:
        points -= 1
        problems.append((f"only {delivered} of the {examples} examples reached a trainer: {left_out} were left out, "
                         f"more than {TRAINERS} x batch_size.", ""))
    return max(points, 0), problems


class FeedThreeTrainers(Exercise):
    title = "Feed three trainers full batches"
    points = 4
    hints = (
        "Three questions: which processing mode produces each example once? What makes the three trainers split one "
        "epoch rather than each read its own? And where do short batches come from, and what removes them?",
        "examples.batch(batch_size, drop_remainder=True) before distribute(\"distributed_epoch\", service, "
        "job_name=...) with the same job_name for every trainer. Each service worker batches its own splits, so "
        "without drop_remainder its last batch is short; dropping it leaves out fewer than batch_size per worker.",
        "def trainer_dataset(examples, service, batch_size):\n"
        "    batches = examples.batch(batch_size, drop_remainder=True)\n"
        "    return batches.apply(tf.data.experimental.service.distribute(\"distributed_epoch\", service, "
        "job_name=\"train\"))",
    )

    def collect(self, trainer_dataset, seed=0):
        """Runs the learner's function on the checker's services (:func:`service_runs`): {"not callable": type name},
        or {"runs": [what _run_trainers found, per run]}."""
        if not callable(trainer_dataset):
            return {"not callable": type(trainer_dataset).__name__}
        with quiet_tensorflow():
            return {"runs": [_run_trainers(trainer_dataset, *run) for run in service_runs(seed)]}

    def judge(self, data, seed=0):
        """The run that went worst decides: 2 points for no example twice, 1 for full batches of batch_size, 1 for
        leaving out fewer than TRAINERS x batch_size."""
        fb = Feedback()
        if "not callable" in data:
            fb.wrong(f"trainer_dataset should be a function (examples, service, batch_size) -> tf.data.Dataset; got a "
                     f"{data['not callable']}. Pass the function itself.")
            return fb
        runs = service_runs(seed)
        judged = [_judge_run(run, *config) for run, config in zip(data["runs"], runs)]
        worst = min(range(len(judged)), key=lambda i: judged[i][0])
        points, problems = judged[worst]
        workers, examples, batch_size = runs[worst]
        if not problems:
            fb.right(f"{TRAINERS} trainers on services of {runs[0][0]} and {runs[1][0]} workers: full batches only, no "
                     f"example twice, and all but a few examples delivered", points=4)
            return fb
        fb.note(f"With {workers} service workers, {TRAINERS} trainers, {examples} examples and batch_size={batch_size}:")
        for text, answer in problems:
            fb.wrong(text, answer=answer)
        fb.points = points
        return fb


CHAPTER = chapter(12, "Practice at scale: the tf.data service", {"q1": WhatThreeWorkersDeliver, "q2": FeedThreeTrainers})
