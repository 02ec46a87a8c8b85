"""Chapter 6 · Core-API MLP with a hand-written Adam: the exercises' checkers and hints.

Every answer of this chapter is code or a live object. Each exercise's ``collect`` runs it where it lives, on
inputs drawn from the check's seed, and sends what it produced as plain data; its ``judge`` draws the same
inputs again and computes the right values itself. Exercise 1 is in ``ch6_init.py``, exercise 4 in ``ch6_adam.py``,
exercise 5 in ``ch6_broken.py``, what they share in ``ch6_answers.py``; 2 and 3 here.
"""
from .answers import UNSHARDED, checker_mesh, layout_of, on_mesh, short_error, specs
from .ch6_adam import FrozenStep
from .ch6_answers import ERROR, MISSING, NOT_CALLABLE, _checker_weight, _not_callable, _raised
from .ch6_broken import BrokenVariable
from .ch6_init import XavierInit, _dims, _value_facts
from .core import Exercise, Feedback, chapter


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
MLP_SIZES = ((300, 100), (48, 32, 16))  # the hidden sizes the checker builds MLP with: the notebook's, then three
MLP_BATCH = 8  # the forward pass's examples, split over 'batch'


def _collect_mlp_case(mlp_class, sizes, seed):
    """Build ``mlp_class(mesh, hidden_sizes=[...])`` on the checker's mesh and run it on a batch drawn from ``seed``:
    ``{"variables": [{"name", "shape", "specs", "value"}, ...], "logits": the global logits}``, or ``{"error"}``."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from ..step_check import value_of

    mesh = checker_mesh()
    try:
        model = mlp_class(mesh, hidden_sizes=list(sizes))
    except Exception as err:
        return _raised(err)
    variables = getattr(model, "trainable_variables", None)
    if variables is None:
        return {"kind": "no variables", "type": type(model).__name__}
    facts = [dict(_variable_facts(v), value=value_of(v)) for v in variables]  # from the blocks: no collective
    x = np.random.default_rng([seed, len(sizes)]).normal(size=(MLP_BATCH, 784)).astype("float32")
    try:  # one compiled program for the whole forward pass, not one per operation
        logits = tf.function(lambda batch: model(batch))(on_mesh(x, dtensor.Layout(["batch", UNSHARDED], mesh)))
        return {"kind": "model", "variables": facts, "logits": value_of(logits)}
    except Exception as err:
        return {**_raised(err), "variables": facts}


def _reference_mlp_layers(sizes):
    """The kernels' shapes and sharding specs of MLP(mesh, sizes), in order: the hidden layers alternate column-
    and row-parallel (Megatron pairs); the output layer completes the last pair: row-parallel after a column-parallel
    layer (an odd number of hidden layers: it takes the split activations as they are, and only its 10 logits are
    summed), replicated after a row-parallel one."""
    chain = [784, *sizes, 10]
    kernels = list(zip(chain[:-1], chain[1:]))
    layouts = [[UNSHARDED, "model"] if i % 2 == 0 else ["model", UNSHARDED] for i in range(len(sizes))]
    return kernels, layouts + [["model", UNSHARDED] if len(sizes) % 2 else [UNSHARDED, UNSHARDED]]


def _reference_mlp_logits(kernels, biases, x):
    """One device's forward pass: relu after every hidden layer, none after the output layer (float64)."""
    import numpy as np

    h = x.astype("float64")
    for index, (w, b) in enumerate(zip(kernels, biases)):
        h = h @ w + b
        if index < len(kernels) - 1:
            h = np.maximum(h, 0)
    return h


class HiddenSizeBug(Exercise):
    title = "Fix the hidden-size bugs"
    points = 3
    hints = (
        f"Print the shapes of BuggyMLP(mesh).trainable_variables: do the kernels chain {CLAIMED}, the sizes the class "
        f"claims? Then try BuggyMLP(mesh, hidden_sizes=[96, 64, 32]).",
        "Follow hidden_sizes through the loop that builds the layers: which size does each call of list.pop() "
        "return? And how many layouts does the loop have for the hidden layers it builds? With three hidden layers, "
        "the last one is column-parallel: in which form do its activations reach the output layer?",
        "pop(0) takes the sizes from the front; the hidden layers' layouts alternate, layouts[index % 2]; the output "
        "layer is row-parallel, ['model', U], when the number of hidden layers is odd, replicated when it is even.",
    )

    def unanswered(self, answer):
        return answer is None or answer is Ellipsis

    def collect(self, mlp_class, seed=0):
        """Builds ``mlp_class(mesh, hidden_sizes=...)`` for each size list of :data:`MLP_SIZES` and runs it on a batch
        drawn from ``seed`` (:func:`_collect_mlp_case`).

        What crosses: ``{"kind": "not a class", "type": name}`` for an instance or something else, or ``{"kind":
        "cases", "cases": [one dict per size list, up to the first that raised]}``.
        """
        import tensorflow as tf

        if not isinstance(mlp_class, type):
            return {"kind": "not a class", "type": type(mlp_class).__name__, "module": isinstance(mlp_class, tf.Module)}
        cases = []
        for sizes in MLP_SIZES:
            cases.append(_collect_mlp_case(mlp_class, sizes, seed))
            if cases[-1]["kind"] != "model":
                break
        return {"kind": "cases", "cases": cases}

    def judge(self, data, seed=0):
        """For every size list: the kernels' shapes (1 point), every weight's layout (1) and the logits against one
        device's forward pass from the model's own weights (1)."""
        import numpy as np

        fb = Feedback()
        if data["kind"] == "not a class":
            fb.wrong("Pass your fixed class itself, MLP (the checker builds it for several lists of hidden sizes), "
                     + ("not an instance." if data["module"] else f"not a {str(data['type'])[:60]}."))
            return fb
        given = list(data["cases"])
        if not 1 <= len(given) <= len(MLP_SIZES):
            raise ValueError("no case data")
        results = {"shapes": None, "layouts": None, "forward": None}
        judged = {"layouts": 0, "forward": 0}  # the cases whose shapes were right, so that the rest could be judged
        for sizes, case in zip(MLP_SIZES, given):
            network = " -> ".join(map(str, [784, *sizes, 10]))
            if case["kind"] == ERROR and "variables" not in case:
                self._judge_raised(fb, case, sizes, results)
                return fb
            if case["kind"] == "no variables":
                fb.wrong(f"MLP(mesh, hidden_sizes={list(sizes)}) has no trainable_variables: make it a tf.Module.")
                return fb
            kernels, layouts = _reference_mlp_layers(sizes)
            variables = list(case["variables"])
            shapes = [tuple(v["shape"]) for v in variables if v["shape"] is not None and len(v["shape"]) == 2]
            if sorted(shapes) != sorted(kernels):
                if results["shapes"] is None:
                    results["shapes"] = self._judge_shapes(shapes, _chain(shapes), sizes, network)
                continue
            judged["layouts"] += 1
            wrong = self._judge_layouts(variables, kernels, layouts)
            output = next((v["specs"] for v in variables if tuple(v["shape"] or ()) == kernels[-1]), None)
            if wrong and results["layouts"] is None and len(sizes) % 2 and output == [UNSHARDED, UNSHARDED] \
                    and wrong == f"{list(kernels[-1])} is {[UNSHARDED, UNSHARDED]}":
                results["layouts"] = (f"for hidden sizes {list(sizes)} (an odd number of hidden layers) the last hidden "
                                      f"layer is column-parallel: its {sizes[-1]} activations leave it split over "
                                      f"'model', and a replicated output layer needs them whole, so every step gathers "
                                      f"them first. Which layout takes them split as they are, as the second layer of "
                                      f"a Megatron pair does?",
                                      "After a column-parallel layer the output layer is row-parallel, ['model', U] "
                                      "(its bias replicated): only its 10 logits are summed over 'model'.")
            elif wrong and results["layouts"] is None:
                results["layouts"] = (f"for hidden sizes {list(sizes)} not every weight has the layout of the Megatron "
                                      f"pattern: {wrong}.",
                                      "The hidden layers alternate [U, 'model'] and ['model', U]; the output layer "
                                      "completes the last pair (row-parallel after a column-parallel layer, "
                                      "replicated after a row-parallel one); each bias is split like its kernel's "
                                      "columns.")
            by_shape = {tuple(v["shape"]): np.asarray(v["value"]) for v in variables if v["shape"] is not None}
            if not all((k[1],) in by_shape for k in kernels):
                problem = (f"for hidden sizes {list(sizes)} a layer has no bias of its own: every Dense layer has "
                           f"one, of its output size.", "")
            elif case["kind"] == ERROR:
                problem = f"a forward pass of MLP(mesh, hidden_sizes={list(sizes)}) raised {case['error']}", ""
            else:
                x = np.random.default_rng([seed, len(sizes)]).normal(size=(MLP_BATCH, 784)).astype("float32")
                want = _reference_mlp_logits([by_shape[k] for k in kernels], [by_shape[(k[1],)] for k in kernels], x)
                got = np.asarray(case["logits"], dtype="float64")
                problem = None if got.shape == want.shape and np.allclose(got, want, rtol=1e-3, atol=1e-4) else (
                    f"for hidden sizes {list(sizes)} the logits differ from one device's forward pass {network} with "
                    f"the model's own weights (relu after every hidden layer, none after the output layer).", "")
            judged["forward"] += 1
            if problem and results["forward"] is None:
                results["forward"] = problem
        if len(given) < len(MLP_SIZES):
            raise ValueError("a case is missing from the data")
        texts = {"shapes": f"the kernels chain as the hidden sizes say, for {len(MLP_SIZES)} lists of hidden sizes",
                 "layouts": "every layer in the Megatron pattern (column, row, column, ...), the output layer "
                            "completing the last pair",
                 "forward": "a forward pass on the mesh equals one device's"}
        for name, problem in results.items():
            if problem is not None:
                fb.wrong(problem[0], answer=problem[1])
            elif name == "shapes" or judged[name] == len(MLP_SIZES):
                fb.right(texts[name])
        if judged["layouts"] < len(MLP_SIZES) and results["layouts"] is None:
            fb.wrong("The layouts and the forward pass are judged for the networks whose kernels have the right "
                     "shapes: fix the shapes first.")
        return fb

    @staticmethod
    def _judge_raised(fb, case, sizes, results):
        message = str(case["error"])
        if "IndexError" in message:
            fb.wrong(f"MLP(mesh, hidden_sizes={list(sizes)}) raised {message}. The loop has layouts for two hidden "
                     f"layers: which layout should the third get, in the Megatron pattern?",
                     answer="Alternate them: layouts[index % 2].")
        elif "unexpected keyword" in message or "positional argument" in message:
            fb.wrong(f"MLP raised {message}. The checker builds it as MLP(mesh, hidden_sizes=[...]): give the class "
                     f"that parameter, defaulting to HIDDEN_SIZES.")
        else:
            fb.wrong(f"MLP(mesh, hidden_sizes={list(sizes)}) raised {message}")
        for name, problem in results.items():
            if problem is not None:
                fb.wrong(problem[0], answer=problem[1])

    @staticmethod
    def _judge_shapes(shapes, order, sizes, network):
        """(what is wrong, the part that gives it away) when the kernels do not chain 784 -> sizes -> 10."""
        chain = [784, *sizes, 10]
        backwards = [784, *reversed(sizes), 10]
        if sorted(shapes) == sorted(zip(backwards[:-1], backwards[1:])):
            return (f"for hidden sizes {list(sizes)} the network is {order}, not {network}: the sizes are used in "
                    f"the wrong order. Every shape fits, so nothing fails.",
                    "list.pop() takes the LAST item: take them from the front (pop(0)) or loop over the list.")
        if sorted(shapes) == sorted([(784, 700), (700, 500), (500, 10)]):
            return ("that is the chapter's network, 784 -> 700 -> 500 -> 10; this exercise's model takes its hidden "
                    "sizes from hidden_sizes.", "")
        return (f"for hidden sizes {list(sizes)} the kernels are {sorted(shapes)}"
                + (f": the network is {order}" if order else "") + f"; it should be {network}.", "")

    @staticmethod
    def _judge_layouts(variables, kernels, layouts):
        """The variables whose sharding specs are not the pattern's, as text; "" when all are right. Off the mesh
        (not a DVariable), a variable's specs are None."""
        expected = {}
        for shape, spec in zip(kernels, layouts):
            expected[shape] = spec
            expected[(shape[1],)] = [spec[1]]
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


class FactoredSlots(Exercise):
    title = "Adafactor's factored slots in the weight's layout"
    points = 2
    hints = (
        "v_row holds one number per ROW of the weight, each computed from that row's squared gradients. Which of the "
        "weight's tensor axes does v_row have, and how is that axis split?",
        "Each device updates the statistics of the rows and columns of the block it holds: v_row takes the layout of "
        "the weight's axis 0 (dtensor.Layout([specs[0]], mesh)), v_col that of its axis 1; zeros made on the mesh with "
        "dtensor.call_with_layout(tf.zeros, layout, shape=...).",
    )

    def collect(self, make_factored_slots, seed=0):
        """Calls make_factored_slots on a DVariable whose shape, layout and value are drawn from ``seed``.

        What crosses: ``{"kind": "pair", "same": whether v_row is v_col, "mesh": the weight's mesh, "slots": [{"type",
        "variable", "specs", "mesh", "shape", "value"} of v_row and of v_col]}``; ``{"kind": "not a pair", "type":
        ...}`` when it returned something else; the error it raised, as text; the type's name of an answer that is not
        callable.
        """
        if not callable(make_factored_slots):
            return _not_callable(make_factored_slots)
        shape, sharding, value = _slot_case(seed)
        weight, layout = _checker_weight(shape, sharding, value)
        try:
            slots = make_factored_slots(weight)
        except Exception as err:
            return _raised(err)
        if not isinstance(slots, (tuple, list)) or len(slots) != 2:
            return {"kind": "not a pair", "type": type(slots).__name__}
        v_row, v_col = slots
        return {"kind": "pair", "same": v_row is v_col, "mesh": layout.mesh.to_string(),
                "slots": [_value_facts(v_row), _value_facts(v_col)]}

    def judge(self, data, seed=0):
        """Each slot (1 point) against the weight of ``seed``: a variable on the weight's mesh, one number per row
        (v_row) or column (v_col), split like that axis of the weight, holding zeros."""
        import numpy as np

        shape, sharding, _ = _slot_case(seed)
        fb = Feedback()
        if data["kind"] in (MISSING, NOT_CALLABLE):
            fb.wrong("make_factored_slots should be a function variable -> (v_row, v_col).")
            return fb
        if data["kind"] == ERROR:
            no_layout = "Neither layout nor DTensor initial value" in str(data["error"])
            fb.wrong(f"make_factored_slots raised {data['error']}" + (
                ". A DVariable needs an initial value that is already a DTensor on the mesh: zeros made on one device "
                "have no layout." if no_layout else ""),
                answer="Make the zeros with dtensor.call_with_layout(tf.zeros, layout, shape=...)." if no_layout
                else "")
            return fb
        if data["kind"] != "pair":
            fb.wrong(f"make_factored_slots should return a pair (v_row, v_col), got {data['type']}.")
            return fb
        if data["same"] is not False:
            fb.wrong("v_row and v_col are the same object: Adafactor keeps two statistics, so create two variables.")
            return fb
        for axis, (name, slot) in enumerate(zip(("v_row", "v_col"), data["slots"])):
            what = ("one number per row" if axis == 0 else "one number per column")
            want_shape, want_specs = (shape[axis],), [sharding[axis]]
            if slot["variable"] is not True:
                fb.wrong(f"{name} is a {slot['type']}, not a variable; slots are updated in place with assign.",
                         answer="Wrap the zeros in dtensor.DVariable.")
            elif slot["specs"] is None:
                fb.wrong(f"{name} is a {slot['type']}, an ordinary tf.Variable: it lives on one device, outside the "
                         f"mesh, even when its initial value is a DTensor on the mesh (TensorFlow copies it there).",
                         answer="Make it a dtensor.DVariable of zeros made with dtensor.call_with_layout.")
            elif tuple(slot["shape"]) != want_shape:
                fb.wrong(f"{name} has shape {tuple(slot['shape'])}; it holds {what} of the {shape[0]} x {shape[1]} "
                         f"weight." + (" That is the weight's whole shape: Adam's v, not Adafactor's factors."
                                       if tuple(slot["shape"]) == shape else ""))
            elif list(slot["specs"]) != want_specs or slot["mesh"] != data["mesh"]:
                slot_specs = list(slot["specs"])
                if slot["mesh"] != data["mesh"]:
                    why = "it lives on another mesh than the weight"
                elif slot_specs == [sharding[1 - axis]]:
                    why = (f"it is split like the weight's {'columns' if axis == 0 else 'rows'}, not like its "
                           f"{'rows' if axis == 0 else 'columns'}")
                elif slot_specs == [UNSHARDED]:
                    why = ("it is replicated, but the weight's axis it follows is split: each device would hold "
                           "statistics of rows or columns it has no block of")
                else:
                    why = (f"it is split over {slot_specs[0]!r}, while the weight's axis it follows is not: each "
                           f"device would miss statistics of the rows or columns of its own block")
                fb.wrong(f"{name} ({what}): {why}.",
                         answer=f"The layout of the weight's axis {axis}: dtensor.Layout([specs[{axis}]], mesh).")
            elif np.any(np.asarray(slot["value"]) != 0):
                fb.wrong(f"{name} should start at zero.")
            else:
                fb.right(f"{name}: zeros, {what}, split like the weight's axis {axis} ({want_specs})")
        return fb


CHAPTER = chapter(6, "Core-API MLP with a hand-written Adam",
                  {"q1": XavierInit, "q2": HiddenSizeBug, "q3": FactoredSlots, "q4": FrozenStep, "q5": BrokenVariable})
