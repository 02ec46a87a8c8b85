"""Loading the real MNIST through TensorFlow Datasets, with clear errors when it is offline."""
import os
from pathlib import Path

from course_utils.runtime import on_colab

__all__ = ["DataUnavailableError", "downloads_allowed", "load_mnist", "mnist_data_dir", "mnist_is_prepared"]

MNIST_VERSION = "3.0.1"


class DataUnavailableError(RuntimeError):
    """MNIST could not be found locally and may not be downloaded here."""


def mnist_data_dir():
    """The folder TFDS reads from: ``$TFDS_DATA_DIR`` if set, else ``~/tensorflow_datasets``.

    Example:
        >>> str(mnist_data_dir()).endswith("tensorflow_datasets")
        True
    """
    return Path(os.environ.get("TFDS_DATA_DIR") or Path.home() / "tensorflow_datasets").expanduser()


def mnist_is_prepared(data_dir=None):
    """Whether a prepared copy of MNIST is in ``data_dir`` (default: :func:`mnist_data_dir`).

    Example:
        >>> mnist_is_prepared("/nonexistent")
        False
    """
    folder = Path(data_dir or mnist_data_dir()) / "mnist" / MNIST_VERSION
    return (folder / "dataset_info.json").is_file()


def downloads_allowed():
    """Whether ``load_mnist`` may download MNIST: on Colab, or locally when ``COURSE_ALLOW_DOWNLOAD=1``;
    never when ``COURSE_OFFLINE=1`` (the tests and the grader set it).

    Example:
        >>> downloads_allowed()  # in the tests, which set COURSE_OFFLINE=1
        False
    """
    if os.environ.get("COURSE_OFFLINE") == "1":
        return False
    return on_colab() or os.environ.get("COURSE_ALLOW_DOWNLOAD") == "1"


def load_mnist(split="train", batch_size=None, shuffle=False, seed=0, data_dir=None, download=None):
    """Load real MNIST with ``tfds.load`` as float32 images in [0, 1] and int64 labels.

    Args:
        split: a TFDS split, with an optional slice: ``"train"``, ``"test"``, ``"train[:5000]"``.
        batch_size: if given, batch the dataset (the last partial batch is dropped so that
            every batch divides evenly over devices).
        shuffle: shuffle the examples before batching, in a new order each epoch that
            ``seed`` makes repeatable.
        seed: the shuffle seed, for repeatable runs.
        data_dir: where the prepared data lives; default ``$TFDS_DATA_DIR`` or ``~/tensorflow_datasets``.
        download: allow TFDS to download MNIST if it is missing. ``None`` means: only on Colab
            or when ``COURSE_ALLOW_DOWNLOAD=1``; never when ``COURSE_OFFLINE=1`` (the tests).

    Returns:
        A ``tf.data.Dataset`` of ``(image, label)`` pairs, images of shape ``(28, 28, 1)``, whose
        auto-shard policy is ``DATA`` (each split is one file, which cannot be sharded by file).

    Raises:
        DataUnavailableError: MNIST is not prepared in the data folder and downloading is not
            allowed (or failed); the message names ``TFDS_DATA_DIR`` and how to fix it.
        ValueError: ``batch_size`` is not a positive integer.

    Example:
        >>> ds = load_mnist("test[:256]", batch_size=128)
        >>> images, labels = next(iter(ds))
        >>> images.shape, images.dtype.name
        (TensorShape([128, 28, 28, 1]), 'float32')
    """
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive whole number or None, got {batch_size!r}.")
    folder = Path(data_dir) if data_dir else mnist_data_dir()
    if download is None:
        download = downloads_allowed()
    if not mnist_is_prepared(folder) and not download:
        raise DataUnavailableError(
            f"MNIST is not prepared in {folder}. Point the environment variable TFDS_DATA_DIR at a "
            f"folder that holds mnist/{MNIST_VERSION} (for example `export TFDS_DATA_DIR=/path/to/"
            f"tensorflow_datasets` before starting Jupyter, or os.environ['TFDS_DATA_DIR'] = ... at "
            f"the top of the notebook), or, with internet, allow a one-time download with "
            f"COURSE_ALLOW_DOWNLOAD=1 or load_mnist(..., download=True)."
        )
    import tensorflow as tf
    import tensorflow_datasets as tfds

    try:
        ds = tfds.load("mnist", split=split, as_supervised=True, data_dir=str(folder), download=download)
    except (OSError, AssertionError, tfds.core.registered.DatasetNotFoundError) as err:
        raise DataUnavailableError(
            f"Could not load MNIST into {folder} ({type(err).__name__}: {err}). If you are offline, "
            f"set TFDS_DATA_DIR to a folder that already holds a prepared mnist/{MNIST_VERSION}."
        ) from err

    def to_float(image, label):
        return tf.cast(image, tf.float32) / 255.0, label

    ds = ds.map(to_float, num_parallel_calls=tf.data.AUTOTUNE).cache()
    if shuffle:
        ds = ds.shuffle(10_000, seed=seed)
    if batch_size is not None:
        ds = ds.batch(batch_size, drop_remainder=True)
    # MNIST is one file per split, so tf.data's default auto-sharding by FILE cannot split it
    # over workers or DTensor replicas ("Could not apply FILE based sharding"); shard by element.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)
