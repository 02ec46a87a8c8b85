"""Fixtures of the checker tests."""
import pytest


@pytest.fixture(autouse=True)
def _no_tool_called():
    """Each test starts as a fresh kernel: no call of a tool that reveals an answer recorded (reach.reveals)."""
    from course_utils.checkers import reach

    reach.forget_calls()


@pytest.fixture(scope="session")
def mesh42(cpus8):
    from tensorflow.experimental import dtensor

    return dtensor.create_mesh([("batch", 4), ("model", 2)], devices=cpus8)


@pytest.fixture(scope="session")
def keras2(mesh42):
    import tf_keras

    return tf_keras
