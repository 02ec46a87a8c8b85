"""Chapter 2 · exercise 2: a loss with a penalty term, scaled for a custom distributed step, whose gradients the
checker takes in every replica of its own strategy."""
from .answers import close, logical_cpus, quiet_tensorflow, short_error
from .core import Exercise, Feedback
from .ch2_step_run import checker_strategy

# Exercise 2: compute_loss(labels, logits, kernels) whose gradients, summed over the replicas, are those of the
# objective: the mean cross-entropy over the global batch plus WEIGHT_DECAY x the sum of the kernels' squares.
GLOBAL_BATCH = 64
WEIGHT_DECAY = 0.01
KERNEL_SHAPES = ((6, 4), (4, 10))  # the checker's kernels (mirrored variables); its logits are its own too
LOSS_KEY_BASE = 10_000  # the collectives of exercise 2's checker strategy are numbered from here
OTHER_REPLICAS = 4  # the checker's second strategy: a number of replicas typed into compute_loss is found out
_KERNELS = {}


def _checker_strategy(replicas=None):
    """A MirroredStrategy over ``replicas`` logical CPUs (default: this process's, at most 8, a divisor of 64), made
    once (see :func:`.ch2_step_run.checker_strategy`)."""
    cpus = logical_cpus()
    if replicas is None:
        return checker_strategy(max(k for k in (1, 2, 4, 8) if k <= len(cpus)), LOSS_KEY_BASE)
    return checker_strategy(replicas, LOSS_KEY_BASE + 1000 * replicas)


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


def _run_compute_loss(compute_loss, seed, replicas=None):
    """Run ``compute_loss`` in every replica (eagerly: no trace to build) on its slice of the batch of ``seed``, with
    the checker's kernels, under a tape that watches the logits. Returns per replica (loss, gradient with respect to
    its logits, gradients with respect to the kernels), as arrays (None for a gradient the tape did not record).
    ``replicas``: the strategy's (see :func:`_checker_strategy`)."""
    import numpy as np
    import tensorflow as tf

    strategy = _checker_strategy(replicas)
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
        its logits, gradient with respect to each kernel] (arrays, None where the tape recorded nothing), and "other":
        the same for a strategy of OTHER_REPLICAS replicas (or the error it raised there)};
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
            if loss["state"] == "ran" and len(loss["replicas"]) != OTHER_REPLICAS:
                try:
                    with quiet_tensorflow():
                        loss["other"] = _run_compute_loss(compute_loss, seed, OTHER_REPLICAS)
                except Exception as err:
                    loss["other"] = short_error(err)
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
            before = fb.points
            kind = self._judge_loss(fb, loss, seed)
            self._judge_other_replicas(fb, loss, seed, fb.points - before)
        op = _reduce_op_name(reduce_op["value"])
        replicas = len(loss["replicas"]) if loss["state"] == "ran" and type(loss["replicas"]) is list else 8
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
                     f"reports 1/{replicas} of it. What is each replica's loss already divided by, and what does MEAN "
                     f"divide by on top?",
                     answer="MEAN divides by the number of replicas a second time; the SUM of the replicas' shares is "
                            "the objective: use ReduceOp.SUM.")
        else:
            fb.wrong(f"reduce_op should be a tf.distribute.ReduceOp (SUM or MEAN), got {reduce_op['repr']}.")
        return fb

    @staticmethod
    def _judge_other_replicas(fb, loss, seed, earned):
        """The loss that earned ``earned`` points with the checker's first strategy loses those the second one's run
        does not earn: a number of replicas typed in (penalty / 8) is right for one strategy only."""
        if not earned or "other" not in loss:
            return
        if isinstance(loss["other"], str):
            lost, said = earned, f"compute_loss raised {loss['other'][:200]}."
        else:
            other = Feedback()
            LossScaling._judge_loss(other, {"state": "ran", "replicas": loss["other"]}, seed)
            lost, said = earned - max(0, other.points), "the replicas' summed gradients are not the objective's."
        if lost > 0:
            fb.points -= lost
            fb.wrong(f"with the checker's second strategy, of {OTHER_REPLICAS} replicas, {said} Right with "
                     f"{len(loss['replicas'])} replicas only: does compute_loss divide by a number of replicas typed "
                     f"in rather than by the strategy's?",
                     answer="tf.nn.scale_regularization_loss divides by the running strategy's num_replicas_in_sync "
                            "(tf.distribute.get_strategy().num_replicas_in_sync).")

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
