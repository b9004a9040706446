"""Helpers the tf.data parity tests share: an element_spec, a dataset's elements and its
cardinality as plain data (the same under TensorFlow and tapejax), and the small model their
training programs fit."""
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
