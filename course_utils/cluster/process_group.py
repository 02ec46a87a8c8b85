"""One task's process group: starting it so that it dies with its parent, killing it, its exit code in words."""
import os
import signal
import subprocess
import sys

# Started by ``python -c``: make the kernel SIGKILL this process when its parent dies (Linux
# prctl PR_SET_PDEATHSIG = 1), check that the parent did not die before that, join the task's
# network namespace if it has one (setns with CLONE_NEWNET; Python 3.11 has no os.setns), then
# become the real script, or with LOCAL_CLUSTER_PROGRAM=1 the program named by the first argument,
# with exec (the death signal and the namespace survive exec). Doing this
# in the child itself instead of in a ``preexec_fn`` avoids running Python code between fork and
# exec in a parent full of threads (a TensorFlow kernel), which the subprocess documentation
# warns can deadlock; and the process keeps its pid and process group.
_BOOTSTRAP = """\
import ctypes, os, signal, sys
parent = int(os.environ.pop("LOCAL_CLUSTER_PARENT_PID"))
netns = os.environ.pop("LOCAL_CLUSTER_NETNS", "")
program = os.environ.pop("LOCAL_CLUSTER_PROGRAM", "")
if sys.platform.startswith("linux"):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)
    if netns:
        try:
            fd = os.open(netns, os.O_RDONLY)
            if libc.setns(fd, 0x40000000) != 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
            os.close(fd)
        except OSError as error:
            sys.exit(f"LocalCluster: this task could not join its network namespace {netns}: {error}")
if program:
    os.execvp(sys.argv[1], sys.argv[1:])
os.execv(sys.executable, [sys.executable] + sys.argv[1:])
"""


def launch(python, script, args, environ, log_file, netns=None):
    """Start ``python script *args`` in a new process group that, on Linux, dies with this process.

    Args:
        python: the interpreter.
        script, args: the script's path and its command-line arguments (strings).
        environ: the whole environment of the new process.
        log_file: an open binary file that gets its stdout and stderr.
        netns: the file of a network namespace (``/run/netns/<name>``) for the process to run in;
            None: this process's own network.

    Returns:
        The ``subprocess.Popen``; its process group id is its pid, so :func:`kill_group` reaches
        the processes it starts too.

    Example (not run by the doctests: it starts a worker script):
        >>> with open("worker-0.log", "ab") as log_file:  # doctest: +SKIP
        ...     process = launch(sys.executable, "worker.py", [], dict(os.environ), log_file)
    """
    return subprocess.Popen(
        [python, "-c", _BOOTSTRAP, str(script), *args],
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
        env={**environ, "LOCAL_CLUSTER_PARENT_PID": str(os.getpid()), "LOCAL_CLUSTER_NETNS": netns or ""},
        start_new_session=True,
    )


def launch_program(argv, environ, log_file, netns=None):
    """Start the program ``argv`` (looked up on ``PATH``) as :func:`launch` starts a script: in a new process group
    that, on Linux, dies with this process, in the network namespace ``netns`` if given.

    Example:
        >>> with open(folder / "munged.log", "ab") as log_file:  # doctest: +SKIP
        ...     process = launch_program(["munged", "--foreground"], dict(os.environ), log_file)
    """
    return subprocess.Popen(
        [sys.executable, "-c", _BOOTSTRAP, *map(str, argv)],
        stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
        env={**environ, "LOCAL_CLUSTER_PARENT_PID": str(os.getpid()), "LOCAL_CLUSTER_NETNS": netns or "",
             "LOCAL_CLUSTER_PROGRAM": "1"},
        start_new_session=True,
    )


def kill_group(process, sig):
    """Send ``sig`` to the process group of ``process`` (the task and anything it started)."""
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_and_reap(processes):
    """SIGKILL every process group in ``processes`` and collect the exit statuses (no zombies)."""
    for process in list(processes):
        if process.returncode is None:
            kill_group(process, signal.SIGKILL)
    for process in list(processes):
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            pass


def describe_exit(code):
    """An exit code in words: ``"still running"`` (None), ``"killed by SIGKILL"`` (-9), ``"exit code 1"``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
