"""The checkers' machinery: the registry, placeholders, feedback, hints, solutions, modes."""

import numpy as np
import pytest

from course_utils.checkers import CHAPTER_MODULES, exercises, is_placeholder, registry


def test_registry_lists_every_chapter_with_max_points():
    table = registry()
    assert sorted(table) == sorted(CHAPTER_MODULES) and {1, 2, 3, 4, 5, 6, 8} <= set(table)
    for chapter, items in table.items():
        assert items, chapter  # chapters 12 and 13, split from one, have two exercises and one
        assert list(items) == [f"q{i}" for i in range(1, len(items) + 1)]
        assert all(isinstance(p, int) and p > 0 for p in items.values())
        assert {e.name: e.max_points for e in exercises(chapter)} == items


def test_exercises_are_bound_to_the_names_the_notebook_checks_not_to_their_position():
    from course_utils.checkers import ch1, core

    named = ch1.CHAPTER.named
    reordered = core.chapter(1, "Tensors and devices",
                             {"q2": named["q2"], "q3": named["q3"], "q4": named["q4"], "q1": named["q1"]})
    assert type(reordered.bind().q1) is named["q1"] and list(reordered.max_points()) == ["q2", "q3", "q4", "q1"]
    with pytest.raises(TypeError, match=r'takes its exercises by name, as the notebook checks them: \{"q1": '):
        core.chapter(1, "Tensors and devices", list(named.values()))
    with pytest.raises(ValueError, match=r"declares the exercises \['q1', 'q2', 'q3', 'q5'\], but its solution "
                                         r"notebook checks \['q1', 'q2', 'q3', 'q4'\]. Make them agree"):
        core.chapter(1, "Tensors and devices", {"q1": named["q1"], "q2": named["q2"], "q3": named["q3"],
                                                "q5": named["q4"]})


def test_a_package_without_its_notebook_cells_file_says_how_to_get_it(tmp_path):
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import course_utils

    copy = tmp_path / "course_utils"
    shutil.copytree(Path(course_utils.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__", "tools"))
    (copy / "checkers" / "notebook_cells.json").unlink()
    done = subprocess.run([sys.executable, "-c", "from course_utils.checkers import exercises; exercises(1)"],
                          env={"PYTHONPATH": str(tmp_path), "PATH": ""}, capture_output=True, text=True, cwd=tmp_path)
    assert "FileNotFoundError: course_utils/checkers/notebook_cells.json is missing: in a clone of the course, run " \
           "`python3 course.py build`" in done.stderr, done.stderr[-1500:]


def test_exercises_unknown_chapter_says_which_exist():
    with pytest.raises(ValueError, match=r"chapters \[1, 2, 3, 4, 5, 6, .*\], not 10"):
        exercises(10)


def test_exercises_returns_the_same_object():
    assert exercises(3) is exercises(3)


def test_is_placeholder():
    assert is_placeholder(None) and is_placeholder(...)
    assert is_placeholder({"a": None, "b": ...}) and is_placeholder([None] * 7) and is_placeholder([])
    assert not is_placeholder([True, None]) and not is_placeholder(0) and not is_placeholder("")
    assert not is_placeholder(None, none_is_answer=True) and is_placeholder(..., none_is_answer=True)


@pytest.mark.parametrize("chapter", [1, 2, 3, 4, 5, 6])
def test_every_exercise_scores_zero_when_unanswered(chapter):
    for ex in exercises(chapter):
        n = len(ex.arguments)
        placeholder = ... if ex.none_is_answer else None
        result = ex.evaluate(*[placeholder] * n)
        assert (result.status, result.points) == ("unanswered", 0), (chapter, ex.name, str(result))
        assert "Replace the placeholder" in result.message


@pytest.mark.parametrize("chapter", [1, 2, 3, 4, 5, 6])
def test_no_checker_raises_on_odd_input(chapter, cpus8):
    odd_inputs = [42, "nonsense", object(), [1, 2], {"x": 1}, 3.5, np.zeros(3), lambda *a: 1 / 0, int]
    for ex in exercises(chapter):
        n = len(ex.arguments)
        for odd in odd_inputs:
            result = ex.evaluate(*[odd] * n)
            assert result.points < result.max_points, (chapter, ex.name, odd, str(result))
            assert result.message, (chapter, ex.name, odd)
        result = ex.evaluate()  # no answer at all
        assert result.status == "unanswered"
        result = ex.evaluate(*[1] * (n + 1))  # one argument too many
        assert result.status == "incorrect" and ex.call in result.message


def test_check_prints_the_result(capsys):
    ex = exercises(3)
    ex.q4.check([False, True, True, False, True, False])
    assert capsys.readouterr().out.startswith("Correct! 6/6 points.")
    ex.q4.check([True, True, True, False, True, False])
    ex.q1.check(None)
    out = capsys.readouterr().out
    assert "Partly correct: 5/6 points." in out and "Not answered yet: 0/2 points." in out
    assert ex.q1.last_result.status == "unanswered"


def test_hints_come_in_a_ladder(capsys):
    ex = exercises(4)
    ex.q3.hint()
    assert capsys.readouterr().out.startswith("Hint 1/2 (4.q3): Divide each tensor axis") 
    ex.q3.hint(2)
    out = capsys.readouterr().out
    assert out.startswith("Hint 2/2 (4.q3):") and "More:" not in out
    ex.q3.hint(7)  # past the last hint: the last one
    assert capsys.readouterr().out.startswith("Hint 2/2")
    assert ex.q3.hints_seen == 2
    for chapter in registry():
        for exercise in exercises(chapter):
            assert exercise.hints, (chapter, exercise.name)


def test_solution_and_summary_print(capsys):
    ex = exercises(4)
    ex.q3.solution()
    ex.summary()
    out = capsys.readouterr().out
    assert 'shard_shapes = {"a": (4, 12, 16)' in out and "Total:" in out
    assert "ex.q1.check(mesh, layout)" in repr(ex)


def test_graded_mode_hides_solutions_and_answers(capsys):
    graded, study = exercises(3, mode="graded"), exercises(3)
    assert graded is not study and graded.q4.mode == "graded"
    graded.q4.solution()
    out = capsys.readouterr().out
    assert "graded hand-out" in out and "statements = [" not in out
    wrong = [True, True, True, False, True, False]
    assert "Statement 1 is False: It is data parallelism" in study.q4.evaluate(wrong).message
    message = graded.q4.evaluate(wrong).message
    assert "1 statement is judged wrong. Revisit:" in message and "is False" not in message
    with pytest.raises(ValueError, match="mode must be"):
        exercises(3, mode="exam")


def test_feedback_renders_answers_only_in_self_study():
    from course_utils.checkers.core import Feedback

    fb = Feedback()
    fb.right("a", points=2)
    fb.wrong("b is wrong.", answer="It is 3.")
    fb.note("c")
    assert fb.points == 2
    assert fb.render() == "  ✓ a\n  ✗ b is wrong. It is 3.\n  c"
    assert fb.render(graded=True) == "  ✓ a\n  ✗ b is wrong.\n  c"


def test_solutions_are_the_solution_notebooks_code():
    """One source: solution() prints the code of the solution notebook's checking cell."""
    import nbformat

    from course_utils.tools import build
    from course_utils.tools.checkout import checkout_root

    root = checkout_root()
    for path in sorted((root / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        chapter = nb.metadata["course"]["chapter"]
        cells = {c.id: c.source for c in nb.cells}
        for exercise in exercises(chapter):
            source = cells[build.exercise_cells(nb)["exercises"][exercise.name]["cell"]]
            assert exercise.call in source
            for line in exercise._solution.splitlines():
                assert line in source, (path.name, exercise.name, line)


def test_as_bool_list_reads_booleans_or_says_what_to_give():
    from course_utils.checkers.answers import as_bool_list
    from course_utils.checkers.core import Feedback

    assert as_bool_list(Feedback(), [True, np.bool_(False), 1, None], 4, "call", "True = it traces") == [
        True, False, True, None]
    for answer, fragment in (("TFTF", "Give a list of 4 booleans, one per call (True = it traces)"),
                             ([True], "4 values, not 1")):
        feedback = Feedback()
        assert as_bool_list(feedback, answer, 4, "call", "True = it traces") is None
        assert fragment in feedback.render()


def test_grade_statements_counts_the_wrong_ones_and_holds_back_which():
    from course_utils.checkers.answers import grade_statements
    from course_utils.checkers.core import Feedback

    truths = [(True, "why one"), (False, "why two"), (True, "why three")]
    ideas = ["idea one", "idea two", "idea three"]
    feedback = Feedback()
    grade_statements(feedback, [True, "True", None], truths, ideas)
    assert feedback.points == 1
    text, graded = feedback.render(), feedback.render(graded=True)
    assert "statement(s) [3]: not answered yet" in text and "1 statement is judged wrong. Revisit: idea two." in text
    assert "Statement 2 is False: why two" in text and "why two" not in graded
    feedback = Feedback()
    grade_statements(feedback, [True, False, True], truths, ideas, points_for={3: 2})
    assert feedback.points == 2 and "3 of the 3 statements judged right" in feedback.render()
    feedback = Feedback()
    grade_statements(feedback, [True, False], truths, ideas)
    assert feedback.points == 0 and "3 values, not 2" in feedback.render()


def test_as_bytes_rounds_numbers_and_refuses_the_rest():
    from course_utils.checkers.answers import as_bytes

    assert as_bytes(2 * 3 / 4 * 96) == 144 and as_bytes(np.int64(48)) == 48 and as_bytes(47.6) == 48
    assert as_bytes(True) is None and as_bytes("96 MiB") is None and as_bytes(None) is None
    assert as_bytes("4096") == 4096 and as_bytes(" 67,108,864 ") == 67108864  # numbers typed as text


def test_as_number_and_as_int_read_what_a_learner_types():
    from fractions import Fraction

    from course_utils.checkers.answers import as_bytes, as_int, as_number

    for text, number in (("4096", 4096), (" 0.2 ", 0.2), ("940_584", 940584), ("940,584", 940584),
                         ("940 584", 940584), (Fraction(1, 5), 0.2),
                         (np.float32(0.5), 0.5), (np.array(2.0), 2.0)):
        assert as_number(text) == pytest.approx(number), text
    for unreadable in ("1,5", "64 MiB", "two", True, np.bool_(True), None, [1], float("nan"), float("inf"), b"4096",
                       "20%"):
        assert as_number(unreadable) is None, unreadable
    assert as_number("20%", percent=True) == pytest.approx(0.2) and as_number(" 20 % ", percent=True) == 0.2
    assert as_int("200%") is None and as_bytes("100%") is None  # a percentage is only a share
    assert as_int("2") == 2 and as_int(np.int64(3)) == 3 and as_int(63.0) == 63 and as_int(2 ** 70) == 2 ** 70
    assert as_int("2.5") is None and as_int(2.5) is None and as_int(True) is None


def test_answers_by_name_are_judged_by_their_names_in_any_order():
    q3 = exercises(8).q3  # three numbers; the notebook's call does not list them in the order the text asks them
    values = {"weight_bytes_total": 940584, "weight_bytes_per_device": 65064, "pod_bytes_per_device": 123432}
    in_order = q3.evaluate(*[values[name] for name in q3.arguments])
    assert in_order.points == in_order.max_points
    assert q3.evaluate(**values).points == in_order.max_points  # by name, in the text's order
    assert q3.evaluate(values["weight_bytes_per_device"], **{k: v for k, v in values.items()
                                                            if k != "weight_bytes_per_device"}).points == 3
    for wrong in ({**values, "weight_bytes_totl": values.pop("weight_bytes_total")},):
        result = q3.evaluate(**wrong)
        assert result.points == 0 and "weight_bytes_totl: misspelt, or given twice" in result.message
    twice = q3.evaluate(65064, weight_bytes_per_device=65064, weight_bytes_total=940584, pod_bytes_per_device=123432)
    assert twice.points == 0 and "weight_bytes_per_device: misspelt, or given twice" in twice.message


def test_a_checker_short_of_logical_cpus_says_to_run_the_first_cell(monkeypatch):
    from course_utils.checkers import answers

    monkeypatch.setattr(answers, "logical_cpus", lambda: ["/device:CPU:0", "/device:CPU:1"])
    assert answers.first_cpus(2) == ["/device:CPU:0", "/device:CPU:1"]
    for short in (lambda: answers.first_cpus(8), lambda: answers.mesh_on_first_cpus([("batch", 4), ("model", 2)])):
        with pytest.raises(RuntimeError, match=r"needs 8 logical CPUs and this kernel has 2: run the notebook's "
                                               r"first cell \(configure_virtual_cpus\(8\)\) in a fresh kernel"):
            short()


def test_checker_meshes_are_made_once_per_process():
    from course_utils.checkers.answers import mesh_on_first_cpus

    mesh = mesh_on_first_cpus([("batch", 2), ("model", 2)])
    assert mesh is mesh_on_first_cpus((("batch", 2), ("model", 2)))
    assert mesh.dim_names == ["batch", "model"] and mesh.shape() == [2, 2]
