"""Chapter 2 · exercise 4's case, and the run of the learner's step on it (the collecting side): the checker's
MirroredStrategy (:func:`checker_strategy`, which exercises 1 and 2 and chapter 13 use too), its model, data and two
distributed batches, and one SGD step on one device with the whole batch, what the learner's step should match
(``_reference_step_expected``, which the graded sandbox's copy of this module does not have).
``ch2_build.DistributedStep`` collects with :func:`_run_train_step` and judges with ``ch2_step_diagnosis.py``."""

from .answers import first_cpus, quiet_tensorflow, short_error


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
    key = (tuple(first_cpus(replicas)), key_base)
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

