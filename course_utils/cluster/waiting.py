"""Waiting for a :class:`LocalCluster`: until its servers are up, or until its tasks exit, with errors that show the logs."""
import socket
import time

from .errors import ClusterError, ClusterTimeoutError, TaskFailedError
from .process_group import describe_exit
from .processes import check_seconds


class TaskWaiter:
    """Waits for the tasks of a cluster, and turns a failure or a time-out into an error that ends with the logs.

    Every error, and an interrupted wait, stops all processes of the cluster first.

    Args:
        spec, processes, logs: the cluster's
            :class:`~course_utils.cluster.spec.ClusterSpec`,
            :class:`~course_utils.cluster.processes.TaskProcesses` and
            :class:`~course_utils.cluster.logs.TaskLogs`.

    Example (not run by the doctests: it needs a running cluster):
        >>> TaskWaiter(spec, processes, logs).wait("worker", timeout=None, check=True)  # doctest: +SKIP
    """

    def __init__(self, spec, processes, logs):
        self._spec, self._processes, self._logs = spec, processes, logs

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

        Example (not run by the doctests: it needs a running cluster):
            >>> cluster.wait_until_ready(["worker", "ps"], timeout=60)  # doctest: +SKIP
        """
        tasks = self._spec.select(jobs)
        timeout = check_seconds(timeout, "timeout")
        try:
            self._until_ready(tasks, timeout)
        except KeyboardInterrupt:
            self._processes.stop()
            raise

    def _until_ready(self, tasks, timeout):
        deadline = time.monotonic() + timeout
        waiting = list(tasks)
        while waiting:
            for task in list(waiting):
                process = self._processes.process(task)
                if process is None:
                    raise ClusterError(f"{task} has not been started; call cluster.start() first.")
                address = self._spec.address(*task)
                if process.poll() is not None:
                    self._raise_failed(task, f"{task} exited ({describe_exit(process.returncode)}) "
                                             f"before its server at {address} was up.")
                host, port = address.rsplit(":", 1)
                try:
                    with socket.create_connection((host, int(port)), timeout=0.5):
                        waiting.remove(task)
                except OSError:
                    pass
            if waiting and time.monotonic() > deadline:
                raise ClusterTimeoutError(
                    f"No server accepted connections within {timeout:g} s on "
                    + ", ".join(f"{t} ({self._spec.address(*t)})" for t in waiting)
                    + ". Does the script start a server (tf.distribute.Server, or a strategy)? "
                      "Their logs end with:\n" + self._logs.tails(waiting), waiting)
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

        Example (not run by the doctests: it needs a running cluster):
            >>> exit_codes = cluster.wait(jobs="worker")  # doctest: +SKIP
        """
        tasks = self._spec.select(jobs)
        for task in tasks:
            if self._processes.process(task) is None:
                raise ClusterError(f"{task} has not been started; call cluster.start() first.")
        deadline = None if timeout is None else time.monotonic() + check_seconds(timeout, "timeout")
        try:
            return self._until_exit(tasks, timeout, deadline, check)
        except KeyboardInterrupt:
            self._processes.stop()
            raise

    def _until_exit(self, tasks, timeout, deadline, check):
        processes = self._processes
        while True:
            codes = {t: processes.process(t).poll() for t in tasks}
            timed_out = processes.timed_out(tasks)  # all tasks of one deadline, or none of them
            if timed_out:
                processes.stop()
                raise ClusterTimeoutError(
                    f"The time limit of the cluster (timeout={processes.timeout:g} s) ran out, so it killed "
                    + ", ".join(map(str, timed_out)) + ". Is a task waiting for a missing peer, or does "
                    "it need more time (raise timeout=...)? The logs end with:\n"
                    + self._logs.tails(timed_out), timed_out)
            if check:
                failed = [t for t in tasks if codes[t] not in (None, 0) and not processes.killed_on_purpose(t)]
                if failed:
                    processes.stop()
                    self._raise_failed(failed[0], f"{failed[0]} failed ({describe_exit(codes[failed[0]])}).")
            if all(code is not None for code in codes.values()):
                return codes
            if deadline is not None and time.monotonic() > deadline:
                running = [t for t in tasks if codes[t] is None]
                processes.stop()
                raise ClusterTimeoutError(
                    f"wait(timeout={timeout:g}) ran out while " + ", ".join(map(str, running))
                    + " kept running; the cluster was stopped. Their logs end with:\n"
                    + self._logs.tails(running), running)
            time.sleep(0.05)

    def _raise_failed(self, task, headline):
        tail = self._logs.log(*task, tail=25)
        raise TaskFailedError(f"{headline} The end of its log ({self._logs.log_path(*task)}):\n{tail}",
                              task=task, exit_code=self._processes.process(task).returncode, log_tail=tail)
