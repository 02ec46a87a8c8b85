"""Chapter 3's jobs on Slurm: the TF_CONFIG of each task under a stand-in Slurm job step (the variables srun sets
for each task), against what TensorFlow's SlurmClusterResolver makes of it, and the batch script."""
import json
import os
import re
import subprocess
import sys

import pytest

from course_utils.cluster.slurm import check_gpus, slurm_batch_script, slurm_tf_config

TWO_NODES = {"SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "node[9-10]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}


@pytest.mark.parametrize("rank, node", [(0, "node9"), (1, "node10")])
def test_each_task_gets_the_cluster_in_slurms_node_order_and_its_own_index(rank, node):
    config = slurm_tf_config({"worker": 2}, environ={**TWO_NODES, "SLURM_PROCID": str(rank), "SLURMD_NODENAME": node})
    assert config == {"cluster": {"worker": ["node9:2222", "node10:2222"]}, "task": {"type": "worker", "index": rank}}


def test_tensorflows_resolver_gives_task_0_the_address_of_node10(monkeypatch):
    """Why slurm_tf_config does not call SlurmClusterResolver.cluster_spec(): TensorFlow 2.21 sorts the node names
    as strings, so the task Slurm runs on node9 (rank 0) is told it is worker 0 at node10. (It also needs a GPU per
    task: with gpus_per_node=0 it fails.)"""
    import tensorflow as tf

    for name, value in {**TWO_NODES, "SLURM_PROCID": "0"}.items():
        monkeypatch.setenv(name, value)
    resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(jobs={"worker": 2}, port_base=2222,
                                                                   gpus_per_node=2, gpus_per_task=1, auto_set_gpu=False)
    assert resolver.cluster_spec().as_dict() == {"worker": ["node10:2222", "node9:2222"]}
    assert resolver.get_task_info() == ("worker", 0)
    with pytest.raises(ValueError, match="must not be zero"):
        tf.distribute.cluster_resolver.SlurmClusterResolver(jobs={"worker": 2}, gpus_per_node=0,
                                                            auto_set_gpu=False).cluster_spec()


def test_a_chief_and_two_workers_with_two_tasks_on_one_node():
    step = {"SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_NODELIST": "gpu-a,gpu-b", "SLURM_STEP_TASKS_PER_NODE": "2,1"}
    configs = [slurm_tf_config({"worker": 2, "chief": 1}, 9000, {**step, "SLURM_PROCID": str(r)}) for r in range(3)]
    assert configs[0]["cluster"] == {"chief": ["gpu-a:9000"], "worker": ["gpu-a:9001", "gpu-b:9000"]}
    assert [c["task"] for c in configs] == [{"type": "chief", "index": 0}, {"type": "worker", "index": 0},
                                           {"type": "worker", "index": 1}]


def test_outside_slurm_a_wrong_task_count_or_another_node_the_message_says_what_to_do():
    with pytest.raises(ValueError, match="Not inside a Slurm job step: SLURM_PROCID"):
        slurm_tf_config({"worker": 2}, environ=dict(TWO_NODES))
    with pytest.raises(ValueError, match="has 3 tasks but the Slurm step has 2"):
        slurm_tf_config({"worker": 3}, environ={**TWO_NODES, "SLURM_PROCID": "0"})
    with pytest.raises(ValueError, match="Task 0 runs on node10 but its rank puts it on node9.*block"):
        slurm_tf_config({"worker": 2}, environ={**TWO_NODES, "SLURM_PROCID": "0", "SLURMD_NODENAME": "node10"})


@pytest.mark.parametrize("failures, exit_code, starts", [(0, 0, 1), (2, 0, 3), (3, 1, 3)])
def test_the_batch_script_starts_a_failed_step_again(tmp_path, failures, exit_code, starts):
    # A stand-in srun that fails its first `failures` starts; bash runs the batch script as sbatch would.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f"#!/bin/bash\necho start >> {tmp_path}/starts\n"
                                  f"[ $(wc -l < {tmp_path}/starts) -gt {failures} ]\n")
    (bin_dir / "srun").chmod(0o755)
    batch = tmp_path / "job.sh"
    batch.write_text(slurm_batch_script({"worker": 2}, "mwms_worker.py", setup="true", attempts=3))
    run = subprocess.run(["bash", str(batch)], env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == exit_code, run.stderr
    assert len((tmp_path / "starts").read_text().split()) == starts
    assert run.stderr.count("of the step failed") == min(failures, 3)


def test_the_setup_runs_before_set_u_which_some_activation_scripts_do_not_survive(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/bash\ntrue\n")
    (bin_dir / "srun").chmod(0o755)
    batch = tmp_path / "job.sh"  # a setup that reads a variable nobody set, as some `module` and conda scripts do
    batch.write_text(slurm_batch_script({"worker": 2}, "mwms_worker.py", setup='[ -z "$A_VARIABLE_NOBODY_SET" ]'))
    run = subprocess.run(["bash", str(batch)], env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr

def test_the_batch_script_takes_whole_nodes_and_runs_the_script_with_its_tf_config(tmp_path):
    text = slurm_batch_script({"worker": 2}, "mwms_worker.py", args=["out dir"], setup="module load tensorflow",
                              env={"TFDS_DATA_DIR": "/shared/my data"})
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --exclusive\n#SBATCH --mem=0\n" in text
    assert "#SBATCH --requeue\n" in text and "#SBATCH --open-mode=append\n" in text and "gpu" not in text
    # the script, not the submitting shell, sets what the tasks need: the Keras choice and env
    assert "set -eo pipefail\nmodule load tensorflow\nset -u " in text  # the setup runs before set -u
    assert "\nexport TF_USE_LEGACY_KERAS=1\nexport TFDS_DATA_DIR='/shared/my data'\n" in text
    assert "\nrun=${SLURM_RESTART_COUNT:-0}" in text
    srun = next(line for line in text.splitlines() if "srun " in line)
    assert "srun --export=ALL --kill-on-bad-exit=1 --output=%x-%j-run$run-task%t-start$attempt.log python" in srun
    assert "course_utils.cluster.slurm --jobs '{\"worker\": 2}'" in srun
    assert srun.endswith("mwms_worker.py 'out dir'; then exit 0; fi")
    assert "export TF_USE_LEGACY_KERAS=0\n" in slurm_batch_script({"worker": 2}, "x.py", keras="keras3")
    # What srun runs, in task 1 of the stand-in step: the script gets this task's TF_CONFIG and its arguments.
    script = tmp_path / "show.py"
    script.write_text("import os, sys\nprint(os.environ['TF_CONFIG'])\nprint(sys.argv[1:])")
    env = {**os.environ, **TWO_NODES, "SLURM_PROCID": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run([sys.executable, "-m", "course_utils.cluster.slurm", "--jobs", '{"worker": 2}', str(script),
                          "out dir"], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    config, args = run.stdout.strip().splitlines()[-2:]
    assert json.loads(config)["task"] == {"type": "worker", "index": 1} and args == "['out dir']"


def test_a_gpu_job_asks_slurm_for_its_gpus_and_each_task_checks_them():
    text = slurm_batch_script({"chief": 1, "worker": 3}, "mwms_worker.py", gpus_per_node=8)
    assert "#SBATCH --nodes=4\n" in text and "#SBATCH --gpus-per-node=8\n" in text and "#SBATCH --mem=0\n" in text
    srun = next(line for line in text.splitlines() if "srun " in line)
    assert "--port-base 2222 --gpus-per-node 8 mwms_worker.py;" in srun


@pytest.mark.parametrize("gpus", [-1, 1.5, "2", True, None])
def test_a_gpu_count_that_is_no_whole_number_is_refused(gpus):
    with pytest.raises(ValueError, match=rf"gpus_per_node \(the GPUs each node's task uses; 0 for a CPU job\) must "
                                         rf"be a whole number >= 0, got {re.escape(repr(gpus))}"):
        slurm_batch_script({"worker": 2}, "x.py", gpus_per_node=gpus)


@pytest.mark.parametrize("jobs, message", [
    ({"chief": 1, "worker": 2, "ps": 1}, "A parameter-server job cannot run as one Slurm step: .* serve until they are "
                                         "stopped .*MultiWorkerMirroredStrategy \\(jobs=\\{'worker': N\\}"),
    ({"worker": 2, "evaluator": 1}, "runs MultiWorkerMirroredStrategy jobs, made of chief and worker tasks; it has no "
                                    "job 'evaluator'"),
    ({"worker": 0}, "The number of 'worker' tasks must be a whole number >= 1, got 0"),
    ({"worker": 2.0}, "The number of 'worker' tasks must be a whole number >= 1, got 2.0"),
    ({}, "jobs must map each job name to a number of tasks >= 1"),
])
def test_jobs_it_cannot_run_are_refused_with_what_to_use_instead(jobs, message):
    with pytest.raises(ValueError, match=message):
        slurm_batch_script(jobs, "x.py")


def test_other_bad_options_are_refused():
    with pytest.raises(ValueError, match="attempts \\(how many times the step is started\\) must be a whole number >= 1"):
        slurm_batch_script({"worker": 2}, "x.py", attempts=0)
    with pytest.raises(ValueError, match="keras must be one of \\['tf_keras', 'keras3'\\]"):
        slurm_batch_script({"worker": 2}, "x.py", keras="keras2")
    with pytest.raises(ValueError, match="Choose the Keras with keras="):
        slurm_batch_script({"worker": 2}, "x.py", env={"TF_USE_LEGACY_KERAS": "1"})
    with pytest.raises(ValueError, match="env names shell variables .*'MY-VAR' is none"):
        slurm_batch_script({"worker": 2}, "x.py", env={"MY-VAR": "1"})


def test_a_task_that_sees_fewer_gpus_than_it_asked_for_stops_with_what_to_check(tmp_path):
    check_gpus(0, [])  # a CPU job: nothing to check
    with pytest.raises(RuntimeError, match=r"Task 1 on node2 asked for 2 GPU\(s\) \(--gpus-per-node=2\) but TensorFlow "
                                           r"sees 0 \(none\); Slurm gave the step SLURM_GPUS_ON_NODE=2, "
                                           r"CUDA_VISIBLE_DEVICES=\(unset\)\. Stopping rather than training on the CPU"):
        check_gpus(2, [], environ={"SLURM_PROCID": "1", "SLURMD_NODENAME": "node2", "SLURM_GPUS_ON_NODE": "2"})
    # What a task of a GPU job runs on this machine, which has no GPU: it stops before the script starts.
    script = tmp_path / "never.py"
    script.write_text("print('the training script ran')")
    env = {**os.environ, **TWO_NODES, "SLURM_PROCID": "0", "SLURMD_NODENAME": "node9", "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run([sys.executable, "-m", "course_utils.cluster.slurm", "--jobs", '{"worker": 2}',
                          "--gpus-per-node", "1", str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "the training script ran" not in run.stdout
    assert "RuntimeError: Task 0 on node9 asked for 1 GPU(s) (--gpus-per-node=1) but TensorFlow sees 0" in run.stderr
