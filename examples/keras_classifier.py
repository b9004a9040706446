"""A Keras classifier trained with a GradientTape: TensorFlow's custom training loop, on JAX.

Data: 3 interleaved spirals in 2-D, made here with NumPy (no download), split
into training and validation sets.  Model: ``tf.keras.Sequential`` (Keras 3
on the JAX backend, through ``tapejax.keras``); loss:
``SparseCategoricalCrossentropy(from_logits=True)``; optimizer:
``tf.keras.optimizers.Adam``; metric: ``SparseCategoricalAccuracy``, with a
validation pass between epochs.  The same ``train_step`` runs eagerly and
compiled (``tf.function``); both print the same numbers.  Each
``model(x, training=True)`` is one recorded op of the tape.

Run: python examples/keras_classifier.py [--epochs N]
"""
import argparse
import time

import numpy as np

import tapejax as tf


def spirals(n_per_class=300, classes=3, seed=0):
    rng = np.random.RandomState(seed)
    xs, ys = [], []
    for c in range(classes):
        r = np.linspace(0.05, 1.0, n_per_class)
        t = np.linspace(c * 4.0, (c + 1) * 4.0, n_per_class) + rng.randn(n_per_class) * 0.2
        xs.append(np.stack([r * np.sin(t), r * np.cos(t)], 1))
        ys.append(np.full(n_per_class, c))
    x = np.concatenate(xs).astype("float32")
    y = np.concatenate(ys).astype("int32")
    perm = rng.permutation(len(x))
    return x[perm], y[perm]


def build_model(seed=0):
    tf.keras.utils.set_random_seed(seed)   # the same initial weights for both runs
    return tf.keras.Sequential([
        tf.keras.Input(shape=(2,)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(3),
    ])


def train(compiled, epochs, x_train, y_train, x_val, y_val, batch_size=90):
    model = build_model()
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.01)
    train_acc = tf.keras.metrics.SparseCategoricalAccuracy()
    val_acc = tf.keras.metrics.SparseCategoricalAccuracy()

    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_acc.update_state(y, logits)
        return loss

    def val_step(x, y):
        val_acc.update_state(y, model(x, training=False))

    if compiled:
        train_step, val_step = tf.function(train_step), tf.function(val_step)
    name = "tapejax.function" if compiled else "eager"
    start = None
    steps = 0
    for epoch in range(1, epochs + 1):
        if epoch == 2:   # speed: after the first epoch (which traces and compiles)
            start, steps = time.perf_counter(), 0
        train_acc.reset_state()
        val_acc.reset_state()
        for i in range(0, len(x_train), batch_size):
            loss = train_step(tf.constant(x_train[i:i + batch_size]), tf.constant(y_train[i:i + batch_size]))
            steps += 1
        val_step(tf.constant(x_val), tf.constant(y_val))
        if epoch == 1 or epoch % 5 == 0 or epoch == epochs:
            print(f"{name:16s} epoch {epoch:3d}  loss {float(loss):.4f}  accuracy {float(train_acc.result()):.3f}"
                  f"  val_accuracy {float(val_acc.result()):.3f}")
    speed = steps / (time.perf_counter() - start) if start is not None else float("nan")
    return float(loss), float(val_acc.result()), speed


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=20)
    args = p.parse_args(argv)
    x, y = spirals()
    x_train, y_train, x_val, y_val = x[:720], y[:720], x[720:], y[720:]
    rows = {}
    for compiled in (False, True):
        rows[compiled] = train(compiled, args.epochs, x_train, y_train, x_val, y_val)
    print()
    print(f"{'mode':16s} {'loss':>8s} {'val_acc':>8s} {'steps/s':>8s}")
    for compiled, (loss, acc, speed) in rows.items():
        print(f"{'tapejax.function' if compiled else 'eager':16s} {loss:8.4f} {acc:8.3f} {speed:8.1f}")


if __name__ == "__main__":
    main()
