import pytest

from course_utils.tools import benchmark
from course_utils.data import mnist_is_prepared


def test_report_has_both_tables_with_ratios():
    strategies = {"epochs": {"single device": [2.0, 1.0, 3.0], "MirroredStrategy": [11.0, 4.0, 30.0],
                             "DTensorDataset": [3.0, 3.0, 3.0]},
                  "outside the epochs": {"single device": 0.1, "MirroredStrategy": 12.5}}
    text = benchmark.markdown_report([("00_welcome", 4.0, "ok"), ("01_tensors", 6.5, "ok")], strategies, 60000, 128)
    assert "| 00_welcome | 4.0 | ok |" in text and "| **total** | **10.5** | |" in text
    assert "| MirroredStrategy | 11.0 | 4.0-30.0 | 5.5x | 12.5 |" in text  # medians compared
    assert "| DTensorDataset | 3.0 | 3.0-3.0 | 1.5x | (no fit) |" in text
    assert "3 epoch(s) each of 60000" in text


@pytest.mark.skipif(not mnist_is_prepared(), reason="set TFDS_DATA_DIR to the prepared MNIST")
def test_strategy_benchmark_runs_all_four_ways_on_a_small_epoch():
    times = benchmark.time_strategies(examples=1024, batch_size=128, epochs=2)
    assert list(times["epochs"]) == ["single device", "MirroredStrategy", "DTensor, manual packing", "DTensorDataset"]
    assert all(len(seconds) == 2 and min(seconds) > 0 for seconds in times["epochs"].values())
    assert list(times["outside the epochs"]) == ["single device", "MirroredStrategy"]
    assert all(seconds >= 0 for seconds in times["outside the epochs"].values())


def test_batch_must_divide_over_the_devices(capsys):
    with pytest.raises(SystemExit):
        benchmark.main(["--skip-notebooks", "--batch-size", "100"])
    assert "must divide over the 8 virtual CPUs" in capsys.readouterr().err
