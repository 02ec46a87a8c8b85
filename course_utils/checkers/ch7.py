"""Chapter 7 · Where next: the exercises' graders and hints."""
import math
import re

from .answers import UNSHARDED, as_int, global_numpy, grade_items, layout_of, mesh_dims, only_ellipses
from ..meshes import mesh_text
from .core import Exercise, Feedback, chapter

# Exercise 1: a [16, 32] weight saved from the batch=4 x model=2 mesh, restored onto rows=8 split by rows.
SAVED_SHAPE = (16, 32)
RESTORE_MESH = [("rows", 8)]
RESTORE_SPECS = ["rows", UNSHARDED]


def saved_value():
    """The weight the exercise saved: 0, 0.01, 0.02, ... row by row (NumPy)."""
    import numpy as np

    return (np.arange(math.prod(SAVED_SHAPE), dtype="float32") / 100).reshape(SAVED_SHAPE)


class RestoreOnAnotherMesh(Exercise):
    title = "Restore a checkpoint onto another mesh"
    points = 3
    hints = (
        "Create the variable first, in the new layout (zeros will do), on the new mesh: "
        "dtensor.DVariable(dtensor.call_with_layout(tf.zeros, layout, shape=[16, 32])).",
        "Then restore into it with tf.train.Checkpoint, under the SAME name the checkpoint used when it "
        "was saved (w): tf.train.Checkpoint(w=restored).restore(checkpoint_path).",
    )

    def collect(self, restored, seed=0):
        """What crosses: ``{"type": the answer's type name}``, and when the answer has ``read_value``,
        ``"value"`` (what it reads: a DTensor crosses as its layout and per-device blocks) and
        ``"restore_uid"`` (:func:`restore_uid`: the id a ``tf.train.Checkpoint`` restore stamped on
        it, ``-1`` if none did, ``None`` if it has none). The checkpoint is the notebook's, so
        ``seed`` changes nothing here."""
        data = {"type": type(restored).__name__}
        if hasattr(restored, "read_value"):
            data["value"] = restored.read_value()
            data["restore_uid"] = restore_uid(restored)
        return data

    def judge(self, data, seed=0):
        """Reads what :meth:`collect` sent: the value's layout, mesh, shape, dtype and numbers (compared
        with :func:`saved_value`), and whether a restore wrote into it (a restore id of 0 or more)."""
        fb = Feedback()
        value = data.get("value")
        layout = None if value is None else layout_of(value)
        if layout is None:
            fb.wrong(f"restored should be a dtensor.DVariable, not a {data['type']}.")
            return fb
        dims = mesh_dims(layout.mesh)
        if dims == RESTORE_MESH:
            fb.right(f"on the mesh {mesh_text(dims)}")
        else:
            fb.wrong(f"restored lives on the mesh {mesh_text(dims)}; the exercise asks for {mesh_text(RESTORE_MESH)}.")
        if list(layout.sharding_specs) == RESTORE_SPECS:
            fb.right(f"layout {RESTORE_SPECS}")
        elif layout.is_fully_replicated():
            fb.wrong("restored is replicated: split its rows over 'rows' (the first tensor axis).")
        else:
            fb.wrong(f"restored's layout is {layout.sharding_specs}: the rows (the first axis) go over 'rows'.")
        if tuple(value.shape) != SAVED_SHAPE:
            fb.wrong(f"restored has shape {tuple(value.shape)}; the saved weight is {SAVED_SHAPE}.")
            return fb
        import numpy as np

        numbers = global_numpy(value)
        uid = data.get("restore_uid")
        if value.dtype.name != "float32":
            fb.wrong(f"restored is {value.dtype.name}; the checkpoint holds float32: create the variable with the "
                     f"saved weight's dtype, then restore into it.")
        elif not numbers.any():
            fb.wrong("restored still holds zeros: did the restore run, and under the name the checkpoint used (w)?")
        elif not np.array_equal(numbers, saved_value()):
            fb.wrong("restored holds other values than the saved weight: restore the checkpoint into it.")
        elif type(uid) is not int or uid < 0:
            fb.wrong("restored holds the saved values, but no checkpoint was restored into it: the exercise is to "
                     "read them back from the file with tf.train.Checkpoint, not to build them again.")
        else:
            fb.right("the saved values, restored from the checkpoint")
        return fb


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


# Exercise 2: which key a LayoutMap gives two paths, under the three rules of the chapter.
KEYS = ("dense_1", ".*dense_1/kernel")  # inserted in this order
PATHS = {"kernel": "mlp/dense_1/kernel", "bias": "mlp/dense_1/bias"}
RULES = {"tf_keras": re.match, "keras_3_13": re.search, "keras_3_15": re.fullmatch}
OUTCOMES = KEYS + ("replicated", "ValueError")


def _reference_layout_map_lookup(rule, path):
    """The key a LayoutMap finds for ``path`` under ``rule`` (a key of RULES), 'replicated' or 'ValueError'."""
    found = [key for key in KEYS if RULES[rule](key, path)]
    if not found:
        return "replicated"
    if rule == "tf_keras":
        return found[0]  # the first key inserted wins
    return found[0] if len(found) == 1 else "ValueError"


NO_KEY = ("none", "replicated", "no key", "no match", "nothing", "[]", "()", "")


def _outcome(raw):
    """A key, 'replicated' (None, (), [], 'none', 'no key', ...) or 'ValueError' (class, instance or name)."""
    if raw is None or isinstance(raw, (list, tuple, dict)) and not raw:
        return "replicated"
    if isinstance(raw, Exception):
        raw = type(raw)
    if isinstance(raw, type) and issubclass(raw, Exception):
        raw = raw.__name__
    if isinstance(raw, str):
        text = raw.strip().strip("'\"")
        return text if text in OUTCOMES else ("replicated" if text.lower() in NO_KEY else None)
    return None


class LayoutMapRules(Exercise):
    title = "Which key does a LayoutMap find? Three rules"
    points = 6
    none_is_answer = True  # None, () and [] mean "no key: replicated"; the placeholders are `...`
    hints = (
        "Try each key on the path with the rule's function: re.match (from the start), re.search "
        "(anywhere), re.fullmatch (the whole path). Both paths start with 'mlp/'.",
        "Then count the keys that matched. tf_keras takes the first one inserted; Keras 3 raises a ValueError "
        "when more than one matches; no match at all means the weight is replicated.",
    )

    def grade(self, found):
        expected = {f"{part}, {rule}": _reference_layout_map_lookup(rule, path)
                    for part, path in PATHS.items() for rule in RULES}

        def explain(key, given, raw):
            part, rule = key.split(", ")
            if given is None:
                return f"answer one of {list(OUTCOMES)}, got {raw!r}.", ""
            matcher = RULES[rule].__name__
            return (f"apply re.{matcher} to each key and the path {PATHS[part]!r}, then "
                    f"{'take the first that matches' if rule == 'tf_keras' else 'count the matches'}.", "")

        return grade_items(Feedback(), found, expected, explain, _outcome, "a key, 'replicated' or 'ValueError'",
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

NAMES = {"tensor": "tensor", "model": "tensor", "pipeline": "pipeline", "sequence": "sequence",
         "context": "sequence", "ring attention": "sequence", "expert": "expert", "mixture of experts": "expert",
         "moe": "expert", "data": "data", "fsdp": "fsdp", "zero": "fsdp", "spatial": "spatial"}


def _kind(raw):
    if not isinstance(raw, str):
        return None
    text = raw.strip().lower().replace("-", " ").replace("_", " ")
    text = re.sub(r"\s*parallel(ism)?$", "", text)
    return NAMES.get(text)


def _letters(raw):
    if isinstance(raw, str):
        raw = [part for part in re.split(r"[\s,]+", raw) if part]
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


# Exercise 4: the pipeline bubble of a GPipe-style schedule.
def _reference_bubble(stages, micro_batches):
    """The share of a step each device idles in a GPipe-style schedule: (d - 1) / (m + d - 1)."""
    return (stages - 1) / (micro_batches + stages - 1)


def _reference_fewest_micro_batches(stages, at_most):
    """The fewest micro-batches that keep the bubble of ``stages`` stages at most ``at_most``."""
    m = 1
    while _reference_bubble(stages, m) > at_most:
        m += 1
    return m


def _number(raw):
    """A float from anything ``float()`` takes (NumPy numbers, scalar arrays and tensors, Fractions); else None."""
    if isinstance(raw, bool):
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


class PipelineBubble(Exercise):
    title = "The pipeline bubble"
    points = 2
    hints = (
        "With d stages and m micro-batches, each device idles (d - 1) / (m + d - 1) of a step.",
        "For the second part, solve (d - 1) / (m + d - 1) <= 0.1 for m, and take the smallest whole number.",
    )

    def grade(self, idle, micro_batches):
        fb = Feedback()
        right_idle, given_idle = _reference_bubble(4, 12), _number(idle)
        if given_idle is not None and abs(given_idle - right_idle) < 1e-3:
            fb.right("idle share with 4 stages and 12 micro-batches")
        elif given_idle is None:
            fb.wrong(f"idle: give a number, the share of the step as a fraction (0.5 for half), got {idle!r}.")
        elif abs(given_idle - 0.25) < 1e-3:  # (d - 1) / m = 3/12, or d / (m + d) = 4/16
            fb.wrong("idle: 0.25 counts the slots of the step wrong. How many slots does the pipeline take to fill "
                     "before the last stage gets its first micro-batch, and in how many of all the step's slots "
                     "does each device work?", answer=f"idle = (4 - 1) / (12 + 4 - 1) = {right_idle}")
        elif given_idle > 1:
            fb.wrong("idle: give a share between 0 and 1 (0.25 for a quarter), not a percentage.")
        else:
            fb.wrong("idle: count the slots of a step (the micro-batches, plus those the pipeline needs to fill and "
                     "drain), and the slots in which each device has nothing to do.",
                     answer=f"idle = (4 - 1) / (12 + 4 - 1) = {right_idle}")
        right_m, given_m = _reference_fewest_micro_batches(8, 0.1), as_int(micro_batches)
        if given_m == right_m:
            fb.right("fewest micro-batches for at most 10 % idle with 8 stages")
        elif given_m is None:
            fb.wrong(f"micro_batches: give a whole number of micro-batches, got {micro_batches!r}.")
        elif given_m > right_m:
            fb.wrong("micro_batches: that works, but fewer would too: find the smallest.")
        elif given_m > 0:
            idle_share = _reference_bubble(8, given_m)
            fb.wrong(f"micro_batches: with {given_m}, each device idles {idle_share:.1%} of the step with 8 "
                     f"stages, more than 10 %: find the smallest whole m with (8 - 1) / (m + 8 - 1) <= 0.1.",
                     answer=f"micro_batches = {right_m}")
        else:
            fb.wrong(f"micro_batches: give a positive number of micro-batches, got {micro_batches!r}.")
        return fb


CHAPTER = chapter(7, "Where next", [RestoreOnAnotherMesh, LayoutMapRules, NameTheParallelism, PipelineBubble])
