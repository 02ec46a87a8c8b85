"""Chapter 4 · exercise 6's cases and their measurement (the collecting side, and what the judge measures): the three
cases (mesh, shapes, budget) and their text, the layouts that fit a budget at the least cost
(``reference_cheapest_layouts``), the checker's own run of a product (``_reference_measure``; the graded sandbox's
copy of this module has neither) and the run of the learner's ``sharded_product`` on one case (:func:`_collect_case`).
``ch4_build.BudgetProduct`` collects and judges with them."""
import math

from .answers import UNSHARDED, global_numpy, layout_of, mesh_on_first_cpus, short_error, specs
from ..costs import matmul_cost
from ..meshes import mesh_text
from .reach import calls_recorded


BUDGET_CASES = (  # (name, mesh axes, x's shape, w's shape, budget: the bytes of w one device may hold)
    ("A", (("batch", 2), ("model", 4)), (6, 8), (8, 6), 200),     # w (192 B) fits whole; 'model' does not divide 6
    ("B", (("batch", 4), ("model", 2)), (4, 6), (6, 10), 120),    # w (240 B) must be split; 'model' divides both axes
    ("C", (("batch", 2), ("model", 4)), (4, 12), (12, 10), 160),  # w (480 B) must be split; 'model' does not divide 10
)
X_CHOICES = (["batch", UNSHARDED], ["batch", "model"])  # x's examples stay over 'batch'
W_CHOICES = ([UNSHARDED, UNSHARDED], [UNSHARDED, "model"], ["model", UNSHARDED])
RESULT_KEYS = ("y", "x_layout", "w_layout", "collective")
MEASURING_TOOLS = ("course_utils.profiling:collectives_run_by",)  # a prediction made with these is a measurement
PLACING_TOOLS = ("course_utils.packing:pack_batch", "tensorflow.dtensor.python.api:copy_to_mesh",
                 "tensorflow.dtensor.python.api:pack")  # what puts a host value on the mesh: y must not be one
_MEASURED = {}  # (case, x specs, w specs) -> what the checker's own run of that product showed
_PRODUCT = []  # the checker's tf.function product, made on first use


def _case_text(case):
    name, dims, x_shape, w_shape, budget = case
    return (f"case {name} (mesh {mesh_text(dims)}, x {x_shape}, w {w_shape} = {4 * math.prod(w_shape)} B, "
            f"budget {budget} B)")


def _specs_text(layout_specs):
    return "[" + ", ".join("U" if s == UNSHARDED else repr(s) for s in layout_specs) + "]"


def _runs_text(pairs):
    return " and ".join(f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} over {', '.join(repr(a) for a in axes)}"
                        for kind, axes in pairs) or "no collective"


def reference_cheapest_layouts(case):
    """The fewest bytes one device sends in the forward product among the layouts that fit the case's budget,
    and the layouts ``[(x specs, w specs), ...]`` that send that few.

    The layouts tried keep x's examples over 'batch' and replicate w or split it over 'model'; the bytes are
    the cost model's (``matmul_cost``) for what DTensor runs on CPU, which the tests compare with the run.
    """
    _, dims, x_shape, w_shape, budget = case
    priced = []
    for x_specs in X_CHOICES:
        for w_specs in W_CHOICES:
            try:
                cost = matmul_cost(x_shape, x_specs, w_shape, w_specs, list(dims))
            except ValueError:  # a mesh axis that does not divide the axis it would split
                continue
            if cost.bytes_held["w"] <= budget:
                priced.append((sum(c.bytes_sent_on_cpu for c in cost.collectives), x_specs, w_specs))
    least = min(sent for sent, _, _ in priced)
    return least, [(x, w) for sent, x, w in priced if sent == least]


def _case_mesh(dims):
    """The case's mesh on this process's first logical CPUs."""
    return mesh_on_first_cpus(dims)


def _case_data(case, seed=0):
    """x and w of a case, drawn from the check's seed (float32)."""
    import numpy as np

    name, _, x_shape, w_shape, _ = case
    rng = np.random.default_rng([seed, ord(name)])
    return rng.standard_normal(x_shape).astype("float32"), rng.standard_normal(w_shape).astype("float32")


def _product():
    import tensorflow as tf

    if not _PRODUCT:
        _PRODUCT.append(tf.function(tf.matmul))
    return _PRODUCT[0]


def _reference_measure(case, mesh, x_specs, w_specs):
    """What the checker's own run of x @ w (in a tf.function) shows for these layouts, measured once per case.

    Returns a dict: ``held`` (the most bytes of w one device holds, ``bytes_per_device``), ``y_specs`` and
    ``block`` (y's layout and one device's block shape) and ``runs`` (sorted (kind, axes) of
    ``collectives_run_by``) with ``sent``, the bytes each device sends by the ring formula.
    """
    key = (case[0], tuple(x_specs), tuple(w_specs))
    if key not in _MEASURED:
        from tensorflow.experimental import dtensor

        from ..memory import bytes_per_device
        from ..packing import pack_batch
        from ..profiling import collectives_run_by

        x, w = _case_data(case)
        x_on = pack_batch(x, dtensor.Layout(list(x_specs), mesh))
        w_on = pack_batch(w, dtensor.Layout(list(w_specs), mesh))
        product = _product()
        y = product(x_on, w_on)
        runs = collectives_run_by(lambda: product(x_on, w_on))
        _MEASURED[key] = {
            "held": max(bytes_per_device(w_on).values()),
            "y_specs": specs(dtensor.fetch_layout(y)),
            "block": tuple(dtensor.unpack(y)[0].shape),
            "runs": tuple(sorted((run.kind, tuple(run.axes)) for run in runs)),
            "sent": sum(run.bytes_sent_per_device for run in runs),
        }
    return _MEASURED[key]



def _collect_case(sharded_product, case, seed):
    """Call the learner's function on one case; what it gave, as plain data (nothing is judged here).

    A dict with ``mesh`` (the Mesh passed), ``placed`` (the host values it put on the mesh with PLACING_TOOLS, as
    arrays) and either ``error`` and ``error_text`` (the exception, short
    and in full, when the function raised), ``returned`` (the type and start of a result that is not
    four values) or ``y``, ``x_layout``, ``w_layout`` and ``collective`` as the function returned them.
    """
    _, dims, _, _, budget = case
    mesh = _case_mesh(dims)
    x, w = _case_data(case, seed)
    found = {"mesh": mesh, "placed": []}

    def host_values(name, args, kwargs):  # what the function puts on the mesh from the host
        values = args[0] if name == "pack" and args else args[:1]
        for value in list(values)[:16]:
            if layout_of(value) is None and len(found["placed"]) < 64:
                try:
                    found["placed"].append(global_numpy(value))
                except Exception:  # a symbolic tensor (a tf.function tracing): nothing to look at
                    pass
    try:
        with calls_recorded(PLACING_TOOLS, on_call=host_values):
            out = sharded_product(mesh, x.copy(), w.copy(), budget)
    except Exception as err:
        found["error"] = short_error(err, limit=260).split(" Input tensor is:")[0]  # not the DTensor's dump
        found["error_text"] = " ".join(str(err).split())[:20000]
        return found
    if isinstance(out, dict) and all(key in out for key in RESULT_KEYS):
        out = [out[key] for key in RESULT_KEYS]
    if not isinstance(out, (list, tuple)) or len(out) != 4:
        found["returned"] = f"{type(out).__name__} {out!r:.80}"
        return found
    found.update(zip(RESULT_KEYS, out))
    return found

