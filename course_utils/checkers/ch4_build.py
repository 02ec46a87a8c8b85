"""Chapter 4 · the build-and-measure exercise: a product built to a memory budget (exercise 6).

``collect`` calls the learner's ``sharded_product`` on the three cases with x and w drawn from the
check's seed and sends what it returned; ``judge`` measures the checker's own product for the layouts
it got (``_reference_measure``), prices the layouts within the budget (``reference_cheapest_layouts``)
and compares y with NumPy's x @ w for the same seed.
"""
import math
import re

from .answers import (UNSHARDED, as_collective, global_numpy, layout_of, logical_cpus, mesh_dims, quiet_tensorflow,
                      short_error, specs)
from ..costs import matmul_cost
from ..meshes import mesh_text
from .core import Exercise, Feedback
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
    from tensorflow.experimental import dtensor

    cpus = logical_cpus()
    size = math.prod(n for _, n in dims)
    if len(cpus) < size:
        raise RuntimeError(f"the checker needs {size} logical CPUs and this kernel has {len(cpus)}: run the "
                           f"notebook's first cell (configure_virtual_cpus(8)) in a fresh kernel.")
    return dtensor.create_mesh(list(dims), devices=cpus[:size])


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


_COLLECTIVE_TEXT = re.compile(r"^\s*(all[\s_-]*reduce|all[\s_-]*gather|reduce[\s_-]*scatter)\s*(?:over|along|across|on|\(|,|:)?"
                              r"\s*(?:the\s+)?\(?\s*['\"]?(\w+)['\"]?\s*,?\s*\)?\s*(?:(?:mesh\s+)?axis)?\s*\)?\s*$",
                              re.IGNORECASE)


def read_collective(raw):
    """What :func:`.answers.as_collective` reads, and a collective written as text: 'all-reduce over model',
    'AllReduce(batch)', "all_gather('model')", 'reduce-scatter, batch'."""
    if isinstance(raw, str):
        found = _COLLECTIVE_TEXT.match(raw)
        if found:
            return as_collective((found[1], found[2]))
    return as_collective(raw)


def _predicted(raw):
    """A prediction as a sorted tuple of (kind, mesh axes) pairs, () for no collective; None when unreadable.

    Reads what :func:`as_collective` reads ('none', None, (), [], ('all-reduce', 'model'),
    ('all-reduce', ('model',)), [('all-reduce', 'model')]) and lists (or sets) of several pairs.
    """
    if isinstance(raw, (set, frozenset)):
        raw = sorted(raw, key=repr)
    if raw is None or isinstance(raw, str) or not isinstance(raw, (list, tuple)) or not raw or isinstance(raw[0], str):
        one = read_collective(raw)
        if one is None or one == "none":
            return None if one is None else ()
        items = [one]
    else:
        items = [read_collective(item) for item in raw]
        if any(item is None or item == "none" for item in items):
            return None
    return tuple(sorted((kind, (axes,) if isinstance(axes, str) else tuple(axes)) for kind, axes in items))


def _is_measurement(raw):
    items = raw if isinstance(raw, (list, tuple)) else [raw]
    return any(hasattr(item, "kind") and hasattr(item, "group_size") for item in items)


def _as_layout(raw, mesh, name):
    """A dtensor.Layout on ``mesh`` from a Layout, a list of sharding specs or a placed DTensor; ValueError if not."""
    from tensorflow.experimental import dtensor

    layout = raw if isinstance(raw, dtensor.Layout) else layout_of(raw) if hasattr(raw, "dtype") else None
    if layout is None and isinstance(raw, (list, tuple)) and raw and all(isinstance(s, str) for s in raw):
        layout = dtensor.Layout(list(raw), mesh)
    if layout is None:
        raise ValueError(f"{name} should be a dtensor.Layout (or its list of sharding specs), not "
                         f"{type(raw).__name__} {raw!r:.60}.")
    if len(specs(layout)) != 2:
        raise ValueError(f"{name} {specs(layout)} has {len(specs(layout))} sharding spec(s); a matrix has 2 axes.")
    if layout.mesh != mesh:
        raise ValueError(f"{name} lives on a mesh {mesh_text(mesh_dims(layout.mesh))}, not on the mesh the checker "
                         f"passed ({mesh_text(mesh_dims(mesh))}): build the layouts on the function's mesh argument.")
    return layout


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


def _product_placed(placed, want):
    """Whether one of the host values a function placed (``placed``, arrays) is x @ w (``want``) or a block of it."""
    import numpy as np

    for value in placed if isinstance(placed, list) else []:
        value = np.asarray(value, dtype="float64")
        if value.ndim != 2 or 0 in value.shape or any(n % m for n, m in zip(want.shape, value.shape)):
            continue
        rows, columns = value.shape
        for i in range(0, want.shape[0], rows):
            for j in range(0, want.shape[1], columns):
                if np.allclose(value, want[i:i + rows, j:j + columns], rtol=1e-4, atol=1e-4):
                    return True
    return False


def _raised_text(raised, text, case):
    """What the checker says about an exception of the learner's function (``text``: its whole message)."""
    _, dims, x_shape, w_shape, _ = case
    said = f"your function raised {raised}{'' if raised.endswith('.') else '.'}"
    text = text.lower()
    if "divid" in text:
        sizes = dict(dims)
        named = [axis for axis in sizes if f"'{axis}'" in text] or list(sizes)
        axes = (("x", x_shape, 0, "examples"), ("x", x_shape, 1, "features"), ("w", w_shape, 0, "rows (features)"),
                ("w", w_shape, 1, "columns (units)"))
        undivided = [(axis, index, shape[index], f"{what}'s {shape[index]} {words}") for axis in named
                     for what, shape, index, words in axes if shape[index] % sizes[axis]]
        said_axis = re.search(r"axis (\d+) has size (\d+)", text)  # pack_batch's words: the axis and its size
        if said_axis:
            undivided = [item for item in undivided
                         if (item[1], item[2]) == (int(said_axis[1]), int(said_axis[2]))] or undivided
        undivided = [(axis, words) for axis, _, _, words in undivided]
        if named == ["batch"] and not x_shape[0] % sizes["batch"]:
            on_w = [text for axis, text in undivided if text.startswith("w")]
            said += (f" The mesh the checker passes has 'batch' of size {sizes['batch']}, which divides x's "
                     f"{x_shape[0]} examples: it does not divide {' or '.join(on_w) or 'an axis of w'}. Is w split "
                     f"over 'batch'? 'batch' splits the data; a weight is split over 'model' or replicated."
                     if on_w else
                     f" The mesh the checker passes has 'batch' of size {sizes['batch']}, which divides x's "
                     f"{x_shape[0]} examples: are your layouts on that mesh?")
        else:
            here = "; ".join(f"'{axis}' (size {sizes[axis]}) does not divide {' or '.join(t for a, t in undivided if a == axis)}"
                             for axis in named if any(a == axis for a, _ in undivided))
            said += (f" A sharded axis must be divisible by the size of its mesh axis, on the mesh the checker "
                     f"passes{': here ' + here if here else ''}. Look at the sizes before you choose which axis "
                     f"to split.")
    elif "non-replicated" in text:
        said += (" Only a replicated DTensor has one value that .numpy() can return: return the "
                 "DTensor y itself (the checker gathers its global value).")
    return said


def _prediction_hint(found):
    """(what is wrong, the answer) about a prediction that differs from the run, or None when it agrees."""
    raw, run = found["prediction"], found["run"]
    case, ran = _case_text(found["case"]), run["runs"]
    product = f"x {_specs_text(found['x_specs'])} @ w {_specs_text(found['w_specs'])}"
    reveal = f"It ran {_runs_text(ran)}."
    if _is_measurement(raw):
        return (f"{case}: collective holds what collectives_run_by measured. Your function should predict it from "
                f"the two layouts, before anything runs: the checker does the measuring.", "")
    given = _predicted(raw)
    if given is None:
        return (f"{case}: give the prediction as 'none' (or None) or a pair such as ('all-reduce', 'batch') (a list "
                f"of pairs for several), got {raw!r:.60}.", "")
    if given == ran:
        return None
    if not ran:
        return (f"{case}: you predicted {_runs_text(given)} for {product}: does any device hold only part of the "
                f"contracted axis?", reveal)
    x_specs, w_specs = found["x_specs"], found["w_specs"]
    if not given and x_specs[1] == w_specs[0] == UNSHARDED and x_specs[0] == w_specs[1] != UNSHARDED:
        return (f"{case}: you predicted no collective, but in {product} one mesh axis, {x_specs[0]!r}, splits both x's "
                f"examples and w's columns: a device holds some examples and some columns, yet y needs every example "
                f"times every column. Can it compute the block of y it must hold from what it holds?", reveal)
    if not given:
        return (f"{case}: you predicted no collective, but in {product} some device holds only part of the "
                f"contracted axis, so it cannot finish alone.", reveal)
    if len(given) == 1 and len(ran) == 1 and given[0][1] != ran[0][1]:
        return (f"{case}: you predicted {_runs_text(given)} for {product}: which mesh axis splits the contracted "
                f"axis?", reveal)
    if len(given) == 1 and len(ran) == 1:
        one_operand = (found["x_specs"][1] == "model") != (found["w_specs"][0] == "model")
        why = (" Here only one operand splits the contracted axis: DTensor moves no data it can avoid moving, and "
               "cutting the matching part of the whole operand on each device costs nothing."
               if one_operand and given[0][0] == "all-gather" else "")
        return (f"{case}: you predicted {_runs_text(given)} for {product}, which is not what it ran. After each "
                f"device multiplies the blocks it holds, does it hold partial sums that others complete, or could it "
                f"not multiply before an operand was made whole?{why}",
                f"The right mesh axis, another collective. {reveal}")
    return f"{case}: you predicted {_runs_text(given)} for {product}; the run differs.", reveal


def _judge_communication_hint(found):
    """(what is wrong, the answer) when the product sends more than a layout within the budget needs."""
    least, cheapest = reference_cheapest_layouts(found["case"])
    run, x_specs, w_specs = found["run"], found["x_specs"], found["w_specs"]
    if run["sent"] <= least * (1 + 1e-9):
        return None
    if x_specs[1] == "model" and w_specs[1] == "model":
        why = ("x's features are split over 'model', but w, split on its units, needs them whole: they are "
               "gathered first.")
    elif "model" in (x_specs[1], w_specs[0]):
        why = ("the contracted axis (the features) is split over 'model', so each device holds partial sums to "
               "add.")
    elif "batch" in w_specs:
        why = "w is split over 'batch', which already splits x's examples: w's pieces must travel between devices."
    else:
        why = "it sends more than the budget requires."
    need = ("a layout within the budget needs no collective at all (see the chapter's cases 1 and 2)" if not least
            else f"a layout within the budget sends {least:g} B")
    answer = "Here: " + " or ".join(f"x {_specs_text(x)} @ w {_specs_text(w)}" for x, w in cheapest) + "."
    return (f"{_case_text(found['case'])}: x {_specs_text(x_specs)} @ w {_specs_text(w_specs)} ran "
            f"{_runs_text(run['runs'])} ({run['sent']:g} B sent per device): {why} But {need}.", answer)


class BudgetProduct(Exercise):
    title = "Build a product to a memory budget"
    points = 4
    hints = (
        "Three choices, each from a section of the chapter: what one device holds of w under a layout (its bytes "
        "divided by the size of each mesh axis that splits it), which splits the sizes allow (a mesh axis must "
        "divide the axis it splits), and what the product must exchange (is the contracted axis split?). Measure "
        "your function on the examples with bytes_per_device and collectives_run_by before you check it.",
        "Try w's layouts from the one that sends least to the one that sends most, and take the first that fits "
        "the budget and that 'model' divides: w replicated (no collective); w split on its units (columns) over "
        "'model' (no collective, 1/m of w per device); w split on its features (rows, the contracted axis) over "
        "'model' (1/m of w; partial sums to add). Keep x's examples over 'batch'; predict from the layout you chose.",
        "When only w's rows can be split, w_specs = ['model', U] and the prediction is ('all-reduce', 'model'): "
        "each device multiplies its features of x (already split, x_specs = ['batch', 'model'], or cut for free "
        "from a whole x) by its rows of w, and the partial sums are added over 'model'. Nothing is gathered.",
    )

    def collect(self, sharded_product, seed=0):
        """Run ``sharded_product`` on the three cases, x and w drawn from ``seed``.

        Crosses: ``{"callable": False, "type": name}`` for an answer that is not a function, else
        ``{"callable": True, "measures": ..., "cases": [...]}``: the tools of MEASURING_TOOLS the function called while
        it ran (see :func:`.reach.calls_recorded`), and one dict per case of :data:`BUDGET_CASES`, in order: the Mesh
        passed and
        what the function returned or raised (see :func:`_collect_case`; DTensors, Layouts, lists of specs and
        predictions cross as data).
        """
        if not callable(sharded_product):
            return {"callable": False, "type": type(sharded_product).__name__}
        from .. import packing  # noqa: F401 - loaded, so that calls_recorded watches pack_batch

        with quiet_tensorflow(), calls_recorded(MEASURING_TOOLS) as measures:
            cases = [_collect_case(sharded_product, case, seed) for case in BUDGET_CASES]
        return {"callable": True, "measures": list(measures), "cases": cases}

    def _judge_case(self, given, case, seed):
        """The findings of one case from what collect sent: the checker runs its own product for the layouts
        given (``_reference_measure``) and compares y with NumPy's x @ w for ``seed``."""
        from tensorflow.experimental import dtensor

        from ..packing import check_fits

        _, dims, x_shape, w_shape, _ = case
        mesh, found = given["mesh"], {"case": case}
        if not isinstance(mesh, dtensor.Mesh) or mesh_dims(mesh) != [tuple(dim) for dim in dims]:
            raise ValueError(f"the data of case {case[0]} names another mesh")
        if "error" in given:
            found["error"] = _raised_text(str(given["error"]), str(given.get("error_text", "")), case)
            return found
        if "returned" in given:
            found["error"] = (f"your function returned {str(given['returned'])[:120]}; return four values: "
                              f"y, x_layout, w_layout, collective.")
            return found
        y, x_raw, w_raw, found["prediction"] = (given[key] for key in RESULT_KEYS)
        try:
            x_layout, w_layout = _as_layout(x_raw, mesh, "x_layout"), _as_layout(w_raw, mesh, "w_layout")
            check_fits(x_shape, x_layout)
            check_fits(w_shape, w_layout)
        except ValueError as err:
            found["error"] = str(err)
            return found
        x_specs, w_specs = specs(x_layout), specs(w_layout)
        try:
            run = _reference_measure(case, mesh, x_specs, w_specs)
        except Exception as err:
            found["error"] = (f"x {_specs_text(x_specs)} @ w {_specs_text(w_specs)} fails on the mesh: "
                              f"{short_error(err)}")
            return found
        found.update(x_specs=x_specs, w_specs=w_specs, run=run)
        x, w = _case_data(case, seed)
        want = x.astype("float64") @ w.astype("float64")
        found["value"] = (self._judge_y(y, mesh, run, want) if not _product_placed(given.get("placed"), want) else
                          "y is x @ w computed on the host and then placed on the mesh; place x and w, and let the "
                          "product run on the mesh.")
        return found

    @staticmethod
    def _judge_y(y, mesh, run, want):
        """None when y is the DTensor of x @ w that the returned layouts give (or its replicated copy), else why not."""
        import numpy as np

        layout = layout_of(y) if hasattr(y, "dtype") else None
        if layout is None:
            if isinstance(y, (list, tuple)) and y and all(hasattr(piece, "shape") for piece in y):
                return (f"y is a list of {len(y)} per-device blocks; return the DTensor the product gave (the checker "
                        f"gathers its global value itself).")
            try:
                value = global_numpy(y)
            except Exception:
                return f"y should be the DTensor your product returned, not {type(y).__name__}."
            if tuple(value.shape) == run["block"] and run["block"] != want.shape:
                return (f"y has shape {tuple(value.shape)}: one device's block of x @ w {want.shape}, not the whole "
                        f"product. A sharded result is whole on no single device; return the DTensor y and let the "
                        f"checker gather it.")
            return ("y is a host value, not the DTensor your product returned on the mesh: return y itself "
                    "(the checker gathers its global value).")
        if layout.mesh != mesh:
            return f"y lives on a mesh {mesh_text(mesh_dims(layout.mesh))}, not on the mesh the checker passed."
        if specs(layout) != run["y_specs"] and not layout.is_fully_replicated():
            return (f"y's layout {_specs_text(specs(layout))} is not the layout x_layout @ w_layout gives "
                    f"({_specs_text(run['y_specs'])}): return the layouts you placed x and w with.")
        value = global_numpy(y)
        if value.shape != want.shape:
            return f"y has shape {value.shape}; x @ w has shape {want.shape}."
        if not np.allclose(value, want, rtol=1e-4, atol=1e-4):
            return (f"y's global value differs from x @ w (by up to {np.max(np.abs(value - want)):.3g}): check how "
                    f"x and w were placed (dtensor.pack wants one block per device, in the mesh's device order).")
        return None

    def judge(self, data, seed=0):
        """Feedback on what :meth:`collect` sent: per case the error or the layouts, y and the prediction."""
        fb = Feedback()
        if not data["callable"]:
            fb.wrong(f"sharded_product should be a function (mesh, x, w, budget) -> (y, x_layout, w_layout, "
                     f"collective), not a {str(data['type'])[:60]}.")
            return fb
        with quiet_tensorflow():
            cases = [self._judge_case(given, case, seed)
                     for given, case in zip(data["cases"], BUDGET_CASES, strict=True)]
        for found in cases:
            if "error" in found:
                fb.wrong(f"{_case_text(found['case'])}: {found['error']}")
        ran = [found for found in cases if "run" in found]
        every = len(ran) == len(cases)
        names = ", ".join(found["case"][0] for found in ran)
        if not ran:
            return fb

        wrong_values = [found for found in ran if found["value"]]
        for found in wrong_values:
            fb.wrong(f"{_case_text(found['case'])}: {found['value']}")
        if not wrong_values:
            fb.right(f"y: the DTensor of x @ w, equal to NumPy's, in case{'s' if len(ran) > 1 else ''} {names}")

        over = []
        for found in ran:
            x_specs, w_specs, held, budget = found["x_specs"], found["w_specs"], found["run"]["held"], found["case"][4]
            if x_specs[0] != "batch":
                over.append(found)
                fb.wrong(f"{_case_text(found['case'])}: x {_specs_text(x_specs)}: x is a batch of examples; keep "
                         f"its examples (axis 0) split over 'batch'.")
            elif held > budget:
                over.append(found)
                on_batch = (" w is split over 'batch', the axis of the data: in this exercise a weight is split "
                            "over 'model' or replicated." if "batch" in w_specs else "")
                fb.wrong(f"{_case_text(found['case'])}: w {_specs_text(w_specs)} puts {held} B of w on a device "
                         f"(bytes_per_device), over the budget. Each mesh axis that splits an axis of w divides "
                         f"what one device holds.{on_batch}",
                         answer="Split w over 'model', on an axis that 'model' divides.")
        if every and not over:
            held = ", ".join(f"{found['run']['held']} B" for found in ran)
            fb.right(f"memory: x's examples over 'batch', and w within the budget in every case (bytes_per_device: "
                     f"{held} of w on a device)")

        too_much = [(found, hint) for found in ran if found not in over
                    for hint in [_judge_communication_hint(found)] if hint]
        for found, (text, answer) in too_much:
            fb.wrong(text, answer=answer)
        if every and not over and not too_much:
            fb.right("communication: each product sends as little as a layout within the budget can ("
                     + ", ".join(f"{found['case'][0]}: {found['run']['sent']:g} B" for found in ran) + ")")
        elif over and not too_much:
            fb.wrong("communication: judged only where x's examples are over 'batch' and w is within the budget; "
                     "fix those first.")

        measures = [str(name)[:60] for name in data.get("measures", [])][:3] if type(data.get("measures")) is list \
            else []
        wrong_predictions = [(found, hint) for found in ran for hint in [_prediction_hint(found)] if hint]
        for found, (text, answer) in wrong_predictions:
            fb.wrong(text, answer=answer)
        if measures:
            fb.wrong(f"prediction: sharded_product calls {', '.join(measures)}, so its collective is a measurement, "
                     f"not a prediction. Predict it from the two layouts you chose, before anything runs: the checker "
                     f"does the measuring.")
        elif every and not wrong_predictions:
            fb.right("prediction: what each product ran (collectives_run_by): "
                     + "; ".join(f"{found['case'][0]}: {_runs_text(found['run']['runs'])}" for found in ran))
        elif not wrong_predictions:
            fb.wrong("prediction: right in the cases that ran; it counts once your function runs in every case.")
        return fb
