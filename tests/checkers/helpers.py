"""Shared helpers of the checker tests: grade an answer, assert it is right or gives a hint."""
from course_utils.checkers import exercises


def grade(chapter, name, *args, **kwargs):
    return getattr(exercises(chapter), name).evaluate(*args, **kwargs)


def assert_correct(result):
    assert result.status == "correct", str(result)
    assert result.points == result.max_points


def assert_hint(result, *fragments, points=0):
    assert result.points == points, str(result)
    for fragment in fragments:
        assert fragment in result.message, f"{fragment!r} not in:\n{result}"
