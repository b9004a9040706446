"""Arguments TF accepts that tapejax does not support yet: each is a clear
NotImplementedError naming what is supported, raised before any work (docs/ops.md)."""
import pytest

import tapejax as tf


@pytest.mark.parametrize("call, match", [
    (lambda: tf.linalg.diag(tf.ones([2, 3]), k=(0, 1)), "single diagonal"),
    (lambda: tf.linalg.diag_part(tf.ones([3, 3]), k=(0, 1)), "single diagonal"),
    (lambda: tf.math.bincount(tf.constant([[1, 2], [0, 1]]), axis=-1), "axis=None"),
    (lambda: tf.math.bincount(tf.constant([1, 2]), binary_output=True), "binary_output=False"),
    (lambda: tf.nn.embedding_lookup([tf.ones([2, 3]), tf.ones([2, 3])], tf.constant([0])), "sharded list"),
])
def test_unsupported_arguments_raise_clearly(call, match):
    with pytest.raises(NotImplementedError, match=match):
        call()


def test_the_supported_forms_work():
    assert tf.linalg.diag(tf.ones([3]), k=1).shape == (4, 4)
    assert tf.math.bincount(tf.constant([1, 1, 3])).numpy().tolist() == [0, 2, 0, 1]
    assert tf.nn.embedding_lookup([tf.ones([2, 3])], tf.constant([1])).shape == (1, 3)
