"""Chapter 6 · Core-API MLP with a hand-written Adam: the exercises' checkers and hints.

Every answer of this chapter is code or a live object. Each exercise's ``collect`` runs it where it lives, on
inputs drawn from the check's seed, and sends what it produced as plain data; its ``judge`` draws the same
inputs again and computes the right values itself. Exercises 4 and 5 are in ``ch6_steps.py``.
"""
import math

from .answers import UNSHARDED, checker_mesh, close, global_numpy, layout_of, short_error, specs
from .ch6_steps import ERROR, MISSING, NOT_CALLABLE, BrokenVariable, FrozenStep, _checker_weight, _not_callable, _raised
from .core import Exercise, Feedback, chapter

WRONG_LIMITS = {  # what a wrong xavier_limit computes: (what is wrong, the part that gives the formula away)
    ("sqrt(1 / fan_in) is LeCun's scale, not Xavier's uniform limit.", "Xavier (Glorot) uses both fans."):
        lambda a, b: math.sqrt(1 / a),
    ("sqrt(2 / (fan_in + fan_out)) is the STANDARD DEVIATION of Xavier normal, not the limit of Xavier uniform: "
     "what is the variance of U(-limit, limit)?", ""): lambda a, b: math.sqrt(2 / (a + b)),
    ("sqrt(6 / fan_in) is He's uniform limit (for ReLU), not Xavier's.", "Xavier uses both fans."):
        lambda a, b: math.sqrt(6 / a),
    ("your limit is sqrt(6) / (fan_in + fan_out): the square root covers only the 6.", ""):
        lambda a, b: math.sqrt(6) / (a + b),
    ("your limit has no square root: 6 / (fan_in + fan_out) is a variance-sized number, not a limit.", ""):
        lambda a, b: 6 / (a + b),
}
FIRST_FANS = (784, 700)  # the notebook's first layer; two more pairs of fans are drawn from the seed
WEIGHT_SPECS = [UNSHARDED, "model"]  # the layout init_weight is given
MAX_CDF_DISTANCE = 0.05  # Kolmogorov-Smirnov distance to U(-limit, limit); 2048 uniform values exceed it with p < 1e-4


def _cdf_distance_to_uniform(values, limit):
    """The largest gap between the sample's cumulative distribution and that of U(-limit, limit)."""
    import numpy as np

    x = np.sort(values.ravel())
    uniform = (x + limit) / (2 * limit)
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - uniform), np.max(uniform - np.arange(n) / n)))


def _xavier_case(seed):
    """The inputs of a q1 check: three pairs of fans for xavier_limit; a shape (at least 2048 values, its
    second size even) and three different seeds for init_weight: one, one that differs from it in its first
    number only, one that differs in its second number only."""
    import numpy as np

    rng = np.random.default_rng(seed)
    fans = [FIRST_FANS]
    while len(fans) < 3:
        fan_in, fan_out = (int(n) for n in rng.integers(8, 1025, 2))
        if fan_in != fan_out:  # equal fans make LeCun's scale and Xavier normal's deviation the same number
            fans.append((fan_in, fan_out))
    shape = [int(rng.integers(64, 97)), 2 * int(rng.integers(16, 33))]
    first = [int(n) for n in rng.integers(0, 2 ** 30, 2)]
    return fans, shape, first, [[first[0] + 1, first[1]], [first[0], first[1] + 1]]


def _dims(shape):
    return [None if d is None else int(d) for d in shape]


def _value_facts(value):
    """What a returned weight or slot is, as data: its type's name, whether it is a tf.Variable, its layout
    (sharding specs and mesh; None off the mesh), its shape and its whole value."""
    import tensorflow as tf

    facts = {"type": type(value).__name__, "variable": isinstance(value, tf.Variable), "specs": None,
             "mesh": None, "shape": None, "value": None}
    try:
        layout = layout_of(value.read_value() if facts["variable"] else value)
        if layout is not None:
            facts["specs"], facts["mesh"] = specs(layout), layout.mesh.to_string()
        facts["shape"] = _dims(value.shape)
        facts["value"] = global_numpy(value)
    except Exception as err:
        facts["error"] = short_error(err)
    return facts


def _collect_limit(xavier_limit, fans):
    if not callable(xavier_limit):
        return _not_callable(xavier_limit)
    try:
        return {"kind": "values", "values": [float(xavier_limit(a, b)) for a, b in fans]}
    except Exception as err:
        return _raised(err)


def _collect_init(init_weight, shape, seed, other_seed):
    """init_weight's weights for ``seed`` (twice) and for each seed of ``other_seed``."""
    from tensorflow.experimental import dtensor

    if not callable(init_weight):
        return _not_callable(init_weight)
    layout = dtensor.Layout(WEIGHT_SPECS, checker_mesh())
    try:
        weights = [init_weight(list(shape), layout, list(s)) for s in (seed, seed, *other_seed)]
    except Exception as err:
        return _raised(err)
    return {"kind": "weights", "weights": [_value_facts(w) for w in weights]}


class XavierInit(Exercise):
    title = "Xavier initialisation of a DVariable"
    points = 3
    hints = (
        "Xavier (Glorot) uniform samples U(-limit, limit); the limit depends on both fans.",
        "limit = sqrt(6 / (fan_in + fan_out)). Create the value on the mesh with dtensor.call_with_layout (wrap the "
        "random op in tf.function) and make it a dtensor.DVariable.",
    )

    def collect(self, xavier_limit, init_weight, seed=0):
        """Calls xavier_limit on three pairs of fans, and init_weight(shape, layout, seed) four times (twice
        with one seed, then with a seed that differs in its first number, one that differs in its second) on a
        shape and seeds drawn from ``seed``.

        What crosses: ``{"limit": {"kind": "values", "values": [3 floats]}, "weight": {"kind": "weights",
        "weights": [4 × {"type", "variable", "specs", "mesh", "shape", "value"}]}}``; a function that raised
        sends ``{"kind": "error", "error": text}``, an answer that is not callable its type's name.
        """
        fans, shape, first, other = _xavier_case(seed)
        return {"limit": _collect_limit(xavier_limit, fans), "weight": _collect_init(init_weight, shape, first, other)}

    def judge(self, data, seed=0):
        """xavier_limit (1 point) against the limit at the fans of ``seed``; init_weight (2) on its weights'
        type, layout, range, uniformity and reproducibility."""
        fans, shape, first, other = _xavier_case(seed)
        fb = Feedback()
        self._judge_limit(fb, data["limit"], fans)
        self._judge_init(fb, data["weight"], shape, first, other)
        return fb

    def _judge_limit(self, fb, data, fans):
        if data["kind"] in (MISSING, NOT_CALLABLE):
            fb.wrong("xavier_limit: not answered yet." if data["kind"] == MISSING else
                     "xavier_limit should be a function (fan_in, fan_out) -> float.")
            return
        if data["kind"] == ERROR:
            fb.wrong(f"xavier_limit raised {data['error']}")
            return
        got = [float(g) for g in data["values"]]
        if len(got) != len(fans):
            raise ValueError(f"{len(got)} limits for {len(fans)} pairs of fans")
        right = [math.sqrt(6 / (a + b)) for a, b in fans]
        if all(close(g, r, 1e-6) for g, r in zip(got, right)):
            fb.right(f"xavier_limit(784, 700) = {right[0]:.5f}")
            return
        (a, b), value = next((pair, g) for pair, g, r in zip(fans, got, right) if not close(g, r, 1e-6))
        why, more = next((texts for texts, f in WRONG_LIMITS.items()
                          if all(close(g, f(a, b), 1e-6) for g, (a, b) in zip(got, fans))),
                         (f"xavier_limit({a}, {b}) = {value:.5f} is not the Xavier uniform limit.", ""))
        fb.wrong(f"xavier_limit: {why}",
                 answer=(more + " " if more else "") + "A uniform distribution on [-limit, limit] has variance "
                        "limit**2 / 3; Xavier wants 2 / (fan_in + fan_out), so limit = sqrt(6 / (fan_in + fan_out)).")

    def _judge_init(self, fb, data, shape, seed, other_seed):
        import numpy as np

        if data["kind"] in (MISSING, NOT_CALLABLE):
            fb.wrong("init_weight: not answered yet." if data["kind"] == MISSING else
                     "init_weight should be a function (shape, layout, seed) -> DVariable.")
            return
        if data["kind"] == ERROR:
            message = str(data["error"])
            if "matching rank" in message or "StatelessRandomGetKeyCounter" in message:
                fb.wrong(f"init_weight raised {message}. In eager mode call_with_layout applies the layout to every "
                         f"op of the random function, including its seed handling.",
                         answer="Wrap the random op in tf.function, e.g. dtensor.call_with_layout("
                                "tf.function(tf.random.stateless_uniform), layout, shape=..., seed=..., ...).")
            else:
                fb.wrong(f"init_weight raised {message}")
            return
        w1, w2, *others = data["weights"]
        limit = math.sqrt(6 / (shape[0] + shape[1]))
        if w1["variable"] is not True:
            fb.wrong(f"init_weight should return a variable, so that the optimizer can update it, not a "
                     f"{w1['type']}.", answer="Wrap the value in dtensor.DVariable(...).")
            return
        if w1["specs"] is None:
            fb.wrong(f"init_weight returned a {w1['type']}, an ordinary tf.Variable: it lives on one device, outside "
                     f"the mesh, even when its initial value is a DTensor on the mesh (TensorFlow copies it there).",
                     answer="Create the initial value on the mesh with dtensor.call_with_layout(..., layout, ...) and "
                            "wrap it in dtensor.DVariable.")
            return
        if list(w1["specs"]) != WEIGHT_SPECS:
            fb.wrong(f"init_weight ignored the layout it was given: the weight has {list(w1['specs'])}, expected "
                     f"{WEIGHT_SPECS}.", answer="Pass `layout` to call_with_layout.")
            return
        values = np.asarray(w1["value"], dtype="float64")
        again = np.asarray(w2["value"], dtype="float64")
        others = [np.asarray(w["value"], dtype="float64") for w in others]
        top = float(np.abs(values).max()) if values.size else 0.0
        if list(values.shape) != list(shape) or w1["shape"] != list(shape):
            fb.wrong(f"init_weight returned shape {list(values.shape)} for shape {shape}.")
        elif not np.all(np.abs(values) <= limit * (1 + 1e-5)):
            fb.wrong(f"init_weight: values up to {top:.3f} exceed the Xavier limit for shape {shape}: is the range "
                     f"computed from xavier_limit(fan_in, fan_out) of that shape?",
                     answer=f"The limit is {limit:.3f}: sample uniformly in [-limit, limit] with limit = "
                            f"xavier_limit(fan_in, fan_out).")
        elif values.min() >= 0:
            fb.wrong("init_weight: all values are >= 0; the range is symmetric.", answer="minval=-limit.")
        elif top < 0.8 * limit:
            fb.wrong(f"init_weight: the values only reach {top:.3f}, well inside the Xavier limit for shape {shape}: "
                     f"Xavier uniform uses the whole range [-limit, limit].", answer=f"The limit is {limit:.3f}.")
        elif _cdf_distance_to_uniform(values, limit) > MAX_CDF_DISTANCE:
            middle = float(np.mean(np.abs(values) < limit / 2))
            fb.wrong(f"init_weight: the values stay within the Xavier range but are not spread uniformly: "
                     f"{middle:.0%} of them lie in the middle half [-limit/2, limit/2], where a uniform distribution "
                     f"puts 50%. Xavier UNIFORM draws every value in the range with the same probability.",
                     answer="Use tf.random.stateless_uniform(shape, seed, minval=-limit, maxval=limit).")
        elif not np.array_equal(values, again):
            fb.wrong("init_weight: the same seed gave different weights, so two clients would start from different "
                     "models.", answer="Use a stateless random op (tf.random.stateless_uniform) with seed=seed.")
        else:
            same = [o.shape == values.shape and np.array_equal(values, o) for o in others]
            if all(same):
                fb.wrong(f"init_weight: the seeds {seed}, {other_seed[0]} and {other_seed[1]} gave identical weights: "
                         f"your function ignores its `seed` argument (a fixed seed pair?), so every layer would start "
                         f"from the same numbers.", answer="Pass seed=seed to the stateless random op.")
            elif any(same):
                position = "first" if same[0] else "second"
                fb.wrong(f"init_weight: the seeds {seed} and {other_seed[same.index(True)]}, which differ only in "
                         f"their {position} number, gave identical weights: your function uses only part of the seed "
                         f"pair, so two different seeds can start the same model.",
                         answer="Pass the whole pair on: seed=seed.")
            else:
                fb.right(f"init_weight: a DVariable with layout {WEIGHT_SPECS}, uniform in [-{limit:.3f}, "
                         f"{limit:.3f}], reproducible from its seed", points=2)


def _variable_facts(variable):
    """A model variable as data: its name, shape and sharding specs (None off the mesh)."""
    import tensorflow as tf

    facts = {"name": None, "shape": None, "specs": None}
    try:
        facts["name"] = str(variable.name)
        facts["shape"] = _dims(variable.shape)
        layout = layout_of(variable.read_value() if isinstance(variable, tf.Variable) else variable)
        facts["specs"] = None if layout is None else specs(layout)
    except Exception as err:
        facts["error"] = short_error(err)
    return facts


def _chain(shapes):
    """'784 -> 300 -> 100 -> 10' for kernels that chain, in the order they chain; None when they do not."""
    remaining, order = list(shapes), []
    starts = [s for s in remaining if not any(t[1] == s[0] for t in remaining if t is not s)]
    if len(starts) != 1:
        return None
    order.append(starts[0])
    remaining.remove(starts[0])
    while remaining:
        after = [s for s in remaining if s[0] == order[-1][1]]
        if len(after) != 1:
            return None
        order.append(after[0])
        remaining.remove(after[0])
    return " -> ".join(str(n) for n in [order[0][0]] + [s[1] for s in order])


CLAIMED = "784 -> 300 -> 100 -> 10"  # what exercise 2's BuggyMLP claims to be (its docstring)


class HiddenSizeBug(Exercise):
    title = "Fix the hidden-size bug"
    points = 2
    hints = (
        f"Print the shapes of model.trainable_variables: do the kernels chain {CLAIMED}, the sizes the class claims?",
        "Follow hidden_sizes through the loop that builds the layers: which size does each call of list.pop() "
        "return?",
    )

    def collect(self, model, seed=0):
        """Reads the model's trainable variables (the model's inputs do not depend on ``seed``).

        What crosses: ``{"is_class": whether model is a class, "type": its type's name, "variables": [{"name",
        "shape", "specs"} per trainable variable], or None when it has no trainable_variables}``.
        """
        if isinstance(model, type):
            return {"is_class": True, "type": model.__name__, "variables": None}
        variables = getattr(model, "trainable_variables", None)
        return {"is_class": False, "type": type(model).__name__,
                "variables": None if variables is None else [_variable_facts(v) for v in variables]}

    def judge(self, data, seed=0):
        """The shapes of the model's kernels (its 2-d variables) against 784 -> 300 -> 100 -> 10."""
        right, buggy = [(784, 300), (300, 100), (100, 10)], [(784, 100), (100, 300), (300, 10)]
        chapter_sizes = [(784, 700), (700, 500), (500, 10)]
        fb = Feedback()
        if data["is_class"] is True:
            fb.wrong("Pass an instance of your fixed model, e.g. MLP(mesh), not the class.")
            return fb
        if data["variables"] is None:
            fb.wrong(f"Pass the model (a tf.Module), not a {data['type']}.")
            return fb
        shapes = [tuple(v["shape"]) for v in data["variables"] if v["shape"] is not None and len(v["shape"]) == 2]
        network = _chain(shapes)
        if sorted(shapes) == sorted(right):
            wrong_layouts = self._judge_layouts(data["variables"])
            if wrong_layouts:
                fb.right(f"the kernels are {right}: {CLAIMED}.")
                fb.wrong(f"but not every variable keeps BuggyMLP's layout: {wrong_layouts}. Fixing the sizes must not "
                         f"change how the model is sharded.",
                         answer="The first kernel [U, 'model'], the second ['model', U], the output layer replicated; "
                                "each bias split like its kernel's last axis.")
            else:
                fb.right(f"the kernels are {right}: {CLAIMED}, with BuggyMLP's layouts.", points=2)
        elif sorted(shapes) == sorted(buggy):
            fb.wrong(f"the kernels are still {buggy}: the network is {network}, not the {CLAIMED} it claims. Every "
                     f"shape fits, so nothing fails.",
                     answer="The hidden sizes are used in the wrong order: list.pop() takes the LAST item. Take them "
                            "from the front (pop(0)) or loop over the list.")
        elif sorted(shapes) == sorted(chapter_sizes):
            fb.wrong(f"that is the chapter's network, 784 -> 700 -> 500 -> 10; this exercise's model claims "
                     f"{CLAIMED}: fix the bug of BuggyMLP itself.")
        else:
            fb.wrong(f"the kernels are {sorted(shapes)}" + (f": the network is {network}" if network else "")
                     + f"; the class claims {CLAIMED}.")
        return fb


    @staticmethod
    def _judge_layouts(variables):
        """The variables whose sharding specs are not BuggyMLP's (column-, then row-parallel, replicated output),
        as text; "" when all are right. Off the mesh (not a DVariable), a variable's specs are None."""
        expected = {(784, 300): [UNSHARDED, "model"], (300,): ["model"], (300, 100): ["model", UNSHARDED],
                    (100,): [UNSHARDED], (100, 10): [UNSHARDED, UNSHARDED], (10,): [UNSHARDED]}
        wrong = []
        for v in variables:
            shape = tuple(v["shape"] or ())
            if shape in expected and v["specs"] != expected[shape]:
                wrong.append(f"{list(shape)} is {'not on the mesh' if v['specs'] is None else v['specs']}")
        return ", ".join(wrong)


WEIGHT_LAYOUTS = ([UNSHARDED, "model"], ["model", UNSHARDED], ["batch", UNSHARDED], ["batch", "model"],
                  [UNSHARDED, "batch"], ["model", "batch"])  # q3's weight: one of these, drawn from the seed


def _slot_case(seed):
    """The weight of a q3 check: its shape (multiples of 12, which every mesh size up to 4 divides), sharding
    specs and value."""
    import numpy as np

    rng = np.random.default_rng(seed)
    shape = (12 * int(rng.integers(1, 4)), 12 * int(rng.integers(1, 3)))
    sharding = WEIGHT_LAYOUTS[int(rng.integers(len(WEIGHT_LAYOUTS)))]
    return shape, sharding, rng.normal(size=shape).astype("float32")


class SlotLayouts(Exercise):
    title = "Adam's slots in the weights' layouts"
    points = 2
    hints = (
        "A slot is updated elementwise together with its weight. How should it be split?",
        "Exactly like the weight: dtensor.fetch_layout(variable), and zeros made on the mesh with "
        "dtensor.call_with_layout.",
    )

    def collect(self, make_slots, seed=0):
        """Calls make_slots on a DVariable whose shape, layout and value are drawn from ``seed``.

        What crosses: ``{"kind": "pair", "same": whether m is v, "mesh": the weight's mesh, "slots": [{"type",
        "variable", "specs", "mesh", "shape", "value"} of m and of v]}``; ``{"kind": "not a pair", "type": ...}``
        when it returned something else; the error it raised, as text; the type's name of an answer that is
        not callable.
        """
        if not callable(make_slots):
            return _not_callable(make_slots)
        shape, sharding, value = _slot_case(seed)
        weight, layout = _checker_weight(shape, sharding, value)
        try:
            slots = make_slots(weight)
        except Exception as err:
            return _raised(err)
        if not isinstance(slots, (tuple, list)) or len(slots) != 2:
            return {"kind": "not a pair", "type": type(slots).__name__}
        m, v = slots
        return {"kind": "pair", "same": m is v, "mesh": layout.mesh.to_string(),
                "slots": [_value_facts(m), _value_facts(v)]}

    def judge(self, data, seed=0):
        """Each slot (1 point) against the weight of ``seed``: a variable on the weight's mesh, with its shape and
        layout, holding zeros."""
        import numpy as np

        shape, sharding, _ = _slot_case(seed)
        fb = Feedback()
        if data["kind"] in (MISSING, NOT_CALLABLE):
            fb.wrong("make_slots should be a function variable -> (m, v).")
            return fb
        if data["kind"] == ERROR:
            no_layout = "Neither layout nor DTensor initial value" in str(data["error"])
            fb.wrong(f"make_slots raised {data['error']}" + (
                ". A DVariable needs an initial value that is already a DTensor on the mesh: zeros made on one device "
                "have no layout." if no_layout else ""),
                answer="Make the zeros with dtensor.call_with_layout(tf.zeros, dtensor.fetch_layout(variable), "
                       "shape=...)." if no_layout else "")
            return fb
        if data["kind"] != "pair":
            fb.wrong(f"make_slots should return a pair (m, v), got {data['type']}.")
            return fb
        if data["same"] is not False:
            fb.wrong("m and v are the same object: Adam keeps two separate moments, so create two variables.")
            return fb
        for name, slot in zip(("m", "v"), data["slots"]):
            if slot["variable"] is not True:
                fb.wrong(f"{name} is a {slot['type']}, not a variable; slots are updated in place with assign.",
                         answer="Wrap the zeros in dtensor.DVariable.")
                continue
            if slot["specs"] is None:
                fb.wrong(f"{name} is a {slot['type']}, an ordinary tf.Variable: it lives on one device, outside the "
                         f"mesh, even when its initial value is a DTensor on the mesh (TensorFlow copies it there).",
                         answer="Make it a dtensor.DVariable of zeros made with dtensor.call_with_layout(tf.zeros, "
                                "dtensor.fetch_layout(variable), shape=...).")
            elif tuple(slot["shape"]) != shape:
                fb.wrong(f"{name} has shape {tuple(slot['shape'])}; a slot has the weight's shape {shape}.")
            elif list(slot["specs"]) != sharding or slot["mesh"] != data["mesh"]:
                slot_specs = list(slot["specs"])
                why = ("it is replicated: every device would hold the whole moment, although it only ever updates "
                       "its own shard of the weight" if all(s == UNSHARDED for s in slot_specs) else
                       f"it has {slot_specs}, the weight has another layout")
                fb.wrong(f"{name}: {why}.", answer="Give the slot the weight's layout, dtensor.fetch_layout(variable).")
            elif np.shape(slot["value"]) != shape or np.any(np.asarray(slot["value"]) != 0):
                fb.wrong(f"{name} should start at zero.")
            else:
                fb.right(f"{name}: zeros in the weight's layout {list(sharding)}")
        return fb


def __getattr__(name):
    """What moved to ``ch6_steps`` (``reference_adam``, ``_host_counters``, ...), still read as ``ch6.<name>``;
    ``_sgd_change`` is ``ch6_steps._reference_sgd_change``. Looked up on use: the sandbox's stripped copy of
    ``ch6_steps`` has no references."""
    from . import ch6_steps

    try:
        return getattr(ch6_steps, {"_sgd_change": "_reference_sgd_change"}.get(name, name))
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


CHAPTER = chapter(6, "Core-API MLP with a hand-written Adam",
                  {"q1": XavierInit, "q2": HiddenSizeBug, "q3": SlotLayouts, "q4": FrozenStep, "q5": BrokenVariable})
