"""Separate "hosts" on one Linux machine: every started task in a network namespace of its own.

A network namespace is a private copy of the network stack: its own interfaces, addresses,
routes, ports and its own ``127.0.0.1``. :class:`TaskNetwork` gives each started task of a
:class:`~course_utils.cluster.LocalCluster` one, cabled (a veth pair) to a bridge (a virtual
switch) in this machine's own namespace, on a private /24 subnet::

    this Python: 10.x.y.1 on the bridge tfc<tag>br (tasks in not_started have this address)
        ├── veth tfc<tag>v0 ── eth0 10.x.y.2 in namespace tfc-<tag>-<pid>-worker-0
        └── veth tfc<tag>v1 ── eth0 10.x.y.3 in namespace tfc-<tag>-<pid>-worker-1

The tasks reach each other and this process only over the bridge, at those addresses. Making
namespaces needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2's ``ip`` command. Every
name starts with ``tfc`` and holds a random tag; the namespaces' names and the bridge's alias
hold the owner's process id, so that the next network removes what a killed Python left behind.
"""
import ctypes
import ipaddress
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import threading
import weakref

from .errors import NetworkNamespaceError

PREFIX = "tfc"
NETNS_DIR = "/run/netns"  # where `ip netns add` keeps the namespaces it makes
CAPABILITIES = {12: "CAP_NET_ADMIN", 21: "CAP_SYS_ADMIN"}  # bits of CapEff in /proc/self/status
_NAMESPACE = re.compile(rf"{PREFIX}-([0-9a-f]{{6}})-(\d+)-")
_BRIDGE = re.compile(rf"{PREFIX}([0-9a-f]{{6}})br")
_TAG = re.compile(rf"{PREFIX}-?([0-9a-f]{{6}})")
_ALIAS = "course_utils.cluster pid {}"
_ALIAS_PID = re.compile(r"course_utils\.cluster pid (\d+)")
# Private blocks, most spacious first; a /24 is picked at random in one that no route touches.
_BLOCKS = [ipaddress.ip_network(block) for block in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
ADVICE = ("Use network='localhost' (the default), where every task is a process on 127.0.0.1; or, on a machine "
          "of your own, run Python as root (for example with sudo, or in a container started with --privileged; "
          "JupyterLab then needs --allow-root).")


def effective_capabilities():
    """The effective capabilities of this process, as the bit mask of ``/proc/self/status``."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


def check_permitted():
    """Return the path of the ``ip`` command if this process may make network namespaces.

    Raises:
        NetworkNamespaceError: this is not Linux, ``ip`` (iproute2) is missing, or the process
            lacks CAP_NET_ADMIN or CAP_SYS_ADMIN; the message says what to change.

    Example (not run by the doctests: its answer depends on the machine):
        >>> check_permitted()  # doctest: +SKIP
        '/usr/sbin/ip'
    """
    if not sys.platform.startswith("linux"):
        raise NetworkNamespaceError(f"network='namespaces' needs Linux network namespaces, and this is "
                                    f"{sys.platform}. Use network='localhost' (the default).")
    ip = shutil.which("ip") or shutil.which("ip", path="/usr/sbin:/sbin")
    if ip is None:
        raise NetworkNamespaceError("network='namespaces' needs the `ip` command (iproute2), which is not "
                                    "installed. Install it (apt-get install iproute2) or use network='localhost'.")
    missing = [name for bit, name in CAPABILITIES.items() if not effective_capabilities() >> bit & 1]
    if missing:
        raise NetworkNamespaceError(
            f"network='namespaces' makes network namespaces, a bridge and virtual cables, which takes "
            f"{' and '.join(CAPABILITIES.values())}; this Python (user id {os.geteuid()}) lacks "
            f"{' and '.join(missing)}. {ADVICE}")
    return ip


def _ip_json(ip, *args):
    result = subprocess.run([ip, "-j", *args], capture_output=True, text=True)
    if result.returncode:
        raise NetworkNamespaceError(f"network='namespaces' could not read this machine's network: `ip -j "
                                    f"{' '.join(args)}` failed ({result.stderr.strip()}). {ADVICE}")
    return json.loads(result.stdout) if result.stdout.strip() else []


def owner_is_dead(pid):
    """Whether no process has the id ``pid`` (the owner of a network, or of a Slurm cluster's folder, is gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def _remove(ip, links, namespaces):
    """Delete ``links`` (deleting a veth deletes its peer) and then ``namespaces``; missing ones are skipped."""
    commands = [f"link del {name}" for name in links] + [f"netns del {name}" for name in namespaces]
    if commands:
        subprocess.run([ip, "-force", "-batch", "-"], input="\n".join(commands) + "\n",
                       capture_output=True, text=True)


def _tag(name):
    """The tag in a name this module made (``tfc<tag>...`` or ``tfc-<tag>-...``), else None."""
    match = _TAG.match(name)
    return match and match[1]


def remove_leftovers(ip):
    """Remove the networks whose owner process is gone (a killed Python); return their tags and the tags in use.

    Example (not run by the doctests: it changes the machine's network namespaces):
        >>> remove_leftovers("/usr/sbin/ip")  # doctest: +SKIP
        ({'3fa9c2'}, {'b71e04'})
    """
    links = _ip_json(ip, "link", "show")
    namespaces = [entry["name"] for entry in _ip_json(ip, "netns", "list")]
    owners = {}  # tag -> the process id in its namespaces' names or its bridge's alias
    for name in namespaces:
        if match := _NAMESPACE.match(name):
            owners[match[1]] = int(match[2])
    for link in links:
        bridge, owner = _BRIDGE.fullmatch(link["ifname"]), _ALIAS_PID.fullmatch(link.get("ifalias", ""))
        if bridge and owner:
            owners[bridge[1]] = int(owner[1])
    stale = {tag for tag, pid in owners.items() if owner_is_dead(pid)}
    _remove(ip, [link["ifname"] for link in links if _tag(link["ifname"]) in stale],
            [name for name in namespaces if _tag(name) in stale])
    return stale, set(owners) - stale


def _routed_networks(ip):
    return [ipaddress.ip_network(route["dst"], strict=False)
            for route in _ip_json(ip, "-4", "route", "show", "table", "all") if route["dst"] != "default"]


def free_subnet(ip, rng=random.SystemRandom()):
    """A private /24 subnet that no route of this machine touches (at random, so that two clusters differ).

    Raises:
        NetworkNamespaceError: every private block is routed already.
    """
    routed = _routed_networks(ip)
    for block in _BLOCKS:
        for _ in range(200):
            start = int(block.network_address) + 256 * rng.randrange(block.num_addresses // 256)
            subnet = ipaddress.ip_network((start, 24))
            if not any(subnet.overlaps(network) for network in routed):
                return subnet
    raise NetworkNamespaceError("network='namespaces' found no free /24 subnet in 10.0.0.0/8, 172.16.0.0/12 or "
                                "192.168.0.0/16: routes of this machine cover them. Use network='localhost'.")


def in_namespace(path, function):
    """Call ``function()`` in a thread that has joined the network namespace at ``path``; return what it returns.

    A network namespace belongs to a thread, not to the whole process, and a socket stays in the
    namespace it was made in; so a socket made by ``function`` works from any thread afterwards.

    Raises:
        OSError: the thread could not join the namespace; whatever ``function`` raised.

    Example (not run by the doctests: it needs a network namespace):
        >>> listener = in_namespace("/run/netns/tfc-3fa9c2-4242-worker-1", lambda: socket.create_server(("10.57.3.3", 0)))  # doctest: +SKIP
    """
    outcome = {}

    def run():
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                if ctypes.CDLL(None, use_errno=True).setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
                    raise OSError(ctypes.get_errno(), f"setns({path}): {os.strerror(ctypes.get_errno())}")
            finally:
                os.close(fd)
            outcome["value"] = function()
        except BaseException as error:  # handed to the calling thread
            outcome["error"] = error

    thread = threading.Thread(target=run, name="course_utils in_namespace")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _connects(host, port, seconds=2.0):
    try:
        socket.create_connection((host, port), timeout=seconds).close()
        return True
    except OSError:
        return False


class _Layout:
    """The names and addresses of one network, shared with its finalizer (which must not hold the network)."""

    def __init__(self, bridge):
        self.bridge, self.tasks, self.created = bridge, {}, False  # tasks: Task -> (namespace, veth, address)


def _delete_layout(ip, layout):
    if layout.created:
        layout.created = False
        _remove(ip, [veth for _, veth, _ in layout.tasks.values()] + [layout.bridge],
                [namespace for namespace, _, _ in layout.tasks.values()])


class TaskNetwork:
    """A bridge on a private /24 subnet, and one network namespace for each started task of a cluster.

    Making one checks that namespaces are permitted, removes what a killed Python left behind, and
    picks the subnet and the names; :meth:`assign` gives the started tasks their addresses, and
    :meth:`create` makes it all (:class:`~course_utils.cluster.processes.TaskProcesses` deletes it
    when the cluster stops). It deletes itself when garbage-collected or when Python exits.

    Raises:
        NetworkNamespaceError: namespaces are not permitted here; the message says what to change.

    Example (not run by the doctests: it makes network namespaces, as root):
        >>> network = TaskNetwork()  # doctest: +SKIP
        >>> network.assign([Task("worker", 0), Task("worker", 1)])  # doctest: +SKIP
        {Task(job='worker', index=0): '10.57.3.2', Task(job='worker', index=1): '10.57.3.3'}
        >>> network.create()  # doctest: +SKIP
        >>> network.namespace_path(Task("worker", 0))  # doctest: +SKIP
        '/run/netns/tfc-3fa9c2-4242-worker-0'
        >>> network.delete()  # doctest: +SKIP
    """

    def __init__(self):
        self._ip = check_permitted()
        _, in_use = remove_leftovers(self._ip)
        self.tag = os.urandom(3).hex()
        while self.tag in in_use:
            self.tag = os.urandom(3).hex()
        self.owner = os.getpid()  # in the names, so that the next network knows whether this one is left over
        self.subnet = free_subnet(self._ip)
        self.bridge_address = str(self.subnet.network_address + 1)
        self._layout = _Layout(f"{PREFIX}{self.tag}br")
        weakref.finalize(self, _delete_layout, self._ip, self._layout)

    def assign(self, started_tasks):
        """Give each started task its namespace and address (.2, .3, ... in order); return ``{task: address}``."""
        if len(started_tasks) > self.subnet.num_addresses - 3:
            raise ValueError(f"network='namespaces' gives each task an address in one /24 subnet, so at most "
                             f"{self.subnet.num_addresses - 3} tasks; this cluster starts {len(started_tasks)}.")
        for k, task in enumerate(started_tasks):
            self._layout.tasks[task] = (f"{PREFIX}-{self.tag}-{self.owner}-{task.job}-{task.index}",
                                        f"{PREFIX}{self.tag}v{k}", str(self.subnet.network_address + 2 + k))
        return {task: address for task, (_, _, address) in self._layout.tasks.items()}

    def namespace(self, task):
        """The name of the task's namespace (for ``ip netns exec``), or None for a task with none."""
        return self._layout.tasks.get(task, (None,))[0]

    def namespace_path(self, task):
        """The file a process opens to join the task's namespace, or None for a task with none."""
        name = self.namespace(task)
        return None if name is None else f"{NETNS_DIR}/{name}"

    def bytes_sent(self, task):
        """How many bytes the task's namespace has sent over its cable (``eth0``) since the network was made.

        Raises:
            ValueError: the task has no namespace, or the network does not exist now (the cluster
                stopped: read it before leaving the ``with`` block).

        Example (not run by the doctests: it needs a running cluster's network):
            >>> network.bytes_sent(Task("worker", 0))  # doctest: +SKIP
            31542377
        """
        namespace = self.namespace(task)
        if namespace is None or not self._layout.created:
            raise ValueError(f"{task} has no network namespace now: bytes_sent counts a started task's traffic while "
                             f"its cluster runs (network='namespaces'); read it before the cluster stops.")
        return _ip_json(self._ip, "-n", namespace, "-s", "link", "show", "eth0")[0]["stats64"]["tx"]["bytes"]

    def create(self):
        """Make the bridge, the namespaces and their cables (nothing if they exist).

        Raises:
            NetworkNamespaceError: ``ip`` refused a command (the message quotes it), or the subnet
                was taken since this network picked it; nothing is left behind.
        """
        if self._layout.created:
            return
        if any(self.subnet.overlaps(network) for network in _routed_networks(self._ip)):
            raise NetworkNamespaceError(f"The subnet {self.subnet} of this cluster is routed on this machine now "
                                        f"(another network took it after the cluster was made). Make a new cluster.")
        bridge, prefix, tasks = self._layout.bridge, self.subnet.prefixlen, self._layout.tasks.values()
        self._layout.created = True  # from here on, delete() removes whatever was made
        self._run(None, [f"link add {bridge} type bridge",
                         f'link set {bridge} alias "{_ALIAS.format(self.owner)}"',
                         f"addr add {self.bridge_address}/{prefix} dev {bridge}",
                         f"link set {bridge} up",
                         *(f"netns add {namespace}" for namespace, _, _ in tasks),
                         *(f"link add {veth} type veth peer name eth0 netns {namespace}"
                           for namespace, veth, _ in tasks),
                         *(f"link set {veth} master {bridge} up" for _, veth, _ in tasks)])
        for namespace, _, address in tasks:  # inside each namespace: its address on the cable, and its own loopback
            self._run(namespace, [f"addr add {address}/{prefix} dev eth0", "link set eth0 up", "link set lo up"])
        self._check_the_bridge_forwards()

    def _check_the_bridge_forwards(self):
        """Connect from the first task's namespace to a socket in the second's: a firewall may drop bridged traffic."""
        tasks = list(self._layout.tasks.values())
        if len(tasks) < 2:
            return
        (first, _, _), (second, _, address) = tasks[:2]
        try:
            listener = in_namespace(f"{NETNS_DIR}/{second}", lambda: socket.create_server((address, 0)))
            with listener:
                port = listener.getsockname()[1]
                reached = in_namespace(f"{NETNS_DIR}/{first}", lambda: _connects(address, port))
        except OSError as error:
            self.delete()
            raise NetworkNamespaceError(f"network='namespaces' made the network but could not use it from Python "
                                        f"({error}). {ADVICE}") from error
        if not reached:
            self.delete()
            bridge = self._layout.bridge
            raise NetworkNamespaceError(
                f"network='namespaces' made the network, but a task could not reach another over the bridge "
                f"(no TCP connection to {address}:{port} within 2 s): a firewall drops traffic between bridged "
                f"interfaces (Docker, for one, sets iptables' FORWARD policy to DROP and makes bridged traffic pass "
                f"through it, as coming in and going out on the bridge itself). Allow it for the course's bridges, "
                f"e.g. `iptables -I FORWARD -i {PREFIX}+ -o {PREFIX}+ -j ACCEPT` (on a Docker host, in the DOCKER-USER "
                f"chain), or use network='localhost'. (Removed again: {bridge} and its namespaces.)")

    def _run(self, namespace, commands):
        where = [] if namespace is None else ["-n", namespace]
        result = subprocess.run([self._ip, *where, "-batch", "-"], input="\n".join(commands) + "\n",
                                capture_output=True, text=True)
        if result.returncode:
            self.delete()
            failed = re.search(r"Command failed -:(\d+)", result.stderr)
            command = " ".join(["ip", *where, commands[int(failed[1]) - 1] if failed else "-batch -"])
            reason = re.sub(r"\s*Command failed -:\d+\s*", " ", result.stderr).strip()
            raise NetworkNamespaceError(f"network='namespaces' could not make the network: `{command}` failed "
                                        f"({reason}). {ADVICE}")

    def delete(self):
        """Delete the veth pairs, the namespaces and the bridge (nothing if they do not exist)."""
        _delete_layout(self._ip, self._layout)
