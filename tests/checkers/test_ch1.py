"""Chapter 1's checkers: the right answer, typical wrong answers and the hints they get."""
import json
import math

import numpy as np
import pytest

from course_utils.checkers import ch1
from helpers import assert_correct, assert_hint, grade


def test_ch1_q1_device_placement(cpus8):
    import tensorflow as tf

    a, b = tf.constant(ch1.A), tf.constant(ch1.B)
    with tf.device(cpus8[5]):
        product = tf.matmul(a, b)
    assert_correct(grade(1, "q1", cpus8, product))
    assert_hint(grade(1, "q1", cpus8, tf.matmul(a, b)), "TensorFlow's default", "with tf.device(cpus[5])", points=1)
    with tf.device(cpus8[4]):
        off_by_one = tf.matmul(a, b)
    assert_hint(grade(1, "q1", cpus8, off_by_one), "count from 0", points=1)
    with tf.device(cpus8[5]):
        elementwise = a * b
    assert_hint(grade(1, "q1", cpus8, elementwise), "elementwise", points=1)
    assert_hint(grade(1, "q1", cpus8, product.numpy()), "NumPy array", points=1)
    assert_hint(grade(1, "q1", cpus8[:4], product), "4 CPU device(s)", points=1)


def test_ch1_q2_tracing_claim_is_what_tensorflow_does(cpus8):
    import tensorflow as tf

    traces = []

    @tf.function
    def f(x):
        traces.append(1)
        return x + 1

    args = [tf.constant(1), tf.constant(2), tf.constant([1, 2]), tf.constant([3, 4]), 3, 3, 4]
    observed = []
    for arg in args:
        before = len(traces)
        f(arg)
        observed.append(len(traces) > before)
    assert observed == ch1.TRACES


def test_ch1_q2_tracing_hints():
    right = list(ch1.TRACES)
    assert_correct(grade(1, "q2", right))
    assert_correct(grade(1, "q2", np.array(right)))
    assert_hint(grade(1, "q2", [True] * 7), "Not every call traces", "not on their values")
    assert_hint(grade(1, "q2", [True] + [False] * 6), "not only once")
    one_wrong = right[:4] + [False] + right[5:]
    assert_hint(grade(1, "q2", one_wrong), "call 5, f(3)", "by its *value*", points=1)
    assert_hint(grade(1, "q2", right[:6]), "7 values, not 6")
    assert_hint(grade(1, "q2", right[:6] + [None]), "True or False for every call")


def test_ch1_q3_gradient_tape(cpus8):
    import tensorflow as tf

    w, x = tf.Variable(ch1.W), tf.constant(ch1.X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = w * x ** 2
    grad_w, grad_x = tape.gradient(y, [w, x])
    assert_correct(grade(1, "q3", grad_w, grad_x))
    with tf.GradientTape() as tape:
        y = w * x ** 2
    unwatched = tape.gradient(y, [w, x])
    assert unwatched[1] is None
    assert_hint(grade(1, "q3", *unwatched), "tape.watch(x)", points=1)
    assert_hint(grade(1, "q3", grad_x, grad_w), "swapped")
    assert_hint(grade(1, "q3", None, None), "inside* the")
    assert_hint(grade(1, "q3", grad_w, y), "is y itself", points=1)
    assert_hint(grade(1, "q3", grad_w, ...), "grad_x: not answered yet", points=1)
    assert_hint(grade(1, "q3", grad_w, tf.ones(3)), "expected one number", points=1)
