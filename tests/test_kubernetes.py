"""Chapter 3's jobs on Kubernetes: the TFJob manifest against the Training Operator's published schema
(tests/data/kubeflow), each pod template against Kubernetes' own (tests/data/kubernetes), and the TF_CONFIG each pod
gets beside the one chapter 3 writes by hand."""
import gzip
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from course_utils.cluster.kubernetes import operator_tf_config, shared_volume_claim, tfjob_manifest

CRD = Path(__file__).parent / "data" / "kubeflow" / "kubeflow.org_tfjobs.yaml.gz"
POD_TEMPLATE = Path(__file__).parent / "data" / "kubernetes" / "pod-template-spec-v1.37.0-strict.json.gz"


@pytest.fixture(scope="module")
def tfjob_schema():
    crd = yaml.safe_load(gzip.decompress(CRD.read_bytes()))
    assert crd["spec"]["names"]["kind"] == "TFJob"
    return next(v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"] if v["name"] == "v1")


@pytest.fixture(scope="module")
def pod_template_validator():
    schema = json.loads(gzip.decompress(POD_TEMPLATE.read_bytes()))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def manifest(**kwargs):
    return tfjob_manifest({"chief": 1, "worker": 2, "ps": 1}, "example/course:latest",
                          ["python", "/app/ps_worker.py", "/shared/ps"], name="test-tfjob", **kwargs)


def test_the_manifest_is_a_valid_tfjob(tfjob_schema):
    jsonschema.validate(json.loads(json.dumps(manifest())), tfjob_schema)
    text = yaml.safe_dump(manifest())  # what kubectl apply -f reads
    assert yaml.safe_load(text) == manifest() and "&id" not in text  # each replica spelled out, no YAML aliases


def test_the_schema_is_not_vacuous(tfjob_schema):
    broken = manifest()
    broken["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two"
    with pytest.raises(jsonschema.ValidationError, match="'two' is not of type 'integer'"):
        jsonschema.validate(broken, tfjob_schema)
    broken = manifest()
    del broken["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(jsonschema.ValidationError, match="'name' is a required property"):
        jsonschema.validate(broken, tfjob_schema)
    with pytest.raises(jsonschema.ValidationError, match="'tfReplicaSpecs' is a required property"):
        jsonschema.validate({**manifest(), "spec": {"runPolicy": {}}}, tfjob_schema)


def test_every_pod_mounts_the_shared_volume_finds_mnist_there_and_asks_for_cpus():
    job = manifest(claim="shared-nfs")
    for spec in job["spec"]["tfReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        assert pod["volumes"][0] == {"name": "shared", "persistentVolumeClaim": {"claimName": "shared-nfs"}}
        container = pod["containers"][0]
        assert container["name"] == "tensorflow"  # the container the operator gives TF_CONFIG
        assert {"name": "TFDS_DATA_DIR", "value": "/shared/tensorflow_datasets"} in container["env"]
        assert container["resources"]["requests"] == {"cpu": "2", "memory": "4Gi"}
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 3}
    claim = shared_volume_claim("shared-nfs", storage_class="nfs")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"] and claim["spec"]["storageClassName"] == "nfs"


def test_each_pod_gets_the_cluster_by_service_names_as_chapter_3_writes_it_with_localhost():
    config = operator_tf_config(manifest(), "worker", 1)
    # the addresses as the operator's own test expects them (pkg/controller.v1/tensorflow/tensorflow_test.go, v1.9.0)
    assert config == {"cluster": {"chief": ["test-tfjob-chief-0.default.svc:2222"],
                                  "worker": ["test-tfjob-worker-0.default.svc:2222",
                                             "test-tfjob-worker-1.default.svc:2222"],
                                  "ps": ["test-tfjob-ps-0.default.svc:2222"]},
                      "task": {"type": "worker", "index": 1}, "environment": "cloud"}
    by_hand = {"cluster": {"chief": ["localhost:20001"], "worker": ["localhost:20002", "localhost:20003"],
                           "ps": ["localhost:20004"]}, "task": {"type": "worker", "index": 1}}
    assert {job: len(hosts) for job, hosts in config["cluster"].items()} == \
        {job: len(hosts) for job, hosts in by_hand["cluster"].items()} and config["task"] == by_hand["task"]
    with pytest.raises(ValueError, match="no task worker 2"):
        operator_tf_config(manifest(), "worker", 2)
    assert operator_tf_config(tfjob_manifest({"worker": 1}, "img", ["python"]), "worker", 0) is None  # not distributed


def test_jobs_a_tfjob_cannot_hold_are_named():
    with pytest.raises(ValueError, match="got {'coordinator': 1}"):
        tfjob_manifest({"coordinator": 1}, "img", ["python"])


@pytest.mark.parametrize("gpus", [0, 4])
def test_every_pod_template_is_a_valid_kubernetes_pod_template(pod_template_validator, tfjob_schema, gpus):
    job = json.loads(json.dumps(manifest(gpus=gpus)))
    jsonschema.validate(job, tfjob_schema)
    for spec in job["spec"]["tfReplicaSpecs"].values():
        pod_template_validator.validate(spec["template"])


def test_kubernetes_pod_schema_is_not_vacuous(pod_template_validator):
    template = manifest()["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    misspelt = {"spec": {**template["spec"], "topologySpreadConstraint": []}}
    with pytest.raises(jsonschema.ValidationError, match="topologySpreadConstraint"):
        pod_template_validator.validate(misspelt)
    spread = {**template["spec"]["topologySpreadConstraints"][0], "maxSkew": "one"}
    with pytest.raises(jsonschema.ValidationError, match="'one' is not of type 'integer'"):
        pod_template_validator.validate({"spec": {**template["spec"], "topologySpreadConstraints": [spread]}})
    with pytest.raises(jsonschema.ValidationError, match="'containers' is a required property"):
        pod_template_validator.validate({"spec": {"volumes": []}})


def test_a_gpu_job_asks_for_its_gpus_mounts_shared_memory_and_spreads_its_pods_over_nodes():
    job = manifest(gpus=4, shared_memory="8Gi")
    for spec in job["spec"]["tfReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        container = pod["containers"][0]
        assert container["resources"]["limits"] == {"nvidia.com/gpu": 4}  # GPUs go in limits
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
        assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}} in pod["volumes"]
        assert pod["topologySpreadConstraints"] == [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
            "nodeTaintsPolicy": "Honor",  # a node the pods may not use (tainted) does not count in the skew
            "labelSelector": {"matchLabels": {"training.kubeflow.org/job-name": "test-tfjob"}}}]
    cpu_pod = manifest(shared_memory=None)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "limits" not in cpu_pod["containers"][0]["resources"]
    assert [v["name"] for v in cpu_pod["volumes"]] == ["shared"]


@pytest.mark.parametrize("gpus", [-1, 1.5, "2", True])
def test_a_gpu_count_that_is_no_whole_number_is_refused(gpus):
    with pytest.raises(ValueError, match=f"gpus is the GPUs of each pod, a whole number >= 0 .*got {gpus!r}"):
        manifest(gpus=gpus)
