import os

import pytest

from course_utils import DataUnavailableError, load_mnist
from course_utils.data import mnist_data_dir, mnist_is_prepared
from lazy import lazy

tf = lazy("tensorflow")

needs_mnist = pytest.mark.skipif(not mnist_is_prepared(), reason="set TFDS_DATA_DIR to the prepared MNIST")


@needs_mnist
def test_batches_are_float_images_and_int_labels():
    images, labels = next(iter(load_mnist("test[:300]", batch_size=128)))
    assert images.shape == (128, 28, 28, 1) and images.dtype == tf.float32
    assert labels.dtype == tf.int64
    assert 0.0 <= float(tf.reduce_min(images)) and float(tf.reduce_max(images)) == 1.0
    assert sum(1 for _ in load_mnist("test[:300]", batch_size=128)) == 2  # the partial batch is dropped


@needs_mnist
def test_shuffle_is_repeatable_with_a_seed():
    first = [int(l) for _, l in load_mnist("test[:64]", shuffle=True, seed=3).take(10)]
    again = [int(l) for _, l in load_mnist("test[:64]", shuffle=True, seed=3).take(10)]
    plain = [int(l) for _, l in load_mnist("test[:64]").take(10)]
    assert first == again != plain


def test_offline_without_data_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_OFFLINE", "1")
    with pytest.raises(DataUnavailableError, match=r"MNIST is not prepared in .*TFDS_DATA_DIR"):
        load_mnist(data_dir=tmp_path)


def test_data_dir_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
    assert mnist_data_dir() == tmp_path and not mnist_is_prepared()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_batch_size(bad):
    with pytest.raises(ValueError, match="batch_size must be a positive whole number"):
        load_mnist(batch_size=bad)


@needs_mnist
def test_shards_by_element_because_mnist_is_one_file():
    policy = load_mnist("test[:8]").options().experimental_distribute.auto_shard_policy
    assert policy == tf.data.experimental.AutoShardPolicy.DATA
