"""Local clusters: real TensorFlow worker / parameter-server processes on this machine.

:class:`LocalCluster` starts one Python process per task of a cluster spec, all running the same
script. Each process gets its own ``TF_CONFIG`` (the shared cluster spec plus its own task), its
output goes to a log file, every process has a time limit, and no process outlives the cluster:
leaving the ``with`` block, an exception, a KeyboardInterrupt, the garbage collector, the end of
the Python process and even a crash of the notebook kernel all end them. With
``network="namespaces"`` (Linux, as root) every task runs on a "host" of its own: a network
namespace with its own address on a virtual bridge. :class:`SlurmCluster` starts a real Slurm
cluster on this machine (as root), each node on such a "host" of its own.

One concern a module:

- ``local_cluster``: :class:`LocalCluster`, which makes the parts below and hands each call on;
- ``spec``: :class:`Task`, :func:`find_free_ports`, the tasks, their addresses and TF_CONFIG;
- ``task_env``: checking ``env`` and ``task_env``, and :func:`dtensor_env`;
- ``data_service``: :func:`data_service_env` and :func:`dispatcher_target`, for a tf.data service
  (a dispatcher and workers) run as a cluster;
- ``logs``: the log folder, and reading logs without TensorFlow's info lines;
- ``processes``: starting, restarting, killing and stopping the tasks' processes;
- ``process_group``: one process that dies with its parent (and joins its namespace), killing
  its group, exit codes in words;
- ``namespaces``: ``TaskNetwork``, the bridge, namespaces and cables of ``network="namespaces"``;
- ``watchdog``: the thread that kills processes at their time limit;
- ``waiting``: ``wait`` and ``wait_until_ready``, with errors that end with the logs;
- ``slurm``: the batch script of a Slurm job, and the ``TF_CONFIG`` each task builds;
- ``slurm_cluster``: :class:`SlurmCluster`, munged, slurmctld and a slurmd per node (chapter 11);
- ``kubernetes``: the TFJob manifest of a Kubeflow job, and the ``TF_CONFIG`` of each pod;
- ``errors``: :class:`ClusterError`, :class:`TaskFailedError`, :class:`ClusterTimeoutError`,
  :class:`NetworkNamespaceError`, :class:`SlurmClusterError`.

Example (not run by the doctests: it needs a worker script; tests/test_cluster.py runs clusters):
    >>> with LocalCluster("worker.py", {"worker": 2}, timeout=60) as cluster:  # doctest: +SKIP
    ...     print(cluster.tf_config("worker", 0))
    ...     exit_codes = cluster.wait()
"""
from .data_service import data_service_env, dispatcher_target
from .errors import ClusterError, ClusterTimeoutError, NetworkNamespaceError, SlurmClusterError, TaskFailedError
from .local_cluster import LocalCluster
from .slurm_cluster import SlurmCluster
from .spec import Task, find_free_ports
from .task_env import dtensor_env

__all__ = [
    "ClusterError",
    "ClusterTimeoutError",
    "LocalCluster",
    "NetworkNamespaceError",
    "SlurmCluster",
    "SlurmClusterError",
    "Task",
    "TaskFailedError",
    "data_service_env",
    "dispatcher_target",
    "dtensor_env",
    "find_free_ports",
]
