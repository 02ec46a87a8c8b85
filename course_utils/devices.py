"""Virtual CPU devices and meshes that are checked against the devices that really exist."""
import tensorflow as tf
from tensorflow.experimental import dtensor

from course_utils.meshes import mesh_text
from course_utils.runtime import restart_advice

__all__ = ["configure_virtual_cpus", "make_mesh"]

RESERVED_AXIS_NAMES = {dtensor.UNSHARDED, dtensor.MATCH}


def _logical_cpu_names():
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def configure_virtual_cpus(n=8):
    """Split the physical CPU into ``n`` logical (virtual) CPUs and return their names.

    TensorFlow lets you configure devices only before its runtime starts. Calling this again
    with the same ``n`` (re-running a notebook cell) is harmless and returns the same list.

    Args:
        n: how many logical CPUs to create (a positive int).

    Returns:
        The logical device names, e.g. ``['/job:localhost/replica:0/task:0/device:CPU:0', ...]``.

    Raises:
        ValueError: ``n`` is not a positive integer.
        RuntimeError: the runtime already started with a different number of CPUs; the
            message gives both counts and says to restart the kernel.

    Example:
        >>> devices = configure_virtual_cpus(8)
        >>> len(devices)
        8
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"configure_virtual_cpus(n) needs a positive whole number of devices, got {n!r}.")
    cpu = tf.config.list_physical_devices("CPU")[0]
    # get_logical_device_configuration does not start the runtime; list_logical_devices does.
    current = tf.config.get_logical_device_configuration(cpu)
    if current is None:
        try:
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * n)
        except RuntimeError:
            pass  # the runtime started without a virtual-device configuration; counted below
    elif len(current) != n:
        _raise_already_configured(len(current), n)
    names = _logical_cpu_names()
    if len(names) != n:
        _raise_already_configured(len(names), n)
    return names


def _raise_already_configured(have, want):
    raise RuntimeError(
        f"This Python process already runs TensorFlow with {have} logical CPU(s), and you asked "
        f"for {want}. Devices can only be configured before TensorFlow's runtime starts. "
        f"{restart_advice(sentence_start=True)} and call configure_virtual_cpus({want}) before "
        f"anything else touches TensorFlow devices."
    )


def make_mesh(dims, devices=None):
    """Create a DTensor mesh after checking it against the devices that really exist.

    ``dtensor.create_mesh`` itself accepts a mesh of 8 device names when only 4 devices exist
    and fails much later; this helper fails at once and says what to change.

    Args:
        dims: a list of ``(axis_name, size)`` pairs, e.g. ``[("batch", 4), ("model", 2)]``.
        devices: the device names to lay out on the mesh, row-major; by default the first
            ``prod(sizes)`` logical CPUs.

    Returns:
        A ``tf.experimental.dtensor.Mesh``.

    Raises:
        ValueError: an axis name is repeated, empty, reserved or not identifier-like, a size is not a positive integer, the
            mesh needs more devices than exist, or a named device does not exist.

    Example:
        >>> cpus = configure_virtual_cpus(8)
        >>> mesh = make_mesh([("batch", 4), ("model", 2)])
        >>> mesh.shape()
        [4, 2]
    """
    dims = list(dims)
    names = [name for name, _ in dims]
    for name, size in dims:
        if not isinstance(name, str) or not name.isidentifier() or name in RESERVED_AXIS_NAMES:
            # DTensor serialises layouts as text: a name with "," or "|" crashes the process later.
            raise ValueError(
                f"Mesh axis names must be Python-identifier-like strings such as 'batch' or 'model' "
                f"and not {sorted(RESERVED_AXIS_NAMES)}; got {name!r}."
            )
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"Mesh axis {name!r} needs a positive whole-number size, got {size!r}.")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"Each mesh axis needs its own name; {repeated} is used more than once.")
    needed = 1
    for _, size in dims:
        needed *= size
    existing = _logical_cpu_names() + [d.name for d in tf.config.list_logical_devices("GPU")]
    if devices is None:
        cpus = [d for d in existing if "CPU" in d]
        if needed > len(cpus):
            shape = mesh_text(dims)
            raise ValueError(
                f"A mesh of {shape} needs {needed} devices, but this process has only {len(cpus)} "
                f"logical CPU(s). Use a smaller mesh, or {restart_advice()} and call "
                f"configure_virtual_cpus({needed}) first."
            )
        devices = cpus[:needed]
    devices = list(devices)
    if len(devices) != needed:
        raise ValueError(f"The mesh has {needed} places but {len(devices)} device names were given.")
    existing_keys = {_device_key(d) for d in existing}
    missing = [d for d in devices if _device_key(d) not in existing_keys]
    if missing:
        raise ValueError(f"These devices do not exist in this process: {missing}. Existing devices: {existing}.")
    return dtensor.create_mesh(dims, devices=devices)


def _device_key(name):
    spec = tf.DeviceSpec.from_string(name)
    return (spec.device_type or "").upper(), spec.device_index
