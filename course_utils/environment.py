"""The environment check of the welcome notebook: versions, devices, data, Colab or local."""
import os
import sys
from dataclasses import dataclass
from importlib import metadata

from course_utils.data import mnist_data_dir, mnist_is_prepared

__all__ = ["Check", "check_environment"]

EXPECTED_TF_MINOR = "2.21"


@dataclass
class Check:
    """One line of the environment report: what was checked, whether it is fine, what to do."""

    name: str
    ok: bool
    found: str
    fix: str = ""

    def __str__(self):
        line = f"[{'ok' if self.ok else 'FIX'}] {self.name}: {self.found}"
        return line + (f"\n      -> {self.fix}" if not self.ok and self.fix else "")


def _version(package):
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def check_environment():
    """Check what the course needs and return one :class:`Check` per item.

    Covers Python, TensorFlow, tf_keras and Keras 3 versions, which Keras ``tf.keras`` is,
    the devices, whether MNIST can be loaded, and whether this is Colab. Printing the list
    gives a report whose ``FIX`` lines say what to change.

    Returns:
        A list of :class:`Check`.

    Example:
        >>> for check in check_environment():
        ...     print(check)
    """
    import tensorflow as tf

    on_colab = "google.colab" in sys.modules
    checks = [Check("Python", sys.version_info[:2] == (3, 11), sys.version.split()[0],
                    "The course is pinned for Python 3.11; other versions may need other pins.")]
    tf_version = tf.__version__
    checks.append(Check("TensorFlow", on_colab or tf_version.startswith(EXPECTED_TF_MINOR), tf_version,
                        f"Install the pinned set: `python3 course.py lab` (TensorFlow {EXPECTED_TF_MINOR})."))
    tfk = _version("tf_keras")
    tfk_ok = tfk is not None and tfk.split(".")[:2] == tf_version.split(".")[:2]
    checks.append(Check("tf_keras (Keras 2, for DTensor + Keras)", tfk_ok, tfk or "not installed",
                        f"pip install tf_keras~={'.'.join(tf_version.split('.')[:2])}.0 (same minor version as TensorFlow)."))
    checks.append(Check("keras (Keras 3)", _version("keras") is not None, _version("keras") or "not installed",
                        "pip install keras (TensorFlow installs it)."))
    legacy = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
    keras_version = tf.keras.__version__ if hasattr(tf.keras, "__version__") else "?"
    checks.append(Check("tf.keras in this kernel", True,
                        f"Keras {keras_version} ({'tf_keras, because TF_USE_LEGACY_KERAS=1' if legacy else 'Keras 3'})"))
    cpus = tf.config.list_physical_devices("CPU")
    gpus = tf.config.list_physical_devices("GPU")
    logical = tf.config.list_logical_devices("CPU")
    checks.append(Check("devices", bool(cpus),
                        f"{len(cpus)} physical CPU, {len(gpus)} GPU, {len(logical)} logical CPU(s); "
                        f"{os.cpu_count()} CPU core(s)"))
    folder = mnist_data_dir()
    prepared = mnist_is_prepared(folder)
    can_download = on_colab or os.environ.get("COURSE_ALLOW_DOWNLOAD") == "1"
    checks.append(Check("MNIST", prepared or can_download,
                        f"prepared in {folder}" if prepared else
                        (f"not in {folder}; will be downloaded on first use" if can_download else f"not found in {folder}"),
                        "Set TFDS_DATA_DIR to a folder holding a prepared mnist/3.0.1 and restart the kernel, "
                        "or, with internet, set COURSE_ALLOW_DOWNLOAD=1 to let TFDS download it once."))
    checks.append(Check("where", True, "Google Colab" if on_colab else "local Jupyter"))
    return checks
