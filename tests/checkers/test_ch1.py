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


def test_ch1_solution_cells_are_right(solution_cells, cpus8):
    for cell, name, answer in (("ch1-q1", "q1", "placements"), ("ch1-q2", "q2", "predictions"),
                               ("ch1-q3", "q3", "gradients"), ("ch1-q4", "q4", "sharded_sum")):
        source = solution_cells[cell]
        block = source[source.index("# BEGIN SOLUTION"):source.index("# END SOLUTION")]
        import tensorflow as tf

        namespace = {"tf": tf, "cpu_names": cpus8, "example_batch": tf.ones((10, 5)),
                     "example_weights": tf.ones((5, 3))}
        namespace["example_devices"] = namespace["cpu_names"][:3]
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


def test_ch1_q2_a_prediction_read_from_f_is_refused(monkeypatch, solution_cells):
    """The fresh-eyes review of issue 37: calling the exercise's f seven times and reading its tracing count passed
    as a prediction. A check made once f (or a copy of it) has traced scores 0 and says why."""
    import tensorflow as tf

    from course_utils.checkers import reach

    code = solution_cells["ch1-q2"].split("# BEGIN SOLUTION")[0]
    namespace = {"tf": tf}
    exec(code, namespace)
    monkeypatch.setattr(reach, "learner_namespace", lambda: namespace)
    right = list(ch1._reference_traces())
    assert_correct(exercises(1).q2.evaluate(right))  # f defined, never called
    copy = tf.function(namespace["f"].python_function)
    namespace["g"] = copy
    copy(tf.constant([1.0]), training=True)
    assert_hint(exercises(1).q2.evaluate(right), "f has already traced 1 time(s)", "before f is called", points=0)
    del namespace["g"]
    for call in ch1.CALLS:
        eval(call, namespace)
    assert_hint(exercises(1).q2.evaluate(right), "f has already traced 5 time(s)", points=0)


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


# --- q3: gradients with GradientTape, for the checker's functions ------------------------------------

def _gradients(watch=True, inside=True, order="wx", zeros=False):
    """A gradients(f, w, x): ``watch`` x or not, call f ``inside`` the tape or not, return in ``order``, ask for
    ``zeros`` instead of None for what the tape did not record."""
    import tensorflow as tf

    def gradients(f, w, x):
        if not inside:
            y = f(w, x)
        with tf.GradientTape() as tape:
            if watch:
                tape.watch(x)
            if inside:
                y = f(w, x)
        unconnected = tf.UnconnectedGradients.ZERO if zeros else tf.UnconnectedGradients.NONE
        dw, dx = tape.gradient(y, [w, x], unconnected_gradients=unconnected)
        return (dw, dx) if order == "wx" else (dx, dw)
    return gradients


def test_ch1_q3_the_references_are_what_a_tape_gives(cpus8):
    """The checker's derivatives, worked out by calculus, are what tf.GradientTape computes for its functions (the
    vector-valued f's gradient is that of its sum)."""
    import tensorflow as tf

    from course_utils.checkers import ch1_build

    for seed in (0, 7):
        for index, ((w, x), truth) in enumerate(zip(ch1_build._tape_values(seed), ch1_build._reference_tape_gradients(seed))):
            got = _gradients()(ch1_build._tape_function(index), tf.Variable(w), tf.constant(x))
            for g, want in zip(got, truth):
                np.testing.assert_allclose(g.numpy(), want, rtol=1e-5)


def test_ch1_q3_gradient_tape(cpus8):
    import tensorflow as tf

    assert_correct(grade(1, "q3", _gradients()))
    assert_correct(grade(1, "q3", lambda f, w, x: [g.numpy() for g in _gradients()(f, w, x)]))  # NumPy is fine
    assert_hint(grade(1, "q3", _gradients(watch=False)), "a tape only watches trainable variables", "tape.watch(x)",
                points=1)
    assert_hint(grade(1, "q3", _gradients(watch=False, zeros=True)), "zeros: the tape did not record x", points=1)
    assert_hint(grade(1, "q3", _gradients(order="xw")), "swapped", points=0)
    assert_hint(grade(1, "q3", _gradients(inside=False)), "Call f(w, x) INSIDE", points=0)
    assert_hint(grade(1, "q3", lambda f, w, x: (_gradients()(f, w, x)[0], f(w, x))), "f's value itself", points=1)
    assert_hint(grade(1, "q3", lambda f, w, x: (_gradients()(f, w, x)[1],) * 2), "the other input", points=1)

    def difference_quotient(f, w, x, h=1e-3):  # by hand: close, never exact
        dw = (f(tf.Variable(w + h), x) - f(w, x)) / h
        dx = (f(w, x + h) - f(w, x)) / h
        return dw, dx
    assert_hint(grade(1, "q3", difference_quotient), "close, but not exact", points=0)

    def of_the_mean(f, w, x):  # the fresh-eyes review of issue 37: "not the derivative of f" did not say why
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_mean(f(w, x))
        return tape.gradient(y, [w, x])
    result = grade(1, "q3", of_the_mean)
    assert_hint(result, "1/3 of the derivative", "gradient of its MEAN", "Pass f(w, x) itself", points=0)
    assert "Pass f(w, x)" not in exercises(1).q3._evaluate((of_the_mean,), {}, first_try=True).message
    assert_hint(grade(1, "q3", lambda f, w, x: (9.0, 12.0)), "returns 9.0 whatever f, w and x", points=0)  # typed
    assert_hint(grade(1, "q3", lambda f, w, x: (tf.fill([5], tf.reduce_sum(w)), tf.fill([5], tf.reduce_sum(x)))),
                "shape [5]", points=0)
    assert_hint(grade(1, "q3", lambda f, w, x: 1 / 0), "raised ZeroDivisionError", points=0)
    assert_hint(grade(1, "q3", lambda f, w, x: tf.ones(2)), "return two values", points=0)
    assert_hint(grade(1, "q3", 9.0), "should be a function")
    assert grade(1, "q3", None).status == "unanswered"


def test_ch1_q3_a_fixed_answer_does_not_pass(cpus8):
    """The old exercise accepted tf.constant(9.0) and tf.constant(12.0), a value worked out by hand: the checker now
    calls the learner's function on functions and values of its own."""
    import tensorflow as tf

    result = grade(1, "q3", lambda f, w, x: (tf.constant(9.0), tf.constant(12.0)))
    assert_hint(result, "df/dw: your function returns 9.0 whatever", "df/dx: your function returns 12.0", points=0)
    ex = exercises(1).q3
    assert_correct(ex.judge_export(ex.export(_gradients(), seed=31), seed=31))
    assert ex.judge_export(ex.export(_gradients(), seed=0), seed=31).points == 0  # values of another seed


# --- q4: one piece of work on each device, measured ------------------------------------------------

def _sharded(sizes="first_longer", place="devices", total_on="first"):
    """A sharded_sum: shard ``sizes`` "first_longer" (right), "last_longer" or "equal" (tf.split(batch, n)); ``place``
    "devices" (right), "index" (f"/CPU:{i}") or "nowhere"; the total added on the "first" device or on "CPU:0"."""
    import tensorflow as tf

    def sharded_sum(batch, weights, devices):
        n, rows = len(devices), batch.shape[0]
        longer = [1 if i < rows % n else 0 for i in range(n)]
        split = {"first_longer": [rows // n + e for e in longer], "last_longer": [rows // n + e for e in longer[::-1]],
                 "equal": n}[sizes]
        partials = []
        for i, shard in enumerate(tf.split(batch, split)):
            device = {"devices": devices[i], "index": f"/CPU:{i}", "nowhere": "/CPU:0"}[place]
            with tf.device(device):
                partials.append(tf.reduce_sum(tf.matmul(shard, weights), axis=0))
        with tf.device(devices[0] if total_on == "first" else "/CPU:0"):
            total = tf.add_n(partials)
        return total, partials
    return sharded_sum


def test_ch1_q4_the_cases(cpus8):
    from course_utils.checkers import ch1_build

    for seed in range(10):
        cases = ch1_build._shard_cases(seed)
        assert [len(cpus) for cpus, _ in cases] == [3, 2, 4]
        assert [rows % len(cpus) != 0 for cpus, rows in cases] == [True, False, True]
        assert cases[1][0][0] == 0 and cases[0][0][0] != 0 and cases[2][0][0] != 0
        assert all(len(set(cpus)) == len(cpus) and cpus != sorted(cpus) for cpus, _ in (cases[0], cases[2]))


def test_ch1_q4_sharded_sum(cpus8):
    assert_correct(grade(1, "q4", _sharded()))
    assert_hint(grade(1, "q4", _sharded(sizes="last_longer")), "the first shards are the longer ones", points=2)
    assert_hint(grade(1, "q4", _sharded(sizes="equal")), "do not cut into 3 equal shards", "list of sizes", points=0)
    assert_hint(grade(1, "q4", _sharded(place="index")), "the position in the list, not on devices[i]", points=2)
    assert_hint(grade(1, "q4", _sharded(place="nowhere")), "every partial sum was computed on CPU:0", points=2)
    assert_hint(grade(1, "q4", _sharded(total_on="CPU:0")), "the total was added on CPU:0, not on the first device",
                points=2)
    first = exercises(1).q4._evaluate((_sharded(place="index"),), {}, first_try=True).message
    assert "the position in the list" in first and "Open `with tf.device(devices[i])" not in first


def test_ch1_q4_the_matmuls_must_run_on_the_devices_too(cpus8):
    """The fresh-eyes review of issue 37: the matmuls on CPU:0 and only the last reduce_sum under each device passed
    (the checker read only the results' .device). The matmuls' devices are read from the traced graph."""
    import numpy as np
    import tensorflow as tf

    def products_on_cpu0(batch, weights, devices):
        rows, n = batch.shape[0], len(devices)
        sizes = [len(part) for part in np.array_split(np.arange(rows), n)]
        products = [tf.matmul(shard, weights) for shard in tf.split(batch, sizes)]  # all on the default device
        partials = []
        for device, product in zip(devices, products):
            with tf.device(device):
                partials.append(tf.reduce_sum(product, axis=0))
        with tf.device(devices[0]):
            return tf.add_n(partials), partials
    assert_hint(grade(1, "q4", products_on_cpu0), "but the matmuls ran on CPU:0", "its shard @ weights", points=2)

    def sums_first(batch, weights, devices):  # another right form: each device sums its shard, then multiplies
        sizes = [len(part) for part in np.array_split(np.arange(batch.shape[0]), len(devices))]
        partials = []
        for device, shard in zip(devices, tf.split(batch, sizes)):
            with tf.device(device):
                partials.append(tf.linalg.matvec(weights, tf.reduce_sum(shard, axis=0), transpose_a=True))
        with tf.device(devices[0]):
            return tf.add_n(partials), partials
    assert_correct(grade(1, "q4", sums_first))


def test_ch1_q4_what_the_function_returns(cpus8):
    import tensorflow as tf

    def numpy_values(batch, weights, devices):
        total, partials = _sharded()(batch, weights, devices)
        return total.numpy(), [p.numpy() for p in partials]
    assert_hint(grade(1, "q4", numpy_values), "not tensors (NumPy values have no .device)", points=1)

    def whole_batch(batch, weights, devices):
        partials = []
        for device in devices:
            with tf.device(device):
                partials.append(tf.reduce_sum(tf.matmul(batch, weights), axis=0))
        with tf.device(devices[0]):
            return tf.add_n(partials), partials
    assert_hint(grade(1, "q4", whole_batch), "the sum of the whole batch", "the total is not", points=1)
    assert_hint(grade(1, "q4", lambda b, w, d: _sharded()(b, w, d)[1]), "return (total, partials)", points=0)
    assert_hint(grade(1, "q4", lambda b, w, d: (None, _sharded()(b, w, d)[1][:1])), "give one per device", points=0)
    assert_hint(grade(1, "q4", "sharded_sum"), "should be a function")
    ex = exercises(1).q4
    assert_correct(ex.judge_export(ex.export(_sharded(), seed=8), seed=8))
    assert ex.judge_export(ex.export(_sharded(), seed=0), seed=8).points < 3


# --- graded hand-outs: feedback never states the answer --------------------------------------------

def test_ch1_graded_feedback_never_gives_the_answer(cpus8):
    graded = exercises(1, mode="graded")
    wrong_placements = {"b": 3, "c": 2, "d": 1, "e": 1, "f": "error"}
    cases = [
        (graded.q1, (wrong_placements,),
         list(ch1._reference_placement_reasons().values()) + ["It runs on"]),
        (graded.q2, ([not t for t in ch1._reference_traces()],), ch1._reference_why_traces() + ["call 1"]),
        (graded.q3, (_gradients(watch=False),), ["tape.watch(x) inside"]),
        (graded.q3, (_gradients(order="xw"),), ["df/dw first"]),
        (graded.q4, (_sharded(place="index"),), ["Open `with tf.device(devices[i])"]),
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
    for cls in module.CHAPTER.exercises:  # GradientTape and ShardedSum come from the real ch1_build here
        assert cls.hints and (cls.__module__ != module.__name__ or "grade" not in vars(cls)), cls.__name__


def test_ch1_the_sandbox_copy_of_the_code_exercises_states_no_answer(cpus8):
    from helpers import stripped_exercise

    module, undefined = sandbox_copy("ch1_build")
    assert not undefined
    for gone in ("_reference_tape_gradients", "_reference_tape_values", "_reference_shard_sums"):
        assert not hasattr(module, gone), gone
    for cls in (module.GradientTape, module.ShardedSum):
        assert cls.hints and not {"judge", "grade"} & set(vars(cls)) and hasattr(cls, "collect")
    for name, cls, answer in (("q3", "GradientTape", _gradients()), ("q4", "ShardedSum", _sharded())):
        text = stripped_exercise("ch1_build", cls, 1, name).export(answer, seed=5)
        assert_correct(getattr(exercises(1), name).judge_export(text, seed=5))
