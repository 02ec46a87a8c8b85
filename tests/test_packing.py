import numpy as np
import pytest

from lazy import UNSHARDED, lazy

tf = lazy("tensorflow")
dtensor = lazy("tensorflow.experimental.dtensor")
make_mesh = lazy("course_utils.make_mesh")
pack_batch = lazy("course_utils.pack_batch")
shard_slices = lazy("course_utils.packing.shard_slices")

U = UNSHARDED


@pytest.fixture(scope="module")
def mesh2d(cpus8):
    return make_mesh([("batch", 4), ("model", 2)])


@pytest.mark.parametrize("specs", [
    ["batch", U, U], [U, "model", U], ["model", U, "batch"], [U, U, U], [U, "batch", "model"], ["batch", "model", U],
])
def test_round_trip_any_layout(mesh2d, specs):
    x = tf.reshape(tf.range(8 * 4 * 8, dtype=tf.float32), [8, 4, 8])
    packed = pack_batch(x, dtensor.Layout(specs, mesh2d))
    assert dtensor.fetch_layout(packed).sharding_specs == specs
    whole = dtensor.relayout(packed, dtensor.Layout.replicated(mesh2d, 3))
    np.testing.assert_array_equal(dtensor.unpack(whole)[0].numpy(), x.numpy())


def test_replicated_axis_gets_same_piece(mesh2d):
    x = np.arange(8, dtype=np.float32)
    pieces = dtensor.unpack(pack_batch(x, dtensor.Layout(["batch"], mesh2d)))
    # devices 0 and 1 differ only along "model", which this layout does not use
    np.testing.assert_array_equal(pieces[0].numpy(), pieces[1].numpy())
    np.testing.assert_array_equal(pieces[2].numpy(), [2, 3])


def test_one_dimensional_mesh(cpus8):
    mesh = make_mesh([("batch", 8)])
    packed = pack_batch(tf.ones([16, 3]), dtensor.Layout.batch_sharded(mesh, "batch", rank=2))
    assert [p.shape.as_list() for p in dtensor.unpack(packed)] == [[2, 3]] * 8


def test_rank_mismatch_names_both_ranks(mesh2d):
    with pytest.raises(ValueError, match=r"tensor has rank 2 .*layout has rank 3"):
        pack_batch(tf.ones([8, 4]), dtensor.Layout(["batch", U, U], mesh2d))


def test_indivisible_axis_names_axis_and_mesh_dimension(mesh2d):
    with pytest.raises(ValueError, match=r"axis 0 has size 6, which mesh dimension 'batch' \(size 4\) does not divide"):
        pack_batch(tf.ones([6, 3]), dtensor.Layout(["batch", U], mesh2d))


def test_shard_slices_in_device_order(cpus8):
    mesh = make_mesh([("x", 2)])
    assert shard_slices([4, 3], dtensor.Layout(["x", U], mesh)) == [(slice(0, 2), slice(0, 3)), (slice(2, 4), slice(0, 3))]
