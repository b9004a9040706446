"""Random small tapejax programs as *data*, and three interpreters of them.

A ``Program`` lists leaf sources (watched constants, trainable / non-trainable
Variables, an int tensor, unwatched constants), a sequence of ``Step``s (an op
from ``OPS`` applied to earlier values, optionally inside
``tape.stop_recording()``), intermediate values that are gradient sources
too, targets, output gradients and one or more gradient calls.  Because the
program is data it is interpreted three times:

* ``run_tape(m, prog)`` with ``m = tapejax`` or ``m = tensorflow`` (the op
  table calls each op through the module argument, TF's API spelling, so the
  same code drives both);
* ``oracle_jax(prog)``: the same program as a pure function of jnp arrays
  (independent ``jnp`` / ``jax.nn`` / ``jax.scipy`` formulas per op, not
  tapejax's registry functions), differentiated with ``jax.vjp``; gradients
  wrt intermediates are the vjp wrt a zero perturbation added to that value.
  Which gradients are ``None`` is decided *structurally* from the program:
  a source is unconnected unless a target depends on it through un-stopped,
  recorded ops on their differentiable inputs (``Op.diff``).

Nested programs (``Program.nested``) take a 2nd-order gradient: an inner
tape's gradients are weighted and summed into ``z`` inside an outer tape,
and ``outer.gradient(z, sources)`` is compared with ``jax.grad`` of the
jax.vjp (see ``oracle_jax_nested``).

Domains: every op draws only inputs whose *current values* (computed while
generating, with the jnp formulas) are in a safe domain: ``log``/``sqrt`` on
values >= 0.2, ``asin``/``atanh`` on |x| <= 0.8, kink and tie ops (abs, relu,
maximum, reduce_max, sort, floor, comparisons ...) only where every element is
at least 1e-3 away from the kink or tie, so float32 round-off in either
implementation cannot flip a branch.  TF's deliberate kink/tie conventions
(TF_SEMANTICS 11, 19) are therefore never exercised here: they have their own
parity tests.  Values stay finite and |v| <= 60 after every step (an op whose
output leaves that range is not drawn).
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np
from hypothesis import strategies as st

F32 = np.float32
BOUND = 60.0
GAP = 1e-3

# --------------------------------------------------------------------------
# Program description
# --------------------------------------------------------------------------


def _arr_repr(a):
    a = np.asarray(a)
    return f"np.array({a.tolist()!r}, np.{a.dtype.name})"


@dataclasses.dataclass
class Source:
    """A leaf. kind: 'watched' (constant + tape.watch), 'var' (trainable Variable),
    'var_nt' (non-trainable Variable, not watched), 'var_nt_w' (non-trainable, watched),
    'int' (int32 constant, watched), 'const' (constant, never watched)."""
    kind: str
    value: np.ndarray

    def __repr__(self):
        return f"Source({self.kind!r}, {_arr_repr(self.value)})"


@dataclasses.dataclass
class Step:
    """``op`` applied to ``args`` (refs: ('s', i) source, ('v', j) step output, ('k', c) const)."""
    op: str
    args: tuple
    params: dict
    stopped: bool = False  # inside ``tape.stop_recording()``

    def __repr__(self):
        p = {k: (_arr_repr(v) if isinstance(v, np.ndarray) else v) for k, v in self.params.items()}
        ps = ", ".join(f"{k}={v}" for k, v in p.items())
        return f"Step({self.op!r}, {self.args!r}, dict({ps}){', stopped=True' if self.stopped else ''})"


@dataclasses.dataclass
class Call:
    """One ``tape.gradient`` call: target refs, source refs, cotangents (or None), unconnected mode."""
    targets: tuple
    sources: tuple
    output_gradients: Any  # None or tuple of arrays (one per target)
    unconnected: str  # 'none' | 'zero'
    single_target: bool = False  # pass the target (and its cotangent) bare, not in a list

    def __repr__(self):
        og = None if self.output_gradients is None else "(" + ", ".join(
            _arr_repr(a) for a in self.output_gradients) + ",)"
        return (f"Call(targets={self.targets!r}, sources={self.sources!r}, output_gradients={og}, "
                f"unconnected={self.unconnected!r}, single_target={self.single_target})")


@dataclasses.dataclass
class Program:
    sources: list
    consts: list
    steps: list
    inter: tuple  # step indices also watched as gradient sources
    calls: list
    persistent: bool = False
    nested: bool = False
    weights: tuple = ()  # nested: weight array per source of calls[0]

    def __repr__(self):
        lines = ["Program("]
        lines.append("  sources=[" + ", ".join(map(repr, self.sources)) + "],")
        lines.append("  consts=[" + ", ".join(map(_arr_repr, self.consts)) + "],")
        lines.append("  steps=[")
        lines += [f"    {s!r}," for s in self.steps]
        lines.append("  ],")
        lines.append(f"  inter={self.inter!r}, persistent={self.persistent}, nested={self.nested},")
        lines.append("  calls=[" + ", ".join(map(repr, self.calls)) + "],")
        if self.nested:
            lines.append("  weights=(" + ", ".join(map(_arr_repr, self.weights)) + ",),")
        lines.append(")")
        return "\n".join(lines)


# --------------------------------------------------------------------------
# Ops: how to call each through a TF-API module, the independent jnp formula,
# which inputs are differentiable, and how to draw valid arguments.
# --------------------------------------------------------------------------


@dataclasses.dataclass
class Op:
    name: str
    tf: Callable       # (m, *xs, **params) -> tensor
    jx: Callable       # (*xs, **params) -> jnp array
    gen: Callable      # (draw, ctx) -> (args, params) or None
    diff: tuple = (True,)  # per positional input: does TF differentiate through it
    custom: bool = False


OPS: dict[str, Op] = {}


def _op(name, tf, jx, gen, diff=(True,), custom=False):
    OPS[name] = Op(name, tf, jx, gen, diff, custom)


def _all(pred):
    return lambda v: bool(np.all(pred(np.asarray(v, np.float64))))


def _away(v, kinks):
    v = np.asarray(v, np.float64)
    return all(np.all(np.abs(v - k) >= GAP) for k in kinks)


def _frac_away(v, offset=0.0):
    """Every element at least GAP away from (integer + offset)."""
    v = np.asarray(v, np.float64) - offset
    return bool(np.all(np.abs(v - np.round(v)) >= GAP))


class Ctx:
    """What the generator knows while drawing: every value so far (ref, array)."""

    def __init__(self, draw, prog):
        self.draw = draw
        self.prog = prog
        self.vals = {}  # ref -> np.ndarray (float32 or int32)

    def value(self, ref):
        return self.vals[ref]

    def floats(self, pred=None):
        out = [r for r, v in self.vals.items() if r[0] != "k" and v.dtype.kind == "f"]
        if pred is not None:
            out = [r for r in out if pred(self.vals[r])]
        return out

    def pick(self, pred=None, rank=None, min_rank=0):
        refs = self.floats(pred)
        refs = [r for r in refs if self.vals[r].ndim >= min_rank and (rank is None or self.vals[r].ndim == rank)]
        if not refs:
            return None
        # prefer recent values: the last few are listed first so shrinking keeps chains
        refs = refs[::-1]
        return self.draw(st.sampled_from(refs))

    def const(self, shape, lo=-2.0, hi=2.0, pred=None, signed=False):
        arr = self.draw(_arrays(shape, lo, hi, signed))
        if pred is not None and not pred(arr):
            return None
        self.prog.consts.append(arr)
        ref = ("k", len(self.prog.consts) - 1)
        self.vals[ref] = arr
        return ref

    def partner(self, shape, pred=None, lo=-2.0, hi=2.0, signed=False):
        """A second operand broadcastable with ``shape``: an existing value or a fresh constant."""
        d = self.draw
        cands = [r for r in self.floats(pred) if _bcast(shape, self.vals[r].shape) is not None]
        if cands and d(st.booleans()):
            return d(st.sampled_from(cands[::-1]))
        # fresh constant: drop leading dims / set dims to 1 / maybe one extra leading dim
        r = len(shape)
        keep = d(st.integers(0, r))
        sh = list(shape[r - keep:])
        sh = [1 if d(st.booleans()) else s for s in sh] if sh else sh
        if r < 3 and d(st.integers(0, 4)) == 0:
            sh = [d(st.integers(1, 3))] + ([1] * (r - keep) if keep < r else []) + sh
        return self.const(tuple(sh), lo, hi, pred, signed)


def _bcast(a, b):
    try:
        s = np.broadcast_shapes(tuple(a), tuple(b))
    except ValueError:
        return None
    return s if len(s) <= 3 else None


@st.composite
def _arrays_st(draw, shape, lo, hi, signed):
    # a seed per array: generic values (no accidental kinks or ties), rounded to 3
    # decimals so a shrunk Program's repr is short; hypothesis shrinks the seed
    seed = draw(st.integers(0, 2 ** 32 - 1))
    rng = np.random.default_rng(seed)
    v = rng.uniform(lo, hi, shape)
    if signed:
        v = v * rng.choice([-1.0, 1.0], shape)
    return np.round(v, 3).astype(F32).reshape(shape)


def _arrays(shape, lo, hi, signed=False):
    return _arrays_st(tuple(shape), lo, hi, signed)


def _shapes(max_rank=3):
    return st.lists(st.integers(1, 3), min_size=0, max_size=max_rank).map(tuple)


# ---- unary elementwise -------------------------------------------------

def _unary(name, tf, jx, pred=None, diff=True):
    def gen(draw, ctx):
        x = ctx.pick(pred)
        return None if x is None else ((x,), {})
    _op(name, tf, jx, gen, (diff,))


_pos = _all(lambda v: v >= 0.2)
_unit = _all(lambda v: np.abs(v) <= 0.8)
_small = _all(lambda v: np.abs(v) <= 4.0)
_nonzero = _all(lambda v: np.abs(v) >= 0.2)

_unary("neg", lambda m, x: m.negative(x), lambda x: -x)
_unary("square", lambda m, x: m.square(x), lambda x: x * x, _all(lambda v: np.abs(v) <= 7))
_unary("sin", lambda m, x: m.sin(x), jnp.sin)
_unary("cos", lambda m, x: m.cos(x), jnp.cos)
_unary("tan", lambda m, x: m.tan(x), jnp.tan, _all(lambda v: np.abs(v) <= 1.2))
_unary("tanh", lambda m, x: m.tanh(x), jnp.tanh)
_unary("sigmoid", lambda m, x: m.sigmoid(x), jax.nn.sigmoid)
_unary("exp", lambda m, x: m.exp(x), jnp.exp, _small)
_unary("expm1", lambda m, x: m.math.expm1(x), jnp.expm1, _small)
_unary("log", lambda m, x: m.math.log(x), jnp.log, _pos)
_unary("log1p", lambda m, x: m.math.log1p(x), jnp.log1p, _all(lambda v: v >= -0.8))
_unary("sqrt", lambda m, x: m.sqrt(x), jnp.sqrt, _pos)
_unary("rsqrt", lambda m, x: m.math.rsqrt(x), lambda x: 1 / jnp.sqrt(x), _pos)
_unary("reciprocal", lambda m, x: m.math.reciprocal(x), lambda x: 1 / x, _nonzero)
_unary("abs", lambda m, x: m.abs(x), jnp.abs, lambda v: _away(v, [0]))
_unary("atan", lambda m, x: m.atan(x), jnp.arctan)
_unary("asinh", lambda m, x: m.math.asinh(x), jnp.arcsinh)
_unary("acosh", lambda m, x: m.math.acosh(x), jnp.arccosh, _all(lambda v: v >= 1.2))
_unary("sinh", lambda m, x: m.sinh(x), jnp.sinh, _small)
_unary("cosh", lambda m, x: m.cosh(x), jnp.cosh, _small)
_unary("asin", lambda m, x: m.asin(x), jnp.arcsin, _unit)
_unary("acos", lambda m, x: m.acos(x), jnp.arccos, _unit)
_unary("atanh", lambda m, x: m.math.atanh(x), jnp.arctanh, _unit)
_unary("erf", lambda m, x: m.math.erf(x), jss.erf)
_unary("erfc", lambda m, x: m.math.erfc(x), jss.erfc)
_unary("lgamma", lambda m, x: m.math.lgamma(x), jss.gammaln, _all(lambda v: (v >= 0.5) & (v <= 8)))
_unary("digamma", lambda m, x: m.math.digamma(x), jss.digamma, _all(lambda v: (v >= 0.5) & (v <= 8)))
_unary("softplus", lambda m, x: m.math.softplus(x), jax.nn.softplus)
_unary("softsign", lambda m, x: m.math.softsign(x), lambda x: x / (1 + jnp.abs(x)), lambda v: _away(v, [0]))
_unary("log_sigmoid", lambda m, x: m.math.log_sigmoid(x), jax.nn.log_sigmoid)
_unary("relu", lambda m, x: m.nn.relu(x), lambda x: jnp.maximum(x, 0), lambda v: _away(v, [0]))
_unary("relu6", lambda m, x: m.nn.relu6(x), lambda x: jnp.clip(x, 0, 6), lambda v: _away(v, [0, 6]))
_unary("elu", lambda m, x: m.nn.elu(x), jax.nn.elu, lambda v: _away(v, [0]))
_unary("selu", lambda m, x: m.nn.selu(x), jax.nn.selu, lambda v: _away(v, [0]))
_unary("gelu", lambda m, x: m.nn.gelu(x), lambda x: jax.nn.gelu(x, approximate=False))
_unary("silu", lambda m, x: m.nn.silu(x), lambda x: x * jax.nn.sigmoid(x))
_unary("leaky_relu", lambda m, x: m.nn.leaky_relu(x), lambda x: jnp.where(x > 0, x, 0.2 * x),
       lambda v: _away(v, [0]))
_unary("identity", lambda m, x: m.identity(x), lambda x: x)
_unary("stop_gradient", lambda m, x: m.stop_gradient(x), jax.lax.stop_gradient, diff=False)
_unary("floor", lambda m, x: m.floor(x), jnp.floor, _frac_away, diff=False)
_unary("round", lambda m, x: m.round(x), jnp.round, lambda v: _frac_away(v, 0.5), diff=False)
_unary("sign", lambda m, x: m.sign(x), jnp.sign, lambda v: _away(v, [0]))
_unary("zeros_like", lambda m, x: m.zeros_like(x), jnp.zeros_like, diff=False)
_unary("ones_like", lambda m, x: m.ones_like(x), jnp.ones_like, diff=False)
_unary("cast_int", lambda m, x: m.cast(m.cast(x, m.int32), m.float32),
       lambda x: jnp.trunc(x), _frac_away, diff=False)
_unary("l2_loss", lambda m, x: m.nn.l2_loss(x), lambda x: jnp.sum(x * x) / 2)


def _gen_from_int(draw, ctx):
    refs = [r for r, v in ctx.vals.items() if v.dtype.kind == "i"]
    return None if not refs else ((draw(st.sampled_from(refs)),), {})


_op("from_int", lambda m, x: m.cast(x, m.float32), lambda x: x.astype(jnp.float32), _gen_from_int, (False,))


# ---- binary elementwise with broadcasting ------------------------------

def _binary(name, tf, jx, px=None, py=None, pair=None, diff=(True, True), yrange=(-2.0, 2.0, False)):
    def gen(draw, ctx):
        x = ctx.pick(px)
        if x is None:
            return None
        y = ctx.partner(ctx.value(x).shape, py, *yrange)
        if y is None:
            return None
        if draw(st.integers(0, 3)) == 0 and y[0] != "k":  # operand order swapped
            x, y = y, x
            if (px is not None and not px(ctx.value(x))) or (py is not None and not py(ctx.value(y))):
                return None
        if pair is not None:
            a, b = np.broadcast_arrays(ctx.value(x), ctx.value(y))
            if not pair(a, b):
                return None
        return (x, y), {}
    _op(name, tf, jx, gen, diff)


_binary("add", lambda m, x, y: m.add(x, y), jnp.add)
_binary("subtract", lambda m, x, y: m.subtract(x, y), jnp.subtract)
_binary("multiply", lambda m, x, y: m.multiply(x, y), jnp.multiply)
_NZ = (0.2, 2.0, True)
_binary("divide", lambda m, x, y: m.divide(x, y), jnp.divide, py=_nonzero, yrange=_NZ)
_binary("maximum", lambda m, x, y: m.maximum(x, y), jnp.maximum, pair=lambda a, b: _away(a - b, [0]))
_binary("minimum", lambda m, x, y: m.minimum(x, y), jnp.minimum, pair=lambda a, b: _away(a - b, [0]))
_binary("pow", lambda m, x, y: m.pow(x, y), jnp.power, px=_pos, py=_all(lambda v: np.abs(v) <= 2.5))
_binary("squared_difference", lambda m, x, y: m.math.squared_difference(x, y), lambda x, y: (x - y) ** 2)
_binary("atan2", lambda m, x, y: m.atan2(x, y), jnp.arctan2,
        pair=lambda a, b: bool(np.all(a.astype(np.float64) ** 2 + b.astype(np.float64) ** 2 >= 0.04)))
# TF masks d/dx of xlogy / xdivy to 0 where x == 0 (TF_SEMANTICS 19; plain JAX gives log(y)):
# a deliberate convention with its own parity test, kept away from here (x != 0).
_binary("xlogy", lambda m, x, y: m.math.xlogy(x, y), jss.xlogy, px=lambda v: _away(v, [0]), py=_pos,
        yrange=(0.2, 2.0, False))
_binary("xdivy", lambda m, x, y: m.math.xdivy(x, y), lambda x, y: x / y, px=lambda v: _away(v, [0]),
        py=_nonzero, yrange=_NZ)
_binary("divide_no_nan", lambda m, x, y: m.math.divide_no_nan(x, y), jnp.divide, py=_nonzero, yrange=_NZ)
_binary("multiply_no_nan", lambda m, x, y: m.math.multiply_no_nan(x, y), jnp.multiply)


# ---- reductions ----------------------------------------------------------

def _axes(draw, rank):
    """None, an int (maybe negative) or a tuple of distinct axes."""
    if rank == 0:
        return None
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return None
    if kind == 1:
        return draw(st.integers(-rank, rank - 1))
    ax = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    return tuple(ax)


def _slices_along(v, axis):
    """``v`` with the reduced axes last, flattened: shape (rest, reduced)."""
    v = np.asarray(v, np.float64)
    if axis is None:
        return v.reshape(1, -1)
    ax = (axis,) if isinstance(axis, int) else axis
    ax = tuple(a % v.ndim for a in ax)
    rest = [a for a in range(v.ndim) if a not in ax]
    return np.transpose(v, rest + list(ax)).reshape(int(np.prod([v.shape[a] for a in rest])), -1)


def _distinct(v, axis):
    s = np.sort(_slices_along(v, axis), axis=1)
    return s.shape[1] < 2 or bool(np.all(np.diff(s, axis=1) >= GAP))


def _reduction(name, tf, jx, pred=None, slice_pred=None):
    def gen(draw, ctx):
        x = ctx.pick(pred)
        if x is None:
            return None
        axis = _axes(draw, ctx.value(x).ndim)
        if slice_pred is not None and not slice_pred(ctx.value(x), axis):
            return None
        return (x,), dict(axis=axis, keepdims=draw(st.booleans()))
    _op(name, tf, jx, gen)


_reduction("reduce_sum", lambda m, x, **p: m.reduce_sum(x, **p), jnp.sum)
_reduction("reduce_mean", lambda m, x, **p: m.reduce_mean(x, **p), jnp.mean)
_reduction("reduce_max", lambda m, x, **p: m.reduce_max(x, **p), jnp.max, slice_pred=_distinct)
_reduction("reduce_min", lambda m, x, **p: m.reduce_min(x, **p), jnp.min, slice_pred=_distinct)
_reduction("reduce_prod", lambda m, x, **p: m.reduce_prod(x, **p), jnp.prod,
           _all(lambda v: (np.abs(v) >= 0.2) & (np.abs(v) <= 3)))
_reduction("reduce_logsumexp", lambda m, x, **p: m.reduce_logsumexp(x, **p),
           lambda x, axis, keepdims: jss.logsumexp(x, axis=axis, keepdims=keepdims))
_reduction("reduce_variance", lambda m, x, **p: m.math.reduce_variance(x, **p), jnp.var)
_reduction("reduce_std", lambda m, x, **p: m.math.reduce_std(x, **p), jnp.std,
           slice_pred=lambda v, a: bool(np.all(np.var(_slices_along(v, a), axis=1) >= 1e-2)))
_reduction("reduce_euclidean_norm", lambda m, x, **p: m.math.reduce_euclidean_norm(x, **p),
           lambda x, axis, keepdims: jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=keepdims)),
           slice_pred=lambda v, a: bool(np.all(np.sum(_slices_along(v, a) ** 2, axis=1) >= 1e-2)))


def _gen_axis_op(min_rank=1, pred=None, slice_ok=None):
    def gen(draw, ctx):
        x = ctx.pick(pred, min_rank=min_rank)
        if x is None:
            return None
        r = ctx.value(x).ndim
        axis = draw(st.integers(-r, r - 1))
        if slice_ok is not None and not slice_ok(ctx.value(x), axis):
            return None
        return (x,), dict(axis=axis)
    return gen


_op("softmax", lambda m, x, axis: m.nn.softmax(x, axis=axis), lambda x, axis: jax.nn.softmax(x, axis=axis),
    _gen_axis_op())
_op("log_softmax", lambda m, x, axis: m.nn.log_softmax(x, axis=axis),
    lambda x, axis: jax.nn.log_softmax(x, axis=axis), _gen_axis_op())
_op("l2_normalize", lambda m, x, axis: m.math.l2_normalize(x, axis=axis),
    lambda x, axis: x / jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=True)),
    _gen_axis_op(slice_ok=lambda v, a: bool(np.all(np.sum(_slices_along(v, a) ** 2, axis=1) >= 1e-2))))


def _gen_cumsum(draw, ctx):
    g = _gen_axis_op()(draw, ctx)
    if g is None:
        return None
    (x,), p = g
    return (x,), dict(p, exclusive=draw(st.booleans()), reverse=draw(st.booleans()))


def _jx_cum(fn):
    def f(x, axis, exclusive, reverse):
        if reverse:
            x = jnp.flip(x, axis)
        y = fn(x, axis=axis)
        if exclusive:
            ident = 0.0 if fn is jnp.cumsum else 1.0
            y = jnp.concatenate([jnp.full_like(jnp.take(y, jnp.array([0]), axis=axis), ident),
                                 jax.lax.slice_in_dim(y, 0, x.shape[axis] - 1, axis=axis % x.ndim)], axis=axis)
        return jnp.flip(y, axis) if reverse else y
    return f


_op("cumsum", lambda m, x, **p: m.cumsum(x, **p), _jx_cum(jnp.cumsum), _gen_cumsum)


def _gen_cumprod(draw, ctx):
    g = _gen_cumsum(draw, ctx)
    if g is None or not _all(lambda v: (np.abs(v) >= 0.2) & (np.abs(v) <= 3))(ctx.value(g[0][0])):
        return None
    return g


_op("cumprod", lambda m, x, **p: m.math.cumprod(x, **p), _jx_cum(jnp.cumprod), _gen_cumprod)


# ---- shape ops -------------------------------------------------------------

def _shapes_of_size(n):
    out = []
    for r in range(0, 4):
        for dims in itertools.product(range(1, n + 1), repeat=r):
            if int(np.prod(dims, dtype=np.int64)) == n:
                out.append(dims)
    return out


def _gen_reshape(draw, ctx):
    x = ctx.pick()
    if x is None:
        return None
    v = ctx.value(x)
    shapes = [s for s in _shapes_of_size(v.size) if s != v.shape] or [v.shape]
    shape = list(draw(st.sampled_from(shapes)))
    if shape and draw(st.integers(0, 3)) == 0:
        shape[draw(st.integers(0, len(shape) - 1))] = -1
    return (x,), dict(shape=tuple(shape))


_op("reshape", lambda m, x, shape: m.reshape(x, shape), lambda x, shape: jnp.reshape(x, shape), _gen_reshape)


def _gen_transpose(draw, ctx):
    x = ctx.pick(min_rank=2)
    if x is None:
        return None
    perm = draw(st.permutations(range(ctx.value(x).ndim)))
    return (x,), dict(perm=tuple(perm))


_op("transpose", lambda m, x, perm: m.transpose(x, perm=perm), lambda x, perm: jnp.transpose(x, perm),
    _gen_transpose)


def _gen_expand(draw, ctx):
    x = ctx.pick(lambda v: v.ndim <= 2)
    if x is None:
        return None
    r = ctx.value(x).ndim
    return (x,), dict(axis=draw(st.integers(-r - 1, r)))


_op("expand_dims", lambda m, x, axis: m.expand_dims(x, axis), lambda x, axis: jnp.expand_dims(x, axis), _gen_expand)


def _gen_squeeze(draw, ctx):
    x = ctx.pick(lambda v: 1 in v.shape)
    if x is None:
        return None
    ones = [i for i, s in enumerate(ctx.value(x).shape) if s == 1]
    axis = None if draw(st.booleans()) else tuple(draw(st.lists(st.sampled_from(ones), min_size=1, unique=True)))
    return (x,), dict(axis=axis)


_op("squeeze", lambda m, x, axis: m.squeeze(x, axis), lambda x, axis: jnp.squeeze(x, axis), _gen_squeeze)


def _gen_tile(draw, ctx):
    x = ctx.pick(min_rank=1)
    if x is None:
        return None
    mult = tuple(draw(st.lists(st.integers(1, 2), min_size=ctx.value(x).ndim, max_size=ctx.value(x).ndim)))
    return (x,), dict(multiples=mult)


_op("tile", lambda m, x, multiples: m.tile(x, multiples), lambda x, multiples: jnp.tile(x, multiples), _gen_tile)


def _gen_broadcast_to(draw, ctx):
    x = ctx.pick(lambda v: v.ndim <= 2)
    if x is None:
        return None
    sh = [s if s != 1 else draw(st.integers(1, 3)) for s in ctx.value(x).shape]
    if draw(st.booleans()):
        sh = [draw(st.integers(1, 3))] + sh
    return (x,), dict(shape=tuple(sh))


_op("broadcast_to", lambda m, x, shape: m.broadcast_to(x, shape), lambda x, shape: jnp.broadcast_to(x, shape),
    _gen_broadcast_to)


def _gen_reverse(draw, ctx):
    x = ctx.pick(min_rank=1)
    if x is None:
        return None
    r = ctx.value(x).ndim
    return (x,), dict(axis=tuple(draw(st.lists(st.integers(0, r - 1), min_size=1, max_size=r, unique=True))))


_op("reverse", lambda m, x, axis: m.reverse(x, axis), lambda x, axis: jnp.flip(x, axis), _gen_reverse)


def _gen_roll(draw, ctx):
    x = ctx.pick(min_rank=1)
    if x is None:
        return None
    r = ctx.value(x).ndim
    return (x,), dict(shift=draw(st.integers(-3, 3)), axis=draw(st.integers(-r, r - 1)))


_op("roll", lambda m, x, shift, axis: m.roll(x, shift, axis), lambda x, shift, axis: jnp.roll(x, shift, axis),
    _gen_roll)


def _gen_pad(draw, ctx):
    x = ctx.pick(min_rank=1)
    if x is None:
        return None
    r = ctx.value(x).ndim
    pads = tuple(tuple(draw(st.lists(st.integers(0, 1), min_size=2, max_size=2))) for _ in range(r))
    return (x,), dict(paddings=pads, constant_values=draw(st.sampled_from([0.0, 0.5])))


_op("pad", lambda m, x, paddings, constant_values: m.pad(x, [list(p) for p in paddings],
                                                         constant_values=constant_values),
    lambda x, paddings, constant_values: jnp.pad(x, paddings, constant_values=constant_values), _gen_pad)


def _gen_gather(draw, ctx):
    x = ctx.pick(min_rank=1)
    if x is None:
        return None
    v = ctx.value(x)
    r = v.ndim
    axis = draw(st.integers(-r, r - 1))
    n = v.shape[axis]
    idx_shape = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=max(0, 3 - r))))
    idx = np.asarray(draw(st.lists(st.integers(0, n - 1), min_size=int(np.prod(idx_shape, dtype=np.int64)),
                                   max_size=int(np.prod(idx_shape, dtype=np.int64)))), np.int32).reshape(idx_shape)
    return (x,), dict(indices=idx, axis=axis)


_op("gather", lambda m, x, indices, axis: m.gather(x, m.constant(indices), axis=axis),
    lambda x, indices, axis: jnp.take(x, jnp.asarray(indices), axis=axis), _gen_gather)


def _gen_getitem(draw, ctx):
    x = ctx.pick(min_rank=1)
    if x is None:
        return None
    shape = ctx.value(x).shape
    k = draw(st.integers(1, len(shape)))
    ellipsis = k < len(shape) and draw(st.integers(0, 4)) == 0  # x[..., i] indexes the last k dims
    idx = []
    for d in (shape[len(shape) - k:] if ellipsis else shape[:k]):
        if draw(st.integers(0, 2)) == 0:
            idx.append(draw(st.integers(-d, d - 1)))
        else:
            step = draw(st.sampled_from([1, 1, 2, -1]))
            a = draw(st.one_of(st.none(), st.integers(-d, d - 1)))
            b = draw(st.one_of(st.none(), st.integers(-d, d)))
            idx.append(slice(a, b, step))
    if draw(st.integers(0, 4)) == 0:
        idx.insert(draw(st.integers(0, len(idx))), None)
    if ellipsis:
        idx.insert(0, Ellipsis)
    idx = tuple(idx)
    out = np.asarray(ctx.value(x))[idx]
    if out.size == 0 or out.ndim > 3:
        return None
    return (x,), dict(idx=idx)


_op("getitem", lambda m, x, idx: x[idx], lambda x, idx: x[idx], _gen_getitem)


def _gen_split(draw, ctx):
    x = ctx.pick(lambda v: v.ndim >= 1 and max(v.shape) >= 2)
    if x is None:
        return None
    shape = ctx.value(x).shape
    axis = draw(st.sampled_from([i for i, s in enumerate(shape) if s >= 2]))
    n = shape[axis]
    if draw(st.booleans()):
        sizes = n  # equal pieces of 1
        parts = n
    else:
        a = draw(st.integers(1, n - 1))
        sizes = (a, n - a)
        parts = 2
    return (x,), dict(sizes=sizes, axis=axis, out=draw(st.integers(0, parts - 1)))


def _jx_split(x, sizes, axis, out):
    bounds = list(np.cumsum(sizes)[:-1]) if isinstance(sizes, tuple) else sizes
    return jnp.split(x, bounds, axis=axis)[out]


_op("split", lambda m, x, sizes, axis, out: m.split(x, list(sizes) if isinstance(sizes, tuple) else sizes,
                                                    axis=axis)[out], _jx_split, _gen_split)


def _gen_unstack(draw, ctx):
    x = ctx.pick(min_rank=1)
    if x is None:
        return None
    shape = ctx.value(x).shape
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return (x,), dict(axis=axis, out=draw(st.integers(0, shape[axis] - 1)))


_op("unstack", lambda m, x, axis, out: m.unstack(x, axis=axis)[out],
    lambda x, axis, out: jnp.take(x, out, axis=axis), _gen_unstack)


def _gen_same_shape_list(draw, ctx, lo=1, hi=3):
    x = ctx.pick()
    if x is None:
        return None
    shape = ctx.value(x).shape
    same = [r for r in ctx.floats() if ctx.value(r).shape == shape]
    n = draw(st.integers(lo, hi))
    rest = [draw(st.sampled_from(same[::-1])) for _ in range(n)]
    return [x] + rest


def _gen_concat(draw, ctx):
    xs = _gen_same_shape_list(draw, ctx, 1, 2)
    if xs is None or ctx.value(xs[0]).ndim == 0:
        return None
    r = ctx.value(xs[0]).ndim
    return tuple(xs), dict(axis=draw(st.integers(-r, r - 1)))


_op("concat", lambda m, *xs, axis: m.concat(list(xs), axis=axis),
    lambda *xs, axis: jnp.concatenate(xs, axis=axis), _gen_concat, diff=(True,) * 3)


def _gen_stack(draw, ctx):
    xs = _gen_same_shape_list(draw, ctx, 1, 2)
    if xs is None or ctx.value(xs[0]).ndim >= 3:
        return None
    r = ctx.value(xs[0]).ndim
    return tuple(xs), dict(axis=draw(st.integers(-r - 1, r)))


_op("stack", lambda m, *xs, axis: m.stack(list(xs), axis=axis), lambda *xs, axis: jnp.stack(xs, axis=axis),
    _gen_stack, diff=(True,) * 3)


def _gen_add_n(draw, ctx):
    xs = _gen_same_shape_list(draw, ctx, 1, 2)
    return None if xs is None else (tuple(xs), {})


_op("add_n", lambda m, *xs: m.add_n(list(xs)), lambda *xs: sum(xs[1:], xs[0]), _gen_add_n, diff=(True,) * 3)


# ---- matmul, where, clip, sort, top_k, one_hot(argmax) -------------------

def _gen_matmul(draw, ctx):
    x = ctx.pick(min_rank=2)
    if x is None:
        return None
    v = ctx.value(x)
    ta, tb = draw(st.booleans()), draw(st.booleans())
    a_shape = v.shape[:-2] + ((v.shape[-1], v.shape[-2]) if ta else v.shape[-2:])
    inner = a_shape[-1]
    if draw(st.integers(0, 3)) == 0:  # x times itself
        y, tb = x, not ta
    else:
        n = draw(st.integers(1, 3))
        want = v.shape[:-2] + ((n, inner) if tb else (inner, n))
        cands = [r for r in ctx.floats() if ctx.value(r).shape == want]
        y = draw(st.sampled_from(cands[::-1])) if cands and draw(st.booleans()) else ctx.const(want)
    return (x, y), dict(transpose_a=ta, transpose_b=tb)


def _jx_matmul(x, y, transpose_a, transpose_b):
    if transpose_a:
        x = jnp.swapaxes(x, -1, -2)
    if transpose_b:
        y = jnp.swapaxes(y, -1, -2)
    return x @ y


_op("matmul", lambda m, x, y, **p: m.matmul(x, y, **p), _jx_matmul, _gen_matmul, diff=(True, True))


def _gen_where(draw, ctx):
    c = ctx.pick()
    if c is None:
        return None
    thr = draw(st.sampled_from([0.0, 0.5, -0.5]))
    if not _away(ctx.value(c), [thr]):
        return None
    shape = ctx.value(c).shape
    a = ctx.partner(shape)
    b = ctx.partner(shape)
    if a is None or b is None:
        return None
    sh = _bcast(_bcast(shape, ctx.value(a).shape) or (9, 9, 9, 9), ctx.value(b).shape)
    if sh is None:
        return None
    return (c, a, b), dict(thr=thr)


_op("where", lambda m, c, a, b, thr: m.where(m.greater(c, thr), a, b),
    lambda c, a, b, thr: jnp.where(c > thr, a, b), _gen_where, diff=(False, True, True))


def _gen_clip(draw, ctx):
    x = ctx.pick()
    if x is None:
        return None
    lo = draw(st.sampled_from([-1.0, -0.5, 0.0]))
    hi = draw(st.sampled_from([0.25, 1.0, 2.0]))
    if not _away(ctx.value(x), [lo, hi]):
        return None
    return (x,), dict(lo=lo, hi=hi)


_op("clip_by_value", lambda m, x, lo, hi: m.clip_by_value(x, lo, hi), lambda x, lo, hi: jnp.clip(x, lo, hi),
    _gen_clip)


def _gen_sort(draw, ctx):
    x = ctx.pick(min_rank=1)
    if x is None or not _distinct(ctx.value(x), -1):
        return None
    return (x,), dict(direction=draw(st.sampled_from(["ASCENDING", "DESCENDING"])))


_op("sort", lambda m, x, direction: m.sort(x, direction=direction),
    lambda x, direction: jnp.sort(x, axis=-1) if direction == "ASCENDING" else -jnp.sort(-x, axis=-1), _gen_sort)


def _gen_top_k(draw, ctx):
    x = ctx.pick(min_rank=1)
    if x is None or not _distinct(ctx.value(x), -1):
        return None
    return (x,), dict(k=draw(st.integers(1, ctx.value(x).shape[-1])))


_op("top_k", lambda m, x, k: m.math.top_k(x, k=k).values, lambda x, k: jax.lax.top_k(x, k)[0], _gen_top_k)


def _gen_onehot(draw, ctx):
    x = ctx.pick(lambda v: v.ndim in (1, 2))
    if x is None or not _distinct(ctx.value(x), -1):
        return None
    return (x,), dict(depth=draw(st.integers(1, 4)))


_op("one_hot_argmax", lambda m, x, depth: m.one_hot(m.argmax(x, axis=-1), depth),
    lambda x, depth: jax.nn.one_hot(jnp.argmax(x, axis=-1), depth), _gen_onehot, diff=(False,))


# ---- Variable.assign_add between reads ---------------------------------------
# Later reads see the new value; each read's gradient goes to the Variable (reads are
# summed, each at the value it read: TF_SEMANTICS 7).  The step's value is a read after
# the assignment (``identity(v)``); the interpreters also update the Variable's value.

def _gen_assign_add(draw, ctx):
    refs = [("s", i) for i, s in enumerate(ctx.prog.sources) if s.kind.startswith("var")]
    if not refs:
        return None
    v = draw(st.sampled_from(refs))
    c = ctx.const(ctx.value(v).shape, -0.5, 0.5)
    return (v, c), {}


def _tf_assign_add(m, v, c):
    v.assign_add(c)
    return m.identity(v)


_op("assign_add", _tf_assign_add, lambda v, c: v + c, _gen_assign_add, diff=(True, False))


# ---- custom gradients (oracle: jax.custom_vjp of the same rule) ----------

def _tf_custom_clip(m):
    @m.custom_gradient
    def f(x):
        y = m.sin(x)

        def grad(dy):
            return m.clip_by_value(dy, -0.5, 0.5) * m.cos(x)
        return y, grad
    return f


def _tf_custom_scale(m):
    @m.custom_gradient
    def f(x, y):
        out = x * y

        def grad(dz):
            return dz * y * 0.5, dz * x * 2.0
        return out, grad
    return f


@jax.custom_vjp
def _jx_custom_clip(x):
    return jnp.sin(x)


_jx_custom_clip.defvjp(lambda x: (jnp.sin(x), x), lambda x, dy: (jnp.clip(dy, -0.5, 0.5) * jnp.cos(x),))


@jax.custom_vjp
def _jx_custom_scale(x, y):
    return x * y


_jx_custom_scale.defvjp(lambda x, y: (x * y, (x, y)), lambda r, dz: (dz * r[1] * 0.5, dz * r[0] * 2.0))


def _custom_arg(m, x):
    # a Variable passed into a custom_gradient function would be read inside it, which TF
    # requires grad_fn to handle with ``variables=``; the identity reads it outside instead.
    return m.identity(x) if isinstance(x, m.Variable) else x


_CUSTOM_CACHE = {}


def _custom(m, key, make):
    k = (id(m), key)
    if k not in _CUSTOM_CACHE:
        _CUSTOM_CACHE[k] = make(m)
    return _CUSTOM_CACHE[k]


_op("custom_clip", lambda m, x: _custom(m, "clip", _tf_custom_clip)(_custom_arg(m, x)),
    lambda x: _jx_custom_clip(x), lambda d, c: (lambda x: None if x is None else ((x,), {}))(c.pick()),
    custom=True)


def _gen_custom_scale(draw, ctx):
    x = ctx.pick()
    if x is None:
        return None
    shape = ctx.value(x).shape
    same = [r for r in ctx.floats() if ctx.value(r).shape == shape]
    return (x, draw(st.sampled_from(same[::-1]))), {}


_op("custom_scale", lambda m, x, y: _custom(m, "scale", _tf_custom_scale)(_custom_arg(m, x), _custom_arg(m, y)),
    _jx_custom_scale, _gen_custom_scale, diff=(True, True), custom=True)


# --------------------------------------------------------------------------
# The program strategy
# --------------------------------------------------------------------------

LEAF_KINDS = ("watched", "var", "var_nt", "var_nt_w", "int", "const")
OP_NAMES = tuple(OPS)
# TF registers no gradient for SoftsignGrad, so a 2nd-order gradient through softsign
# raises LookupError in TF (tapejax differentiates it); nested programs leave it out.
NESTED_OP_NAMES = tuple(n for n in OPS if n != "softsign")
# Second order through a custom gradient: TF's outer tape differentiates the recorded forward op by
# its custom rule, also where the op's output feeds the inner gradient (d(y^2)/dy = 2y); JAX's
# grad of a vjp differentiates the custom_vjp's forward as written there (jax.vjp's primal), so
# the JAX oracle of a nested program leaves custom ops out (the TF oracle keeps them).
NESTED_JAX_OP_NAMES = tuple(n for n in NESTED_OP_NAMES if not OPS[n].custom)


def _eval_step(op, args_vals, params):
    out = op.jx(*[jnp.asarray(a) for a in args_vals], **params)
    return np.asarray(out)


@st.composite
def programs(draw, nested=False, max_steps=6, ops=None):
    if ops is None:
        ops = NESTED_OP_NAMES if nested else OP_NAMES
    prog = Program(sources=[], consts=[], steps=[], inter=(), calls=[], nested=nested)
    ctx = Ctx(draw, prog)
    n_leaf = draw(st.integers(1, 3))
    kinds = ("watched", "var", "var_nt_w", "var_nt", "int") if nested else LEAF_KINDS
    for i in range(n_leaf):
        kind = draw(st.sampled_from(kinds)) if i else draw(st.sampled_from(("watched", "var")))
        shape = draw(_shapes())
        if kind == "int":
            n = int(np.prod(shape, dtype=np.int64))
            val = np.asarray(draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n)), np.int32).reshape(shape)
        else:
            val = draw(_arrays(shape, -2.0, 2.0))
        prog.sources.append(Source(kind, val))
        ctx.vals[("s", i)] = val
    n_steps = draw(st.integers(1, max_steps))
    stopped = False
    for j in range(n_steps):
        if not nested and draw(st.integers(0, 7)) == 0:
            stopped = not stopped  # enter / leave a stop_recording() segment
        step = None
        for _ in range(8):
            name = draw(st.sampled_from(ops))
            op = OPS[name]
            g = op.gen(draw, ctx)
            if g is None:
                continue
            args, params = g
            out = _eval_step(op, [ctx.value(a) for a in args], params)
            if out.dtype.kind != "f" or out.ndim > 3 or not np.all(np.isfinite(out)) or \
                    np.max(np.abs(out), initial=0) > BOUND:
                continue
            step = Step(name, tuple(args), params, stopped)
            break
        if step is None:  # always valid: tanh of the newest float value
            x = ctx.pick()
            step = Step("tanh", (x,), {}, stopped)
            out = _eval_step(OPS["tanh"], [ctx.value(x)], {})
        prog.steps.append(step)
        ctx.vals[("v", j)] = out
        if step.op == "assign_add":
            ctx.vals[step.args[0]] = out

    leaf_refs = [("s", i) for i in range(n_leaf)]
    step_refs = [("v", j) for j in range(n_steps)]
    if not nested:
        cand = [j for j, s in enumerate(prog.steps) if not s.stopped]
        prog.inter = tuple(sorted(set(draw(st.lists(st.sampled_from(cand), max_size=2)) if cand else [])))
        prog.persistent = draw(st.booleans())
    n_calls = draw(st.integers(2, 3)) if prog.persistent else 1
    for _ in range(n_calls):
        tchoices = step_refs + [("s", i) for i, s in enumerate(prog.sources) if s.kind == "watched"]
        targets = [step_refs[-1]] if draw(st.booleans()) else []
        targets += draw(st.lists(st.sampled_from(tchoices), min_size=0 if targets else 1, max_size=2))
        srcs = leaf_refs + [("v", j) for j in prog.inter]
        srcs = tuple(draw(st.permutations(srcs))[:draw(st.integers(1, len(srcs)))])
        og = None
        if draw(st.booleans()):
            og = tuple(draw(_arrays(ctx.value(t).shape, -2.0, 2.0)) for t in targets)
        single = len(targets) == 1 and draw(st.booleans())
        unc = "none" if nested else draw(st.sampled_from(["none", "zero"]))
        prog.calls.append(Call(tuple(targets), srcs, og, unc, single))
    if nested:
        prog.weights = tuple(draw(_arrays(ctx.value(s).shape, -1.0, 1.0)) for s in prog.calls[0].sources)
        prog.calls.append(Call((), prog.calls[0].sources, None, draw(st.sampled_from(["none", "zero"]))))
    return prog


# --------------------------------------------------------------------------
# Structure: which sources each value is connected to
# --------------------------------------------------------------------------

def tracked_leaves(prog):
    """Leaf indices a tape differentiates: watched float constants, Variables that are
    trainable (auto-watched when read in a recorded op) or explicitly watched."""
    return {i for i, s in enumerate(prog.sources) if s.kind in ("watched", "var", "var_nt_w")}


def connectivity(prog):
    """ref -> frozenset of source refs the value depends on through recorded,
    differentiable paths (TF's ``None`` rule)."""
    tracked = tracked_leaves(prog)
    conn = {("s", i): frozenset([("s", i)]) if i in tracked else frozenset() for i in range(len(prog.sources))}
    for c in range(len(prog.consts)):
        conn[("k", c)] = frozenset()
    for j, s in enumerate(prog.steps):
        op = OPS[s.op]
        c = frozenset()
        if not s.stopped:
            for a, d in zip(s.args, op.diff):
                if d:
                    c |= conn[a]
        if j in prog.inter:
            c |= {("v", j)}
        conn[("v", j)] = c
    return conn


# --------------------------------------------------------------------------
# Interpreters
# --------------------------------------------------------------------------

def _leaves(m, prog):
    out = []
    for s in prog.sources:
        if s.kind == "int":
            out.append(m.constant(s.value, dtype=m.int32))
        elif s.kind in ("watched", "const"):
            out.append(m.constant(s.value))
        else:
            out.append(m.Variable(s.value, trainable=(s.kind == "var")))
    return out


def _watch(tape, prog, leaves):
    for s, x in zip(prog.sources, leaves):
        if s.kind in ("watched", "int", "var_nt_w"):
            tape.watch(x)


def _run_steps(m, prog, tape, env):
    for j, s in enumerate(prog.steps):
        op = OPS[s.op]
        args = [env[a] for a in s.args]
        if s.stopped:
            with tape.stop_recording():
                out = op.tf(m, *args, **s.params)
        else:
            out = op.tf(m, *args, **s.params)
        if j in prog.inter:
            tape.watch(out)
        env[("v", j)] = out


def _to_np(g, m=None):
    if g is None:
        return None
    if type(g).__name__ == "IndexedSlices":
        # a gather's gradient is sparse (TF_SEMANTICS 15): compare the densified value
        g = m.convert_to_tensor(g)
    if hasattr(g, "numpy"):
        return np.asarray(g.numpy())
    return np.asarray(g)


def _unc(m, mode):
    return m.UnconnectedGradients.ZERO if mode == "zero" else m.UnconnectedGradients.NONE


def _grad_call(m, tape, call, env):
    targets = [env[t] for t in call.targets]
    sources = [env[s] for s in call.sources]
    og = None if call.output_gradients is None else [m.constant(a) for a in call.output_gradients]
    if call.single_target:
        targets = targets[0]
        og = None if og is None else og[0]
    return tape.gradient(targets, sources, output_gradients=og, unconnected_gradients=_unc(m, call.unconnected))


def run_tape(m, prog):
    """The program on ``m`` (tapejax or tensorflow): a list (per gradient call) of lists of
    numpy gradients / None."""
    _CUSTOM_CACHE.clear()
    leaves = _leaves(m, prog)
    env = {("s", i): x for i, x in enumerate(leaves)}
    env.update({("k", c): m.constant(a) for c, a in enumerate(prog.consts)})
    if prog.nested:
        return _run_nested(m, prog, leaves, env)
    tape = m.GradientTape(persistent=prog.persistent)
    with tape:
        _watch(tape, prog, leaves)
        _run_steps(m, prog, tape, env)
    return [[_to_np(g, m) for g in _grad_call(m, tape, c, env)] for c in prog.calls]


def _run_nested(m, prog, leaves, env):
    first, second = prog.calls
    with m.GradientTape() as outer:
        _watch(outer, prog, leaves)
        with m.GradientTape() as inner:
            _watch(inner, prog, leaves)
            _run_steps(m, prog, inner, env)
        g = _grad_call(m, inner, first, env)
        z = None
        for gi, w in zip(g, prog.weights):
            if gi is not None and gi.dtype == m.float32:
                term = m.reduce_sum(gi * m.constant(w))
                z = term if z is None else z + term
    res1 = [_to_np(x, m) for x in g]
    if z is None:
        return [res1, "no z"]
    res2 = outer.gradient(z, [env[s] for s in second.sources], unconnected_gradients=_unc(m, second.unconnected))
    return [res1, [_to_np(x, m) for x in res2]]


# ---- the jax oracle ----------------------------------------------------

def _pure(prog):
    """(F, leaf refs, inter refs): F(leaf_vals, eps) -> {ref: value} over every value."""
    tracked = sorted(tracked_leaves(prog))

    def F(leaf_vals, eps):
        env = {}
        for i, s in enumerate(prog.sources):
            env[("s", i)] = jnp.asarray(s.value)
        for i, v in zip(tracked, leaf_vals):
            env[("s", i)] = v
        for c, a in enumerate(prog.consts):
            env[("k", c)] = jnp.asarray(a)
        for j, s in enumerate(prog.steps):
            op = OPS[s.op]
            args = [env[a] for a in s.args]
            if s.op == "assign_add":  # the Variable holds the new value; later reads see it
                env[s.args[0]] = args[0] + args[1]
            if s.stopped:
                args = [jax.lax.stop_gradient(a) for a in args]
            out = op.jx(*args, **s.params)
            if j in eps:
                out = out + eps[j]
            env[("v", j)] = out
        return env
    return F, tracked


def _expected(call, prog, conn, grads_by_ref):
    """Per source of ``call``: the oracle gradient, None, or zeros (unconnected + 'zero')."""
    reach = frozenset().union(*[conn[t] for t in call.targets]) if call.targets else frozenset()
    out = []
    for s in call.sources:
        if s in reach:
            out.append(np.asarray(grads_by_ref[s]))
        elif call.unconnected == "zero":
            v = _ref_value(prog, s)
            out.append(np.zeros(v.shape, v.dtype))
        else:
            out.append(None)
    return out


def _ref_value(prog, ref):
    if ref[0] == "s":
        return prog.sources[ref[1]].value
    F, tracked = _pure(prog)
    env = F([jnp.asarray(prog.sources[i].value) for i in tracked], {})
    return np.asarray(env[ref])


def _cotangents(call, env):
    if call.output_gradients is None:
        return [jnp.ones_like(env[t]) for t in call.targets]
    return [jnp.asarray(a) for a in call.output_gradients]


def oracle_jax(prog):
    """Expected results of ``run_tape`` for a flat (non-nested) program."""
    F, tracked = _pure(prog)
    conn = connectivity(prog)
    leaf0 = [jnp.asarray(prog.sources[i].value) for i in tracked]
    base = F(leaf0, {})
    eps0 = {j: jnp.zeros_like(base[("v", j)]) for j in prog.inter}
    results = []
    for call in prog.calls:
        def G(leaf_vals, eps, call=call):
            env = F(leaf_vals, eps)
            return [env[t] for t in call.targets]
        outs, vjp = jax.vjp(G, leaf0, eps0)
        gl, ge = vjp(_cotangents(call, base))
        by_ref = {("s", i): g for i, g in zip(tracked, gl)}
        by_ref.update({("v", j): g for j, g in ge.items()})
        results.append(_expected(call, prog, conn, by_ref))
    return results


def oracle_jax_nested(prog):
    """Expected (first-order, second-order) results of a nested program.  Second-order
    ``None``-ness: a source unconnected at first order is None; a connected one may be
    None in TF when its second derivative is structurally zero (a linear path), which
    a pure-function oracle cannot see: ``ZERO_OR_NONE`` marks where either is accepted
    (values must then be zero)."""
    F, tracked = _pure(prog)
    conn = connectivity(prog)
    first, second = prog.calls
    leaf0 = [jnp.asarray(prog.sources[i].value) for i in tracked]
    base = F(leaf0, {})
    cts = _cotangents(first, base)

    def G(leaf_vals):
        env = F(leaf_vals, {})
        return [env[t] for t in first.targets]

    def first_grads(leaf_vals):
        _, vjp = jax.vjp(G, leaf_vals)
        return vjp(cts)[0]

    g1 = first_grads(leaf0)
    by_ref = {("s", i): g for i, g in zip(tracked, g1)}
    res1 = _expected(first, prog, conn, by_ref)
    reach = frozenset().union(*[conn[t] for t in first.targets])
    used = [(k, s) for k, s in enumerate(first.sources) if s in reach]
    if not used:
        return [res1, "no z"]

    def H(leaf_vals):
        g = first_grads(leaf_vals)
        d = {("s", i): gi for i, gi in zip(tracked, g)}
        return sum(jnp.sum(d[s] * prog.weights[k]) for k, s in used)

    g2 = jax.grad(H)(leaf0)
    by2 = {("s", i): g for i, g in zip(tracked, g2)}
    res2 = []
    for s in second.sources:
        if s in reach:
            res2.append(ZeroOrNone(np.asarray(by2[s])))
        elif second.unconnected == "zero":
            v = prog.sources[s[1]].value
            res2.append(np.zeros(v.shape, v.dtype))
        else:
            res2.append(None)
    return [res1, res2]


class ZeroOrNone:
    """An expected array that may also be None if it is all zeros (see oracle_jax_nested)."""

    def __init__(self, value):
        self.value = value


class NoneOrZeros:
    """An expected None that may also be an all-zero array of ``dtype``/``shape``."""

    def __init__(self, dtype, shape):
        self.dtype, self.shape = np.dtype(dtype), tuple(shape)


def loosen_second_order(prog, want):
    """TF's 2nd-order ``None``-ness follows how its gradient functions are written
    (notes/tf_facts.md, "3 nested tapes": ``a*a`` gives None at 3rd order, ``pow(a, 2)``
    gives 0.0), while tapejax decides it from the jaxpr of the whole gradient (e.g. the
    gradient of ``reduce_max`` reads ``x`` through its tie mask, so tapejax says
    connected, zeros, where TF says None).  A documented difference: for a connected
    source, None and zeros are accepted as equal at 2nd order; values are still compared."""
    if not prog.nested or isinstance(want[1], str) or prog.calls[1].unconnected != "none":
        return want
    second = []
    for s, w in zip(prog.calls[1].sources, want[1]):
        v = prog.sources[s[1]].value
        if w is None and v.dtype.kind == "f":
            second.append(NoneOrZeros(v.dtype, v.shape))
        elif isinstance(w, np.ndarray):
            second.append(ZeroOrNone(w))
        else:
            second.append(w)
    return [want[0], second]


# --------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------

RTOL, ATOL = 1e-4, 1e-5


def compare(got, want, where="", zero_dtype_exact=True):
    """List of mismatch messages between two ``run_tape``-shaped results."""
    errs = []
    if isinstance(want, str) or isinstance(got, str):
        if got != want:
            errs.append(f"{where}: got {got!r}, want {want!r}")
        return errs
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{where}: got {type(got).__name__} of len {len(got) if hasattr(got, '__len__') else '?'}, "
                    f"want list of {len(want)}"]
        for k, (g, w) in enumerate(zip(got, want)):
            errs += compare(g, w, f"{where}[{k}]")
        return errs
    if isinstance(want, NoneOrZeros):
        if got is None:
            return errs
        got = np.asarray(got)
        if got.dtype != want.dtype or got.shape != want.shape or np.any(got != 0):
            errs.append(f"{where}: got {got!r}, want None (or zeros)")
        return errs
    if isinstance(want, ZeroOrNone):
        if got is None:
            if not np.allclose(want.value, 0, atol=ATOL):
                errs.append(f"{where}: got None, want nonzero {want.value!r}")
            return errs
        want = want.value
    if want is None or got is None:
        if not (want is None and got is None):
            errs.append(f"{where}: got {got!r}, want {want!r}")
        return errs
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return [f"{where}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}"]
    scale = max(1.0, float(np.max(np.abs(want.astype(np.float64)), initial=0)))
    if not np.allclose(got, want, rtol=RTOL, atol=ATOL * scale * 10):
        errs.append(f"{where}: values differ\n got  {got!r}\n want {want!r}")
    return errs
