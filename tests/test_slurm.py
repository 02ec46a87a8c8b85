"""Chapter 3's jobs on Slurm: TensorFlow's SlurmClusterResolver under a stand-in Slurm job step (the variables
srun sets for each task; TensorFlow 2.21's resolver expands the node list itself and calls no `scontrol`), and
the batch script."""
import json
import os
import subprocess
import sys

import pytest

from course_utils.cluster.slurm import slurm_batch_script, slurm_tf_config

TWO_NODES = {"SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "node[01-02]", "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}


@pytest.mark.parametrize("rank", [0, 1])
def test_each_task_of_two_nodes_gets_the_cluster_and_its_own_index(rank):
    config = slurm_tf_config({"worker": 2}, environ={**TWO_NODES, "SLURM_PROCID": str(rank)})
    assert config == {"cluster": {"worker": ["node01:8888", "node02:8888"]}, "task": {"type": "worker", "index": rank}}
    assert "SLURM_PROCID" not in os.environ  # the caller's environment is left as it was


def test_a_chief_and_a_worker_and_two_tasks_on_one_node():
    step = {"SLURM_STEP_NUM_TASKS": "3", "SLURM_STEP_NODELIST": "gpu-a,gpu-b", "SLURM_STEP_TASKS_PER_NODE": "2,1"}
    configs = [slurm_tf_config({"chief": 1, "worker": 2}, 9000, {**step, "SLURM_PROCID": str(r)}) for r in range(3)]
    assert configs[0]["cluster"] == {"chief": ["gpu-a:9000"], "worker": ["gpu-a:9001", "gpu-b:9000"]}
    assert [c["task"] for c in configs] == [{"type": "chief", "index": 0}, {"type": "worker", "index": 0},
                                           {"type": "worker", "index": 1}]


def test_outside_slurm_or_with_the_wrong_task_count_the_message_says_what_to_do():
    with pytest.raises(ValueError, match="Not inside a Slurm job step: SLURM_PROCID"):
        slurm_tf_config({"worker": 2}, environ={k: v for k, v in TWO_NODES.items()})
    with pytest.raises(ValueError, match="has 3 tasks but the Slurm step has 2"):
        slurm_tf_config({"worker": 3}, environ={**TWO_NODES, "SLURM_PROCID": "0"})


def test_the_batch_script_asks_for_one_node_per_task_and_runs_the_script_with_its_tf_config(tmp_path):
    text = slurm_batch_script({"worker": 2}, "mwms_worker.py", args=["out dir"])
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n" in text
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert "course_utils.cluster.slurm --jobs '{\"worker\": 2}'" in srun and srun.endswith("mwms_worker.py 'out dir'")
    with pytest.raises(ValueError, match="number of tasks >= 1"):
        slurm_batch_script({"worker": 0}, "x.py")
    # What srun runs, in task 1 of the stand-in step: the script gets the resolver's TF_CONFIG.
    script = tmp_path / "show.py"
    script.write_text("import os, sys; print(os.environ['TF_CONFIG'], sys.argv[1:])")
    env = {**os.environ, **TWO_NODES, "SLURM_PROCID": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = subprocess.run([sys.executable, "-m", "course_utils.cluster.slurm", "--jobs", '{"worker": 2}', str(script),
                          "out dir"], env=env, capture_output=True, text=True, timeout=120)
    config, args = run.stdout.strip().rsplit(" ", 2)[0], run.stdout.strip()
    assert run.returncode == 0 and args.endswith("['out dir']"), run.stderr[-2000:]
    assert json.loads(config)["task"] == {"type": "worker", "index": 1}


def test_tensorflows_resolver_hands_out_gpus_even_to_cpu_tasks(monkeypatch):
    """Why slurm_tf_config pretends one GPU per task: with none, the resolver fails."""
    import tensorflow as tf

    for name, value in {**TWO_NODES, "SLURM_PROCID": "0"}.items():
        monkeypatch.setenv(name, value)
    resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(jobs={"worker": 2}, gpus_per_node=0,
                                                                   auto_set_gpu=False)
    with pytest.raises(ValueError, match="must not be zero"):
        resolver.cluster_spec()
