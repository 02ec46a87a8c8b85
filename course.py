"""The course's two commands: ``python3 course.py lab`` and ``python3 course.py test``.

Both create ``.venv`` next to this file on first use, install ``requirements.txt`` into it
(again only when that file changes), then open JupyterLab or run the whole test suite.
Only the Python standard library is used here, so a fresh Python 3.11 is all it needs.
"""
import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".requirements.sha256"
REQUIREMENTS = ROOT / "requirements.txt"


def ensure_environment():
    """Create the virtual environment and install the pinned requirements if needed."""
    if sys.version_info[:2] != (3, 11):
        print(f"Note: the course is pinned and tested on Python 3.11; this is {sys.version.split()[0]}.")
    if not PYTHON.exists():
        print(f"Creating the virtual environment in {VENV} ...")
        venv.EnvBuilder(with_pip=True).create(VENV)
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if STAMP.exists() and STAMP.read_text() == digest:
        return
    print("Installing the course's requirements (a few minutes the first time) ...")
    subprocess.run([PYTHON, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
    subprocess.run([PYTHON, "-m", "pip", "install", "--quiet", "-r", REQUIREMENTS], check=True, cwd=ROOT)
    STAMP.write_text(digest)


def main(argv):
    commands = {
        "lab": [BIN / "jupyter", "lab", "notebooks/00_welcome.ipynb", *argv[1:]],
        "test": [PYTHON, "-m", "pytest", *argv[1:]],
    }
    if not argv or argv[0] not in commands:
        print(__doc__)
        print("usage: python3 course.py lab [jupyter lab options] | test [pytest options]")
        return 2
    ensure_environment()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return subprocess.run(commands[argv[0]], cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
