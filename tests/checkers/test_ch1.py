"""Chapter 1's checkers: the right answer, typical wrong answers and the hints they get."""
import re

import nbformat
import numpy as np
import pytest

from course_utils.checkers import ch1, exercises
from course_utils.checkout import checkout_root
from helpers import assert_correct, assert_hint, grade, holding, sandbox_copy


@pytest.fixture(scope="module")
def solution_cells():
    nb = nbformat.read(checkout_root() / "solutions" / "01_tensors_and_devices.ipynb", as_version=4)
    return {cell.id: cell.source for cell in nb.cells}


def code_lines(source):
    """The non-empty lines of ``source`` without comments or indentation."""
    return [line.split("#")[0].strip() for line in source.splitlines() if line.split("#")[0].strip()]


# --- q1: predict where each operation runs -------------------------------------------------------

RIGHT_PLACEMENTS = dict(ch1._reference_placements())


def placements(**changes):
    return {**RIGHT_PLACEMENTS, **changes}


def test_ch1_q1_placements_are_what_tensorflow_does(cpus8, solution_cells):
    """The notebook's watch cell runs the exercise's code; the checker's answers must be what it observes."""
    import tensorflow as tf

    snippet = re.search(r"```python\n(.*?)```", solution_cells["c02"], re.DOTALL)[1]
    watch = solution_cells["c04-watch"]
    assert set(code_lines(snippet)) <= set(code_lines(watch)), "the watch cell must run the code the learner reads"
    namespace = {"tf": tf, "placements": RIGHT_PLACEMENTS}
    exec(watch, namespace)
    observed = {name: ch1._placement(where) for name, where in namespace["ran_on"].items()}
    assert observed == ch1._reference_placements()
    assert "cannot be modified after being initialized" in namespace["ran_on"]["f"]


def test_ch1_q1_right_answers_in_any_readable_form():
    assert_correct(grade(1, "q1", RIGHT_PLACEMENTS))
    assert_correct(grade(1, "q1", placements(b="CPU:0", c="/device:CPU:6", d=np.int64(1), e="0", f="RuntimeError")))
    assert_correct(grade(1, "q1", placements(c="/job:localhost/replica:0/task:0/device:CPU:6", f=RuntimeError)))


@pytest.mark.parametrize("key, wrong, fragment", [
    ("b", 2, "does not follow its input tensors"),     # the op follows its input
    ("c", 1, "nested inside it overrides it"),         # the outer block wins
    ("c", 2, "does not follow its input tensors"),
    ("d", 6, "does not follow its input tensors"),     # d's input c lives on CPU:6
    ("d", 0, "does not close the block around it"),    # leaving the inner block resets everything
    ("e", 4, "does not fall back to the enclosing block"),
    ("e", 9, "there is no CPU:9"),
    ("e", "error", "none of the lines before it raises"),
    ("b", 11, "there is no CPU:11"),
    ("f", 3, "different device configuration"),        # reconfiguring after the runtime started
    ("f", 0, "different device configuration"),
    ("c", 5, "which tf.device block is in force"),
    ("c", "GPU:0", "give the index of a CPU"),
    ("c", True, "give the index of a CPU"),
])
def test_ch1_q1_typical_mistakes_get_a_hint(key, wrong, fragment):
    result = grade(1, "q1", placements(**{key: wrong}))
    assert_hint(result, f"{key}: ", fragment, points=1)  # one item wrong out of five: 1 point of 2


def test_ch1_q1_guessing_and_malformed_answers():
    assert_hint(grade(1, "q1", placements(b=2, c=1)), "does not follow", "overrides")  # two wrong: 0 points
    assert_hint(grade(1, "q1", dict.fromkeys("bcdef", 0)), "the same answer for every line")
    assert_hint(grade(1, "q1", dict.fromkeys("bcdef", "error")), "the same answer for every line")
    assert_hint(grade(1, "q1", [0, 6, 1, 0, "error"]), "Give a dict with the keys ['b', 'c', 'd', 'e', 'f']")
    assert_hint(grade(1, "q1", {"b": 0, "c": 6, "d": 1, "e": 0}), "Missing key(s) ['f']", points=1)
    assert_hint(grade(1, "q1", placements(f=None)), "f: not answered yet", points=1)


# --- q2: predict which calls trace --------------------------------------------------------------

def test_ch1_q2_tracing_claim_is_what_tensorflow_does(cpus8, solution_cells):
    """The notebook's watch cell calls a tf.function as in the table; the checker's answers must match it."""
    import tensorflow as tf

    watch = solution_cells["c09"]
    arguments = ", ".join(call[len("f("):-1] for call in ch1.CALLS)
    assert f"[{arguments}]" in watch, "the watch cell must make the calls of the exercise, in order"
    for call in ch1.CALLS:
        assert f"`{call}`" in solution_cells["c05"]
    namespace = {"tf": tf, "predictions": ch1._reference_traces()}
    exec(watch, namespace)
    assert namespace["observed"] == ch1._reference_traces()


def test_ch1_q2_tracing_hints():
    right = list(ch1._reference_traces())
    assert_correct(grade(1, "q2", right))
    assert_correct(grade(1, "q2", np.array(right)))
    assert_hint(grade(1, "q2", [True, False] * 3 + [True]), "call 4, f(3)", "call 7")  # guessing a pattern
    assert_hint(grade(1, "q2", [True] * 7), "Not every call traces", "not on their values")
    assert_hint(grade(1, "q2", [False] * 7), "Some calls must trace", "there is no concrete function yet")
    assert_hint(grade(1, "q2", [True] + [False] * 6), "not only once")
    values_matter = right[:1] + [True] + right[2:]
    assert_hint(grade(1, "q2", values_matter), "call 2, f(tf.constant(2)): compare it with call 1",
                "not on their values", points=1)
    python_like_tensor = right[:3] + [False] + right[4:]
    assert_hint(grade(1, "q2", python_like_tensor), "call 4, f(3)", "by its *value*", points=1)
    assert_hint(grade(1, "q2", right[:6]), "7 values, not 6")
    assert_hint(grade(1, "q2", right[:6] + [None]), "True or False for every call")
    assert_hint(grade(1, "q2", "TFTTTFF"), "Give a list of 7 booleans")


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
    wrong_placements = {"b": 2, "c": 1, "d": 6, "e": 4, "f": 3}
    cases = [
        (graded.q1, (wrong_placements,),
         list(ch1._reference_placement_reasons().values()) + ["It runs on", "It is 'error'"]),
        (graded.q2, ([not t for t in ch1._reference_traces()],), ch1._reference_why_traces()),
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
    for gone in ("PLACEMENTS", "INPUT_DEVICE", "PLACEMENT_REASONS", "TRACES", "WHY", "_reference_placements",
                 "_reference_input_devices", "_reference_placement_reasons", "_reference_traces",
                 "_reference_why_traces", "_judge_placement_mistake", "_judge_explain_placement"):
        assert not hasattr(module, gone), gone
    for answer in (ch1._reference_placements(), ch1._reference_traces(), ch1._reference_input_devices()):
        assert not holding(module, answer), answer
    assert [cls.__name__ for cls in module.CHAPTER.exercises] == [cls.__name__ for cls in ch1.CHAPTER.exercises]
    for cls in module.CHAPTER.exercises:
        assert "grade" not in vars(cls) and cls.hints, cls.__name__
