"""Chapter 6's checkers: the right answer, typical wrong answers and the hints they get."""
import itertools
import math

import numpy as np
import pytest

from course_utils.checkers import ch6, ch6_adam, ch6_answers, ch6_init, exercises
from course_utils.checkers.plain import loads
from helpers import assert_correct, assert_hint, grade, holding, sandbox_copy, stripped_exercise


def xavier_limit(shape):
    receptive = math.prod(shape[:-2])
    return math.sqrt(6.0 / (shape[-2] * receptive + shape[-1] * receptive))


def fans_limit(formula):
    """A wrong xavier_limit made from a formula of the fans (Keras' fans, receptive field counted)."""
    def limit(shape):
        receptive = math.prod(shape[:-2])
        return formula(shape[-2] * receptive, shape[-1] * receptive)
    return limit


def init_weight(shape, layout, seed):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    limit = xavier_limit(shape)
    return dtensor.DVariable(dtensor.call_with_layout(tf.function(tf.random.stateless_uniform), layout, shape=shape,
                                                      seed=seed, minval=-limit, maxval=limit))


def test_ch6_q1_xavier(mesh42):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    assert_correct(grade(6, "q1", xavier_limit, init_weight))
    assert_hint(grade(6, "q1", fans_limit(lambda a, b: math.sqrt(2 / (a + b))), init_weight), "STANDARD DEVIATION",
                points=2)
    assert_hint(grade(6, "q1", fans_limit(lambda a, b: math.sqrt(1 / a)), init_weight), "LeCun", points=2)
    assert_hint(grade(6, "q1", fans_limit(lambda a, b: math.sqrt(6) / (a + b)), init_weight), "covers only the 6",
                points=2)
    assert_hint(grade(6, "q1", fans_limit(lambda a, b: 6 / (a + b)), init_weight), "no square root", points=2)

    def eager(shape, layout, seed):
        return dtensor.DVariable(dtensor.call_with_layout(tf.random.stateless_uniform, layout, shape=shape, seed=seed))

    assert_hint(grade(6, "q1", xavier_limit, eager), "Wrap the random op in tf.function", points=1)
    assert_hint(grade(6, "q1", xavier_limit, lambda s, l, seed: tf.Variable(tf.zeros(s))), "ordinary tf.Variable", points=1)
    assert_hint(grade(6, "q1", xavier_limit, lambda s, l, seed: init_weight(s, l, seed).read_value()),
                "return a variable", points=1)
    replicated = lambda s, l, seed: init_weight(s, dtensor.Layout.replicated(l.mesh, len(s)), seed)
    assert_hint(grade(6, "q1", xavier_limit, replicated), "ignored the layout", points=1)
    wide = lambda s, l, seed: dtensor.DVariable(dtensor.call_with_layout(
        tf.function(tf.random.stateless_uniform), l, shape=s, seed=seed, minval=-1.0, maxval=1.0))
    assert_hint(grade(6, "q1", xavier_limit, wide), "exceed the Xavier limit", points=1)
    positive = lambda s, l, seed: dtensor.DVariable(dtensor.call_with_layout(
        tf.function(tf.random.stateless_uniform), l, shape=s, seed=seed, minval=0.0, maxval=xavier_limit(s)))
    assert_hint(grade(6, "q1", xavier_limit, positive), "minval=-limit", points=1)
    calls = itertools.count()  # a new seed on every call (random seeds could repeat and make this flaky)
    unseeded = lambda s, l, seed: init_weight(s, l, [next(calls), 0])
    assert_hint(grade(6, "q1", xavier_limit, unseeded), "same seed gave different weights", points=1)
    assert_hint(grade(6, "q1", None, init_weight), "xavier_limit: not answered yet", points=2)


def test_ch6_q1_a_convolution_kernel_counts_its_receptive_field(mesh42):
    """The chapter's formula was for a dense kernel: `fan_in, fan_out = shape` fails on four sizes, the channels
    alone or the first two sizes give other limits; a dense-only init_weight misses the convolution's limit."""
    def chapter_formula(shape):
        fan_in, fan_out = shape
        return math.sqrt(6.0 / (fan_in + fan_out))

    assert_hint(grade(6, "q1", chapter_formula, init_weight), "four sizes", points=2)
    channels_only = lambda shape: math.sqrt(6.0 / (shape[-2] + shape[-1]))
    assert_hint(grade(6, "q1", channels_only, init_weight), "counts its channels only", points=2)
    assert "receptive" not in first_try_q1(channels_only, init_weight)
    first_two = lambda shape: math.sqrt(6.0 / (shape[0] + shape[1]))
    assert_hint(grade(6, "q1", first_two, init_weight), "its first two sizes as the fans", points=2)

    def dense_limit_everywhere(shape, layout, seed):  # channels only: too wide a range for the convolution kernel
        import tensorflow as tf
        from tensorflow.experimental import dtensor

        limit = channels_only(shape)
        return dtensor.DVariable(dtensor.call_with_layout(tf.function(tf.random.stateless_uniform), layout,
                                                          shape=shape, seed=seed, minval=-limit, maxval=limit))

    assert_hint(grade(6, "q1", xavier_limit, dense_limit_everywhere), "exceed the Xavier limit for the convolution "
                "kernel", points=1)


def first_try_q1(*answers):
    return exercises(6).q1._evaluate(answers, {}, first_try=True).message


def test_ch6_q1_a_weight_drawn_on_one_device_and_split_is_refused(mesh42):
    """Issue 37: the weight drawn whole on the host and packed onto the mesh (pack_batch, dtensor.pack) passes every
    value check, but DTensor draws each block of a sharded layout itself, other numbers: the checker tells them
    apart by the values and by the packing tool the function calls."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from course_utils import pack_batch

    def host_drawn(shape, layout, seed):
        limit = xavier_limit(shape)
        return dtensor.DVariable(pack_batch(tf.random.stateless_uniform(shape, seed, -limit, limit), layout))

    result = grade(6, "q1", xavier_limit, host_drawn)
    assert_hint(result, "drawn whole on one device and then split", "it calls pack_batch", "call_with_layout(",
                points=1)
    assert "call_with_layout(" not in first_try_q1(xavier_limit, host_drawn)

    def numpy_drawn(shape, layout, seed):  # another host draw: only the tool it calls tells
        limit = xavier_limit(shape)
        values = np.random.default_rng(seed).uniform(-limit, limit, shape).astype("float32")
        return dtensor.DVariable(pack_batch(values, layout))

    assert_hint(grade(6, "q1", xavier_limit, numpy_drawn), "it calls pack_batch", points=1)

    def packed_by_hand(shape, layout, seed):  # the same draw, split with dtensor.pack under another name
        whole = (lambda limit: tf.random.stateless_uniform(shape, seed, -limit, limit))(xavier_limit(shape))
        blocks = []
        for location in layout.mesh.local_device_locations():
            block = whole
            for axis, spec in enumerate(layout.sharding_specs):
                if spec != dtensor.UNSHARDED:
                    block = tf.split(block, layout.mesh.dim_size(spec), axis=axis)[location[spec]]
            blocks.append(block)
        put = dtensor.pack
        return dtensor.DVariable(put(blocks, layout))

    assert_hint(grade(6, "q1", xavier_limit, packed_by_hand), "drawn whole on one device", points=1)


def test_ch6_q1_a_host_draw_only_placed_with_call_with_layout_is_refused(mesh42):
    """Issue 37: a weight drawn on the host and placed by call_with_layout of a constant (tf.constant, a function that
    returns the draw; in eager mode, without tf.function, call_with_layout returns no DTensor at all) has the right layout, range and seed, but it is one host draw: the same seed gives the same
    global weight whatever the layout, while DTensor draws each block on its device (other numbers per layout)."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    def constant_placed(shape, layout, seed):
        limit = xavier_limit(shape)
        host = np.random.default_rng(seed).uniform(-limit, limit, shape).astype("float32")
        return dtensor.DVariable(dtensor.call_with_layout(tf.function(lambda: tf.constant(host)), layout))

    def lambda_placed(shape, layout, seed):
        limit = xavier_limit(shape)
        host = tf.random.stateless_uniform(shape, [seed[0] + 7, seed[1]], -limit, limit)  # not the seed's own draw

        @tf.function
        def placed():
            return tf.constant(host.numpy())

        return dtensor.DVariable(dtensor.call_with_layout(placed, layout))

    for placed in (constant_placed, lambda_placed):
        result = grade(6, "q1", xavier_limit, placed)
        assert_hint(result, "drawn whole on one device and then split", "with its rows split", "only placed",
                    points=1)
        assert "call_with_layout(tf.function" not in first_try_q1(xavier_limit, placed)

    def scaled(shape, layout, seed):  # another right form: limit times a draw of U(-1, 1), made on the mesh
        unit = dtensor.call_with_layout(tf.function(tf.random.stateless_uniform), layout, shape=shape, seed=seed,
                                        minval=-1.0, maxval=1.0)
        return dtensor.DVariable(unit * xavier_limit(shape))

    assert_correct(grade(6, "q1", xavier_limit, scaled))


def _truncated_normal_init(shape, layout, seed):
    """Within [-limit, limit] (cut at two standard deviations), but not uniform."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    return dtensor.DVariable(dtensor.call_with_layout(tf.function(tf.random.stateless_truncated_normal), layout,
                                                      shape=shape, seed=seed, stddev=xavier_limit(shape) / 2))


def test_ch6_q1_rejects_an_initialiser_that_ignores_its_seed_or_is_not_uniform(mesh42):
    fixed_seed = lambda s, l, seed: init_weight(s, l, [1, 2])
    assert_hint(grade(6, "q1", xavier_limit, fixed_seed), "ignores its `seed` argument", points=1)
    assert_hint(grade(6, "q1", xavier_limit, _truncated_normal_init), "not spread uniformly", "middle half", points=1)

    import tensorflow as tf

    host_variable = lambda s, l, seed: tf.Variable(tf.zeros(s))
    tensor = lambda s, l, seed: init_weight(s, l, seed).read_value()
    graded = exercises(6, mode="graded").q1
    for answer, reveal in ((fixed_seed, "seed=seed"), (_truncated_normal_init, "stateless_uniform("),
                           (host_variable, "call_with_layout"), (tensor, "DVariable")):
        assert reveal not in graded.evaluate(xavier_limit, answer).message
        assert reveal in grade(6, "q1", xavier_limit, answer).message
    wrong_limit = fans_limit(lambda a, b: math.sqrt(2 / (a + b)))
    assert "sqrt(6" not in graded.evaluate(wrong_limit, init_weight).message
    assert "sqrt(6" in grade(6, "q1", wrong_limit, init_weight).message


def test_ch6_q1_first_wrong_check_names_the_mistake_not_the_formula(mesh42):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    ex = exercises(6).q1
    for wrong_limit in (fans_limit(lambda a, b: math.sqrt(1 / a)), fans_limit(lambda a, b: math.sqrt(2 / (a + b))),
                        fans_limit(lambda a, b: math.sqrt(6 / a)), fans_limit(lambda a, b: math.sqrt(6) / (a + b)),
                        fans_limit(lambda a, b: 6 / (a + b)), lambda shape: 1.0):
        first = ex._evaluate((wrong_limit, init_weight), {}, first_try=True).message
        assert "sqrt(6 / (fan_in + fan_out))" not in first and "both fans" not in first, first
        assert "sqrt(6 / (fan_in + fan_out))" in ex._evaluate((wrong_limit, init_weight), {}, first_try=False).message
    wide = lambda s, l, seed: dtensor.DVariable(dtensor.call_with_layout(
        tf.function(tf.random.stateless_uniform), l, shape=s, seed=seed, minval=-1.0, maxval=1.0))
    narrow = lambda s, l, seed: dtensor.DVariable(dtensor.call_with_layout(
        tf.function(tf.random.stateless_uniform), l, shape=s, seed=seed, minval=-0.01, maxval=0.01))
    _, dense, _, _, _ = ch6_init._xavier_case(ex.seed)
    limit = f"{xavier_limit(dense):.3f}"
    for answer, fragment in ((wide, "exceed the Xavier limit"), (narrow, "well inside the Xavier limit")):
        first = ex._evaluate((xavier_limit, answer), {}, first_try=True).message
        assert fragment in first and limit not in first, first
        assert limit in ex._evaluate((xavier_limit, answer), {}, first_try=False).message


def test_ch6_q1_seed_pairs_used_in_part_or_not_at_all(mesh42):
    first_only = lambda s, l, seed: init_weight(s, l, [seed[0], 0])
    second_only = lambda s, l, seed: init_weight(s, l, [seed[1], seed[1]])
    fixed_pair = lambda s, l, seed: init_weight(s, l, [1, 2])  # the same pair reused for every call
    assert_hint(grade(6, "q1", xavier_limit, first_only), "differ only in their second number",
                "uses only part of the seed pair", points=1)
    assert_hint(grade(6, "q1", xavier_limit, second_only), "differ only in their first number",
                "uses only part of the seed pair", points=1)
    assert_hint(grade(6, "q1", xavier_limit, fixed_pair), "ignores its `seed` argument", "a fixed seed pair",
                points=1)
    assert "seed=seed" not in exercises(6).q1._evaluate((xavier_limit, fixed_pair), {}, first_try=True).message
    shifted = lambda s, l, seed: init_weight(s, l, [seed[1], seed[0]])  # every bit of the pair still counts
    assert_correct(grade(6, "q1", xavier_limit, shifted))


def test_ch6_q1_a_tf_variable_around_a_dtensor_is_named(mesh42):
    import tensorflow as tf

    wrapped = lambda s, l, seed: tf.Variable(init_weight(s, l, seed).read_value())
    assert_hint(grade(6, "q1", xavier_limit, wrapped), "even when its initial value is a DTensor", points=1)


def test_ch6_q1_fans_are_keras_fans(keras2):
    """The checker's fans are tf_keras' own (_compute_fans), dense and convolutional."""
    from tf_keras.src.initializers.initializers import _compute_fans

    for shape in ((784, 700), (3, 3, 8, 32), (5, 5, 3, 16), (2, 3, 4, 5, 6)):
        assert ch6_init._reference_fans(shape) == _compute_fans(shape)
        assert ch6_init._reference_limit(shape) == pytest.approx(xavier_limit(shape))


def test_ch6_uniform_test_accepts_uniform_samples_and_rejects_a_truncated_normal():
    rng = np.random.default_rng(0)
    for _ in range(20):
        assert ch6_init._cdf_distance_to_uniform(rng.uniform(-0.2, 0.2, 2048), 0.2) < ch6_init.MAX_CDF_DISTANCE
    normal = np.clip(rng.normal(0, 0.1, 2048), -0.2, 0.2)
    assert ch6_init._cdf_distance_to_uniform(normal, 0.2) > ch6_init.MAX_CDF_DISTANCE


U = "unsharded"


def _mlp_class(pop_from="front", layouts="alternate", activation="relu", hidden_parameter=True, bias="split",
               output="pair"):
    """An MLP(mesh, hidden_sizes) class a learner could write, as the exercise's BuggyMLP builds it; the defaults
    make a right one. pop_from: "front" or "back" (BuggyMLP's pop()); layouts: "alternate", "two" (BuggyMLP's
    layouts[len(self.layers)]), "columns" (every hidden layer by columns), "replicated"; activation: "relu" or None;
    bias: "split" (like the kernel's columns) or "replicated"; output: "pair" (row-parallel after an odd number of
    hidden layers, replicated after an even one), "replicated" (always, as BuggyMLP) or "rows" (always row-parallel)."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    class Dense(tf.Module):
        def __init__(self, fan_in, fan_out, seed, layout, activation=None):
            super().__init__()
            weight = tf.function(lambda: tf.random.stateless_normal([fan_in, fan_out], seed, stddev=0.05))
            self.w = dtensor.DVariable(dtensor.call_with_layout(weight, layout))
            bias_specs = [layout.sharding_specs[1]] if bias == "split" else [U]
            self.b = dtensor.DVariable(dtensor.call_with_layout(tf.zeros, dtensor.Layout(bias_specs, layout.mesh),
                                                                shape=[fan_out]))
            self.activation = activation

        def __call__(self, x):
            y = tf.matmul(x, self.w) + self.b
            return self.activation(y) if self.activation else y

    class MLP(tf.Module):
        def __init__(self, mesh, hidden_sizes=(300, 100), **kwargs):
            super().__init__()
            pattern = {"alternate": [[U, "model"], ["model", U]], "two": [[U, "model"], ["model", U]],
                       "columns": [[U, "model"]], "replicated": [[U, U]]}[layouts]
            sizes, self.layers, fan_in = list(hidden_sizes), [], 784
            while sizes:
                fan_out = sizes.pop(0) if pop_from == "front" else sizes.pop()
                index = len(self.layers)
                spec = pattern[index] if layouts == "two" else pattern[index % len(pattern)]
                self.layers.append(Dense(fan_in, fan_out, [1, index + 1], dtensor.Layout(spec, mesh),
                                         tf.nn.relu if activation else None))
                fan_in = fan_out
            odd = len(hidden_sizes) % 2 == 1
            out = ["model", U] if output == "rows" or output == "pair" and odd else [U, U]
            self.layers.append(Dense(fan_in, 10, [1, len(self.layers) + 1], dtensor.Layout(out, mesh)))

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    if not hidden_parameter:
        class WithoutParameter(MLP):
            def __init__(self, mesh):
                super().__init__(mesh)
        return WithoutParameter
    return MLP


def test_ch6_q2_hidden_sizes(mesh42):
    assert_correct(grade(6, "q2", _mlp_class()))
    result = grade(6, "q2", _mlp_class(pop_from="back"))
    assert_hint(result, "784 -> 100 -> 300 -> 10, not 784 -> 300 -> 100 -> 10", "the wrong order",
                "fix the shapes first", points=0)
    assert_hint(grade(6, "q2", _mlp_class(layouts="two")), "raised IndexError", "which layout should the third get",
                points=0)
    assert_hint(grade(6, "q2", _mlp_class(pop_from="back", layouts="two")), "784 -> 100 -> 300 -> 10",
                "raised IndexError", points=0)  # BuggyMLP itself: both bugs named
    assert_hint(grade(6, "q2", _mlp_class(layouts="columns")), "not every weight has the layout", points=2)
    assert_hint(grade(6, "q2", _mlp_class(layouts="replicated")), "[784, 300] is ['unsharded', 'unsharded']", points=2)
    assert_hint(grade(6, "q2", _mlp_class(bias="replicated")), "[300] is ['unsharded']", points=2)
    assert_hint(grade(6, "q2", _mlp_class(activation=None)), "the logits differ from one device's forward pass",
                "relu after every hidden layer", points=2)
    assert_hint(grade(6, "q2", _mlp_class(hidden_parameter=False)), "MLP(mesh, hidden_sizes=[...])", points=0)
    assert_hint(grade(6, "q2", _mlp_class()(mesh42)), "not an instance")


def test_ch6_q2_the_output_layer_completes_the_last_megatron_pair(mesh42):
    """Issue 37: fixing BuggyMLP's two bugs (pop(0), layouts[index % 2]) is not the whole answer: with three hidden
    layers the last is column-parallel, and a replicated output layer would gather its activations every step; the
    output layer completes the pair (row-parallel). A case the chapter did not show, with an aimed hint."""
    copied_fix = _mlp_class(output="replicated")
    result = grade(6, "q2", copied_fix)
    assert_hint(result, "for hidden sizes [48, 32, 16] (an odd number of hidden layers)", "column-parallel",
                "as the second layer of a Megatron pair", "['model', U]", points=2)
    first = exercises(6).q2._evaluate((copied_fix,), {}, first_try=True).message
    assert "['model', U]" not in first and "second layer of a Megatron pair" in first
    assert_hint(grade(6, "q2", _mlp_class(output="rows")), "for hidden sizes [300, 100] not every weight",
                "[100, 10] is ['model', 'unsharded']", points=2)


def test_ch6_q2_the_exercise_model_has_the_bugs_the_checker_names(mesh42):
    """BuggyMLP's bugs (pop() takes the last hidden size; two layouts for any number of hidden layers) are what the
    checker's messages describe, and the first wrong check does not say how to fix them."""
    buggy = _mlp_class(pop_from="back", layouts="two")
    first = exercises(6).q2._evaluate((buggy,), {}, first_try=True).message
    assert "784 -> 100 -> 300 -> 10" in first and "pop" not in first and "% 2" not in first, first
    shown = grade(6, "q2", buggy).message
    assert "pop(0)" in shown and "layouts[index % 2]" in shown


def test_ch6_q2_a_deeper_network_runs_on_the_mesh(mesh42):
    """The Megatron pattern for three hidden layers (columns, rows, columns) with a row-parallel output layer: DTensor
    runs the forward pass, and the checker's reference agrees with it (the right class scores 3 points for it)."""
    from course_utils.checkers import ch6

    data = exercises(6).q2.collect(_mlp_class())
    assert [case["kind"] for case in data["cases"]] == ["model"] * len(ch6.MLP_SIZES)
    assert [tuple(v["specs"]) for v in data["cases"][1]["variables"] if len(v["shape"]) == 2] == [
        (U, "model"), ("model", U), (U, "model"), ("model", U)]


def make_slots(variable):
    """Adam's two slots in the weight's layout (the chapter's zeros_like), for the optimizers of exercise 4's tests."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    layout = dtensor.fetch_layout(variable)
    return tuple(dtensor.DVariable(dtensor.call_with_layout(tf.zeros, layout, shape=variable.shape))
                 for _ in range(2))


def make_factored_slots(variable, row_spec=None, col_spec=None, shapes=None, wrap="dvariable"):
    """Adafactor's v_row and v_col a learner could make; the defaults make right ones. ``row_spec``/``col_spec``:
    "weight rows", "weight cols", "unsharded" or a mesh axis name; ``shapes``: the two shapes (default rows, cols)."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    layout = dtensor.fetch_layout(variable)
    rows, cols = layout.sharding_specs
    pick = {"weight rows": rows, "weight cols": cols, None: None}

    def slot(size, spec):
        zeros = dtensor.call_with_layout(tf.zeros, dtensor.Layout([spec], layout.mesh), shape=[size])
        return tf.Variable(zeros) if wrap == "tf.Variable" else zeros if wrap == "tensor" else dtensor.DVariable(zeros)

    row_spec = pick.get(row_spec, row_spec) or rows
    col_spec = pick.get(col_spec, col_spec) or cols
    if shapes == "weight":
        return tuple(dtensor.DVariable(dtensor.call_with_layout(tf.zeros, layout, shape=variable.shape))
                     for _ in range(2))
    return slot(variable.shape[0], row_spec), slot(variable.shape[1], col_spec)


def test_ch6_q3_factored_slots(mesh42):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    assert_correct(grade(6, "q3", make_factored_slots))
    for seed in (1, 2, 3, 4, 5):  # the weight's layout is drawn from the seed: every kind of split
        ex = exercises(6).q3
        assert_correct(ex.judge_export(ex.export(make_factored_slots, seed=seed), seed=seed))
    swapped = lambda v: make_factored_slots(v, row_spec="weight cols", col_spec="weight rows")
    result = grade(6, "q3", swapped)
    assert result.points < 2 and "split like the weight's" in result.message, result
    assert_hint(grade(6, "q3", lambda v: make_factored_slots(v, "unsharded", "unsharded")), "it is replicated",
                points=0)
    assert_hint(grade(6, "q3", lambda v: make_factored_slots(v, shapes="weight")), "Adam's v, not Adafactor's",
                points=0)
    assert_hint(grade(6, "q3", lambda v: make_factored_slots(v, wrap="tf.Variable")), "ordinary tf.Variable")
    assert_hint(grade(6, "q3", lambda v: make_factored_slots(v, wrap="tensor")), "not a variable")
    assert_hint(grade(6, "q3", lambda v: (lambda s: (s[0], s[0]))(make_factored_slots(v))), "the same object")
    ones = lambda v: (dtensor.DVariable(tf.ones_like(make_factored_slots(v)[0])), make_factored_slots(v)[1])
    assert_hint(grade(6, "q3", ones), "start at zero", points=1)
    assert_hint(grade(6, "q3", lambda v: make_factored_slots(v)[0]), "return a pair")
    host_zeros = lambda v: tuple(dtensor.DVariable(tf.zeros([n])) for n in v.shape)
    assert_hint(grade(6, "q3", host_zeros), "already a DTensor on the mesh", "call_with_layout")


def test_ch6_q3_the_right_layouts_need_nothing_from_other_devices(mesh42):
    """The question's claim, for every layout the checker draws: a row mean of the squared gradient, computed on the
    mesh from the weight's blocks, lands in v_row's layout (and a column mean in v_col's), with no relayout needed."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from course_utils.checkers import ch6

    for sharding in ch6.WEIGHT_LAYOUTS:
        weight, layout = ch6_answers._checker_weight((24, 24), sharding)
        g = weight.read_value()
        rows = tf.function(lambda x: tf.reduce_mean(x * x, axis=1))(g)
        cols = tf.function(lambda x: tf.reduce_mean(x * x, axis=0))(g)
        v_row, v_col = make_factored_slots(weight)
        assert dtensor.fetch_layout(rows).sharding_specs == dtensor.fetch_layout(v_row.read_value()).sharding_specs
        assert dtensor.fetch_layout(cols).sharding_specs == dtensor.fetch_layout(v_col.read_value()).sharding_specs


def _adam_classes():
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    class BuggyAdam(tf.Module):
        def __init__(self, params, learning_rate=0.001, warmup_steps=1000, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
            super().__init__()
            self.params = list(params)
            self.learning_rate, self.warmup_steps = learning_rate, warmup_steps
            self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
            self.step = 0
            self.m, self.v = zip(*[make_slots(p) for p in self.params])

        @tf.function
        def apply(self, gradients):
            self.step += 1
            self._update(gradients, self._alpha(self.step))

        def _alpha(self, t, warmup_t=None):
            """The step's size: the bias correction for t, the warm-up for warmup_t (t unless told)."""
            correction = tf.sqrt(1 - self.beta_2 ** t) / (1 - self.beta_1 ** t)
            return self.learning_rate * tf.minimum(1.0, (t if warmup_t is None else warmup_t) / self.warmup_steps) \
                * correction

        def _update(self, gradients, alpha):
            for p, g, m, v in zip(self.params, gradients, self.m, self.v):
                m.assign_add((g - m) * (1 - self.beta_1))
                v.assign_add((g * g - v) * (1 - self.beta_2))
                p.assign_sub(alpha * m / (tf.sqrt(v) + self.epsilon))

    class FixedAdam(BuggyAdam):
        def __init__(self, params, **kwargs):
            super().__init__(params, **kwargs)
            mesh = dtensor.fetch_layout(self.params[0]).mesh
            self.step = dtensor.DVariable(dtensor.call_with_layout(tf.zeros, dtensor.Layout.replicated(mesh, 0),
                                                                   shape=[]))

        @tf.function
        def apply(self, gradients):
            self.step.assign_add(1.0)
            t = self.step.read_value()
            self._update(gradients, self._alpha(t))

    class NoMomentum(FixedAdam):
        @tf.function
        def apply(self, gradients):
            self.step.assign_add(1.0)
            for m in self.m:
                m.assign(tf.zeros_like(m))
            t = self.step.read_value()
            self._update(gradients, self._alpha(t))

    class Sgd(FixedAdam):
        @tf.function
        def apply(self, gradients):
            for p, g in zip(self.params, gradients):
                p.assign_sub(self.learning_rate * g)

    class HostStep(FixedAdam):
        """The step in an ordinary tf.Variable: every device of the mesh increments it."""

        def __init__(self, params, **kwargs):
            super().__init__(params, **kwargs)
            self.step = tf.Variable(0.0)

    class EagerBuggyAdam(BuggyAdam):
        """The frozen Python counter, hidden by running apply eagerly."""

        def apply(self, gradients):
            self.step += 1
            self._update(gradients, self._alpha(self.step))

    return BuggyAdam, FixedAdam, NoMomentum, Sgd, HostStep, EagerBuggyAdam


def test_ch6_q4_adam_matches_keras_adam(keras2, mesh42):
    import tensorflow as tf

    # The checker's reference is Keras' Adam: compare with tf_keras on a plain variable.
    w0 = np.array([[0.5, -1.0], [2.0, 0.25]], dtype="float32")
    grads = [np.array([[0.1, -0.2], [0.3, 0.05]], dtype="float32") * k for k in (1, -2, 3)]
    variable = tf.Variable(w0)
    keras_adam = keras2.optimizers.Adam(learning_rate=0.1, epsilon=1e-7)
    for g in grads:
        keras_adam.apply_gradients([(tf.constant(g), variable)])
    assert np.allclose(variable.numpy(), ch6_adam.reference_adam(w0, grads, 0.1)[-1], rtol=1e-5)
    # and warmed up: Keras' schedules count steps from 0
    warmup = type("Warmup", (keras2.optimizers.schedules.LearningRateSchedule,), {
        "__call__": lambda self, step: 0.1 * tf.minimum(1.0, tf.cast(step + 1, tf.float32) / ch6_adam.ADAM_WARMUP)})
    variable = tf.Variable(w0)
    keras_adam = keras2.optimizers.Adam(learning_rate=warmup(), epsilon=1e-7)
    for g in grads:
        keras_adam.apply_gradients([(tf.constant(g), variable)])
    assert np.allclose(variable.numpy(), ch6_adam.reference_adam(w0, grads, 0.1, warmup_steps=ch6_adam.ADAM_WARMUP)[-1],
                       rtol=1e-5)
    assert not np.allclose(variable.numpy(), ch6_adam.reference_adam(w0, grads, 0.1)[-1], rtol=1e-3)

    BuggyAdam, FixedAdam, NoMomentum, Sgd, HostStep, EagerBuggyAdam = _adam_classes()
    assert_correct(grade(6, "q4", FixedAdam))
    assert_hint(grade(6, "q4", BuggyAdam), "uses t = 1 at every step", "assign_add")
    assert_hint(grade(6, "q4", NoMomentum), "steps 2 and 3 do not", points=1)
    assert_hint(grade(6, "q4", Sgd), "first step already differs")



def test_ch6_q4_the_chapters_own_adam_is_right(mesh42, keras2):
    """Issue 37: the chapter's Adam (its Algorithm 1, cell c29: epsilon added to sqrt(v_hat), which the chapter says
    matches Keras with adaptive_epsilon=True), read from the notebook, with the exercise's constructor: right.
    tf_keras' Adam with adaptive_epsilon=True is the reference of that form."""
    import nbformat
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from course_utils.tools.checkout import checkout_root

    nb = nbformat.read(checkout_root() / "notebooks" / "06_core_api_mlp_adam.ipynb", as_version=4)
    source = next(cell.source for cell in nb.cells if cell.get("id") == "c29").split("\n\ndef linear_decay")[0]

    def mesh_scalar(dtype, mesh=None):
        return dtensor.DVariable(dtensor.call_with_layout(tf.zeros, dtensor.Layout.replicated(mesh, rank=0),
                                                          shape=[], dtype=dtype))

    namespace = {"tf": tf, "dtensor": dtensor, "mesh_scalar": mesh_scalar}
    exec(source, namespace)

    class ChaptersAdam(namespace["Adam"]):  # its learning rate may be a function of the step t: the warm-up
        def __init__(self, params, learning_rate=0.001, warmup_steps=1000, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
            super().__init__(params, lambda t: learning_rate * tf.minimum(1.0, t / warmup_steps), beta_1, beta_2,
                             epsilon)

        @tf.function
        def apply(self, gradients):
            self.apply_gradients(gradients)

    result = grade(6, "q4", ChaptersAdam)
    assert_correct(result)
    assert "adaptive_epsilon=True" in result.message

    class CopiedAsItIs(namespace["Adam"]):
        """Issue 37, copy and change: the chapter's Adam renamed, its step right, the exercise's warm-up left out."""

        def __init__(self, params, learning_rate=0.001, warmup_steps=1000, **kwargs):
            super().__init__(params, learning_rate, **kwargs)

        @tf.function
        def apply(self, gradients):
            self.apply_gradients(gradients)

    assert_hint(grade(6, "q4", CopiedAsItIs), "Adam's without the warm-up", "fix only what freezes")

    w0 = np.array([[0.5, -1.0], [2.0, 0.25]], dtype="float32")
    grads = [np.array([[0.1, -0.2], [0.3, 1e-7]], dtype="float32") * k for k in (1, -2, 3)]
    variable = tf.Variable(w0)
    keras_adam = keras2.optimizers.Adam(learning_rate=0.1, epsilon=1e-7, adaptive_epsilon=True)
    for g in grads:
        keras_adam.apply_gradients([(tf.constant(g), variable)])
    assert np.allclose(variable.numpy(), ch6_adam.reference_adam(w0, grads, 0.1, algorithm_1=True)[-1], rtol=1e-5)
    assert not np.allclose(variable.numpy(), ch6_adam.reference_adam(w0, grads, 0.1)[-1], rtol=1e-6, atol=1e-7)


def test_ch6_q4_a_warm_up_that_still_reads_the_python_counter_is_named(mesh42):
    """The bias correction fixed, the warm-up left on BuggyAdam's Python counter (frozen at 1): its own hint."""
    import tensorflow as tf

    _, FixedAdam, *_ = _adam_classes()

    class HalfFixed(FixedAdam):
        def __init__(self, params, **kwargs):
            super().__init__(params, **kwargs)
            self.python_step = 0

        @tf.function
        def apply(self, gradients):
            self.step.assign_add(1.0)
            self.python_step += 1
            self._update(gradients, self._alpha(self.step.read_value(), warmup_t=self.python_step))

    result = grade(6, "q4", HalfFixed)
    assert_hint(result, "your warm-up stays at t = 1", "tf.minimum")
    assert "tf.minimum" not in exercises(6).q4._evaluate((HalfFixed,), {}, first_try=True).message


def test_ch6_q4_float32_rounding_of_the_bias_correction_is_within_the_bound(mesh42):
    """Seeds 9 and 10 put a weight near zero after the steps, where the float32 solution is furthest from the
    float64 reference (about 1e-6): within the bound derived in ch6_adam, not by a widened tolerance."""
    _, FixedAdam, *_ = _adam_classes()
    ex = exercises(6).q4
    for seed in (9, 10):
        data = ex.collect(FixedAdam, seed=seed)
        w0, grads = ch6_adam._adam_case(seed)
        reference = ch6_adam.reference_adam(w0, grads, 0.1, warmup_steps=ch6_adam.ADAM_WARMUP)
        furthest = max(np.max(np.abs(np.asarray(h) - r) - 1e-4 * np.abs(r)) for h, r in zip(data["history"], reference))
        assert furthest < ch6_adam.ADAM_ATOL < 1e-5
        assert_correct(ex.judge_export(ex.export(FixedAdam, seed=seed), seed=seed))


def test_ch6_q4_rejects_a_step_in_an_ordinary_variable_and_an_eager_python_counter(mesh42):
    *_, HostStep, EagerBuggyAdam = _adam_classes()
    result = grade(6, "q4", HostStep)
    assert_hint(result, "ordinary tf.Variable", "after 3 calls it holds", "8 devices")
    held = float(result.message.split("it holds ")[1].split(",")[0])
    assert 3 < held <= 8 * 3  # each of the 8 devices adds at most 1 per call
    assert_hint(grade(6, "q4", EagerBuggyAdam), "uses t = 1 at every step", "Removing @tf.function")

    graded = exercises(6, mode="graded").q4
    for answer in (HostStep, EagerBuggyAdam):
        hidden, shown = graded.evaluate(answer).message, grade(6, "q4", answer).message
        assert "mesh_scalar" not in hidden and "assign_add" not in hidden, hidden
        assert "mesh_scalar" in shown


def _counter_variants():
    """FixedAdam with the typical mistakes of a step counter that is a DVariable but never advances, or advances late,
    or is an integer."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    _, FixedAdam, *_ = _adam_classes()

    class PlusOne(FixedAdam):  # t = step + 1: a new tensor, the variable stays 0
        @tf.function
        def apply(self, gradients):
            t = self.step + 1.0
            self._update(gradients, self._alpha(t))

    class NeverIncremented(FixedAdam):  # t = step, always 0
        @tf.function
        def apply(self, gradients):
            t = self.step.read_value()
            self._update(gradients, self._alpha(t))

    class IncrementedAfterUse(FixedAdam):
        @tf.function
        def apply(self, gradients):
            t = self.step.read_value()
            self._update(gradients, self._alpha(t))
            self.step.assign_add(1.0)

    class IntegerStep(FixedAdam):
        def __init__(self, params, **kwargs):
            super().__init__(params, **kwargs)
            mesh = dtensor.fetch_layout(self.params[0]).mesh
            self.step = dtensor.DVariable(dtensor.call_with_layout(tf.zeros, dtensor.Layout.replicated(mesh, 0),
                                                                   shape=[], dtype=tf.int64))

        @tf.function
        def apply(self, gradients):
            self.step.assign_add(1)
            t = self.step.read_value()
            self._update(gradients, self._alpha(t))

    return PlusOne, NeverIncremented, IncrementedAfterUse, IntegerStep


def test_ch6_q4_a_step_variable_that_never_advances_gets_its_own_hint(mesh42):
    PlusOne, NeverIncremented, IncrementedAfterUse, IntegerStep = _counter_variants()
    result = grade(6, "q4", PlusOne)
    assert_hint(result, "uses t = 1 at every step", "still holds 0 after 3 calls", "does not change the variable")
    assert "TRACED" not in result.message  # not the Python counter's diagnosis
    assert_hint(grade(6, "q4", NeverIncremented), "NaN at the first step", "still holds 0 after 3 calls")
    assert_hint(grade(6, "q4", IncrementedAfterUse), "NaN at the first step", "BEFORE the correction reads it")
    assert_hint(grade(6, "q4", IntegerStep), "t as a float")
    for answer in (PlusOne, NeverIncremented, IncrementedAfterUse, IntegerStep):
        first = exercises(6).q4._evaluate((answer,), {}, first_try=True).message
        assert "assign_add(1.0)" not in first and "tf.cast" not in first, first


def test_ch6_host_counters_finds_scalar_variables_off_the_mesh(mesh42):
    import tensorflow as tf

    class PlainOptimizer:  # not a tf.Module: its attributes are read directly
        def __init__(self):
            self.step, self.weight, self.rate = tf.Variable(0.0), tf.Variable([1.0, 2.0]), 0.1

    found = ch6_adam._host_counters(PlainOptimizer())
    assert len(found) == 1 and found[0].shape.rank == 0
    _, FixedAdam, _, _, HostStep, _ = _adam_classes()
    weight, _ = ch6_answers._checker_weight()
    assert ch6_adam._host_counters(FixedAdam([weight])) == []
    assert len(ch6_adam._host_counters(HostStep([weight]))) == 1


def _sgd_step(bias_gradient, bias_scale=1.0):
    """A step like the exercise's, whose b2 gradient comes from ``bias_gradient(d_logits)``."""
    import tensorflow as tf

    @tf.custom_gradient
    def output_layer(hidden, w, b):
        def backward(d_logits):
            return d_logits @ tf.transpose(w), tf.transpose(hidden) @ d_logits, bias_gradient(d_logits)
        return hidden @ w + b, backward

    @tf.function
    def step(params, images, labels):
        with tf.GradientTape() as tape:
            hidden = tf.nn.relu(images @ params["w1"] + params["b1"])
            logits = output_layer(hidden, params["w2"], params["b2"])
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        gradients = tape.gradient(loss, params)
        for name, variable in params.items():
            scale = bias_scale if name == "b2" else 1.0
            variable.assign_sub(0.1 * scale * gradients[name])
    return step


def _reference(uses_output_layer=False, sign=-1.0, rate=0.1):
    import tensorflow as tf
    from course_utils.step_check import value_of

    broken = _sgd_step(lambda d: tf.reduce_mean(d, axis=0))

    def reference(values, images, labels):
        images, labels = value_of(images), value_of(labels)
        weights = {name: tf.Variable(value) for name, value in values.items()}
        with tf.GradientTape() as tape:
            hidden = tf.nn.relu(images @ weights["w1"] + weights["b1"])
            if uses_output_layer:  # the step's own backward, bug included
                changed = {n: tf.Variable(v) for n, v in values.items()}
                return {n: v.numpy() - values[n] for n, v in _apply(broken, changed, images, labels).items()}
            logits = hidden @ weights["w2"] + weights["b2"]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        gradients = tape.gradient(loss, weights)
        return {name: sign * rate * gradients[name].numpy() for name in values}
    return reference


def _apply(step, variables, images, labels):
    step(variables, images, labels)
    return variables


def test_ch6_q5_broken_variable(mesh42):
    import tensorflow as tf

    right_step = _sgd_step(lambda d: tf.reduce_sum(d, axis=0))
    broken_step = _sgd_step(lambda d: tf.reduce_mean(d, axis=0))
    assert_correct(grade(6, "q5", _reference(), "b2", right_step))
    for name in ("B2", " 'b2' ", "params['b2']", ["b2"], {"b2"}, ("b2",)):  # every way of naming it
        assert_correct(grade(6, "q5", _reference(), name, right_step))
    assert_hint(grade(6, "q5", _reference(uses_output_layer=True), "b2", right_step),
                "shares broken_step's bug", "It agrees on b2", points=2)
    assert_hint(grade(6, "q5", _reference(sign=1.0), "b2", right_step), "against its gradient", points=2)
    assert_hint(grade(6, "q5", _reference(sign=1.0, rate=1.0), "b2", right_step), "returns the gradients", points=2)
    assert_hint(grade(6, "q5", lambda values, images, labels: 1 / 0, "b2", right_step),
                "my_reference raised ZeroDivisionError", "value_of(images)", points=2)
    assert_hint(grade(6, "q5", _reference(), "w2", right_step), "'w2' changes as a right SGD step", points=3)
    assert_hint(grade(6, "q5", _reference(), ["b2", "w2"], right_step), "one variable is wrong", points=3)
    assert_hint(grade(6, "q5", _reference(), "b2", broken_step), "still makes broken_step's mistake", points=3)
    scaled_by_32 = _sgd_step(lambda d: tf.reduce_mean(d, axis=0), bias_scale=32.0)  # the notebook's batch size
    assert_hint(grade(6, "q5", _reference(), "b2", scaled_by_32), "one batch size only", "reduce_sum", points=3)
    assert_hint(grade(6, "q5", _reference(), "b2", lambda params, images, labels: params.clear()),
                "fixed_step raised", points=3)
    unanswered = grade(6, "q5", None, None, None)
    assert unanswered.status == "unanswered" and unanswered.points == 0


def test_ch6_q5_readable_names_of_the_broken_variable(mesh42):
    import tensorflow as tf

    right_step = _sgd_step(lambda d: tf.reduce_sum(d, axis=0))
    for name in ("b2 (the output bias)", "b2:0", "the output layer's bias", "Output bias", "variable b2",
                 np.str_("b2"), ["b2 (output bias)"]):
        assert_correct(grade(6, "q5", _reference(), name, right_step))
    assert_hint(grade(6, "q5", _reference(), "the hidden bias", right_step), "'b1' changes as a right SGD step",
                points=3)
    assert_hint(grade(6, "q5", _reference(), "the bias", right_step), "names none of the variables", points=3)


def test_ch6_q5_fixed_step_feedback_does_not_name_the_variable_while_broken_variable_is_wrong(mesh42):
    import tensorflow as tf

    broken_step = _sgd_step(lambda d: tf.reduce_mean(d, axis=0))
    halved_b2 = _sgd_step(lambda d: tf.reduce_sum(d, axis=0), bias_scale=0.5)  # another b2 mistake than the bug's
    ex = exercises(6).q5
    for fixed in (broken_step, halved_b2):
        first = ex._evaluate((_reference(), "w2", fixed), {}, first_try=True).message
        assert "b2" not in first, first
    assert_hint(grade(6, "q5", _reference(), "b2", halved_b2), "fixed_step: b2 does not change", points=3)
    assert_hint(grade(6, "q5", _reference(), "w2", halved_b2), "1 variable does not change", "They are b2", points=2)


def test_ch6_q5_more_right_forms(mesh42):
    import tensorflow as tf

    from course_utils.checkers.ch6_broken import _reference_sgd_change as _sgd_change
    from course_utils.step_check import value_of

    def numpy_reference(values, images, labels):  # the whole reference in NumPy
        return _sgd_change(values, value_of(images), value_of(labels))

    def keras_loss_reference(values, images, labels):
        weights = {n: tf.Variable(v) for n, v in values.items()}
        with tf.GradientTape() as tape:
            logits = tf.nn.relu(value_of(images) @ weights["w1"] + weights["b1"]) @ weights["w2"] + weights["b2"]
            loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)(value_of(labels), logits)
        return {n: -0.1 * g for n, g in tape.gradient(loss, weights).items()}  # tensors, not NumPy: also fine

    mean_times_size = _sgd_step(lambda d: tf.reduce_mean(d, axis=0) * tf.cast(tf.shape(d)[0], d.dtype))
    ones_product = _sgd_step(lambda d: tf.reshape(tf.ones([1, tf.shape(d)[0]], d.dtype) @ d, [-1]))
    for reference in (numpy_reference, keras_loss_reference):
        for fixed in (mean_times_size, ones_product):
            assert_correct(grade(6, "q5", reference, "b2", fixed))


def test_ch6_q5_more_wrong_forms(mesh42):
    import tensorflow as tf

    from course_utils.checkers.ch6_broken import _reference_sgd_change as _sgd_change
    from course_utils.step_check import value_of

    right_step = _sgd_step(lambda d: tf.reduce_sum(d, axis=0))
    new_values = lambda values, images, labels: {n: values[n] + c for n, c in
                                                 _sgd_change(values, value_of(images), value_of(labels)).items()}
    assert_hint(grade(6, "q5", new_values, "b2", right_step), "returns the new values", points=2)
    summed = lambda values, images, labels: {n: 16 * c for n, c in
                                             _sgd_change(values, value_of(images), value_of(labels)).items()}
    assert_hint(grade(6, "q5", summed, "b2", right_step), "all 16 x the right ones", "summed over the batch", points=2)
    fixed_32 = lambda values, images, labels: {n: c * 16 / 32 for n, c in
                                               _sgd_change(values, value_of(images), value_of(labels)).items()}
    assert_hint(grade(6, "q5", fixed_32, "b2", right_step), "all 0.5 x the right ones", "fixed batch size", points=2)
    wrong_ref = grade(6, "q5", summed, "w1", right_step)
    assert_hint(wrong_ref, "cannot be trusted", points=1)
    assert_hint(grade(6, "q5", _reference(), tf.Variable([1.0]), right_step), "give the variable's NAME", points=3)
    broken_step = _sgd_step(lambda d: tf.reduce_mean(d, axis=0))
    runs_the_step = lambda values, images, labels: broken_step.python_function(
        {n: tf.Variable(v) for n, v in values.items()}, images, labels)
    assert_hint(grade(6, "q5", runs_the_step, "b2", right_step), "an error of DTensor's", points=2)
    assert_hint(grade(6, "q5", _reference(), "b2", right_step.python_function), "Make it a tf.function", points=3)


def test_ch6_q5_graded_feedback_keeps_the_fix_back(mesh42):
    import tensorflow as tf

    scaled_by_32 = _sgd_step(lambda d: tf.reduce_mean(d, axis=0), bias_scale=32.0)
    ex = exercises(6).q5  # what the grader judges: the data collected from the answers (grade is gone)
    data = loads(ex.export(_reference(uses_output_layer=True), "b2", scaled_by_32, seed=0))["data"]
    feedback = ex.judge(data, seed=0)
    assert "reduce_sum" in feedback.render() and "GradientTape" in feedback.render()
    assert "reduce_sum" not in feedback.render(graded=True) and "GradientTape" not in feedback.render(graded=True)
    assert "b2" not in feedback.render(graded=True).split("broken_variable")[0]  # the reference's line names no variable


def _solution_answers(name, mesh):
    """The right answers of exercise ``name``, as the tests above give them."""
    import tensorflow as tf

    return {"q1": lambda: (xavier_limit, init_weight),
            "q2": lambda: (_mlp_class(),),
            "q3": lambda: (make_factored_slots,),
            "q4": lambda: (_adam_classes()[1],),
            "q5": lambda: (_reference(), "b2", _sgd_step(lambda d: tf.reduce_sum(d, axis=0)))}[name]()


@pytest.mark.parametrize("name", ["q1", "q2", "q3", "q4", "q5"])
def test_ch6_solutions_are_right_for_another_seed(name, mesh42):
    ex = getattr(exercises(6), name)
    assert_correct(ex.judge_export(ex.export(*_solution_answers(name, mesh42), seed=12345), seed=12345))


@pytest.mark.parametrize("name", ["q1", "q2", "q3", "q4", "q5"])
def test_ch6_data_collected_for_another_seed_does_not_score_full_marks(name, mesh42):
    ex = getattr(exercises(6), name)
    result = ex.judge_export(ex.export(*_solution_answers(name, mesh42), seed=0), seed=12345)
    assert result.points < result.max_points, str(result)


@pytest.mark.parametrize("name", ["q1", "q2", "q3", "q4", "q5"])
def test_ch6_the_stripped_copy_collects_what_the_real_judge_accepts(name, mesh42):
    import sys

    adam, _ = sandbox_copy("ch6_adam")
    broken, _ = sandbox_copy("ch6_broken")
    assert "reference_adam" not in vars(adam) and "_reference_sgd_change" not in vars(broken)
    with pytest.MonkeyPatch.context() as patch:  # the stripped ch6 imports the stripped ch6_adam and ch6_broken,
        patch.setitem(sys.modules, adam.__name__, adam)  # as in a sandbox
        patch.setitem(sys.modules, broken.__name__, broken)
        module = {"q1": "ch6_init", "q4": "ch6_adam", "q5": "ch6_broken"}.get(name, "ch6")  # where each checker is
        exercise = stripped_exercise(module, ch6.CHAPTER.exercises[int(name[1:]) - 1].__name__, 6, name)
    cls = type(exercise)
    assert "judge" not in vars(cls) and "collect" in vars(cls)
    text = exercise.export(*_solution_answers(name, mesh42), seed=7)
    assert_correct(getattr(exercises(6), name).judge_export(text, seed=7))


# --- the graded sandbox's copy of this module states no answer ------------------------------------

@pytest.mark.parametrize("name", ["ch6", "ch6_init", "ch6_answers", "ch6_adam", "ch6_broken"])
def test_ch6_the_sandbox_copy_states_no_answer(name):
    module, undefined = sandbox_copy(name)
    assert not undefined
    assert not [key for key in vars(module) if key.startswith(("reference", "_reference", "_judge", "_grade"))]
    for answer in ("b2", ["b2"], [(784, 300), (300, 100), (100, 10)]):
        assert not holding(module, answer), answer
    for cls in [value for value in vars(module).values() if isinstance(value, type)]:
        if cls.__module__ == module.__name__ and issubclass(cls, module.Exercise):
            assert not {"grade", "judge"} & set(vars(cls)) and "collect" in vars(cls) and cls.hints, cls.__name__
