"""LocalCluster(network="namespaces"): every task on a "host" of its own (a Linux network namespace).

The cheap tests use tiny scripts without TensorFlow. The TensorFlow test runs chapter 3's own
script and cells (read from the notebook by cell id): its parameter-server job with the chief
played by a stand-in kernel, where a worker is killed on its "host" and the job goes on. Chapter 3
itself runs its MultiWorkerMirroredStrategy job across namespaces and asserts that it trains to
the same weights as on 127.0.0.1.
"""
import gc
import ipaddress
import json
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from course_utils.cluster import LocalCluster, NetworkNamespaceError, namespaces
from course_utils.data import mnist_is_prepared

ROOT = Path(__file__).resolve().parents[1]
CHAPTER_3 = ROOT / "notebooks" / "03_beyond_one_process.ipynb"


def namespaces_refused():
    """Why this machine cannot make network namespaces (the error's message), or None if it can."""
    try:
        network = namespaces.TaskNetwork()
        network.create()
        network.delete()
    except NetworkNamespaceError as error:
        return str(error)
    return None


REFUSED = namespaces_refused()
needs_namespaces = pytest.mark.skipif(REFUSED is not None, reason=f"network namespaces not permitted: {REFUSED}")
needs_mnist = pytest.mark.skipif(not mnist_is_prepared(), reason="set TFDS_DATA_DIR to the prepared MNIST")


def ip_json(*args):
    output = subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True).stdout
    return json.loads(output) if output.strip() else []


def leftovers(tag=""):
    """The namespaces and interfaces of this machine made by course_utils.cluster (with ``tag``, if given)."""
    names = [entry["name"] for entry in ip_json("netns", "list")]
    names += [link["ifname"] for link in ip_json("link", "show")]
    return sorted(name for name in names if name.startswith((f"tfc{tag}", f"tfc-{tag}")))


def tag_of(cluster):
    """The tag in the names of a cluster's namespaces, veths and bridge (``tfc-<tag>-<pid>-<job>-<index>``)."""
    return cluster.namespace(*cluster.started_tasks[0]).split("-")[1]


def chapter_cell(cell_id):
    """The source of the cell ``cell_id`` of chapter 3."""
    cells = json.loads(CHAPTER_3.read_text())["cells"]
    return next("".join(cell["source"]) for cell in cells if cell.get("id") == cell_id)


def chapter_script(cell_id, folder):
    """Write into ``folder`` the script that chapter 3's ``%%writefile {WORK_DIR}/<name>.py`` cell ``cell_id`` writes."""
    first_line, _, code = chapter_cell(cell_id).partition("\n")
    name = re.fullmatch(r"%%writefile \{WORK_DIR\}/(\w+\.py)", first_line)[1]
    (folder / name).write_text(code)
    return folder / name


def write(folder, name, code):
    path = folder / name
    path.write_text(textwrap.dedent(code))
    return path


@pytest.fixture(autouse=True)
def logs_in_tmp_path(tmp_path, monkeypatch):
    """Default log folders (tempfile.mkdtemp) go under pytest's tmp_path, which pytest cleans up."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


# ----------------------------------------------------------------- without TensorFlow
@needs_namespaces
def test_addresses_and_what_each_task_can_reach(tmp_path):
    # Each task listens on its port and, once told to go, tries its peers at their addresses and at 127.0.0.1.
    script = write(tmp_path, "reach.py", """
        import json, os, socket, sys, time
        from pathlib import Path
        config = json.loads(os.environ["TF_CONFIG"])
        spec, me = config["cluster"], config["task"]
        address = spec[me["type"]][me["index"]]
        listener = socket.socket()
        listener.bind(("", int(address.rsplit(":", 1)[1])))
        listener.listen(16)
        out = Path(sys.argv[1])
        while not (out / "go").exists():
            time.sleep(0.05)

        def connects(host, port):
            try:
                socket.create_connection((host, int(port)), timeout=2).close()
                return True
            except OSError:
                return False

        peers = [a for addresses in spec.values() for a in addresses if a != address]
        end = time.monotonic() + 20
        while not all(connects(*peer.rsplit(":", 1)) for peer in peers) and time.monotonic() < end:
            time.sleep(0.05)
        report = {"interfaces": sorted(name for _, name in socket.if_nameindex()),
                  "at_address": {p: connects(*p.rsplit(":", 1)) for p in peers},
                  "at_127": {p: connects("127.0.0.1", p.rsplit(":", 1)[1]) for p in peers}}
        (out / f"{me['type']}-{me['index']}.json").write_text(json.dumps(report))
        while len(list(out.glob("*.json"))) < len(peers):  # serve until every task has reported
            time.sleep(0.05)
    """)
    cluster = LocalCluster(script, {"chief": 1, "worker": 2, "ps": 1}, not_started="chief", args=[tmp_path],
                           network="namespaces", timeout=60)
    spec = cluster.cluster_spec
    hosts = [address.rsplit(":", 1)[0] for addresses in spec.values() for address in addresses]
    subnet = ipaddress.ip_network(f"{cluster.host}/24", strict=False)
    assert cluster.network == "namespaces" and spec["chief"][0].startswith(f"{cluster.host}:")
    assert cluster.host == str(subnet.network_address + 1), "this process (the chief) has the bridge's address"
    assert hosts[1:] == [str(subnet.network_address + k) for k in (2, 3, 4)], "one address per started task"
    assert not any(ipaddress.ip_address(host).is_loopback for host in hosts)
    assert all(ipaddress.ip_address(host).is_private and ipaddress.ip_address(host) in subnet for host in hosts)
    for task in cluster.started_tasks:
        tf_config = cluster.environment(*task)["TF_CONFIG"]
        assert json.loads(tf_config) == {"cluster": spec, "task": {"type": task.job, "index": task.index}}
        assert "127.0.0.1" not in tf_config and "localhost" not in tf_config
    assert cluster.namespace("worker", 1) in [entry["name"] for entry in ip_json("netns", "list")]
    with pytest.raises(ValueError, match="chief 0 is listed in not_started"):
        cluster.namespace("chief")

    chief = socket.socket()  # this process plays the chief: it listens on every interface of its namespace
    chief.bind(("", int(spec["chief"][0].rsplit(":", 1)[1])))
    chief.listen(16)
    try:
        with cluster:
            cluster.wait_until_ready(timeout=30)  # from this namespace, at the tasks' own addresses
            (tmp_path / "go").touch()
            assert cluster.wait() == {task: 0 for task in cluster.started_tasks}
            sent = {task: cluster.bytes_sent(*task) for task in cluster.started_tasks}
    finally:
        chief.close()
    assert all(count > 0 for count in sent.values()), sent  # the connections went over each task's cable
    with pytest.raises(ValueError, match="read it before the cluster stops"):
        cluster.bytes_sent("worker", 0)
    for task in cluster.started_tasks:
        report = json.loads((tmp_path / f"{task.job}-{task.index}.json").read_text())
        assert report["interfaces"] == ["eth0", "lo"]
        assert all(report["at_address"].values()), f"{task} could not reach a peer: {report}"
        assert not any(report["at_127"].values()), f"{task} reached a peer at its own 127.0.0.1: {report}"
        assert set(report["at_address"]) == set(report["at_127"]) and spec["chief"][0] in report["at_address"]


@needs_namespaces
def test_network_lives_while_the_cluster_may_run_and_a_restart_reuses_it(tmp_path):
    script = write(tmp_path, "netns.py", """
        import os, time
        print(os.stat("/proc/self/ns/net").st_ino, flush=True)
        time.sleep(30)
    """)
    cluster = LocalCluster(script, {"worker": 2}, network="namespaces", timeout=60)
    tag = tag_of(cluster)
    made = leftovers(tag)
    assert len(made) == 5, made  # two namespaces, two veths and the bridge, made with the cluster
    namespace_file = Path(namespaces.NETNS_DIR, cluster.namespace("worker", 1))
    spec = cluster.cluster_spec

    def wait_for_inodes(n):  # the namespaces worker 1 said it was in, once it has said it n times
        deadline = time.monotonic() + 20
        while len(inodes := re.findall(r"^\d+$", cluster.log("worker", 1), re.MULTILINE)) < n:
            assert time.monotonic() < deadline, cluster.logs()
            time.sleep(0.05)
        return inodes

    for run in range(2):  # like re-running a notebook cell: the network is made again on start
        with cluster:
            wait_for_inodes(2 * run + 1)
            cluster.restart("worker", 1)
            inodes = wait_for_inodes(2 * run + 2)
            assert inodes[-2:] == [str(namespace_file.stat().st_ino)] * 2, "the restarted task is in its namespace"
            assert leftovers(tag) == made
        assert leftovers(tag) == [], "stopping deletes the namespaces, the veths and the bridge"
        assert cluster.cluster_spec == spec
    cluster.start()
    assert leftovers(tag) == made
    del cluster
    gc.collect()
    assert leftovers(tag) == [], "garbage collection kills the tasks and deletes the network"


@needs_namespaces
def test_what_a_killed_python_left_behind_is_removed_by_the_next_cluster(tmp_path):
    sleeper = write(tmp_path, "sleeper.py", "import time\ntime.sleep(60)\n")
    kernel = write(tmp_path, "kernel.py", f"""
        import time
        from course_utils.cluster import LocalCluster
        cluster = LocalCluster({str(sleeper)!r}, {{"worker": 2}}, network="namespaces", timeout=60,
                               log_dir={str(tmp_path / "logs")!r}).start()
        print(cluster.namespace("worker", 0), flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, str(kernel)], stdout=subprocess.PIPE, text=True)
    try:
        tag = parent.stdout.readline().split("-")[1]
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
    assert len(leftovers(tag)) == 5, "a SIGKILL leaves the network behind"
    cluster = LocalCluster(sleeper, {"worker": 1}, network="namespaces")
    assert leftovers(tag) == []
    assert tag_of(cluster) != tag
    cluster.stop()


@needs_namespaces
def test_a_firewall_that_drops_bridged_traffic_is_named(tmp_path, monkeypatch):
    # Every namespaced cluster of two tasks or more checks that one task reaches another over the bridge
    # (it did in every other test here); a firewall that drops bridged traffic is played by refusing it.
    monkeypatch.setattr(namespaces, "_connects", lambda host, port, seconds=2.0: False)
    before = leftovers()
    with pytest.raises(NetworkNamespaceError, match=r"a firewall drops traffic between bridged interfaces.*"
                                                    r"iptables -I FORWARD -i tfc\+ -o tfc\+ -j ACCEPT.*network='localhost'"):
        LocalCluster(write(tmp_path, "idle.py", "pass"), {"worker": 2}, network="namespaces")
    assert leftovers() == before


def test_in_namespace_hands_on_what_went_wrong():
    with pytest.raises(FileNotFoundError):  # no such namespace: the error of the thread that tried to join it
        namespaces.in_namespace("/run/netns/tfc-no-such-namespace", lambda: 1)


@needs_namespaces
def test_in_namespace_runs_the_function_in_the_namespace(tmp_path):
    cluster = LocalCluster(write(tmp_path, "idle.py", "pass"), {"worker": 2}, network="namespaces")
    path = Path(namespaces.NETNS_DIR, cluster.namespace("worker", 0))
    interfaces = namespaces.in_namespace(str(path), lambda: sorted(name for _, name in socket.if_nameindex()))
    assert interfaces == ["eth0", "lo"]
    with pytest.raises(ZeroDivisionError):
        namespaces.in_namespace(str(path), lambda: 1 / 0)
    cluster.stop()


def test_bytes_sent_says_it_needs_namespaces(tmp_path):
    cluster = LocalCluster(write(tmp_path, "idle.py", "pass"), {"worker": 1})
    with pytest.raises(ValueError, match="this cluster runs with network='localhost'.*network='namespaces'"):
        cluster.bytes_sent("worker", 0)


def test_a_clear_error_where_namespaces_are_not_permitted(tmp_path, monkeypatch):
    sleeper = write(tmp_path, "sleeper.py", "import time\ntime.sleep(60)\n")
    with pytest.raises(ValueError, match="network must be 'localhost' or 'namespaces', got 'netns'"):
        LocalCluster(sleeper, {"worker": 1}, network="netns")
    with pytest.raises(ValueError, match="host='10.0.0.1' does not go with network='namespaces'"):
        LocalCluster(sleeper, {"worker": 1}, network="namespaces", host="10.0.0.1")

    monkeypatch.setattr(namespaces, "effective_capabilities", lambda: 0)  # as an ordinary user
    with pytest.raises(NetworkNamespaceError, match=r"lacks CAP_NET_ADMIN and CAP_SYS_ADMIN\. Use network='localhost'"
                                                    r".*run Python as root"):
        LocalCluster(sleeper, {"worker": 1}, network="namespaces")
    monkeypatch.setattr(namespaces.shutil, "which", lambda *args, **kwargs: None)
    with pytest.raises(NetworkNamespaceError, match=r"needs the `ip` command \(iproute2\).*apt-get install iproute2"):
        LocalCluster(sleeper, {"worker": 1}, network="namespaces")


# For real: an ordinary user, and root in a user namespace (whose `ip netns add` the kernel refuses).
@pytest.mark.parametrize("prefix, message", [
    (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], "lacks CAP_NET_ADMIN and CAP_SYS_ADMIN"),
    (["unshare", "--user", "--map-root-user"], r"could not make the network: `ip .*` failed \(.*not permitted"),
])
def test_refused_for_real_before_anything_starts(tmp_path, prefix, message):
    if REFUSED and "`ip` command" in REFUSED or subprocess.run([*prefix, "true"], capture_output=True).returncode:
        pytest.skip(f"no `ip` command, or {prefix[0]} is not available to this user")
    sleeper = write(tmp_path, "sleeper.py", "import time\ntime.sleep(60)\n")
    code = (f"from course_utils.cluster import LocalCluster\n"
            f"LocalCluster({str(sleeper)!r}, {{'worker': 2}}, network='namespaces')")
    before = leftovers()
    result = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("course_utils.cluster.errors.NetworkNamespaceError: network='namespaces'"), result.stderr
    assert re.search(message, last) and last.endswith(namespaces.ADVICE), last
    assert leftovers() == before


# ----------------------------------------------------------------- chapter 3 with TensorFlow
# Chapter 3 itself runs its MultiWorkerMirroredStrategy job across namespaces and asserts the same weights as
# on 127.0.0.1 and the bytes each worker sent; here its parameter-server job, where a worker is killed.
PS_KERNEL = """
import functools, json, os, re, signal, sys, time
from pathlib import Path
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf
from course_utils import load_mnist
from course_utils.cluster import LocalCluster

WORK_DIR, cells = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
LocalCluster = functools.partial(LocalCluster, network="namespaces")
for cell_id, source in cells.items():
    exec(source)
    if cell_id == "c19":
        namespace = ps_cluster.namespace("ps", 0)
        print("CLUSTER", json.dumps({"spec": ps_cluster.cluster_spec, "host": ps_cluster.host, "ps": namespace}))
"""


@needs_namespaces
@needs_mnist
def test_parameter_server_job_across_namespaces_with_this_process_as_chief(tmp_path):
    # Chapter 3's cells, from starting the servers to losing worker 1 and stopping the cluster (the
    # plots left out), in a stand-in for the notebook's kernel, which plays the chief.
    chapter_script("c17", tmp_path)
    cell_ids = ("c19", "c21", "c23", "c25", "c27", "c29", "c31", "c33", "c37", "c39")
    cells = {"c11": re.search(r"^MWMS_STEPS = .*$", chapter_cell("c11"), re.MULTILINE)[0],  # c29 reads it
             **{cell_id: chapter_cell(cell_id) for cell_id in cell_ids}}
    (tmp_path / "cells.json").write_text(json.dumps(cells))
    kernel = write(tmp_path, "kernel.py", PS_KERNEL)
    result = subprocess.run([sys.executable, str(kernel), str(tmp_path), str(tmp_path / "cells.json")],
                            capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    cluster = json.loads(re.search(r"^CLUSTER (.*)$", result.stdout, re.MULTILINE)[1])
    spec, host = cluster["spec"], cluster["host"]
    hosts = [address.rsplit(":", 1)[0] for job in ("worker", "ps") for address in spec[job]]
    assert spec["chief"][0].startswith(host + ":") and host.endswith(".1"), "the chief is this process, on the bridge"
    assert len(set(hosts)) == 3 and host not in hosts and not any(h.startswith("127.") for h in hosts)
    assert leftovers(cluster["ps"].split("-")[1]) == [], "the chapter's ps_cluster.stop() deleted the network"
