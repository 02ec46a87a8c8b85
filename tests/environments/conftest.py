"""Fixtures of the browser tests (JupyterLab and the website)."""
import pytest

from chromium import NoChromium, find_chromium


@pytest.fixture(scope="session")
def chromium(request):
    """The Chromium executable: ``--chromium``, else one on PATH, else Playwright's own (downloaded if needed)."""
    try:
        return find_chromium(request.config.getoption("--chromium"))
    except NoChromium as err:
        pytest.fail(str(err), pytrace=False)
