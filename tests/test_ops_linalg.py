"""tapejax/ops/linalg.py: TF's conventions of ``tf.norm`` at edge points (checked against TF 2.21's
numbers; tests/parity/test_edge_points.py compares the whole sweep with TF)."""
import numpy as np
import pytest

import tapejax as tf


def _norm_grad(x, **kw):
    x = tf.constant(np.asarray(x, np.float32))
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.norm(x, **kw)
    return y.numpy(), t.gradient(y, x).numpy()


@pytest.mark.parametrize("ord_", [1, np.inf])
def test_matrix_1_and_inf_norms_at_zero_have_tfs_zero_gradient(ord_):
    """TF computes the matrix 1- and inf-norms as reduce_max(reduce_sum(abs(x))), with abs'(0) = 0:
    the gradient at the zero matrix is 0 (jnp.linalg.norm gave 1/6 and 1/4 from JAX's abs'(0))."""
    y, g = _norm_grad(np.zeros((2, 3)), ord=ord_, axis=[0, 1])
    assert y == 0.0
    np.testing.assert_array_equal(g, np.zeros((2, 3)))


def test_matrix_1_and_inf_norms_split_tied_columns_and_rows_as_tf():
    """Tied column (row) sums share the gradient evenly (TF's reduce_max), each entry's share signed."""
    x = [[1.0, -2.0, 0.0], [-2.0, 1.0, 3.0]]
    y, g = _norm_grad(x, ord=1, axis=[0, 1])   # column sums 3, 3, 3
    assert y == 3.0
    np.testing.assert_allclose(g, [[1 / 3, -1 / 3, 0.0], [-1 / 3, 1 / 3, 1 / 3]], rtol=1e-6)
    y, g = _norm_grad([[1.0, -2.0], [-3.0, 0.0]], ord=np.inf, axis=[-2, -1])   # row sums 3, 3
    assert y == 3.0
    np.testing.assert_allclose(g, [[0.5, -0.5], [-0.5, 0.0]], rtol=1e-6)
