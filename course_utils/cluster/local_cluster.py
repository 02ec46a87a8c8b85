"""The class :class:`LocalCluster`: it makes its parts from its options and hands each call on to one.

Its parts: :class:`~course_utils.cluster.spec.ClusterSpec` (the tasks, their addresses and
environment), :class:`~course_utils.cluster.logs.TaskLogs` (the log files),
:class:`~course_utils.cluster.processes.TaskProcesses` (the processes),
:class:`~course_utils.cluster.waiting.TaskWaiter` (waiting for them) and, with
``network="namespaces"``, :class:`~course_utils.cluster.namespaces.TaskNetwork` (a network
namespace per task). A method of LocalCluster carries the docstring of the part's method that
does its work.
"""
import signal
from operator import attrgetter

from .logs import TaskLogs
from .namespaces import TaskNetwork
from .process_group import describe_exit
from .processes import TaskProcesses
from .spec import ClusterSpec
from .waiting import TaskWaiter


def _documented_by(part_member):
    """Give the decorated LocalCluster member the docstring of the part's member that does its work."""
    def decorate(function):
        function.__doc__ = part_member.__doc__
        return function
    return decorate


class LocalCluster:
    """Start one local process per task of a cluster, each running ``script`` with its ``TF_CONFIG``.

    The constructor checks the spec and picks free ports; :meth:`start` (or entering the ``with``
    block) starts the processes. Every started process:

    - runs ``python script *args`` in its own process group, with ``os.environ`` plus ``env``,
      plus the task's ``task_env``, plus ``TF_CONFIG`` (unless ``tf_config=False``) and
      ``PYTHONUNBUFFERED=1``;
    - writes its stdout and stderr to ``<log_dir>/<job>-<index>.log`` (see :meth:`log`);
    - is killed (SIGKILL) once it has run ``timeout`` seconds, by a watchdog thread;
    - is killed when the cluster stops: on leaving the ``with`` block (also after an exception
      or KeyboardInterrupt), on :meth:`stop`, when the cluster object is garbage-collected, when
      Python exits, and, on Linux, when the process that started it dies (even by SIGKILL;
      strictly, when the *thread* that started it ends, so start clusters from the main thread,
      as notebook cells do).

    Stopping sends SIGTERM, waits ``grace_seconds``, then sends SIGKILL: a
    ``MultiWorkerMirroredStrategy`` worker catches SIGTERM (to save a checkpoint before a
    preemption) and keeps running, so SIGTERM alone is not enough.

    With ``network="namespaces"`` (Linux, as root) every started task runs on a "host" of its
    own: a network namespace with its own interfaces, ports and ``127.0.0.1``, cabled to a
    bridge on a private /24 subnet that no route of the machine uses (e.g. ``10.57.3.0/24``).
    The bridge has the subnet's first address (``.1``, :attr:`host`), which is this process's
    address and that of the ``not_started`` tasks it plays (such as a notebook kernel as
    chief); the started tasks get ``.2``, ``.3``, ... in spec order, and the cluster spec names
    only those addresses, no ``localhost``. A restarted task runs in the same namespace. The
    namespaces, cables and bridge are made with the cluster, deleted when it stops (made again
    on the next start) and whenever the processes are killed (garbage collection, the end of
    Python); those a killed Python left behind are deleted by the next cluster made with
    namespaces. (Where a gRPC proxy is set, by ``grpc_proxy``, ``https_proxy`` or
    ``http_proxy``, list the cluster's addresses in ``no_grpc_proxy``, as for ``127.0.0.1``:
    gRPC proxies them too.)

    Args:
        script: path of the Python script every task runs.
        jobs: the cluster spec as task counts, in the order TF_CONFIG lists them, e.g.
            ``{"chief": 1, "worker": 2, "ps": 1}``. Every process gets the same ordered spec.
        not_started: job names that appear in the cluster spec but are not started, e.g.
            ``["chief"]`` when this Python process (the notebook kernel) plays the chief.
        args: extra command-line arguments for the script (the same for every task; each passed as
            ``str(arg)``, so paths and numbers are fine).
        env: extra environment variables for every process (strings).
        task_env: extra environment per task: a function ``(job, index, cluster_spec) -> dict``
            (for example :func:`dtensor_env`), or a dict whose keys are ``(job, index)`` tuples
            or job names and whose values are dicts.
        tf_config: whether to set ``TF_CONFIG`` in each process (default True).
        timeout: how many seconds each process may run before it is killed (per start).
        grace_seconds: how long :meth:`stop` waits after SIGTERM before it sends SIGKILL.
        log_dir: where the log files go; default a new temporary folder, deleted with its logs
            when the cluster object is garbage-collected or Python exits (a folder you pass stays).
        host: the host name written into the cluster spec; default ``127.0.0.1``. Not with
            ``network="namespaces"``, which gives every task its address.
        network: ``"localhost"`` (default): every task is a process on this machine's network,
            at ``host``; ``"namespaces"``: every started task in a network namespace of its
            own, as described above (Linux, root only).
        python: the Python interpreter; default the one running this code.

    Raises:
        ValueError: the script does not exist, or the spec or any option is invalid; the
            message says what to change.
        NetworkNamespaceError: ``network="namespaces"`` is not possible here (not Linux, no
            ``ip`` command, not root, or ``ip`` refused); the message says what went wrong and
            what to change. It is raised here, before any process starts.

    Example (not run by the doctests: it needs a worker script; tests/test_cluster.py runs clusters):
        >>> with LocalCluster("worker.py", {"worker": 2}, env={"TF_USE_LEGACY_KERAS": "1"}) as cluster:  # doctest: +SKIP
        ...     exit_codes = cluster.wait()  # {Task("worker", 0): 0, Task("worker", 1): 0}
        ...     print(cluster.logs())
        >>> LocalCluster("worker.py", {"worker": 2}, network="namespaces").cluster_spec  # doctest: +SKIP
        {'worker': ['10.57.3.2:40122', '10.57.3.3:40123']}
    """


    def __init__(self, script, jobs, *, not_started=(), args=(), env=None, task_env=None,
                 tf_config=True, timeout=120.0, grace_seconds=1.0, log_dir=None,
                 host=None, network="localhost", python=None):
        # No part refers back to the cluster, so a forgotten cluster is freed at once; then the
        # finalizer of its TaskProcesses kills the processes and deletes the network, and TaskLogs
        # deletes a folder it made.
        if network not in ("localhost", "namespaces"):
            raise ValueError(f"network must be 'localhost' or 'namespaces', got {network!r}.")
        if network == "namespaces" and host is not None:
            raise ValueError(f"host={host!r} does not go with network='namespaces', which gives every task an "
                             f"address of its own; leave host out.")
        self._network = TaskNetwork() if network == "namespaces" else None
        self._spec = ClusterSpec(jobs, not_started=not_started, env=env, task_env=task_env, tf_config=tf_config,
                                 host=self._network.bridge_address if self._network else host or "127.0.0.1",
                                 hosts=self._network and self._network.assign)
        self._logs = TaskLogs(self._spec, log_dir)
        self._processes = TaskProcesses(self._spec, self._logs, script=script, args=args, timeout=timeout,
                                        grace_seconds=grace_seconds, python=python, network=self._network)
        self._waiter = TaskWaiter(self._spec, self._processes, self._logs)
        if self._network:
            self._network.create()  # now, so that an error shows before anything starts

    # The options, as checked (read-only: to change one, make a new cluster).
    script = property(attrgetter("_processes.script"))
    jobs = property(attrgetter("_spec.jobs"))
    not_started = property(attrgetter("_spec.not_started"))
    args = property(attrgetter("_processes.args"))
    env = property(attrgetter("_spec.env"))
    tf_config_enabled = property(attrgetter("_spec.tf_config_enabled"))
    timeout = property(attrgetter("_processes.timeout"))
    grace_seconds = property(attrgetter("_processes.grace_seconds"))
    log_dir = property(attrgetter("_logs.log_dir"))
    host = property(attrgetter("_spec.host"))
    network = property(lambda self: "namespaces" if self._network else "localhost")
    python = property(attrgetter("_processes.python"))

    # ----------------------------------------------------------------- the cluster spec: ClusterSpec
    @property
    @_documented_by(ClusterSpec.cluster_spec)
    def cluster_spec(self):
        return self._spec.cluster_spec

    @property
    @_documented_by(ClusterSpec.tasks)
    def tasks(self):
        return self._spec.tasks

    @property
    @_documented_by(ClusterSpec.started_tasks)
    def started_tasks(self):
        return self._spec.started_tasks

    @_documented_by(ClusterSpec.address)
    def address(self, job, index=0):
        return self._spec.address(job, index)

    @_documented_by(ClusterSpec.tf_config)
    def tf_config(self, job, index=0):
        return self._spec.tf_config(job, index)

    @_documented_by(ClusterSpec.environment)
    def environment(self, job, index=0):
        return self._spec.environment(job, index)

    def namespace(self, job, index=0):
        """The name of a started task's network namespace (``network="namespaces"``), else None.

        Raises:
            ValueError: there is no such task, or it is not started by this cluster.

        Example (not run by the doctests: it needs a running cluster):
            >>> subprocess.run(["ip", "netns", "exec", cluster.namespace("worker", 0), "ip", "-br", "addr"])  # doctest: +SKIP
        """
        task = self._spec.started_task(job, index)
        return self._network and self._network.namespace(task)

    def bytes_sent(self, job, index=0):
        """How many bytes a started task has sent over its cable to the bridge (``network="namespaces"``).

        Everything the task sent to the others goes over that cable: all-reduces, heartbeats and
        gRPC's own messages. Read it while the cluster runs (before the ``with`` block ends).

        Raises:
            ValueError: no such started task, the cluster runs on ``network="localhost"``, or it
                has stopped (its network is deleted then).

        Example (not run by the doctests: it needs a running cluster):
            >>> with cluster:  # doctest: +SKIP
            ...     cluster.wait()
            ...     sent = cluster.bytes_sent("worker", 0)
        """
        task = self._spec.started_task(job, index)
        if self._network is None:
            raise ValueError("bytes_sent counts the traffic of a task's own network namespace; this cluster runs "
                             "with network='localhost', where all tasks share this machine's network. Make it "
                             "with network='namespaces'.")
        return self._network.bytes_sent(task)

    # ----------------------------------------------------------------- processes: TaskProcesses
    @_documented_by(TaskProcesses.start)
    def start(self):
        self._processes.start()
        return self

    @_documented_by(TaskProcesses.restart)
    def restart(self, job=None, index=None):
        self._processes.restart(job, index)
        return self

    @_documented_by(TaskProcesses.kill)
    def kill(self, job, index=0, sig=signal.SIGKILL):
        self._processes.kill(job, index, sig)

    @_documented_by(TaskProcesses.stop)
    def stop(self):
        self._processes.stop()

    def __enter__(self):
        if self._processes.state != "running":
            self.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()
        return False

    @_documented_by(TaskProcesses.pid)
    def pid(self, job, index=0):
        return self._processes.pid(job, index)

    @property
    @_documented_by(TaskProcesses.pids)
    def pids(self):
        return self._processes.pids

    @_documented_by(TaskProcesses.exit_codes)
    def exit_codes(self):
        return self._processes.exit_codes()

    @_documented_by(TaskProcesses.running_tasks)
    def running_tasks(self):
        return self._processes.running_tasks()

    # ----------------------------------------------------------------- waiting: TaskWaiter
    @_documented_by(TaskWaiter.wait_until_ready)
    def wait_until_ready(self, jobs=None, timeout=60.0):
        self._waiter.wait_until_ready(jobs, timeout)

    @_documented_by(TaskWaiter.wait)
    def wait(self, jobs=None, timeout=None, check=True):
        return self._waiter.wait(jobs, timeout, check)

    # ----------------------------------------------------------------- logs: TaskLogs
    @_documented_by(TaskLogs.log_path)
    def log_path(self, job, index=0):
        return self._logs.log_path(job, index)

    @_documented_by(TaskLogs.log)
    def log(self, job, index=0, tail=None, hide_tf_info=True):
        return self._logs.log(job, index, tail, hide_tf_info)

    def logs(self, tail=None, hide_tf_info=True):
        """The logs of every started task, one after the other under a header naming the task.

        Args:
            tail: keep only the last ``tail`` lines of each log.
            hide_tf_info: drop TensorFlow's C++ info lines.

        Example (not run by the doctests: it needs a running cluster):
            >>> print(cluster.logs(tail=5))  # doctest: +SKIP
        """
        codes = self.exit_codes()
        parts = []
        for task in self.started_tasks:
            status = "not started" if self.pid(*task) is None else describe_exit(codes[task])
            parts.append(f"===== {task} ({status}) =====\n" + self.log(*task, tail=tail, hide_tf_info=hide_tf_info))
        return "\n".join(parts)

    # ----------------------------------------------------------------- printing
    def __repr__(self):
        return f"<LocalCluster {self.script.name} {self.jobs} ({self._processes.state})>"

    def __str__(self):
        codes = self.exit_codes()
        rows = [f"LocalCluster running {self.script.name}; logs in {self.log_dir}"]
        for task in self.tasks:
            if task.job in self.not_started:
                status = "not started here"
            elif self.pid(*task) is None:
                status = "not started yet"
            else:
                status = f"pid {self.pid(*task)}, {describe_exit(codes[task])}"
            rows.append(f"  {str(task):<12} {self.address(*task):<21} {status}")
        return "\n".join(rows)
