"""Local clusters: real TensorFlow worker / parameter-server processes on this machine.

:class:`LocalCluster` starts one Python process per task of a cluster spec, all running the same
script. Each process gets its own ``TF_CONFIG`` (the shared cluster spec plus its own task), its
output goes to a log file, every process has a time limit, and no process outlives the cluster:
leaving the ``with`` block, an exception, a KeyboardInterrupt, the garbage collector, the end of
the Python process and even a crash of the notebook kernel all end them.

Example:
    >>> with LocalCluster("worker.py", {"worker": 2}, timeout=60) as cluster:
    ...     print(cluster.tf_config("worker", 0))
    ...     exit_codes = cluster.wait()
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import namedtuple
from pathlib import Path

__all__ = [
    "ClusterError",
    "ClusterTimeoutError",
    "LocalCluster",
    "Task",
    "TaskFailedError",
    "dtensor_env",
    "find_free_ports",
]

# TensorFlow's cluster specs accept job names like these (lower case, digits, underscores).
_JOB_NAME = re.compile(r"[a-z][a-z0-9_]*")
# Jobs that TensorFlow's strategies allow at most once in a cluster.
_SINGLE_TASK_JOBS = ("chief", "evaluator")
# TensorFlow's C++ info lines, in the absl format of TF 2.16+
# ("I0000 00:00:1712345678.123456   4242 file.cc:12] ...") and the older one
# ("2024-01-01 12:00:00.123456: I tensorflow/..."), and the start-up notices that every process
# prints on a machine without GPU (absl's notice, the CPU-instructions hint, the failed cuInit).
_TF_INFO_LINE = re.compile(
    r"^(?:I\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: I "
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags"
    r"|E\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ cuda_\w+\.cc:\d+\] failed call to cuInit)"
)
# Started by ``python -c``: make the kernel SIGKILL this process when its parent dies (Linux
# prctl PR_SET_PDEATHSIG = 1), check that the parent did not die before that, then become the
# real script with exec (the setting survives exec). Doing this in the child itself instead of in
# a ``preexec_fn`` avoids running Python code between fork and exec in a parent full of threads
# (a TensorFlow kernel), which the subprocess documentation warns can deadlock.
_BOOTSTRAP = """\
import ctypes, os, signal, sys
parent = int(os.environ.pop("LOCAL_CLUSTER_PARENT_PID"))
if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)
os.execv(sys.executable, [sys.executable] + sys.argv[1:])
"""


class Task(namedtuple("Task", ["job", "index"])):
    """One task of a cluster: its job name and index, e.g. ``Task("worker", 1)``.

    It is a tuple, so ``cluster.wait()[("worker", 1)]`` works too.
    """

    __slots__ = ()

    def __str__(self):
        return f"{self.job} {self.index}"


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


def dtensor_env(job, index, cluster_spec):
    """The environment of one multi-client DTensor client; pass it as ``task_env=dtensor_env``.

    Every task of the (single) job becomes one DTensor client: ``DTENSOR_CLIENT_ID`` is its index,
    ``DTENSOR_NUM_CLIENTS`` the number of tasks, ``DTENSOR_JOB_NAME`` the job name and
    ``DTENSOR_JOBS`` the comma-separated addresses of all clients, identical in every client.

    Args:
        job: the task's job name.
        index: the task's index in its job.
        cluster_spec: ``{job: [address, ...]}``, as in :attr:`LocalCluster.cluster_spec`.

    Returns:
        A dict of the four ``DTENSOR_*`` environment variables.

    Raises:
        ValueError: the cluster has more than one job (DTensor clients form one job).

    Example:
        >>> env = dtensor_env("worker", 1, {"worker": ["127.0.0.1:5000", "127.0.0.1:5001"]})
        >>> env["DTENSOR_CLIENT_ID"], env["DTENSOR_JOBS"]
        ('1', '127.0.0.1:5000,127.0.0.1:5001')
    """
    if len(cluster_spec) != 1:
        raise ValueError(
            f"Multi-client DTensor runs one job of clients, but the cluster has the jobs "
            f"{list(cluster_spec)}. Use a single job, e.g. LocalCluster(script, {{'worker': 2}}, "
            f"task_env=dtensor_env)."
        )
    addresses = cluster_spec[job]
    return {
        "DTENSOR_CLIENT_ID": str(index),
        "DTENSOR_NUM_CLIENTS": str(len(addresses)),
        "DTENSOR_JOB_NAME": job,
        "DTENSOR_JOBS": ",".join(addresses),
    }


def _describe_exit(code):
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _kill_group(process, sig):
    """Send ``sig`` to the process group of ``process`` (the task and anything it started)."""
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_and_reap(processes):
    """SIGKILL every process group in ``processes`` and collect the exit statuses (no zombies)."""
    for process in list(processes):
        if process.returncode is None:
            _kill_group(process, signal.SIGKILL)
    for process in list(processes):
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            pass


def _release(processes, own_log_dir):
    """Finalizer of a cluster: kill its processes, then delete the log folder if the cluster made it."""
    _kill_and_reap(processes)
    if own_log_dir is not None:
        shutil.rmtree(own_log_dir, ignore_errors=True)


def _watch_deadlines(cluster_ref, stopped):
    # Holds only a weak reference, so that a forgotten cluster can still be garbage-collected
    # (its finalizer then kills the processes and this thread ends).
    while not stopped.wait(0.1):
        cluster = cluster_ref()
        if cluster is None:
            return
        cluster._kill_overdue()
        del cluster


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
        self.script = Path(script).resolve()
        if not self.script.is_file():
            raise ValueError(
                f"The script {str(script)!r} does not exist (looked for {self.script}). Write it "
                f"first, e.g. with Path(folder, 'worker.py').write_text(code) or %%writefile, and "
                f"pass its path."
            )
        self.jobs = self._check_jobs(jobs)
        if isinstance(not_started, str):
            not_started = [not_started]
        self.not_started = tuple(not_started)
        for job in self.not_started:
            self._check_job_name(job, "not_started")
        if set(self.not_started) >= set(self.jobs):
            raise ValueError(
                f"not_started={list(self.not_started)} leaves no job to start. Keep at least one "
                f"job of {list(self.jobs)} out of not_started."
            )
        self.args = [str(a) for a in args]
        self.env = self._check_env(env or {}, "env")
        self.tf_config_enabled = bool(tf_config)
        self.timeout = self._check_seconds(timeout, "timeout")
        self.grace_seconds = self._check_seconds(grace_seconds, "grace_seconds", allow_zero=True)
        self.host = host
        self.python = python or sys.executable
        own_log_dir = None if log_dir else tempfile.mkdtemp(prefix="local_cluster_")
        self.log_dir = Path(log_dir or own_log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        ports = iter(find_free_ports(sum(self.jobs.values())))
        self._spec = {job: [f"{host}:{next(ports)}" for _ in range(count)] for job, count in self.jobs.items()}
        self._task_env = self._resolve_task_env(task_env)
        self._processes = {}     # Task -> Popen of its latest start
        self._deadlines = {}     # Task -> time.monotonic() when it must be killed
        self._timed_out = set()  # tasks the watchdog killed
        self._killed = set()     # tasks killed on purpose with kill()
        self._starts = {}        # Task -> how many times it was started
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._watchdog = None
        self._all_processes = []  # every Popen ever started, restarts included
        # The finalizer holds the Popen objects, not the cluster, so the cluster can be collected.
        self._finalizer = weakref.finalize(self, _release, self._all_processes, own_log_dir)

    # ----------------------------------------------------------------- validation helpers
    def _check_job_name(self, job, where):
        if job not in self.jobs:
            raise ValueError(f"{where} names the job {job!r}, which is not in the cluster spec; "
                             f"the jobs are {list(self.jobs)}.")

    @staticmethod
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

    @staticmethod
    def _check_env(env, where):
        if not isinstance(env, dict):
            raise ValueError(f"{where} must be a dict of environment variables, got {env!r}.")
        for key, value in env.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise ValueError(f"{where}: environment variables are strings, but {key!r} is set to "
                                 f"{value!r}. Write it as {key!r}: {str(value)!r}.")
        return dict(env)

    @staticmethod
    def _check_seconds(value, name, allow_zero=False):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (value > 0 or allow_zero and value == 0)
        if not ok:
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}.")
        return float(value)

    def _resolve_task_env(self, task_env):
        started = self.started_tasks
        if task_env is None:
            return {task: {} for task in started}
        if callable(task_env):
            spec = self.cluster_spec
            return {task: self._check_env(dict(task_env(task.job, task.index, spec)), f"task_env for {task}")
                    for task in started}
        if not isinstance(task_env, dict):
            raise ValueError(f"task_env must be a function (job, index, cluster_spec) -> dict or a dict "
                             f"keyed by job name or (job, index), got {task_env!r}.")
        result = {task: {} for task in started}
        for key, value in task_env.items():
            if isinstance(key, str):
                self._check_job_name(key, "task_env")
                targets = [t for t in started if t.job == key]
            else:
                task = self._task(*key) if isinstance(key, tuple) and len(key) == 2 else None
                if task is None:
                    raise ValueError(f"task_env keys are job names or (job, index) tuples, got {key!r}.")
                targets = [task]
            for task in targets:
                if task not in result:
                    raise ValueError(f"task_env sets variables for {task}, but its job is in not_started, "
                                     f"so no process gets them. Remove that entry.")
                result[task].update(self._check_env(value, f"task_env[{key!r}]"))
        return result

    def _task(self, job, index=0):
        if job not in self.jobs:
            raise ValueError(f"There is no job {job!r} in this cluster; the jobs are {list(self.jobs)}.")
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < self.jobs[job]:
            raise ValueError(f"The job {job!r} has tasks 0..{self.jobs[job] - 1}, so index {index!r} "
                             f"does not exist.")
        return Task(job, index)

    def _started_task(self, job, index):
        task = self._task(job, index)
        if task.job in self.not_started:
            raise ValueError(f"{task} is listed in not_started: this cluster does not run a process for it.")
        return task

    # ----------------------------------------------------------------- the cluster spec
    @property
    def cluster_spec(self):
        """The cluster spec ``{job: ["127.0.0.1:port", ...]}``, the same in every process.

        Example:
            >>> tf.train.ClusterSpec(cluster.cluster_spec)  # e.g. for a SimpleClusterResolver
        """
        return {job: list(addresses) for job, addresses in self._spec.items()}

    @property
    def tasks(self):
        """Every task of the cluster spec, including ``not_started`` ones, in spec order.

        Example:
            >>> LocalCluster("worker.py", {"chief": 1, "worker": 2}, not_started="chief").tasks
            [Task(job='chief', index=0), Task(job='worker', index=0), Task(job='worker', index=1)]
        """
        return [Task(job, i) for job, count in self.jobs.items() for i in range(count)]

    @property
    def started_tasks(self):
        """The tasks this cluster runs as processes (all but the ``not_started`` jobs).

        Example:
            >>> LocalCluster("worker.py", {"chief": 1, "worker": 2}, not_started="chief").started_tasks
            [Task(job='worker', index=0), Task(job='worker', index=1)]
        """
        return [t for t in self.tasks if t.job not in self.not_started]

    def address(self, job, index=0):
        """The ``host:port`` of one task, e.g. ``cluster.address("ps", 0)``.

        Args:
            job, index: the task (``index`` defaults to 0).

        Raises:
            ValueError: there is no such task.

        Example:
            >>> cluster.address("worker", 1)
            '127.0.0.1:40123'
        """
        task = self._task(job, index)
        return self._spec[task.job][task.index]

    def tf_config(self, job, index=0):
        """The ``TF_CONFIG`` of one task as a dict: the cluster spec and the task's type and index.

        Args:
            job, index: the task (``index`` defaults to 0).

        Raises:
            ValueError: there is no such task.

        Example:
            >>> cluster.tf_config("worker", 1)
            {'cluster': {'worker': ['127.0.0.1:40122', '127.0.0.1:40123']}, 'task': {'type': 'worker', 'index': 1}}
        """
        task = self._task(job, index)
        return {"cluster": self.cluster_spec, "task": {"type": task.job, "index": task.index}}

    def environment(self, job, index=0):
        """The environment variables this cluster adds for one started task (not all of ``os.environ``).

        Args:
            job, index: the task (``index`` defaults to 0).

        Raises:
            ValueError: there is no such task, or it is not started by this cluster.

        Example:
            >>> cluster.environment("worker", 0)["TF_CONFIG"]
            '{"cluster": {...}, "task": {"type": "worker", "index": 0}}'
        """
        task = self._started_task(job, index)
        extra = {"PYTHONUNBUFFERED": "1", **self.env, **self._task_env[task]}
        if self.tf_config_enabled:
            extra["TF_CONFIG"] = json.dumps(self.tf_config(*task))
        return extra

    # ----------------------------------------------------------------- processes
    def start(self):
        """Start the process of every task that is not running, and return the cluster.

        A stopped cluster can be started again: same ports, same TF_CONFIG, fresh time limits
        (so re-running a notebook cell with ``with cluster:`` works).

        Example:
            >>> cluster = LocalCluster("worker.py", {"worker": 2}).start()
            >>> cluster.stop()
        """
        self._ensure_watchdog()
        deadline = time.monotonic() + self.timeout  # one deadline: the watchdog kills them together
        for task in self.started_tasks:
            process = self._processes.get(task)
            if process is None or process.poll() is not None:
                self._launch(task, deadline)
        return self

    def _ensure_watchdog(self):
        if self._stopped.is_set():  # started again after stop(): a new watchdog
            self._stopped = threading.Event()
            self._watchdog = None
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=_watch_deadlines, args=(weakref.ref(self), self._stopped),
                                              name="LocalCluster watchdog", daemon=True)
            self._watchdog.start()

    def _launch(self, task, deadline):
        environ = {**os.environ, **self.environment(*task), "LOCAL_CLUSTER_PARENT_PID": str(os.getpid())}
        log_path = self.log_path(*task)
        self._starts[task] = self._starts.get(task, 0) + 1
        with open(log_path, "ab") as log_file:
            if self._starts[task] > 1:
                log_file.write(f"\n===== {task} started again (start {self._starts[task]}) =====\n".encode())
                log_file.flush()
            process = subprocess.Popen(
                [self.python, "-c", _BOOTSTRAP, str(self.script), *self.args],
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                env=environ, start_new_session=True,  # own process group: killpg reaches its children
            )
        with self._lock:
            self._processes[task] = process
            self._all_processes.append(process)
            self._deadlines[task] = deadline
            self._timed_out.discard(task)
            self._killed.discard(task)

    def _kill_overdue(self):
        now = time.monotonic()
        with self._lock:
            for task, process in self._processes.items():
                if process.poll() is None and now > self._deadlines[task]:
                    self._timed_out.add(task)
                    _kill_group(process, signal.SIGKILL)

    def pid(self, job, index=0):
        """The process id of a started task (of its latest start), or None before :meth:`start`.

        Args:
            job, index: the task (``index`` defaults to 0).

        Raises:
            ValueError: there is no such task, or it is not started by this cluster.

        Example:
            >>> os.kill(cluster.pid("worker", 0), 0)  # raises ProcessLookupError once it is gone
        """
        process = self._processes.get(self._started_task(job, index))
        return None if process is None else process.pid

    @property
    def pids(self):
        """Every process id this cluster ever started (restarts included): check that none is left.

        Example:
            >>> cluster.stop()
            >>> all(not psutil.pid_exists(pid) for pid in cluster.pids)
            True
        """
        return [p.pid for p in self._all_processes]

    def exit_codes(self):
        """``{task: exit code}`` of the started tasks right now; None means still running.

        A negative code means the process was killed by that signal (``-9``: SIGKILL).

        Example:
            >>> cluster.exit_codes()
            {Task(job='worker', index=0): None, Task(job='worker', index=1): 0}
        """
        return {t: (None if p is None else p.poll()) for t, p in
                ((t, self._processes.get(t)) for t in self.started_tasks)}

    def running_tasks(self):
        """The started tasks whose process is still running.

        Example:
            >>> cluster.kill("worker", 1)
            >>> cluster.running_tasks()
            [Task(job='worker', index=0)]
        """
        return [t for t, p in self._processes.items() if p.poll() is None]

    def wait_until_ready(self, jobs=None, timeout=60.0):
        """Wait until the servers of the started tasks accept TCP connections on their ports.

        TensorFlow waits silently (without a time limit) for servers that are not up yet; polling
        the ports first turns a silent hang into a clear error. Interrupting the wait (Ctrl-C, or
        the notebook's stop button) stops the cluster.

        Args:
            jobs: a job name or list of job names to wait for; default every started job.
            timeout: seconds to wait in total.

        Raises:
            TaskFailedError: a task exited before its server was up (its log tail is included).
            ClusterTimeoutError: some servers did not accept connections in time.
            KeyboardInterrupt: the wait was interrupted; the cluster was stopped first.

        Example:
            >>> cluster.wait_until_ready(["worker", "ps"], timeout=60)
        """
        tasks = self._select(jobs)
        timeout = self._check_seconds(timeout, "timeout")
        try:
            self._wait_until_ready(tasks, timeout)
        except KeyboardInterrupt:
            self.stop()
            raise

    def _wait_until_ready(self, tasks, timeout):
        deadline = time.monotonic() + timeout
        waiting = list(tasks)
        while waiting:
            for task in list(waiting):
                process = self._processes.get(task)
                if process is None:
                    raise ClusterError(f"{task} has not been started; call cluster.start() first.")
                if process.poll() is not None:
                    self._raise_failed(task, f"{task} exited ({_describe_exit(process.returncode)}) "
                                             f"before its server at {self.address(*task)} was up.")
                port = int(self.address(*task).rsplit(":", 1)[1])
                try:
                    with socket.create_connection((self.host, port), timeout=0.5):
                        waiting.remove(task)
                except OSError:
                    pass
            if waiting and time.monotonic() > deadline:
                raise ClusterTimeoutError(
                    f"No server accepted connections within {timeout:g} s on "
                    + ", ".join(f"{t} ({self.address(*t)})" for t in waiting)
                    + ". Does the script start a server (tf.distribute.Server, or a strategy)? "
                      "Their logs end with:\n" + self._tails(waiting), waiting)
            if waiting:
                time.sleep(0.1)

    def wait(self, jobs=None, timeout=None, check=True):
        """Wait until the processes of the selected tasks have exited and return their exit codes.

        Interrupting the wait (Ctrl-C, or the notebook's stop button) stops the cluster.

        Args:
            jobs: a job name or list of job names to wait for; default every started task. (Leave
                out jobs that never exit by themselves, such as parameter servers.)
            timeout: seconds to wait; default: until the cluster's own time limit kills them.
            check: if True, a task that exits with a non-zero code (other than tasks you stopped
                with :meth:`kill`) stops the whole cluster and raises :class:`TaskFailedError`.

        Returns:
            ``{task: exit code}`` for the selected tasks.

        Raises:
            TaskFailedError: with ``check=True``, a task failed; the message names it and ends
                with the tail of its log. All processes are stopped first.
            ClusterTimeoutError: a task was killed by the cluster's time limit, or ``timeout``
                passed; the message names the tasks and shows the tail of their logs. All
                processes are stopped first.
            KeyboardInterrupt: the wait was interrupted; the cluster was stopped first.

        Example:
            >>> exit_codes = cluster.wait(jobs="worker")
        """
        tasks = self._select(jobs)
        for task in tasks:
            if task not in self._processes:
                raise ClusterError(f"{task} has not been started; call cluster.start() first.")
        deadline = None if timeout is None else time.monotonic() + self._check_seconds(timeout, "timeout")
        try:
            return self._wait(tasks, timeout, deadline, check)
        except KeyboardInterrupt:
            self.stop()
            raise

    def _wait(self, tasks, timeout, deadline, check):
        while True:
            codes = {t: self._processes[t].poll() for t in tasks}
            with self._lock:  # the watchdog marks all overdue tasks in one locked pass
                timed_out = [t for t in tasks if t in self._timed_out]
            if timed_out:
                self.stop()
                raise ClusterTimeoutError(
                    f"The time limit of the cluster (timeout={self.timeout:g} s) ran out, so it killed "
                    + ", ".join(map(str, timed_out)) + ". Is a task waiting for a missing peer, or does "
                    "it need more time (raise timeout=...)? The logs end with:\n"
                    + self._tails(timed_out), timed_out)
            if check:
                failed = [t for t in tasks if codes[t] not in (None, 0) and t not in self._killed]
                if failed:
                    self.stop()
                    self._raise_failed(failed[0], f"{failed[0]} failed ({_describe_exit(codes[failed[0]])}).")
            if all(code is not None for code in codes.values()):
                return codes
            if deadline is not None and time.monotonic() > deadline:
                running = [t for t in tasks if codes[t] is None]
                self.stop()
                raise ClusterTimeoutError(
                    f"wait(timeout={timeout:g}) ran out while " + ", ".join(map(str, running))
                    + " kept running; the cluster was stopped. Their logs end with:\n"
                    + self._tails(running), running)
            time.sleep(0.05)

    def kill(self, job, index=0, sig=signal.SIGKILL):
        """Stop one task now, as a crash or a lost machine would (default SIGKILL), and reap it.

        :meth:`wait` does not count a task killed this way as a failure.

        Args:
            job, index: the task.
            sig: the signal; SIGKILL cannot be caught. With another signal the call does not
                wait for the process to exit.

        Raises:
            ValueError: there is no such started task.

        Example:
            >>> cluster.kill("worker", 1)
        """
        task = self._started_task(job, index)
        process = self._processes.get(task)
        if process is None or process.poll() is not None:
            return
        with self._lock:
            self._killed.add(task)
        _kill_group(process, sig)
        if sig == signal.SIGKILL:
            process.wait()

    def restart(self, job=None, index=None):
        """Start tasks again with the same ports, TF_CONFIG and environment (killing them first if running).

        Args:
            job: restart only the tasks of this job; default every started task (the whole job).
            index: restart only this task of ``job``.

        Raises:
            ValueError: there is no such started task.

        Example:
            >>> cluster.restart()              # the whole cluster, e.g. after a worker was lost
            >>> cluster.restart("worker", 1)   # one task
        """
        if job is None:
            if index is not None:
                raise ValueError("restart(index=...) needs the job too, e.g. restart('worker', 1).")
            tasks = self.started_tasks
        elif index is None:
            tasks = self._select(job)
        else:
            tasks = [self._started_task(job, index)]
        running = [self._processes[t] for t in tasks if t in self._processes]
        _kill_and_reap(running)
        self._ensure_watchdog()
        deadline = time.monotonic() + self.timeout
        for task in tasks:
            self._launch(task, deadline)
        return self

    def stop(self):
        """Stop every process: SIGTERM, ``grace_seconds`` to exit, then SIGKILL; reap them all.

        Safe to call more than once; :meth:`start` starts the cluster again. If a
        KeyboardInterrupt arrives meanwhile, the processes are still killed before it propagates.

        Example:
            >>> cluster.stop()
            >>> cluster.running_tasks()
            []
        """
        self._stopped.set()
        processes = list(self._all_processes)
        try:
            for process in processes:
                if process.poll() is None:
                    _kill_group(process, signal.SIGTERM)
            end = time.monotonic() + self.grace_seconds
            while time.monotonic() < end and any(p.poll() is None for p in processes):
                time.sleep(0.02)
        finally:
            _kill_and_reap(processes)
            if self._watchdog is not None and self._watchdog is not threading.current_thread():
                self._watchdog.join(timeout=1)

    def __enter__(self):
        if not self._processes or self._stopped.is_set():
            self.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()
        return False

    # ----------------------------------------------------------------- logs
    def log_path(self, job, index=0):
        """The path of one started task's log file (stdout and stderr together).

        Args:
            job, index: the task (``index`` defaults to 0).

        Raises:
            ValueError: there is no such started task.

        Example:
            >>> cluster.log_path("worker", 0).name
            'worker-0.log'
        """
        task = self._started_task(job, index)
        return self.log_dir / f"{task.job}-{task.index}.log"

    def log(self, job, index=0, tail=None, hide_tf_info=True):
        """The text one task has printed so far (stdout and stderr).

        Args:
            job, index: the task.
            tail: keep only the last ``tail`` lines.
            hide_tf_info: drop TensorFlow's C++ info lines (``I0000 00:00:...``), keep the rest.

        Raises:
            ValueError: there is no such started task.

        Example:
            >>> print(cluster.log("worker", 0, tail=20))
        """
        path = self.log_path(job, index)
        text = path.read_text(errors="replace") if path.exists() else ""
        lines = text.splitlines()
        if hide_tf_info:
            lines = [line for line in lines if not _TF_INFO_LINE.match(line)]
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        return "\n".join(lines)

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
            header = f"===== {task} ({_describe_exit(codes[task]) if task in self._processes else 'not started'}) ====="
            parts.append(header + "\n" + self.log(*task, tail=tail, hide_tf_info=hide_tf_info))
        return "\n".join(parts)

    # ----------------------------------------------------------------- helpers
    def _select(self, jobs):
        if jobs is None:
            return self.started_tasks
        names = [jobs] if isinstance(jobs, str) else list(jobs)
        for job in names:
            self._check_job_name(job, "jobs")
            if job in self.not_started:
                raise ValueError(f"The job {job!r} is in not_started: this cluster runs no process for it.")
        return [t for t in self.started_tasks if t.job in names]

    def _tails(self, tasks, lines=15):
        return "\n".join(f"--- {t} (log {self.log_path(*t)}) ---\n{self.log(*t, tail=lines)}" for t in tasks)

    def _raise_failed(self, task, headline):
        tail = self.log(*task, tail=25)
        raise TaskFailedError(f"{headline} The end of its log ({self.log_path(*task)}):\n{tail}",
                              task=task, exit_code=self._processes[task].returncode, log_tail=tail)

    def __repr__(self):
        state = "stopped" if self._stopped.is_set() else ("running" if self._processes else "not started")
        return f"<LocalCluster {self.script.name} {self.jobs} ({state})>"

    def __str__(self):
        codes = self.exit_codes()
        rows = [f"LocalCluster running {self.script.name}; logs in {self.log_dir}"]
        for task in self.tasks:
            if task.job in self.not_started:
                status = "not started here"
            elif task not in self._processes:
                status = "not started yet"
            else:
                status = f"pid {self._processes[task].pid}, {_describe_exit(codes[task])}"
            rows.append(f"  {str(task):<12} {self.address(*task):<18} {status}")
        return "\n".join(rows)
