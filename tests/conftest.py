"""Fixtures for the unit tests of course_utils."""
import matplotlib
import pytest

from course_utils import configure_virtual_cpus

matplotlib.use("Agg")


def pytest_sessionstart(session):
    # Devices must be configured before any test starts TensorFlow's runtime (loading data does).
    configure_virtual_cpus(8)
    _nbval_kernels_over_unix_sockets()


def _nbval_kernels_over_unix_sockets():
    """nbval's kernels talk over Unix sockets in a private folder each, not TCP ports: two workers starting
    kernels at once could pick the same free port (``ZMQError: Address already in use``)."""
    import shutil
    from pathlib import Path

    import nbval.kernel

    from course_utils.tools.notebook_runner import private_ipc_address

    class PrivateIpcKernelManager(nbval.kernel.KernelManager):
        def __init__(self, **kwargs):
            super().__init__(transport="ipc", ip=private_ipc_address(), **kwargs)

        def cleanup_resources(self, restart=False):
            super().cleanup_resources(restart=restart)
            if not restart:
                shutil.rmtree(Path(self.ip).parent, ignore_errors=True)

    nbval.kernel.KernelManager = PrivateIpcKernelManager


@pytest.fixture(scope="session")
def cpus8():
    """The names of the eight logical CPUs configured for this pytest process."""
    return configure_virtual_cpus(8)


@pytest.fixture(scope="session")
def jax8():
    """JAX with 8 CPU devices in this pytest process (asked for before JAX starts its runtime)."""
    jax = pytest.importorskip("jax")
    try:
        jax.config.update("jax_num_cpu_devices", 8)
    except RuntimeError:
        pass  # JAX already started in this process: the count below says whether it has 8
    assert jax.device_count() >= 8, "JAX started with fewer than 8 CPU devices before this test"
    return jax
