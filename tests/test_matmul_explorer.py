"""The operation mode: measured costs agree with the cost model, and the widget hides the answer until asked."""
import pytest

from lazy import UNSHARDED, lazy

dtensor = lazy("tensorflow.experimental.dtensor")
make_mesh = lazy("course_utils.make_mesh")
matmul_explorer = lazy("course_utils.matmul_explorer.matmul_explorer")
measure_matmul = lazy("course_utils.matmul_explorer.measure_matmul")

U = UNSHARDED
CASES = [(["batch", U], [U, U]), (["batch", U], [U, "model"]), (["batch", "model"], ["model", U]),
         (["batch", "model"], [U, "model"]), (["model", U], [U, "batch"])]


@pytest.fixture(scope="module")
def mesh(cpus8):
    return make_mesh([("batch", 4), ("model", 2)])


@pytest.mark.parametrize("x_specs, w_specs", CASES, ids=str)
def test_measured_costs_agree_with_the_prediction(mesh, x_specs, w_specs):
    measured = measure_matmul(x_specs, w_specs, mesh, x_shape=(8, 8), w_shape=(8, 4))
    assert measured.ok and measured.agrees
    assert measured.y_specs == measured.predicted.output_specs


def test_contracted_axis_split_over_the_mesh_model(mesh):
    measured = measure_matmul(["batch", "model"], ["model", U], mesh)
    assert measured.forward == [("all-reduce", ("model",), 32, 32.0)]
    assert measured.bytes_held == {"x": 24, "w": 48, "y": 32, "dx": 24, "dw": 48}
    assert "predicted = measured" in measured._repr_html_()


@pytest.mark.parametrize("x_specs, w_specs, words", [
    (["batch", "model"], ["batch", U], "DTensor refuses this"),  # contracted over model in x, batch in w
    (["model", U], [U, U], None),  # fine: 8 rows over model
    (["batch", "batch"], [U, U], "twice"),
    (["batch", "bogus"], [U, U], "not an axis of the mesh"),
])
def test_layouts_that_cannot_multiply_are_explained_not_raised(mesh, x_specs, w_specs, words):
    measured = measure_matmul(x_specs, w_specs, mesh, x_shape=(8, 8), w_shape=(8, 4))
    if words is None:
        assert measured.ok
        return
    assert not measured.ok and not measured.agrees and words in measured.problems[0]
    assert "cannot multiply" in measured._repr_html_()


def test_the_widget_reveals_only_when_asked_and_grades_the_prediction(mesh):
    from course_utils.matmul_explorer import MatmulExplorer

    widget = matmul_explorer(mesh)
    assert isinstance(widget, MatmulExplorer) and widget.measurement is None
    for menu, spec in zip(widget.x_menus + widget.w_menus, ["batch", U, U, "model"]):
        menu.value = spec
    widget.y_guess.value = str(["batch", "model"])
    assert widget.prediction == (str(["batch", "model"]), set())  # no communication predicted
    measured = widget.show()
    assert measured.agrees and measured.forward == []
    assert "✓ right" in str(widget.output.outputs) and "✗" not in str(widget.output.outputs)
    widget.x_menus[1].value = "model"
    assert widget.measurement is None and "Predict first" in str(widget.output.outputs)


def test_a_page_without_a_kernel_gets_the_question_not_the_answer(mesh):
    explorer = matmul_explorer(mesh)
    bundle = explorer._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "Predict y's layout" in bundle["text/html"] and "run the notebook" in bundle["text/html"]
    assert explorer.measurement is None and "all-reduce" not in bundle["text/html"]
