"""Run a notebook's cells in a fresh Jupyter kernel, in a child process with a hard time limit.

The grader and the benchmark share this. :func:`run_in_child` starts
``python -m course_utils.tools.notebook_runner DRIVER`` in its own process group; the child starts a
kernel (:class:`KernelSession`), hands it to the driver function, and writes the driver's result
as JSON. When the time limit runs out, the child's process group and the kernel's are killed
(SIGKILL), so an endless loop or a process the notebook started cannot outlive the run.

With a ``sandbox`` (see :mod:`course_utils.grading.sandbox`), only the kernel runs in it: the
child and the driver stay outside and talk to the kernel through Unix sockets. Then the end of
the run kills the sandbox's first process, and with it every process of its PID namespace, also
those that left the kernel's process group (``start_new_session=True``); the run returns only
once they are gone.

A driver is ``"module:function"``; it is called as ``function(session, payload, report)`` in the
child and fills the dict ``report`` as it goes (so that what it found survives a kernel that dies). The payload reaches the child on its standard input, not
in a file, so nothing in it is left on disk for the notebook to read.
"""
import asyncio
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["KernelSession", "private_ipc_address", "run_in_child", "run_notebook_cells"]


def private_ipc_address():
    """A new kernel's channel address for ZeroMQ's ``ipc`` transport: a path prefix in a new private
    folder, so its sockets are files no other kernel can pick. Over TCP, a free port is found by
    binding and releasing it, and two kernels starting at once may pick the same one
    (``ZMQError: Address already in use``).

    Example:
        >>> from jupyter_client import KernelManager
        >>> manager = KernelManager(kernel_name="python3", transport="ipc", ip=private_ipc_address())
        >>> Path(manager.ip).name, Path(manager.ip).parent.name.startswith("course-kernel-")
        ('kernel', True)
    """
    return os.path.join(tempfile.mkdtemp(prefix="course-kernel-"), "kernel")


class KernelSession:
    """A Jupyter kernel started in ``workdir`` with ``env``, running cells one at a time.

    Args:
        workdir: the kernel's working folder.
        env: the kernel's environment (with a sandbox: bwrap's; the kernel's is in its command).
        cell_timeout: seconds one cell may take (None: no limit).
        sandbox: None, or the dict :func:`run_in_child` describes: the kernel then starts in it.
        on_start: called with the session as soon as the kernel's process exists.
        ipc_dir: without a sandbox, an empty folder for the kernel's Unix sockets (default: a new private
            one, removed at the end; see :func:`private_ipc_address`).

    Example (not run by the doctests: it starts a kernel; tests/test_notebook_runner.py does):
        >>> with KernelSession("/tmp/work", dict(os.environ)) as session:  # doctest: +SKIP
        ...     cell = session.execute("print(6 * 7)")
        >>> cell.outputs[0]["text"]  # doctest: +SKIP
        '42\\n'
    """

    def __init__(self, workdir, env, cell_timeout=None, sandbox=None, on_start=None, ipc_dir=None):
        self.workdir, self.env, self.cell_timeout, self.sandbox = str(workdir), env, cell_timeout, sandbox
        self.ipc_dir = ipc_dir
        self.on_start = on_start  # called with this session once the kernel's process exists
        self.kernel_pid = None
        self._loop = asyncio.new_event_loop()

    def _sandboxed_manager(self):
        """A kernel manager whose kernel command is the sandbox's (``sandbox["argv"]`` up to the
        connection file) and whose channels are Unix sockets in ``sandbox["connection_dir"]``."""
        from jupyter_client.kernelspec import KernelSpec
        from jupyter_client.manager import AsyncKernelManager

        conn = Path(self.sandbox["connection_dir"])
        km = AsyncKernelManager(transport="ipc", ip=str(conn / "kernel"), connection_file=str(conn / "connection.json"))
        km._kernel_spec = KernelSpec(argv=[*self.sandbox["argv"], "{connection_file}"], language="python",
                                     display_name="Python 3 (sandboxed)")
        km.write_connection_file()  # now, to hand it to the sandbox user; start_kernel keeps it
        if self.sandbox.get("owner"):
            os.chown(km.connection_file, *self.sandbox["owner"])
        return km

    def __enter__(self):
        import nbformat
        from jupyter_client.manager import AsyncKernelManager
        from nbclient import NotebookClient

        ip = os.path.join(self.ipc_dir, "kernel") if self.ipc_dir else private_ipc_address()
        self._km = self._sandboxed_manager() if self.sandbox else AsyncKernelManager(
            kernel_name="python3", transport="ipc", ip=ip)
        self._loop.run_until_complete(self._km.start_kernel(cwd=self.workdir, env=self.env))
        self.kernel_pid = getattr(self._km.provisioner, "pid", None)
        if self.on_start:
            self.on_start(self)
        self._client = _capped_client_class(NotebookClient)(
            nbformat.v4.new_notebook(), km=self._km, timeout=self.cell_timeout, allow_errors=True,
            startup_timeout=120, resources={"metadata": {"path": self.workdir}})
        self._loop.run_until_complete(self._client.async_start_new_kernel_client())
        return self

    def sandbox_init(self, wait_seconds=5.0):
        """``(host pid, "pid:[inode]")`` of the sandbox's first process (bwrap's child, the first
        process of the kernel's PID namespace), or None without a sandbox or when it did not appear
        within ``wait_seconds`` of the call."""
        import psutil

        deadline = time.monotonic() + wait_seconds
        while self.sandbox and self.kernel_pid:
            try:
                children = psutil.Process(self.kernel_pid).children()
                if children:
                    return children[0].pid, os.readlink(f"/proc/{children[0].pid}/ns/pid")
            except (OSError, psutil.Error):
                return None
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)
        return None

    def execute(self, source):
        """Run ``source`` as a cell and return it (an nbformat cell) with its outputs.

        Raises:
            nbclient.exceptions.DeadKernelError: the kernel died.
            nbclient.exceptions.CellTimeoutError: the cell ran longer than ``cell_timeout``.
        """
        import nbformat

        cell = nbformat.v4.new_code_cell(source)
        self._client.nb.cells[:] = [cell]  # earlier cells' outputs are not kept
        self._loop.run_until_complete(self._client.async_execute_cell(cell, 0))
        return cell

    def __exit__(self, *exc_info):
        try:
            self._loop.run_until_complete(self._km.shutdown_kernel(now=True))
        except Exception:  # the kernel may already be dead; the caller kills its process group anyway
            pass
        if not self.sandbox and not self.ipc_dir:
            shutil.rmtree(os.path.dirname(self._km.ip), ignore_errors=True)
        self._loop.close()
        return False


OUTPUT_LIMIT = 1 << 20  # characters of output kept per cell; the rest is dropped (a cell may print gigabytes)


def _capped_client_class(base):
    """``base`` (nbclient's NotebookClient) keeping at most :data:`OUTPUT_LIMIT` characters of each cell's outputs."""

    class CappedClient(base):
        def output(self, outs, msg, display_id, cell_index):
            content = msg.get("content", {})
            size = len(content.get("text", "")) + sum(len(str(v)) for v in content.get("data", {}).values())
            kept = sum(len(o.get("text", "")) + sum(len(str(v)) for v in o.get("data", {}).values()) for o in outs)
            if kept + size <= OUTPUT_LIMIT:
                return super().output(outs, msg, display_id, cell_index)
            if any(o.get("name") == "course-dropped" for o in outs):
                return None
            room = OUTPUT_LIMIT - kept
            if "text" in content and room > 0:  # keep the beginning of a long stream
                super().output(outs, {**msg, "content": {**content, "text": content["text"][:room]}}, display_id,
                               cell_index)
            outs.append({"output_type": "stream", "name": "course-dropped",
                         "text": f"[more than {OUTPUT_LIMIT} characters of output: the rest was dropped]"})
            return None

    return CappedClient


def cell_error(cell):
    """``(ename, evalue)`` of the first error output of an executed cell, or None."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return output.get("ename", ""), output.get("evalue", "")
    return None


def run_notebook_cells(session, payload, report):
    """A driver: run the code cells of the notebook at ``payload["notebook"]`` in order, stopping at
    the first error; ``report["status"]`` is ``"ok"`` or ``"<ename>: <evalue>"``."""
    import nbformat

    nb = nbformat.read(payload["notebook"], as_version=4)
    report["status"] = "ok"
    for cell in nb.cells:
        if cell.cell_type == "code":
            error = cell_error(session.execute(cell.source))
            if error:
                report["status"] = f"{error[0]}: {error[1]}"[:200]
                return


def _kill_group(pgid, wait_seconds=5.0):
    """SIGKILL the process group ``pgid``, then wait (at most ``wait_seconds``) until it is gone.

    A signal is delivered asynchronously: without the wait, a killed process may still run for a
    moment after ``killpg`` returns. Zombies count as gone (they no longer run).
    """
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:  # the group is already gone, or not ours
        return
    deadline = time.monotonic() + wait_seconds
    while _group_runs(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _runs(pid, namespace=None):
    """Whether process ``pid`` still runs (is not a zombie), and is in the PID namespace ``namespace`` when given."""
    try:
        if namespace is not None and os.readlink(f"/proc/{pid}/ns/pid") != namespace:
            return False
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def _kill_sandbox(pid, namespace, wait_seconds=10.0):
    """SIGKILL the first process of a sandbox's PID namespace, then wait (at most ``wait_seconds``)
    until it is gone. The kernel kills every other process of a namespace whose first process dies,
    and that first process finishes exiting only after they all have: when it is gone, they are."""
    if not _runs(pid, namespace):
        return True
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    deadline = time.monotonic() + wait_seconds
    while _runs(pid, namespace):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def read_small_file(path, limit=64 << 20):
    """The bytes of the regular file ``path`` (at most ``limit``), or None when it is missing, a
    symbolic link, a folder, a FIFO or anything else that is not a regular file. Never blocks.

    Example:
        >>> read_small_file("/etc/hostname") is not None, read_small_file("/etc")
        (True, None)
    """
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, size = [], 0
        while size < limit:
            chunk = os.read(fd, min(1 << 20, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def _group_runs(pgid):
    """Whether a process of the group ``pgid`` still runs (is not a zombie)."""
    import psutil

    for process in psutil.process_iter(["status"]):
        try:
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False


def run_in_child(driver, payload, timeout, env=None, cell_timeout=None, sandbox=None, kernel_path=None):
    """Run ``driver`` on a fresh kernel in a child process; kill everything after ``timeout`` seconds.

    Args:
        driver: ``"module:function"`` (see the module docstring).
        payload: a JSON-serialisable dict for the driver.
        timeout: seconds for the whole run, kernel start included.
        env: the kernel's (and child's) environment; default ``os.environ``. With a sandbox, the
            child's only: the kernel's is in the sandbox's command.
        cell_timeout: seconds one cell may take (default: no limit but ``timeout``).
        sandbox: None, or run the kernel in a sandbox: a dict with ``argv`` (the command that starts
            the kernel, up to its connection file: :meth:`course_utils.grading.sandbox.Box.kernel_argv`),
            ``workdir``, ``connection_dir`` and ``owner`` (``(uid, gid)`` to give the connection file, or None).
        kernel_path: without a sandbox, the kernel's ``PYTHONPATH`` (not the child's): the folder whose
            ``course_utils`` the kernel imports.

    Returns:
        A dict: ``kind`` (``"completed"``, ``"timeout"``, ``"kernel died"`` or ``"failed"``),
        ``detail``, ``seconds``, and under ``report`` what the driver reported (empty after a time-out).
        With a sandbox, ``sandbox_gone`` says whether every process of the sandbox was seen to end.

    Example (not run by the doctests: it runs chapter 0 in a kernel):
        >>> run_in_child("course_utils.tools.notebook_runner:run_notebook_cells",  # doctest: +SKIP
        ...              {"notebook": "notebooks/00_welcome.ipynb"}, timeout=120)["report"]
        {'status': 'ok'}
    """
    scratch = Path(tempfile.mkdtemp(prefix="course-run-"))
    result_path, pid_path, log_path = scratch / "result.json", scratch / "kernel.pid", scratch / "child.log"
    (scratch / "kernel-cwd").mkdir()
    (scratch / "kernel-ipc").mkdir(mode=0o700)  # the kernel's sockets, removed with the scratch folder
    cmd = [sys.executable, "-m", "course_utils.tools.notebook_runner", driver, str(scratch), str(cell_timeout or 0)]
    start = time.monotonic()
    try:
        with open(log_path, "wb") as log:
            child = subprocess.Popen(cmd, env=dict(env if env is not None else os.environ), stdin=subprocess.PIPE,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            child.stdin.write(json.dumps({"payload": payload, "sandbox": sandbox, "kernel_path": kernel_path}).encode())
            child.stdin.close()
            try:
                child.wait(timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(child.pid)
                child.wait()
        kernel = _json_or_none(read_small_file(pid_path))
        kernel = kernel if isinstance(kernel, dict) else {}
        if kernel.get("pid"):
            _kill_group(kernel["pid"])  # the kernel (or bwrap) leads its own process group
        gone = _kill_sandbox(*kernel["init"]) if kernel.get("init") else None
        result = None if timed_out else _json_or_none(read_small_file(result_path))
        result = result if isinstance(result, dict) and "kind" in result else None
        log = (read_small_file(log_path) or b"").decode(errors="replace")
        outcome = {"kind": "timeout", "detail": "", "report": {}} if timed_out else result or {
            "kind": "failed", "report": {},
            "detail": " ".join(log.split()[-40:])[-300:] or f"exit status {child.returncode}"}
        outcome["seconds"] = time.monotonic() - start
        if sandbox is not None:
            outcome["sandbox_gone"] = gone is not False
        return outcome
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _json_or_none(data):
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def _child_main(driver, scratch, cell_timeout):
    """The child's side of :func:`run_in_child`."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    scratch = Path(scratch)
    given = json.loads(sys.stdin.read())
    payload, sandbox = given["payload"], given["sandbox"]
    module, function = driver.split(":")
    drive = getattr(importlib.import_module(module), function)
    outcome = {"kind": "completed", "detail": "", "report": {}}
    workdir = sandbox["workdir"] if sandbox else scratch / "kernel-cwd"

    def started(session):  # so that the parent can kill the kernel even if this child is killed
        if session.kernel_pid:
            pids = {"pid": session.kernel_pid, "init": session.sandbox_init()}
            (scratch / "kernel.pid").write_text(json.dumps(pids))

    try:
        kernel_env = dict(os.environ, **({"PYTHONPATH": given["kernel_path"]} if given.get("kernel_path") else {}))
        with KernelSession(workdir, kernel_env, cell_timeout or None, sandbox, started,
                           scratch / "kernel-ipc") as session:
            drive(session, payload, outcome["report"])
    except DeadKernelError:
        outcome["kind"] = "kernel died"
    except CellTimeoutError:
        outcome["kind"] = "timeout"
    except Exception as err:  # nbclient's own failures, e.g. a kernel that never started
        outcome["kind"], outcome["detail"] = "failed", f"{type(err).__name__}: {err}"
    (scratch / "result.json").write_text(json.dumps(outcome))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
