"""tf.linalg.LinearOperator*: every method against NumPy's dense maths on ``to_dense`` (and the
dense matrix built independently from the parameters), gradients against ``jax.grad`` of the
dense function, TF's errors for bad hints and shapes."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
from tapejax.core.errors import InvalidArgumentError

L = tf.linalg
RNG = np.random.default_rng(0)


def _rand(*shape, dtype=np.float64, pd=False):
    a = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * RNG.standard_normal(shape)
    if pd:
        a = a @ np.conj(np.swapaxes(a, -1, -2)) + shape[-1] * np.eye(shape[-1])
    return a.astype(dtype)


def _tol(dtype):
    return dict(rtol=2e-3, atol=2e-4) if np.dtype(dtype) in (np.float32, np.complex64) else dict(rtol=1e-8, atol=1e-9)


def _adj(a):
    return np.conj(np.swapaxes(a, -1, -2))


def check_operator(op, dense, *, solve=True, det=True, eig=None, cond=True, diag=True):
    """Every generic method of ``op`` against NumPy on ``dense`` (the expected matrix)."""
    dense = np.asarray(dense)
    dt = dense.dtype
    tol = _tol(dt)
    assert op.shape == dense.shape and tuple(op.batch_shape) == dense.shape[:-2]
    assert op.domain_dimension == dense.shape[-1] and op.range_dimension == dense.shape[-2]
    assert op.tensor_rank == dense.ndim and op.dtype.as_numpy_dtype == dt
    np.testing.assert_allclose(op.to_dense().numpy(), dense, **tol)
    m, n = dense.shape[-2:]
    x = _rand(*dense.shape[:-2], n, 2, dtype=dt)
    np.testing.assert_allclose(op.matmul(x).numpy(), dense @ x, **tol)
    np.testing.assert_allclose((op @ x).numpy(), dense @ x, **tol)
    xa = _rand(*dense.shape[:-2], m, 3, dtype=dt)
    np.testing.assert_allclose(op.matmul(xa, adjoint=True).numpy(), _adj(dense) @ xa, **tol)
    np.testing.assert_allclose(op.matmul(_adj(x), adjoint_arg=True).numpy(), dense @ x, **tol)
    np.testing.assert_allclose(op.matmul(_adj(xa), adjoint=True, adjoint_arg=True).numpy(), _adj(dense) @ xa, **tol)
    v = x[..., 0]
    np.testing.assert_allclose(op.matvec(v).numpy(), (dense @ v[..., None])[..., 0], **tol)
    np.testing.assert_allclose(op.matvec(xa[..., 0], adjoint=True).numpy(),
                               (_adj(dense) @ xa[..., 0, None])[..., 0], **tol)
    np.testing.assert_allclose(L.matmul(op, x).numpy(), dense @ x, **tol)
    if diag:
        np.testing.assert_allclose(op.diag_part().numpy(), np.diagonal(dense, axis1=-2, axis2=-1), **tol)
        np.testing.assert_allclose(op.trace().numpy(), np.trace(dense, axis1=-2, axis2=-1), **tol)
    t = _rand(*dense.shape, dtype=dt)
    np.testing.assert_allclose(op.add_to_tensor(t).numpy(), dense + t, **tol)
    np.testing.assert_allclose(op.adjoint().to_dense().numpy(), _adj(dense), **tol)
    np.testing.assert_allclose(op.H.matmul(xa).numpy(), _adj(dense) @ xa, **tol)
    if det:
        np.testing.assert_allclose(op.determinant().numpy(), np.linalg.det(dense), **tol)
        np.testing.assert_allclose(op.log_abs_determinant().numpy(), np.linalg.slogdet(dense)[1], **tol)
    if solve:
        rhs = _rand(*dense.shape[:-2], m, 2, dtype=dt)
        np.testing.assert_allclose(op.solve(rhs).numpy(), np.linalg.solve(dense, rhs), **tol)
        np.testing.assert_allclose(op.solve(rhs, adjoint=True).numpy(), np.linalg.solve(_adj(dense), rhs), **tol)
        np.testing.assert_allclose(op.solve(_adj(rhs), adjoint_arg=True).numpy(), np.linalg.solve(dense, rhs), **tol)
        np.testing.assert_allclose(op.solvevec(rhs[..., 0]).numpy(),
                                   np.linalg.solve(dense, rhs[..., :1])[..., 0], **tol)
        np.testing.assert_allclose(op.inverse().to_dense().numpy(), np.linalg.inv(dense), **tol)
        np.testing.assert_allclose(L.solve(op, rhs).numpy(), np.linalg.solve(dense, rhs), **tol)
    if op.is_self_adjoint:
        want = np.linalg.eigvalsh(dense) if eig is None else eig
        np.testing.assert_allclose(np.sort(op.eigvals().numpy(), axis=-1), np.sort(want, axis=-1), **tol)
    if cond and (solve or op.is_self_adjoint):
        np.testing.assert_allclose(op.cond().numpy(), np.linalg.cond(dense), **tol)


# --------------------------------------------------------------------------
# each operator against its dense matrix
# --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_full_matrix(dtype):
    a = _rand(2, 3, 3, dtype=dtype)
    check_operator(L.LinearOperatorFullMatrix(a), a)


def test_full_matrix_positive_definite_uses_cholesky():
    a = _rand(3, 3, dtype=np.float32, pd=True)
    op = L.LinearOperatorFullMatrix(a, is_self_adjoint=True, is_positive_definite=True)
    check_operator(op, a)
    np.testing.assert_allclose(op.cholesky().to_dense().numpy(), np.linalg.cholesky(a), rtol=1e-4, atol=1e-5)
    assert type(op.cholesky()).__name__ == "LinearOperatorLowerTriangular"


def test_full_matrix_non_square():
    a = _rand(2, 4, 3, dtype=np.float32)
    op = L.LinearOperatorFullMatrix(a)
    check_operator(op, a, solve=False, det=False)
    assert op.is_square is False
    with pytest.raises(NotImplementedError, match="not be square"):
        op.determinant()
    with pytest.raises(NotImplementedError, match="not be square"):
        op.solve(np.ones((2, 4, 1), np.float32))
    with pytest.raises(ValueError, match="non square"):
        op.inverse()


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_diag(dtype):
    d = _rand(2, 4, dtype=dtype) + 2
    op = L.LinearOperatorDiag(d)
    check_operator(op, np.stack([np.diag(r) for r in d]), eig=d)
    assert type(op.inverse()).__name__ == "LinearOperatorDiag"
    np.testing.assert_allclose((op @ op).to_dense().numpy(), np.stack([np.diag(r * r) for r in d]), rtol=1e-5)
    assert type(op @ op).__name__ == "LinearOperatorDiag"


def test_lower_triangular():
    a = _rand(2, 3, 3, dtype=np.float32) + 3 * np.eye(3, dtype=np.float32)
    op = L.LinearOperatorLowerTriangular(a)   # the upper part is ignored
    check_operator(op, np.tril(a))


def test_identity_and_scaled_identity():
    check_operator(L.LinearOperatorIdentity(3, batch_shape=[2], dtype=tf.float32), np.broadcast_to(np.eye(3), (2, 3, 3))
                   .astype(np.float32))
    m = np.array([2.0, -3.0], np.float32)
    op = L.LinearOperatorScaledIdentity(3, m)
    check_operator(op, m[:, None, None] * np.eye(3, dtype=np.float32))
    np.testing.assert_allclose(op.cond().numpy(), [1.0, 1.0])
    assert np.isnan(L.LinearOperatorScaledIdentity(2, 0.0).cond().numpy())


def test_identity_broadcasts_its_batch_shape():
    op = L.LinearOperatorIdentity(2, batch_shape=[3])
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    np.testing.assert_allclose(op.matmul(x).numpy(), np.broadcast_to(x, (3, 2, 2)))
    ident = L.LinearOperatorIdentity(2)
    a = L.LinearOperatorFullMatrix(x)
    assert ident.matmul(a) is a and a.matmul(ident) is a and ident.inverse() is ident


def test_zeros():
    op = L.LinearOperatorZeros(3, batch_shape=[2])
    check_operator(op, np.zeros((2, 3, 3), np.float32), solve=False, eig=np.zeros((2, 3)), cond=False)
    assert np.isnan(op.cond().numpy()).all()   # 0 / 0, as TF
    rect = L.LinearOperatorZeros(2, 4, is_square=False, is_self_adjoint=False)
    assert rect.shape == (2, 4)
    np.testing.assert_allclose(rect.matmul(np.ones((4, 3), np.float32)).numpy(), np.zeros((2, 3)))
    with pytest.raises(InvalidArgumentError, match="non-invertible"):
        op.assert_non_singular()
    with pytest.raises(ValueError, match="always singular"):
        L.LinearOperatorZeros(2, is_non_singular=True)


def test_householder():
    v = _rand(2, 4, dtype=np.float32)
    u = v / np.linalg.norm(v, axis=-1, keepdims=True)
    dense = np.eye(4) - 2 * u[..., :, None] * u[..., None, :]
    op = L.LinearOperatorHouseholder(v)
    check_operator(op, dense.astype(np.float32))
    assert op.inverse() is op and op.adjoint() is op
    with pytest.raises(InvalidArgumentError, match="non-positive definite"):
        op.assert_positive_definite()


def test_permutation():
    perm = np.array([[2, 0, 1, 3], [3, 2, 1, 0]], np.int32)
    dense = np.stack([np.eye(4)[p] for p in perm]).astype(np.float32)
    check_operator(L.LinearOperatorPermutation(perm), dense)
    with pytest.raises(ValueError, match="unique integers from 0 to 2"):
        L.LinearOperatorPermutation([0, 0, 1])
    with pytest.raises(TypeError, match="integer dtype"):
        L.LinearOperatorPermutation([0.0, 1.0])


def test_adjoint_and_inversion_wrappers():
    a = _rand(3, 3, dtype=np.complex64) + 3 * np.eye(3, dtype=np.complex64)
    base = L.LinearOperatorFullMatrix(a)
    check_operator(L.LinearOperatorAdjoint(base), _adj(a))
    check_operator(L.LinearOperatorInversion(base), np.linalg.inv(a))
    assert base.adjoint().adjoint() is base and base.inverse().inverse() is base
    with pytest.raises(ValueError, match="is_non_singular"):
        L.LinearOperatorInversion(L.LinearOperatorFullMatrix(a, is_non_singular=False))


def test_composition():
    a = _rand(3, 3, dtype=np.float32) + 3 * np.eye(3, dtype=np.float32)
    b = _rand(2, 3, 3, dtype=np.float32) + 3 * np.eye(3, dtype=np.float32)
    op = L.LinearOperatorComposition([L.LinearOperatorFullMatrix(a), L.LinearOperatorFullMatrix(b)])
    check_operator(op, a @ b)
    fa = L.LinearOperatorFullMatrix(a, is_non_singular=True)
    aat = L.LinearOperatorComposition([fa, fa.H])
    assert aat.is_self_adjoint and aat.is_positive_definite and aat.is_square
    with pytest.raises(TypeError, match="same dtype"):
        L.LinearOperatorComposition([fa, L.LinearOperatorFullMatrix(a.astype(np.complex64))])
    with pytest.raises(ValueError, match="non-empty"):
        L.LinearOperatorComposition([])


# --------------------------------------------------------------------------
# the base class's rules
# --------------------------------------------------------------------------

@pytest.mark.parametrize("hints,msg", [
    (dict(is_positive_definite=True, is_non_singular=False), "positive definite matrix is always non-singular"),
    (dict(is_non_singular=True, is_square=False), "non-singular matrix is always square"),
    (dict(is_self_adjoint=True, is_square=False), "self-adjoint matrix is always square"),
])
def test_inconsistent_hints_raise_value_error(hints, msg):
    with pytest.raises(ValueError, match=msg):
        L.LinearOperatorFullMatrix(np.eye(2, dtype=np.float32), **hints)


def test_bad_arguments():
    op = L.LinearOperatorDiag([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="Dimensions 3 and 2 are not compatible"):
        op.matmul(np.ones((2, 2), np.float32))
    with pytest.raises(ValueError, match="Dimensions 3 and 2 are not compatible"):
        op.matvec(np.ones(2, np.float32))
    with pytest.raises(TypeError, match="Expected argument to have dtype"):
        op.matmul(tf.ones([3, 1], tf.float16))
    with pytest.raises(ValueError, match="at least 1 dimension"):
        L.LinearOperatorDiag(1.0)
    with pytest.raises(ValueError, match="always self adjoint"):
        L.LinearOperatorDiag([1.0], is_self_adjoint=False)
    with pytest.raises(TypeError, match="must have dtype in"):
        L.LinearOperatorFullMatrix([[1, 2], [3, 4]])
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        L.LinearOperatorFullMatrix([1.0, 2.0])
    with pytest.raises(ValueError, match="is_square hint to False, but the operator was square"):
        _ = L.LinearOperatorFullMatrix(np.eye(2, dtype=np.float32), is_square=False).is_square
    with pytest.raises(NotImplementedError, match="Only self-adjoint"):
        L.LinearOperatorFullMatrix(np.eye(2, dtype=np.float32)).eigvals()
    with pytest.raises(ValueError, match="Cannot take the Cholesky"):
        L.LinearOperatorFullMatrix(np.eye(2, dtype=np.float32)).cholesky()
    with pytest.raises(TypeError, match="integer type"):
        L.LinearOperatorIdentity(2.5)
    with pytest.raises(ValueError, match="non-negative"):
        L.LinearOperatorIdentity(-1)


def test_asserts():
    assert L.LinearOperatorDiag([1.0, 2.0]).assert_non_singular() is None
    with pytest.raises(InvalidArgumentError, match="Diagonal contained zero values"):
        L.LinearOperatorDiag([0.0, 1.0]).assert_non_singular()
    with pytest.raises(InvalidArgumentError, match="non-positive diagonal entries"):
        L.LinearOperatorDiag([-1.0, 1.0]).assert_positive_definite()
    with pytest.raises(InvalidArgumentError, match="not equal to its adjoint"):
        L.LinearOperatorFullMatrix([[1.0, 2.0], [3.0, 4.0]]).assert_self_adjoint()
    with pytest.raises(InvalidArgumentError, match="Singular matrix"):
        L.LinearOperatorFullMatrix([[1.0, 2.0], [2.0, 4.0]]).assert_non_singular()
    L.LinearOperatorFullMatrix([[2.0, 1.0], [1.0, 2.0]], is_self_adjoint=True).assert_positive_definite()


def test_user_subclass_gets_the_generic_methods():
    class Ones(L.LinearOperator):
        """The n x n matrix of ones plus n I (TF's protocol: _shape and _matmul only)."""

        def __init__(self, n):
            self.n = n
            super().__init__(dtype=tf.float32, is_self_adjoint=True, is_positive_definite=True)

        def _shape(self):
            return tf.TensorShape([self.n, self.n]) if hasattr(tf, "TensorShape") else (self.n, self.n)

        def _matmul(self, x, adjoint=False, adjoint_arg=False):
            x = tf.linalg.adjoint(x) if adjoint_arg else x
            return tf.reduce_sum(x, axis=-2, keepdims=True) + self.n * x

    dense = np.ones((3, 3), np.float32) + 3 * np.eye(3, dtype=np.float32)
    check_operator(Ones(3), dense)

    class Incomplete(L.LinearOperator):
        def _shape(self):
            return (2, 2)

    with pytest.raises(TypeError):
        Incomplete(tf.float32)


# --------------------------------------------------------------------------
# gradients, tf.function, deferral
# --------------------------------------------------------------------------

def _dense_loss(d, x):
    return jnp.sum(jnp.linalg.solve(jnp.diag(d), x) ** 2) + jnp.log(jnp.abs(jnp.prod(d)))


def test_gradient_through_a_variable_diag():
    d0 = np.array([1.5, -2.0, 3.0], np.float32)
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    d = tf.Variable(d0)
    op = L.LinearOperatorDiag(d)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(op.solve(x))) + op.log_abs_determinant()
    g = tape.gradient(loss, d)
    np.testing.assert_allclose(g.numpy(), jax.grad(_dense_loss)(jnp.asarray(d0), x), rtol=1e-5)
    assert op.trainable_variables == (d,)


def test_gradient_inside_function_and_training_steps():
    a0 = _rand(3, 3, dtype=np.float32, pd=True)
    a = tf.Variable(a0)
    x = _rand(3, 2, dtype=np.float32)
    op = L.LinearOperatorFullMatrix(a, is_self_adjoint=True, is_positive_definite=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(op.solve(x)) + op.log_abs_determinant()
        g = tape.gradient(loss, a)
        a.assign_sub(0.01 * g)
        return loss

    def ref(m):   # the operator solves through the Cholesky factor, whose gradient is symmetric (TF's)
        m = (m + m.T) / 2
        return jnp.sum(jnp.linalg.solve(m, x)) + jnp.linalg.slogdet(m)[1]

    m = jnp.asarray(a0)
    for _ in range(3):
        want = ref(m)
        np.testing.assert_allclose(step().numpy(), want, rtol=1e-3)
        m = m - 0.01 * jax.grad(ref)(m)
    np.testing.assert_allclose(a.numpy(), m, rtol=1e-4, atol=1e-5)


def test_dispatch_of_linalg_functions():
    op = L.LinearOperatorDiag([1.0, 2.0, 4.0])
    np.testing.assert_allclose(L.det(op).numpy(), 8.0)
    np.testing.assert_allclose(L.trace(op).numpy(), 7.0)
    np.testing.assert_allclose(L.logdet(L.LinearOperatorDiag([1.0, 2.0], is_positive_definite=True)).numpy(),
                               np.log(2.0), rtol=1e-6)
    with pytest.raises(ValueError, match="self-adjoint positive definite"):
        L.logdet(op)
    np.testing.assert_allclose(L.diag_part(op).numpy(), [1.0, 2.0, 4.0])
    np.testing.assert_allclose(L.inv(op).to_dense().numpy(), np.diag([1.0, 0.5, 0.25]))
    np.testing.assert_allclose(L.matmul(np.ones((1, 3), np.float32), op).numpy(), [[1.0, 2.0, 4.0]])
    np.testing.assert_allclose(tf.matmul(op, np.ones((3, 1), np.float32)).numpy(), [[1.0], [2.0], [4.0]])
    np.testing.assert_allclose(L.solve(op, np.ones((3, 1), np.float32)).numpy(), [[1.0], [0.5], [0.25]])
    assert L.adjoint(op) is op
    np.testing.assert_allclose((tf.ones([2, 3]) @ op).numpy(), [[1.0, 2.0, 4.0]] * 2)
    np.testing.assert_allclose((tf.Variable(tf.ones([1, 3])) @ op).numpy(), [[1.0, 2.0, 4.0]])
    with pytest.raises(ValueError, match="Transposing not supported"):
        L.matmul(op, np.ones((3, 1), np.float32), transpose_a=True)
    # plain tensors still go to the ops
    np.testing.assert_allclose(L.matmul(np.eye(2, dtype=np.float32), np.ones((2, 1), np.float32)).numpy(), 1.0)


def _blockdiag(*mats):
    batch = np.broadcast_shapes(*[m.shape[:-2] for m in mats])
    mats = [np.broadcast_to(m, batch + m.shape[-2:]) for m in mats]
    out = np.zeros(batch + (sum(m.shape[-2] for m in mats), sum(m.shape[-1] for m in mats)), mats[0].dtype)
    r = c = 0
    for m in mats:
        out[..., r:r + m.shape[-2], c:c + m.shape[-1]] = m
        r, c = r + m.shape[-2], c + m.shape[-1]
    return out


def test_block_diag():
    a = _rand(2, 2, 2, dtype=np.float32) + 3 * np.eye(2, dtype=np.float32)
    b = _rand(3, 3, dtype=np.float32) + 3 * np.eye(3, dtype=np.float32)
    op = L.LinearOperatorBlockDiag([L.LinearOperatorFullMatrix(a), L.LinearOperatorFullMatrix(b)])
    check_operator(op, _blockdiag(a, b))
    xs = [np.ones((2, 1), np.float32), np.ones((3, 1), np.float32)]
    ys = op.matmul(xs)
    assert isinstance(ys, list) and len(ys) == 2
    np.testing.assert_allclose(ys[1].numpy(), b @ xs[1], rtol=1e-5)
    d = L.LinearOperatorBlockDiag([L.LinearOperatorDiag([1.0, 2.0]), L.LinearOperatorDiag([3.0])])
    assert d.is_self_adjoint and d.is_non_singular is None
    np.testing.assert_allclose((d @ d).to_dense().numpy(), np.diag([1.0, 4.0, 9.0]))
    assert type(d.inverse()).__name__ == "LinearOperatorBlockDiag"


def test_block_lower_triangular():
    a = _rand(2, 2, dtype=np.float32) + 3 * np.eye(2, dtype=np.float32)
    b = _rand(3, 2, dtype=np.float32)
    c = _rand(3, 3, dtype=np.float32) + 3 * np.eye(3, dtype=np.float32)
    f = L.LinearOperatorFullMatrix
    op = L.LinearOperatorBlockLowerTriangular([[f(a)], [f(b), f(c)]])
    dense = np.block([[a, np.zeros((2, 3), np.float32)], [b, c]])
    check_operator(op, dense)
    assert type(op.inverse()).__name__ == "LinearOperatorBlockLowerTriangular"
    with pytest.raises(ValueError, match=r"operators\[1\]` must contain `2` blocks"):
        L.LinearOperatorBlockLowerTriangular([[f(a)], [f(c)]])


def test_kronecker():
    a = _rand(2, 2, dtype=np.float32) + 2 * np.eye(2, dtype=np.float32)
    b = _rand(2, 3, 3, dtype=np.float32) + 3 * np.eye(3, dtype=np.float32)
    op = L.LinearOperatorKronecker([L.LinearOperatorFullMatrix(a), L.LinearOperatorFullMatrix(b)])
    check_operator(op, np.stack([np.kron(a, bi) for bi in b]))
    d = L.LinearOperatorKronecker([L.LinearOperatorDiag([1.0, 2.0]), L.LinearOperatorDiag([3.0, 4.0, 5.0])])
    check_operator(d, np.kron(np.diag([1.0, 2.0]), np.diag([3.0, 4.0, 5.0])).astype(np.float32))
    rect = L.LinearOperatorKronecker([L.LinearOperatorFullMatrix(_rand(2, 3, dtype=np.float32)),
                                      L.LinearOperatorFullMatrix(_rand(4, 2, dtype=np.float32))])
    check_operator(rect, np.kron(rect.operators[0].to_dense().numpy(), rect.operators[1].to_dense().numpy()),
                   solve=False, det=False, diag=False)
    with pytest.raises(ValueError, match="not compatible"):   # as TF (its set_shape check)
        rect.diag_part()


def test_low_rank_update():
    base = L.LinearOperatorDiag(np.array([2.0, 3.0, 4.0], np.float32), is_positive_definite=True)
    u = _rand(3, 2, dtype=np.float32)
    d = np.array([0.5, 1.5], np.float32)
    op = L.LinearOperatorLowRankUpdate(base, u, diag_update=d, is_diag_update_positive=True)
    assert op.is_self_adjoint and op.is_positive_definite and op._use_cholesky
    check_operator(op, np.diag([2.0, 3.0, 4.0]).astype(np.float32) + u @ np.diag(d) @ u.T)
    v = _rand(3, 2, dtype=np.float32)
    full = L.LinearOperatorFullMatrix(_rand(3, 3, dtype=np.float32) + 4 * np.eye(3, dtype=np.float32))
    op2 = L.LinearOperatorLowRankUpdate(full, u, v=v)
    check_operator(op2, full.to_dense().numpy() + u @ v.T)
    with pytest.raises(ValueError, match="Default diagonal is the identity"):
        L.LinearOperatorLowRankUpdate(base, u, is_diag_update_positive=False)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_toeplitz(dtype):
    col = _rand(2, 4, dtype=dtype)
    row = _rand(4, dtype=dtype)
    op = L.LinearOperatorToeplitz(col, row)
    dense = np.stack([[[c[i - j] if i >= j else row[j - i] for j in range(4)] for i in range(4)] for c in col])
    check_operator(op, dense.astype(dtype))
    with pytest.raises(ValueError, match="mismatched dimensions"):
        L.LinearOperatorToeplitz([1.0, 2.0], [1.0])


@pytest.mark.parametrize("fmt", ["compact", "matrix", "sequence"])
def test_tridiag(fmt):
    sup = np.array([1.0, 2.0, 3.0, 0.0], np.float32)
    main = np.array([5.0, 6.0, 7.0, 8.0], np.float32)
    sub = np.array([0.0, -1.0, -2.0, -3.0], np.float32)
    dense = np.diag(main) + np.diag(sup[:-1], 1) + np.diag(sub[1:], -1)
    diagonals = {"compact": np.stack([sup, main, sub]), "matrix": dense, "sequence": [sup, main, sub]}[fmt]
    check_operator(L.LinearOperatorTridiag(diagonals, diagonals_format=fmt), dense.astype(np.float32))
    with pytest.raises(ValueError, match="must be one of compact, matrix, or sequence"):
        L.LinearOperatorTridiag(dense, diagonals_format="banded")


def _circulant_dense(kernel):
    """The (nested block) circulant matrix whose first column is ``kernel`` (1-3 axes)."""
    shape = kernel.shape
    n = int(np.prod(shape))
    idx = np.array(list(np.ndindex(*shape)))
    out = np.zeros((n, n), kernel.dtype)
    for a, ia in enumerate(idx):
        for b, ib in enumerate(idx):
            out[a, b] = kernel[tuple((ia - ib) % np.array(shape))]
    return out


@pytest.mark.parametrize("depth,cls", [(1, "LinearOperatorCirculant"), (2, "LinearOperatorCirculant2D"),
                                       (3, "LinearOperatorCirculant3D")])
def test_circulant(depth, cls):
    shape = {1: (5,), 2: (2, 3), 3: (2, 2, 2)}[depth]
    kernel = _rand(*shape, dtype=np.complex64) + 4 * (np.arange(np.prod(shape)).reshape(shape) == 0)
    spectrum = np.fft.fftn(kernel).astype(np.complex64)
    op = getattr(L, cls)(spectrum)
    check_operator(op, _circulant_dense(kernel.astype(np.complex64)), eig=spectrum.reshape(-1))
    np.testing.assert_allclose(op.convolution_kernel().numpy(), kernel, rtol=1e-4, atol=1e-5)
    assert type(op.inverse()).__name__ == cls


def test_circulant_hermitian_spectrum_real_output():
    kernel = np.array([4.0, 1.0, 0.5, 1.0], np.float32)     # symmetric: a real, Hermitian spectrum
    spectrum = np.fft.fft(kernel).real.astype(np.float32)
    op = L.LinearOperatorCirculant(spectrum, input_output_dtype=tf.float32)
    assert op.is_self_adjoint and op.dtype == tf.float32
    check_operator(op, _circulant_dense(kernel))


def test_batch_slicing():
    d = np.arange(1.0, 13.0, dtype=np.float32).reshape(2, 2, 3)
    op = L.LinearOperatorDiag(d)
    np.testing.assert_allclose(op[1].to_dense().numpy(), np.stack([np.diag(r) for r in d[1]]))
    np.testing.assert_allclose(op[:, 0].to_dense().numpy(), np.stack([np.diag(r) for r in d[:, 0]]))
    np.testing.assert_allclose(op[..., 1].diag_part().numpy(), d[:, 1])
    assert op[0, 1].shape == (3, 3)
    assert L.LinearOperatorIdentity(2, batch_shape=[4, 3])[1:3].shape == (2, 3, 2, 2)
    toe = L.LinearOperatorToeplitz(np.ones((2, 3), np.float32), np.ones(3, np.float32))   # row broadcast
    assert toe[0].shape == (3, 3)
    comp = L.LinearOperatorComposition([op, op])
    np.testing.assert_allclose(comp[1].to_dense().numpy(), np.stack([np.diag(r * r) for r in d[1]]))
    with pytest.raises(ValueError, match="Too many slices"):
        op[0, 0, 0]
    v = tf.Variable(d)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(L.LinearOperatorDiag(v)[1].to_dense())
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), np.stack([np.zeros((2, 3)), np.ones((2, 3))]))


def test_float64_under_x64():
    """In JAX's 64-bit mode operators keep float64 / complex128 (a circulant over float64 runs its
    FFTs in complex128, as TF)."""
    with jax.enable_x64(True):
        a = _rand(3, 3, dtype=np.float64) + 3 * np.eye(3)
        check_operator(L.LinearOperatorFullMatrix(a), a)
        kernel = np.array([4.0, 1.0, 0.5, 1.0])
        op = L.LinearOperatorCirculant(np.fft.fft(kernel).real, input_output_dtype=tf.float64)
        assert op.dtype == tf.float64
        check_operator(op, _circulant_dense(kernel))
