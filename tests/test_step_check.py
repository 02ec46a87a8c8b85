import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from lazy import UNSHARDED, lazy

tf = lazy("tensorflow")
dtensor = lazy("tensorflow.experimental.dtensor")
make_mesh = lazy("course_utils.make_mesh")
pack_batch = lazy("course_utils.pack_batch")
_blocks = lazy("course_utils.step_check._blocks")
_judge = lazy("course_utils.step_check._judge")
check_step = lazy("course_utils.step_check.check_step")
value_of = lazy("course_utils.step_check.value_of")

U = UNSHARDED


def sgd_step(w, b, lr=0.1, scale_b=1.0):
    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(x @ w + b - y))
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(lr * gw)
        b.assign_sub(lr * scale_b * gb)
    return step


def data():
    rng = np.random.default_rng(0)
    return tf.constant(rng.normal(size=(8, 4)), tf.float32), tf.constant(rng.normal(size=(8, 3)), tf.float32)


def fresh_variables():
    return tf.Variable(tf.ones([4, 3]) * 0.1, name="w"), tf.Variable(tf.zeros([3]), name="b")


def test_a_right_step_passes_and_its_changes_stay():
    w, b = fresh_variables()
    start = w.numpy().copy()
    result = check_step(sgd_step(w, b), [w, b], *data())
    assert result.ok and result.wrong == [] and "Every variable changed" in str(result)
    assert result["w:0"].largest_change > 1e-3 and result["w:0"].largest_error < 1e-6
    assert not np.allclose(w.numpy(), start)  # one step was taken
    np.testing.assert_allclose(w.numpy() - start, -0.1 * _numpy_gradient(start, *data())[0], atol=1e-6)


def _numpy_gradient(w, x, y, b=np.zeros(3)):
    x, y = x.numpy(), y.numpy()
    residual = 2 * (x @ w + b - y) / y.size
    return x.T @ residual, residual.sum(axis=0)


def numpy_sgd(values, x, y):
    gw, gb = _numpy_gradient(values["w"], x, y, values["b"])
    return {"w": -0.1 * gw, "b": -0.1 * gb}


def test_a_wrong_variable_is_named():
    from course_utils.step_check import WHY_WRONG

    w, b = fresh_variables()
    result = check_step(sgd_step(w, b, scale_b=0.5), {"w": w, "b": b}, *data(), reference=numpy_sgd)
    assert not result.ok and result.wrong == ["b"]
    assert "WRONG" in str(result) and "Wrong: b." in str(result) and WHY_WRONG in str(result)
    with pytest.raises(AssertionError, match="Wrong: b"):
        result.assert_ok()


def test_a_reference_function_gets_the_starting_values():
    w, b = fresh_variables()
    x, y = data()
    assert check_step(sgd_step(w, b), {"w": w, "b": b}, x, y, reference=numpy_sgd).ok
    assert check_step(sgd_step(w, b, scale_b=2.0), {"w": w, "b": b}, x, y, reference=numpy_sgd).wrong == ["b"]


def test_sharded_dvariables_on_a_mesh(cpus8):
    mesh = make_mesh([("batch", 4), ("model", 2)])
    kernel = dtensor.DVariable(pack_batch(np.arange(16, dtype=np.float32).reshape(4, 4), dtensor.Layout([U, "model"], mesh)))
    np.testing.assert_array_equal(value_of(kernel), np.arange(16).reshape(4, 4))
    x = pack_batch(tf.ones([8, 4]), dtensor.Layout(["batch", U], mesh))

    @tf.function
    def step(x):
        kernel.assign_sub(0.01 * tf.matmul(tf.transpose(x), x @ kernel))

    result = check_step(step, {"kernel": kernel}, x)
    assert result.ok and result["kernel"].largest_change > 0, str(result)


def test_replicas_that_disagree_are_caught(cpus8):
    mesh = make_mesh([("batch", 2)], devices=["CPU:0", "CPU:1"])
    # A DVariable made from such blocks takes the first device's; a bug in a step could leave them so.
    split_brain = dtensor.pack([tf.zeros([2]), tf.ones([2])], dtensor.Layout.replicated(mesh, 1))
    value, disagree = _blocks(split_brain)
    assert disagree == 1.0 and value.tolist() == [0, 0]
    assert check_step(lambda: None, {"v": dtensor.DVariable(split_brain)}, reference=lambda values: {"v": np.zeros(2)}).ok
    assert _judge("v", np.zeros(2), np.zeros(2), disagree, 1e-3, np.asarray(1e-7)).ok is False


@pytest.mark.parametrize("variables, error, message", [  # each made by the test (collecting starts no TensorFlow)
    (lambda: [], ValueError, "No variables to check"),
    (lambda: {"w": tf.ones([2])}, TypeError, "not a tf.Variable. Pass the variables themselves"),
    (lambda: [tf.Variable(1.0, name="same"), tf.Variable(2.0, name="same")], ValueError,
     "Two of the variables are named 'same:0'"),
])
def test_bad_variables_are_explained(variables, error, message):
    with pytest.raises(error, match=message):
        check_step(lambda: None, variables())


def test_bad_references_are_explained():
    w, b = fresh_variables()
    step, named = sgd_step(w, b), {"w": w, "b": b}
    with pytest.raises(TypeError, match="reference must be 'eager' or a function"):
        check_step(step, named, *data(), reference="numpy")
    with pytest.raises(TypeError, match="must return a dict"):
        check_step(step, named, *data(), reference=lambda values, x, y: [0, 0])
    with pytest.raises(ValueError, match=r"no change given for \['b'\], and a change given for unknown names \['bias'\]"):
        check_step(step, named, *data(), reference=lambda values, x, y: {"w": 0 * values["w"], "bias": 0})
    with pytest.raises(ValueError, match=r"change of 'b' has shape \(2,\), but the variable has shape \(3,\)"):
        check_step(step, named, *data(), reference=lambda values, x, y: {"w": 0 * values["w"], "b": np.zeros(2)})
    with pytest.raises(TypeError, match="takes a tf.Variable or a tensor, not a ndarray"):
        value_of(np.ones(2))


def test_value_of_a_sharded_dtensor_and_a_plain_tensor(cpus8):
    mesh = make_mesh([("batch", 4), ("model", 2)])
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(value_of(pack_batch(x, dtensor.Layout(["batch", "model"], mesh))), x)
    np.testing.assert_array_equal(value_of(tf.constant(x)), x)


def test_a_step_that_dtensor_cannot_run_eagerly_asks_for_a_reference(cpus8):
    mesh = make_mesh([("batch", 4), ("model", 2)])
    w = dtensor.DVariable(pack_batch(np.ones((4, 3), np.float32), dtensor.Layout([U, U], mesh)))
    x = pack_batch(np.ones((8, 4), np.float32), dtensor.Layout(["batch", U], mesh))
    labels = pack_batch(np.zeros(8, np.int64), dtensor.Layout(["batch"], mesh))

    @tf.function
    def step(x, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x @ w))
        w.assign_sub(0.1 * tape.gradient(loss, w))

    with pytest.raises(RuntimeError, match="failed when run eagerly.*give a reference function instead"):
        check_step(step, {"w": w}, x, labels)
    assert not np.allclose(value_of(w), 1.0)  # the step under test ran, and its change stays


KERAS_STEP = textwrap.dedent('''
    import json, os
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import numpy as np, tensorflow as tf
    from tensorflow.experimental import dtensor
    import course_utils as cu
    from course_utils.step_check import check_step
    cu.configure_virtual_cpus(2)
    mesh = cu.make_mesh([("batch", 2)])
    tf.keras.utils.set_random_seed(0)
    layer = tf.keras.layers.Dense(3, kernel_layout=dtensor.Layout.replicated(mesh, 2),
                                  bias_layout=dtensor.Layout.replicated(mesh, 1))
    layer.build((None, 4))
    sgd = tf.keras.dtensor.experimental.optimizers.SGD(0.1, mesh=mesh)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, layer(x))
        sgd.apply_gradients(zip(tape.gradient(loss, layer.trainable_variables), layer.trainable_variables))
        return loss

    rng = np.random.default_rng(0)
    wrong = []
    for _ in range(2):
        x = cu.pack_batch(rng.normal(size=(8, 4)).astype("float32"), dtensor.Layout.batch_sharded(mesh, "batch", 2))
        y = cu.pack_batch(rng.integers(0, 3, size=8), dtensor.Layout.batch_sharded(mesh, "batch", 1))
        wrong.append(check_step(step, {"kernel": layer.kernel, "bias": layer.bias}, x, y).wrong)
    print(json.dumps(wrong))
''')


@pytest.mark.parametrize("combining, wrong", [("0", [[], []]), ("1", [["kernel", "bias"], ["kernel", "bias"]])])
def test_dtensor_combining_bug_is_caught_and_the_reference_cannot_hide_it(combining, wrong):
    env = dict(os.environ, DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION=combining, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", KERAS_STEP], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == wrong


def test_a_small_change_that_never_happens_is_wrong():
    # Adam's v moves by about 1e-6 in a step: an absolute tolerance of 1e-5 alone would call "no change" right.
    v = tf.Variable(tf.zeros([3]), name="v")
    result = check_step(tf.function(lambda: v.assign_add(tf.zeros([3]))), [v],
                        reference=lambda values: {"v:0": np.full(3, 2.5e-6)})
    assert result.wrong == ["v:0"] and result["v:0"].largest_error == pytest.approx(2.5e-6)


def test_judged_again_with_a_tolerance_per_variable_or_per_element():
    w, b = fresh_variables()
    result = check_step(sgd_step(w, b, scale_b=1.01), {"w": w, "b": b}, *data(), reference=numpy_sgd)
    assert result.wrong == ["b"]
    bound = result["b"].largest_error
    assert result.judged(atol={"b": bound}).ok and result.judged(atol={"b": np.full(3, bound)}).ok
    assert result.judged(rtol=2e-2).ok and not result.judged(atol={"b": np.full(3, bound / 10)}).ok
    with pytest.raises(ValueError, match=r"The atol of 'b' has shape \(2,\), the variable \(3,\)"):
        result.judged(atol={"b": np.zeros(2)})
    with pytest.raises(ValueError, match=r"atol names \['bias'\], which were not checked"):
        result.judged(atol={"bias": 1.0})


def test_a_plain_function_dtensor_cannot_run_eagerly_is_told_to_use_tf_function(cpus8):
    mesh = make_mesh([("batch", 4), ("model", 2)])
    w = dtensor.DVariable(pack_batch(np.ones((4, 3), np.float32), dtensor.Layout([U, U], mesh)))
    x = pack_batch(np.ones((8, 4), np.float32), dtensor.Layout(["batch", U], mesh))
    labels = pack_batch(np.zeros(8, np.int64), dtensor.Layout(["batch"], mesh))

    def step(x, labels):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=x @ w))
        w.assign_sub(0.1 * tape.gradient(loss, w))

    with pytest.raises(RuntimeError, match="decorate the step with @tf.function"):
        check_step(step, {"w": w}, x, labels)


def test_a_mesh_of_several_processes_is_refused(cpus8, monkeypatch):
    mesh = dtensor.Mesh(["batch"], global_device_ids=np.arange(4), local_device_ids=[0, 1],
                        local_devices=["/job:localhost/replica:0/task:0/device:CPU:0",
                                       "/job:localhost/replica:0/task:0/device:CPU:1"])
    from tensorflow.experimental import dtensor as real_dtensor  # the module itself: the lazy name's undo deletes

    monkeypatch.setattr(real_dtensor, "fetch_layout", lambda tensor: dtensor.Layout(["batch"], mesh))
    with pytest.raises(ValueError, match="holds 2 of the mesh's 4 devices: the other blocks live in other clients"):
        _blocks(tf.zeros([4]))
