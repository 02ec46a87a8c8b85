"""Every chapter and solution notebook as a learner gets it on Colab: alone in an empty folder, Colab's packages,
real set-up.

``python3 course.py test --env colab`` runs this with ``--colab-python`` naming the Python of
``.venv-colab`` (Colab's package set, ``requirements-colab.txt``, on Colab's Python 3.13 where it can be
had: see course_utils/tools/colab_python.py). Each notebook is copied alone
into an empty folder, as a Colab badge opens it in ``/content``, and runs in a kernel that loads
``google.colab`` at start-up as Colab's does (the stand-in in ``google_colab/``). Its set-up cell
really runs ``pip install course_utils @ git+https://github.com/<repository>@<branch>``: git's
``url.<base>.insteadOf``, set in the kernel's environment only, sends that clone to a snapshot of
this working tree (uncommitted and new files included), so the test checks what is about to be
committed. MNIST comes from ``TFDS_DATA_DIR`` (``COURSE_OFFLINE=1``, set by the root conftest). With
``--colab-outputs`` (course.py passes ``test-artifacts/colab-outputs``), each notebook is kept there as it
ran, with its outputs (the warnings a learner on Colab sees; a failed one up to its failing cell).

The exercise notebooks are not run here: the build writes each one from its solution notebook with the answers
replaced by placeholders, so the solution's run covers every other cell (on this package set), and the main
environment runs every exercise notebook through the grader. Running them here too cost about 9 kernels of CPU
time for that one difference (a check of a placeholder says "unanswered").

Each notebook gets its own thin virtual environment on top of ``.venv-colab`` (a ``.pth`` file adds
Colab's site-packages), so that what one set-up cell installs can neither leak into another
notebook's run nor stay behind in ``.venv-colab``.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from course_utils.notebook_setup import setup_source
from course_utils.tools.checkout import course_config

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = [p.relative_to(ROOT).as_posix() for folder in ("notebooks", "solutions")
             for p in sorted((ROOT / folder).glob("*.ipynb"))]
# Notebooks known to fail here, with why; each is expected to fail until fixed (then remove it).
KNOWN_FAILURES = {}
CELL_TIMEOUT = 600  # seconds, as for nbval in the main environment (pyproject.toml)


@pytest.fixture(scope="session")
def colab_python(request):
    """The Python of the Colab-like virtual environment."""
    path = request.config.getoption("--colab-python")
    if not path or not Path(path).is_file():
        pytest.fail("The Colab-like environment is missing. Run `python3 course.py test --env colab`, which "
                    "creates .venv-colab and passes --colab-python.", pytrace=False)
    return path


@pytest.fixture(scope="session")
def course_repository():
    """A temporary bare git repository whose configured branch is a snapshot of this working tree.

    Yields the git config (``GIT_CONFIG_*`` variables) that redirects the set-up cell's clone to it.
    """
    config = course_config(ROOT)
    with tempfile.TemporaryDirectory(prefix="course-snapshot-") as folder:
        bare = Path(folder) / "course.git"
        git = ["git", f"--git-dir={bare}", f"--work-tree={ROOT}", "-c", "user.name=course tests",
               "-c", "user.email=tests@localhost"]
        run = lambda *args: subprocess.run([*git, *args], check=True, capture_output=True, text=True).stdout.strip()
        subprocess.run(["git", "init", "--quiet", "--bare", bare], check=True)
        run("add", "--all")  # everything .gitignore does not exclude, committed or not
        commit = run("commit-tree", run("write-tree"), "-m", "Snapshot of the working tree for the Colab-like tests")
        run("update-ref", f"refs/heads/{config['branch']}", commit)
        yield {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.{bare.as_uri()}.insteadOf",
               "GIT_CONFIG_VALUE_0": f"https://github.com/{config['repository']}"}


def runtime_python(folder, colab_python):
    """A fresh virtual environment in ``folder`` that sees every package of ``colab_python``'s."""
    subprocess.run([colab_python, "-m", "venv", "--without-pip", folder], check=True)
    site_packages = lambda python: subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip()
    python = str(Path(folder) / "bin" / "python")
    Path(site_packages(python), "colab_packages.pth").write_text(
        f"import site; site.addsitedir({site_packages(colab_python)!r})\n")
    return python


def colab_kernel(folder, python):
    """A kernel manager for ``python`` that loads ``google.colab`` at start-up, as Colab's kernel does."""
    spec = Path(folder) / "colab"
    spec.mkdir()
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                 "--InteractiveShellApp.extensions=google.colab",
                 "--InteractiveShellApp.reraise_ipython_extension_failures=True"],
        "display_name": "Python 3 (Colab-like)", "language": "python"}))
    # Unix sockets in this test's own folder: no TCP port two kernels starting at once could both pick
    return KernelManager(kernel_name="colab", kernel_spec_manager=KernelSpecManager(kernel_dirs=[folder]),
                         transport="ipc", ip=str(Path(folder) / "kernel"))


@pytest.mark.parametrize("notebook", [
    pytest.param(nb, marks=pytest.mark.xfail(reason=KNOWN_FAILURES[nb], strict=True)) if nb in KNOWN_FAILURES
    else nb for nb in NOTEBOOKS])
def test_notebook_runs_alone_in_the_colab_like_environment(notebook, colab_python, course_repository, request):
    outputs = request.config.getoption("--colab-outputs")  # where to keep the notebook as it ran, if anywhere
    with tempfile.TemporaryDirectory(prefix="colab-run-") as folder:
        content, kernels = Path(folder, "content"), Path(folder, "kernels")
        content.mkdir()
        kernels.mkdir()
        shutil.copy(ROOT / notebook, content)
        python = runtime_python(Path(folder, "runtime"), colab_python)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(course_repository, PATH=f"{Path(python).parent}{os.pathsep}{env.get('PATH', '')}")
        nb = nbformat.read(content / Path(notebook).name, as_version=4)
        kernel = colab_kernel(kernels, python)
        client = NotebookClient(nb, km=kernel, timeout=CELL_TIMEOUT, startup_timeout=120,
                                resources={"metadata": {"path": str(content)}})
        try:
            client.execute(env=env)
        except CellExecutionError as err:
            plain = re.sub(r"\x1b\[[0-9;]*m", "", str(err))  # IPython 7 colours its tracebacks
            pytest.fail(f"{notebook} failed in the Colab-like environment:\n{plain}", pytrace=False)
        finally:
            # nbclient shuts down only the kernels it made: one it was given kept running (about 1 GiB each) until
            # the worker ended, ten at once by the middle of a run
            if client.kc is not None:
                client.kc.stop_channels()
            if kernel.has_kernel:
                kernel.shutdown_kernel(now=True)
            if outputs:
                (Path(outputs) / notebook).parent.mkdir(parents=True, exist_ok=True)
                nbformat.write(nb, Path(outputs) / notebook)


def test_the_set_up_cells_install_has_the_checkers_data(colab_python, course_repository, tmp_path):
    """The package the set-up cell installs on Colab (``pip install "course_utils @ git+..."``, a real install from
    the snapshot of this working tree) ships ``notebook_cells.json``, which the checkers load."""
    requirement = re.search(r'"(course_utils @ git\+[^"]+)"', setup_source("keras3", course_config(ROOT))).group(1)
    python = runtime_python(tmp_path / "runtime", colab_python)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(course_repository)
    install = subprocess.run([python, "-m", "pip", "install", "-q", requirement], env=env, cwd=tmp_path,
                             capture_output=True, text=True)
    assert install.returncode == 0, install.stderr[-2000:]
    code = ("from importlib import resources; import course_utils; from course_utils.checkers import exercises\n"
            "print(course_utils.__file__, resources.files('course_utils.checkers').joinpath('notebook_cells.json')"
            ".is_file(), exercises(3).q4.call)")
    done = subprocess.run([python, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    installed, has_file, call = done.stdout.split()
    assert installed.startswith(str(tmp_path / "runtime")) and (has_file, call) == ("True", "ex.q4.check(statements)")
