"""Chapter 2's checkers: the right answer, typical wrong answers and the hints they get."""
import json

import pytest

from course_utils.checkers import ch2, ch2_build, ch2_loss, ch2_plan, ch2_step_diagnosis, ch2_step_run, exercises
from helpers import assert_correct, assert_hint, grade, holding, sandbox_copy, stripped_exercise


def _plan(batch="global", rate="linear", steps="ceil"):
    """A training_plan: ``batch`` "global" (per replica x replicas), "per_replica" or "notebook" (x 8); ``rate``
    "linear" (x global / base), "replicas" (x replicas), "none", "divided", "sqrt" or "global"; ``steps`` "ceil",
    "floor" or "per_replica" (steps of one replica's batch)."""
    def training_plan(strategy, per_replica_batch, base_learning_rate, base_batch, examples):
        replicas = strategy.num_replicas_in_sync
        global_batch = {"global": per_replica_batch * replicas, "per_replica": per_replica_batch,
                        "notebook": per_replica_batch * 8}[batch]
        growth = global_batch / base_batch
        learning_rate = {"linear": base_learning_rate * growth, "replicas": base_learning_rate * replicas,
                         "none": base_learning_rate, "divided": base_learning_rate / growth,
                         "sqrt": base_learning_rate * growth ** 0.5, "global": base_learning_rate * global_batch}[rate]
        steps_per_epoch = {"ceil": -(-examples // global_batch), "floor": examples // global_batch,
                           "per_replica": -(-examples // per_replica_batch)}[steps]
        return global_batch, learning_rate, steps_per_epoch
    return training_plan


def test_ch2_q1_training_plan(cpus8):
    import math

    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(cpus8)
    assert_correct(grade(2, "q1", strategy, _plan()))

    def other_forms(strategy, per_replica_batch, base_learning_rate, base_batch, examples):
        global_batch = np.int64(per_replica_batch * strategy.num_replicas_in_sync)
        return [global_batch, tf.constant(base_learning_rate * global_batch / base_batch),
                np.ceil(examples / global_batch)]
    assert_correct(grade(2, "q1", strategy, other_forms))
    assert_correct(grade(2, "q1", strategy, lambda s, p, r, b, e: (p * s.num_replicas_in_sync, r * p * s.num_replicas_in_sync / b,
                                                                math.ceil(e / (p * s.num_replicas_in_sync)))))
    # A wrong global batch costs its own point: the rate and the steps are judged by the batch given.
    assert_hint(grade(2, "q1", strategy, _plan(batch="per_replica")), "the per-replica batch",
                "learning_rate: right for every strategy and setting the checker tried (from your global_batch_size)",
                points=3)
    assert_hint(grade(2, "q1", strategy, _plan(batch="notebook")), "read the number of replicas from the strategy",
                points=3)
    assert_hint(grade(2, "q1", strategy, _plan(rate="none")), "not scaled", points=3)
    assert_hint(grade(2, "q1", strategy, _plan(rate="replicas")), "you multiplied by the number of replicas",
                "by how much did the batch grow", points=3)
    assert_hint(grade(2, "q1", strategy, _plan(rate="divided")), "you divided", points=3)
    assert_hint(grade(2, "q1", strategy, _plan(rate="sqrt")), "square root", points=3)
    assert_hint(grade(2, "q1", strategy, _plan(rate="global")), "not by the global batch size itself", points=3)
    assert_hint(grade(2, "q1", strategy, _plan(steps="floor")), "the last, smaller batch", points=3)
    assert_hint(grade(2, "q1", strategy, _plan(steps="per_replica")), "steps of the per-replica batch", points=3)
    assert_hint(grade(2, "q1", tf.distribute.MirroredStrategy(cpus8[:2]), _plan()), "2 replica(s)", points=3)
    assert_hint(grade(2, "q1", tf.distribute.OneDeviceStrategy(cpus8[0]), _plan()), "OneDeviceStrategy", points=3)
    assert_hint(grade(2, "q1", strategy, lambda *a: (512.0, 0.08, 98)), "not a whole number", points=1)
    assert_hint(grade(2, "q1", strategy, lambda *a: (512, 0.08)), "return three values", points=1)
    assert_hint(grade(2, "q1", strategy, lambda *a: 1 / 0), "raised ZeroDivisionError", points=1)
    assert_hint(grade(2, "q1", strategy, 512), "should be a function", points=1)
    first = exercises(2).q1._evaluate((strategy, _plan(rate="divided")), {}, first_try=True).message
    assert "you divided" in first and "Multiply" not in first, first
    assert "Multiply base_learning_rate" in grade(2, "q1", strategy, _plan(rate="divided")).message


def test_ch2_q1_typed_numbers_do_not_pass(cpus8):
    """Issue 37: typing the numbers (512, 0.08) passed, though the exercise says to compute them. Numbers typed into
    the function are right for the notebook's 8 replicas only: the checker's strategies have 2, 3 and 4."""
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(cpus8)
    result = grade(2, "q1", strategy, lambda *args: (512, 0.08, 98))
    assert_hint(result, "whatever it is given: compute it from the strategy and the numbers passed in", points=1)
    assert result.message.count("whatever it is given") == 3
    typed_replicas = lambda s, p, r, b, e: (p * 8, r * 8 * p / b, -(-e // (p * 8)))
    assert_hint(grade(2, "q1", strategy, typed_replicas), "this notebook's, but the checker's strategy has", points=3)


def test_ch2_q1_cases_come_from_the_seed():
    cases = [ch2_plan._plan_cases(seed) for seed in range(20)]
    assert len({tuple(c) for c in cases}) > 15
    for drawn in cases:
        assert [case[0] for case in drawn] == list(ch2_plan.PLAN_REPLICAS)
        assert drawn[0][1] == drawn[0][3] and all(case[3] != case[1] for case in drawn[1:])  # tuned for another batch
        assert all(case[4] % (case[0] * case[1]) for case in drawn[:-1])  # these epochs end with a smaller batch
        assert drawn[-1][4] % (drawn[-1][0] * drawn[-1][1]) == 0  # this one fills whole batches


def test_ch2_q1_adding_a_step_is_no_rounding_up(cpus8):
    """The fresh-eyes review of issue 37: steps = examples // global + 1 passed (no case divided evenly). The first
    wrong check says what is wrong without the formula; the second gives it."""
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(cpus8)

    def plus_one(strategy, per_replica_batch, base_learning_rate, base_batch, examples):
        global_batch, learning_rate, _ = _plan()(strategy, per_replica_batch, base_learning_rate, base_batch, examples)
        return global_batch, learning_rate, examples // global_batch + 1
    assert_hint(grade(2, "q1", strategy, plus_one), "no step to add", "-(-examples // global)", points=3)
    for wrong, said in ((plus_one, "no step to add"), (_plan(steps="floor"), "the last, smaller batch")):
        first = exercises(2).q1._evaluate((strategy, wrong), {}, first_try=True).message
        assert said in first and "-(-examples" not in first, first


def _loss_fns():
    import tensorflow as tf
    import tf_keras

    none = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=tf_keras.losses.Reduction.NONE)
    auto = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    probs = tf_keras.losses.SparseCategoricalCrossentropy(reduction=tf_keras.losses.Reduction.NONE)
    G, decay = ch2_loss.GLOBAL_BATCH, ch2_loss.WEIGHT_DECAY

    def penalty(kernels):
        return decay * tf.add_n([tf.reduce_sum(tf.square(k)) for k in kernels])

    def scaled(kernels):
        return tf.nn.scale_regularization_loss(penalty(kernels))

    def by_replicas(kernels):
        return penalty(kernels) / tf.distribute.get_replica_context().num_replicas_in_sync

    return {
        "right": lambda y, z, k: tf.nn.compute_average_loss(none(y, z), global_batch_size=G) + scaled(k),
        "no_global": lambda y, z, k: tf.nn.compute_average_loss(none(y, z)) + scaled(k),
        "raw_ops": lambda y, z, k: (tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, z)) / G
                                    + by_replicas(k)),
        "per_replica_mean": lambda y, z, k: tf.reduce_mean(none(y, z)) + scaled(k),
        "sum": lambda y, z, k: tf.reduce_sum(none(y, z)) + scaled(k),
        "auto_reduction": lambda y, z, k: auto(y, z) + scaled(k),
        "probabilities": lambda y, z, k: tf.nn.compute_average_loss(probs(y, z), global_batch_size=G) + scaled(k),
        "vector": lambda y, z, k: none(y, z),
        "penalty_whole": lambda y, z, k: tf.nn.compute_average_loss(none(y, z), global_batch_size=G) + penalty(k),
        "l2_loss": lambda y, z, k: (tf.nn.compute_average_loss(none(y, z), global_batch_size=G)
                                    + tf.nn.scale_regularization_loss(decay * tf.add_n([tf.nn.l2_loss(w) for w in k]))),
        "no_penalty": lambda y, z, k: tf.nn.compute_average_loss(none(y, z), global_batch_size=G),
        "penalty_per_example": lambda y, z, k: tf.nn.compute_average_loss(none(y, z), global_batch_size=G) + penalty(k) / G,
        "stop_gradient": lambda y, z, k: tf.stop_gradient(tf.nn.compute_average_loss(none(y, z), global_batch_size=G)
                                                          + scaled(k)),
        "doubled": lambda y, z, k: 2 * tf.nn.compute_average_loss(none(y, z), global_batch_size=G) + scaled(k),
        "plus_constant": lambda y, z, k: tf.nn.compute_average_loss(none(y, z), global_batch_size=G) + scaled(k) + 1.0,
    }


def test_ch2_q2_loss_scaling_inside_strategy_run(cpus8):
    import tensorflow as tf

    f = _loss_fns()
    SUM, MEAN = tf.distribute.ReduceOp.SUM, tf.distribute.ReduceOp.MEAN
    assert_correct(grade(2, "q2", f["right"], SUM))
    assert_correct(grade(2, "q2", f["raw_ops"], "sum"))
    # Inside strategy.run compute_average_loss divides by per-replica batch x replicas: also right.
    assert_correct(grade(2, "q2", f["no_global"], SUM))
    assert_hint(grade(2, "q2", f["per_replica_mean"], SUM), "8x too large", "global_batch_size=GLOBAL_BATCH_SIZE", points=2)
    assert_hint(grade(2, "q2", f["sum"], SUM), "sums the per-example losses", points=2)
    assert_hint(grade(2, "q2", f["auto_reduction"], SUM), "reduction=NONE", points=1)
    assert_hint(grade(2, "q2", f["probabilities"], SUM), "reads the logits as probabilities", "from_logits=True",
                points=2)
    assert_hint(grade(2, "q2", f["vector"], SUM), "one scalar per replica", points=1)
    assert_hint(grade(2, "q2", f["right"], MEAN), "MEAN divides by the number of replicas a second time", points=2)
    assert_hint(grade(2, "q2", f["right"], None), "reduce_op: not answered yet", points=2)
    assert_hint(grade(2, "q2", lambda y, z, k: 1 / 0, SUM), "ZeroDivisionError", points=1)
    assert_hint(grade(2, "q2", lambda y, z: 0.0, SUM), "compute_loss raised", points=1)  # the chapter's two arguments


def test_ch2_q2_a_typed_number_of_replicas_is_found_out(cpus8):
    """The fresh-eyes review of issue 37: penalty / 8 (the notebook's replicas, typed in) passed, since the checker
    tried 8 replicas only. Its second strategy has OTHER_REPLICAS."""
    import tensorflow as tf
    import tf_keras

    none = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=tf_keras.losses.Reduction.NONE)
    G, decay = ch2_loss.GLOBAL_BATCH, ch2_loss.WEIGHT_DECAY

    def typed_in(labels, logits, kernels):
        penalty = decay * tf.add_n([tf.reduce_sum(k ** 2) for k in kernels])
        return tf.nn.compute_average_loss(none(labels, logits), global_batch_size=G) + penalty / 8
    result = grade(2, "q2", typed_in, "SUM")
    assert_hint(result, f"second strategy, of {ch2_loss.OTHER_REPLICAS} replicas", "typed in",
                "num_replicas_in_sync", points=2)
    first = exercises(2).q2._evaluate((typed_in, "SUM"), {}, first_try=True).message
    assert "typed in" in first and "get_strategy" not in first, first

    def read_in(labels, logits, kernels):  # the strategy's number, read inside the replica: right
        penalty = decay * tf.add_n([tf.reduce_sum(k ** 2) for k in kernels])
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        return tf.nn.compute_average_loss(none(labels, logits), global_batch_size=G) + penalty / replicas
    assert_correct(grade(2, "q2", read_in, "SUM"))


def test_ch2_q2_the_penalty(cpus8):
    f = _loss_fns()
    assert_hint(grade(2, "q2", f["penalty_whole"], "SUM"), "8x those of the penalty", "every replica adds the whole "
                "penalty", "scale_regularization_loss", points=2)
    assert_hint(grade(2, "q2", f["l2_loss"], "SUM"), "tf.nn.l2_loss(w) is sum(w**2) / 2", points=2)
    assert_hint(grade(2, "q2", f["no_penalty"], "SUM"), "the kernels get no gradient", points=2)
    assert_hint(grade(2, "q2", f["penalty_per_example"], "SUM"), "divided by the batch size", points=2)
    first = exercises(2).q2._evaluate((f["penalty_whole"], "SUM"), {}, first_try=True).message
    assert "every replica adds the whole penalty" in first and "scale_regularization_loss" not in first


def test_ch2_q2_gradients_are_checked_not_only_the_loss(cpus8):
    """Issue 37: a loss wrapped in tf.stop_gradient (every gradient zero) got full marks, including the line that the
    summed gradients are the gradient of the mean: only the loss's value was checked. Its value is right; its
    gradients are not. A loss with the right gradients and another value does not pass either."""
    f = _loss_fns()
    result = grade(2, "q2", f["stop_gradient"], "SUM")
    assert_hint(result, "no gradient reaches the logits", "tf.stop_gradient", "the kernels get no gradient", points=1)
    assert "✓ cross-entropy" not in result.message and "✓ penalty" not in result.message
    assert_hint(grade(2, "q2", f["plus_constant"], "SUM"), "the gradients are right, but the replicas' losses add up "
                "to", points=2)


def test_ch2_q2_a_doubled_loss_is_not_a_from_logits_mistake(cpus8):
    """Issue 37: a doubled loss was answered with "Use from_logits=True". It is a scaling: the hint says by how much."""
    result = grade(2, "q2", _loss_fns()["doubled"], "SUM")
    assert_hint(result, "2x those of the mean cross-entropy", "scaled by 2", points=2)
    assert "from_logits" not in result.message


def test_ch2_q2_reduce_op_in_any_readable_form(cpus8):
    import numpy as np

    right = _loss_fns()["right"]
    for op in ("SUM ", " sum", "ReduceOp.SUM", "tf.distribute.ReduceOp.SUM", np.str_("SUM"), "'SUM'"):
        assert_correct(grade(2, "q2", right, op))


def test_ch2_q2_first_try_does_not_name_the_other_reduce_op(cpus8):
    """reduce_op is a choice of two: a first wrong check says what MEAN does wrong, not that SUM is right."""
    import tensorflow as tf

    f = _loss_fns()
    ex = exercises(2).q2
    for loss in (f["right"], f["per_replica_mean"]):
        first = ex._evaluate((loss, tf.distribute.ReduceOp.MEAN), {}, first_try=True).message
        line = next(line for line in first.splitlines() if "✗ reduce_op" in line)
        assert "SUM" not in line.replace("SUMS", ""), line
        assert "ReduceOp.SUM" in ex.evaluate(loss, tf.distribute.ReduceOp.MEAN).message  # the second shows it
    assert_hint(grade(2, "q2", f["per_replica_mean"], "MEAN"), "MEAN of losses averaged over each replica's own batch",
                "8x too large", points=1)
    assert_hint(grade(2, "q2", f["right"], "MEAN"), "reports 1/8 of it", points=2)
    summed = ex._evaluate((f["sum"], tf.distribute.ReduceOp.SUM), {}, first_try=True).message
    assert "sums the per-example losses: their gradients are 64x" in summed and "Divide by" not in summed


def test_ch2_q2_loss_scaled_twice(cpus8):
    """Divided by the global batch AND by the number of replicas: its own hint, the fix held back at first."""
    import tensorflow as tf

    f = _loss_fns()

    def twice(labels, logits, kernels):
        return f["right"](labels, logits, kernels) / tf.distribute.get_strategy().num_replicas_in_sync

    result = grade(2, "q2", twice, tf.distribute.ReduceOp.SUM)
    assert_hint(result, "8x too small", "scaled twice", "drop the division by num_replicas_in_sync", points=1)
    first = exercises(2).q2._evaluate((twice, "SUM"), {}, first_try=True).message
    assert "scaled twice" in first and "num_replicas_in_sync" not in first and "compute_average_loss" not in first


def test_ch2_q3_strategy_choice():
    import tensorflow as tf

    right = ch2._reference_scenario_strategies()
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


def test_ch2_q3_readable_forms_and_first_try():
    from tensorflow.experimental import dtensor

    right = ch2._reference_scenario_strategies()
    spelled = {"a": "Mirrored", "b": "multi-worker mirrored strategy", "c": " parameter_server ",
               "d": "tf.distribute.OneDeviceStrategy('/cpu:0')", "e": "CentralStorage", "f": dtensor}
    assert_correct(grade(2, "q3", spelled))
    assert_correct(grade(2, "q3", dict(right, b="MWMS", f="DTensor API")))
    ex = exercises(2).q3
    first = ex._evaluate((dict(right, a="MultiDeviceStrategy", d="MirroredStrategy"),), {}, first_try=True).message
    for line in first.splitlines():
        if "✗" in line:
            assert "It is" not in line and "MirroredStrategy." not in line and "OneDevice" not in line, line
    assert "has no MultiDeviceStrategy" in first and "built for exactly this case" in first


def test_ch2_scenarios_are_in_the_notebook():
    from pathlib import Path

    text = (Path(__file__).parents[2] / "solutions" / "02_strategies_one_machine.ipynb").read_text()
    for scenario in ch2.SCENARIOS.values():
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


# Exercise 4: make_train_step(strategy, model, optimizer), run by the checker on its own 3-replica strategy.
def _step_maker(divisor="count_inside", reduce_op="SUM", gradients="apply", from_logits=True, eager=False,
                returns="loss"):
    """A make_train_step in the notebook's style. ``divisor``: what each replica divides its summed loss by;
    ``gradients``: how the update is applied; ``returns``: what train_step returns."""
    import tensorflow as tf
    import tf_keras

    SUM = tf.distribute.ReduceOp.SUM
    loss_object = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits,
                                                                 reduction=tf_keras.losses.Reduction.NONE)

    def make_train_step(strategy, model, optimizer):
        def replica_step(features, labels, count=None):
            context = tf.distribute.get_replica_context()
            with tf.GradientTape() as tape:
                per_example_loss = loss_object(labels, model(features, training=True))
                if divisor == "count_inside":
                    examples = context.all_reduce(SUM, tf.shape(labels)[0])
                    loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=examples)
                elif divisor == "count_outside":
                    loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=count)
                elif divisor == "float_count":
                    examples = context.all_reduce(SUM, tf.cast(tf.shape(labels)[0], tf.float32))
                    loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=examples)
                elif divisor == "no_global":
                    loss = tf.nn.compute_average_loss(per_example_loss)
                elif divisor == "shape_x_replicas":
                    local = tf.shape(labels)[0] * strategy.num_replicas_in_sync
                    loss = tf.reduce_sum(per_example_loss) / tf.cast(local, tf.float32)
                elif divisor == "per_replica_mean":
                    loss = tf.reduce_mean(per_example_loss)
                elif divisor == "sum":
                    loss = tf.reduce_sum(per_example_loss)
                else:  # a number typed in
                    loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=divisor)
            grads = tape.gradient(loss, model.trainable_variables)
            if gradients == "apply":
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
            elif gradients == "mean":  # averaged over the replicas, applied as they are
                grads = context.all_reduce(tf.distribute.ReduceOp.MEAN, grads)
                optimizer.apply_gradients(zip(grads, model.trainable_variables), skip_gradients_aggregation=True)
            elif gradients == "own":  # each replica applies its own gradient
                optimizer.apply_gradients(zip(grads, model.trainable_variables), skip_gradients_aggregation=True)
            return loss

        def train_step(features, labels):
            if divisor == "count_outside":
                count = strategy.reduce(SUM, strategy.run(lambda y: tf.shape(y)[0], args=(labels,)), axis=None)
                per_replica = strategy.run(replica_step, args=(features, labels, count))
            else:
                per_replica = strategy.run(replica_step, args=(features, labels))
            if returns == "per_replica":
                return per_replica
            if returns == "nothing":
                return None
            return strategy.reduce(reduce_op, per_replica, axis=None)
        return train_step if eager else tf.function(train_step)
    return make_train_step


def _step_local_results_minimize(strategy, model, optimizer):
    """Counts with experimental_local_results before strategy.run; raw ops; optimizer.minimize."""
    import tensorflow as tf

    def replica_step(features, labels, count):
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            total = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            loss = total / tf.cast(count, tf.float32)
        optimizer.minimize(loss, model.trainable_variables, tape=tape)
        return loss

    @tf.function
    def train_step(features, labels):
        count = tf.add_n([tf.shape(y)[0] for y in strategy.experimental_local_results(labels)])
        return strategy.reduce("SUM", strategy.run(replica_step, args=(features, labels, count)), axis=None)
    return train_step


def _step_own_all_reduce(strategy, model, optimizer):
    """Gradients of the summed loss, all-reduced by hand, divided by the all-reduced count."""
    import tensorflow as tf
    import tf_keras

    loss_object = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                 reduction=tf_keras.losses.Reduction.NONE)

    def replica_step(features, labels):
        context = tf.distribute.get_replica_context()
        with tf.GradientTape() as tape:
            total = tf.reduce_sum(loss_object(labels, model(features, training=True)))
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, tape.gradient(total, model.trainable_variables))
        count = context.all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(tf.shape(labels)[0], tf.float32))
        optimizer.apply_gradients(zip([g / count for g in grads], model.trainable_variables),
                                  skip_gradients_aggregation=True)
        return total / count

    @tf.function
    def train_step(features, labels):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(features, labels)),
                               axis=None)
    return train_step


def _step_cross_replica(op="SUM", per_replica_mean=False):
    """Per-replica gradients combined with strategy.reduce and applied in cross-replica context."""
    import tensorflow as tf

    def make_train_step(strategy, model, optimizer):
        def replica_gradients(features, labels):
            with tf.GradientTape() as tape:
                logits = model(features, training=True)
                per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
                loss = tf.reduce_mean(per_example) if per_replica_mean else tf.reduce_sum(per_example)
            return loss, tape.gradient(loss, model.trainable_variables), tf.cast(tf.shape(labels)[0], tf.float32)

        @tf.function
        def train_step(features, labels):
            loss, grads, count = strategy.run(replica_gradients, args=(features, labels))
            grads = [strategy.reduce(op, g, axis=None) for g in grads]
            loss = strategy.reduce(op, loss, axis=None)
            if not per_replica_mean:
                count = strategy.reduce("SUM", count, axis=None)
                grads, loss = [g / count for g in grads], loss / count
            optimizer.apply_gradients(zip(grads, model.trainable_variables), skip_gradients_aggregation=True)
            return loss
        return train_step
    return make_train_step


def test_ch2_q4_every_right_form(cpus8):
    assert_correct(grade(2, "q4", _step_maker()))  # the solution's form
    assert_correct(grade(2, "q4", _step_maker("count_outside")))  # counted by strategy.reduce, passed in args
    assert_correct(grade(2, "q4", _step_local_results_minimize))
    assert_correct(grade(2, "q4", _step_own_all_reduce))
    assert_correct(grade(2, "q4", _step_cross_replica()))  # combined outside strategy.run
    assert_correct(grade(2, "q4", _step_maker(eager=True)))  # no tf.function: slower, as right


def test_ch2_q4_loss_scaling_mistakes(cpus8):
    # Right for the evenly split batch, wrong for the last one (6, 6, 4): per-replica batch x replicas.
    for uneven in (_step_maker("no_global"), _step_maker("shape_x_replicas"),
                   _step_cross_replica("MEAN", per_replica_mean=True)):
        assert_hint(grade(2, "q4", uneven), "split 6, 6, 4", "only when the shares are equal", "unequally",
                    "count 1.5x", "get_replica_context().all_reduce", points=2)
    assert_hint(grade(2, "q4", _step_maker("per_replica_mean")), "changed 3x as much", "its OWN batch",
                "last batch of 16 examples (split 6, 6, 4): the same mistake", points=0)
    assert_hint(grade(2, "q4", _step_maker(64)), "divides the summed loss by 64, this notebook's batch size",
                "the same mistake", points=0)
    assert_hint(grade(2, "q4", _step_maker(128)), "divides the summed loss by 128, whatever batch", points=0)
    assert_hint(grade(2, "q4", _step_maker(18)), "divided by 18, the size of the full batches", points=2)
    assert_hint(grade(2, "q4", _step_maker("sum")), "the loss is the SUM over the examples", points=0)
    # The gradients averaged over the replicas as well: 1/3 of the step (the returned loss is right).
    assert_hint(grade(2, "q4", _step_maker(gradients="mean")), "1/3 as much", "ReduceOp.MEAN", points=1)
    assert_hint(grade(2, "q4", _step_cross_replica("MEAN")), "1/3 as much", points=0)
    assert_hint(grade(2, "q4", _step_maker("per_replica_mean", gradients="own", reduce_op="MEAN")),
                "copies of a mirrored variable differ", "skip_gradients_aggregation", points=0)
    assert_hint(grade(2, "q4", _step_maker(from_logits=False)), "every variable changed otherwise than in one SGD",
                "outputs logits", points=0)


def test_ch2_q4_loss_scaled_twice(cpus8):
    """The loss divided by the examples of the whole step AND by the number of replicas (then summed): the step and
    the returned loss are both 1/3; the hint says the loss was scaled twice, not that ReduceOp.MEAN was used."""
    import tensorflow as tf

    def divided_by_replicas(strategy, model, optimizer):
        import tf_keras

        loss_object = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                     reduction=tf_keras.losses.Reduction.NONE)

        def replica_step(features, labels):
            examples = tf.distribute.get_replica_context().all_reduce("SUM", tf.shape(labels)[0])
            with tf.GradientTape() as tape:
                per_example = loss_object(labels, model(features, training=True))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=examples)
                loss = loss / strategy.num_replicas_in_sync
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss
        return tf.function(lambda f, y: strategy.reduce("SUM", strategy.run(replica_step, args=(f, y)), axis=None))

    result = grade(2, "q4", divided_by_replicas)
    assert_hint(result, "changed 1/3 as much", "scaled twice", "the same double scaling", "drop the division by "
                "num_replicas_in_sync", points=0)
    assert "ReduceOp.MEAN divides" not in result.message
    first = exercises(2).q4._evaluate((divided_by_replicas,), {}, first_try=True).message
    assert "scaled twice" in first and "drop the division" not in first and "compute_average_loss(" not in first


def test_ch2_q4_returned_loss_and_errors(cpus8):
    import tensorflow as tf
    import tf_keras

    assert_hint(grade(2, "q4", _step_maker(reduce_op="MEAN")), "1/3 of them", "ReduceOp.SUM", points=3)
    assert_hint(grade(2, "q4", _step_maker(returns="nothing")), "train_step returned None", points=3)
    assert_hint(grade(2, "q4", _step_maker(returns="per_replica")), "PerReplica value", points=3)
    assert_hint(grade(2, "q4", _step_maker("float_count")), "integer global_batch_size", "tf.shape(labels)[0]")

    def keras_mean_loss(strategy, model, optimizer):
        loss_object = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)  # averages by itself

        def replica_step(features, labels):
            with tf.GradientTape() as tape:
                loss = loss_object(labels, model(features, training=True))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss
        return tf.function(lambda f, y: strategy.reduce("SUM", strategy.run(replica_step, args=(f, y)), axis=None))
    assert_hint(grade(2, "q4", keras_mean_loss), "averages over its batch by itself", "Reduction.NONE")

    def no_update(strategy, model, optimizer):
        return tf.function(lambda f, y: strategy.reduce("SUM", strategy.run(
            lambda f, y: tf.reduce_mean(model(f)), args=(f, y)), axis=None))
    assert_hint(grade(2, "q4", no_update), "did not change", points=0)

    own_keys = type("TestMirroredStrategy", (tf.distribute.MirroredStrategy,), {"_collective_key_base": 30_000})
    notebook_strategy = own_keys(devices=cpus8)  # never runs a collective: the step fails while it is traced
    assert_hint(grade(2, "q4", lambda strategy, model, optimizer: _step_maker()(notebook_strategy, model, optimizer)),
                "must use the strategy, model and optimizer it receives")

    def aborted(strategy, model, optimizer):
        def train_step(features, labels):
            raise tf.errors.InvalidArgumentError(None, None, "Collective ops is aborted by: Shape mismatch. The "
                                                             "error could be from a previous operation. Restart "
                                                             "your program to reset.")
        return train_step
    assert_hint(grade(2, "q4", aborted), "restart the kernel")
    assert_hint(grade(2, "q4", lambda strategy, model, optimizer: None), "returned a NoneType")
    assert_hint(grade(2, "q4", lambda strategy, model, optimizer: 1 / 0), "make_train_step", "ZeroDivisionError")
    assert_hint(grade(2, "q4", 3), "should be a function")
    unanswered = grade(2, "q4", None)
    assert unanswered.status == "unanswered" and unanswered.points == 0


def test_ch2_q4_graded_feedback_keeps_the_answer_back(cpus8):
    from course_utils.checkers import exercises

    from course_utils.checkers.plain import loads

    ex = exercises(2).q4
    for answer in (_step_maker("no_global"), _step_maker(64), _step_maker(reduce_op="MEAN")):
        feedback = ex.judge(loads(ex.export(answer, seed=0))["data"], seed=0)  # the Feedback, before rendering
        assert "all_reduce" in feedback.render() or "ReduceOp.SUM" in feedback.render()
        graded = feedback.render(graded=True)
        assert "get_replica_context" not in graded and "ReduceOp.SUM" not in graded, graded
    key_line = ch2_build.DistributedStep.hints[2]
    assert "get_replica_context().all_reduce" in key_line and len(ch2_build.DistributedStep.hints) == 3


def test_ch2_q4_checker_strategy_has_its_own_collective_numbers(cpus8):
    """One strategy per process, with collective group numbers apart from a plain MirroredStrategy's (chapter 2)."""
    import tensorflow as tf

    strategy = ch2_step_run._step_strategy()
    assert strategy is ch2_step_run._step_strategy() and strategy.num_replicas_in_sync == ch2_step_run.STEP_REPLICAS
    canonical = [tf.DeviceSpec.from_string(d).to_string() for d in cpus8[:ch2_step_run.STEP_REPLICAS]]
    plain = tf.distribute.MirroredStrategy(devices=cpus8[:ch2_step_run.STEP_REPLICAS])  # never runs a collective
    assert strategy.extended._collective_keys.get_group_key(canonical) == \
        ch2_step_run.STEP_KEY_BASE + plain.extended._collective_keys.get_group_key(canonical)


def test_ch2_q4_checker_batches_are_split_as_a_distributed_dataset_splits_them(cpus8):
    """The checker builds its distributed batches itself; experimental_distribute_dataset splits them the same way."""
    import numpy as np
    import tensorflow as tf

    strategy = ch2_step_run._step_strategy()
    x, y, _ = ch2_step_run._step_data()
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(ch2_step_run.STEP_BATCH)
    splits, first = [], 0
    for features, labels in strategy.experimental_distribute_dataset(dataset):
        parts = strategy.experimental_local_results(labels)
        splits.append(tuple(len(part) for part in parts))
        batch = np.concatenate([part.numpy() for part in parts])
        np.testing.assert_array_equal(batch, y[first: first + len(batch)])  # consecutive examples, in order
        first += len(batch)
    assert tuple(splits) == ch2_step_run.STEP_SPLITS and first == ch2_step_run.STEP_EXAMPLES


# The check in two halves (collect where the answers live, judge in the grader): other seeds, forgeries, the sandbox.
def _solutions(name, cpus8):
    """The solution's answers to exercise ``name``, as the tests above give them."""
    import tensorflow as tf

    if name == "q1":
        return (tf.distribute.MirroredStrategy(cpus8), _plan())
    if name == "q2":
        return (_loss_fns()["right"], tf.distribute.ReduceOp.SUM)
    return (_step_maker(),)


@pytest.mark.parametrize("name", ["q1", "q2", "q4"])
def test_ch2_solutions_are_right_with_another_seed(name, cpus8):
    from course_utils.checkers import exercises

    ex = getattr(exercises(2), name)
    answers = _solutions(name, cpus8)
    assert_correct(ex.judge_export(ex.export(*answers, seed=12345), seed=12345))


@pytest.mark.parametrize("name", ["q1", "q2", "q4"])
def test_ch2_data_of_another_seed_does_not_score(name, cpus8):
    from course_utils.checkers import exercises

    ex = getattr(exercises(2), name)
    forged = ex.judge_export(ex.export(*_solutions(name, cpus8), seed=0), seed=12345)
    assert forged.points < forged.max_points, str(forged)


STEP_MODULES = ("ch2_build", "ch2_step_run", "ch2_step_diagnosis", "ch2_step_errors")  # exercise 4's checker


@pytest.mark.parametrize("module, cls, name", [("ch2_plan", "BatchAndLearningRate", "q1"), ("ch2_loss", "LossScaling", "q2"),
                                               ("ch2_build", "DistributedStep", "q4")])
def test_ch2_stripped_copy_collects_what_the_grader_judges(module, cls, name, cpus8):
    import sys

    from course_utils.checkers import exercises

    # One checker strategy per process, as in a sandbox (which holds only the stripped copy): a second strategy with
    # the same collective numbers in this process would reuse the numbers of the first one's collectives.
    with pytest.MonkeyPatch.context() as patch:  # the stripped checker imports the stripped helpers, as in a sandbox
        for helper in STEP_MODULES[1:]:  # ch2_step_run first: the others import it
            copy, _ = sandbox_copy(helper)
            patch.setitem(sys.modules, copy.__name__, copy)
            if helper == "ch2_step_run":
                copy._CHECKER_STRATEGIES = ch2_step_run._CHECKER_STRATEGIES
        sandbox_side = stripped_exercise(module, cls, 2, name, shared=("_KERNELS",))
    assert not hasattr(sandbox_side, "_judge_strategy") and not hasattr(sandbox_side, "_judge_loss")
    text = sandbox_side.export(*_solutions(name, cpus8), seed=7)
    assert_correct(getattr(exercises(2), name).judge_export(text, seed=7))


# --- the graded sandbox's copy of this module states no answer ------------------------------------

def test_ch2_the_sandbox_copy_states_no_answer():
    module, undefined = sandbox_copy("ch2")
    assert not undefined
    for gone in ("NAME_WHY", "SCENARIO_WHY", "_reference_scenario_strategies", "_reference_scenario_why",
                 "_reference_name_why", "_reference_losses"):
        assert not hasattr(module, gone), gone
    strategies = ch2._reference_scenario_strategies()
    assert not holding(module, strategies)
    assert module.SCENARIOS == ch2.SCENARIOS and list(module.SCENARIOS) == list(strategies)
    for key, text in module.SCENARIOS.items():  # only the scenarios' text: no strategy in it
        assert isinstance(text, str) and strategies[key] not in text, key
    for cls in module.CHAPTER.exercises:  # the other exercises come from the real ch2_plan, ch2_loss, ch2_build here
        assert cls.hints and (cls.__module__ != module.__name__ or not {"grade", "judge"} & set(vars(cls)))


@pytest.mark.parametrize("name", STEP_MODULES)
def test_ch2_the_sandbox_copies_of_exercise_4_state_no_answer(name):
    module, undefined = sandbox_copy(name)
    assert not undefined
    assert not [key for key in vars(module) if key.startswith(("reference", "_reference", "_judge", "_grade"))]
    assert not holding(module, ch2_step_diagnosis._reference_count_it())
    if hasattr(module, "DistributedStep"):
        assert module.DistributedStep.hints and not {"grade", "judge"} & set(vars(module.DistributedStep))


@pytest.mark.parametrize("name, gone", [
    ("ch2_plan", ("_reference_plan", "_reference_plan_slips")),
    ("ch2_loss", ("_reference_losses", "_reference_objective")),
])
def test_ch2_the_sandbox_copies_of_exercises_1_and_2_state_no_answer(name, gone):
    module, undefined = sandbox_copy(name)
    assert not undefined
    for function in gone:
        assert not hasattr(module, function), function
    for cls in (getattr(module, c) for c in ("BatchAndLearningRate", "LossScaling") if hasattr(module, c)):
        assert cls.hints and hasattr(cls, "collect") and not {"grade", "judge"} & set(vars(cls))
