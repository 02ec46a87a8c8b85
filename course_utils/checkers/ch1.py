"""Chapter 1 · Tensors and devices: the exercises' graders and hints (exercises 3 and 4, whose answers are code, in
``ch1_build.py``)."""
import re
import textwrap

from .answers import as_bool_list, as_int, grade_items
from .core import Exercise, Feedback, chapter
from .variants import NUMBER_WORDS, fill
from . import ch1_texts, reach
from .ch1_build import GradientTape, ShardedSum

# Exercise 1: where each matmul of the exercise's script runs (a CPU index), or ERROR when its block raises before
# the matmul exists. The script runs in a fresh process that splits the CPU into `cpus` logical CPUs (the notebook's
# kernel has 8, so running its lines there tells nothing). With the defaults' numbers (PLACEMENT):
#   a on CPU:3;  b: no block;  c: CPU:1 inside CPU:2;  d: inside CPU:2 after the CPU:1 block, input c;
#   e: CPU:6 (missing in the script, present in the notebook) inside CPU:1;
#   f: inside CPU:2, after applying the runtime's own configuration (4 CPUs) again.
# It varies per student (:mod:`.variants`): the script's CPUs and every device index in it.
ERROR = "error"
NOTEBOOK_CPUS = 8                               # the exercise notebook's kernel, where CPU:4 to CPU:7 exist
PLACEMENT = {"cpus": 4, "a": 3, "c_outer": 2, "c_inner": 1, "e_outer": 1, "missing": 6, "f": 2}
CPU_COUNT, MISSING_CPU = PLACEMENT["cpus"], PLACEMENT["missing"]  # the defaults' (the self-study notebook's)
DRAWN_CPUS = (4, 5, 6)  # a variant's CPUs: enough for a, c's two blocks and f to differ, and a CPU:<n> the notebook has


def _reference_placements(p=None):
    """Exercise 1's answer for the script of ``p`` (default: PLACEMENT): the CPU each matmul runs on, or ERROR."""
    p = p or PLACEMENT
    return {"b": 0, "c": p["c_inner"], "d": p["c_outer"], "e": 0, "f": p["f"]}


def _reference_input_devices(p=None):
    """Where each matmul's input lives (d's input is c, so this says where c ran): not where it runs."""
    p = p or PLACEMENT
    return {"b": p["a"], "c": p["a"], "d": p["c_inner"], "e": p["a"], "f": p["a"]}


def _reference_outer_blocks(p):
    """The enclosing block of each nested one."""
    return {"c": p["c_outer"], "e": p["e_outer"]}


def _reference_placement_reasons(p=None):
    """Why each matmul runs where it does: these give the answer away (shown in self-study mode only)."""
    p = p or PLACEMENT
    return {
        "b": "It runs on CPU:0, the default device: no tf.device block is open on that line, and a is copied there.",
        "c": f"It runs on CPU:{p['c_inner']}: the innermost block wins.",
        "d": f"It runs on CPU:{p['c_outer']}: the CPU:{p['c_inner']} block has ended, the CPU:{p['c_outer']} block "
             "is still open, and c is copied there.",
        "e": f"It runs on CPU:0: the script has {p['cpus']} CPUs, so CPU:{p['missing']} does not exist there; soft "
             "placement drops the request and TensorFlow takes its first choice, as if nothing had been requested "
             f"(the outer CPU:{p['e_outer']} block was replaced by the inner one, not kept as a fallback).",
        "f": f"It runs on CPU:{p['f']}: the line before it applies the configuration the runtime already runs with "
             f"({p['cpus']} CPUs), which is accepted (only a DIFFERENT configuration raises once the runtime runs), "
             f"and the CPU:{p['f']} block is open.",
    }


def _placement(value):
    """A prediction as a CPU index or ERROR; None when it can't be read."""
    if isinstance(value, BaseException) or (isinstance(value, type) and issubclass(value, BaseException)):
        return ERROR
    name = getattr(value, "name", value)  # a tf.config.LogicalDevice
    if isinstance(name, str):
        text = name.strip().lower()
        if "error" in text or text in ("raises", "raise", "exception"):
            return ERROR
        found = re.fullmatch(r"(?:.*/)?(?:device:)?cpu\s*[:_ ]?\s*(\d+)|(\d+)", text)
        return int(found[1] or found[2]) if found else None
    return as_int(value)


def _judge_placement_mistake(key, given, p=None):
    """Why the prediction ``given`` for item ``key`` of the script of ``p`` is wrong, without saying what is
    right."""
    p = p or PLACEMENT
    cpus, missing = p["cpus"], p["missing"]
    if key == "f" and given == ERROR:
        return ("the line before the matmul configures the devices after the runtime started. The chapter showed "
                "two outcomes of that (its 'trap' and the cell after it): compare what this line asks for with the "
                "configuration the runtime started with.")
    if given == ERROR:
        return ("nothing on the lines up to it raises: the configuration at the top comes before the runtime starts, "
                "and soft placement is on.")
    if key == "e" and given == missing:
        return (f"the script splits the CPU into {cpus} logical CPUs (CPU:0 to CPU:{cpus - 1}), so it has "
                f"no CPU:{missing}, although this notebook's kernel does. What does soft placement do with a "
                f"device that does not exist?")
    if given == _reference_outer_blocks(p).get(key):
        if key == "e":
            return ("soft placement does not fall back to the enclosing block: the inner block's request replaced "
                    "the outer one, and that request cannot be met.")
        return ("that block is open on the line, but another block is open inside it: which of the two is in force "
                "(the chapter's 'Which request wins')?")
    if given == _reference_input_devices(p).get(key):
        return ("an operation does not follow its input tensors (only an operation on a variable itself runs where "
                "the variable lives, and this code has no variables): which request is in force on its line?")
    if not 0 <= given < cpus:
        where = ", although this notebook's kernel has one" if given < NOTEBOOK_CPUS else ""
        return f"the script's process has no CPU:{given}: its CPUs are CPU:0 to CPU:{cpus - 1}{where}."
    if key == "d" and given == 0:
        return "which tf.device blocks are still open on that line?"
    return "which tf.device block is in force on that line, and can its device be used?"


class PredictPlacement(Exercise):
    title = "Predict where each operation runs"
    points = 2
    defaults = dict(PLACEMENT)
    templates = {"c02": ch1_texts.PLACEMENT_QUESTION, "ch1-q1": ch1_texts.PLACEMENT_SOLUTION,
                 "c04-watch": ch1_texts.PLACEMENT_WATCH}
    hints = (
        "For each line ask: which tf.device block is in force here, and does that device exist in the script's "
        "process ({{cpus}} logical CPUs, not this notebook's 8)? The devices of an operation's input tensors play "
        "no part (only an operation on a variable itself, such as reading or updating it, runs where the variable "
        "lives, and this code has no variables).",
        "Nested blocks: the innermost wins until it ends. A device that does not exist: soft placement drops the "
        "request and TensorFlow takes its first choice, as with no block at all.",
        "And the last block: the runtime started when `a` was created, with the {{cpus}} CPUs of the script's "
        "first lines. The chapter's 'trap' and the cell after it show two outcomes of configuring again once the "
        "runtime runs: which one is this?",
    )

    @staticmethod
    def draw(rng):
        """4 to 6 CPUs; a, c's two blocks and f on CPUs 1 and up, a apart from the others and c's blocks apart (so
        that each typical mistake shows); e's outer block apart from a; a missing CPU the notebook's kernel has."""
        while True:
            cpus = rng.choice(DRAWN_CPUS)
            a, c_outer, c_inner = rng.sample(range(1, cpus), 3)
            params = {"cpus": cpus, "a": a, "c_outer": c_outer, "c_inner": c_inner,
                      "e_outer": rng.choice([n for n in range(1, cpus) if n != a]),
                      "missing": rng.randrange(cpus, NOTEBOOK_CPUS),
                      "f": rng.choice([n for n in range(1, cpus) if n != a])}
            if params != PLACEMENT:
                return params

    def text_values(self):
        values = {**self.params, "last": self.params["cpus"] - 1, "cpus_word": NUMBER_WORDS[self.params["cpus"]]}
        return {**values, "script": fill(ch1_texts.PLACEMENT_SCRIPT, values)}

    def reference_values(self):
        return {"placements": str(_reference_placements(self.params)).replace("'", '"')}

    def grade(self, predictions):
        p = self.params
        placements, reasons = _reference_placements(p), _reference_placement_reasons(p)

        def explain(key, given, raw):
            if given is None:
                text = repr(raw)
                text = text if len(text) <= 40 else text[:40] + "..."
                return f"give the index of a CPU (an int from 0 to {p['cpus'] - 1}) or {ERROR!r}, not {text}.", ""
            return f"you predicted {given!r}: {_judge_placement_mistake(key, given, p)}", reasons[key]

        fb = grade_items(Feedback(), predictions, placements, explain, _placement,
                         "the CPU index each matmul runs on, or 'error'")
        right = fb.points
        if isinstance(predictions, dict) and len(predictions) > 1:
            given = [_placement(v) for v in predictions.values()]
            if len(set(given)) == 1 and given[0] is not None:
                fb.note("You gave the same answer for every line, but the lines differ in which blocks are open "
                        "and whether their device exists.")
            elif [_placement(predictions.get(k)) for k in ("e", "f")] == [p["missing"], ERROR]:
                fb.note(f"Your e and f are what these lines would do in this notebook's kernel (8 CPUs), not in the "
                        f"script's process ({p['cpus']} CPUs).")
        fb.points = 2 if right == len(placements) else 1 if right == len(placements) - 1 else 0
        return fb


# Exercise 2: which calls of f(x, training) trace. It varies per student (:mod:`.variants`): the seven calls, each
# [dtype, values, training]; CALLS is the self-study variant's, as the notebook's table shows them.
DEFAULT_CALLS = [["float32", [1, 2], True], ["float32", [3, 4], False], ["float32", [5, 6], True],
                 ["int32", [1, 2], True], ["float32", [1, 2, 3], False], ["float32", [4, 5, 6], True],
                 ["int32", [3, 4], True]]


def _values_text(dtype, values):
    return "[" + ", ".join(f"{v}.0" if dtype == "float32" else str(v) for v in values) + "]"


def call_text(call):
    """``f(tf.constant([1.0, 2.0]), training=True)`` for the call ``["float32", [1, 2], True]``."""
    dtype, values, training = call
    return f"f(tf.constant({_values_text(dtype, values)}), training={training})"


CALLS = [call_text(call) for call in DEFAULT_CALLS]
# The ideas a wrong prediction of a call asks the learner to revisit (none says whether the call traces): a first
# wrong check names the ideas, not the calls, since naming a wrong True/False names its right value.
IDEAS = {
    "first": "What can a tf.function reuse before it has traced anything?",
    "values": "Which properties of a TENSOR argument make its part of the signature: its values, its dtype, its "
              "shape?",
    "python": "How does a plain Python argument (here training) enter the signature?",
    "together": "Is a signature made per argument, or from ALL the arguments of one call together?",
}
KIND_IDEAS = {"first": "first", "python": "python", "reuse": "values", "dtype": "values", "shape": "values",
              "tensor": "values", "together": "together"}


def _reference_trace_kinds(calls=None):
    """Per call: (kind, the earlier calls it refers to): ``first``, ``reuse`` (of call j), ``python`` (a new
    training value; the tensor's signature is call j's), ``dtype``, ``shape``, ``tensor`` (this dtype with this
    shape is new), ``together`` (the tensor's signature seen in call j, the training value in call k)."""
    found, seen = [], {}
    tensors, trainings, dtypes, shapes = {}, {}, set(), set()
    for number, (dtype, values, training) in enumerate(calls or DEFAULT_CALLS, start=1):
        tensor, signature = (dtype, len(values)), (dtype, len(values), training)
        if number == 1:
            found.append(("first", ()))
        elif signature in seen:
            found.append(("reuse", (seen[signature],)))
        elif tensor in tensors and training in trainings:
            found.append(("together", (tensors[tensor], trainings[training])))
        elif tensor in tensors:
            found.append(("python", (tensors[tensor],)))
        elif dtype not in dtypes:
            found.append(("dtype", ()))
        elif len(values) not in shapes:
            found.append(("shape", ()))
        else:
            found.append(("tensor", ()))
        seen.setdefault(signature, number)
        tensors.setdefault(tensor, number)
        trainings.setdefault(training, number)
        dtypes.add(dtype)
        shapes.add(len(values))
    return found


def _reference_call_ideas(calls=None):
    """The idea behind each call (which says a little about the answer, so it stays out of hand-outs)."""
    return [KIND_IDEAS[kind] for kind, _ in _reference_trace_kinds(calls)]


def _reference_traces(calls=None):
    """Exercise 2's answer: whether each call traces."""
    return [kind != "reuse" for kind, _ in _reference_trace_kinds(calls)]


def _reference_why_traces(calls=None):
    """Why each call traces or not: these give the answer away (shown in self-study mode only)."""
    calls = calls or DEFAULT_CALLS
    whys, reused = [], False
    for (kind, refs), (dtype, values, training) in zip(_reference_trace_kinds(calls), calls):
        shape = f"({len(values)},)"
        if kind == "first":
            whys.append("The first call always traces: there is no concrete function yet.")
        elif kind == "python":
            whys.append(f"training={training} is a Python value f has not seen (a Python argument enters the "
                        f"signature by its value): this call traces, although the tensor's dtype and shape are call "
                        f"{refs[0]}'s.")
        elif kind == "reuse" and not reused:
            reused = True
            whys.append(f"{dtype} of shape {shape} with training={training} is call {refs[0]}'s signature: a "
                        f"tf.function keys its traces on the dtype and shape of tensor arguments, not on their "
                        f"values, so call {refs[0]}'s trace is reused.")
        elif kind == "reuse":
            whys.append(f"{dtype} of shape {shape} with training={training} is call {refs[0]}'s signature: its trace "
                        f"is reused. The values {_values_text(dtype, values)} don't matter.")
        elif kind == "dtype":
            article = "an" if dtype[0] in "aeiou" else "a"
            whys.append(f"tf.constant({_values_text(dtype, values)}) is {article} {dtype}, a dtype f has not seen: "
                        f"this call traces.")
        elif kind == "shape":
            whys.append(f"The shape {shape} is new, so this call traces a new concrete function.")
        elif kind == "tensor":
            whys.append(f"{dtype} has been seen and so has the shape {shape}, but not together: a tensor's signature "
                        f"is its dtype and shape together, so this call traces.")
        else:
            whys.append(f"{dtype} of shape {shape} has been seen (call {refs[0]}) and training={training} too (call "
                        f"{refs[1]}), but never together: a signature is made from all the arguments of a call, so "
                        f"this call traces.")
    return whys


def _reference_trace_comment(calls):
    """The solution's comment: each call, in a few words."""
    calls = calls or DEFAULT_CALLS
    parts = []
    for number, ((kind, refs), (dtype, values, training)) in enumerate(zip(_reference_trace_kinds(calls), calls), 1):
        shape = f"({len(values)},)"
        parts.append({
            "first": "the first call",
            "python": f"training={training} is a new Python value",
            "reuse": f"call {refs[0] if refs else 0}'s signature again; values don't matter",
            "dtype": f"new dtype {dtype}",
            "shape": f"new shape {shape}",
            "tensor": f"{dtype} with shape {shape} is new",
            "together": f"{dtype} of shape {shape} and training={training} were each seen, but never together",
        }[kind])
    text = "; ".join(f"call {n} {'reuses a trace' if kind == 'reuse' else 'traces'} ({part})"
                     for n, ((kind, _), part) in enumerate(zip(_reference_trace_kinds(calls), parts), 1))
    return "\n".join(textwrap.wrap(text[0].upper() + text[1:] + ".", 110, initial_indent="# ",
                                   subsequent_indent="# "))


def _grouped(items, indent):
    """The items joined by ", " on lines of 3, 2 and 2 (as the notebook's cell lays its calls out)."""
    lines = [", ".join(items[:3]), ", ".join(items[3:5]), ", ".join(items[5:])]
    return (",\n" + " " * indent).join(line for line in lines if line)


class PredictTracing(Exercise):
    title = "Predict which calls trace"
    points = 2
    defaults = {"calls": DEFAULT_CALLS}
    templates = {"c05": ch1_texts.TRACING_QUESTION, "ch1-q2": ch1_texts.TRACING_SOLUTION, "c09": ch1_texts.TRACING_WATCH}
    hints = (
        "A tf.function keeps one trace per input signature. What is the signature of a tensor argument, what is "
        "the signature of a Python argument, and what is the signature of a call with both?",
        "For a tensor argument it is its dtype and shape; for a Python argument (training) its value; a call's "
        "signature is all of them together.",
        "Write each call's signature next to it (for example (float32, shape (2,), True) for call 1). A call traces "
        "exactly when its signature has not appeared in an earlier call.",
    )

    @staticmethod
    def draw(rng):
        """Seven calls, each of a float32 or int32 tensor of 2 or 3 values and a training flag, among which a
        reuse (with other values), a new training value, a new dtype or shape, and a pair seen apart, not together."""
        while True:
            calls = [[rng.choice(("float32", "int32")), [rng.randint(1, 9) for _ in range(rng.choice((2, 3)))],
                      rng.choice((True, False))] for _ in range(7)]
            kinds = _reference_trace_kinds(calls)
            found = {kind for kind, _ in kinds}
            values_differ = all(calls[refs[0] - 1][1] != call[1] for (kind, refs), call in zip(kinds, calls)
                                if kind == "reuse")
            if {"reuse", "python", "together"} <= found and found & {"dtype", "shape"} and values_differ:
                return {"calls": calls}

    def text_values(self):
        calls = self.params["calls"]
        return {"table": "\n".join(f"| {n} | `{call_text(call)}` |" for n, call in enumerate(calls, 1)),
                "arguments_code": "[" + _grouped([f"(tf.constant({_values_text(d, v)}), {t})" for d, v, t in calls],
                                                 18) + "]"}

    def reference_values(self):
        calls = self.params["calls"]
        return {"predictions": str(_reference_traces(calls)), "comments": _reference_trace_comment(calls)}

    def collect(self, predictions, seed=0):
        """The predictions, and how many times the notebook's tf.functions whose code is f's (f itself, or a copy)
        have traced: a prediction checked after calling f is a measurement (0 when the notebook has no such f)."""
        namespace = reach.learner_namespace()
        code = getattr(getattr(namespace.get("f"), "python_function", None), "__code__", None)
        traced = 0
        for value in list(namespace.values()) if code is not None else []:
            function = getattr(value, "python_function", None)
            if getattr(function, "__code__", None) is not None and function.__code__.co_code == code.co_code:
                try:
                    traced += int(value.experimental_get_tracing_count())
                except Exception:  # not a tf.function after all
                    pass
        return [predictions, traced]

    def grade(self, predictions, traced=0):
        fb = Feedback()
        if traced:
            fb.wrong(f"f has already traced {traced} time(s) in this kernel: a prediction counts only when it is "
                     f"checked before f is called (tracing counts measure it). Restart the kernel, run the cells "
                     f"down to this exercise without calling f, and check again.")
            return fb
        calls = self.params["calls"]
        values = as_bool_list(fb, predictions, len(calls), "call", "True = this call traces")
        if values is None:
            return fb
        if any(v is None for v in values):
            fb.wrong("Use True or False for every call (None means you have not answered that call yet).")
            return fb
        traces, why = _reference_traces(calls), _reference_why_traces(calls)
        wrong = [i for i, (v, t) in enumerate(zip(values, traces)) if v != t]
        if not wrong:
            fb.right(f"Traces happen on calls {[i + 1 for i, t in enumerate(traces) if t]}: a new trace for each new "
                     f"input signature (dtype and shape of tensors, value of Python arguments, all together).",
                     points=2)
            return fb
        if all(values):
            fb.note("Not every call traces: tf.function reuses a trace when the input signature repeats.")
        elif not any(values):
            fb.note("Some calls must trace: a tf.function has no graph until it has traced once.")
        elif sum(values) == 1 and values[0]:
            fb.note("A tf.function traces again whenever it sees a new input signature, not only once.")
        ideas, call_ideas = [], _reference_call_ideas(calls)
        for i in wrong:
            if IDEAS[call_ideas[i]] not in ideas:
                ideas.append(IDEAS[call_ideas[i]])
        count = f"{len(wrong)} of the {len(calls)} predictions {'is' if len(wrong) == 1 else 'are'} wrong"
        fb.wrong(f"{count}. Revisit: " + " ".join(ideas),
                 answer="Wrong: " + " ".join(f"call {i + 1}, {call_text(calls[i])}: {why[i]}" for i in wrong))
        fb.points = 1 if len(wrong) == 1 else 0
        return fb


CHAPTER = chapter(1, "Tensors and devices", {"q1": PredictPlacement, "q2": PredictTracing, "q3": GradientTape,
                                              "q4": ShardedSum})
