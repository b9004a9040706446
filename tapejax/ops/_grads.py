"""TensorFlow's gradient conventions where JAX's default rule differs.

Each function here is pure JAX (a ``jax.custom_jvp``), so the eager op, the
tape's compiled replay and a ``jax.jit`` of user code all give TF's numbers
(TF_SEMANTICS.md items 3, 11, 12, 19, 21), in reverse *and* forward mode and
at every order:

* ties and kinks: ``maximum``/``minimum`` give the whole gradient to ``x`` on
  ties; ``abs'(0) = 0``; ``clip_by_value`` (their composition, as TF) passes
  the gradient at its (inclusive) bounds; ``relu'(0) = 0`` and ``relu6`` passes nothing at 0 and 6,
  both by multiplying with the mask as TF's kernels do (an infinite gradient becomes NaN there); ``leaky_relu'(0) = alpha``; ``selu'(0) = scale``;
* NaN hygiene: ``sqrt``, ``rsqrt`` and ``reciprocal`` give a zero gradient
  wherever the *incoming* gradient is zero, so ``where(x > 0, sqrt(x), 0)``
  stays finite at ``x <= 0``.  That rule is not linear in IEEE arithmetic
  (``0 * inf``), so it is a tiny linear primitive ``scale_nz(t, c)`` =
  ``where(t == 0, 0, t * c)`` with its own transpose rule (the same
  function, applied to the cotangent);
* ``divide_no_nan``, ``multiply_no_nan``, ``xlogy``, ``xdivy`` and the
  exponent gradient of ``pow`` (``log x`` read as 0 where ``x <= 0``) are
  masked by their primal values, as TF's registered gradients are;
* decompositions: the eigenvector and singular-vector rules take TF's safe
  reciprocal of the value gaps (``linalg``'s ``eigh``, ``svd``), and the full SVD
  of a matrix one row or column away from square has TF's gradient.
"""
import functools

import jax
import jax.core
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir


def _tan(t, like):
    """A tangent usable in arithmetic: integer primals have float0 tangents; read them as zeros."""
    dt = getattr(t, "dtype", None)
    if dt is None:
        return jnp.asarray(t)
    if dt == jax.dtypes.float0:
        return 0.0  # weakly typed: never promotes the other tangent's dtype
    return t


# -- scale_nz: t * c, but exactly 0 where t == 0 (linear in t) -----------------

scale_nz_p = Primitive("tapejax_scale_nz")


def _scale_nz_impl(t, c):
    return jnp.where(t == 0, jnp.zeros((), t.dtype), t * c)


def scale_nz(t, c):
    """``t * c`` with ``0 * c == 0`` even for an infinite or NaN ``c``."""
    t, c = jnp.broadcast_arrays(t, c)
    return scale_nz_p.bind(t, c)


scale_nz_p.def_impl(_scale_nz_impl)
scale_nz_p.def_abstract_eval(lambda t, c: jax.core.ShapedArray(t.shape, t.dtype))
mlir.register_lowering(scale_nz_p, mlir.lower_fun(_scale_nz_impl, multiple_results=False))
batching.defbroadcasting(scale_nz_p)


def _scale_nz_transpose(ct, t, c):
    assert ad.is_undefined_primal(t) and not ad.is_undefined_primal(c)
    if type(ct) is ad.Zero:
        return [None, None]
    return [scale_nz(ct, c), None]


ad.defjvp(scale_nz_p,
          lambda dt, t, c: scale_nz(dt, c),
          lambda dc, t, c: jnp.where(t == 0, jnp.zeros((), dc.dtype), dc * t))
ad.primitive_transposes[scale_nz_p] = _scale_nz_transpose


# -- NaN hygiene ---------------------------------------------------------------

@jax.custom_jvp
def sqrt(x):
    return jnp.sqrt(x)


@sqrt.defjvp
def _sqrt_jvp(p, t):
    y = sqrt(p[0])
    return y, scale_nz(t[0], 0.5 / y)


@jax.custom_jvp
def rsqrt(x):
    return lax.rsqrt(x)


@rsqrt.defjvp
def _rsqrt_jvp(p, t):
    y = rsqrt(p[0])
    return y, scale_nz(t[0], -0.5 * y * y * y)


@jax.custom_jvp
def reciprocal(x):
    return 1 / x


@reciprocal.defjvp
def _reciprocal_jvp(p, t):
    y = reciprocal(p[0])
    return y, scale_nz(t[0], -y * y)


def _safe_div(x, y):
    return jnp.where(y == 0, jnp.zeros((), jnp.result_type(x, y)), x / jnp.where(y == 0, 1, y))


@jax.custom_jvp
def divide_no_nan(x, y):
    return _safe_div(x, y)


@divide_no_nan.defjvp
def _divide_no_nan_jvp(p, t):
    x, y = p
    tx, ty = _tan(t[0], x), _tan(t[1], y)
    out = divide_no_nan(x, y)
    return out, _safe_div(tx, y) - ty * _safe_div(_safe_div(x, y), y)


@jax.custom_jvp
def multiply_no_nan(x, y):
    return jnp.where(y == 0, jnp.zeros((), jnp.result_type(x, y)), x * y)


@multiply_no_nan.defjvp
def _multiply_no_nan_jvp(p, t):
    x, y = p
    tx, ty = _tan(t[0], x), _tan(t[1], y)
    return multiply_no_nan(x, y), multiply_no_nan(tx, y) + ty * x


def _log_pos(x):
    return jnp.where(x > 0, jnp.log(jnp.where(x > 0, x, 1)), 0)


@jax.custom_jvp
def xlogy(x, y):
    return jnp.where(x == 0, jnp.zeros((), jnp.result_type(x, y)), x * jnp.log(y))


@xlogy.defjvp
def _xlogy_jvp(p, t):
    x, y = p
    tx, ty = _tan(t[0], x), _tan(t[1], y)
    # TF's _XLogyGrad: xlogy(x != 0, y) rather than where(x == 0, 0, log y), whose own derivative
    # in y is NaN at y = 0 (0 * inf): so xlogy'' is TF's 0 there too
    dx = xlogy((x != 0).astype(jnp.result_type(x, y)), y)
    dy = xdivy(x, y)
    return xlogy(x, y), tx * dx + ty * dy


@jax.custom_jvp
def xdivy(x, y):
    return jnp.where(x == 0, jnp.zeros((), jnp.result_type(x, y)), x / y)


@xdivy.defjvp
def _xdivy_jvp(p, t):
    x, y = p
    tx, ty = _tan(t[0], x), _tan(t[1], y)
    dx = xdivy((x != 0).astype(jnp.result_type(x, y)), y)   # (TF's _XDivyGrad, as xlogy's)
    dy = xdivy(-x, y * y)
    return xdivy(x, y), tx * dx + ty * dy


@jax.custom_jvp
def pow(x, y):  # noqa: A001
    return jnp.power(x, y)


@pow.defjvp
def _pow_jvp(p, t):
    x, y = p
    tx, ty = _tan(t[0], x), _tan(t[1], y)
    z = pow(x, y)
    dx = y * jnp.power(x, y - 1)
    dy = z * _log_pos(x)
    return z, tx * dx + ty * dy


# -- ties and kinks ---------------------------------------------------------------

@jax.custom_jvp
def tf_abs(x):
    return jnp.abs(x)


@tf_abs.defjvp
def _abs_jvp(p, t):
    (x,), (dx,) = p, t
    if jnp.iscomplexobj(x):   # |z|' along dz: Re(conj(z / |z|) dz), 0 at 0 (TF's ComplexAbs)
        return tf_abs(x), jnp.real(jnp.conj(jnp.sign(x)) * dx)
    return tf_abs(x), dx * jnp.sign(x)


@jax.custom_jvp
def maximum(x, y):
    return jnp.maximum(x, y)


@maximum.defjvp
def _maximum_jvp(p, t):
    x, y = p
    tx, ty = _tan(t[0], x), _tan(t[1], y)
    m = x >= y
    shape = jnp.broadcast_shapes(jnp.shape(x), jnp.shape(y))
    return maximum(x, y), jnp.broadcast_to(jnp.where(m, tx, ty), shape)


@jax.custom_jvp
def minimum(x, y):
    return jnp.minimum(x, y)


@minimum.defjvp
def _minimum_jvp(p, t):
    x, y = p
    tx, ty = _tan(t[0], x), _tan(t[1], y)
    m = x <= y
    shape = jnp.broadcast_shapes(jnp.shape(x), jnp.shape(y))
    return minimum(x, y), jnp.broadcast_to(jnp.where(m, tx, ty), shape)


def clip_by_value(x, lo, hi):
    """TF's composition ``maximum(minimum(x, hi), lo)`` with TF's tie rules: inclusive bounds pass
    the gradient to ``x``; ``lo`` wins when ``lo > hi``."""
    return maximum(minimum(x, hi), lo)


@jax.custom_jvp
def relu(x):
    x = jnp.asarray(x)
    return jnp.maximum(x, 0).astype(x.dtype)


@relu.defjvp
def _relu_jvp(p, t):
    # TF's ReluGrad multiplies by the mask (an infinite incoming gradient gives NaN at x <= 0,
    # as sqrt(relu(x)) does in TF); jax.nn.relu selects, which gives 0 there
    (x,), (tx,) = p, t
    return relu(x), jnp.where(x > 0, tx, tx * 0)   # (not tx * mask: XLA rewrites that to a select)


@jax.custom_jvp
def relu6(x):
    x = jnp.asarray(x)
    return jnp.minimum(jnp.maximum(x, 0), 6).astype(x.dtype)


@relu6.defjvp
def _relu6_jvp(p, t):
    (x,), (tx,) = p, t
    return relu6(x), jnp.where((x > 0) & (x < 6), tx, tx * 0)   # TF's Relu6Grad multiplies by the mask


@jax.custom_jvp
def leaky_relu(x, alpha):
    x = jnp.asarray(x)
    return jnp.where(x > 0, x, alpha * x).astype(x.dtype)


@leaky_relu.defjvp
def _leaky_jvp(p, t):
    x, alpha = p
    tx, talpha = _tan(t[0], x), _tan(t[1], alpha)
    return leaky_relu(x, alpha), (jnp.where(x > 0, tx, alpha * tx)
                                  + jnp.where(x > 0, 0, x * talpha)).astype(jnp.result_type(x))


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


@jax.custom_jvp
def selu(x):
    return _SELU_SCALE * jnp.where(x > 0, x, _SELU_ALPHA * jnp.expm1(jnp.where(x > 0, 0, x)))


@selu.defjvp
def _selu_jvp(p, t):
    (x,), (tx,) = p, t
    y = selu(x)
    return y, tx * jnp.where(y < 0, y + _SELU_SCALE * _SELU_ALPHA, _SELU_SCALE)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def softmax_xent(labels, logits, axis):
    """``-sum(labels * log_softmax(logits))`` over ``axis`` with TF's kernel's gradients:
    ``softmax - labels`` for the logits (the labels are not renormalised: with labels summing to
    ``s`` the exact gradient would be ``s * softmax - labels``), ``-log_softmax`` for the labels."""
    return -jnp.sum(labels * jax.nn.log_softmax(logits, axis=axis), axis=axis)


@softmax_xent.defjvp
def _softmax_xent_jvp(axis, p, t):
    (labels, logits), (tl, tz) = p, t
    logp = jax.nn.log_softmax(logits, axis=axis)
    y = -jnp.sum(labels * logp, axis=axis)
    return y, jnp.sum((jnp.exp(logp) - labels) * _tan(tz, logits) - logp * _tan(tl, labels), axis=axis).astype(y.dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3))
def extreme(x, axis, keepdims, is_max):
    """``reduce_max`` (``is_max``) / ``reduce_min`` over ``axis`` with TF's gradient."""
    return (jnp.max if is_max else jnp.min)(x, axis=axis, keepdims=keepdims)


@extreme.defjvp
def _extreme_jvp(axis, keepdims, is_max, primals, tangents):
    # TF's _MinOrMaxGrad: indicators / num_selected, so tied extremes share the gradient and a NaN
    # extreme (equal to nothing) gives 0/0 = NaN.  (JAX's rule has the same form, but XLA rewrites
    # ``g * convert(x == y)`` into a select, which reads 0 there.)
    (x,), (t,) = primals, tangents
    y = extreme(x, axis, True, is_max)
    ind = (x == y).astype(x.dtype)
    n = jnp.sum(ind, axis=axis, keepdims=True)
    dy = jnp.sum(t * jnp.where(n > 0, ind / n, jnp.nan), axis=axis, keepdims=True)
    if not keepdims:
        y, dy = jnp.squeeze(y, axis=axis), jnp.squeeze(dy, axis=axis)
    return y, dy


@jax.custom_jvp
def scatter_set(t, idx, upd):
    """``tensor_scatter_nd_update``: ``t`` with ``upd`` set at ``idx`` (``idx[..., k]`` index the
    first ``k`` axes; out-of-range rows dropped), with TF's gradient (``_TensorScatterUpdateGrad``):
    every update gets ``gather_nd(g, idx)``, one overwritten by a later duplicate index too (JAX's
    rule gives it zero), and ``t`` gets ``g`` with zeros where any update is written."""
    return t.at[tuple(jnp.moveaxis(idx, -1, 0))].set(upd, mode="drop")


@scatter_set.defjvp
def _scatter_set_jvp(p, tg):
    # the transpose of this linear map is TF's rule: masking for ``t``, a gather for ``upd``
    (t, idx, upd), (tt, _, tu) = p, tg
    where = tuple(jnp.moveaxis(idx, -1, 0))
    y = t.at[where].set(upd, mode="drop")
    written = jnp.zeros(t.shape, bool).at[where].set(True, mode="drop")
    dt = jnp.where(written, jnp.zeros((), y.dtype), _tan(tt, t))
    return y, dt.astype(y.dtype).at[where].add(_tan(tu, upd), mode="drop")


# -- eigen- and singular-value decompositions ------------------------------------------------------


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def safe_reciprocal(x):
    """TF's ``_SafeReciprocal`` in its ``eigh`` / ``svd`` gradients: ``x / (x^2 + 1e-20)``, so a
    repeated eigen- or singular value contributes 0 where ``1 / 0`` gives JAX's inf / NaN."""
    return x * jnp.reciprocal(x * x + 1e-20)


def off_diagonal(x):
    return jnp.where(jnp.eye(x.shape[-1], dtype=bool), jnp.zeros_like(x), x)


def _svd_tangents(a, da, s, u, v):
    """The tangents ``(ds, du, dv)`` of the reduced SVD ``a = u diag(s) v^H``: JAX's rule with TF's
    safe reciprocals of the squared-singular-value gaps and of ``s``."""
    uh, vh = jnp.conj(_mT(u)), jnp.conj(_mT(v))
    ds_mat = uh @ da @ v
    ds = jnp.real(jnp.diagonal(ds_mat, axis1=-2, axis2=-1)).astype(s.dtype)
    s_row = s[..., None, :]
    f = off_diagonal(safe_reciprocal(s_row * s_row - _mT(s_row * s_row))).astype(a.dtype)
    s_inv = safe_reciprocal(s).astype(a.dtype)
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
def svd(a):
    """The reduced SVD ``(s, u, v)`` (``v`` not transposed, as TF) with TF's gradient."""
    u, s, vh = jnp.linalg.svd(a, full_matrices=False)
    return s, u, jnp.conj(_mT(vh))


@svd.defjvp
def _svd_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    s, u, v = svd(a)
    return (s, u, v), _svd_tangents(a, da, s, u, v)


@jax.custom_jvp
def svd_full_one_more(a):
    """The full SVD ``(s, u, v)`` of a matrix with one more row than columns or one more column than
    rows, with TF's gradient (``SvdGrad`` covers ``|m - n| <= 1``).  The extra column ``w`` of the
    larger factor spans the orthogonal complement of the others (``W``), so it moves by
    ``dw = -W (dW^H w)``: TF's ``term2 -= (v1^H grad_v2) v2^H``."""
    u, s, vh = jnp.linalg.svd(a, full_matrices=True)
    return s, u, jnp.conj(_mT(vh))


@svd_full_one_more.defjvp
def _svd_full_one_more_jvp(primals, tangents):
    (a,), (da,) = primals, tangents
    s, u, v = svd_full_one_more(a)
    m, n = a.shape[-2:]
    k = min(m, n)
    big = v if n > m else u
    w1, w2 = big[..., :, :k], big[..., :, k:]
    ds, du, dv = _svd_tangents(a, da, s, u[..., :, :k], v[..., :, :k])
    dw1 = dv if n > m else du
    dw = jnp.concatenate([dw1, -w1 @ (jnp.conj(_mT(dw1)) @ w2)], axis=-1)
    return (s, u, v), ((ds, du, dw) if n > m else (ds, dw, dv))
