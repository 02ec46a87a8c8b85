"""Answers as plain data: what crosses from a kernel to the grader, and what cannot pretend to."""
import fractions
import json
import math
import signal

import numpy as np
import pytest

from course_utils.checkers.plain import Opaque, PlainDataError, dumps, from_plain, loads, to_plain


def round_trip(value):
    return loads(dumps(value))


@pytest.mark.parametrize("value", [
    None, True, 3, -2.5, "text", b"bytes", ..., [1, [2, "x"]], (1, (None,)), {"a": 1, 2: (3,)}, {1, 2},
    fractions.Fraction(1, 5)])
def test_plain_values_cross_unchanged(value):
    back = round_trip(value)
    assert back == value and type(back) is type(value)


def test_special_numbers_and_numpy():
    assert math.isnan(round_trip(float("nan"))) and round_trip(float("-inf")) == float("-inf")
    assert round_trip(10 ** 400) == float("inf")
    scalar = round_trip(np.int64(7))
    assert scalar == 7 and type(scalar) is np.int64
    array = np.arange(6, dtype="float32").reshape(2, 3)
    back = round_trip(array)
    assert back.dtype == np.float32 and np.array_equal(back, array)
    assert isinstance(round_trip(np.array([object()], dtype=object)), Opaque)


def test_objects_that_lie_about_their_type_arrive_as_what_they_are():
    class Liar(list):
        __class__ = property(lambda self: list)

        def __eq__(self, other):
            return True

    back = round_trip(Liar([1, 2]))
    assert isinstance(back, Opaque) and type(back).__name__ == "Liar"
    assert back != [1, 2]  # its __eq__ stayed behind
    function = round_trip(lambda x: x)
    assert type(function).__name__ == "function" and function.is_callable and not callable(function)


def test_classes_exceptions_and_enums_of_the_libraries():
    assert round_trip(ValueError) is ValueError and round_trip([RuntimeError])[0] is RuntimeError
    error = round_trip(RuntimeError("boom"))
    assert type(error) is RuntimeError and error.args == ("boom",)
    assert round_trip(signal.SIGTERM) is signal.SIGTERM

    class Mine:
        pass

    mine = round_trip(Mine)
    assert isinstance(mine, Opaque) and mine.is_class


def test_tensorflow_values(cpus8):
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    from course_utils.profiling import CollectiveRun

    mesh = dtensor.create_mesh([("x", 4), ("y", 2)], devices=cpus8)
    layout = dtensor.Layout(["x", dtensor.UNSHARDED], mesh)
    assert round_trip(mesh) == mesh and round_trip(layout) == layout
    tensor = round_trip(tf.constant([[1.0, 2.0]]))
    assert isinstance(tensor, tf.Tensor) and tensor.numpy().tolist() == [[1.0, 2.0]]
    packed = dtensor.pack([tf.fill([2, 3], float(i // 2)) for i in range(8)], layout)
    back = round_trip(packed)
    assert dtensor.fetch_layout(back) == layout
    assert np.array_equal(dtensor.unpack(back)[5].numpy(), np.full([2, 3], 2.0))
    variable = round_trip(tf.Variable([1, 2], name="w"))
    assert isinstance(variable, tf.Variable) and variable.numpy().tolist() == [1, 2]
    assert round_trip(tf.TensorShape([None, 3])).as_list() == [None, 3] and round_trip(tf.float16) == tf.float16
    run = CollectiveRun("all-reduce", ("x",), 4, 64, 48.0, "CollectiveReduceV2", "all-reduce", (4,), "float32", "op", 8)
    assert round_trip(run) == run


@pytest.mark.parametrize("text, why", [
    ("{not json", "not JSON"), ('{"__plain__": "pickle"}', "unknown kind"), ("[1, {}]", "unexpected dict"),
    ('{"__plain__": "ndarray", "dtype": "|O", "shape": [1], "data": ""}', "dtype object"),
    ('{"__plain__": "class", "module": "os", "name": "system"}', None),
    ('{"__plain__": "exception", "name": "system", "args": []}', "not a built-in exception"),
    ('{"__plain__": "enum", "module": "subprocess", "name": "Popen", "member": "x"}', "not an enumeration")])
def test_data_that_is_not_plain_is_refused(text, why):
    if why is None:  # a class outside the course's libraries is only a name
        assert isinstance(loads(text), Opaque)
        return
    with pytest.raises(PlainDataError, match=why):
        loads(text)


def test_to_plain_is_json_and_never_runs_the_values_code():
    class Loud:
        def __repr__(self):
            raise AssertionError("repr was called")

        def __iter__(self):
            raise AssertionError("iter was called")

    data = to_plain({"a": Loud()})
    json.dumps(data)
    assert type(from_plain(data)["a"]).__name__ == "Loud"


@pytest.mark.parametrize("text", [
    '{"__plain__": "enum", "module": "venv.__main__", "name": "X", "member": "y"}',
    '{"__plain__": "class", "module": "antigravity", "name": "X"}',
    '{"__plain__": "class", "module": "numpy.distutils.something", "name": "X"}',
    '{"__plain__": "course", "module": "course_utils.grading.cli", "name": "X", "fields": {}}'])
def test_the_data_never_chooses_a_module_to_import(text):
    import sys

    before = set(sys.modules)
    try:
        value = loads(text)
        assert isinstance(value, Opaque)
    except PlainDataError:
        pass
    assert set(sys.modules) == before
