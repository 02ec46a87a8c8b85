"""The machinery of the exercise checkers: results, feedback, the exercise class, a chapter's set.

A chapter module (``ch1.py``, ...) defines one :class:`Exercise` subclass per question, with its
grader, its hints and its title side by side, and binds them to their names with :func:`chapter`.
The call that checks an exercise, the cell it lives in and its solution code are read from the
solution notebooks by the build into ``notebook_cells.json`` (generated, shipped as package data),
so they are written once.

Only relative imports of the course's own modules appear here and at the top of every module of
this package, so that a copy of it (the grader's stripped hand-out copy, ``grading/handout.py``)
imports its own modules.
"""
import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

from .answers import is_placeholder, short_error
from .plain import PlainDataError, dumps, loads
from .reach import tools_in_reach
from .variants import fill

__all__ = ["CORRECT", "INCORRECT", "PARTIAL", "UNANSWERED", "ChapterExercises", "Exercise", "Feedback", "Hints",
           "Result", "chapter"]

CORRECT, PARTIAL, INCORRECT, UNANSWERED = "correct", "partial", "incorrect", "unanswered"
SELF_STUDY, GRADED = "self-study", "graded"
OK_MARK, NO_MARK = "✓", "✗"
# Set by the grader in the kernels it runs: the grader checks every exercise itself, so a
# notebook's own check calls only print a note (which also halves the grading time), and a hint's
# text comes from the grader, which records the request (the kernel's package has no hint texts).
GRADER_RUN_ENV = "COURSE_GRADING"
HINT_REQUEST = "course-hint"  # what a graded kernel asks the grader for a hint with: "course-hint 3.q1 2"
CELLS_FILE = "notebook_cells.json"  # beside this module; written by `python3 course.py build`


@functools.cache
def notebook_cells():
    """What the checkers read from the solution notebooks, as the build wrote it into :data:`CELLS_FILE` of this
    package (or of the grader's hand-out copy, where the solutions are emptied):
    ``{chapter: {"keras": ..., "dtensor": ..., "exercises": {name: {"cell", "call", "solution"}}}}``.

    Raises:
        FileNotFoundError: the package was installed without its data file; the message says what to do.

    Example:
        >>> notebook_cells()[3]["exercises"]["q4"]["call"]
        'ex.q4.check(statements)'
    """
    try:
        text = resources.files(__package__).joinpath(CELLS_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"course_utils/checkers/{CELLS_FILE} is missing: in a clone of the course, run `python3 course.py "
            f"build`; an installed course_utils ships it as package data ([tool.setuptools.package-data] of "
            f"pyproject.toml), so reinstall it.") from None
    return {int(number): cells for number, cells in json.loads(text)["chapters"].items()}



@dataclass(frozen=True)
class Result:
    """The outcome of one check: points out of ``max_points``, a status and the feedback text.

    ``status`` is ``"correct"`` (full points), ``"partial"``, ``"incorrect"`` (0 points) or
    ``"unanswered"`` (the placeholder is still there).
    """

    points: int
    max_points: int
    status: str
    message: str

    def __str__(self):
        score = f"{self.points}/{self.max_points} point{'s' if self.max_points != 1 else ''}"
        head = {CORRECT: f"Correct! {score}.", PARTIAL: f"Partly correct: {score}.",
                INCORRECT: f"Incorrect: {score}.", UNANSWERED: f"Not answered yet: {score}."}[self.status]
        return head + ("\n" + self.message if self.message else "")


class Feedback:
    """What a grader found, line by line, and the points it earned.

    ``right(text, points)`` adds points and a line marked ✓; ``wrong(text, answer=...)`` a line
    marked ✗, where ``answer`` is the part that gives the right answer away: it is shown in
    self-study notebooks and left out of graded hand-outs. ``note(text)`` adds an unmarked line.

    Example:
        >>> fb = Feedback()
        >>> fb.right("cpus: 8 logical CPUs")
        >>> fb.wrong("product was computed on CPU:0.", answer="Use `with tf.device(cpus[5]):`.")
        >>> fb.points, fb.render(graded=True)
        (1, '  ✓ cpus: 8 logical CPUs\\n  ✗ product was computed on CPU:0.')
    """

    def __init__(self):
        self.points = 0
        self._lines = []  # (mark, text, answer)

    def right(self, text, points=1):
        self.points += points
        self._lines.append((OK_MARK, text, ""))

    def wrong(self, text, answer=""):
        self._lines.append((NO_MARK, text, answer))

    def note(self, text, answer=""):
        self._lines.append(("", text, answer))

    def render(self, graded=False):
        """The feedback as indented lines; with ``graded`` the answers are left out."""
        lines = []
        for mark, text, answer in self._lines:
            body = text if graded or not answer else f"{text} {answer}"
            lines.append(f"  {mark} {body}" if mark else f"  {body}")
        return "\n".join(lines)


def _signature_of(call):
    """The argument names of a call such as ``"ex.q1.check(mesh, layout)"``: ``["mesh", "layout"]``."""
    inside = call[call.index("(") + 1: call.rindex(")")]
    return [part.strip() for part in inside.split(",") if part.strip()]


class Hints(Sequence):
    """An exercise's hints as a notebook reads them (``ex.q1.hints``): every text read is a hint used,
    exactly as ``ex.q1.hint(level)`` (``ex.q1.hints[-1]`` is the last level). ``len`` is free.

    Example:
        >>> from course_utils.checkers import exercises
        >>> ex = exercises(3)
        >>> ex.q1.hints[0] == ex.q1.hints[-len(ex.q1.hints)], ex.q1.hints_seen   # both read level 1
        (True, 1)
    """

    def __init__(self, exercise):
        self._exercise = exercise

    def __len__(self):
        return len(type(self._exercise).hints)

    def __getitem__(self, index):
        levels = range(1, len(self) + 1)
        if isinstance(index, slice):
            return tuple(self._exercise.hint_text(level) for level in levels[index])
        return self._exercise.hint_text(levels[index])

    def __repr__(self):
        name = self._exercise.name
        return f"<{len(self)} hints of {self._exercise.chapter}.{name}: ex.{name}.hint(1) prints the first>"


class _CollectFailed(Exception):
    """The learner's side of a check could not collect the answers (its message says why)."""


class Exercise:
    """One graded exercise. Subclasses set ``title``, ``points``, ``hints`` and define ``grade``
    (or ``collect`` and ``judge``, when the answer is code).

    A check has two halves that meet only through plain data (:mod:`.plain`): :meth:`export` runs
    :meth:`collect` where the answers live, :meth:`judge_export` runs :meth:`judge` on the data read
    back. In a learner's kernel both run there; the grader runs the first in the sandbox and the
    second in its own process. ``grade(self, *answers)`` receives the answers, read back, in the
    order of the check call and returns a :class:`Feedback`; it may raise, which the checker turns
    into a hint. ``hints`` is a tuple
    of hints written out in the class body, the first a nudge and each later one more explicit (an
    instance reads them through :class:`Hints`, which counts each read). ``none_is_answer`` makes
    ``None`` an answer (only ``...`` is then a placeholder); ``unanswered`` decides, per answer,
    whether it is still the placeholder, and may be overridden.

    ``revealed_by`` (a prediction that a chapter tool would print): the tools that give the answer away, as
    ``"module:name"`` specs (:mod:`.reach`). A check made while the notebook's namespace holds one of them scores 0
    and says why: the prediction counts only when checked before the tool is imported. The grader collects right
    after the exercise's cell, so the exercise notebook imports such a tool in a later cell.

    A question that varies per student (:mod:`.variants`) declares ``defaults`` (its parameters in the self-study
    notebooks), ``draw(rng)`` (a valid set drawn with a ``random.Random``, never the chapter's own example) and
    ``templates`` (``{cell id: text}``: the notebook cells that state its numbers, with ``{{name}}`` where a value
    goes, filled from :meth:`text_values` and, for the exercise's own solution cell, :meth:`reference_values`).
    An instance's ``params`` are the defaults unless it was made for a variant; its grading, hints and references
    read them. A hint text may hold ``{{name}}`` too.

    ``teach_first`` (self-study mode only): the first wrong ``check()`` says what is wrong but holds
    back the parts that give the right answer away (``Feedback.wrong(..., answer=...)``), as a
    graded hand-out does; from the second wrong check on they are shown. ``evaluate()`` and graded
    mode are not affected.

    In a notebook an instance is used as ``ex.q1.check(...)``, ``ex.q1.hint()``, ``ex.q1.hint(2)``
    and ``ex.q1.solution()``.
    """

    title = ""
    points = 0
    hints = ()
    none_is_answer = False
    teach_first = True  # every chapter: the first wrong check says what is wrong, not the answer
    seed = 0  # the inputs of a code answer's check in a learner's kernel (the grader draws its own)
    revealed_by = ()  # tools ("module:name") that print the answer: the prediction counts only before their import
    defaults = {}  # a question that varies: its parameters in the self-study notebooks (see the class docstring)
    templates = {}  # {cell id: template} of the cells that state its parameters

    @staticmethod
    def draw(rng):
        """A valid set of parameters drawn with ``rng`` (a ``random.Random``); an exercise that varies overrides it."""
        return {}

    def __init__(self, chapter, name, cells=None, mode=SELF_STUDY, params=None):
        self.chapter, self.name, self.mode = chapter, name, mode
        cells = cells or {"call": f"ex.{name}.check()", "solution": ""}
        unknown = sorted(set(params or {}) - set(self.defaults))
        if unknown:
            raise ValueError(f"{chapter}.{name} has the parameters {sorted(self.defaults)}, not {unknown}.")
        self.params = {**self.defaults, **(params or {})}
        self.call = cells["call"]
        self.arguments = _signature_of(self.call)
        self._solution = cells["solution"]
        self.max_points = self.points
        self.last_result = None
        self.hints = Hints(self)  # the class's texts, each read counted (``hints_seen``)
        self.hints_seen = 0
        self.wrong_checks = 0  # checks of this kernel that scored less than full points

    def grade(self, *answers):  # pragma: no cover - every exercise overrides it
        raise NotImplementedError

    def text_values(self):
        """The values its templates and hints name, from ``self.params`` (nothing that gives an answer away)."""
        return dict(self.params)

    def reference_values(self):
        """The values its solution cell's template names besides :meth:`text_values`: the reference answer, written
        as code (left out of the grader's hand-out copy, as every ``reference*`` name)."""
        return {}

    def rendered_cells(self, solutions=True):
        """``{cell id: text}`` of its templates filled with its parameters; with ``solutions``, its own solution
        cell too (which needs :meth:`reference_values`)."""
        values = self.text_values()
        found = {}
        for cell, template in self.templates.items():
            if cell == f"ch{self.chapter}-{self.name}":
                if solutions:
                    found[cell] = fill(template, {**values, **self.reference_values()})
            else:
                found[cell] = fill(template, values)
        return found

    def __repr__(self):
        return f"<Exercise {self.chapter}.{self.name}: {self.title} ({self.max_points} points); use {self.call}>"

    def unanswered(self, answer):
        """Whether ``answer`` (one argument of the check call) is still its placeholder."""
        return is_placeholder(answer, self.none_is_answer)

    def collect(self, *answers, seed=0):
        """What :meth:`judge` needs from the answers, as values that cross as plain data (:mod:`.plain`).

        Runs where the answers live: the learner's kernel, and in a graded run the sandbox, so it
        never decides anything. The default passes the answers on. An exercise whose answer is code
        overrides it: it calls that code on inputs drawn from ``seed`` (chosen by the grader at
        grading time) and returns the results, which :meth:`judge` compares with references it
        computes itself from the same ``seed``.
        """
        return list(answers)

    def judge(self, data, seed=0):
        """A :class:`Feedback` on ``data`` (what :meth:`collect` returned, read back from plain data).

        Runs in the grader's own process, which never runs a learner's code. The default grades the
        answers read back: ``self.grade(*data)``.
        """
        return self.grade(*data)

    def export(self, *args, seed=0, **kwargs):
        """The learner's side of a check: :meth:`collect` on the answers, as plain-data text. Never raises."""
        unknown = [name for name in kwargs if name not in self.arguments[len(args):]]
        if unknown:  # a misspelt name, or an answer given both by position and by name
            return dumps({"state": "error", "error": f"it takes the answers {', '.join(self.arguments)} (in that "
                                                     f"order, or by these names); {', '.join(unknown)}: misspelt, "
                                                     f"or given twice"})
        answers = list(args) + [kwargs[name] for name in self.arguments[len(args):] if name in kwargs]
        if not answers or all(self.unanswered(a) for a in answers):
            return dumps({"state": UNANSWERED})
        if len(answers) != len(self.arguments):
            return dumps({"state": "error", "error": f"it takes {len(self.arguments)} answer(s), "
                                                     f"{len(answers)} given"})
        try:
            tools = tools_in_reach(self.revealed_by) if self.revealed_by else []
            return dumps({"state": "answered", "data": self.collect(*answers, seed=seed), "tools": tools})
        except Exception as err:  # a collect that fails on an answer becomes feedback, judged outside
            return dumps({"state": "error", "error": short_error(err)})

    def evaluate(self, *args, **kwargs):
        """Grade an answer and return a :class:`Result`, without printing it."""
        return self._evaluate(args, kwargs, first_try=False)

    def _evaluate(self, args, kwargs, first_try):
        return self.judge_export(self.export(*args, seed=self.seed, **kwargs), self.seed, first_try)

    def judge_export(self, text, seed=0, first_try=False):
        """The :class:`Result` of an export (the text :meth:`export` wrote with the same ``seed``): the
        text read as plain data, then :meth:`judge_read`."""
        try:
            export = loads(text)
        except PlainDataError:
            export = None
        return self.judge_read(export, seed, first_try)

    def judge_read(self, export, seed=0, first_try=False):
        """The :class:`Result` of an export already read back (what :func:`.plain.loads` returned for the text
        :meth:`export` wrote with the same ``seed``; None when it could not be read).

        This is all the grader runs, in its own process.
        """
        try:
            state = export["state"]
        except (KeyError, TypeError):
            return Result(0, self.max_points, INCORRECT, "The grader could not read the answers the notebook gave.")
        if state == UNANSWERED:
            return Result(0, self.max_points, UNANSWERED,
                          f"Replace the placeholder(s) with your answer and run the cell again "
                          f"(call it as {self.call}). Stuck? ex.{self.name}.hint() gives a nudge.")
        try:
            if state != "answered":
                raise _CollectFailed(str(export.get("error", "no answer data"))[:300])
            feedback = self.judge(export["data"], seed)
        except Exception as err:  # a checker never raises because of an answer
            error = str(err) if isinstance(err, _CollectFailed) else short_error(err)
            return Result(0, self.max_points, INCORRECT,
                          f"The checker could not use your answer ({error}). "
                          f"It is called as {self.call}; see ex.{self.name}.hint().")
        points = max(0, min(int(feedback.points), self.max_points))
        tools = export.get("tools") if isinstance(export.get("tools"), list) else []
        if tools and self.revealed_by:
            return Result(0, self.max_points, INCORRECT, self._revealed_message(tools, points))
        status = CORRECT if points == self.max_points else PARTIAL if points else INCORRECT
        graded = self.mode == GRADED
        message = feedback.render(graded=graded or first_try)
        if first_try and not graded and message != feedback.render():
            message += (f"\n  (A first try: this says what is wrong, not the answer. Fix it, or ask "
                        f"ex.{self.name}.hint(); a second wrong check shows the answer.)")
        return Result(points, self.max_points, status, message)

    def _revealed_message(self, tools, points):
        """What a check says when a tool of ``revealed_by`` was in reach: nothing of how the answers would score."""
        names = " and ".join(f"`{str(name)[:60]}`" for name in tools[:3])
        return (f"  {NO_MARK} This notebook had imported or used {names} before this check, and it prints this "
                f"exercise's answer. The exercise asks for your prediction first: it counts only when it is checked "
                f"before the tool is imported or used, so this check was not counted. Restart the kernel, run the "
                f"cells from the top down to this exercise (the notebook imports the tool after it), and check "
                f"again.")

    def check(self, *args, **kwargs):
        """Grade the answer and print the feedback (with ``teach_first``, the first wrong one without the answer)."""
        if os.environ.get(GRADER_RUN_ENV):
            print(f"({self.chapter}.{self.name} is checked by the grader itself.)")
            return
        first_try = self.teach_first and self.wrong_checks == 0
        self.last_result = self._evaluate(args, kwargs, first_try)
        if self.last_result.status in (PARTIAL, INCORRECT):
            self.wrong_checks += 1
        print(self.last_result)

    def answer_shown(self):
        """Whether this kernel's checks have given the answer away: the last check was correct, or (self-study
        only) a wrong check printed the answer (with ``teach_first``, from the second wrong check on).

        A cell that runs an exercise's code to let the learner watch what happens ("predict, then watch") runs it
        only then, so that it never prints what the checker still holds back (and, in a graded hand-out, only after
        a correct check).
        """
        if self.last_result is not None and self.last_result.status == CORRECT:
            return True
        return self.mode != GRADED and self.wrong_checks >= (2 if self.teach_first else 1)

    def hint(self, level=1):
        """Print hint number ``level`` (1 is a nudge; higher levels say more)."""
        if not self.hints:
            print(f"There is no hint for {self.chapter}.{self.name}.")
            return
        level = max(1, min(int(level), len(self.hints)))
        more = f" More: ex.{self.name}.hint({level + 1})." if level < len(self.hints) else ""
        print(f"Hint {level}/{len(self.hints)} ({self.chapter}.{self.name}): {self.hint_text(level)}{more}")

    def hint_text(self, level):
        """The text of hint ``level`` (from 1), counted as used. In a kernel the grader runs, the text comes
        from the grader, which records the request: the package the kernel imports has no hint texts."""
        self.hints_seen = max(self.hints_seen, level)
        text = self.hint_body(level)
        if os.environ.get(GRADER_RUN_ENV):
            try:
                return input(f"{HINT_REQUEST} {self.chapter}.{self.name} {level}")
            except Exception:  # a kernel without the grader's stdin: the package's own (hidden) text
                pass
        return text

    def hint_body(self, level):
        """The text of hint ``level`` (from 1) with this variant's values filled in, not counted as used."""
        return fill(type(self).hints[level - 1], self.text_values())

    def solution(self):
        """Print the solution (not available in graded hand-outs)."""
        if self.mode == GRADED:
            print(f"This is a graded hand-out: solutions are not shown. Try ex.{self.name}.hint() "
                  f"(up to hint({len(self.hints)})).")
            return
        print(f"Solution ({self.chapter}.{self.name}):\n{self._solution}")


class ChapterExercises:
    """The exercises of one chapter, as attributes ``q1``, ``q2``, ... (iterable, in order)."""

    def __init__(self, number, title, named, mode=SELF_STUDY, variant=None):
        if mode not in (SELF_STUDY, GRADED):
            raise ValueError(f"mode must be {SELF_STUDY!r} or {GRADED!r}, not {mode!r}.")
        unknown = sorted(set(variant or {}) - set(named))
        if unknown:
            raise ValueError(f"The variant names exercises {unknown} that chapter {number} does not have.")
        self.chapter, self.title, self.mode, self.variant = number, title, mode, dict(variant or {})
        cells = notebook_cells()[number]["exercises"]
        self._items = []
        for name, cls in named.items():
            item = cls(number, name, cells[name], mode, self.variant.get(name))
            self._items.append(item)
            setattr(self, name, item)

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def __repr__(self):
        lines = [f"Chapter {self.chapter} exercises ({self.title}):"]
        lines += [f"  {e.name}: {e.title} ({e.max_points} points) -> {e.call}" for e in self._items]
        return "\n".join(lines)

    def summary(self):
        """Print the points of the exercises checked so far in this kernel."""
        total = sum(e.max_points for e in self._items)
        got = 0
        print(f"Chapter {self.chapter} · {self.title}")
        for e in self._items:
            r = e.last_result
            got += r.points if r else 0
            state = f"{r.points}/{r.max_points} ({r.status})" if r else f"0/{e.max_points} (not checked yet)"
            print(f"  {e.name}  {e.title:<45} {state}")
        print(f"  Total: {got}/{total} points")


@dataclass(frozen=True)
class Chapter:
    """What a chapter module declares: its number, title, exercise classes by name (``{"q1": Q1, ...}``, in the
    declared order) and whether its graders use TensorFlow (the grader then watches TensorFlow for tampering too)."""

    number: int
    title: str
    named: dict
    uses_tensorflow: bool = True

    @property
    def exercises(self):
        """The exercise classes, in the declared order."""
        return tuple(self.named.values())

    def bind(self, mode=SELF_STUDY, variant=None):
        """A fresh :class:`ChapterExercises` of this chapter in ``mode``, with the parameters of ``variant``
        (``{name: params}``, see :mod:`.variants`; default: every exercise's defaults)."""
        return ChapterExercises(self.number, self.title, self.named, mode, variant)

    def rendered_cells(self, variant=None, solutions=True):
        """``{cell id: text}`` of every exercise's templates, filled with ``variant`` (default: the defaults).

        Example:
            >>> from course_utils.checkers import chapter_definition
            >>> "8, 12, 16" in chapter_definition(4).rendered_cells()["c11"]
            True
        """
        found = {}
        for name, cls in self.named.items():
            found.update(cls(self.number, name, None, SELF_STUDY, (variant or {}).get(name)).rendered_cells(solutions))
        return found

    def max_points(self):
        """``{name: points}`` of the chapter's exercises, in the declared order."""
        return {name: cls.points for name, cls in self.named.items()}


def chapter(number, title, exercises, uses_tensorflow=True):
    """Declare a chapter's exercises by the names its notebook checks them with (``ex.q1.check(...)``), at the end
    of its module: ``CHAPTER = chapter(1, "...", {"q1": Q1, "q2": Q2})``.

    Raises:
        TypeError: ``exercises`` is not a dict of names to :class:`Exercise` subclasses.
        ValueError: the chapter's solution notebook checks other names (run the build after adding, removing
            or renaming one).

    Example:
        >>> chapter(3, "Beyond one process", [Exercise])
        Traceback (most recent call last):
        ...
        TypeError: chapter(3, ...) takes its exercises by name, as the notebook checks them: {"q1": FirstExercise, "q2": ...}, not a list.
    """
    if not isinstance(exercises, dict) or not all(isinstance(cls, type) and issubclass(cls, Exercise)
                                                  for cls in exercises.values()):
        raise TypeError(f'chapter({number}, ...) takes its exercises by name, as the notebook checks them: '
                        f'{{"q1": FirstExercise, "q2": ...}}, not a {type(exercises).__name__}.')
    found = sorted(notebook_cells().get(number, {}).get("exercises", {}))
    if sorted(exercises) != found:
        raise ValueError(f"Chapter {number} declares the exercises {sorted(exercises)}, but its solution notebook "
                         f"checks {found}. Make them agree, then run `python3 course.py build`.")
    return Chapter(number, title, dict(exercises), uses_tensorflow)
