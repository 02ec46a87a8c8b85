"""Chapter 4 · the build-and-measure exercise: a product built to a memory budget (exercise 6).

``collect`` calls the learner's ``sharded_product`` on the three cases of ``ch4_budget_cases.py`` with x and w drawn
from the check's seed and sends what it returned; ``judge`` measures the checker's own product for the layouts
it got (``_reference_measure``), prices the layouts within the budget (``reference_cheapest_layouts``) and compares
y with NumPy's x @ w for the same seed; ``ch4_budget_hints.py`` reads the returned layouts and prediction and says
what is wrong with them.
"""
from .answers import global_numpy, layout_of, mesh_dims, quiet_tensorflow, short_error, specs
from ..meshes import mesh_text
from .core import Exercise, Feedback
from .reach import calls_recorded
from .ch4_budget_cases import (BUDGET_CASES, MEASURING_TOOLS, RESULT_KEYS, _case_data, _case_text, _collect_case,
                               _runs_text, _specs_text)
from .ch4_budget_hints import _as_layout, _prediction_hint, _raised_text


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
        from .ch4_budget_cases import _reference_measure  # here: the graded sandbox's copy has no _reference ones

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
        from .ch4_budget_hints import _judge_communication_hint  # here: the graded sandbox's copy has no _judge ones

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
