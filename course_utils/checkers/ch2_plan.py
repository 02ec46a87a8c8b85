"""Chapter 2 · exercise 1: the learner's strategy, and a training plan (global batch, learning rate, steps per epoch)
that the checker runs for strategies and numbers of its own."""
import numbers

from .answers import as_int, close, short_error
from .core import Exercise, Feedback
from .ch2_step_run import checker_strategy

# Exercise 1: the learner's strategy over the notebook's 8 CPUs, and training_plan(strategy, per_replica_batch,
# base_learning_rate, base_batch, examples) -> (global batch, learning rate, steps per epoch), which the checker calls
# with strategies and numbers of its own, drawn from the check's seed.
REPLICAS = 8  # the notebook's CPUs
PLAN_REPLICAS = (2, 3, 4)  # the checker's strategies (MirroredStrategy over the first 2, 3 and 4 CPUs)
PLAN_KEY_BASE = 40_000  # their collective numbers (they run no collective; kept apart all the same)
PLAN_ITEMS = ("global_batch_size", "learning_rate", "steps_per_epoch")


def _plan_strategy(replicas):
    """The checker's MirroredStrategy over the first ``replicas`` logical CPUs (see
    :func:`.ch2_step_run.checker_strategy`)."""
    return checker_strategy(replicas, PLAN_KEY_BASE + 1000 * replicas)


def _plan_cases(seed):
    """The checker's cases, drawn from ``seed``: (replicas, per_replica_batch, base_learning_rate, base_batch,
    examples). The first case tunes the rate for one replica's batch (the notebook's situation), the others for
    another batch; in every case but the last an epoch ends with a smaller batch, in the last the examples fill whole
    global batches (so adding a step to the division is no rounding up)."""
    import numpy as np

    rng = np.random.default_rng([seed, 21])
    cases = []
    for index, replicas in enumerate(PLAN_REPLICAS):
        per_replica = int(rng.choice([16, 24, 32, 48, 64, 96]))
        base_batch = per_replica if index == 0 else int(rng.choice([b for b in (32, 64, 128, 256)
                                                                    if b not in (per_replica, per_replica * replicas)]))
        rate = float(rng.choice([0.005, 0.01, 0.02, 0.05, 0.1]))
        examples, global_batch = int(rng.integers(5_000, 60_000)), per_replica * replicas
        if index == len(PLAN_REPLICAS) - 1:
            examples -= examples % global_batch
        elif examples % global_batch == 0:
            examples += 1
        cases.append((replicas, per_replica, rate, base_batch, examples))
    return cases


def _reference_plan(case, global_batch=None):
    """A case's answer: the global batch, the linearly scaled rate and the steps of one epoch (the last one smaller).
    With ``global_batch`` (the learner's, when it is wrong), the rate and the steps that follow from it."""
    replicas, per_replica, rate, base_batch, examples = case
    global_batch = global_batch or per_replica * replicas
    return {"global_batch_size": global_batch, "learning_rate": rate * global_batch / base_batch,
            "steps_per_epoch": -(-examples // global_batch)}


def _reference_plan_slips(case, global_batch=None):
    """A case's typical wrong answers per item: [(value, what is wrong, the part that gives the answer away)]; the
    rate's and the steps' from ``global_batch`` (see :func:`_reference_plan`)."""
    replicas, per_replica, rate, base_batch, examples = case
    global_batch = _reference_plan(case, global_batch)["global_batch_size"]
    growth = global_batch / base_batch
    count_it = "It is per_replica_batch x strategy.num_replicas_in_sync."
    scale_it = "Multiply base_learning_rate by global batch / base_batch."
    return {
        "global_batch_size": [
            (per_replica, "that is the per-replica batch. The dataset is batched with the GLOBAL batch, which the "
                          "strategy splits over its replicas.", count_it),
            (per_replica * REPLICAS, f"that is the batch of {REPLICAS} replicas, this notebook's, but the checker's "
                                     f"strategy has {replicas}: read the number of replicas from the strategy "
                                     f"passed in.", "strategy.num_replicas_in_sync."),
            (per_replica // replicas, "you divided by the number of replicas; each replica keeps the per-replica "
                                      "batch.", count_it),
        ],
        "learning_rate": [
            (rate, f"the rate is not scaled, though the batch grew {growth:g}x from the batch it was tuned for.",
             scale_it),
            (rate * replicas, f"you multiplied by the number of replicas. The rate was tuned for batches of "
                              f"{base_batch}, and the global batch is {global_batch}: by how much did the batch "
                              f"grow?", scale_it),
            (rate / growth, "you divided. A larger batch means fewer steps per epoch: what must happen to each step "
                            "for an epoch to move the weights as far as before?", scale_it),
            (rate * growth ** 0.5, "that scales by the square root of the batch's growth, a rule sometimes used for "
                                   "Adam. This exercise trains with SGD: which rule does the chapter give for SGD?",
             scale_it),
            (rate * global_batch, "scale by how much the batch grew, not by the global batch size itself.",
             f"The batch grew {global_batch} / {base_batch} times."),
            (rate * REPLICAS * global_batch / base_batch / replicas, f"that is the rate of {REPLICAS} replicas, this "
             f"notebook's, but the checker's strategy has {replicas}.", "Use strategy.num_replicas_in_sync."),
        ],
        "steps_per_epoch": [
            (examples // global_batch, f"{examples:,} examples do not fill a whole number of global batches: "
                                       f"dataset.batch keeps the last, smaller batch (unless drop_remainder=True), "
                                       f"and it is a step too.", "Round the division up: -(-examples // global)."),
            (-(-examples // per_replica), "that counts steps of the per-replica batch; one step processes one "
                                          "GLOBAL batch, split over the replicas.", ""),
        ] + ([(examples // global_batch + 1, f"{examples:,} examples fill exactly {examples // global_batch:,} global "
                                             f"batches here: there is no smaller last batch, so no step to add. "
                                             f"Round up rather than add one.",
               "Round the division up: -(-examples // global).")] if examples % global_batch == 0 else []),
    }


class BatchAndLearningRate(Exercise):
    title = "Global batch, scaled learning rate, steps per epoch"
    points = 4
    hints = (
        "Which batch does the dataset get: one replica's, or all replicas' together? By how much did the batch grow "
        "from the one the learning rate was tuned for? And an epoch whose examples do not fill the last batch: how "
        "many steps is that?",
        "The dataset is batched with the GLOBAL batch: per_replica_batch x strategy.num_replicas_in_sync. The linear "
        "scaling rule multiplies SGD's learning rate by global batch / base_batch. An epoch takes examples / global "
        "batch steps, rounded UP: the last, smaller batch is a step too.",
    )

    def collect(self, strategy, training_plan, seed=0):
        """What crosses: the strategy's classes (its class and its bases, in method resolution order; classes of
        TensorFlow cross as themselves, others as an Opaque naming them) and its ``num_replicas_in_sync`` (None when
        reading it raised); and ``plan``: {"state": "none"}, {"state": "not callable", "type": name} or
        {"state": "ran", "cases": per case of ``_plan_cases(seed)``, {"returned": what training_plan returned} or
        {"raised": one line about its error}}."""
        try:
            replicas = strategy.num_replicas_in_sync
        except Exception:
            replicas = None
        if training_plan is None:
            plan = {"state": "none"}
        elif not callable(training_plan):
            plan = {"state": "not callable", "type": type(training_plan).__name__}
        else:
            runs = []
            for case in _plan_cases(seed):
                try:
                    runs.append({"returned": training_plan(_plan_strategy(case[0]), *case[1:])})
                except Exception as err:
                    runs.append({"raised": short_error(err)})
            plan = {"state": "ran", "cases": runs}
        return {"classes": list(type(strategy).__mro__), "replicas": replicas, "plan": plan}

    def judge(self, data, seed=0):
        """Grades the data of :meth:`collect`: the strategy, then each item of the plan in every case of ``seed``."""
        fb = Feedback()
        self._judge_strategy(fb, data["classes"], data["replicas"])
        plan = data["plan"]
        if plan["state"] == "none":
            fb.wrong("training_plan: not answered yet.")
        elif plan["state"] == "not callable":
            fb.wrong(f"training_plan should be a function (strategy, per_replica_batch, base_learning_rate, "
                     f"base_batch, examples) -> (global_batch_size, learning_rate, steps_per_epoch), not a "
                     f"{plan['type']}.")
        else:
            self._judge_plan(fb, plan["cases"], _plan_cases(seed))
        return fb

    @staticmethod
    def _judge_plan(fb, runs, cases):
        if type(runs) is not list or len(runs) != len(cases):
            raise ValueError(f"{len(cases)} cases expected")
        returned = []
        for run, case in zip(runs, cases):
            text = _case_words(case)
            if "raised" in run:
                fb.wrong(f"training_plan raised {run['raised']} for {text}.")
                return
            value = run["returned"]
            if not isinstance(value, (tuple, list)) or len(value) != len(PLAN_ITEMS):
                fb.wrong(f"training_plan returned {value!r:.80} for {text}; return three values: global_batch_size, "
                         f"learning_rate, steps_per_epoch.")
                return
            returned.append(dict(zip(PLAN_ITEMS, value)))
        # The rate and the steps are judged by the learner's own global batch (a wrong one costs its own point only).
        batches = [_plan_number("global_batch_size", r["global_batch_size"]) for r in returned]
        own = [batch if batch and batch > 0 else None for batch in batches]
        for item in PLAN_ITEMS:
            BatchAndLearningRate._judge_plan_item(fb, item, [r[item] for r in returned], cases,
                                                  own if item != "global_batch_size" else [None] * len(cases))

    @staticmethod
    def _judge_plan_item(fb, item, values, cases, batches):
        """One point for ``item`` when it is right in every case (the rate and the steps for the global ``batches``
        given, None for the right one); else a line about the first case it is wrong in."""
        wanted = [_reference_plan(case, batch)[item] for case, batch in zip(cases, batches)]
        follows = " (from your global_batch_size)" if any(
            batch and batch != _reference_plan(case)["global_batch_size"] for case, batch in zip(cases, batches)) else ""
        read = [_plan_number(item, value) for value in values]
        if all(got is not None and _plan_close(got, want) for got, want in zip(read, wanted)):
            shown = ", ".join(f"{want:g}" for want in wanted)
            fb.right(f"{item}: right for every strategy and setting the checker tried{follows} ({shown})")
            return
        index = next(i for i, (got, want) in enumerate(zip(read, wanted)) if got is None or not _plan_close(got, want))
        case, got, raw = cases[index], read[index], values[index]
        head = f"{item} for {_case_words(case)}:"
        if got is None:
            kind = "a whole number (an int)" if item != "learning_rate" else "a number"
            fb.wrong(f"{head} {raw!r:.60} is not {kind}.")
            return
        if len(set(read)) == 1 and len(set(wanted)) > 1:
            fb.wrong(f"{head} your function returns {got:g} whatever it is given: compute it from the strategy and "
                     f"the numbers passed in (the checker's strategies have {', '.join(map(str, PLAN_REPLICAS))} "
                     f"replicas).")
            return
        for value, why, reveal in _reference_plan_slips(case, batches[index])[item]:
            if _plan_close(got, value):
                fb.wrong(f"{head} {got:g}: {why}", answer=reveal)
                return
        fb.wrong(f"{head} {got:g} is not what the strategy and the linear scaling rule need.",
                 answer=f"It is {wanted[index]:g}.")

    @staticmethod
    def _judge_strategy(fb, classes, replicas):
        import tensorflow as tf

        if type(classes) is not list or not classes:
            raise ValueError("the strategy's classes are missing")
        mirrored = any(isinstance(c, type) and issubclass(c, tf.distribute.MirroredStrategy) for c in classes)
        name = classes[0].__name__ if isinstance(classes[0], type) else type(classes[0]).__name__
        if not mirrored:
            fb.wrong(f"strategy: the exercise asks for a tf.distribute.MirroredStrategy, got {name}.")
        elif as_int(replicas) != REPLICAS:
            fb.wrong(f"strategy has {replicas} replica(s); build it over the 8 virtual CPUs.",
                     answer="tf.distribute.MirroredStrategy(cpus).")
        else:
            fb.right("strategy: MirroredStrategy with 8 replicas")


def _case_words(case):
    replicas, per_replica, rate, base_batch, examples = case
    return (f"a strategy of {replicas} replicas, per_replica_batch={per_replica}, base_learning_rate={rate:g}, "
            f"base_batch={base_batch}, examples={examples}")


def _plan_number(item, value):
    """An item of the plan as a number: a whole number for the batch and the steps (a float such as 512.0 is no batch
    size: dataset.batch wants an int), any number for the rate; None when it is not one."""
    if item == "learning_rate":
        try:
            return float(value)
        except (TypeError, ValueError):
            return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        return None if item == "global_batch_size" or as_int(value) is None else as_int(value)
    return int(value)


def _plan_close(got, want):
    return close(got, want, 1e-6)
