"""Chapter 13 · the build-and-measure exercise (2): a distributed training step whose gradients are all-reduced in
packs of ``bytes_per_pack``.

The checker makes its own MirroredStrategy (2 replicas), tf_keras MLP and SGD optimizer, drawn from ``seed``, calls the
learner's ``make_packed_step(strategy, model, optimizer, bytes_per_pack)`` and runs the step it returns once. It
MEASURES what the step built: every all-reduce each replica launched (TensorFlow's CollectiveReplicaLauncher, which
every all-reduce of the strategy goes through, is wrapped to note the floats it is given), and what each replica's
copy of each variable became. Right: the packs are those TensorFlow's rule cuts for that bytes_per_pack (exercise 1's
rule), and the variables changed as in one SGD step on one device with the whole batch.
"""
import contextlib

from .answers import quiet_tensorflow, short_error
from .ch2_step_errors import _last_error
from .ch2_step_run import _per_replica, checker_strategy
from .core import Exercise, Feedback

PACKED_REPLICAS, PACKED_BATCH, PACKED_RATE = 2, 8, 0.5  # replicas, examples per replica, SGD's learning rate
PACKED_KEY_BASE = 30_000  # the collective numbers of the checker's strategy (chapter 2's checker uses 20,000)
NOTEBOOK_BYTES_PER_PACK = 1000  # the chapter's value, a typical answer that ignores the argument


def packed_case(seed):
    """The checker's model ``(features, hidden layers, classes)`` and ``bytes_per_pack`` for ``seed``.

    bytes_per_pack lies between the bytes of the last bias (and of the bias before it) and those of the last bias and
    kernel together: TensorFlow's rule then cuts the last layer's two gradients into a first pack, the others into
    more, so there are at least two packs and fewer packs than gradients.

    Example:
        >>> packed_case(0)
        ((12, (16, 8), 4), 100)
    """
    import random

    if seed == 0:
        return (12, (16, 8), 4), 100
    rng = random.Random(seed)
    hidden = tuple(rng.choice([8, 16, 24]) for _ in range(rng.randint(1, 2)))
    features, classes = rng.choice([6, 10, 12]), rng.choice([3, 4, 5])
    return (features, hidden, classes), rng.randint(4 * max(classes, hidden[-1]), 4 * classes * (1 + hidden[-1]) - 1)


def gradient_sizes(shape):
    """The floats of each gradient of the checker's MLP, in the model's order (kernel, bias, kernel, bias, ...)."""
    features, hidden, classes = shape
    sizes, width = [], features
    for units in (*hidden, classes):
        sizes += [width * units, units]
        width = units
    return sizes


def _packed_data(seed):
    """The checker's examples, labels and starting weights for ``seed``, as NumPy arrays."""
    import numpy as np

    (features, hidden, classes), _ = packed_case(seed)
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(PACKED_REPLICAS * PACKED_BATCH, features)).astype("float32")
    y = rng.integers(0, classes, size=PACKED_REPLICAS * PACKED_BATCH).astype("int64")
    weights, width = [], features
    for units in (*hidden, classes):
        weights += [rng.normal(scale=0.5, size=(width, units)).astype("float32"),
                    rng.normal(scale=0.1, size=(units,)).astype("float32")]
        width = units
    return x, y, weights


@contextlib.contextmanager
def all_reduces_noted():
    """Within the block, every all-reduce a replica launches is noted as (its device, the floats it reduces)."""
    from tensorflow.python.distribute import cross_device_utils

    launcher = cross_device_utils.CollectiveReplicaLauncher
    original, noted = launcher.all_reduce, []

    def noting(self, input_tensor, *args, **kwargs):
        noted.append((self._device, int(input_tensor.shape.num_elements())))
        return original(self, input_tensor, *args, **kwargs)

    launcher.all_reduce = noting
    try:
        yield noted
    finally:
        launcher.all_reduce = original


class _PackedAnswerError(Exception):
    """A problem with the learner's answer, in the checker's words."""


def _run_packed_step(make_packed_step, seed):
    """Make the checker's model, the learner's step, run it once: (the floats of each all-reduce replica 0 launched,
    per variable its copies after the step)."""
    import numpy as np
    import tensorflow as tf
    import tf_keras

    (features, hidden, classes), bytes_per_pack = packed_case(seed)
    x, y, start = _packed_data(seed)
    with quiet_tensorflow():
        try:
            strategy = checker_strategy(PACKED_REPLICAS, PACKED_KEY_BASE)
        except RuntimeError as err:
            raise _PackedAnswerError(str(err)) from err
        with strategy.scope():
            model = tf_keras.Sequential([tf_keras.Input((features,))]
                                        + [tf_keras.layers.Dense(units, activation="relu") for units in hidden]
                                        + [tf_keras.layers.Dense(classes)])
            optimizer = tf_keras.optimizers.SGD(learning_rate=PACKED_RATE)
            optimizer.build(model.trainable_variables)  # its variables now, not in the step's first trace
        model.set_weights(start)
        try:
            train_step = make_packed_step(strategy, model, optimizer, bytes_per_pack)
        except Exception as err:
            raise _PackedAnswerError(f"make_packed_step(strategy, model, optimizer, {bytes_per_pack}) raised "
                                     f"{short_error(err)}") from err
        if not callable(train_step):
            raise _PackedAnswerError(f"make_packed_step(...) returned a {type(train_step).__name__}; it should return "
                                     f"the function train_step(features, labels).")
        parts = [np.split(x, PACKED_REPLICAS), np.split(y, PACKED_REPLICAS)]
        run_step = tf.function(lambda *p: train_step(_per_replica(strategy, p[:PACKED_REPLICAS]),
                                                     _per_replica(strategy, p[PACKED_REPLICAS:])))
        with all_reduces_noted() as noted:
            run_step(*parts[0], *parts[1])
        first = strategy.extended.worker_devices[0]
        packs = [floats for device, floats in noted if device == first and floats > 1]  # not a loss or a count
        copies = [[c.numpy().astype("float64") for c in strategy.experimental_local_results(v)] for v in model.weights]
    return packs, copies


def _reference_change(seed):
    """Each variable's change in one SGD step on one device with the whole batch of ``seed``."""
    import tensorflow as tf

    x, y, start = _packed_data(seed)
    weights = [tf.Variable(w) for w in start]
    with tf.GradientTape() as tape:
        h = x
        for kernel, bias in zip(weights[:-2:2], weights[1:-2:2]):
            h = tf.nn.relu(h @ kernel + bias)
        logits = h @ weights[-2] + weights[-1]
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
    return [-PACKED_RATE * g.numpy().astype("float64") for g in tape.gradient(loss, weights)], start


def _judge_packs(packs, sizes, bytes_per_pack):
    """What is wrong with the measured packs, as (text, answer), or None when they are TensorFlow's."""
    from .ch13 import _reference_packs  # here: the grader's hand-out copy has neither function

    right = _reference_packs(sizes, bytes_per_pack)
    if packs == right:
        return None
    total = sum(sizes)
    measured = f"the step ran {len(packs)} all-reduce{'s' * (len(packs) != 1)}, of {packs} floats"
    if not packs:
        return ("the step all-reduced nothing: each replica kept its own gradients.",
                "All-reduce the gradients with tf.distribute.get_replica_context().all_reduce(...).")
    if sum(packs) == 2 * total:
        return (f"{measured}: every gradient was all-reduced twice. apply_gradients all-reduces the gradients it is "
                f"given, unless told they are already summed.", "optimizer.apply_gradients(..., "
                "skip_gradients_aggregation=True) after your own all_reduce.")
    if packs == [total]:
        return (f"{measured}: one pack of all {total} floats, as if bytes_per_pack were 0. Were the options given to "
                f"the all-reduce of the gradients?", "all_reduce('sum', gradients, options=tf.distribute.experimental."
                "CommunicationOptions(bytes_per_pack=bytes_per_pack)).")
    if sorted(packs) == sorted(sizes):
        return (f"{measured}: one all-reduce per gradient. Packing happens within ONE all_reduce call: give it the "
                f"list of all the gradients.", "")
    if packs == _reference_packs(sizes, NOTEBOOK_BYTES_PER_PACK):
        return (f"{measured}: the packs of bytes_per_pack={NOTEBOOK_BYTES_PER_PACK} (the chapter's), not of the "
                f"bytes_per_pack the step was made with ({bytes_per_pack}).", "")
    return (f"{measured}; with bytes_per_pack={bytes_per_pack}, TensorFlow's rule cuts the gradients of {sizes} "
            f"floats into other packs.", f"The packs should be {right}.")


def _judge_change(copies, change, start):
    """What is wrong with the variables after the step, as (text, answer), or None when they are right."""
    import numpy as np

    copies = [[np.asarray(copy, dtype="float64") for copy in variable] for variable in copies]
    if len(copies) != len(start) or any(len(c) != PACKED_REPLICAS or c[0].shape != s.shape
                                        for c, s in zip(copies, start)):
        raise ValueError(f"{PACKED_REPLICAS} copies of each of the {len(start)} variables expected")
    if any(not np.array_equal(c[0], other) for c in copies for other in c[1:]):
        return "the replicas' copies of the variables differ after the step.", ""
    applied = [c[0] - s for c, s in zip(copies, start)]
    if all(np.allclose(a, e, rtol=1e-4, atol=1e-6) for a, e in zip(applied, change)):
        return None
    if all(np.allclose(a, 0, atol=1e-7) for a in applied):
        return "the variables did not change: did the step apply the gradients?", ""
    flat_a, flat_e = np.concatenate([a.ravel() for a in applied]), np.concatenate([e.ravel() for e in change])
    factor = float(flat_a @ flat_e / (flat_e @ flat_e))
    if np.allclose(flat_a, factor * flat_e, rtol=1e-3, atol=1e-6):
        for value, why in ((PACKED_REPLICAS, "each replica divided its loss by its OWN batch, and the replicas' "
                            "gradients are SUMMED"), (1 / PACKED_REPLICAS, "the loss was divided by the global batch "
                            "AND the gradients averaged over the replicas")):
            if abs(factor - value) < 1e-3 * value:
                return (f"every variable moved {factor:.3g} times as far as one SGD step on one device with the whole "
                        f"batch: {why}.", "tf.nn.compute_average_loss(per_example_losses) divides by the global batch; "
                        "then all-reduce with 'sum'.")
        return f"every variable moved {factor:.3g} times as far as one SGD step on one device with the whole batch.", ""
    return "the variables changed otherwise than in one SGD step on one device with the whole batch.", ""


def _judge_error_hint(text):
    """An aimed sentence about an error the learner's step raised."""
    if "loss reduction" in text or "Reduction.NONE" in text:
        return ("A Keras loss object averages over its batch by itself, which tf_keras refuses inside a strategy: "
                "ask it for one loss per example (reduction='none') and divide their sum by the global batch.")
    if "per_example_loss" in text and "rank 0" in text:
        return ("tf.nn.compute_average_loss takes one loss per example: create the Keras loss with reduction='none', "
                "or it has already averaged them.")
    if "Collective ops is aborted" in text or "Restart your program" in text:
        return ("A collective operation was aborted, and TensorFlow runs no collective in this kernel any more: "
                "restart the kernel, run the cells from the top, and check again.")
    return (f"It is called as train_step(features, labels) with batches distributed by the checker's own "
            f"MirroredStrategy ({PACKED_REPLICAS} replicas), from a tf.function.")


class PackedStep(Exercise):
    title = "A training step that all-reduces in packs"
    points = 3
    hints = (
        "apply_gradients all-reduces with the strategy's default options: one pack. To choose the packs, all-reduce "
        "the gradients yourself, in the replica's step, and tell apply_gradients not to do it again.",
        "In replica_step: per-example losses, tf.nn.compute_average_loss, tape.gradient; then "
        "tf.distribute.get_replica_context().all_reduce('sum', gradients, options=CommunicationOptions(bytes_per_pack="
        "bytes_per_pack)); then optimizer.apply_gradients(zip(...), skip_gradients_aggregation=True).",
    )

    def collect(self, make_packed_step, seed=0):
        """Runs the learner's function on the checker's case of ``seed``: {"not callable": type name}, {"problem":
        text}, {"raised": one line, "text": the error's text (cut)}, or {"packs": floats per all-reduce of replica 0, "copies": per variable, its
        value on each replica after the step}."""
        if not callable(make_packed_step):
            return {"not callable": type(make_packed_step).__name__}
        try:
            packs, copies = _run_packed_step(make_packed_step, seed)
        except _PackedAnswerError as err:
            return {"problem": str(err)}
        except Exception as err:
            text = str(err)
            return {"raised": _last_error(err), "text": text if len(text) <= 12_000 else text[:6000] + text[-6000:]}
        return {"packs": packs, "copies": copies}

    def judge(self, data, seed=0):
        """1 point for the packs TensorFlow's rule cuts, 2 more when the variables changed as on one device."""
        fb = Feedback()
        if "not callable" in data:
            fb.wrong(f"make_packed_step should be a function (strategy, model, optimizer, bytes_per_pack) -> "
                     f"train_step, got {data['not callable']}.")
            return fb
        if "problem" in data:
            fb.wrong(str(data["problem"]))
            return fb
        if "raised" in data:
            fb.wrong(f"train_step raised {data['raised']}. " + _judge_error_hint(str(data.get("text", ""))))
            return fb
        shape, bytes_per_pack = packed_case(seed)
        sizes = gradient_sizes(shape)
        packs = [int(p) for p in data["packs"]]
        wrong = _judge_packs(packs, sizes, bytes_per_pack)
        if wrong:
            fb.wrong(f"With bytes_per_pack={bytes_per_pack} on a model of gradients {sizes} floats, " + wrong[0],
                     answer=wrong[1])
            return fb
        fb.right(f"{len(packs)} all-reduces of {packs} floats: the packs TensorFlow cuts for bytes_per_pack="
                 f"{bytes_per_pack}", points=1)
        change, start = _reference_change(seed)
        wrong = _judge_change(data["copies"], change, start)
        if wrong:
            fb.wrong(wrong[0], answer=wrong[1])
        else:
            fb.right(f"every variable, on both replicas, changed as in one SGD step on one device with the whole "
                     f"batch of {PACKED_REPLICAS * PACKED_BATCH}", points=2)
        return fb
