"""Pictures of DTensor meshes and of how a tensor (a DTensor or a ``jax.Array``) is sharded over them.

Each picture is an object that shows itself three ways: ``str()`` is deterministic plain text
(for tests and terminals), ``_repr_html_`` colours blocks by device in a notebook, and
``.plot()`` draws a matplotlib figure.
"""
import html
import itertools
import math
import re
import sys
import textwrap

import tensorflow as tf
from tensorflow.experimental import dtensor

from course_utils.checkers.reach import reveals
from course_utils.meshes import mesh_text
from course_utils.packing import check_fits

__all__ = ["visualize_sharding", "visualize_mesh", "ShardingPicture", "MeshPicture"]

# Colour-blind-friendly, light enough for black text (Okabe-Ito lightened, then Tableau light).
PALETTE = ["#a6cee3", "#fdbf6f", "#b2df8a", "#fb9a99", "#cab2d6", "#ffff99", "#8dd3c7", "#fccde5",
           "#bebada", "#80b1d3", "#fdb462", "#b3de69", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f"]


class _Facet:
    """One 2-D table of the picture: row and column labels and, per cell, text and a colour key."""

    def __init__(self, title, row_name, col_name, row_labels, col_labels, cells):
        self.title = title
        self.row_name = row_name
        self.col_name = col_name
        self.row_labels = row_labels
        self.col_labels = col_labels
        self.cells = cells  # cells[r][c] = (text, colour_key)


class _Picture:
    """Shared rendering of header lines and facets to text, HTML and matplotlib."""

    def __init__(self, header, facets):
        self.header = header
        self.facets = facets

    @staticmethod
    def colour_of(devices):
        """The colour of a block held by ``devices`` (labels such as ``"CPU:3"``): the colour of
        its first device, the same in every picture, so colours can be compared across pictures."""
        number = re.search(r"(\d+)$", devices[0])  # "CPU:3" and "id 3" (another client's device) alike
        return PALETTE[int(number.group(1)) % len(PALETTE) if number else 0]

    def __str__(self):
        lines = list(self.header)
        for facet in self.facets:
            lines.append("")
            if facet.title:
                lines.append(facet.title)
            corner = f"{facet.row_name} \\ {facet.col_name}" if facet.row_name else facet.col_name
            table = [[corner] + facet.col_labels]
            table += [[label] + [text for text, _ in row] for label, row in zip(facet.row_labels, facet.cells)]
            widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
            fmt = lambda row: " | ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
            lines.append(fmt(table[0]))
            lines.append("-+-".join("-" * w for w in widths))
            lines += [fmt(row) for row in table[1:]]
        return "\n".join(lines)

    def __repr__(self):
        return str(self)

    def _repr_html_(self):
        esc = html.escape
        parts = ['<div style="font-family: monospace; font-size: 12px">']
        parts += [f"<div>{esc(line)}</div>" for line in self.header]
        for facet in self.facets:
            if facet.title:
                parts.append(f'<div style="margin-top: 8px"><b>{esc(facet.title)}</b></div>')
            parts.append('<table style="border-collapse: collapse; margin: 4px 0">')
            corner = f"{facet.row_name} \\ {facet.col_name}" if facet.row_name else facet.col_name
            parts.append("<tr><th style='padding: 2px 6px'>" + esc(corner) + "</th>"
                         + "".join(f"<th style='padding: 2px 6px'>{esc(c)}</th>" for c in facet.col_labels) + "</tr>")
            for label, row in zip(facet.row_labels, facet.cells):
                parts.append(f"<tr><th style='padding: 2px 6px; text-align: right'>{esc(label)}</th>")
                for text, key in row:
                    parts.append(f"<td style='background: {self.colour_of(key)}; color: black; border: 1px solid #333;"
                                 f" padding: 10px 14px; text-align: center'>{esc(text)}</td>")
                parts.append("</tr>")
            parts.append("</table>")
        parts.append("</div>")
        return "".join(parts)

    def plot(self, ax=None, title=None):
        """Draw the picture with matplotlib and return the figure: one subplot per facet, or
        into ``ax`` (one-facet pictures only; ``title`` then titles that axes)."""
        import matplotlib.pyplot as plt

        n = len(self.facets)
        if ax is not None and n != 1:
            raise ValueError(f"This picture has {n} facets; call plot() without ax to get one subplot per facet.")
        if ax is None:
            cols = min(n, 4)
            rows = -(-n // cols)
            cell_w = max(len(f.cells[0]) for f in self.facets)
            cell_h = max(len(f.cells) for f in self.facets)
            size = (cols * (1.2 * cell_w + 1.8), rows * (0.9 * cell_h + 1.4) + 0.8)
            shrink = min(1.0, 12.0 / size[0])  # keep wide pictures on a screen
            size = (size[0] * shrink, max(2.0, size[1] * shrink))
            fig, axes = plt.subplots(rows, cols, figsize=size, squeeze=False)
            axes = list(axes.flat)
            for extra in axes[n:]:
                extra.axis("off")
        else:
            fig, axes = ax.figure, [ax]
        for ax_, facet in zip(axes, self.facets):
            n_rows, n_cols = len(facet.cells), len(facet.cells[0])
            for r, c in itertools.product(range(n_rows), range(n_cols)):
                text, key = facet.cells[r][c]
                ax_.add_patch(plt.Rectangle((c, n_rows - 1 - r), 1, 1, facecolor=self.colour_of(key), edgecolor="black"))
                ax_.text(c + 0.5, n_rows - 0.5 - r, text.replace(", ", "\n"), ha="center", va="center", fontsize=8)
            ax_.set_xlim(0, n_cols)
            ax_.set_ylim(0, n_rows)
            ax_.set_xticks([c + 0.5 for c in range(n_cols)], facet.col_labels, fontsize=8)
            ax_.set_yticks([n_rows - 0.5 - r for r in range(n_rows)], facet.row_labels, fontsize=8)
            ax_.set_xlabel(facet.col_name, fontsize=8)
            ax_.set_ylabel(facet.row_name, fontsize=8)
            ax_.set_title(facet.title or "", fontsize=9)
        if ax is None:
            fig.suptitle(textwrap.fill(title or self.header[0], 60), fontsize=10)
        elif title:
            ax.set_title(title, fontsize=9)
        fig.tight_layout()
        return fig


def _device_labels(mesh):
    """Short device names by device id: ``CPU:3``; ``id 5`` for devices of other clients."""
    local = dict(zip(mesh.local_device_ids(), mesh.local_devices()))
    labels = {}
    for device_id in mesh.unravel_index():
        if device_id in local:
            spec = tf.DeviceSpec.from_string(local[device_id])
            labels[device_id] = f"{spec.device_type}:{spec.device_index}"
        else:
            labels[device_id] = f"id {device_id}"
    return labels


def _mesh_description(axis_sizes):
    """``mesh batch=4 x model=2 (8 devices)`` from a dict of axis names and sizes."""
    dims = mesh_text(list(axis_sizes.items()))
    return f"mesh {dims} ({math.prod(axis_sizes.values())} devices)"


def _axis_sizes(mesh):
    return {name: mesh.dim_size(name) for name in mesh.dim_names}


class ShardingPicture(_Picture):
    """Which devices hold which block of a tensor. Made by :func:`visualize_sharding`.

    It is drawn from ``pieces``: for every device, the ``(start, stop)`` range it holds along each
    tensor axis, and the device's label. ``header`` gives the first two lines (what the tensor is,
    which mesh it is on); ``axis_specs`` names how each tensor axis is split; ``mesh_axes`` maps
    mesh axis names to sizes and ``used_axes`` lists those the tensor is split over.
    """

    def __init__(self, header, shape, axis_specs, pieces, mesh_axes, used_axes):
        self.shape = list(shape)
        self.axis_specs = list(axis_specs)
        # The distinct ranges along each axis, in order: block k of an axis is its k-th range.
        self.ranges = [sorted({ranges[axis] for ranges, _ in pieces}) for axis in range(len(self.shape))]
        self.shard_shape = [stop - start for start, stop in (axis_ranges[0] for axis_ranges in self.ranges)]
        self.blocks = {
            block: tuple(label for ranges, label in pieces
                         if all(ranges[axis] == self.ranges[axis][k] for axis, k in enumerate(block)))
            for block in itertools.product(*(range(len(r)) for r in self.ranges))
        }
        self.replicated_over = [name for name in mesh_axes if name not in used_axes]
        rep = ", ".join(f"{name} (size {mesh_axes[name]})" for name in self.replicated_over) or "none"
        header = list(header) + [
            f"shard shape {tuple(self.shard_shape)}: {len(self.blocks)} distinct block(s), each held by "
            f"{len(pieces) // max(1, len(self.blocks))} device(s); replicated over mesh axes: {rep}",
        ]
        super().__init__(header, self._facets())

    def _axis_labels(self, axis):
        return [f"{start}:{stop}" for start, stop in self.ranges[axis]]

    def _facets(self):
        rank = len(self.shape)
        counts = [len(r) for r in self.ranges]
        cell = lambda block: (", ".join(self.blocks[block]), self.blocks[block])
        name = lambda axis: f"axis {axis} ({self.axis_specs[axis]})"
        if rank == 0:
            return [_Facet("", "", "scalar", [""], [""], [[cell(())]])]
        if rank == 1:
            return [_Facet("", "", name(0), [""], self._axis_labels(0), [[cell((c,)) for c in range(counts[0])]])]
        facets = []
        lead = rank - 2
        for prefix in itertools.product(*(range(n) for n in counts[:lead])):
            title = ", ".join(f"{name(a)} [{self._axis_labels(a)[k]}]" for a, k in enumerate(prefix))
            cells = [[cell(prefix + (r, c)) for c in range(counts[lead + 1])] for r in range(counts[lead])]
            facets.append(_Facet(title, name(lead), name(lead + 1), self._axis_labels(lead),
                                 self._axis_labels(lead + 1), cells))
        return facets


def _dtensor_picture(layout, shape, dtype=None):
    """The picture of ``layout`` for a tensor of ``shape``: each device's block follows from its
    place on the mesh (DTensor places every device's block by the same rule)."""
    shape = list(shape)
    check_fits(shape, layout)
    mesh, specs = layout.mesh, list(layout.sharding_specs)
    labels = _device_labels(mesh)
    pieces = []
    for device_id, location in sorted(mesh.unravel_index().items()):
        ranges = []
        for size, spec in zip(shape, specs):
            step = size if spec == dtensor.UNSHARDED else size // mesh.dim_size(spec)
            start = 0 if spec == dtensor.UNSHARDED else location[spec] * step
            ranges.append((start, start + step))
        pieces.append((tuple(ranges), labels[device_id]))
    what = f"{dtype} tensor" if dtype else "tensor"
    header = [f"{what} of shape {tuple(shape)}, sharding specs {specs}", f"on {_mesh_description(_axis_sizes(mesh))}"]
    return ShardingPicture(header, shape, specs, pieces, _axis_sizes(mesh), specs)


def _jax_picture(array):
    """The picture of a ``jax.Array``, read from its real shards: which device holds which slice."""
    import jax

    if not array.is_fully_addressable:
        raise ValueError("This jax.Array has shards in other processes; visualize_sharding shows arrays "
                         "whose shards are all in this process.")
    shape = tuple(array.shape)
    pieces = []
    for shard in sorted(array.addressable_shards, key=lambda s: s.device.id):
        ranges = tuple(index.indices(size)[:2] for index, size in zip(shard.index, shape))
        pieces.append((ranges, f"{shard.device.platform.upper()}:{shard.device.id}"))
    sharding = array.sharding
    if isinstance(sharding, jax.sharding.NamedSharding):
        entries = list(sharding.spec) + [None] * (len(shape) - len(sharding.spec))
        names = lambda entry: (entry,) if isinstance(entry, str) else tuple(entry or ())
        axis_specs = ["+".join(names(e)) or "None" for e in entries]
        mesh_axes = dict(sharding.mesh.shape)
        used = [name for e in entries for name in names(e)]
        where = _mesh_description(mesh_axes)
        spec_text = f"PartitionSpec({', '.join(map(repr, entries))})"
    else:  # e.g. SingleDeviceSharding: no mesh; say per axis whether the shards split it
        axis_specs = ["split" if len({r[axis] for r, _ in pieces}) > 1 else "whole" for axis in range(len(shape))]
        mesh_axes, used = {}, []
        where = f"{len(sharding.device_set)} device(s)"
        spec_text = type(sharding).__name__
    header = [f"{array.dtype} array of shape {shape}, {spec_text}", f"on {where}"]
    return ShardingPicture(header, shape, axis_specs, pieces, mesh_axes, used)


class MeshPicture(_Picture):
    """The devices of a mesh on its grid, with the axis names. Made by :func:`visualize_mesh`."""

    def __init__(self, mesh):
        self.mesh = mesh
        labels = _device_labels(mesh)
        names = list(mesh.dim_names)
        sizes = [mesh.dim_size(n) for n in names]
        by_location = {tuple(loc[n] for n in names): labels[i] for i, loc in mesh.unravel_index().items()}
        header = [f"{_mesh_description(_axis_sizes(mesh))}, device type {mesh.device_type()}"]
        cell = lambda loc: (by_location[loc], (by_location[loc],))
        if len(names) == 1:
            facets = [_Facet("", "", names[0], [""], [f"{names[0]}={k}" for k in range(sizes[0])],
                             [[cell((k,)) for k in range(sizes[0])]])]
        else:
            facets = []
            for prefix in itertools.product(*(range(s) for s in sizes[:-2])):
                title = ", ".join(f"{n}={k}" for n, k in zip(names, prefix))
                rows = [f"{names[-2]}={k}" for k in range(sizes[-2])]
                cols = [f"{names[-1]}={k}" for k in range(sizes[-1])]
                cells = [[cell(prefix + (r, c)) for c in range(sizes[-1])] for r in range(sizes[-2])]
                facets.append(_Facet(title, names[-2], names[-1], rows, cols, cells))
        super().__init__(header, facets)


@reveals  # it prints shard shapes: exercise 4.3's prediction counts only before it is used
def visualize_sharding(tensor_or_layout, shape=None):
    """Picture which device(s) hold each block of a DTensor, a ``jax.Array`` or a DTensor layout.

    For each block it shows the device(s) holding it; the header gives the mesh axis names and
    sizes, the sharding spec, the shard shape and the mesh axes that replicate the tensor.
    Rank 1 and 2 are drawn as one table; rank > 2 as one table per block of the leading axes.
    A ``jax.Array`` is read from its real shards (``addressable_shards``: each shard's device and
    slice); device ``CPU:3`` gets the same colour whichever library placed the block there.

    Args:
        tensor_or_layout: a DTensor (its layout and shape are read from it), a ``jax.Array``, or
            a ``dtensor.Layout``.
        shape: the global shape, needed with a ``Layout``; default: one element per shard.

    Returns:
        A :class:`ShardingPicture`: print it for text, let the notebook show it for colours,
        or call ``.plot()`` for a matplotlib figure.

    Raises:
        TypeError: a plain (non-DTensor) tensor or another object was given.
        ValueError: ``shape`` does not match the layout's rank (or differs from the tensor's
            shape), a sharded axis is not divisible by its mesh dimension, or a ``jax.Array``
            has shards in other processes.

    Example:
        >>> from course_utils import make_mesh
        >>> mesh = make_mesh([("batch", 4)])
        >>> print(visualize_sharding(dtensor.Layout.batch_sharded(mesh, "batch", rank=2), shape=[8, 3]))
        tensor of shape (8, 3), sharding specs ['batch', 'unsharded']
        on mesh batch=4 (4 devices)
        shard shape (2, 3): 4 distinct block(s), each held by 1 device(s); replicated over mesh axes: none
        <BLANKLINE>
        axis 0 (batch) \\ axis 1 (unsharded) | 0:3
        ------------------------------------+------
        0:2                                 | CPU:0
        2:4                                 | CPU:1
        4:6                                 | CPU:2
        6:8                                 | CPU:3
    """
    if isinstance(tensor_or_layout, dtensor.Layout):
        layout = tensor_or_layout
        if shape is None:
            shape = [1 if s == dtensor.UNSHARDED else layout.mesh.dim_size(s) for s in layout.sharding_specs]
        return _dtensor_picture(layout, shape)
    jax = sys.modules.get("jax")  # a jax.Array exists only once JAX is imported
    if jax is not None and isinstance(tensor_or_layout, jax.Array):
        if shape is not None and tuple(shape) != tuple(tensor_or_layout.shape):
            raise ValueError(f"shape={list(shape)} differs from the array's shape {list(tensor_or_layout.shape)}; leave shape out.")
        return _jax_picture(tensor_or_layout)
    if isinstance(tensor_or_layout, (tf.Tensor, tf.Variable)):
        try:
            layout = dtensor.fetch_layout(tensor_or_layout)
        except (tf.errors.InvalidArgumentError, ValueError) as err:
            raise TypeError(
                "visualize_sharding needs a DTensor, but this tensor has no layout (it lives on one "
                "ordinary device). Pack it onto a mesh first (pack_batch or dtensor.copy_to_mesh), "
                "or pass a dtensor.Layout together with shape=..."
            ) from err
        if shape is not None and list(shape) != tensor_or_layout.shape.as_list():
            raise ValueError(f"shape={list(shape)} differs from the tensor's shape {tensor_or_layout.shape.as_list()}; leave shape out.")
        return _dtensor_picture(layout, tensor_or_layout.shape.as_list(), tensor_or_layout.dtype.name)
    raise TypeError(f"visualize_sharding takes a DTensor, a jax.Array or a dtensor.Layout, not {type(tensor_or_layout).__name__}.")


def visualize_mesh(mesh):
    """Picture a DTensor mesh: each device at its place on the grid, with the axis names.

    Args:
        mesh: a ``dtensor.Mesh`` (1-D, 2-D, or more: extra leading axes become facets).

    Returns:
        A :class:`MeshPicture` (``str()``, ``_repr_html_`` and ``.plot()`` as for sharding).

    Raises:
        TypeError: ``mesh`` is not a ``dtensor.Mesh``.

    Example:
        >>> from course_utils import make_mesh
        >>> print(visualize_mesh(make_mesh([("batch", 4), ("model", 2)])))
        mesh batch=4 x model=2 (8 devices), device type CPU
        <BLANKLINE>
        batch \\ model | model=0 | model=1
        --------------+---------+--------
        batch=0       | CPU:0   | CPU:1
        batch=1       | CPU:2   | CPU:3
        batch=2       | CPU:4   | CPU:5
        batch=3       | CPU:6   | CPU:7
    """
    if not isinstance(mesh, dtensor.Mesh):
        raise TypeError(f"visualize_mesh takes a dtensor.Mesh, not {type(mesh).__name__}.")
    return MeshPicture(mesh)
