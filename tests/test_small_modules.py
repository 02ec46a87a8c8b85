"""The small shared modules: the checkout, mesh text, the set-up cell, the download policy."""
import pytest

from course_utils.tools.checkout import NotACheckoutError, checkout_root, course_config
from course_utils.data import downloads_allowed
from course_utils.meshes import mesh_text
from course_utils.notebook_setup import setup_environment, setup_lines, setup_source

CONFIG = {"repository": "owner/name", "branch": "main"}


def test_checkout_root_says_when_the_package_is_not_in_a_clone(tmp_path):
    assert (checkout_root() / "solutions").is_dir() and course_config()["branch"]
    with pytest.raises(NotACheckoutError, match="work on a clone of the course"):
        checkout_root(tmp_path)


def test_mesh_text():
    assert mesh_text([("batch", 4), ("model", 2)]) == "batch=4 x model=2" and mesh_text([]) == "(no axes)"


def test_setup_cells():
    assert setup_lines("keras3") == [] and "TF_USE_LEGACY_KERAS" in setup_lines("tf_keras")[0]
    with pytest.raises(ValueError, match="must be one of"):
        setup_lines("keras2")
    assert "owner/name@main" in setup_source("tf_keras", CONFIG)  # the grader compares the cell with the build's


def test_setup_cell_of_a_dtensor_training_chapter_switches_the_combining_off():
    source = setup_source("tf_keras", CONFIG, dtensor=True)
    assert 'os.environ["DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION"] = "0"' in source
    assert source.index("COMBINE_ALL_REDUCES") < source.index("google.colab")  # on Colab too, before any import
    assert "COMBINE_ALL_REDUCES" not in setup_source("tf_keras", CONFIG)
    assert setup_environment("keras3-jax", dtensor=True) == {
        "KERAS_BACKEND": "jax", "JAX_NUM_CPU_DEVICES": "8", "DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION": "0"}


def test_setup_cell_of_a_jax_chapter_picks_the_backend_and_devices_before_any_import():
    source = setup_source("keras3-jax", CONFIG)
    assert 'os.environ["KERAS_BACKEND"] = "jax"' in source and 'os.environ["JAX_NUM_CPU_DEVICES"] = "8"' in source
    assert "TF_USE_LEGACY_KERAS" not in source and "import jax" not in source and "import keras" not in source
    assert "KERAS_BACKEND" not in setup_source("keras3", CONFIG)


def test_downloads_only_when_allowed(monkeypatch):
    monkeypatch.setenv("COURSE_OFFLINE", "1")
    monkeypatch.setenv("COURSE_ALLOW_DOWNLOAD", "1")
    assert not downloads_allowed()
    monkeypatch.delenv("COURSE_OFFLINE")
    assert downloads_allowed()
