"""One bubblewrap sandbox per submission: the notebook's kernel, and every process it starts, run
where they cannot reach the grader, the other submissions or the network.

:class:`Box` prepares a folder for one submission and the command that starts its kernel::

    bwrap [namespaces, mounts, environment] -- python -I -S sandbox.py launch [limits, user] --
        python -m ipykernel_launcher -f CONNECTION_FILE

Inside the sandbox (`bubblewrap <https://github.com/containers/bubblewrap>`_, Debian package
``bubblewrap``; no daemon, no root needed):

- **Files**: a fresh file system. Read-only: the system folders (``/usr``, ``/etc`` and the
  ``/bin``, ``/lib`` ... links or folders), the Python installation, the virtual environment, the
  course package (the grader's stripped copy, :mod:`course_utils.grading.handout`) and
  ``TFDS_DATA_DIR``. Private and in memory, with a size limit: ``/tmp`` and ``/dev/shm``. Writable:
  only three folders of the box, each its own mount point, so that it cannot be renamed or replaced
  (by a link to a host folder, say): the working folder with a copy of the student's notebook, the
  folder the kernel writes its answers to, and the one of the kernel's connection file and sockets.
  The submissions folder, the other boxes, the grader's own package, the grades and your home
  folder are not there.
- **Processes**: its own PID namespace (it sees only its own processes, and when the grader kills
  the namespace's first process, the kernel kills every process in the namespace, also one started
  in a new session), its own network namespace (only its own loopback: no network), IPC and UTS
  namespaces, a new session (no terminal), and ``--die-with-parent``.
- **User**: unprivileged. When the grader runs as root, a user id no account has (``UID_BASE`` plus a
  random offset, one per submission); otherwise your own user id, seen as 65534 (nobody) inside a
  user namespace that cannot create further user namespaces.
- **Limits** (``setrlimit`` in :func:`launch`, inherited by every process the kernel starts):
  address space per process (``memory_limit``), processes and threads of the sandbox's user
  (``process_limit``), size of one written file, no core dumps.

The kernel talks to the grader through Unix sockets in the box folder (ZeroMQ's ``ipc``
transport), since it has no network. The environment inside is built from scratch
(:func:`kernel_environment`), so the instructor's other variables (tokens, keys) stay outside.

This module uses only the standard library: :func:`launch` runs it as a script (``python -I -S``)
inside the sandbox, before the kernel.
"""
import functools
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["Box", "SandboxUnavailable", "check_available", "kernel_environment", "launch"]

GiB = 1024 ** 3
MEMORY_LIMIT = 8 * GiB      # address space of one process
PROCESS_LIMIT = 1024        # processes and threads of the sandbox user (a fork bomb stops here)
FILE_SIZE_LIMIT = 1 * GiB   # one file written in the sandbox
TMPFS_SIZE = 1 * GiB        # /tmp and /dev/shm each
UID_BASE = 1_900_000_000    # as root: sandbox users are UID_BASE .. UID_BASE + UID_SPAN - 1
UID_SPAN = 1 << 24
NOBODY = 65534
SYSTEM_FOLDERS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ENV_PREFIXES = ("TF_", "TFDS_", "KERAS_", "COURSE_", "XLA_", "OMP_", "MKL_", "LC_")
ENV_NAMES = ("LANG", "LANGUAGE", "TZ", "PYTHONHASHSEED")
# The kernel's Python, as a path that exists in the sandbox ("venv/bin/../bin/python" may not: its
# ".." would pass through folders the sandbox does not have). Not resolved: a virtual environment's
# python may be a symbolic link, and Python finds its environment by the path it was started by.
PYTHON = os.path.normpath(os.path.abspath(sys.executable))
PACKAGE = Path(__file__).resolve().parents[1]  # course_utils


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot start a sandbox here (the message says why)."""


def kernel_environment(env, package=PACKAGE):
    """The environment a sandboxed kernel gets: from ``env``, only the variables the course and its
    libraries read (``TF_*``, ``TFDS_*``, ``KERAS_*``, ``COURSE_*``, ``XLA_*``, ``OMP_*``, ``MKL_*``,
    ``LC_*``, ``LANG``, ``LANGUAGE``, ``TZ``, ``PYTHONHASHSEED``), plus a fixed ``PATH``, ``HOME=/tmp``,
    ``USER`` and ``PYTHONPATH`` set to the folder that holds ``package`` (the ``course_utils`` the
    sandbox shows), so that the notebook imports that one (whatever put another on the grader's path).

    Example:
        >>> kernel_environment({"TF_USE_LEGACY_KERAS": "1", "AWS_SECRET_ACCESS_KEY": "..."})["TF_USE_LEGACY_KERAS"]
        '1'
    """
    kept = {name: value for name, value in env.items()
            if name.startswith(ENV_PREFIXES) or name in ENV_NAMES}
    bin_dir = str(Path(PYTHON).parent)
    return {**kept, "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "USER": "student",
            "LOGNAME": "student", "VIRTUAL_ENV": sys.prefix, "PYTHONPATH": str(Path(package).parent)}


def _read_only_trees(package, extra=()):
    """The host folders a kernel reads: the Python installation, the virtual environment, ``package``
    and ``extra``; each is left out when it is inside another or inside a system folder."""
    wanted = [Path(sys.base_prefix), Path(sys.prefix), Path(package), *map(Path, extra)]
    trees = []
    for path in sorted({p for p in wanted if p.is_dir()}, key=lambda p: len(p.parts)):
        if not any(path.is_relative_to(t) for t in trees) and not any(
                path.is_relative_to(f) for f in ("/usr", "/etc") if not os.path.islink(f)):
            trees.append(path)
    return trees


class Box:
    """The folder and the kernel command of one submission's sandbox.

    Args:
        folder: an empty host folder for this submission (made and given to the sandbox user).
        memory_limit: bytes of address space per process.
        process_limit: processes and threads of the sandbox user.
        read_only: more host folders to show read-only (e.g. ``TFDS_DATA_DIR``); missing ones are skipped.
        package: the ``course_utils`` folder the kernel imports (the grader's stripped copy).

    The box folder holds ``work/`` (the kernel's working folder), ``exports/`` (where the kernel
    writes the answers the grader asks for) and ``conn/`` (the connection file and sockets).

    Example (not run by the doctests: it needs bubblewrap; tests/grading/test_sandbox.py runs boxes):
        >>> box = Box(Path(tempfile.mkdtemp()) / "box", read_only=[os.environ.get("TFDS_DATA_DIR", "")])  # doctest: +SKIP
        >>> box.prepare(notebook_bytes=b"{}")  # doctest: +SKIP
        >>> box.kernel_argv({"TFDS_DATA_DIR": "/data"})[-3:]  # bwrap's options, the kernel, its connection file  # doctest: +SKIP
        ['-m', 'ipykernel_launcher', '-f']
    """

    def __init__(self, folder, memory_limit=MEMORY_LIMIT, process_limit=PROCESS_LIMIT, read_only=(), package=PACKAGE):
        self.folder, self.package = Path(folder), Path(package)
        self.work, self.exports, self.conn = self.folder / "work", self.folder / "exports", self.folder / "conn"
        self.memory_limit, self.process_limit = int(memory_limit), int(process_limit)
        self.read_only = [p for p in read_only if p and Path(p).is_dir()]
        self.privileged = os.geteuid() == 0
        self.uid = UID_BASE + secrets.randbelow(UID_SPAN) if self.privileged else None

    @property
    def owner(self):
        """``(uid, gid)`` the grader gives the files the kernel must read or write, or None (same user)."""
        return (self.uid, self.uid) if self.privileged else None

    def prepare(self, notebook_bytes=None, notebook_name="submission.ipynb"):
        """Make the box folder, its working folder (with a copy of the notebook), the exports folder
        and the connection folder, owned by the sandbox user."""
        self.folder.mkdir(mode=0o700)
        for folder in (self.work, self.exports, self.conn):
            folder.mkdir(mode=0o700)
        paths = [self.folder, self.work, self.exports, self.conn]
        if notebook_bytes is not None:
            copy = self.work / notebook_name
            copy.write_bytes(notebook_bytes)
            paths.append(copy)
        if self.owner:
            for path in paths:
                os.chown(path, *self.owner)

    def bwrap_args(self, env):
        """The bubblewrap options (see the module docstring), up to the command."""
        args = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
        if not self.privileged:
            args += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY), "--disable-userns"]
        args += ["--perms", "1777", "--size", str(TMPFS_SIZE), "--tmpfs", "/tmp"]
        for folder in SYSTEM_FOLDERS:
            if os.path.islink(folder):
                args += ["--symlink", os.readlink(folder), folder]
            elif os.path.isdir(folder):
                args += ["--ro-bind", folder, folder]
        args += ["--proc", "/proc", "--dev", "/dev",
                 "--perms", "1777", "--size", str(TMPFS_SIZE), "--tmpfs", "/dev/shm"]
        made = {"/", "/tmp", *SYSTEM_FOLDERS}

        def parents(path):
            out = []
            for parent in reversed(Path(path).parents):
                if str(parent) not in made:
                    made.add(str(parent))
                    out += ["--perms", "0755", "--dir", str(parent)]
            return out

        for tree in _read_only_trees(self.package, self.read_only):
            args += parents(tree) + ["--ro-bind", str(tree), str(tree)]
        # Each writable folder is its own mount point: the kernel can write in it, but not rename or replace
        # it (say, by a link to a folder of the host, which the grader would then follow when it cleans up).
        args += parents(self.folder) + ["--perms", "0755", "--dir", str(self.folder)]
        for folder in (self.work, self.exports, self.conn):
            args += ["--bind", str(folder), str(folder)]
        args += ["--remount-ro", "/", "--chdir", str(self.work), "--clearenv"]
        for name, value in sorted(kernel_environment(env, self.package).items()):
            args += ["--setenv", name, value]
        return args

    def launcher_args(self):
        """``python -I -S sandbox.py launch [limits and user] --``: what runs first inside the sandbox."""
        args = [PYTHON, "-I", "-S", str(self.package / "grading" / "sandbox.py"), "launch",
                "--memory", str(self.memory_limit), "--processes", str(self.process_limit),
                "--file-size", str(FILE_SIZE_LIMIT)]
        if self.privileged:
            args += ["--uid", str(self.uid), "--gid", str(self.uid)]
        return args + ["--"]

    def command(self, env, command):
        """The full command that runs ``command`` (a list) in this box's sandbox."""
        return [_bwrap(), *self.bwrap_args(env), "--", *self.launcher_args(), *command]

    def kernel_argv(self, env):
        """The command that starts the sandboxed kernel, up to its connection file (which follows)."""
        return self.command(env, [PYTHON, "-m", "ipykernel_launcher", "-f"])


def _bwrap():
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable("bubblewrap (bwrap) is not installed (Debian/Ubuntu: sudo apt-get install bubblewrap)")
    return path


@functools.lru_cache(maxsize=None)
def check_available():
    """Start one sandbox exactly as the grader would (with Python inside) and check that it runs.

    Raises:
        SandboxUnavailable: bwrap is missing, or the kernel refused to make the namespaces (e.g.
            unprivileged user namespaces are switched off), with bwrap's own message.

    Example (not run by the doctests: its answer depends on the machine):
        >>> check_available()   # None where the sandbox works  # doctest: +SKIP
    """
    with tempfile.TemporaryDirectory(prefix="course-sandbox-check-", ignore_cleanup_errors=True) as scratch:
        box = Box(Path(scratch) / "box")
        box.prepare()
        code = "import os, socket; print(os.getpid(), socket.gethostname(), os.path.exists('/work-not-here'))"
        try:
            done = subprocess.run(box.command({}, [PYTHON, "-c", code]), capture_output=True, text=True,
                                  timeout=60, cwd=box.work)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise SandboxUnavailable(f"bwrap could not be run ({err})") from err
        if done.returncode != 0 or done.stdout.split()[:2] != ["2", "sandbox"]:
            why = " ".join((done.stderr or done.stdout).split())[-300:] or f"exit status {done.returncode}"
            raise SandboxUnavailable(f"bwrap could not start a sandbox here: {why}")


def launch(argv):
    """Inside the sandbox, before the kernel: set the limits, become the sandbox user, and run the command.

    ``argv``: ``--memory BYTES --processes N --file-size BYTES [--uid U --gid G] -- COMMAND ...``.
    Limits are lowered only (``setrlimit`` of both soft and hard values), so nothing in the sandbox
    can raise them again; with ``--uid`` (the grader runs as root), the supplementary groups are
    dropped, then the group and user ids are set, which drops every capability, and
    ``no_new_privs`` keeps set-user-id programs from regaining any.
    """
    import resource

    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    values = {options[i].lstrip("-"): int(options[i + 1]) for i in range(0, len(options), 2)}
    for limit, value in ((resource.RLIMIT_AS, values["memory"]), (resource.RLIMIT_NPROC, values["processes"]),
                         (resource.RLIMIT_FSIZE, values["file-size"]), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(limit, (value, value))
    if "uid" in values:
        os.setgroups([])
        os.setresgid(values["gid"], values["gid"], values["gid"])
        os.setresuid(values["uid"], values["uid"], values["uid"])
    import ctypes

    PR_SET_NO_NEW_PRIVS = 38
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    os.execv(command[0], command)


if __name__ == "__main__":
    if sys.argv[1:2] == ["launch"]:
        launch(sys.argv[2:])
