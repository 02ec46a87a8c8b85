"""Chapter 2 · the build-and-measure exercise: a distributed training step whose loss scaling the
learner writes (exercise 4)."""

from .answers import close, logical_cpus, quiet_tensorflow, short_error
from .core import Exercise, Feedback


# Exercise 4: the learner's whole distributed step, run by the checker on its own strategy, model and data. Its
# MirroredStrategy has 3 replicas (the notebook's 8) and its batches 18 examples (the notebook's 64): 34 examples make
# one full batch, split 6, 6, 6, and a last batch of 16, split 6, 6, 4, as experimental_distribute_dataset splits them
# (a test checks it). The checker builds the two distributed batches itself, with
# experimental_distribute_values_from_function: making a distributed dataset's iterator was seen to stall for up to
# 18 s on a busy 2-core machine. Most of a check is tracing the learner's step: it is traced once for both batches
# (_one_trace: their shapes differ, so a call with each would trace twice), each replica is traced in that trace (hence
# 3 replicas), and the optimizer is built before the step is made, so that its first call creates no variable (a
# tf.function that creates variables traces twice).
def _mirrored_with_own_keys(devices, key_base):
    """A MirroredStrategy that numbers its collectives from ``key_base``, so that it neither joins nor reuses the
    collectives of the notebook's own strategies (chapter 2's timing section)."""
    import tensorflow as tf

    own_keys = type("CheckerMirroredStrategy", (tf.distribute.MirroredStrategy,), {"_collective_key_base": key_base})
    return own_keys(devices=list(devices))


STEP_REPLICAS, STEP_BATCH, STEP_EXAMPLES = 3, 18, 34
STEP_SPLITS = ((6, 6, 6), (6, 6, 4))  # per replica, the full batch and the last
STEP_SHAPE = (6, 8, 3)  # features, hidden units and classes of the checker's model
STEP_RATE = 0.5  # plain SGD: one step changes every variable by -STEP_RATE x its gradient
STEP_KEY_BASE = 20_000  # the collective numbers of the checker's strategy (see _step_strategy)
STEP_NOTEBOOK_BATCH = 64  # the exercise notebook's batch size
STEP_VARIABLES = ("layer 1's kernel", "layer 1's bias", "layer 2's kernel", "layer 2's bias")
_CHECKER_STRATEGIES = {}  # (devices, key base) -> a checker's MirroredStrategy


class _StepAnswerError(Exception):
    """A problem with the learner's answer that the checker explains in its own words."""


def checker_strategy(replicas, key_base):
    """A checker's MirroredStrategy over the first ``replicas`` logical CPUs, numbering its collectives from
    ``key_base``, made once per process.

    Each MirroredStrategy numbers its collectives from the same start, so a second one over another number of devices
    would join the notebook's group with the wrong size (chapter 2's timing section), and a second one over the same
    devices would reuse the numbers of other collectives. Each checker's gets numbers of its own with the class
    attribute ``_collective_key_base``, as the chapter's ``mirrored_over`` does, and is made only once.

    Raises:
        RuntimeError: this process has fewer logical CPUs (its message says what to do).
    """
    cpus = logical_cpus()
    if len(cpus) < replicas:
        raise RuntimeError(f"the checker needs {replicas} logical CPUs and this kernel has {len(cpus)}: run the "
                           f"notebook's first cell (configure_virtual_cpus(8)) in a fresh kernel, then check again.")
    key = (tuple(cpus[:replicas]), key_base)
    if key not in _CHECKER_STRATEGIES:
        with quiet_tensorflow():
            _CHECKER_STRATEGIES[key] = _mirrored_with_own_keys(key[0], key_base)
    return _CHECKER_STRATEGIES[key]


def _step_strategy():
    """Exercise 4's checker strategy: STEP_REPLICAS replicas (see :func:`checker_strategy`)."""
    try:
        return checker_strategy(STEP_REPLICAS, STEP_KEY_BASE)
    except RuntimeError as err:
        raise _StepAnswerError(str(err)) from err


def _step_data(seed=0):
    """The checker's examples, labels and starting weights, drawn from ``seed``, as NumPy arrays."""
    import numpy as np

    rng = np.random.default_rng(seed)
    features, hidden, classes = STEP_SHAPE
    x = rng.normal(size=(STEP_EXAMPLES, features)).astype("float32")
    y = rng.integers(0, classes, size=STEP_EXAMPLES).astype("int64")
    weights = [rng.normal(scale=0.5, size=(features, hidden)), rng.normal(scale=0.1, size=(hidden,)),
               rng.normal(scale=0.5, size=(hidden, classes)), rng.normal(scale=0.1, size=(classes,))]
    return x, y, [w.astype("float32") for w in weights]


def _step_batches(x, y):
    """The two batches as their per-replica parts [(x, y), ...], consecutive examples as a dataset batched by
    STEP_BATCH gives them, split as STEP_SPLITS says."""
    import numpy as np

    batches, first = [], 0
    for sizes in STEP_SPLITS:
        bounds = np.cumsum([first, *sizes])
        first = bounds[-1]
        batches.append([(x[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
    return batches


def _reference_one_device_gradient(weights, x, y):
    """The mean cross-entropy over (x, y) and its gradient per variable, on one device, with plain ops."""
    import tensorflow as tf

    w = [tf.Variable(v) for v in weights]
    with tf.GradientTape() as tape:
        logits = tf.nn.relu(x @ w[0] + w[1]) @ w[2] + w[3]
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return float(loss), [g.numpy().astype("float64") for g in tape.gradient(loss, w)]


def _reference_step_expected(weights, parts):
    """For one distributed batch (its per-replica parts): the loss and change of every variable of one SGD step on one
    device with the whole batch; and the same when each replica's examples are weighted by 1 / (its own batch x
    replicas), the step of a loss divided by the per-replica batch x replicas."""
    import numpy as np

    loss, gradients = _reference_one_device_gradient(weights, np.concatenate([x for x, _ in parts]),
                                                     np.concatenate([y for _, y in parts]))
    per_replica = [_reference_one_device_gradient(weights, x, y) for x, y in parts if len(y)]
    weighted = [sum(g[i] for _, g in per_replica) / len(parts) for i in range(len(weights))]
    return {"loss": loss, "change": [-STEP_RATE * g for g in gradients],
            "weighted_loss": sum(l for l, _ in per_replica) / len(parts),
            "weighted_change": [-STEP_RATE * g for g in weighted]}


def _run_train_step(make_train_step, seed):
    """Build the checker's model under its strategy, make the learner's step and run it on each batch of ``seed``,
    every time from the same weights. One record per batch: what train_step returned (see _returned_as_data) and
    every variable's copies (one per replica) after the step."""
    import numpy as np
    import tf_keras

    with quiet_tensorflow():
        strategy = _step_strategy()
        x, y, start = _step_data(seed)
        features, hidden, classes = STEP_SHAPE
        with strategy.scope():
            model = tf_keras.Sequential([tf_keras.Input((features,)),
                                         tf_keras.layers.Dense(hidden, activation="relu"),
                                         tf_keras.layers.Dense(classes)])
            optimizer = tf_keras.optimizers.SGD(learning_rate=STEP_RATE)
            optimizer.build(model.trainable_variables)  # its variables now, not in the step's first trace
        model.set_weights(start)
        try:
            train_step = make_train_step(strategy, model, optimizer)
        except Exception as err:
            raise _StepAnswerError(f"make_train_step(strategy, model, optimizer) raised {short_error(err)}") from err
        if not callable(train_step):
            raise _StepAnswerError(f"make_train_step(strategy, model, optimizer) returned a "
                                   f"{type(train_step).__name__}; it should return the function "
                                   f"train_step(features, labels).")
        run_step = _one_trace(strategy, train_step, features)
        records = []
        for parts in _step_batches(x, y):
            model.set_weights(start)
            returned = _returned_as_data(run_step(*[part[0] for part in parts], *[part[1] for part in parts]))
            copies = [[np.asarray(c.numpy(), dtype="float64") for c in strategy.experimental_local_results(v)]
                      for v in model.weights]
            records.append({"returned": returned, "copies": copies})
    return records


def _one_trace(strategy, train_step, features):
    """``train_step`` called from a tf.function whose per-replica batches have an unknown number of examples (shape
    [None, ...], as a dataset's batches have when its last one is smaller), so that the learner's step is traced once
    for both batches, not once per batch. Takes each replica's features, then each replica's labels."""
    import tensorflow as tf

    n = strategy.num_replicas_in_sync
    specs = [tf.TensorSpec([None, features], tf.float32)] * n + [tf.TensorSpec([None], tf.int64)] * n

    @tf.function(input_signature=specs)
    def run_step(*parts):
        return train_step(_per_replica(strategy, parts[:n]), _per_replica(strategy, parts[n:]))
    return run_step


def _returned_as_data(value):
    """What train_step returned, as data: None, a float64 array of at most 64 numbers, {"shape": [...]} for more,
    or {"type": name} for a PerReplica value or a value that is no array of numbers."""
    import numpy as np

    if value is None:
        return None
    if hasattr(value, "values") and type(value).__name__ == "PerReplica":
        return {"type": "PerReplica"}
    try:
        array = np.asarray(value, dtype="float64")
    except Exception:
        return {"type": type(value).__name__}
    return array if array.size <= 64 else {"shape": list(array.shape)}


def _per_replica(strategy, values):
    """A PerReplica value with ``values[i]`` on replica i's device, as a distributed dataset gives it."""
    import tensorflow as tf

    devices = strategy.extended.worker_devices

    def on_replica(context):
        with tf.device(devices[context.replica_id_in_sync_group]):
            return tf.identity(values[context.replica_id_in_sync_group])
    return strategy.experimental_distribute_values_from_function(on_replica)


def _factor(change, reference):
    """The number k with change = k x reference for every variable (to float32 rounding), or None."""
    import numpy as np

    u = np.concatenate([a.ravel() for a in change])
    r = np.concatenate([a.ravel() for a in reference])
    k = float(u @ r / (r @ r))
    return k if np.linalg.norm(u - k * r) <= 1e-3 * np.linalg.norm(r) * max(abs(k), 1e-3) else None


def _diagnose_change(record):
    """What one batch's step did: ("right",), ("diverged",), ("unchanged",), ("scaled", k) (k x the right change),
    ("weighted", k) (k x the change of a loss divided by the per-replica batch x replicas) or ("other", names)."""
    import numpy as np

    copies, start = record["copies"], record["start"]
    if any(not np.allclose(c, cs[0], rtol=1e-5, atol=1e-7) for cs in copies for c in cs[1:]):
        return ("diverged",)
    change = [cs[0] - s for cs, s in zip(copies, start)]
    right = record["change"]
    wrong = [name for name, u, r in zip(STEP_VARIABLES, change, right) if not np.allclose(u, r, rtol=1e-4, atol=1e-6)]
    if not wrong:
        return ("right",)
    if all(np.abs(u).max() < 1e-9 for u in change):
        return ("unchanged",)
    for kind, reference in (("scaled", right), ("weighted", record["weighted_change"])):
        k = _factor(change, reference)
        if k is not None:
            return (kind, k)
    return ("other", wrong)


def _close_to(k, value):
    return abs(k - value) <= 1e-3 * abs(value)


def _fixed_divisor(diagnoses, records):
    """The number the step divided every batch's summed loss by, if it was the same for every batch, else None."""
    divisors = [sum(r["sizes"]) / d[1] for d, r in zip(diagnoses, records) if d[0] == "scaled" and d[1] > 0]
    if len(divisors) == len(records) and all(_close_to(d, round(d)) for d in divisors) and \
            len({round(d) for d in divisors}) == 1:
        return round(divisors[0])
    return None


def _same_mistake(first, diagnosis, replicas, fixed):
    """Whether the last batch's diagnosis is the full batch's mistake again (a fixed divisor, or the same factor)."""
    if first[0] == "right":
        return False
    if fixed is not None or first[0] == diagnosis[0] and first[0] in ("diverged", "unchanged", "other"):
        return True
    if first[0] in ("scaled", "weighted") and diagnosis[0] in ("scaled", "weighted"):
        return _close_to(diagnosis[1], first[1])  # e.g. 4x: per-replica means (a 'weighted' step once uneven)
    return False


def _returned_scaled(record, replicas):
    """Whether train_step returned 1/replicas of the batch's mean loss (or of the loss of a step that weighted each
    replica's examples by its own batch)."""
    try:
        got = _returned_loss(record["returned"])
    except _StepAnswerError:
        return False
    return any(close(got, record[key] / replicas, 1e-4) for key in ("loss", "weighted_loss"))


def _reference_divide_once():
    """The fix of a loss scaled twice (given away only after a wrong try)."""
    return ("Divide each replica's summed loss only by the examples of the whole step (tf.nn.compute_average_loss("
            "per_example_loss, global_batch_size=examples)), drop the division by num_replicas_in_sync, and combine "
            "the replicas' losses with ReduceOp.SUM: apply_gradients then sums the replicas' gradients into the "
            "gradient of the mean.")


def _reference_count_it():
    """The fix of 2.4's loss scaling, in words (given away only after a wrong try)."""
    return ("Count the examples of the whole step, over all replicas: inside the replica function "
            "examples = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, "
            "tf.shape(labels)[0]), then tf.nn.compute_average_loss(per_example_loss, global_batch_size=examples).")


def _judge_explain_change(fb, diagnosis, record, replicas, fixed, first):
    """One ✗ line about one batch's change. ``first`` is the diagnosis of the full batch (None for the full batch)."""
    what = "the full batch" if first is None else "the last batch"
    head = f"{what} of {sum(record['sizes'])} examples (split {', '.join(map(str, record['sizes']))}):"
    kind = diagnosis[0]
    if first is not None and _same_mistake(first, diagnosis, replicas, fixed):
        fb.wrong(f"{head} the same mistake.")
    elif kind == "diverged":
        fb.wrong(f"{head} after your step the {replicas} copies of a mirrored variable differ: each replica applied "
                 f"its own gradient, so the replicas no longer hold the same model.",
                 answer="apply_gradients sums the replicas' gradients unless told not to "
                        "(skip_gradients_aggregation=True); if you skip that, all-reduce them yourself with SUM.")
    elif kind == "unchanged":
        fb.wrong(f"{head} the variables of the model make_train_step received did not change. Does train_step apply "
                 f"the gradients to that model's variables, with that optimizer (its arguments, not this notebook's "
                 f"model and optimizer)?")
    elif fixed == 1 or (kind == "scaled" and _close_to(diagnosis[1], sum(record["sizes"]))):
        fb.wrong(f"{head} every variable changed {diagnosis[1]:.3g}x as much as in one step on one device: the loss "
                 f"is the SUM over the examples, not their mean.", answer=_reference_count_it())
    elif (kind in ("scaled", "weighted")) and _close_to(diagnosis[1], replicas):
        fb.wrong(f"{head} every variable changed {replicas}x as much as in one step on one device: each replica "
                 f"divided its loss by its OWN batch, and the strategy SUMS the {replicas} replicas' gradients "
                 f"(the chapter's 'why the loss is divided by the global batch size').",
                 answer=_reference_count_it())
    elif kind in ("scaled", "weighted") and _close_to(diagnosis[1], 1 / replicas) and \
            _returned_scaled(record, replicas):
        fb.wrong(f"{head} every variable changed 1/{replicas} as much as in one step on one device, and the loss "
                 f"train_step returned is 1/{replicas} of the batch's mean loss too: the loss was scaled twice, "
                 f"divided by the examples of the whole step AND by the number of replicas (a division by "
                 f"num_replicas_in_sync, or a mean over the replicas). The strategy SUMS the replicas' gradients: "
                 f"which of the two divisions does that sum need?", answer=_reference_divide_once())
    elif kind == "scaled" and _close_to(diagnosis[1], 1 / replicas):
        fb.wrong(f"{head} every variable changed 1/{replicas} as much as in one step on one device: the loss was "
                 f"divided by the whole batch AND the gradients averaged over the {replicas} replicas (ReduceOp.MEAN, "
                 f"or a division by num_replicas_in_sync). Dividing by the whole batch already makes the mean.",
                 answer="Sum the replicas' gradients: apply_gradients does it by default (or all-reduce with "
                        "ReduceOp.SUM).")
    elif fixed is not None:
        which = (", this notebook's batch size" if fixed == STEP_NOTEBOOK_BATCH else
                 ", the size of the checker's full batch" if fixed == STEP_BATCH else "")
        fb.wrong(f"{head} every variable changed {diagnosis[1]:.3g}x as much as in one step on one device: your step "
                 f"divides the summed loss by {fixed}{which}, whatever batch it gets. The checker's batches have "
                 f"{STEP_BATCH} and {STEP_EXAMPLES - STEP_BATCH} examples: the divisor must come from the batch the "
                 f"step receives.", answer=_reference_count_it())
    elif kind == "weighted" and _close_to(diagnosis[1], 1):
        small = min(size for size in record["sizes"] if size)
        fb.wrong(f"{head} each replica divided its summed loss by its own batch x {replicas}, which is the number "
                 f"of examples of the whole step only when the shares are equal: here the {small} examples of the "
                 f"last replica count {max(record['sizes']) / small:.3g}x as much as the others'. "
                 f"(tf.nn.compute_average_loss without global_batch_size assumes equal shares, and so does averaging "
                 f"the replicas' mean gradients.)",
                 answer=_reference_count_it())
    elif kind == "scaled" and first is not None and _close_to(diagnosis[1] * STEP_BATCH, sum(record["sizes"])):
        fb.wrong(f"{head} it was divided by {STEP_BATCH}, the size of the full batches, not by its own "
                 f"{sum(record['sizes'])} examples.", answer=_reference_count_it())
    elif kind in ("scaled", "weighted"):
        fb.wrong(f"{head} every variable changed {diagnosis[1]:.3g}x as much as it should"
                 + (" (with each replica's examples weighted by its own batch)" if kind == "weighted" else "") + ".",
                 answer=_reference_count_it())
    else:
        names = "every variable" if len(diagnosis[1]) == len(STEP_VARIABLES) else ", ".join(diagnosis[1])
        fb.wrong(f"{head} {names} changed otherwise than in one SGD step (learning rate {STEP_RATE}) on one "
                 f"device with the mean cross-entropy of the whole batch. The model outputs logits.")


def _returned_loss(value):
    """What train_step returned (as _returned_as_data gives it), as a float; raises _StepAnswerError with what is
    wrong."""
    import numpy as np

    if value is None:
        raise _StepAnswerError("train_step returned None; it should return the mean loss of the batch.")
    if isinstance(value, dict) and value.get("type") == "PerReplica":
        raise _StepAnswerError("train_step returned a PerReplica value (one loss per replica); combine them into the "
                               "loss of the whole batch with strategy.reduce(..., axis=None).")
    if isinstance(value, dict) and "type" in value:
        raise _StepAnswerError(f"train_step returned a {value['type']}; it should return one number, the mean "
                               f"loss of the batch.")
    shape = [int(n) for n in value["shape"]] if isinstance(value, dict) else list(np.shape(value))
    size = int(np.prod(shape))
    if size != 1:
        raise _StepAnswerError(f"train_step returned {size} numbers (shape {shape}); it should "
                               f"return one, the mean loss of the batch.")
    return float(np.asarray(value, dtype="float64").ravel()[0])


def _grade_returned_loss(fb, records, replicas):
    try:
        got = [_returned_loss(r["returned"]) for r in records]
    except _StepAnswerError as err:
        fb.wrong(str(err))
        return
    want = [r["loss"] for r in records]
    if all(close(g, w, 1e-4) for g, w in zip(got, want)):
        fb.right(f"train_step returned {got[0]:.4f} and {got[1]:.4f}, the mean cross-entropy of each batch on one "
                 f"device")
        return
    said = (f"train_step returned {got[0]:.4f} for the full batch and {got[1]:.4f} for the last; their mean "
            f"cross-entropies on one device are {want[0]:.4f} and {want[1]:.4f}")
    if all(_returned_scaled(r, replicas) for r in records) and \
            all(_diagnose_change(r)[0] in ("scaled", "weighted") and _close_to(_diagnose_change(r)[1], 1 / replicas)
                for r in records):
        fb.wrong(f"{said}: 1/{replicas} of them, the same double scaling as the step's change above.")
    elif all(close(g, w / replicas, 1e-4) for g, w in zip(got, want)):
        fb.wrong(f"{said}: 1/{replicas} of them. Each replica's loss is already divided by the whole batch: what "
                 f"does the reduction of the replicas' losses divide by on top?",
                 answer="ReduceOp.MEAN divides by the number of replicas once more: combine the replicas' losses "
                        "with strategy.reduce(tf.distribute.ReduceOp.SUM, ..., axis=None).")
    elif all(close(g, r["weighted_loss"], 1e-4) for g, r in zip(got, records)):
        fb.wrong(f"{said}: each replica's loss was divided by its own batch x {replicas}, which weights the examples "
                 f"of an uneven batch unequally.")
    else:
        fb.wrong(f"{said}.")


class DistributedStep(Exercise):
    title = "A distributed step right for every batch"
    points = 4
    hints = (
        "Under strategy.run the replicas' gradients are SUMMED. What must each replica divide its summed loss by, so "
        "that the sum is the gradient of the batch's mean loss, when the last batch is smaller and its replicas do "
        "not get equal shares?",
        "In replica_step(features, labels): a GradientTape around the forward pass, per-example losses "
        "(reduction=NONE), their sum divided by the number of examples of the WHOLE step, apply_gradients. In a "
        "tf.function train_step: strategy.run(replica_step, ...) and strategy.reduce(SUM, losses, axis=None). The "
        "whole step's count is the sum of the replicas' batch sizes: add up tf.shape(y)[0] of "
        "strategy.experimental_local_results(labels) before strategy.run (and pass it in args), or all-reduce "
        "tf.shape(labels)[0] inside replica_step.",
        "Inside replica_step: examples = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, "
        "tf.shape(labels)[0]); loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=examples).",
    )

    def collect(self, make_train_step, seed=0):
        """Runs ``make_train_step`` on the checker's strategy, model and optimizer, then its train_step on the two
        batches drawn from ``seed``. What crosses, one of: {"not callable": type name}; {"problem": what is wrong,
        in the checker's words}; {"raised": one line about the error train_step raised, "text": the error's text
        (cut)}; {"records": per batch, {"returned": what train_step returned (see _returned_as_data), "copies":
        per variable, its value on each replica after the step}}."""
        if not callable(make_train_step):
            return {"not callable": type(make_train_step).__name__}
        try:
            return {"records": _run_train_step(make_train_step, seed)}
        except _StepAnswerError as err:
            return {"problem": str(err)}
        except Exception as err:
            text = str(err)
            return {"raised": _last_error(err), "text": text if len(text) <= 12_000 else text[:6000] + text[-6000:]}

    def judge(self, data, seed=0):
        """Grades the data of :meth:`collect`: each batch's variables against one SGD step on one device with the
        whole batch of ``seed``, and what train_step returned against that batch's mean loss."""
        fb = Feedback()
        if "not callable" in data:
            fb.wrong(f"make_train_step should be a function (strategy, model, optimizer) -> train_step, got "
                     f"{data['not callable']}.")
            return fb
        if "problem" in data:
            fb.wrong(str(data["problem"]))
            return fb
        if "raised" in data:
            text = str(data["text"])
            fb.wrong(f"train_step raised {data['raised']}" + _step_error_hint(text), answer=_judge_step_error_answer(text))
            return fb
        records = self._judge_records(data["records"], seed)
        replicas = STEP_REPLICAS
        diagnoses = [_diagnose_change(r) for r in records]
        fixed = _fixed_divisor(diagnoses, records)
        for index, (diagnosis, record, points) in enumerate(zip(diagnoses, records, (2, 1))):
            if diagnosis == ("right",):
                what = "the full batch" if index == 0 else "the last batch"
                fb.right(f"{what} of {sum(record['sizes'])} examples (split {', '.join(map(str, record['sizes']))} "
                         f"over {replicas} replicas): every variable changed as in one SGD step on one device with "
                         f"the whole batch", points=points)
            else:
                _judge_explain_change(fb, diagnosis, record, replicas, fixed, None if index == 0 else diagnoses[0])
        _grade_returned_loss(fb, records, replicas)
        return fb

    @staticmethod
    def _judge_records(collected, seed):
        """The collected records, checked for shape, with the sizes, starting weights and what one device expects
        for the batches of ``seed``. Raises ValueError on records of another shape."""
        import numpy as np

        x, y, start = _step_data(seed)
        batches = _step_batches(x, y)
        if type(collected) is not list or len(collected) != len(batches):
            raise ValueError(f"{len(batches)} batch records expected")
        records = []
        for record, parts in zip(collected, batches):
            copies = record["copies"]
            if type(copies) is not list or len(copies) != len(start):
                raise ValueError(f"{len(start)} variables expected")
            checked = []
            for variable, value in zip(copies, start):
                if type(variable) is not list or len(variable) != STEP_REPLICAS:
                    raise ValueError(f"{STEP_REPLICAS} copies of each variable expected")
                arrays = [np.asarray(c, dtype="float64") for c in variable]
                if any(a.shape != value.shape for a in arrays):
                    raise ValueError("a variable's copy has another shape than the variable")
                checked.append(arrays)
            records.append({"sizes": [len(py) for _, py in parts], "returned": record["returned"], "copies": checked,
                            "start": start, **_reference_step_expected(start, parts)})
        return records


def _last_error(err):
    """One line about an error; for an error raised while tf.function traced the learner's code ("in user code: File
    ... "), its last line, which names the error itself."""
    import re

    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    if not (lines and lines[0].startswith("in user code")):
        return short_error(err)
    last = lines[-1] if re.match(r"\w+(Error|Exception): ", lines[-1]) else f"{type(err).__name__}: {lines[-1]}"
    last = " ".join(last.split())
    return last if len(last) <= 300 else last[:300] + " ..."


def _step_error_hint(text):
    """An aimed sentence about an error raised by the learner's step (empty when none fits)."""
    if "loss reduction" in text or "Reduction.NONE" in text:
        return (" A Keras loss object averages over its batch by itself, which tf_keras refuses inside a strategy: "
                "each replica must give one loss per example and divide their sum itself.")
    if "Mixing different tf.distribute.Strategy" in text or "colocate_vars_with" in text or \
            "tuple index out of range" in text:
        return (" make_train_step must use the strategy, model and optimizer it receives: the checker passes its own "
                f"({STEP_REPLICAS} replicas), not this notebook's mirrored, model and optimizer.")
    if "global_batch_size must be an integer" in text:
        return " tf.nn.compute_average_loss takes an integer global_batch_size."
    if "NoneType" in text:
        return (" The checker calls train_step from a tf.function whose batches have an unknown number of examples "
                "(shape [None, ...]), as a dataset's batches have when its last one is smaller: count examples with "
                "tf.shape(labels)[0], not labels.shape[0].")
    if "Collective ops is aborted" in text or "Restart your program" in text:
        return (" A collective operation was aborted (replicas sent tensors of different shapes to an all-reduce?), "
                "and TensorFlow runs no collective in this kernel any more: restart the kernel, run the cells from the "
                "top, and check again.")
    return (f" It is called as make_train_step(strategy, model, optimizer) with the checker's own MirroredStrategy "
            f"({STEP_REPLICAS} replicas), tf_keras model and SGD optimizer, then train_step(features, labels) with "
            f"batches distributed by that strategy.")


def _judge_step_error_answer(text):
    if "loss reduction" in text or "Reduction.NONE" in text:
        return ("Create it as tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, "
                "reduction=tf.keras.losses.Reduction.NONE).")
    if "global_batch_size must be an integer" in text:
        return "Count with tf.shape(labels)[0] (an int32), or divide tf.reduce_sum(...) by a float count yourself."
    return ""
