"""Measured costs: the collectives a DTensor run really executed, and the bytes each one moved.

``collectives_run_by(fn)`` runs ``fn`` under TensorFlow's profiler. The trace says which collective
kernels ran (one event per device and run, named ``<operation>:<kernel>``, with the stats
``group_key``, ``group_size``, ``instance_key`` and ``step_id``), but it carries no tensor shapes
or bytes. Those come from the per-device programs DTensor compiled for the run: the trace names
each (``EagerLocalExecute: <function name>``), and the runtime still holds it, with the shape of
every operation's output (``_output_shapes``) and the table that maps each device to its group.
"""
import dataclasses
import importlib
import math
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import tensorflow as tf
from tensorflow.experimental import dtensor
from tensorflow.python.eager import context

from course_utils.checkers.reach import reveals
from course_utils.costs import ring_bytes_sent

__all__ = ["CollectiveRun", "collectives_run_by"]

# Where TensorFlow's wheels ship the trace format (checked in the 2.20 and 2.21 wheels).
XPLANE_MODULE = "tensorflow.tsl.profiler.protobuf.xplane_pb2"
COLLECTIVE_KINDS = {
    "CollectiveReduceV2": "all-reduce",
    "CollectiveGatherV2": "all-gather",
    "CollectiveReduceScatterV2": "reduce-scatter",
    "CollectiveAllToAllV2": "all-to-all",
}
# A collective is an asynchronous kernel: it writes its trace event just after its result is ready,
# so the trace waits a moment before it stops, and is taken again if an event still went missing.
# For the same reason, a collective of earlier work can land in the trace: only the collectives of the
# programs that ran inside it are counted.
TRACE_GRACE_SECONDS = 0.2
TRACE_ATTEMPTS = 3


@dataclasses.dataclass(frozen=True)
class CollectiveRun:
    """One collective operation that ran, read from the trace and from the program that ran.

    Attributes:
        kind: the collective it carries out: ``all-reduce``, ``all-gather``, ``reduce-scatter``,
            ``all-to-all``, or ``merged all-reduce`` (DTensor packed several into one buffer).
        axes: the mesh axes its groups span, e.g. ``("model",)``.
        group_size: how many devices take part in each group.
        tensor_bytes: the full size of the tensor reduced or gathered within one group
            (``B`` of the ring formulas).
        bytes_sent_per_device: what each device sends for what really ran, by the ring formula.
        kernel: the TensorFlow kernel, e.g. ``CollectiveReduceV2``.
        ran_as: what ran, in words (an all-gather may run as an all-reduce of a zero-filled buffer).
        shape, dtype: the per-device buffer the kernel handled.
        op: the operation's name in DTensor's per-device program.
        runs: how many times a device ran it, all devices together (its events in the trace).
    """
    kind: str
    axes: tuple
    group_size: int
    tensor_bytes: int
    bytes_sent_per_device: float
    kernel: str
    ran_as: str
    shape: tuple
    dtype: str
    op: str
    runs: int

    def __str__(self):
        return (f"{self.kind} over {', '.join(self.axes)} (groups of {self.group_size}) of "
                f"{self.tensor_bytes} bytes: each device sends {self.bytes_sent_per_device:g} bytes; "
                f"ran as {self.ran_as}, {self.runs} runs")


def _xplane_pb2():
    try:
        return importlib.import_module(XPLANE_MODULE)
    except Exception as error:  # missing module, or a protobuf runtime too old for its code
        raise RuntimeError(
            f"collectives_run_by reads TensorFlow's profiler trace with {XPLANE_MODULE}, which "
            f"this TensorFlow {tf.__version__} cannot import ({type(error).__name__}: {error}). "
            f"TensorFlow 2.20 and 2.21 ship it; install one of those (the course pins 2.21), or "
            f"open the trace in TensorBoard's profile plugin instead."
        ) from error


def _wait_for(result):
    """Wait until every device has computed what ``result`` (any nest) holds.

    DTensors are waited for block by block; plain tensors are read; other values (NumPy arrays,
    numbers, e.g. a Keras ``train_on_batch`` loss) were already computed when ``fn`` returned.
    """
    leaves = [value for value in tf.nest.flatten(result) if value is not None]
    if not leaves:
        raise ValueError(
            f"collectives_run_by(fn) needs fn to return the DTensor(s) it computes, so that it can "
            f"wait for every device to finish; fn returned {result!r}. End fn with "
            f"`return` of its results, e.g. `lambda: tf.matmul(x, w)`."
        )
    for value in leaves:
        if isinstance(value, (tf.Tensor, tf.Variable)):
            tensor = tf.convert_to_tensor(value)
            for block in dtensor.unpack(tensor) if dtensor.is_dtensor(tensor) else [tensor]:
                block.numpy()


def _trace(fn, xplane_pb2):
    # DTensor runs each device's work asynchronously, in order. A first call compiles the programs
    # and, once its results are ready, leaves no earlier work running to leak into the trace.
    _wait_for(fn())
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        try:
            _wait_for(fn())
            time.sleep(TRACE_GRACE_SECONDS)
        finally:
            tf.profiler.experimental.stop()
        return [xplane_pb2.XSpace.FromString(path.read_bytes()) for path in Path(logdir).rglob("*.xplane.pb")]


class _FunctionsKeptAlive:
    """Keep every function traced while this context is open alive until it closes.

    A ``tf.function`` made inside ``fn`` (a layer built anew on each call) is deleted, and its program removed from
    the runtime, as soon as ``fn`` returns; its collectives could then not be read. Each function traced in the
    context is held here (``AtomicFunction.__init__`` notes it) until the trace has been read.
    """

    def __enter__(self):
        from tensorflow.python.eager.polymorphic_function import atomic_function

        self._class, self.kept = atomic_function.AtomicFunction, []
        self._original = self._class.__init__
        kept, original = self.kept, self._original

        def noting(function, *args, **kwargs):
            original(function, *args, **kwargs)
            kept.append(function)

        self._class.__init__ = noting
        return self

    def __exit__(self, *exc):
        self._class.__init__ = self._original


def _events(spaces):
    """(per-device runs of each function, per-device runs of each collective kernel), from the trace."""
    functions, collectives = Counter(), Counter()
    for space in spaces:
        for plane in space.planes:
            for line in plane.lines:
                for event in line.events:
                    name = plane.event_metadata[event.metadata_id].name
                    if name.startswith("EagerLocalExecute: "):
                        functions[name.removeprefix("EagerLocalExecute: ")] += 1
                    elif name.rsplit(":", 1)[-1] in COLLECTIVE_KINDS:
                        collectives[name] += 1
    return functions, collectives


def _program_nodes(function_name, prefix="", mesh=None):
    """{trace name: (node, its function's nodes, mesh)} for every collective in a function and the ones it calls."""
    found = {}
    nodes = {node.name: node for node in context.context().get_function_def(function_name).node_def}
    for node in nodes.values():
        node_mesh = node.attr["_mesh"].s.decode() if "_mesh" in node.attr else mesh
        if node.op in COLLECTIVE_KINDS:
            found[f"{prefix}{node.name}:{node.op}"] = (node, nodes, node_mesh)
        for value in node.attr.values():
            for called in [value.func.name] + [f.name for f in value.list.func]:
                if called:
                    found.update(_program_nodes(called, f"{prefix}{node.name}/", node_mesh))
    return found


def _producer(nodes, ref):
    return nodes.get(ref.lstrip("^").split(":")[0])


def _shape_of(nodes, ref):
    producer = _producer(nodes, ref)
    index = int(ref.rsplit(":", 1)[-1]) if ref.count(":") == 2 else 0
    return tuple(d.size for d in producer.attr["_output_shapes"].list.shape[index].dim)


def _group_table(nodes, ref, size):
    """The constant that maps each device id to its group key, found upstream of the group-key input."""
    pending, seen = [ref], set()
    while pending:
        node = _producer(nodes, pending.pop())
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        if node.op == "Const":
            table = tf.make_ndarray(node.attr["value"].tensor)
            if table.shape == (size,):
                return table.tolist()
        pending.extend(node.input)
    raise RuntimeError(f"Could not find which devices form the groups of {ref!r} in DTensor's program.")


def _builds_zero_filled_buffer(nodes, node):
    """How DTensor runs an all-gather by default: each device writes its block into zeros, then all sum."""
    source = _producer(nodes, node.input[0])
    return source is not None and source.op == "TensorStridedSliceUpdate"


def _only_sliced(nodes, node):
    """How DTensor runs a reduce-scatter on CPU: an all-reduce whose result each device only slices."""
    users = [user for user in nodes.values() if any(ref.split(":")[0] == node.name for ref in user.input)]
    return bool(users) and all(user.op == "Slice" for user in users)


def _merges_reductions(nodes, node):
    """Whether DTensor packed several reductions into this one (inside a tf.function it may)."""
    pending, seen = [node.input[0]], set()
    while pending:
        source = _producer(nodes, pending.pop())
        if source is None or source.name in seen or source.op.startswith("Collective"):
            continue
        seen.add(source.name)
        if "CombinedReduce" in source.name:
            return True
        if source.op in ("TensorStridedSliceUpdate", "Reshape"):
            pending.extend(source.input[:1] + source.input[-1:])
    return False


def _describe(node, nodes, mesh_string, count):
    mesh = dtensor.Mesh.from_string(mesh_string)
    locations = mesh.unravel_index()
    table = _group_table(nodes, node.input[2], len(locations))
    groups = defaultdict(list)
    for device, key in enumerate(table):
        groups[key].append(device)
    axes = tuple(axis for axis in mesh.dim_names
                 if any(len({locations[d][axis] for d in members}) > 1 for members in groups.values()))
    group_size = len(next(iter(groups.values())))
    dtype = tf.dtypes.as_dtype(node.attr["T"].type)
    kernel = node.op
    in_shape, out_shape = _shape_of(nodes, node.input[0]), _shape_of(nodes, f"{node.name}:data:0")
    kind, ran_as = COLLECTIVE_KINDS[kernel], kernel
    if kernel == "CollectiveReduceV2" and _merges_reductions(nodes, node):
        kind, ran_as = "merged all-reduce", f"{kernel} of several reductions packed into one buffer"
    elif kernel == "CollectiveReduceV2" and _builds_zero_filled_buffer(nodes, node):
        kind, ran_as = "all-gather", f"{kernel} (sum) of a zero-filled buffer holding each device's block"
    elif kernel == "CollectiveReduceV2" and _only_sliced(nodes, node):
        kind, ran_as = "reduce-scatter", f"{kernel} (all-reduce), then each device keeps its slice"
    full_shape = out_shape if kernel == "CollectiveGatherV2" else in_shape
    tensor_bytes = dtype.size * math.prod(full_shape)
    return CollectiveRun(
        kind=kind, axes=axes, group_size=group_size, tensor_bytes=tensor_bytes,
        bytes_sent_per_device=ring_bytes_sent(COLLECTIVE_KINDS[kernel], group_size, tensor_bytes),
        kernel=kernel, ran_as=ran_as, shape=in_shape, dtype=dtype.name, op=node.name, runs=count,
    )


def _owners(function_runs):
    """{collective's trace name: [(function, what _program_nodes found)]} over the functions that ran.

    The same name can stand in several programs (e.g. the two matmuls of a gradient).
    """
    owners = defaultdict(list)
    for function in sorted(function_runs):
        if context.context().has_function(function):  # plain eager kernels run outside functions
            for name, found in _program_nodes(function).items():
                owners[name].append((function, found))
    return owners


@reveals  # it lists what exercise 4.4 asks to predict
def collectives_run_by(fn):
    """Run ``fn()`` under TensorFlow's profiler and list the collectives its DTensor programs ran.

    Args:
        fn: a function of no arguments that runs DTensor operations (eagerly or through a
            ``tf.function``) and returns its results; the DTensors among them are waited for
            before the trace stops. A function without DTensors (e.g. a Keras 3 ``train_on_batch``)
            may return anything it computed.

    Returns:
        A list of ``CollectiveRun``, one per collective operation of the programs that ran, in
        the order of their names in the trace. An empty list means no device talked to another.

    Raises:
        ValueError: ``fn`` returned nothing (``None``), so there is nothing to wait for.
        RuntimeError: this TensorFlow cannot read its profiler's trace (the message says what
            to install), or a collective that stands in several programs that ran cannot be
            told apart.

    Example:
        >>> from course_utils import make_mesh, pack_batch
        >>> mesh = make_mesh([("batch", 4), ("model", 2)])
        >>> x = pack_batch(tf.ones([8, 6]), dtensor.Layout(["batch", "model"], mesh))
        >>> w = pack_batch(tf.ones([6, 4]), dtensor.Layout(["model", dtensor.UNSHARDED], mesh))
        >>> [(run.kind, run.axes, run.tensor_bytes) for run in collectives_run_by(lambda: tf.matmul(x, w))]
        [('all-reduce', ('model',), 32)]
    """
    xplane_pb2 = _xplane_pb2()
    for _ in range(TRACE_ATTEMPTS):
        with _FunctionsKeptAlive():  # until the programs are read, also those of functions fn made and dropped
            function_runs, kernel_runs = _events(_trace(fn, xplane_pb2))
            owners = _owners(function_runs)
        complete = all(kernel_runs[name] >= sum(function_runs[function] for function, _ in found)
                       for name, found in owners.items())
        if complete and set(kernel_runs) <= set(owners):
            break  # else take the trace again (keep the last): an event went missing, or a collective of
            # earlier work, still running when the trace started, finished inside it

    runs = []
    # A collective that none of the programs that ran contains, in every trace taken, is earlier work (of
    # another call, another test) still finishing: it is not fn's, and is left out.
    for name, count in sorted((name, count) for name, count in kernel_runs.items() if name in owners):
        if len(owners[name]) == 1:
            (function, found), = owners[name]
            runs.append(_describe(*found, count))
            continue
        if count != sum(function_runs[function] for function, _ in owners[name]):
            raise RuntimeError(f"{name!r} stands in several programs and ran {count} times: cannot tell which ran.")
        runs.extend(_describe(*found, function_runs[function]) for function, found in owners[name])
    return runs
