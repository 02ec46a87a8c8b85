"""Extra environment variables for a cluster's processes: checking ``env`` and ``task_env``, and :func:`dtensor_env`."""


def check_env(env, where):
    """Return ``env`` as a new dict if it maps strings to strings, else raise ValueError naming ``where``."""
    if not isinstance(env, dict):
        raise ValueError(f"{where} must be a dict of environment variables, got {env!r}.")
    for key, value in env.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(f"{where}: environment variables are strings, but {key!r} is set to "
                             f"{value!r}. Write it as {key!r}: {str(value)!r}.")
    return dict(env)


def resolve_task_env(task_env, spec):
    """The ``task_env`` option of :class:`LocalCluster` as ``{task: {name: value}}`` for every started task.

    Args:
        task_env: None, a function ``(job, index, cluster_spec) -> dict``, or a dict whose keys
            are job names or ``(job, index)`` tuples and whose values are dicts.
        spec: the cluster's :class:`~course_utils.cluster.spec.ClusterSpec` (its ports chosen).

    Raises:
        ValueError: ``task_env`` has another type, names a task that is not in the spec or not
            started, or gives a value that is not a string.
    """
    started = spec.started_tasks
    if task_env is None:
        return {task: {} for task in started}
    if callable(task_env):
        cluster_spec = spec.cluster_spec
        return {task: check_env(dict(task_env(task.job, task.index, cluster_spec)), f"task_env for {task}")
                for task in started}
    if not isinstance(task_env, dict):
        raise ValueError(f"task_env must be a function (job, index, cluster_spec) -> dict or a dict "
                         f"keyed by job name or (job, index), got {task_env!r}.")
    result = {task: {} for task in started}
    for key, value in task_env.items():
        if isinstance(key, str):
            spec.check_job_name(key, "task_env")
            targets = [t for t in started if t.job == key]
        else:
            task = spec.task(*key) if isinstance(key, tuple) and len(key) == 2 else None
            if task is None:
                raise ValueError(f"task_env keys are job names or (job, index) tuples, got {key!r}.")
            targets = [task]
        for task in targets:
            if task not in result:
                raise ValueError(f"task_env sets variables for {task}, but its job is in not_started, "
                                 f"so no process gets them. Remove that entry.")
            result[task].update(check_env(value, f"task_env[{key!r}]"))
    return result


def dtensor_env(job, index, cluster_spec):
    """The environment of one multi-client DTensor client; pass it as ``task_env=dtensor_env``.

    Every task of the (single) job becomes one DTensor client: ``DTENSOR_CLIENT_ID`` is its index,
    ``DTENSOR_NUM_CLIENTS`` the number of tasks, ``DTENSOR_JOB_NAME`` the job name and
    ``DTENSOR_JOBS`` the comma-separated addresses of all clients, identical in every client.

    Args:
        job: the task's job name.
        index: the task's index in its job.
        cluster_spec: ``{job: [address, ...]}``, as in :attr:`LocalCluster.cluster_spec`.

    Returns:
        A dict of the four ``DTENSOR_*`` environment variables.

    Raises:
        ValueError: the cluster has more than one job (DTensor clients form one job).

    Example:
        >>> env = dtensor_env("worker", 1, {"worker": ["127.0.0.1:5000", "127.0.0.1:5001"]})
        >>> env["DTENSOR_CLIENT_ID"], env["DTENSOR_JOBS"]
        ('1', '127.0.0.1:5000,127.0.0.1:5001')
    """
    if len(cluster_spec) != 1:
        raise ValueError(
            f"Multi-client DTensor runs one job of clients, but the cluster has the jobs "
            f"{list(cluster_spec)}. Use a single job, e.g. LocalCluster(script, {{'worker': 2}}, "
            f"task_env=dtensor_env)."
        )
    addresses = cluster_spec[job]
    return {
        "DTENSOR_CLIENT_ID": str(index),
        "DTENSOR_NUM_CLIENTS": str(len(addresses)),
        "DTENSOR_JOB_NAME": job,
        "DTENSOR_JOBS": ",".join(addresses),
    }
