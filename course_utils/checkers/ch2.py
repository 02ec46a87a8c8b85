"""Chapter 2 · Strategies on one machine: the exercises' graders and hints."""
import numbers
import re

from .answers import as_int, close, grade_items, logical_cpus, quiet_tensorflow, short_error
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

    def collect(self, strategy, global_batch_size, learning_rate, seed=0):
        """What crosses: the strategy's classes (its class and its bases, in method resolution order; classes of
        TensorFlow cross as themselves, others as an Opaque naming them), its ``num_replicas_in_sync`` (None when
        reading it raised), and the two numbers as they are."""
        try:
            replicas = strategy.num_replicas_in_sync
        except Exception:
            replicas = None
        return {"classes": list(type(strategy).__mro__), "replicas": replicas,
                "global_batch_size": global_batch_size, "learning_rate": learning_rate}

    def judge(self, data, seed=0):
        """Grades the data of :meth:`collect`: the strategy's classes and replicas, the batch size and the rate."""
        fb = Feedback()
        self._judge_strategy(fb, data["classes"], data["replicas"])
        global_batch_size, learning_rate = data["global_batch_size"], data["learning_rate"]
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
            fb.wrong(f"learning_rate: you divided by the number of replicas. With an {REPLICAS}x larger global batch "
                     f"an epoch has {REPLICAS}x fewer steps: what must happen to each step for an epoch to move the "
                     f"weights as far as before?",
                     answer="The linear scaling rule multiplies (bigger batch, bigger steps).")
        elif close(lr, BASE_LR * REPLICAS ** 0.5, 1e-4):
            fb.wrong(f"learning_rate = {lr:g} scales by the square root of the batch's growth, a rule sometimes used "
                     f"for Adam. This exercise trains with SGD: which rule does the chapter give for SGD?",
                     answer="The linear rule: multiply by the factor the batch grew.")
        elif close(lr, BASE_LR * right_batch, 1e-6):
            fb.wrong("learning_rate: scale by how much the batch grew, not by the global batch size itself.",
                     answer=f"The batch grew {right_batch} / {PER_REPLICA} times.")
        else:
            fb.wrong(f"learning_rate = {lr:g} does not follow the linear scaling rule.",
                     answer="Scale the base rate by global batch / base batch.")
        return fb

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


def _loss_inputs(seed):
    """Exercise 2's batch, drawn from ``seed``: labels (int64) and logits (float32) of GLOBAL_BATCH examples. The
    logits' scale is drawn too, so that the batch's mean loss differs widely from one seed to the next."""
    import numpy as np

    rng = np.random.default_rng(seed)
    logits = (rng.uniform(1.0, 8.0) * rng.normal(size=(GLOBAL_BATCH, 10))).astype("float32")
    labels = rng.integers(0, 10, size=(GLOBAL_BATCH,)).astype("int64")
    return labels, logits


def _reference_losses(labels, logits):
    """The per-example cross-entropies of the logits, with NumPy."""
    import numpy as np

    logits = logits.astype("float64")
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(labels)), labels]


def _summed_over_replicas(compute_loss, seed):
    """Run ``compute_loss`` in every replica on its slice of the batch of ``seed``; return (sum, replicas)."""
    import numpy as np
    import tensorflow as tf

    with quiet_tensorflow():
        strategy = _checker_strategy()
    n = strategy.num_replicas_in_sync
    labels, logits = _loss_inputs(seed)
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


def _reduce_op_name(value):
    """A reduce_op's name as "SUM", "MEAN" or another upper-case word, from a ReduceOp's value or a string such as
    "sum", "SUM " or "tf.distribute.ReduceOp.SUM"; None when it is no string."""
    if not isinstance(value, str):
        return None
    return value.strip().strip("'\"").split(".")[-1].strip().upper()


class LossScaling(Exercise):
    title = "Loss scaling in a custom distributed step"
    points = 3
    hints = (
        "Inside strategy.run each replica sees only its slice of the batch, and the replicas' gradients are "
        "SUMMED. What must each replica divide by so that the sum is the mean of the whole batch?",
        "Divide the per-example losses by the global batch size (tf.nn.compute_average_loss(..., "
        "global_batch_size=...)); a Keras loss object needs reduction=NONE to give one loss per example.",
    )

    def collect(self, compute_loss, reduce_op, seed=0):
        """Runs ``compute_loss`` in every replica of the checker's strategy on its slice of a batch drawn from
        ``seed``. What crosses: ``loss``, one of {"state": "none"}, {"state": "not callable", "type": name},
        {"state": "raised", "error": short error, "detail": the error's text (cut)} and {"state": "ran", "total":
        the replicas' losses summed (an array), "replicas": their number}; ``reduce_op``: {"none": whether it is
        None, "value": its ``.value`` (or itself) when that is a string, else None, "repr": its repr (cut)}."""
        if compute_loss is None:
            loss = {"state": "none"}
        elif not callable(compute_loss):
            loss = {"state": "not callable", "type": type(compute_loss).__name__}
        else:
            try:
                total, n = _summed_over_replicas(compute_loss, seed)
                loss = {"state": "ran", "total": total, "replicas": n}
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
        """Grades the data of :meth:`collect` against the mean cross-entropy of the batch of ``seed``."""
        fb = Feedback()
        loss, reduce_op = data["loss"], data["reduce_op"]
        kind = None
        if loss["state"] == "none":
            fb.wrong("compute_loss: not answered yet.")
        elif loss["state"] == "not callable":
            fb.wrong(f"compute_loss should be a function (labels, logits) -> loss, got {loss['type']}.")
        else:
            kind = self._judge_loss(fb, loss, seed)
        op = _reduce_op_name(reduce_op["value"])
        if reduce_op["none"]:
            fb.wrong("reduce_op: not answered yet.")
        elif op == "SUM":
            fb.right("reduce_op: SUM. Each replica's loss is already divided by the global batch, so their sum is "
                     "the mean over the global batch.")
        elif op == "MEAN" and kind == "per replica":
            fb.wrong("reduce_op: MEAN of losses averaged over each replica's own batch does report the batch's mean "
                     "loss, but such a compute_loss makes the summed gradients too large (above). Once each replica's "
                     "loss is divided by the GLOBAL batch, what does MEAN do on top?",
                     answer="It divides by the number of replicas a second time: use ReduceOp.SUM.")
        elif op == "MEAN":
            fb.wrong(f"reduce_op: with a compute_loss that divides by the GLOBAL batch, this reduction reports "
                     f"1/{REPLICAS} of the mean loss of the batch. What is each replica's loss already divided by, "
                     f"and what does MEAN divide by on top?",
                     answer="MEAN divides by the number of replicas a second time; the SUM of losses already divided "
                            "by the global batch is the mean: use ReduceOp.SUM.")
        else:
            fb.wrong(f"reduce_op should be a tf.distribute.ReduceOp (SUM or MEAN), got {reduce_op['repr']}.")
        return fb

    @staticmethod
    def _judge_loss(fb, loss, seed):
        """Grades the loss into ``fb``; returns what it was: "right", "per replica" (averaged over each replica's
        own batch), or None."""
        import numpy as np

        expected = float(_reference_losses(*_loss_inputs(seed)).mean())
        if loss["state"] == "raised":
            if "Reduction" in str(loss["detail"]):
                fb.wrong(f"compute_loss raised inside strategy.run: {loss['error']}. Keras losses must not "
                         f"average by themselves under a strategy.",
                         answer="Create the loss with reduction=NONE (one value per example) and average with "
                                "tf.nn.compute_average_loss.")
            else:
                fb.wrong(f"compute_loss raised inside strategy.run: {loss['error']}")
            return
        total, n = np.asarray(loss["total"], dtype="float64"), as_int(loss["replicas"])
        if n not in (1, 2, 4, 8):
            raise ValueError(f"{loss['replicas']!r} replicas")
        if np.ndim(total) != 0:
            fb.wrong(f"compute_loss must return one scalar per replica; it returned shape {list(np.shape(total))}.",
                     answer="Average the per-example losses with tf.nn.compute_average_loss.")
            return
        total = float(total)
        if close(total, expected):
            fb.right(f"compute_loss: summed over the {n} replicas it gives the mean loss of the global batch "
                     f"({expected:.4f}), so the summed gradients are the gradient of the mean.", points=2)
            return "right"
        if n > 1 and close(total, expected * n):
            fb.wrong(f"compute_loss averages over the per-replica batch ({GLOBAL_BATCH // n} examples). The strategy "
                     f"SUMS the replicas' gradients, so this is {n}x too large.",
                     answer="Divide by the global batch: tf.nn.compute_average_loss(per_example_loss, "
                            "global_batch_size=GLOBAL_BATCH_SIZE).")
            return "per replica"
        if close(total, expected * GLOBAL_BATCH):
            fb.wrong(f"compute_loss returns the sum of the per-example losses, {GLOBAL_BATCH}x the mean: what must the "
                     f"replicas' losses, summed by the strategy, add up to?",
                     answer="Divide by the global batch size: tf.nn.compute_average_loss(..., global_batch_size=...).")
        elif n > 1 and close(total, expected / n):
            fb.wrong(f"compute_loss is {n}x too small: the loss is scaled twice, by the global batch and again by "
                     f"the number of replicas. The strategy SUMS the replicas' gradients: which of the two divisions "
                     f"does that sum need?",
                     answer="Only the global batch: tf.nn.compute_average_loss(per_example_loss, "
                            "global_batch_size=GLOBAL_BATCH_SIZE) is the whole scaling; drop the division by "
                            "num_replicas_in_sync.")
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


CHAPTER = chapter(2, "Strategies on one machine", {"q1": BatchAndLearningRate, "q2": LossScaling, "q3": PickStrategy,
                                                      "q4": DistributedStep})
