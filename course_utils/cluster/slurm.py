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
import re
import runpy
import shlex
import sys

from course_utils.checkers.reach import reveals

__all__ = ["check_gpus", "slurm_batch_script", "slurm_tf_config"]
STEP_VARIABLES = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST", "SLURM_STEP_TASKS_PER_NODE")


@reveals  # it prints exercise 3.1's TF_CONFIG: the prediction counts only before it is used
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


KERAS = {"tf_keras": "1", "keras3": "0"}  # the job's Keras: the value of TF_USE_LEGACY_KERAS that selects it
JOBS = ("chief", "worker")  # what a MultiWorkerMirroredStrategy job on Slurm is made of
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _check_count(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value!r}.")


def _check_jobs(jobs):
    if not isinstance(jobs, dict) or not jobs:
        raise ValueError(f"jobs must map each job name to a number of tasks >= 1, e.g. {{'worker': 2}}; got {jobs!r}.")
    if "ps" in jobs:
        raise ValueError(
            "A parameter-server job cannot run as one Slurm step: its workers and parameter servers serve until "
            "they are stopped (server.join()), so srun would not return when the chief is done and the job would "
            "hold its nodes until --time runs out. On Slurm, train with MultiWorkerMirroredStrategy "
            "(jobs={'worker': N}, as chapter 3's MWMS job does); for ParameterServerStrategy use a manager that "
            "ends the servers when the chief ends, such as a TFJob (cleanPodPolicy: Running), or start the servers "
            "yourself and scancel them after the chief's step.")
    unknown = [job for job in jobs if job not in JOBS]
    if unknown:
        raise ValueError(f"slurm_batch_script runs MultiWorkerMirroredStrategy jobs, made of {' and '.join(JOBS)} "
                         f"tasks; it has no job {', '.join(map(repr, unknown))}. Use e.g. {{'worker': 2}} or "
                         f"{{'chief': 1, 'worker': 2}}.")
    for job, count in jobs.items():
        _check_count(count, f"The number of {job!r} tasks", 1)


def slurm_batch_script(jobs, script, args=(), port_base=2222, time_limit="00:30:00", name="course-job",
                       setup="source .venv/bin/activate", attempts=3, gpus_per_node=0, keras="tf_keras", env=None):
    """An ``sbatch`` script that runs ``script`` as the cluster ``jobs`` on as many whole nodes, one task per node,
    each task with the ``TF_CONFIG`` :func:`slurm_tf_config` builds.

    The script sets everything the tasks need itself (the Keras choice, ``env``): a job gets the environment of
    whoever runs ``sbatch``, so a job that relies on it works for one user and fails for the next. Its ``srun``
    passes the script's own environment on to the tasks (``--export=ALL``): a step otherwise inherits the job's
    export setting, and where jobs are submitted with ``--export=NONE`` (a site's ``SBATCH_EXPORT``) the tasks would
    get none of what the script set, not even its ``PATH``. It asks for
    the whole node's memory (``--mem=0``: ``--exclusive`` alone gives a job only the memory it asks for where
    memory is scheduled) and, for a GPU job, for the GPUs by count (``--gpus-per-node``: a step gets no GPUs that
    ``--exclusive`` only implied), and each task checks that TensorFlow sees them before it starts the script.
    One failed task ends the step (``srun --kill-on-bad-exit=1``: otherwise the other tasks go on, an MWMS
    worker waiting for its lost peer); each task's log is named by the job, the requeue
    (``SLURM_RESTART_COUNT``), the task and the start, so that a requeued job does not overwrite its first run's.

    Args:
        jobs: ``{job name: tasks}`` of a MultiWorkerMirroredStrategy job: ``worker`` and at most one ``chief``.
        script: the training script (each task runs it), on storage every node sees; ``args``: its arguments.
        port_base, time_limit, name: the port of each task's server, Slurm's ``--time``, the job's name.
        setup: the shell line that makes ``python`` one with TensorFlow, tf_keras and ``course_utils`` installed, on
            every node: each task runs ``python -m course_utils.cluster.slurm`` (a virtual environment on shared
            storage into which you ``pip install`` the course's package, or your site's ``module load ...`` and a
            virtual environment on top). It runs before ``set -u``, which some modules' and conda's activation
            scripts do not survive. Where batch jobs start without your login's environment (``--export=NONE``),
            ``module`` may not be defined yet: begin with ``source /etc/profile``.
        attempts: how many times the step is started: a lost task (a crash) ends the whole step, and the script
            (with ``BackupAndRestore``) resumes from its last backup in the next start. (A lost node ends the
            whole job instead, which Slurm then requeues if the job may be: ``JobRequeue=1``, Slurm's default, or
            the script's ``--requeue`` where a site set ``JobRequeue=0``.)
        gpus_per_node: the GPUs each node's task uses; 0 for a CPU job.
        keras: ``"tf_keras"`` (``TF_USE_LEGACY_KERAS=1``: tf_keras's ``fit`` under MWMS, as chapter 3 uses it)
            or ``"keras3"`` (``TF_USE_LEGACY_KERAS=0``).
        env: more variables for every task, ``{name: value}`` (e.g. ``TFDS_DATA_DIR``).

    Raises:
        ValueError: ``jobs`` has a job other than ``chief`` and ``worker`` (a parameter-server job is refused:
            the message says why and what to use instead) or a count below 1; ``attempts`` below 1;
            ``gpus_per_node`` not a whole number >= 0; an unknown ``keras``; an ``env`` name that is no shell
            variable, or ``TF_USE_LEGACY_KERAS`` in ``env``.

    Example:
        >>> print(slurm_batch_script({"worker": 2}, "mwms_worker.py", gpus_per_node=4))
        #!/bin/bash
        #SBATCH --job-name=course-job
        ...
    """
    _check_jobs(jobs)
    _check_count(attempts, "attempts (how many times the step is started)", 1)
    _check_count(gpus_per_node, "gpus_per_node (the GPUs each node's task uses; 0 for a CPU job)", 0)
    if keras not in KERAS:
        raise ValueError(f"keras must be one of {list(KERAS)} (the Keras the tasks import), got {keras!r}.")
    env = dict(env or {})
    for variable in env:
        if not isinstance(variable, str) or not _VARIABLE.fullmatch(variable):
            raise ValueError(f"env names shell variables (letters, digits, _); {variable!r} is none.")
    if "TF_USE_LEGACY_KERAS" in env:
        raise ValueError("Choose the Keras with keras='tf_keras' or keras='keras3', not with TF_USE_LEGACY_KERAS in env.")
    env = {"TF_USE_LEGACY_KERAS": KERAS[keras], **env}
    gpu_option = ["--gpus-per-node", str(gpus_per_node)] if gpus_per_node else []
    command = shlex.join(["python", "-m", "course_utils.cluster.slurm", "--jobs", json.dumps(jobs),
                          "--port-base", str(port_base), *gpu_option, script, *map(str, args)])
    return "\n".join([
        "#!/bin/bash",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={sum(jobs.values())}",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --exclusive",
        "#SBATCH --mem=0",
        *([f"#SBATCH --gpus-per-node={gpus_per_node}"] if gpus_per_node else []),
        f"#SBATCH --time={time_limit}",
        "#SBATCH --output=%x-%j.log",
        "#SBATCH --open-mode=append",
        "#SBATCH --requeue",
        "# One task (one TensorFlow server) per node, with the whole node (all its memory: --mem=0), each writing",
        "# its own log. Every node must see the same files (the script, the data, the checkpoint folder): run",
        "# sbatch from shared storage. --requeue: Slurm may requeue this job (after a lost node, or where it preempts",
        "# with PreemptMode=REQUEUE) also where the site's JobRequeue=0 says no; it runs this script from the top again",
        "# and appends to its log.",
        *(["# --gpus-per-node: a step gets no GPUs that --exclusive only implied; each task checks it sees them."]
          if gpus_per_node else []),
        "set -eo pipefail",
        setup,
        "set -u  # after the setup: some modules' and conda's activation scripts use unset variables",
        "# What the tasks need, set here rather than taken from whoever runs sbatch:",
        *(f"export {variable}={shlex.quote(str(value))}" for variable, value in env.items()),
        "run=${SLURM_RESTART_COUNT:-0}  # 0, then 1, 2, ... after each requeue: in the log names, so none is overwritten",
        "# --export=ALL: the tasks get this script's environment, also when the job was submitted with --export=NONE.",
        "# --kill-on-bad-exit=1: one failed task ends the step. The loop: the next start resumes from the last backup.",
        f"for attempt in $(seq 1 {attempts}); do",
        f"  if srun --export=ALL --kill-on-bad-exit=1 --output=%x-%j-run$run-task%t-start$attempt.log {command}; "
        f"then exit 0; fi",
        '  echo "start $attempt of the step failed" >&2',
        "done",
        "exit 1",
        ""])


def check_gpus(expected, visible, environ=None):
    """Raise unless this task sees the ``expected`` number of GPUs (``visible``: TensorFlow's list of them).

    Raises:
        RuntimeError: another number; the message says what the task asked for, what Slurm gave it and what
            TensorFlow sees, and what to check, instead of letting the job train on the CPU.

    Example:
        >>> check_gpus(0, [])  # a CPU task that asked for no GPU sees none: nothing to say
        >>> check_gpus(2, [], environ={})
        Traceback (most recent call last):
        ...
        RuntimeError: Task ? on this node asked for 2 GPU(s) (--gpus-per-node=2) but TensorFlow sees 0 (none); ...
    """
    environ = os.environ if environ is None else environ
    if len(visible) == expected:
        return
    rank, node = environ.get("SLURM_PROCID", "?"), environ.get("SLURMD_NODENAME", "this node")
    raise RuntimeError(
        f"Task {rank} on {node} asked for {expected} GPU(s) (--gpus-per-node={expected}) but TensorFlow sees "
        f"{len(visible)} ({', '.join(d.name for d in visible) or 'none'}); Slurm gave the step "
        f"SLURM_GPUS_ON_NODE={environ.get('SLURM_GPUS_ON_NODE', '(unset)')}, CUDA_VISIBLE_DEVICES="
        f"{environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}. Stopping rather than training on the CPU: check the "
        f"nodes' GPUs (sinfo --Node --format='%N %G'), that this TensorFlow is built with CUDA "
        f"(pip install 'tensorflow[and-cuda]'), and that the job asked for them (scontrol show job $SLURM_JOB_ID).")


def main(argv=None):
    """``python -m course_utils.cluster.slurm --jobs '{"worker": 2}' [--port-base N] [--gpus-per-node G] SCRIPT
    [ARGS]``: check that this task sees G GPUs (if G > 0), then run SCRIPT, in this process, with this Slurm task's
    ``TF_CONFIG``.

    SCRIPT runs after TensorFlow's import (for Slurm's list syntax, and the GPU check), so a variable that TensorFlow
    reads when it is imported (``TF_CPP_MIN_LOG_LEVEL``, ...) set by SCRIPT itself comes too late: set it in the
    batch script (``slurm_batch_script(..., env=...)``)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m course_utils.cluster.slurm")
    parser.add_argument("--jobs", required=True, type=json.loads, help='e.g. \'{"worker": 2}\'')
    parser.add_argument("--port-base", type=int, default=2222)
    parser.add_argument("--gpus-per-node", type=int, default=0, help="the GPUs this task must see (0: none checked)")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)
    if options.gpus_per_node:
        import tensorflow as tf

        check_gpus(options.gpus_per_node, tf.config.list_physical_devices("GPU"))
    os.environ["TF_CONFIG"] = json.dumps(slurm_tf_config(options.jobs, options.port_base))
    # Run the script in this process, as `python SCRIPT ARGS` would: TensorFlow, imported above for Slurm's list
    # syntax, is imported once per task, not once here and again in a new process.
    sys.argv = [options.script, *options.args]
    sys.path[0] = os.path.dirname(os.path.abspath(options.script))
    runpy.run_path(options.script, run_name="__main__")


if __name__ == "__main__":
    main()
