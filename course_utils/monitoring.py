"""Watching a job: what TensorBoard shows, read back in plain Python, and the TensorBoard a notebook started.

``read_scalars(run_dir)`` reads the scalar summaries of one run's event files (what the Scalars and Time
Series tabs plot). ``read_trace(path)`` lists the rows of a profiler trace (``*.xplane.pb``) as XProf's trace
viewer shows them: one process row per XPlane, one thread row per XLine, with the events each thread
recorded. ``stop_tensorboard(logdir)`` stops the servers that ``%tensorboard --logdir <logdir>`` started in
this process.
"""
import collections
import dataclasses
import os
import signal
import time
from pathlib import Path

__all__ = ["TraceRow", "read_scalars", "read_trace", "stop_tensorboard"]

EVENT_FILE_GLOB = "events.out.tfevents.*"


def read_scalars(run_dir):
    """The scalars of one TensorBoard run, read back from its event files with plain TensorFlow.

    Each event file is a TFRecord file of ``tf.compat.v1.Event`` protocol buffers; a scalar written by
    ``tf.summary.scalar`` is a one-number tensor whose metadata names the ``scalars`` plugin (older
    writers use ``simple_value``).

    Args:
        run_dir: a run's folder, the one that holds ``events.out.tfevents.*`` files, e.g. ``logs/train``
            of ``tf.keras.callbacks.TensorBoard(logs)`` (sub-folders are not searched).

    Returns:
        ``{tag: [(step, value), ...]}``, each list in the order written (files in name order, which is
        the order they were created), the values as Python floats.

    Raises:
        FileNotFoundError: ``run_dir`` holds no event file (the message lists what it holds).

    Example:
        >>> import tempfile, tensorflow as tf
        >>> logs = Path(tempfile.mkdtemp())
        >>> with tf.summary.create_file_writer(str(logs / "train")).as_default():
        ...     for step, loss in enumerate([1.5, 0.75, 0.5]):
        ...         _ = tf.summary.scalar("epoch_loss", loss, step=step)
        >>> read_scalars(logs / "train")["epoch_loss"]
        [(0, 1.5), (1, 0.75), (2, 0.5)]
    """
    import tensorflow as tf

    folder = Path(run_dir)
    files = sorted(folder.glob(EVENT_FILE_GLOB))
    if not files:
        held = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else None
        raise FileNotFoundError(
            f"read_scalars found no {EVENT_FILE_GLOB} file in {str(folder)!r} "
            + (f"(it holds {held})" if held is not None else "(no such folder)")
            + ". Pass the folder of one run, e.g. logs/'train' or logs/'validation' of "
              "tf.keras.callbacks.TensorBoard(logs)."
        )
    scalars = collections.defaultdict(list)
    for path in files:
        for record in tf.data.TFRecordDataset(str(path)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    scalars[value.tag].append((event.step, float(value.simple_value)))
                elif value.metadata.plugin_data.plugin_name == "scalars":
                    scalars[value.tag].append((event.step, float(tf.make_ndarray(value.tensor))))
    return dict(scalars)


@dataclasses.dataclass(frozen=True, eq=False)
class TraceRow:
    """One row of XProf's trace viewer: a thread (XLine) of a process (XPlane) of the trace.

    Attributes:
        process: the plane's name, e.g. ``/host:CPU`` (on a GPU machine also ``/device:GPU:0`` ...).
        thread: the line's name, e.g. ``parallel_device_execute/-1343339098794580806``.
        events: ``collections.Counter`` of the names of the events the thread recorded.
    """
    process: str
    thread: str
    events: collections.Counter

    @property
    def kind(self):
        """The thread's name without its number: ``parallel_device_execute``, ``tf_Compute``, ..."""
        return self.thread.split("/")[0]


def _only_trace(path):
    path = Path(path)
    if path.is_file():
        return path
    found = sorted(path.rglob("*.xplane.pb")) if path.is_dir() else []
    if len(found) == 1:
        return found[0]
    if not found:
        raise FileNotFoundError(
            f"read_trace found no *.xplane.pb under {str(path)!r}. Pass the log folder given to "
            f"tf.profiler.experimental.start(...) (or to the TensorBoard callback), after the profiler stopped."
        )
    raise ValueError(
        f"read_trace found {len(found)} traces under {str(path)!r}: "
        f"{[str(p.relative_to(path)) for p in found]}. Pass one of these files."
    )


def read_trace(path):
    """The rows of a profiler trace, as XProf's trace viewer lists them: process, thread, events.

    Args:
        path: a ``*.xplane.pb`` file, or a folder with exactly one below it (e.g. the log folder given
            to ``tf.profiler.experimental.start``).

    Returns:
        A list of ``TraceRow``, one per thread that recorded events, in the order of the file.

    Raises:
        FileNotFoundError: no trace there.
        ValueError: several traces under the folder (the message lists them: pass one).
        RuntimeError: this TensorFlow cannot read its profiler's trace format (the message says what to install).

    Example (not run by the doctests: it needs the profile of a training step; tests/test_monitoring.py makes one):
        >>> rows = read_trace(logs / "dtensor")  # doctest: +SKIP
        >>> collections.Counter(row.kind for row in rows)["parallel_device_execute"]  # doctest: +SKIP
        8
    """
    from course_utils.profiling import _xplane_pb2

    space = _xplane_pb2().XSpace.FromString(_only_trace(path).read_bytes())
    rows = []
    for plane in space.planes:
        for line in plane.lines:
            events = collections.Counter(plane.event_metadata[event.metadata_id].name for event in line.events)
            rows.append(TraceRow(plane.name, line.name, events))
    return rows


def _exited(pid):
    """Whether this process's child ``pid`` has exited (collecting it if so); raises ChildProcessError for
    a process that is not this process's child (or was already collected)."""
    return os.waitpid(pid, os.WNOHANG)[0] == pid


def stop_tensorboard(logdir, timeout=30.0):
    """Stop the TensorBoard servers this process started for ``logdir``, e.g. with ``%tensorboard --logdir <logdir>``.

    ``tensorboard.manager`` keeps an info file (port, pid, log folder) for every running TensorBoard, which
    ``%tensorboard`` reads to reuse one. Each server of ``logdir`` that is a child of this process (the
    magic starts it as the kernel's child) gets SIGTERM: TensorBoard then exits cleanly, removing its info
    file, and its data server follows. This waits until it has exited and collects it, so that no process
    is left behind. Servers that another process started are left alone, even for the same folder.
    POSIX only (Linux, macOS, Colab).

    Args:
        logdir: the log folder the server was started with (compared after resolving both paths; a
            relative one from this process's working folder).
        timeout: seconds to wait for each server to exit.

    Returns:
        The process ids stopped, an empty list if this process started no server for ``logdir``.

    Raises:
        TimeoutError: a server still ran after ``timeout`` seconds (the message gives its pid).

    Example (not run by the doctests: it needs a TensorBoard that %tensorboard started):
        >>> %tensorboard --logdir {logs} --port 0  # doctest: +SKIP
        >>> stop_tensorboard(logs)  # doctest: +SKIP
        [12345]
    """
    from tensorboard import manager

    wanted = os.path.realpath(logdir)
    stopped = []
    for info in manager.get_all():
        if not info.logdir or os.path.realpath(info.logdir) != wanted:
            continue
        try:
            if _exited(info.pid):
                continue  # died without removing its info file
        except ChildProcessError:
            continue  # another process's server
        os.kill(info.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while not _exited(info.pid):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"TensorBoard (pid {info.pid}, port {info.port}) still runs {timeout:g} s after SIGTERM; "
                    f"stop it with `kill -9 {info.pid}`."
                )
            time.sleep(0.1)
        stopped.append(info.pid)
    return stopped
