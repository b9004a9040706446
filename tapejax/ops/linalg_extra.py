"""The last two of ``tf.linalg``'s functions: ``banded_triangular_solve`` and ``logm``.

``banded_triangular_solve`` builds the triangular matrix from TF's band layout (``K`` rows, the
diagonal first when ``lower`` and last otherwise, subdiagonals aligned right and superdiagonals
left, so the padding entries are never read and get a zero gradient, as TF's) and solves it
with JAX's triangular solve; JAX differentiates it (TF registers a gradient too).

``logm`` is the principal matrix logarithm of a complex matrix (TF's kernel takes complex64 and
complex128 only) by inverse scaling and squaring on the complex Schur form ``A = Q T Q^H``:
square roots of the triangular ``T`` (the Björck-Hammarling recurrence, one triangular solve a
column) until ``|T - I|_1 <= 0.25``, then ``log(I + X)`` as an 8-node Gauss-Legendre quadrature
of ``X (I + tX)^-1`` (a Padé approximant), times ``2^s``.  A singular matrix gives NaN, as TF.
JAX computes the Schur form on CPU only.  TF registers no gradient for ``MatrixLogarithm``:
asking a tape for one raises ``LookupError``, as TF.
"""
import jax
import jax.numpy as jnp
import numpy as np

from ._registry import _bad, _call, _shape, check_binary, dtype_of, no_half, prim, tf_types

_BANDED_DTYPES = {np.dtype(t) for t in (np.float16, np.float32, np.float64, np.complex64, np.complex128)} | {
    np.dtype(jnp.bfloat16)}   # (bfloat16: TF's missing-kernel error, from no_half)


def _banded_to_dense(bands, lower):
    k, n = bands.shape[-2:]
    i = jnp.arange(n)[:, None]
    j = jnp.arange(n)[None, :]
    dense = jnp.zeros(bands.shape[:-2] + (n, n), bands.dtype)
    for r in range(min(k, n)):
        off = r if lower else k - 1 - r     # the sub- (lower) or superdiagonal this row holds
        if off >= n:
            continue
        mask = (j == i - off) if lower else (j == i + off)
        dense = dense + jnp.where(mask, bands[..., r, :, None], jnp.zeros((), bands.dtype))
    return dense


def _banded_solve(bands, rhs, *, lower, adjoint):
    a = _banded_to_dense(bands, lower)
    batch = jnp.broadcast_shapes(a.shape[:-2], rhs.shape[:-2])
    a = jnp.broadcast_to(a, batch + a.shape[-2:])
    rhs = jnp.broadcast_to(rhs, batch + rhs.shape[-2:])
    return jax.scipy.linalg.solve_triangular(a, rhs, lower=lower, trans="C" if adjoint else 0)


_BANDED = prim("BandedTriangularSolve", _banded_solve)


@tf_types("BandedTriangularSolve")
def banded_triangular_solve(bands, rhs, lower=True, adjoint=False, name=None):
    """``tf.linalg.banded_triangular_solve``: ``bands [..., K, N]`` (TF's band layout), ``rhs [..., N, M]``."""
    check_binary(bands, rhs, "BandedTriangularSolve")
    d = dtype_of(bands)
    if d is None:
        d = np.asarray(bands).dtype
    if np.dtype(d) not in _BANDED_DTYPES:
        raise _bad("BandedTriangularSolve", f"Value for attr 'T' of {np.dtype(d).name} is not in the list of "
                   f"allowed values: double, float, half, complex64, complex128 (argument `bands`)")
    no_half(bands, "BandedTriangularSolve", "bands")   # TF: no half kernel (float16: NotFoundError)
    sb, sr = _shape(bands), _shape(rhs)
    if len(sb) < 2:
        raise _bad("BandedTriangularSolve", f"In[0] ndims must be >= 2: {len(sb)} (argument `bands`)")
    if len(sr) < 2:
        raise _bad("BandedTriangularSolve", f"In[1] ndims must be >= 2: {len(sr)} (argument `rhs`)")
    if sb[-1] != sr[-2]:
        raise _bad("BandedTriangularSolve", f"In[0] mismatch In[1] shape: {sb[-1]} vs. {sr[-2]}: {list(sb)} "
                   f"{list(sr)} (arguments `bands`, `rhs`)")
    return _call(_BANDED, "BandedTriangularSolve", bands, rhs, lower=bool(lower), adjoint=bool(adjoint))


# -- logm ----------------------------------------------------------------------------------------

_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(8)
_NODES, _WEIGHTS = (_NODES + 1) / 2, _WEIGHTS / 2      # on [0, 1]


def _sqrt_triu(t):
    """The principal square root of an upper-triangular ``t`` (column by column: ``R[:j, j]``
    solves ``(R[:j, :j] + R[j, j] I) r = T[:j, j]``)."""
    n = t.shape[-1]
    idx = jnp.arange(n)
    eye = jnp.eye(n, dtype=t.dtype)

    def column(j, r):
        rjj = jnp.sqrt(t[j, j])
        above = idx < j
        m = jnp.where(above[:, None] & above[None, :], jnp.triu(r) + rjj * eye, eye)
        rhs = jnp.where(above, t[:, j], 0)
        col = jax.scipy.linalg.solve_triangular(m, rhs, lower=False)
        col = jnp.where(above, col, jnp.where(idx == j, rjj, 0))
        return r.at[:, j].set(col)

    return jax.lax.fori_loop(0, n, column, jnp.zeros_like(t))


def _log_triu(t):
    n = t.shape[-1]
    eye = jnp.eye(n, dtype=t.dtype)

    def far(state):
        t, s = state
        return (jnp.max(jnp.sum(jnp.abs(t - eye), axis=0)) > 0.25) & (s < 64)

    def root(state):
        t, s = state
        return _sqrt_triu(t), s + 1

    t, s = jax.lax.while_loop(far, root, (t, jnp.asarray(0, jnp.int32)))
    x = t - eye
    out = jnp.zeros_like(t)
    for node, w in zip(_NODES, _WEIGHTS):
        out = out + w * jnp.linalg.solve(eye + node * x, x)
    out = out * (2.0 ** s).astype(out.real.dtype)
    singular = jnp.any(jnp.diagonal(t) == 0)
    return jnp.where(singular, jnp.asarray(np.nan + 1j * np.nan, t.dtype), out)


def _logm_one(a):
    t, q = jax.scipy.linalg.schur(a, output="complex")
    return q @ _log_triu(t) @ jnp.conj(q.T)


def _logm(a):
    if a.ndim == 2:
        return _logm_one(a)
    flat = a.reshape((-1,) + a.shape[-2:])
    return jax.lax.map(_logm_one, flat).reshape(a.shape)


@jax.custom_vjp
def _logm_no_grad(a):
    return _logm(a)


def _logm_fwd(a):
    return _logm(a), None


def _logm_bwd(_, g):
    raise LookupError("gradient registry has no entry for: MatrixLogarithm")


_logm_no_grad.defvjp(_logm_fwd, _logm_bwd)
_LOGM = prim("MatrixLogarithm", _logm_no_grad)


@tf_types("MatrixLogarithm")
def logm(input, name=None):  # noqa: A002  (TF's name)
    """``tf.linalg.logm``: the principal logarithm of a complex64 / complex128 square matrix."""
    d = dtype_of(input)
    if d is None:
        d = np.asarray(input).dtype
    if np.dtype(d).kind != "c":
        raise _bad("MatrixLogarithm", f"Value for attr 'T' of {np.dtype(d).name} is not in the list of allowed "
                   f"values: complex64, complex128 (argument `input`)")
    s = _shape(input)
    if len(s) < 2 or s[-1] != s[-2]:
        raise _bad("MatrixLogarithm", f"Input matrix must be square (argument `input`): got shape {list(s)}")
    return _call(_LOGM, "MatrixLogarithm", input)


__all__ = ["banded_triangular_solve", "logm"]
