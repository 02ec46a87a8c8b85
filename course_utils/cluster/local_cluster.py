"""The class :class:`LocalCluster`: it makes its parts from its options and hands each call on to one.

Its parts: :class:`~course_utils.cluster.spec.ClusterSpec` (the tasks, their addresses and
environment), :class:`~course_utils.cluster.logs.TaskLogs` (the log files),
:class:`~course_utils.cluster.processes.TaskProcesses` (the processes) and
:class:`~course_utils.cluster.waiting.TaskWaiter` (waiting for them). A method of LocalCluster
carries the docstring of the part's method that does its work.
"""
import signal
from operator import attrgetter

from .logs import TaskLogs
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

    Args:
        script: path of the Python script every task runs.
        jobs: the cluster spec as task counts, in the order TF_CONFIG lists them, e.g.
            ``{"chief": 1, "worker": 2, "ps": 1}``. Every process gets the same ordered spec.
        not_started: job names that appear in the cluster spec but are not started, e.g.
            ``["chief"]`` when this Python process (the notebook kernel) plays the chief.
        args: extra command-line arguments for the script (the same for every task).
        env: extra environment variables for every process (strings).
        task_env: extra environment per task: a function ``(job, index, cluster_spec) -> dict``
            (for example :func:`dtensor_env`), or a dict whose keys are ``(job, index)`` tuples
            or job names and whose values are dicts.
        tf_config: whether to set ``TF_CONFIG`` in each process (default True).
        timeout: how many seconds each process may run before it is killed (per start).
        grace_seconds: how long :meth:`stop` waits after SIGTERM before it sends SIGKILL.
        log_dir: where the log files go; default a new temporary folder, deleted with its logs
            when the cluster object is garbage-collected or Python exits (a folder you pass stays).
        host: the host name written into the cluster spec.
        python: the Python interpreter; default the one running this code.

    Raises:
        ValueError: the script does not exist, or the spec or any option is invalid; the
            message says what to change.

    Example:
        >>> with LocalCluster("worker.py", {"worker": 2}, env={"TF_USE_LEGACY_KERAS": "1"}) as cluster:
        ...     exit_codes = cluster.wait()  # {Task("worker", 0): 0, Task("worker", 1): 0}
        ...     print(cluster.logs())
    """


    def __init__(self, script, jobs, *, not_started=(), args=(), env=None, task_env=None,
                 tf_config=True, timeout=120.0, grace_seconds=1.0, log_dir=None,
                 host="127.0.0.1", python=None):
        # No part refers back to the cluster, so a forgotten cluster is freed at once; then the
        # finalizer of its TaskProcesses kills the processes, and TaskLogs deletes a folder it made.
        self._spec = ClusterSpec(jobs, not_started=not_started, env=env, task_env=task_env,
                                 tf_config=tf_config, host=host)
        self._logs = TaskLogs(self._spec, log_dir)
        self._processes = TaskProcesses(self._spec, self._logs, script=script, args=args, timeout=timeout,
                                        grace_seconds=grace_seconds, python=python)
        self._waiter = TaskWaiter(self._spec, self._processes, self._logs)

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

        Example:
            >>> print(cluster.logs(tail=5))
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
            rows.append(f"  {str(task):<12} {self.address(*task):<18} {status}")
        return "\n".join(rows)
