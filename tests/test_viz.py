import pytest

from lazy import UNSHARDED, lazy

tf = lazy("tensorflow")
dtensor = lazy("tensorflow.experimental.dtensor")
make_mesh = lazy("course_utils.make_mesh")
pack_batch = lazy("course_utils.pack_batch")
visualize_mesh = lazy("course_utils.visualize_mesh")
visualize_sharding = lazy("course_utils.visualize_sharding")

U = UNSHARDED


@pytest.fixture(scope="module")
def mesh2d(cpus8):
    return make_mesh([("batch", 4), ("model", 2)])


def test_text_is_exact_for_a_2d_layout(mesh2d):
    picture = visualize_sharding(dtensor.Layout([U, "model"], mesh2d), shape=[4, 6])
    assert str(picture) == "\n".join([
        "tensor of shape (4, 6), sharding specs ['unsharded', 'model']",
        "on mesh batch=4 x model=2 (8 devices)",
        "shard shape (4, 3): 2 distinct block(s), each held by 4 device(s); replicated over mesh axes: batch (size 4)",
        "",
        "axis 0 (unsharded) \\ axis 1 (model) | 0:3                        | 3:6",
        "------------------------------------+----------------------------+---------------------------",
        "0:4                                 | CPU:0, CPU:2, CPU:4, CPU:6 | CPU:1, CPU:3, CPU:5, CPU:7",
    ])


def test_reads_the_layout_of_a_dtensor(mesh2d):
    picture = visualize_sharding(pack_batch(tf.zeros([8, 2]), dtensor.Layout(["batch", "model"], mesh2d)))
    assert picture.shard_shape == [2, 1] and picture.replicated_over == []
    assert picture.blocks[(3, 1)] == ("CPU:7",)
    assert "float32 tensor of shape (8, 2)" in str(picture)


def test_rank_three_is_faceted_over_the_leading_axis(mesh2d):
    picture = visualize_sharding(dtensor.Layout(["model", "batch", U], mesh2d), shape=[2, 8, 5])
    assert len(picture.facets) == 2
    assert "axis 0 (model) [0:1]" in str(picture) and "axis 0 (model) [1:2]" in str(picture)
    assert len(picture.plot().axes) == 2


def test_html_colours_blocks_by_device(mesh2d):
    html = visualize_sharding(dtensor.Layout(["batch", U], mesh2d), shape=[4, 2])._repr_html_()
    assert html.count("<td") == 4 and "background: #" in html and "CPU:0, CPU:1" in html


def test_scalar_and_vector(mesh2d):
    assert "held by 8 device(s)" in str(visualize_sharding(dtensor.Layout([], mesh2d)))
    assert "replicated over mesh axes: model (size 2)" in str(visualize_sharding(dtensor.Layout(["batch"], mesh2d), shape=[8]))


def test_plain_tensor_is_refused_with_advice():
    with pytest.raises(TypeError, match="needs a DTensor.*pack_batch"):
        visualize_sharding(tf.ones([2, 2]))


def test_shape_that_does_not_fit_the_layout(mesh2d):
    with pytest.raises(ValueError, match="rank 1 .*layout has rank 2"):
        visualize_sharding(dtensor.Layout(["batch", U], mesh2d), shape=[8])
    with pytest.raises(ValueError, match="does not divide"):
        visualize_sharding(dtensor.Layout(["batch", U], mesh2d), shape=[6, 2])


def test_mesh_picture(mesh2d):
    text = str(visualize_mesh(mesh2d))
    assert text.splitlines()[0] == "mesh batch=4 x model=2 (8 devices), device type CPU"
    assert "batch=3       | CPU:6   | CPU:7" in text
    assert len(visualize_mesh(make_mesh([("x", 2), ("y", 2), ("z", 2)])).facets) == 2
    with pytest.raises(TypeError, match="dtensor.Mesh"):
        visualize_mesh([("batch", 4)])


def test_colours_follow_the_device_across_pictures(mesh2d):
    sharded = visualize_sharding(dtensor.Layout(["batch", "model"], mesh2d), shape=[8, 6])
    rows = visualize_sharding(dtensor.Layout(["batch", U], mesh2d), shape=[8, 4])
    assert sharded.colour_of(("CPU:2",)) == rows.colour_of(("CPU:2", "CPU:3")) != sharded.colour_of(("CPU:1",))
    assert sharded.colour_of(("id 2",)) == sharded.colour_of(("CPU:2",))  # a device of another client


def jax_mesh(jax, devices=None):
    import numpy as np

    return jax.sharding.Mesh(np.array(devices or jax.devices()[:8]).reshape(4, 2), ("batch", "model"))


def test_jax_array_gives_the_picture_of_the_same_dtensor_layout(mesh2d, jax8):
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    array = jax8.device_put(np.zeros((4, 6), np.float32), NamedSharding(jax_mesh(jax8), PartitionSpec(None, "model")))
    ours, dtensors = visualize_sharding(array), visualize_sharding(dtensor.Layout([U, "model"], mesh2d), shape=[4, 6])
    assert str(ours).splitlines()[:2] == ["float32 array of shape (4, 6), PartitionSpec(None, 'model')",
                                          "on mesh batch=4 x model=2 (8 devices)"]
    assert str(ours).splitlines()[2] == str(dtensors).splitlines()[2]  # shard shape, copies, replicated axes
    assert ours.blocks == dtensors.blocks == {(0, 0): ("CPU:0", "CPU:2", "CPU:4", "CPU:6"), (0, 1): ("CPU:1", "CPU:3", "CPU:5", "CPU:7")}
    assert "axis 0 (None) \\ axis 1 (model)" in str(ours)
    assert "background: #" in ours._repr_html_() and len(ours.plot().axes) == 1


def test_jax_picture_reads_the_devices_of_the_real_shards(jax8):
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    reversed_mesh = jax_mesh(jax8, jax8.devices()[:8][::-1])  # block (0, 0) now lives on CPU:7
    array = jax8.device_put(np.arange(24.0).reshape(4, 6), NamedSharding(reversed_mesh, PartitionSpec("batch", "model")))
    picture = visualize_sharding(array)
    assert picture.shard_shape == [1, 3] and picture.replicated_over == []
    assert picture.blocks[(0, 0)] == ("CPU:7",) and picture.blocks[(3, 1)] == ("CPU:0",)


def test_jax_spec_over_two_mesh_axes_and_a_single_device_array(jax8):
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    flat = jax8.device_put(jnp.zeros(8), NamedSharding(jax_mesh(jax8), PartitionSpec(("batch", "model"))))
    picture = visualize_sharding(flat)
    assert len(picture.blocks) == 8 and picture.blocks[(5,)] == ("CPU:5",) and "axis 0 (batch+model)" in str(picture)
    single = visualize_sharding(jax8.device_put(jnp.ones((2, 3)), jax8.devices()[0]))
    assert single.blocks == {(0, 0): ("CPU:0",)} and "on 1 device(s)" in str(single)


def test_jax_array_with_another_shape_is_refused(jax8):
    import jax.numpy as jnp

    with pytest.raises(ValueError, match="differs from the array's shape"):
        visualize_sharding(jnp.ones((2, 3)), shape=[3, 2])
