import ipywidgets as widgets
import pytest

from lazy import UNSHARDED, lazy

dtensor = lazy("tensorflow.experimental.dtensor")
explore_layout = lazy("course_utils.explorer.explore_layout")
layout_explorer = lazy("course_utils.explorer.layout_explorer")

U = UNSHARDED


def only_problem(*args, **kwargs):
    """Run explore_layout, check it refused the choice with exactly one explanation, return it."""
    from course_utils.explorer import LayoutExploration

    result = explore_layout(*args, **kwargs)
    assert isinstance(result, LayoutExploration) and not result.ok
    assert result.picture is None and result.layout is None
    assert len(result.problems) == 1, result.problems
    assert str(result).startswith("This layout does not work:\n- ")
    return result.problems[0]


# --- choices that work ---------------------------------------------------------------------

def test_a_2d_layout_gets_a_real_layout_and_picture(cpus8):
    from course_utils.viz import ShardingPicture

    result = explore_layout((4, 2), ("batch", "model"), (8, 6), ("batch", "model"))
    assert result.ok and result.problems == []
    assert isinstance(result.picture, ShardingPicture)
    assert result.layout.sharding_specs == ["batch", "model"]
    assert result.mesh.shape() == [4, 2] and result.shard_shape == (2, 3)
    assert "sharding specs ['batch', 'model']" in str(result) and "mesh batch=4 x model=2" in str(result)
    assert "<table" in result._repr_html_()


def test_text_input_as_typed_in_the_widget(cpus8):
    result = explore_layout("4, 2", "batch, model", "8, 6", "batch, unsharded")
    assert result.ok and result.layout.sharding_specs == ["batch", U] and result.shard_shape == (2, 6)
    assert result.picture.replicated_over == ["model"]


def test_1d_mesh_rank_3_tensor_and_none_for_unsharded(cpus8):
    result = explore_layout(8, "x", (16, 4, 6), ["x", None, "UNSHARDED"])
    assert result.ok and result.layout.sharding_specs == ["x", U, U] and result.shard_shape == (2, 4, 6)


def test_fully_replicated_and_scalar(cpus8):
    assert explore_layout("2, 2", "a, b", "3, 5", "unsharded, unsharded").picture.replicated_over == ["a", "b"]
    assert explore_layout("8", "x", "", "").shard_shape == ()


# --- choices that do not work: each is explained, none raises -----------------------------

def test_not_divisible_names_axis_size_and_mesh_axis(cpus8):
    problem = only_problem("4, 2", "batch, model", "6, 6", "batch, unsharded")
    assert problem.startswith("Tensor axis 0 has size 6, which mesh axis 'batch' (size 4) does not divide evenly.")
    assert "multiple of 4" in problem and "'unsharded'" in problem


def test_mesh_axis_used_twice(cpus8):
    problem = only_problem("4, 2", "batch, model", "8, 8", "batch, batch")
    assert problem.startswith("Mesh axis 'batch' shards tensor axes 0 and 1.")
    assert "at most one tensor axis" in problem


def test_unknown_mesh_axis(cpus8):
    problem = only_problem("4, 2", "batch, model", "8, 8", "batch, modle")
    assert problem.startswith("The sharding spec 'modle' for tensor axis 1 is not a mesh axis.")
    assert "The mesh axes are 'batch', 'model'" in problem


def test_rank_mismatch(cpus8):
    problem = only_problem("4, 2", "batch, model", "8, 8, 8", "batch, model")
    assert problem.startswith("The tensor has rank 3 (shape (8, 8, 8)) but 2 sharding spec(s) were given")
    assert "one spec per tensor axis" in problem


def test_mesh_bigger_than_the_devices(cpus8):
    problem = only_problem("4, 4", "batch, model", "8, 8", "batch, model")
    assert problem.startswith("A mesh of shape 4 x 4 needs 16 devices, but only 8 exist.")
    assert "at most 8 (for example 4 x 2)" in problem
    assert only_problem("8", "x", "8", "x", n_devices=4).startswith("A mesh of shape 8 needs 8 devices, but only 4 exist.")


def test_more_devices_claimed_than_exist_is_explained_not_raised(cpus8):
    problem = only_problem("16", "x", "16", "x", n_devices=16)
    assert problem.startswith("This choice could not be built:") and "only 8 logical CPU(s)" in problem


def test_duplicated_axis_names(cpus8):
    problem = only_problem("4, 2", "batch, batch", "8, 8", "batch, unsharded")
    assert problem.startswith("The mesh axis name 'batch' is used 2 times.")


def test_empty_axis_name(cpus8):
    assert only_problem("4, 2", "batch, ", "8, 8", "batch, unsharded").startswith("Mesh axis 1 has an empty name.")


def test_reserved_and_unusual_axis_names(cpus8):
    assert "DTensor reserves it" in only_problem("4, 2", "batch, unsharded", "8, 8", "batch, unsharded")
    # A comma in a name makes TensorFlow crash when it parses the layout back: refuse it early.
    assert "is not a plain word" in only_problem("4, 2", ["a,b", "c"], "8, 8", "unsharded, unsharded")


def test_names_do_not_match_mesh_dimensions(cpus8):
    problem = only_problem("4, 2", "batch", "8, 8", "batch, unsharded")
    assert problem.startswith("The mesh shape (4, 2) has 2 dimension(s) but 1 axis name(s) were given ('batch').")


@pytest.mark.parametrize("mesh_shape, tensor_shape, specs, expected", [
    ("4, x", "8, 8", "batch, unsharded", "The mesh shape must be whole numbers separated by commas, such as '4, 2'; 'x' is not"),
    ("", "8, 8", "batch, unsharded", "The mesh shape is empty"),
    ("4, 0", "8, 8", "batch, unsharded", "Mesh axis 'model' has size 0."),
    ("4, 2", "0, 8", "batch, unsharded", "Tensor axis 0 has size 0."),
    ("4, 2", "8, 8", "batch,", "One of the sharding specs is empty; write 'unsharded'"),
])
def test_malformed_values(cpus8, mesh_shape, tensor_shape, specs, expected):
    assert only_problem(mesh_shape, "batch, model", tensor_shape, specs).startswith(expected)


def test_several_problems_are_all_listed_and_nothing_raises(cpus8):
    result = explore_layout(None, None, 2.5, [7])
    assert not result.ok and len(result.problems) == 4
    assert "The mesh shape should be a list or comma-separated text such as '4, 2', not None." in result.problems
    assert "Each sharding spec is a mesh axis name or 'unsharded', not 7." in result.problems
    assert "This layout does not work" in result._repr_html_()


# --- the widget ---------------------------------------------------------------------------

def test_widget_builds_without_a_frontend_and_follows_its_values(cpus8):
    ui = layout_explorer()
    assert isinstance(ui, widgets.Widget) and isinstance(ui, widgets.VBox)
    assert ui.result.ok and ui.sharding_specs == ["batch", U]
    assert "text/html" in ui.output.outputs[0]["data"]

    ui.tensor_shape.value = "6, 6"
    assert "does not divide evenly" in ui.result.problems[0]
    assert "does not divide evenly" in ui.output.outputs[0]["data"]["text/plain"]

    ui.tensor_shape.value = "8, 6, 2"  # one menu per tensor axis, earlier picks kept
    assert ui.sharding_specs == ["batch", U, U] and ui.result.ok
    ui.spec_row.children[2].value = "model"
    assert ui.result.shard_shape == (2, 6, 1)

    ui.axis_names.value = "data, model"  # a renamed axis drops out of the menus
    assert ui.sharding_specs == [U, U, "model"] and ui.spec_row.children[0].options == (U, "data", "model")

    ui.mesh_shape.value = "16"
    assert not ui.result.ok and len(ui.output.outputs) == 1


def test_a_page_without_a_kernel_gets_the_first_state_as_a_picture(cpus8):
    bundle = layout_explorer("4, 2", "batch, model", "8, 6", ("batch", "unsharded"))._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle  # JupyterLab shows the live widget
    assert "run the notebook to change its controls" in bundle["text/html"]
    assert "tensor 8, 6" in bundle["text/html"] and "<table" in bundle["text/html"]
