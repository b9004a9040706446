"""An MLP classifier trained with a GradientTape, eagerly and with tapejax.function.

Data: 3 interleaved spirals in 2-D, made here with NumPy (no download).
Model: a ``tapejax.Module`` with two hidden ReLU layers; loss: sparse softmax
cross-entropy; optimizer: Keras' Adam (``tf.keras.optimizers.Adam``).  The
same ``train_step`` runs op by op (eager) and as one compiled XLA program
(``tapejax.function``); the script prints loss and accuracy as it goes, and
the speed of both.

Run: python examples/mlp_classifier.py [--epochs N]
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


class Dense(tf.Module):
    def __init__(self, n_in, n_out, seed, name=None):
        super().__init__(name=name)
        rng = np.random.RandomState(seed)
        with self.name_scope:
            self.w = tf.Variable((rng.randn(n_in, n_out) * np.sqrt(2.0 / n_in)).astype("float32"), name="w")
            self.b = tf.Variable(np.zeros(n_out, "float32"), name="b")

    def __call__(self, x):
        return tf.matmul(x, self.w) + self.b


class MLP(tf.Module):
    def __init__(self, sizes, seed=0):
        super().__init__()
        self.layers = [Dense(a, b, seed + i) for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]))]

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = tf.nn.relu(layer(x))
        return self.layers[-1](x)


def accuracy(model, x, y):
    pred = tf.argmax(model(x), axis=1)
    return float(tf.reduce_mean(tf.cast(tf.equal(tf.cast(pred, tf.int32), y), tf.float32)).numpy())


def train(compiled, x, y, epochs, batch=64, log=True):
    model = MLP([2, 64, 64, 3])
    optimizer = tf.keras.optimizers.Adam(learning_rate=0.01)

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    if compiled:
        train_step = tf.function(train_step)
    n = (len(x) // batch) * batch
    batches = [(tf.constant(x[i:i + batch]), tf.constant(y[i:i + batch])) for i in range(0, n, batch)]
    train_step(*batches[0])   # warm-up (trace + compile for the compiled step); not timed
    steps, elapsed = 0, 0.0
    xs, ys = tf.constant(x), tf.constant(y)
    for epoch in range(epochs):
        start = time.perf_counter()
        for xb, yb in batches:
            loss = train_step(xb, yb)
        loss_value = float(loss.numpy())
        elapsed += time.perf_counter() - start
        steps += len(batches)
        if log and (epoch % 10 == 9 or epoch == epochs - 1):
            print(f"  [{'compiled' if compiled else 'eager':8s}] epoch {epoch + 1:3d}  loss {loss_value:.4f}  "
                  f"accuracy {accuracy(model, xs, ys):.3f}")
    return loss_value, accuracy(model, xs, ys), steps / elapsed


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=40)
    args = p.parse_args(argv)
    x, y = spirals()
    print(f"3 spirals: {len(x)} points; MLP 2-64-64-3, Adam, batch 64, {args.epochs} epochs")
    results = {}
    for label, compiled in (("eager", False), ("tapejax.function", True)):
        results[label] = train(compiled, x, y, args.epochs)
    print(f"{'mode':18s} {'loss':>8s} {'accuracy':>9s} {'steps/s':>9s}")
    for label, (loss, acc, speed) in results.items():
        print(f"{label:18s} {loss:8.4f} {acc:9.3f} {speed:9.0f}")
    print(f"speed-up of tapejax.function over eager: {results['tapejax.function'][2] / results['eager'][2]:.1f}x")
    return results


if __name__ == "__main__":
    main()
