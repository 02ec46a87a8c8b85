"""Unit tests of course_utils.cluster with tiny scripts that do not import TensorFlow (fast)."""
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import psutil
import pytest

from course_utils.cluster import (ClusterTimeoutError, LocalCluster, Task, TaskFailedError, dtensor_env,
                                  find_free_ports, waiting)


def write(tmp_path, name, code):
    path = tmp_path / name
    path.write_text(textwrap.dedent(code))
    return path


def is_gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def assert_all_gone(pids, within=5.0):
    end = time.monotonic() + within
    while time.monotonic() < end and not all(is_gone(pid) for pid in pids):
        time.sleep(0.05)
    alive = [pid for pid in pids if not is_gone(pid)]
    assert not alive, f"processes still running: {alive}"


def wait_for_log(cluster, text, workers, within=30.0):
    """Wait until every listed worker has printed ``text`` (a loaded machine may start them slowly)."""
    end = time.monotonic() + within
    while not all(text in cluster.log("worker", i) for i in workers):
        assert time.monotonic() < end, f"no {text!r} in the logs of workers {workers} after {within} s"
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def logs_in_tmp_path(tmp_path, monkeypatch):
    """Default log folders (tempfile.mkdtemp) go under pytest's tmp_path, which pytest cleans up."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


@pytest.fixture
def sleeper(tmp_path):
    return write(tmp_path, "sleeper.py", """
        import time
        print("sleeping", flush=True)
        time.sleep(60)
    """)


@pytest.fixture
def deaf_sleeper(tmp_path):
    """Ignores SIGTERM, like a MultiWorkerMirroredStrategy worker."""
    return write(tmp_path, "deaf.py", """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
        time.sleep(60)
    """)


def test_tf_config_and_environment_per_process(tmp_path):
    script = write(tmp_path, "report.py", """
        import json, os, sys
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        with open(os.path.join(sys.argv[1], f"{task['type']}-{task['index']}.json"), "w") as f:
            json.dump({k: os.environ.get(k) for k in ("TF_CONFIG", "COMMON", "PER_JOB", "PER_TASK", "FROM_FN")}, f)
    """)
    cluster = LocalCluster(
        script, {"chief": 1, "worker": 2, "ps": 1}, not_started=["chief"], args=[tmp_path],
        env={"COMMON": "yes"}, task_env={"ps": {"PER_JOB": "ps"}, ("worker", 1): {"PER_TASK": "w1"}}, timeout=30)
    spec = cluster.cluster_spec
    assert list(spec) == ["chief", "worker", "ps"] and [len(v) for v in spec.values()] == [1, 2, 1]
    addresses = [a for v in spec.values() for a in v]
    assert len(set(addresses)) == 4 and all(a.startswith("127.0.0.1:") for a in addresses)
    assert cluster.started_tasks == [Task("worker", 0), Task("worker", 1), Task("ps", 0)]
    with cluster:
        codes = cluster.wait()
    assert codes == {Task("worker", 0): 0, Task("worker", 1): 0, Task("ps", 0): 0}
    assert not (tmp_path / "chief-0.json").exists()  # the chief is in the spec but not started
    for task in cluster.started_tasks:
        seen = json.loads((tmp_path / f"{task.job}-{task.index}.json").read_text())
        tf_config = json.loads(seen["TF_CONFIG"])
        assert tf_config == {"cluster": spec, "task": {"type": task.job, "index": task.index}}
        assert tf_config == cluster.tf_config(*task)
        assert seen["COMMON"] == "yes"
        assert seen["PER_JOB"] == ("ps" if task.job == "ps" else None)
        assert seen["PER_TASK"] == ("w1" if task == ("worker", 1) else None)


def test_task_env_function_and_dtensor_env(tmp_path):
    script = write(tmp_path, "dt.py", """
        import os, sys
        names = ("DTENSOR_CLIENT_ID", "DTENSOR_NUM_CLIENTS", "DTENSOR_JOB_NAME", "DTENSOR_JOBS", "TF_CONFIG")
        print(" ".join(f"{n}={os.environ.get(n)}" for n in names))
    """)
    with LocalCluster(script, {"client": 2}, task_env=dtensor_env, tf_config=False, timeout=30) as cluster:
        cluster.wait()
        jobs = ",".join(cluster.cluster_spec["client"])
        for i in range(2):
            assert cluster.log("client", i) == (f"DTENSOR_CLIENT_ID={i} DTENSOR_NUM_CLIENTS=2 "
                                                f"DTENSOR_JOB_NAME=client DTENSOR_JOBS={jobs} TF_CONFIG=None")
    assert dtensor_env("worker", 0, {"worker": ["a:1"]})["DTENSOR_NUM_CLIENTS"] == "1"
    with pytest.raises(ValueError, match="one job of clients"):
        dtensor_env("worker", 0, {"worker": ["a:1"], "ps": ["a:2"]})


def test_logs_capture_stdout_and_stderr_and_hide_tf_info(tmp_path):
    script = write(tmp_path, "talk.py", """
        import sys
        print("hello from stdout")
        print("I0000 00:00:1712345678.123456   4242 port.cc:153] oneDNN custom operations are on.", file=sys.stderr)
        print("2024-01-01 12:00:00.123456: I tensorflow/core/platform/cpu_feature_guard.cc:1] info", file=sys.stderr)
        print("E0000 00:00:1712345678.123456   4242 foo.cc:1] a real error", file=sys.stderr)
        print("hello from stderr", file=sys.stderr)
    """)
    with LocalCluster(script, {"worker": 1}, timeout=30) as cluster:
        cluster.wait()
        full = cluster.log("worker", 0, hide_tf_info=False)
        short = cluster.log("worker", 0)
        assert "hello from stdout" in full and "hello from stderr" in full and "oneDNN" in full
        assert "oneDNN" not in short and "cpu_feature_guard" not in short
        assert "a real error" in short and "hello from stderr" in short
        assert cluster.log("worker", 0, tail=1) == "hello from stderr"
        assert cluster.logs().startswith("===== worker 0 (exit code 0) =====\nhello from stdout")
        assert cluster.log_path("worker", 0).parent == cluster.log_dir


def test_time_limit_kills_and_raises(sleeper):
    cluster = LocalCluster(sleeper, {"worker": 2}, timeout=1)
    with cluster:
        start = time.monotonic()
        with pytest.raises(ClusterTimeoutError, match=r"(?s)timeout=1 s\) ran out, so it killed worker 0, worker 1\..*sleeping"):
            cluster.wait()
        assert time.monotonic() - start < 10
    assert_all_gone(cluster.pids)


def test_wait_timeout_stops_everything(sleeper):
    with LocalCluster(sleeper, {"worker": 2}, timeout=60) as cluster:
        with pytest.raises(ClusterTimeoutError, match=r"wait\(timeout=0.5\) ran out while worker 0, worker 1"):
            cluster.wait(timeout=0.5)
        assert cluster.running_tasks() == []
    assert_all_gone(cluster.pids)


def test_crashing_worker_gives_clear_error_and_cleanup(tmp_path, sleeper):
    script = write(tmp_path, "crash.py", """
        import json, os, time
        if json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 1:
            raise RuntimeError("worker one lost its data")
        time.sleep(60)
    """)
    cluster = LocalCluster(script, {"worker": 2}, timeout=60)
    with cluster:
        with pytest.raises(TaskFailedError, match=r"(?s)worker 1 failed \(exit code 1\).*worker one lost its data") as info:
            cluster.wait()
        assert info.value.task == ("worker", 1) and info.value.exit_code == 1
        assert "RuntimeError" in info.value.log_tail
    assert_all_gone(cluster.pids)


def test_sigterm_ignoring_process_is_still_killed(deaf_sleeper):
    cluster = LocalCluster(deaf_sleeper, {"worker": 2}, timeout=60, grace_seconds=0.5)
    with cluster:
        wait_for_log(cluster, "ignoring SIGTERM", [0, 1])
        assert len(cluster.running_tasks()) == 2
    assert_all_gone(cluster.pids, within=0.5)
    assert all(code == -signal.SIGKILL for code in cluster.exit_codes().values())


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_cleanup_after_exception_inside_with(sleeper, error):
    with pytest.raises(error):
        with LocalCluster(sleeper, {"worker": 2, "ps": 1}, timeout=60) as cluster:
            time.sleep(0.2)
            raise error("interrupted")
    assert len(cluster.pids) == 3
    assert_all_gone(cluster.pids)


def test_children_of_a_task_are_killed_too(tmp_path):
    script = write(tmp_path, "parent.py", """
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(child.pid, flush=True)
        time.sleep(60)
    """)
    with LocalCluster(script, {"worker": 1}, timeout=60) as cluster:
        while not cluster.log("worker", 0):
            time.sleep(0.05)
        grandchild = int(cluster.log("worker", 0))
    assert_all_gone(cluster.pids + [grandchild])


def test_processes_die_with_their_parent(tmp_path, sleeper):
    # A stand-in for a notebook kernel that is killed: it starts a cluster and is SIGKILLed.
    kernel = write(tmp_path, "kernel.py", f"""
        import time
        from course_utils.cluster import LocalCluster
        cluster = LocalCluster({str(sleeper)!r}, {{"worker": 2}}, timeout=60,
                               log_dir={str(tmp_path / "logs")!r}).start()
        while "sleeping" not in cluster.log("worker", 0) + cluster.log("worker", 1):
            time.sleep(0.05)
        print(*cluster.pids, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, str(kernel)], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and not any(is_gone(pid) for pid in pids)
        parent.kill()
        parent.wait()
        assert_all_gone(pids)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()


def test_forgotten_cluster_is_cleaned_up_by_garbage_collection(tmp_path, sleeper):
    cluster = LocalCluster(sleeper, {"worker": 1}, timeout=60).start()
    pids, own_log_dir = cluster.pids, cluster.log_dir
    given_log_dir = LocalCluster(sleeper, {"worker": 1}, log_dir=tmp_path / "mine").log_dir
    del cluster
    gc.collect()
    assert_all_gone(pids)
    assert not own_log_dir.exists(), "the temporary log folder the cluster made is deleted with it"
    assert given_log_dir.is_dir(), "a log folder the caller chose stays"


def test_kill_and_restart(tmp_path):
    script = write(tmp_path, "count.py", """
        import json, os, sys, time
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        print("run of", task["type"], task["index"], flush=True)
        time.sleep(float(sys.argv[1]))
    """)
    with LocalCluster(script, {"worker": 2}, args=["30"], timeout=60) as cluster:
        first_pid = cluster.pid("worker", 1)
        cluster.kill("worker", 1)
        assert cluster.exit_codes()[("worker", 1)] == -signal.SIGKILL
        assert cluster.running_tasks() == [Task("worker", 0)]
        spec_before = cluster.cluster_spec
        cluster.restart("worker", 1)
        assert cluster.pid("worker", 1) != first_pid and cluster.cluster_spec == spec_before
        time.sleep(0.5)
        assert "started again (start 2)" in cluster.log("worker", 1)
        cluster.restart()
        assert len(cluster.pids) == 5
        cluster.kill("worker", 0)
        cluster.kill("worker", 1)
        assert cluster.wait() == {("worker", 0): -9, ("worker", 1): -9}  # killed on purpose: no error
    assert_all_gone(cluster.pids)


def test_wait_until_ready(tmp_path, sleeper):
    server = write(tmp_path, "server.py", """
        import json, os, socket, time
        cfg = json.loads(os.environ["TF_CONFIG"])
        port = int(cfg["cluster"][cfg["task"]["type"]][cfg["task"]["index"]].rsplit(":", 1)[1])
        time.sleep(0.3)
        listener = socket.socket()
        listener.bind(("", port))
        listener.listen()
        time.sleep(60)
    """)
    with LocalCluster(server, {"worker": 2, "ps": 1}, timeout=60) as cluster:
        cluster.wait_until_ready(timeout=20)
    with LocalCluster(sleeper, {"worker": 1}, timeout=60) as cluster:
        with pytest.raises(ClusterTimeoutError, match=r"No server accepted connections within 0.5 s on worker 0"):
            cluster.wait_until_ready(timeout=0.5)
    crash = write(tmp_path, "crash.py", "raise SystemExit(3)\n")
    with LocalCluster(crash, {"worker": 1}, timeout=60) as cluster:
        with pytest.raises(TaskFailedError, match=r"worker 0 exited \(exit code 3\) before its server"):
            cluster.wait_until_ready(timeout=20)


def test_find_free_ports():
    ports = find_free_ports(5)
    assert len(set(ports)) == 5 and all(0 < p < 65536 for p in ports)
    with pytest.raises(ValueError, match="positive whole number"):
        find_free_ports(0)


@pytest.mark.parametrize("jobs, kwargs, message", [
    ({}, {}, "non-empty dict of task counts"),
    (["worker"], {}, "non-empty dict of task counts"),
    ({"worker": 0}, {}, r"'worker' has 0 tasks; every job needs a positive whole number"),
    ({"worker": -1}, {}, "positive whole number of tasks"),
    ({"worker": 1.5}, {}, "positive whole number of tasks"),
    ({"worker": True}, {}, "positive whole number of tasks"),
    ({"chief": 2, "worker": 1}, {}, r"at most one chief.*Use \{'chief': 1\}"),
    ({"Worker": 1}, {}, "job name 'Worker' is not valid"),
    ({"": 1}, {}, "job name '' is not valid"),
    ({"worker": 1}, {"not_started": ["chief"]}, r"not_started names the job 'chief'.*jobs are \['worker'\]"),
    ({"chief": 1}, {"not_started": "chief"}, "leaves no job to start"),
    ({"worker": 1}, {"timeout": 0}, "timeout must be a positive number of seconds"),
    ({"worker": 1}, {"env": {"N": 2}}, r"environment variables are strings.*Write it as 'N': '2'"),
    ({"worker": 1}, {"task_env": {"ps": {}}}, "task_env names the job 'ps'"),
    ({"chief": 1, "worker": 1}, {"task_env": {("chief", 0): {}}, "not_started": ["chief"]}, "in not_started"),
    ({"worker": 1}, {"task_env": {("worker", 3): {}}}, "has tasks 0..0, so index 3"),
    ({"worker": 1}, {"task_env": 42}, "task_env must be a function"),
])
def test_bad_specs_say_what_to_change(sleeper, jobs, kwargs, message):
    with pytest.raises(ValueError, match=message):
        LocalCluster(sleeper, jobs, **kwargs)


def test_missing_script_and_unknown_tasks(tmp_path, sleeper):
    with pytest.raises(ValueError, match=r"script 'nope.py' does not exist.*Write it"):
        LocalCluster("nope.py", {"worker": 1})
    cluster = LocalCluster(sleeper, {"chief": 1, "worker": 2}, not_started=["chief"])
    with pytest.raises(ValueError, match=r"no job 'wroker'.*\['chief', 'worker'\]"):
        cluster.log("wroker", 0)
    with pytest.raises(ValueError, match="tasks 0..1, so index 2"):
        cluster.kill("worker", 2)
    with pytest.raises(ValueError, match="chief 0 is listed in not_started"):
        cluster.log_path("chief", 0)
    with pytest.raises(ValueError, match="in not_started"):
        cluster.wait(jobs="chief")
    assert cluster.address("chief") == cluster.cluster_spec["chief"][0]
    assert "not started here" in str(cluster)
    cluster.stop()


def test_interrupting_wait_stops_the_cluster(sleeper, monkeypatch):
    cluster = LocalCluster(sleeper, {"worker": 2}, timeout=60).start()
    real_sleep = time.sleep

    def interrupted_sleep(seconds):
        monkeypatch.setattr(waiting.time, "sleep", real_sleep)
        raise KeyboardInterrupt  # what the notebook's stop button does during wait()

    monkeypatch.setattr(waiting.time, "sleep", interrupted_sleep)
    with pytest.raises(KeyboardInterrupt):
        cluster.wait()
    assert_all_gone(cluster.pids)



def test_a_stopped_cluster_starts_again_with_the_same_spec(tmp_path):
    script = write(tmp_path, "once.py", "import os; print(os.environ['TF_CONFIG'])\n")
    cluster = LocalCluster(script, {"worker": 2}, timeout=30)
    for run in range(2):  # like re-running a notebook cell
        with cluster:
            assert cluster.wait() == {("worker", 0): 0, ("worker", 1): 0}
        assert json.loads(cluster.log("worker", 1).splitlines()[-1]) == cluster.tf_config("worker", 1)
    assert len(cluster.pids) == 4 and "started again (start 2)" in cluster.log("worker", 0)
    assert_all_gone(cluster.pids)
