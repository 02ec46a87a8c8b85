"""The test session itself: collecting imports no TensorFlow, and a run that would test another checkout's
course_utils stops at once, saying what to change (the root conftest.py)."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def root_conftest():
    spec = importlib.util.spec_from_file_location("course_root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_collecting_the_tests_imports_no_tensorflow():
    code = ("import sys, pytest\n"
            "status = pytest.main(['--collect-only', '-q', '-p', 'no:randomly'])\n"
            "print('exit', int(status), 'tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.stdout.splitlines()[-1] == "exit 0 False", done.stdout[-3000:] + done.stderr[-2000:]


def fake_checkout(folder):
    (folder / "course_utils").mkdir(parents=True)
    (folder / "course_utils" / "__init__.py").write_text("")
    return folder


def test_a_kernel_that_would_import_another_checkouts_course_utils_is_named_with_the_fix(tmp_path):
    other = fake_checkout(tmp_path / "other")
    env = dict(os.environ, PYTHONPATH=str(other))
    problem = root_conftest().other_checkout(ROOT, env)
    assert problem == (f"The tests of {ROOT} would not test its own course_utils: a kernel started in notebooks/ "
                       f"imports it from {other}. Put this checkout first on the path (`export PYTHONPATH={ROOT}`), "
                       f"or install it into the environment (`pip install -e {ROOT}`).")
    assert root_conftest().other_checkout(ROOT, dict(os.environ, PYTHONPATH=str(ROOT))) is None


def test_the_session_stops_before_collecting_when_kernels_would_test_another_checkout(tmp_path):
    other = fake_checkout(tmp_path / "other")
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "tests/test_small_modules.py"],
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(other)), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 4 and f"a kernel started in notebooks/ imports it from {other}" in done.stderr, \
        done.stdout[-2000:] + done.stderr[-2000:]
    assert "test_mesh_text" not in done.stdout  # nothing was collected


def test_a_lazy_name_imports_its_object_on_first_use_and_forwards_calls_and_assignments(monkeypatch):
    import types

    import lazy as lazy_module

    module = types.ModuleType("course_lazy_probe")
    module.answer = lambda: 42
    monkeypatch.setitem(sys.modules, "course_lazy_probe", module)
    probe, answer = lazy_module.lazy("course_lazy_probe"), lazy_module.lazy("course_lazy_probe.answer")
    assert probe._lazy_target is None and answer() == 42 and probe.answer is module.answer
    monkeypatch.setattr(probe, "answer", lambda: 7)  # patches the module itself, and is undone after the test
    assert module.answer() == 7
    for probed in ("__test__", "_mock_name"):  # what pytest's collection asks every object: never imported for
        assert getattr(lazy_module.lazy("course_no_such_module"), probed, None) is None
    from tensorflow.experimental import dtensor

    assert lazy_module.UNSHARDED == dtensor.UNSHARDED
