"""Chapter 4 · DTensor meshes and layouts: the exercises' graders and hints (exercises 1 and 2 in ``ch4_layouts.py``,
exercise 6 in ``ch4_build.py``: its cases and their measurement in ``ch4_budget_cases.py``, reading its answers and
its aimed hints in ``ch4_budget_hints.py``); 3, 4 and 5 here."""
import itertools
import math

from .answers import UNSHARDED, as_bytes, as_int, as_shape, grade_items, is_placeholder, only_ellipses
from ..costs import matmul_cost
from . import ch4_texts
from .core import Exercise, Feedback, chapter
from .variants import CasesInRandomOrder
from .ch4_build import BudgetProduct
from .ch4_budget_hints import read_collective
from .ch4_layouts import MeshAndLayout, PackByHand, by_label

def unit_slip(raw, right):
    """What is wrong when ``raw`` is the number of bytes ``right`` written in MiB, KiB or MB (rounded to three
    digits or so), else None."""
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    for unit, size in (("MiB", 2**20), ("KiB", 2**10), ("MB", 10**6)):
        if right and math.isclose(value * size, right, rel_tol=5e-3):
            return f"that looks like {unit}: give bytes (1 {unit} = {size:,} bytes; Python can multiply for you)."
    return None


# Exercise 3: the block one device holds, and how many devices hold each block, of a rank-3 tensor on a mesh the
# chapter did not draw (visualize_sharding and explore_layout print both: the prediction counts only before they are
# imported or used). It varies per student (:mod:`.variants`): the tensor's shape and the four layouts.
SHARD_MESH = [("batch", 2), ("model", 4)]  # fixed: the 8 CPUs, and batch=4 x model=2 is the chapter's mesh
T_SHAPE = (8, 12, 16)
SHARD_LAYOUTS = {"a": ["batch", UNSHARDED, UNSHARDED], "b": [UNSHARDED, "model", "batch"],
                 "c": ["model", UNSHARDED, UNSHARDED], "d": [UNSHARDED, UNSHARDED, UNSHARDED]}
SHARD_TOOLS = ("course_utils.viz:visualize_sharding", "course_utils.explorer:explore_layout",
               "course_utils.explorer:layout_explorer")
SHARD_SIZES = (4, 8, 12, 16, 20, 24, 32)  # a drawn tensor's axis sizes: each divisible by every mesh axis's size
SHARD_SPECS = [list(s) for s in itertools.product((UNSHARDED, "batch", "model"), repeat=3)
               if s.count("batch") <= 1 and s.count("model") <= 1]  # the 13 layouts of a rank-3 tensor on this mesh


def _reference_shards(params=None):
    """Exercise 3's answer: the shard shape and the number of copies of each layout of ``params`` (default: the
    self-study variant, SHARD_LAYOUTS of T_SHAPE) on SHARD_MESH."""
    params = params or ShardShapes.defaults
    sizes = dict(SHARD_MESH)
    devices = math.prod(sizes.values())
    found = {}
    for key, layout_specs in params["layouts"].items():
        shape = tuple(n if spec == UNSHARDED else n // sizes[spec] for n, spec in zip(params["shape"], layout_specs))
        used = math.prod(sizes[spec] for spec in layout_specs if spec != UNSHARDED)
        found[key] = (shape, devices // used)
    return found


def _specs_text(layout_specs, unsharded="UNSHARDED", quote="'"):
    """``['batch', UNSHARDED, 'model']`` (or with other spellings, for code)."""
    return "[" + ", ".join(unsharded if s == UNSHARDED else f"{quote}{s}{quote}" for s in layout_specs) + "]"


class ShardShapes(Exercise):
    title = "Predict shard shapes and copies"
    points = 4
    revealed_by = SHARD_TOOLS
    defaults = {"shape": list(T_SHAPE), "layouts": SHARD_LAYOUTS}
    templates = {"c11": ch4_texts.SHARDS_QUESTION, "ch4-q3": ch4_texts.SHARDS_SOLUTION, "c13b": ch4_texts.SHARDS_WATCH}
    hints = (
        "Divide each tensor axis by the size of the mesh axis named in its spec. This mesh is not the chapter's: "
        "which axis has 2 devices, which has 4?",
        "The number of copies of each shard is the product of the sizes of the mesh axes the layout does not use.",
    )

    @staticmethod
    def draw(rng):
        """A tensor shape and four layouts: one over 'batch' alone, one over both mesh axes, one over 'model' alone
        and one more, in a random order (so that shard shapes, and copies from 1 to 8, all come up)."""
        def one(assign):
            return [assign.get(axis, UNSHARDED) for axis in range(3)]

        first, second = rng.sample(range(3), 2)
        chosen = [one({rng.randrange(3): "batch"}), one({first: "batch", second: "model"}),
                  one({rng.randrange(3): "model"})]
        chosen.append(rng.choice([s for s in SHARD_SPECS if s not in chosen]))
        rng.shuffle(chosen)
        return {"shape": [rng.choice(SHARD_SIZES) for _ in range(3)], "layouts": dict(zip("abcd", chosen))}

    def text_values(self):
        layouts = self.params["layouts"]
        return {"shape": str(list(self.params["shape"])),
                "table": "\n".join(f"| **{key}** | `{_specs_text(s)}` |" for key, s in layouts.items()),
                "specs_code": "{" + ", ".join(f'"{key}": {_specs_text(s, "U", chr(34))}'
                                              for key, s in layouts.items()) + "}"}

    def reference_values(self):
        shards = _reference_shards(self.params)
        return {"shard_shapes": "{" + ", ".join(f'"{k}": {shape}' for k, (shape, _) in shards.items()) + "}",
                "copies": "{" + ", ".join(f'"{k}": {n}' for k, (_, n) in shards.items()) + "}"}

    def grade(self, shard_shapes, copies):
        fb = Feedback()
        layouts, t_shape = self.params["layouts"], tuple(self.params["shape"])
        shard_shapes, copies = by_label(shard_shapes, layouts), by_label(copies, layouts)
        for name, answer in (("shard_shapes", shard_shapes), ("copies", copies)):
            if not isinstance(answer, dict):
                fb.wrong(f"{name}: give a dict with the keys {list(layouts)}, not a {type(answer).__name__}.")
            elif sorted(answer) != sorted(layouts):
                fb.wrong(f"{name}: the keys are {list(layouts)}, got {sorted(answer)}.")
        if not isinstance(shard_shapes, dict) or not isinstance(copies, dict):
            return fb
        sizes = dict(SHARD_MESH)
        devices = math.prod(sizes.values())
        swapped_sizes = {"batch": sizes["model"], "model": sizes["batch"]}
        shards = _reference_shards(self.params)
        for key, layout_specs in layouts.items():
            shape, copy = shards[key]
            raw_shape, raw_copies = shard_shapes.get(key), copies.get(key)
            if is_placeholder(raw_shape) and is_placeholder(raw_copies):
                fb.wrong(f"{key}: not answered yet.")
                continue
            given_shape = as_shape(raw_shape)
            given_copies = int(raw_copies) if isinstance(raw_copies, str) and raw_copies.strip().isdigit() else \
                as_int(raw_copies)
            why = []
            if given_shape != shape:
                swapped = tuple(n // swapped_sizes[s] if s != UNSHARDED else n for n, s in zip(t_shape, layout_specs))
                if given_shape is None:
                    why.append(f"give the shard shape as a tuple of ints, got {raw_shape!r}")
                elif given_shape == t_shape and any(spec != UNSHARDED for spec in layout_specs):
                    why.append("that is the global shape; a sharded axis is divided by the size of its mesh axis")
                elif given_shape == swapped and swapped != shape:
                    why.append(f"you divided by the wrong mesh axis: on this mesh 'batch' has {sizes['batch']} "
                               f"devices and 'model' {sizes['model']} (the chapter's mesh had them the other way)")
                elif len(given_shape) != len(t_shape):
                    why.append(f"the tensor has {len(t_shape)} axes, so a shard has {len(t_shape)} too (an unsharded "
                               f"axis keeps its whole size)")
                else:
                    why.append(f"shape {given_shape} is not each global size divided by the size of the mesh axis "
                               f"named in its spec")
            if given_copies is None:
                why.append(f"give the number of copies as an int, got {raw_copies!r}")
            elif given_copies != copy and given_copies == devices // copy:
                why.append(f"{given_copies} is the number of DIFFERENT pieces; the question asks how many devices "
                           f"hold each one")
            elif given_copies != copy:
                why.append(f"{given_copies} copies is not {devices} devices / the number of distinct shards")
            if why:
                fb.wrong(f"{key} {layout_specs}: " + "; ".join(why) + ".")
            else:
                fb.right(f"{key} {layout_specs}: shard {shape}, {copy} cop{'y' if copy == 1 else 'ies'}")
        return fb


MATMUL_CASES = {  # exercise 4's cases: x's layout @ w's layout (x [8, 4], w [4, 8]), none of them the chapter's
    "a": "x ['model', U] @ w [U, U]",
    "b": "x ['model', U] @ w [U, 'batch']",
    "c": "x [U, 'batch'] @ w ['batch', U]",
    "d": "x ['batch', U] @ w ['model', U]",
    "e": "x ['batch', U] @ w ['batch', U]",
}


def _reference_collectives():
    """Exercise 4's answer: per case of MATMUL_CASES, the collective DTensor runs (measured in the tests), and why."""
    return {
        "a": ("none",
              "x is split by rows (over 'model') and w is replicated: each device multiplies its own rows of x by "
              "the whole w and gets its own rows of y, laid out ['model', U]. No communication."),
        "b": ("none",
              "each device has its rows of x (over 'model') with the whole contracted axis, and its columns of w "
              "(over 'batch'): it computes its own block of y, laid out ['model', 'batch']. No communication."),
        "c": (("all-reduce", "batch"),
              "both operands split the CONTRACTED axis k over 'batch': each device computes only part of every dot "
              "product, and the partial sums are added across 'batch': an all-reduce over 'batch'. The name of a "
              "mesh axis does not decide its job; the tensor axis it splits does."),
        "d": (("all-reduce", "model"),
              "only w splits the contracted axis: DTensor takes the matching columns of x on each device (no "
              "communication for that), multiplies, and adds the partial sums: an all-reduce over 'model'."),
        "e": (("all-gather", "batch"),
              "'batch' splits x's rows AND w's rows (the contracted axis k): the device holding k-block j of w holds "
              "examples j, so no other device computes the rest of the sums for its examples; there are no partial "
              "sums to add. w must be made whole along k first: an all-gather of w over 'batch' (the gather FSDP "
              "pays, chapter 5), then each device multiplies locally."),
    }


def _reference_other_plans():
    """Case d has a second plan that gives the right y: gather w whole along k. DTensor does not run it."""
    return {"d": ("all-gather", "model")}


_KIND_NOTES = {  # per case, a question aimed at the case when the axis is right and the kind is not
    "c": " Here every device holds a k-block of both operands for the same output entries.",
    "e": " Here look at WHICH examples the devices holding the other k-blocks of w hold: could they finish the sums "
         "for this device's rows?",
}


CASE_SPECS = {  # exercise 4's cases as code: (x's specs, w's specs), U for UNSHARDED
    "a": '(["model", U], [U, U])', "b": '(["model", U], [U, "batch"])', "c": '([U, "batch"], ["batch", U])',
    "d": '(["batch", U], ["model", U])', "e": '(["batch", U], ["batch", U])'}
CASE_NOTES = {  # the solution's comment on each case
    "a": "rows over 'model', w whole: each device finishes its own rows",
    "b": "rows over 'model', columns over 'batch': k is whole on every device",
    "c": "both operands split k over 'batch': partial sums, added across 'batch'",
    "d": "DTensor slices x's columns locally (free), then adds the partial sums",
    "e": "'batch' splits x's examples and w's k: no partial sums to add; w gathered whole",
}


def _as_code(collective):
    return '"none"' if collective == "none" else f'("{collective[0]}", "{collective[1]}")'


class WhichCollective(CasesInRandomOrder, Exercise):
    title = "Which collective, over which mesh axis?"
    points = 5
    revealed_by = ("course_utils.profiling:collectives_run_by",)
    none_is_answer = True  # None, () and [] mean "no collective"; the placeholders are `...`
    # It varies per student (.variants) by the order of its cases: order[i] is the case shown as letter i.
    cases = MATMUL_CASES
    defaults = {"order": "abcde"}
    templates = {"c14": ch4_texts.COLLECTIVES_QUESTION, "ch4-q4": ch4_texts.COLLECTIVES_SOLUTION,
                 "c16w": ch4_texts.COLLECTIVES_WATCH}
    hints = (
        "y[i, j] = sum over k of x[i, k] * w[k, j]. Which tensor axis is summed over, and which mesh axis splits it "
        "in each operand? A mesh axis's name does not decide its job: 'batch' can split k too.",
        "No device needs the others when each holds the WHOLE contracted axis of what it multiplies. When "
        "partial sums over k are left on several devices, they must be added; when an operand must be whole "
        "along k but is split, it must be gathered first.",
        "The mesh axis of the collective is the one that splits the contracted axis k. In case {{d}}, DTensor "
        "moves no operand that it can avoid moving: cutting x's columns to match w's rows costs nothing. In case "
        "{{e}}, 'batch' splits x's examples too: the devices that hold the other k-blocks of w hold other examples.",
    )

    def text_values(self):
        shown = self._shown()
        rows = []
        for letter, case in shown.items():
            x_specs, w_specs = (s.replace('"', "'") for s in CASE_SPECS[case][1:-1].split(", [", 1))
            rows.append(f"| **{letter}** | `{x_specs}` | `[{w_specs}` |")
        entries = [f'"{letter}": {CASE_SPECS[case]}' for letter, case in shown.items()]
        return {**{case: letter for letter, case in shown.items()}, "table": "\n".join(rows),
                "cases_code": "{" + ", ".join(entries[:3]) + ",\n             " + ", ".join(entries[3:]) + "}"}

    def reference_values(self):
        truth = _reference_collectives()
        return {"answer_lines": "\n".join(f'    "{letter}": {(_as_code(truth[case][0]) + ",").ljust(27)}# '
                                          f'{CASE_NOTES[case]}' for letter, case in self._shown().items())}

    def unanswered(self, answer):
        return only_ellipses(answer)

    def grade(self, collectives):
        shown = self._shown()
        collectives_run = {letter: _reference_collectives()[key] for letter, key in shown.items()}
        expected = {key: truth for key, (truth, _) in collectives_run.items()}
        other_plans = {letter: plan for letter, key in shown.items()
                       for case, plan in _reference_other_plans().items() if key == case}

        def explain(key, given, raw):
            case, (truth, why) = MATMUL_CASES[shown[key]], collectives_run[key]
            if given is None:
                return (f"answer 'none' (or None, []) or a pair such as ('all-reduce', 'batch'), got {raw!r}.", "")
            if given == other_plans.get(key):
                return (f"{case}: gathering w whole along k is a plan that gives the right y, but it is not the one "
                        f"DTensor runs. DTensor moves no operand it can avoid moving: what can each device do with "
                        f"the columns of x it already holds? (collectives_run_by would show it, but using it voids "
                        f"the checks of this exercise that come after.)", why)
            if truth == "none":
                return f"{case}: does any device hold only part of the contracted axis k?", why
            if given == "none":
                return f"{case}: some device holds only part of the contracted axis k, so it cannot finish alone.", why
            if given[1] != truth[1]:
                return f"{case}: which mesh axis splits the contracted axis k here?", why
            return (f"{case}: not the collective DTensor runs. After multiplying the blocks it holds, would a device "
                    f"have partial sums over k that other devices complete, or could it not multiply yet?"
                    f"{_KIND_NOTES.get(shown[key], '')}", why)

        return grade_items(Feedback(), by_label(collectives, MATMUL_CASES), expected, explain, read_collective,
                           "'none' or (collective, mesh axis) per matmul", unanswered=only_ellipses)


# Exercise 5: y = x @ w with x (N, F) and w (F, F) in float32 on a batch x model mesh other than the chapter's
# batch=4 x model=2, for N = the question's examples, and the batch size at which the two layouts send as much. It
# varies per student (:mod:`.variants`): the mesh's sizes (a cost model needs no real devices), F and N.
COST_MESH = [("batch", 2), ("model", 4)]
COST_FEATURES = 4096
COST_BATCH = 1024
CHAPTER_COST_MESH = [("batch", 4), ("model", 2)]  # the mesh the chapter priced: never a variant's
COST_SIZES = (2, 4, 8)  # a drawn mesh axis's size
COST_WIDTHS = (1024, 2048, 4096, 8192)  # a drawn F
COST_BATCHES = (256, 512, 1024, 2048)  # a drawn N
COST_LAYOUTS = {"a": (["batch", UNSHARDED], [UNSHARDED, UNSHARDED]),  # data parallel
                "b": (["batch", UNSHARDED], [UNSHARDED, "model"])}   # w split on its output columns
COST_KEYS = ("a_held", "b_held", "b_sent", "even_at", "below")
COST_BYTES = ("a_held", "b_held", "b_sent")  # the keys whose answers are bytes (even_at is a number of examples)
COST_CHOICES = tuple(COST_LAYOUTS)  # "below": the layout that sends less below even_at
PART = {2: "half", 4: "a quarter", 8: "an eighth"}  # the part of w one device holds when 'model' splits it


def _reference_costs_on(mesh, examples, features=COST_FEATURES):
    """{"a_held", "b_held", "a_sent", "b_sent"}: w's bytes on one device and the bytes one device sends per step
    (forward and backward products), for ``examples`` rows of x (``features`` wide) on ``mesh``, by the cost model."""
    found = {}
    for case, (x_specs, w_specs) in COST_LAYOUTS.items():
        cost = matmul_cost([examples, features], x_specs, [features] * 2, w_specs, dict(mesh))
        found[f"{case}_held"] = cost.bytes_held["w"]
        found[f"{case}_sent"] = sum(c.bytes_sent_per_device for p in [cost.forward, *cost.backward]
                                    for c in p.collectives)
    return found


def _reference_even_at(mesh, examples=COST_BATCH, features=COST_FEATURES):
    """The global batch size at which (a) and (b) send the same bytes per step on ``mesh``: (a) does not depend on
    it, (b) grows linearly with it (its dx all-reduce)."""
    one, two = _reference_costs_on(mesh, examples, features), _reference_costs_on(mesh, 2 * examples, features)
    if one["a_sent"] != two["a_sent"]:
        raise AssertionError("(a)'s traffic should not depend on the batch size")
    per_example = (two["b_sent"] - one["b_sent"]) / examples
    return round(examples + (one["a_sent"] - one["b_sent"]) / per_example)


def _cost_setting(params):
    """(mesh, F, N) of a variant of exercise 5 (default: the self-study one)."""
    p = params or LayoutCost.defaults
    return [("batch", p["batch"]), ("model", p["model"])], p["features"], p["examples"]


def _reference_layout_costs(params=None):
    """Exercise 5's answer: {"a_held", "b_held", "b_sent", "even_at", "below"}."""
    mesh, features, examples = _cost_setting(params)
    costs = _reference_costs_on(mesh, examples, features)
    small = _reference_costs_on(mesh, dict(mesh)["batch"], features)  # one example per 'batch' group
    return {"a_held": costs["a_held"], "b_held": costs["b_held"], "b_sent": round(costs["b_sent"]),
            "even_at": _reference_even_at(mesh, examples, features),
            "below": min(COST_CHOICES, key=lambda case: small[f"{case}_sent"])}


def _reference_whole_dx_b_sent(params=None):
    """(b)'s b_sent priced with dx's whole N x F block instead of one device's rows: a typical slip."""
    mesh, features, examples = _cost_setting(params)
    batch, model = dict(mesh)["batch"], dict(mesh)["model"]
    dw_term = 2 * (batch - 1) / batch * (4 * features ** 2 // model)
    return round(dw_term + 2 * (model - 1) / model * examples * features * 4)


def _reference_cost_slips(params=None):
    """Per key, the typical wrong answers: [(value, what is wrong, the part that gives the answer away)]."""
    truth = _reference_layout_costs(params)
    mesh, features, examples = _cost_setting(params)
    batch, model = dict(mesh)["batch"], dict(mesh)["model"]
    devices = batch * model
    w_bytes = 4 * features ** 2
    dx_block = examples // batch * features * 4
    dw_term = 2 * (batch - 1) / batch * (w_bytes // model)
    dx_term = 2 * (model - 1) / model * dx_block
    chapter = _reference_costs_on(CHAPTER_COST_MESH, examples, features)
    other_mesh = (f"that is the price on the chapter's batch=4 x model=2 mesh; this mesh is batch={batch} x "
                  f"model={model}: the sizes that divide w and the group sizes n change.")
    both = ("that is one of the backward pass's collectives. In (b), which backward products contract an axis "
            "that a mesh axis splits? Each one leaves partial sums to all-reduce: add them all.")
    whole_w = f"None: each device holds all of w, {features} x {features} x 4 B."
    part = PART.get(model, f"1/{model}")
    return {
        "a_held": [(w_bytes // n, "in (a) w's layout is [U, U]: which mesh axis divides it?", whole_w)
                   for n in (2, batch, model, devices)],
        "b_held": [
            (w_bytes, "that is all of w; in (b) a mesh axis splits w's columns. Which one, and what is its size on "
             "this mesh?", f"'model' (size {model}): each device holds {part} of w."),
            (w_bytes // 2, "you divided w by 2. Which mesh axis splits w's columns in (b), and what is its size on "
             "THIS mesh (not the chapter's)?", f"'model' has {model} devices here: each device holds {part} of w."),
            (w_bytes // batch, f"you divided w by {batch}, the size of 'batch'. Which mesh axis splits w's columns "
             f"in (b)?", f"'model' has {model} devices here: each device holds {part} of w."),
            (w_bytes // devices, f"you divided w by all {devices} devices; in (b) only one mesh axis splits w. What "
             f"does a mesh axis that the layout does not name do to w?",
             f"'batch' replicates w: w / {model} ('model' only)."),
        ],
        "b_sent": [
            (round(dw_term), both, f"dw's block all-reduced over 'batch' ({dw_term:,.0f} B) and dx's block over "
             f"'model' ({dx_term:,.0f} B)."),
            (round(dx_term), both, f"dw's block all-reduced over 'batch' ({dw_term:,.0f} B) and dx's block over "
             f"'model' ({dx_term:,.0f} B)."),
            (round((dw_term + dx_term) / 2), "an all-reduce over n devices sends 2 (n-1)/n · B from each device (a "
             "reduce-scatter, then an all-gather), not (n-1)/n · B.", ""),
            (_reference_whole_dx_b_sent(params), f"dx's B is one device's block of partial "
             f"sums: x's rows on ONE device (N divided by the size of 'batch') by {features} features.",
             f"dx's block: {examples // batch} x {features} x 4 B = {dx_block:,} B."),
            (round(2 * (batch - 1) / batch * w_bytes + dx_term), "dw's B is one device's block of partial sums, and "
             "dw comes out in w's layout: is it all of w?", f"dw's block is w's block: {part} of w."),
            (round(chapter["b_sent"]), other_mesh, ""),
            (round(2 * (batch - 1) / batch * w_bytes), "that is (a)'s backward traffic, its whole dw all-reduced over "
             "'batch'; price (b)'s layout.", ""),
        ],
        "even_at": [
            (truth["even_at"] // batch, "that is the examples of one 'batch' group; give the global batch size N "
             "(x's rows).", ""),
            (_reference_even_at(CHAPTER_COST_MESH, examples, features), other_mesh, ""),
        ],
    }


def _cost_item(raw):
    """An item of exercise 5: a layout's letter ("a", " (b) ", "B") for "below", else a number of bytes or examples."""
    if isinstance(raw, str) and raw.strip().strip("()'\".").strip().lower() in COST_CHOICES:
        return raw.strip().strip("()'\".").strip().lower()
    return as_bytes(raw)


def _mib(nbytes):
    return f"{nbytes / 2 ** 20:g} MiB"


class LayoutCost(Exercise):
    title = "What does a layout cost? Bytes held and bytes sent"
    points = 5
    revealed_by = ("course_utils.costs:matmul_cost",)
    defaults = {"batch": dict(COST_MESH)["batch"], "model": dict(COST_MESH)["model"], "features": COST_FEATURES,
                "examples": COST_BATCH}
    templates = {"c16a": ch4_texts.COST_QUESTION, "ch4-q5": ch4_texts.COST_SOLUTION, "c16w5": ch4_texts.COST_WATCH}
    hints = (
        "Bytes held: the elements of w's block on one device, times the bytes of a float32. A mesh axis that "
        "splits an axis of w divides it; the others replicate it. Use THIS mesh's sizes.",
        "The backward pass runs dx = dy · wᵀ and dw = xᵀ · dy. dw contracts over the batch, which 'batch' "
        "splits: each device's dw block is a partial sum, all-reduced over 'batch'. In (b), dx contracts over "
        "w's output columns, which 'model' splits: dx's block is all-reduced over 'model' too. The forward "
        "product of (a) and (b) sends nothing.",
        "A ring all-reduce over n devices sends 2 (n-1)/n · B from each device, where B is the bytes of the "
        "block the group adds up (dw's block, or dx's block: x's rows on one device by {{features}} features). For "
        "even_at, write both totals as functions of N: (a)'s does not depend on N, (b)'s dx term grows with it.",
    )

    @staticmethod
    def draw(rng):
        """A mesh (any sizes of COST_SIZES but the chapter's batch=4 x model=2), F and N (never N = even_at)."""
        batch, model = rng.choice([(b, m) for b in COST_SIZES for m in COST_SIZES if (b, m) != (4, 2)])
        features = rng.choice(COST_WIDTHS)
        examples = rng.choice([n for n in COST_BATCHES if n != (batch - 1) * features])
        return {"batch": batch, "model": model, "features": features, "examples": examples}

    def text_values(self):
        p = self.params
        devices = p["batch"] * p["model"]
        return {**p, "more_examples": 4 * p["examples"],
                "mesh_of": "mesh of the 8 CPUs" if devices == 8 else
                f"mesh of {devices} devices (a cost model needs no real devices)"}

    def reference_values(self):
        p = self.params
        batch, model, w_bytes = p["batch"], p["model"], 4 * p["features"] ** 2
        ring = lambda n, block: 2 * (n - 1) / n * block  # noqa: E731 - as the solution writes it
        return {"w_mib": _mib(w_bytes), "a_sent_mib": _mib(ring(batch, w_bytes)),
                "w_part": PART.get(model, f"1/{model}"), "dw_mib": _mib(ring(batch, w_bytes // model)),
                "dx_mib": _mib(p["examples"] * ring(model, p["features"] * 4 / batch)),
                "even_at": _reference_layout_costs(p)["even_at"]}

    def grade(self, costs):
        truth = _reference_layout_costs(self.params)
        slips = _reference_cost_slips(self.params)
        batch = self.params["batch"]
        answers = by_label(costs, COST_KEYS)
        given_b_sent = as_bytes(answers.get("b_sent")) if isinstance(answers, dict) else None
        whole_dx = given_b_sent == _reference_whole_dx_b_sent(self.params)  # then even_at inherits that slip

        def explain(key, given, raw):
            right = truth[key]
            if key == "below":
                if given not in COST_CHOICES:
                    return f"answer with the letter of a layout, 'a' or 'b', got {raw!r}.", ""
                return (f"write what each layout sends per step for a small global batch, say N = {batch}: which one "
                        f"is less? (a)'s all-reduce of dw does not depend on N.", "")
            if isinstance(given, str):
                return f"give a number, got {raw!r}.", ""
            if given is None:
                what = "examples" if key == "even_at" else "bytes"
                return (f"give a number of {what} (an int, or an expression such as {self.params['features']} * "
                        f"{self.params['features']} * 4), got {raw!r}.", "")
            if key in COST_BYTES and given * 4 == right:
                return "that counts the float32 numbers (elements) of w's block, not bytes.", "A float32 takes 4 bytes."
            if key == "even_at" and whole_dx and given == truth["even_at"] // batch:
                return ("that follows from your b_sent, which all-reduces the whole of dx: once dx's block is one "
                        "device's rows, even_at follows too.", "")
            for value, why, reveal in slips[key]:
                if given == value:
                    return why, reveal
            if key == "even_at":
                if given > 10 ** 6:
                    return "even_at is a number of examples (x's rows), not of bytes.", ""
                return ("write what each layout sends per step as a function of N: which of (b)'s terms grows with "
                        "N, and does (a)'s? Then find the N at which they are equal.", "")
            if unit_slip(raw, right):
                return unit_slip(raw, right), ""
            if key.endswith("_held"):
                return "w's block on one device, in bytes: divide by the size of each mesh axis that splits w.", ""
            return "find each all-reduce of the backward pass, its B and its n, and add 2 (n-1)/n · B.", ""

        return grade_items(Feedback(), answers, truth, explain, _cost_item,
                           "one number per key: bytes, or examples for even_at; 'a' or 'b' for below")


# Exercise 6: a product built to a memory budget. The checker's own cases (other meshes, sizes and budgets
# than the notebook's examples), each of them feasible with w split over 'model' alone.


CHAPTER = chapter(4, "DTensor meshes and layouts", {
    "q1": MeshAndLayout, "q2": PackByHand, "q3": ShardShapes, "q4": WhichCollective, "q5": LayoutCost,
    "q6": BudgetProduct})
