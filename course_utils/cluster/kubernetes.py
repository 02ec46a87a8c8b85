"""Chapter 3's jobs on Kubernetes: a Kubeflow Training Operator ``TFJob`` manifest made from the same cluster
description (``{"chief": 1, "worker": 2}``), the shared volume it needs, and the ``TF_CONFIG`` the operator gives
each pod.

On Kubernetes the operator, not a person, writes ``TF_CONFIG``: it starts one pod per task and a headless
service per pod, and names each task by its service's DNS name (``<job>-<type>-<index>.<namespace>.svc``) on the
port the container names ``tfjob-port`` (2222 by default). The training script is the same as on localhost.
The Training Operator (``kubeflow.org/v1``) is Kubeflow's legacy API now; its successor, Trainer v2's ``TrainJob``,
has no TensorFlow runtime and writes no ``TF_CONFIG`` (chapter 3 says what changes).
"""
import copy

__all__ = ["operator_tf_config", "shared_volume_claim", "tfjob_manifest"]

REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}  # TFJob's names
PORT = 2222  # the operator's default port, named "tfjob-port" in the container "tensorflow"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"  # the label the operator (v1.9) puts on every pod of a job
GPU = "nvidia.com/gpu"  # the resource NVIDIA's device plugin offers; a GPU count goes in the container's limits


def shared_volume_claim(name="course-shared", size="10Gi", storage_class=None):
    """A ``PersistentVolumeClaim`` that pods on different nodes can mount at once (``ReadWriteMany``): for the
    backups, checkpoints and data every task reads or writes. The cluster needs a storage class that offers it
    (NFS, CephFS, a cloud file store); many default classes do not."""
    spec = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}


def tfjob_manifest(jobs, image, command, name="course-job", namespace="default", claim="course-shared",
                   shared_dir="/shared", cpu="2", memory="4Gi", gpus=0, shared_memory="1Gi"):
    """A ``TFJob`` (``kubeflow.org/v1``) running ``command`` in ``image`` as the cluster ``jobs``.

    Args:
        jobs: ``{job name: tasks}`` with names among ``chief``, ``worker``, ``ps``, ``evaluator``.
        image: the container image: TensorFlow, tf_keras, ``course_utils`` installed, and the script.
        command: the container's command, a list (``["python", "/app/mwms_worker.py", "/shared/mwms"]``).
        name, namespace: the TFJob's; the pods' host names are made from them.
        claim: the :func:`shared_volume_claim` every pod mounts at ``shared_dir``, where MNIST is prepared once
            (``TFDS_DATA_DIR`` points at ``<shared_dir>/tensorflow_datasets``) and the backups and checkpoints go.
        cpu, memory: what each pod requests, so that the scheduler does not starve them.
        gpus: the GPUs of each pod (``nvidia.com/gpu`` in its limits, which Kubernetes requires for GPUs); 0 for
            none.
        shared_memory: the size of the memory-backed ``/dev/shm`` every pod mounts (an ``emptyDir`` with
            ``medium: Memory``; it counts as the pod's memory): a container's own is small (64 MiB in Docker),
            and NCCL between the GPUs of a pod outgrows it. None: no such volume.

    The pods of the job are spread over the nodes (``topologySpreadConstraints`` on ``kubernetes.io/hostname``,
    at most one more on a node than on another, by the label the operator gives them): resource requests alone
    let the scheduler put them all on one node. The rule is strict (``DoNotSchedule``): a pod waits (``Pending``)
    rather than break it, and every node the pod may use counts, with room for it or not, but for nodes whose
    taints it does not tolerate (``nodeTaintsPolicy: Honor``, e.g. a control plane's). So one pod per node is what
    it suits (MWMS: one worker per node, with all the node's GPUs); with more pods than nodes, the pods stack
    only once every such node has one, so give a GPU job a ``nodeSelector`` for the GPU nodes if there are
    others.

    Returns:
        The manifest as a dict (``yaml.safe_dump`` it for ``kubectl apply -f``). A failed container is restarted
        in its pod (``restartPolicy: OnFailure``: an MWMS worker whose peer was lost exits with an error and
        starts again) until the restarts of all the job's pods add up to 3 (``backoffLimit``, one budget for the
        whole job: raise it on preemptible nodes); the pods still running when the job ends (parameter servers)
        are removed.

    Raises:
        ValueError: a job name the TFJob has no replica type for, a count below 1, or ``gpus`` not a whole number
            >= 0.

    Example:
        >>> tfjob_manifest({"worker": 2}, "example/course:latest", ["python", "mwms_worker.py"])["kind"]
        'TFJob'
    """
    unknown = [job for job in jobs if job not in REPLICA_TYPES]
    if unknown or any(not isinstance(n, int) or n < 1 for n in jobs.values()):
        raise ValueError(f"jobs must map {sorted(REPLICA_TYPES)} to counts >= 1 (a TFJob has replica types "
                         f"{list(REPLICA_TYPES.values())}); got {jobs!r}.")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise ValueError(f"gpus is the GPUs of each pod, a whole number >= 0 (0: a CPU job); got {gpus!r}.")
    resources = {"requests": {"cpu": cpu, "memory": memory}, **({"limits": {GPU: gpus}} if gpus else {})}
    mounts, volumes = [{"name": "shared", "mountPath": shared_dir}], [
        {"name": "shared", "persistentVolumeClaim": {"claimName": claim}}]
    if shared_memory:
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shared_memory}})
    pod = {"containers": [{"name": "tensorflow", "image": image, "command": list(map(str, command)),
                           "env": [{"name": "TFDS_DATA_DIR", "value": f"{shared_dir}/tensorflow_datasets"}],
                           "ports": [{"name": "tfjob-port", "containerPort": PORT}],
                           "resources": resources, "volumeMounts": mounts}],
           "volumes": volumes,
           "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                          "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "Honor",
                                          "labelSelector": {"matchLabels": {JOB_NAME_LABEL: name}}}]}
    replicas = {REPLICA_TYPES[job]: {"replicas": count, "restartPolicy": "OnFailure",
                                     "template": {"spec": copy.deepcopy(pod)}}  # its own copy: no YAML aliases
                for job, count in jobs.items()}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 3}, "tfReplicaSpecs": replicas}}


def operator_tf_config(manifest, job, index):
    """The ``TF_CONFIG`` the Training Operator (v1.9) sets in the pod of task ``index`` of ``job``: every task
    named by its headless service, ``<name>-<job>-<i>.<namespace>.svc:<tfjob-port>``, and ``"environment":
    "cloud"``; None for a job of one task in all, which the operator does not treat as distributed.

    Raises:
        ValueError: the manifest has no such task.

    Example:
        >>> operator_tf_config(tfjob_manifest({"worker": 2}, "img", ["python", "w.py"]), "worker", 1)["task"]
        {'type': 'worker', 'index': 1}
    """
    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    specs = manifest["spec"]["tfReplicaSpecs"]

    def port(spec):
        container = next(c for c in spec["template"]["spec"]["containers"] if c["name"] == "tensorflow")
        return next((p["containerPort"] for p in container.get("ports", []) if p.get("name") == "tfjob-port"), PORT)

    cluster = {kind.lower(): [f"{name}-{kind.lower()}-{i}.{namespace}.svc:{port(spec)}" for i in range(spec["replicas"])]
               for kind, spec in specs.items()}
    if job not in cluster or not 0 <= index < len(cluster[job]):
        raise ValueError(f"The TFJob has no task {job} {index}; its tasks: "
                         f"{ {job: len(hosts) for job, hosts in cluster.items()} }.")
    if sum(len(hosts) for hosts in cluster.values()) == 1:
        return None
    return {"cluster": cluster, "task": {"type": job, "index": index}, "environment": "cloud"}
