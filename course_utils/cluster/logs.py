"""The log files of a :class:`LocalCluster`: where they are, and reading them without TensorFlow's info lines."""
import re
import shutil
import tempfile
import weakref
from pathlib import Path

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


def without_tf_info(text):
    """``text`` without TensorFlow's C++ info lines and start-up notices (the lines of ``_TF_INFO_LINE``).

    Example:
        >>> without_tf_info("I0000 00:00:1712345678.123456   4242 cpu_feature_guard.cc:210] ...\\nEpoch 1/3")
        'Epoch 1/3'
    """
    return "\n".join(line for line in text.splitlines() if not _TF_INFO_LINE.match(line))


class TaskLogs:
    """The log folder of a cluster, with one file per started task: ``<job>-<index>.log``.

    Args:
        spec: the cluster's :class:`~course_utils.cluster.spec.ClusterSpec` (it names the tasks).
        log_dir: the folder, made if missing; None makes a new temporary folder, deleted with
            its logs when this object is garbage-collected or Python exits (a folder you pass stays).

    Example (not run by the doctests: it needs a cluster's spec):
        >>> logs = TaskLogs(spec, None)  # doctest: +SKIP
        >>> logs.log_path("worker", 0).name  # doctest: +SKIP
        'worker-0.log'
    """

    def __init__(self, spec, log_dir):
        self._spec = spec
        if log_dir:
            self.log_dir = Path(log_dir)
            self.log_dir.mkdir(parents=True, exist_ok=True)
        else:
            self.log_dir = Path(tempfile.mkdtemp(prefix="local_cluster_"))
            # The processes write here; the TaskProcesses that started them holds this object, so
            # it is collected, and the processes killed, before the folder goes.
            weakref.finalize(self, shutil.rmtree, self.log_dir, ignore_errors=True)

    def log_path(self, job, index=0):
        """The path of one started task's log file (stdout and stderr together).

        Args:
            job, index: the task (``index`` defaults to 0).

        Raises:
            ValueError: there is no such started task.

        Example (not run by the doctests: it needs a cluster):
            >>> cluster.log_path("worker", 0).name  # doctest: +SKIP
            'worker-0.log'
        """
        task = self._spec.started_task(job, index)
        return self.log_dir / f"{task.job}-{task.index}.log"

    def log(self, job, index=0, tail=None, hide_tf_info=True):
        """The text one task has printed so far (stdout and stderr).

        Args:
            job, index: the task.
            tail: keep only the last ``tail`` lines.
            hide_tf_info: drop TensorFlow's C++ info lines (``I0000 00:00:...``), keep the rest.

        Raises:
            ValueError: there is no such started task.

        Example (not run by the doctests: it needs a running cluster):
            >>> print(cluster.log("worker", 0, tail=20))  # doctest: +SKIP
        """
        path = self.log_path(job, index)
        text = path.read_text(errors="replace") if path.exists() else ""
        lines = (without_tf_info(text) if hide_tf_info else text).splitlines()
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        return "\n".join(lines)

    def tails(self, tasks, lines=15):
        """The last ``lines`` lines of each task's log, under a header naming the task and its file."""
        return "\n".join(f"--- {t} (log {self.log_path(*t)}) ---\n{self.log(*t, tail=lines)}" for t in tasks)
