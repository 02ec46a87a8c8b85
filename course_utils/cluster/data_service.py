"""The tf.data service as the processes of a :class:`LocalCluster`: what each process is told, and where trainers connect.

A tf.data service is one *dispatcher* and any number of *workers*
(``tf.data.experimental.service.DispatchServer`` and ``WorkerServer``), each a process of its own. Run them as
a cluster of two jobs, ``{"dispatcher": 1, "worker": n}``, without ``TF_CONFIG`` (the service does not read it;
a strategy would), and with ``task_env=data_service_env``: each process then learns its role, its port and the
dispatcher's address from three environment variables. The cluster picks the ports, writes each process's
log, and stops exactly the processes it started.

Example:
    >>> service = LocalCluster("service.py", {"dispatcher": 1, "worker": 2}, tf_config=False,  # doctest: +SKIP
    ...                        task_env=data_service_env)
    >>> with service:  # doctest: +SKIP
    ...     service.wait_until_ready()
    ...     dataset = dataset.apply(tf.data.experimental.service.distribute(
    ...         "distributed_epoch", dispatcher_target(service.cluster_spec), job_name="train"))
"""

__all__ = ["DISPATCHER", "DISPATCHER_VARIABLE", "PORT_VARIABLE", "ROLE_VARIABLE", "WORKER", "data_service_env",
           "dispatcher_target"]

DISPATCHER, WORKER = "dispatcher", "worker"
ROLE_VARIABLE, PORT_VARIABLE, DISPATCHER_VARIABLE = "DATA_SERVICE_ROLE", "DATA_SERVICE_PORT", "DATA_SERVICE_DISPATCHER"
_EXAMPLE = "LocalCluster(script, {'dispatcher': 1, 'worker': 2}, tf_config=False, task_env=data_service_env)"


def _check_service_spec(cluster_spec):
    """Raise ValueError, saying what to change, unless ``cluster_spec`` is one dispatcher and at least one worker."""
    jobs = {job: len(addresses) for job, addresses in dict(cluster_spec).items()}
    others = sorted(set(jobs) - {DISPATCHER, WORKER})
    if others:
        raise ValueError(f"A tf.data service has a dispatcher and workers only, but this cluster also has the jobs "
                         f"{others}. Start them in a cluster of their own (trainers are a job of their own, with "
                         f"TF_CONFIG), and make the service as {_EXAMPLE}.")
    if jobs.get(DISPATCHER) != 1:
        raise ValueError(f"A tf.data service has exactly one dispatcher, but this cluster has "
                         f"{jobs.get(DISPATCHER, 0)}. Use {{'dispatcher': 1, 'worker': n}}, e.g. {_EXAMPLE}.")
    if not jobs.get(WORKER):
        raise ValueError(f"A tf.data service without workers registers datasets but never produces an element: "
                         f"the trainers would wait forever. Give it at least one worker, e.g. {_EXAMPLE}.")


def data_service_env(job, index, cluster_spec):
    """The environment of one tf.data service process; pass it as ``task_env=data_service_env`` (with
    ``tf_config=False``) to a :class:`LocalCluster` of the jobs ``{"dispatcher": 1, "worker": n}``.

    Every process gets ``DATA_SERVICE_ROLE`` (``"dispatcher"`` or ``"worker"``), ``DATA_SERVICE_PORT`` (the
    port of its own address in the cluster spec, where its server must listen) and ``DATA_SERVICE_DISPATCHER``
    (the dispatcher's ``host:port``, which a worker's ``WorkerConfig(dispatcher_address=...)`` needs).

    Args:
        job: the task's job name, ``"dispatcher"`` or ``"worker"``.
        index: the task's index in its job.
        cluster_spec: ``{job: [address, ...]}``, as in :attr:`LocalCluster.cluster_spec`.

    Returns:
        A dict of the three ``DATA_SERVICE_*`` environment variables.

    Raises:
        ValueError: the cluster is not one dispatcher and at least one worker, with no other job (the
            message says what to change).

    Example:
        >>> data_service_env("worker", 1, {"dispatcher": ["127.0.0.1:5000"],
        ...                                "worker": ["127.0.0.1:5001", "127.0.0.1:5002"]})
        {'DATA_SERVICE_ROLE': 'worker', 'DATA_SERVICE_PORT': '5002', 'DATA_SERVICE_DISPATCHER': '127.0.0.1:5000'}
    """
    _check_service_spec(cluster_spec)
    return {ROLE_VARIABLE: job, PORT_VARIABLE: cluster_spec[job][index].rsplit(":", 1)[1],
            DISPATCHER_VARIABLE: cluster_spec[DISPATCHER][0]}


def dispatcher_target(cluster_spec):
    """The address a trainer gives ``tf.data.experimental.service.distribute(..., service=...)``: the
    dispatcher's, with its protocol, ``grpc://host:port``.

    Raises:
        ValueError: the cluster is not one dispatcher and at least one worker (see :func:`data_service_env`).

    Example:
        >>> dispatcher_target({"dispatcher": ["127.0.0.1:5000"], "worker": ["127.0.0.1:5001"]})
        'grpc://127.0.0.1:5000'
    """
    _check_service_spec(cluster_spec)
    return f"grpc://{cluster_spec[DISPATCHER][0]}"
