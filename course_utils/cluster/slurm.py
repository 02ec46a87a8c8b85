"""Chapter 3's jobs on a Slurm cluster: a batch script that starts one task per node, and the ``TF_CONFIG`` each
task builds from Slurm's variables with TensorFlow's own ``SlurmClusterResolver``.

On a real cluster nobody writes ``TF_CONFIG`` by hand: Slurm tells each task its rank (``SLURM_PROCID``) and the
nodes of the step (``SLURM_STEP_NODELIST``, e.g. ``node[01-02]``), and the resolver turns them into a cluster
spec. ``python -m course_utils.cluster.slurm SCRIPT [ARGS]`` does that and runs ``SCRIPT`` with the result in
``TF_CONFIG``, so the worker scripts of chapter 3 run unchanged.
"""
import json
import os
import shlex
import sys

__all__ = ["slurm_batch_script", "slurm_tf_config"]


def slurm_tf_config(jobs, port_base=8888, environ=None):
    """The ``TF_CONFIG`` of this Slurm task, from TensorFlow's ``SlurmClusterResolver`` (CPU nodes).

    Args:
        jobs: ``{job name: tasks}``, e.g. ``{"worker": 2}``. The resolver gives the step's tasks, in rank order,
            to the jobs in alphabetical order of their names (``chief`` before ``ps`` before ``worker``).
        port_base: the port of the first task on each node (the next task on the same node gets the next port).
        environ: Slurm's variables (default ``os.environ``): ``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS``,
            ``SLURM_STEP_NODELIST``, ``SLURM_STEP_TASKS_PER_NODE``.

    Returns:
        ``{"cluster": {job: ["host:port", ...]}, "task": {"type": job, "index": i}}``.

    Raises:
        ValueError: not inside a Slurm job step (a variable is missing), or ``jobs`` asks for another number of
            tasks than the step has; the message says which.

    Example:
        >>> slurm_tf_config({"worker": 2})   # in task 1 of `srun --nodes=2 --ntasks-per-node=1`
        {'cluster': {'worker': ['node01:8888', 'node02:8888']}, 'task': {'type': 'worker', 'index': 1}}
    """
    import tensorflow as tf

    environ = os.environ if environ is None else environ
    missing = [name for name in ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
                                 "SLURM_STEP_TASKS_PER_NODE") if name not in environ]
    if missing:
        raise ValueError(f"Not inside a Slurm job step: {', '.join(missing)} not set. Start the script with srun "
                         f"(the batch script of slurm_batch_script does).")
    if sum(jobs.values()) != int(environ["SLURM_STEP_NUM_TASKS"]):
        raise ValueError(f"jobs {jobs} has {sum(jobs.values())} tasks but the Slurm step has "
                         f"{environ['SLURM_STEP_NUM_TASKS']}: ask sbatch for as many tasks as the jobs have.")
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in environ.items() if k.startswith("SLURM_")})
    tasks = int(environ["SLURM_STEP_NUM_TASKS"])
    try:
        # The resolver reads os.environ, and it hands out GPUs as it hands out ports: with no GPU per task it
        # fails (a range of step 0), and it places no more tasks on a node than the node has GPUs. For CPU nodes,
        # pretend one GPU per task and keep CUDA_VISIBLE_DEVICES as it is (auto_set_gpu=False).
        resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
            jobs=dict(jobs), port_base=port_base, gpus_per_node=tasks, gpus_per_task=1, auto_set_gpu=False)
        cluster = resolver.cluster_spec().as_dict()
        task_type, task_id = resolver.get_task_info()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return {"cluster": cluster, "task": {"type": task_type, "index": task_id}}


def slurm_batch_script(jobs, script, args=(), port_base=8888, time_limit="00:30:00", name="course-job",
                       python="python3"):
    """An ``sbatch`` script that runs ``script`` as the cluster ``jobs`` on as many nodes, one task per node,
    each task with the ``TF_CONFIG`` :func:`slurm_tf_config` builds.

    Args:
        jobs: ``{job name: tasks}``, as for chapter 3's ``LocalCluster``.
        script: the training script (each task runs it); ``args``: its arguments.
        port_base, time_limit, name, python: the port of each task's server, Slurm's ``--time``, the job's name,
            the Python that has TensorFlow and ``course_utils`` on the nodes.

    Raises:
        ValueError: ``jobs`` is empty or has a count below 1.

    Example:
        >>> print(slurm_batch_script({"worker": 2}, "mwms_worker.py"))
        #!/bin/bash
        #SBATCH --job-name=course-job
        ...
    """
    if not jobs or any(not isinstance(n, int) or n < 1 for n in jobs.values()):
        raise ValueError(f"jobs must map each job name to a number of tasks >= 1, e.g. {{'worker': 2}}; got {jobs!r}.")
    tasks = sum(jobs.values())
    command = shlex.join([python, "-m", "course_utils.cluster.slurm", "--jobs", json.dumps(jobs),
                          "--port-base", str(port_base), script, *map(str, args)])
    return "\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={tasks}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --time={time_limit}",
        "#SBATCH --output=%x-%j.log",
        "# One task (one TensorFlow server) per node, each writing its own log. Every node must see the same",
        "# files (the script, the data, the checkpoint folder): a shared file system.",
        f"srun --output=%x-%j-task%t.log {command}",
        ""])


def main(argv=None):
    """``python -m course_utils.cluster.slurm --jobs '{"worker": 2}' [--port-base N] SCRIPT [ARGS]``: run SCRIPT
    with this Slurm task's ``TF_CONFIG``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m course_utils.cluster.slurm")
    parser.add_argument("--jobs", required=True, type=json.loads, help='e.g. \'{"worker": 2}\'')
    parser.add_argument("--port-base", type=int, default=8888)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    os.environ["TF_CONFIG"] = json.dumps(slurm_tf_config(options.jobs, options.port_base))
    os.execv(sys.executable, [sys.executable, options.script, *options.args])


if __name__ == "__main__":
    main()
