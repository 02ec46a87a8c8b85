"""course.py, the course's commands: what `test` runs, and pip's failures turned into plain messages."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def course():
    spec = importlib.util.spec_from_file_location("course_commands", ROOT / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_missing_package_is_named_not_a_pip_traceback(course):
    pip_errors = ("Looking in indexes: ...\nERROR: Could not find a version that satisfies the requirement "
                  "tensorflow==2.99.0 (from versions: 2.20.0, 2.21.0)\n"
                  "ERROR: No matching distribution found for tensorflow==2.99.0\n")
    message = course.install_failure(pip_errors, "requirements-colab.txt", ".venv-colab", "3.13")
    assert message.startswith("Could not install tensorflow==2.99.0 from requirements-colab.txt into .venv-colab")
    assert "Traceback" not in message and "Check the version" in message and "for Python 3.13" in message


def test_other_pip_failures_keep_pip_s_own_errors(course):
    message = course.install_failure("noise\nERROR: file not found: ./x\n", "requirements.txt", ".venv", "3.11")
    assert message == "pip could not install requirements.txt into .venv:\nERROR: file not found: ./x"


def test_each_environment_runs_its_own_tests_on_every_core(course):
    runs = course.test_runs(["-x"])
    assert runs["main"] == (["main"], ["-n", "auto", "--dist", "loadfile",
                                       f"--executed-notebooks={course.REPORTS / 'executed'}", "-x",
                                       f"--junitxml={course.REPORTS / 'main'}.xml"])
    venvs, args = runs["colab"]
    assert venvs == ["main", "colab"] and args[0] == "tests/environments/test_colab.py"
    assert "--dist" in args and args[args.index("--dist") + 1] == "load"
    assert f"--colab-outputs={course.REPORTS / 'colab-outputs'}" in args
    assert runs["browser"][1][0] == "tests/environments/test_jupyterlab.py"
    assert runs["site"][1][:2] == ["tests/environments/test_site.py", "tests/environments/test_decks.py"]


def test_the_time_table_ranks_files_by_the_seconds_of_their_tests(course, tmp_path):
    report = tmp_path / "main.xml"
    report.write_text('<testsuites><testsuite name="pytest">'
                      '<testcase classname="tests.test_a" name="one" time="1.5"/>'
                      '<testcase classname="tests.test_a" name="two" time="2.0"/>'
                      '<testcase classname="notebooks.05_dtensor_with_keras.ipynb" name="Cell 3" time="40.25"/>'
                      '</testsuite></testsuites>')
    assert course.time_table(report) == [("notebooks.05_dtensor_with_keras.ipynb", 1, 40.25), ("tests.test_a", 2, 3.5)]
    assert course.time_table(report, rows=1) == [("notebooks.05_dtensor_with_keras.ipynb", 1, 40.25)]
    colab = tmp_path / "colab.xml"
    colab.write_text('<testsuites><testsuite name="pytest">'
                     '<testcase classname="tests.environments.test_colab" name="test_runs[notebooks/00.ipynb]" '
                     'time="9.5"/><testcase classname="tests.environments.test_colab" name="test_runs[solutions/'
                     '05.ipynb]" time="80"/></testsuite></testsuites>')
    assert course.time_table(colab) == [("solutions/05.ipynb", 1, 80.0), ("notebooks/00.ipynb", 1, 9.5)]


def test_help_lists_the_environments(course, capsys):
    assert course.run_tests(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("main", "colab", "browser", "site", "--skip-browser"))


def test_the_requirements_digest_follows_the_local_packages_it_installs(course, tmp_path, monkeypatch):
    monkeypatch.setattr(course, "ROOT", tmp_path)
    (tmp_path / "standin").mkdir()
    (tmp_path / "standin" / "module.py").write_text("A = 1\n")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("numpy==2.1.3\n./standin\n")
    before = course.requirements_digest(requirements)
    (tmp_path / "standin" / "module.py").write_text("A = 2\n")  # the stand-in changed: reinstall
    assert course.requirements_digest(requirements) != before


def test_environments_run_side_by_side_and_a_failure_shows_the_end_of_its_log(course, tmp_path, monkeypatch, capsys):
    """main then site beside colab then browser; each writes its own log; a failed one prints its end; main's
    run removes the chapters an earlier run executed."""
    import sys
    import time

    monkeypatch.setattr(course, "REPORTS", tmp_path)
    monkeypatch.setattr(course, "ensure_environment", lambda name: sys.executable)
    spans = {}

    def fake_pytest(command, cwd, stdout=None, stderr=None):
        env = Path(next(a for a in command if a.startswith("--junitxml=")).split("=", 1)[1]).stem
        start = time.monotonic()
        time.sleep(0.3)
        stdout.write(f"output of {env}\nFAILED tests/test_x.py::test_{env}\n")
        spans[env] = (start, time.monotonic())
        return type("Done", (), {"returncode": 1 if env == "colab" else 0})()

    monkeypatch.setattr(course.subprocess, "run", fake_pytest)
    (tmp_path / "executed" / "notebooks").mkdir(parents=True)
    (tmp_path / "colab-outputs" / "solutions").mkdir(parents=True)
    assert course.run_tests([]) == 1
    assert spans["main"][0] < spans["colab"][1] and spans["colab"][0] < spans["main"][1]  # side by side
    assert spans["browser"][0] >= spans["colab"][1] and spans["site"][0] >= spans["main"][1]  # each in its lane
    assert {path.name for path in tmp_path.glob("*.log")} == {"main.log", "colab.log", "browser.log", "site.log"}
    assert not (tmp_path / "executed").exists() and not (tmp_path / "colab-outputs").exists()
    out = capsys.readouterr().out
    assert f"`colab` failed; the end of {tmp_path.name}/colab.log:\noutput of colab" in out
    assert f"end of {tmp_path.name}/main.log" not in out and "FAILED (pytest exit status 1)" in out


def test_cpu_seconds_reads_the_machine_s_busy_time(course, tmp_path):
    stat = tmp_path / "stat"
    hertz = course.os.sysconf("SC_CLK_TCK")
    stat.write_text(f"cpu  {3 * hertz} {hertz} {2 * hertz} {10 * hertz} {hertz} 0 0 0 0 0\ncpu0 1 2 3\n")
    assert course.cpu_seconds(stat) == 6.0  # user, nice and system; not idle, not waiting for I/O
    assert course.cpu_seconds(tmp_path / "missing") is None


def test_an_interrupted_environment_stops_its_lane(course, tmp_path, monkeypatch):
    import sys

    monkeypatch.setattr(course, "REPORTS", tmp_path)
    monkeypatch.setattr(course, "ensure_environment", lambda name: sys.executable)
    started = []

    def fake_pytest(command, cwd, stdout=None, stderr=None):
        env = Path(next(a for a in command if a.startswith("--junitxml=")).split("=", 1)[1]).stem
        started.append(env)
        return type("Done", (), {"returncode": 2 if env == "colab" else 0})()  # 2: pytest was interrupted

    monkeypatch.setattr(course.subprocess, "run", fake_pytest)
    (tmp_path / "browser.xml").write_text("<testsuites/>")  # a report of an earlier run
    assert course.run_tests([]) == 2
    assert sorted(started) == ["colab", "main", "site"]  # browser, after colab in its lane, never started


REFUSED = "apt-get update of Debian trixie's package lists failed (exit status 100):\nE: Failed to fetch ... 403  Forbidden"


@pytest.fixture
def no_colab_python(course, monkeypatch):
    """A machine where Colab's Python cannot be had: its download is refused."""
    def refused(folder, pip_python, say=print):
        raise course.colab_python.Unavailable(REFUSED)

    monkeypatch.setattr(course.colab_python, "colab_python", refused)
    monkeypatch.setattr(course, "NOTES", {})
    monkeypatch.delenv(course.REQUIRE_COLAB_PYTHON, raising=False)


def test_without_colab_s_python_the_colab_like_environment_falls_back_and_says_so(course, no_colab_python, capsys):
    import sys

    assert course.colab_base_python() == Path(sys.executable)
    this = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert course.NOTES["colab"] == f"on Python {this}, not Colab's 3.13, which could not be had: {REFUSED}"
    assert capsys.readouterr().out.startswith(f"Note: the Colab-like environment runs on Python {this}, not Colab's")


def test_ci_does_not_fall_back(course, no_colab_python, monkeypatch):
    monkeypatch.setenv(course.REQUIRE_COLAB_PYTHON, "1")
    with pytest.raises(SystemExit, match=r"needs Python 3.13 \(COURSE_REQUIRE_COLAB_PYTHON is set\), but none could "
                                         r"be had: apt-get update of Debian trixie's"):
        course.colab_base_python()


def test_the_test_summary_says_the_colab_like_environment_fell_back(course, no_colab_python, tmp_path, monkeypatch,
                                                                   capsys):
    import sys

    monkeypatch.setattr(course, "REPORTS", tmp_path)
    def ensure_environment(name):  # the real one's fallback, without the installs
        if name == "colab":
            course.colab_base_python()
        return sys.executable

    monkeypatch.setattr(course, "ensure_environment", ensure_environment)
    monkeypatch.setattr(course.subprocess, "run", lambda command, cwd: type("Done", (), {"returncode": 0})())
    assert course.run_tests(["--env", "colab"]) == 0
    summary = capsys.readouterr().out.split("=== Test environments\n")[1].splitlines()
    assert summary[0].startswith("colab    passed")
    assert summary[1] == f"         ran on Python {sys.version_info[0]}.{sys.version_info[1]}, not Colab's 3.13, which " \
                         f"could not be had: apt-get update of Debian trixie's package lists failed (exit status 100):"
    assert summary[2] == "            E: Failed to fetch ... 403  Forbidden"


def test_the_colab_like_venv_is_made_again_when_its_python_changes_or_is_gone(course, tmp_path, monkeypatch):
    import sys

    monkeypatch.setattr(course, "ROOT", tmp_path)
    made = []

    def make_venv(python, folder):  # a venv's one file that matters here: bin/python, a link to its Python
        made.append(python)
        (folder / "bin").mkdir(parents=True)
        (folder / "bin" / "python").symlink_to(python)

    monkeypatch.setattr(course.colab_python, "make_venv", make_venv)
    other = tmp_path / "python3.13"
    other.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'print(\"3.13.5 (main)\")'\n")
    other.chmod(0o755)
    shared = tmp_path / "another-clone-venv"
    shared.mkdir()
    (tmp_path / ".venv-colab").symlink_to(shared)  # a link to another clone's environment is left alone
    course.make_colab_venv(sys.executable)
    course.make_colab_venv(sys.executable)  # the same Python: kept
    assert made == [sys.executable] and not any(shared.iterdir())
    course.make_colab_venv(other)  # another Python: made again
    other.unlink()
    other.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'print(\"3.13.6 (main)\")'\n")
    other.chmod(0o755)
    course.make_colab_venv(other)  # that Python rebuilt: made again
    assert made == [sys.executable, other, other]
    (tmp_path / ".venv-colab" / "bin" / "python").unlink()
    course.make_colab_venv(other)  # its Python gone: made again
    assert len(made) == 4


def test_one_chapter_runs_its_notebook_checkers_grader_and_colab_like_tests(course):
    import subprocess
    import sys

    chapter, solution = (next((ROOT / folder).glob("04_*.ipynb")).relative_to(ROOT).as_posix()
                         for folder in ("notebooks", "solutions"))
    tests = course.chapter_tests(4)
    assert tests == {"main": [chapter, "tests/checkers/test_ch4.py", f"{course.GRADER_TEST}[4]"],
                     "colab": [f"{course.COLAB_TEST}[{chapter}]", f"{course.COLAB_TEST}[{solution}]"]}
    assert course.chapter_tests(0) == {"main": ["notebooks/00_welcome.ipynb"],
                                       "colab": [f"{course.COLAB_TEST}[notebooks/00_welcome.ipynb]"]}
    runs = course.test_runs([], [4])
    assert runs["main"][1][:3] == tests["main"] and runs["colab"][1][:2] == tests["colab"]
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly",
                           *tests["main"][1:], *tests["colab"]], cwd=ROOT, capture_output=True, text=True, timeout=600)
    collected = done.stdout.splitlines()
    assert all(any(line.startswith(test) for line in collected) for test in tests["main"][1:] + tests["colab"]), \
        done.stdout[-3000:] + done.stderr[-2000:]
    with pytest.raises(SystemExit, match="--chapter 99: notebooks/ has no 99_"):
        course.chapter_tests(99)


def test_a_test_of_an_environments_own_file_runs_instead_of_the_whole_file(course):
    node = f"{course.COLAB_TEST}[notebooks/00_welcome.ipynb]"
    args = course.test_runs([node])["colab"][1]
    assert node in args and course.ENV_FILES["colab"][0] not in args
    assert course.test_runs(["-k", "welcome"])["colab"][1][0] == course.ENV_FILES["colab"][0]
    decks = course.test_runs(["tests/environments/test_decks.py", "-k", "speaker"])["site"][1]
    assert "tests/environments/test_site.py" not in decks and decks.count("tests/environments/test_decks.py") == 1
