"""SavedModels written by TensorFlow, loaded by ``tf.saved_model.load`` in TF and in tapejax.

Real TF writes each SavedModel once (a ``tf.Module`` with nested objects, lists, dicts, a
polymorphic method, a stateful method and two Variables of one name; a tf_keras model with
``BatchNormalization``; a Keras 3 ``model.export``).  Both sides then load the same directory
and run the same program on it: calls and TF's matching of concrete functions (its ValueError
when none matches), the Variables at their attribute paths (values, names, ``trainable``, one
object per TF Variable), gradients with respect to the loaded Variables and the inputs (``None``
for a non-trainable one), methods that assign Variables, serving signatures (by keyword and by
position, their TypeErrors), and fine-tuning a loaded Keras model with ``training=True``
(moving statistics included), eagerly and under ``tf.function``.  tapejax converts the graphs
with tf2jax (``tapejax/train/saved_model/tf_load.py``).
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from .harness import parity, raises

realtf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
pytest.importorskip("tf2jax", reason="tf2jax is not installed")

_DIRS: dict = {}
X = np.random.RandomState(0).rand(5, 3).astype(np.float32)
Y = np.random.RandomState(1).rand(5, 2).astype(np.float32)


def _module_dir() -> str:
    """A ``tf.Module`` saved by TF: ``__call__`` with an input signature, ``poly`` traced for two
    shapes and a Python argument, ``bump`` assigning a non-trainable Variable, ``twins`` reading
    two Variables named alike, and one Variable reached by two paths."""
    if "module" not in _DIRS:
        tf = realtf
        r = np.random.RandomState(3)

        class Net(tf.Module):
            def __init__(self):
                super().__init__()
                self.encoder = tf.Module()
                self.encoder.w = tf.Variable(r.randn(3, 4).astype("float32"), name="w")
                self.heads = [tf.Variable(r.randn(4, 2).astype("float32"), name="h0"),
                              tf.Variable(r.randn(4, 1).astype("float32"), name="h1")]
                self.t = tf.Variable(2.0, trainable=False, name="t")
                self.cfg = {"a": tf.Variable(1.5, name="a")}
                self.shared = self.encoder.w
                self.v1 = tf.Variable(r.randn(2).astype("float32"), name="v")
                self.v2 = tf.Variable(r.randn(2).astype("float32"), name="v")

            @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
            def __call__(self, x):
                h = tf.nn.relu(tf.matmul(x, self.encoder.w))
                return tf.matmul(h, self.heads[0]) / self.t + tf.reduce_sum(tf.matmul(h, self.heads[1]))

            @tf.function
            def poly(self, x, training=False):
                return x * self.cfg["a"] + (1.0 if training else 0.0)

            @tf.function
            def bump(self):
                self.t.assign_add(1.0)
                return self.t * 2.0

            @tf.function(input_signature=[tf.TensorSpec([2], tf.float32)])
            def twins(self, x):
                return {"sum": x * self.v1 + self.v2, "first": self.v1}

        net = Net()
        net.poly(tf.ones([2]))
        net.poly(tf.ones([2, 2]), training=True)
        path = os.path.join(tempfile.mkdtemp(prefix="tj_tfsm_"), "module")
        tf.saved_model.save(net, path)
        _DIRS["module"] = path
    return _DIRS["module"]


def _keras_dir() -> str:
    """A tf_keras model (Dense, BatchNormalization, Dense) saved as a TF SavedModel."""
    if "keras" not in _DIRS:
        import tf_keras
        tf_keras.utils.set_random_seed(5)
        model = tf_keras.Sequential([tf_keras.layers.Dense(4, activation="relu", input_shape=(3,), name="dense"),
                                     tf_keras.layers.BatchNormalization(momentum=0.5, name="batch_normalization"),
                                     tf_keras.layers.Dense(2, name="dense_1")])
        model(X)
        path = os.path.join(tempfile.mkdtemp(prefix="tj_tfsm_"), "keras")
        model.save(path, save_format="tf")
        _DIRS["keras"] = path
    return _DIRS["keras"]


def _cnn_dir() -> str:
    """A tf_keras functional CNN backbone (Conv2D, BatchNormalization, MaxPool, global average
    pooling), as a TF Hub feature extractor is saved."""
    if "cnn" not in _DIRS:
        import tf_keras
        tf_keras.utils.set_random_seed(7)
        inp = tf_keras.Input((8, 8, 3), name="image")
        h = tf_keras.layers.Conv2D(4, 3, padding="same", activation="relu")(inp)
        h = tf_keras.layers.BatchNormalization()(h)
        h = tf_keras.layers.MaxPool2D()(h)
        out = tf_keras.layers.GlobalAveragePooling2D()(h)
        path = os.path.join(tempfile.mkdtemp(prefix="tj_tfsm_"), "cnn")
        tf_keras.Model(inp, out).save(path, save_format="tf")
        _DIRS["cnn"] = path
    return _DIRS["cnn"]


_KERAS3_EXPORT = """
import sys, keras
keras.utils.set_random_seed(6)
inputs = keras.Input((3,), name="features")
outputs = keras.layers.Dense(2, name="out")(keras.layers.Dense(5, activation="tanh")(inputs))
keras.Model(inputs, outputs).export(sys.argv[1], verbose=False)
"""


def _keras3_dir() -> str:
    """A Keras 3 model on the TensorFlow backend exported by ``model.export`` (its ``serve``
    endpoint), written in a process of its own (this one's Keras runs on JAX)."""
    if "keras3" not in _DIRS:
        pytest.importorskip("keras")
        path = os.path.join(tempfile.mkdtemp(prefix="tj_tfsm_"), "keras3")
        env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
        subprocess.run([sys.executable, "-c", _KERAS3_EXPORT, path], env=env, check=True, timeout=300,
                       capture_output=True)
        _DIRS["keras3"] = path
    return _DIRS["keras3"]


@parity(modes=True)
def test_module_calls_variables_and_paths(tf):
    """Calls of a loaded ``tf.Module``; its Variables at their attribute paths, in lists and
    dicts, with the saved values, names and ``trainable``; one object per TF Variable."""
    m = tf.saved_model.load(_module_dir())
    out = m(X)
    p1 = m.poly(tf.ones([2]))
    p2 = m.poly(tf.ones([2, 2]), training=True)
    tw = m.twins(tf.constant([1.0, -2.0]))
    vs = [m.encoder.w, m.heads[0], m.heads[1], m.t, m.cfg["a"], m.v1, m.v2]
    return (out, p1, p2, tw, [v.numpy() for v in vs], [v.name for v in vs], [v.trainable for v in vs],
            m.shared is m.encoder.w, len(m.heads))


@parity
def test_module_call_with_no_matching_concrete_function(tf):
    """A call no saved concrete function matches: TF's ValueError, for a shape and for a Python
    argument's value."""
    m = tf.saved_model.load(_module_dir())
    return (raises(lambda: m.poly(tf.ones([3]))), raises(lambda: m.poly(tf.ones([2]), training=True)),
            raises(lambda: m(tf.ones([2, 4]))))


@parity(modes=True, rtol=1e-5, atol=1e-5)
def test_module_gradients_to_variables_and_inputs(tf):
    """``GradientTape`` through a loaded function: gradients with respect to the loaded Variables
    (``None`` for the non-trainable one, not watched) and a watched input; a second-order
    program through the loaded call."""
    m = tf.saved_model.load(_module_dir())
    x = tf.constant(X)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.reduce_sum(m(x) ** 2)
        z = tf.reduce_sum(m.twins(tf.constant([0.5, 1.0]))["sum"])
    grads = tape.gradient(y, [m.encoder.w, m.heads[0], m.heads[1], m.t, x])
    twin_grads = tape.gradient(z, [m.v1, m.v2, m.cfg["a"]])
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y2 = tf.reduce_sum(m.poly(tf.ones([2])) ** 3)
        g = inner.gradient(y2, m.cfg["a"])
    gg = outer.gradient(g, m.cfg["a"])
    return y, grads, twin_grads, g, gg


@parity(modes=True)
def test_module_method_assigning_a_variable(tf):
    """A loaded method that assigns a Variable assigns the loaded Variable, call after call; the
    later calls read the new value."""
    m = tf.saved_model.load(_module_dir())
    a = m.bump()
    b = m.bump()
    m.t.assign(10.0)
    c = m.bump()
    return a, b, c, m.t.numpy(), m(X)


@parity(modes=True)
def test_tf_keras_model_inference_signature_and_variables(tf):
    """A tf_keras model's SavedModel: ``loaded(x, training=False)``, its ``serving_default``
    signature by keyword and by position (TF's dict of outputs), and the Keras lists
    ``variables`` / ``trainable_variables`` in TF's order."""
    m = tf.saved_model.load(_keras_dir())
    sig = m.signatures["serving_default"]
    return (m(X, training=False), m(X, False), sig(dense_input=X), sig(tf.constant(X)),
            [v.name for v in m.variables], [v.name for v in m.trainable_variables],
            sorted(sig.structured_outputs))


@parity
def test_signature_binding_errors(tf):
    """A signature called with an unknown or a missing input, or too many positional ones:
    TypeError."""
    sig = tf.saved_model.load(_keras_dir()).signatures["serving_default"]
    return (raises(lambda: sig(wrong=X)), raises(lambda: sig()), raises(lambda: sig(X, X)))


def _fine_tune(tf, compiled):
    m = tf.saved_model.load(_keras_dir())
    opt = tf.keras.optimizers.SGD(0.1)
    ws = list(m.trainable_variables)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((m(x, training=True) - y) ** 2)
        grads = tape.gradient(loss, ws)
        opt.apply_gradients(zip(grads, ws))
        return loss

    if compiled:
        step = tf.function(step)
    losses = [step(tf.constant(X), tf.constant(Y)) for _ in range(3)]
    return losses, [v.numpy() for v in m.variables], m(X, training=False)


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_tf_keras_model_fine_tuned_with_batch_norm_training(tf):
    """Fine-tuning a loaded tf_keras model: three SGD steps on ``loaded(x, training=True)``; the
    BatchNormalization's moving statistics move as in TF (the call assigns them)."""
    return _fine_tune(tf, compiled=False)


@parity(rtol=1e-4, atol=1e-5)
def test_tf_keras_model_fine_tuned_under_function(tf):
    """The same fine-tuning with the step under ``tf.function``."""
    return _fine_tune(tf, compiled=True)


@parity(modes=True)
def test_keras3_exported_model_signatures(tf):
    """A Keras 3 ``model.export`` directory: its ``serve`` endpoint and ``serving_default``
    signature, for two batch sizes."""
    m = tf.saved_model.load(_keras3_dir())
    sig = m.signatures["serving_default"]
    return (m.serve(X), m.serve(X[:2]), sig(features=X), sorted(m.signatures),
            sorted(sig.structured_input_signature[1]))


@parity(modes=True, rtol=2e-4, atol=1e-5)
def test_transfer_learning_on_a_loaded_cnn_backbone(tf):
    """Transfer learning as with a TF Hub feature extractor: a new dense head (Variables of the
    program's own) on a loaded CNN backbone; two Adam steps train the head alone (backbone
    called with ``training=False``), two more fine-tune both with ``training=True`` and a new
    optimizer at a lower rate (its
    BatchNormalization statistics move).  Losses, the head, the backbone's Variables."""
    rs = np.random.RandomState(8)
    images = rs.rand(4, 8, 8, 3).astype(np.float32)
    labels = np.array([0, 2, 1, 2], np.int32)
    backbone = tf.saved_model.load(_cnn_dir())
    w = tf.Variable(rs.randn(4, 3).astype(np.float32) * 0.3)
    b = tf.Variable(np.zeros(3, np.float32))
    head_opt, fine_opt = tf.keras.optimizers.Adam(0.05), tf.keras.optimizers.Adam(0.01)

    def step(train_backbone):
        ws = [w, b] + (list(backbone.trainable_variables) if train_backbone else [])
        opt = fine_opt if train_backbone else head_opt
        with tf.GradientTape() as tape:
            feats = backbone(images, training=train_backbone)
            logits = tf.matmul(feats, w) + b
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        opt.apply_gradients(zip(tape.gradient(loss, ws), ws))
        return loss

    losses = [step(False), step(False), step(True), step(True)]
    return losses, w, b, [v.numpy() for v in backbone.variables]
