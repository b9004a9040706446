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


def _grad(f, x):
    x = tf.constant(np.asarray(x))
    with tf.GradientTape() as t:
        t.watch(x)
        y = f(x)
    return y.numpy(), t.gradient(y, x).numpy()


def test_logdet_reads_the_lower_triangle_as_tfs_cholesky():
    """TF's ``logdet`` is ``2 sum log diag(cholesky(a))``: an asymmetric input's value is its lower
    triangle's and the gradient is the symmetric inverse of that (JAX's Cholesky averaged the two
    triangles: log 1.75, not TF's log 1.99)."""
    y, g = _grad(tf.linalg.logdet, np.array([[2.0, 0.9], [0.1, 1.0]], np.float32))
    np.testing.assert_allclose(y, np.log(1.99), rtol=1e-6)
    np.testing.assert_allclose(g, np.array([[1.0, -0.1], [-0.1, 2.0]]) / 1.99, rtol=1e-5)


def test_eigh_and_svd_gradients_at_repeated_values_are_tfs_zeros():
    """TF's eigh / svd gradients take ``_SafeReciprocal`` (``x / (x^2 + 1e-20)``) of the eigen- and
    singular-value gaps, so at the identity (all values tied) the eigenvector / singular-vector
    gradient is 0; JAX's ``1 / 0`` made it NaN."""
    wts = tf.constant([1.0, 2.0, 3.0])
    _, g = _grad(lambda a: tf.reduce_sum(tf.linalg.eigh(a)[1][:, 0] ** 2 * wts), np.eye(3, dtype=np.float32))
    np.testing.assert_array_equal(g, np.zeros((3, 3)))
    for full in (False, True):   # (a square matrix's full factors are its reduced ones)
        _, g = _grad(lambda a: tf.reduce_sum(tf.abs(tf.linalg.svd(a, full_matrices=full)[1])),
                     np.eye(2, dtype=np.float32))
        np.testing.assert_array_equal(g, np.zeros((2, 2)))
    # a tall matrix with a zero singular value: TF's safe 1/s, where JAX divided by 0
    _, g = _grad(lambda a: tf.reduce_sum(tf.linalg.svd(a)[1][:, 0]),
                 np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]], np.float32))
    assert np.all(np.isfinite(g))


def _null_projector_loss_np(a, w, tall):
    """``sum(w * h h^T)`` for the extra (null-space) column ``h`` of the full SVD, in float64 NumPy."""
    u, _, vh = np.linalg.svd(a, full_matrices=True)
    h = u[:, -1] if tall else vh[-1]
    return float(np.sum(w * np.outer(h, h)))


@pytest.mark.parametrize("shape", [(8, 9), (4, 3)])
def test_full_svd_one_off_square_differentiates_its_null_vector_as_tf(shape):
    """tapejax/ops/linalg_svd.py: ``svd(full_matrices=True)`` of a matrix one row or column off
    square (the 4-point DLT's 8x9 system) has TF's gradient through the extra column (the null
    vector ``v2`` with ``dv2 = -V1 S^-1 U^H dA v2``; JAX raised NotImplementedError): checked
    against central differences in float64, reverse and forward mode."""
    rs = np.random.RandomState(0)
    a = rs.randn(*shape)
    tall = shape[0] > shape[1]
    k = max(shape)
    w = rs.randn(k, k)

    def f(x):
        s, u, v = tf.linalg.svd(x, full_matrices=True)
        h = u[:, -1] if tall else v[:, -1]
        return tf.reduce_sum(h[:, None] * h[None, :] * w.astype(np.float32)) + 0.1 * tf.reduce_sum(s)

    _, g = _grad(f, a.astype(np.float32))
    eps = 1e-6
    fd = np.zeros_like(a)
    for idx in np.ndindex(*a.shape):
        d = np.zeros_like(a)
        d[idx] = eps
        fd[idx] = (_null_projector_loss_np(a + d, w, tall) - _null_projector_loss_np(a - d, w, tall)) / (2 * eps)
        fd[idx] += 0.1 * (np.linalg.svd(a + d, compute_uv=False).sum() - np.linalg.svd(a - d, compute_uv=False).sum()) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=2e-3, atol=2e-4)
    x = tf.constant(a.astype(np.float32))
    direction = rs.randn(*shape).astype(np.float32)
    with tf.autodiff.ForwardAccumulator(x, tf.constant(direction)) as acc:
        y = f(x)
    np.testing.assert_allclose(acc.jvp(y).numpy(), np.sum(fd * direction), rtol=2e-3, atol=2e-4)


def test_full_svd_two_off_square_has_no_gradient_as_tf():
    """TF's ``_SvdGrad`` raises NotImplementedError for ``|m - n| > 1`` with full factors."""
    x = tf.constant(np.random.RandomState(1).randn(2, 4).astype(np.float32))
    with tf.GradientTape() as t:
        t.watch(x)
        s = tf.linalg.svd(x, full_matrices=True)[0]
    with pytest.raises(NotImplementedError):
        t.gradient(s, x)
def _svd_full_loss_np(a, w):
    u, s, vh = np.linalg.svd(a, full_matrices=True)
    big = vh.T if a.shape[1] > a.shape[0] else u
    extra = big[:, -1:]
    return np.abs(u).sum() + 2 * np.abs(vh).sum() + (extra @ extra.T * w).sum() + s.sum()


@pytest.mark.parametrize("shape", [(2, 3), (3, 2)])
def test_svd_full_matrices_gradient_with_one_extra_row_or_column(shape):
    """TF's SvdGrad covers ``full_matrices=True`` when ``|m - n| <= 1`` (JAX raised
    NotImplementedError there): the extra column ``w`` of the larger factor moves by
    ``-W (dW^H w)``.  Oracle: central differences in float64 of a sign-free loss (``abs`` of the
    factors, the projector ``w w^T`` onto the extra column, ``s``); forward mode gives the same
    directional derivative; ``|m - n| = 2`` still raises TF's NotImplementedError."""
    rs = np.random.RandomState(7)
    a = rs.randn(*shape)
    w = rs.randn(max(shape), max(shape))
    x = tf.constant(a.astype(np.float32))
    wt = tf.constant(w.astype(np.float32))

    def loss(x):
        s, u, v = tf.linalg.svd(x, full_matrices=True)
        big = v if shape[1] > shape[0] else u
        return (tf.reduce_sum(tf.abs(u)) + 2 * tf.reduce_sum(tf.abs(v))
                + tf.reduce_sum(tf.matmul(big[:, -1:], big[:, -1:], transpose_b=True) * wt) + tf.reduce_sum(s))

    _, g = _grad(loss, x)
    eps = 1e-6
    fd = np.zeros_like(a)
    for idx in np.ndindex(*shape):
        d = np.zeros_like(a)
        d[idx] = eps
        fd[idx] = (_svd_full_loss_np(a + d, w) - _svd_full_loss_np(a - d, w)) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-3, atol=1e-4)
    t = rs.randn(*shape).astype(np.float32)
    with tf.autodiff.ForwardAccumulator(x, tf.constant(t)) as acc:
        y = loss(x)
    np.testing.assert_allclose(acc.jvp(y).numpy(), (fd * t).sum(), rtol=1e-3)
    with pytest.raises(NotImplementedError):
        _grad(lambda x: tf.reduce_sum(tf.linalg.svd(x, full_matrices=True)[1]), np.ones((4, 2), np.float32))


def test_hermitian_eigh_gradient_has_a_real_diagonal():
    """TF's SelfAdjointEigV2 gradient is ``tril(G + G^H)`` with the diagonal halved: real on the
    diagonal (the kernel does not read a diagonal's imaginary part)."""
    rs = np.random.RandomState(0)
    c = (rs.randn(3, 3) + 1j * rs.randn(3, 3)).astype(np.complex64)
    _, g = _grad(lambda a: tf.reduce_sum(tf.math.real(tf.linalg.eigh(a)[1]) ** 2 * tf.constant([1.0, 2.0, 3.0])),
                 c @ c.conj().T)
    np.testing.assert_array_equal(np.diagonal(g).imag, 0.0)
    np.testing.assert_array_equal(np.triu(g, 1), 0.0)


def test_gradients_tf_does_not_define_raise_its_errors_and_lstsq_slow_ignores_l2():
    """Where TF's gradient function raises, tapejax's derivative does (reverse and forward mode; the
    forward value is computed): ``qr(full_matrices=True)`` of a tall matrix (NotImplementedError),
    ``lstsq(fast=False)`` (ValueError; JAX had gradients for both). ``fast=False`` ignores
    ``l2_regularizer``, as TF's complete orthogonal factorization (tapejax regularised it)."""
    x = tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 7.0]])
    b = tf.ones([3, 1])
    np.testing.assert_allclose(tf.linalg.lstsq(x, b, 0.5, fast=False).numpy().ravel(), [-1.142859, 1.0000014],
                               rtol=1e-5)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        r = tf.linalg.qr(x, full_matrices=True)[1]
        sol = tf.linalg.lstsq(x, b, fast=False)
    np.testing.assert_allclose(r.numpy()[2], [0.0, 0.0], atol=1e-6)
    with pytest.raises(NotImplementedError, match="QrGrad not implemented"):
        t.gradient(r, x)
    with pytest.raises(ValueError, match="fast=False"):
        t.gradient(sol, x)
    with tf.autodiff.ForwardAccumulator(x, tf.ones_like(x)) as acc:
        sol = tf.linalg.lstsq(x, b, fast=False)
    with pytest.raises(ValueError, match="fast=False"):
        acc.jvp(sol)


@pytest.mark.parametrize("deferred", [True, False])
def test_lu_has_no_gradient_as_in_tf(deferred):
    """TF 2.21 registers no gradient for ``Lu``: a gradient through ``tf.linalg.lu``'s factors raises
    LookupError (tapejax gave JAX's); one that does not reach them, eager or compiled, is computed."""
    prev = tf.set_deferred_execution(deferred)
    try:
        v = tf.Variable(np.array([[1.0, 2.0, 0.5], [3.0, -1.0, 2.0], [0.5, 1.0, 4.0]], np.float32))

        def grad(used):
            with tf.GradientTape() as t:
                lu, p = tf.linalg.lu(v)
                y = tf.reduce_sum(v * v) + (tf.reduce_sum(tf.linalg.lu_solve(lu, p, tf.eye(3))) if used else 0.0)
            return t.gradient(y, v)

        with pytest.raises(LookupError, match="no entry for: Lu"):
            grad(True)
        with pytest.raises(LookupError, match="no entry for: Lu"):
            tf.function(grad)(True)
        np.testing.assert_allclose(grad(False).numpy(), 2 * v.numpy())
        np.testing.assert_allclose(tf.function(grad)(False).numpy(), 2 * v.numpy())
    finally:
        tf.set_deferred_execution(prev)


def test_cross_does_not_broadcast_and_needs_3_vectors_as_tfs_kernel():
    """TF's Cross kernel (cross_op.cc) requires equal shapes (InvalidArgumentError "Both inputs must
    be of same shape") and an innermost size of 3 (FailedPreconditionError); jnp.cross broadcast
    ``cross(normals, up)`` silently and took any size."""
    with pytest.raises(tf.errors.InvalidArgumentError, match="same shape"):
        tf.linalg.cross(tf.ones([2, 3]), tf.constant([0.0, 1.0, 0.0]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="same shape"):
        tf.linalg.cross(tf.ones([1, 3]), tf.ones([2, 3]))
    with pytest.raises(tf.errors.FailedPreconditionError, match="3-element"):
        tf.linalg.cross(tf.ones([2, 4]), tf.ones([2, 4]))
    np.testing.assert_array_equal(tf.linalg.cross(tf.constant([[1.0, 0.0, 0.0]]), tf.constant([[0.0, 1.0, 0.0]])).numpy(),
                                  [[0.0, 0.0, 1.0]])
