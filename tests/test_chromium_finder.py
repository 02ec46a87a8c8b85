"""The browser test's Chromium: one on PATH is used as it is; without one, Playwright's is downloaded, and
offline the test stops with a message that says what to do."""
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "environments"))
from chromium import INSTALL, NoChromium, find_chromium  # noqa: E402


def never(*args, **kwargs):
    raise AssertionError("nothing may be downloaded when a Chromium is found")


def test_a_chromium_on_path_is_used_and_nothing_is_downloaded():
    which = {"chromium-browser": "/usr/bin/chromium-browser"}.get
    assert find_chromium(which=which, installed=never, run=never) == "/usr/bin/chromium-browser"
    assert find_chromium("/opt/my-chrome", which=never, installed=never, run=never) == "/opt/my-chrome"


def test_without_one_playwright_downloads_its_own(tmp_path):
    browser, calls, said = tmp_path / "chrome-linux" / "chrome", [], []

    def run(command, **kwargs):
        calls.append(command)
        browser.parent.mkdir()
        browser.write_text("")
        return subprocess.CompletedProcess(command, 0, "", "")

    found = find_chromium(which=lambda name: None, installed=lambda: str(browser), run=run, echo=said.append)
    assert found == str(browser) and calls == [INSTALL]
    assert "downloads Playwright's Chromium" in said[0]


def test_offline_the_download_fails_with_a_clear_message(tmp_path):
    def offline(command, **kwargs):
        return subprocess.CompletedProcess(command, 1, "", "Error: getaddrinfo EAI_AGAIN: could not download")

    with pytest.raises(NoChromium, match=r"none is on PATH and Playwright could not download its own \(Error: "
                                         r"getaddrinfo EAI_AGAIN.*apt-get install chromium.*--skip-browser"):
        find_chromium(which=lambda name: None, installed=lambda: str(tmp_path / "missing"), run=offline,
                      echo=lambda text: None)
