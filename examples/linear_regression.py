"""Seed 003: fit y = m*x + b with a GradientTape, eagerly and with tapejax.function.

The training loop is the textbook one from the seed, unchanged but for the
import (``import tapejax as tf``): the loss is computed inside the tape's
``with`` block (the tape records the ops that read ``m`` and ``b``), the
gradient is taken after it.  Then the same step runs as one compiled XLA
program with ``tapejax.function``: same numbers, no per-op Python cost.

Run: python examples/linear_regression.py
"""
import time

import numpy as np

import tapejax as tf

rng = np.random.RandomState(3)
x_train = rng.uniform(-1.0, 1.0, size=200).astype("float32")
y_train = (3.0 * x_train + 2.0 + 0.1 * rng.randn(200)).astype("float32")

learning_rate = 0.05
steps = 500


def fit(compiled):
    m = tf.Variable(0.)
    b = tf.Variable(0.)

    def predict_y_value(x):
        y = m * x + b
        return y

    def squared_error(y_pred, y_true):
        return tf.reduce_mean(tf.square(y_pred - y_true))

    def step(x, y):
        with tf.GradientTape() as tape:
            predictions = predict_y_value(x)
            loss = squared_error(predictions, y)
        gradients = tape.gradient(loss, [m, b])
        m.assign_sub(gradients[0] * learning_rate)
        b.assign_sub(gradients[1] * learning_rate)
        return loss

    if compiled:
        step = tf.function(step)
    x, y = tf.constant(x_train), tf.constant(y_train)
    step(x, y)                     # warm-up: trace and compile (not timed)
    m.assign(0.)
    b.assign(0.)
    start = time.perf_counter()
    for i in range(steps):
        loss = step(x, y)
    loss = float(loss.numpy())     # waits for the last step
    elapsed = time.perf_counter() - start
    return float(m.numpy()), float(b.numpy()), loss, elapsed


if __name__ == "__main__":
    for label, compiled in (("eager", False), ("tapejax.function", True)):
        m, b, loss, elapsed = fit(compiled)
        print("%-17s m: %f, b: %f, loss: %.5f, %d steps in %.3f s (%.1f us/step)"
              % (label, m, b, loss, steps, elapsed, 1e6 * elapsed / steps))
