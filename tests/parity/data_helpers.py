"""Helpers the tf.data parity tests share: an element_spec, a dataset's elements and its
cardinality as plain data (the same under TensorFlow and tapejax), and the small model their
training programs fit, and the files their readers read."""
import os
import tempfile

import numpy as np


def spec(s):
    """An element_spec as plain data: (shape list or None, dtype name) per component."""
    if isinstance(s, dict):
        return {k: spec(v) for k, v in s.items()}
    if isinstance(s, tuple):
        return tuple(spec(v) for v in s)
    shape = s.shape
    if shape is not None and hasattr(shape, "rank"):       # TF's TensorShape
        shape = None if shape.rank is None else shape.as_list()
    return (None if shape is None else list(shape), s.dtype.name)


def L(ds):
    """The elements as Python data (``as_numpy_iterator``, arrays as lists)."""
    return [v.tolist() if hasattr(v, "tolist") else v for v in ds.as_numpy_iterator()]


def card(ds):
    return int(ds.cardinality().numpy())


def softmax_classifier(tf, n_in, n_classes=10, lr=0.5):
    """A linear softmax classifier from zeros and its compiled SGD step ``step(x, y) -> loss``
    (``x`` reshaped to ``[-1, n_in]``): ``(w, b, step)``."""
    w = tf.Variable(np.zeros((n_in, n_classes), np.float32))
    b = tf.Variable(np.zeros((n_classes,), np.float32))

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            logits = tf.matmul(tf.reshape(x, [-1, n_in]), w) + b
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(lr * gw)
        b.assign_sub(lr * gb)
        return loss

    return w, b, step


def fit_and_evaluate(tf, train, evaluation, n_in, n_classes=10, epochs=2):
    """``softmax_classifier`` trained on ``train`` for ``epochs`` epochs, its accuracy on
    ``evaluation`` after each: ``(losses, accuracies, w, b)``."""
    w, b, step = softmax_classifier(tf, n_in, n_classes=n_classes)
    losses, accs = [], []
    for _ in range(epochs):
        for x, y in train:
            losses.append(float(step(x, y)))
        right = total = 0
        for x, y in evaluation:
            pred = tf.argmax(tf.matmul(tf.reshape(x, [-1, n_in]), w) + b, axis=1, output_type=tf.int32)
            right += int(tf.reduce_sum(tf.cast(tf.equal(pred, y), tf.int32)))
            total += int(tf.size(y))
        accs.append(right / total)
    return losses, accs, w.numpy(), b.numpy()


def tmp():
    """A new temporary directory for a parity test's files."""
    return tempfile.mkdtemp(prefix="tapejax-parity-")


def cifar_like_files(c, h, w, records=24, seed=0):
    """Two files in CIFAR-10's binary format (a label byte, then the pixels channel-major) of
    ``records`` records each, most of them ending in zero bytes (a dark corner)."""
    rng = np.random.default_rng(seed)
    d = tmp()
    names = []
    for k in range(2):
        labels = rng.integers(0, 10, size=records, dtype=np.uint8)
        pixels = rng.integers(0, 256, size=(records, c * h * w), dtype=np.uint8)
        pixels[:, -3:] = 0
        pixels[::5, -1] = 7
        name = os.path.join(d, f"data_batch_{k}.bin")
        np.concatenate([labels[:, None], pixels], axis=1).tofile(name)
        names.append(name)
    return names
