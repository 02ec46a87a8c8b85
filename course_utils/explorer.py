"""An interactive layout explorer: choose a mesh, a tensor shape and sharding specs; see the result.

:func:`explore_layout` holds all the logic. It never raises for a learner's choice: a choice
that works gives a sharding picture, a choice that does not work gives sentences saying what is
wrong and what to change. :func:`layout_explorer` is the ipywidgets front end; it only passes
the widgets' values to :func:`explore_layout` and shows what comes back.
"""
import html
import operator
import re

import ipywidgets as widgets
import tensorflow as tf
from tensorflow.experimental import dtensor

from course_utils.checkers.reach import reveals
from course_utils.devices import RESERVED_AXIS_NAMES, make_mesh
from course_utils.viz import visualize_mesh, visualize_sharding

__all__ = ["LayoutExploration", "LayoutExplorer", "explore_layout", "layout_explorer"]




class LayoutExploration:
    """What :func:`explore_layout` found: a picture when the choice works, reasons when it does not.

    Attributes:
        ok: True when the layout can be built.
        problems: the explanations, one sentence group per problem (empty when ``ok``).
        mesh, layout: the ``dtensor.Mesh`` and ``dtensor.Layout`` (``None`` unless ``ok``).
        picture: the :class:`~course_utils.viz.ShardingPicture` (``None`` unless ``ok``).
        mesh_picture: the :class:`~course_utils.viz.MeshPicture` (``None`` unless ``ok``).
        shard_shape: the shape of the block each device holds (``None`` unless ``ok``).
    """

    def __init__(self, problems, mesh=None, layout=None, picture=None, mesh_picture=None):
        self.problems = list(problems)
        self.mesh = mesh
        self.layout = layout
        self.picture = picture
        self.mesh_picture = mesh_picture

    @property
    def ok(self):
        return not self.problems

    @property
    def shard_shape(self):
        return tuple(self.picture.shard_shape) if self.picture is not None else None

    def __str__(self):
        if self.ok:
            return f"{self.picture}\n\n{self.mesh_picture}"
        return "This layout does not work:\n" + "\n".join(f"- {p}" for p in self.problems)

    def __repr__(self):
        return str(self)

    def _repr_html_(self):
        if self.ok:
            return ('<div style="display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start">'
                    f"<div>{self.picture._repr_html_()}</div><div>{self.mesh_picture._repr_html_()}</div></div>")
        items = "".join(f"<li>{html.escape(p)}</li>" for p in self.problems)
        return ('<div style="border-left: 4px solid #d62728; padding: 4px 12px; background: #fdecea; color: black">'
                f"<b>This layout does not work:</b><ul style='margin: 4px 0'>{items}</ul></div>")


def _as_list(value, what, example):
    """A comma-separated string, a single value or a sequence, as a list; or (None, problem)."""
    if isinstance(value, str):
        text = value.strip().strip("()[]").strip()
        return ([part.strip() for part in text.split(",")] if text else []), None
    if isinstance(value, (int, bool)) or (hasattr(value, "__index__") and not hasattr(value, "__len__")):
        return [value], None
    try:
        return list(value), None
    except TypeError:
        return None, f"The {what} should be a list or comma-separated text such as {example!r}, not {value!r}."


def _whole_numbers(value, what, example, allow_empty=False):
    items, problem = _as_list(value, what, example)
    if problem:
        return None, problem
    numbers = []
    for item in items:
        try:
            if isinstance(item, bool):
                raise TypeError
            number = int(item) if isinstance(item, str) else operator.index(item)
        except (TypeError, ValueError):
            return None, (f"The {what} must be whole numbers separated by commas, such as {example!r}; "
                          f"{str(item)!r} is not a whole number.")
        numbers.append(number)
    if not numbers and not allow_empty:
        return None, f"The {what} is empty; give at least one size, such as {example!r}."
    return numbers, None


def _mesh_problems(sizes, names, n_devices):
    problems = []
    if len(names) != len(sizes):
        problems.append(
            f"The mesh shape {tuple(sizes)} has {len(sizes)} dimension(s) but {len(names)} axis name(s) "
            f"were given ({', '.join(map(repr, names)) or 'none'}). Give exactly one name per mesh dimension.")
    for i, name in enumerate(names):
        if not isinstance(name, str):
            problems.append(f"Mesh axis {i} is named {name!r}; axis names are words, such as 'batch' or 'model'.")
        elif not name:
            problems.append(f"Mesh axis {i} has an empty name. Every mesh axis needs a name, such as 'batch' or 'model'.")
        elif name.lower() in RESERVED_AXIS_NAMES:
            problems.append(f"{name!r} cannot name a mesh axis: DTensor reserves it (as a sharding spec). "
                            f"Choose another name, such as 'batch' or 'model'.")
        elif not name.isidentifier():
            problems.append(f"The mesh axis name {name!r} is not a plain word. Use letters, digits and _ only "
                            f"(such as 'batch' or 'model'): DTensor writes layouts as text and other characters break it.")
    repeated = sorted({n for n in names if isinstance(n, str) and n and names.count(n) > 1})
    for name in repeated:
        problems.append(f"The mesh axis name {name!r} is used {names.count(name)} times. Each mesh axis needs its own "
                        f"name, because a sharding spec refers to a mesh axis by its name.")
    for name, size in zip(names, sizes):
        if size < 1:
            problems.append(f"Mesh axis {name!r} has size {size}. Every mesh axis needs at least 1 device.")
    if all(size >= 1 for size in sizes):
        needed = 1
        for size in sizes:
            needed *= size
        if needed > n_devices:
            shape = " x ".join(map(str, sizes))
            problems.append(
                f"A mesh of shape {shape} needs {needed} devices, but only {n_devices} exist. Every place on a mesh "
                f"is a real device; choose sizes whose product is at most {n_devices} (for example "
                f"{_example_mesh(n_devices, len(sizes))}).")
    return problems


def _example_mesh(n_devices, rank):
    if rank >= 2 and n_devices >= 4:
        return f"{n_devices // 2} x 2"
    return str(n_devices)


def _layout_problems(shape, specs, sizes_by_name):
    problems = []
    mesh_axes = ", ".join(map(repr, sizes_by_name)) or "none"
    if len(specs) != len(shape):
        problems.append(
            f"The tensor has rank {len(shape)} (shape {tuple(shape)}) but {len(specs)} sharding spec(s) "
            f"were given ({specs}). Give exactly one spec per tensor axis: a mesh axis name or 'unsharded'.")
    for axis, spec in enumerate(specs):
        if spec != dtensor.UNSHARDED and spec not in sizes_by_name:
            problems.append(
                f"The sharding spec {spec!r} for tensor axis {axis} is not a mesh axis. The mesh axes are "
                f"{mesh_axes}; use one of them or 'unsharded'.")
    for name in sizes_by_name:
        axes = [axis for axis, spec in enumerate(specs) if spec == name]
        if len(axes) > 1:
            problems.append(
                f"Mesh axis {name!r} shards tensor axes {' and '.join(map(str, axes))}. A mesh axis can split "
                f"at most one tensor axis of a layout (each device has one position along it); leave the "
                f"other axes 'unsharded' or shard them over a different mesh axis.")
    if len(specs) == len(shape):
        for axis, (size, spec) in enumerate(zip(shape, specs)):
            parts = sizes_by_name.get(spec)
            if parts and size % parts:
                problems.append(
                    f"Tensor axis {axis} has size {size}, which mesh axis {spec!r} (size {parts}) does not divide "
                    f"evenly. Make axis {axis} a multiple of {parts}, leave it 'unsharded', or shard it over "
                    f"another mesh axis.")
    return problems


def _spec_names(value):
    items, problem = _as_list(value, "sharding specs", "batch, unsharded")
    if problem:
        return None, problem
    specs = []
    for item in items:
        if item is None or (isinstance(item, str) and item.lower() == dtensor.UNSHARDED):
            specs.append(dtensor.UNSHARDED)
        elif item == "":
            return None, "One of the sharding specs is empty; write 'unsharded' for an axis that is not split."
        elif isinstance(item, str):
            specs.append(item)
        else:
            return None, f"Each sharding spec is a mesh axis name or 'unsharded', not {item!r}."
    return specs, None


@reveals  # it prints shard shapes (exercise 4.3)
def explore_layout(mesh_shape, axis_names, tensor_shape, sharding_specs, n_devices=None):
    """Check a layout choice and picture it, or explain in words what is wrong with it.

    Every argument may be a list or comma-separated text (as typed in the explorer's boxes).
    A choice that works is built for real: a mesh over the first logical CPUs (with
    :func:`~course_utils.make_mesh`), a ``dtensor.Layout``, and its sharding picture.

    Args:
        mesh_shape: mesh axis sizes, e.g. ``(4, 2)`` or ``"4, 2"`` (1-D: ``8``).
        axis_names: one name per mesh axis, e.g. ``("batch", "model")`` or ``"batch, model"``.
        tensor_shape: the global tensor shape, e.g. ``(8, 6)`` or ``"8, 6"`` (``""`` for a scalar).
        sharding_specs: one spec per tensor axis, a mesh axis name or ``"unsharded"``.
        n_devices: how many devices exist; default: the logical CPUs of this process.

    Returns:
        A :class:`LayoutExploration`: ``ok`` and ``picture`` when the layout works, otherwise
        ``problems``, a list of explanations naming the axis, size and mesh axis involved.
        Print it for text; a notebook shows it in colour.

    Raises:
        Nothing for any choice of values; every problem is explained in the result.

    Example:
        >>> from course_utils import configure_virtual_cpus
        >>> cpus = configure_virtual_cpus(8)
        >>> print(explore_layout("4, 2", "batch, model", "8, 6", "batch, unsharded").shard_shape)
        (2, 6)
        >>> print(explore_layout("4, 2", "batch, model", "6, 6", "batch, unsharded"))
        This layout does not work:
        - Tensor axis 0 has size 6, which mesh axis 'batch' (size 4) does not divide evenly. ...
    """
    sizes, mesh_problem = _whole_numbers(mesh_shape, "mesh shape", "4, 2")
    names, names_problem = _as_list(axis_names, "axis names", "batch, model")
    shape, shape_problem = _whole_numbers(tensor_shape, "tensor shape", "8, 6", allow_empty=True)
    specs, specs_problem = _spec_names(sharding_specs)
    problems = [p for p in (mesh_problem, names_problem, shape_problem, specs_problem) if p]
    if shape is not None:
        problems += [f"Tensor axis {axis} has size {size}. The explorer needs sizes of at least 1."
                     for axis, size in enumerate(shape) if size < 1]
    try:
        if n_devices is None:
            n_devices = len(tf.config.list_logical_devices("CPU"))
        if sizes is not None and names is not None:
            problems += _mesh_problems(sizes, names, n_devices)
            if shape is not None and specs is not None:
                valid_names = [n for n in names if isinstance(n, str)]
                problems += _layout_problems(shape, specs, dict(zip(valid_names, sizes)))
        if problems:
            return LayoutExploration(problems)
        mesh = make_mesh(list(zip(names, sizes)))
        layout = dtensor.Layout(specs, mesh)
        return LayoutExploration([], mesh, layout, visualize_sharding(layout, shape), visualize_mesh(mesh))
    except Exception as err:  # a learner's choice must never end in a traceback  # noqa: BLE001
        message = re.sub(r"\s+", " ", str(err)).strip()
        return LayoutExploration(problems + [f"This choice could not be built: {message}"])


@reveals  # its widget prints shard shapes (exercise 4.3)
def layout_explorer(mesh_shape="4, 2", axis_names="batch, model", tensor_shape="8, 6",
                    sharding_specs=("batch", "unsharded"), n_devices=None):
    """An ipywidgets explorer: type a mesh and a tensor shape, pick a sharding spec per axis.

    The picture (or the explanation of what is wrong) updates whenever a value changes. All the
    logic is :func:`explore_layout`; the widget only passes its values along.

    Args:
        mesh_shape, axis_names, tensor_shape: the starting text of the three boxes.
        sharding_specs: the starting spec of each tensor axis.
        n_devices: passed on to :func:`explore_layout`.

    Returns:
        A :class:`LayoutExplorer` (an ``ipywidgets.VBox``); its ``result`` is the latest
        :class:`LayoutExploration`.

    Example:
        >>> explorer = layout_explorer()  # the last line of a notebook cell shows it
        >>> explorer.result.shard_shape
        (2, 6)
    """
    return LayoutExplorer(mesh_shape, axis_names, tensor_shape, sharding_specs, n_devices)


def _text(value):
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    return ", ".join(map(str, value))


def static_state_html(state, picture_html):
    """HTML for a page that shows an explorer without a running kernel: a note that its controls work in the
    running notebook, its current ``state`` in words, and ``picture_html``."""
    return ('<div class="course-explorer-static"><p><i>An interactive explorer: run the notebook to change its '
            f"controls. Its first state ({html.escape(state)}):</i></p>{picture_html}</div>")


class LayoutExplorer(widgets.VBox):
    """The widget made by :func:`layout_explorer`: three text boxes, a spec per axis, the result."""

    def __init__(self, mesh_shape, axis_names, tensor_shape, sharding_specs, n_devices=None):
        super().__init__()
        style = {"description_width": "120px"}
        box = lambda value, label, hint: widgets.Text(
            value=_text(value), description=label, placeholder=hint, continuous_update=False, style=style)
        self.mesh_shape = box(mesh_shape, "mesh shape", "8  or  4, 2")
        self.axis_names = box(axis_names, "mesh axis names", "batch, model")
        self.tensor_shape = box(tensor_shape, "tensor shape", "8, 6")
        self.spec_row = widgets.HBox()
        self.output = widgets.Output()
        self.n_devices = n_devices
        self.result = None
        self._specs = [dtensor.UNSHARDED if s is None else str(s) for s in sharding_specs]
        help_text = widgets.HTML(
            "Type sizes and names separated by commas and press Enter. For each tensor axis, pick "
            "the mesh axis that splits it, or <i>unsharded</i>.")
        self.children = [help_text, self.mesh_shape, self.axis_names, self.tensor_shape,
                         widgets.HBox([widgets.Label("sharding specs:"), self.spec_row]), self.output]
        for text in (self.mesh_shape, self.axis_names, self.tensor_shape):
            text.observe(self._on_text, names="value")
        self._rebuild_spec_menus()
        self.update()

    def _repr_mimebundle_(self, **kwargs):
        """The widget, and for a page without a kernel (the course's website) a picture of its first state."""
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["text/html"] = static_state_html(
            f"mesh {self.mesh_shape.value} ({self.axis_names.value}), tensor {self.tensor_shape.value}, "
            f"sharding specs {self.sharding_specs}", self.result._repr_html_())
        return bundle

    @property
    def sharding_specs(self):
        """The specs currently picked, one per tensor axis."""
        return [menu.value for menu in self.spec_row.children]

    def _rebuild_spec_menus(self):
        names, _ = _as_list(self.axis_names.value, "axis names", "")
        shape, problem = _whole_numbers(self.tensor_shape.value, "tensor shape", "", allow_empty=True)
        if problem:  # keep the menus; explore_layout explains the shape
            return
        options = [dtensor.UNSHARDED] + [n for n in dict.fromkeys(names) if n and n != dtensor.UNSHARDED]
        previous = self.sharding_specs if self.spec_row.children else self._specs
        menus = []
        for axis in range(len(shape)):
            value = previous[axis] if axis < len(previous) and previous[axis] in options else dtensor.UNSHARDED
            menu = widgets.Dropdown(options=options, value=value, description=f"axis {axis}",
                                    layout=widgets.Layout(width="170px"), style={"description_width": "45px"})
            menu.observe(lambda change: self.update(), names="value")
            menus.append(menu)
        self.spec_row.children = menus

    def _on_text(self, change):
        self._rebuild_spec_menus()
        self.update()

    def update(self):
        """Run :func:`explore_layout` on the current values and show the result."""
        self.result = explore_layout(self.mesh_shape.value, self.axis_names.value, self.tensor_shape.value,
                                     self.sharding_specs, self.n_devices)
        self.output.outputs = ()
        self.output.append_display_data(self.result)
        return self.result
