import pytest

from course_utils import plot_history


def test_train_and_test_curves_share_a_panel():
    fig = plot_history({"loss": [0.9, 0.5], "test_loss": [1.0, 0.6], "accuracy": [0.7, 0.9], "val_accuracy": [0.6, 0.8]})
    loss_ax, acc_ax = fig.axes
    assert [line.get_label() for line in loss_ax.get_lines()] == ["train", "test"]
    assert [line.get_label() for line in acc_ax.get_lines()] == ["train", "val"]


def test_accepts_a_keras_history():
    class History:
        history = {"loss": [1.0, 0.5, 0.2]}

    assert len(plot_history(History()).axes) == 1


def test_bad_histories():
    with pytest.raises(ValueError, match="at least one metric"):
        plot_history({})
    with pytest.raises(ValueError, match="lengths differ"):
        plot_history({"loss": [1, 2], "test_loss": [1]})
