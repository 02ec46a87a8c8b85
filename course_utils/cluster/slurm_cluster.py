"""A real Slurm cluster on this machine: ``munged``, ``slurmctld`` and one ``slurmd`` per node, each node a "host" of
its own, as chapter 11 uses it.

Each node is a network namespace on a bridge (the :class:`~course_utils.cluster.namespaces.TaskNetwork` of
``LocalCluster(network="namespaces")``), with its own host name (a UTS namespace), its own ``/etc/hosts`` (a mount
namespace with a file bind-mounted over it) and its own process ids (a PID namespace, whose processes the kernel
kills when its ``slurmd`` ends). ``slurmctld`` and ``munged`` run in this machine's own network, on the bridge's
address. Everything lives in one temporary folder: the configuration, munge's key and socket (so that it neither
needs nor disturbs a system ``munged``), the state, the logs. The controller's name must be this machine's
``hostname -s`` (``slurmctld`` checks it); the clients (``sbatch``, ``sinfo``, ...) find the cluster through
``SLURM_CONF`` (:attr:`SlurmCluster.client_env`).

Why not ``ip netns exec``: it remounts ``/sys``, which hides the cgroup mounts, and ``slurmd`` 22.05 then refuses to
start; joining the namespace with ``setns`` (as ``nsenter --net`` does) and ``unshare`` for the rest leaves ``/sys``
alone. (This Slurm build can run several ``slurmd`` in one network, but they share a host name and their tasks'
ports clash.)
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

from . import namespaces
from .errors import ClusterTimeoutError, SlurmClusterError
from .namespaces import TaskNetwork, owner_is_dead
from .process_group import kill_and_reap, kill_group, launch_program
from .spec import Task, find_free_ports

__all__ = ["SlurmCluster", "job_tres"]
# The programs, each with Debian's package that has it.
PROGRAMS = {"munged": "munge", "slurmctld": "slurmctld", "slurmd": "slurmd", "sbatch": "slurm-client",
            "srun": "slurm-client", "sinfo": "slurm-client", "squeue": "slurm-client", "scontrol": "slurm-client",
            "scancel": "slurm-client", "unshare": "util-linux", "ip": "iproute2"}
SBIN = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
APT_INSTALL = ("printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && "
               "apt-get update && apt-get install -y --no-install-recommends {packages}")
SLURMD_PORT = 6818  # Slurm's default: each node has a network of its own, so every slurmd can use it
FOLDER_PREFIX = "slurm-cluster-"  # then the owner's process id: /tmp/slurm-cluster-4242-k3j9x2
POLL_SECONDS = 0.5  # how often wait() asks squeue (sbatch --wait asks far less often)
_ADVICE = ("Start the kernel as root on a Linux machine of your own (for example in a container started with "
           "--privileged; JupyterLab then needs --allow-root), or read the chapter's results on the course's "
           "website.")


def find_programs():
    """The paths of the programs a :class:`SlurmCluster` runs, ``{name: path}``.

    Raises:
        SlurmClusterError: a program is missing; the message has the ``apt-get`` line that installs its package
            (with a ``policy-rc.d`` that keeps apt from starting the system's own daemons).

    Example:
        >>> find_programs()["slurmctld"]
        '/usr/sbin/slurmctld'
    """
    found = {name: shutil.which(name, path=SBIN) for name in PROGRAMS}
    missing = sorted({PROGRAMS[name] for name, path in found.items() if path is None})
    if missing:
        raise SlurmClusterError(
            f"SlurmCluster needs Slurm and munge, and this machine lacks the package(s) {', '.join(missing)} "
            f"(no {', '.join(name for name, path in found.items() if path is None)}). On Debian or Ubuntu, as root: "
            f"{APT_INSTALL.format(packages=' '.join(missing))}")
    return found


def check_permitted():
    """The programs' paths (:func:`find_programs`) if this process may start a cluster: Linux, root, the packages.

    Raises:
        SlurmClusterError: not Linux, not permitted to make namespaces (not root), or a package missing; the
            message says what to change.
    """
    if not sys.platform.startswith("linux"):
        raise SlurmClusterError(f"SlurmCluster runs each Slurm node in Linux namespaces, and this is {sys.platform}. "
                                f"{_ADVICE}")
    capabilities = namespaces.effective_capabilities()
    missing = [name for bit, name in namespaces.CAPABILITIES.items() if not capabilities >> bit & 1]
    if missing:
        raise SlurmClusterError(f"SlurmCluster starts Slurm's daemons as root, each node in namespaces of its own, "
                                f"which takes {' and '.join(namespaces.CAPABILITIES.values())}; this Python (user id "
                                f"{os.geteuid()}) lacks {' and '.join(missing)}. {_ADVICE}")
    return find_programs()


def _slurm_conf(folder, controller, bridge_address, port, nodes, cpus, memory_mb):
    node_lines = [f"NodeName={name} NodeAddr={address} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN"
                  for name, address in nodes.items()]
    return "\n".join([
        "# A course cluster on one machine (course_utils.cluster.slurm_cluster): every node a namespace.",
        "ClusterName=course",
        f"SlurmctldHost={controller}({bridge_address})",
        f"SlurmctldPort={port}",
        f"SlurmdPort={SLURMD_PORT}",
        "AuthType=auth/munge",
        # cred_expire: a step's credential lives 10 s (not 120), and so long a requeued job waits to start again
        f"AuthInfo=socket={folder}/munge.socket,cred_expire=10",
        "CredType=cred/munge",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={folder}/state",
        f"SlurmdSpoolDir={folder}/spool-%n",
        f"SlurmctldPidFile={folder}/slurmctld.pid",
        f"SlurmdPidFile={folder}/slurmd-%n.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log",
        f"SlurmdLogFile={folder}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",  # no cgroups: a node's PID namespace holds its processes
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MpiDefault=none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",  # CPUs and memory are what jobs ask for, and what they get
        # A job that asks for no memory gets this much per CPU, here half a CPU's share of the node (each site sets
        # its own): so --exclusive alone (all CPUs) gets half the node's memory, and only --mem=0 all of it.
        f"DefMemPerCPU={memory_mb // cpus // 2}",
        "SchedulerType=sched/builtin",
        "SchedulerParameters=sched_interval=2",  # look at waiting jobs every 2 s (not 60): a requeued job restarts soon
        "ReturnToService=2",
        *node_lines,
        "PartitionName=course Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ""])


_MEBIBYTES = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}


def job_tres(job):
    """A job's ``TRES`` (trackable resources: what it got, once it runs) as ``{name: number}``, memory in MiB.

    Args:
        job: :meth:`SlurmCluster.job`'s dict (``scontrol show job``), whose ``TRES`` reads e.g.
            ``cpu=4,mem=24104M,node=2,billing=4`` (Slurm writes the memory in the largest unit that divides it:
            ``mem=24G`` is 24576 MiB).

    Raises:
        ValueError: the dict has no ``TRES`` (it is not :meth:`SlurmCluster.job`'s).

    Example:
        >>> job_tres({"TRES": "cpu=4,mem=24G,node=2,billing=4"})
        {'cpu': 4, 'mem': 24576, 'node': 2, 'billing': 4}
    """
    if not job.get("TRES"):
        raise ValueError(f"No TRES in {job!r}: pass the dict SlurmCluster.job(job_id) returns.")
    tres = {}
    for item in job["TRES"].split(","):
        name, value = item.split("=", 1)
        if name == "mem":
            number, unit = re.fullmatch(r"([\d.]+)([KMGT]?)", value).groups()
            tres[name] = round(float(number) * _MEBIBYTES[unit or "M"])
        else:
            tres[name] = int(value)
    return tres


def _remove_leftover_folders():
    """Delete the folders of clusters whose Python was killed (their daemons died with it; the next
    :class:`~course_utils.cluster.namespaces.TaskNetwork` deletes their networks)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*-*"):
        owner = folder.name[len(FOLDER_PREFIX):].split("-")[0]
        if owner.isdigit() and owner_is_dead(int(owner)):
            shutil.rmtree(folder, ignore_errors=True)


def _end(processes, network, folder):
    """Stop the daemons (the last first), kill what is left, delete the network and the folder."""
    for process in reversed(processes):
        if process.poll() is None:
            kill_group(process, signal.SIGTERM)
    end = time.monotonic() + 5
    while time.monotonic() < end and any(p.poll() is None for p in processes):
        time.sleep(0.05)
    kill_and_reap(processes)
    if network is not None:
        network.delete()
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


class SlurmCluster:
    """A Slurm cluster of ``nodes`` nodes on this machine, with real daemons: start it, submit jobs, stop it.

    Starting (or entering the ``with`` block) makes the nodes' network, starts ``munged``, ``slurmctld`` and one
    ``slurmd`` per node, and waits until ``sinfo`` shows every node idle. Stopping ends exactly those daemons,
    every job's processes with them (a node's PID namespace ends with its ``slurmd``), and deletes the network and
    the cluster's folder; so do leaving the ``with`` block, garbage collection and the end of Python, and the
    daemons die with this process (Linux's parent-death signal) if it is killed.

    Every node offers the CPUs of this machine (``cpus`` each, default all of them: the nodes share the same
    cores) and ``memory_mb`` of memory (default this machine's memory divided among the nodes). A job that asks for
    no memory gets half a CPU's share of it per CPU (``DefMemPerCPU``), so ``--exclusive`` alone gets half a node's
    memory and ``--mem=0`` all of it. The nodes are named ``node1``, ``node2``, ... and the partition ``course``.

    Args:
        nodes: how many nodes (slurmd daemons), a whole number from 1 to 250.
        cpus: the CPUs each node offers; default ``os.cpu_count()``.
        memory_mb: the memory each node offers, in MiB.
        start_timeout: seconds to wait for every node to be idle.

    Raises:
        ValueError: ``nodes``, ``cpus`` or ``memory_mb`` is not a positive whole number.
        SlurmClusterError: the cluster cannot run here (not Linux, not root, Slurm or munge not installed; the
            message says what to change), or did not start (the message ends with the daemons' logs).

    Example:
        >>> with SlurmCluster(nodes=2) as cluster:  # doctest: +SKIP
        ...     print(cluster.run("sinfo"))
        ...     job = cluster.submit("job.sh", cwd="/tmp/job")
        ...     cluster.wait(job)["JobState"]
        'COMPLETED'
    """

    def __init__(self, nodes=2, *, cpus=None, memory_mb=None, start_timeout=60.0):
        for name, value in (("nodes", nodes), ("cpus", cpus), ("memory_mb", memory_mb)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"SlurmCluster's {name} must be a positive whole number, got {value!r}.")
        if nodes > 250:
            raise ValueError(f"SlurmCluster gives each node an address in one /24 subnet, so at most 250 nodes; "
                             f"got {nodes}.")
        self._programs = check_permitted()
        self.cpus = cpus or os.cpu_count()
        self.memory_mb = memory_mb or os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20 // nodes
        self.start_timeout = start_timeout
        self.controller = socket.gethostname().split(".")[0]  # `hostname -s`: slurmctld insists on it
        self.node_names = [f"node{i}" for i in range(1, nodes + 1)]
        self._nodes = {name: Task("node", i) for i, name in enumerate(self.node_names, start=1)}
        self._network = self._folder = None
        self._addresses, self._processes, self._finalizer = {}, [], None

    # ----------------------------------------------------------------- where things are
    @property
    def folder(self):
        """The cluster's folder (configuration, munge's socket, state, the daemons' logs) while it runs, else None."""
        return self._folder

    @property
    def slurm_conf(self):
        """The path of the cluster's ``slurm.conf`` while it runs (what ``SLURM_CONF`` names), else None."""
        return None if self._folder is None else self._folder / "slurm.conf"

    @property
    def addresses(self):
        """``{node name: address}`` on the bridge while the cluster runs; ``{}`` before."""
        return dict(self._addresses) if self._folder is not None else {}

    @property
    def client_env(self):
        """The environment of a plain shell on this cluster's login node: ``PATH``, ``HOME``, ``SLURM_CONF``, no more.

        What a job needs beyond that, its batch script must set (a submission from a shell with other variables
        passes them on to the job, which then works for one user and fails for the next).
        """
        self._check_running()
        return {"PATH": SBIN, "HOME": os.environ.get("HOME", "/root"), "SLURM_CONF": str(self.slurm_conf)}

    def _check_running(self):
        if self._folder is None:
            raise SlurmClusterError("The Slurm cluster is not running: start it first (cluster.start() or "
                                    "`with SlurmCluster() as cluster:`).")

    # ----------------------------------------------------------------- starting and stopping
    def start(self):
        """Make the network, start the daemons, wait until every node is idle; return the cluster (nothing if running).

        Raises:
            NetworkNamespaceError: the nodes' network cannot be made (nothing was started).
            SlurmClusterError: a daemon exited or the nodes were not idle within ``start_timeout`` seconds; the
                message ends with the daemons' logs. Whatever was started is stopped again.
        """
        if self._folder is not None:
            return self
        _remove_leftover_folders()
        network = TaskNetwork()  # makes nothing yet; raises NetworkNamespaceError where it cannot, before the folder
        self._folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        self._network = network
        self._finalizer = weakref.finalize(self, _end, self._processes, self._network, self._folder)
        try:
            self._start_daemons()
            self.wait_until_idle()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_daemons(self):
        folder, programs = self._folder, self._programs
        addresses = self._network.assign(list(self._nodes.values()))
        self._network.create()
        (folder / "state").mkdir()
        key = folder / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        self._addresses = {name: addresses[task] for name, task in self._nodes.items()}
        hosts = ["127.0.0.1 localhost", f"{self._network.bridge_address} {self.controller}"]
        hosts += [f"{address} {name}" for name, address in self._addresses.items()]
        (folder / "hosts").write_text("\n".join(hosts) + "\n")
        (folder / "slurm.conf").write_text(_slurm_conf(folder, self.controller, self._network.bridge_address,
                                                       find_free_ports(1)[0], self._addresses, self.cpus,
                                                       self.memory_mb))
        env = {"PATH": SBIN, "SLURM_CONF": str(folder / "slurm.conf")}
        # --force: run although the folder is private to root (munged would like its socket's folder open to all)
        self._launch("munged", [programs["munged"], "--foreground", "--force", f"--socket={folder}/munge.socket",
                                f"--key-file={key}", f"--pid-file={folder}/munged.pid", f"--seed-file={folder}/seed",
                                f"--log-file={folder}/munged.log"], env)
        self._wait_for(lambda: (folder / "munge.socket").exists(), "munged to make its socket")
        self._launch("slurmctld", [programs["slurmctld"], "-D", "-f", folder / "slurm.conf"], env)
        for name, task in self._nodes.items():
            # In the node's network (joined by the launcher): a host name, /etc/hosts and process ids of its own.
            # The PID namespace's first process is slurmd; when it ends, the kernel kills every process in it.
            node_shell = (f"hostname {name} && mount --bind {folder}/hosts /etc/hosts && "
                          f"exec {programs['slurmd']} -D -f {folder}/slurm.conf")
            self._launch(f"slurmd-{name}", [programs["unshare"], "--uts", "--mount", "--pid", "--fork", "--kill-child",
                                            "--mount-proc", "/bin/sh", "-c", node_shell],
                         env, netns=self._network.namespace_path(task))

    def _launch(self, name, argv, env, netns=None):
        with open(self._folder / f"{name}.out", "ab") as log_file:
            self._processes.append(launch_program(argv, env, log_file, netns=netns))

    def _wait_for(self, condition, what, timeout=None):
        end = time.monotonic() + (timeout or self.start_timeout)
        while not condition():
            exited = [p for p in self._processes if p.poll() is not None]
            if exited or time.monotonic() > end:
                why = "a daemon exited" if exited else f"not within {timeout or self.start_timeout:.0f} s"
                raise SlurmClusterError(f"Waited for {what}, and {why} (sinfo: {self._node_states() or 'no answer'})."
                                        f"\n{self.daemon_logs()}")
            time.sleep(0.1)

    def _node_states(self):
        result = subprocess.run([self._programs["sinfo"], "--noheader", "--Node", "--format=%N %t"],
                                env=self.client_env, capture_output=True, text=True)
        return dict(line.split() for line in result.stdout.splitlines()) if result.returncode == 0 else {}

    def wait_until_idle(self, timeout=None):
        """Wait until ``sinfo`` shows every node idle (a job's nodes are ``completing`` for a moment after it ends).

        Raises:
            SlurmClusterError: a daemon exited, or not within ``timeout`` seconds (default ``start_timeout``); the
                message ends with the daemons' logs.
        """
        self._wait_for(lambda: self._node_states() == {name: "idle" for name in self.node_names},
                       "every node to be idle in sinfo", timeout)

    def stop(self):
        """Stop the daemons (SIGTERM, SIGKILL after 5 s) and every job's processes; delete the network and folder.

        Safe to call more than once and before :meth:`start`; :meth:`start` makes a new cluster.
        """
        if self._finalizer is not None:
            self._finalizer()  # runs _end once
        self._finalizer = self._network = self._folder = None
        self._processes = []

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        state = f"running in {self._folder}" if self._folder else "stopped"
        return f"SlurmCluster({len(self.node_names)} nodes: {', '.join(self.node_names)}; {state})"

    # ----------------------------------------------------------------- using it
    def run(self, *args, cwd=None, env=None):
        """Run a Slurm command (``"sinfo"``, ``"srun", "-N2", "hostname"``, ...) from a plain shell; return its output.

        Args:
            args: the command and its arguments.
            cwd: the folder to run it in (a job's working folder).
            env: variables added to :attr:`client_env`.

        Raises:
            SlurmClusterError: the cluster is not running, or the command failed (the message quotes its error).

        Example:
            >>> print(cluster.run("sinfo"))  # doctest: +SKIP
            PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST
            course*      up   infinite      2   idle node[1-2]
        """
        self._check_running()
        result = subprocess.run([str(a) for a in args], cwd=cwd, env={**self.client_env, **(env or {})},
                                capture_output=True, text=True)
        if result.returncode:
            raise SlurmClusterError(f"`{' '.join(map(str, args))}` failed (exit code {result.returncode}): "
                                    f"{result.stderr.strip() or result.stdout.strip()}")
        return result.stdout

    def submit(self, batch_script, cwd):
        """Submit ``batch_script`` with ``sbatch`` from a plain shell in ``cwd``; return the job id (an int).

        Raises:
            SlurmClusterError: ``sbatch`` refused the script (the message quotes why).
        """
        return int(self.run("sbatch", "--parsable", Path(batch_script).resolve(), cwd=cwd).strip().split(";")[0])

    def job(self, job_id):
        """What ``scontrol show job`` says of a job, as a dict (``JobState``, ``ExitCode``, ``NodeList``, ...).

        Raises:
            ValueError: the cluster knows no such job (the message lists the jobs it knows).
        """
        self._check_running()
        result = subprocess.run([self._programs["scontrol"], "--oneliner", "show", "job", str(job_id)],
                                env=self.client_env, capture_output=True, text=True)
        if result.returncode:
            known = self.run("squeue", "--noheader", "--states=all", "--format=%i").split()
            raise ValueError(f"This Slurm cluster knows no job {job_id!r} ({result.stderr.strip()}); its jobs: "
                             f"{', '.join(known) or 'none yet'}. Pass the id submit() returned.")
        return dict(re.findall(r"(\w+)=(\S*)", result.stdout))

    def wait(self, job_id, timeout=300.0):
        """Wait until the job has ended, asking ``squeue`` every half second; return :meth:`job`'s dict.

        Raises:
            ValueError: no such job.
            ClusterTimeoutError: the job ran longer than ``timeout`` seconds (then it is cancelled).
        """
        self.job(job_id)
        end = time.monotonic() + timeout
        while self.run("squeue", "--noheader", f"--jobs={job_id}", "--format=%T").strip():
            if time.monotonic() > end:
                self.run("scancel", job_id)
                raise ClusterTimeoutError(f"Slurm job {job_id} ran longer than {timeout:.0f} s and was cancelled.")
            time.sleep(POLL_SECONDS)
        return self.job(job_id)

    def daemon_logs(self, tail=20):
        """The last ``tail`` lines of each daemon's log (what to read when the cluster did not start)."""
        if self._folder is None:
            return ""
        parts = []
        for path in sorted(self._folder.glob("*.log")) + sorted(self._folder.glob("*.out")):
            lines = path.read_text(errors="replace").splitlines()[-tail:]
            parts.append(f"----- {path.name} -----\n" + "\n".join(lines))
        return "\n".join(parts)
