"""Chapter 2 · Strategies on one machine: the exercises' graders and hints (exercise 1 in ``ch2_plan.py``, 2 in
``ch2_loss.py``, 4 in ``ch2_build.py``: its case and the run of the learner's step in ``ch2_step_run.py``, the
diagnosis of what the step did in ``ch2_step_diagnosis.py``, what is said about an error it raised in
``ch2_step_errors.py``); 3 here."""
import re

from .answers import grade_items
from . import ch2_texts
from .core import Exercise, Feedback, chapter
from .variants import CasesInRandomOrder
from .ch2_build import DistributedStep
from .ch2_loss import LossScaling
from .ch2_plan import BatchAndLearningRate

STRATEGY_NAMES = {
    "mirroredstrategy": "MirroredStrategy",
    "multiworkermirroredstrategy": "MultiWorkerMirroredStrategy",
    "collectiveallreducestrategy": "MultiWorkerMirroredStrategy",
    "parameterserverstrategy": "ParameterServerStrategy",
    "parameterserverstrategyv2": "ParameterServerStrategy",
    "onedevicestrategy": "OneDeviceStrategy",
    "centralstoragestrategy": "CentralStorageStrategy",
    "tpustrategy": "TPUStrategy",
    "multidevicestrategy": "MultiDeviceStrategy",
    "dtensor": "DTensor",
}
SCENARIOS = {  # the scenarios of exercise 3, as the notebook states them
    "a": "One machine with 4 GPUs. Synchronous data parallelism; every GPU keeps its own copy of every variable.",
    "b": "Two machines with 4 GPUs each. Synchronous data parallelism over all 8 GPUs.",
    "c": "Dozens of preemptible machines. Workers should not wait for each other (asynchronous updates), and a huge "
         "embedding table should be split over a few servers.",
    "d": "A laptop with one GPU. The strategy.scope() code should run unchanged, with all variables and all "
         "computation placed on one device that you name, and no mirroring.",
    "e": "One machine with several GPUs, synchronous training, but the variables are kept in one place (the CPU) "
         "instead of being mirrored on every GPU.",
    "f": "A single weight matrix is too large for one device's memory: each weight must be split over several "
         "devices (model parallelism).",
}


def _reference_scenario_strategies():
    """Exercise 3's answer: the strategy of each scenario."""
    return {"a": "MirroredStrategy", "b": "MultiWorkerMirroredStrategy", "c": "ParameterServerStrategy",
            "d": "OneDeviceStrategy", "e": "CentralStorageStrategy", "f": "DTensor"}


def _reference_name_why():
    """Why a name that is no choice is wrong (without naming the right one)."""
    return {
        "MultiDeviceStrategy": "tf.distribute has no MultiDeviceStrategy (a name that circulates): pick one of the "
                               "six choices.",
        "TPUStrategy": "TPUStrategy is for TPUs; no scenario here has one.",
    }


def _reference_scenario_why():
    """Why a strategy does not fit a scenario, for the typical wrong choices (together they rule strategies out)."""
    return {
        ("a", "MultiWorkerMirroredStrategy"): "MultiWorkerMirroredStrategy is for several machines (each process "
                                              "needs TF_CONFIG).",
        ("a", "CentralStorageStrategy"): "CentralStorageStrategy keeps ONE copy of the variables on the CPU; here "
                                         "every GPU keeps its own mirror.",
        ("b", "MirroredStrategy"): "MirroredStrategy only uses the devices of its own machine.",
        ("b", "ParameterServerStrategy"): "ParameterServerStrategy is asynchronous; the scenario asks for "
                                          "synchronous training.",
        ("c", "MultiWorkerMirroredStrategy"): "MultiWorkerMirroredStrategy is synchronous: every step waits for "
                                              "all workers (all-reduce), and a lost worker fails the step.",
        ("c", "DTensor"): "Splitting an embedding table over servers and letting workers run asynchronously is the "
                          "job of a tf.distribute strategy, with variable partitioning.",
        ("d", "MirroredStrategy"): "MirroredStrategy with one device runs, but it is built to mirror variables over "
                                   "devices: which of the choices is built for exactly this case?",
        ("e", "MirroredStrategy"): "MirroredStrategy keeps a copy of every variable on every device.",
        ("e", "ParameterServerStrategy"): "ParameterServerStrategy needs a cluster of worker and parameter-server "
                                          "processes and is asynchronous.",
        ("f", "ParameterServerStrategy"): "ParameterServerStrategy is data parallelism: it can shard a variable's "
                                          "storage over the servers (variable_partitioner), but a worker runs the "
                                          "whole model and puts a sharded weight back together to multiply by it, "
                                          "so each weight must still fit on a worker.",
        ("f", "CentralStorageStrategy"): "CentralStorageStrategy is synchronous data parallelism with the "
                                         "variables on the CPU, not model parallelism.",
        ("f", "MirroredStrategy"): "MirroredStrategy copies the WHOLE model to every device; it cannot split a "
                                   "weight.",
        ("f", "MultiWorkerMirroredStrategy"): "MultiWorkerMirroredStrategy also copies the whole model to every "
                                              "device.",
    }

STRATEGY_ABBREVIATIONS = {"mwms": "MultiWorkerMirroredStrategy", "pss": "ParameterServerStrategy",
                          "css": "CentralStorageStrategy", "ods": "OneDeviceStrategy"}


def normalize_strategy(value):
    """A strategy class, instance or name as the canonical name: ``"tf.distribute.MirroredStrategy()"``,
    ``"mirrored strategy"``, ``"Mirrored"``, ``"multi-worker mirrored"``, ``"MWMS"``; the dtensor module's name (as
    :meth:`PickStrategy.collect` passes it) for DTensor. Anything else is returned as it is."""
    if isinstance(value, type):
        value = value.__name__
    elif not isinstance(value, str):
        value = type(value).__name__
    text = re.sub(r"\(.*\)\s*$", "", value.strip().strip("'\"").lower()).strip()  # MirroredStrategy(cpus)
    if text.split(".")[-1] == "dtensor":  # tf.experimental.dtensor, or the module's own name
        return "DTensor"
    for prefix in ("tensorflow.", "tf.distribute.experimental.", "tf.distribute.", "distribute.experimental.",
                   "distribute.", "experimental.", "tf."):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = re.sub(r"[\s_\-]", "", text)
    if text.startswith("dtensor") or text in ("experimental.dtensor", "tf.dtensor"):
        return "DTensor"
    if text in STRATEGY_ABBREVIATIONS:
        return STRATEGY_ABBREVIATIONS[text]
    if not text.endswith("strategy") and not text.endswith("strategyv2"):
        text += "strategy"  # "Mirrored", "OneDevice"
    return STRATEGY_NAMES.get(text, value)


class PickStrategy(CasesInRandomOrder, Exercise):
    title = "Pick the right strategy"
    points = 6
    # It varies per student (.variants) by the order of its scenarios: order[i] is the scenario shown as letter i.
    cases = SCENARIOS
    defaults = {"order": "abcdef"}
    templates = {"c08": ch2_texts.STRATEGY_QUESTION, "ch2-q3": ch2_texts.STRATEGY_SOLUTION}
    hints = (
        "Ask of each scenario: one machine or several? synchronous or asynchronous?",
        "Then: are the variables mirrored, kept on the CPU, or on parameter servers (which can also shard a large "
        "variable's storage over several servers, with a variable_partitioner)? And must the computation with one "
        "WEIGHT be split over devices because the weight does not fit on one (model parallelism)? No "
        "tf.distribute strategy does that: a parameter-server worker still runs the whole model, and to multiply "
        "by a sharded weight it puts the shards back together.",
    )

    def text_values(self):
        return {"scenarios": "\n".join(f"- **{letter}.** {SCENARIOS[key]}" for letter, key in self._shown().items())}

    def reference_values(self):
        truth = _reference_scenario_strategies()
        return {"answer_lines": "\n".join(f'    "{letter}": "{truth[key]}",' for letter, key in self._shown().items())}

    def collect(self, choices, seed=0):
        """The choices as they are, except a module (``tf.experimental.dtensor`` itself), which crosses as its name."""
        import types

        def plain(value):
            return value.__name__ if isinstance(value, types.ModuleType) else value

        return [{key: plain(value) for key, value in choices.items()} if isinstance(choices, dict) else choices]

    def grade(self, choices):
        shown = self._shown()
        expected = {letter: _reference_scenario_strategies()[key] for letter, key in shown.items()}
        scenario_why, name_why = _reference_scenario_why(), _reference_name_why()

        def explain(key, given, raw):
            right = f"It is {expected[key]}."
            if (shown[key], given) in scenario_why:
                return scenario_why[(shown[key], given)], right
            if given in name_why:
                return name_why[given], right
            if given not in STRATEGY_NAMES.values():
                return (f"{raw!r} is not one of the choices: MirroredStrategy, MultiWorkerMirroredStrategy, "
                        f"ParameterServerStrategy, OneDeviceStrategy, CentralStorageStrategy, DTensor."), ""
            return f"{given} does not fit: {SCENARIOS[shown[key]]}", right

        return grade_items(Feedback(), choices, expected, explain, normalize_strategy, "one strategy name per scenario")


CHAPTER = chapter(2, "Strategies on one machine", {"q1": BatchAndLearningRate, "q2": LossScaling, "q3": PickStrategy,
                                                      "q4": DistributedStep})
