"""The pictures of pipeline, sequence and expert parallelism."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from course_utils.parallelism_pictures import KINDS, draw_parallelism  # noqa: E402


def test_one_panel_per_kind():
    figure = draw_parallelism()
    assert [ax.get_title().split(":")[0] for ax in figure.axes] == ["pipeline", "sequence / context", "expert"]
    plt.close(figure)


@pytest.mark.parametrize("devices, micro_batches", [(4, 4), (4, 8), (2, 1)])
def test_the_pipeline_bubble_is_the_gpipe_fraction(devices, micro_batches):
    figure = draw_parallelism(["pipeline"], devices=devices, micro_batches=micro_batches)
    bubble = (devices - 1) / (micro_batches + devices - 1)  # idle share of a GPipe schedule
    assert f"{bubble:.0%} of the time" in figure.axes[0].get_title()
    plt.close(figure)


@pytest.mark.parametrize("kwargs, message", [
    ({"kinds": ["tensor"]}, "kinds must be a non-empty list"),
    ({"kinds": []}, "kinds must be a non-empty list"),
    ({"devices": 1}, "devices must be between 2 and 8"),
    ({"micro_batches": 0}, "micro_batches must be between 1 and 8"),
])
def test_bad_input_says_what_to_pass(kwargs, message):
    with pytest.raises(ValueError, match=message):
        draw_parallelism(**kwargs)
    assert "pipeline" in KINDS
