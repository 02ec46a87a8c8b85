"""Every checker gets its right answer, the typical wrong answers (with the hint they must give),
the untouched placeholder, and odd input that must not make it raise."""
import json
import math
import signal

import numpy as np
import pytest

from course_utils import checks
from course_utils.checks import exercises, is_placeholder, registry


def grade(chapter, name, *args, **kwargs):
    return getattr(exercises(chapter), name).evaluate(*args, **kwargs)


def assert_correct(result):
    assert result.status == "correct", str(result)
    assert result.points == result.max_points


def assert_hint(result, *fragments, points=0):
    assert result.points == points, str(result)
    for fragment in fragments:
        assert fragment in result.message, f"{fragment!r} not in:\n{result}"


# ------------------------------------------------------------------ the machinery

def test_registry_lists_every_chapter_with_max_points():
    table = registry()
    assert sorted(table) == [1, 2, 3, 4, 5, 6]
    for chapter, items in table.items():
        assert len(items) >= 3, chapter
        assert list(items) == [f"q{i}" for i in range(1, len(items) + 1)]
        assert all(isinstance(p, int) and p > 0 for p in items.values())
        assert {e.name: e.max_points for e in exercises(chapter)} == items


def test_exercises_unknown_chapter_says_which_exist():
    with pytest.raises(ValueError, match=r"chapters \[1, 2, 3, 4, 5, 6\], not 9"):
        exercises(9)


def test_exercises_returns_the_same_object():
    assert exercises(3) is exercises(3)


def test_is_placeholder():
    assert is_placeholder(None) and is_placeholder(...)
    assert is_placeholder({"a": None, "b": ...}) and is_placeholder([None] * 7) and is_placeholder([])
    assert not is_placeholder([True, None]) and not is_placeholder(0) and not is_placeholder("")
    assert not is_placeholder(None, none_is_answer=True) and is_placeholder(..., none_is_answer=True)


@pytest.mark.parametrize("chapter", [1, 2, 3, 4, 5, 6])
def test_every_exercise_scores_zero_when_unanswered(chapter):
    for ex in exercises(chapter):
        n = len(checks.inspect.signature(ex._grader).parameters)
        placeholder = ... if ex.none_is_answer else None
        result = ex.evaluate(*[placeholder] * n)
        assert (result.status, result.points) == ("unanswered", 0), (chapter, ex.name, str(result))
        assert "Replace the placeholder" in result.message


@pytest.mark.parametrize("chapter", [1, 2, 3, 4, 5, 6])
def test_no_checker_raises_on_odd_input(chapter, cpus8):
    odd_inputs = [42, "nonsense", object(), [1, 2], {"x": 1}, 3.5, np.zeros(3), lambda *a: 1 / 0, int]
    for ex in exercises(chapter):
        n = len(checks.inspect.signature(ex._grader).parameters)
        for odd in odd_inputs:
            result = ex.evaluate(*[odd] * n)
            assert result.points < result.max_points, (chapter, ex.name, odd, str(result))
            assert result.message, (chapter, ex.name, odd)
        result = ex.evaluate()  # no answer at all
        assert result.status == "unanswered"
        result = ex.evaluate(*[1] * (n + 1))  # one argument too many
        assert result.status == "incorrect" and ex.call in result.message


def test_check_prints_and_records_only_with_grade_file(tmp_path, monkeypatch, capsys):
    ex = exercises(3)
    monkeypatch.delenv(checks.GRADE_FILE_ENV, raising=False)
    ex.q4.check([False, True, True, False, True, False])
    assert capsys.readouterr().out.startswith("Correct! 6/6 points.")
    grade_file = tmp_path / "grades.jsonl"
    monkeypatch.setenv(checks.GRADE_FILE_ENV, str(grade_file))
    ex.q4.check([True, True, True, False, True, False])
    ex.q1.check(None)
    out = capsys.readouterr().out
    assert "Partly correct: 5/6 points." in out and "Not answered yet: 0/2 points." in out
    records = [json.loads(line) for line in grade_file.read_text().splitlines()]
    assert records == [
        {"chapter": 3, "exercise": "q4", "points": 5, "max_points": 6, "status": "partial"},
        {"chapter": 3, "exercise": "q1", "points": 0, "max_points": 2, "status": "unanswered"},
    ]


def test_check_survives_an_unwritable_grade_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(checks.GRADE_FILE_ENV, str(tmp_path / "missing-folder" / "grades.jsonl"))
    exercises(3).q4.check([False] * 6)
    assert "could not be recorded" in capsys.readouterr().out


def test_hint_solution_and_summary_print(capsys):
    ex = exercises(4)
    ex.q3.hint()
    ex.q3.solution()
    ex.summary()
    out = capsys.readouterr().out
    assert "Hint (4.q3)" in out and 'shard_shapes = {"a": (2, 12)' in out and "Total:" in out
    assert "ex.q1.check(mesh, layout)" in repr(ex)


# ------------------------------------------------------------------ chapter 1

def test_ch1_q1_device_placement(cpus8):
    import tensorflow as tf

    a, b = tf.constant(checks.CH1_A), tf.constant(checks.CH1_B)
    with tf.device(cpus8[5]):
        product = tf.matmul(a, b)
    assert_correct(grade(1, "q1", cpus8, product))
    assert_hint(grade(1, "q1", cpus8, tf.matmul(a, b)), "TensorFlow's default", "with tf.device(cpus[5])", points=1)
    with tf.device(cpus8[4]):
        off_by_one = tf.matmul(a, b)
    assert_hint(grade(1, "q1", cpus8, off_by_one), "count from 0", points=1)
    with tf.device(cpus8[5]):
        elementwise = a * b
    assert_hint(grade(1, "q1", cpus8, elementwise), "elementwise", points=1)
    assert_hint(grade(1, "q1", cpus8, product.numpy()), "NumPy array", points=1)
    assert_hint(grade(1, "q1", cpus8[:4], product), "4 CPU device(s)", points=1)


def test_ch1_q2_tracing_claim_is_what_tensorflow_does(cpus8):
    import tensorflow as tf

    traces = []

    @tf.function
    def f(x):
        traces.append(1)
        return x + 1

    args = [tf.constant(1), tf.constant(2), tf.constant([1, 2]), tf.constant([3, 4]), 3, 3, 4]
    observed = []
    for arg in args:
        before = len(traces)
        f(arg)
        observed.append(len(traces) > before)
    assert observed == checks.CH1_TRACES


def test_ch1_q2_tracing_hints():
    right = list(checks.CH1_TRACES)
    assert_correct(grade(1, "q2", right))
    assert_correct(grade(1, "q2", np.array(right)))
    assert_hint(grade(1, "q2", [True] * 7), "Not every call traces", "not on their values")
    assert_hint(grade(1, "q2", [True] + [False] * 6), "not only once")
    one_wrong = right[:4] + [False] + right[5:]
    assert_hint(grade(1, "q2", one_wrong), "call 5, f(3)", "by its *value*", points=1)
    assert_hint(grade(1, "q2", right[:6]), "7 values, not 6")
    assert_hint(grade(1, "q2", right[:6] + [None]), "True or False for every call")


def test_ch1_q3_gradient_tape(cpus8):
    import tensorflow as tf

    w, x = tf.Variable(checks.CH1_W), tf.constant(checks.CH1_X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = w * x ** 2
    grad_w, grad_x = tape.gradient(y, [w, x])
    assert_correct(grade(1, "q3", grad_w, grad_x))
    with tf.GradientTape() as tape:
        y = w * x ** 2
    unwatched = tape.gradient(y, [w, x])
    assert unwatched[1] is None
    assert_hint(grade(1, "q3", *unwatched), "tape.watch(x)", points=1)
    assert_hint(grade(1, "q3", grad_x, grad_w), "swapped")
    assert_hint(grade(1, "q3", None, None), "inside* the")
    assert_hint(grade(1, "q3", grad_w, y), "is y itself", points=1)
    assert_hint(grade(1, "q3", grad_w, ...), "grad_x: not answered yet", points=1)
    assert_hint(grade(1, "q3", grad_w, tf.ones(3)), "expected one number", points=1)


# ------------------------------------------------------------------ chapter 2

def test_ch2_q1_batch_and_learning_rate(cpus8):
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(cpus8)
    assert_correct(grade(2, "q1", strategy, 512, 0.008))
    assert_hint(grade(2, "q1", strategy, 64, 0.008), "per-replica batch", points=2)
    assert_hint(grade(2, "q1", strategy, 512, 0.001), "not scaled", points=2)
    assert_hint(grade(2, "q1", strategy, 512, 0.000125), "divided", points=2)
    assert_hint(grade(2, "q1", strategy, 512, 0.512), "not by the global batch size itself", points=2)
    assert_hint(grade(2, "q1", tf.distribute.MirroredStrategy(cpus8[:2]), 512, 0.008), "2 replica(s)", points=2)
    assert_hint(grade(2, "q1", tf.distribute.OneDeviceStrategy(cpus8[0]), 512, 0.008), "OneDeviceStrategy", points=2)
    assert_hint(grade(2, "q1", strategy, 512.0, 0.008), "an int", points=2)


def _loss_fns():
    import tensorflow as tf
    import tf_keras

    none = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=tf_keras.losses.Reduction.NONE)
    auto = tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    probs = tf_keras.losses.SparseCategoricalCrossentropy(reduction=tf_keras.losses.Reduction.NONE)
    G = checks.CH2_GLOBAL_BATCH
    return {
        "right": lambda y, z: tf.nn.compute_average_loss(none(y, z), global_batch_size=G),
        "no_global": lambda y, z: tf.nn.compute_average_loss(none(y, z)),
        "raw_ops": lambda y, z: tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, z)) / G,
        "per_replica_mean": lambda y, z: tf.reduce_mean(none(y, z)),
        "sum": lambda y, z: tf.reduce_sum(none(y, z)),
        "auto_reduction": lambda y, z: auto(y, z),
        "probabilities": lambda y, z: tf.nn.compute_average_loss(probs(y, z), global_batch_size=G),
        "vector": lambda y, z: none(y, z),
    }


def test_ch2_q2_loss_scaling_inside_strategy_run(cpus8):
    import tensorflow as tf

    f = _loss_fns()
    SUM, MEAN = tf.distribute.ReduceOp.SUM, tf.distribute.ReduceOp.MEAN
    assert_correct(grade(2, "q2", f["right"], SUM))
    assert_correct(grade(2, "q2", f["raw_ops"], "sum"))
    # Inside strategy.run compute_average_loss divides by per-replica batch x replicas: also right.
    assert_correct(grade(2, "q2", f["no_global"], SUM))
    assert_hint(grade(2, "q2", f["per_replica_mean"], SUM), "8x too large", "global_batch_size=GLOBAL_BATCH_SIZE", points=1)
    assert_hint(grade(2, "q2", f["sum"], SUM), "returns the sum", points=1)
    assert_hint(grade(2, "q2", f["auto_reduction"], SUM), "reduction=NONE", points=1)
    assert_hint(grade(2, "q2", f["probabilities"], SUM), "from_logits=True", points=1)
    assert_hint(grade(2, "q2", f["vector"], SUM), "one scalar per replica", points=1)
    assert_hint(grade(2, "q2", f["right"], MEAN), "MEAN would divide", points=2)
    assert_hint(grade(2, "q2", f["right"], None), "reduce_op: not answered yet", points=2)
    assert_hint(grade(2, "q2", lambda y, z: 1 / 0, SUM), "ZeroDivisionError", points=1)


def test_ch2_q3_strategy_choice():
    import tensorflow as tf

    right = {k: v for k, (_, v) in checks.CH2_SCENARIOS.items()}
    assert_correct(grade(2, "q3", right))
    as_classes = dict(right, a=tf.distribute.MirroredStrategy, b=tf.distribute.MultiWorkerMirroredStrategy,
                      c="tf.distribute.experimental.ParameterServerStrategy", e="centralstoragestrategy",
                      f="tf.experimental.dtensor")
    assert_correct(grade(2, "q3", as_classes))
    assert_hint(grade(2, "q3", dict(right, f="ParameterServerStrategy")), "data parallelism", points=5)
    assert_hint(grade(2, "q3", dict(right, f="CentralStorageStrategy")), "not model parallelism", points=5)
    assert_hint(grade(2, "q3", dict(right, a="MultiWorkerMirroredStrategy")), "several machines", points=5)
    assert_hint(grade(2, "q3", dict(right, b="MirroredStrategy")), "its own machine", points=5)
    assert_hint(grade(2, "q3", dict(right, c="MultiWorkerMirroredStrategy")), "synchronous", points=5)
    assert_hint(grade(2, "q3", dict(right, a="MultiDeviceStrategy")), "has no MultiDeviceStrategy", points=5)
    assert_hint(grade(2, "q3", dict(right, a="EstimatorStrategy")), "not one of the choices", points=5)
    assert_hint(grade(2, "q3", dict(right, d=None)), "d: not answered yet", points=5)
    assert_hint(grade(2, "q3", {"a": "MirroredStrategy"}), "Missing key(s)", points=1)
    assert_hint(grade(2, "q3", ["MirroredStrategy"]), "Give a dict")


def test_ch2_scenarios_are_in_the_notebook():
    from pathlib import Path

    text = (Path(__file__).parent.parent / "solutions" / "02_strategies_one_machine.ipynb").read_text()
    for scenario, _ in checks.CH2_SCENARIOS.values():
        assert json.dumps(scenario)[1:-1] in text, scenario


# ------------------------------------------------------------------ chapter 3

def test_ch3_q1_tf_config_worker_and_tensorflow_agrees(monkeypatch, cpus8):
    import tensorflow as tf

    right = json.dumps(checks.CH3_MWMS)
    assert_correct(grade(3, "q1", right))
    monkeypatch.setenv("TF_CONFIG", right)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert (resolver.task_type, resolver.task_id) == ("worker", 2)
    assert resolver.cluster_spec().as_dict() == checks.CH3_MWMS["cluster"]

    def variant(cluster=None, task=None):
        return json.dumps({"cluster": cluster or checks.CH3_MWMS["cluster"], "task": task or checks.CH3_MWMS["task"]})

    assert_hint(grade(3, "q1", checks.CH3_MWMS), "must be a STRING", points=1)
    assert_hint(grade(3, "q1", variant(task={"type": "worker", "index": 3})), "count from 0", points=1)
    assert_hint(grade(3, "q1", variant(task={"type": "worker", "index": "2"})), "not the string", points=1)
    assert_hint(grade(3, "q1", variant(task={"type": "chief", "index": 2})), "'type' is 'worker'", points=1)
    shuffled = {"worker": list(reversed(checks.CH3_MWMS_WORKERS))}
    assert_hint(grade(3, "q1", variant(cluster=shuffled)), "identically ordered", points=1)
    with_chief = {"chief": ["localhost:12344"], "worker": checks.CH3_MWMS_WORKERS}
    assert_hint(grade(3, "q1", variant(cluster=with_chief)), "no chief", points=1)
    assert_hint(grade(3, "q1", "{'cluster': }"), "Not valid JSON")
    assert_hint(grade(3, "q1", json.dumps({"cluster_spec": {}, "task": {}})), "Unknown top-level key")


def test_ch3_q2_tf_config_parameter_server(monkeypatch, cpus8):
    import tensorflow as tf

    right = json.dumps(checks.CH3_PS)
    assert_correct(grade(3, "q2", right))
    monkeypatch.setenv("TF_CONFIG", right)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    assert (resolver.task_type, resolver.task_id) == ("ps", 0)
    no_chief = {k: v for k, v in checks.CH3_PS_CLUSTER.items() if k != "chief"}
    assert_hint(grade(3, "q2", json.dumps({"cluster": no_chief, "task": checks.CH3_PS["task"]})),
                "runs the ClusterCoordinator", points=1)
    renamed = {("parameter_server" if k == "ps" else k): v for k, v in checks.CH3_PS_CLUSTER.items()}
    assert_hint(grade(3, "q2", json.dumps({"cluster": renamed, "task": {"type": "parameter_server", "index": 0}})),
                "the role is called 'ps'")
    assert_hint(grade(3, "q2", json.dumps({"cluster": checks.CH3_PS_CLUSTER, "task": {"type": "ps", "index": 1}})),
                "count from 0", points=1)


def test_ch3_q3_faults():
    assert_correct(grade(3, "q3", dict(checks.CH3_FAULTS)))
    assert_correct(grade(3, "q3", {"stop_signal": signal.SIGKILL, "restores": "b", "peer_killed": " B) "}))
    assert_correct(grade(3, "q3", {"stop_signal": 9, "restores": "B", "peer_killed": "B"}))
    assert_hint(grade(3, "q3", dict(checks.CH3_FAULTS, stop_signal="SIGTERM")), "preemption notifier", points=2)
    assert_hint(grade(3, "q3", dict(checks.CH3_FAULTS, stop_signal=signal.SIGTERM)), "preemption notifier", points=2)
    assert_hint(grade(3, "q3", dict(checks.CH3_FAULTS, restores="A")), "optimizer's state", points=2)
    assert_hint(grade(3, "q3", dict(checks.CH3_FAULTS, restores="C")), "run again from its start", points=2)
    assert_hint(grade(3, "q3", dict(checks.CH3_FAULTS, restores="D")), "restores automatically", points=2)
    assert_hint(grade(3, "q3", dict(checks.CH3_FAULTS, peer_killed="A")), "cannot go on alone", points=2)
    assert_hint(grade(3, "q3", dict(checks.CH3_FAULTS, peer_killed="C")), "START-UP", points=2)
    assert_hint(grade(3, "q3", dict(checks.CH3_FAULTS, restores="Z")), "one of the letters", points=2)
    assert_hint(grade(3, "q3", "SIGKILL"), "Give a dict")


def test_ch3_q4_statements():
    right = [truth for _, truth, _ in checks.CH3_STATEMENTS]
    assert right == [False, True, True, False, True, False]
    assert_correct(grade(3, "q4", right))
    flipped = [not right[0]] + right[1:]
    assert_hint(grade(3, "q4", flipped), "statement 1 is False", "data parallelism", points=5)
    assert_hint(grade(3, "q4", right[:3] + [True] + right[4:]), "TF_CONFIG", points=5)
    assert_hint(grade(3, "q4", right[:5] + [True]), "identically ordered", points=5)
    assert_hint(grade(3, "q4", right[:5] + [None]), "statement 6: not answered yet", points=5)
    assert_hint(grade(3, "q4", right[:5]), "6 values, not 5")


# ------------------------------------------------------------------ chapter 4

@pytest.fixture(scope="module")
def mesh42(cpus8):
    from tensorflow.experimental import dtensor

    return dtensor.create_mesh([("batch", 4), ("model", 2)], devices=cpus8)


def test_ch4_q1_mesh_and_layout(mesh42, cpus8):
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    assert_correct(grade(4, "q1", mesh42, dtensor.Layout([U, "model"], mesh42)))
    assert_hint(grade(4, "q1", mesh42, dtensor.Layout(["model", U], mesh42)), "splits the ROWS", points=1)
    assert_hint(grade(4, "q1", mesh42, dtensor.Layout([U, U], mesh42)), "fully replicated", points=1)
    assert_hint(grade(4, "q1", mesh42, dtensor.Layout([U, "batch"], mesh42)), "splits the DATA", points=1)
    assert_hint(grade(4, "q1", mesh42, dtensor.Layout(["model"], mesh42)), "a matrix has 2 axes", points=1)
    swapped = dtensor.create_mesh([("model", 2), ("batch", 4)], devices=cpus8)
    assert_hint(grade(4, "q1", swapped, dtensor.Layout([U, "model"], swapped)), "in the order asked")
    flat = dtensor.create_mesh([("batch", 8)], devices=cpus8)
    assert_hint(grade(4, "q1", flat, dtensor.Layout([U, "model"], mesh42)), "1-D", points=1)
    assert_hint(grade(4, "q1", mesh42, "['unsharded', 'model']"), "should be a dtensor.Layout", points=1)


def test_ch4_q2_pack_by_hand(mesh42):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    x = tf.reshape(tf.range(24, dtype=tf.float32), checks.CH4_X_SHAPE)
    layout = dtensor.Layout(["batch", U], mesh42)
    pieces = tf.split(x, 4)
    assert_correct(grade(4, "q2", dtensor.pack([p for p in pieces for _ in range(2)], layout)))
    from course_utils import pack_batch

    assert_correct(grade(4, "q2", pack_batch(x, layout)))
    assert_hint(grade(4, "q2", dtensor.pack(pieces + pieces, layout)), "row-major", points=1)
    assert_hint(grade(4, "q2", pack_batch(x, dtensor.Layout(["model", U], mesh42))), "splits the batch over 'model'")
    assert_hint(grade(4, "q2", pack_batch(x, dtensor.Layout([U, U], mesh42))), "replicated")
    assert_hint(grade(4, "q2", x), "ordinary tensor")
    assert_hint(grade(4, "q2", pack_batch(x + 1, layout)), "hold the wrong rows", points=1)
    flat = dtensor.create_mesh([("batch", 8)], devices=mesh42.local_devices())
    assert_hint(grade(4, "q2", dtensor.pack(tf.split(x, 8), dtensor.Layout(["batch", U], flat))), "batch=4 x model=2")


def test_ch4_q3_shard_shapes_and_copies(mesh42):
    from course_utils import pack_batch
    from tensorflow.experimental import dtensor

    shapes = {k: shape for k, (_, shape, _) in checks.CH4_SHARDS.items()}
    copies = {k: n for k, (_, _, n) in checks.CH4_SHARDS.items()}
    # The claims, measured: the shard each device holds, and how many devices hold each distinct shard.
    t = np.arange(96, dtype="float32").reshape(checks.CH4_T_SHAPE)
    for key, (specs, shape, n) in checks.CH4_SHARDS.items():
        components = [c.numpy() for c in dtensor.unpack(pack_batch(t, dtensor.Layout(specs, mesh42)))]
        assert {c.shape for c in components} == {shape}, key
        assert len({c.tobytes() for c in components}) == 8 // n, key
    assert_correct(grade(4, "q3", shapes, copies))
    assert_correct(grade(4, "q3", {k: list(v) for k, v in shapes.items()}, {k: np.int64(v) for k, v in copies.items()}))
    assert_hint(grade(4, "q3", dict(shapes, a=(8, 12)), copies), "that is the global shape", points=3)
    assert_hint(grade(4, "q3", dict(shapes, c=(2, 6)), copies), "wrong mesh axis", points=3)
    assert_hint(grade(4, "q3", shapes, dict(copies, b=2)), "axes the layout does NOT use", points=3)
    assert_hint(grade(4, "q3", dict(shapes, d=None), dict(copies, d=None)), "d: not answered yet", points=3)
    assert_hint(grade(4, "q3", dict(shapes, a="2x12"), copies), "tuple of ints", points=3)
    assert_hint(grade(4, "q3", shapes, [2, 4, 1, 8]), "copies: give a dict")


def test_ch4_q4_collectives(mesh42):
    import tensorflow as tf
    from course_utils import pack_batch
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    right = {k: truth for k, (_, truth, _) in checks.CH4_MATMULS.items()}
    assert right == {"a": False, "b": False, "c": True, "d": True}
    # Measured: in case c each device's local product is only a partial sum of its block of y.
    x = np.arange(32, dtype="float32").reshape(8, 4)
    w = np.arange(24, dtype="float32").reshape(4, 6)
    xs = pack_batch(x, dtensor.Layout(["batch", "model"], mesh42))
    ws = pack_batch(w, dtensor.Layout(["model", U], mesh42))
    local = [a.numpy() @ b.numpy() for a, b in zip(dtensor.unpack(xs), dtensor.unpack(ws))]
    assert not np.allclose(local[0], (x @ w)[:2]) and np.allclose(local[0] + local[1], (x @ w)[:2])
    y = tf.matmul(xs, ws)
    assert dtensor.fetch_layout(y).sharding_specs == ["batch", U]
    assert np.allclose(checks._global_numpy(y), x @ w)
    assert_correct(grade(4, "q4", right))
    assert_hint(grade(4, "q4", dict(right, c=False)), "CONTRACTED axis", points=3)
    assert_hint(grade(4, "q4", dict(right, b=True)), "No communication", points=3)
    assert_hint(grade(4, "q4", dict(right, a="yes")), "answer True or False", points=3)


# ------------------------------------------------------------------ chapter 5

@pytest.fixture(scope="module")
def keras2(mesh42):
    import tf_keras

    return tf_keras


def test_ch5_q1_seed(keras2, mesh42):
    from tensorflow.experimental import dtensor

    def build(seed=None):
        if seed is not None:
            keras2.utils.set_random_seed(seed)
        layer = keras2.layers.Dense(4, kernel_layout=dtensor.Layout.replicated(mesh42, 2),
                                    bias_layout=dtensor.Layout.replicated(mesh42, 1))
        layer.build((None, 6))
        return layer.kernel

    assert_correct(grade(5, "q1", build))
    keras2.utils.set_random_seed(0)  # a seed set elsewhere in the notebook must not hide the bug
    assert_hint(grade(5, "q1", lambda seed: build()), "call tf.keras.utils.set_random_seed(seed) inside")
    assert checks._keras_seed_generator().generator is not None  # the checker put the notebook's seed back
    assert_hint(grade(5, "q1", lambda seed: build(1)), "seeds 7 and 8 gave the same kernel", points=1)
    assert_hint(grade(5, "q1", lambda seed: np.zeros((6, 4))), "as a DTensor")
    assert_hint(grade(5, "q1", lambda: 1), "raised TypeError")


def test_ch5_q2_model_parallel_dense(keras2, mesh42):
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    keras2.utils.set_random_seed(1)

    def dense(kernel_specs, bias_specs, units=128, build=True):
        layer = keras2.layers.Dense(units, kernel_layout=dtensor.Layout(kernel_specs, mesh42),
                                    bias_layout=dtensor.Layout(bias_specs, mesh42))
        if build:
            layer.build((None, 784))
        return layer

    assert_correct(grade(5, "q2", dense([U, "model"], ["model"])))
    assert_hint(grade(5, "q2", dense(["model", U], [U])), "splits the 784 INPUTS", "bias is replicated")
    assert_hint(grade(5, "q2", dense([U, "model"], [U])), "bias is replicated", points=1)
    assert_hint(grade(5, "q2", dense([U, "batch"], ["batch"])), "splits the DATA")
    assert_hint(grade(5, "q2", dense([U, U], [U])), "data parallelism")
    assert_hint(grade(5, "q2", dense([U, "model"], ["model"], build=False)), "layer.build((None, 784))")
    assert_hint(grade(5, "q2", dense([U, "model"], ["model"], units=64)), "(784, 128)", points=1)
    plain = keras2.layers.Dense(128)
    plain.build((None, 784))
    assert_hint(grade(5, "q2", plain), "not a DTensor")


def test_ch5_q3_layout_map_matches_what_tf_keras_does(keras2, mesh42):
    from tensorflow.experimental import dtensor

    U = dtensor.UNSHARDED
    LayoutMap = keras2.dtensor.experimental.LayoutMap

    def layout_map(entries):
        result = LayoutMap(mesh=mesh42)
        for key, specs in entries.items():
            result[key] = dtensor.Layout(specs, mesh42)
        return result

    right = layout_map({"hidden.kernel": [U, "model"], "hidden.bias": ["model"], "logits.kernel": ["model", U]})
    assert_correct(grade(5, "q3", right))
    assert_correct(grade(5, "q3", {"hidden.*kernel": dtensor.Layout([U, "model"], mesh42),
                                   "hidden.bias": dtensor.Layout(["model"], mesh42),
                                   "logits.kernel": dtensor.Layout(["model", U], mesh42)}))
    # The checker's lookup is tf_keras' own: build the functional model and compare.
    keras2.utils.set_random_seed(2)
    with right.scope():
        inputs = keras2.Input((784,), batch_size=8)
        hidden = keras2.layers.Dense(128, activation="relu", name="hidden")(inputs)
        outputs = keras2.layers.Dense(10, name="logits")(hidden)
        model = keras2.Model(inputs, outputs)
    for path, specs in checks.CH5_PATHS.items():
        layer, attribute = path.split(".")
        variable = getattr(model.get_layer(layer), attribute)
        assert dtensor.fetch_layout(variable).sharding_specs == specs, path
    assert_hint(grade(5, "q3", layout_map({"hidden/kernel": [U, "model"], "hidden/bias": ["model"],
                                           "logits/kernel": ["model", U]})), "a DOT", points=1)
    assert_hint(grade(5, "q3", layout_map({"kernel": [U, "model"], "bias": ["model"]})), "from the START", points=1)
    assert_hint(grade(5, "q3", layout_map({"hidden": [U, "model"], "logits.kernel": ["model", U]})),
                "also matches this variable", points=3)
    assert_hint(grade(5, "q3", layout_map({".*kernel": [U, "model"], "hidden.bias": ["model"]})),
                "matches the logits layer too", points=3)
    assert_hint(grade(5, "q3", layout_map({"hidden.kernel": [U, "model"], "hidden.bias": ["model"],
                                           "logits.kernel": [U, "model"]})), "split this kernel's rows", points=3)
    assert_hint(grade(5, "q3", {"(": dtensor.Layout([U], mesh42)}), "not a valid regular expression")
    assert_hint(grade(5, "q3", [("hidden.kernel", None)]), "Give a tf.keras.dtensor.experimental.LayoutMap")


def test_ch5_q4_pack_fn(mesh42):
    from course_utils import pack_batch
    from tensorflow.experimental import dtensor

    def packer(image_specs, label_specs, mesh=mesh42):
        return lambda images, labels: (pack_batch(images, dtensor.Layout(image_specs, mesh)),
                                       pack_batch(labels, dtensor.Layout(label_specs, mesh)))

    U = dtensor.UNSHARDED
    assert_correct(grade(5, "q4", packer(["batch", U, U, U], ["batch"])))
    assert_hint(grade(5, "q4", packer(["batch", U, U, U], ["batch", U, U, U])), "rank=1")
    assert_hint(grade(5, "q4", packer(["model", U, U, U], ["batch"])), "splits WEIGHTS", points=1)
    assert_hint(grade(5, "q4", packer(["batch", U, U, U], [U])), "replicated", points=1)
    flat = dtensor.create_mesh([("batch", 8)], devices=mesh42.local_devices())
    assert_hint(grade(5, "q4", packer(["batch", U, U, U], ["batch"], flat)), "batch x model mesh")
    assert_hint(grade(5, "q4", lambda images, labels: (images, labels)), "not a DTensor")
    assert_hint(grade(5, "q4", lambda images, labels: images), "return a pair")


# ------------------------------------------------------------------ chapter 6

def xavier_limit(fan_in, fan_out):
    return math.sqrt(6.0 / (fan_in + fan_out))


def init_weight(shape, layout, seed):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    limit = xavier_limit(*shape)
    return dtensor.DVariable(dtensor.call_with_layout(tf.function(tf.random.stateless_uniform), layout, shape=shape,
                                                      seed=seed, minval=-limit, maxval=limit))


def test_ch6_q1_xavier(mesh42):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    assert_correct(grade(6, "q1", xavier_limit, init_weight))
    assert_hint(grade(6, "q1", lambda a, b: math.sqrt(2 / (a + b)), init_weight), "STANDARD DEVIATION", points=2)
    assert_hint(grade(6, "q1", lambda a, b: math.sqrt(1 / a), init_weight), "LeCun", points=2)
    assert_hint(grade(6, "q1", lambda a, b: math.sqrt(6) / (a + b), init_weight), "brackets", points=2)
    assert_hint(grade(6, "q1", lambda a, b: 6 / (a + b), init_weight), "square root", points=2)

    def eager(shape, layout, seed):
        return dtensor.DVariable(dtensor.call_with_layout(tf.random.stateless_uniform, layout, shape=shape, seed=seed))

    assert_hint(grade(6, "q1", xavier_limit, eager), "wrap the random op in tf.function", points=1)
    assert_hint(grade(6, "q1", xavier_limit, lambda s, l, seed: tf.Variable(tf.zeros(s))), "ordinary tf.Variable", points=1)
    assert_hint(grade(6, "q1", xavier_limit, lambda s, l, seed: init_weight(s, l, seed).read_value()),
                "return a variable", points=1)
    replicated = lambda s, l, seed: init_weight(s, dtensor.Layout.replicated(l.mesh, 2), seed)
    assert_hint(grade(6, "q1", xavier_limit, replicated), "ignored the layout", points=1)
    wide = lambda s, l, seed: dtensor.DVariable(dtensor.call_with_layout(
        tf.function(tf.random.stateless_uniform), l, shape=s, seed=seed, minval=-1.0, maxval=1.0))
    assert_hint(grade(6, "q1", xavier_limit, wide), "exceed the Xavier limit", points=1)
    positive = lambda s, l, seed: dtensor.DVariable(dtensor.call_with_layout(
        tf.function(tf.random.stateless_uniform), l, shape=s, seed=seed, minval=0.0, maxval=xavier_limit(*s)))
    assert_hint(grade(6, "q1", xavier_limit, positive), "minval=-limit", points=1)
    unseeded = lambda s, l, seed: init_weight(s, l, [np.random.randint(1000), 0])
    assert_hint(grade(6, "q1", xavier_limit, unseeded), "same seed gave different weights", points=1)
    assert_hint(grade(6, "q1", None, init_weight), "xavier_limit: not answered yet", points=2)


def _mlp(sizes, mesh):
    """A stand-in for the notebook's MLP: the checker only looks at the kernels' shapes."""
    import tensorflow as tf

    module = tf.Module()
    module.layers = [tf.Variable(tf.zeros([a, b])) for a, b in zip(sizes, sizes[1:])]
    module.biases = [tf.Variable(tf.zeros([b])) for b in sizes[1:]]
    return module


def test_ch6_q2_hidden_size(mesh42):
    assert_correct(grade(6, "q2", _mlp([784, 700, 500, 10], mesh42)))
    assert_hint(grade(6, "q2", _mlp([784, 700, 10, 10], mesh42)), "784 -> 700 -> 10 -> 10", "overwrites")
    assert_hint(grade(6, "q2", _mlp([784, 500, 10], mesh42)), "expected")
    import tensorflow as tf

    assert_hint(grade(6, "q2", tf.Module), "not the class")


def make_slots(variable):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    layout = dtensor.fetch_layout(variable)
    return tuple(dtensor.DVariable(dtensor.call_with_layout(tf.zeros, layout, shape=variable.shape))
                 for _ in range(2))


def test_ch6_q3_slots(mesh42):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    assert_correct(grade(6, "q3", make_slots))

    def replicated(variable):
        layout = dtensor.Layout.replicated(dtensor.fetch_layout(variable).mesh, 2)
        return tuple(dtensor.DVariable(dtensor.call_with_layout(tf.zeros, layout, shape=variable.shape))
                     for _ in range(2))

    assert_hint(grade(6, "q3", replicated), "it is replicated", points=0)
    assert_hint(grade(6, "q3", lambda v: (tf.Variable(tf.zeros(v.shape)),) * 1 + (tf.Variable(tf.zeros(v.shape)),)),
                "ordinary tf.Variable")
    assert_hint(grade(6, "q3", lambda v: (tf.zeros_like(v), tf.zeros_like(v))), "not a variable")
    same = make_slots
    assert_hint(grade(6, "q3", lambda v: (lambda s: (s[0], s[0]))(same(v))), "the same object")
    assert_hint(grade(6, "q3", lambda v: (dtensor.DVariable(tf.ones_like(v)), make_slots(v)[1])), "start at zero",
                points=1)
    assert_hint(grade(6, "q3", lambda v: make_slots(v)[0]), "return a pair")


def _adam_classes():
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    class BuggyAdam(tf.Module):
        def __init__(self, params, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
            super().__init__()
            self.params = list(params)
            self.learning_rate, self.beta_1, self.beta_2, self.epsilon = learning_rate, beta_1, beta_2, epsilon
            self.step = 0
            self.m, self.v = zip(*[make_slots(p) for p in self.params])

        @tf.function
        def apply(self, gradients):
            self.step += 1
            alpha = self.learning_rate * math.sqrt(1 - self.beta_2 ** self.step) / (1 - self.beta_1 ** self.step)
            self._update(gradients, alpha)

        def _update(self, gradients, alpha):
            for p, g, m, v in zip(self.params, gradients, self.m, self.v):
                m.assign_add((g - m) * (1 - self.beta_1))
                v.assign_add((g * g - v) * (1 - self.beta_2))
                p.assign_sub(alpha * m / (tf.sqrt(v) + self.epsilon))

    class FixedAdam(BuggyAdam):
        def __init__(self, params, **kwargs):
            super().__init__(params, **kwargs)
            mesh = dtensor.fetch_layout(self.params[0]).mesh
            self.step = dtensor.DVariable(dtensor.call_with_layout(tf.zeros, dtensor.Layout.replicated(mesh, 0),
                                                                   shape=[]))

        @tf.function
        def apply(self, gradients):
            self.step.assign_add(1.0)
            t = self.step.read_value()
            self._update(gradients, self.learning_rate * tf.sqrt(1 - self.beta_2 ** t) / (1 - self.beta_1 ** t))

    class NoMomentum(FixedAdam):
        @tf.function
        def apply(self, gradients):
            self.step.assign_add(1.0)
            for m in self.m:
                m.assign(tf.zeros_like(m))
            t = self.step.read_value()
            self._update(gradients, self.learning_rate * tf.sqrt(1 - self.beta_2 ** t) / (1 - self.beta_1 ** t))

    class Sgd(FixedAdam):
        @tf.function
        def apply(self, gradients):
            for p, g in zip(self.params, gradients):
                p.assign_sub(self.learning_rate * g)

    return BuggyAdam, FixedAdam, NoMomentum, Sgd


def test_ch6_q4_adam_matches_keras_adam(keras2, mesh42):
    import tensorflow as tf

    # The checker's reference is Keras' Adam: compare with tf_keras on a plain variable.
    w0 = np.array([[0.5, -1.0], [2.0, 0.25]], dtype="float32")
    grads = [np.array([[0.1, -0.2], [0.3, 0.05]], dtype="float32") * k for k in (1, -2, 3)]
    variable = tf.Variable(w0)
    keras_adam = keras2.optimizers.Adam(learning_rate=0.1, epsilon=1e-7)
    for g in grads:
        keras_adam.apply_gradients([(tf.constant(g), variable)])
    assert np.allclose(variable.numpy(), checks._reference_adam(w0, grads, 0.1)[-1], rtol=1e-5)

    BuggyAdam, FixedAdam, NoMomentum, Sgd = _adam_classes()
    assert_correct(grade(6, "q4", FixedAdam))
    assert_hint(grade(6, "q4", BuggyAdam), "uses t = 1 at every step", "assign_add")
    assert_hint(grade(6, "q4", NoMomentum), "steps 2 and 3 do not", points=1)
    assert_hint(grade(6, "q4", Sgd), "first step already differs")

    class NeedsSlots(FixedAdam):
        def __init__(self, params, **kwargs):
            unsolved_make_slots = None
            unsolved_make_slots(params)

    assert_hint(grade(6, "q4", NeedsSlots), "solve that first")
