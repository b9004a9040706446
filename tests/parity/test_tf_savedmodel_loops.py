"""SavedModels written by TensorFlow whose functions loop: tf_keras' recurrent layers and
``tf.while_loop``s, loaded by ``tf.saved_model.load`` in TF and in tapejax.

tf_keras' ``LSTM`` / ``GRU`` run a ``While`` over TensorLists; tapejax's conversion
(``tapejax/train/saved_model/tf2jax_ops.py``) makes such a loop a ``lax.scan`` when its trip
count does not depend on data (a Keras RNN's time steps, a ``for i in tf.range(4)``) or a masked
scan of ``maximum_iterations`` steps, so that the loaded models run and fine-tune: values,
gradients with respect to the loaded Variables and the inputs, a few optimizer steps, eagerly
and under ``tf.function``.  A data-dependent loop with no bound runs, but its gradient is a
documented limit (``tests/test_saved_model_tf_load.py``).
"""
import os
import tempfile

import numpy as np
import pytest

from .harness import parity

realtf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
pytest.importorskip("tf2jax", reason="tf2jax is not installed")

_DIRS: dict = {}
SEQ = np.random.RandomState(0).randn(2, 5, 3).astype(np.float32)
TARGET = np.random.RandomState(1).randn(2, 1).astype(np.float32)
LONG = np.random.RandomState(2).randn(3, 7, 3).astype(np.float32)


def _saved(key: str, build) -> str:
    if key not in _DIRS:
        path = os.path.join(tempfile.mkdtemp(prefix="tj_tfsm_loop_"), key)
        build(path)
        _DIRS[key] = path
    return _DIRS[key]


def _lstm_dir() -> str:
    """A tf_keras ``Sequential``: ``LSTM(4)`` over 5 steps of 3 features, then ``Dense(1)``."""
    def build(path):
        import tf_keras
        tf_keras.utils.set_random_seed(11)
        model = tf_keras.Sequential([tf_keras.layers.Input((5, 3)), tf_keras.layers.LSTM(4),
                                     tf_keras.layers.Dense(1)])
        model.save(path, save_format="tf")
    return _saved("lstm", build)


def _gru_dir() -> str:
    """A tf_keras functional model over sequences of any length: ``GRU(4,
    return_sequences=True)`` then a ``Dense(2)`` on every step."""
    def build(path):
        import tf_keras
        tf_keras.utils.set_random_seed(12)
        inp = tf_keras.Input((None, 3))
        h = tf_keras.layers.GRU(4, return_sequences=True)(inp)
        tf_keras.Model(inp, tf_keras.layers.Dense(2)(h)).save(path, save_format="tf")
    return _saved("gru", build)


def _loops_dir() -> str:
    """A ``tf.Module`` with a bounded data-dependent ``tf.while_loop`` and an AutoGraph loop
    over ``tf.range(4)``."""
    def build(path):
        tf = realtf
        r = np.random.RandomState(13)

        class Loops(tf.Module):
            def __init__(self):
                super().__init__()
                self.w = tf.Variable(r.randn(3, 3).astype("float32") * 0.5, name="w")
                self.b = tf.Variable(np.full(3, 0.25, np.float32), name="b")

            @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
            def bounded(self, x):
                _, y = tf.while_loop(lambda i, y: tf.reduce_sum(tf.abs(y)) < 8.0,
                                     lambda i, y: (i + 1, y * 1.5 + self.b),
                                     [tf.constant(0), x], maximum_iterations=6)
                return y

            @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
            def ranged(self, x):
                y = x
                for _ in tf.range(4):
                    y = tf.tanh(tf.matmul(y, self.w) + self.b)
                return y

        tf.saved_model.save(Loops(), path)
    return _saved("loops", build)


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_tf_keras_lstm_call_and_gradients(tf):
    """A loaded tf_keras LSTM: its output, and the gradients of a loss with respect to every
    loaded Variable (kernel, recurrent kernel, bias, the head) and the input sequence."""
    m = tf.saved_model.load(_lstm_dir())
    x = tf.constant(SEQ)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = m(x)
        loss = tf.reduce_sum(out * out)
    grads = tape.gradient(loss, list(m.trainable_variables) + [x])
    return out, [v.name for v in m.trainable_variables], grads


def _fine_tune_lstm(tf, compiled):
    m = tf.saved_model.load(_lstm_dir())
    ws = list(m.trainable_variables)
    opt = tf.keras.optimizers.SGD(0.1)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((m(x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, ws), ws))
        return loss

    if compiled:
        step = tf.function(step)
    losses = [step(tf.constant(SEQ), tf.constant(TARGET)) for _ in range(3)]
    return losses, [v.numpy() for v in ws], m(SEQ)


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_tf_keras_lstm_fine_tuned(tf):
    """Three SGD steps on a loaded LSTM regressor: losses, the Variables, the new output."""
    return _fine_tune_lstm(tf, compiled=False)


@parity(rtol=1e-4, atol=1e-5)
def test_tf_keras_lstm_fine_tuned_under_function(tf):
    """The same steps under ``tf.function``."""
    return _fine_tune_lstm(tf, compiled=True)


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_tf_keras_gru_over_sequences_of_two_lengths(tf):
    """A loaded GRU over sequences of any length (one saved function, ``None`` time steps): 5
    and 7 steps, and the gradients of both calls' loss."""
    m = tf.saved_model.load(_gru_dir())
    with tf.GradientTape() as tape:
        a = m(tf.constant(SEQ))
        b = m(tf.constant(LONG))
        loss = tf.reduce_sum(a ** 2) + tf.reduce_mean(b)
    return a, b, tape.gradient(loss, list(m.trainable_variables))


@parity(modes=True, rtol=1e-5, atol=1e-6)
def test_while_loop_with_maximum_iterations(tf):
    """A loaded ``tf.while_loop`` whose condition reads the data, bounded by
    ``maximum_iterations=6``: inputs that stop it after 1, 3 and 6 steps; the gradients with
    respect to the Variable it adds and the input."""
    m = tf.saved_model.load(_loops_dir())
    outs, grads = [], []
    for scale in (4.0, 1.0, 0.01):
        x = tf.constant(np.array([[0.5, -0.2, 0.3]], np.float32) * scale)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = m.bounded(x)
            loss = tf.reduce_sum(y * y)
        outs.append(y)
        grads.append(tape.gradient(loss, [m.b, m.w, x]))
    return outs, grads


@parity(modes=True, rtol=1e-5, atol=1e-6)
def test_range_loop_trained(tf):
    """A loaded AutoGraph loop ``for _ in tf.range(4)`` over a tanh layer: its output, and two
    SGD steps on its Variables."""
    m = tf.saved_model.load(_loops_dir())
    x = tf.constant(SEQ[0])
    opt = tf.keras.optimizers.SGD(0.5)
    losses = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((m.ranged(x) - 0.3) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, [m.w, m.b]), [m.w, m.b]))
        losses.append(loss)
    return m.ranged(x), losses, m.w.numpy(), m.b.numpy()
