import sys

import pytest

from lazy import UNSHARDED, lazy

tf = lazy("tensorflow")
dtensor = lazy("tensorflow.experimental.dtensor")
collectives_run_by = lazy("course_utils.collectives_run_by")
make_mesh = lazy("course_utils.make_mesh")
pack_batch = lazy("course_utils.pack_batch")

U = UNSHARDED


@pytest.fixture(scope="module")
def mesh2d(cpus8):
    return make_mesh([("batch", 4), ("model", 2)])


def place(mesh, shape, *specs):
    return pack_batch(tf.reshape(tf.range(float(shape[0] * shape[1])), shape), dtensor.Layout(list(specs), mesh))


def test_no_collective_for_data_parallelism(mesh2d):
    x, w = place(mesh2d, [8, 6], "batch", U), place(mesh2d, [6, 4], U, U)
    assert collectives_run_by(lambda: tf.matmul(x, w)) == []


def test_all_reduce_of_partial_sums(mesh2d):
    x, w = place(mesh2d, [8, 6], "batch", "model"), place(mesh2d, [6, 4], "model", U)
    run, = collectives_run_by(lambda: tf.matmul(x, w))
    assert (run.kind, run.kernel, run.axes, run.group_size) == ("all-reduce", "CollectiveReduceV2", ("model",), 2)
    assert (run.shape, run.dtype, run.tensor_bytes, run.bytes_sent_per_device) == ((2, 4), "float32", 32, 32)
    assert run.runs == 8  # once on each device
    assert str(run) == ("all-reduce over model (groups of 2) of 32 bytes: each device sends 32 bytes; "
                        "ran as CollectiveReduceV2, 8 runs")


def test_all_gather_runs_as_an_all_reduce_of_a_zero_filled_buffer(mesh2d):
    x, w = place(mesh2d, [8, 6], "batch", "model"), place(mesh2d, [6, 4], U, "model")
    run, = collectives_run_by(lambda: tf.matmul(x, w))
    assert (run.kind, run.kernel, run.axes, run.shape, run.tensor_bytes) == (
        "all-gather", "CollectiveReduceV2", ("model",), (2, 6), 48)
    assert "zero-filled buffer" in run.ran_as
    assert run.bytes_sent_per_device == 48  # what ran: an all-reduce of the whole (2, 6) block
    relayout, = collectives_run_by(lambda: dtensor.relayout(x, dtensor.Layout(["batch", U], mesh2d)))
    assert (relayout.kind, relayout.axes, relayout.tensor_bytes) == ("all-gather", ("model",), 48)


def test_gather_over_two_axes_at_once(mesh2d):
    x = place(mesh2d, [8, 8], "batch", "model")
    run, = collectives_run_by(lambda: dtensor.relayout(x, dtensor.Layout.replicated(mesh2d, 2)))
    assert (run.kind, run.axes, run.group_size, run.tensor_bytes) == ("all-gather", ("batch", "model"), 8, 256)


def test_same_name_in_two_programs_is_told_apart(mesh2d):
    # The gradient runs two matmuls whose all-reduces have the same name in their programs.
    x, w = place(mesh2d, [8, 6], "batch", U), place(mesh2d, [6, 4], U, "model")
    dy = place(mesh2d, [8, 4], "batch", "model")
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, w])
        y = tf.matmul(x, w)
    runs = collectives_run_by(lambda: tape.gradient(y, [x, w], output_gradients=dy))
    assert sorted((r.axes, r.shape, r.runs) for r in runs) == [(("batch",), (6, 2), 8), (("model",), (2, 6), 8)]



def test_a_trace_missing_a_collective_event_is_taken_again(mesh2d, monkeypatch):
    # Under load a collective can write its event after the profiler stopped: that trace is retaken.
    from course_utils import profiling

    x, w = place(mesh2d, [8, 6], "batch", "model"), place(mesh2d, [6, 4], "model", U)
    real_events, calls = profiling._events, []

    def first_trace_loses_an_event(spaces):
        functions, collectives = real_events(spaces)
        calls.append(1)
        if len(calls) == 1:
            name, = collectives
            collectives[name] -= 1
        return functions, collectives

    monkeypatch.setattr(profiling, "_events", first_trace_loses_an_event)
    run, = collectives_run_by(lambda: tf.matmul(x, w))
    assert (len(calls), run.runs) == (2, 8)

@pytest.mark.parametrize("stranger_in", ["the first trace", "every trace"])
def test_a_collective_of_earlier_work_is_retaken_then_left_out(mesh2d, monkeypatch, stranger_in):
    # A collective of earlier work that finishes after the trace started belongs to no program fn ran: the trace
    # is taken again, and if earlier work keeps finishing inside every retake (heavy load), it is left out.
    from course_utils import profiling

    traces_with_a_stranger = 1 if stranger_in == "the first trace" else profiling.TRACE_ATTEMPTS
    x, w = place(mesh2d, [8, 6], "batch", "model"), place(mesh2d, [6, 4], "model", U)
    real_events, calls = profiling._events, []

    def a_stranger_in_the_first_traces(spaces):
        functions, collectives = real_events(spaces)
        calls.append(1)
        if len(calls) <= traces_with_a_stranger:
            collectives["tf.StatefulPartitionedCall/eager_operation/DTensorAllGatherOp_1:CollectiveReduceV2"] += 8
        return functions, collectives

    monkeypatch.setattr(profiling, "_events", a_stranger_in_the_first_traces)
    run, = collectives_run_by(lambda: tf.matmul(x, w))
    assert (len(calls), run.kind, run.runs) == (min(traces_with_a_stranger + 1, profiling.TRACE_ATTEMPTS),
                                                "all-reduce", 8)


def test_a_trace_under_load_holds_only_the_programs_it_ran(mesh2d):
    # The flake this guards against: an all-gather of earlier work still finishing when the next trace
    # starts, with a core busy. Its collectives must not be counted in the trace of a program without DTensors.
    # (Work running in another thread DURING the trace cannot be told apart; collectives_run_by is not for that.)
    import subprocess

    x = place(mesh2d, [64, 64], "batch", "model")
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for _ in range(5):
            dtensor.relayout(x, dtensor.Layout.replicated(mesh2d, rank=2))  # an all-gather, not waited for
            assert collectives_run_by(lambda: [tf.square(tf.ones([4, 4]))]) == []
    finally:
        busy.kill()
        busy.wait()


def test_merged_all_reduces_inside_a_tf_function(mesh2d):
    x, w = place(mesh2d, [8, 6], "batch", "model"), place(mesh2d, [6, 4], U, "model")
    dy = place(mesh2d, [8, 4], "batch", "model")

    @tf.function(autograph=False)  # no Python control flow to convert, no generated file in /tmp
    def step(x, w, dy):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = tf.matmul(x, w)
        return [y, *tape.gradient(y, [x, w], output_gradients=dy)]

    kinds = [r.kind for r in collectives_run_by(lambda: step(x, w, dy))]
    assert "merged all-reduce" in kinds  # DTensor packed the all-gather of x and dx's all-reduce into one buffer


def test_fn_must_return_what_it_computes(mesh2d):
    x = place(mesh2d, [8, 6], "batch", U)
    with pytest.raises(ValueError, match="needs fn to return the DTensor"):
        collectives_run_by(lambda: None if tf.matmul(x, tf.transpose(x)) is None else None)


def test_a_program_without_dtensors_talks_to_no_device():
    x = tf.ones([4, 4])
    assert collectives_run_by(lambda: [float(tf.reduce_sum(x @ x)), tf.square(x)]) == []


def test_missing_trace_reader_is_explained(mesh2d, monkeypatch):
    from course_utils.profiling import XPLANE_MODULE

    monkeypatch.setitem(sys.modules, XPLANE_MODULE, None)  # as if this TensorFlow did not ship it
    with pytest.raises(RuntimeError, match="cannot import .*TensorFlow 2.20 and 2.21 ship it"):
        collectives_run_by(lambda: place(mesh2d, [8, 6], "batch", U))


def test_a_real_all_gather_when_dtensor_is_told_to_use_one(mesh2d, monkeypatch):
    # DTensor reads this variable when it compiles; shapes used nowhere else keep its cache apart.
    monkeypatch.setenv("LOWER_DTENSOR_GATHER_TO_COLLECTIVE_GATHER_V2", "1")
    x, w = place(mesh2d, [8, 10], "batch", "model"), place(mesh2d, [10, 4], U, "model")
    run, = collectives_run_by(lambda: tf.matmul(x, w))
    assert (run.kind, run.kernel, run.axes, run.tensor_bytes) == ("all-gather", "CollectiveGatherV2", ("model",), 80)
    assert run.bytes_sent_per_device == 40  # (n-1)/n of the gathered block: half of what the all-reduce way sends
