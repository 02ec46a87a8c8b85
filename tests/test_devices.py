import subprocess
import sys
import textwrap

import pytest

from lazy import lazy

configure_virtual_cpus = lazy("course_utils.configure_virtual_cpus")
make_mesh = lazy("course_utils.make_mesh")



def test_configure_is_idempotent(cpus8):
    assert len(cpus8) == 8
    assert configure_virtual_cpus(8) == cpus8


def test_other_count_after_start_names_both_counts(cpus8):
    with pytest.raises(RuntimeError, match=r"already runs TensorFlow with 8 logical CPU.*asked for 4.*[Rr]estart the kernel"):
        configure_virtual_cpus(4)


@pytest.mark.parametrize("bad", [0, -2, 2.5, "8", True])
def test_bad_count(bad):
    with pytest.raises(ValueError, match="positive whole number"):
        configure_virtual_cpus(bad)


def test_runtime_started_without_configuration():
    # A fresh process whose runtime already started with 1 CPU: the helper must say so.
    code = textwrap.dedent("""
        import tensorflow as tf
        from course_utils import configure_virtual_cpus
        tf.config.list_logical_devices()  # starts the runtime
        try:
            configure_virtual_cpus(8)
        except RuntimeError as err:
            print("RAISED:", err)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
    assert "RAISED: This Python process already runs TensorFlow with 1 logical CPU(s), and you asked for 8" in out


def test_mesh_shape_and_devices(cpus8):
    mesh = make_mesh([("batch", 4), ("model", 2)])
    assert mesh.shape() == [4, 2] and mesh.dim_names == ["batch", "model"]
    assert make_mesh([("x", 2)], devices=["CPU:6", "CPU:7"]).local_devices()[0].endswith("CPU:6")


def test_mesh_bigger_than_devices(cpus8):
    with pytest.raises(ValueError, match=r"batch=16 needs 16 devices, but this process has only 8 logical CPU.*configure_virtual_cpus\(16\)"):
        make_mesh([("batch", 16)])


def test_mesh_missing_device(cpus8):
    with pytest.raises(ValueError, match=r"do not exist in this process: \['CPU:42'\]"):
        make_mesh([("x", 2)], devices=["CPU:0", "CPU:42"])


@pytest.mark.parametrize("dims, message", [
    ([("batch", 2), ("batch", 2)], "is used more than once"),
    ([("", 2)], "identifier-like"),
    ([("a,b", 2)], "identifier-like"),
    ([("unsharded", 2)], "identifier-like"),
    ([("batch", 0)], "positive whole-number size"),
    ([("batch", 2)], "2 places but 3 device names"),
])
def test_bad_mesh_specs(cpus8, dims, message):
    devices = ["CPU:0", "CPU:1", "CPU:2"] if message.startswith("2 places") else None
    with pytest.raises(ValueError, match=message):
        make_mesh(dims, devices=devices)
