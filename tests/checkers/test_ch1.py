"""Chapter 1's checkers: the right answer, typical wrong answers and the hints they get."""
import re

import nbformat
import numpy as np
import pytest

from course_utils.checkers import ch1, exercises
from course_utils.tools.checkout import checkout_root
from helpers import assert_correct, assert_hint, grade, holding, sandbox_copy


@pytest.fixture(scope="module")
def solution_cells():
    nb = nbformat.read(checkout_root() / "solutions" / "01_tensors_and_devices.ipynb", as_version=4)
    return {cell.id: cell.source for cell in nb.cells}


# --- q1: predict where each operation runs -------------------------------------------------------

RIGHT_PLACEMENTS = dict(ch1._reference_placements())


def placements(**changes):
    return {**RIGHT_PLACEMENTS, **changes}


class _Shown:
    """Stands for ``ex`` in a watch cell, with every answer already shown."""

    def __getattr__(self, name):
        return type("Exercise", (), {"answer_shown": staticmethod(lambda: True)})()


def test_ch1_q1_placements_are_what_tensorflow_does(cpus8, solution_cells, capsys):
    """The notebook's watch cell runs the exercise's script in a child process with 4 CPUs; the checker's answers
    must be what it observes."""
    snippet = re.search(r"```python\n(.*?)```", solution_cells["c02"], re.DOTALL)[1]
    namespace = {"ex": _Shown(), "placements": RIGHT_PLACEMENTS}
    exec(solution_cells["c04-watch"], namespace)
    assert namespace["PLACEMENT_SCRIPT"].strip() == snippet.strip(), "the watch cell must run the script shown"
    assert "set_logical_device_configuration(cpu, four_cpus)" in snippet and "* 4" in snippet
    observed = {name: ch1._placement(where) for name, where in namespace["ran_on"].items()}
    assert observed == ch1._reference_placements(), capsys.readouterr().out


def test_ch1_q1_running_the_script_in_the_notebook_gives_other_answers(cpus8):
    """The notebook's kernel has 8 CPUs: there CPU:6 exists and configuring 4 CPUs raises, so running the lines in
    the notebook does not answer the exercise (and the checker says why)."""
    import tensorflow as tf

    with tf.device("/CPU:1"):
        with tf.device("/CPU:6"):
            e = tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
    assert e.device.endswith("CPU:6")
    with pytest.raises(RuntimeError):
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)
    result = grade(1, "q1", placements(e=6, f="error"))
    assert_hint(result, "e: you predicted 6", "no CPU:6, although this notebook's kernel does",
                "f: you predicted 'error'", "what these lines would do in this notebook's kernel")


def test_ch1_q1_right_answers_in_any_readable_form():
    assert_correct(grade(1, "q1", RIGHT_PLACEMENTS))
    assert_correct(grade(1, "q1", placements(b="CPU:0", c="/device:CPU:1", d=np.int64(2), e="0", f=" cpu 2 ")))
    assert_correct(grade(1, "q1", placements(c="/job:localhost/replica:0/task:0/device:CPU:1", e="CPU0",
                                             f=np.int32(2))))


@pytest.mark.parametrize("key, wrong, fragment", [
    ("b", 3, "does not follow its input tensors"),     # the op follows its input
    ("c", 2, "another block is open inside it"),       # the outer block wins
    ("c", 3, "does not follow its input tensors"),
    ("d", 1, "does not follow its input tensors"),     # d's input c lives on CPU:1
    ("d", 0, "which tf.device blocks are still open"),  # leaving the inner block resets everything
    ("e", 1, "does not fall back to the enclosing block"),
    ("e", 6, "no CPU:6, although this notebook's kernel does"),  # what the notebook's 8-CPU kernel would do
    ("e", "error", "nothing on the lines up to it raises"),
    ("b", 5, "no CPU:5: its CPUs are CPU:0 to CPU:3, although this notebook's kernel has one"),
    ("b", 11, "no CPU:11: its CPUs are CPU:0 to CPU:3."),
    ("f", "error", "compare what this line asks for with the configuration the runtime started with"),
    ("f", RuntimeError, "compare what this line asks for"),
    ("f", 3, "does not follow its input tensors"),
    ("f", 0, "which tf.device block is in force"),
    ("c", "GPU:0", "give the index of a CPU"),
    ("c", True, "give the index of a CPU"),
])
def test_ch1_q1_typical_mistakes_get_a_hint(key, wrong, fragment):
    result = grade(1, "q1", placements(**{key: wrong}))
    assert_hint(result, f"{key}: ", fragment, points=1)  # one item wrong out of five: 1 point of 2


def test_ch1_q1_first_try_says_what_is_wrong_not_where_it_runs():
    wrong = {"b": 3, "c": 2, "d": 1, "e": 6, "f": "error"}
    first = exercises(1).q1._evaluate((wrong,), {}, first_try=True).message
    for reason in ch1._reference_placement_reasons().values():
        assert reason not in first
    for key, right in ch1._reference_placements().items():
        line = next(line for line in first.splitlines() if line.strip().startswith(f"✗ {key}:"))
        assert f"CPU:{right}" not in line.replace("CPU:0 to CPU:3", "") and "accepted" not in line, line
    assert "It runs on CPU:2" in exercises(1).q1.evaluate(wrong).message  # the second wrong check shows it


def test_ch1_q1_guessing_and_malformed_answers():
    assert_hint(grade(1, "q1", placements(b=3, c=2)), "does not follow", "another block is open inside it")
    assert_hint(grade(1, "q1", dict.fromkeys("bcdef", 0)), "the same answer for every line")
    assert_hint(grade(1, "q1", dict.fromkeys("bcdef", "error")), "the same answer for every line")
    assert_hint(grade(1, "q1", [0, 1, 2, 0, 2]), "Give a dict with the keys ['b', 'c', 'd', 'e', 'f']")
    assert_hint(grade(1, "q1", {"b": 0, "c": 1, "d": 2, "e": 0}), "Missing key(s) ['f']", points=1)
    assert_hint(grade(1, "q1", placements(f=None)), "f: not answered yet", points=1)


def test_ch1_solution_cells_are_right(solution_cells):
    for cell, name, answer in (("ch1-q1", "q1", "placements"), ("ch1-q2", "q2", "predictions")):
        source = solution_cells[cell]
        block = source[source.index("# BEGIN SOLUTION"):source.index("# END SOLUTION")]
        namespace = {}
        exec(block, namespace)
        assert_correct(grade(1, name, namespace[answer]))


# --- the watch cells run only once the checker has shown the answer ---------------------------------

def test_ch1_answer_shown_follows_what_the_checks_printed():
    wrong = placements(b=3)
    ex = ch1.CHAPTER.bind()  # fresh, unlike exercises(1), which is the same object all along
    assert not ex.q1.answer_shown()
    ex.q1.check(wrong)  # first wrong check: the answer is held back
    assert not ex.q1.answer_shown()
    ex.q1.check(wrong)  # second: the answer is shown
    assert ex.q1.answer_shown()
    graded = ch1.CHAPTER.bind("graded")
    graded.q1.check(wrong), graded.q1.check(wrong), graded.q1.check(wrong)
    assert not graded.q1.answer_shown()  # a graded hand-out never shows the answer
    graded.q1.check(RIGHT_PLACEMENTS)
    assert graded.q1.answer_shown()
    fresh = ch1.CHAPTER.bind()
    fresh.q2.check(ch1._reference_traces())
    assert fresh.q2.answer_shown() and not fresh.q1.answer_shown()


def test_ch1_watch_cells_print_nothing_before_the_answer_is_shown(cpus8, solution_cells, capsys):
    import tensorflow as tf

    for cell, unseen in (("c04-watch", "ran_on"), ("c09", "observed")):
        namespace = {"tf": tf, "ex": ch1.CHAPTER.bind(), "placements": {}, "predictions": []}
        exec(solution_cells[cell], namespace)
        assert unseen not in namespace and "Not yet: this cell" in capsys.readouterr().out, cell
        assert "answer_shown()" in solution_cells[cell]


# --- q2: predict which calls trace --------------------------------------------------------------

def test_ch1_q2_tracing_claim_is_what_tensorflow_does(cpus8, solution_cells):
    """The notebook's watch cell calls a tf.function as in the table; the checker's answers must match it."""
    import tensorflow as tf

    for call in ch1.CALLS:
        assert f"`{call}`" in solution_cells["c05"]
    assert "def f(x, training):" in solution_cells["ch1-q2"]
    namespace = {"tf": tf, "ex": _Shown(), "predictions": ch1._reference_traces()}
    exec(solution_cells["c09"], namespace)
    called = [eval(call, {"tf": tf, "f": lambda x, training: (x, training)}) for call in ch1.CALLS]
    made = namespace["CALL_ARGUMENTS"]
    assert len(made) == len(called)
    for (x, training), (y, flag) in zip(made, called):  # the watch cell makes the calls of the table, in order
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y) and training is flag
    assert namespace["observed"] == ch1._reference_traces()


def test_ch1_q2_right_answers_in_any_readable_form():
    right = list(ch1._reference_traces())
    assert_correct(grade(1, "q2", right))
    assert_correct(grade(1, "q2", np.array(right)))
    assert_correct(grade(1, "q2", tuple(int(v) for v in right)))
    assert_correct(grade(1, "q2", [" True" if v else "false" for v in right]))  # words, any case


def test_ch1_q2_tracing_hints():
    right = list(ch1._reference_traces())
    assert_hint(grade(1, "q2", [True, False] * 3 + [True]), "5 of the 7 predictions are wrong")  # a guessed pattern
    assert_hint(grade(1, "q2", [True] * 7), "Not every call traces", "not on their values")
    assert_hint(grade(1, "q2", [False] * 7), "Some calls must trace", "there is no concrete function yet")
    assert_hint(grade(1, "q2", [True] + [False] * 6), "not only once")
    values_matter = right[:2] + [True] + right[3:]
    assert_hint(grade(1, "q2", values_matter), "1 of the 7 predictions is wrong", "its values, its dtype, its shape",
                "call 3, f(tf.constant([5.0, 6.0]), training=True)", "not on their values", points=1)
    python_ignored = right[:1] + [False] + right[2:]
    assert_hint(grade(1, "q2", python_ignored), "How does a plain Python argument", "call 2", "by its value",
                points=1)
    per_argument = right[:5] + [False] + right[6:]  # shape (3,) and training=True were seen, in different calls
    assert_hint(grade(1, "q2", per_argument), "from ALL the arguments of one call together", "call 6",
                "never together", points=1)
    assert_hint(grade(1, "q2", right[:6]), "7 values, not 6")
    assert_hint(grade(1, "q2", right[:6] + [None]), "True or False for every call")
    assert_hint(grade(1, "q2", right[:6] + ["maybe"]), "True or False for every call")
    assert_hint(grade(1, "q2", "TTFTTTF"), "Give a list of 7 booleans")


def test_ch1_q2_first_try_names_ideas_not_calls():
    """Naming a wrong True/False would name its right value: a first wrong check names the ideas to revisit."""
    right = list(ch1._reference_traces())
    for wrong in ([not v for v in right], right[:5] + [False] + right[6:], [True] * 7):
        first = exercises(1).q2._evaluate((wrong,), {}, first_try=True).message
        assert "Revisit:" in first and not re.search(r"call \d", first), first
        for why in ch1._reference_why_traces():
            assert why not in first


# --- q3: gradients with GradientTape -------------------------------------------------------------

@pytest.fixture(scope="module")
def tape_results(cpus8):
    """The right gradients, the gradients of an unwatched constant (None and zero), and y."""
    import tensorflow as tf

    w, x = tf.Variable(ch1.W), tf.constant(ch1.X)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = w * x ** 2
    right = tape.gradient(y, [w, x])
    with tf.GradientTape(persistent=True) as tape:
        y = w * x ** 2
    unwatched = tape.gradient(y, [w, x])
    zeros = tape.gradient(y, [w, x], unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return right, unwatched, zeros, y


def test_ch1_q3_gradient_tape(tape_results):
    import tensorflow as tf

    (grad_w, grad_x), unwatched, zeros, y = tape_results
    assert_correct(grade(1, "q3", grad_w, grad_x))
    assert_correct(grade(1, "q3", grad_w.numpy(), grad_x.numpy()))  # .numpy() of the tape's result is fine
    assert unwatched[1] is None
    assert_hint(grade(1, "q3", *unwatched), "a tape only watches trainable variables", "tape.watch(x)", points=1)
    assert_hint(grade(1, "q3", *zeros), "grad_x = 0: the tape did not record x", points=1)
    assert_hint(grade(1, "q3", grad_x, grad_w), "swapped")
    assert_hint(grade(1, "q3", None, None), "inside* the")
    assert_hint(grade(1, "q3", grad_w, y), "grad_x = 18 is y itself", points=1)
    assert_hint(grade(1, "q3", y, grad_x), "grad_w = 18 is y itself", points=1)
    assert_hint(grade(1, "q3", grad_x, grad_x), "grad_w = 12 is the derivative with respect to the other", points=1)
    assert_hint(grade(1, "q3", grad_w, tf.constant(6.0)), "grad_x = 6 is not the derivative", points=1)
    assert_hint(grade(1, "q3", grad_w, ...), "grad_x: not answered yet", points=1)
    assert_hint(grade(1, "q3", grad_w, tf.ones(3)), "expected one number", points=1)
    by_hand = grade(1, "q3", 9.0, 12.0)
    assert_hint(by_hand, "grad_w is a plain Python number", "grad_x is a plain Python number")
    assert_hint(grade(1, "q3", 9, grad_x), "grad_w is a plain Python number", points=1)


# --- graded hand-outs: feedback never states the answer --------------------------------------------

def test_ch1_graded_feedback_never_gives_the_answer(tape_results):
    import tensorflow as tf

    (grad_w, grad_x), unwatched, _, _ = tape_results
    graded = exercises(1, mode="graded")
    wrong_placements = {"b": 3, "c": 2, "d": 1, "e": 1, "f": "error"}
    cases = [
        (graded.q1, (wrong_placements,),
         list(ch1._reference_placement_reasons().values()) + ["It runs on"]),
        (graded.q2, ([not t for t in ch1._reference_traces()],), ch1._reference_why_traces() + ["call 1"]),
        (graded.q3, unwatched, ["tape.watch(x) inside"]),
        (graded.q3, (grad_x, grad_w), ["dy/dw first"]),
        (graded.q3, (grad_w, tf.constant(6.0)), ["dy/dx is 2*w*x"]),
    ]
    for exercise, answer, reveals in cases:
        hidden = exercise.evaluate(*answer).message
        shown = getattr(exercises(1), exercise.name).evaluate(*answer).message
        assert hidden and hidden != shown, (exercise.name, hidden)
        for reveal in reveals:
            assert reveal not in hidden, (exercise.name, reveal, hidden)
        assert any(reveal in shown for reveal in reveals), (exercise.name, shown)
    # q1's graded feedback names no right device for a wrong item
    message = graded.q1.evaluate(wrong_placements).message
    for key, right in ch1._reference_placements().items():
        line = next(line for line in message.splitlines() if line.strip().startswith(f"✗ {key}:"))
        assert f"CPU:{right}" not in line and (right != "error" or "'error'" not in line), line


def test_ch1_every_exercise_has_a_hint_ladder():
    for exercise in exercises(1):
        assert 2 <= len(exercise.hints) <= 3, exercise.name


# --- the graded sandbox's copy of this module states no answer ------------------------------------

def test_ch1_the_sandbox_copy_states_no_answer():
    module, undefined = sandbox_copy("ch1")
    assert not undefined
    for gone in ("PLACEMENTS", "INPUT_DEVICE", "PLACEMENT_REASONS", "TRACES", "WHY", "CALL_IDEAS",
                 "_reference_placements", "_reference_input_devices", "_reference_placement_reasons",
                 "_reference_traces", "_reference_why_traces", "_reference_call_ideas", "_judge_placement_mistake",
                 "_judge_explain_placement"):
        assert not hasattr(module, gone), gone
    for answer in (ch1._reference_placements(), ch1._reference_traces(), ch1._reference_input_devices(),
                   ch1._reference_call_ideas()):
        assert not holding(module, answer), answer
    assert [cls.__name__ for cls in module.CHAPTER.exercises] == [cls.__name__ for cls in ch1.CHAPTER.exercises]
    for cls in module.CHAPTER.exercises:
        assert "grade" not in vars(cls) and cls.hints, cls.__name__
