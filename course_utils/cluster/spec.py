"""The cluster spec of a :class:`LocalCluster`: its jobs and tasks, their addresses, and what each task's process gets."""
import json
import re
import socket
from collections import namedtuple

from .task_env import check_env, resolve_task_env

# TensorFlow's cluster specs accept job names like these (lower case, digits, underscores).
_JOB_NAME = re.compile(r"[a-z][a-z0-9_]*")
# Jobs that TensorFlow's strategies allow at most once in a cluster.
_SINGLE_TASK_JOBS = ("chief", "evaluator")


class Task(namedtuple("Task", ["job", "index"])):
    """One task of a cluster: its job name and index, e.g. ``Task("worker", 1)``.

    It is a tuple, so ``cluster.wait()[("worker", 1)]`` works too.
    """

    __slots__ = ()

    def __str__(self):
        return f"{self.job} {self.index}"


def find_free_ports(n):
    """Ask the operating system for ``n`` different TCP ports that are free right now.

    Each port comes from binding a socket to port 0, which makes the kernel pick an unused one.
    The sockets stay open until all ``n`` are chosen, so the ports are all different. They bind
    to every interface because TensorFlow's gRPC server listens on ``0.0.0.0:<port>``.

    A small race remains: the sockets are closed before the processes start, and in that gap
    (usually well under a second) another program could take one of the ports. The task whose
    port was taken then fails to start its server, and :meth:`LocalCluster.wait` reports it with
    its log; starting the cluster again picks new ports.

    Args:
        n: how many ports (a positive int).

    Returns:
        A list of ``n`` distinct port numbers.

    Raises:
        ValueError: ``n`` is not a positive integer.

    Example:
        >>> ports = find_free_ports(3)
        >>> len(set(ports))
        3
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"find_free_ports(n) needs a positive whole number, got {n!r}.")
    sockets = []
    try:
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _check_jobs(jobs):
    if not isinstance(jobs, dict) or not jobs:
        raise ValueError(f"jobs must be a non-empty dict of task counts such as "
                         f"{{'worker': 2, 'ps': 1}}, got {jobs!r}.")
    for job, count in jobs.items():
        if not isinstance(job, str) or not _JOB_NAME.fullmatch(job):
            raise ValueError(f"The job name {job!r} is not valid: use lower-case letters, digits "
                             f"and underscores, starting with a letter (e.g. 'worker', 'ps').")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"The job {job!r} has {count!r} tasks; every job needs a positive "
                             f"whole number of tasks. Remove the job or give it at least 1 task.")
        if job in _SINGLE_TASK_JOBS and count > 1:
            raise ValueError(f"A cluster has at most one {job}, but {job!r} has {count} tasks. "
                             f"Use {{'{job}': 1}} and put the other tasks in 'worker'.")
    return dict(jobs)


class ClusterSpec:
    """The jobs of a :class:`LocalCluster`, a free port for every task, and each task's environment.

    (The course's own class; ``tf.train.ClusterSpec`` takes the dict :attr:`cluster_spec` returns.)
    :class:`LocalCluster` makes one from its options, which it checks, and picks the ports once:
    every start and restart of the cluster uses the same addresses.

    Args:
        jobs, not_started, env, task_env, tf_config, host: the options of :class:`LocalCluster`.
        hosts: None, or a function that takes the started tasks and returns ``{task: host}`` for
            those that have a host of their own (such as
            :meth:`~course_utils.cluster.namespaces.TaskNetwork.assign`); the others get ``host``.

    Raises:
        ValueError: a job, ``not_started``, ``env`` or ``task_env`` is invalid; the message says
            what to change.

    Example:
        >>> spec = ClusterSpec({"worker": 2}, not_started=(), env={}, task_env=None,
        ...                    tf_config=True, host="127.0.0.1")
        >>> spec.started_tasks
        [Task(job='worker', index=0), Task(job='worker', index=1)]
    """

    def __init__(self, jobs, *, not_started, env, task_env, tf_config, host, hosts=None):
        self.jobs = _check_jobs(jobs)
        self.not_started = (not_started,) if isinstance(not_started, str) else tuple(not_started)
        for job in self.not_started:
            self.check_job_name(job, "not_started")
        if set(self.not_started) >= set(self.jobs):
            raise ValueError(
                f"not_started={list(self.not_started)} leaves no job to start. Keep at least one "
                f"job of {list(self.jobs)} out of not_started."
            )
        self.env = check_env(env or {}, "env")
        self.tf_config_enabled = bool(tf_config)
        self.host = host
        own_hosts = hosts(self.started_tasks) if hosts else {}
        ports = iter(find_free_ports(sum(self.jobs.values())))
        self._addresses = {job: [f"{own_hosts.get(Task(job, i), host)}:{next(ports)}" for i in range(count)]
                           for job, count in self.jobs.items()}
        self._task_env = resolve_task_env(task_env, self)

    # ----------------------------------------------------------------- looking tasks up
    def check_job_name(self, job, where):
        """Raise ValueError, naming the option ``where``, unless ``job`` is a job of the spec."""
        if job not in self.jobs:
            raise ValueError(f"{where} names the job {job!r}, which is not in the cluster spec; "
                             f"the jobs are {list(self.jobs)}.")

    def task(self, job, index=0):
        """The :class:`Task` ``(job, index)``; ValueError if the spec has no such task."""
        if job not in self.jobs:
            raise ValueError(f"There is no job {job!r} in this cluster; the jobs are {list(self.jobs)}.")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.jobs[job]:
            raise ValueError(f"The job {job!r} has tasks 0..{self.jobs[job] - 1}, so index {index!r} "
                             f"does not exist.")
        return Task(job, index)

    def started_task(self, job, index=0):
        """Like :meth:`task`, and ValueError if the task's job is in ``not_started``."""
        task = self.task(job, index)
        if task.job in self.not_started:
            raise ValueError(f"{task} is listed in not_started: this cluster does not run a process for it.")
        return task

    def select(self, jobs):
        """The started tasks of ``jobs`` (a job name or a list of them; None: every started task)."""
        if jobs is None:
            return self.started_tasks
        names = [jobs] if isinstance(jobs, str) else list(jobs)
        for job in names:
            self.check_job_name(job, "jobs")
            if job in self.not_started:
                raise ValueError(f"The job {job!r} is in not_started: this cluster runs no process for it.")
        return [t for t in self.started_tasks if t.job in names]

    # ----------------------------------------------------------------- the spec itself
    @property
    def cluster_spec(self):
        """The cluster spec ``{job: ["host:port", ...]}``, the same in every process.

        The host is ``127.0.0.1``, unless the cluster was made with another ``host`` or with
        ``network="namespaces"`` (then every started task has an address of its own).

        Example (not run by the doctests: it needs a cluster):
            >>> tf.train.ClusterSpec(cluster.cluster_spec)  # e.g. for a SimpleClusterResolver  # doctest: +SKIP
        """
        return {job: list(addresses) for job, addresses in self._addresses.items()}

    @property
    def tasks(self):
        """Every task of the cluster spec, including ``not_started`` ones, in spec order.

        Example (not run by the doctests: it needs a worker script):
            >>> LocalCluster("worker.py", {"chief": 1, "worker": 2}, not_started="chief").tasks  # doctest: +SKIP
            [Task(job='chief', index=0), Task(job='worker', index=0), Task(job='worker', index=1)]
        """
        return [Task(job, i) for job, count in self.jobs.items() for i in range(count)]

    @property
    def started_tasks(self):
        """The tasks this cluster runs as processes (all but the ``not_started`` jobs).

        Example (not run by the doctests: it needs a worker script):
            >>> LocalCluster("worker.py", {"chief": 1, "worker": 2}, not_started="chief").started_tasks  # doctest: +SKIP
            [Task(job='worker', index=0), Task(job='worker', index=1)]
        """
        return [t for t in self.tasks if t.job not in self.not_started]

    def address(self, job, index=0):
        """The ``host:port`` of one task, e.g. ``cluster.address("ps", 0)``.

        Args:
            job, index: the task (``index`` defaults to 0).

        Raises:
            ValueError: there is no such task.

        Example (not run by the doctests: it needs a cluster):
            >>> cluster.address("worker", 1)  # doctest: +SKIP
            '127.0.0.1:40123'
        """
        task = self.task(job, index)
        return self._addresses[task.job][task.index]

    def tf_config(self, job, index=0):
        """The ``TF_CONFIG`` of one task as a dict: the cluster spec and the task's type and index.

        Args:
            job, index: the task (``index`` defaults to 0).

        Raises:
            ValueError: there is no such task.

        Example (not run by the doctests: it needs a cluster):
            >>> cluster.tf_config("worker", 1)  # doctest: +SKIP
            {'cluster': {'worker': ['127.0.0.1:40122', '127.0.0.1:40123']}, 'task': {'type': 'worker', 'index': 1}}
        """
        task = self.task(job, index)
        return {"cluster": self.cluster_spec, "task": {"type": task.job, "index": task.index}}

    def environment(self, job, index=0):
        """The environment variables this cluster adds for one started task (not all of ``os.environ``).

        Args:
            job, index: the task (``index`` defaults to 0).

        Raises:
            ValueError: there is no such task, or it is not started by this cluster.

        Example (not run by the doctests: it needs a cluster):
            >>> cluster.environment("worker", 0)["TF_CONFIG"]  # doctest: +SKIP
            '{"cluster": {...}, "task": {"type": "worker", "index": 0}}'
        """
        task = self.started_task(job, index)
        extra = {"PYTHONUNBUFFERED": "1", **self.env, **self._task_env[task]}
        if self.tf_config_enabled:
            extra["TF_CONFIG"] = json.dumps(self.tf_config(*task))
        return extra
