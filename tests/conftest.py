"""Fixtures for the unit tests of course_utils."""
import matplotlib
import pytest

from course_utils import configure_virtual_cpus

matplotlib.use("Agg")


def pytest_sessionstart(session):
    # Devices must be configured before any test starts TensorFlow's runtime (loading data does).
    configure_virtual_cpus(8)


@pytest.fixture(scope="session")
def cpus8():
    """The names of the eight logical CPUs configured for this pytest process."""
    return configure_virtual_cpus(8)
