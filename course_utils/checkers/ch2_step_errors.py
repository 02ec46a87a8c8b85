"""Chapter 2 · what the checker of exercise 4 says about an error the learner's step raised: the error in one line
(:func:`_last_error`, which chapter 13's checker uses too), an aimed sentence and, after a wrong try, the fix."""

from .answers import short_error
from .ch2_step_run import STEP_REPLICAS


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
