"""The welcome notebook's environment report: what it says locally, on Colab, with a GPU, with other versions."""
import re
import sys
import types
from pathlib import Path

import pytest

from course_utils import environment
from course_utils.environment import Finding, environment_report
from course_utils.runtime import restart_advice

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def colab(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))


def test_report_names_every_item():
    names = [f.name for f in environment_report()]
    assert names[:2] == ["Python", "TensorFlow"] and "MNIST" in names and "devices" in names
    assert "accelerators" in names and "jax (for chapter 8)" in names


def test_levels_and_advice_print():
    assert str(Finding("MNIST", "FIX", "not found", "Set TFDS_DATA_DIR")) == "[FIX] MNIST: not found\n      -> Set TFDS_DATA_DIR"
    assert str(Finding("where", "ok", "local Jupyter", "unused")) == "[ok] where: local Jupyter"
    assert Finding("x", "warn", "y").ok and not Finding("x", "FIX", "y").ok


def test_other_python_is_a_fix_locally_and_a_note_on_colab(monkeypatch):
    monkeypatch.setattr(environment, "PINNED_PYTHON", (3, 99))
    assert environment._python(colab=False).level == "FIX"
    monkeypatch.setattr(environment.sys, "version", "3.13.15 (main, ...)")  # Colab's, which its tests use
    assert environment._python(colab=True).level == "ok"
    monkeypatch.setattr(environment.sys, "version", "3.14.2 (main, ...)")
    note = environment._python(colab=True)
    assert note.level == "note" and note.advice.endswith("Colab's packages on Python 3.13.")


def test_tensorflow_versions():
    assert environment._tensorflow("2.21.0", colab=False).level == "ok"
    note = environment._tensorflow("2.20.0", colab=True)
    assert note.level == "note" and "tested with TensorFlow 2.21, 2.20" in note.advice
    assert environment._tensorflow("2.19.0", colab=True).level == "note"
    assert environment._tensorflow("2.19.0", colab=False).level == "FIX"


def test_a_gpu_gets_a_warning_that_says_how_to_switch(monkeypatch, colab):
    import tensorflow as tf

    real = tf.config.list_physical_devices
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: ["/physical_device:GPU:0"] if kind == "GPU" else real(kind))
    finding = environment._accelerators(tf)
    assert finding.level == "warn" and finding.found == "1 GPU"
    assert "Runtime → Change runtime type → CPU" in finding.advice and "chapters 1-10" in finding.advice


def test_restart_advice_names_the_menu_of_each_place(colab):
    assert restart_advice() == "restart the runtime (Runtime → Restart session in Colab)"
    assert restart_advice(sentence_start=True) == "Restart the runtime (Runtime → Restart session in Colab)"
    del sys.modules["google.colab"]
    assert restart_advice() == "restart the kernel (Kernel → Restart Kernel in JupyterLab)"


def test_tested_versions_match_the_pinned_requirement_files():
    pins = {}
    for name in ("requirements.txt", "requirements-colab.txt"):
        path = ROOT / name
        if path.exists():
            match = re.search(r"^tensorflow==(\d+\.\d+)", path.read_text(), re.MULTILINE)
            pins[name] = match and match.group(1)
    assert pins["requirements.txt"] == environment.TESTED_TENSORFLOW[0]
    if "requirements-colab.txt" in pins:
        assert pins["requirements-colab.txt"] in environment.TESTED_TENSORFLOW


def test_jax_is_reported_and_a_deadlocking_version_warned_about(monkeypatch):
    versions = {"jax": "0.10.2", "jaxlib": "0.10.2"}
    monkeypatch.setattr(environment, "_version", lambda package: versions.get(package))
    monkeypatch.setattr(environment.os, "cpu_count", lambda: 2)
    finding = environment._jax()
    assert finding.level == "warn" and "deadlock" in finding.advice and "jax==0.7.2" in finding.advice
    versions.update(jax="0.7.2", jaxlib="0.7.2")
    assert environment._jax().level == "ok" and "jax 0.7.2, jaxlib 0.7.2" in environment._jax().found
    versions.clear()
    assert environment._jax().level == "warn" and environment._jax().found == "not installed"


def test_pinned_jax_matches_requirements():
    assert f"jax=={environment.PINNED_JAX}" in (ROOT / "requirements.txt").read_text()
