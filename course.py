"""The course's commands: ``python3 course.py lab | test | build | grade | bench``.

Each creates ``.venv`` next to this file on first use, installs ``requirements.txt`` into it (again
only when that file changes), then runs. ``test`` also keeps ``.venv-colab``, Colab's package set
(``requirements-colab.txt``) on Colab's Python (3.13, unpacked from Debian into ``.python-colab``: see
course_utils/tools/colab_python.py), for the Colab-like test environment. Only the Python standard
library is used here, so a fresh Python 3.11 is all it needs.
"""
import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
import venv
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from course_utils.tools import colab_python

ROOT = Path(__file__).resolve().parent
REPORTS = ROOT / "test-artifacts"  # each environment's JUnit report, <env>.xml, read for its time table
EXECUTED = "executed"  # the folder of REPORTS where main's nbval leaves the chapters it ran, with their outputs
COLAB_OUTPUTS = "colab-outputs"  # the folder of REPORTS where colab leaves every notebook as it ran (failed ones too)
BROWSER_ENVS = ("browser", "site")  # the environments that drive Chromium
VENVS = {"main": (".venv", "requirements.txt"), "colab": (".venv-colab", "requirements-colab.txt")}
STAMP = ".requirements.sha256"
COLAB_PYTHON = ".python-colab"  # where Colab's Python is unpacked, for .venv-colab (git-ignored)
BASE = ".base-python"  # in .venv-colab: the Python it was made from; another one (or none) makes it again
REQUIRE_COLAB_PYTHON = "COURSE_REQUIRE_COLAB_PYTHON"  # set (as CI does): no Colab's Python is an error, not a fallback
NOTES = {}  # environment: a line for the test summary (the Colab-like one's fallback to this Python)
LANES = (("main", "site"), ("colab", "browser"))  # environments run side by side, one lane each, in this order
INTERRUPTED = (2, -2)  # pytest's exit status when interrupted (Ctrl-C), or killed by SIGINT
TEST_USAGE = """usage: python3 course.py test [--env main|colab|browser|site] [--chapter N] [--skip-browser]
                            [pytest options]

Runs the test environments (all four, or those named by --env):
  main     unit tests and every notebook with nbval, in .venv
  colab    every chapter and solution notebook alone in an empty folder with Colab's packages (.venv-colab)
  browser  JupyterLab in headless Chromium: the layout explorer and an exercise check
  site     the website built from the chapters main executed, read in headless Chromium, every
           slide of every deck measured
Two or more run side by side, main then site beside colab then browser (each alone leaves a core
idle part of the time; together they keep both busy), each writing its output to
test-artifacts/<env>.log; one alone prints its output as it goes.
Pytest options go to every run; given any, only `main` runs unless --env says otherwise. A test file or node id
of an environment's own file (tests/environments/test_colab.py::...) runs instead of the whole file.
--chapter N (repeatable) runs chapter N's tests in main and colab: its notebook, its checkers' tests, the grader
on its solution and exercise notebooks, and its chapter and solution notebooks in the Colab-like environment.
--skip-browser leaves out the tests that drive Chromium, browser and site (for a machine without it)."""
ENV_FILES = {"colab": ["tests/environments/test_colab.py"], "browser": ["tests/environments/test_jupyterlab.py"],
             "site": ["tests/environments/test_site.py", "tests/environments/test_decks.py"]}
GRADER_TEST = "tests/grading/test_grader.py::test_untouched_exercises_score_zero_and_solutions_full_marks"
COLAB_TEST = f"{ENV_FILES['colab'][0]}::test_notebook_runs_alone_in_the_colab_like_environment"


def python_of(name):
    """The Python of the virtual environment ``name`` (a key of VENVS)."""
    return ROOT / VENVS[name][0] / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def requirements_digest(requirements):
    """A hash of the requirements file and of the sources of the local folders it installs (``./folder``)."""
    digest = hashlib.sha256(requirements.read_bytes())
    for line in requirements.read_text().splitlines():
        if line.startswith("./"):
            folder = ROOT / line
            for path in sorted(folder.rglob("*")):
                inside = path.relative_to(folder)
                if path.suffix in (".py", ".toml") and inside.parts[0] != "build":  # pip's build output
                    digest.update(inside.as_posix().encode() + path.read_bytes())
    return digest.hexdigest()


def ensure_environment(name):
    """Create the virtual environment ``name`` and install its requirements if they changed."""
    folder, requirements_name = VENVS[name]
    python, requirements = python_of(name), ROOT / requirements_name
    if name == "colab":
        make_colab_venv(colab_base_python())
    elif not python.exists():
        print(f"Creating the virtual environment {folder} ...")
        venv.EnvBuilder(with_pip=True).create(ROOT / folder)
    stamp, digest = ROOT / folder / STAMP, requirements_digest(requirements)
    if stamp.exists() and stamp.read_text() == digest:
        return python
    print(f"Installing {requirements_name} into {folder} (a few minutes the first time) ...")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
    result = subprocess.run([python, "-m", "pip", "install", "--quiet", "-r", requirements],
                            cwd=ROOT, capture_output=True, text=True)
    if result.returncode:
        version = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2], sep='.')"],
                                 capture_output=True, text=True).stdout.strip()
        sys.exit(install_failure(result.stderr, requirements_name, folder, version))
    stamp.write_text(digest)
    return python


def colab_base_python():
    """The Python that .venv-colab is made from: Colab's (see colab_python), else this one.

    Falling back says so, and keeps the line for the test summary in NOTES; with COURSE_REQUIRE_COLAB_PYTHON
    set, it exits instead.
    """
    try:
        return colab_python.colab_python(ROOT / COLAB_PYTHON, pip_python=python_of("main"))
    except colab_python.Unavailable as err:
        if os.environ.get(REQUIRE_COLAB_PYTHON):
            sys.exit(f"The Colab-like environment needs Python {colab_python.VERSION} ({REQUIRE_COLAB_PYTHON} is set), "
                     f"but none could be had: {err}")
        NOTES["colab"] = (f"on Python {sys.version_info[0]}.{sys.version_info[1]}, not Colab's {colab_python.VERSION}, "
                          f"which could not be had: {err}")
        print(f"Note: the Colab-like environment runs {NOTES['colab']}")
        return Path(sys.executable)


def make_colab_venv(base):
    """Make .venv-colab from the Python ``base``, unless it was made from that very build (BASE says which)."""
    folder = ROOT / VENVS["colab"][0]
    version = subprocess.run([base, "-c", "import sys; print(sys.version)"], capture_output=True, text=True,
                             check=True).stdout.strip()
    identity = f"{Path(base).resolve()}\n{version}\n"
    if python_of("colab").exists() and (folder / BASE).exists() and (folder / BASE).read_text() == identity:
        return
    print(f"Creating the virtual environment {folder.name} on Python {version.split()[0]} ...")
    if folder.is_symlink():
        folder.unlink()  # a link to another clone's environment: never rebuild that one
    shutil.rmtree(folder, ignore_errors=True)
    colab_python.make_venv(base, folder)
    (folder / BASE).write_text(identity)


def install_failure(pip_errors, requirements_name, folder, python_version):
    """The message for a failed install into ``folder`` (on Python ``python_version``, e.g. "3.13"): the packages
    pip could not find, else pip's own errors."""
    missing = re.findall(r"No matching distribution found for (\S+)", pip_errors)
    if missing:
        return (f"Could not install {', '.join(missing)} from {requirements_name} into {folder}: pip found no "
                f"such version for Python {python_version} on this platform, or could "
                f"not reach the package registry. Check the version against its source (see the comments in "
                f"{requirements_name}), or your network.")
    lines = pip_errors.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("ERROR:")), 0)
    return f"pip could not install {requirements_name} into {folder}:\n" + "\n".join(lines[first:])


def chapter_tests(number, root=ROOT):
    """The tests of chapter ``number``, per environment: ``{"main": [...], "colab": [...]}`` (paths and node ids).

    main: the chapter's notebook, its checkers' tests and the grader's run of its solution and exercise notebooks;
    colab: its chapter and solution notebooks, each alone with Colab's package set.

    Raises:
        SystemExit: there is no chapter ``number`` in notebooks/.
    """
    notebooks = sorted(p.relative_to(root).as_posix() for folder in ("notebooks", "solutions")
                       for p in (root / folder).glob(f"{number:02d}_*.ipynb"))
    if not any(path.startswith("notebooks/") for path in notebooks):
        sys.exit(f"--chapter {number}: notebooks/ has no {number:02d}_*.ipynb.")
    main = [path for path in notebooks if path.startswith("notebooks/")]
    main += [path for path in [f"tests/checkers/test_ch{number}.py"] if (root / path).is_file()]
    main += [f"{GRADER_TEST}[{number}]"] if any(path.startswith("solutions/") for path in notebooks) else []
    return {"main": main, "colab": [f"{COLAB_TEST}[{path}]" for path in notebooks]}


def test_runs(pytest_args, chapters=()):
    """The pytest arguments of each test environment (after the options of pyproject.toml); ``chapters``: run only
    those chapters' tests (:func:`chapter_tests`) in main and colab."""
    workers = ["-n", "auto"]  # one pytest-xdist worker per CPU core
    selected = {env: [test for number in chapters for test in chapter_tests(number)[env]] for env in ("main", "colab")}

    def own_files(env):  # the environment's files, unless the options name one of them (or a test in it) already
        named = any(arg == path or arg.startswith(path + "::") for arg in pytest_args for path in ENV_FILES[env])
        return [] if named else selected.get(env) or ENV_FILES[env]

    runs = {
        # loadfile: all cells of a notebook (nbval items sharing one kernel) stay on one worker
        # nbval's executed chapters are kept for the site environment, which renders them (not runs them again)
        "main": (["main"], [*selected["main"], *workers, "--dist", "loadfile",
                            f"--executed-notebooks={REPORTS / EXECUTED}", *pytest_args]),
        # load: the Colab-like tests are one file with a test per notebook, spread over the workers
        "colab": (["main", "colab"], [*own_files("colab"), *workers, "--dist", "load",
                                      f"--colab-python={python_of('colab')}",
                                      f"--colab-outputs={REPORTS / COLAB_OUTPUTS}", *pytest_args]),
        "browser": (["main"], [*own_files("browser"), *pytest_args]),
        "site": (["main"], [*own_files("site"), *pytest_args]),
    }
    return {env: (venvs, [*args, f"--junitxml={REPORTS / env}.xml"]) for env, (venvs, args) in runs.items()}


def time_table(report, rows=12):
    """The test files (or notebooks, also those a test is parametrized with) that took longest in a JUnit
    ``report``: ``[(name, tests, seconds)]``.

    Seconds are summed over the file's tests, as the workers spent them (not wall time: workers run in parallel).
    """
    files = defaultdict(lambda: [0, 0.0])
    for case in ElementTree.parse(report).iter("testcase"):
        notebook = re.search(r"\[(\S+\.ipynb)\]", case.get("name", ""))  # a test per notebook: the notebook
        name = notebook.group(1) if notebook else case.get("classname", "").split("::")[0] or case.get("name", "?")
        files[name][0] += 1
        files[name][1] += float(case.get("time", 0))
    ranked = sorted(files.items(), key=lambda item: -item[1][1])
    return [(name, tests, seconds) for name, (tests, seconds) in ranked[:rows]]


def cpu_seconds(stat="/proc/stat"):
    """The machine's busy CPU seconds since boot, all cores together, from Linux's ``stat`` (None
    elsewhere). It counts every process on the machine; ``/usr/bin/time`` counts only the processes
    its command waited for, and missed half of the test suite's CPU time here."""
    try:
        ticks = [int(field) for field in Path(stat).read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = ticks  # steal: time the host gave elsewhere
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def run_environment(env, python, args, log=None):
    """Run one test environment's pytest; its output goes to the terminal, or to the file ``log``.

    Returns ``(env, pytest's exit status, seconds)``.
    """
    start = time.monotonic()
    print(f"\n=== Test environment `{env}`: pytest {' '.join(map(str, args))}"
          + (f"\n    (output in {REPORTS.name}/{log.name})" if log else ""), flush=True)
    command = [python, "-m", "pytest", *args]
    for stale in (REPORTS / f"{env}.xml", REPORTS / f"{env}.log"):  # a run that stops early must not show the last
        stale.unlink(missing_ok=True)
    if env == "main":
        shutil.rmtree(REPORTS / EXECUTED, ignore_errors=True)  # the site must not render chapters of an earlier run
    if env == "colab":
        shutil.rmtree(REPORTS / COLAB_OUTPUTS, ignore_errors=True)  # nor anyone read an earlier run's outputs
    if log:
        REPORTS.mkdir(exist_ok=True)
        with open(log, "w") as output:
            status = subprocess.run(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT).returncode
    else:
        status = subprocess.run(command, cwd=ROOT).returncode
    seconds = time.monotonic() - start
    if log:
        print(f"=== `{env}` {'passed' if status == 0 else 'FAILED'} in {seconds:.0f} s", flush=True)
    return env, status, seconds


def run_tests(argv):
    """``course.py test``: run the chosen test environments (side by side, in LANES); 0 if all passed."""
    parser = argparse.ArgumentParser(prog="course.py test", usage=TEST_USAGE, add_help=False, allow_abbrev=False)
    parser.add_argument("--env", action="append", choices=["main", "colab", "browser", "site"])
    parser.add_argument("--chapter", action="append", type=int, default=[])
    parser.add_argument("--skip-browser", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    options, pytest_args = parser.parse_known_args(argv)
    if options.help:
        print(TEST_USAGE)
        return 0
    chosen = options.env or (["main", "colab"] if options.chapter else ["main"] if pytest_args
                             else ["main", "colab", "browser", "site"])
    chosen = [env for env in chosen if not (options.skip_browser and env in BROWSER_ENVS)]
    runs = test_runs(pytest_args, options.chapter)
    pythons = {env: [ensure_environment(name) for name in runs[env][0]][0] for env in chosen}
    cpu_before, started = cpu_seconds(), time.monotonic()
    if len(chosen) == 1:
        results = [run_environment(chosen[0], pythons[chosen[0]], runs[chosen[0]][1])]
    else:
        def run_lane(lane):
            done = []
            for env in lane:
                if done and done[-1][1] in INTERRUPTED:
                    break  # Ctrl-C stopped the environment before: do not start the next one
                done.append(run_environment(env, pythons[env], runs[env][1], log=REPORTS / f"{env}.log"))
            return done

        lanes = [[env for env in lane if env in chosen] for lane in LANES]
        with ThreadPoolExecutor(len(lanes)) as pool:
            results = [result for done in pool.map(run_lane, lanes) for result in done]
    for env, status, _ in results:
        if status and len(chosen) > 1:
            print(f"\n=== `{env}` failed; the end of {REPORTS.name}/{env}.log:")
            print("\n".join((REPORTS / f"{env}.log").read_text(errors="replace").splitlines()[-150:]))
        if (REPORTS / f"{env}.xml").exists():
            print(f"\n=== Where `{env}` spent its time (test seconds summed per file; workers run side by side)")
            for name, tests, seconds in time_table(REPORTS / f"{env}.xml"):
                print(f"{seconds:8.1f} s  {tests:5d} test(s)  {name}")
    print("\n=== Test environments")
    for env, status, seconds in results:
        print(f"{env:8} {'passed' if status == 0 else f'FAILED (pytest exit status {status})':36} {seconds:6.0f} s")
        if env in NOTES:
            print(f"{'':8} ran " + NOTES[env].replace("\n", "\n" + " " * 12))
    cpu_after, wall = cpu_seconds(), time.monotonic() - started
    if cpu_before is not None and cpu_after is not None:
        busy = cpu_after - cpu_before
        print(f"{wall:.0f} s in all; the machine's cores were busy {busy:.0f} CPU-seconds, on average "
              f"{busy / wall:.2f} of {os.cpu_count()} (every process on the machine counts)")
    return max((status for _, status, _ in results), default=0)


def main(argv):
    module = {"build": "course_utils.tools.build", "grade": "course_utils.grading", "bench": "course_utils.tools.benchmark",
              "site": "course_utils.tools.site.build"}
    if not argv or argv[0] not in ("lab", "test", *module):
        print(__doc__)
        print("usage: python3 course.py lab [jupyter lab options] | test [--help] | build | grade | bench | site "
              "[options]")
        return 2
    if sys.version_info[:2] != (3, 11):
        print(f"Note: the course is pinned and tested on Python 3.11; this is {sys.version.split()[0]}.")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if argv[0] == "test":
        return run_tests(argv[1:])
    python = ensure_environment("main")
    if argv[0] == "lab":
        # Rooted at the course folder (exercises/ and solutions/ in reach), opening chapter 0.
        command = [python.parent / "jupyter", "lab", f"--ServerApp.root_dir={ROOT}", "notebooks/00_welcome.ipynb",
                   *argv[1:]]
    else:
        command = [python, "-m", module[argv[0]], *argv[1:]]
    return subprocess.run(command, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
