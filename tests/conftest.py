"""Fixtures for the unit tests of course_utils."""
import matplotlib
import pytest

matplotlib.use("Agg")


@pytest.fixture(scope="session")
def cpus8():
    """Eight logical CPUs for this pytest process (configured once, before the runtime starts)."""
    from course_utils import configure_virtual_cpus

    return configure_virtual_cpus(8)
