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


def test_sqrtm_and_its_gradient_are_tfs_and_its_program_is_one_loop():
    """tapejax/ops/linalg_more.py: ``sqrtm`` runs its 30 Denman-Beavers steps in a ``fori_loop``, so
    the program (and its gradient's) holds one step, not 30 unrolled ones (the gradient of a 3x3
    root took 11 s to compile); value and gradient are TF 2.21's."""
    import jax

    from tapejax.ops.linalg_more import _sqrtm

    cov = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 0.5]], np.float32)
    wts = tf.constant([[1.0, 2.0, 0.0], [0.0, 1.0, -1.0], [3.0, 0.0, 1.0]])
    x = tf.constant(cov)
    with tf.GradientTape() as t:
        t.watch(x)
        r = tf.linalg.sqrtm(x)
        loss = tf.reduce_sum(r * wts)
    np.testing.assert_allclose(r.numpy(), [[1.4073037, 0.12829752, 0.05512188], [0.12829748, 0.9840295, -0.12339704],
                                           [0.05512188, -0.12339701, 0.6940714]], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t.gradient(loss, x).numpy(),
                               [[0.2878319, 0.80282015, 0.05571795], [0.04714898, 0.41602573, -0.52626085],
                                [1.4104363, -0.05874474, 0.6101641]], rtol=1e-4, atol=1e-5)
    jaxpr = jax.make_jaxpr(jax.grad(lambda a: _sqrtm(a, iters=30).sum()))(cov)
    assert len(jaxpr.eqns) < 40, len(jaxpr.eqns)
