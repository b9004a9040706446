"""tapejax/keras/tf_backed.py: the Keras preprocessing layers that run TensorFlow in their ``call``,
called eagerly on host values (ids as tapejax Tensors, strings as NumPy bytes)."""
import numpy as np
import pytest

import tapejax as tf

keras = tf.keras


def test_an_inverting_string_lookup_gives_the_strings_as_numpy_bytes():
    """``StringLookup(vocabulary, invert=True)`` maps ids back to tokens (TF 2.21 with tf_keras:
    ``[[b'a', b'b', b'[UNK]']]``, a string tensor); Keras 3 on JAX failed turning TF's string result
    into a JAX array.  The forward lookup and an inverting ``IntegerLookup`` still give Tensors."""
    pytest.importorskip("tensorflow")
    back = keras.layers.StringLookup(vocabulary=["a", "b"], invert=True)(np.array([[1, 2, 0]]))
    assert isinstance(back, np.ndarray) and back.tolist() == [[b"a", b"b", b"[UNK]"]]
    ids = keras.layers.StringLookup(vocabulary=["a", "b"])(np.array(["b", "q"]))
    assert isinstance(ids, tf.Tensor) and ids.numpy().tolist() == [2, 0]
    values = keras.layers.IntegerLookup(vocabulary=[7, 3], invert=True)(tf.constant([1, 2, 0]))
    assert isinstance(values, tf.Tensor) and values.numpy().tolist() == [7, 3, -1]
