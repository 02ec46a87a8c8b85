import pytest

from course_utils import benchmark
from course_utils.data import mnist_is_prepared


def test_report_has_both_tables_with_ratios():
    text = benchmark.markdown_report([("00_welcome", 4.0, "ok"), ("01_tensors", 6.5, "ok")],
                                     {"single device": [2.0, 1.0, 3.0], "MirroredStrategy": [11.0, 4.0, 30.0]}, 60000, 128)
    assert "| 00_welcome | 4.0 | ok |" in text and "| **total** | **10.5** | |" in text
    assert "| MirroredStrategy | 11.0 | 4.0-30.0 | 5.5x |" in text  # medians compared
    assert "3 epoch(s) each of 60000" in text


@pytest.mark.skipif(not mnist_is_prepared(), reason="set TFDS_DATA_DIR to the prepared MNIST")
def test_strategy_benchmark_runs_all_four_ways_on_a_small_epoch():
    times = benchmark.time_strategies(examples=1024, batch_size=128, epochs=2)
    assert list(times) == ["single device", "MirroredStrategy", "DTensor, manual packing", "DTensorDataset"]
    assert all(len(seconds) == 2 and min(seconds) > 0 for seconds in times.values())


def test_batch_must_divide_over_the_devices(capsys):
    with pytest.raises(SystemExit):
        benchmark.main(["--skip-notebooks", "--batch-size", "100"])
    assert "must divide over the 8 virtual CPUs" in capsys.readouterr().err
