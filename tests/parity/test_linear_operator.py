"""tf.linalg.LinearOperator*: the same programs under TensorFlow 2.21 and tapejax: every public
method's values (and hints, shapes, result types), TF's errors, gradients through an operator's
Variables (eager, in tf.function, a short training loop; deferral on and off), a user's subclass."""
import numpy as np

from .harness import parity, raises

RNG = np.random.default_rng(3)
N3 = (RNG.standard_normal((3, 3)) + 3 * np.eye(3)).astype(np.float32)
SPD3 = (N3 @ N3.T + np.eye(3)).astype(np.float32)
X32 = RNG.standard_normal((3, 2)).astype(np.float32)
C3 = (RNG.standard_normal((3, 3)) + 1j * RNG.standard_normal((3, 3)) + 3 * np.eye(3)).astype(np.complex64)
XC = (RNG.standard_normal((3, 2)) + 1j * RNG.standard_normal((3, 2))).astype(np.complex64)
U32 = RNG.standard_normal((3, 2)).astype(np.float32)
SPEC2 = np.fft.fft2(RNG.standard_normal((2, 3)) + 5 * (np.arange(6).reshape(2, 3) == 0)).astype(np.complex64)
SPEC3 = np.fft.fftn(RNG.standard_normal((2, 2, 2)) + 5 * (np.arange(8).reshape(2, 2, 2) == 0)).astype(np.complex64)
X4C = RNG.standard_normal((4, 2)).astype(np.complex64)
X6C = RNG.standard_normal((6, 2)).astype(np.complex64)
X8C = RNG.standard_normal((8, 2)).astype(np.complex64)


def _shape_facts(op):
    return (op.shape.as_list(), op.batch_shape.as_list(), int(op.domain_dimension), int(op.range_dimension),
            op.tensor_rank, op.dtype.name, op.is_square, op.is_self_adjoint, op.is_positive_definite,
            op.is_non_singular)


def _methods(tf, op, x, *, solve=True, eig=True, xa=None):
    """Every method's result for an operator and a compatible right-hand side ``x`` (``xa`` for
    the adjoint's, ``x`` by default)."""
    xa = x if xa is None else xa
    out = {"facts": _shape_facts(op), "dense": op.to_dense(), "matmul": op.matmul(x),
           "matmul_adj": op.matmul(xa, adjoint=True), "matmul_adj_arg": op.matmul(tf.linalg.adjoint(x), adjoint_arg=True),
           "matvec": op.matvec(x[..., 0]), "matvec_adj": op.matvec(xa[..., 0], adjoint=True),
           "at": op @ x, "linalg_matmul": tf.linalg.matmul(op, x), "rmatmul": tf.linalg.adjoint(xa) @ op,
           "tf_matmul_right": tf.matmul(tf.linalg.adjoint(xa), op), "diag_part": op.diag_part(), "trace": op.trace(),
           "add_to_tensor": op.add_to_tensor(tf.ones(op.shape, op.dtype)), "adjoint": op.adjoint().to_dense(),
           "H_type": type(op.H).__name__}
    if solve:
        out.update(solve=op.solve(x), solve_adj=op.solve(x, adjoint=True),
                   solve_adj_arg=op.solve(tf.linalg.adjoint(x), adjoint_arg=True), solvevec=op.solvevec(x[..., 0]),
                   det=op.determinant(), logdet=op.log_abs_determinant(), inverse=op.inverse().to_dense(),
                   inverse_type=type(op.inverse()).__name__, cond=op.cond())
    if eig and op.is_self_adjoint:
        out["eigvals"] = tf.sort(tf.math.real(op.eigvals()), axis=-1) if op.dtype.is_complex else tf.sort(
            op.eigvals(), axis=-1)
    return out


# -- each operator's methods ------------------------------------------------------------------

@parity(rtol=2e-4, atol=2e-5)
def test_full_matrix_and_lower_triangular(tf):
    """FullMatrix (real, complex, positive definite through Cholesky) and LowerTriangular."""
    pd = tf.linalg.LinearOperatorFullMatrix(SPD3, is_self_adjoint=True, is_positive_definite=True)
    return {"real": _methods(tf, tf.linalg.LinearOperatorFullMatrix(N3), X32),
            "complex": _methods(tf, tf.linalg.LinearOperatorFullMatrix(C3), XC),
            "pd": _methods(tf, pd, X32), "chol": pd.cholesky().to_dense(), "chol_type": type(pd.cholesky()).__name__,
            "tril": _methods(tf, tf.linalg.LinearOperatorLowerTriangular(N3), X32),
            "rect": _methods(tf, tf.linalg.LinearOperatorFullMatrix(N3[:2]), X32, solve=False, xa=X32[:2])}


@parity(rtol=2e-4, atol=2e-5)
def test_diag_identity_zeros(tf):
    """Diag (batched, complex), Identity, ScaledIdentity, Zeros, and their algebra (Diag @ Diag is a Diag)."""
    d = tf.linalg.LinearOperatorDiag([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]])
    dc = tf.linalg.LinearOperatorDiag(np.array([1 + 1j, 2 - 1j, -3j], np.complex64))
    x2 = np.stack([X32, 2 * X32])
    s = tf.linalg.LinearOperatorScaledIdentity(3, [2.0, -0.5])
    s2 = tf.linalg.LinearOperatorScaledIdentity(3, 2.0)
    i = tf.linalg.LinearOperatorIdentity(3, batch_shape=[2])
    z = tf.linalg.LinearOperatorZeros(3, batch_shape=[2])
    return {"diag": _methods(tf, d, x2), "diag_c": _methods(tf, dc, XC),
            "diag_diag": (d @ d).to_dense(), "diag_diag_type": type(d @ d).__name__,
            "diag_solve_op": d.solve(d).to_dense(), "diag_chol": tf.linalg.LinearOperatorDiag([1.0, 4.0], is_positive_definite=True).cholesky().to_dense(),
            "scaled": _methods(tf, s, x2), "scaled_diag": (s2 @ d).to_dense(), "scaled_diag_type": type(s2 @ d).__name__,
            "identity": _methods(tf, i, x2), "identity_matmul_is": i.matmul(d) is d,
            "zeros": _methods(tf, z, x2, solve=False, eig=False), "zeros_eig": z.eigvals(),
            "zeros_rect": tf.linalg.LinearOperatorZeros(2, 3, is_square=False, is_self_adjoint=False).matmul(X32)}


@parity(rtol=2e-4, atol=2e-5)
def test_householder_permutation(tf):
    """Householder (its own inverse and adjoint) and Permutation (batched perms)."""
    h = tf.linalg.LinearOperatorHouseholder([1.0, -2.0, 0.5])
    p = tf.linalg.LinearOperatorPermutation([[2, 0, 1], [1, 2, 0]])
    return {"householder": _methods(tf, h, X32), "h_inv_is": h.inverse() is h,
            "permutation": _methods(tf, p, np.stack([X32, X32]), eig=False)}


@parity(rtol=5e-4, atol=5e-5)
def test_wrappers_and_blocks(tf):
    """Adjoint, Inversion, Composition, BlockDiag (blockwise list arguments too), BlockLowerTriangular,
    Kronecker."""
    f = tf.linalg.LinearOperatorFullMatrix
    a, b = f(N3[:2, :2] + np.eye(2, dtype=np.float32)), f(N3)
    comp = tf.linalg.LinearOperatorComposition([b, f(SPD3)])
    bd = tf.linalg.LinearOperatorBlockDiag([a, b])
    blt = tf.linalg.LinearOperatorBlockLowerTriangular([[a], [f(N3[:, :2]), b]])
    kr = tf.linalg.LinearOperatorKronecker([a, b])
    x5 = np.concatenate([X32, X32[:2]], 0)
    x6 = np.concatenate([X32, X32], 0)
    return {"adjoint": _methods(tf, tf.linalg.LinearOperatorAdjoint(f(C3)), XC),
            "inversion": _methods(tf, tf.linalg.LinearOperatorInversion(b), X32),
            "composition": _methods(tf, comp, X32), "aat": tf.linalg.LinearOperatorComposition(
                [f(N3, is_non_singular=True), f(N3, is_non_singular=True).H]).is_self_adjoint,
            "block_diag": _methods(tf, bd, x5), "blockwise": bd.matmul([X32[:2], X32]),
            "block_lower": _methods(tf, blt, x5), "blt_inverse_type": type(blt.inverse()).__name__,
            "kronecker": _methods(tf, kr, x6)}


@parity(rtol=5e-4, atol=5e-5)
def test_low_rank_toeplitz_tridiag(tf):
    """LowRankUpdate (Woodbury and Cholesky paths), Toeplitz, Tridiag in its three formats."""
    u = U32
    base = tf.linalg.LinearOperatorDiag([2.0, 3.0, 4.0], is_positive_definite=True)
    lr = tf.linalg.LinearOperatorLowRankUpdate(base, u, diag_update=[0.5, 1.5], is_diag_update_positive=True)
    lr2 = tf.linalg.LinearOperatorLowRankUpdate(tf.linalg.LinearOperatorFullMatrix(N3), u, v=u[::-1])
    tp = tf.linalg.LinearOperatorToeplitz([3.0, 1.0, -0.5], [3.0, 2.0, 0.25])
    sup, main, sub = [1.0, 2.0, 0.0], [5.0, 6.0, 7.0], [0.0, -1.0, -2.0]
    dense = np.diag(main) + np.diag(sup[:-1], 1) + np.diag(sub[1:], -1)
    return {"low_rank_pd": _methods(tf, lr, X32), "low_rank": _methods(tf, lr2, X32),
            "toeplitz": _methods(tf, tp, X32),
            "tri_compact": _methods(tf, tf.linalg.LinearOperatorTridiag([sup, main, sub]), X32),
            "tri_matrix": _methods(tf, tf.linalg.LinearOperatorTridiag(dense.astype(np.float32), "matrix"), X32),
            "tri_sequence": _methods(tf, tf.linalg.LinearOperatorTridiag(
                [np.float32(sup), np.float32(main), np.float32(sub)], "sequence"), X32)}


@parity(rtol=5e-4, atol=5e-5)
def test_circulant(tf):
    """Circulant (complex, and real Hermitian spectrum with float32 input/output), 2D, 3D."""
    spec = np.fft.fft(np.array([4.0, 1.0 + 1j, 0.5, -1j], np.complex64)).astype(np.complex64)
    herm = np.fft.fft(np.array([4.0, 1.0, 0.5, 1.0])).real.astype(np.float32)
    x4 = X4C
    c = tf.linalg.LinearOperatorCirculant(spec)
    r = tf.linalg.LinearOperatorCirculant(herm, input_output_dtype=tf.float32)
    return {"c1": _methods(tf, c, x4), "kernel": c.convolution_kernel(),
            "real": _methods(tf, r, np.real(x4)), "c2": _methods(tf, tf.linalg.LinearOperatorCirculant2D(SPEC2), X6C),
            "c3": _methods(tf, tf.linalg.LinearOperatorCirculant3D(SPEC3), X8C), "c_at_c": type(c @ c).__name__,
            "c_adj_dtype": c.adjoint().dtype.name}


# -- errors ------------------------------------------------------------------------------------

@parity
def test_errors(tf):
    """TF's exception classes for inconsistent hints, bad shapes and dtypes, undefined methods."""
    L = tf.linalg
    m = np.eye(2, dtype=np.float32)
    d = L.LinearOperatorDiag([1.0, 2.0, 3.0])
    return [raises(L.LinearOperatorFullMatrix, m, is_positive_definite=True, is_non_singular=False),
            raises(L.LinearOperatorFullMatrix, m, is_non_singular=True, is_square=False),
            raises(L.LinearOperatorFullMatrix, m, is_self_adjoint=True, is_square=False),
            raises(L.LinearOperatorFullMatrix, [[1, 2], [3, 4]]), raises(L.LinearOperatorFullMatrix, [1.0, 2.0]),
            raises(lambda: L.LinearOperatorFullMatrix(m, is_square=False).is_square),
            raises(L.LinearOperatorDiag, 1.0), raises(L.LinearOperatorDiag, [1.0], is_self_adjoint=False),
            raises(d.matmul, tf.ones([2, 2])), raises(d.matvec, tf.ones([2])),
            raises(d.matmul, tf.ones([3, 1], tf.float16)), raises(d.solve, tf.ones([2, 1])),
            raises(L.LinearOperatorFullMatrix(m[:1]).determinant), raises(L.LinearOperatorFullMatrix(m[:1]).inverse),
            raises(L.LinearOperatorFullMatrix(m).eigvals), raises(L.LinearOperatorFullMatrix(m).cholesky),
            raises(L.LinearOperatorIdentity, 2.5), raises(L.LinearOperatorIdentity, -1),
            raises(L.LinearOperatorIdentity, 2, is_self_adjoint=False), raises(L.LinearOperatorZeros, 2,
                                                                              is_non_singular=True),
            raises(L.LinearOperatorPermutation, [0, 0, 1]), raises(L.LinearOperatorPermutation, [0.0, 1.0]),
            raises(L.LinearOperatorHouseholder, [1.0, 2.0], is_positive_definite=True),
            raises(L.LinearOperatorComposition, []), raises(L.LinearOperatorComposition, [d, L.LinearOperatorDiag(
                np.ones(3, np.complex64))]),
            raises(L.LinearOperatorInversion, L.LinearOperatorFullMatrix(m, is_non_singular=False)),
            raises(L.LinearOperatorToeplitz, [1.0, 2.0], [1.0]), raises(L.LinearOperatorTridiag, m, "banded"),
            raises(L.LinearOperatorBlockLowerTriangular, [[d], [d]]),
            raises(L.LinearOperatorLowRankUpdate, d, np.ones((3, 1), np.float32), is_diag_update_positive=False),
            raises(L.LinearOperatorCirculant, [1.0, 2.0], is_self_adjoint=False),
            raises(L.LinearOperatorDiag([0.0, 1.0]).assert_non_singular),
            raises(L.LinearOperatorDiag([-1.0, 1.0]).assert_positive_definite),
            raises(L.LinearOperatorFullMatrix([[1.0, 2.0], [3.0, 4.0]]).assert_self_adjoint),
            raises(L.LinearOperatorZeros(2).assert_non_singular),
            L.LinearOperatorDiag([1.0, 2.0]).assert_non_singular(),
            raises(L.logdet, d), raises(L.matmul, d, tf.ones([3, 1]), transpose_a=True)]


# -- gradients, compiled steps, training -------------------------------------------------------

def _grad_variables(tf):
    return [tf.Variable(v) for v in ([1.5, -2.0, 3.0], SPD3, U32, [1.0, -2.0, 0.5], [4.0, 1.0, -0.5],
                                     [4.0, 0.5, 0.25], [6.0, 2.0, 3.0, 2.0])]


def _grad_case(tf, variables):
    """One loss through many operators' parameters (Variables), and its gradients."""
    L = tf.linalg
    d, m, u, axis, col, row, spec = variables
    with tf.GradientTape() as tape:
        ops = [L.LinearOperatorDiag(d), L.LinearOperatorFullMatrix(m, is_self_adjoint=True, is_positive_definite=True),
               L.LinearOperatorLowRankUpdate(L.LinearOperatorDiag(d), u),
               L.LinearOperatorHouseholder(axis), L.LinearOperatorToeplitz(col, row),
               L.LinearOperatorKronecker([L.LinearOperatorDiag(d[:2]), L.LinearOperatorFullMatrix(m[:2, :2])])]
        loss = tf.constant(0.0)
        for op in ops:
            x = tf.ones([op.domain_dimension, 2])
            loss += tf.reduce_sum(op.solve(x)) + tf.reduce_sum(op.matmul(x, adjoint=True)) + op.log_abs_determinant()
        circ = L.LinearOperatorCirculant(spec, input_output_dtype=tf.float32)
        loss += tf.reduce_sum(circ.matvec(tf.ones([4]))) + circ.log_abs_determinant() + tf.reduce_sum(
            circ.solve(tf.ones([4, 1])))
    return loss, tape.gradient(loss, variables), [len(o.trainable_variables) for o in ops]


@parity(rtol=5e-4, atol=5e-5, modes=True)
def test_gradients_through_operator_variables(tf):
    """tape.gradient of a loss through Diag, FullMatrix (Cholesky), LowRankUpdate, Householder,
    Toeplitz (FFT), Kronecker and Circulant parameters."""
    return _grad_case(tf, _grad_variables(tf))


@parity(rtol=5e-4, atol=5e-5, modes=True)
def test_gradients_in_tf_function(tf):
    """The same loss and gradients inside tf.function, twice (the second call reuses the trace)."""
    variables = _grad_variables(tf)
    f = tf.function(lambda: _grad_case(tf, variables)[:2])
    return f(), f()


@parity(rtol=1e-3, atol=1e-4, modes=True)
def test_training_a_low_rank_covariance(tf):
    """Fit a diagonal-plus-low-rank covariance to a sample covariance by its Gaussian negative log
    likelihood (log det and solve through Woodbury), plain gradient steps; the loss between steps."""
    rng = np.random.default_rng(11)
    data = (rng.standard_normal((64, 4)) @ np.array([[1.0, 0.5, 0, 0], [0, 1.0, 0.3, 0], [0, 0, 1.0, 0.2],
                                                       [0, 0, 0, 1.0]])).astype(np.float32)
    log_d = tf.Variable(np.zeros(4, np.float32))
    u = tf.Variable((0.1 * rng.standard_normal((4, 2))).astype(np.float32))
    losses = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            cov = tf.linalg.LinearOperatorLowRankUpdate(
                tf.linalg.LinearOperatorDiag(tf.exp(log_d), is_positive_definite=True), u)
            nll = 0.5 * cov.log_abs_determinant() + 0.5 * tf.reduce_mean(
                tf.reduce_sum(data * tf.transpose(cov.solve(tf.transpose(data))), axis=1))
        g_d, g_u = tape.gradient(nll, [log_d, u])
        log_d.assign_sub(0.1 * g_d)
        u.assign_sub(0.1 * g_u)
        losses.append(float(nll.numpy()))
    return losses, log_d, u, cov.is_positive_definite


# -- a user's operator -------------------------------------------------------------------------

@parity(rtol=2e-4, atol=2e-5)
def test_user_subclass(tf):
    """A subclass with only _shape and _matmul gets TF's generic methods; missing _matmul cannot
    be instantiated."""

    class OnesPlusNI(tf.linalg.LinearOperator):
        def __init__(self, n):
            self.n = n
            super().__init__(dtype=tf.float32, is_self_adjoint=True, is_positive_definite=True, name="OnesPlusNI")

        def _shape(self):
            return tf.TensorShape([self.n, self.n])

        def _matmul(self, x, adjoint=False, adjoint_arg=False):
            x = tf.linalg.adjoint(x) if adjoint_arg else x
            return tf.reduce_sum(x, axis=-2, keepdims=True) + self.n * x

    class NoMatmul(tf.linalg.LinearOperator):
        def _shape(self):
            return tf.TensorShape([2, 2])

    op = OnesPlusNI(3)
    return _methods(tf, op, X32), op.name, raises(NoMatmul, tf.float32)


@parity(rtol=2e-4, atol=2e-5)
def test_batch_slicing(tf):
    """op[...] slices the batch dimensions of each parameter (broadcast first), for parameter and
    composite operators; a gradient flows through a sliced Variable parameter."""
    L = tf.linalg
    d = np.arange(1.0, 13.0, dtype=np.float32).reshape(2, 2, 3)
    m = np.stack([N3, 2 * N3])
    diag, full = L.LinearOperatorDiag(d), L.LinearOperatorFullMatrix(m)
    v = tf.Variable(d)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(L.LinearOperatorDiag(v)[1, :1].to_dense())
    return ([diag[1].to_dense(), diag[:, 0].to_dense(), diag[..., 1].to_dense(), full[1].to_dense(),
             L.LinearOperatorToeplitz(np.ones((2, 3), np.float32), [1.0, 2.0, 3.0])[0].to_dense(),
             L.LinearOperatorIdentity(2, batch_shape=[4, 3])[1:3].shape.as_list(),
             L.LinearOperatorScaledIdentity(2, [1.0, 2.0, 3.0])[::2].to_dense(),
             L.LinearOperatorComposition([full, full])[0].to_dense(),
             L.LinearOperatorLowRankUpdate(L.LinearOperatorDiag(np.ones((2, 3), np.float32)),
                                           np.ones((2, 3, 1), np.float32))[1].to_dense()],
            tape.gradient(y, v))


GP_X = np.linspace(0.0, 1.0, 4).astype(np.float32)
GP_T = np.linspace(0.0, 2.0, 3).astype(np.float32)
GP_Y = np.sin(3 * GP_X[:, None] + GP_T[None, :]).reshape(-1, 1).astype(np.float32)


@parity(needs="keras.optimizers.legacy.Adam", rtol=2e-3, atol=2e-4, modes=True)
def test_kronecker_gp_with_adam(tf):
    """A Gaussian process on a space x time grid: a Kronecker covariance of two RBF kernels plus
    noise (LowRankUpdate of the noise diagonal), fitted by its marginal likelihood with Adam in a
    tf.function step; the operator is rebuilt from Variables each step."""
    log_ls = tf.Variable([0.0, 0.0])
    log_noise = tf.Variable(-1.0)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def rbf(x, log_l):
        d = x[:, None] - x[None, :]
        return tf.exp(-0.5 * tf.square(d) / tf.exp(2.0 * log_l))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            k = tf.linalg.LinearOperatorKronecker([
                tf.linalg.LinearOperatorFullMatrix(rbf(GP_X, log_ls[0]) + 1e-3 * tf.eye(4), is_self_adjoint=True,
                                                   is_positive_definite=True),
                tf.linalg.LinearOperatorFullMatrix(rbf(GP_T, log_ls[1]) + 1e-3 * tf.eye(3), is_self_adjoint=True,
                                                   is_positive_definite=True)])
            cov = tf.linalg.LinearOperatorFullMatrix(k.to_dense() + tf.exp(log_noise) * tf.eye(12),
                                                     is_self_adjoint=True, is_positive_definite=True)
            nll = 0.5 * cov.log_abs_determinant() + 0.5 * tf.reduce_sum(GP_Y * cov.solve(GP_Y))
            nll += 0.01 * k.log_abs_determinant() + 0.01 * tf.reduce_sum(k.solvevec(GP_Y[:, 0]))   # (a prior)
        grads = tape.gradient(nll, [log_ls, log_noise])
        opt.apply_gradients(zip(grads, [log_ls, log_noise]))
        return nll

    losses = [step() for _ in range(4)]
    return losses, log_ls, log_noise
