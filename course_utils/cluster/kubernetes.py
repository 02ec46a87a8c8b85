"""Chapter 3's jobs on Kubernetes: a Kubeflow Training Operator ``TFJob`` manifest made from the same cluster
description (``{"chief": 1, "worker": 2}``), and the ``TF_CONFIG`` the operator gives each pod.

On Kubernetes the operator, not a person, writes ``TF_CONFIG``: it starts one pod per task and a headless
service per pod, and names each task by its service's DNS name (``<job>-<type>-<index>.<namespace>.svc``) on
port 2222. The training script is the same as on localhost.
"""
import copy

__all__ = ["operator_tf_config", "tfjob_manifest"]

REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}  # TFJob's names
PORT = 2222  # the operator's default port, named "tfjob-port" in the container "tensorflow"


def tfjob_manifest(jobs, image, command, name="course-job", namespace="default",
                   checkpoint_claim="course-checkpoints", checkpoint_dir="/checkpoints"):
    """A ``TFJob`` (``kubeflow.org/v1``) running ``command`` in ``image`` as the cluster ``jobs``, every pod
    mounting one shared volume for checkpoints.

    Args:
        jobs: ``{job name: tasks}`` with names among ``chief``, ``worker``, ``ps``, ``evaluator``.
        image: the container image (with TensorFlow, ``course_utils`` and the script).
        command: the container's command, a list (``["python", "/app/mwms_worker.py", "/checkpoints"]``).
        name, namespace: the TFJob's; the pods' host names are made from them.
        checkpoint_claim: a ``PersistentVolumeClaim`` every pod can mount (ReadWriteMany), at ``checkpoint_dir``:
            the storage every worker must reach for ``BackupAndRestore`` and the chief's checkpoints.

    Returns:
        The manifest as a dict (``yaml.safe_dump`` it for ``kubectl apply -f``).

    Raises:
        ValueError: a job name the TFJob has no replica type for, or a count below 1.

    Example:
        >>> tfjob_manifest({"worker": 2}, "example/course:latest", ["python", "mwms_worker.py"])["kind"]
        'TFJob'
    """
    unknown = [job for job in jobs if job not in REPLICA_TYPES]
    if unknown or any(not isinstance(n, int) or n < 1 for n in jobs.values()):
        raise ValueError(f"jobs must map {sorted(REPLICA_TYPES)} to counts >= 1 (a TFJob has replica types "
                         f"{list(REPLICA_TYPES.values())}); got {jobs!r}.")
    pod = {"containers": [{"name": "tensorflow", "image": image, "command": list(map(str, command)),
                           "ports": [{"name": "tfjob-port", "containerPort": PORT}],
                           "volumeMounts": [{"name": "checkpoints", "mountPath": checkpoint_dir}]}],
           "volumes": [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": checkpoint_claim}}]}
    replicas = {REPLICA_TYPES[job]: {"replicas": count, "restartPolicy": "OnFailure",
                                     "template": {"spec": copy.deepcopy(pod)}}  # its own copy: no YAML aliases
                for job, count in jobs.items()}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "tfReplicaSpecs": replicas}}


def operator_tf_config(manifest, job, index):
    """The ``TF_CONFIG`` the Training Operator (v1.9) sets in the pod of task ``index`` of ``job``: every task
    named by its headless service, ``<name>-<job>-<i>.<namespace>.svc:2222``, and ``"environment": "cloud"``.

    Example:
        >>> operator_tf_config(tfjob_manifest({"worker": 2}, "img", ["python", "w.py"]), "worker", 1)["task"]
        {'type': 'worker', 'index': 1}
    """
    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    cluster = {kind.lower(): [f"{name}-{kind.lower()}-{i}.{namespace}.svc:{PORT}" for i in range(spec["replicas"])]
               for kind, spec in manifest["spec"]["tfReplicaSpecs"].items()}
    if job not in cluster or not 0 <= index < len(cluster[job]):
        raise ValueError(f"The TFJob has no task {job} {index}; its tasks: "
                         f"{ {job: len(hosts) for job, hosts in cluster.items()} }.")
    return {"cluster": cluster, "task": {"type": job, "index": index}, "environment": "cloud"}
