"""Local clusters: real TensorFlow worker / parameter-server processes on this machine.

:class:`LocalCluster` starts one Python process per task of a cluster spec, all running the same
script. Each process gets its own ``TF_CONFIG`` (the shared cluster spec plus its own task), its
output goes to a log file, every process has a time limit, and no process outlives the cluster:
leaving the ``with`` block, an exception, a KeyboardInterrupt, the garbage collector, the end of
the Python process and even a crash of the notebook kernel all end them. With
``network="namespaces"`` (Linux, as root) every task runs on a "host" of its own: a network
namespace with its own address on a virtual bridge.

One concern a module:

- ``local_cluster``: :class:`LocalCluster`, which makes the parts below and hands each call on;
- ``spec``: :class:`Task`, :func:`find_free_ports`, the tasks, their addresses and TF_CONFIG;
- ``task_env``: checking ``env`` and ``task_env``, and :func:`dtensor_env`;
- ``logs``: the log folder, and reading logs without TensorFlow's info lines;
- ``processes``: starting, restarting, killing and stopping the tasks' processes;
- ``process_group``: one process that dies with its parent (and joins its namespace), killing
  its group, exit codes in words;
- ``namespaces``: ``TaskNetwork``, the bridge, namespaces and cables of ``network="namespaces"``;
- ``watchdog``: the thread that kills processes at their time limit;
- ``waiting``: ``wait`` and ``wait_until_ready``, with errors that end with the logs;
- ``errors``: :class:`ClusterError`, :class:`TaskFailedError`, :class:`ClusterTimeoutError`,
  :class:`NetworkNamespaceError`.

Example (not run by the doctests: it needs a worker script; tests/test_cluster.py runs clusters):
    >>> with LocalCluster("worker.py", {"worker": 2}, timeout=60) as cluster:  # doctest: +SKIP
    ...     print(cluster.tf_config("worker", 0))
    ...     exit_codes = cluster.wait()
"""
from .errors import ClusterError, ClusterTimeoutError, NetworkNamespaceError, TaskFailedError
from .local_cluster import LocalCluster
from .spec import Task, find_free_ports
from .task_env import dtensor_env

__all__ = [
    "ClusterError",
    "ClusterTimeoutError",
    "LocalCluster",
    "NetworkNamespaceError",
    "Task",
    "TaskFailedError",
    "dtensor_env",
    "find_free_ports",
]
