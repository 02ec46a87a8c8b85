"""Chapter 7 · Where next: the exercises' graders and hints.

Exercise 1 (restore a checkpoint onto another mesh) lives in ``ch7_restore.py``, exercise 2 (which key a LayoutMap
finds) in ``ch7_lookup.py``, exercise 4 (the pipeline bubble) in ``ch7_bubble.py``, exercise 5 (experts with a
capacity) in ``ch7_moe.py``; exercise 3 (name the parallelism) here. The notebooks' texts of exercises 2 and 4 are in
``ch7_texts.py``.
"""
import re

from .answers import grade_items
from .core import Exercise, Feedback, chapter
from .ch7_bubble import PipelineBubble
from .ch7_lookup import LayoutMapRules
from .ch7_moe import ExpertsWithCapacity
from .ch7_restore import RestoreOnAnotherMesh, saved_value  # noqa: F401 - the exercise notebook imports it from here

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


CHAPTER = chapter(7, "Where next", {
    "q1": RestoreOnAnotherMesh, "q2": LayoutMapRules, "q3": NameTheParallelism, "q4": PipelineBubble,
    "q5": ExpertsWithCapacity})
