"""The processes of a :class:`LocalCluster`: starting, restarting, killing and stopping them.

Every process runs in a process group of its own (a kill reaches the children it started), dies
with the process that started it (on Linux), is killed by the watchdog at its time limit, and is
killed when its :class:`TaskProcesses` is garbage-collected or Python exits. With network
namespaces, each process runs in its task's namespace, which exists while the cluster runs.
"""
import os
import signal
import sys
import time
import weakref
from pathlib import Path

from .process_group import kill_and_reap, kill_group, launch
from .watchdog import Watchdog


def check_seconds(value, name, allow_zero=False):
    """``value`` as a float if it is a positive number (or zero, if allowed), else ValueError naming ``name``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (value > 0 or allow_zero and value == 0)
    if not ok:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}.")
    return float(value)


class TaskProcesses:
    """The processes of the started tasks of a cluster, one for each task's latest start.

    :class:`LocalCluster` shows the docstrings of the public methods as its own (its ``start``
    and ``restart`` return the cluster; these return None).

    Args:
        spec: the cluster's :class:`~course_utils.cluster.spec.ClusterSpec`.
        logs: the cluster's :class:`~course_utils.cluster.logs.TaskLogs`, where the output goes.
        script, args, timeout, grace_seconds, python: the options of :class:`LocalCluster`.
        network: the cluster's :class:`~course_utils.cluster.namespaces.TaskNetwork`, or None
            (every task on this machine's own network). Starting makes it, stopping deletes it.

    Raises:
        ValueError: the script does not exist, or ``timeout`` or ``grace_seconds`` is not a
            number of seconds.

    Example (not run by the doctests: it needs a cluster's spec and a worker script):
        >>> processes = TaskProcesses(spec, logs, script="worker.py", args=(), timeout=60,  # doctest: +SKIP
        ...                           grace_seconds=1, python=None, network=None)
        >>> processes.start()  # doctest: +SKIP
    """

    def __init__(self, spec, logs, *, script, args, timeout, grace_seconds, python, network=None):
        self.script = Path(script).resolve()
        if not self.script.is_file():
            raise ValueError(
                f"The script {str(script)!r} does not exist (looked for {self.script}). Write it "
                f"first, e.g. with Path(folder, 'worker.py').write_text(code) or %%writefile, and "
                f"pass its path."
            )
        self.args = [str(a) for a in args]
        self.timeout = check_seconds(timeout, "timeout")
        self.grace_seconds = check_seconds(grace_seconds, "grace_seconds", allow_zero=True)
        self.python = python or sys.executable
        self._spec, self._logs, self._network = spec, logs, network
        self._latest = {}        # Task -> Popen of its latest start
        self._killed = set()     # tasks killed on purpose with kill()
        self._starts = {}        # Task -> how many times it was started
        self._every = []         # every Popen ever started, restarts included
        self._watchdog = Watchdog()
        # The finalizer holds the Popen objects and the network, not this object, so that it can be collected.
        weakref.finalize(self, _end, self._every, network)

    # ----------------------------------------------------------------- what the others ask
    @property
    def state(self):
        """``"not started"``, ``"running"`` (started, maybe all exited since) or ``"stopped"``."""
        if self._watchdog.stopped:
            return "stopped"
        return "running" if self._latest else "not started"

    def process(self, task):
        """The ``subprocess.Popen`` of the task's latest start, or None if it was never started."""
        return self._latest.get(task)

    def killed_on_purpose(self, task):
        """Whether the task's latest process was stopped with :meth:`kill`."""
        return task in self._killed

    def timed_out(self, tasks):
        """Those of ``tasks`` whose latest process the time limit killed."""
        return self._watchdog.timed_out(tasks)

    # ----------------------------------------------------------------- starting
    def start(self):
        """Start the process of every task that is not running, and return the cluster.

        A stopped cluster can be started again: same ports, same TF_CONFIG, fresh time limits
        (so re-running a notebook cell with ``with cluster:`` works).

        Example (not run by the doctests: it starts a cluster of a worker script):
            >>> cluster = LocalCluster("worker.py", {"worker": 2}).start()  # doctest: +SKIP
            >>> cluster.stop()  # doctest: +SKIP
        """
        running = self.running_tasks()
        self._launch([t for t in self._spec.started_tasks if t not in running])

    def restart(self, job=None, index=None):
        """Start tasks again with the same ports, TF_CONFIG and environment (killing them first if running).

        Args:
            job: restart only the tasks of this job; default every started task (the whole job).
            index: restart only this task of ``job``.

        Raises:
            ValueError: there is no such started task.

        Example (not run by the doctests: it needs a running cluster):
            >>> cluster.restart()              # the whole cluster, e.g. after a worker was lost  # doctest: +SKIP
            >>> cluster.restart("worker", 1)   # one task  # doctest: +SKIP
        """
        if job is None:
            if index is not None:
                raise ValueError("restart(index=...) needs the job too, e.g. restart('worker', 1).")
            tasks = self._spec.started_tasks
        elif index is None:
            tasks = self._spec.select(job)
        else:
            tasks = [self._spec.started_task(job, index)]
        kill_and_reap([self._latest[t] for t in tasks if t in self._latest])
        self._launch(tasks)

    def _launch(self, tasks):
        if self._network is not None:
            self._network.create()  # after stop() deleted it; nothing if it exists
        self._watchdog.start()
        deadline = time.monotonic() + self.timeout  # one deadline: the watchdog kills them together
        for task in tasks:
            self._starts[task] = self._starts.get(task, 0) + 1
            with open(self._logs.log_path(*task), "ab") as log_file:
                if self._starts[task] > 1:
                    log_file.write(f"\n===== {task} started again (start {self._starts[task]}) =====\n".encode())
                    log_file.flush()
                process = launch(self.python, self.script, self.args, {**os.environ, **self._spec.environment(*task)},
                                 log_file, netns=self._network and self._network.namespace_path(task))
            self._latest[task] = process
            self._every.append(process)
            self._killed.discard(task)
            self._watchdog.watch(task, process, deadline)

    # ----------------------------------------------------------------- looking at them
    def pid(self, job, index=0):
        """The process id of a started task (of its latest start), or None before :meth:`start`.

        Args:
            job, index: the task (``index`` defaults to 0).

        Raises:
            ValueError: there is no such task, or it is not started by this cluster.

        Example (not run by the doctests: it needs a running cluster):
            >>> cluster.pid("worker", 0) in [p.pid for p in psutil.Process().children()]  # while it runs  # doctest: +SKIP
            True
        """
        process = self._latest.get(self._spec.started_task(job, index))
        return None if process is None else process.pid

    @property
    def pids(self):
        """Every process id this cluster ever started (restarts included): check that none is left.

        An id can be given to another process or thread once its process has ended and been reaped, so
        check that none is still a child of this process rather than that no process has it.

        Example (not run by the doctests: it needs a running cluster):
            >>> cluster.stop()  # doctest: +SKIP
            >>> [pid for pid in cluster.pids if psutil.pid_exists(pid) and psutil.Process(pid).ppid() == os.getpid()]  # doctest: +SKIP
            []
        """
        return [p.pid for p in self._every]

    def exit_codes(self):
        """``{task: exit code}`` of the started tasks right now; None means still running.

        A negative code means the process was killed by that signal (``-9``: SIGKILL).

        Example (not run by the doctests: it needs a running cluster):
            >>> cluster.exit_codes()  # doctest: +SKIP
            {Task(job='worker', index=0): None, Task(job='worker', index=1): 0}
        """
        return {t: (None if p is None else p.poll()) for t, p in
                ((t, self._latest.get(t)) for t in self._spec.started_tasks)}

    def running_tasks(self):
        """The started tasks whose process is still running.

        Example (not run by the doctests: it needs a running cluster):
            >>> cluster.kill("worker", 1)  # doctest: +SKIP
            >>> cluster.running_tasks()  # doctest: +SKIP
            [Task(job='worker', index=0)]
        """
        return [t for t, p in self._latest.items() if p.poll() is None]

    # ----------------------------------------------------------------- ending them
    def kill(self, job, index=0, sig=signal.SIGKILL):
        """Stop one task now, as a crash or a lost machine would (default SIGKILL), and reap it.

        :meth:`wait` does not count a task killed this way as a failure.

        Args:
            job, index: the task.
            sig: the signal; SIGKILL cannot be caught. With another signal the call does not
                wait for the process to exit.

        Raises:
            ValueError: there is no such started task.

        Example (not run by the doctests: it needs a running cluster):
            >>> cluster.kill("worker", 1)  # doctest: +SKIP
        """
        task = self._spec.started_task(job, index)
        process = self._latest.get(task)
        if process is None or process.poll() is not None:
            return
        self._killed.add(task)
        kill_group(process, sig)
        if sig == signal.SIGKILL:
            process.wait()

    def stop(self):
        """Stop every process: SIGTERM, ``grace_seconds`` to exit, then SIGKILL; reap them all.

        With ``network="namespaces"`` it then deletes the namespaces, their cables and the bridge.
        Safe to call more than once; :meth:`start` starts the cluster again (with the same
        addresses). If a KeyboardInterrupt arrives meanwhile, the processes are still killed
        before it propagates.

        Example (not run by the doctests: it needs a running cluster):
            >>> cluster.stop()  # doctest: +SKIP
            >>> cluster.running_tasks()  # doctest: +SKIP
            []
        """
        self._watchdog.stop()
        processes = list(self._every)
        try:
            for process in processes:
                if process.poll() is None:
                    kill_group(process, signal.SIGTERM)
            end = time.monotonic() + self.grace_seconds
            while time.monotonic() < end and any(p.poll() is None for p in processes):
                time.sleep(0.02)
        finally:
            _end(processes, self._network)
            self._watchdog.join()


def _end(processes, network):
    """Kill and reap ``processes``, then delete the network they ran in (if any)."""
    kill_and_reap(processes)
    if network is not None:
        network.delete()
