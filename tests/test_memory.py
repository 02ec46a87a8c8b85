import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from course_utils import bytes_per_device
from lazy import UNSHARDED, lazy

tf = lazy("tensorflow")
dtensor = lazy("tensorflow.experimental.dtensor")
make_mesh = lazy("course_utils.make_mesh")
pack_batch = lazy("course_utils.pack_batch")

U = UNSHARDED
CPUS = [f"CPU:{i}" for i in range(8)]


@pytest.fixture(scope="module")
def mesh2d(cpus8):
    return make_mesh([("batch", 4), ("model", 2)])


@pytest.mark.parametrize("specs, per_device", [
    ([U, U], 8 * 6 * 4),                  # replicated: every device holds it all
    (["batch", U], 2 * 6 * 4),
    ([U, "model"], 8 * 3 * 4),
    (["batch", "model"], 2 * 3 * 4),
])
def test_dtensor_layouts(mesh2d, specs, per_device):
    held = bytes_per_device(pack_batch(tf.zeros([8, 6]), dtensor.Layout(specs, mesh2d)))
    assert held == dict.fromkeys(CPUS, per_device) and list(held) == CPUS


def test_dvariables_lists_and_dicts_add_up(mesh2d):
    kernel = dtensor.DVariable(pack_batch(tf.zeros([8, 6]), dtensor.Layout([U, "model"], mesh2d)))
    step = dtensor.DVariable(dtensor.copy_to_mesh(tf.constant(0, tf.int64), dtensor.Layout.replicated(mesh2d, 0)))
    assert bytes_per_device(kernel) == dict.fromkeys(CPUS, 96)
    assert bytes_per_device([kernel, step]) == bytes_per_device({"kernel": kernel, "step": step}) == dict.fromkeys(CPUS, 104)


def test_a_module_counts_its_variables(mesh2d):
    layer = tf.Module()
    layer.w = dtensor.DVariable(pack_batch(tf.zeros([8, 6]), dtensor.Layout(["batch", U], mesh2d)))
    assert bytes_per_device(layer) == dict.fromkeys(CPUS, 48)


def test_plain_tensor_is_refused_with_advice():
    with pytest.raises(TypeError, match="plain tf.Tensor of shape \\[3\\].*pack_batch"):
        bytes_per_device(tf.ones([3]))


def test_other_objects_are_refused():
    with pytest.raises(TypeError, match="got str"):
        bytes_per_device("weights")


def test_nothing_to_measure():
    with pytest.raises(ValueError, match="found no array"):
        bytes_per_device([])


def test_two_meshes_are_named(mesh2d):
    flat = make_mesh([("batch", 8)])
    with pytest.raises(ValueError, match="DTensor mesh batch=4 x model=2 over CPU:0.*and on the DTensor mesh batch=8"):
        bytes_per_device([pack_batch(tf.zeros([8]), dtensor.Layout(["batch"], mesh2d)),
                          pack_batch(tf.zeros([8]), dtensor.Layout(["batch"], flat))])


# tf_keras is selected before TensorFlow's first import, and this process already runs Keras 3:
# the tf_keras model and its DTensor Adam are measured in a child process.
TF_KERAS_CHILD = textwrap.dedent("""
    import json, os
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    from tensorflow.experimental import dtensor
    from course_utils import bytes_per_device, configure_virtual_cpus, make_mesh

    configure_virtual_cpus(8)
    mesh = make_mesh([("batch", 4), ("model", 2)])
    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential([tf.keras.Input([6]), tf.keras.layers.Dense(
        8, kernel_layout=dtensor.Layout(["unsharded", "model"], mesh), bias_layout=dtensor.Layout(["model"], mesh))])
    adam = tf.keras.dtensor.experimental.optimizers.Adam(0.01, mesh=mesh)
    adam.build(model.trainable_variables)
    print(json.dumps({"model": bytes_per_device(model), "adam": bytes_per_device(adam),
                      "keras": tf.keras.__name__}))
""")


def test_tf_keras_model_and_dtensor_adam():
    child = subprocess.run([sys.executable, "-c", TF_KERAS_CHILD], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert child.returncode == 0, child.stderr[-2000:]
    held = json.loads(child.stdout.strip().splitlines()[-1])
    assert held["keras"].startswith("tf_keras")
    kernel, bias = 6 * 4 * 4, 4 * 4  # (6, 8) split over model=2 on its columns, 8 biases split the same way
    assert held["model"] == dict.fromkeys(CPUS, kernel + bias)
    assert held["adam"] == dict.fromkeys(CPUS, 2 * (kernel + bias) + 8)  # m and v like the weights, an int64 step


def test_jax_arrays_on_a_mesh(jax8):
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax8.sharding.Mesh(np.array(jax8.devices()[:8]).reshape(4, 2), ("batch", "model"))
    rows = jax8.device_put(np.zeros((8, 6), np.float32), NamedSharding(mesh, PartitionSpec("batch", None)))
    whole = jax8.device_put(np.zeros((8, 6), np.float32), NamedSharding(mesh, PartitionSpec()))
    assert bytes_per_device(rows) == dict.fromkeys(CPUS, 48)
    assert bytes_per_device([rows, whole]) == dict.fromkeys(CPUS, 48 + 192)


def test_jax_array_off_the_mesh_is_refused(jax8):
    with pytest.raises(TypeError, match="NamedSharding"):
        bytes_per_device(jax8.device_put(np.zeros(4), jax8.devices()[0]))


def test_jax_and_dtensor_do_not_mix(jax8, mesh2d):
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax8.sharding.Mesh(np.array(jax8.devices()[:8]).reshape(4, 2), ("batch", "model"))
    array = jax8.device_put(np.zeros(8, np.float32), NamedSharding(mesh, PartitionSpec("batch")))
    with pytest.raises(ValueError, match="DTensor mesh batch=4 x model=2 .*JAX mesh batch=4 x model=2"):
        bytes_per_device([pack_batch(tf.zeros([8]), dtensor.Layout(["batch"], mesh2d)), array])
