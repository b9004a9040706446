"""The rest of ``tf.linalg`` that runs on JAX: transposes and diagonals of any rank, LU
factorizations, ``matrix_rank``, ``normalize``, general eigendecompositions (CPU: XLA has the
kernel there only), tridiagonal and banded solvers, ``eigh_tridiagonal`` and the real matrix square
root (``sqrtm``, by a Denman-Beavers iteration, so it is differentiable).  Gradients are JAX's of
the same functions (TF's rules where they are defined: the solvers); ``lu`` has none in TF, so a
gradient through its factors raises TF's LookupError."""
import collections

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core import dtypes as _dtypes
from ..core.bind import bind
from ..core.errors import InvalidArgumentError
from ._registry import _bad, _call, _shape, check_binary, check_float, dtype_of, no_half, prim, tf_types
from .array import eye as _eye


def eye(num_rows, num_columns=None, batch_shape=None, dtype=_dtypes.float32, name=None):
    """``tf.linalg.eye`` (``tf.eye``)."""
    return _eye(num_rows, num_columns, batch_shape, dtype)


_ADJOINT = prim("Adjoint", lambda x, *, conj: jnp.conj(jnp.swapaxes(x, -1, -2)) if conj else jnp.swapaxes(x, -1, -2))


@tf_types("Adjoint")
def adjoint(matrix, name=None):
    """``tf.linalg.adjoint``: the conjugate transpose of the last two dimensions."""
    return _call(_ADJOINT, "Adjoint", matrix, conj=True)


@tf_types("Adjoint")
def matrix_transpose(a, name="matrix_transpose", conjugate=False):
    """``tf.linalg.matrix_transpose``: transpose the last two dimensions (conjugate on request)."""
    if len(_shape(a)) < 2:
        raise ValueError(f"Argument `a` should be a (batch) matrix with rank >= 2; got shape {list(_shape(a))}")
    return _call(_ADJOINT, "Adjoint", a, conj=bool(conjugate))


def _set_diag(x, d, *, k):
    n, m = x.shape[-2:]
    i = jnp.arange(n)[:, None]
    j = jnp.arange(m)[None, :]
    mask = (j - i) == k
    pos = jnp.minimum(i, j) if k >= 0 else j
    full = jnp.take_along_axis(jnp.broadcast_to(d[..., None, :], x.shape[:-2] + (n, d.shape[-1])),
                               jnp.broadcast_to(jnp.clip(pos, 0, d.shape[-1] - 1), x.shape[:-2] + (n, m)), axis=-1)
    return jnp.where(mask, full, x)


_SET_DIAG = prim("MatrixSetDiagV3", _set_diag)


@tf_types("MatrixSetDiagV3")
def set_diag(input, diagonal, name="set_diag", k=0, align="RIGHT_LEFT"):  # noqa: A002
    """``tf.linalg.set_diag``: the last two dimensions' ``k``-th diagonal replaced by ``diagonal``."""
    check_binary(input, diagonal, "MatrixSetDiagV3")
    if not isinstance(k, (int, np.integer)):
        raise _bad("MatrixSetDiagV3", "only a single diagonal (an int `k`) is supported here")
    return _call(_SET_DIAG, "MatrixSetDiagV3", input, diagonal, k=int(k))


_TENSOR_DIAG = prim("Diag", lambda d: (jnp.eye(d.size, dtype=d.dtype) * d.reshape(-1)).reshape(d.shape + d.shape))
_TENSOR_DIAG_PART = prim("DiagPart", lambda x: jnp.diagonal(x.reshape(int(np.prod(x.shape[:x.ndim // 2])), -1))
                         .reshape(x.shape[:x.ndim // 2]))


@tf_types("Diag")
def tensor_diag(diagonal, name=None):
    """``tf.linalg.tensor_diag``: ``out[i..., i...] = diagonal[i...]`` (rank doubled)."""
    return _call(_TENSOR_DIAG, "Diag", diagonal)


@tf_types("DiagPart")
def tensor_diag_part(input, name=None):  # noqa: A002
    """``tf.linalg.tensor_diag_part``: the inverse of ``tensor_diag`` (an even rank, matching halves)."""
    s = _shape(input)
    if len(s) % 2 or s[:len(s) // 2] != s[len(s) // 2:]:
        raise _bad("DiagPart", f"input must have an even rank and matching halves; got shape {list(s)}")
    return _call(_TENSOR_DIAG_PART, "DiagPart", input)


def normalize(tensor, ord="euclidean", axis=None, name=None):  # noqa: A002
    """``tf.linalg.normalize``: ``(tensor / norm, norm)`` with ``tf.norm``'s ``ord`` and ``axis``."""
    from .linalg import norm
    n = norm(tensor, ord=ord, axis=axis, keepdims=True)
    return tensor / n, n


normalize._tf_types = ("Norm",)

_RANK = prim("MatrixRank", lambda x, *, tol: jnp.sum(jnp.linalg.svd(x, compute_uv=False) > (
    tol if tol is not None else jnp.max(jnp.linalg.svd(x, compute_uv=False), -1, keepdims=True)
    * max(x.shape[-2:]) * jnp.finfo(x.dtype).eps), -1).astype(jnp.int32), differentiable=False)


@tf_types("MatrixRank")
def matrix_rank(a, tol=None, validate_args=False, name=None):
    """``tf.linalg.matrix_rank``: singular values above ``tol`` (default ``max(s) * max(m, n) * eps``)."""
    check_float(a, "MatrixRank", "float", "a")
    no_half(a, "MatrixRank", "a")   # (TF: its Svd has no half kernel)
    return _call(_RANK, "MatrixRank", a, tol=None if tol is None else float(tol))


@jax.custom_vjp
def _lu(x):
    lu_, piv, perm = lax.linalg.lu(x)
    return lu_, perm.astype(jnp.int32)


def _lu_bwd(_, g):
    raise LookupError("gradient registry has no entry for: Lu")


# TF registers no gradient for Lu: a gradient through ``lu``'s factors raises TF's LookupError
# (one that does not reach them, as through ``lu_reconstruct`` of a constant, never asks)
_lu.defvjp(lambda x: (_lu(x), None), _lu_bwd)
_LU = prim("Lu", _lu, multiple_results=True, pure_results=True)


#: ``(lu, p)`` of ``lu``: TF's namedtuple.
Lu = collections.namedtuple("Lu", ["lu", "p"])


@tf_types("Lu")
def lu(input, output_idx_type="int32", name=None):  # noqa: A002
    """``tf.linalg.lu``: ``(lu, p)``: L (unit lower) and U packed, and the row permutation."""
    check_float(input, "Lu", "float", "input")
    no_half(input, "Lu", "input")
    return Lu(*_call(_LU, "Lu", input))


def _lu_solve(lu_, perm, rhs):
    b = jnp.take_along_axis(rhs, jnp.broadcast_to(perm[..., :, None], rhs.shape[:-1] + (1,)).astype(jnp.int32)
                            if rhs.ndim > 1 else perm, axis=-2) if rhs.ndim > 1 else rhs[perm]
    y = lax.linalg.triangular_solve(lu_, b, left_side=True, lower=True, unit_diagonal=True)
    return lax.linalg.triangular_solve(lu_, y, left_side=True, lower=False)


_LU_SOLVE = prim("LuSolve", lambda lu_, perm, rhs: _lu_solve(lu_, perm, rhs))


@tf_types("LuSolve")
def lu_solve(lower_upper, perm, rhs, validate_args=False, name=None):
    """``tf.linalg.lu_solve``: solve ``A x = rhs`` from ``lu``'s factors."""
    return _call(_LU_SOLVE, "LuSolve", lower_upper, perm, rhs)


def _lu_reconstruct(lu_, perm):
    n = lu_.shape[-1]
    low = jnp.tril(lu_, -1) + jnp.eye(n, dtype=lu_.dtype)
    a = low @ jnp.triu(lu_)
    inv = jnp.argsort(perm, axis=-1)
    return jnp.take_along_axis(a, jnp.broadcast_to(inv[..., :, None], a.shape), axis=-2)


_LU_RECON = prim("LuReconstruct", _lu_reconstruct)


@tf_types("LuReconstruct")
def lu_reconstruct(lower_upper, perm, validate_args=False, name=None):
    """``tf.linalg.lu_reconstruct``: the matrix ``lu`` factored."""
    return _call(_LU_RECON, "LuReconstruct", lower_upper, perm)


def lu_matrix_inverse(lower_upper, perm, validate_args=False, name=None):
    """``tf.linalg.lu_matrix_inverse``: the inverse from ``lu``'s factors."""
    n = _shape(lower_upper)[-1]
    ident = _eye(n, batch_shape=_shape(lower_upper)[:-2], dtype=_dtypes.as_dtype(dtype_of(lower_upper)))
    return lu_solve(lower_upper, perm, ident)


lu_matrix_inverse._tf_types = ("LuSolve",)

_EIG = prim("Eig", lambda x: tuple(jnp.linalg.eig(x)), multiple_results=True, pure_results=True)
_EIGVALS = prim("EigVals", lambda x: jnp.linalg.eigvals(x))


@tf_types("Eig")
def eig(tensor, name=None):
    """``tf.linalg.eig``: ``(eigenvalues, eigenvectors)`` of a general square matrix, complex (CPU only)."""
    check_float(tensor, "Eig", "float", "tensor")
    no_half(tensor, "Eig", "tensor")   # (TF 2.21: an UnboundLocalError in its Python layer, not copied)
    return tuple(_call(_EIG, "Eig", tensor))


@tf_types("EigVals")
def eigvals(tensor, name=None):
    """``tf.linalg.eigvals``: the complex eigenvalues of a general square matrix (CPU only)."""
    check_float(tensor, "Eig", "float", "tensor")
    no_half(tensor, "EigVals", "tensor")
    return _call(_EIGVALS, "EigVals", tensor)


def _tri_parts(diagonals, fmt):
    if fmt == "compact":
        return diagonals[..., 0, :], diagonals[..., 1, :], diagonals[..., 2, :]
    if fmt == "sequence":
        return diagonals
    n = diagonals.shape[-1]   # "matrix"
    return (jnp.concatenate([jnp.diagonal(diagonals, 1, -2, -1), jnp.zeros(diagonals.shape[:-2] + (1,), diagonals.dtype)], -1),
            jnp.diagonal(diagonals, 0, -2, -1),
            jnp.concatenate([jnp.zeros(diagonals.shape[:-2] + (1,), diagonals.dtype), jnp.diagonal(diagonals, -1, -2, -1)], -1)
            if n else None)


def _tri_solve(*args, fmt):
    *diags, rhs = args
    sup, main, sub = _tri_parts(diags[0] if fmt != "sequence" else tuple(diags), fmt)
    assert sup is not None and sub is not None
    # lax wants (lower dl, main d, upper du) with dl[0] = du[-1] = 0
    dl = sub.at[..., 0].set(0)
    du = sup.at[..., -1].set(0)
    if rhs.ndim == main.ndim:
        return lax.linalg.tridiagonal_solve(dl, main, du, rhs[..., None])[..., 0]
    return lax.linalg.tridiagonal_solve(dl, main, du, rhs)


_TRI_SOLVE = prim("TridiagonalSolve", _tri_solve)


@tf_types("TridiagonalSolve")
def tridiagonal_solve(diagonals, rhs, diagonals_format="compact", transpose_rhs=False, conjugate_rhs=False,
                      name=None, partial_pivoting=True, perturb_singular=False):
    """``tf.linalg.tridiagonal_solve``: ``compact`` ([..., 3, n]: superdiagonal, main, subdiagonal),
    ``sequence`` (a tuple of the three) or ``matrix`` format; ``rhs`` ``[..., n, k]``."""
    if transpose_rhs or conjugate_rhs:
        raise _bad("TridiagonalSolve", "transpose_rhs / conjugate_rhs are not supported here")
    parts = list(diagonals) if diagonals_format == "sequence" else [diagonals]
    no_half(parts[0], "TridiagonalSolve", "diagonals", f16_error=InvalidArgumentError)   # (TF: not in T's list)
    return _call(_TRI_SOLVE, "TridiagonalSolve", *parts, rhs, fmt=diagonals_format)


_TRI_MATMUL = prim("TridiagonalMatMul", lambda sup, main, sub, rhs: main[..., :, None] * rhs
                   + jnp.pad(sup[..., :-1, None] * rhs[..., 1:, :], [(0, 0)] * (rhs.ndim - 2) + [(0, 1), (0, 0)])
                   + jnp.pad(sub[..., 1:, None] * rhs[..., :-1, :], [(0, 0)] * (rhs.ndim - 2) + [(1, 0), (0, 0)]))


@tf_types("TridiagonalMatMul")
def tridiagonal_matmul(diagonals, rhs, diagonals_format="compact", name=None):
    """``tf.linalg.tridiagonal_matmul``: the tridiagonal matrix (see ``tridiagonal_solve``) times ``rhs``."""
    if diagonals_format == "sequence":
        sup, main, sub = diagonals
        return _call(_TRI_MATMUL, "TridiagonalMatMul", sup, main, sub, rhs)
    from .array import unstack
    if diagonals_format == "compact":
        sup, main, sub = unstack(diagonals, axis=-2)
        return _call(_TRI_MATMUL, "TridiagonalMatMul", sup, main, sub, rhs)
    raise _bad("TridiagonalMatMul", "diagonals_format must be 'compact' or 'sequence' here")


_EIGH_TRI = prim("EighTridiagonal", lambda alpha, beta: jnp.linalg.eigvalsh(
    jnp.diag(alpha) + jnp.diag(beta, 1) + jnp.diag(beta, -1)))


@tf_types("EighTridiagonal")
def eigh_tridiagonal(alpha, beta, eigvals_only=True, select="a", select_range=None, tol=None, name=None):
    """``tf.linalg.eigh_tridiagonal``: the eigenvalues (ascending) of the symmetric tridiagonal matrix
    with diagonal ``alpha`` and off-diagonal ``beta`` (``eigvals_only`` and ``select='a'`` only)."""
    if not eigvals_only or select != "a":
        raise _bad("EighTridiagonal", "only eigvals_only=True with select='a' is supported here")
    # (TF runs float16 in its Python bisection; JAX has no half eigvalsh.  bfloat16: TF's ValueError)
    no_half(alpha, "EighTridiagonal", "alpha", bf16_error=ValueError)
    return _call(_EIGH_TRI, "EighTridiagonal", alpha, beta)


def _sqrtm(a, *, iters):
    """Denman-Beavers: Y -> A^(1/2), Z -> A^(-1/2).  A ``fori_loop`` (not a Python loop): its program
    and its gradient's are one step's, so the first call compiles in about a second (unrolled, the
    gradient of a 3x3 root took 11 s to compile); the values are the same."""
    def step(_, yz):
        y, z = yz
        return 0.5 * (y + jnp.linalg.inv(z)), 0.5 * (z + jnp.linalg.inv(y))

    eye = jnp.broadcast_to(jnp.eye(a.shape[-1], dtype=a.dtype), a.shape)
    return lax.fori_loop(0, iters, step, (a, eye))[0]


_SQRTM = prim("MatrixSquareRoot", _sqrtm)


@tf_types("MatrixSquareRoot")
def sqrtm(input, name=None):  # noqa: A002
    """``tf.linalg.sqrtm`` (``tf.linalg.matrix_square_root``): the principal square root of a real matrix
    with no eigenvalue on the closed negative real axis, by 30 Denman-Beavers steps."""
    check_float(input, "MatrixSquareRoot", "real", "input")
    no_half(input, "MatrixSquareRoot", "input")
    s = _shape(input)
    if len(s) < 2 or s[-1] != s[-2]:
        raise _bad("MatrixSquareRoot", f"input must be a (batch of) square matrices; got shape {list(s)}")
    return bind(_SQRTM, input, iters=30)


__all__ = ["adjoint", "eig", "eigh_tridiagonal", "eigvals", "eye", "lu", "lu_matrix_inverse", "lu_reconstruct",
           "lu_solve", "matrix_rank", "matrix_transpose", "normalize", "set_diag", "sqrtm", "tensor_diag",
           "tensor_diag_part", "tridiagonal_matmul", "tridiagonal_solve"]
