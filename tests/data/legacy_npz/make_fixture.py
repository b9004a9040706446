"""How tests/data/legacy_npz was made: run once with tapejax's first (.npz) Checkpoint, at
commit a997b94 (``python tests/data/legacy_npz/make_fixture.py tests/data/legacy_npz``).

``tests/test_checkpoint_storage.py`` imports ``Net`` and ``train`` from here to restore the
files with today's Checkpoint and compare with ``expected.json``.
"""
import json
import os
import sys

import numpy as np
import optax

import tapejax as tf


class Dense(tf.Module):
    def __init__(self, i, o, name=None):
        super().__init__(name=name)
        rng = np.random.RandomState(i * 10 + o)
        self.w = tf.Variable(rng.randn(i, o).astype("float32"), name="w")
        self.b = tf.Variable(np.zeros(o, "float32"), name="b")
    def __call__(self, x):
        return tf.matmul(x, self.w) + self.b

class Net(tf.Module):
    def __init__(self):
        super().__init__()
        self.layers = [Dense(3, 4), Dense(4, 1)]
    def __call__(self, x):
        return self.layers[1](tf.nn.relu(self.layers[0](x)))

X = tf.constant(np.random.RandomState(0).randn(8, 3).astype("float32"))
Y = tf.constant(np.random.RandomState(1).randn(8, 1).astype("float32"))

def train(model, opt, steps):
    @tf.function
    def step():
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.square(model(X) - Y))
        opt.apply_gradients(zip(t.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss
    return [float(step().numpy()) for _ in range(steps)]

def main(out):
    expect = {}
    for name, make in (("nadam", lambda: tf.optimizers.legacy.Nadam(0.01)), ("optax", lambda: tf.optimizers.from_optax(optax.adam(0.01)))):
        model, opt = Net(), make()
        train(model, opt, 3)
        ck = tf.train.Checkpoint(model=model, optimizer=opt, extra=tf.Variable(np.array([1.5, -2.0], tf.bfloat16._np)))
        path = ck.save(os.path.join(out, name, "ckpt"))
        expect[name] = {"path": os.path.relpath(path, out), "variables": [v.numpy().tolist() for v in model.variables],
                        "iterations": int(opt.iterations.numpy()), "next_losses": train(model, opt, 3)}
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expect, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
