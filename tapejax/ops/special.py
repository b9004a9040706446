"""Special functions and the rest of ``tf.math``'s elementwise ops (``tf.math.special`` too), declared
as table rows over ``jax.scipy.special`` and ``jax.numpy``, with TF's gradient rules: inputs TF
registers no gradient for give ``None`` (``no_gradient``: the input passes a non-differentiable
identity, as ``stop_gradient`` does, so the tape does not connect it), and ``nextafter``'s and
``xlog1py``'s gradients are TF's (``jax.custom_jvp``)."""
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core.bind import bind, define
from ..core.indexed_slices import IndexedSlices
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import _grads as G
from ._binary import binary_ops
from ._registry import _call, check_binary, dtype_of, no_half, prim, tf_types, unary_ops
from .matching import matching_values

S = jax.scipy.special

#: A non-differentiable identity: an input TF registers no gradient for passes it, so the tape
#: gives that input ``None`` (an op with several inputs differentiable in some only).
_NO_GRADIENT = define("NoGradientInput", lax.stop_gradient, differentiable=False,
                      nondiff_reason="TF registers no gradient for this input of the op (betainc's a and b, "
                      "polygamma's n, zeta's x, igamma's and igammac's x ...)")


def no_gradient(x):
    """``x`` as the tape sees a constant (see ``_NO_GRADIENT``)."""
    return bind(_NO_GRADIENT, x)


@jax.custom_jvp
def _nextafter(x1, x2):
    return jnp.nextafter(x1, x2)


@_nextafter.defjvp
def _nextafter_jvp(p, t):
    # TF: d/dx1 = 1, d/dx2 = 0
    return _nextafter(*p), jnp.broadcast_to(G._tan(t[0], p[0]), jnp.broadcast_shapes(p[0].shape, p[1].shape))


@jax.custom_jvp
def _xlog1py(x, y):
    return jnp.where(x == 0, jnp.zeros((), jnp.result_type(x, y)), x * jnp.log1p(y))


@_xlog1py.defjvp
def _xlog1py_jvp(p, t):
    x, y = p
    tx, ty = G._tan(t[0], x), G._tan(t[1], y)
    return _xlog1py(x, y), tx * jnp.where(x == 0, 0, jnp.log1p(y)) + ty * G.xdivy(x, 1 + y)


@jax.custom_jvp
def _ndtri(x):
    return S.ndtri(x)


@_ndtri.defjvp
def _ndtri_jvp(p, t):
    # TF's rule: sqrt(2 pi) exp(ndtri(x)^2 / 2), inf at 0 and 1 (JAX's derivative read 0 there)
    (x,), (tx,) = p, t
    y = _ndtri(x)
    return y, jnp.sqrt(2 * jnp.pi).astype(y.dtype) * jnp.exp(jnp.square(y) / 2) * G._tan(tx, x)


@jax.custom_jvp
def _i1e(x):
    return S.i1e(x)


@_i1e.defjvp
def _i1e_jvp(p, t):
    # TF's rule: i0e(x) - y (sign(x) + 1 / x), 0.5 at 0; NaN at NaN (JAX's read 0.5 there)
    (x,), (tx,) = p, t
    y = _i1e(x)
    d = jnp.where(x == 0, jnp.asarray(0.5, x.dtype), S.i0e(x) - y * (jnp.sign(x) + 1 / jnp.where(x == 0, 1, x)))
    return y, d * G._tan(tx, x)


def _erfcinv(x):
    return -_ndtri(x / 2) / jnp.sqrt(jnp.asarray(2.0, x.dtype))


@jax.custom_jvp
def _spence(x):
    return S.spence(x)


@_spence.defjvp
def _spence_jvp(p, t):
    # TF's rule (JAX's derivative of spence is NaN): log(x) / (1 - x), and -1 at x = 1
    (x,), (tx,) = p, t
    d = jnp.where(x == 1, -jnp.ones_like(x), jnp.log(x) / jnp.where(x == 1, 2, 1 - x))
    return _spence(x), d * G._tan(tx, x)


def _fresnel(x, which):
    return S.fresnel(x)[which]


@jax.custom_jvp
def _fresnel_sin(x):
    return _fresnel(x, 0)


@jax.custom_jvp
def _fresnel_cos(x):
    return _fresnel(x, 1)


# TF's rules (math_grad.py): the integrands sin / cos(pi x^2 / 2), not the derivative of JAX's
# rational approximations
_fresnel_sin.defjvp(lambda p, t: (_fresnel_sin(p[0]), jnp.sin((np.pi / 2) * p[0] * p[0]) * G._tan(t[0], p[0])))
_fresnel_cos.defjvp(lambda p, t: (_fresnel_cos(p[0]), jnp.cos((np.pi / 2) * p[0] * p[0]) * G._tan(t[0], p[0])))


def _polygamma_fn(n, x):
    """TF's polygamma takes a float order (NaN where it is not a whole number); JAX's an integer."""
    n = jnp.broadcast_to(lax.stop_gradient(n), jnp.broadcast_shapes(n.shape, x.shape))
    whole = (jnp.floor(n) == n) & (n >= 0)
    out = S.polygamma(jnp.where(whole, n, 0).astype(jnp.int32), x)
    return jnp.where(whole, out, jnp.asarray(jnp.nan, out.dtype))


def _angle(x):
    return jnp.angle(x) if jnp.iscomplexobj(x) else jnp.where(x < 0, jnp.asarray(np.pi, x.dtype), jnp.zeros_like(x))


def _expint(x):
    """JAX's float16 ``expi`` is NaN on (0, ~2.5): float16 is computed in float32 and rounded
    (TF has no half Expint kernel; bfloat16 is right in JAX)."""
    if x.dtype == jnp.float16:
        return S.expi(x.astype(jnp.float32)).astype(jnp.float16)
    return S.expi(x)


def _real(x):
    return jnp.real(x)


_UNARY = [
    ("bessel_i0", "BesselI0", S.i0, True, "real"),
    ("bessel_i0e", "BesselI0e", S.i0e, True, "real"),
    ("bessel_i1", "BesselI1", S.i1, True, "real"),
    ("bessel_i1e", "BesselI1e", _i1e, True, "real"),
    ("dawsn", "Dawsn", S.dawsn, True, "real"),
    ("expint", "Expint", _expint, True, "real"),
    ("spence", "Spence", lambda x: _spence(x), True, "real32"),
    ("fresnel_cos", "FresnelCos", lambda x: _fresnel_cos(x), True, "real32"),
    ("fresnel_sin", "FresnelSin", lambda x: _fresnel_sin(x), True, "real32"),
    ("erfinv", "Erfinv", S.erfinv, True, "real"),
    ("erfcinv", "Erfcinv", _erfcinv, True, "real32"),
    ("ndtri", "Ndtri", _ndtri, True, "real32"),
    ("rint", "Rint", jnp.rint, False, "real"),
    ("reciprocal_no_nan", "ReciprocalNoNan", lambda x: G.divide_no_nan(jnp.ones_like(x), x), True, "float"),
    ("angle", "Angle", _angle, True),
    ("real", "Real", _real),
    ("imag", "Imag", lambda x: jnp.imag(x) if jnp.iscomplexobj(x) else jnp.zeros_like(x)),
    ("conj", "Conj", jnp.conj),
]

_BINARY = [
    ("nextafter", "NextAfter", _nextafter, True, "real"),
    ("xlog1py", "Xlog1py", _xlog1py, True, "float"),
    ("igamma", "Igamma", S.gammainc, True, "real"),
    ("igammac", "Igammac", S.gammaincc, True, "real"),
    ("polygamma", "Polygamma", lambda n, x: _polygamma_fn(n, x), True, "real"),
    ("zeta", "Zeta", S.zeta, True, "real"),
    ("truncatediv", "TruncateDiv", lambda x, y: (jnp.trunc(x / y).astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.floating)
                                               else lax.div(x, y)), False),
    ("truncatemod", "TruncateMod", lambda x, y: jnp.fmod(x, y), False),
]

_ns: dict = {}
unary_ops(_ns, _UNARY)
binary_ops(_ns, _BINARY)
bessel_i0, bessel_i0e, bessel_i1, bessel_i1e = _ns["bessel_i0"], _ns["bessel_i0e"], _ns["bessel_i1"], _ns["bessel_i1e"]
dawsn, expint, spence = _ns["dawsn"], _ns["expint"], _ns["spence"]
fresnel_cos, fresnel_sin = _ns["fresnel_cos"], _ns["fresnel_sin"]
erfinv, erfcinv, ndtri, rint = _ns["erfinv"], _ns["erfcinv"], _ns["ndtri"], _ns["rint"]
reciprocal_no_nan, real, conj = _ns["reciprocal_no_nan"], _ns["real"], _ns["conj"]
nextafter, xlog1py, truncatediv, truncatemod = _ns["nextafter"], _ns["xlog1py"], _ns["truncatediv"], _ns["truncatemod"]
_igamma, _igammac, _polygamma, _zeta = _ns["igamma"], _ns["igammac"], _ns["polygamma"], _ns["zeta"]


def angle(input, name=None):  # noqa: A002  (TF's name)
    """``tf.math.angle``: the argument of a complex tensor (differentiable, as TF's Angle); of a real
    tensor pi where negative, else 0, not connected to the input (TF's gradient is None there)."""
    if isinstance(input, (Tensor, Variable)) and not input.dtype.is_complex:
        input = no_gradient(input)
    return _ns["angle"](input)


angle._tf_types = ("Angle",)


def imag(input, name=None):  # noqa: A002  (TF's name)
    """``tf.math.imag``: the imaginary part; of a real tensor zeros that TF does not connect to the
    input (its gradient is None there)."""
    if isinstance(input, (Tensor, Variable)) and not input.dtype.is_complex:
        input = no_gradient(input)
    return _ns["imag"](input)


imag._tf_types = ("Imag",)


def _partly(fn, name, no_grad, doc):
    """``fn`` with the inputs at positions ``no_grad`` given no gradient (TF's registered rule)."""
    def op(*args, name=None):
        args = [no_gradient(a) if i in no_grad and isinstance(a, (Tensor, Variable)) else a for i, a in enumerate(args)]
        return fn(*args)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    op._tf_types = fn._tf_types
    return op


igamma = _partly(_igamma, "igamma", (), "``tf.math.igamma(a, x)``: the lower regularized incomplete gamma function.")
igammac = _partly(_igammac, "igammac", (), "``tf.math.igammac(a, x)``: the upper regularized incomplete gamma function.")
polygamma = _partly(_polygamma, "polygamma", (0,), "``tf.math.polygamma(a, x)``: the ``a``-th derivative of "
                    "digamma; TF gives ``a`` no gradient.")
zeta = _partly(_zeta, "zeta", (0,), "``tf.math.zeta(x, q)``: the Hurwitz zeta function; TF gives ``x`` no gradient.")

_BETAINC = prim("Betainc", lambda a, b, x: S.betainc(a, b, x))


@tf_types("Betainc")
def betainc(a, b, x, name=None):
    """``tf.math.betainc(a, b, x)``: the regularized incomplete beta function; TF gives ``a`` and ``b``
    no gradient."""
    check_binary(a, x, "Betainc")
    check_binary(b, x, "Betainc")
    return _call(_BETAINC, "Betainc", no_gradient(a) if isinstance(a, (Tensor, Variable)) else a,
                 no_gradient(b) if isinstance(b, (Tensor, Variable)) else b, x)


_LBETA = prim("Lbeta", lambda x: jnp.sum(S.gammaln(x), -1) - S.gammaln(jnp.sum(x, -1)))


@tf_types("Lbeta")
def lbeta(x, name=None):
    """``tf.math.lbeta``: ``log|Beta(x)|`` over the last dimension."""
    return _call(_LBETA, "Lbeta", x)


_COMPLEX = prim("Complex", lambda re, im: lax.complex(re, im))


@tf_types("Complex")
def complex(real, imag, name=None):  # noqa: A001  (TF's name)
    """``tf.complex(real, imag)``: complex64 from float32 parts (complex128 from float64)."""
    check_binary(real, imag, "Complex")
    real, imag = matching_values([real, imag])   # (two Python floats: float32 parts, in x64 mode too)
    dr, di = dtype_of(real), dtype_of(imag)
    if dr is not None and dr.kind in "iub":
        raise TypeError(f"The `real` and `imag` components have incorrect types: {dr.name} {di and di.name}. "
                        "They must be consistent, and one of [tf.float32, tf.float64]")
    no_half(real, "Complex", "real", f16_error=TypeError, bf16_error=TypeError)   # (TF: float32/float64 parts)
    return _call(_COMPLEX, "Complex", real, imag)


def scalar_mul(scalar, x, name=None):
    """``tf.math.scalar_mul``: ``scalar * x``; an ``IndexedSlices`` stays one (its values scaled)."""
    from .math import multiply
    if isinstance(x, IndexedSlices):
        return x._with_values(multiply(scalar, x.values))
    return multiply(scalar, x)


scalar_mul._tf_types = ("Mul",)


def _limits(d):
    return (np.iinfo(d).min, np.iinfo(d).max) if d.kind in "iu" else (float(jnp.finfo(d).min), float(jnp.finfo(d).max))


def saturation_bounds(src: np.dtype, out: np.dtype) -> "tuple[np.ndarray, np.ndarray]":
    """TF's ``saturate_cast`` bounds for casting real dtype ``src`` to real dtype ``out``: ``out``'s
    range as ``src`` values, nudged inside where ``src`` rounds a bound outside it."""
    try:
        promoted = np.promote_types(src, out)
    except TypeError:
        promoted = np.dtype(np.float64)
    (in_lo, in_hi), (out_lo, out_hi) = _limits(src), _limits(out)
    with np.errstate(over="ignore"):
        lo = np.asarray(max(in_lo, out_lo)).astype(src)
        if np.asarray(lo, promoted) < np.asarray(out_lo, promoted):
            lo = np.nextafter(lo, np.zeros((), src)).astype(src)
        hi = np.asarray(min(float(in_hi), float(out_hi))).astype(src)
        if np.asarray(hi, promoted) > np.asarray(out_hi, promoted):
            hi = np.nextafter(hi, np.zeros((), src)).astype(src)
    return lo, hi


def saturate_cast(value, dtype, name=None):
    """``tf.saturate_cast``: clamp to the target's range (nudged inside it where the source dtype
    cannot hold its bounds), then ``cast`` (TF's algorithm, ``math_ops.saturate_cast``)."""
    from ..core import dtypes as _dtypes
    from ..core.convert import convert_to_tensor
    from .math import cast
    from .reduce import clip_by_value
    value = convert_to_tensor(value)
    target = _dtypes.as_dtype(dtype)._np
    src = np.dtype(value._meta.dtype)
    if src.kind == "c":
        if target.kind != "c":
            value, src = real(value), np.dtype(jnp.real(jnp.zeros((), src)).dtype)
        else:
            return cast(value, target)
    out = np.dtype(jnp.real(jnp.zeros((), target)).dtype) if target.kind == "c" else target
    if src.kind in "iuf" and out.kind in "iuf":
        lo, hi = saturation_bounds(src, out)
        value = clip_by_value(value, Tensor(jnp.asarray(lo, src)), Tensor(jnp.asarray(hi, src)))
    return cast(value, target)


saturate_cast._tf_types = ("Cast",)

__all__ = ["angle", "bessel_i0", "bessel_i0e", "bessel_i1", "bessel_i1e", "betainc", "complex",
           "conj", "dawsn", "erfcinv", "erfinv", "expint", "fresnel_cos", "fresnel_sin", "igamma", "igammac", "imag", "lbeta", "ndtri", "nextafter",
           "no_gradient", "polygamma", "real", "reciprocal_no_nan", "rint", "saturate_cast", "scalar_mul", "spence",
           "truncatediv", "truncatemod", "xlog1py", "zeta"]
