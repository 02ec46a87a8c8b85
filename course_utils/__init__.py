"""Helpers for the hands-on course on distributed training with TensorFlow.

The notebooks first show each idea in plain TensorFlow, then use these helpers to skip the
repeated set-up. The names below load their module (and TensorFlow) on first use, so set
``TF_USE_LEGACY_KERAS`` before touching them where a chapter needs tf_keras; command-line tools
such as ``python -m course_utils.tools.build`` never import TensorFlow.
"""
import importlib

_EXPORTS = {
    "DataUnavailableError": "data",
    "load_mnist": "data",
    "configure_virtual_cpus": "devices",
    "make_mesh": "devices",
    "pack_batch": "packing",
    "plot_history": "plots",
    "visualize_mesh": "viz",
    "visualize_sharding": "viz",
    "explore_layout": "explorer",
    "layout_explorer": "explorer",
    "LocalCluster": "cluster",
    "dtensor_env": "cluster",
    "matmul_cost": "costs",
    "collectives_run_by": "profiling",
    "bytes_per_device": "memory",
    "check_step": "step_check",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'course_utils' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"course_utils.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
