"""Linear algebra (``tf.linalg``): batched over leading dimensions, as TF.

``eigh`` / ``eigvalsh`` read only the lower triangle of their input (TF's
kernels do), so their gradient is lower-triangular, ``tril(G + G^T)`` with
the diagonal halved, as TF's (TF_SEMANTICS 19); a complex Hermitian input's
diagonal is read as real, so its gradient's diagonal is real.  ``svd`` returns
``(s, u, v)`` with ``v`` not transposed, as TF.

Gradients follow TF's kernels where JAX's rules differ:

* the eigenvector and singular-vector derivatives take TF's "safe reciprocal"
  ``x / (x^2 + 1e-20)`` of the value gaps (and of ``s``), so tied values (an
  identity) contribute 0 where JAX's ``1 / 0`` gives NaN (``custom_jvp`` rules in
  ``_grads``: forward mode works); ``svd(full_matrices=True)`` of a matrix with one
  more row than columns, or one more column, is differentiable, as TF's (JAX has no
  rule for full factors; at ``|m - n| > 1`` TF and JAX raise NotImplementedError);
* ``logdet`` is its Cholesky factor's, reading the lower triangle as TF does;
* where TF defines no gradient (``lstsq(fast=False)``, ``qr(full_matrices=True)``
  of a tall matrix) the gradient raises TF's error class;
* ``svd``'s kernel and its rules (the full factors of a matrix one row or column off
  square included) are in ``linalg_svd``.

Eigen- and singular vectors are LAPACK's, so their signs may differ from TF's
(Eigen's): sign-free quantities (projections, ``u @ v^T``) agree.
"""
import collections
from typing import Union

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind
from ..core.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import _grads as G
from ._registry import check_binary, check_float, dtype_of, no_half, op_error, prim, static_axis, tf_types
from .array import einsum, tensordot  # noqa: F401
from .checks import VALUE_CHECKS, require, traced
from .linalg_svd import _off_diagonal, _safe_reciprocal, _svd
from .math import matmul  # noqa: F401
from .reduce import l2_normalize  # noqa: F401

_TENSORISH = (Tensor, Variable)


#: TF's namedtuples for the results of ``slogdet`` and ``qr``.
LogMatrixDeterminant = collections.namedtuple("LogMatrixDeterminant", ["sign", "log_abs_determinant"])
Qr = collections.namedtuple("Qr", ["q", "r"])


def _shape(x):
    # (``_meta``: a pending value's shape is known without computing it)
    return tuple(x._meta.shape) if isinstance(x, _TENSORISH) else tuple(np.shape(x))


def _bad(op_type, msg):
    return InvalidArgumentError(None, None, f"{msg} [Op:{op_type}]")


def _square(x, op_type, arg="input"):
    check_float(x, op_type, "float", arg)
    s = _shape(x)
    if len(s) < 2 or s[-1] != s[-2]:
        raise _bad(op_type, f"Input matrix must be square (argument `{arg}`): got shape {list(s)}")


def _call(p, op_type, *args, **static):
    try:
        return bind(p, *args, **static)
    except (TypeError, ValueError) as e:
        raise op_error(e, op_type) from e


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def _matvec(a, b, *, transpose_a, adjoint_a):
    if transpose_a:
        a = _mT(a)
    if adjoint_a:
        a = jnp.conj(_mT(a))
    return jnp.einsum("...ij,...j->...i", a, b)


_MATVEC = prim("MatVec", _matvec)


@tf_types("MatVec")
def matvec(a, b, transpose_a=False, adjoint_a=False, a_is_sparse=False, b_is_sparse=False, name=None):
    """``tf.linalg.matvec``: ``a [..., M, N] @ b [..., N] -> [..., M]``."""
    check_binary(a, b, "MatVec")
    if len(_shape(a)) < 2 or len(_shape(b)) < 1:
        raise _bad("MatVec", f"`a` must be rank >= 2 and `b` rank >= 1; got {list(_shape(a))}, "
                   f"{list(_shape(b))}")
    return _call(_MATVEC, "MatVec", a, b, transpose_a=bool(transpose_a), adjoint_a=bool(adjoint_a))


def _inv(x, *, adjoint):
    x = jnp.conj(_mT(x)) if adjoint else x
    if x.dtype == jnp.float16:  # TF has a float16 kernel, LAPACK has none: invert in float32
        return jnp.linalg.inv(x.astype(jnp.float32)).astype(jnp.float16)
    return jnp.linalg.inv(x)


_INV = prim("MatrixInverse", _inv)


@jax.jit
def _invertible(x):
    """TF's CPU test of ``inv`` / ``solve``: every pivot of the partially pivoted LU is nonzero
    (over the whole batch)."""
    x = x.astype(jnp.float32) if x.dtype == jnp.float16 else x
    lu = jax.lax.linalg.lu(x)[0]
    return jnp.all(jnp.abs(jnp.diagonal(lu, axis1=-2, axis2=-1)) > 0)


def _require_invertible(x, message, op_type):
    """Value-check mode: a singular ``x`` raises TF's InvalidArgumentError (eager now, traced
    after the step)."""
    v = x._value if isinstance(x, _TENSORISH) else jnp.asarray(x)
    ok = _invertible(v)
    if traced(ok):
        require(ok, message)
    elif not bool(ok):
        raise _bad(op_type, message)


@tf_types("MatrixInverse")
def inv(input, adjoint=False, name=None):
    """``tf.linalg.inv`` (a singular input gives inf/NaN values, as TF on GPU; TF's CPU kernel
    raises, as tapejax does in the value-check mode, ``ops.checks``)."""
    _square(input, "MatrixInverse")
    if dtype_of(input) == _dtypes.bfloat16._np:
        no_half(input, "MatrixInverse", "input")
    if VALUE_CHECKS[0]:
        _require_invertible(input, "Input is not invertible.", "MatrixInverse")
    return bind(_INV, input, adjoint=bool(adjoint))


def _det_vjp_checked(x, *, singular):
    """``det`` whose gradient does TF's check (its gradient inverts the matrix): ``singular``
    True (known from the eager value) raises when the gradient is traced; False (a traced
    input) puts a functionalized check in the gradient."""
    @jax.custom_vjp
    def f(x):
        return jnp.linalg.det(x)

    def fwd(x):
        return jnp.linalg.det(x), x

    def bwd(x, g):
        if singular:
            raise _bad("MatrixInverse", "Input is not invertible.")
        require(_invertible(x), "Input is not invertible.")
        return jax.vjp(jnp.linalg.det, x)[1](g)

    f.defvjp(fwd, bwd)
    return f(x)


def _det(x, *, grad_check=None):
    if x.dtype in (jnp.float16, jnp.bfloat16):   # (a GPU's LU, which the gradient uses, has no half kernel)
        return _det(x.astype(jnp.float32), grad_check=grad_check).astype(x.dtype)
    if grad_check is None:
        return jnp.linalg.det(x)
    return _det_vjp_checked(x, singular=grad_check == "singular")


_DET = prim("MatrixDeterminant", _det)


@tf_types("MatrixDeterminant")
def det(input, name=None):
    """``tf.linalg.det``.  At a singular matrix the gradient is JAX's (the adjugate); TF's CPU
    kernel raises there, as tapejax does in the value-check mode (``ops.checks``)."""
    _square(input, "MatrixDeterminant")
    if VALUE_CHECKS[0]:
        v = input._value if isinstance(input, _TENSORISH) else jnp.asarray(input)
        ok = _invertible(v)
        check = "traced" if traced(ok) else (None if bool(ok) else "singular")
        if check is not None:
            return bind(_DET, input, grad_check=check)
    return bind(_DET, input)


def _slogdet(x):
    s, l = jnp.linalg.slogdet(x)
    return s, l.astype(x.dtype)   # complex input: a complex log|det| (zero imaginary part), as TF


_SLOGDET = prim("LogMatrixDeterminant", _slogdet, multiple_results=True, pure_results=True)


@tf_types("LogMatrixDeterminant")
def slogdet(input, name=None):
    """``tf.linalg.slogdet``: ``(sign, log|det|)``."""
    _square(input, "LogMatrixDeterminant")
    no_half(input, "LogMatrixDeterminant", "input")
    return LogMatrixDeterminant(*bind(_SLOGDET, input))


def _logdet(x):
    # TF's logdet is its Cholesky's: the value from the lower triangle, the gradient symmetric
    c = _cholesky(x)
    return 2.0 * jnp.sum(jnp.log(jnp.real(jnp.diagonal(c, axis1=-2, axis2=-1))), axis=-1)


_LOGDET = prim("LogDet", _logdet)


@tf_types("LogDet")
def logdet(matrix, name=None):
    """``tf.linalg.logdet`` of a Hermitian positive definite matrix (through its Cholesky factor, so,
    as TF's, it reads the lower triangle)."""
    _square(matrix, "LogDet", "matrix")
    no_half(matrix, "LogDet", "matrix")
    return bind(_LOGDET, matrix)


def _lower_sym(x):
    # (a complex diagonal's imaginary part is not read, as LAPACK's and TF's kernels: the gradient
    # of a Hermitian eigh has a real diagonal, TF's 0.5 * diag(G + G^H))
    lo = jnp.tril(x, -1)
    d = jnp.diagonal(x, axis1=-2, axis2=-1)
    d = jnp.real(d).astype(x.dtype) if jnp.iscomplexobj(x) else d
    return lo + jnp.conj(_mT(lo)) + d[..., None] * jnp.eye(x.shape[-1], dtype=x.dtype)


def _cholesky(x):
    # Values from the lower triangle (TF's kernel); the gradient symmetric (TF's CholeskyGrad).
    sym = (x + jnp.conj(_mT(x))) / 2
    return jnp.linalg.cholesky(sym + jax.lax.stop_gradient(_lower_sym(x) - sym), symmetrize_input=False)


_CHOLESKY = prim("Cholesky", _cholesky)


@tf_types("Cholesky")
def cholesky(input, name=None):
    """``tf.linalg.cholesky``: lower factor; reads the lower triangle (non-PD input gives NaN); the
    gradient is symmetric, as TF's."""
    _square(input, "Cholesky")
    no_half(input, "Cholesky", "input")
    return bind(_CHOLESKY, input)


def _cho_solve(chol, rhs):
    y = jax.scipy.linalg.solve_triangular(chol, rhs, lower=True)
    return jax.scipy.linalg.solve_triangular(jnp.conj(_mT(chol)), y, lower=False)


_CHO_SOLVE = prim("CholeskySolve", _cho_solve)


@tf_types("CholeskySolve")
def cholesky_solve(chol, rhs, name=None):
    """``tf.linalg.cholesky_solve``: solve ``A X = rhs`` given ``chol = cholesky(A)``."""
    check_binary(chol, rhs, "CholeskySolve")
    _square(chol, "CholeskySolve", "chol")
    no_half(chol, "CholeskySolve", "chol", bf16_error=NotFoundError)  # TF: no bf16 triangular solve
    return _call(_CHO_SOLVE, "CholeskySolve", chol, rhs)


_SOLVE = prim("MatrixSolve", lambda a, b, *, adjoint: jnp.linalg.solve(jnp.conj(_mT(a)) if adjoint else a, b))


@tf_types("MatrixSolve")
def solve(matrix, rhs, adjoint=False, name=None):
    """``tf.linalg.solve``: ``matrix [..., M, M] X = rhs [..., M, K]``."""
    check_binary(matrix, rhs, "MatrixSolve")
    _square(matrix, "MatrixSolve", "matrix")
    no_half(matrix, "MatrixSolve", "matrix")
    if len(_shape(rhs)) < 2 or _shape(rhs)[-2] != _shape(matrix)[-1]:
        raise _bad("MatrixSolve", f"Input matrix and right-hand side must have the same number of rows: "
                   f"{list(_shape(matrix))} vs {list(_shape(rhs))} (argument `rhs`)")
    if VALUE_CHECKS[0]:   # opt-in: TF's CPU kernel rejects a singular matrix (JAX gives inf/NaN)
        _require_invertible(matrix, "Input matrix is not invertible.", "MatrixSolve")
    return _call(_SOLVE, "MatrixSolve", matrix, rhs, adjoint=bool(adjoint))


def _tri_solve(a, b, *, lower, adjoint):
    a = jnp.tril(a) if lower else jnp.triu(a)
    return jax.scipy.linalg.solve_triangular(a, b, lower=lower, trans="C" if adjoint else 0)


_TRI_SOLVE = prim("MatrixTriangularSolve", _tri_solve)


@tf_types("MatrixTriangularSolve")
def triangular_solve(matrix, rhs, lower=True, adjoint=False, name=None):
    """``tf.linalg.triangular_solve``: reads only the ``lower`` (or upper) triangle of ``matrix``."""
    check_binary(matrix, rhs, "MatrixTriangularSolve")
    _square(matrix, "MatrixTriangularSolve", "matrix")
    return _call(_TRI_SOLVE, "MatrixTriangularSolve", matrix, rhs, lower=bool(lower), adjoint=bool(adjoint))


def _raising_derivative(fn, error):
    """``fn`` whose derivative, when taken (reverse or forward mode), raises ``error(primals)``: where
    TF's gradient function raises."""
    f = jax.custom_jvp(fn)

    def jvp(primals, tangents):
        raise error(*primals)

    f.defjvp(jvp)
    return f


def _lstsq_normal(a, b, *, l2):
    ah = jnp.conj(_mT(a))
    m, n = a.shape[-2], a.shape[-1]
    if m >= n:
        gram = ah @ a + l2 * jnp.eye(n, dtype=a.dtype)
        return jnp.linalg.solve(gram, ah @ b)
    gram = a @ ah + l2 * jnp.eye(m, dtype=a.dtype)
    return ah @ jnp.linalg.solve(gram, b)


_lstsq_slow = _raising_derivative(lambda a, b: _lstsq_normal(a, b, l2=0.0),
                                 lambda a, b: ValueError("Gradient not defined for fast=False"))


def _lstsq(a, b, *, l2, fast=True):
    # (TF's gradient raises for fast=False, forward mode too; the values are the normal equations')
    return _lstsq_normal(a, b, l2=l2) if fast else _lstsq_slow(a, b)


_LSTSQ = prim("MatrixSolveLs", _lstsq)


@tf_types("MatrixSolveLs")
def lstsq(matrix, rhs, l2_regularizer=0.0, fast=True, name=None):
    """``tf.linalg.lstsq`` (``fast=True`` path: regularised normal equations, as TF)."""
    check_binary(matrix, rhs, "MatrixSolveLs")
    check_float(matrix, "MatrixSolveLs", "float", "matrix")
    no_half(matrix, "MatrixSolveLs", "matrix")
    return _call(_LSTSQ, "MatrixSolveLs", matrix, rhs, l2=float(l2_regularizer), fast=bool(fast))


@jax.custom_jvp
def _eigh_tf(a):
    return tuple(jnp.linalg.eigh(a, symmetrize_input=False))


@_eigh_tf.defjvp
def _eigh_tf_jvp(primals, tangents):
    # JAX's rule with TF's safe reciprocal of the eigenvalue gaps (its transpose is TF's gradient)
    (a,), (da,) = primals, tangents
    w, v = _eigh_tf(a)
    vdav = jnp.conj(_mT(v)) @ da @ v
    f = _off_diagonal(_safe_reciprocal(w[..., None, :] - w[..., :, None])).astype(v.dtype)
    dw = jnp.real(jnp.diagonal(vdav, axis1=-2, axis2=-1)).astype(w.dtype)
    return (w, v), (dw, v @ (f * vdav))


def _eigh(x):
    return _eigh_tf(_lower_sym(x))


_EIGH = prim("SelfAdjointEigV2", _eigh, multiple_results=True, pure_results=True)
_EIGVALSH = prim("SelfAdjointEigV2Values", lambda x: jnp.linalg.eigvalsh(_lower_sym(x)))


@tf_types("SelfAdjointEigV2")
def eigh(tensor, name=None):
    """``tf.linalg.eigh``: ``(eigenvalues ascending, eigenvectors)``; reads the lower triangle."""
    _square(tensor, "SelfAdjointEigV2", "tensor")
    no_half(tensor, "SelfAdjointEigV2", "tensor")
    return tuple(bind(_EIGH, tensor))


@tf_types("SelfAdjointEigV2Values")
def eigvalsh(tensor, name=None):
    """``tf.linalg.eigvalsh``: eigenvalues ascending; reads the lower triangle."""
    _square(tensor, "SelfAdjointEigV2", "tensor")
    no_half(tensor, "SelfAdjointEigV2Values", "tensor")
    return bind(_EIGVALSH, tensor)


_SVD = prim("Svd", _svd, multiple_results=True, pure_results=True)


@tf_types("Svd")
def svd(tensor, full_matrices=False, compute_uv=True, name=None):
    """``tf.linalg.svd``: ``(s, u, v)`` with ``tensor = u @ diag(s) @ adjoint(v)``; only ``s`` when
    ``compute_uv=False``."""
    check_float(tensor, "Svd", "float", "tensor")
    no_half(tensor, "Svd", "tensor")
    if len(_shape(tensor)) < 2:
        raise _bad("Svd", f"Shape must be at least rank 2 but is rank {len(_shape(tensor))} (argument "
                   f"`tensor`)")
    out = bind(_SVD, tensor, full_matrices=bool(full_matrices), compute_uv=bool(compute_uv))
    return tuple(out) if compute_uv else out[0]


def _qr_grad_error(x):
    m, n = x.shape[-2:]
    return NotImplementedError(f"QrGrad not implemented when nrows > ncols and full_matrices is true. Received "
                               f"r.shape={(m, n)} with nrows={m}and ncols={n}.")


_qr_full_tall = _raising_derivative(lambda x: tuple(jnp.linalg.qr(x, mode="complete")), _qr_grad_error)


def _qr(x, *, full):
    if x.dtype == jnp.float16:  # TF has a float16 kernel, LAPACK has none: factor in float32
        return tuple(a.astype(jnp.float16) for a in _qr(x.astype(jnp.float32), full=full))
    if full and x.shape[-2] > x.shape[-1]:   # (TF has no gradient there; JAX has one)
        return _qr_full_tall(x)
    return tuple(jnp.linalg.qr(x, mode="complete" if full else "reduced"))


_QR = prim("Qr", _qr, multiple_results=True, pure_results=True)


@tf_types("Qr")
def qr(input, full_matrices=False, name=None):
    """``tf.linalg.qr``: ``(q, r)``."""
    check_float(input, "Qr", "float", "input")
    if dtype_of(input) == _dtypes.bfloat16._np:
        no_half(input, "Qr", "input")
    return Qr(*bind(_QR, input, full=bool(full_matrices)))


_TRACE = prim("Trace", lambda x: jnp.trace(x, axis1=-2, axis2=-1))


@tf_types("Trace")
def trace(x, name=None):
    """``tf.linalg.trace``: sum of the main diagonal of the innermost matrices."""
    if len(_shape(x)) < 2:
        raise ValueError(f"Argument `x` must be at least rank 2; got shape {list(_shape(x))}")
    return bind(_TRACE, x)


def _norm(x, *, ord, axis, keepdims):
    if ord == "euclidean":
        s = jnp.sum(jnp.square(jnp.abs(x)) if jnp.iscomplexobj(x) else x * x, axis=axis, keepdims=True)
        r = G.sqrt(s)
    elif isinstance(axis, tuple) and len(axis) == 2 and ord in (1, np.inf):
        # TF's formula, the largest column (1) or row (inf) sum of |x|, with abs'(0) = 0 (jnp's is 1)
        s_ax, m_ax = axis if ord == 1 else axis[::-1]
        r = jnp.max(jnp.sum(G.tf_abs(x), axis=s_ax, keepdims=True), axis=m_ax, keepdims=True)
    elif isinstance(axis, tuple) and len(axis) == 2:
        r = jnp.linalg.norm(x, ord=ord, axis=axis, keepdims=True)
    elif ord == 1:
        r = jnp.sum(G.tf_abs(x), axis=axis, keepdims=True)
    elif ord == np.inf:
        r = jnp.max(G.tf_abs(x), axis=axis, keepdims=True)
    else:
        r = jnp.power(jnp.sum(jnp.power(G.tf_abs(x), ord), axis=axis, keepdims=True), 1.0 / ord)
    if not keepdims:
        r = jnp.squeeze(r, axis=tuple(range(x.ndim)) if axis is None else axis)
    return r


_NORM = prim("Norm", _norm)


@tf_types("Norm")
def norm(tensor, ord: Union[str, int, float] = "euclidean", axis=None, keepdims=None, name=None):
    """``tf.norm`` / ``tf.linalg.norm``: vector norms (``'euclidean'``, 1, 2, inf, p > 0) over one
    axis or all; matrix norms (``'fro'``, 1, 2 (spectral, through the SVD), inf, ``'euclidean'``)
    over two axes.  The gradient
    of the euclidean norm at 0 is NaN (as TF)."""
    check_float(tensor, "Norm", "float", "tensor")
    ax = static_axis(axis)
    if isinstance(ax, int):
        ax = (ax,)
    if ax is not None:
        nd = len(_shape(tensor))
        for a in ax:   # (TF's Sum kernel: wrapping an axis would take the norm over another one)
            if not -nd <= a < nd:
                raise InvalidArgumentError(None, None, f"Invalid reduction dimension ({a} for input with {nd} "
                                           f"dimension(s)) (argument `axis`) [Op:Norm]")
        ax = tuple(a % nd for a in ax)
    if ord == "fro":
        if ax is None or len(ax) != 2:   # (TF: 'fro' is a matrix norm, over a pair of axes)
            raise ValueError(f"'ord' must be a supported vector norm, got {ord}.")
        ord = "euclidean"
    if ord != "euclidean" and not (isinstance(ord, (int, float)) and ord > 0):
        raise ValueError(f"'ord' must be a supported vector norm, got {ord}.")
    if ax is not None and len(ax) > 2:
        raise ValueError(f"'axis' must be None, an integer, or a tuple of 2 unique integers, got {axis}")
    o = "euclidean" if ord == 2 and (ax is None or len(ax) == 1) else ord
    o = float(o) if o != "euclidean" and not isinstance(o, int) else o
    return bind(_NORM, tensor, ord=o, axis=ax, keepdims=bool(keepdims))


_CROSS = prim("Cross", lambda a, b: jnp.cross(a, b))


@tf_types("Cross")
def cross(a, b, name=None):
    """``tf.linalg.cross`` of 3-vectors (innermost dimension).  TF's kernel does not broadcast: the
    shapes must be equal (InvalidArgumentError), the innermost size 3 (FailedPreconditionError)."""
    check_binary(a, b, "Cross")
    sa, sb = _shape(a), _shape(b)
    if sa != sb:
        raise _bad("Cross", f"Both inputs must be of same shape: {list(sa)} vs. {list(sb)}")
    if not sa:
        raise _bad("Cross", "Input must be at least 1D[]")
    if sa[-1] != 3:
        raise FailedPreconditionError(None, None, "Cross-products are only defined for 3-element vectors. "
                                      "[Op:Cross]")
    return _call(_CROSS, "Cross", a, b)


def _pinv(a, *, rcond):
    return jnp.linalg.pinv(a, rtol=rcond)


_PINV = prim("Pinv", _pinv)


@tf_types("Pinv")
def pinv(a, rcond=None, validate_args=False, name=None):
    """``tf.linalg.pinv`` (singular values below ``rcond * max(s)`` are dropped; default
    ``10 * max(m, n) * eps``, as TF).

    In TF's order: the default ``rcond`` first, from NumPy's ``finfo`` of the dtype (which
    refuses bfloat16 before ml_dtypes 0.7: NumPy's ValueError, as TF's), then the Svd kernel's
    dtype check (no half kernels: float16 NotFoundError, bfloat16 InvalidArgumentError)."""
    check_float(a, "Pinv", "float", "a")
    s = _shape(a)
    if rcond is None:
        dt = dtype_of(a)
        rcond = 10.0 * max(s[-2:]) * float(np.finfo(dt if dt is not None else np.asarray(a).dtype).eps)
    no_half(a, "Pinv", "a")
    return bind(_PINV, a, rcond=float(rcond))


_EXPM = prim("MatrixExponential", jax.scipy.linalg.expm)


@tf_types("MatrixExponential")
def expm(input, name=None):
    """``tf.linalg.expm``: matrix exponential."""
    _square(input, "MatrixExponential")
    no_half(input, "MatrixExponential", "input", bf16_error=ValueError)
    return bind(_EXPM, input)


__all__ = ["matmul", "matvec", "inv", "det", "slogdet", "logdet", "cholesky", "cholesky_solve", "solve", "triangular_solve", "lstsq", "eigh", "eigvalsh", "svd", "qr", "trace", "norm", "cross", "pinv", "expm", "einsum", "tensordot", "l2_normalize"]
