"""``tf.keras.layers.TFSMLayer`` on the JAX backend (``tapejax/keras/tfsm_layer.py``).

Oracle: Keras 3's own ``TFSMLayer`` on the TensorFlow backend, run in a process of its own
(this one's Keras runs on JAX) on the same SavedModel (a tf_keras model with
BatchNormalization saved by TF): the layer's weights (names, order, ``trainable``), its
outputs for two endpoints, and a functional model built on it trained by ``fit`` (the
loaded weights move).  Then, against TF's loaded object: gradients through it on the tape, a
training endpoint that assigns a weight, and Keras's ValueError for an unknown endpoint.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tapejax as tf

realtf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
pytest.importorskip("tf2jax", reason="tf2jax is not installed")
pytest.importorskip("keras", reason="Keras is not installed")

X = np.random.RandomState(0).rand(5, 3).astype(np.float32)
Y = np.ones((5, 1), np.float32)

_ORACLE = """
import json, os, sys
os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np, keras
path = sys.argv[1]
X = np.random.RandomState(0).rand(5, 3).astype(np.float32)
layer = keras.layers.TFSMLayer(path, call_endpoint="serving_default")
out = {"names": [w.name for w in layer.weights], "trainable": [bool(w.trainable) for w in layer.weights],
       "serving": layer(X)["dense_1"].numpy().tolist(),
       "call": keras.layers.TFSMLayer(path, call_endpoint="__call__")(X).numpy().tolist()}
inp = keras.Input((3,))
o = keras.layers.Dense(1, kernel_initializer="ones")(layer(inp)["dense_1"])
model = keras.Model(inp, o)
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
out["loss"] = model.fit(X, np.ones((5, 1), np.float32), epochs=2, batch_size=5, shuffle=False, verbose=0).history["loss"]
out["after"] = layer(X)["dense_1"].numpy().tolist()
print("ORACLE" + json.dumps(out))
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    import tf_keras
    tf_keras.utils.set_random_seed(11)
    model = tf_keras.Sequential([tf_keras.layers.Dense(4, activation="relu", input_shape=(3,), name="dense"),
                                 tf_keras.layers.BatchNormalization(momentum=0.5, name="batch_normalization"),
                                 tf_keras.layers.Dense(2, name="dense_1")])
    model(X)
    path = str(tmp_path_factory.mktemp("tfsm") / "model")
    model.save(path, save_format="tf")
    return path


@pytest.fixture(scope="module")
def oracle(saved):
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
    run = subprocess.run([sys.executable, "-c", _ORACLE, saved], env=env, capture_output=True, text=True,
                         timeout=300)
    line = [x for x in run.stdout.splitlines() if x.startswith("ORACLE")]
    assert line, run.stderr[-2000:]
    return json.loads(line[-1][len("ORACLE"):])


def test_weights_and_outputs_match_keras_on_tensorflow(saved, oracle):
    layer = tf.keras.layers.TFSMLayer(saved, call_endpoint="serving_default")
    assert [w.name for w in layer.weights] == oracle["names"]
    assert [bool(w.trainable) for w in layer.weights] == oracle["trainable"]
    np.testing.assert_allclose(np.asarray(layer(X)["dense_1"]), oracle["serving"], rtol=1e-5, atol=1e-6)
    call = tf.keras.layers.TFSMLayer(saved, call_endpoint="__call__")
    np.testing.assert_allclose(np.asarray(call(X)), oracle["call"], rtol=1e-5, atol=1e-6)


def test_fit_trains_the_loaded_weights_as_keras_on_tensorflow(saved, oracle):
    layer = tf.keras.layers.TFSMLayer(saved, call_endpoint="serving_default")
    inp = tf.keras.Input((3,))
    out = tf.keras.layers.Dense(1, kernel_initializer="ones")(layer(inp)["dense_1"])
    model = tf.keras.Model(inp, out)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    hist = model.fit(X, Y, epochs=2, batch_size=5, shuffle=False, verbose=0).history["loss"]
    np.testing.assert_allclose(hist, oracle["loss"], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(np.asarray(layer(X)["dense_1"]), oracle["after"], rtol=1e-4, atol=1e-6)


def test_gradients_on_the_tape(saved):
    """Gradients through the layer with respect to its trainable weights on the tape, the
    moving statistics not among them."""
    layer = tf.keras.layers.TFSMLayer(saved, call_endpoint="serving_default")
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(layer(X)["dense_1"] ** 2)
    grads = tape.gradient(y, layer.trainable_weights)
    assert len(grads) == 6 and all(g is not None for g in grads)
    assert len(layer.non_trainable_weights) == 2


@pytest.fixture(scope="module")
def normalizer(tmp_path_factory):
    """A tf.Module with an inference endpoint and a training endpoint that assigns its running
    mean (a BatchNormalization-like statistic), as Keras documents ``call_training_endpoint``."""
    tf_ = realtf

    class Norm(tf_.Module):
        def __init__(self):
            super().__init__()
            self.scale = tf_.Variable(np.full(3, 2.0, np.float32), name="scale")
            self.mean = tf_.Variable(np.zeros(3, np.float32), trainable=False, name="mean")

        @tf_.function(input_signature=[tf_.TensorSpec([None, 3], tf_.float32)])
        def infer(self, x):
            return (x - self.mean) * self.scale

        @tf_.function(input_signature=[tf_.TensorSpec([None, 3], tf_.float32)])
        def train(self, x):
            self.mean.assign(0.5 * self.mean + 0.5 * tf_.reduce_mean(x, axis=0))
            return (x - self.mean) * self.scale

    path = str(tmp_path_factory.mktemp("tfsm") / "norm")
    tf_.saved_model.save(Norm(), path)
    return path


def test_training_endpoint_assigns_the_layers_weights(normalizer):
    """``layer(x, training=True)`` runs ``call_training_endpoint``, whose assignment moves the
    layer's non-trainable weight as TF's loaded ``train`` moves its Variable, call after call;
    ``training=False`` reads the moved value."""
    layer = tf.keras.layers.TFSMLayer(normalizer, call_endpoint="infer", call_training_endpoint="train")
    ref = realtf.saved_model.load(normalizer)
    for _ in range(2):
        np.testing.assert_allclose(np.asarray(layer(X, training=True)), ref.train(X).numpy(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(layer.non_trainable_weights[0]), ref.mean.numpy(), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(layer(X)), ref.infer(X).numpy(), rtol=1e-6)


def test_unknown_endpoint_is_kerass_value_error(saved):
    with pytest.raises(ValueError, match="neither an attribute of the reloaded SavedModel"):
        tf.keras.layers.TFSMLayer(saved, call_endpoint="nope")
