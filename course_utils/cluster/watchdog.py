"""The time limit of a cluster's processes: a background thread that kills every process past its deadline."""
import signal
import threading
import time
import weakref

from .process_group import kill_group


def _patrol(watchdog_ref, stopped):
    # Holds only a weak reference: the watchdog of a forgotten cluster is collected with it (the
    # cluster's finalizer kills the processes), and then this thread ends.
    while not stopped.wait(0.1):
        watchdog = watchdog_ref()
        if watchdog is None:
            return
        watchdog.kill_overdue()
        del watchdog


class Watchdog:
    """Kills (SIGKILL, whole process group) each watched process that is still running after its deadline.

    A daemon thread checks ten times a second. Every check marks all overdue tasks in one pass
    under a lock, and :meth:`timed_out` reads under the same lock, so tasks started together
    (one deadline) are reported together.

    Example (not run by the doctests: it needs a worker's process):
        >>> watchdog = Watchdog()  # doctest: +SKIP
        >>> watchdog.start()  # doctest: +SKIP
        >>> watchdog.watch(Task("worker", 0), process, time.monotonic() + 60)  # doctest: +SKIP
        >>> watchdog.timed_out([Task("worker", 0)])   # after 60 s: [Task(job='worker', index=0)]  # doctest: +SKIP
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._watched = {}       # Task -> (Popen of its latest start, time.monotonic() deadline)
        self._timed_out = set()  # tasks whose latest process this watchdog killed
        self._stopped = threading.Event()
        self._thread = None

    @property
    def stopped(self):
        """Whether :meth:`stop` was called after the latest :meth:`start`."""
        return self._stopped.is_set()

    def start(self):
        """Start the thread, unless it is running (after :meth:`stop`, a new thread)."""
        if self._stopped.is_set():
            self._stopped = threading.Event()
            self._thread = None
        if self._thread is None:
            self._thread = threading.Thread(target=_patrol, args=(weakref.ref(self), self._stopped),
                                            name="LocalCluster watchdog", daemon=True)
            self._thread.start()

    def watch(self, task, process, deadline):
        """Kill ``process``, the task's latest, once ``time.monotonic()`` passes ``deadline``."""
        with self._lock:
            self._watched[task] = (process, deadline)
            self._timed_out.discard(task)

    def timed_out(self, tasks):
        """Those of ``tasks`` whose latest process this watchdog killed."""
        with self._lock:
            return [t for t in tasks if t in self._timed_out]

    def kill_overdue(self):
        """Kill every watched process past its deadline (the thread calls this)."""
        now = time.monotonic()
        with self._lock:
            for task, (process, deadline) in self._watched.items():
                if process.poll() is None and now > deadline:
                    self._timed_out.add(task)
                    kill_group(process, signal.SIGKILL)

    def stop(self):
        """Tell the thread to end; it ends within 0.1 s (:meth:`join` waits for that)."""
        self._stopped.set()

    def join(self):
        """Wait up to 1 s for the thread to end (unless this is that thread)."""
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1)
