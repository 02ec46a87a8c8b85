"""Fixtures of the checker tests."""
import pytest


@pytest.fixture(scope="session")
def mesh42(cpus8):
    from tensorflow.experimental import dtensor

    return dtensor.create_mesh([("batch", 4), ("model", 2)], devices=cpus8)


@pytest.fixture(scope="session")
def keras2(mesh42):
    import tf_keras

    return tf_keras
