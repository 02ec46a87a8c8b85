"""Every notebook opens with the Colab badge and set-up cell made from the one configured repository."""
from pathlib import Path

import nbformat
import pytest

from course_utils import build

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for folder in build.FOLDERS for p in (ROOT / folder).glob("*.ipynb"))


def test_there_are_notebooks():
    assert any(p.parent.name == "notebooks" for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_badge_and_setup_cells_agree_with_the_config(path):
    config = build.course_config(ROOT)
    nb = nbformat.read(path, as_version=4)
    relative = path.relative_to(ROOT).as_posix()
    badge, setup = nb.cells[0], nb.cells[1]
    assert badge.id == build.BADGE_ID and badge.source == build.badge_source(relative, config)
    assert f"github/{config['repository']}/blob/{config['branch']}/{relative}" in badge.source
    assert setup.id == build.SETUP_ID and setup.source == build.setup_source(nb.metadata["course"]["keras"], config)
    assert isinstance(nb.metadata["course"]["chapter"], int)


def test_notebooks_are_clean_and_exercises_in_sync():
    assert build.main(["--check"]) == 0, "run `python -m course_utils.build` and commit the result"


def test_exercise_replaces_solution_blocks_with_placeholders():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "def f():\n    # BEGIN SOLUTION  # PLACEHOLDER: return None\n    return 42\n    # END SOLUTION\n"
        "# BEGIN SOLUTION\nx = 1\n# END SOLUTION\nprint(x)")]
    assert build.make_exercise(nb).cells[0].source == (
        "def f():\n    return None  # YOUR CODE HERE\n...  # YOUR CODE HERE\nprint(x)")


def test_setup_cell_sets_legacy_keras_only_for_tf_keras_chapters():
    config = {"repository": "owner/name", "branch": "main"}
    assert 'TF_USE_LEGACY_KERAS"] = "1"' in build.setup_source("tf_keras", config)
    assert "TF_USE_LEGACY_KERAS" not in build.setup_source("keras3", config)
    assert "git+https://github.com/owner/name@main" in build.setup_source("keras3", config)
    with pytest.raises(ValueError, match="must be one of 'tf_keras', 'keras3', 'keras3-jax'"):
        build.setup_source("keras2", config)


def test_setup_cell_of_a_jax_chapter_picks_the_backend_and_devices_before_any_import():
    config = {"repository": "owner/name", "branch": "main"}
    source = build.setup_source("keras3-jax", config)
    assert 'os.environ["KERAS_BACKEND"] = "jax"' in source and 'os.environ["JAX_NUM_CPU_DEVICES"] = "8"' in source
    assert "TF_USE_LEGACY_KERAS" not in source and "import jax" not in source and "import keras" not in source
    assert "KERAS_BACKEND" not in build.setup_source("keras3", config)


def test_clean_strips_outputs_and_personal_metadata():
    nb = nbformat.v4.new_notebook(metadata={"course": {"chapter": 1, "keras": "keras3"}, "widgets": {}, "colab": {}})
    cell = nbformat.v4.new_code_cell("1", execution_count=3, outputs=[nbformat.v4.new_output("stream", text="1")])
    cell.metadata = {"scrolled": True, "tags": ["x"]}
    nb.cells = [cell]
    cleaned = build.clean(nb)
    assert set(cleaned.metadata) == {"course", "kernelspec"}
    assert cleaned.cells[0].outputs == [] and cleaned.cells[0].execution_count is None
    assert cleaned.cells[0].metadata == {"tags": ["x"]}


def test_command_line_tools_do_not_import_tensorflow():
    import subprocess
    import sys

    code = "import sys, course_utils.build; print('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
