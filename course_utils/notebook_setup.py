"""What a notebook's set-up cell sets before any library is imported, per kind of notebook.

A notebook's metadata ``course.keras`` names its kind, and ``course.dtensor: true`` marks a notebook
that trains with DTensor. The build writes these variables into the set-up cell of every notebook,
and the grader starts each kernel with them, so that a student's edited set-up cell cannot change
which Keras the checkers see.
"""
__all__ = ["DTENSOR_TRAINING", "KERAS_MODES", "setup_environment", "setup_lines", "setup_source"]

KERAS_MODES = {
    "keras3": {},
    "tf_keras": {"TF_USE_LEGACY_KERAS": "1"},
    "keras3-jax": {"KERAS_BACKEND": "jax", "JAX_NUM_CPU_DEVICES": "8"},
}
# DTensor's default pass that combines a step's all-reduces into one makes tf_keras' DTensor
# optimizers apply the previous step's gradients (chapter 5 shows it); switched off, every step is right.
DTENSOR_TRAINING = {"DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION": "0"}
_WHY = {
    "DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION":
        "DTensor's all-reduce combining applies stale gradients (chapter 5): off, before TensorFlow starts",
    "TF_USE_LEGACY_KERAS": "this chapter uses tf_keras (Keras 2); set before TensorFlow is imported",
    "KERAS_BACKEND": "this chapter runs Keras 3 on JAX; set before Keras is imported",
    "JAX_NUM_CPU_DEVICES": "JAX splits the CPU into 8 devices; set before JAX starts",
}


def setup_environment(keras, dtensor=False):
    """The environment variables the set-up cell of a ``keras`` kind of notebook sets (and the
    grader gives its kernel); ``dtensor``: the notebook trains with DTensor (:data:`DTENSOR_TRAINING`).

    Raises:
        ValueError: ``keras`` is not one of :data:`KERAS_MODES`.

    Example:
        >>> setup_environment("tf_keras", dtensor=True)
        {'TF_USE_LEGACY_KERAS': '1', 'DTENSOR_ENABLE_COMBINE_ALL_REDUCES_OPTIMIZATION': '0'}
    """
    if keras not in KERAS_MODES:
        raise ValueError(f"metadata course.keras must be one of {sorted(KERAS_MODES)}, not {keras!r}.")
    return {**KERAS_MODES[keras], **(DTENSOR_TRAINING if dtensor else {})}


def setup_lines(keras, dtensor=False):
    """The set-up cell's lines that set the environment (see :func:`setup_environment`).

    Raises:
        ValueError: ``keras`` is not one of :data:`KERAS_MODES`.

    Example:
        >>> setup_lines("tf_keras")
        ['os.environ["TF_USE_LEGACY_KERAS"] = "1"  # this chapter uses tf_keras (Keras 2); set before TensorFlow is imported']
    """
    return [f'os.environ["{name}"] = "{value}"  # {_WHY[name]}'
            for name, value in setup_environment(keras, dtensor).items()]


def setup_source(keras, config, dtensor=False):
    """The set-up cell's code for a ``keras`` kind of notebook; ``config`` has the course's
    ``repository`` and ``branch`` (``[tool.course]`` of ``pyproject.toml``), from which Colab installs;
    ``dtensor``: the notebook trains with DTensor.

    Raises:
        ValueError: ``keras`` is not one of :data:`KERAS_MODES`.
    """
    lines = [
        "# Set-up, the same in every notebook (stamped by `python3 course.py build`).",
        "# On Colab it installs the course's helper package; on your machine it installs nothing.",
        "import os, sys",
        *setup_lines(keras, dtensor),
        'os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # hide TensorFlow\'s C++ info lines',
        'if "google.colab" in sys.modules:',
        "    import subprocess",
        "    from importlib.metadata import version",
        '    tf_minor = ".".join(version("tensorflow").split(".")[:2])',
        '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", f"tf_keras~={tf_minor}.0",',
        f'                    "course_utils @ git+https://github.com/{config["repository"]}@{config["branch"]}"], check=True)',
    ]
    return "\n".join(lines)
