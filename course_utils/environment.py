"""The environment report of the welcome notebook: versions, devices, data, Colab or local.

Each line is a :class:`Finding` with a level: ``ok``; ``note`` (worth knowing, nothing to do);
``warn`` (the course may not behave as described; the advice says what to do); ``FIX`` (a
chapter will fail until it is fixed).
"""
import os
import sys
from dataclasses import dataclass
from importlib import metadata

from course_utils.data import downloads_allowed, mnist_data_dir, mnist_is_prepared
from course_utils.runtime import on_colab, restart_advice
from course_utils.tools.colab_python import VERSION as COLAB_PYTHON  # Colab's, which the Colab-like tests use

__all__ = ["Finding", "TESTED_TENSORFLOW", "environment_report"]

# The TensorFlow versions the test suite runs every notebook with: the pinned set of
# requirements.txt, and Colab's set in requirements-colab.txt (a test keeps these in step).
TESTED_TENSORFLOW = ("2.21", "2.20")
PINNED_PYTHON = (3, 11)
PINNED_JAX = "0.7.2"  # requirements.txt; jax 0.9 and 0.10 aborted in CPU all-reduces on 2 cores, 0.7.2 did not
DEADLOCKING_JAX = (0, 9)
CPU_CHAPTERS = "chapters 1-10 (they split the CPU into 8 virtual devices)"
LEVELS = ("ok", "note", "warn", "FIX")


@dataclass
class Finding:
    """One line of the environment report: what was looked at, what was found, how serious, what to do."""

    name: str
    level: str
    found: str
    advice: str = ""

    @property
    def ok(self):
        """Whether nothing needs fixing (ok, note and warn lines are not blocking)."""
        return self.level != "FIX"

    def __str__(self):
        line = f"[{self.level}] {self.name}: {self.found}"
        return line + (f"\n      -> {self.advice}" if self.level != "ok" and self.advice else "")


def _version(package):
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _minor(version):
    return ".".join(version.split(".")[:2])


def _python(colab):
    version = sys.version.split()[0]
    if sys.version_info[:2] == PINNED_PYTHON:
        return Finding("Python", "ok", version)
    if colab:
        if _minor(version) == COLAB_PYTHON:
            return Finding("Python", "ok", version)
        return Finding("Python", "note", version, "Colab's Python; the course's tests use Colab's packages on Python "
                                                  f"{COLAB_PYTHON}.")
    return Finding("Python", "FIX", version, f"The course is pinned for Python {'.'.join(map(str, PINNED_PYTHON))}: "
                                              f"`python3 course.py lab` with that Python.")


def _tensorflow(tf_version, colab):
    tested = ", ".join(TESTED_TENSORFLOW)
    if _minor(tf_version) == TESTED_TENSORFLOW[0]:
        return Finding("TensorFlow", "ok", tf_version)
    if _minor(tf_version) in TESTED_TENSORFLOW or colab:
        return Finding("TensorFlow", "note", tf_version, f"The course is tested with TensorFlow {tested}; messages "
                                                         f"and timings may differ slightly from the text.")
    return Finding("TensorFlow", "FIX", tf_version, f"Install the pinned set: `python3 course.py lab` "
                                                    f"(TensorFlow {TESTED_TENSORFLOW[0]}).")


def _accelerators(tf):
    gpus, tpus = tf.config.list_physical_devices("GPU"), tf.config.list_physical_devices("TPU")
    if not gpus and not tpus:
        return Finding("accelerators", "ok", "none (the course runs on the CPU)")
    kinds = ", ".join(f"{len(d)} {kind}" for kind, d in (("GPU", gpus), ("TPU", tpus)) if d)
    switch = ("Runtime → Change runtime type → CPU, then run the notebook again" if on_colab()
              else "hide them with CUDA_VISIBLE_DEVICES='' before starting Jupyter")
    return Finding("accelerators", "warn", kinds, f"The course assumes a CPU in {CPU_CHAPTERS}; an accelerator "
                                                  f"changes device names, meshes and timings. Switch: {switch}.")


def _jax():
    """jax for chapter 8: installed? a version that can deadlock on few cores? (no JAX backend is started)"""
    jax, jaxlib = _version("jax"), _version("jaxlib")
    if not jax:
        return Finding("jax (for chapter 8)", "warn", "not installed",
                       f"Only chapter 8 needs it: pip install jax=={PINNED_JAX} (Colab has it), then {restart_advice()}.")
    found = f"jax {jax}, jaxlib {jaxlib or 'not installed'}; KERAS_BACKEND={os.environ.get('KERAS_BACKEND', 'unset')}"
    newer = tuple(int(p) for p in jax.split(".")[:2]) >= DEADLOCKING_JAX
    if newer and (os.cpu_count() or 1) <= 4:
        return Finding("jax (for chapter 8)", "warn", found,
                       f"jax {'.'.join(map(str, DEADLOCKING_JAX))} and newer sometimes deadlock in XLA's CPU all-reduce "
                       f"on machines with few cores (measured on 2 cores); the course pins jax=={PINNED_JAX}.")
    return Finding("jax (for chapter 8)", "ok", found)


def environment_report():
    """Look at what the course needs and return one :class:`Finding` per item.

    Covers Python, TensorFlow, tf_keras, Keras 3 and JAX versions, which Keras ``tf.keras`` is,
    the devices (and any GPU or TPU), whether MNIST can be loaded, and whether this is Colab.
    Printing the list gives a report whose ``FIX`` and ``warn`` lines say what to do.

    Returns:
        A list of :class:`Finding`.

    Example (not run by the doctests: its findings depend on the machine; chapter 0 shows them):
        >>> for finding in environment_report():  # doctest: +SKIP
        ...     print(finding)
    """
    import tensorflow as tf

    colab = on_colab()
    findings = [_python(colab), _tensorflow(tf.__version__, colab)]
    tfk = _version("tf_keras")
    findings.append(Finding("tf_keras (Keras 2, for DTensor + Keras)",
                            "ok" if tfk and _minor(tfk) == _minor(tf.__version__) else "FIX", tfk or "not installed",
                            f"pip install tf_keras~={_minor(tf.__version__)}.0 (the same minor version as TensorFlow), "
                            f"then {restart_advice()}."))
    keras = _version("keras")
    findings.append(Finding("keras (Keras 3)", "ok" if keras else "FIX", keras or "not installed",
                            "pip install keras (TensorFlow installs it)."))
    findings.append(_jax())
    legacy = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
    findings.append(Finding("tf.keras in this kernel", "ok",
                            f"Keras {getattr(tf.keras, '__version__', '?')} "
                            f"({'tf_keras, because TF_USE_LEGACY_KERAS=1' if legacy else 'Keras 3'})"))
    cpus, logical = tf.config.list_physical_devices("CPU"), tf.config.list_logical_devices("CPU")
    findings.append(Finding("devices", "ok" if cpus else "FIX",
                            f"{len(cpus)} physical CPU, {len(logical)} logical CPU(s); {os.cpu_count()} CPU core(s)"))
    findings.append(_accelerators(tf))
    folder = mnist_data_dir()
    prepared, can_download = mnist_is_prepared(folder), downloads_allowed()
    findings.append(Finding(
        "MNIST", "ok" if prepared or can_download else "FIX",
        f"prepared in {folder}" if prepared else
        (f"not in {folder}; will be downloaded on first use" if can_download else f"not found in {folder}"),
        f"Set TFDS_DATA_DIR to a folder holding a prepared mnist/3.0.1 and {restart_advice()}, or, with internet, "
        f"set COURSE_ALLOW_DOWNLOAD=1 to let TFDS download it once."))
    findings.append(Finding("where", "ok", "Google Colab" if colab else "local Jupyter"))
    return findings
