"""Chapter 7 · Where next: the exercises' graders and hints (exercise 5, experts with a capacity, in ``ch7_moe.py``)."""
import math
import re

from .answers import (UNSHARDED, as_int, as_number, checker_mesh, global_numpy, grade_items, layout_of, mesh_dims, on_mesh,
                      only_ellipses, short_error)
from ..meshes import mesh_text
from . import ch7_texts
from .core import Exercise, Feedback, chapter
from .ch7_moe import ExpertsWithCapacity

# Exercise 1: a function that restores a [16, 32] float32 weight saved as `w` (on batch=4 x model=2, split by
# columns over model) onto a 2-D mesh x=2 x y=4, its rows split over y and its columns over x (a layout whose
# order differs from the mesh's, which chapter 7 does not show). The checker saves a checkpoint of its own.
SAVED_SHAPE = (16, 32)
RESTORE_MESH = [("x", 2), ("y", 4)]
RESTORE_SPECS = ["y", "x"]
CHAPTER_MESH = [("rows", 8)]  # chapter 7's restore (section 4): rows over a 1-D mesh
MISSING, NOT_CALLABLE, ERROR = "missing", "not callable", "error"


def saved_value():
    """The weight the exercise notebook saves: 0, 0.01, 0.02, ... row by row (NumPy)."""
    import numpy as np

    return (np.arange(math.prod(SAVED_SHAPE), dtype="float32") / 100).reshape(SAVED_SHAPE)


def _checkpoint_values(seed):
    """The weight of the checkpoint a check saves: drawn from ``seed``, never the notebook's (NumPy, float32)."""
    import numpy as np

    return np.random.default_rng([7, int(seed)]).normal(size=SAVED_SHAPE).astype("float32")


class RestoreOnAnotherMesh(Exercise):
    title = "Restore a checkpoint onto another mesh"
    points = 3
    hints = (
        "Create the variable first, on the new mesh and in the new layout (zeros will do): make_mesh([('x', 2), "
        "('y', 4)]), and a dtensor.Layout with one entry per TENSOR axis, the mesh axis that splits it.",
        "Then restore into it with tf.train.Checkpoint, under the SAME name the checkpoint used when it was saved (w): "
        "tf.train.Checkpoint(w=restored).restore(checkpoint_path), with the path the function is given. Return it.",
    )

    def collect(self, restore_blocks, seed=0):
        """Saves a checkpoint of its own (``w``: a [16, 32] float32 weight drawn from ``seed``, on the checker's
        batch=4 x model=2 mesh, split by columns over model) and calls ``restore_blocks`` with its path.

        What crosses: ``{"kind": "returned", "type": the type name of what it returned}``, and when that has
        ``read_value``, ``"value"`` (what it reads: a DTensor crosses as its layout and per-device blocks) and
        ``"restore_uid"`` (:func:`restore_uid`: the id a ``tf.train.Checkpoint`` restore stamped on it, ``-1``
        if none did, ``None`` if it has none); the error it raised, as text; the type's name of an answer that is
        not callable."""
        import os
        import tempfile

        import tensorflow as tf
        from tensorflow.experimental import dtensor

        if not callable(restore_blocks):
            return {"kind": MISSING if restore_blocks is None else NOT_CALLABLE, "type": type(restore_blocks).__name__}
        saved = dtensor.DVariable(on_mesh(_checkpoint_values(seed), dtensor.Layout([UNSHARDED, "model"],
                                                                                   checker_mesh())))
        with tempfile.TemporaryDirectory(prefix="ch7_q1_") as folder:
            path = tf.train.Checkpoint(w=saved).save(os.path.join(folder, "weights"))
            try:
                restored = restore_blocks(path)
            except Exception as err:
                return {"kind": ERROR, "error": short_error(err)}
            data = {"kind": "returned", "type": type(restored).__name__}
            if hasattr(restored, "read_value"):
                data["value"] = restored.read_value()
                data["restore_uid"] = restore_uid(restored)
        return data

    def judge(self, data, seed=0):
        """Reads what :meth:`collect` sent: the value's layout, mesh, shape, dtype and numbers (compared with the
        checkpoint of ``seed``), and whether a restore wrote into it (a restore id of 0 or more)."""
        fb = Feedback()
        if data["kind"] in (MISSING, NOT_CALLABLE):
            fb.wrong("restore_blocks: not answered yet." if data["kind"] == MISSING else
                     f"restore_blocks should be a function checkpoint_path -> DVariable, not a {data['type']}.")
            return fb
        if data["kind"] == ERROR:
            error = str(data["error"])
            if "expected dtype" in error and "original dtype" in error:
                why = (" The variable's dtype is not the saved weight's (float32): a restore needs the same dtype and "
                       "shape. (A failed restore leaves DTensor refusing every later operation in this kernel: "
                       "restart it after the fix.)")
            elif "CancelledError" in error:
                why = (" An earlier DTensor operation failed in this kernel, and DTensor now refuses every operation: "
                       "restart the kernel and run the notebook again.")
            else:
                why = ""
            fb.wrong(f"restore_blocks raised {error}.{why} The checker calls it with the path of a checkpoint of its "
                     f"own, saved as the notebook's is: w, a [16, 32] float32 weight (other values).")
            return fb
        value = data.get("value")
        layout = None if value is None else layout_of(value)
        if layout is None:
            fb.wrong(f"restore_blocks should return a dtensor.DVariable, not a {data['type']}.")
            return fb
        self._judge_placement(fb, mesh_dims(layout.mesh), list(layout.sharding_specs), layout.is_fully_replicated())
        if tuple(value.shape) != SAVED_SHAPE:
            fb.wrong(f"the variable has shape {tuple(value.shape)}; the saved weight is {SAVED_SHAPE}.")
            return fb
        self._judge_values(fb, value, data.get("restore_uid"), seed)
        return fb

    @staticmethod
    def _judge_placement(fb, dims, got_specs, replicated):
        if sorted(dims) == sorted(RESTORE_MESH):
            fb.right(f"on the mesh {mesh_text(RESTORE_MESH)}")
        elif dims == CHAPTER_MESH:
            fb.wrong(f"the variable lives on the chapter's mesh {mesh_text(dims)}; this exercise asks for the 2-D mesh "
                     f"{mesh_text(RESTORE_MESH)}.")
        else:
            fb.wrong(f"the variable lives on the mesh {mesh_text(dims)}; the exercise asks for "
                     f"{mesh_text(RESTORE_MESH)}.")
        if got_specs == RESTORE_SPECS:
            fb.right(f"layout {RESTORE_SPECS}: rows over 'y', columns over 'x'")
        elif replicated:
            fb.wrong("the variable is replicated: every device holds the whole weight. Split its rows over 'y' and its "
                     "columns over 'x'.")
        elif got_specs == list(reversed(RESTORE_SPECS)):
            fb.wrong(f"its sharding specs {got_specs} split the rows over {got_specs[0]!r} and the columns over "
                     f"{got_specs[1]!r}: the specs name, for each TENSOR axis in order, the mesh axis that splits it, "
                     f"whatever the order of the mesh's axes.", answer=f"sharding_specs = {RESTORE_SPECS}")
        elif UNSHARDED in got_specs:
            fb.wrong(f"its sharding specs {got_specs} split only one tensor axis: the exercise splits both, the rows "
                     f"over 'y' and the columns over 'x'.")
        else:
            fb.wrong(f"its sharding specs are {got_specs}: the rows (the first tensor axis) go over 'y', the columns "
                     f"over 'x'.")

    @staticmethod
    def _judge_values(fb, value, uid, seed):
        import numpy as np

        numbers = global_numpy(value)
        if value.dtype.name != "float32":
            fb.wrong(f"the variable is {value.dtype.name}; the checkpoint holds float32: create the variable with the "
                     f"saved weight's dtype, then restore into it.")
        elif not numbers.any():
            fb.wrong("the variable still holds zeros: did the restore run, from the path the function is given, and "
                     "under the name the checkpoint used (w)?")
        elif np.array_equal(numbers, saved_value()):
            fb.wrong("the variable holds the notebook's weight (saved_value()), not the one saved at the "
                     "checkpoint_path your function is given: the checker calls it with a checkpoint of its own, with "
                     "other values. Restore from the argument, not from the notebook's checkpoint or values.")
        elif not np.array_equal(numbers, _checkpoint_values(seed)):
            fb.wrong("the variable holds other values than the weight saved at checkpoint_path: restore that "
                     "checkpoint into it.")
        elif type(uid) is not int or uid < 0:
            fb.wrong("the variable holds the saved values, but no checkpoint was restored into it: the exercise is to "
                     "restore them with tf.train.Checkpoint, which reads each device's block from the file, not to "
                     "read the whole weight and pack it again.")
        else:
            fb.right("the saved values, restored from the checkpoint it was given")


def restore_uid(variable):
    """The id of the last ``tf.train.Checkpoint`` restore that wrote into ``variable``: -1 if none did,
    None when it has no such id (it is no trackable object).

    A restore stamps every object it restores with its restore id (``_update_uid``, set in
    ``tensorflow/python/checkpoint/restore.py``); a variable that was never restored has -1 there.
    """
    try:
        uid = getattr(variable, "_update_uid", None)
        return None if uid is None or isinstance(uid, bool) else int(uid)
    except (TypeError, ValueError, AttributeError):
        return None


def was_restored(variable):
    """Whether a ``tf.train.Checkpoint`` restore has written into ``variable`` (see :func:`restore_uid`)."""
    uid = restore_uid(variable)
    return uid is not None and uid >= 0


# Exercise 2: which key a LayoutMap gives two paths, under the three rules of the chapter. It varies per student
# (:mod:`.variants`): the model's and the layer's names in the paths, and the two keys, drawn from KEY_POOL.
KEYS = ("dense_1", ".*dense_1/kernel")  # inserted in this order (the defaults')
PATHS = {"kernel": "mlp/dense_1/kernel", "bias": "mlp/dense_1/bias"}
RULES = {"tf_keras": re.match, "keras_3_13": re.search, "keras_3_15": re.fullmatch}
OUTCOMES = KEYS + ("replicated", "ValueError")
LOOKUP_MODELS = ("mlp", "model", "net", "encoder", "tower", "classifier")  # a variant's model name
LOOKUP_LAYERS = ("dense_1", "dense_2", "dense", "hidden", "proj", "ffn_1", "output")  # and layer name
KEY_POOL = ("{l}", ".*{l}/kernel", ".*{l}/bias", "{m}/{l}", "{m}/.*", "kernel", "bias", ".*kernel", ".*bias", "{l}/.*",
            ".*{l}/.*", "{l}/kernel", "{l}/bias", "{m}", ".*/kernel", ".*/bias", "{m}/{l}/.*")  # never a whole path:
# both LayoutMaps return an exact key before they try any rule (measured: test_variants), which the question omits
CHAPTER_KEYS = (".*kernel", ".*dense_1/.*")  # the chapter's probe with two keys (on mlp/dense_1/kernel)


def _paths(params):
    """{"kernel": its path, "bias": its path} of the variant ``params``."""
    return {part: f"{params['model']}/{params['layer']}/{part}" for part in PATHS}


def _reference_layout_map_lookup(rule, path, keys=KEYS):
    """The key a LayoutMap with ``keys`` (inserted in this order) finds for ``path`` under ``rule`` (a key of RULES),
    'replicated' or 'ValueError'."""
    found = [key for key in keys if RULES[rule](key, path)]
    if not found:
        return "replicated"
    if rule == "tf_keras":
        return found[0]  # the first key inserted wins
    return found[0] if len(found) == 1 else "ValueError"


MATCHES = {"match": "from the START of the path only", "search": "anywhere in the path",
           "fullmatch": "only the WHOLE path"}  # what each of re's functions asks of a key


def _reference_lookup_as(matcher, first_wins, path, keys):
    """What a LayoutMap would find for ``path`` if it matched with ``matcher`` (re's function) and, when several keys
    match, took the first inserted (``first_wins``) or raised: a typical wrong answer of exercise 2 is one of these."""
    found = [key for key in keys if matcher(key, path)]
    if not found:
        return "replicated"
    return found[0] if first_wins or len(found) == 1 else "ValueError"


def _reference_lookup_mixup(rule, path, keys, given):
    """Why ``given`` is wrong for ``path`` under ``rule`` when it is what a mixed-up rule finds (another function of
    re, or the other way of treating several matches); "" when it is no such mix-up. Says what is wrong, not the
    answer."""
    matcher, first_wins = RULES[rule], rule == "tf_keras"
    if _reference_lookup_as(matcher, not first_wins, path, keys) == given:
        return (" tf_keras does not raise when several keys match: the first key inserted wins." if first_wins else
                f" That is what tf_keras's rule would give (the first key that matches); check how {rule} treats "
                f"several keys that match.")
    for other in RULES.values():
        if other is not matcher and _reference_lookup_as(other, first_wins, path, keys) == given:
            return (f" That is what re.{other.__name__} ({MATCHES[other.__name__]}) would find; {rule} uses "
                    f"re.{matcher.__name__}, which matches {MATCHES[matcher.__name__]}.")
    return ""


def _reference_lookups(params):
    """Exercise 2's answer for the variant ``params``: {"<part>, <rule>": what the LayoutMap finds}."""
    return {f"{part}, {rule}": _reference_layout_map_lookup(rule, path, params["keys"])
            for part, path in _paths(params).items() for rule in RULES}


def _reference_lookup_comment(rule, path, keys):
    """The comment of one line of the solution cell: why, where the line needs it (the defaults' as they were)."""
    found = [key for key in keys if RULES[rule](key, path)]
    if rule == "tf_keras" and found:
        return ("both match from the start: the first inserted wins" if len(found) == 2 else
                f"{keys[0]!r} does not match from the start of '{path.split('/')[0]}/...'" if found[0] != keys[0]
                else "")
    if rule == "keras_3_13":
        return "both keys occur somewhere in the path" if len(found) == 2 else ""
    if rule == "keras_3_15" and found:
        return "only this one matches the whole path" if len(found) == 1 else "both match the whole path"
    return ""


def _reference_lookup_draw_is_valid(params):
    """The three rules do not all agree and the six answers take at least three values; not the chapter's probe."""
    found = _reference_lookups(params)
    columns = {rule: tuple(found[f"{part}, {rule}"] for part in PATHS) for rule in RULES}
    chapter = tuple(params["keys"]) == CHAPTER_KEYS and (params["model"], params["layer"]) == ("mlp", "dense_1")
    exact = set(params["keys"]) & set(_paths(params).values())
    return len(set(columns.values())) >= 2 and len(set(found.values())) >= 3 and not chapter and not exact


NO_KEY = ("none", "replicated", "no key", "no match", "nothing", "[]", "()", "", "no key: replicated",
          "none (replicated)", "replicated (no key)", "not split")
RAISES = ("valueerror", "value error", "raises valueerror", "raises", "raise", "error", "ambiguous",
          "raises a valueerror", "valueerror (several keys)")


def _outcome(raw, outcomes=OUTCOMES):
    """One of ``outcomes`` (the keys, 'replicated', 'ValueError'): a key, 'replicated' (None, (), [], 'none', 'no
    key', ...) or 'ValueError' (class, instance or name, any case); a compiled pattern as its text."""
    if raw is None or isinstance(raw, (list, tuple, dict, set)) and not raw:
        return "replicated"
    if isinstance(raw, Exception):
        raw = type(raw)
    if isinstance(raw, type) and issubclass(raw, Exception):
        raw = raw.__name__
    if isinstance(raw, re.Pattern):
        raw = raw.pattern
    if isinstance(raw, str):
        text = raw.strip().strip("'\"").strip()
        if text in outcomes:
            return text
        words = " ".join(text.lower().replace(".", " ").split())
        return ("replicated" if words in NO_KEY or text.lower() in NO_KEY else
                "ValueError" if words in RAISES else None)
    return None


class LayoutMapRules(Exercise):
    title = "Which key does a LayoutMap find? Three rules"
    points = 6
    none_is_answer = True  # None, () and [] mean "no key: replicated"; the placeholders are `...`
    # A prediction: re's functions, or a LayoutMap, print the answer; it counts only when checked before they are in
    # the notebook's reach (the notebook tries them after the check).
    revealed_by = ("re:match", "re:search", "re:fullmatch", "keras.src.distribution.distribution_lib:LayoutMap",
                   "tf_keras.src.dtensor.layout_map:LayoutMap")
    hints = (
        "Try each key on the path with the rule's function: re.match (from the start), re.search "
        "(anywhere), re.fullmatch (the whole path). Both paths start with '{{model}}/'.",
        "Then count the keys that matched. tf_keras takes the first one inserted; Keras 3 raises a ValueError "
        "when more than one matches; no match at all means the weight is replicated.",
    )

    defaults = {"model": "mlp", "layer": "dense_1", "keys": list(KEYS)}
    templates = {"c05": ch7_texts.LOOKUP_QUESTION, "ch7-q2": ch7_texts.LOOKUP_SOLUTION, "c06a": ch7_texts.LOOKUP_WATCH}

    @staticmethod
    def draw(rng):
        """A model and a layer name, and two keys of KEY_POOL for them (see
        :func:`_reference_lookup_draw_is_valid`); never the defaults."""
        while True:
            model, layer = rng.choice(LOOKUP_MODELS), rng.choice(LOOKUP_LAYERS)
            keys = [key.format(m=model, l=layer) for key in rng.sample(KEY_POOL, 2)]
            params = {"model": model, "layer": layer, "keys": keys}
            if params != LayoutMapRules.defaults and _reference_lookup_draw_is_valid(params):
                return params

    def text_values(self):
        paths = _paths(self.params)
        return {**self.params, "key_1": self.params["keys"][0], "key_2": self.params["keys"][1],
                "kernel_path": paths["kernel"], "bias_path": paths["bias"]}

    def reference_values(self):
        keys, lines = self.params["keys"], []
        for part, path in _paths(self.params).items():
            for rule in RULES:
                line = f'    "{part}, {rule}": "{_reference_layout_map_lookup(rule, path, keys)}",'
                lines.append((line, _reference_lookup_comment(rule, path, keys)))
        column = next((len(line) + 2 for line, comment in lines if comment), 0)
        return {"found_lines": "\n".join(f"{line.ljust(column - 2)}  # {comment}" if comment else line
                                          for line, comment in lines)}

    def collect(self, found, seed=0):
        """The answers as plain data: a compiled pattern as its text (``seed`` changes nothing)."""
        if isinstance(found, dict):
            found = {key: value.pattern if isinstance(value, re.Pattern) else value for key, value in found.items()}
        return [found]

    def grade(self, found):
        expected, paths = _reference_lookups(self.params), _paths(self.params)
        outcomes = [*self.params["keys"], "replicated", "ValueError"]

        def explain(key, given, raw):
            part, rule = key.split(", ")
            if given is None:
                return f"answer one of {outcomes}, got {raw!r}.", ""
            matcher = RULES[rule].__name__
            mixup = _reference_lookup_mixup(rule, paths[part], self.params["keys"], given)
            return (f"apply re.{matcher} to each key and the path {paths[part]!r}, then "
                    f"{'take the first that matches' if rule == 'tf_keras' else 'count the matches'}.{mixup}", "")

        return grade_items(Feedback(), found, expected, explain, lambda raw: _outcome(raw, outcomes),
                           "a key, 'replicated' or 'ValueError'",
                           unanswered=only_ellipses)

    def unanswered(self, answer):
        return only_ellipses(answer)


# Exercise 3: name the parallelism from what each device holds and sends.
CASES = ("a", "b", "c", "d")  # the exercise's descriptions


def _reference_descriptions():
    """Exercise 3's answer: the kind of parallelism of each description."""
    return {"a": "tensor", "b": "pipeline", "c": "sequence", "d": "expert"}


def _reference_beyond_layouts():
    """Exercise 3's answer: the cases no layout can express.

    As the exercise describes them: b's stages fed micro-batch by micro-batch and c's ring, passing keys and values
    hop by hop, are schedules in time. d is written GShard's way: a dispatch einsum and a change of layout from
    tokens to experts, an all-to-all that DTensor's relayout runs itself (chapter 7 runs one).
    """
    return {"b", "c"}

NAMES = {"tensor": "tensor", "model": "tensor", "tp": "tensor", "megatron": "tensor", "intra layer": "tensor",
         "intra layer model": "tensor", "tensor model": "tensor", "pipeline": "pipeline", "pp": "pipeline",
         "inter layer": "pipeline", "layer": "pipeline", "gpipe": "pipeline", "pipeline model": "pipeline",
         "sequence": "sequence", "sp": "sequence", "context": "sequence", "cp": "sequence",
         "ring attention": "sequence",
         "ring": "sequence", "expert": "expert", "ep": "expert", "mixture of experts": "expert", "moe": "expert",
         "experts": "expert", "data": "data", "dp": "data", "fsdp": "fsdp", "zero": "fsdp", "sharded data": "fsdp",
         "fully sharded data": "fsdp", "spatial": "spatial"}


def _kind(raw):
    """The kind of parallelism a name means ('Tensor parallelism', 'TP', 'pipeline-parallel', 'expert (MoE)', ...)."""
    if not isinstance(raw, str):
        return None
    text = " ".join(raw.strip().strip("'\"").lower().replace("-", " ").replace("_", " ").split())
    for part in (text, re.sub(r"\(.*?\)", "", text), *re.findall(r"\((.*?)\)", text)):
        part = re.sub(r"\s*(parallel(ism)?|sharding)$", "", part.strip()).strip()
        if part in NAMES:
            return NAMES[part]
    # Names inside a longer phrase ('Megatron-style tensor parallel', 'pipeline model parallelism'): the longest
    # names found win over names they contain, and 'model' only counts alone.
    words = " " + re.sub(r"[^a-z]+", " ", text) + " "
    found = [name for name in NAMES if f" {name} " in words]
    found = [name for name in found if not any(name != other and f" {name} " in f" {other} " for other in found)]
    kinds = {NAMES[name] for name in found if name != "model"} or {NAMES[name] for name in found}
    return kinds.pop() if len(kinds) == 1 else None


def _letters(raw):
    """A set of case letters from a set, list or tuple of letters, or from text such as 'b, c', 'b and c' or 'bc';
    None, (), [], set() and 'none' are the empty set. None when it cannot be read."""
    if raw is None:
        return set()
    if isinstance(raw, str):
        words = [word for word in re.split(r"[^a-z]+", raw.lower()) if word and word not in ("and", "or")]
        if words in (["none"], ["nothing"], ["no"]):
            return set()
        raw = [letter for word in words for letter in (word if set(word) <= set("abcd") else [word])]
    try:
        return {str(part).strip().lower() for part in raw}
    except TypeError:
        return None


class NameTheParallelism(Exercise):
    title = "Name the parallelism"
    points = 5
    hints = (
        "Ask of each description: what is split over the devices? The weights' matrices, the layers, the "
        "tokens of one sequence, or the experts?",
        "A layout says WHERE each block of a tensor lives, and DTensor inserts the collectives that layouts imply "
        "(all-reduce, all-gather, and the all-to-all of a relayout). What no layout says is WHEN: an order of "
        "steps in time, such as stages fed micro-batch after micro-batch, or chunks passed on hop by hop.",
    )

    def grade(self, kinds, beyond_layouts):
        fb = Feedback()

        def explain(key, given, raw):
            if given is None:
                return f"name one kind of parallelism (e.g. 'data', 'tensor', 'pipeline'), got {raw!r}.", ""
            return "read again what each device holds, and what it sends to the others.", ""

        beyond = _reference_beyond_layouts()
        grade_items(fb, kinds, _reference_descriptions(), explain, _kind, "the name of a kind of parallelism")
        letters = _letters(beyond_layouts)
        if letters == beyond:
            fb.right("beyond layouts: the two schedules in time")
            return fb
        if letters is None:
            fb.wrong(f"beyond_layouts: give a set of letters such as {{'a'}}, got {beyond_layouts!r}.")
            return fb
        problems = []
        if "a" in letters:
            problems.append("a: splitting a weight matrix over a mesh axis IS a layout")
        if "d" in letters:
            problems.append("d, as described, is GShard's way: a dispatch einsum, then a change of layout from "
                            "tokens to experts, whose all-to-all DTensor's relayout runs itself (chapter 7, section 7)")
        if letters - set(CASES):
            problems.append(f"{sorted(letters - set(CASES))} are not among the cases a to d")
        if beyond - letters:
            problems.append("a scheme that needs an order in time, which no layout can say, is missing")
        fb.wrong("beyond_layouts: " + "; ".join(problems) + ".",
                 answer="They are b (stages fed micro-batch by micro-batch) and c (keys and values passed round "
                        "the ring hop by hop): schedules in time.")
        return fb


# Exercise 4: what the bubble costs a GPipe-style schedule. It varies per student (:mod:`.variants`): the pipeline of
# the first part (its stages and micro-batches) and the second part's stages and most idle share.
STAGES, MICRO_BATCHES = 4, 12  # the pipeline of the first part
WIDE_STAGES, MOST_IDLE_PERCENT = 8, 10  # the second part: 8 stages, each device idle at most 10 % of a step
CHAPTER_PIPELINES = ((4, 4), (4, 16), (4, 64))  # (stages, micro-batches) the chapter's bubble() printed
BUBBLE_STAGES = (2, 3, 4, 5, 6, 8)  # a drawn pipeline's stages
BUBBLE_MICRO_BATCHES = (6, 8, 10, 12, 16, 20, 24, 32)  # and its micro-batches
BUBBLE_WIDE_STAGES = (6, 8, 10, 12, 16)  # the second part's stages
BUBBLE_IDLE_PERCENTS = (5, 10, 20, 25)  # and the most each device may idle, in percent
UNIT_SHARES = {2: "a half", 3: "a third", 4: "a quarter", 5: "a fifth", 6: "a sixth", 7: "a seventh", 8: "an eighth",
               9: "a ninth", 10: "a tenth"}  # how the solution's comment names a bubble of 1/n


def _reference_bubble(stages, micro_batches):
    """The share of a step each device idles in a GPipe-style schedule: (d - 1) / (m + d - 1)."""
    return (stages - 1) / (micro_batches + stages - 1)


def _reference_speedup(stages, micro_batches):
    """How many times faster a step runs on ``stages`` pipelined devices than on one device holding every stage:
    one device takes m * d slots of one stage's work on one micro-batch, the pipeline m + d - 1."""
    return stages * micro_batches / (micro_batches + stages - 1)


def _reference_fewest_micro_batches(stages, at_most_percent):
    """The fewest micro-batches that keep the bubble of ``stages`` stages at most ``at_most_percent`` % (in whole
    numbers: (d - 1) * 100 <= p * (m + d - 1), so that no float rounding decides)."""
    m = 1
    while (stages - 1) * 100 > at_most_percent * (m + stages - 1):
        m += 1
    return m


def _times(raw):
    """A number from an answer such as 3.2, '3.2', '3.2x', '3.2 ×' or '320%' (see as_number); else None."""
    if isinstance(raw, str):
        raw = raw.strip().rstrip("x×X").strip()
    return as_number(raw, percent=True)


def idle_text(share, than_percent):
    """``share`` as a percentage with enough decimals to show it is above ``than_percent``: 7/69 -> '10.1%'.

    Example:
        >>> idle_text(7 / 69, 10), idle_text(15 / 299, 5)
        ('10.1%', '5.02%')
    """
    for digits in (1, 2, 3, 4):
        text = f"{share:.{digits}%}"
        if float(text[:-1]) > than_percent:
            return text
    return text


class PipelineBubble(Exercise):
    title = "What the pipeline bubble costs"
    points = 2
    defaults = {"stages": STAGES, "micro_batches": MICRO_BATCHES, "wide_stages": WIDE_STAGES,
                "idle_percent": MOST_IDLE_PERCENT}
    templates = {"c09": ch7_texts.BUBBLE_QUESTION, "ch7-q4": ch7_texts.BUBBLE_SOLUTION}
    hints = (
        "Time a step in slots: one slot is one stage's forward (or backward) work on one micro-batch. The forward "
        "pass sweeps the micro-batches through the stages, then the backward pass sweeps them back: how many slots "
        "does each sweep take until the last micro-batch is through? And on one device that runs every stage?",
        "Each sweep of the pipeline takes m + d - 1 slots (d - 1 to fill it), on one device m * d: the speed-up is "
        "m * d / (m + d - 1) = d * (1 - bubble). For the second part, solve (d - 1) / (m + d - 1) <= {{idle_share}} "
        "for m and take the smallest whole number.",
    )

    @staticmethod
    def draw(rng):
        """A pipeline (stages, micro-batches) other than the exercise's 4 x 12 and the chapter's, and a second part
        (stages, idle percent) other than 8 stages at 10 %, with other stages than the first part's."""
        stages, micro_batches = rng.choice([(d, m) for d in BUBBLE_STAGES for m in BUBBLE_MICRO_BATCHES
                                            if (d, m) not in (*CHAPTER_PIPELINES, (STAGES, MICRO_BATCHES))])
        wide_stages, idle_percent = rng.choice([(d, p) for d in BUBBLE_WIDE_STAGES for p in BUBBLE_IDLE_PERCENTS
                                                if (d, p) != (WIDE_STAGES, MOST_IDLE_PERCENT) and d != stages])
        return {"stages": stages, "micro_batches": micro_batches, "wide_stages": wide_stages,
                "idle_percent": idle_percent}

    def text_values(self):
        return {**self.params, "idle_share": f"{self.params['idle_percent'] / 100:g}"}

    def reference_values(self):
        from fractions import Fraction

        d, m = self.params["stages"], self.params["micro_batches"]
        line = f"speedup = ({m} * {d}) / ({m} + {d} - 1)"
        bubble = Fraction(d - 1, m + d - 1)
        return {"filling": d - 1, "speedup_line": line.ljust(65), "speedup": f"{_reference_speedup(d, m):.4g}",
                "bubble": UNIT_SHARES.get(bubble.denominator, str(bubble)) if bubble.numerator == 1 else str(bubble),
                "fewest": _reference_fewest_micro_batches(self.params["wide_stages"], self.params["idle_percent"])}

    def grade(self, speedup, micro_batches):
        fb = Feedback()
        speedup_ok = self._grade_speedup(fb, speedup, _times(speedup))
        wide, percent = self.params["wide_stages"], self.params["idle_percent"]
        given_m, right_m = as_int(micro_batches), _reference_fewest_micro_batches(wide, percent)
        if given_m == right_m:
            fb.right(f"fewest micro-batches for at most {percent}% idle with {wide} stages")
        elif given_m is None:
            fb.wrong(f"micro_batches: give a whole number of micro-batches, got {micro_batches!r}.")
        elif given_m > right_m:
            fb.wrong("micro_batches: that works, but fewer would too: find the smallest.")
        elif given_m > 0:  # the idle share of the learner's m only once the slots are counted right
            idle = f" each device idles {idle_text(_reference_bubble(wide, given_m), percent)} of the step," \
                if speedup_ok else ""
            fb.wrong(f"micro_batches: with {given_m} and {wide} stages,{idle} more than {percent}% of the "
                     f"step is idle: find the smallest whole number of micro-batches that keeps the bubble at most "
                     f"{percent}%.",
                     answer=f"({wide} - 1) / (m + {wide} - 1) <= {percent / 100:g}: micro_batches = {right_m}")
        else:
            fb.wrong(f"micro_batches: give a positive number of micro-batches, got {micro_batches!r}.")
        return fb

    def _grade_speedup(self, fb, raw, given):
        stages, micro_batches = self.params["stages"], self.params["micro_batches"]
        right = _reference_speedup(stages, micro_batches)
        answer = (f"One device: {micro_batches} x {stages} = {micro_batches * stages} slots; the pipeline: "
                  f"{micro_batches} + {stages} - 1 = {micro_batches + stages - 1} slots; speedup = {right:g}")
        def near(value):
            return given is not None and abs(given - value) < 1e-3 * max(1.0, abs(value))
        if near(right):
            fb.right(f"speed-up of {stages} pipelined stages with {micro_batches} micro-batches")
            return True
        if given is None:
            fb.wrong(f"speedup: give a number (how many times faster), got {raw!r}.")
        elif near(stages):
            fb.wrong("speedup: that is the speed-up of a pipeline with no bubble. While the pipeline fills and "
                     "drains, some devices have nothing to do: how many slots does the whole step take?",
                     answer=answer)
        elif near(1 / right):
            fb.wrong("speedup: that is the pipeline's time as a share of one device's: the question asks how many "
                     "times FASTER the pipeline is (a number above 1).", answer=answer)
        elif near(1 - _reference_bubble(stages, micro_batches)) or near(_reference_bubble(stages, micro_batches)):
            fb.wrong("speedup: that is a share of the step (the time each device works, or idles), not a speed-up. "
                     "Compare the step's time on one device with its time on the pipeline.", answer=answer)
        elif near(stages * micro_batches / (micro_batches + stages)):
            fb.wrong("speedup: your pipeline step is one slot too long. The last stage gets the first micro-batch "
                     "after how many slots of filling?", answer=answer)
        else:
            fb.wrong("speedup: count the slots of one step on the pipeline (the micro-batches, plus those it takes "
                     "to fill) and on one device (every stage of every micro-batch), and divide.", answer=answer)
        return False


CHAPTER = chapter(7, "Where next", {
    "q1": RestoreOnAnotherMesh, "q2": LayoutMapRules, "q3": NameTheParallelism, "q4": PipelineBubble,
    "q5": ExpertsWithCapacity})
