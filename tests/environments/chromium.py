"""Which Chromium the browser test drives, installing Playwright's own where the machine has none."""
import os
import shutil
import subprocess
import sys

ON_PATH = ("chromium", "chromium-browser", "google-chrome")
INSTALL = [sys.executable, "-m", "playwright", "install", "chromium"]
INSTALL_SECONDS = 900


class NoChromium(RuntimeError):
    """No Chromium here, and Playwright could not download one (the message says why and what to do)."""


def playwright_chromium():
    """The path of Playwright's own Chromium (where ``playwright install chromium`` puts it), installed or not."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        return playwright.chromium.executable_path


def find_chromium(explicit=None, which=shutil.which, installed=playwright_chromium, run=subprocess.run, echo=print):
    """The Chromium to drive: ``explicit``, else one on PATH, else Playwright's own, downloaded if needed.

    Args:
        explicit: a path given with ``--chromium`` (used as it is).
        which, installed, run, echo: ``shutil.which``, :func:`playwright_chromium`, ``subprocess.run`` and
            ``print`` (replaced in tests).

    Raises:
        NoChromium: none on PATH and ``python -m playwright install chromium`` failed (e.g. offline).

    Example:
        >>> find_chromium()
        '/usr/bin/chromium'
    """
    if explicit:
        return explicit
    found = next(filter(None, map(which, ON_PATH)), None)
    if found:
        return found
    path = installed()
    if path and os.path.exists(path):
        return path
    echo(f"No Chromium on PATH: running `python {' '.join(INSTALL[1:])}`, which downloads Playwright's Chromium "
         f"(about 170 MB) into {os.path.dirname(os.path.dirname(path or '')) or 'its cache folder'}.")
    try:
        done = run(INSTALL, capture_output=True, text=True, timeout=INSTALL_SECONDS)
        failed = done.returncode != 0
        why = " ".join((done.stderr or done.stdout or "").split())[-400:]
    except (OSError, subprocess.TimeoutExpired) as err:
        failed, why = True, str(err)
    path = installed() if not failed else None
    if failed or not path or not os.path.exists(path):
        raise NoChromium(
            "The browser test needs Chromium: none is on PATH and Playwright could not download its own "
            f"({why or 'no browser after the install'}). Install it (Debian/Ubuntu: `sudo apt-get install chromium`), "
            "name one with --chromium PATH, or leave the browser test out: `python3 course.py test --skip-browser`.")
    return path
