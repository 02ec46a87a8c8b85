"""Chapter 2 · Strategies on one machine: the exercises' graders and hints."""
import numbers
import re

from .answers import as_int, close, grade_items, logical_cpus, quiet_tensorflow, short_error
from .core import Exercise, Feedback, chapter
from .ch2_build import DistributedStep, _mirrored_with_own_keys

# Exercise 1: the learner's strategy over the notebook's 8 CPUs, and training_plan(strategy, per_replica_batch,
# base_learning_rate, base_batch, examples) -> (global batch, learning rate, steps per epoch), which the checker calls
# with strategies and numbers of its own, drawn from the check's seed.
REPLICAS = 8  # the notebook's CPUs
PLAN_REPLICAS = (2, 3, 4)  # the checker's strategies (MirroredStrategy over the first 2, 3 and 4 CPUs)
PLAN_KEY_BASE = 40_000  # their collective numbers (they run no collective; kept apart all the same)
PLAN_ITEMS = ("global_batch_size", "learning_rate", "steps_per_epoch")
_PLAN_STRATEGIES = {}


def _plan_strategy(replicas):
    """The checker's MirroredStrategy over the first ``replicas`` logical CPUs, made once per process."""
    cpus = logical_cpus()
    if len(cpus) < replicas:
        raise RuntimeError(f"the checker needs {replicas} logical CPUs and this kernel has {len(cpus)}: run the "
                           f"notebook's first cell (configure_virtual_cpus(8)) in a fresh kernel.")
    key = tuple(cpus[:replicas])
    if key not in _PLAN_STRATEGIES:
        with quiet_tensorflow():
            _PLAN_STRATEGIES[key] = _mirrored_with_own_keys(key, PLAN_KEY_BASE + 1000 * replicas)
    return _PLAN_STRATEGIES[key]


def _plan_cases(seed):
    """The checker's cases, drawn from ``seed``: (replicas, per_replica_batch, base_learning_rate, base_batch,
    examples). The first case tunes the rate for one replica's batch (the notebook's situation), the others for
    another batch; no number of examples is a multiple of the global batch (an epoch ends with a smaller batch)."""
    import numpy as np

    rng = np.random.default_rng([seed, 21])
    cases = []
    for index, replicas in enumerate(PLAN_REPLICAS):
        per_replica = int(rng.choice([16, 24, 32, 48, 64, 96]))
        base_batch = per_replica if index == 0 else int(rng.choice([b for b in (32, 64, 128, 256)
                                                                    if b not in (per_replica, per_replica * replicas)]))
        rate = float(rng.choice([0.005, 0.01, 0.02, 0.05, 0.1]))
        examples = int(rng.integers(5_000, 60_000))
        if examples % (per_replica * replicas) == 0:
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
        ],
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


# Exercise 2: compute_loss(labels, logits, kernels) whose gradients, summed over the replicas, are those of the
# objective: the mean cross-entropy over the global batch plus WEIGHT_DECAY x the sum of the kernels' squares.
GLOBAL_BATCH = 64
WEIGHT_DECAY = 0.01
KERNEL_SHAPES = ((6, 4), (4, 10))  # the checker's kernels (mirrored variables); its logits are its own too
LOSS_KEY_BASE = 10_000  # the collectives of exercise 2's checker strategy are numbered from here
_STRATEGY_CACHE = {}
_KERNELS = {}


def _checker_strategy():
    """A MirroredStrategy over this process's logical CPUs (at most 8, a divisor of 64), made once."""
    cpus = logical_cpus()
    n = max(k for k in (1, 2, 4, 8) if k <= len(cpus))
    key = tuple(cpus[:n])
    if key not in _STRATEGY_CACHE:
        _STRATEGY_CACHE[key] = _mirrored_with_own_keys(key, LOSS_KEY_BASE)
    return _STRATEGY_CACHE[key]


def _loss_inputs(seed):
    """Exercise 2's inputs, drawn from ``seed``: labels (int64) and logits (float32) of GLOBAL_BATCH examples, and
    the kernels (float32, KERNEL_SHAPES). The logits' scale is drawn too, so that the batch's mean loss differs widely
    from one seed to the next."""
    import numpy as np

    rng = np.random.default_rng(seed)
    logits = (rng.uniform(1.0, 8.0) * rng.normal(size=(GLOBAL_BATCH, 10))).astype("float32")
    labels = rng.integers(0, 10, size=(GLOBAL_BATCH,)).astype("int64")
    kernels = [rng.normal(scale=0.5, size=shape).astype("float32") for shape in KERNEL_SHAPES]
    return labels, logits, kernels


def _checker_kernels(strategy, values):
    """The checker's kernels: mirrored variables of ``strategy`` (made once), holding ``values``."""
    import tensorflow as tf

    if strategy not in _KERNELS:
        with strategy.scope():
            _KERNELS[strategy] = [tf.Variable(value, name=f"kernel_{i}") for i, value in enumerate(values)]
    for variable, value in zip(_KERNELS[strategy], values):
        variable.assign(value)
    return _KERNELS[strategy]


def _run_compute_loss(compute_loss, seed):
    """Run ``compute_loss`` in every replica (eagerly: no trace to build) on its slice of the batch of ``seed``, with
    the checker's kernels, under a tape that watches the logits. Returns per replica (loss, gradient with respect to
    its logits, gradients with respect to the kernels), as arrays (None for a gradient the tape did not record)."""
    import numpy as np
    import tensorflow as tf

    strategy = _checker_strategy()
    n = strategy.num_replicas_in_sync
    labels, logits, values = _loss_inputs(seed)
    kernels = _checker_kernels(strategy, values)
    label_parts, logit_parts = np.split(labels, n), np.split(logits, n)
    dist_labels = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(label_parts[ctx.replica_id_in_sync_group]))
    dist_logits = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(logit_parts[ctx.replica_id_in_sync_group]))

    def replica(labels, logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = compute_loss(labels, logits, kernels)
        sources = [logits, *kernels]
        gradients = tape.gradient(loss, sources)
        recorded = tf.constant([g is not None for g in gradients])  # a strategy cannot return None per replica
        return (loss, recorded, *[tf.zeros_like(x) if g is None else g for g, x in zip(gradients, sources)])

    per_replica = strategy.run(replica, args=(dist_labels, dist_logits))
    local = [[np.asarray(part, dtype="float64") for part in strategy.experimental_local_results(value)]
             for value in per_replica]
    return [[local[0][i], *[g[i] if ok else None for g, ok in zip(local[2:], local[1][i])]] for i in range(n)]


def _reference_losses(labels, logits, from_logits=True):
    """The per-example cross-entropies, with NumPy; with ``from_logits=False`` what a Keras loss built without
    from_logits=True computes from the same numbers (it reads them as probabilities, clipped to [1e-7, 1 - 1e-7])."""
    import numpy as np

    logits = logits.astype("float64")
    if not from_logits:
        logits = np.log(np.clip(logits, 1e-7, 1 - 1e-7))
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(labels)), labels]


def _reference_objective(seed):
    """The objective of the batch of ``seed`` on one device: its value, its gradient with respect to the logits and
    with respect to each kernel (float64)."""
    import numpy as np

    labels, logits, kernels = _loss_inputs(seed)
    z = logits.astype("float64")
    softmax = np.exp(z - z.max(axis=1, keepdims=True))
    softmax /= softmax.sum(axis=1, keepdims=True)
    softmax[np.arange(len(labels)), labels] -= 1
    value = _reference_losses(labels, logits).mean() + WEIGHT_DECAY * sum((k.astype("float64") ** 2).sum()
                                                                          for k in kernels)
    return value, softmax / GLOBAL_BATCH, [2 * WEIGHT_DECAY * k.astype("float64") for k in kernels]


def _reduce_op_name(value):
    """A reduce_op's name as "SUM", "MEAN" or another upper-case word, from a ReduceOp's value or a string such as
    "sum", "SUM " or "tf.distribute.ReduceOp.SUM"; None when it is no string."""
    if not isinstance(value, str):
        return None
    return value.strip().strip("'\"").split(".")[-1].strip().upper()


def _multiple(got, want):
    """The number k with got = k x want (arrays, to float32 rounding), 0.0 for zeros, or None."""
    import numpy as np

    u, r = np.ravel(got), np.ravel(want)
    if not np.abs(u).max(initial=0) > 0:
        return 0.0
    k = float(u @ r / (r @ r))
    return k if np.linalg.norm(u - k * r) <= 1e-3 * np.linalg.norm(r) * max(abs(k), 1e-3) else None


class LossScaling(Exercise):
    title = "Loss scaling in a custom distributed step, with a penalty"
    points = 3
    hints = (
        "Inside strategy.run each replica sees only its slice of the batch, and the strategy SUMS the replicas' "
        "gradients. What must each replica divide its cross-entropies by, so that the sum is the gradient of the "
        "batch's mean? And the penalty: every replica computes it on the same weights. What does summing it over the "
        "replicas do?",
        "Divide the per-example losses by the global batch size (tf.nn.compute_average_loss(..., "
        "global_batch_size=...)); a Keras loss object needs reduction=NONE to give one loss per example. Divide the "
        "penalty by the number of replicas (tf.nn.scale_regularization_loss does it), so that the summed gradients "
        "count it once.",
    )

    def collect(self, compute_loss, reduce_op, seed=0):
        """Runs ``compute_loss(labels, logits, kernels)`` in every replica of the checker's strategy on its slice of a
        batch drawn from ``seed``, with the checker's kernels (mirrored variables). What crosses: ``loss``, one of
        {"state": "none"}, {"state": "not callable", "type": name}, {"state": "raised", "error": short error,
        "detail": the error's text (cut)} and {"state": "ran", "replicas": per replica [loss, gradient with respect to
        its logits, gradient with respect to each kernel] (arrays, None where the tape recorded nothing)};
        ``reduce_op``: {"none": whether it is None, "value": its ``.value`` (or itself) when that is a string, else
        None, "repr": its repr (cut)}."""
        if compute_loss is None:
            loss = {"state": "none"}
        elif not callable(compute_loss):
            loss = {"state": "not callable", "type": type(compute_loss).__name__}
        else:
            try:
                with quiet_tensorflow():
                    loss = {"state": "ran", "replicas": _run_compute_loss(compute_loss, seed)}
            except Exception as err:
                loss = {"state": "raised", "error": short_error(err), "detail": " ".join(str(err).split())[:4000]}
        try:
            op = getattr(reduce_op, "value", reduce_op)
            shown = repr(reduce_op)[:200]
        except Exception:
            op, shown = None, f"a {type(reduce_op).__name__}"
        return {"loss": loss, "reduce_op": {"none": reduce_op is None,
                                            "value": str(op) if isinstance(op, str) else None, "repr": shown}}

    def judge(self, data, seed=0):
        """Grades the data of :meth:`collect` against the objective of the batch of ``seed`` on one device."""
        fb = Feedback()
        loss, reduce_op = data["loss"], data["reduce_op"]
        kind = None
        if loss["state"] == "none":
            fb.wrong("compute_loss: not answered yet.")
        elif loss["state"] == "not callable":
            fb.wrong(f"compute_loss should be a function (labels, logits, kernels) -> loss, got {loss['type']}.")
        else:
            kind = self._judge_loss(fb, loss, seed)
        op = _reduce_op_name(reduce_op["value"])
        if reduce_op["none"]:
            fb.wrong("reduce_op: not answered yet.")
        elif op == "SUM":
            fb.right("reduce_op: SUM. Each replica's loss is already its share of the objective, so their sum is the "
                     "objective of the global batch.")
        elif op == "MEAN" and kind == "per replica":
            fb.wrong("reduce_op: MEAN of losses averaged over each replica's own batch does report the batch's mean "
                     "loss, but such a compute_loss makes the summed gradients too large (above). Once each replica's "
                     "loss is divided by the GLOBAL batch, what does MEAN do on top?",
                     answer="It divides by the number of replicas a second time: use ReduceOp.SUM.")
        elif op == "MEAN":
            fb.wrong(f"reduce_op: with a compute_loss whose replicas' losses add up to the objective, this reduction "
                     f"reports 1/{REPLICAS} of it. What is each replica's loss already divided by, and what does MEAN "
                     f"divide by on top?",
                     answer="MEAN divides by the number of replicas a second time; the SUM of the replicas' shares is "
                            "the objective: use ReduceOp.SUM.")
        else:
            fb.wrong(f"reduce_op should be a tf.distribute.ReduceOp (SUM or MEAN), got {reduce_op['repr']}.")
        return fb

    @staticmethod
    def _judge_loss(fb, loss, seed):
        """Grades the loss's gradients and value into ``fb``; returns what the cross-entropy part was: "right",
        "per replica" (averaged over each replica's own batch), or None."""
        import numpy as np

        if loss["state"] == "raised":
            if "Reduction" in str(loss["detail"]):
                fb.wrong(f"compute_loss raised inside strategy.run: {loss['error']}. Keras losses must not "
                         f"average by themselves under a strategy.",
                         answer="Create the loss with reduction=NONE (one value per example) and average with "
                                "tf.nn.compute_average_loss.")
            else:
                fb.wrong(f"compute_loss raised inside strategy.run: {loss['error']}")
            return None
        replicas = loss["replicas"]
        n = len(replicas) if type(replicas) is list else 0
        if n not in (1, 2, 4, 8) or any(type(r) is not list or len(r) != 2 + len(KERNEL_SHAPES) for r in replicas):
            raise ValueError("one record [loss, logits' gradient, kernels' gradients] per replica expected")
        values = [r[0] for r in replicas]
        if any(v is None or np.ndim(v) != 0 for v in values):
            shape = next(list(np.shape(v)) for v in values if v is not None) if any(v is not None for v in values) \
                else None
            fb.wrong(f"compute_loss must return one scalar per replica; it returned shape {shape}.",
                     answer="Average the per-example losses with tf.nn.compute_average_loss.")
            return None
        value, want_logits, want_kernels = _reference_objective(seed)
        kind = LossScaling._judge_cross_entropy(fb, [r[1] for r in replicas], want_logits, n, sum(values), seed)
        penalty = LossScaling._judge_penalty(fb, [r[2:] for r in replicas], want_kernels, n)
        if kind == "right" and penalty and not close(float(sum(values)), value):
            fb.points -= 1
            fb.wrong(f"the gradients are right, but the replicas' losses add up to {float(sum(values)):.4f}, not to "
                     f"the objective {value:.4f}: the loss reports a number that its gradients do not come from (a "
                     f"term without a gradient, such as a constant or a value under tf.stop_gradient).")
        return kind

    @staticmethod
    def _judge_cross_entropy(fb, gradients, want, n, total, seed):
        """The line about the gradient with respect to the logits (their replicas' slices in order)."""
        import numpy as np

        got = np.concatenate([np.zeros(part.shape) if g is None else g
                              for g, part in zip(gradients, np.split(want, n))])
        k = _multiple(got, want)
        if k is not None and close(k, 1.0):
            fb.right(f"cross-entropy: summed over the {n} replicas, the gradients with respect to the logits are those "
                     f"of the mean over the global batch", points=1)
            return "right"
        if k == 0.0:
            fb.wrong("no gradient reaches the logits (tape.gradient gives None or zeros): the loss is cut off from "
                     "them (tf.stop_gradient, or a value computed outside TensorFlow, with .numpy()), so a training "
                     "step would not move the weights, whatever number the loss reports.",
                     answer="Compute the per-example losses from the logits themselves, with no tf.stop_gradient.")
        elif k is not None and n > 1 and close(k, n):
            fb.wrong(f"compute_loss averages the cross-entropy over the per-replica batch ({GLOBAL_BATCH // n} "
                     f"examples). The strategy SUMS the replicas' gradients, so they are {n}x too large.",
                     answer="Divide by the global batch: tf.nn.compute_average_loss(per_example_loss, "
                            "global_batch_size=GLOBAL_BATCH_SIZE).")
            return "per replica"
        elif k is not None and close(k, GLOBAL_BATCH):
            fb.wrong(f"compute_loss sums the per-example losses: their gradients are {GLOBAL_BATCH}x those of the "
                     f"mean. What must the replicas' losses, summed by the strategy, add up to?",
                     answer="Divide by the global batch size: tf.nn.compute_average_loss(..., global_batch_size=...).")
        elif k is not None and n > 1 and close(k, 1 / n):
            fb.wrong(f"the gradients with respect to the logits are {n}x too small: the cross-entropy is scaled "
                     f"twice, by the global batch and again by the number of replicas. The strategy SUMS the "
                     f"replicas' gradients: which of the two divisions does that sum need?",
                     answer="Only the global batch: tf.nn.compute_average_loss(per_example_loss, "
                            "global_batch_size=GLOBAL_BATCH_SIZE) is the whole scaling of the cross-entropy; drop the "
                            "division by num_replicas_in_sync.")
        elif k is not None:
            fb.wrong(f"the gradients with respect to the logits are {k:.3g}x those of the mean cross-entropy over "
                     f"the global batch: the cross-entropy is scaled by {k:.3g}. What should the sum of the "
                     f"per-example losses be divided by, and by nothing else?",
                     answer="By GLOBAL_BATCH_SIZE alone: tf.nn.compute_average_loss(per_example_loss, "
                            "global_batch_size=GLOBAL_BATCH_SIZE).")
        else:
            labels, logits, _ = _loss_inputs(seed)
            as_probabilities = _reference_losses(labels, logits, from_logits=False).mean()
            if close(float(total) - _reference_objective(seed)[0] + _reference_losses(labels, logits).mean(),
                     as_probabilities, 1e-3):
                fb.wrong("compute_loss reads the logits as probabilities: its cross-entropy is not that of "
                         "the logits, so neither is its gradient. The model outputs logits.",
                         answer="Use from_logits=True (or tf.nn.sparse_softmax_cross_entropy_with_logits).")
            else:
                fb.wrong("the gradients with respect to the logits are no multiple of those of the mean "
                         "cross-entropy: compute_loss computes another function of the logits than their mean "
                         "cross-entropy (the labels are class numbers; the model outputs logits).")
        return None

    @staticmethod
    def _judge_penalty(fb, gradients, want, n):
        """The line about the kernels' gradients, summed over the replicas; returns whether they are right."""
        import numpy as np

        if all(g is None for replica in gradients for g in replica):
            fb.wrong("the kernels get no gradient (tape.gradient gives None): the loss does not use the kernels "
                     "compute_loss receives, or cuts it off from them (tf.stop_gradient). Add their penalty, "
                     f"WEIGHT_DECAY ({WEIGHT_DECAY:g}) x the sum of their squares.")
            return False
        got = [sum(np.zeros(w.shape) if replica[i] is None else replica[i] for replica in gradients)
               for i, w in enumerate(want)]
        k = _multiple(np.concatenate([g.ravel() for g in got]), np.concatenate([w.ravel() for w in want]))
        scale = ("tf.nn.scale_regularization_loss(penalty) divides the penalty by num_replicas_in_sync, so that the "
                 "summed gradients count it once.")
        if k is not None and close(k, 1.0):
            fb.right(f"penalty: summed over the {n} replicas, the kernels' gradients count it once", points=1)
            return True
        if k == 0.0:
            fb.wrong("the kernels' gradients are zero: the penalty is cut off from the kernels (tf.stop_gradient, or "
                     "a value computed outside TensorFlow).")
        elif k is not None and n > 1 and close(k, n):
            fb.wrong(f"the kernels' gradients, summed over the replicas, are {n}x those of the penalty: every "
                     f"replica adds the whole penalty, and the strategy SUMS the {n} replicas' gradients.",
                     answer=scale)
        elif k is not None and close(k, 0.5):
            fb.wrong("the kernels' gradients are half those of the penalty: tf.nn.l2_loss(w) is sum(w**2) / 2, and "
                     "the penalty is WEIGHT_DECAY x sum(w**2).")
        elif k is not None and n > 1 and close(k, n / 2):
            fb.wrong(f"the kernels' gradients are {n / 2:g}x those of the penalty: tf.nn.l2_loss(w) is sum(w**2) / 2, "
                     f"and every replica adds the whole penalty while the strategy SUMS the replicas' gradients.",
                     answer=scale)
        elif k is not None and (close(k, n / GLOBAL_BATCH) or close(k, 1 / GLOBAL_BATCH)):
            fb.wrong("the penalty is divided by the batch size: it is one term of the whole step, not a loss per "
                     "example. What does summing it over the replicas do, and what must each replica divide it by?",
                     answer=scale)
        elif k is not None:
            fb.wrong(f"the kernels' gradients, summed over the replicas, are {k:.3g}x those of the penalty "
                     f"WEIGHT_DECAY x sum(w**2).", answer=scale)
        else:
            fb.wrong("the kernels' gradients, summed over the replicas, are no multiple of those of the penalty "
                     "WEIGHT_DECAY x the sum of the squares of every kernel's entries (every kernel counts).")
        return False


STRATEGY_NAMES = {
    "mirroredstrategy": "MirroredStrategy",
    "multiworkermirroredstrategy": "MultiWorkerMirroredStrategy",
    "collectiveallreducestrategy": "MultiWorkerMirroredStrategy",
    "parameterserverstrategy": "ParameterServerStrategy",
    "parameterserverstrategyv2": "ParameterServerStrategy",
    "onedevicestrategy": "OneDeviceStrategy",
    "centralstoragestrategy": "CentralStorageStrategy",
    "tpustrategy": "TPUStrategy",
    "multidevicestrategy": "MultiDeviceStrategy",
    "dtensor": "DTensor",
}
SCENARIOS = {  # the scenarios of exercise 3, as the notebook states them
    "a": "One machine with 4 GPUs. Synchronous data parallelism; every GPU keeps its own copy of every variable.",
    "b": "Two machines with 4 GPUs each. Synchronous data parallelism over all 8 GPUs.",
    "c": "Dozens of preemptible machines. Workers should not wait for each other (asynchronous updates), and a huge "
         "embedding table should be split over a few servers.",
    "d": "A laptop with one GPU. The strategy.scope() code should run unchanged, with all variables and all "
         "computation placed on one device that you name, and no mirroring.",
    "e": "One machine with several GPUs, synchronous training, but the variables are kept in one place (the CPU) "
         "instead of being mirrored on every GPU.",
    "f": "A single weight matrix is too large for one device's memory: each weight must be split over several "
         "devices (model parallelism).",
}


def _reference_scenario_strategies():
    """Exercise 3's answer: the strategy of each scenario."""
    return {"a": "MirroredStrategy", "b": "MultiWorkerMirroredStrategy", "c": "ParameterServerStrategy",
            "d": "OneDeviceStrategy", "e": "CentralStorageStrategy", "f": "DTensor"}


def _reference_name_why():
    """Why a name that is no choice is wrong (without naming the right one)."""
    return {
        "MultiDeviceStrategy": "tf.distribute has no MultiDeviceStrategy (a name that circulates): pick one of the "
                               "six choices.",
        "TPUStrategy": "TPUStrategy is for TPUs; no scenario here has one.",
    }


def _reference_scenario_why():
    """Why a strategy does not fit a scenario, for the typical wrong choices (together they rule strategies out)."""
    return {
        ("a", "MultiWorkerMirroredStrategy"): "MultiWorkerMirroredStrategy is for several machines (each process "
                                              "needs TF_CONFIG).",
        ("a", "CentralStorageStrategy"): "CentralStorageStrategy keeps ONE copy of the variables on the CPU; here "
                                         "every GPU keeps its own mirror.",
        ("b", "MirroredStrategy"): "MirroredStrategy only uses the devices of its own machine.",
        ("b", "ParameterServerStrategy"): "ParameterServerStrategy is asynchronous; the scenario asks for "
                                          "synchronous training.",
        ("c", "MultiWorkerMirroredStrategy"): "MultiWorkerMirroredStrategy is synchronous: every step waits for "
                                              "all workers (all-reduce), and a lost worker fails the step.",
        ("c", "DTensor"): "Splitting an embedding table over servers and letting workers run asynchronously is the "
                          "job of a tf.distribute strategy, with variable partitioning.",
        ("d", "MirroredStrategy"): "MirroredStrategy with one device runs, but it is built to mirror variables over "
                                   "devices: which of the choices is built for exactly this case?",
        ("e", "MirroredStrategy"): "MirroredStrategy keeps a copy of every variable on every device.",
        ("e", "ParameterServerStrategy"): "ParameterServerStrategy needs a cluster of worker and parameter-server "
                                          "processes and is asynchronous.",
        ("f", "ParameterServerStrategy"): "ParameterServerStrategy is data parallelism: it can shard a variable's "
                                          "storage over the servers (variable_partitioner), but a worker runs the "
                                          "whole model and puts a sharded weight back together to multiply by it, "
                                          "so each weight must still fit on a worker.",
        ("f", "CentralStorageStrategy"): "CentralStorageStrategy is synchronous data parallelism with the "
                                         "variables on the CPU, not model parallelism.",
        ("f", "MirroredStrategy"): "MirroredStrategy copies the WHOLE model to every device; it cannot split a "
                                   "weight.",
        ("f", "MultiWorkerMirroredStrategy"): "MultiWorkerMirroredStrategy also copies the whole model to every "
                                              "device.",
    }

STRATEGY_ABBREVIATIONS = {"mwms": "MultiWorkerMirroredStrategy", "pss": "ParameterServerStrategy",
                          "css": "CentralStorageStrategy", "ods": "OneDeviceStrategy"}


def normalize_strategy(value):
    """A strategy class, instance or name as the canonical name: ``"tf.distribute.MirroredStrategy()"``,
    ``"mirrored strategy"``, ``"Mirrored"``, ``"multi-worker mirrored"``, ``"MWMS"``; the dtensor module's name (as
    :meth:`PickStrategy.collect` passes it) for DTensor. Anything else is returned as it is."""
    if isinstance(value, type):
        value = value.__name__
    elif not isinstance(value, str):
        value = type(value).__name__
    text = re.sub(r"\(.*\)\s*$", "", value.strip().strip("'\"").lower()).strip()  # MirroredStrategy(cpus)
    if text.split(".")[-1] == "dtensor":  # tf.experimental.dtensor, or the module's own name
        return "DTensor"
    for prefix in ("tensorflow.", "tf.distribute.experimental.", "tf.distribute.", "distribute.experimental.",
                   "distribute.", "experimental.", "tf."):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = re.sub(r"[\s_\-]", "", text)
    if text.startswith("dtensor") or text in ("experimental.dtensor", "tf.dtensor"):
        return "DTensor"
    if text in STRATEGY_ABBREVIATIONS:
        return STRATEGY_ABBREVIATIONS[text]
    if not text.endswith("strategy") and not text.endswith("strategyv2"):
        text += "strategy"  # "Mirrored", "OneDevice"
    return STRATEGY_NAMES.get(text, value)


class PickStrategy(Exercise):
    title = "Pick the right strategy"
    points = 6
    hints = (
        "Ask of each scenario: one machine or several? synchronous or asynchronous?",
        "Then: are the variables mirrored, kept on the CPU, or on parameter servers (which can also shard a large "
        "variable's storage over several servers, with a variable_partitioner)? And must the computation with one "
        "WEIGHT be split over devices because the weight does not fit on one (model parallelism)? No "
        "tf.distribute strategy does that: a parameter-server worker still runs the whole model, and to multiply "
        "by a sharded weight it puts the shards back together.",
    )

    def collect(self, choices, seed=0):
        """The choices as they are, except a module (``tf.experimental.dtensor`` itself), which crosses as its name."""
        import types

        def plain(value):
            return value.__name__ if isinstance(value, types.ModuleType) else value

        return [{key: plain(value) for key, value in choices.items()} if isinstance(choices, dict) else choices]

    def grade(self, choices):
        expected = _reference_scenario_strategies()
        scenario_why, name_why = _reference_scenario_why(), _reference_name_why()

        def explain(key, given, raw):
            right = f"It is {expected[key]}."
            if (key, given) in scenario_why:
                return scenario_why[(key, given)], right
            if given in name_why:
                return name_why[given], right
            if given not in STRATEGY_NAMES.values():
                return (f"{raw!r} is not one of the choices: MirroredStrategy, MultiWorkerMirroredStrategy, "
                        f"ParameterServerStrategy, OneDeviceStrategy, CentralStorageStrategy, DTensor."), ""
            return f"{given} does not fit: {SCENARIOS[key]}", right

        return grade_items(Feedback(), choices, expected, explain, normalize_strategy, "one strategy name per scenario")


CHAPTER = chapter(2, "Strategies on one machine", [BatchAndLearningRate, LossScaling, PickStrategy,
                                                      DistributedStep])
