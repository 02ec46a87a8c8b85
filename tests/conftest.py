"""Fixtures for the unit tests of course_utils.

Collecting the tests imports no TensorFlow (it took about 20 s): the test modules bind what they use of it with
:mod:`lazy`, and the first test that uses it imports it. Whoever imports it first, the eight virtual CPUs every
test expects are configured right after that import, before TensorFlow's runtime starts (:class:`VirtualCpus`).
"""
import importlib.abc
import importlib.util
import sys

import matplotlib
import pytest

matplotlib.use("Agg")
CPUS = 8


class VirtualCpus(importlib.abc.MetaPathFinder):
    """On TensorFlow's first import, in whatever test or helper, configure :data:`CPUS` virtual CPUs right after it:
    devices can only be configured before the runtime starts, and any test may start it (loading data does)."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader

        class ThenConfigure(importlib.abc.Loader):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                module.__spec__.loader = module.__loader__ = loader
                loader.exec_module(module)
                # What configure_virtual_cpus(CPUS) sets, with TensorFlow's own calls: the module importing TensorFlow
                # may be course_utils.devices itself, not yet defined. (It starts no runtime; the helper accepts it.)
                cpu = module.config.list_physical_devices("CPU")[0]
                module.config.set_logical_device_configuration(cpu, [module.config.LogicalDeviceConfiguration()] * CPUS)

        spec.loader = ThenConfigure()
        return spec


def pytest_configure(config):
    if "tensorflow" in sys.modules:  # imported before this conftest (by a plugin): configure now
        from course_utils import configure_virtual_cpus

        configure_virtual_cpus(CPUS)
    else:
        sys.meta_path.insert(0, VirtualCpus())


def pytest_sessionstart(session):
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
    from course_utils import configure_virtual_cpus

    return configure_virtual_cpus(CPUS)


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
