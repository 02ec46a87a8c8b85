"""Chapter 8 · exercise 2: a function that ports any tf_keras ``LayoutMap`` to Keras 3, checked on the checker's own
maps and models.

``collect`` builds each case's model with Keras (off any mesh), calls the learner's ``port`` and reads the map it
returns by duck typing (iteration over keys, ``.axes``, ``.device_mesh``); ``judge`` applies tf_keras' lookup rule
and Keras 3's to the keys that crossed, with ``re`` only (no Keras, JAX or TensorFlow).
"""
import re

from .answers import short_error
from .core import Exercise, Feedback
from .ch8_run import key_text

RULES = ("match", "search", "fullmatch")  # tf_keras, Keras 3.13, Keras 3.15
RULE_KERAS = {"match": "tf_keras", "search": "Keras 3.13", "fullmatch": "Keras 3.15"}
MESH = ((4, 2), ("batch", "model"))  # the notebook's device_mesh

# The notebook's case: make_mlp3() and the colleague's map, as (key, axes) in insertion order (None: replicated).
COLLEAGUE_MAP = (("d3.kernel", None), ("d.*kernel", ("model", None)))
PORT_CASES = (  # the checker's cases: the notebook's, then one whose keys catch more than a first reading says
    {"model": "mlp3", "input": (28, 28, 1), "layers": (("d1", 256), ("d2", 128), ("d3", 10)), "map": COLLEAGUE_MAP},
    {"model": "enc", "input": (24,), "layers": (("dense", 32), ("dense_1", 16), ("dense_12", 8), ("out", 4)),
     "map": (("dense_1.*kernel", (None, "model")), (".*kernel", ("model", None)), ("out.kernel", None),
             ("dense.*bias", ("model",)))},
)


def tf_keras_name(path):
    """The name tf_keras' ``LayoutMap`` looks a Keras 3 weight up by: ``'mlp3/d1/kernel'`` -> ``'d1.kernel'``."""
    return ".".join(path.split("/")[1:])


def _reference_tf_keras_axes(old_map, paths):
    """{path: axes} as tf_keras places each weight: an exact key, else the first key that re.match-es, else None."""
    found = {}
    for path in paths:
        name = tf_keras_name(path)
        exact = [axes for key, axes in old_map if key == name]
        first = exact or [axes for key, axes in old_map if re.match(key, name)]
        found[path] = first[0] if first else None
    return found


def _as_layout(axes, rank):
    """A weight's axes as the tf_keras map would compare them: None when replicated, else one entry per axis.

    JAX reads a PartitionSpec shorter than the array as unsplit on the axes it leaves out, so ``(None,)`` and
    ``(None, None)`` on a matrix, like no key at all, replicate it; ``("model",)`` on a matrix is
    ``("model", None)``. Axes longer than the weight make Keras fail: they stay as given.
    """
    if axes is None or len(axes) > rank:
        return axes
    axes = tuple(axes) + (None,) * (rank - len(axes))
    return None if all(axis is None for axis in axes) else axes


def keras3_lookup(keys, path, rule):
    """What a Keras 3 map of ``{key: axes}`` gives ``path`` when keys are tried with ``re.<rule>``: an exact key
    first (``LayoutMap.__getitem__``), else the one key that matches; ``"several"`` when more match; None when none
    does."""
    if path in keys:
        return keys[path]
    matching = [key for key in keys if getattr(re, rule)(key, path)]
    return "several" if len(matching) > 1 else keys[matching[0]] if matching else None


def _case_model(case):
    """The case's model, built off any mesh. Its weights start at zero: port reads only their paths and shapes, and
    zeros need no random initializer compiled per shape (seconds on JAX)."""
    import keras

    return keras.Sequential([keras.Input(case["input"]), keras.layers.Flatten()]
                            + [keras.layers.Dense(units, name=name, kernel_initializer="zeros")
                               for name, units in case["layers"]], name=case["model"])


def _read_map(layout_map):
    """A Keras 3 LayoutMap as plain data: ``{"keys": [(key, axes), ...], "mesh": (shape, axis names)}``, or
    ``{"type": name}`` for anything else (a dict of layouts has no mesh: ModelParallel cannot use it)."""
    mesh = getattr(layout_map, "device_mesh", None)
    try:
        keys = [(key_text(key), tuple(layout_map[key].axes)) for key in list(layout_map)]
        mesh = (tuple(mesh.shape), tuple(mesh.axis_names))
    except (TypeError, AttributeError, KeyError):
        return {"type": type(layout_map).__name__}
    return {"keys": keys, "mesh": mesh}


def describe_case(case):
    """A case in words, for the feedback: the model's layers and the old map's keys."""
    layers = ", ".join(f"{name} ({units})" for name, units in case["layers"])
    return f"the model {case['model']!r} (Dense {layers}) with the tf_keras keys {[key for key, _ in case['map']]}"


class PortAnyLayoutMap(Exercise):
    title = "Port any tf_keras LayoutMap to Keras 3"
    points = 3
    hints = (
        "Work weight by weight. For each weight of `model`: which name would tf_keras look it up by, and which of "
        "the old keys would it take (an exact key first, then the FIRST key that re.match-es)? Then write a Keras 3 "
        "key that finds that weight, and only it, whatever the rule.",
        "tf_keras names the weight 'mlp3/d1/kernel' 'd1.kernel': the path without the model's name, '/' read as '.'. "
        "re.match anchors only the start, so 'dense_1.*kernel' matches 'dense_12.kernel' too. For the Keras 3 map, "
        "re.escape(weight.path) as the key means the same under re.match, re.search and re.fullmatch.",
        "for weight in model.weights: name = '.'.join(weight.path.split('/')[1:]); axes = the exact key's, or the "
        "first re.match's, or None; if axes is not None: layout_map[re.escape(weight.path)] = axes.",
    )

    def collect(self, port, seed=0):
        """Calls ``port(old_map, model, device_mesh)`` on each case of :data:`PORT_CASES` (its model built off any
        mesh) with a 4 x 2 mesh, and reads what it returned.

        Crosses: ``{"callable": False, "type": name}``, or ``{"callable": True, "cases": [{"paths": {path: shape},
        "error": text} or {"paths", "map": :func:`_read_map`}, ...]}`` (the ``seed`` changes nothing).
        """
        if not callable(port) or isinstance(port, type):
            return {"callable": False, "type": type(port).__name__}
        from keras import distribution as kd

        device_mesh = kd.DeviceMesh(shape=MESH[0], axis_names=MESH[1], devices=kd.list_devices()[:8])
        cases = []
        for case in PORT_CASES:
            model = _case_model(case)
            found = {"paths": {weight.path: tuple(weight.shape) for weight in model.weights}}
            try:
                found["map"] = _read_map(port(list(case["map"]), model, device_mesh))
            except Exception as err:
                found["error"] = short_error(err)
            cases.append(found)
            if "error" in found:
                break
        return {"callable": True, "cases": cases}

    def judge(self, data, seed=0):
        """Per case, the weights' layouts under each rule against tf_keras' (the notebook's case 1 point, the
        checker's 1), and 1 point when every key means the same under re.match, re.search and re.fullmatch."""
        fb = Feedback()
        if not data["callable"]:
            fb.wrong(f"port should be a function (old_map, model, device_mesh) -> kd.LayoutMap, got a "
                     f"{str(data['type'])[:60]}.")
            return fb
        given = list(data["cases"])
        if not 1 <= len(given) <= len(PORT_CASES):
            raise ValueError("no case data")
        same_everywhere, any_right = True, False
        for index, (case, found) in enumerate(zip(PORT_CASES, given)):
            where = "the notebook's make_mlp3() and colleague_map" if index == 0 else describe_case(case)
            if "error" in found:
                fb.wrong(f"On {where}, port raised {found['error']}. The checker calls port(old_map, model, "
                         f"device_mesh) with old_map a list of (key, axes) pairs and a built model.")
                return fb
            judged = self._judge_case(fb, found, case, where)
            if judged is None:
                return fb
            right, same = judged
            same_everywhere, any_right = same_everywhere and same, any_right or right
        if len(given) < len(PORT_CASES):
            raise ValueError("a case is missing from the data")
        if same_everywhere and any_right:
            fb.right("every key means the same under re.match, re.search and re.fullmatch")
        elif same_everywhere:
            fb.wrong("Your keys mean the same under every rule, but they place no case's weights as tf_keras does.")
        else:
            fb.wrong("Your keys mean different things under re.match (tf_keras), re.search (Keras 3.13) and "
                     "re.fullmatch (Keras 3.15): write each key as a pattern for the whole path, and only that path.",
                     answer="re.escape(weight.path) is such a key.")
        return fb

    @staticmethod
    def _judge_case(fb, found, case, where):
        """One case: a point when every weight gets tf_keras' layout under re.fullmatch; returns (whether they do,
        whether the keys mean the same under every rule), or None when the map cannot be read (the feedback says
        why)."""
        layout_map = found["map"]
        if "keys" not in layout_map:
            fb.wrong(f"port should return a keras.distribution.LayoutMap, got a {str(layout_map['type'])[:60]}.")
            return None
        if tuple(map(tuple, layout_map["mesh"])) != MESH:
            shape, names = layout_map["mesh"]
            fb.wrong(f"The map is built on a {' x '.join(map(str, shape))} mesh with axes {tuple(names)}: build it on "
                     f"the device_mesh port is given.")
            return None
        keys = {str(key): tuple(axes) for key, axes in layout_map["keys"]}
        paths = {path: tuple(shape) for path, shape in found["paths"].items()}
        try:
            for key in keys:
                re.compile(key)
        except re.error as err:
            fb.wrong(f"On {where}: a key is not a regular expression ({err}).")
            return None
        want = _reference_tf_keras_axes(case["map"], paths)
        got = {rule: {path: keras3_lookup(keys, path, rule) for path in paths} for rule in RULES}
        several = [(path, rule) for rule in RULES[1:] for path in paths if got[rule][path] == "several"]
        if several:
            path, rule = several[0]
            fb.wrong(f"On {where}: {path!r} matches several of your keys under re.{rule} ({RULE_KERAS[rule]}): Keras 3 "
                     f"raises ValueError there, where tf_keras took the first key inserted.")
            return None
        placed = {rule: {path: _as_layout(axes, len(paths[path])) for path, axes in got[rule].items()}
                  for rule in RULES}
        wrong = [path for path in paths if placed["fullmatch"][path] != want[path]]
        if not wrong:
            fb.right(f"{'make_mlp3' if case['model'] == 'mlp3' else case['model']}: every weight gets the layout the "
                     f"tf_keras map gives it")
        else:
            PortAnyLayoutMap._judge_why(fb, case, where, wrong[0], placed, want, keys)
        return not wrong, all(placed[rule] == placed["fullmatch"] for rule in RULES)

    @staticmethod
    def _judge_why(fb, case, where, path, placed, want, keys):
        """The first wrong weight of a case, and the rule it shows (held back: the layout it should get). ``placed``:
        ``{rule: {path: axes}}`` from the learner's keys."""
        name = tf_keras_name(path)
        exact = any(key == name for key, _ in case["map"])
        matching = [key for key, _ in case["map"] if re.match(key, name)]
        if keys and all("/" not in key and not any(re.fullmatch(key, p) for p in placed["fullmatch"]) for key in keys):
            why = ("your keys name no path: Keras 3 looks up variable.path, such as "
                   f"{path!r}, with '/' and the model's name, not tf_keras' {name!r}")
        elif placed["search"][path] == want[path]:
            why = ("your keys find it under re.search (Keras 3.13) but not under re.fullmatch (Keras 3.15): a key must "
                   "match the whole path")
        elif exact and len(matching) > 1 and matching[0] != name:
            why = (f"tf_keras finds an old key EQUAL to {name!r}: which key decides, the exact one or the first "
                   f"pattern inserted?")
        elif len(matching) > 1:
            why = (f"several old keys match {name!r} under re.match: tf_keras takes the FIRST one inserted. Which is "
                   f"it?")
        elif len(matching) == 1 and not re.fullmatch(matching[0], name):
            why = (f"the old key {matching[0]!r} matches {name!r}: re.match anchors only the START of the name, so a "
                   f"key also matches names it is a prefix of")
        elif not matching:
            why = f"no old key matches {name!r}, so tf_keras keeps it replicated"
        else:
            why = (f"tf_keras looks this weight up as {name!r} (the layer's name, a dot, the attribute): which old "
                   f"key finds that name?")
        got = placed["fullmatch"][path] or "no layout (replicated)"
        fb.wrong(f"On {where}: {path!r} gets {got}, not the layout tf_keras gives it: {why}",
                 answer=f"It should get {want[path] or 'no layout (it stays replicated)'}.")
