"""course_utils.cluster.data_service: each process's environment, the errors that say what to change, and a real
tf.data service (a dispatcher and a worker as processes) that a dataset reads from and that stops as a whole."""
import json
import textwrap

import psutil
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


SERVER = textwrap.dedent('''
    import os
    import tensorflow as tf

    service = tf.data.experimental.service
    role, port = os.environ["DATA_SERVICE_ROLE"], int(os.environ["DATA_SERVICE_PORT"])
    print("TF_CONFIG" in os.environ, flush=True)
    if role == "dispatcher":
        server = service.DispatchServer(service.DispatcherConfig(port=port))
    else:
        server = service.WorkerServer(service.WorkerConfig(dispatcher_address=os.environ["DATA_SERVICE_DISPATCHER"],
                                                           port=port))
    server.join()
''')


def test_a_real_service_serves_a_dataset_and_stops_as_a_whole(tmp_path):
    import tensorflow as tf

    script = tmp_path / "server.py"
    script.write_text(SERVER)
    cluster = LocalCluster(script, {"dispatcher": 1, "worker": 1}, tf_config=False, task_env=data_service_env,
                           timeout=300, log_dir=tmp_path / "logs")
    with cluster:
        cluster.wait_until_ready(timeout=240)
        dataset = tf.data.Dataset.range(10).apply(
            tf.data.experimental.service.distribute("distributed_epoch", dispatcher_target(cluster.cluster_spec)))
        assert sorted(int(x) for x in dataset) == list(range(10))
        for task in cluster.started_tasks:  # the script printed whether it had a TF_CONFIG
            assert "False" in cluster.log(*task).splitlines() and "True" not in cluster.log(*task).splitlines()
        pids = cluster.pids
    assert len(pids) == 2
    for pid in pids:  # stopped: none of them is a running child of this process any more
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE \
            or psutil.Process(pid).ppid() != psutil.Process().pid
    assert json.dumps(cluster.cluster_spec)  # plain data, as TF_CONFIG would be
