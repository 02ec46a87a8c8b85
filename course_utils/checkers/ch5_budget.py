"""Chapter 5 · exercise 5: the bytes one device holds per placement of a wider MLP, and the cheapest placement
that fits a memory budget (the answers are data: ``grade``). It varies per student (:mod:`.variants`): the mesh,
the width, the batch and the two budgets; its cell texts are in ``ch5_texts.py``."""
import math

from .answers import UNSHARDED, as_bytes, grade_items, only_ellipses
from ..costs import matmul_cost
from ..meshes import mesh_text
from .core import Exercise, Feedback
from .ch4 import unit_slip
from . import ch5_texts

# Exercise 5 (the self-study variant): Flatten -> Dense(2048, "d1") -> Dense(10, "d2") with the DTensor SGD with
# momentum, a global batch of 128 on batch=4 x model=4: 16 devices, more than the notebook has, so the bytes are
# predicted, not measured (the chapter's table c50h: Adam, its 128-unit MLP, batch=4 x model=2, measured).
BUDGET_MESH = {"batch": 4, "model": 4}
CHAPTER_MESH = {"batch": 4, "model": 2}
BUDGET_BATCH, BUDGET_HIDDEN = 128, 2048
BUDGET_NAMES = ("roomy", "tight")  # two budgets (whole MiB per device), two choices
MIB = 2**20
# A variant's mesh: more devices than the notebook's 8 (so nothing here can build it), 'batch' a divisor of 784;
# 'model' of 2 (which divides d2's 10 outputs: "outputs split" can be placed) or of 4 or 8 (which do not).
BUDGET_SIZES = {2: ((8, 2), (16, 2)), 4: ((4, 4), (8, 4), (16, 4)), 8: ((2, 8), (4, 8), (8, 8))}
BUDGET_EXAMPLES = (64, 128, 256, 512)
TIMES = {2: "twice", 4: "four times", 8: "eight times"}  # the mesh's devices against the notebook's 8
BUDGET_PLACEMENTS = {  # specs of d1.kernel, d1.bias, d2.kernel, d2.bias: the chapter's four placements
    "data parallel": ([UNSHARDED, UNSHARDED], [UNSHARDED], [UNSHARDED, UNSHARDED], [UNSHARDED]),
    "FSDP-style": (["batch", UNSHARDED], [UNSHARDED], [UNSHARDED, UNSHARDED], [UNSHARDED]),
    "tensor parallel": ([UNSHARDED, "model"], ["model"], ["model", UNSHARDED], [UNSHARDED]),
    "2-D": (["batch", "model"], ["model"], ["model", UNSHARDED], [UNSHARDED]),
}
# The memory question adds a placement the chapter's mesh can hold (10 outputs over model=2) and this one cannot.
MEMORY_PLACEMENTS = {**BUDGET_PLACEMENTS,
                     "outputs split": ([UNSHARDED, "model"], ["model"], [UNSHARDED, "model"], ["model"])}
CANNOT = "cannot be placed"  # what the memory question's None means: a sharded axis this mesh does not divide
CANNOT_WORDS = ("none", "impossible", "cannot", "can't", "cannot be placed", "not possible", "n/a", "na", "-")


def _budget_mesh(params):
    """The axis sizes of a variant's mesh."""
    return {"batch": params["batch"], "model": params["model"]}


def _reference_budget_memory(params=None):
    """Bytes one device holds per placement: the weights and SGD's momentum slot (one per weight, in its layout),
    the step counter left out; None for a placement whose sharded axes the mesh does not divide."""
    p = params or MemoryBudget.defaults
    return _reference_budget_memory_of(p["hidden"], _budget_mesh(p), slots=1)


def _reference_budget_choice(params=None):
    """{budget: the placement that fits it and sends the fewest bytes per step on these CPUs}."""
    p = params or MemoryBudget.defaults
    held = _reference_budget_memory(p)
    sent = budget_bytes_sent(_budget_mesh(p), p["hidden"], p["examples"])
    return {budget: min((name for name in sent if held[name] <= p[budget] * MIB), key=sent.get)
            for budget in BUDGET_NAMES}


def budget_bytes_sent(mesh=BUDGET_MESH, hidden=BUDGET_HIDDEN, batch=BUDGET_BATCH, on_cpu=True):
    """Bytes one device sends per training step, per placement that ``mesh`` can hold (every axis it shards divides;
    the fifth, outputs split, only where 'model' divides d2's 10 outputs), as DTensor runs the collectives on CPU.

    Priced with ``matmul_cost`` (:func:`placement_bytes_sent`) for exercise 5's model (``hidden`` units), global
    batch and mesh (by default the self-study notebook's). With ``on_cpu=False``, each collective is priced by the
    ring formula of its own kind, as hardware with a native all-gather and reduce-scatter would run it (exercise 5
    is about these CPUs).

    Example:
        >>> budget_bytes_sent({"batch": 4, "model": 4}, 1050, 64)  # 1050 units do not divide by 'model'
        {'data parallel': 5002200, 'FSDP-style': 9941400}
    """
    shapes = ((784, hidden), (hidden,), (hidden, 10), (10,))
    return {name: placement_bytes_sent(spec_lists, mesh, hidden, batch, on_cpu)
            for name, spec_lists in MEMORY_PLACEMENTS.items()
            if not any(length % mesh.get(axis, 1) for shape, spec in zip(shapes, spec_lists)
                       for length, axis in zip(shape, spec) if axis != UNSHARDED)}


def placement_bytes_sent(spec_lists, mesh, hidden, batch, on_cpu=True):
    """Bytes one device sends in one training step of Flatten -> Dense(hidden) -> Dense(10) with the weights in
    ``spec_lists`` (the specs of d1.kernel, d1.bias, d2.kernel, d2.bias) on a mesh of ``mesh``'s axis sizes, the
    global batch of ``batch`` split over 'batch': d1's product and its weight gradient (the first layer needs no
    input gradient), then d2's product and both gradients, each gradient in its weight's layout (``matmul_cost``;
    ``on_cpu`` as in :func:`budget_bytes_sent`).

    Example:
        >>> U = UNSHARDED
        >>> placement_bytes_sent(([U, U], [U], [U, U], [U]), {"batch": 4, "model": 2}, 25, 8)
        119100
    """
    d1_kernel, d2_kernel = spec_lists[0], spec_lists[2]
    d1 = matmul_cost([batch, 784], ["batch", UNSHARDED], (784, hidden), d1_kernel, mesh, dw_specs=d1_kernel)
    d2 = matmul_cost([batch, hidden], d1.output_specs, (hidden, 10), d2_kernel, mesh, dw_specs=d2_kernel)
    products = [d1.forward, d1.backward[1], d2.forward, *d2.backward]
    return round(sum(c.bytes_sent_on_cpu if on_cpu else c.bytes_sent_per_device
                     for p in products for c in p.collectives))


_PLACEMENT_SPELLINGS = {  # what a learner may call each placement (lower case, '-' and '_' read as spaces)
    "data parallel": ("data parallel", "data parallelism", "data", "dp", "ddp", "replicated"),
    "FSDP-style": ("fsdp style", "fsdp", "fully sharded data parallel", "zero 3", "zero3", "zero stage 3"),
    "tensor parallel": ("tensor parallel", "tensor parallelism", "tensor", "tp", "model parallel",
                        "model parallelism", "megatron"),
    "2-D": ("2 d", "2d", "2 d parallel", "2d parallel", "2 d parallelism", "two d", "2 d (data x model)"),
    "outputs split": ("outputs split", "output split", "outputs", "split outputs", "all over model",
                      "column parallel"),
}


def _placement_name(raw):
    """The placement of :data:`MEMORY_PLACEMENTS` that ``raw`` names ('2-D', '2D', 'FSDP', 'Tensor_Parallel', ...),
    or None."""
    if not isinstance(raw, str):
        return None
    words = " ".join(raw.strip().strip("()[]'\"`.:").lower().replace("_", " ").replace("-", " ").split())
    for name, spellings in _PLACEMENT_SPELLINGS.items():
        if words in spellings or words.replace(" ", "") in {s.replace(" ", "") for s in spellings}:
            return name
    return None


def _by_placement(answer):
    """``answer`` with keys that name a placement in another spelling ('2D', 'fsdp', 'Tensor Parallel') renamed."""
    if not isinstance(answer, dict):
        return answer
    renamed = {}
    for key, value in answer.items():
        name = _placement_name(key)
        renamed[name if name and name not in answer and name not in renamed else key] = value
    return renamed


def _reference_budget_memory_of(hidden, mesh, slots, divisible=True):
    """Bytes one device holds per placement of :data:`MEMORY_PLACEMENTS` for a d1 of ``hidden`` units on a mesh of
    ``mesh``'s axis sizes, with an optimizer that keeps ``slots`` slots per weight in the weight's layout (the counter
    left out): None where a sharded axis does not divide, or (``divisible=False``, a slip) the bytes with the
    remainder dropped."""
    shapes = {"d1.kernel": (784, hidden), "d1.bias": (hidden,), "d2.kernel": (hidden, 10), "d2.bias": (10,)}
    held = {}
    for name, specs in MEMORY_PLACEMENTS.items():
        pairs = list(zip(shapes.values(), specs))
        uneven = any(length % mesh.get(axis, 1) for shape, spec in pairs for length, axis in zip(shape, spec)
                     if axis != UNSHARDED)
        held[name] = None if uneven and divisible else (1 + slots) * sum(
            4 * math.prod(length // mesh.get(axis, 1) for length, axis in zip(shape, spec)) for shape, spec in pairs)
    return held


def _kilobytes(nbytes):
    """``nbytes`` in KB (1000 bytes), cut to two significant figures as a comment states a margin: '110 KB'."""
    kb = nbytes / 1000
    step = 10 ** max(0, math.floor(math.log10(kb)) - 1) if kb >= 1 else 1
    return f"{int(kb // step * step):,} KB"


def _memory_item(raw):
    """One answer of the memory dict: a whole number of bytes, or :data:`CANNOT` for None or a word that says so."""
    if raw is None or isinstance(raw, str) and " ".join(raw.strip().lower().split()).rstrip(".") in CANNOT_WORDS:
        return CANNOT
    return as_bytes(raw)


class MemoryBudget(Exercise):
    title = "The cheapest placement that fits a memory budget"
    points = 6
    none_is_answer = True  # None answers "this mesh cannot hold it"; the placeholders are `...`
    # A prediction: matmul_cost prices a kernel on mesh sizes alone (a 16-device mesh too) and prints the bytes each
    # device holds; the check counts only while the notebook has not imported it.
    revealed_by = ("course_utils.costs:matmul_cost",)
    defaults = {"batch": BUDGET_MESH["batch"], "model": BUDGET_MESH["model"], "hidden": BUDGET_HIDDEN,
                "examples": BUDGET_BATCH, "roomy": 10, "tight": 3}  # the budgets in MiB
    templates = {"c15a": ch5_texts.BUDGET_QUESTION, "c15b": ch5_texts.BUDGET_SENT, "ch5-q5": ch5_texts.BUDGET_SOLUTION,
                 "c15d": ch5_texts.BUILD_QUESTION, "c15e": ch5_texts.BUILD_SETUP}
    hints = (
        "Bytes one device holds for a weight: 4 bytes per number, divided by the size of every mesh axis that "
        "splits it, on THIS mesh, if that size divides the axis. Then the optimizer's state: how many slots per "
        "weight does SGD with momentum keep, and in which layout?",
        "Work weight by weight (d1.kernel, d1.bias, d2.kernel, d2.bias) with the specs of each placement and this "
        "mesh's sizes ('batch' {{batch}}, 'model' {{model}}), and add them up. SGD with momentum keeps one slot per "
        "weight (its momentum), in the weight's layout: Adam's two made the chapter's 3 x. A layout splits an axis "
        "into equal blocks only: check each sharded axis divides.",
        "A placement fits when its total is at most the budget: compare exactly, some totals are close to a budget. "
        "Among those that fit, take the one that sends the fewest bytes per step on these CPUs (the first column "
        "printed above the exercise), not the one that holds the least.",
    )

    @staticmethod
    def draw(rng):
        """A mesh of BUDGET_SIZES ('model' 2, where outputs split can be placed, in 3 draws of 5), a width that
        'model' divides (a multiple of 64), a global batch, and two budgets in whole MiB: the tight one fits 2-D
        alone, the roomy one tensor parallel too, which sends less (a width 'model' did not divide would show in
        the cell that prints what each placement sends, which prices only the placements the mesh can hold).

        The two choices are the same in every variant, and cannot be drawn otherwise with these placements and this
        pricing (every mesh here, every even width from 1000 to 6200, global batches of 64 to 32768): wherever
        tensor parallel can be placed it sends the fewest bytes, so it is the choice of any budget it fits; what
        fits a budget it misses is 2-D (it holds the least), FSDP-style or outputs split, and 2-D sends less than
        FSDP-style, while outputs split holds only 40 B less than tensor parallel, a gap no whole MiB falls in (model
        2, any even width below 20000). The one other pair, data parallel and FSDP-style, needs a width 'model' does
        not divide: the printed bytes then give away the three None answers, and "the first in the table that fits"
        picks it."""
        while True:
            model = 2 if rng.random() < 0.6 else rng.choice((4, 8))
            batch, model = rng.choice(BUDGET_SIZES[model])
            hidden = 64 * rng.randrange(16, 97)
            examples = rng.choice(BUDGET_EXAMPLES)
            params = {"batch": batch, "model": model, "hidden": hidden, "examples": examples}
            held = _reference_budget_memory(params)
            least_else = min(held["FSDP-style"], held["tensor parallel"])  # outputs split holds 40 B less than TP
            tight = [mib for mib in range(math.ceil(held["2-D"] / MIB), math.ceil(least_else / MIB)) if mib >= 1]
            roomy = range(math.ceil(held["tensor parallel"] / MIB), math.ceil(held["data parallel"] / MIB) + 4)
            if not tight or not roomy:
                continue
            params.update(roomy=rng.choice(roomy), tight=rng.choice(tight))
            choice = _reference_budget_choice(params)
            if params != MemoryBudget.defaults and choice["roomy"] != choice["tight"]:
                return params

    def text_values(self):
        p = self.params
        sized = p != self.defaults
        mesh = ", ".join(f'"{axis}": {size}' for axis, size in _budget_mesh(p).items())
        setting = f"{{{mesh}}}, {p['hidden']}, {p['examples']}" if sized else ""
        exercise_5 = p["hidden"] == BUDGET_HIDDEN and p["roomy"] == 10  # exercise 6's wider model and budget
        return {**p, "devices": p["batch"] * p["model"], "times": TIMES[p["batch"] * p["model"] // 8],
                "printed": "each of the five placements" if 10 % p["model"] == 0 else
                "each of the chapter's four placements",
                "setting": setting, "setting_and": setting + ", " if sized else "",
                "wide_model": "the wider model of exercise 5" if exercise_5 else
                "a wider model, Flatten → `Dense(2048)` → `Dense(10)`",
                "as_in_5": ", as in exercise 5" if exercise_5 else ""}

    def reference_values(self):
        p = self.params
        held = _reference_budget_memory(p)
        sent = budget_bytes_sent(_budget_mesh(p), p["hidden"], p["examples"])
        choice = _reference_budget_choice(p)
        roomy, tight = choice["roomy"], choice["tight"]
        fitting = [name for name in sent if held[name] <= p["roomy"] * MIB]
        least = min(fitting, key=held.get)
        ratio = sent[least] / sent[roomy]
        times = "twice" if abs(ratio - 2) < 0.05 else f"{ratio:.1f} x"
        missing = sorted((name for name in fitting if held[name] > p["tight"] * MIB), key=held.get)
        by = ", ".join(f"{name} by {_kilobytes(held[name] - p['tight'] * MIB)}" if index else
                       f"{name} misses {p['tight']} MiB by {_kilobytes(held[name] - p['tight'] * MIB)}"
                       for index, name in enumerate(missing[:2])) + (", the others by more" if missing[2:] else "")
        outputs = ("2 * (d1_kernel // model + d1_bias // model + d2_kernel // model + d2_bias // model),"
                   if held["outputs split"] else f"None,  # d2's 10 outputs do not divide by model={p['model']} (the "
                   f"chapter's model=2 divides them)")
        return {"outputs_split": outputs,
                "roomy_line": f'"{roomy}",'.ljust(20) + f"# fits ({held[roomy] / MIB:.1f} MiB) and sends least; "
                              f"{least} holds less but sends {times} as much here",
                "tight_line": f'"{tight}",'.ljust(20) + f"# {by}: only {tight} is left"}

    def unanswered(self, answer):
        return only_ellipses(answer)

    def grade(self, memory, choice):
        fb = Feedback()
        truth = {name: CANNOT if total is None else total
                 for name, total in _reference_budget_memory(self.params).items()}
        slips = self._grade_slips()
        explain = lambda name, given, raw: self._grade_explain(truth, slips, name, given, raw)  # noqa: E731
        grade_items(fb, _by_placement(memory), truth, explain, _memory_item,
                    "bytes per device, one number per placement, None where this mesh cannot hold it",
                    unanswered=only_ellipses)
        if not isinstance(choice, dict):
            fb.wrong(f"choice: give a dict with a placement for each budget, {{'roomy': ..., 'tight': ...}}, got a "
                     f"{type(choice).__name__}.")
            return fb
        aliases = {spelling: budget for budget in BUDGET_NAMES for mib in [self.params[budget]]
                   for spelling in (f"{mib} mib", f"{mib}mib", str(mib))}
        picks = {aliases.get(" ".join(str(key).lower().split()), " ".join(str(key).lower().split())): value
                 for key, value in choice.items()}
        lines = [self._grade_choice(truth, budget, picks.get(budget)) for budget in BUDGET_NAMES]
        if all(ok for ok, _, _ in lines):
            fb.right("choice: " + "; ".join(text for _, text, _ in lines))
        for ok, text, answer in lines:
            if not ok:
                fb.wrong("choice: " + text, answer=answer)
        return fb

    def _grade_choice(self, truth, budget, raw):
        """(right, what to say, the part that gives the answer away) for the placement chosen under ``budget``."""
        limit = self.params[budget] * MIB
        fitting = [name for name, total in truth.items() if total != CANNOT and total <= limit]
        best = _reference_budget_choice(self.params)[budget]
        picked = _placement_name(raw)
        reveal = f"choice[{budget!r}] = {best!r}"
        if picked == best:
            return True, f"{best} under the {budget} budget", ""
        if picked is None or raw is Ellipsis:
            return False, f"{budget}: name one of {list(BUDGET_PLACEMENTS)}, got {raw!r}.", ""
        if truth[picked] == CANNOT:
            return False, f"{budget}: {picked} cannot be placed on this mesh at all.", reveal
        if picked not in fitting:
            return False, (f"{budget}: {picked} holds more than {limit:,} bytes per device: work its total out "
                           f"exactly before you choose."), reveal
        if truth[picked] == min(truth[name] for name in fitting):
            return False, (f"{budget}: {picked} fits and holds the least, but another placement that fits sends "
                           f"fewer bytes per step on these CPUs."), reveal
        return False, f"{budget}: {picked} fits, but another placement that fits sends fewer bytes per step.", reveal

    def _grade_slips(self):
        """{what went wrong: {placement: bytes}}: the totals of typical slips, in the order they are told."""
        of, hidden, mesh = _reference_budget_memory_of, self.params["hidden"], _budget_mesh(self.params)
        slips = {"weights": of(hidden, mesh, 0), "adam": of(hidden, mesh, 2),
                 "chapter, adam": of(hidden, CHAPTER_MESH, 2), "chapter mesh": of(hidden, CHAPTER_MESH, 1),
                 "uneven": of(hidden, mesh, 1, divisible=False)}
        slips["128"] = {name: {of(128, chosen, slots)[name] + counter for chosen in (mesh, CHAPTER_MESH)
                               for slots in (0, 1, 2) for counter in (0, 8) if of(128, chosen, slots)[name] is not None}
                        for name in MEMORY_PLACEMENTS}
        return slips

    def _grade_explain(self, truth, slips, name, given, raw):
        """(why ``given`` is wrong, the part that gives the answer away) for placement ``name``."""
        p = self.params
        if given is None:
            return f"give a number of bytes, or None where this mesh cannot hold the placement, got {raw!r}.", ""
        if truth[name] == CANNOT:
            uneven = " (what you get with the remainder of an uneven split dropped)" if given == slips["uneven"][name] \
                else ""
            return (f"this mesh cannot hold {name} at all{uneven}: a layout splits an axis into EQUAL blocks, one per "
                    f"device of its mesh axis. Check every axis this placement shards against "
                    f"{mesh_text(list(_budget_mesh(p).items()))}.",
                    f"d2's 10 outputs do not divide by the {p['model']} devices of 'model': DTensor refuses the "
                    f"layout; answer None.")
        if given == CANNOT:
            return (f"this mesh can hold {name}: every axis it shards divides by the size of its mesh axis, so work "
                    f"out its bytes.", "")
        if given == truth[name] + 8:
            return "that includes the optimizer's 8-byte step counter, which the question leaves out.", ""
        if given in (slips["adam"][name], slips["adam"][name] + 8):
            return ("that counts two slots per weight, as Adam keeps (m and v). How many does SGD with momentum "
                    "keep?", "One, its momentum, in the weight's layout: 2 x the weights.")
        if given == slips["weights"][name]:
            return ("that is the weights alone; the question counts the optimizer's slots too.",
                    "SGD with momentum keeps one slot per weight, in the weight's layout: 2 x the weights.")
        if given in (slips["chapter, adam"][name], slips["chapter, adam"][name] + 8):
            return (f"those are Adam's bytes on the chapter's batch=4 x model=2 mesh (the chapter's table with d1 "
                    f"widened to {p['hidden']} units); this exercise trains with SGD with momentum, on "
                    f"{mesh_text(list(_budget_mesh(p).items()))}.", "")
        if given == slips["chapter mesh"][name]:
            return (f"that divides by the chapter's axis sizes (batch=4, model=2); on this exercise's mesh "
                    f"{mesh_text(list(_budget_mesh(p).items()))}, which axis splits what in {name}?", "")
        if given in slips["128"][name]:
            return (f"those are the bytes of the chapter's MLP (128 hidden units); this exercise's d1 has "
                    f"{p['hidden']} units.", "")
        if unit_slip(raw, truth[name]) or unit_slip(raw, truth[name] + 8):
            return unit_slip(raw, truth[name]) or unit_slip(raw, truth[name] + 8), ""
        if given * 4 == truth[name]:
            return "that counts float32 numbers (elements), not bytes.", "A float32 takes 4 bytes."
        return ("add, weight by weight, its bytes divided by the size of each mesh axis of THIS mesh that splits it; "
                "then the optimizer's slots.", "")
