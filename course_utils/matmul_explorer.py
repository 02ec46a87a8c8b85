"""The layout explorer's operation mode: predict what ``y = x @ w`` costs on a mesh, then see what ran.

:func:`measure_matmul` multiplies real DTensors on a real mesh and reads, from the run itself,
the layout of ``y``, the collectives of the forward and backward products (with the profiler, as
chapter 4 does by hand) and the bytes each device holds (``bytes_per_device``), next to what the
cost model (:func:`~course_utils.costs.matmul_cost`) predicted. :func:`matmul_explorer` is its
widget: pick layouts for ``x`` and ``w``, predict the output layout and the collectives, then
reveal what DTensor did.
"""
import dataclasses
import html
import itertools

import ipywidgets as widgets
import tensorflow as tf
from tensorflow.experimental import dtensor

from course_utils.costs import matmul_cost
from course_utils.explorer import static_state_html
from course_utils.memory import bytes_per_device
from course_utils.meshes import mesh_text
from course_utils.packing import pack_batch
from course_utils.profiling import collectives_run_by

__all__ = ["MatmulMeasurement", "measure_matmul", "matmul_explorer", "MatmulExplorer"]

HELD = ("x", "w", "y", "dx", "dw")


@dataclasses.dataclass
class MatmulMeasurement:
    """What ``y = x @ w`` and its backward pass cost on a mesh: predicted, and measured on the run.

    Attributes:
        x_specs, w_specs: the layouts tried.
        problems: why these layouts cannot be multiplied (empty when they can).
        predicted: the :class:`~course_utils.costs.MatmulCost` (``None`` when there are problems).
        y_specs: the layout of ``y`` that DTensor chose.
        forward, backward: ``(kind, mesh axes, tensor bytes, bytes each device sends)`` of each
            collective that ran, read from the profiler's trace (sorted).
        bytes_held: bytes one device holds of ``x``, ``w``, ``y``, ``dx`` and ``dw``, read with
            ``bytes_per_device`` (the largest over the devices).
    """
    x_specs: list
    w_specs: list
    problems: list
    predicted: object = None
    y_specs: list = None
    forward: list = None
    backward: list = None
    bytes_held: dict = None

    @property
    def ok(self):
        return not self.problems

    @property
    def predicted_forward(self):
        return _predicted(self.predicted.forward.collectives)

    @property
    def predicted_backward(self):
        return _predicted(c for product in self.predicted.backward for c in product.collectives)

    @property
    def agrees(self):
        """True when the cost model predicted the layout, every collective and every byte held."""
        return self.ok and (self.y_specs == self.predicted.output_specs
                            and self.forward == self.predicted_forward and self.backward == self.predicted_backward
                            and self.bytes_held == self.predicted.bytes_held)

    def _repr_html_(self):
        if not self.ok:
            items = "".join(f"<li>{html.escape(p)}</li>" for p in self.problems)
            return ('<div style="border-left: 4px solid #d62728; padding: 4px 12px; background: #fdecea; color: black">'
                    f"<b>DTensor cannot multiply these layouts:</b><ul style='margin: 4px 0'>{items}</ul></div>")
        rows = [("output layout y", str(self.predicted.output_specs), str(self.y_specs)),
                ("forward collectives", _words(self.predicted_forward), _words(self.forward)),
                ("backward collectives (dx, dw)", _words(self.predicted_backward), _words(self.backward))]
        rows += [(f"bytes per device: {name}", str(self.predicted.bytes_held[name]), str(self.bytes_held[name]))
                 for name in HELD]
        rows.append(("FLOPs per device (forward)", str(self.predicted.flops_per_device), ""))
        body = "".join(f"<tr><td style='text-align:left'>{html.escape(a)}</td><td style='text-align:left'>"
                       f"{html.escape(b)}</td><td style='text-align:left'>{html.escape(c)}</td></tr>"
                       for a, b, c in rows)
        verdict = "predicted = measured" if self.agrees else "the prediction and the run differ"
        return (f"<table><tr><th></th><th>predicted</th><th>measured on the mesh</th></tr>{body}</table>"
                f"<p><b>{verdict}</b>. Bytes sent are per device, by the ring formulas; on these CPUs "
                f"DTensor runs an all-gather as an all-reduce (chapter 4).</p>")


def _predicted(collectives):
    """Predicted collectives as the run will show them: bytes sent for what DTensor runs on CPU."""
    return sorted((c.kind, tuple(c.axes), c.tensor_bytes, c.bytes_sent_on_cpu) for c in collectives)


def _measured(runs):
    return sorted((run.kind, tuple(run.axes), run.tensor_bytes, run.bytes_sent_per_device) for run in runs)


def _words(collectives):
    return "; ".join(f"{kind} over {','.join(axes)} of {size} B, {sent:g} B sent/device"
                     for kind, axes, size, sent in collectives) or "none"


def measure_matmul(x_specs, w_specs, mesh, x_shape=(8, 6), w_shape=(6, 4)):
    """Multiply DTensors of the given layouts on ``mesh`` and measure what it cost, beside the prediction.

    The forward product runs eagerly, the backward pass under a ``GradientTape`` with ``dy`` of
    ones in ``y``'s layout; each runs under the profiler (``collectives_run_by``).

    Args:
        x_specs, w_specs: sharding specs of ``x`` and ``w``: mesh axis names or ``"unsharded"``.
        mesh: a 2-or-more-device ``dtensor.Mesh`` (e.g. ``make_mesh([("batch", 4), ("model", 2)])``).
        x_shape, w_shape: global shapes of ``x`` and ``w``.

    Returns:
        A :class:`MatmulMeasurement`. Layouts DTensor cannot multiply give ``problems`` (the cost
        model's explanation of what to change), not an exception.

    Example:
        >>> from course_utils import make_mesh
        >>> mesh = make_mesh([("batch", 4), ("model", 2)])
        >>> m = measure_matmul(["batch", "model"], ["model", "unsharded"], mesh)
        >>> m.y_specs, m.forward, m.agrees
        (['batch', 'unsharded'], [('all-reduce', ('model',), 32, 32.0)], True)
    """
    x_specs, w_specs = list(x_specs), list(w_specs)
    try:
        predicted = matmul_cost(x_shape, x_specs, w_shape, w_specs, mesh)
    except (ValueError, NotImplementedError) as err:
        return MatmulMeasurement(x_specs, w_specs, [str(err)])
    x = pack_batch(tf.reshape(tf.range(float(x_shape[0] * x_shape[1])), x_shape), dtensor.Layout(x_specs, mesh))
    w = pack_batch(tf.ones(w_shape), dtensor.Layout(w_specs, mesh))
    y = tf.matmul(x, w)  # compiles the per-device program before it is traced
    forward = collectives_run_by(lambda: tf.matmul(x, w))
    dy = pack_batch(tf.ones(y.shape), dtensor.fetch_layout(y))
    with tf.GradientTape(persistent=True) as tape:  # persistent: gradients are taken twice
        tape.watch([x, w])
        y = tf.matmul(x, w)
    dx, dw = tape.gradient(y, [x, w], output_gradients=dy)
    backward = collectives_run_by(lambda: tape.gradient(y, [x, w], output_gradients=dy))
    held = {name: max(bytes_per_device(t).values()) for name, t in zip(HELD, (x, w, y, dx, dw))}
    return MatmulMeasurement(x_specs, w_specs, [], predicted, dtensor.fetch_layout(y).sharding_specs,
                             _measured(forward), _measured(backward), held)


def matmul_explorer(mesh, x_shape=(8, 6), w_shape=(6, 4)):
    """A predict-first widget: choose layouts of ``x`` and ``w``, predict, then reveal what ran.

    Args:
        mesh: the ``dtensor.Mesh`` to multiply on.
        x_shape, w_shape: global shapes of ``x`` and ``w``.

    Returns:
        A :class:`MatmulExplorer` (an ``ipywidgets.VBox``).

    Example:
        >>> from course_utils import make_mesh
        >>> explorer = matmul_explorer(make_mesh([("batch", 4), ("model", 2)]))  # shown as a cell's last line
        >>> explorer.measurement is None  # nothing is measured until the learner reveals it
        True
    """
    return MatmulExplorer(mesh, tuple(x_shape), tuple(w_shape))


class MatmulExplorer(widgets.VBox):
    """The widget made by :func:`matmul_explorer`: layouts, a prediction, and the revealed run."""

    def __init__(self, mesh, x_shape, w_shape):
        super().__init__()
        self.mesh, self.x_shape, self.w_shape = mesh, x_shape, w_shape
        specs = [dtensor.UNSHARDED, *mesh.dim_names]
        menu = lambda label, value=dtensor.UNSHARDED: widgets.Dropdown(
            options=specs, value=value, description=label, layout=widgets.Layout(width="190px"),
            style={"description_width": "70px"})
        self.x_menus = [menu(f"x axis {i}") for i in range(2)]
        self.w_menus = [menu(f"w axis {i}") for i in range(2)]
        self.x_menus[0].value = mesh.dim_names[0]
        self.y_guess = widgets.Dropdown(options=[str(list(p)) for p in itertools.product(specs, repeat=2)],
                                        description="y's layout", style={"description_width": "70px"})
        self.collective_guesses = {
            (kind, (axis,)): widgets.Checkbox(value=False, description=f"{kind} over {axis}", indent=False,
                                              layout=widgets.Layout(width="190px"))
            for kind in ("all-reduce", "all-gather") for axis in mesh.dim_names}
        self.reveal = widgets.Button(description="Reveal what DTensor runs", button_style="primary",
                                     layout=widgets.Layout(width="220px"))
        self.output = widgets.Output()
        self.measurement = None
        self.children = [
            widgets.HTML(f"Multiply <code>y = x @ w</code> with x of shape {x_shape} and w of shape {w_shape} "
                         f"on the mesh {mesh_text(zip(mesh.dim_names, mesh.shape()))}. Choose the layouts, "
                         f"<b>predict</b> y's layout and the forward collectives, then reveal."),
            widgets.HBox(self.x_menus + self.w_menus), self.y_guess,
            widgets.HTML("Forward collectives you expect (tick none for no communication):"),
            widgets.HBox(list(self.collective_guesses.values())), self.reveal, self.output]
        for widget in self.x_menus + self.w_menus:
            widget.observe(self._hide, names="value")
        self.reveal.on_click(lambda _: self.show())
        self._hide()

    def _repr_mimebundle_(self, **kwargs):
        """The widget, and for a page without a kernel (the course's website) its question, not its answer."""
        bundle = super()._repr_mimebundle_(**kwargs)
        x_specs, w_specs = [m.value for m in self.x_menus], [m.value for m in self.w_menus]
        bundle["text/html"] = static_state_html(
            f"x {list(self.x_shape)} with layout {x_specs}, w {list(self.w_shape)} with layout {w_specs}",
            f"<p>Predict y's layout and the forward collectives of <code>y = x @ w</code> on the mesh "
            f"{html.escape(mesh_text(zip(self.mesh.dim_names, self.mesh.shape())))}; the running notebook "
            f"reveals what DTensor runs.</p>")
        return bundle

    @property
    def prediction(self):
        """The predicted ``y`` layout and set of ``(kind, axes)`` collectives, as currently chosen."""
        return self.y_guess.value, {key for key, box in self.collective_guesses.items() if box.value}

    def _hide(self, _change=None):
        self.measurement = None
        self.output.outputs = ()
        self.output.append_display_data(_Html("<i>Predict first, then press Reveal.</i>"))

    def show(self):
        """Measure the chosen layouts, compare with the prediction, and show both."""
        self.measurement = measure_matmul([m.value for m in self.x_menus], [m.value for m in self.w_menus],
                                          self.mesh, self.x_shape, self.w_shape)
        self.output.outputs = ()
        if self.measurement.ok:
            y_guess, collectives_guess = self.prediction
            ran = {(kind, axes) for kind, axes, _, _ in self.measurement.forward}
            marks = [("y's layout", y_guess == str(self.measurement.y_specs)),
                     ("forward collectives", collectives_guess == ran)]
            self.output.append_display_data(_Html(" &nbsp; ".join(
                f"{what}: {'✓ right' if right else '✗ not what ran'}" for what, right in marks)))
        self.output.append_display_data(self.measurement)
        return self.measurement


class _Html:
    def __init__(self, text):
        self.text = text

    def _repr_html_(self):
        return self.text
