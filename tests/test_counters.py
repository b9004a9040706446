"""``core/counters.py``: which int32 Variables stand for TF's int64 ones (oracle: the dtype TF
gives the same Variable: ``tf.Variable(0)`` int32, ``dtype=tf.int64`` and NumPy int64 data
int64, TF's step counters int64)."""
import numpy as np

import tapejax as tf
from tapejax.core.counters import is_narrowed
from tapejax.core.variable import counter


def test_narrowed_int64_variables_are_known():
    assert is_narrowed(tf.Variable(0, dtype=tf.int64))
    assert is_narrowed(tf.Variable(np.array([1, 2], np.int64)))
    assert not is_narrowed(tf.Variable(0)) and not is_narrowed(tf.Variable(1.5))
    assert not is_narrowed(tf.Variable(np.int32(3))) and not is_narrowed(tf.constant(3, dtype=tf.int64))
    assert is_narrowed(tf.train.Checkpoint().save_counter)
    assert is_narrowed(tf.keras.optimizers.Adam().iterations)
    c = counter("step")
    assert c.dtype == tf.int32 and not c.trainable and is_narrowed(c)


def test_x64_mode_keeps_int64():
    import jax
    with jax.enable_x64(True):
        v = tf.Variable(0, dtype=tf.int64)
        c = counter("step")
    assert v.dtype == tf.int64 and c.dtype == tf.int64
    assert not is_narrowed(v) and not is_narrowed(c)
