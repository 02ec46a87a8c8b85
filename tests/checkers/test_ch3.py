"""Chapter 3's checkers: the right answer, typical wrong answers and the hints they get."""
import json
import signal

import pytest

from course_utils.checkers import ch3, ch3_config, ch3_save, exercises
from helpers import assert_correct, assert_hint, grade, holding, sandbox_copy, stripped_exercise

MWMS, PS = ch3_config._reference_worker_config(), ch3_config._reference_ps_config()  # the right TF_CONFIGs, as dicts
FAULTS = ch3._reference_faults()
JOBS, PORT = ch3_config.slurm_jobs(ch3_config.SLURM_DEFAULTS), ch3_config.SLURM_DEFAULTS["port"]  # exercise 1's job


SLURM_STEP = {"SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "node[8-11]", "SLURM_STEP_TASKS_PER_NODE": "1(x4)",
              "SLURM_PROCID": "2", "SLURMD_NODENAME": "node10"}  # what srun sets in exercise 1's task on node10


def _q1(cluster=None, task=None):
    return json.dumps({"cluster": MWMS["cluster"] if cluster is None else cluster,
                       "task": MWMS["task"] if task is None else task})


def test_ch3_q1_the_answer_is_what_the_chapters_helper_builds_and_tensorflow_reads(monkeypatch, cpus8):
    import tensorflow as tf
    from tensorflow.python.distribute import multi_worker_util

    from course_utils.checkers import reach
    from course_utils.cluster.slurm import slurm_tf_config

    assert slurm_tf_config(JOBS, PORT, SLURM_STEP) == MWMS  # the chapter's rule
    reach.forget_calls()  # this test's call, not a notebook's
    right = json.dumps(MWMS)
    assert_correct(grade(3, "q1", right))
    monkeypatch.setenv("TF_CONFIG", right)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert (resolver.task_type, resolver.task_id) == ("worker", 1) and resolver.master() == "node10:2222"
    assert resolver.cluster_spec().as_dict() == MWMS["cluster"]
    # The question's claim: MultiWorkerMirroredStrategy counts the chief as one of its workers (4 train together).
    assert multi_worker_util.worker_count(resolver.cluster_spec(), "worker") == 4


def test_ch3_q1_the_text_order_of_tensorflows_resolver_gets_its_hint_and_no_point(monkeypatch, cpus8):
    """TensorFlow's SlurmClusterResolver sorts the node names as text: its TF_CONFIG for the same task puts the chief
    on node10 and tells the task it is worker 1 at node8. Copied, it earns nothing: the task's entry equals the right
    one but points to another node in that cluster."""
    import tensorflow as tf

    for name, value in SLURM_STEP.items():
        monkeypatch.setenv(name, value)
    resolver = tf.distribute.cluster_resolver.SlurmClusterResolver(
        jobs=JOBS, port_base=PORT, gpus_per_node=1, gpus_per_task=1, auto_set_gpu=False)
    text_order = resolver.cluster_spec().as_dict()
    assert text_order == {"chief": ["node10:2222"], "worker": ["node11:2222", "node8:2222", "node9:2222"]}
    task_type, task_id = resolver.get_task_info()
    result = grade(3, "q1", _q1(text_order, {"type": task_type, "index": task_id}))
    assert_hint(result, "text order", "SlurmClusterResolver", "in your cluster, worker 1 is node8",
                "not the task on node10's", points=0)
    # the learner who sorted the names as text and then looked node10 up gets the same cluster hint
    assert_hint(grade(3, "q1", _q1(text_order, {"type": "chief", "index": 0})), "text order", points=0)


def test_ch3_q1_typical_slips_get_aimed_hints():
    cluster = MWMS["cluster"]
    assert_hint(grade(3, "q1", MWMS), "must be a STRING", points=1)
    flat = grade(3, "q1", _q1(task={"type": "worker", "index": 2}))  # SLURM_PROCID: its rank among all four tasks
    assert_hint(flat, "counts within the 'worker' list only, from 0", points=1)
    assert_hint(grade(3, "q1", _q1(task={"type": "worker", "index": "two"})), "must be a whole number", points=1)
    assert_hint(grade(3, "q1", _q1(task={"type": "chief", "index": 1})),
                "'chief' is not the role of the task on node10", points=1)
    workers_first = {"worker": ["node8:2222", "node9:2222", "node10:2222"], "chief": ["node11:2222"]}
    assert_hint(grade(3, "q1", _q1(workers_first, {"type": "worker", "index": 2})),
                "the workers took the first ranks", "alphabetical order", "points to the task on node10 in your "
                "cluster", points=0)
    by_rank = {"chief": ["node8:2222"], "worker": ["node9:2223", "node10:2224", "node11:2225"]}  # 2222 + rank
    assert_hint(grade(3, "q1", _q1(by_rank)), "the ports", "port 2222 of its own node", points=1)
    shuffled = dict(cluster, worker=list(reversed(cluster["worker"])))
    assert_hint(grade(3, "q1", _q1(shuffled, {"type": "worker", "index": 1})), "identically ordered", points=1)
    all_workers = {"worker": cluster["chief"] + cluster["worker"]}  # the chapter's form: no chief
    result = grade(3, "q1", json.dumps({"cluster": all_workers, "task": {"type": "worker", "index": 2}}))
    assert_hint(result, "the 'chief' is missing: this job's chief is a task of its own role",
                "the 'worker' list does not hold the addresses", points=0)
    assert "node8" not in exercises(3).q1._evaluate((json.dumps({"cluster": all_workers, "task": MWMS["task"]}),),
                                                    {}, first_try=True).message  # the first try names no node
    assert_hint(grade(3, "q1", "{'cluster': }"), "Not valid JSON")
    assert_hint(grade(3, "q1", json.dumps({"cluster_spec": {}, "task": {}})), "Unknown top-level key")


def test_ch3_q1_every_right_form():
    as_text = grade(3, "q1", _q1(task={"type": "worker", "index": "1"}))  # TensorFlow reads int(task["index"])
    assert_correct(as_text)
    assert "TensorFlow reads it with int()" in as_text.message
    assert_correct(grade(3, "q1", _q1(task={"index": 1.0, "type": "worker"})))
    assert_correct(grade(3, "q1", json.dumps({"task": MWMS["task"], "cluster": dict(reversed(MWMS["cluster"].items()))})))
    assert_correct(grade(3, "q1", json.dumps(MWMS, indent=2).encode()))
    assert_correct(grade(3, "q1", json.dumps(dict(MWMS, rpc_layer="grpc"))))


def test_ch3_q1_counts_only_before_slurm_tf_config(monkeypatch):
    """The chapter's slurm_tf_config prints exercise 1's answer: a check made while the notebook holds it, or after
    the notebook called it, scores 0 and says so."""
    from course_utils.checkers import reach
    from course_utils.cluster import slurm

    namespace = {}
    monkeypatch.setattr(reach, "learner_namespace", lambda: namespace)
    assert "course_utils.cluster.slurm:slurm_tf_config" in exercises(3).q1.revealed_by
    assert_correct(exercises(3).q1.evaluate(json.dumps(MWMS)))
    namespace["slurm_tf_config"] = slurm.slurm_tf_config
    assert_hint(exercises(3).q1.evaluate(json.dumps(MWMS)), "had imported or used `slurm_tf_config`", points=0)
    namespace.clear()
    exec("slurm_tf_config(JOBS, PORT, SLURM_STEP)",  # a call from the notebook is recorded
         {"__name__": "__main__", "slurm_tf_config": slurm.slurm_tf_config, "JOBS": JOBS, "PORT": PORT,
          "SLURM_STEP": SLURM_STEP})
    assert_hint(exercises(3).q1.evaluate(json.dumps(MWMS)), "used `slurm_tf_config`", points=0)
    reach.forget_calls()
    assert_correct(exercises(3).q1.evaluate(json.dumps(MWMS)))


def test_ch3_the_exercise_notebook_imports_slurm_tf_config_after_exercise_1():
    from pathlib import Path

    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[2] / "exercises" / "03_beyond_one_process.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    ids = [c.get("id") for c in code]
    users = [i for i, c in enumerate(code) if "slurm_tf_config" in c.source]
    assert users and min(users) > ids.index("ch3-q1")


def test_ch3_q1_optional_keys_that_tensorflow_reads(monkeypatch, cpus8):
    import tensorflow as tf

    with_rpc = json.dumps(dict(MWMS, rpc_layer="grpc"))
    assert_correct(grade(3, "q1", with_rpc))
    monkeypatch.setenv("TF_CONFIG", with_rpc)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert resolver.rpc_layer == "grpc" and resolver.task_id == 1  # TensorFlow reads the key
    noted = grade(3, "q1", json.dumps(dict(MWMS, environment="cloud")))
    assert_correct(noted)
    assert "Optional key(s) ['environment']" in noted.message
    assert_hint(grade(3, "q1", json.dumps(dict(MWMS, rpc_layer="http"))), "speak 'grpc'", points=1)
    assert "exactly" not in grade(3, "q1", json.dumps(dict(MWMS, extra=1))).message


def test_ch3_q2_tf_config_parameter_server(monkeypatch, cpus8):
    import tensorflow as tf

    right = json.dumps(PS)
    assert_correct(grade(3, "q2", right))
    monkeypatch.setenv("TF_CONFIG", right)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert (resolver.task_type, resolver.task_id) == ("ps", 1)
    assert PS["cluster"]["ps"][1] == ch3_config.ps_asked(ch3_config.PS_DEFAULTS)
    no_chief = {k: v for k, v in PS["cluster"].items() if k != "chief"}
    assert_hint(grade(3, "q2", json.dumps({"cluster": no_chief, "task": PS["task"]})),
                "runs the ClusterCoordinator", points=1)
    renamed = {("parameter_server" if k == "ps" else k): v for k, v in PS["cluster"].items()}
    assert_hint(grade(3, "q2", json.dumps({"cluster": renamed, "task": {"type": "parameter_server", "index": 1}})),
                "the role is called 'ps'")
    assert_hint(grade(3, "q2", json.dumps({"cluster": PS["cluster"], "task": {"type": "ps", "index": 2}})),
                "count from 0", points=1)
    assert_hint(grade(3, "q2", json.dumps({"cluster": PS["cluster"], "task": {"type": "ps", "index": 0}})),
                "does not point to the process on localhost:20004", points=1)
    one_ps = dict(PS["cluster"], ps=PS["cluster"]["ps"][:1])
    assert_hint(grade(3, "q2", json.dumps({"cluster": one_ps, "task": PS["task"]})),
                "the 'ps' list does not hold the addresses", "your cluster has no ps 1", points=0)
    other_job = {"chief": ["localhost:30000"], "worker": ["localhost:30001"], "ps": ["localhost:30002",
                                                                                     "localhost:30003"]}
    assert_hint(grade(3, "q2", json.dumps({"cluster": other_job, "task": PS["task"]})),  # another variant's answer
                "in your cluster, ps 1 is localhost:30003", "not the process on localhost:20004's", points=0)


def test_ch3_q2_readable_forms_and_typical_mistakes(monkeypatch, cpus8):
    import tensorflow as tf

    string_index = json.dumps({"cluster": PS["cluster"], "task": {"type": "ps", "index": "1"}})
    monkeypatch.setenv("TF_CONFIG", string_index)
    assert tf.distribute.cluster_resolver.TFConfigClusterResolver().task_id == 1  # TensorFlow reads it with int()
    result = grade(3, "q2", string_index)
    assert_correct(result)
    assert "TensorFlow reads it with int()" in result.message
    loopback = {role: [a.replace("localhost", "127.0.0.1") for a in addresses] for role, addresses in PS["cluster"].items()}
    result = grade(3, "q2", json.dumps({"cluster": loopback, "task": PS["task"]}))
    assert_correct(result)
    assert "127.0.0.1 is localhost" in result.message
    flat = grade(3, "q2", json.dumps({"cluster": PS["cluster"], "task": {"type": "ps", "index": 4}}))
    assert_hint(flat, "counts within the 'ps' list only", points=1)  # 20004 is the 5th address of the cluster
    upper = {role.upper(): addresses for role, addresses in PS["cluster"].items()}
    assert_hint(grade(3, "q2", json.dumps({"cluster": upper, "task": {"type": "PS", "index": 1}})),
                "role names are lower case", "'CHIEF', 'WORKER', 'PS' are not roles", "not 'PS'")
    assert "'chief' is missing" not in grade(3, "q2", json.dumps({"cluster": upper, "task": PS["task"]})).message
    first = exercises(3).q2._evaluate((json.dumps({"cluster": PS["cluster"], "task": {"type": "ps", "index": 4}}),),
                                      {}, first_try=True).message
    assert "It is" not in first and "'index': 1" not in first


def test_ch3_q3_faults():
    assert_correct(grade(3, "q3", dict(FAULTS)))
    assert_correct(grade(3, "q3", {"stop_signal": signal.SIGKILL, "restores": "b", "peer_killed": " B) "}))
    assert_correct(grade(3, "q3", {"stop_signal": 9, "restores": "B", "peer_killed": "B"}))
    for letter in ("(B)", "B.", "Option B", "b: the weights", "B. The weights, the optimizer's state"):
        for signal_name in ("signal.SIGKILL", "kill", "SIGKILL (9)", "kill -9", " sigkill "):
            assert_correct(grade(3, "q3", {"stop_signal": signal_name, "restores": letter, "peer_killed": letter}))
    assert_hint(grade(3, "q3", dict(FAULTS, stop_signal="Ctrl-C")), "can be caught and handled", points=2)
    assert_hint(grade(3, "q3", dict(FAULTS, stop_signal="SIGSTOP")), "'SIGINT', 'SIGTERM', 'SIGKILL'", points=2)
    assert_hint(grade(3, "q3", dict(FAULTS, restores="(E)")), "one of the letters", points=2)
    assert_hint(grade(3, "q3", dict(FAULTS, stop_signal="SIGTERM")), "preemption notifier", points=2)
    assert_hint(grade(3, "q3", dict(FAULTS, stop_signal=signal.SIGTERM)), "preemption notifier", points=2)
    assert_hint(grade(3, "q3", dict(FAULTS, restores="A")), "optimizer's state", points=2)
    assert_hint(grade(3, "q3", dict(FAULTS, restores="C")), "run again from its start", points=2)
    assert_hint(grade(3, "q3", dict(FAULTS, restores="D")), "restores automatically", points=2)
    assert_hint(grade(3, "q3", dict(FAULTS, peer_killed="A")), "cannot go on alone", points=2)
    assert_hint(grade(3, "q3", dict(FAULTS, peer_killed="C")), "START-UP", points=2)
    assert_hint(grade(3, "q3", dict(FAULTS, restores="Z")), "one of the letters", points=2)
    assert_hint(grade(3, "q3", "SIGKILL"), "Give a dict")


def test_ch3_q4_statements():
    right = [truth for truth, _ in ch3._reference_statements()]
    assert len(right) == len(ch3.STATEMENTS) == len(ch3.STATEMENT_IDEAS)
    assert right == [False, True, True, False, True, False]
    assert_correct(grade(3, "q4", right))
    flipped = [not right[0]] + right[1:]
    assert_hint(grade(3, "q4", flipped), "1 statement is judged wrong", "the whole model, or a part of it",
                "Statement 1 is False: It is data parallelism", points=5)
    assert_hint(grade(3, "q4", right[:3] + [True] + right[4:]), "to find its peers", "TF_CONFIG", points=5)
    assert_hint(grade(3, "q4", right[:5] + [True]), "what a task index points into", "identically ordered", points=5)
    assert_hint(grade(3, "q4", right[:2] + [False] + right[3:]), "when a process of a ParameterServerStrategy job was "
                "killed", "reschedules", points=5)
    assert_hint(grade(3, "q4", right[:5] + [None]), "statement(s) [6]: not answered yet", points=5)
    assert_hint(grade(3, "q4", right[:5]), "6 values, not 5")


def test_ch3_q4_true_and_false_as_words():
    right = [truth for truth, _ in ch3._reference_statements()]
    assert_correct(grade(3, "q4", [str(truth) for truth in right]))  # "False", "True", ...
    assert_correct(grade(3, "q4", [f" {str(truth).lower()} " for truth in right]))
    assert_correct(grade(3, "q4", tuple(int(truth) for truth in right)))
    assert_hint(grade(3, "q4", [str(not right[0])] + right[1:]), "1 statement is judged wrong", points=5)
    assert_hint(grade(3, "q4", ["maybe"] + right[1:]), "statement(s) [1]: not answered yet", "the words 'True'",
                points=5)


def test_ch3_q4_first_try_names_ideas_not_statements():
    """Naming a wrong True/False names its right value: a first wrong check counts them and names the ideas."""
    right = [truth for truth, _ in ch3._reference_statements()]
    wrong = [not truth for truth in right]
    first = exercises(3).q4._evaluate((wrong,), {}, first_try=True).message
    assert "6 statements are judged wrong" in first and "Revisit:" in first
    assert "statement 1" not in first.lower() and "It is" not in first
    for _, why in ch3._reference_statements():
        assert why not in first
    assert "Statement 6 is False" in exercises(3).q4.evaluate(wrong).message
    graded = exercises(3, mode="graded").q4.evaluate(wrong).message
    assert "Statement" not in graded and "Revisit:" in graded


def _is_chief(tf_config):
    """multi_worker_util.is_chief, from TF_CONFIG: the 'chief' task, else worker 0 when the cluster has no chief."""
    task = tf_config["task"]
    return task["type"] == "chief" or ("chief" not in tf_config["cluster"] and task["index"] == 0)


def _deciding(rule):
    """A write_path(path, tf_config) that decides the chief as TensorFlow does, then asks rule(path, is_chief, index)."""
    return lambda path, tf_config: rule(path, _is_chief(tf_config), tf_config["task"]["index"])


def test_ch3_q5_every_worker_saves():
    def right(path, is_chief, task_id):
        return path if is_chief else path.parent / f"workertemp_{task_id}" / path.name

    assert_correct(grade(3, "q5", _deciding(right)))
    assert_correct(grade(3, "q5", _deciding(lambda path, is_chief, task_id: str(right(path, is_chief, task_id)))))

    def chief_only(path, tf_config):  # the cell as handed out
        return path if tf_config["task"]["type"] == "chief" else None

    assert_hint(grade(3, "q5", chief_only), "In the job with a 'chief' task, worker 0 gets None", "the job hangs",
                points=0)
    assert_hint(grade(3, "q5", _deciding(lambda path, is_chief, task_id: path if is_chief else None)), "the job hangs",
                points=0)
    measured = grade(3, "q5", _deciding(right)).message
    assert "Run as each job runs it" in measured and "only model_" in measured
    assert "workertemp" not in exercises(3, mode="graded").q5.evaluate(chief_only).message
    assert_hint(grade(3, "q5", lambda path, tf_config: path), "writes the chief's own file", points=1)
    assert_hint(grade(3, "q5", _deciding(lambda path, is_chief, task_id: path if is_chief else
                      path.with_name(f"model_{task_id}.keras"))), "delete the chief's file too", points=2)
    assert_hint(grade(3, "q5", _deciding(lambda path, is_chief, task_id: path if is_chief else
                      path.parent / "workertemp" / path.name)), "use the task's index", points=2)
    assert_hint(grade(3, "q5", _deciding(lambda path, is_chief, task_id: right(path, False, task_id))),
                "worker 0 is the chief and must write `path` itself", points=2)
    assert_hint(grade(3, "q5", _deciding(lambda path, is_chief, task_id: path if is_chief else
                      path.parent / "tmp" / f"model_{task_id}.keras")), "same temporary folder", points=2)
    assert_hint(grade(3, "q5", _deciding(lambda path, is_chief, task_id: path if is_chief else
                      path.parent / f"tmp_{task_id % 2}" / f"model_{task_id}.keras")), "same temporary folder",
                points=2)
    assert_hint(grade(3, "q5", _deciding(lambda path, is_chief, task_id: path if is_chief else
                      path.parent / "tmp_1" / ("" if task_id == 1 else f"w{task_id}") / path.name)),
                "one into a folder inside the other's", points=1)
    assert_hint(grade(3, "q5", _deciding(lambda path, is_chief, task_id: path if is_chief else
                      path.parent / "tmp" / f"worker_{task_id}" / path.name)), "leaves tmp behind", points=2)
    graded = exercises(3, mode="graded").q5.evaluate(_deciding(
        lambda path, is_chief, task_id: path if is_chief else path.parent / "tmp" / f"worker_{task_id}" / path.name))
    assert "workertemp" not in graded.message
    assert_hint(grade(3, "q5", "workertemp"), "must be the function")
    assert_hint(grade(3, "q5", lambda path: path), "called as")


def test_ch3_q5_the_chapters_rule_copied_meets_a_cluster_with_a_chief():
    """Chapter 3's cell c09 decides with the strategy's should_checkpoint, which a function of TF_CONFIG does not
    have: its rule written with the task index (worker 0 is the chief) gives worker 0 of a job with a 'chief' task the
    chief's path; the rule 'the chief task' alone leaves the chapter's job of workers only without a chief."""
    def temp(path, tf_config):
        return path.parent / f"workertemp_{tf_config['task']['index']}" / path.name

    by_index = grade(3, "q5", lambda path, tf_config: path if tf_config["task"]["index"] == 0 else temp(path, tf_config))
    assert_hint(by_index, "In the job with a 'chief' task, worker 0 was given the chief's path", "look at the cluster",
                points=2)
    by_type = grade(3, "q5", lambda path, tf_config: path if tf_config["task"]["type"] == "chief" else temp(path,
                                                                                                          tf_config))
    assert_hint(by_type, "In the job of workers only (the chapter's), worker 0 is the chief", points=2)
    chief_skips = grade(3, "q5", lambda path, tf_config: path if tf_config["task"]["type"] == "chief" else
                        None if _is_chief(tf_config) else temp(path, tf_config))
    assert_hint(chief_skips, "In the job of workers only, worker 0 gets None", "without a 'chief' task, worker 0 is "
                "the chief", points=0)
    by_type_name = grade(3, "q5", lambda path, tf_config: path if _is_chief(tf_config) else
                         path.parent / f"workertemp_{tf_config['task']['type']}_{tf_config['task']['index']}" / path.name)
    assert_correct(by_type_name)


def test_ch3_q5_tensorflows_own_rule_is_right(cpus8):
    import tensorflow as tf
    from tensorflow.python.distribute import multi_worker_util

    def write_path(path, tf_config):
        task = tf_config["task"]
        if multi_worker_util.is_chief(tf.train.ClusterSpec(tf_config["cluster"]), task["type"], task["index"]):
            return path
        return path.parent / f"workertemp_{task['index']}" / path.name

    assert_correct(grade(3, "q5", write_path))


def test_ch3_q5_each_call_gets_its_own_tf_config():
    """A function that changes its tf_config (pops the task) does not change the next call's."""
    def popping(path, tf_config):
        task = tf_config.pop("task")
        return path if _is_chief({"cluster": tf_config["cluster"], "task": task}) else \
            path.parent / f"workertemp_{task['index']}" / path.name

    assert_correct(grade(3, "q5", popping))


def test_ch3_q5_the_save_is_run_on_the_file_system():
    """The checker runs the job's save with the learner's paths in a temporary folder: every worker writes its file,
    then deletes the folder it wrote into, and what is left is measured."""
    from pathlib import Path
    from tempfile import TemporaryDirectory

    with TemporaryDirectory() as folder:
        path = Path(folder) / "run" / "model.keras"
        right = [str(path), *[str(path.parent / f"workertemp_{i}" / path.name) for i in range(3)]]
        assert ch3_save._save_as_the_job_does(Path(folder), path, right) == {"files": ["model.keras"], "chief": "0",
                                                                       "outside": 0}
    with TemporaryDirectory() as folder:
        path = Path(folder) / "run" / "model.keras"
        beside = [str(path), *[str(path.with_name(f"model_{i}.keras")) for i in range(3)]]  # the script keeps them
        left = ch3_save._save_as_the_job_does(Path(folder), path, beside)
        assert left["files"] == ["model.keras", "model_0.keras", "model_1.keras", "model_2.keras"]
    with TemporaryDirectory() as folder:
        path = Path(folder) / "run" / "model.keras"
        away = [str(path), "/nonexistent-course-path/a/model.keras", None, None]
        assert ch3_save._save_as_the_job_does(Path(folder), path, away)["outside"] == 1  # nothing written outside


def test_ch3_q5_a_folder_of_its_own_anywhere(tmp_path):
    def elsewhere(path, is_chief, task_id):  # e.g. a local folder per worker, outside the shared one
        return path if is_chief else tmp_path / f"worker_{task_id}" / path.name

    assert_correct(grade(3, "q5", _deciding(elsewhere)))
    assert_correct(grade(3, "q5", _deciding(lambda path, is_chief, task_id: path if is_chief else
                                            path.parent / f"{path.stem}_worker{task_id}" / path.name)))


def test_ch3_unknown_top_level_key_is_a_note_not_a_mistake():
    result = grade(3, "q1", json.dumps({**MWMS, "job": "mnist"}))
    assert_correct(result)
    assert "✗" not in result.message and "TensorFlow ignores them" in result.message


# The check in two halves (collect where the answer lives, judge in the grader): other seeds, forgeries, the sandbox.
def _right_write_path(path, tf_config):
    return path if _is_chief(tf_config) else path.parent / f"workertemp_{tf_config['task']['index']}" / path.name


def test_ch3_q5_right_with_another_seed_and_data_of_another_seed_does_not_score():
    from course_utils.checkers import exercises

    ex = exercises(3).q5
    assert_correct(ex.judge_export(ex.export(_right_write_path, seed=12345), seed=12345))
    forged = ex.judge_export(ex.export(_right_write_path, seed=0), seed=12345)
    assert forged.points < forged.max_points, str(forged)


@pytest.mark.parametrize("cls, name, answers", [("SaveEverywhere", "q5", (_right_write_path,))])
def test_ch3_stripped_copy_collects_what_the_grader_judges(cls, name, answers):
    from course_utils.checkers import exercises

    text = stripped_exercise("ch3_save", cls, 3, name).export(*answers, seed=7)
    assert_correct(getattr(exercises(3), name).judge_export(text, seed=7))


# --- the graded sandbox's copy of this module states no answer ------------------------------------

def test_ch3_the_sandbox_copy_states_no_answer():
    module, undefined = sandbox_copy("ch3")
    config_module, config_undefined = sandbox_copy("ch3_config")
    grader_module, grader_undefined = sandbox_copy("ch3_config_grader")
    assert not undefined | config_undefined | grader_undefined
    for gone in ("FAULTS", "FAULT_WHY", "FAULT_ANSWERS", "_reference_faults", "_reference_fault_why",
                 "_reference_fault_answers", "_reference_statements"):
        assert not hasattr(module, gone), gone
    for gone in ("MWMS", "MWMS_WORKERS", "PS", "PS_CLUSTER", "_reference_worker_config", "_reference_ps_config",
                 "_reference_slurm_cluster", "_reference_slurm_slip", "_reference_config_of"):
        assert not hasattr(config_module, gone), gone
    truths = [truth for truth, _ in ch3._reference_statements()]
    for answer in (MWMS, PS, MWMS["cluster"], PS["cluster"], FAULTS, truths, json.dumps(MWMS), json.dumps(PS)):
        for copy in (module, config_module, grader_module):
            assert not holding(copy, answer), (copy.__name__, answer)
    assert module.STATEMENTS == ch3.STATEMENTS and all(isinstance(text, str) for text in module.STATEMENTS)
    for cls in module.CHAPTER.exercises:  # exercises 1, 2 and 5 come from the real ch3_config and ch3_save here
        assert cls.hints and (cls.__module__ != module.__name__ or not {"grade", "judge"} & set(vars(cls))), cls
    for cls in (config_module.WorkerConfig, config_module.ParameterServerConfig):
        assert cls.hints and not {"grade", "judge", "draw", "reference_values"} & set(vars(cls)), cls
    save_module, undefined = sandbox_copy("ch3_save")
    assert not undefined and not hasattr(save_module, "_reference_chief_of")
    assert not {"grade", "judge", "_judge_chief", "_judge_folders"} & set(vars(save_module.SaveEverywhere))
