"""Predicted costs of a sharded matrix product and its backward pass, following DTensor's own rules.

``matmul_cost`` says, before anything runs, what ``y = x @ w`` costs on a mesh: the layout of ``y``,
each collective with the mesh axes it runs over and the bytes each device sends, the FLOPs each
device computes and the bytes it holds. It follows the choices DTensor makes (which operand it
gathers when layouts conflict), and says how DTensor runs each collective on CPU. The tests
check every prediction against what DTensor really ran (``course_utils.profiling``).
Pure Python: no TensorFlow needed.
"""
import dataclasses
import math

from course_utils.checkers.reach import reveals
from course_utils.meshes import UNSHARDED, mesh_text

__all__ = ["Collective", "Product", "MatmulCost", "matmul_cost", "ring_bytes_sent"]

# DTensor runs an all-gather as an all-reduce of a zero-filled buffer (unless the environment sets
# LOWER_DTENSOR_GATHER_TO_COLLECTIVE_GATHER_V2), and on CPU (and GPU without NCCL) a reduce-scatter
# as an all-reduce followed by a local slice.
RUNS_ON_CPU_AS = {"all-reduce": "all-reduce", "all-gather": "all-reduce", "reduce-scatter": "all-reduce"}


def ring_bytes_sent(kind, group_size, tensor_bytes):
    """Bytes each device sends when a ring of ``group_size`` devices runs a collective.

    ``tensor_bytes`` is the full size ``B`` of the tensor reduced or gathered within one group.
    A ring all-reduce sends ``2 (n-1)/n B`` per device; an all-gather, a reduce-scatter and an
    all-to-all (with ``B`` the bytes each device holds) send ``(n-1)/n B``.

    Example:
        >>> ring_bytes_sent("all-reduce", 4, 96)
        144.0
    """
    share = (group_size - 1) / group_size * tensor_bytes
    return 2 * share if kind == "all-reduce" else share


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective: what kind, over which mesh axes, moving which tensor of ``tensor_bytes`` bytes."""
    kind: str
    axes: tuple
    tensor: str
    tensor_bytes: int
    group_size: int

    @property
    def bytes_sent_per_device(self):
        """Bytes each device sends, by the ring formula for this kind of collective."""
        return ring_bytes_sent(self.kind, self.group_size, self.tensor_bytes)

    @property
    def runs_on_cpu_as(self):
        """The collective DTensor really runs for it on CPU."""
        return RUNS_ON_CPU_AS[self.kind]

    @property
    def bytes_sent_on_cpu(self):
        """Bytes each device sends for what DTensor runs on CPU (an all-gather costs an all-reduce)."""
        return ring_bytes_sent(self.runs_on_cpu_as, self.group_size, self.tensor_bytes)


@dataclasses.dataclass(frozen=True)
class Product:
    """One matrix product as DTensor runs it: its output layout, collectives and FLOPs per device."""
    formula: str
    output_specs: list
    collectives: list
    flops_per_device: int


@dataclasses.dataclass(frozen=True)
class MatmulCost:
    """The costs of ``y = x @ w`` (``forward``) and of its gradients ``dx``, ``dw`` (``backward``)."""
    mesh_dims: dict
    forward: Product
    backward: list
    bytes_held: dict

    @property
    def output_specs(self):
        return self.forward.output_specs

    @property
    def collectives(self):
        return self.forward.collectives

    @property
    def flops_per_device(self):
        return self.forward.flops_per_device

    def __str__(self):
        mesh = mesh_text(self.mesh_dims.items())
        held = ", ".join(f"{name} {size} B" for name, size in self.bytes_held.items())
        rows = [("product", "output layout", "FLOPs/device", "collective", "over", "moves",
                 "bytes", "sent/device", "on CPU runs as (sent)")]
        for product in [self.forward, *self.backward]:
            start = (product.formula, str(product.output_specs), str(product.flops_per_device))
            for c in product.collectives:
                rows.append(start + (c.kind, ",".join(c.axes), c.tensor, str(c.tensor_bytes),
                                     f"{c.bytes_sent_per_device:g}", f"{c.runs_on_cpu_as} ({c.bytes_sent_on_cpu:g})"))
                start = ("", "", "")
            if not product.collectives:
                rows.append(start + ("none",) + ("",) * 5)
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
        lines.insert(1, "  ".join("-" * width for width in widths))
        return "\n".join([f"on mesh {mesh}; each device holds {held}", *lines])


@dataclasses.dataclass
class _Operand:
    name: str
    shape: tuple
    specs: list

    def transposed(self):
        return _Operand(self.name + "^T", self.shape[::-1], self.specs[::-1])


def _sharded(spec):
    return spec != UNSHARDED


def _local_bytes(shape, specs, sizes, dtype_bytes):
    return dtype_bytes * math.prod(size // sizes.get(spec, 1) for size, spec in zip(shape, specs))


def _relayout(operand, target, sizes, dtype_bytes):
    """The collectives DTensor runs to move ``operand`` to the ``target`` specs: slice what it can, then gather."""
    specs = [t if not _sharded(s) and _sharded(t) and t not in operand.specs else s
             for s, t in zip(operand.specs, target)]  # free: each device keeps its slice
    for axis in set(operand.specs) & set(target):
        if _sharded(axis) and operand.specs.index(axis) != target.index(axis):
            raise NotImplementedError(
                f"Moving mesh axis {axis!r} from one axis of {operand.name.removesuffix('^T')} to another needs an "
                f"all-to-all, which this model does not cover; choose layouts that keep it in place."
            )
    gathered = [s for s, t in zip(specs, target) if _sharded(s) and s != t]
    if not gathered:
        return []
    whole = [UNSHARDED if s in gathered else s for s in specs]
    return [Collective("all-gather", tuple(gathered), operand.name.removesuffix("^T"),
                       _local_bytes(operand.shape, whole, sizes, dtype_bytes),
                       math.prod(sizes[axis] for axis in gathered))]


def _product(output, left, right, requested, sizes, dtype_bytes):
    """``output = left @ right`` the way DTensor's MatMul expansion runs it (operands as the product sees them).

    The specs are named as DTensor's source names them: ``left`` is ``[a, b]``, ``right`` is
    ``[c, d]`` (``b`` and ``c`` are contracted), the output is ``[e, f]``. Each rule below changes
    a spec to unsharded (the operand is all-gathered) or to sharded (each device slices, for free).
    """
    a, b = left.specs
    c, d = right.specs
    if _sharded(b) and _sharded(c) and b != c:
        raise ValueError(
            f"In {output} = {left.name} @ {right.name}, the contracted axis is split over {b!r} in "
            f"{left.name} but over {c!r} in {right.name}; DTensor refuses this. Relayout one of them "
            f"so that both use the same mesh axis, or leave one unsharded."
        )
    natural = [UNSHARDED, UNSHARDED] if _sharded(a) and a == d else [a, d]
    e, f = requested or natural
    for have, want, which in [(a, e, "rows"), (d, f, "columns")]:
        if _sharded(have) and _sharded(want) and have != want:
            raise ValueError(
                f"{output}'s {which} are split over {have!r} in the operands but over {want!r} in "
                f"the requested layout; DTensor refuses this. Request {have!r} or unsharded there."
            )
    if not _sharded(a) and _sharded(e) and e not in (b, c, d):
        a = e  # compute only the requested rows: a free slice
    if not _sharded(d) and _sharded(f) and f not in (a, b, c):
        d = f
    if _sharded(a) and a == d:  # both kept dims on one mesh axis: gather one operand's
        if a == e:
            d = UNSHARDED
        else:
            a = UNSHARDED
    if _sharded(a) and a == c:  # a contracted dim split like the other operand's kept dim: gather it
        c = UNSHARDED
    if _sharded(b) and b == d:
        b = UNSHARDED
    if b != c:  # contract over the same slices on both sides: slice the unsharded one (free)
        b, c = (b, b) if _sharded(b) else (c, c)
    collectives = (_relayout(left, [a, b], sizes, dtype_bytes) + _relayout(right, [c, d], sizes, dtype_bytes))
    shape = (left.shape[0], right.shape[1])
    flops = 2 * left.shape[0] * left.shape[1] * right.shape[1] // math.prod(sizes.get(s, 1) for s in (a, b, d))
    result = _Operand(output, shape, [a, d])
    if _sharded(b):  # each device holds partial sums over b
        partial = _local_bytes(shape, [a, d], sizes, dtype_bytes)
        kind = "reduce-scatter" if b in (e, f) else "all-reduce"
        collectives.append(Collective(kind, (b,), f"partial sums of {output}", partial, sizes[b]))
        if kind == "reduce-scatter":
            result = _Operand(output, shape, [e if e == b else a, f if f == b else d])
    collectives += _relayout(result, [e, f], sizes, dtype_bytes)
    return Product(f"{output} = {left.name} @ {right.name}", [e, f], collectives, flops)


def _check(name, shape, specs, sizes):
    if len(shape) != 2 or len(specs) != 2:
        raise ValueError(f"{name} needs a 2-D shape and two sharding specs; got shape {shape} and specs {specs}.")
    for size, spec in zip(shape, specs):
        if _sharded(spec) and spec not in sizes:
            raise ValueError(f"{name}'s spec {spec!r} is not an axis of the mesh {list(sizes)}; use one of them or {UNSHARDED!r}.")
        if _sharded(spec) and size % sizes[spec]:
            raise ValueError(f"{name} has an axis of size {size}, which mesh axis {spec!r} (size {sizes[spec]}) does not divide.")
    if _sharded(specs[0]) and specs[0] == specs[1]:
        raise ValueError(f"{name} uses mesh axis {specs[0]!r} twice; a layout splits each mesh axis over at most one tensor axis.")


@reveals  # it prints exercise 4.5's costs: the prediction counts only before it is used
def matmul_cost(x_shape, x_specs, w_shape, w_specs, mesh_dims, y_specs=None, dx_specs=None, dw_specs=None, dtype_bytes=4):
    """Predict what ``y = x @ w`` and its backward pass cost on a mesh, the way DTensor runs them.

    The backward pass is the two products autodiff runs: ``dx = dy @ w^T`` and ``dw = x^T @ dy``,
    with ``dy`` in ``y``'s layout. Without requested layouts, each product's output takes the layout
    DTensor chooses (as ``tf.GradientTape`` gives eagerly); request ``dw_specs=w_specs`` to price
    the gradient an optimizer step needs in ``w``'s layout.

    Args:
        x_shape, w_shape: global shapes ``[B, D]`` and ``[D, F]``.
        x_specs, w_specs: their sharding specs, mesh axis names or ``"unsharded"``.
        mesh_dims: the mesh axis sizes: a dict such as ``{"batch": 4, "model": 2}``, a list of
            ``(name, size)`` pairs, or a ``dtensor.Mesh``.
        y_specs, dx_specs, dw_specs: layouts requested for the outputs (``None``: DTensor's choice).
        dtype_bytes: bytes per number (4 for float32).

    Returns:
        A ``MatmulCost``: ``output_specs``, ``collectives`` (a list of ``Collective``) and
        ``flops_per_device`` of the forward product, ``backward`` (the products for dx and dw),
        ``bytes_held`` (bytes each device holds of x, w, y, dx and dw); ``print`` it for a table.

    Raises:
        ValueError: shapes that do not multiply, specs that are not mesh axes or do not divide
            their axis, or layouts DTensor refuses to multiply (the message says what to change).
        NotImplementedError: a requested layout that needs an all-to-all.

    Example:
        >>> cost = matmul_cost([8, 6], ["batch", "model"], [6, 4], ["model", "unsharded"], {"batch": 4, "model": 2})
        >>> cost.output_specs, [(c.kind, c.axes, c.tensor_bytes) for c in cost.collectives]
        (['batch', 'unsharded'], [('all-reduce', ('model',), 32)])
    """
    if hasattr(mesh_dims, "dim_names"):
        mesh_dims = [(name, mesh_dims.dim_size(name)) for name in mesh_dims.dim_names]
    sizes = dict(mesh_dims)
    x_shape, w_shape = tuple(x_shape), tuple(w_shape)
    for name, shape, specs in [("x", x_shape, x_specs), ("w", w_shape, w_specs)]:
        _check(name, shape, list(specs), sizes)
    if x_shape[1] != w_shape[0]:
        raise ValueError(f"x @ w needs x's second axis to match w's first: got shapes {list(x_shape)} and {list(w_shape)}.")
    y_shape = (x_shape[0], w_shape[1])
    for name, shape, specs in [("y", y_shape, y_specs), ("dx", x_shape, dx_specs), ("dw", w_shape, dw_specs)]:
        if specs is not None:
            _check(f"the requested {name}", shape, list(specs), sizes)
    x, w = _Operand("x", x_shape, list(x_specs)), _Operand("w", w_shape, list(w_specs))
    forward = _product("y", x, w, y_specs and list(y_specs), sizes, dtype_bytes)
    dy = _Operand("dy", y_shape, forward.output_specs)
    dx = _product("dx", dy, w.transposed(), dx_specs and list(dx_specs), sizes, dtype_bytes)
    dw = _product("dw", x.transposed(), dy, dw_specs and list(dw_specs), sizes, dtype_bytes)
    held = {"x": (x_shape, x.specs), "w": (w_shape, w.specs), "y": (dy.shape, dy.specs),
            "dx": (x_shape, dx.output_specs), "dw": (w_shape, dw.output_specs)}
    bytes_held = {name: _local_bytes(shape, specs, sizes, dtype_bytes) for name, (shape, specs) in held.items()}
    return MatmulCost(sizes, forward, [dx, dw], bytes_held)
