"""Fixtures of the browser tests (JupyterLab, the website and its decks)."""
import functools
import http.server
import threading

import pytest

from browsing import QuietHandler
from chromium import NoChromium, find_chromium


@pytest.fixture(scope="session")
def chromium(request):
    """The Chromium executable: ``--chromium``, else one on PATH, else Playwright's own (downloaded if needed)."""
    try:
        return find_chromium(request.config.getoption("--chromium"))
    except NoChromium as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """The website, built once for the session as ``python3 course.py site`` builds it (from the chapters the test
    run executed) and served over HTTP on localhost; yields its base URL."""
    from course_utils.tools.site.build import REPORTS, build_site

    folder = tmp_path_factory.mktemp("site") / "html"
    build_site(out=folder, executed=REPORTS / "executed")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="session")
def browser(chromium):
    """Headless Chromium, driven by Playwright, for the session."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        yield browser
        browser.close()
