"""SlurmCluster: a real Slurm (Debian's slurmctld, slurmd, munge) on this machine, each node in namespaces of its own.

The tests need root and the packages (``.ci/run`` installs them); elsewhere they are skipped, saying why, but for the
refusals, which are tested everywhere. Chapter 11 (run by nbval) submits chapter 3's real MWMS job to such a cluster
and asserts both workers' results; these tests give the batch script a stand-in ``python`` that needs no TensorFlow,
so that its failure and requeue paths cost seconds: a failed task ends the step, the loop starts it again, a
requeued job runs the script again with new log names, a job submitted with --export=NONE still gives its tasks what
the script set; and what --exclusive gives without --mem=0. Then what stopping leaves behind, and what a killed Python
does.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from course_utils.cluster import NetworkNamespaceError, SlurmCluster, SlurmClusterError, namespaces
from course_utils.cluster import slurm_cluster
from course_utils.cluster.slurm_cluster import job_tres
from course_utils.cluster.slurm import slurm_batch_script


def cluster_refused():
    """Why this machine cannot run a SlurmCluster (the error's message), or None if it can."""
    try:
        SlurmCluster(nodes=2)
    except SlurmClusterError as error:
        return str(error)
    return None


REFUSED = cluster_refused()
needs_slurm = pytest.mark.skipif(REFUSED is not None, reason=f"no Slurm cluster here: {REFUSED}")


@pytest.fixture(scope="module")
def cluster():
    with SlurmCluster(nodes=2) as running:
        yield running


@needs_slurm
def test_every_node_is_idle_and_a_host_of_its_own(cluster, tmp_path):
    cluster.wait_until_idle(timeout=30)  # after another test's job, its nodes are "completing" for a moment
    assert cluster.run("sinfo", "--noheader", "--Node", "--format=%N %t").split() == ["node1", "idle", "node2", "idle"]
    answers = cluster.run("srun", "--nodes=2", "--label", "bash", "-c",
                          'echo "$(hostname) $(hostname -I) $(getent hosts node1 node2 | wc -l)"', cwd=tmp_path)
    rows = sorted(line.split()[1:] for line in answers.splitlines())
    assert [row[0] for row in rows] == ["node1", "node2"]
    assert [row[1] for row in rows] == [cluster.addresses["node1"], cluster.addresses["node2"]]
    assert [row[2] for row in rows] == ["2", "2"], "each node resolves both nodes' names"


@needs_slurm
def test_the_batch_script_sets_what_its_tasks_need_ends_a_failed_step_and_survives_a_requeue(cluster, tmp_path):
    # A stand-in for python: it prints what the task got, then plays a job. Run 0, start 1 (step 0): task 1 fails at
    # once while task 0 would wait 60 s; start 2 waits until the test requeues the job; run 1 succeeds at once.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(textwrap.dedent("""\
        #!/bin/bash
        run=${SLURM_RESTART_COUNT:-0}
        echo "$SLURM_PROCID $(hostname) run=$run step=$SLURM_STEP_ID keras=$TF_USE_LEGACY_KERAS data=$TFDS_DATA_DIR $*"
        if [ $run = 0 ] && [ $SLURM_STEP_ID = 0 ]; then [ $SLURM_PROCID = 1 ] && exit 3; sleep 60; fi
        if [ $run = 0 ]; then touch requeue-me; sleep 60; fi
        """))
    (bin_dir / "python").chmod(0o755)
    script = tmp_path / "job.sh"
    script.write_text(slurm_batch_script({"worker": 2}, "train.py", args=["out"], name="stand-in", attempts=2,
                                         setup=f"export PATH={bin_dir}:$PATH", env={"TFDS_DATA_DIR": "/data"}))
    submitted = time.monotonic()
    job_id = cluster.submit(script, cwd=tmp_path)
    while not (tmp_path / "requeue-me").exists():
        assert time.monotonic() < submitted + 40, f"start 2 did not begin: task 0 was not killed\n{cluster.daemon_logs()}"
        time.sleep(0.2)
    cluster.run("scontrol", "requeue", job_id)
    job = cluster.wait(job_id, timeout=120)
    assert job["JobState"] == "COMPLETED" and job["Restarts"] == "1"
    assert job_tres(job)["mem"] == 2 * cluster.memory_mb, "--mem=0 gave the job all of both nodes' memory"

    logs = {path.name.split(f"-{job_id}")[1]: path.read_text() for path in tmp_path.glob(f"stand-in-{job_id}*.log")}
    assert set(logs) == {".log", "-run0-task0-start1.log", "-run0-task0-start2.log", "-run0-task1-start1.log",
                         "-run0-task1-start2.log", "-run1-task0-start1.log", "-run1-task1-start1.log"}
    for task, node in enumerate(["node1", "node2"]):  # the first line of each task's log: what the task got
        got = logs[f"-run1-task{task}-start1.log"].splitlines()[0].split()
        assert got[:6] == [str(task), node, "run=1", "step=0", "keras=1", "data=/data"]
        assert got[6:] == ["-m", "course_utils.cluster.slurm", "--jobs", '{"worker":', '2}', "--port-base", "2222",
                           "train.py", "out"]
    assert "TF_USE_LEGACY_KERAS" not in cluster.client_env  # the script set it
    batch = logs[".log"]  # both runs, appended
    assert "task 1: Exited with exit code 3" in batch and "task 0: Terminated" in batch, batch
    assert "start 1 of the step failed" in batch and "DUE TO JOB REQUEUE" in batch, batch


@needs_slurm
def test_the_tasks_get_the_scripts_environment_also_when_the_job_is_submitted_with_export_none(cluster, tmp_path):
    # A site that submits with --export=NONE (SBATCH_EXPORT=NONE): srun would pass that on to the step, and the tasks
    # would get neither the script's PATH nor its variables, but for the script's srun --export=ALL.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text('#!/bin/bash\necho "$SLURM_PROCID keras=$TF_USE_LEGACY_KERAS data=$TFDS_DATA_DIR"\n')
    (bin_dir / "python").chmod(0o755)
    script = tmp_path / "job.sh"
    script.write_text(slurm_batch_script({"worker": 2}, "train.py", name="no-export", attempts=1,
                                         setup=f"export PATH={bin_dir}:$PATH", env={"TFDS_DATA_DIR": "/data"}))
    job_id = int(cluster.run("sbatch", "--parsable", "--export=NONE", script, cwd=tmp_path).strip())
    job = cluster.wait(job_id, timeout=60)
    logs = {task: (tmp_path / f"no-export-{job_id}-run0-task{task}-start1.log").read_text() for task in (0, 1)}
    assert job["JobState"] == "COMPLETED", (logs, (tmp_path / f"no-export-{job_id}.log").read_text())
    assert [logs[task].split() for task in (0, 1)] == [["0", "keras=1", "data=/data"], ["1", "keras=1", "data=/data"]]


@needs_slurm
def test_exclusive_alone_gets_the_default_memory_and_mem_0_all_of_it(cluster, tmp_path):
    jobs = {how: int(cluster.run("sbatch", "--parsable", "--nodes=2", "--exclusive", *how, "--output=/dev/null",
                                 "--wrap", "true", cwd=tmp_path).strip()) for how in [(), ("--mem=0",)]}
    got = {how: job_tres(cluster.wait(job_id, timeout=60)) for how, job_id in jobs.items()}
    assert got[()]["cpu"] == got[("--mem=0",)]["cpu"] == 2 * cluster.cpus, "--exclusive: every CPU of both nodes"
    default = 2 * cluster.cpus * (cluster.memory_mb // cluster.cpus // 2)  # DefMemPerCPU for every CPU of both nodes
    assert got[()]["mem"] == default < got[("--mem=0",)]["mem"] == 2 * cluster.memory_mb


@needs_slurm
def test_a_gpu_job_is_refused_by_a_cluster_without_gpus(cluster, tmp_path):
    script = tmp_path / "gpu.sh"
    script.write_text(slurm_batch_script({"worker": 2}, "train.py", gpus_per_node=1, setup="true"))
    with pytest.raises(SlurmClusterError, match="sbatch: error: Invalid generic resource"):
        cluster.submit(script, cwd=tmp_path)


@needs_slurm
def test_an_unknown_job_is_named_with_the_jobs_there_are(cluster):
    with pytest.raises(ValueError, match="This Slurm cluster knows no job 99999 .*Pass the id submit\\(\\) returned"):
        cluster.job(99999)


def test_bad_options_and_a_stopped_cluster_say_what_to_change():
    for nodes in (0, -1, 2.0, "2", True):
        with pytest.raises(ValueError, match=f"SlurmCluster's nodes must be a positive whole number, got {nodes!r}"):
            SlurmCluster(nodes=nodes)
    with pytest.raises(ValueError, match="at most 250 nodes; got 251"):
        SlurmCluster(nodes=251)
    if REFUSED is None:
        with pytest.raises(SlurmClusterError, match="not running: start it first"):
            SlurmCluster(nodes=1).run("sinfo")


def test_a_network_that_cannot_be_made_leaves_no_folder_and_no_cluster_that_seems_to_run(monkeypatch):
    def no_network():
        raise NetworkNamespaceError("no free subnet")

    monkeypatch.setattr(slurm_cluster, "check_permitted", lambda: {})  # as if root, with the packages
    monkeypatch.setattr(slurm_cluster, "TaskNetwork", no_network)
    folders = lambda: set(Path(tempfile.gettempdir()).glob(f"{slurm_cluster.FOLDER_PREFIX}{os.getpid()}-*"))
    before, cluster = folders(), SlurmCluster(nodes=2)
    with pytest.raises(NetworkNamespaceError, match="no free subnet"):
        cluster.start()
    assert cluster.folder is None and folders() == before
    with pytest.raises(SlurmClusterError, match="not running: start it first"):
        cluster.run("sinfo")


def test_without_root_or_the_packages_the_error_says_what_to_change(monkeypatch, tmp_path):
    monkeypatch.setattr(namespaces, "effective_capabilities", lambda: 0)
    with pytest.raises(SlurmClusterError, match="takes CAP_NET_ADMIN and CAP_SYS_ADMIN; this Python .* lacks "
                                                "CAP_NET_ADMIN and CAP_SYS_ADMIN. Start the kernel as root"):
        SlurmCluster(nodes=2)
    monkeypatch.undo()
    monkeypatch.setattr(slurm_cluster, "SBIN", str(tmp_path))  # a PATH with none of the programs
    with pytest.raises(SlurmClusterError) as error:
        slurm_cluster.find_programs()
    assert "lacks the package(s) iproute2, munge, slurm-client, slurmctld, slurmd, util-linux" in str(error.value)
    assert ("printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && apt-get "
            "update && apt-get install -y --no-install-recommends iproute2 munge slurm-client slurmctld slurmd "
            "util-linux") in str(error.value)


KILLED_OWNER = """\
import json, sys, time
import psutil
from course_utils.cluster import SlurmCluster
cluster = SlurmCluster(nodes=2).start()
cluster.run("sbatch", "--nodes=2", "--output=/dev/null", "--wrap", "srun sleep 300", cwd=sys.argv[1])
while "RUNNING" not in cluster.run("squeue", "--noheader", "--format=%T"):
    time.sleep(0.2)
time.sleep(1)  # the step's sleeps start
descendants = []
for process in psutil.Process().children(recursive=True):
    try:
        descendants.append((process.pid, process.create_time(), process.name()))
    except psutil.NoSuchProcess:  # a short-lived helper of slurmd's
        pass
print(json.dumps({"processes": [(pid, created) for pid, created, _ in descendants],
                  "names": [name for _, _, name in descendants], "folder": str(cluster.folder)}), flush=True)
time.sleep(600)
"""


def still_running(pid, created):
    """Whether the process ``pid`` that started at ``created`` (not a later one with its id) runs, not a zombie."""
    try:
        process = psutil.Process(pid)
        return process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def leftovers_of(pid):
    """The namespaces and Slurm cluster folders whose names hold the owner's process id ``pid``."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    folders = [str(f) for f in Path(tempfile.gettempdir()).glob(f"{slurm_cluster.FOLDER_PREFIX}{pid}-*")]
    return sorted([name for name in names if name.startswith("tfc-") and f"-{pid}-" in name] + folders)


@needs_slurm
def test_stopping_and_a_killed_python_leave_nothing_behind(tmp_path):
    owner = subprocess.Popen([sys.executable, "-c", KILLED_OWNER, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    try:
        started = json.loads(owner.stdout.readline())
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    assert started["names"].count("sleep") == 2 and started["names"].count("slurmd") == 2, started["names"]
    alive = lambda: [pid for pid, created in started["processes"] if still_running(pid, created)]
    deadline = time.monotonic() + 10
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(), "the daemons and the job's processes die with the Python that started them"
    assert started["folder"] in leftovers_of(owner.pid) and len(leftovers_of(owner.pid)) == 3  # 2 namespaces
    children_before = {p.pid for p in psutil.Process().children()}
    with SlurmCluster(nodes=1) as cluster:  # starting removes what the killed Python left
        assert leftovers_of(owner.pid) == [] and len(leftovers_of(os.getpid())) >= 2
        daemons = [p for p in psutil.Process().children() if p.pid not in children_before]
        folder = cluster.folder
    assert len(daemons) == 3  # munged, slurmctld, one slurmd
    assert not folder.exists() and not [p for p in daemons if p.is_running()]  # ended and reaped (no zombie)
