"""tapejax.summary: run-time values in compiled steps, conditions, writers (read back with TensorBoard).

Oracles: the values each step computed (returned by the step itself), TF's file layout
(checked against TF in tests/parity/test_summary.py).
"""
import logging
import os
import sys

import numpy as np
import pytest

import tapejax as tf

pytest.importorskip("tensorboard", reason="tensorboard (the event reader) is not installed")
pytest.importorskip("tensorboardX", reason="tensorboardX is not installed")

from tests.parity.test_summary import read_events  # noqa: E402


def _scalars(logdir):
    return [(step, tag, float(v)) for step, tag, plugin, _, v in read_events(logdir) if plugin == "scalars"]


def test_compiled_step_writes_every_call_in_order(tmp_path):
    w = tf.summary.create_file_writer(str(tmp_path))
    x = tf.Variable(1.)

    @tf.function
    def step(i):
        x.assign(x * 2.)
        tf.summary.scalar("x", x, step=i)          # a Tensor step: read when the step runs
        tf.summary.scalar("const", 7., step=3)     # Python values: written when the step runs too
        return x

    with w.as_default():
        got = [float(step(tf.constant(i))) for i in range(4)]
    w.flush()
    assert step.experimental_get_tracing_count() == 1
    assert _scalars(str(tmp_path)) == [e for i, v in enumerate(got) for e in ((i, "x", v), (3, "const", 7.))]


def test_default_step_variable_is_read_at_each_summary(tmp_path):
    w = tf.summary.create_file_writer(str(tmp_path))
    step = tf.Variable(0)
    tf.summary.experimental.set_step(step)
    try:
        @tf.function
        def train():
            tf.summary.scalar("s", tf.cast(step, tf.float32) * 10.)
            step.assign_add(1)

        with w.as_default():
            for _ in range(3):
                train()
            tf.summary.scalar("eager", 1.)
    finally:
        tf.summary.experimental.set_step(None)
    w.flush()
    assert _scalars(str(tmp_path)) == [(0, "s", 0.), (1, "s", 10.), (2, "s", 20.), (3, "eager", 1.)]


def test_record_if_a_tensor_condition_in_a_compiled_step(tmp_path):
    w = tf.summary.create_file_writer(str(tmp_path))

    @tf.function
    def step(i):
        with tf.summary.record_if(tf.equal(i % 2, 0)):
            return tf.summary.scalar("even", tf.cast(i, tf.float32), step=i)

    with w.as_default():
        written = [bool(step(tf.constant(i))) for i in range(4)]
    w.flush()
    assert written == [True, False, True, False]
    assert _scalars(str(tmp_path)) == [(0, "even", 0.), (2, "even", 2.)]


def test_summary_in_a_function_called_under_a_tape(tmp_path):
    w = tf.summary.create_file_writer(str(tmp_path))
    v = tf.Variable(3.)

    @tf.function
    def f():
        y = v * v
        tf.summary.scalar("y", y, step=0)
        return y

    with w.as_default():
        with tf.GradientTape() as t:
            y = f()
        assert t.gradient(y, v).numpy() == 6.
    w.flush()
    assert _scalars(str(tmp_path)) == [(0, "y", 9.)]


def test_writers_noop_closed_and_auto_flush(tmp_path):
    noop = tf.summary.create_noop_writer()
    with noop.as_default():
        assert bool(tf.summary.scalar("a", 1., step=0))
    w = tf.summary.create_file_writer(str(tmp_path), max_queue=2)
    with w.as_default():
        tf.summary.scalar("a", 1., step=0)
        tf.summary.scalar("a", 2., step=1)       # the second event flushes the file
        assert [v for _, _, v in _scalars(str(tmp_path))] == [1., 2.]
    w.close()
    with w.as_default():
        tf.summary.scalar("a", 3., step=2)       # a closed writer writes nothing, as TF
    assert len(_scalars(str(tmp_path))) == 2
    (name,) = os.listdir(tmp_path)
    assert name.startswith("events.out.tfevents.") and name.endswith(f".{os.getpid()}.{name.split('.')[-2]}.v2")


def test_two_writers_in_one_directory_write_two_files(tmp_path):
    a = tf.summary.create_file_writer(str(tmp_path))
    b = tf.summary.create_file_writer(str(tmp_path))
    with a.as_default():
        tf.summary.scalar("a", 1., step=0)
    with b.as_default():
        tf.summary.scalar("b", 2., step=0)
    a.flush()
    b.flush()
    assert len(os.listdir(tmp_path)) == 2
    assert sorted(_scalars(str(tmp_path))) == [(0, "a", 1.), (0, "b", 2.)]


def test_trace_functions_are_documented_no_ops(caplog):
    caplog.set_level(logging.WARNING, logger="tapejax")
    tf.summary.trace_on(graph=True)
    tf.summary.trace_off()
    tf.summary.trace_export("graph", step=0)
    assert "records no op graph" in caplog.text


def test_missing_tensorboardx_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorboardX.event_file_writer", None)
    with pytest.raises(ImportError, match=r"tapejax\[summary\]"):
        tf.summary.create_file_writer(str(tmp_path))


def test_bad_inputs():
    with pytest.raises(TypeError, match="string or strings"):
        with tf.summary.create_noop_writer().as_default():
            tf.summary.text("t", [1, 2], step=0)
    assert not bool(tf.summary.scalar("no writer", 1.))   # no writer: no step needed, nothing written
    np.testing.assert_equal(tf.summary.should_record_summaries().numpy(), False)


def test_write_and_audio_in_a_compiled_step_record_each_call(tmp_path):
    """Oracle: the eager summaries of the same values (the same file contents per call)."""
    w = tf.summary.create_file_writer(str(tmp_path / "fn"))
    e = tf.summary.create_file_writer(str(tmp_path / "eager"))
    clips = [np.full((1, 4, 1), v, np.float32) for v in (0.25, -0.5)]

    @tf.function
    def step(x, i):
        tf.summary.write("raw", x * 2.0, step=i)
        tf.summary.audio("snd", x, 8000, step=i)
        return x
    with w.as_default():
        for i, c in enumerate(clips):
            step(tf.constant(c), tf.constant(i))
    with e.as_default():
        for i, c in enumerate(clips):
            tf.summary.write("raw", tf.constant(c) * 2.0, step=i)
            tf.summary.audio("snd", tf.constant(c), 8000, step=i)
    w.flush()
    e.flush()

    def plain(logdir):
        return [(s, t, p, repr(v)) for s, t, p, _, v in read_events(logdir)]
    assert plain(str(tmp_path / "fn")) == plain(str(tmp_path / "eager"))
    assert len(plain(str(tmp_path / "fn"))) == 4


def test_graph_inside_a_compiled_step_is_tfs_error(tmp_path):
    w = tf.summary.create_file_writer(str(tmp_path))
    with w.as_default(step=0):
        with pytest.raises(ValueError, match="graph\\(\\) cannot be invoked inside a graph context"):
            tf.function(lambda: tf.summary.graph(b"x"))()
