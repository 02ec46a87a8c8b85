"""The bytes each device of a mesh really holds, read from the per-device pieces of the arrays."""
from collections.abc import Mapping

from course_utils.meshes import mesh_text

__all__ = ["bytes_per_device"]


def _short_name(device_type, index):
    return f"{device_type.upper()}:{index}"


def _mesh_name(kind, dims, devices):
    return f"{kind} mesh {mesh_text(dims)} over {', '.join(devices)}"


def _dtensor_pieces(value):
    """(mesh name, mesh device names, [(device, bytes)]) of a DTensor or DVariable."""
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    if isinstance(value, tf.Variable):
        value = value.read_value()  # a DVariable's pieces are read like any DTensor's
    if not dtensor.is_dtensor(value):
        raise TypeError(
            f"bytes_per_device needs DTensors, but got a plain tf.Tensor of shape {value.shape.as_list()} "
            f"on {value.device or 'the host'}. Put it on a mesh first, e.g. "
            f"pack_batch(x, dtensor.Layout(specs, mesh)) or dtensor.copy_to_mesh(x, layout)."
        )
    mesh = dtensor.fetch_layout(value).mesh
    names = [_short_name(spec.device_type, spec.device_index)
             for spec in map(tf.DeviceSpec.from_string, mesh.local_devices())]
    pieces = []
    for piece in dtensor.unpack(value):
        spec = tf.DeviceSpec.from_string(piece.device)
        pieces.append((_short_name(spec.device_type, spec.device_index), piece.shape.num_elements() * piece.dtype.size))
    return _mesh_name("DTensor", zip(mesh.dim_names, mesh.shape()), names), names, pieces


def _jax_pieces(array):
    """(mesh name, mesh device names, [(device, bytes)]) of a JAX array with a NamedSharding."""
    mesh = getattr(array.sharding, "mesh", None)
    if mesh is None or not hasattr(mesh, "axis_names"):
        raise TypeError(
            f"bytes_per_device needs a JAX array placed on a mesh (a NamedSharding), but this one has "
            f"{type(array.sharding).__name__}. Place it with jax.device_put(x, NamedSharding(mesh, P(...)))."
        )
    names = [_short_name(device.platform, device.id) for device in mesh.devices.flat]
    pieces = [(_short_name(shard.device.platform, shard.device.id), shard.data.nbytes)
              for shard in array.addressable_shards]
    return _mesh_name("JAX", mesh.shape.items(), names), names, pieces


def _arrays(obj):
    """The arrays inside obj: DTensors, DVariables and JAX arrays, in nests and in objects with variables."""
    import tensorflow as tf

    if isinstance(obj, (tf.Tensor, tf.Variable)) or hasattr(obj, "addressable_shards"):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _arrays(item)
    elif isinstance(obj, Mapping):
        for item in obj.values():
            yield from _arrays(item)
    elif hasattr(getattr(obj, "value", None), "addressable_shards"):  # a Keras 3 variable on JAX
        yield obj.value
    elif hasattr(obj, "variables"):  # a Keras model, layer or optimizer, a tf.Module
        variables = obj.variables
        yield from _arrays(variables if isinstance(variables, (list, tuple)) else variables())
    else:
        raise TypeError(
            f"bytes_per_device reads DTensors, DVariables, JAX arrays, lists or dicts of them, and "
            f"objects with .variables (a tf_keras model or DTensor optimizer, a tf.Module); got "
            f"{type(obj).__name__}."
        )


def bytes_per_device(obj):
    """The bytes each device of the mesh really holds for ``obj``, read from its per-device pieces.

    A replicated tensor counts fully on every device that holds a copy. On these virtual CPUs all
    devices share one memory, so these are the bytes each device would need on real hardware.

    Args:
        obj: a DTensor or ``DVariable``; a list, tuple or dict of them; a tf_keras model (its
            weights) or DTensor optimizer (its slots and iteration counter), or any object with
            ``.variables``; or a ``jax.Array`` with a ``NamedSharding`` (or a Keras 3 model on JAX).

    Returns:
        A dict from each device of the mesh (``"CPU:0"``, ..., in mesh order) to its bytes.

    Raises:
        TypeError: a plain (not DTensor) tensor, a JAX array that is not on a mesh, or an object
            of another kind; the message says what to pass instead.
        ValueError: ``obj`` holds arrays on two different meshes (both are named), or no array.

    Example:
        >>> import tensorflow as tf
        >>> from tensorflow.experimental import dtensor
        >>> from course_utils import make_mesh, pack_batch
        >>> mesh = make_mesh([("batch", 4), ("model", 2)])
        >>> w = dtensor.DVariable(pack_batch(tf.zeros([8, 6]), dtensor.Layout(["batch", "unsharded"], mesh)))
        >>> bytes_per_device(w)["CPU:0"]  # 2 rows of 6 float32 numbers
        48
    """
    totals, first_mesh = None, None
    for array in _arrays(obj):
        mesh, names, pieces = _jax_pieces(array) if hasattr(array, "addressable_shards") else _dtensor_pieces(array)
        if totals is None:
            totals, first_mesh = dict.fromkeys(names, 0), mesh
        elif mesh != first_mesh:
            raise ValueError(
                f"bytes_per_device adds up the arrays of one mesh, but got arrays on the {first_mesh} "
                f"and on the {mesh}. Measure each mesh's arrays separately."
            )
        for device, size in pieces:
            totals[device] += size
    if totals is None:
        raise ValueError(f"bytes_per_device found no array in {type(obj).__name__}; pass tensors, variables or a model.")
    return totals
