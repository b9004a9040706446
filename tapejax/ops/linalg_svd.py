"""The singular value decomposition kernel behind ``tf.linalg.svd``, with TF's gradient rules
(``_SvdGrad`` in TF's ``linalg_grad.py``), as ``custom_jvp`` rules (so forward mode and higher
orders work too); ``linalg`` declares the op.

* Reduced factors (and a square matrix's): JAX's rule with TF's "safe reciprocal"
  ``x / (x^2 + 1e-20)`` of the squared-singular-value gaps and of ``s``, so tied values
  contribute 0 where JAX's ``1 / 0`` gives NaN.
* Full factors of an ``m x n`` matrix with ``|m - n| == 1`` (the minimal DLT: a homography from 4
  correspondences is the null vector of an 8x9 system): the extra column spans the null space of
  ``A`` (of ``A^H`` when tall), whose derivative is ``dv2 = -V1 S^-1 U^H dA v2`` (``du2 = -U1 S^-1
  V^H dA^H u2``), the JVP whose transpose is TF's ``term2`` with ``grad_v2``.  TF defines no
  gradient for ``|m - n| > 1``; there JAX's derivative raises ``NotImplementedError`` as TF's does.
"""
import jax
import jax.numpy as jnp


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def _safe_reciprocal(x):
    """TF's ``_SafeReciprocal`` in its ``eigh`` / ``svd`` gradients: ``x / (x^2 + 1e-20)``, so a
    repeated eigen- or singular value contributes 0 where ``1 / 0`` gives JAX's inf / NaN."""
    return x * jnp.reciprocal(x * x + 1e-20)


def _off_diagonal(x):
    return jnp.where(jnp.eye(x.shape[-1], dtype=bool), jnp.zeros_like(x), x)


def _reduced_tangents(a, da, s, u, v):
    """Tangents of the reduced ``(s, u, v)`` of ``a`` along ``da``: JAX's rule with TF's safe
    reciprocals of the squared-singular-value gaps and of ``s``."""
    uh, vh = jnp.conj(_mT(u)), jnp.conj(_mT(v))
    ds_mat = uh @ da @ v
    ds = jnp.real(jnp.diagonal(ds_mat, axis1=-2, axis2=-1)).astype(s.dtype)
    s_row = s[..., None, :]
    f = _off_diagonal(_safe_reciprocal(s_row * s_row - _mT(s_row * s_row))).astype(a.dtype)
    s_inv = _safe_reciprocal(s).astype(a.dtype)
    dss, sds = s_row.astype(a.dtype) * ds_mat, _mT(s_row).astype(a.dtype) * ds_mat
    du_diag = 0.5 * (ds_mat - jnp.conj(_mT(ds_mat))) * (jnp.eye(s.shape[-1], dtype=a.dtype) * s_inv[..., None, :])
    du = u @ (f * (dss + jnp.conj(_mT(dss))) + du_diag)
    dv = v @ (f * (sds + jnp.conj(_mT(sds))))
    m, n = a.shape[-2:]
    if m > n:
        dav = da @ v
        du = du + (dav - u @ (uh @ dav)) * s_inv[..., None, :]
    if n > m:
        dahu = jnp.conj(_mT(da)) @ u
        dv = dv + (dahu - v @ (vh @ dahu)) * s_inv[..., None, :]
    return ds, du, dv


@jax.custom_jvp
def _svd_tf(a):
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    return s, u, jnp.conj(_mT(vh))


@_svd_tf.defjvp
def _svd_tf_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    s, u, v = _svd_tf(a)
    return (s, u, v), _reduced_tangents(a, da, s, u, v)


@jax.custom_jvp
def _svd_tf_full(a):
    """Full factors of a matrix one row or one column away from square."""
    u, s, vh = jnp.linalg.svd(a, full_matrices=True)
    return s, u, jnp.conj(_mT(vh))


@_svd_tf_full.defjvp
def _svd_tf_full_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    s, u, v = _svd_tf_full(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    u1, v1 = u[..., :, :k], v[..., :, :k]
    ds, du1, dv1 = _reduced_tangents(a, da, s, u1, v1)
    s_inv = _safe_reciprocal(s).astype(a.dtype)[..., :, None]
    if n > m:   # A v2 = 0 and v2 is orthogonal to V1: dv2 = -V1 S^-1 U^H dA v2
        v2 = v[..., :, k:]
        dv2 = -(v1 @ (s_inv * (jnp.conj(_mT(u1)) @ da @ v2)))
        return (s, u, v), (ds, du1, jnp.concatenate([dv1, dv2], axis=-1))
    u2 = u[..., :, k:]   # tall: A^H u2 = 0, du2 = -U1 S^-1 V^H dA^H u2
    du2 = -(u1 @ (s_inv * (jnp.conj(_mT(v1)) @ jnp.conj(_mT(da)) @ u2)))
    return (s, u, v), (ds, jnp.concatenate([du1, du2], axis=-1), dv1)


def _svd(x, *, full_matrices, compute_uv):
    """The ``Svd`` op's kernel: ``(s,)`` or ``(s, u, v)`` (``v`` not transposed, as TF)."""
    if not compute_uv:
        return (jnp.linalg.svd(x, compute_uv=False),)
    m, n = x.shape[-2:]
    if not full_matrices or m == n:   # (square: the full factors are the reduced ones)
        return _svd_tf(x)
    if abs(m - n) == 1:
        return _svd_tf_full(x)
    u, s, vh = jnp.linalg.svd(x, full_matrices=True)   # (no gradient, as TF: JAX's raises)
    return s, u, jnp.conj(_mT(vh))
