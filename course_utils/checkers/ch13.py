"""Chapter 13 · Practice at scale, profiling, NCCL and Horovod: the exercise's grader and hints.

Exercise 1's answer is code: the checker calls the learner's ``pack_sizes`` on gradient sizes of its own (a small CNN,
deeper MLPs) and compares with TensorFlow's packing rule for ``CommunicationOptions(bytes_per_pack=...)``. Exercise 2 (in ch13_step) is
a training step that all-reduces in such packs, run and measured by the checker.
"""
import importlib
import random

from .answers import as_int, short_error
from .core import Exercise, Feedback, chapter
from .reach import calls_recorded, tools_used_by

PACKING_TOOLS = ("tensorflow.python.distribute.cross_device_utils:group_by_size",)  # TensorFlow's own packing

# Exercise 1: the learner's pack_sizes(gradient_floats, bytes_per_pack), called on cases of the checker's.
NOTEBOOK_PACK_CASES = (
    ([864, 32, 18432, 64, 65536, 128, 1280, 10], 0),        # a small CNN: one pack
    ([864, 32, 18432, 64, 65536, 128, 1280, 10], 8192),
    ([864, 32, 18432, 64, 65536, 128, 1280, 10], 5160),     # bias + kernel of the last layer: exactly 5,160 bytes
    ([200704, 256, 65536, 256, 2560, 10], 1),              # every gradient alone
    ([200704, 256, 65536, 256, 2560, 10], 300000),
)


def pack_cases(seed):
    """The (gradient sizes in floats, bytes_per_pack) cases exercise 1's checker calls the learner's function on.

    Example:
        >>> len(pack_cases(0))
        5
    """
    if seed == 0:
        return NOTEBOOK_PACK_CASES
    rng = random.Random(seed)
    cases = []
    for _ in range(5):
        layers = [rng.choice([16, 32, 64, 100, 128, 256]) for _ in range(rng.randint(2, 4))]
        sizes, width = [], rng.choice([10, 20, 784])
        for units in layers + [10]:
            sizes += [width * units, units]
            width = units
        total = 4 * sum(sizes)
        cases.append((sizes, rng.choice([0, 4 * (sizes[-1] + sizes[-2]), rng.randint(1, total // 2), total])))
    return tuple(cases)


def _reference_packs(sizes, bytes_per_pack, bytes_per_float=4, closed_when_full=False, looking_ahead=False):
    """TensorFlow's rule (cross_device_ops.CollectiveAllReduce._all_reduce, cross_device_utils.group_by_size): the
    gradients reversed, a new pack once the current one holds more than bytes_per_pack bytes (float32: 4 each); the
    floats of each pack, in the order the all-reduces run. ``bytes_per_float``, ``closed_when_full`` and
    ``looking_ahead`` give the typical mistakes' packs (floats counted as bytes; a pack closed once it holds as much
    as bytes_per_pack; a pack closed before a gradient would take it past bytes_per_pack)."""
    if bytes_per_pack == 0:
        return [sum(sizes)]
    packs, last = [], 0
    for floats in reversed(sizes):
        if (not packs or last > bytes_per_pack or (closed_when_full and last == bytes_per_pack)
                or (looking_ahead and last + bytes_per_float * floats > bytes_per_pack)):
            packs.append(0)
            last = 0
        packs[-1] += floats
        last += bytes_per_float * floats
    return packs


def _judge_packs_mistake(sizes, bytes_per_pack, given):
    """What a wrong answer to one case suggests, as (text, answer)."""
    right = _reference_packs(sizes, bytes_per_pack)
    forward = _reference_packs(list(reversed(sizes)), bytes_per_pack)
    if given == list(reversed(right)):
        return ("the packs are right but in the wrong order: list them in the order the all-reduces run.",
                "TensorFlow packs (and runs) the reversed list: the last layer's gradients first.")
    if given == forward or given == list(reversed(forward)):
        return ("the packs are cut in the model's order.", "TensorFlow reverses the gradients before it packs them.")
    if isinstance(given, list) and sum(given) == 4 * sum(sizes):
        return ("the sizes are in bytes; give them in floats (4 bytes each).", "")
    if bytes_per_pack == 0:
        return ("bytes_per_pack=0 is a special case.", "0 means one pack: all gradients in one all-reduce.")
    if given == _reference_packs(sizes, bytes_per_pack, bytes_per_float=1):
        return ("the packs are cut as if each float were one byte: bytes_per_pack counts bytes.",
                "A float32 gradient holds 4 bytes per float.")
    if given == _reference_packs(sizes, bytes_per_pack, closed_when_full=True):
        return ("a pack is closed once it holds MORE than bytes_per_pack bytes (not as much).", f"Here the packs are {right}.")
    if given == _reference_packs(sizes, bytes_per_pack, looking_ahead=True):
        return ("a pack is closed before a gradient would take it past bytes_per_pack; TensorFlow adds the gradient "
                "first and looks at the pack's size only before the next one, so a pack may end larger than "
                "bytes_per_pack.", f"Here the packs are {right}.")
    if isinstance(given, list) and sum(given) == sum(sizes):
        return ("every float is in a pack, but the packs are cut elsewhere.", f"Here the packs are {right}.")
    return ("the packs do not add up to the gradients' floats.", f"Here the packs are {right}.")


class PackTheGradients(Exercise):
    title = "Pack a model's gradients"
    points = 3
    hints = (
        "The chapter's cell printed TensorFlow's two lines that decide: in which order it takes the gradients, and "
        "when it starts a new pack. Gradients are float32: 4 bytes per float.",
        "Reverse the list; put the first gradient into a new pack; before each further gradient, start a new pack if "
        "the current one holds more than bytes_per_pack bytes; bytes_per_pack=0 is one pack of everything.",
    )

    def collect(self, pack_sizes, seed=0):
        """Calls the learner's function on :func:`pack_cases`: {"not callable": type name} or {"results": [a list of
        ints, or {"raised": error} / {"gave": type name}, per case]}."""
        if not callable(pack_sizes):
            return {"not callable": type(pack_sizes).__name__}
        used = tools_used_by(pack_sizes, PACKING_TOOLS)
        if used:
            return {"used": used}
        for spec in PACKING_TOOLS:  # loaded, so that the block below can swap the tool for a recording stand-in
            importlib.import_module(spec.partition(":")[0])
        results = []
        with calls_recorded(PACKING_TOOLS) as called:  # what the code looks up as it runs (a local import, say)
            for sizes, bytes_per_pack in pack_cases(seed):
                try:
                    given = pack_sizes(list(sizes), bytes_per_pack)
                    as_ints = [as_int(value) for value in given]
                    results.append(as_ints if None not in as_ints else {"gave": type(given).__name__})
                except Exception as err:
                    results.append({"raised": short_error(err)})
        return {"used": called} if called else {"results": results}

    def judge(self, data, seed=0):
        """3 points when every case is right; else the first wrong case, explained."""
        fb = Feedback()
        if "not callable" in data:
            fb.wrong(f"pack_sizes should be a function (gradient sizes, bytes_per_pack) -> list of floats per "
                     f"all-reduce; got a {data['not callable']}.")
            return fb
        if "used" in data:
            fb.wrong(f"pack_sizes calls TensorFlow's {', '.join(data['used'])}: the exercise asks you to write the rule "
                     f"yourself, from the two lines of it the chapter printed.")
            return fb
        cases = pack_cases(seed)
        for (sizes, bytes_per_pack), given in zip(cases, data["results"]):
            if isinstance(given, dict):
                fb.wrong(f"pack_sizes({sizes}, {bytes_per_pack}) " + (f"raised {given['raised']}" if "raised" in given
                         else f"returned a {given['gave']}, not a list of whole numbers"))
                return fb
            if given != _reference_packs(sizes, bytes_per_pack):
                text, answer = _judge_packs_mistake(sizes, bytes_per_pack, given)
                fb.wrong(f"pack_sizes({sizes}, {bytes_per_pack}) gave {given}: {text}", answer=answer)
                return fb
        fb.right(f"all {len(cases)} models and pack sizes packed as TensorFlow packs them", points=3)
        return fb


from .ch13_step import PackedStep  # noqa: E402 (it reads _reference_packs above when it judges)

CHAPTER = chapter(13, "Practice at scale: profiling, NCCL and Horovod", {"q1": PackTheGradients, "q2": PackedStep})
