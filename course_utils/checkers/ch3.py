"""Chapter 3 · Beyond one process: the exercises' graders and hints. Exercises 1 and 2 (TF_CONFIG) live in
``ch3_config.py`` (their grader in ``ch3_config_grader.py``), exercise 5 in ``ch3_save.py``; 3 and 4 here."""
import re

from .answers import grade_items, grade_statements, is_placeholder
from .core import Exercise, Feedback, chapter
from .ch3_config import ParameterServerConfig, WorkerConfig
from .ch3_save import SaveEverywhere


def _reference_faults():
    """Exercise 3's answer."""
    return {"stop_signal": "SIGKILL", "restores": "B", "peer_killed": "B"}


def _reference_fault_why():
    """Why the typical wrong answers of exercise 3 are wrong (together they rule the other choices out)."""
    return {
        ("stop_signal", "SIGTERM"): "once a MultiWorkerMirroredStrategy worker has built its strategy, "
                                    "TensorFlow's preemption notifier catches SIGTERM and the process keeps running "
                                    "(chapter 3 showed terminate() failing).",
        ("stop_signal", "SIGINT"): "SIGINT (Ctrl-C) can be caught and handled like SIGTERM.",
        ("restores", "A"): "BackupAndRestore saves a full training checkpoint, not only the weights.",
        ("restores", "C"): "it does not save the position inside the dataset iterator: with save_freq='epoch' the "
                           "interrupted epoch is run again from its start.",
        ("restores", "D"): "fit() restores automatically when it starts and finds a backup in backup_dir (and deletes "
                           "the backup when training finishes).",
        ("peer_killed", "A"): "synchronous training needs every worker in every all-reduce; the survivor cannot go on "
                              "alone.",
        ("peer_killed", "C"): "only at START-UP does a worker wait for a missing peer with no time limit; a collective "
                              "in the middle of training notices a lost peer.",
    }


def _reference_fault_answers():
    """What exercise 3's right answers are, and why."""
    return {
        "stop_signal": "Only SIGKILL cannot be caught or ignored.",
        "restores": "It restores the weights, the optimizer's state and the epoch (or step) counter.",
        "peer_killed": "The survivor's collective fails with an error (UnavailableError when TensorFlow notices the "
                       "lost peer) instead of waiting for it; restart the job.",
    }


SIGNAL_NUMBERS = {9: "SIGKILL", 15: "SIGTERM", 2: "SIGINT"}


def _normalize_signal(value):
    """A signal as its name: signal.SIGKILL, 9, "9", "SIGKILL", "kill", "signal.SIGKILL", "SIGKILL (9)", "kill -9"."""
    name = getattr(value, "name", None)
    if isinstance(name, str) and name.startswith("SIG"):
        return name
    if isinstance(value, int) and not isinstance(value, bool):
        return SIGNAL_NUMBERS.get(value, str(value))
    if isinstance(value, str):
        text = value.strip().upper()
        if re.fullmatch(r"CTRL\s*[-+]?\s*C", text):
            return "SIGINT"
        named = [word for word in re.findall(r"\bSIG[A-Z]+", text) if word != "SIGNAL"] or \
            re.findall(r"^(?:SIGNAL\.)?([A-Z]+)$", text)
        if named:
            return named[0] if named[0].startswith("SIG") else "SIG" + named[0]
        number = re.fullmatch(r"(?:KILL\s+)?-?(\d+)", text)
        if number:
            return _normalize_signal(int(number[1]))
        return text
    return value


def _normalize_letter(value):
    """A choice's letter from "B", " b ", "(B)", "B)", "B.", "Option B" or "B. The weights, ..."; other text as it is
    (stripped, upper case)."""
    if not isinstance(value, str):
        return value
    text = value.strip().upper()
    found = re.fullmatch(r"(?:OPTION|ANSWER|CHOICE)?\s*\(?\s*([A-D])\s*\)?\s*(?:[.:)\-,]\s*.*)?", text, re.DOTALL)
    return found[1] if found else text


class Faults(Exercise):
    title = "Stopping, losing and restoring workers"
    points = 3
    hints = (
        "Chapter 3 stopped a worker for real: which signal did it take, what did the other worker see, and where "
        "did fit() continue after the restart?",
        "terminate() sends SIGTERM; the chapter showed what a MultiWorkerMirroredStrategy worker does with it. "
        "BackupAndRestore is a full training checkpoint.",
    )

    def grade(self, answers):
        if isinstance(answers, dict):
            answers = {k: (v if is_placeholder(v) else
                           (_normalize_signal if k == "stop_signal" else _normalize_letter)(v))
                       for k, v in answers.items()}

        fault_why, fault_answers = _reference_fault_why(), _reference_fault_answers()

        def explain(key, given, raw):
            if (key, given) in fault_why:
                return fault_why[(key, given)], fault_answers[key]
            if key == "stop_signal":
                return f"{raw!r}: answer with one of the signal names 'SIGINT', 'SIGTERM', 'SIGKILL'.", ""
            return f"{raw!r}: answer with one of the letters A, B, C, D.", ""

        return grade_items(Feedback(), answers, _reference_faults(), explain, lambda v: v, "see the questions")


STATEMENTS = [  # exercise 4's statements, as the notebook lists them
    "ParameterServerStrategy is model parallelism: each worker trains a different part of the model.",
    "With MultiWorkerMirroredStrategy all workers hold identical weights after every training step.",
    "With ParameterServerStrategy, when one worker process is killed, training goes on with the others.",
    "MultiWorkerMirroredStrategy needs Kubernetes (or another cluster manager) to find its peers.",
    "In asynchronous training a worker may compute its gradient from weights that other workers have updated since "
    "it read them (a stale gradient).",
    "Each process may list the workers in its own order, as long as its own task index points to itself.",
]


def _reference_statements():
    """Exercise 4's answer: whether each statement of STATEMENTS is true, and why."""
    return [
        (False, "It is data parallelism: every worker runs the whole model on its own batches; only the variables "
                "live on (and may be sharded over) the parameter servers."),
        (True, "Every step all-reduces the gradients, so every worker applies the same update to the same weights."),
        (True, "The ClusterCoordinator reschedules the lost worker's functions on the remaining workers (a killed "
               "parameter server, however, fails the job with UnavailableError)."),
        (False, "Each process reads the cluster and its own role from TF_CONFIG; chapter 3 ran two workers on "
                "localhost with nothing else."),
        (True, "Nobody waits for anybody, so updates from other workers can land between a worker's read and its "
               "write."),
        (False, "Every process must get the identical, identically ordered cluster list: indices are positions in "
                "it."),
    ]

STATEMENT_IDEAS = [  # what to revisit when a statement is judged wrong, in the order of STATEMENTS (no verdict in it)
    "what each worker of a ParameterServerStrategy job runs: the whole model, or a part of it",
    "what the all-reduce of every synchronous step does to the workers' copies of the weights",
    "what chapter 3 showed when a process of a ParameterServerStrategy job was killed",
    "what a MultiWorkerMirroredStrategy worker reads to find its peers (chapter 3's two workers on localhost)",
    "what 'asynchronous' allows to happen between a worker's read of the weights and its update",
    "what a task index points into, in the TF_CONFIG of each process",
]


class SyncAsync(Exercise):
    title = "Synchronous versus asynchronous"
    points = 6
    hints = (
        "Synchronous = everybody all-reduces every step (MultiWorkerMirroredStrategy); asynchronous = workers push "
        "updates to parameter servers without waiting (ParameterServerStrategy).",
        "Both are data parallelism. Re-read what chapter 3 showed when a worker or a parameter server was killed.",
    )

    def grade(self, statements):
        """One point per statement judged right (what the feedback says: :func:`grade_statements`)."""
        fb = Feedback()
        grade_statements(fb, statements, _reference_statements(), STATEMENT_IDEAS)
        return fb


CHAPTER = chapter(3, "Beyond one process", {
    "q1": WorkerConfig, "q2": ParameterServerConfig, "q3": Faults, "q4": SyncAsync, "q5": SaveEverywhere},
    uses_tensorflow=False)
