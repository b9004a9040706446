"""tapejax/keras/output_spec.py: a symbolic call whose ops cannot divide Keras's symbolic dimension
gets TF's ``None`` dimensions (two concrete sizes), not ``InconclusiveDimensionOperation``."""
import numpy as np
import pytest

import tapejax as tf

keras = tf.keras


class _Merge(keras.layers.Layer):
    """Swin's windows (B * 4, 4, C) back to (B, 16, C) in a layer of its own."""

    def call(self, windows):
        return tf.reshape(windows, [-1, 16, windows.shape[-1]])


def test_a_reshape_merging_the_batch_dimension_builds_a_functional_model_with_none():
    inputs = keras.Input((4, 3))
    out = _Merge()(inputs)
    assert tuple(out.shape) == (None, 16, 3)              # tf_keras: (None, 16, 3)
    model = keras.Model(inputs, keras.layers.Dense(2)(out))
    x = np.random.RandomState(0).randn(8, 4, 3).astype(np.float32)
    assert tuple(model(x).shape) == (2, 16, 2)


def test_a_dimension_the_same_at_both_sizes_stays_known():
    inputs = keras.Input((4, 3))
    out = _Merge()(keras.layers.Reshape((4, 3))(inputs))
    assert tuple(out.shape)[1:] == (16, 3)


def test_an_error_without_none_dimensions_is_the_layers_own():
    inputs = keras.Input((4, 3), batch_size=6)                # 6 * 4 rows cannot make rows of 16
    with pytest.raises(tf.errors.InvalidArgumentError, match="72 values"):   # (no fallback runs)
        _Merge()(inputs)
