"""Chapter 2 · Strategies on one machine: the exercises' graders and hints."""
import numbers

from .answers import close, grade_items, logical_cpus, quiet_tensorflow, short_error
from .core import Exercise, Feedback, chapter
from .ch2_build import DistributedStep, _mirrored_with_own_keys

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


CHAPTER = chapter(2, "Strategies on one machine", [BatchAndLearningRate, LossScaling, PickStrategy,
                                                      DistributedStep])
