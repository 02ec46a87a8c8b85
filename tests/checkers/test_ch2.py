"""Chapter 2's checkers: the right answer, typical wrong answers and the hints they get."""
import json
import math

import numpy as np
import pytest

from course_utils.checkers import ch2
from helpers import assert_correct, assert_hint, grade


def test_ch2_q1_batch_and_learning_rate(cpus8):
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(cpus8)
    assert_correct(grade(2, "q1", strategy, 512, 0.08))
    assert_hint(grade(2, "q1", strategy, 64, 0.08), "per-replica batch", points=2)
    assert_hint(grade(2, "q1", strategy, 512, 0.01), "not scaled", points=2)
    assert_hint(grade(2, "q1", strategy, 512, 0.00125), "divided", points=2)
    assert_hint(grade(2, "q1", strategy, 512, 5.12), "not by the global batch size itself", points=2)
    assert_hint(grade(2, "q1", tf.distribute.MirroredStrategy(cpus8[:2]), 512, 0.08), "2 replica(s)", points=2)
    assert_hint(grade(2, "q1", tf.distribute.OneDeviceStrategy(cpus8[0]), 512, 0.08), "OneDeviceStrategy", points=2)
    assert_hint(grade(2, "q1", strategy, 512.0, 0.08), "an int", points=2)


def _loss_fns():
    import tensorflow as tf
    import tf_keras

    none = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=tf_keras.losses.Reduction.NONE)
    auto = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    probs = tf_keras.losses.SparseCategoricalCrossentropy(reduction=tf_keras.losses.Reduction.NONE)
    G = ch2.GLOBAL_BATCH
    return {
        "right": lambda y, z: tf.nn.compute_average_loss(none(y, z), global_batch_size=G),
        "no_global": lambda y, z: tf.nn.compute_average_loss(none(y, z)),
        "raw_ops": lambda y, z: tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, z)) / G,
        "per_replica_mean": lambda y, z: tf.reduce_mean(none(y, z)),
        "sum": lambda y, z: tf.reduce_sum(none(y, z)),
        "auto_reduction": lambda y, z: auto(y, z),
        "probabilities": lambda y, z: tf.nn.compute_average_loss(probs(y, z), global_batch_size=G),
        "vector": lambda y, z: none(y, z),
    }


def test_ch2_q2_loss_scaling_inside_strategy_run(cpus8):
    import tensorflow as tf

    f = _loss_fns()
    SUM, MEAN = tf.distribute.ReduceOp.SUM, tf.distribute.ReduceOp.MEAN
    assert_correct(grade(2, "q2", f["right"], SUM))
    assert_correct(grade(2, "q2", f["raw_ops"], "sum"))
    # Inside strategy.run compute_average_loss divides by per-replica batch x replicas: also right.
    assert_correct(grade(2, "q2", f["no_global"], SUM))
    assert_hint(grade(2, "q2", f["per_replica_mean"], SUM), "8x too large", "global_batch_size=GLOBAL_BATCH_SIZE", points=1)
    assert_hint(grade(2, "q2", f["sum"], SUM), "returns the sum", points=1)
    assert_hint(grade(2, "q2", f["auto_reduction"], SUM), "reduction=NONE", points=1)
    assert_hint(grade(2, "q2", f["probabilities"], SUM), "from_logits=True", points=1)
    assert_hint(grade(2, "q2", f["vector"], SUM), "one scalar per replica", points=1)
    assert_hint(grade(2, "q2", f["right"], MEAN), "MEAN would divide", points=2)
    assert_hint(grade(2, "q2", f["right"], None), "reduce_op: not answered yet", points=2)
    assert_hint(grade(2, "q2", lambda y, z: 1 / 0, SUM), "ZeroDivisionError", points=1)


def test_ch2_q3_strategy_choice():
    import tensorflow as tf

    right = {k: v for k, (_, v) in ch2.SCENARIOS.items()}
    assert_correct(grade(2, "q3", right))
    as_classes = dict(right, a=tf.distribute.MirroredStrategy, b=tf.distribute.MultiWorkerMirroredStrategy,
                      c="tf.distribute.experimental.ParameterServerStrategy", e="centralstoragestrategy",
                      f="tf.experimental.dtensor")
    assert_correct(grade(2, "q3", as_classes))
    assert_hint(grade(2, "q3", dict(right, f="ParameterServerStrategy")), "data parallelism", "variable_partitioner",
                points=5)
    assert_hint(grade(2, "q3", dict(right, f="CentralStorageStrategy")), "not model parallelism", points=5)
    assert_hint(grade(2, "q3", dict(right, a="MultiWorkerMirroredStrategy")), "several machines", points=5)
    assert_hint(grade(2, "q3", dict(right, b="MirroredStrategy")), "its own machine", points=5)
    assert_hint(grade(2, "q3", dict(right, c="MultiWorkerMirroredStrategy")), "synchronous", points=5)
    assert_hint(grade(2, "q3", dict(right, a="MultiDeviceStrategy")), "has no MultiDeviceStrategy", points=5)
    assert_hint(grade(2, "q3", dict(right, a="EstimatorStrategy")), "not one of the choices", points=5)
    assert_hint(grade(2, "q3", dict(right, d=None)), "d: not answered yet", points=5)
    assert_hint(grade(2, "q3", {"a": "MirroredStrategy"}), "Missing key(s)", points=1)
    assert_hint(grade(2, "q3", ["MirroredStrategy"]), "Give a dict")


def test_ch2_scenarios_are_in_the_notebook():
    from pathlib import Path

    text = (Path(__file__).parents[2] / "solutions" / "02_strategies_one_machine.ipynb").read_text()
    for scenario, _ in ch2.SCENARIOS.values():
        assert json.dumps(scenario)[1:-1] in text, scenario


def test_ch2_q3_what_the_hints_say_about_sharded_variables(cpus8):
    """Hint 2 and the f/ParameterServerStrategy reason: a variable's storage can be sharded, and a worker puts the
    shards back together to compute with them (ShardedVariable's conversion to a tensor concatenates)."""
    import inspect

    import tensorflow as tf
    from tensorflow.python.distribute.sharded_variable import ShardedVariable

    assert "variable_partitioner" in inspect.signature(tf.distribute.ParameterServerStrategy).parameters
    sharded = ShardedVariable([tf.Variable([[1.0], [2.0]]), tf.Variable([[3.0]])])
    assert tf.convert_to_tensor(sharded).numpy().ravel().tolist() == [1.0, 2.0, 3.0]
    assert "variable_partitioner" in ch2.PickStrategy.hints[1]
