"""tf.print (tapejax/ops/printing.py): TF's text, the streams it writes to, when it prints.

Oracles: the strings TF 2.21 prints for the same tensors (quoted; tests/parity/test_tracing.py
compares whole programs with TF).
"""
import io
import logging

import numpy as np
import pytest

import tapejax as tf
from tapejax.ops.printing import format_tensor


@pytest.mark.parametrize("value, summarize, text", [
    (np.float32(1 / 3), 3, "0.333333343"),          # 6 digits do not give the float back: 9
    (np.float32(0.1), 3, "0.1"),
    (np.float64(1 / 3), 3, "0.33333333333333331"),
    (np.array([True, False]), 3, "[1 0]"),
    (np.array([1e10, 1e-5, 123456789.0, -0.0], np.float32), 3, "[1e+10 1e-05 123456792 -0]"),
    (np.array([np.nan, np.inf], np.float32), 3, "[nan inf]"),
    (np.arange(10), 3, "[0 1 2 ... 7 8 9]"),
    (np.arange(10), -1, "[0 1 2 3 4 5 6 7 8 9]"),
    (np.arange(10), None, "[0 1 2 ... 7 8 9]"),
    (np.arange(8).reshape(2, 2, 2), 3, "[[[0 1]\n  [2 3]]\n\n [[4 5]\n  [6 7]]]"),
    (np.arange(100).reshape(10, 10), 3,
     "[[0 1 2 ... 7 8 9]\n [10 11 12 ... 17 18 19]\n [20 21 22 ... 27 28 29]\n ...\n"
     " [70 71 72 ... 77 78 79]\n [80 81 82 ... 87 88 89]\n [90 91 92 ... 97 98 99]]"),
    (np.zeros([0], np.float32), 3, "[]"),
    (np.float16(1 / 3), 3, "0.333251953"),
])
def test_tensorflow_text(value, summarize, text):
    assert format_tensor(value, summarize) == text


def test_structures_streams_and_bad_arguments(caplog):
    buf = io.StringIO()
    tf.print("a", tf.constant(1), [tf.constant(2.5), "s"], {"b": 1, "a": tf.constant([1, 2])}, None, (3,),
             output_stream=buf, sep="|", end="!\n")
    assert buf.getvalue() == "a|1|[2.5, 's']|{'a': [1 2], 'b': 1}|None|(3,)!\n"
    caplog.set_level(logging.INFO)
    tf.print("logged", tf.constant(7), output_stream=logging.info)
    assert "logged 7" in caplog.text
    with pytest.raises(ValueError, match="output_stream"):
        tf.print(tf.constant(1.0), output_stream="stdout")
    with pytest.raises(TypeError, match="summarize"):
        tf.print(tf.constant(1.0), summarize="a")
    with pytest.raises(TypeError, match="`sep`"):
        tf.print(tf.constant(1.0), sep=1)


def test_prints_every_call_in_order_and_before_the_call_returns():
    buf = io.StringIO()
    v = tf.Variable(0.0)

    @tf.function
    def step(x):
        tf.print("before", v, output_stream=buf)
        v.assign_add(x)
        for i in tf.range(2):
            tf.print("  i", i, output_stream=buf)
        tf.print("after", v, output_stream=buf)
        return v * 1.0

    for k in (1.0, 2.0):
        step(tf.constant(k))
        buf.write(f"returned {k:g}\n")
    assert buf.getvalue() == ("before 0\n  i 0\n  i 1\nafter 1\nreturned 1\n"
                              "before 1\n  i 0\n  i 1\nafter 3\nreturned 2\n")


def test_a_variable_and_a_pending_value_print_their_values():
    buf = io.StringIO()
    w = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as t:
        y = tf.reduce_sum(w * w)
    g = t.gradient(y, w)
    tf.print(w, g * 1.0, output_stream=buf)
    assert buf.getvalue() == "[1 2] [2 4]\n"


def test_python_values_only_print_when_the_program_runs_not_while_tracing():
    """A tf.print of Python values alone inside a trace (a branch's string, a Python argument) is an
    op of the program: it prints at each run in program order, never at trace time (TF's graph op)."""
    buf = io.StringIO()

    @tf.function
    def fizz(n):
        for i in tf.range(1, n + 1):
            if i % 3 == 0:
                tf.print("fizz", output_stream=buf)
            else:
                tf.print(i, output_stream=buf)

    @tf.function
    def f(x):
        tf.print("Executed with", x, output_stream=buf)

    fizz(tf.constant(4))
    f(1)
    f(1)
    f(2)
    assert buf.getvalue() == "1\n2\nfizz\n4\nExecuted with 1\nExecuted with 1\nExecuted with 2\n"
