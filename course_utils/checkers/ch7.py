"""Chapter 7 · Where next: the exercises' graders and hints."""
import math
import re

from .answers import UNSHARDED, global_numpy, grade_items, layout_of, mesh_dims
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

    def grade(self, restored):
        fb = Feedback()
        if not hasattr(restored, "read_value") or layout_of(restored.read_value()) is None:
            fb.wrong(f"restored should be a dtensor.DVariable, not a {type(restored).__name__}.")
            return fb
        layout = layout_of(restored.read_value())
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
        if tuple(restored.shape) != SAVED_SHAPE:
            fb.wrong(f"restored has shape {tuple(restored.shape)}; the saved weight is {SAVED_SHAPE}.")
            return fb
        import numpy as np

        value = global_numpy(restored.read_value())
        if np.array_equal(value, saved_value()):
            fb.right("the saved values, restored")
        elif not value.any():
            fb.wrong("restored still holds zeros: did the restore run, and under the name the checkpoint used (w)?")
        else:
            fb.wrong("restored holds other values than the saved weight: restore the checkpoint into it.")
        return fb


# Exercise 2: which key a LayoutMap gives two paths, under the three rules of the chapter.
KEYS = ("dense_1", ".*dense_1/kernel")  # inserted in this order
PATHS = {"kernel": "mlp/dense_1/kernel", "bias": "mlp/dense_1/bias"}
RULES = {"tf_keras": re.match, "keras_3_13": re.search, "keras_3_15": re.fullmatch}
OUTCOMES = KEYS + ("replicated", "ValueError")


def layout_map_lookup(rule, path):
    """The key a LayoutMap finds for ``path`` under ``rule`` (a key of RULES), 'replicated' or 'ValueError'."""
    found = [key for key in KEYS if RULES[rule](key, path)]
    if not found:
        return "replicated"
    if rule == "tf_keras":
        return found[0]  # the first key inserted wins
    return found[0] if len(found) == 1 else "ValueError"


def _outcome(raw):
    if raw is None:
        return "replicated"
    if isinstance(raw, type) and issubclass(raw, Exception):
        raw = raw.__name__
    if isinstance(raw, str):
        text = raw.strip().strip("'\"")
        return text if text in OUTCOMES else ("replicated" if text.lower() in ("none", "replicated") else None)
    return None


class LayoutMapRules(Exercise):
    title = "Which key does a LayoutMap find? Three rules"
    points = 6
    hints = (
        "Try each key on the path with the rule's function: re.match (from the start), re.search "
        "(anywhere), re.fullmatch (the whole path). Both paths start with 'mlp/'.",
        "Then count the keys that matched. tf_keras takes the first one inserted; Keras 3 raises a ValueError "
        "when more than one matches; no match at all means the weight is replicated.",
    )

    def grade(self, found):
        expected = {f"{part}, {rule}": layout_map_lookup(rule, path)
                    for part, path in PATHS.items() for rule in RULES}

        def explain(key, given, raw):
            part, rule = key.split(", ")
            if given is None:
                return f"answer one of {list(OUTCOMES)}, got {raw!r}.", ""
            matcher = RULES[rule].__name__
            return (f"apply re.{matcher} to each key and the path {PATHS[part]!r}, then "
                    f"{'take the first that matches' if rule == 'tf_keras' else 'count the matches'}.", "")

        return grade_items(Feedback(), found, expected, explain, _outcome, "a key, 'replicated' or 'ValueError'")


# Exercise 3: name the parallelism from what each device holds and sends.
DESCRIPTIONS = {"a": "tensor", "b": "pipeline", "c": "sequence", "d": "expert"}
BEYOND_LAYOUTS = {"b", "d"}  # pipeline stages and schedules; routing tokens to experts
NAMES = {"tensor": "tensor", "model": "tensor", "pipeline": "pipeline", "sequence": "sequence",
         "context": "sequence", "expert": "expert", "mixture of experts": "expert", "moe": "expert",
         "data": "data", "fsdp": "fsdp", "zero": "fsdp", "spatial": "spatial"}


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
        "A DTensor layout says how each tensor is split over a mesh. Which schemes need something a layout "
        "cannot say: an order in time (stages, micro-batches) or a data-dependent destination for each token?",
    )

    def grade(self, kinds, beyond_layouts):
        fb = Feedback()

        def explain(key, given, raw):
            if given is None:
                return f"name one kind of parallelism (e.g. 'data', 'tensor', 'pipeline'), got {raw!r}.", ""
            return "read again what each device holds, and what it sends to the others.", ""

        grade_items(fb, kinds, DESCRIPTIONS, explain, _kind, "the name of a kind of parallelism")
        letters = _letters(beyond_layouts)
        if letters == BEYOND_LAYOUTS:
            fb.right("beyond layouts")
        elif letters is None:
            fb.wrong(f"beyond_layouts: give a set of letters such as {{'a'}}, got {beyond_layouts!r}.")
        elif "a" in letters or "c" in letters:
            fb.wrong("beyond_layouts: splitting a weight matrix or a sequence over a mesh axis IS a layout.")
        else:
            fb.wrong("beyond_layouts: one scheme needs a schedule in time, another sends tokens where a router "
                     "decides: both are beyond what a layout says.")
        return fb


# Exercise 4: the pipeline bubble of a GPipe-style schedule.
def bubble(stages, micro_batches):
    """The share of a step each device idles in a GPipe-style schedule: (d - 1) / (m + d - 1)."""
    return (stages - 1) / (micro_batches + stages - 1)


def fewest_micro_batches(stages, at_most):
    m = 1
    while bubble(stages, m) > at_most:
        m += 1
    return m


class PipelineBubble(Exercise):
    title = "The pipeline bubble"
    points = 2
    hints = (
        "With d stages and m micro-batches, each device idles (d - 1) / (m + d - 1) of a step.",
        "For the second part, solve (d - 1) / (m + d - 1) <= 0.1 for m, and take the smallest whole number.",
    )

    def grade(self, idle, micro_batches):
        fb = Feedback()
        right_idle = bubble(4, 12)
        if isinstance(idle, (int, float)) and not isinstance(idle, bool) and abs(idle - right_idle) < 1e-3:
            fb.right("idle share with 4 stages and 12 micro-batches")
        elif isinstance(idle, (int, float)) and abs(idle - 3 / 12) < 1e-3:
            fb.wrong("idle: the step lasts m + d - 1 slots, not m: divide by 12 + 4 - 1.")
        elif isinstance(idle, (int, float)) and idle > 1:
            fb.wrong("idle: give a share between 0 and 1 (0.25 for a quarter), not a percentage.")
        else:
            fb.wrong("idle: (d - 1) / (m + d - 1) with d = 4 stages and m = 12 micro-batches.",
                     answer=f"idle = {right_idle}")
        right_m = fewest_micro_batches(8, 0.1)
        if micro_batches == right_m:
            fb.right("fewest micro-batches for at most 10 % idle with 8 stages")
        elif micro_batches == right_m - 1:
            fb.wrong("micro_batches: one short: check (d - 1) / (m + d - 1) <= 0.1 at your m.")
        elif isinstance(micro_batches, int) and micro_batches > right_m:
            fb.wrong("micro_batches: that works, but fewer would too: find the smallest.")
        else:
            fb.wrong("micro_batches: solve (8 - 1) / (m + 8 - 1) <= 0.1 for the smallest whole m.",
                     answer=f"micro_batches = {right_m}")
        return fb


CHAPTER = chapter(7, "Where next", [RestoreOnAnotherMesh, LayoutMapRules, NameTheParallelism, PipelineBubble])
