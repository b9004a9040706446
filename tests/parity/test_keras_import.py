"""``import keras`` beside the tape, as TF 2.16+'s guides write it (``import tensorflow as tf``,
``import keras``: Keras 3), against real TF with Keras 3 on its TF backend.

The in-process parity cases cannot run this: there TF's ``tf.keras`` is tf_keras (Keras 2) and the
one ``keras`` package of the process is on JAX for tapejax (README.md).  So the same program runs in
two fresh processes, ``import tensorflow as tf`` with ``KERAS_BACKEND=tensorflow``, and ``import
tapejax as tf`` (which puts Keras on JAX and on the tape when the program imports it), and their
printed results are compared."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    if sys.argv[1] == "tf":
        import tensorflow as tf
    else:
        import tapejax as tf
    import keras

    rs = np.random.RandomState(0)
    x = rs.randn(16, 3).astype(np.float32)
    y = x @ np.array([[1.0], [-2.0], [0.5]], np.float32)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
    model.set_weights([np.asarray(rs.randn(*w.shape) * 0.5, np.float32) for w in model.weights])
    opt = keras.optimizers.Adam(0.05)
    loss_fn = keras.losses.MeanSquaredError()
    metric = keras.metrics.MeanAbsoluteError()

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            pred = model(xb, training=True)
            loss = loss_fn(yb, pred)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        metric.update_state(yb, pred)
        return loss

    losses = []
    for i in range(4):   # eager steps, then compiled ones
        with tf.GradientTape() as tape:
            pred = model(x[:8], training=True)
            loss = loss_fn(y[:8], pred)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        losses.append(float(loss))
    for i in range(3):
        losses.append(float(step(x[8:], y[8:])))

    # Keras 3's own functions on tensors in a tape (keras.ops, its submodules, activations, losses, metrics)
    xs = tf.constant(rs.randn(5).astype(np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(xs)
        outs = [keras.ops.sum(keras.ops.square(xs)), keras.ops.mean(keras.activations.relu(xs) * 2.0),
                keras.losses.mean_squared_error(xs, keras.ops.zeros_like(xs)), keras.ops.logsumexp(xs),
                keras.ops.sum(keras.ops.stop_gradient(xs) * xs), keras.ops.sum(keras.ops.nn.softmax(xs) * xs),
                keras.metrics.mean_absolute_error(xs, keras.ops.ones_like(xs)),
                keras.ops.sum(keras.ops.numpy.tanh(xs))]
    grads = [tape.gradient(o, xs) for o in outs]
    host = keras.ops.sum(np.ones(3, np.float32))   # NumPy in: a tensor out
    print(json.dumps({"losses": losses, "mae": float(metric.result()), "iterations": int(opt.iterations.numpy()),
                      "weights": [np.asarray(w).tolist() for w in model.get_weights()],
                      "outs": [float(o) for o in outs],
                      "grads": [None if g is None else np.asarray(g).tolist() for g in grads],
                      "host": [tf.is_tensor(host), float(host)]}))
""")


def _run(which, backend):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), JAX_PLATFORMS="cpu",
               CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0")
    env.pop("TF_USE_LEGACY_KERAS", None)
    env.pop("KERAS_BACKEND", None)
    if backend:
        env["KERAS_BACKEND"] = backend
    p = subprocess.run([sys.executable, "-c", PROGRAM, which], capture_output=True, text=True, timeout=600,
                       env=env, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_a_keras3_training_loop_under_import_keras_gives_tf_keras3s_numbers():
    """Eager tape steps then ``tf.function`` steps of a Sequential model with Keras 3's Adam, loss
    and metric: the losses, the metric, the step count and the weights are TF's; so are the values
    and gradients (None included) of Keras 3's own ``keras.ops`` / activation / loss / metric
    functions in a tape, and ``keras.ops`` on NumPy giving a tensor."""
    got = _run("tapejax", None)
    assert got["iterations"] == 7
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow is not installed: no reference")
    want = _run("tf", "tensorflow")
    assert want["iterations"] == 7
    np.testing.assert_allclose(got["losses"], want["losses"], rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(got["mae"], want["mae"], rtol=2e-5)
    for a, b in zip(got["weights"], want["weights"]):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(got["outs"], want["outs"], rtol=2e-5, atol=2e-6)
    assert [g is None for g in got["grads"]] == [g is None for g in want["grads"]]
    for a, b in zip(got["grads"], want["grads"]):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
    assert got["host"] == want["host"]
