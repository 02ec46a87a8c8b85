"""Chapter 6, exercise 1 (Xavier initialisation on a mesh): its checker and hints.

``collect`` runs the learner's ``xavier_limit`` and ``init_weight`` where they live, on shapes and seeds drawn from
the check's seed, and sends what they produced as plain data (:func:`_value_facts`); ``judge`` draws the same cases
again and computes the limits itself.
"""
import math

from .answers import UNSHARDED, checker_mesh, close, global_numpy, layout_of, short_error, specs
from .ch6_answers import ERROR, MISSING, NOT_CALLABLE, _not_callable, _raised
from .core import Exercise, Feedback

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
