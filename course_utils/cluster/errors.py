"""The errors of a :class:`LocalCluster`; each is a :class:`ClusterError`, so one ``except`` catches them all."""


class ClusterError(RuntimeError):
    """Something went wrong with the processes of a :class:`LocalCluster`."""


class TaskFailedError(ClusterError):
    """A task exited with a non-zero exit code. ``task``, ``exit_code`` and ``log_tail`` say more."""

    def __init__(self, message, task=None, exit_code=None, log_tail=""):
        super().__init__(message)
        self.task, self.exit_code, self.log_tail = task, exit_code, log_tail


class ClusterTimeoutError(ClusterError, TimeoutError):
    """Tasks ran out of time (they were killed) or did not get ready in time. ``tasks`` lists them."""

    def __init__(self, message, tasks=()):
        super().__init__(message)
        self.tasks = list(tasks)


class NetworkNamespaceError(ClusterError):
    """``network="namespaces"`` is not possible here: not Linux, no ``ip`` command, not root, or ``ip`` refused.

    Raised when the cluster is made, before any task starts; the message says what to change.
    """


class SlurmClusterError(ClusterError):
    """A :class:`~course_utils.cluster.slurm_cluster.SlurmCluster` cannot run here (not Linux, not root, Slurm not
    installed), did not start, or a Slurm command failed; the message says what to change."""
