"""Checkers for the graded exercises (``exercises/NN_*.ipynb``), in the style of Kaggle's learntools.

In an exercise notebook::

    from course_utils.checkers import exercises
    ex = exercises(4)              # the checkers of chapter 4
    ex.q1.check(mesh, layout)      # prints "Correct!" or a hint aimed at your mistake
    ex.q1.hint()                   # a nudge; ex.q1.hint(2) says more
    ex.q1.solution()               # the answer (not in graded hand-outs)
    ex.summary()                   # your points so far in this kernel

A checker never raises because of an answer: a wrong type, a function that crashes, a tensor on
the wrong mesh all give a hint. An answer still left at its placeholder (``None``, ``...``, or a
dict/list of those) prints "Not answered yet" and scores 0.

The package: ``core.py`` (results, feedback, the exercise class), ``answers.py`` (reading
answers), one module per chapter (``ch1.py`` ...) with each exercise's grader and hints side by
side (a chapter's build-and-measure exercise, whose checker runs the learner's code, in
``chN_build.py``; the larger chapters' further parts in ``ch2_plan.py``, ``ch2_loss.py``, ``ch2_step_run.py``,
``ch2_step_diagnosis.py``, ``ch2_step_errors.py``, ``ch3_config.py``, ``ch3_config_grader.py``, ``ch4_layouts.py``,
``ch4_budget_cases.py``, ``ch4_budget_hints.py``, ``ch5_layers.py``, ``ch5_cases.py``, ``ch5_budget.py``,
``ch6_init.py``, ``ch6_adam.py``, ``ch6_broken.py``, ``ch8_cases.py``, ``ch8_run.py``), ``notebook_cells.json``,
generated from the solution notebooks by the build (each exercise's check call, cell and solution code; package
data), ``plain.py`` (answers as plain data: a check's ``collect`` half runs where the answers live, its ``judge`` half
in the grader's process), ``reach.py`` (which tools an answer could have used: "predict first" and "by hand").
TensorFlow is imported only inside the graders that need it, so :func:`registry` is cheap.
"""
import importlib
import json
import os

from .answers import is_placeholder
from .core import CORRECT, GRADED, INCORRECT, PARTIAL, SELF_STUDY, UNANSWERED, ChapterExercises, Exercise, Result
from .variants import variant_from_env

__all__ = ["CORRECT", "GRADED", "INCORRECT", "PARTIAL", "SELF_STUDY", "UNANSWERED", "ChapterExercises", "Exercise",
           "Result", "chapter_definition", "exercises", "is_placeholder", "registry"]

CHAPTER_MODULES = {1: "ch1", 2: "ch2", 3: "ch3", 4: "ch4", 5: "ch5", 6: "ch6", 7: "ch7", 8: "ch8", 9: "ch9", 12: "ch12",
                   13: "ch13"}
_BOUND = {}


def chapter_definition(number):
    """The :class:`~course_utils.checkers.core.Chapter` declared by chapter ``number``'s module.

    Raises:
        ValueError: the chapter has no exercises.
    """
    if number not in CHAPTER_MODULES:
        raise ValueError(f"There are exercises for chapters {sorted(CHAPTER_MODULES)}, not {number!r}.")
    return importlib.import_module(f".{CHAPTER_MODULES[number]}", __name__).CHAPTER


def exercises(chapter, mode=SELF_STUDY, variant=None):
    """The checkers of ``chapter``, as an object with attributes ``q1``, ``q2``, ...

    The same object is returned each time (per mode), so ``summary()`` sees every check of the
    kernel.

    Args:
        chapter: the chapter number.
        mode: ``"self-study"`` (hints, solutions, feedback that explains the right answer) or
            ``"graded"`` (graded hand-outs: no ``solution()``, feedback that never states the
            right answer).
        variant: a student's parameters, ``{"q3": {...}, ...}`` (a per-student hand-out writes them into its
            notebook; see :mod:`.variants`). Default: those the grader passed to its kernel, else every
            exercise's defaults (the self-study notebooks).

    Raises:
        ValueError: there are no exercises for that chapter, the mode is unknown, or the variant names
            exercises or parameters the chapter does not have.

    Example:
        >>> ex = exercises(3)
        >>> ex.q4.check([False, True, True, False, True, False])
        Correct! 6/6 points.
          ✓ 6 of the 6 statements judged right
    """
    if variant is None:
        variant = variant_from_env(os.environ)
    key = (chapter, mode, json.dumps(variant, sort_keys=True))
    if key not in _BOUND:
        _BOUND[key] = chapter_definition(chapter).bind(mode, variant)
    return _BOUND[key]


def registry():
    """Every chapter's exercises and their maximum points: ``{chapter: {"q1": points, ...}}``.

    Example:
        >>> registry()[1]
        {'q1': 2, 'q2': 2, 'q3': 2, 'q4': 3}
    """
    return {number: chapter_definition(number).max_points() for number in CHAPTER_MODULES}
