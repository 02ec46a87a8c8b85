"""Chapter 6 · Core-API MLP with a hand-written Adam: the exercises' checkers and hints.

Every answer of this chapter is code or a live object. Each exercise's ``collect`` runs it where it lives, on
inputs drawn from the check's seed, and sends what it produced as plain data; its ``judge`` draws the same
inputs again and computes the right values itself. Exercises 4 and 5 are in ``ch6_steps.py``.
"""
import math

from .answers import UNSHARDED, checker_mesh, close, global_numpy, layout_of, on_mesh, short_error, specs
from .ch6_steps import ERROR, MISSING, NOT_CALLABLE, BrokenVariable, FrozenStep, _checker_weight, _not_callable, _raised
from .core import Exercise, Feedback, chapter

WRONG_LIMITS = {  # what a wrong xavier_limit computes from the fans: (what is wrong, the part that gives it away)
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
FIRST_SHAPE = (784, 700)  # the notebook's first layer; a convolution kernel and another dense one come from the seed
WEIGHT_SPECS = [UNSHARDED, "model"]  # the layouts init_weight is given: a dense kernel's columns over 'model',
CONV_SPECS = [UNSHARDED, UNSHARDED, UNSHARDED, "model"]  # a convolution kernel's output channels over 'model'
ROWS_SPECS = ["model", UNSHARDED]  # and the dense kernel with the same seed, its rows over 'model': a host draw only
# placed on the mesh gives the same global weight in both layouts, DTensor's draw of other blocks other numbers
MAX_CDF_DISTANCE = 0.05  # Kolmogorov-Smirnov distance to U(-limit, limit); 2048 uniform values exceed it with p < 1e-4
PACKING_TOOLS = ("course_utils.packing:pack_batch", "tensorflow.dtensor.python.api:pack",
                 "tensorflow.dtensor.python.api:copy_to_mesh", "tensorflow.dtensor.python.api:relayout")


def _cdf_distance_to_uniform(values, limit):
    """The largest gap between the sample's cumulative distribution and that of U(-limit, limit)."""
    import numpy as np

    x = np.sort(values.ravel())
    uniform = (x + limit) / (2 * limit)
    n = len(x)
    return float(max(np.max(np.arange(1, n + 1) / n - uniform), np.max(uniform - np.arange(n) / n)))


def _xavier_case(seed):
    """The inputs of a q1 check: three kernel shapes for xavier_limit (the notebook's first layer, a 3 x 3
    convolution kernel, another dense kernel); for init_weight a dense shape (at least 2048 values, its columns even),
    a convolution kernel's shape (its output channels even) and three different seeds: one, one that differs from it
    in its first number only, one that differs in its second number only."""
    import numpy as np

    rng = np.random.default_rng(seed)
    conv_in, conv_out = (int(n) for n in rng.integers(4, 65, 2))
    while True:
        fan_in, fan_out = (int(n) for n in rng.integers(8, 1025, 2))
        if fan_in != fan_out:  # equal fans make LeCun's scale and Xavier normal's deviation the same number
            break
    shapes = [FIRST_SHAPE, (3, 3, conv_in, conv_out + (conv_out == conv_in)), (fan_in, fan_out)]
    dense = [2 * (int(rng.integers(64, 97)) // 2), 2 * int(rng.integers(16, 33))]  # rows and columns even
    conv = [3, 3, 8, 2 * int(rng.integers(16, 25))]
    first = [int(n) for n in rng.integers(0, 2 ** 30, 2)]
    return shapes, dense, conv, first, [[first[0] + 1, first[1]], [first[0], first[1] + 1]]


def _reference_fans(shape):
    """Keras' fans of a kernel (``_compute_fans`` in tf_keras' initializers): a dense kernel's rows and columns; a
    convolution kernel's input and output channels, each times its receptive field (every size but the last two)."""
    receptive = math.prod(shape[:-2])
    return shape[-2] * receptive, shape[-1] * receptive


def _reference_limit(shape):
    fan_in, fan_out = _reference_fans(shape)
    return math.sqrt(6 / (fan_in + fan_out))


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


def _collect_limit(xavier_limit, shapes):
    if not callable(xavier_limit):
        return _not_callable(xavier_limit)
    try:
        return {"kind": "values", "values": [float(xavier_limit(list(shape))) for shape in shapes]}
    except Exception as err:
        return _raised(err)


def _collect_init(init_weight, dense, conv, seed, other_seed):
    """init_weight's dense weights for ``seed`` (twice) and for each seed of ``other_seed``, its convolution kernel
    for ``seed``, the dense weight for ``seed`` in the layout :data:`ROWS_SPECS`, and the packing tools its code calls
    (a weight drawn on one device and split)."""
    from tensorflow.experimental import dtensor

    from .reach import tools_used_by

    if not callable(init_weight):
        return _not_callable(init_weight)
    mesh = checker_mesh()
    layout, conv_layout = dtensor.Layout(WEIGHT_SPECS, mesh), dtensor.Layout(CONV_SPECS, mesh)
    try:
        weights = [init_weight(list(dense), layout, list(s)) for s in (seed, seed, *other_seed)]
        weights.append(init_weight(list(conv), conv_layout, list(seed)))
        weights.append(init_weight(list(dense), dtensor.Layout(ROWS_SPECS, mesh), list(seed)))
    except Exception as err:
        return _raised(err)
    return {"kind": "weights", "weights": [_value_facts(w) for w in weights],
            "packing": tools_used_by(init_weight, PACKING_TOOLS)}


class XavierInit(Exercise):
    title = "Xavier initialisation of a DVariable, dense or convolutional"
    points = 3
    hints = (
        "Xavier (Glorot) uniform samples U(-limit, limit); the limit depends on both fans. What are the fans of a "
        "convolution kernel, whose every output value sums over a window of inputs in every input channel? And where "
        "is each device's block of the weight drawn?",
        "limit = sqrt(6 / (fan_in + fan_out)); for a kernel [height, width, in, out], fan_in = height * width * in and "
        "fan_out = height * width * out. Create the value on the mesh with dtensor.call_with_layout (wrap the random "
        "op in tf.function) and make it a dtensor.DVariable: then each device draws its own block.",
    )

    def collect(self, xavier_limit, init_weight, seed=0):
        """Calls xavier_limit on three kernel shapes, and init_weight(shape, layout, seed) five times (a dense kernel
        twice with one seed, then with a seed that differs in its first number, one that differs in its second; a
        convolution kernel; the dense kernel with the first seed again, its rows split instead of its columns), on shapes and seeds drawn from ``seed``.

        What crosses: ``{"limit": {"kind": "values", "values": [3 floats]}, "weight": {"kind": "weights",
        "weights": [6 × {"type", "variable", "specs", "mesh", "shape", "value"}], "packing": [the packing tools
        init_weight's code calls]}}``; a function that raised sends ``{"kind": "error", "error": text}``, an answer
        that is not callable its type's name.
        """
        shapes, dense, conv, first, other = _xavier_case(seed)
        return {"limit": _collect_limit(xavier_limit, shapes),
                "weight": _collect_init(init_weight, dense, conv, first, other)}

    def judge(self, data, seed=0):
        """xavier_limit (1 point) against Keras' fans at the shapes of ``seed``; init_weight (2) on its weights'
        type, layout, range, uniformity, reproducibility, and being drawn on the mesh, not on one device."""
        shapes, dense, conv, first, other = _xavier_case(seed)
        fb = Feedback()
        self._judge_limit(fb, data["limit"], shapes)
        self._judge_init(fb, data["weight"], dense, conv, first, other)
        return fb

    def _judge_limit(self, fb, data, shapes):
        if data["kind"] in (MISSING, NOT_CALLABLE):
            fb.wrong("xavier_limit: not answered yet." if data["kind"] == MISSING else
                     "xavier_limit should be a function shape -> float.")
            return
        if data["kind"] == ERROR:
            message = str(data["error"])
            why = (" A convolution kernel has four sizes: [height, width, in_channels, out_channels]."
                   if "unpack" in message else "")
            fb.wrong(f"xavier_limit raised {message}.{why} It is called with a kernel's shape, a dense one or a "
                     f"convolution's.")
            return
        got = [float(g) for g in data["values"]]
        if len(got) != len(shapes):
            raise ValueError(f"{len(got)} limits for {len(shapes)} shapes")
        right = [_reference_limit(shape) for shape in shapes]
        if all(close(g, r, 1e-6) for g, r in zip(got, right)):
            fb.right(f"xavier_limit: {right[0]:.5f} for {list(FIRST_SHAPE)}, the receptive field counted for a "
                     f"convolution")
            return
        answer = ("A uniform distribution on [-limit, limit] has variance limit**2 / 3; Xavier wants "
                  "2 / (fan_in + fan_out), so limit = sqrt(6 / (fan_in + fan_out)); a convolution kernel's fans are "
                  "its channels times height x width.")
        dense_ok = [close(g, r, 1e-6) for g, r, shape in zip(got, right, shapes) if len(shape) == 2]
        conv_index = next(i for i, shape in enumerate(shapes) if len(shape) == 4)
        height, width, channels_in, channels_out = shapes[conv_index]
        if all(dense_ok):
            given = got[conv_index]
            if close(given, math.sqrt(6 / (channels_in + channels_out)), 1e-6):
                why = (f"your limit for the convolution kernel {list(shapes[conv_index])} counts its channels only. "
                       f"Each output value sums over a {height} x {width} window of inputs in every input channel: "
                       f"what does that make its fans?")
            elif close(given, math.sqrt(6 / (height + width)), 1e-6):
                why = (f"for the convolution kernel {list(shapes[conv_index])} you read its first two sizes as the "
                       f"fans: they are the window's height and width.")
            else:
                why = f"xavier_limit({list(shapes[conv_index])}) = {given:.5f} is not Xavier's limit for that kernel."
            fb.wrong(f"xavier_limit: {why}", answer=answer)
            return
        fans = [_reference_fans(shape) for shape in shapes]
        dense_pairs = [(g, f) for g, f, shape in zip(got, fans, shapes) if len(shape) == 2]
        why, more = next((texts for texts, formula in WRONG_LIMITS.items()
                          if all(close(g, formula(a, b), 1e-6) for g, (a, b) in dense_pairs)),
                         (f"xavier_limit({list(shapes[0])}) = {got[0]:.5f} is not the Xavier uniform limit.", ""))
        fb.wrong(f"xavier_limit: {why}", answer=(more + " " if more else "") + answer)

    def _judge_init(self, fb, data, dense, conv, seed, other_seed):
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
                fb.wrong(f"init_weight raised {message}. It is called with a dense kernel's shape and a convolution "
                         f"kernel's, each with a layout on the mesh.")
            return
        w1, w2, *others, w_conv, w_rows = data["weights"]
        if len(others) != 2:
            raise ValueError(f"{len(data['weights'])} weights, not 6")
        problem = (self._judge_weight(w1, dense, WEIGHT_SPECS) or self._judge_weight(w_conv, conv, CONV_SPECS)
                   or self._judge_weight(w_rows, dense, ROWS_SPECS))
        if problem:
            fb.wrong(f"init_weight: {problem[0]}", answer=problem[1])
            return
        values, again = (np.asarray(w["value"], dtype="float64") for w in (w1, w2))
        others = [np.asarray(w["value"], dtype="float64") for w in others]
        if not np.array_equal(values, again):
            fb.wrong("init_weight: the same seed gave different weights, so two clients would start from different "
                     "models.", answer="Use a stateless random op (tf.random.stateless_uniform) with seed=seed.")
            return
        same = [o.shape == values.shape and np.array_equal(values, o) for o in others]
        if all(same):
            fb.wrong(f"init_weight: the seeds {seed}, {other_seed[0]} and {other_seed[1]} gave identical weights: your "
                     f"function ignores its `seed` argument (a fixed seed pair?), so every layer would start from the "
                     f"same numbers.", answer="Pass seed=seed to the stateless random op.")
            return
        if any(same):
            position = "first" if same[0] else "second"
            fb.wrong(f"init_weight: the seeds {seed} and {other_seed[same.index(True)]}, which differ only in their "
                     f"{position} number, gave identical weights: your function uses only part of the seed pair, so "
                     f"two different seeds can start the same model.", answer="Pass the whole pair on: seed=seed.")
            return
        host_drawn = self._judge_host_drawn(values, dense, seed) or self._judge_host_drawn(
            np.asarray(w_conv["value"], dtype="float64"), conv, seed)
        placed = "model=1|" not in str(w1["mesh"]) and np.array_equal(values, np.asarray(w_rows["value"], "float64"))
        if host_drawn or placed or data.get("packing"):
            how = (f"it calls {', '.join(data['packing'])}" if data.get("packing") else
                   "its values are exactly one device's draw of the whole weight" if host_drawn else
                   f"the same seed gave the very same {dense[0]} x {dense[1]} weight with its columns split over "
                   f"'model' and with its rows split: the numbers did not depend on the blocks, so they were drawn "
                   f"whole and only placed, e.g. a constant given to call_with_layout")
            fb.wrong(f"init_weight: the weight was drawn whole on one device and then split onto the mesh ({how}). The "
                     f"exercise creates it on the mesh, so that each device draws only its own block (DTensor then "
                     f"draws every block from the seed itself, other numbers than one device's draw).",
                     answer="dtensor.call_with_layout(tf.function(tf.random.stateless_uniform), layout, shape=shape, "
                            "seed=seed, minval=-limit, maxval=limit), wrapped in dtensor.DVariable.")
            return
        limit = _reference_limit(dense)
        fb.right(f"init_weight: DVariables drawn on the mesh in their layouts, uniform in [-{limit:.3f}, {limit:.3f}] "
                 f"for {dense} and within the convolution's limit, reproducible from their seed", points=2)

    @staticmethod
    def _judge_weight(facts, shape, want_specs):
        """(what is wrong, the part that gives it away) for one weight of ``shape`` in the layout ``want_specs``, or
        None: a DVariable in that layout, of that shape, spread uniformly over the whole Xavier range."""
        import numpy as np

        limit = _reference_limit(shape)
        kind = "convolution kernel" if len(shape) == 4 else "dense kernel"
        if facts["variable"] is not True:
            return (f"init_weight should return a variable, so that the optimizer can update it, not a "
                    f"{facts['type']}.", "Wrap the value in dtensor.DVariable(...).")
        if facts["specs"] is None:
            return (f"init_weight returned a {facts['type']}, an ordinary tf.Variable: it lives on one device, outside "
                    f"the mesh, even when its initial value is a DTensor on the mesh (TensorFlow copies it there).",
                    "Create the initial value on the mesh with dtensor.call_with_layout(..., layout, ...) and wrap it "
                    "in dtensor.DVariable.")
        if list(facts["specs"]) != want_specs:
            return (f"init_weight ignored the layout it was given for the {kind}: the weight has "
                    f"{list(facts['specs'])}, expected {want_specs}.", "Pass `layout` to call_with_layout.")
        values = np.asarray(facts["value"], dtype="float64")
        top = float(np.abs(values).max()) if values.size else 0.0
        if list(values.shape) != list(shape) or facts["shape"] != list(shape):
            return f"init_weight returned shape {list(values.shape)} for shape {list(shape)}.", ""
        if not np.all(np.abs(values) <= limit * (1 + 1e-5)):
            return (f"values up to {top:.3f} exceed the Xavier limit for the {kind} {list(shape)}: is the range "
                    f"computed from xavier_limit of that shape?",
                    f"The limit is {limit:.3f}: sample uniformly in [-limit, limit] with limit = xavier_limit(shape).")
        if values.min() >= 0:
            return "all values are >= 0; the range is symmetric.", "minval=-limit."
        if top < 0.8 * limit:
            return (f"the values only reach {top:.3f}, well inside the Xavier limit for the {kind} {list(shape)}: "
                    f"Xavier uniform uses the whole range [-limit, limit].", f"The limit is {limit:.3f}.")
        if _cdf_distance_to_uniform(values, limit) > MAX_CDF_DISTANCE:
            middle = float(np.mean(np.abs(values) < limit / 2))
            return (f"the values stay within the Xavier range but are not spread uniformly: {middle:.0%} of them lie "
                    f"in the middle half [-limit/2, limit/2], where a uniform distribution puts 50%. Xavier UNIFORM "
                    f"draws every value in the range with the same probability.",
                    "Use tf.random.stateless_uniform(shape, seed, minval=-limit, maxval=limit).")
        return None

    @staticmethod
    def _judge_host_drawn(values, shape, seed):
        """Whether ``values`` are one device's stateless draw of the whole weight (U(-limit, limit), or limit times
        U(-1, 1)), which DTensor's draw on a sharded layout is not."""
        import numpy as np
        import tensorflow as tf

        limit = _reference_limit(shape)
        draws = (tf.random.stateless_uniform(list(shape), seed=seed, minval=-limit, maxval=limit),
                 limit * tf.random.stateless_uniform(list(shape), seed=seed, minval=-1.0, maxval=1.0))
        return any(np.allclose(values, draw.numpy(), rtol=0, atol=1e-6) for draw in draws)


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
                  {"q1": XavierInit, "q2": HiddenSizeBug, "q3": FactoredSlots, "q4": FrozenStep, "q5": BrokenVariable})
