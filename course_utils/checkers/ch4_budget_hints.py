"""Chapter 4 · exercise 6's answers read and its aimed hints (the judging side): a returned layout and a predicted
collective read (:func:`read_collective`, which exercise 4 in ``ch4.py`` uses too), and what is wrong with an error
the learner's function raised, a prediction that differs from the run, or a product that sends more than a layout
within the budget needs. ``ch4_build.BudgetProduct.judge`` says them."""
import re

from .answers import UNSHARDED, as_collective, layout_of, mesh_dims, specs
from ..meshes import mesh_text
from .ch4_budget_cases import _case_text, _runs_text, _specs_text


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
    from .ch4_budget_cases import reference_cheapest_layouts  # here: the graded sandbox's copy has no reference ones

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

