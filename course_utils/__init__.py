"""Helpers for the hands-on course on distributed training with TensorFlow.

The notebooks first show each idea in plain TensorFlow, then use these helpers to skip the
repeated set-up. Import this package after setting ``TF_USE_LEGACY_KERAS`` (where a chapter
needs tf_keras): it imports TensorFlow.
"""
from course_utils.data import DataUnavailableError, load_mnist
from course_utils.devices import configure_virtual_cpus, make_mesh
from course_utils.packing import pack_batch
from course_utils.plots import plot_history
from course_utils.viz import visualize_mesh, visualize_sharding

__all__ = [
    "DataUnavailableError",
    "configure_virtual_cpus",
    "load_mnist",
    "make_mesh",
    "pack_batch",
    "plot_history",
    "visualize_mesh",
    "visualize_sharding",
]
