"""The cost model, first on its own numbers, then against what DTensor really ran."""
import itertools

import pytest

from course_utils import matmul_cost
from course_utils.costs import ring_bytes_sent
from lazy import UNSHARDED, lazy

tf = lazy("tensorflow")
dtensor = lazy("tensorflow.experimental.dtensor")
make_mesh = lazy("course_utils.make_mesh")
pack_batch = lazy("course_utils.pack_batch")
collectives_run_by = lazy("course_utils.profiling.collectives_run_by")

U = UNSHARDED
MESH = {"batch": 4, "model": 2}
X_SHAPE, W_SHAPE = [8, 6], [6, 4]
# Chapter 4's four cases: x and w specs -> y specs, and what each product moves:
# (kind, mesh axes, bytes of the tensor within one group, bytes each device sends).
CHAPTER4 = {
    "data parallel": ([["batch", U], [U, U]], ["batch", U], {
        "y": [], "dx": [], "dw": [("all-reduce", ("batch",), 96, 144)]}),
    "w split on outputs": ([["batch", U], [U, "model"]], ["batch", "model"], {
        "y": [], "dx": [("all-reduce", ("model",), 48, 48)], "dw": [("all-reduce", ("batch",), 48, 72)]}),
    "contracted axis split": ([["batch", "model"], ["model", U]], ["batch", U], {
        "y": [("all-reduce", ("model",), 32, 32)], "dx": [], "dw": [("all-reduce", ("batch",), 48, 72)]}),
    "x's features gathered": ([["batch", "model"], [U, "model"]], ["batch", "model"], {
        "y": [("all-gather", ("model",), 48, 24)], "dx": [("all-reduce", ("model",), 48, 48)],
        "dw": [("all-gather", ("model",), 48, 24), ("all-reduce", ("batch",), 48, 72), ("all-gather", ("model",), 96, 48)]}),
}


def summary(collectives):
    return [(c.kind, c.axes, c.tensor_bytes, c.bytes_sent_per_device) for c in collectives]


@pytest.mark.parametrize("case", CHAPTER4)
def test_chapter4_cases_predicted(case):
    (x_specs, w_specs), y_specs, moves = CHAPTER4[case]
    cost = matmul_cost(X_SHAPE, x_specs, W_SHAPE, w_specs, MESH)
    assert cost.output_specs == y_specs
    assert {p.formula.split(" =")[0]: summary(p.collectives) for p in [cost.forward, *cost.backward]} == moves


def test_flops_and_bytes_held_per_device():
    cost = matmul_cost(X_SHAPE, ["batch", "model"], W_SHAPE, [U, "model"], MESH)
    assert cost.flops_per_device == 2 * 2 * 6 * 2  # after the gather: (2, 6) @ (6, 2)
    assert cost.bytes_held == {"x": 2 * 3 * 4, "w": 6 * 2 * 4, "y": 2 * 2 * 4, "dx": 2 * 6 * 4, "dw": 6 * 4 * 4}
    assert [c.runs_on_cpu_as for c in cost.collectives] == ["all-reduce"]
    assert cost.collectives[0].bytes_sent_on_cpu == 48  # an all-gather run as an all-reduce costs twice


def test_ring_formulas():
    assert ring_bytes_sent("all-reduce", 4, 100) == 150
    assert ring_bytes_sent("all-gather", 4, 100) == ring_bytes_sent("reduce-scatter", 4, 100) == 75
    assert ring_bytes_sent("all-reduce", 1, 100) == 0


def test_fsdp_weight_gradient_is_a_reduce_scatter_over_batch():
    # w sharded over the batch axis (FSDP): gathered for the product, its gradient reduce-scattered
    cost = matmul_cost([8, 8], ["batch", U], [8, 4], ["batch", U], MESH, dw_specs=["batch", U])
    assert summary(cost.collectives) == [("all-gather", ("batch",), 128, 96)]
    dw = cost.backward[1]
    assert dw.output_specs == ["batch", U]
    assert summary(dw.collectives) == [("reduce-scatter", ("batch",), 128, 96)]
    assert dw.collectives[0].bytes_sent_on_cpu == 192  # DTensor on CPU: an all-reduce, then a slice


def test_table_names_every_product_and_collective():
    assert str(matmul_cost(X_SHAPE, ["batch", "model"], W_SHAPE, [U, "model"], MESH)).splitlines() == [
        "on mesh batch=4 x model=2; each device holds x 24 B, w 48 B, y 16 B, dx 48 B, dw 96 B",
        "product        output layout               FLOPs/device  collective  over   moves               bytes  sent/device  on CPU runs as (sent)",
        "-------------  --------------------------  ------------  ----------  -----  ------------------  -----  -----------  ---------------------",
        "y = x @ w      ['batch', 'model']          48            all-gather  model  x                   48     24           all-reduce (48)",
        "dx = dy @ w^T  ['batch', 'unsharded']      48            all-reduce  model  partial sums of dx  48     48           all-reduce (48)",
        "dw = x^T @ dy  ['unsharded', 'unsharded']  48            all-gather  model  x                   48     24           all-reduce (48)",
        "                                                         all-reduce  batch  partial sums of dw  48     72           all-reduce (72)",
        "                                                         all-gather  model  dw                  96     48           all-reduce (96)",
    ]


def test_mesh_given_as_pairs_or_as_a_dtensor_mesh(cpus8):
    by_dict = matmul_cost(X_SHAPE, ["batch", U], W_SHAPE, [U, U], MESH)
    assert matmul_cost(X_SHAPE, ["batch", U], W_SHAPE, [U, U], [("batch", 4), ("model", 2)]) == by_dict
    assert matmul_cost(X_SHAPE, ["batch", U], W_SHAPE, [U, U], make_mesh([("batch", 4), ("model", 2)])) == by_dict


def test_unknown_mesh_axis_is_named():
    with pytest.raises(ValueError, match="'modle' is not an axis of the mesh"):
        matmul_cost(X_SHAPE, ["batch", "modle"], W_SHAPE, [U, U], MESH)


def test_indivisible_axis_is_named():
    with pytest.raises(ValueError, match="size 6, which mesh axis 'batch' \\(size 4\\) does not divide"):
        matmul_cost([8, 6], [U, "batch"], [6, 4], ["batch", U], MESH)


def test_requested_layout_is_checked_too():
    with pytest.raises(ValueError, match="the requested dw's spec 'modle' is not an axis"):
        matmul_cost(X_SHAPE, ["batch", U], W_SHAPE, [U, U], MESH, dw_specs=[U, "modle"])


def test_shapes_that_do_not_multiply():
    with pytest.raises(ValueError, match="x's second axis to match w's first"):
        matmul_cost([8, 6], ["batch", U], [5, 4], [U, U], MESH)


def test_mesh_axis_used_twice():
    with pytest.raises(ValueError, match="uses mesh axis 'model' twice"):
        matmul_cost([8, 6], ["model", "model"], W_SHAPE, [U, U], MESH)


def test_requested_layout_that_moves_an_axis_is_not_modelled():
    with pytest.raises(NotImplementedError, match="all-to-all"):
        matmul_cost([8, 8], [U, U], [8, 4], [U, "model"], MESH, y_specs=["model", U])


def test_contracted_axis_split_two_ways_is_refused_like_dtensor(cpus8):
    with pytest.raises(ValueError, match="split over 'batch' in x but over 'model' in w; DTensor refuses"):
        matmul_cost([8, 8], [U, "batch"], [8, 4], ["model", U], MESH)
    mesh = make_mesh([("batch", 4), ("model", 2)])
    x = pack_batch(tf.ones([8, 8]), dtensor.Layout([U, "batch"], mesh))
    w = pack_batch(tf.ones([8, 4]), dtensor.Layout(["model", U], mesh))
    with pytest.raises(Exception, match="Contracting dimension for matmul"):
        tf.matmul(x, w)


# Against reality: every pair of layouts of x (8, 8) and w (8, 4) on the batch=4 x model=2 mesh that
# DTensor multiplies, forward and backward, eager as in chapter 4.
SPECS = [U, "batch", "model"]
LAYOUT_PAIRS = [(xs, ws) for xs in itertools.product(SPECS, repeat=2) for ws in itertools.product(SPECS, repeat=2)
                if len(set(xs) - {U}) == sum(s != U for s in xs) and len(set(ws) - {U}) == sum(s != U for s in ws)
                and not (U not in (xs[1], ws[0]) and xs[1] != ws[0])]


@pytest.fixture(scope="module")
def mesh2d(cpus8):
    return make_mesh([("batch", 4), ("model", 2)])


def measured(records):
    """What ran, in the model's terms: the logical collective and the bytes sent for what ran."""
    return sorted((r.kind, r.axes, r.tensor_bytes, r.bytes_sent_per_device) for r in records)


def predicted(products):
    return sorted((c.kind, c.axes, c.tensor_bytes, c.bytes_sent_on_cpu) for p in products for c in p.collectives)


@pytest.mark.parametrize("x_specs, w_specs", LAYOUT_PAIRS, ids=lambda s: ",".join(s))
def test_prediction_matches_what_dtensor_ran(mesh2d, x_specs, w_specs):
    cost = matmul_cost([8, 8], x_specs, [8, 4], w_specs, MESH)
    x = pack_batch(tf.reshape(tf.range(64.0), [8, 8]), dtensor.Layout(list(x_specs), mesh2d))
    w = pack_batch(tf.reshape(tf.range(32.0), [8, 4]), dtensor.Layout(list(w_specs), mesh2d))
    y = tf.matmul(x, w)
    assert dtensor.fetch_layout(y).sharding_specs == cost.output_specs
    assert measured(collectives_run_by(lambda: tf.matmul(x, w))) == predicted([cost.forward])

    dy = pack_batch(tf.ones([8, 4]), dtensor.fetch_layout(y))
    with tf.GradientTape(persistent=True) as tape:  # persistent: the profiler runs the backward pass twice
        tape.watch([x, w])
        y = tf.matmul(x, w)
    dx, dw = tape.gradient(y, [x, w], output_gradients=dy)
    assert [dtensor.fetch_layout(dx).sharding_specs, dtensor.fetch_layout(dw).sharding_specs] == \
        [p.output_specs for p in cost.backward]
    ran = collectives_run_by(lambda: tape.gradient(y, [x, w], output_gradients=dy))
    assert measured(ran) == predicted(cost.backward)


@pytest.mark.parametrize("x_specs, w_specs", LAYOUT_PAIRS[::4], ids=lambda s: ",".join(s))
def test_gradients_requested_in_the_weights_layouts(mesh2d, x_specs, w_specs):
    # What an optimizer step needs: dx in x's layout, dw in w's (DTensor's CPU reduce-scatter included).
    cost = matmul_cost([8, 8], x_specs, [8, 4], w_specs, MESH, dx_specs=x_specs, dw_specs=w_specs)
    x = pack_batch(tf.ones([8, 8]), dtensor.Layout(list(x_specs), mesh2d))
    w = pack_batch(tf.ones([8, 4]), dtensor.Layout(list(w_specs), mesh2d))
    dy = pack_batch(tf.ones([8, 4]), dtensor.Layout(cost.output_specs, mesh2d))
    ran = collectives_run_by(lambda: (
        dtensor.call_with_layout(tf.matmul, dtensor.Layout(list(x_specs), mesh2d), dy, w, transpose_b=True),
        dtensor.call_with_layout(tf.matmul, dtensor.Layout(list(w_specs), mesh2d), x, dy, transpose_a=True)))
    assert measured(ran) == predicted(cost.backward)


def test_fsdp_reduce_scatter_is_seen_in_the_run(mesh2d):
    cost = matmul_cost([8, 8], ["batch", U], [8, 4], ["batch", U], MESH, dw_specs=["batch", U])
    x = pack_batch(tf.ones([8, 8]), dtensor.Layout(["batch", U], mesh2d))
    dy = pack_batch(tf.ones([8, 4]), dtensor.Layout(["batch", U], mesh2d))
    ran = collectives_run_by(lambda: dtensor.call_with_layout(
        tf.matmul, dtensor.Layout(["batch", U], mesh2d), x, dy, transpose_a=True))
    assert measured(ran) == predicted(cost.backward[1:]) == [("reduce-scatter", ("batch",), 128, 192)]
