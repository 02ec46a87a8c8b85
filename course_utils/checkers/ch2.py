"""Chapter 2 · Strategies on one machine: the exercises' graders and hints."""
import numbers

from .answers import close, grade_items, logical_cpus, quiet_tensorflow, short_error
from .core import Exercise, Feedback, chapter

PER_REPLICA, BASE_LR, REPLICAS = 64, 0.01, 8


class BatchAndLearningRate(Exercise):
    title = "Global batch and scaled learning rate"
    points = 3
    hints = (
        "Which batch does the dataset get: one replica's, or all replicas' together? And by how much did the batch "
        "grow?",
        "The dataset is batched with the GLOBAL batch; the strategy splits it over strategy.num_replicas_in_sync "
        "replicas. The linear scaling rule multiplies SGD's learning rate by the factor the batch grew.",
    )

    def grade(self, strategy, global_batch_size, learning_rate):
        import tensorflow as tf

        fb = Feedback()
        if not isinstance(strategy, tf.distribute.MirroredStrategy):
            fb.wrong(f"strategy: the exercise asks for a tf.distribute.MirroredStrategy, got {type(strategy).__name__}.")
        elif strategy.num_replicas_in_sync != REPLICAS:
            fb.wrong(f"strategy has {strategy.num_replicas_in_sync} replica(s); build it over the 8 virtual CPUs.",
                     answer="tf.distribute.MirroredStrategy(cpus).")
        else:
            fb.right("strategy: MirroredStrategy with 8 replicas")
        right_batch = PER_REPLICA * REPLICAS
        if isinstance(global_batch_size, numbers.Integral) and not isinstance(global_batch_size, bool):
            global_batch_size = int(global_batch_size)  # np.int64 too; a float such as 512.0 is not a batch size
        if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int):
            fb.wrong(f"global_batch_size should be a whole number (an int), got {global_batch_size!r}.")
        elif global_batch_size == right_batch:
            fb.right(f"global_batch_size = {PER_REPLICA} x {REPLICAS} = {right_batch}")
        elif global_batch_size == PER_REPLICA:
            fb.wrong(f"global_batch_size = {PER_REPLICA} is the per-replica batch. The dataset is batched with the "
                     f"GLOBAL batch, which the strategy splits.", answer="It is per-replica x num_replicas_in_sync.")
        elif global_batch_size == PER_REPLICA // REPLICAS:
            fb.wrong(f"global_batch_size = {global_batch_size}: you divided. Each replica keeps the per-replica batch.")
        else:
            fb.wrong(f"global_batch_size = {global_batch_size} is not what the strategy needs.",
                     answer="It is the per-replica batch times strategy.num_replicas_in_sync.")
        try:
            lr = float(learning_rate)
        except (TypeError, ValueError):
            fb.wrong(f"learning_rate should be a number, got {learning_rate!r}.")
            return fb
        right_lr = BASE_LR * REPLICAS
        if close(lr, right_lr, 1e-6):
            fb.right(f"learning_rate = {BASE_LR} x {REPLICAS} = {right_lr:g} (linear scaling)")
        elif close(lr, BASE_LR, 1e-6):
            fb.wrong(f"learning_rate is not scaled. With an {REPLICAS}x larger global batch an epoch has {REPLICAS}x "
                     f"fewer steps; the linear scaling rule makes up for it.",
                     answer="It multiplies the learning rate by the same factor.")
        elif close(lr, BASE_LR / REPLICAS, 1e-6):
            fb.wrong("learning_rate: you divided by the number of replicas; the linear scaling rule multiplies "
                     "(bigger batch, bigger steps).")
        elif close(lr, BASE_LR * right_batch, 1e-6):
            fb.wrong("learning_rate: scale by how much the batch grew, not by the global batch size itself.",
                     answer=f"The batch grew {right_batch} / {PER_REPLICA} times.")
        else:
            fb.wrong(f"learning_rate = {lr:g} does not follow the linear scaling rule.",
                     answer="Scale the base rate by global batch / base batch.")
        return fb


GLOBAL_BATCH = 64
LOSS_KEY_BASE = 10_000  # the collectives of exercise 2's checker strategy are numbered from here
_STRATEGY_CACHE = {}


def _mirrored_with_own_keys(devices, key_base):
    """A MirroredStrategy that numbers its collectives from ``key_base``, so that it neither joins nor reuses the
    collectives of the notebook's own strategies (chapter 2's timing section)."""
    import tensorflow as tf

    own_keys = type("CheckerMirroredStrategy", (tf.distribute.MirroredStrategy,), {"_collective_key_base": key_base})
    return own_keys(devices=list(devices))


def _checker_strategy():
    """A MirroredStrategy over this process's logical CPUs (at most 8, a divisor of 64), made once."""
    cpus = logical_cpus()
    n = max(k for k in (1, 2, 4, 8) if k <= len(cpus))
    key = tuple(cpus[:n])
    if key not in _STRATEGY_CACHE:
        _STRATEGY_CACHE[key] = _mirrored_with_own_keys(key, LOSS_KEY_BASE)
    return _STRATEGY_CACHE[key]


def _reference_loss_data():
    import numpy as np

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(GLOBAL_BATCH, 10)).astype("float32")
    labels = rng.integers(0, 10, size=(GLOBAL_BATCH,)).astype("int64")
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return labels, logits, -log_probs[np.arange(GLOBAL_BATCH), labels]


def _summed_over_replicas(compute_loss):
    """Run ``compute_loss`` in every replica on its slice of a fixed batch; return (sum, replicas)."""
    import numpy as np
    import tensorflow as tf

    with quiet_tensorflow():
        strategy = _checker_strategy()
    n = strategy.num_replicas_in_sync
    labels, logits, _ = _reference_loss_data()
    label_parts, logit_parts = np.split(labels, n), np.split(logits, n)
    dist_labels = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(label_parts[ctx.replica_id_in_sync_group]))
    dist_logits = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(logit_parts[ctx.replica_id_in_sync_group]))

    @tf.function
    def summed_loss(labels, logits):
        per_replica = strategy.run(compute_loss, args=(labels, logits))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    with quiet_tensorflow():
        return summed_loss(dist_labels, dist_logits).numpy(), n


class LossScaling(Exercise):
    title = "Loss scaling in a custom distributed step"
    points = 3
    hints = (
        "Inside strategy.run each replica sees only its slice of the batch, and the replicas' gradients are "
        "SUMMED. What must each replica divide by so that the sum is the mean of the whole batch?",
        "Divide the per-example losses by the global batch size (tf.nn.compute_average_loss(..., "
        "global_batch_size=...)); a Keras loss object needs reduction=NONE to give one loss per example.",
    )

    def grade(self, compute_loss, reduce_op):
        import numpy as np

        fb = Feedback()
        if compute_loss is None:
            fb.wrong("compute_loss: not answered yet.")
        elif not callable(compute_loss):
            fb.wrong(f"compute_loss should be a function (labels, logits) -> loss, got {type(compute_loss).__name__}.")
        else:
            self._grade_loss(fb, compute_loss, np)
        op = getattr(reduce_op, "value", reduce_op)
        op = op.upper() if isinstance(op, str) else None
        if reduce_op is None:
            fb.wrong("reduce_op: not answered yet.")
        elif op == "SUM":
            fb.right("reduce_op: SUM. Each replica's loss is already divided by the global batch, so their sum is "
                     "the mean over the global batch.")
        elif op == "MEAN":
            fb.wrong(f"reduce_op: MEAN would divide by the number of replicas a second time (each replica's loss is "
                     f"already divided by the GLOBAL batch), reporting 1/{REPLICAS} of the true loss.")
        else:
            fb.wrong(f"reduce_op should be tf.distribute.ReduceOp.SUM or .MEAN, got {reduce_op!r}.")
        return fb

    @staticmethod
    def _grade_loss(fb, compute_loss, np):
        expected = float(_reference_loss_data()[2].mean())
        try:
            total, n = _summed_over_replicas(compute_loss)
        except Exception as err:
            if "Reduction" in str(err):
                fb.wrong(f"compute_loss raised inside strategy.run: {short_error(err)}. Keras losses must not "
                         f"average by themselves under a strategy.",
                         answer="Create the loss with reduction=NONE (one value per example) and average with "
                                "tf.nn.compute_average_loss.")
            else:
                fb.wrong(f"compute_loss raised inside strategy.run: {short_error(err)}")
            return
        if np.ndim(total) != 0:
            fb.wrong(f"compute_loss must return one scalar per replica; it returned shape {list(np.shape(total))}.",
                     answer="Average the per-example losses with tf.nn.compute_average_loss.")
            return
        total = float(total)
        if close(total, expected):
            fb.right(f"compute_loss: summed over the {n} replicas it gives the mean loss of the global batch "
                     f"({expected:.4f}), so the summed gradients are the gradient of the mean.", points=2)
        elif n > 1 and close(total, expected * n):
            fb.wrong(f"compute_loss averages over the per-replica batch ({GLOBAL_BATCH // n} examples). The strategy "
                     f"SUMS the replicas' gradients, so this is {n}x too large.",
                     answer="Divide by the global batch: tf.nn.compute_average_loss(per_example_loss, "
                            "global_batch_size=GLOBAL_BATCH_SIZE).")
        elif close(total, expected * GLOBAL_BATCH):
            fb.wrong("compute_loss returns the sum of the per-example losses; divide it by the global batch size.",
                     answer="Use tf.nn.compute_average_loss(..., global_batch_size=...).")
        elif n > 1 and close(total, expected / n):
            fb.wrong(f"compute_loss is {n}x too small: it divides by the global batch and again by the number of "
                     f"replicas. tf.nn.compute_average_loss already does the right division.")
        else:
            fb.wrong(f"compute_loss summed over the replicas gives {total:.4f}, not the mean cross-entropy "
                     f"{expected:.4f}. The model outputs logits.",
                     answer="Use from_logits=True (or tf.nn.sparse_softmax_cross_entropy_with_logits).")


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
SCENARIOS = {
    "a": ("One machine with 4 GPUs. Synchronous data parallelism; every GPU keeps its own copy of every variable.",
          "MirroredStrategy"),
    "b": ("Two machines with 4 GPUs each. Synchronous data parallelism over all 8 GPUs.",
          "MultiWorkerMirroredStrategy"),
    "c": ("Dozens of preemptible machines. Workers should not wait for each other (asynchronous updates), and a "
          "huge embedding table should be split over a few servers.", "ParameterServerStrategy"),
    "d": ("A laptop with one GPU. The strategy.scope() code should run unchanged, with all variables and all "
          "computation placed on one device that you name, and no mirroring.", "OneDeviceStrategy"),
    "e": ("One machine with several GPUs, synchronous training, but the variables are kept in one place (the "
          "CPU) instead of being mirrored on every GPU.", "CentralStorageStrategy"),
    "f": ("A single weight matrix is too large for one device's memory: each weight must be split over "
          "several devices (model parallelism).", "DTensor"),
}
NAME_WHY = {
    "MultiDeviceStrategy": "tf.distribute has no MultiDeviceStrategy (a name that circulates); several devices "
                           "on one machine is MirroredStrategy.",
    "TPUStrategy": "TPUStrategy is for TPUs; no scenario here has one.",
}
SCENARIO_WHY = {
    ("a", "MultiWorkerMirroredStrategy"): "MultiWorkerMirroredStrategy is for several machines (each process "
                                          "needs TF_CONFIG).",
    ("a", "CentralStorageStrategy"): "CentralStorageStrategy keeps ONE copy of the variables on the CPU; here "
                                     "every GPU keeps its own mirror.",
    ("b", "MirroredStrategy"): "MirroredStrategy only uses the devices of its own machine.",
    ("b", "ParameterServerStrategy"): "ParameterServerStrategy is asynchronous; the scenario asks for "
                                      "synchronous training.",
    ("c", "MultiWorkerMirroredStrategy"): "MultiWorkerMirroredStrategy is synchronous: every step waits for all "
                                          "workers (all-reduce), and a lost worker fails the step.",
    ("c", "DTensor"): "Splitting an embedding table over servers and letting workers run asynchronously is the "
                      "job of a tf.distribute strategy, with variable partitioning.",
    ("d", "MirroredStrategy"): "MirroredStrategy with one device works, but another strategy is made for "
                               "'everything on this one named device, no mirroring'.",
    ("e", "MirroredStrategy"): "MirroredStrategy keeps a copy of every variable on every device.",
    ("e", "ParameterServerStrategy"): "ParameterServerStrategy needs a cluster of worker and parameter-server "
                                      "processes and is asynchronous.",
    ("f", "ParameterServerStrategy"): "ParameterServerStrategy is data parallelism: it can shard a variable's "
                                      "storage over the servers (variable_partitioner), but a worker runs the whole "
                                      "model and puts a sharded weight back together to multiply by it, so each "
                                      "weight must still fit on a worker.",
    ("f", "CentralStorageStrategy"): "CentralStorageStrategy is synchronous data parallelism with the variables "
                                     "on the CPU, not model parallelism.",
    ("f", "MirroredStrategy"): "MirroredStrategy copies the WHOLE model to every device; it cannot split a weight.",
    ("f", "MultiWorkerMirroredStrategy"): "MultiWorkerMirroredStrategy also copies the whole model to every device.",
}


def normalize_strategy(value):
    """A strategy class, instance or name as the canonical name, e.g. ``"tf.distribute.MirroredStrategy()"``."""
    if isinstance(value, type):
        value = value.__name__
    elif not isinstance(value, str):
        value = type(value).__name__
    text = value.strip().lower().replace("()", "")
    for prefix in ("tf.distribute.experimental.", "tf.distribute.", "experimental.", "tf."):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.replace(" ", "").replace("_", "")
    if text.startswith("dtensor") or text == "experimental.dtensor":
        return "DTensor"
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

    def grade(self, choices):
        expected = {k: right for k, (_, right) in SCENARIOS.items()}

        def explain(key, given, raw):
            right = f"It is {SCENARIOS[key][1]}."
            if (key, given) in SCENARIO_WHY:
                return SCENARIO_WHY[(key, given)], right
            if given in NAME_WHY:
                return NAME_WHY[given], right
            if given not in STRATEGY_NAMES.values():
                return (f"{raw!r} is not one of the choices: MirroredStrategy, MultiWorkerMirroredStrategy, "
                        f"ParameterServerStrategy, OneDeviceStrategy, CentralStorageStrategy, DTensor."), ""
            return f"{given} does not fit: {SCENARIOS[key][0]}", right

        return grade_items(Feedback(), choices, expected, explain, normalize_strategy, "one strategy name per scenario")


# Exercise 4: the learner's whole distributed step, run by the checker on its own strategy, model and data. Its
# MirroredStrategy has 4 replicas (the notebook's 8) and its batches 24 examples (the notebook's 64): 46 examples make
# one full batch, split 6, 6, 6, 6, and a last batch of 22, split 6, 6, 6, 4, as experimental_distribute_dataset splits
# them (a test checks it). The checker builds the two distributed batches itself, with
# experimental_distribute_values_from_function: making a distributed dataset's iterator was seen to stall for up to
# 18 s on a busy 2-core machine.
STEP_REPLICAS, STEP_BATCH, STEP_EXAMPLES = 4, 24, 46
STEP_SPLITS = ((6, 6, 6, 6), (6, 6, 6, 4))  # per replica, the full batch and the last
STEP_SHAPE = (6, 8, 3)  # features, hidden units and classes of the checker's model
STEP_RATE = 0.5  # plain SGD: one step changes every variable by -STEP_RATE x its gradient
STEP_KEY_BASE = 20_000  # the collective numbers of the checker's strategy (see _step_strategy)
STEP_NOTEBOOK_BATCH = 64  # the exercise notebook's batch size
STEP_VARIABLES = ("layer 1's kernel", "layer 1's bias", "layer 2's kernel", "layer 2's bias")
_STEP_STRATEGIES = {}


class _StepAnswerError(Exception):
    """A problem with the learner's answer that the checker explains in its own words."""


def _step_strategy():
    """The checker's MirroredStrategy over the first 4 logical CPUs, made once per process.

    Each MirroredStrategy numbers its collectives from the same start, so a second one over another number of devices
    would join the notebook's group with the wrong size (chapter 2's timing section), and a second one over the same
    devices would reuse the numbers of other collectives. This one gets numbers of its own with the class attribute
    ``_collective_key_base``, as the chapter's ``mirrored_over`` does, and is made only once.
    """
    cpus = logical_cpus()
    if len(cpus) < STEP_REPLICAS:
        raise _StepAnswerError(f"the checker needs {STEP_REPLICAS} logical CPUs and this kernel has {len(cpus)}. Run "
                               f"the notebook's first cells (they configure 8 virtual CPUs), then check again.")
    key = tuple(cpus[:STEP_REPLICAS])
    if key not in _STEP_STRATEGIES:
        _STEP_STRATEGIES[key] = _mirrored_with_own_keys(key, STEP_KEY_BASE)
    return _STEP_STRATEGIES[key]


def _step_data():
    """The checker's examples, labels and starting weights (fixed seeds), as NumPy arrays."""
    import numpy as np

    rng = np.random.default_rng(24)
    features, hidden, classes = STEP_SHAPE
    x = rng.normal(size=(STEP_EXAMPLES, features)).astype("float32")
    y = rng.integers(0, classes, size=STEP_EXAMPLES).astype("int64")
    weights = [rng.normal(scale=0.5, size=(features, hidden)), rng.normal(scale=0.1, size=(hidden,)),
               rng.normal(scale=0.5, size=(hidden, classes)), rng.normal(scale=0.1, size=(classes,))]
    return x, y, [w.astype("float32") for w in weights]


def _one_device_gradient(weights, x, y):
    """The mean cross-entropy over (x, y) and its gradient per variable, on one device, with plain ops."""
    import tensorflow as tf

    w = [tf.Variable(v) for v in weights]
    with tf.GradientTape() as tape:
        logits = tf.nn.relu(x @ w[0] + w[1]) @ w[2] + w[3]
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return float(loss), [g.numpy().astype("float64") for g in tape.gradient(loss, w)]


def _step_expected(weights, parts):
    """For one distributed batch (its per-replica parts): the loss and change of every variable of one SGD step on one
    device with the whole batch; and the same when each replica's examples are weighted by 1 / (its own batch x
    replicas), the step of a loss divided by the per-replica batch x replicas."""
    import numpy as np

    loss, gradients = _one_device_gradient(weights, np.concatenate([x for x, _ in parts]),
                                           np.concatenate([y for _, y in parts]))
    per_replica = [_one_device_gradient(weights, x, y) for x, y in parts if len(y)]
    weighted = [sum(g[i] for _, g in per_replica) / len(parts) for i in range(len(weights))]
    return {"loss": loss, "change": [-STEP_RATE * g for g in gradients],
            "weighted_loss": sum(l for l, _ in per_replica) / len(parts),
            "weighted_change": [-STEP_RATE * g for g in weighted]}


def _run_train_step(make_train_step):
    """Build the checker's model under its strategy, make the learner's step and run it on each batch, every time from
    the same weights. One record per batch: the per-replica sizes, what train_step returned, every variable's copies
    (one per replica) after the step, and what one device expects."""
    import numpy as np
    import tf_keras

    with quiet_tensorflow():
        strategy = _step_strategy()
        x, y, start = _step_data()
        features, hidden, classes = STEP_SHAPE
        with strategy.scope():
            model = tf_keras.Sequential([tf_keras.Input((features,)),
                                         tf_keras.layers.Dense(hidden, activation="relu"),
                                         tf_keras.layers.Dense(classes)])
            optimizer = tf_keras.optimizers.SGD(learning_rate=STEP_RATE)
        model.set_weights(start)
        try:
            train_step = make_train_step(strategy, model, optimizer)
        except Exception as err:
            raise _StepAnswerError(f"make_train_step(strategy, model, optimizer) raised {short_error(err)}") from err
        if not callable(train_step):
            raise _StepAnswerError(f"make_train_step(strategy, model, optimizer) returned a "
                                   f"{type(train_step).__name__}; it should return the function "
                                   f"train_step(features, labels).")
        records, first = [], 0
        for sizes in STEP_SPLITS:  # consecutive examples, as a dataset batched by STEP_BATCH gives them
            bounds = np.cumsum([first, *sizes])
            first = bounds[-1]
            parts = [(x[a:b], y[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
            batch_x, batch_y = (_per_replica(strategy, [part[i] for part in parts]) for i in (0, 1))
            model.set_weights(start)
            returned = train_step(batch_x, batch_y)
            copies = [[np.asarray(c.numpy(), dtype="float64") for c in strategy.experimental_local_results(v)]
                      for v in model.weights]
            records.append({"sizes": [len(py) for _, py in parts], "returned": returned, "copies": copies,
                            "start": start, **_step_expected(start, parts)})
    return records


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


_COUNT_IT = ("Count the examples of the whole step, over all replicas: inside the replica function "
             "examples = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, "
             "tf.shape(labels)[0]), then tf.nn.compute_average_loss(per_example_loss, global_batch_size=examples).")


def _explain_change(fb, diagnosis, record, replicas, fixed, first):
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
                 f"is the SUM over the examples, not their mean.", answer=_COUNT_IT)
    elif (kind in ("scaled", "weighted")) and _close_to(diagnosis[1], replicas):
        fb.wrong(f"{head} every variable changed {replicas}x as much as in one step on one device: each replica "
                 f"divided its loss by its OWN batch, and the strategy SUMS the {replicas} replicas' gradients "
                 f"(the chapter's 'why the loss is divided by the global batch size').",
                 answer=_COUNT_IT)
    elif kind == "scaled" and _close_to(diagnosis[1], 1 / replicas):
        fb.wrong(f"{head} every variable changed 1/{replicas} as much as in one step on one device: the loss was "
                 f"divided by the whole batch AND the gradients averaged over the {replicas} replicas (ReduceOp.MEAN, "
                 f"or a division by num_replicas_in_sync). Dividing by the whole batch already makes the mean.",
                 answer="Sum the replicas' gradients: apply_gradients does it by default (or all-reduce with "
                        "ReduceOp.SUM).")
    elif fixed is not None:
        which = (f", this notebook's batch size" if fixed == STEP_NOTEBOOK_BATCH else
                 f", the size of the checker's full batch" if fixed == STEP_BATCH else "")
        fb.wrong(f"{head} every variable changed {diagnosis[1]:.3g}x as much as in one step on one device: your step "
                 f"divides the summed loss by {fixed}{which}, whatever batch it gets. The checker's batches have "
                 f"{STEP_BATCH} and {STEP_EXAMPLES - STEP_BATCH} examples: the divisor must come from the batch the "
                 f"step receives.", answer=_COUNT_IT)
    elif kind == "weighted" and _close_to(diagnosis[1], 1):
        small = min(size for size in record["sizes"] if size)
        fb.wrong(f"{head} each replica divided its summed loss by its own batch x {replicas}, which is the number "
                 f"of examples of the whole step only when the shares are equal: here the {small} examples of the "
                 f"last replica count {max(record['sizes']) / small:.3g}x as much as the others'. "
                 f"(tf.nn.compute_average_loss without global_batch_size assumes equal shares, and so does averaging "
                 f"the replicas' mean gradients.)",
                 answer=_COUNT_IT)
    elif kind == "scaled" and first is not None and _close_to(diagnosis[1] * STEP_BATCH, sum(record["sizes"])):
        fb.wrong(f"{head} it was divided by {STEP_BATCH}, the size of the full batches, not by its own "
                 f"{sum(record['sizes'])} examples.", answer=_COUNT_IT)
    elif kind in ("scaled", "weighted"):
        fb.wrong(f"{head} every variable changed {diagnosis[1]:.3g}x as much as it should"
                 + (" (with each replica's examples weighted by its own batch)" if kind == "weighted" else "") + ".",
                 answer=_COUNT_IT)
    else:
        names = "every variable" if len(diagnosis[1]) == len(STEP_VARIABLES) else ", ".join(diagnosis[1])
        fb.wrong(f"{head} {names} changed otherwise than in one SGD step (learning rate {STEP_RATE}) on one "
                 f"device with the mean cross-entropy of the whole batch. The model outputs logits.")


def _returned_loss(value):
    """What train_step returned, as a float; raises _StepAnswerError with what is wrong."""
    import numpy as np

    if value is None:
        raise _StepAnswerError("train_step returned None; it should return the mean loss of the batch.")
    if hasattr(value, "values") and type(value).__name__ == "PerReplica":
        raise _StepAnswerError(f"train_step returned a PerReplica value (one loss per replica); combine them into the "
                               f"loss of the whole batch with strategy.reduce(..., axis=None).")
    try:
        array = np.asarray(value, dtype="float64")
    except Exception:
        raise _StepAnswerError(f"train_step returned a {type(value).__name__}; it should return one number, the mean "
                               f"loss of the batch.") from None
    if array.size != 1:
        raise _StepAnswerError(f"train_step returned {array.size} numbers (shape {list(array.shape)}); it should "
                               f"return one, the mean loss of the batch.")
    return float(array.ravel()[0])


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
    if all(close(g, w / replicas, 1e-4) for g, w in zip(got, want)):
        fb.wrong(f"{said}: 1/{replicas} of them. Each replica's loss is already divided by the whole batch, and "
                 f"ReduceOp.MEAN divides by the number of replicas once more.",
                 answer="Combine the replicas' losses with "
                        "strategy.reduce(tf.distribute.ReduceOp.SUM, ..., axis=None).")
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

    def grade(self, make_train_step):
        fb = Feedback()
        if not callable(make_train_step):
            fb.wrong(f"make_train_step should be a function (strategy, model, optimizer) -> train_step, got "
                     f"{type(make_train_step).__name__}.")
            return fb
        try:
            records = _run_train_step(make_train_step)
        except _StepAnswerError as err:
            fb.wrong(str(err))
            return fb
        except Exception as err:
            fb.wrong(f"train_step raised {_last_error(err)}" + _step_error_hint(str(err)),
                     answer=_step_error_answer(str(err)))
            return fb
        replicas = len(records[0]["sizes"])
        diagnoses = [_diagnose_change(r) for r in records]
        fixed = _fixed_divisor(diagnoses, records)
        for index, (diagnosis, record, points) in enumerate(zip(diagnoses, records, (2, 1))):
            if diagnosis == ("right",):
                what = "the full batch" if index == 0 else "the last batch"
                fb.right(f"{what} of {sum(record['sizes'])} examples (split {', '.join(map(str, record['sizes']))} "
                         f"over {replicas} replicas): every variable changed as in one SGD step on one device with "
                         f"the whole batch", points=points)
            else:
                _explain_change(fb, diagnosis, record, replicas, fixed, None if index == 0 else diagnoses[0])
        _grade_returned_loss(fb, records, replicas)
        return fb


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
    if "Collective ops is aborted" in text or "Restart your program" in text:
        return (" A collective operation was aborted (replicas sent tensors of different shapes to an all-reduce?), "
                "and TensorFlow runs no collective in this kernel any more: restart the kernel, run the cells from the "
                "top, and check again.")
    return (f" It is called as make_train_step(strategy, model, optimizer) with the checker's own MirroredStrategy "
            f"({STEP_REPLICAS} replicas), tf_keras model and SGD optimizer, then train_step(features, labels) with "
            f"batches distributed by that strategy.")


def _step_error_answer(text):
    if "loss reduction" in text or "Reduction.NONE" in text:
        return ("Create it as tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, "
                "reduction=tf.keras.losses.Reduction.NONE).")
    if "global_batch_size must be an integer" in text:
        return "Count with tf.shape(labels)[0] (an int32), or divide tf.reduce_sum(...) by a float count yourself."
    return ""


CHAPTER = chapter(2, "Strategies on one machine", [BatchAndLearningRate, LossScaling, PickStrategy,
                                                      DistributedStep])
