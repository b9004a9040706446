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


def test_a_lookups_encodings_are_floats_as_tf_keras_gives_them():
    """``one_hot`` / ``multi_hot`` / ``count`` lookups give float32 (tf_keras, and Keras 3's own
    ``compute_output_spec``; Keras 3's eager call gave int64, int32 on JAX); ``int`` ids stay ints."""
    pytest.importorskip("tensorflow")
    vocab = ["a", "b", "c"]
    rows = np.array([["a", "a", "q"], ["c", "b", "b"]])
    for mode, want in (("multi_hot", [[1, 1, 0, 0], [0, 0, 1, 1]]), ("count", [[1, 2, 0, 0], [0, 0, 2, 1]])):
        out = keras.layers.StringLookup(vocabulary=vocab, output_mode=mode)(rows)
        assert out.dtype == tf.float32 and out.numpy().tolist() == want
    one = keras.layers.IntegerLookup(vocabulary=[7, 3], output_mode="one_hot")(np.array([3, 5]))
    assert one.dtype == tf.float32 and one.numpy().tolist() == [[0, 0, 1], [1, 0, 0]]
    assert keras.layers.StringLookup(vocabulary=vocab)(rows).dtype.is_integer
