"""Chapter 3's jobs on a Slurm cluster: a batch script that starts one task per node, and the ``TF_CONFIG`` each
task builds from Slurm's variables.

On a real cluster nobody writes ``TF_CONFIG`` by hand: Slurm tells each task its rank (``SLURM_PROCID``) and the
nodes of the step (``SLURM_STEP_NODELIST``, e.g. ``node[9-10]``). TensorFlow ships ``SlurmClusterResolver`` for
this, but in TensorFlow 2.21 it sorts the node names as strings (``node10`` before ``node9``) while Slurm numbers
the tasks in node order, so with such names each task is told another node's address (the tests show it). The
cluster spec here is built in Slurm's own order, with the resolver's helpers for Slurm's list syntax, and the
jobs take the ranks in the resolver's order (job names alphabetically: ``chief``, ``ps``, ``worker``).
``python -m course_utils.cluster.slurm SCRIPT [ARGS]`` builds it and runs ``SCRIPT`` with it in ``TF_CONFIG``.
"""
import json
import os
import shlex
import sys

__all__ = ["slurm_batch_script", "slurm_tf_config"]
STEP_VARIABLES = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")


def slurm_tf_config(jobs, port_base=2222, environ=None):
    """The ``TF_CONFIG`` of this Slurm task.

    Args:
        jobs: ``{job name: tasks}``, e.g. ``{"worker": 2}``; the step's tasks, in rank order, go to the jobs in
            alphabetical order of their names.
        port_base: the port of the first task on each node (the next task on the same node gets the next port).
        environ: Slurm's variables (default ``os.environ``): those of :data:`STEP_VARIABLES`, and
            ``SLURMD_NODENAME`` when set (then checked against the node this task is given).

    Returns:
        ``{"cluster": {job: ["host:port", ...]}, "task": {"type": job, "index": i}}``.

    Raises:
        ValueError: not inside a Slurm job step (a variable is missing), ``jobs`` asks for another number of tasks
            than the step has, or Slurm placed this task on another node than its rank implies; the message says
            which.

    Example:
        >>> step = {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "node[9-10]",
        ...         "SLURM_STEP_TASKS_PER_NODE": "1(x2)"}  # task 1 of `srun --nodes=2 --ntasks-per-node=1`
        >>> slurm_tf_config({"worker": 2}, environ=step)
        {'cluster': {'worker': ['node9:2222', 'node10:2222']}, 'task': {'type': 'worker', 'index': 1}}
    """
    from tensorflow.python.distribute.cluster_resolver.slurm_cluster_resolver import (
        expand_hostlist, expand_tasks_per_node)

    environ = os.environ if environ is None else environ
    missing = [name for name in STEP_VARIABLES if name not in environ]
    if missing:
        raise ValueError(f"Not inside a Slurm job step: {', '.join(missing)} not set. Start the script with srun "
                         f"(the batch script of slurm_batch_script does).")
    if sum(jobs.values()) != int(environ["SLURM_STEP_NUM_TASKS"]):
        raise ValueError(f"jobs {jobs} has {sum(jobs.values())} tasks but the Slurm step has "
                         f"{environ['SLURM_STEP_NUM_TASKS']}: ask sbatch for as many tasks as the jobs have.")
    hosts = expand_hostlist(environ["SLURM_STEP_NODELIST"])
    per_node = expand_tasks_per_node(environ["SLURM_STEP_TASKS_PER_NODE"])
    addresses = [f"{host}:{port_base + k}" for host, count in zip(hosts, per_node, strict=True) for k in range(count)]
    rank, cluster, first = int(environ["SLURM_PROCID"]), {}, 0
    if not 0 <= rank < len(addresses):
        raise ValueError(f"SLURM_PROCID {rank} is not a task of this step, whose nodes hold {len(addresses)} tasks.")
    for job in sorted(jobs):
        cluster[job] = addresses[first:first + jobs[job]]
        if first <= rank < first + jobs[job]:
            task = {"type": job, "index": rank - first}
        first += jobs[job]
    mine = addresses[rank].rsplit(":", 1)[0]
    if environ.get("SLURMD_NODENAME", mine) != mine:
        raise ValueError(f"Task {rank} runs on {environ['SLURMD_NODENAME']} but its rank puts it on {mine}: start the "
                         f"step with srun's default block distribution (--distribution=block).")
    return {"cluster": cluster, "task": task}


def slurm_batch_script(jobs, script, args=(), port_base=2222, time_limit="00:30:00", name="course-job",
                       setup="source .venv/bin/activate", attempts=3):
    """An ``sbatch`` script that runs ``script`` as the cluster ``jobs`` on as many whole nodes, one task per node,
    each task with the ``TF_CONFIG`` :func:`slurm_tf_config` builds.

    Args:
        jobs: ``{job name: tasks}``, as for chapter 3's ``LocalCluster``.
        script: the training script (each task runs it), on storage every node sees; ``args``: its arguments.
        port_base, time_limit, name: the port of each task's server, Slurm's ``--time``, the job's name.
        setup: the shell line that makes ``python`` the one with TensorFlow and ``course_utils`` on the nodes
            (a virtual environment on shared storage, or your site's ``module load ...``).
        attempts: how many times the step is started: a lost task (a crash, a node gone) ends the whole
            step, and the script (with ``BackupAndRestore``) resumes from its last backup in the next start.

    Raises:
        ValueError: ``jobs`` is empty or has a count below 1, or ``attempts`` is below 1.

    Example:
        >>> print(slurm_batch_script({"worker": 2}, "mwms_worker.py"))
        #!/bin/bash
        #SBATCH --job-name=course-job
        ...
    """
    if not jobs or any(not isinstance(n, int) or n < 1 for n in jobs.values()):
        raise ValueError(f"jobs must map each job name to a number of tasks >= 1, e.g. {{'worker': 2}}; got {jobs!r}.")
    if not isinstance(attempts, int) or attempts < 1:
        raise ValueError(f"attempts is how many times the step is started, a whole number >= 1; got {attempts!r}.")
    command = shlex.join(["python", "-m", "course_utils.cluster.slurm", "--jobs", json.dumps(jobs),
                          "--port-base", str(port_base), script, *map(str, args)])
    return "\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={sum(jobs.values())}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
        f"#SBATCH --time={time_limit}",
        "#SBATCH --output=%x-%j.log",
        "#SBATCH --requeue",
        "# One task (one TensorFlow server) per node, with the whole node, each writing its own log. Every node",
        "# must see the same files (the script, the data, the checkpoint folder): run sbatch from shared storage.",
        "# --requeue: where the cluster requeues preempted jobs (PreemptMode=REQUEUE), this job comes back.",
        "# The loop: a lost task ends the whole step; the next start resumes from the last backup.",
        "set -euo pipefail",
        setup,
        f"for attempt in $(seq 1 {attempts}); do",
        f"  if srun --output=%x-%j-task%t-start$attempt.log {command}; then exit 0; fi",
        '  echo "start $attempt of the step failed" >&2',
        "done",
        "exit 1",
        ""])


def main(argv=None):
    """``python -m course_utils.cluster.slurm --jobs '{"worker": 2}' [--port-base N] SCRIPT [ARGS]``: run SCRIPT
    with this Slurm task's ``TF_CONFIG``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m course_utils.cluster.slurm")
    parser.add_argument("--jobs", required=True, type=json.loads, help='e.g. \'{"worker": 2}\'')
    parser.add_argument("--port-base", type=int, default=2222)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    os.environ["TF_CONFIG"] = json.dumps(slurm_tf_config(options.jobs, options.port_base))
    os.execv(sys.executable, [sys.executable, options.script, *options.args])


if __name__ == "__main__":
    main()
