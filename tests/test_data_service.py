"""course_utils.cluster.data_service: each process's environment and the errors that say what to change. A real
tf.data service (a dispatcher and two workers as processes) that trainers read from and that stops as a whole is
chapter 12's: nbval runs it, and its cells assert what each trainer received and that no process is left."""
import json

import pytest

from course_utils.cluster import LocalCluster, data_service_env, dispatcher_target

SPEC = {"dispatcher": ["127.0.0.1:5000"], "worker": ["127.0.0.1:5001", "127.0.0.1:5002"]}


def test_each_process_learns_its_role_port_and_dispatcher():
    assert data_service_env("dispatcher", 0, SPEC) == {
        "DATA_SERVICE_ROLE": "dispatcher", "DATA_SERVICE_PORT": "5000", "DATA_SERVICE_DISPATCHER": "127.0.0.1:5000"}
    assert data_service_env("worker", 1, SPEC)["DATA_SERVICE_PORT"] == "5002"
    assert dispatcher_target(SPEC) == "grpc://127.0.0.1:5000"


@pytest.mark.parametrize("spec, words", [
    ({**SPEC, "chief": ["127.0.0.1:5003"]}, "also has the jobs ['chief']"),
    ({"dispatcher": ["a:1", "a:2"], "worker": ["a:3"]}, "exactly one dispatcher, but this cluster has 2"),
    ({"worker": ["a:3"]}, "exactly one dispatcher, but this cluster has 0"),
    ({"dispatcher": ["a:1"]}, "without workers"),
])
def test_a_cluster_that_is_no_service_is_refused(spec, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        data_service_env("dispatcher", 0, spec)
    with pytest.raises(ValueError, match="e.g. LocalCluster|Start them in a cluster of their own"):
        dispatcher_target(spec)


def test_local_cluster_refuses_it_before_anything_starts(tmp_path):
    script = tmp_path / "noop.py"
    script.write_text("pass\n")
    with pytest.raises(ValueError, match="without workers"):
        LocalCluster(script, {"dispatcher": 1}, tf_config=False, task_env=data_service_env)


def test_local_cluster_gives_the_service_its_variables_and_no_tf_config(tmp_path):
    # Chapter 12 (run by nbval) starts such a service as processes, reads from it and checks that it stops as a whole;
    # here only what each process would be given, without starting TensorFlow three times more.
    script = tmp_path / "server.py"
    script.write_text("pass\n")
    service = LocalCluster(script, {"dispatcher": 1, "worker": 2}, tf_config=False, task_env=data_service_env)
    for job, index in service.started_tasks:
        env = service.environment(job, index)
        assert "TF_CONFIG" not in env
        assert data_service_env(job, index, service.cluster_spec).items() <= env.items()
    assert "TF_CONFIG" in LocalCluster(script, {"worker": 2}).environment("worker", 0)  # what tf_config=False turns off
    assert json.dumps(service.cluster_spec)  # plain data, as TF_CONFIG would be
