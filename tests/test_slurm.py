"""Chapter 3's jobs on Slurm: the TF_CONFIG of each task under a stand-in Slurm job step (the variables srun sets
for each task), against what TensorFlow's SlurmClusterResolver makes of it, and the batch script."""
import json
import os
import subprocess
import sys

import pytest

from course_utils.cluster.slurm import slurm_batch_script, slurm_tf_config

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


def test_the_batch_script_takes_whole_nodes_and_runs_the_script_with_its_tf_config(tmp_path):
    text = slurm_batch_script({"worker": 2}, "mwms_worker.py", args=["out dir"], setup="module load tensorflow")
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --exclusive\n" in text
    assert "#SBATCH --requeue\n" in text and "set -euo pipefail\nmodule load tensorflow\nfor attempt in" in text
    srun = next(line for line in text.splitlines() if "srun " in line)
    assert "course_utils.cluster.slurm --jobs '{\"worker\": 2}'" in srun
    assert srun.endswith("mwms_worker.py 'out dir'; then exit 0; fi")
    with pytest.raises(ValueError, match="number of tasks >= 1"):
        slurm_batch_script({"worker": 0}, "x.py")
    with pytest.raises(ValueError, match="attempts is how many times the step is started"):
        slurm_batch_script({"worker": 2}, "x.py", attempts=0)
    # What srun runs, in task 1 of the stand-in step: the script gets this task's TF_CONFIG and its arguments.
    script = tmp_path / "show.py"
    script.write_text("import os, sys\nprint(os.environ['TF_CONFIG'])\nprint(sys.argv[1:])")
    env = {**os.environ, **TWO_NODES, "SLURM_PROCID": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run([sys.executable, "-m", "course_utils.cluster.slurm", "--jobs", '{"worker": 2}', str(script),
                          "out dir"], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    config, args = run.stdout.strip().splitlines()[-2:]
    assert json.loads(config)["task"] == {"type": "worker", "index": 1} and args == "['out dir']"
