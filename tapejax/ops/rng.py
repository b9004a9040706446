"""``tf.random``'s explicit-state API on JAX keys: ``Generator`` objects (``from_seed``, ``split``,
``normal`` ...), the ``stateless_*`` ops, ``fold_in`` / ``split`` / ``create_rng_state``, and the
stateful ``gamma`` / ``poisson`` (``tapejax.random``'s seed rules).

A ``Generator``'s state is a tapejax Variable holding its JAX key (``uint32[2]``), as TF keeps it
in a ``tf.Variable``: each draw splits it and assigns the new key, so a generator used inside
``tapejax.function`` is threaded through the compiled step as state and advances at every call.
A ``stateless_*`` op computes its key from its ``seed`` tensor (shape ``[2]``) inside the op, so
the same seed gives the same values, also traced.  As everywhere in ``tapejax.random``, the
values differ from TF's (another generator: Threefry, ``Algorithm.THREEFRY``); the rules are TF's.
"""
import enum
import os
import threading

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..core.variable import Variable
from ._registry import output_shape, prim, tf_types
from .random import _GLOBAL, _float_dtype, _next_key, _param, split_key


class Algorithm(enum.Enum):
    """``tf.random.Algorithm``: the bit generators (tapejax runs JAX's Threefry for all of them)."""
    PHILOX = 1
    THREEFRY = 2
    AUTO_SELECT = 3


def _seed_key(seed):
    """A JAX key from a TF stateless seed (int tensor of shape ``[2]``), traceable."""
    s = seed.astype(jnp.uint32)
    return jax.random.fold_in(jax.random.PRNGKey(s[0]), s[1])


def _draw(kind, key, *params, shape, dtype):
    if kind == "normal":
        mean, std = params
        return jax.random.normal(key, shape, dtype) * std + mean
    if kind == "truncated_normal":
        mean, std = params
        return jax.random.truncated_normal(key, -2.0, 2.0, shape, dtype) * std + mean
    if kind == "uniform":
        lo, hi = params
        return jax.random.uniform(key, shape, dtype) * (hi - lo) + lo
    if kind == "uniform_int":
        lo, hi = params
        return jax.random.randint(key, shape, lo, hi, dtype)
    if kind == "full_int":   # every bit pattern of the dtype
        d = np.dtype(dtype)
        return jax.lax.bitcast_convert_type(jax.random.bits(key, shape, np.dtype(f"uint{8 * d.itemsize}")), d)
    if kind == "gamma":
        (alpha,) = params
        return jax.random.gamma(key, jnp.broadcast_to(alpha, shape), shape, dtype)
    if kind == "poisson":
        (lam,) = params
        return jax.random.poisson(key, lam, shape).astype(dtype)
    if kind == "binomial":
        counts, probs = params
        return jax.random.binomial(key, counts, probs, shape).astype(dtype)
    if kind == "categorical":
        (logits,) = params
        return jax.random.categorical(key, logits, axis=-1, shape=(shape[0], logits.shape[0])).T.astype(dtype)
    raise ValueError(kind)


_STATELESS = {k: prim(f"Stateless{''.join(w.capitalize() for w in k.split('_'))}",
                      lambda seed, *p, shape, dtype, _k=k: _draw(_k, _seed_key(seed), *p, shape=shape, dtype=dtype),
                      differentiable=k in ("normal", "truncated_normal", "uniform", "gamma"))
              for k in ("normal", "truncated_normal", "uniform", "uniform_int", "full_int", "gamma", "poisson",
                        "binomial", "categorical")}
_KEYED = {k: prim(f"Random{''.join(w.capitalize() for w in k.split('_'))}Keyed",
                  lambda key, *p, shape, dtype, _k=k: _draw(_k, key, *p, shape=shape, dtype=dtype),
                  differentiable=k in ("normal", "truncated_normal", "uniform", "gamma"))
          for k in ("normal", "truncated_normal", "uniform", "uniform_int", "full_int", "gamma", "poisson", "binomial")}


def _seed(seed):
    s = convert_to_tensor(seed)
    if tuple(s.shape) != (2,) or np.dtype(s._meta.dtype).kind not in "iu":
        raise ValueError(f"Argument `seed` must be an integer tensor of shape [2]; got shape {tuple(s.shape)} and dtype "
                         f"{s.dtype.name}")
    return s


def _int_store(dtype):
    return _dtypes.storage_dtype(_dtypes.as_dtype(dtype)._np, "dtype").name


def _make(kind, key_or_seed, params, shape, dtype, stateless):
    table = _STATELESS if stateless else _KEYED
    return bind(table[kind], key_or_seed, *params, shape=output_shape(shape, table[kind].name), dtype=dtype)


def _uniform_args(shape, minval, maxval, dtype):
    d = _dtypes.as_dtype(dtype)
    store = _int_store(d)
    if d.is_integer:
        if (minval is None) != (maxval is None):
            raise ValueError("For integer dtypes, give both `minval` and `maxval`, or neither (the full range)")
        if minval is None:
            return "full_int", (), store
        return "uniform_int", (_param(minval, store), _param(maxval, store)), store
    if not d.is_floating:
        raise ValueError(f"Invalid dtype {d!r} for uniform (argument `dtype`)")
    return "uniform", (_param(0 if minval is None else minval, store), _param(1 if maxval is None else maxval, store)), store


# -- stateless ops --------------------------------------------------------------------------------

@tf_types("StatelessNormal")
def stateless_normal(shape, seed, mean=0.0, stddev=1.0, dtype=_dtypes.float32, name=None, alg="auto_select"):
    """``tf.random.stateless_normal``: the same ``seed`` gives the same values."""
    dt = _float_dtype(dtype, "stateless_normal")
    return _make("normal", _seed(seed), (_param(mean, dt), _param(stddev, dt)), shape, dt, True)


@tf_types("StatelessTruncatedNormal")
def stateless_truncated_normal(shape, seed, mean=0.0, stddev=1.0, dtype=_dtypes.float32, name=None, alg="auto_select"):
    """``tf.random.stateless_truncated_normal``."""
    dt = _float_dtype(dtype, "stateless_truncated_normal")
    return _make("truncated_normal", _seed(seed), (_param(mean, dt), _param(stddev, dt)), shape, dt, True)


@tf_types("StatelessUniform", "StatelessUniformInt", "StatelessFullInt")
def stateless_uniform(shape, seed, minval=0, maxval=None, dtype=_dtypes.float32, name=None, alg="auto_select"):
    """``tf.random.stateless_uniform`` in ``[minval, maxval)``; an integer dtype with neither bound
    draws from its full range."""
    d = _dtypes.as_dtype(dtype)
    if d.is_integer and maxval is None and minval == 0:
        minval = None
    kind, params, store = _uniform_args(shape, minval, maxval, dtype)
    return _make(kind, _seed(seed), params, shape, store, True)


@tf_types("StatelessCategorical")
def stateless_categorical(logits, num_samples, seed, dtype=_dtypes.int64, name=None):
    """``tf.random.stateless_categorical``: ``[batch, num_samples]`` class ids."""
    lg = convert_to_tensor(logits)
    return bind(_STATELESS["categorical"], _seed(seed), lg, shape=(int(num_samples),), dtype=_int_store(dtype))


@tf_types("StatelessGamma")
def stateless_gamma(shape, seed, alpha, beta=None, dtype=_dtypes.float32, name=None):
    """``tf.random.stateless_gamma``: Gamma(``alpha``) draws divided by ``beta``."""
    dt = _float_dtype(dtype, "stateless_gamma")
    a, b = _param(alpha, dt), None if beta is None else _param(beta, dt)
    # TF's StatelessRandomGammaV3: ``shape`` must end with the broadcast shape of alpha and beta
    # (an alpha of shape [1] under shape [3] is refused, not broadcast)
    want = np.broadcast_shapes(tuple(a.shape), () if b is None else tuple(b.shape))
    got = tuple(output_shape(shape, "StatelessRandomGammaV3"))
    if len(want) > len(got) or got[len(got) - len(want):] != tuple(want):
        raise InvalidArgumentError(None, None, "Shape passed in must end with broadcasted shape. "
                                   "[Op:StatelessRandomGammaV3]")
    out = _make("gamma", _seed(seed), (a,), shape, dt, True)
    return out if b is None else out / b


@tf_types("StatelessPoisson")
def stateless_poisson(shape, seed, lam, dtype=_dtypes.int32, name=None):
    """``tf.random.stateless_poisson``."""
    return _make("poisson", _seed(seed), (_param(lam, np.dtype(np.float32).name),), shape, _int_store(dtype), True)


@tf_types("StatelessBinomial")
def stateless_binomial(shape, seed, counts, probs, output_dtype=_dtypes.int32, name=None):
    """``tf.random.stateless_binomial``."""
    return _make("binomial", _seed(seed), (_param(counts, "float32"), _param(probs, "float32")), shape,
                 _int_store(output_dtype), True)


def stateless_parameterized_truncated_normal(shape, seed, means=0.0, stddevs=1.0, minvals=-2.0, maxvals=2.0, name=None):
    """``tf.random.stateless_parameterized_truncated_normal``: normal draws truncated to
    ``[minvals, maxvals]``, in the parameters' dtype (``means``'s: half, float or double; the
    others must share it, as TF's op).  Half draws are made in float32 and rounded."""
    s = _seed(seed)
    shape = output_shape(shape, "StatelessParameterizedTruncatedNormal")
    params = [convert_to_tensor(v, dtype_hint="float32") for v in (means, stddevs, minvals, maxvals)]
    dt = params[0].dtype
    if dt not in _TRUNC_DTYPES:
        raise InvalidArgumentError(
            None, None, f"Value for attr 'dtype' of {dt.name} is not in the list of allowed values: half, float, "
            "double (argument `means` of StatelessParameterizedTruncatedNormal)")
    for i, p in enumerate(params[1:], 3):
        if p.dtype != dt:
            raise InvalidArgumentError(
                None, None, f"cannot compute StatelessParameterizedTruncatedNormal as input #{i}(zero-based) was "
                f"expected to be a {dt.name} tensor but is a {p.dtype.name} tensor [Op:StatelessParameterizedTruncatedNormal]")
    return bind(_TRUNC_PARAM, s, *params, shape=shape)


def _trunc_param(seed, mean, std, lo, hi, *, shape):
    out = mean.dtype
    wide = jnp.promote_types(out, jnp.float32)   # (half: drawn in float32, then rounded)
    mean, std, lo, hi = (p.astype(wide) for p in (mean, std, lo, hi))
    z = jax.random.truncated_normal(_seed_key(seed), (lo - mean) / std, (hi - mean) / std, shape, wide)
    return (z * std + mean).astype(out)


_TRUNC_DTYPES = (_dtypes.float16, _dtypes.float32, _dtypes.float64)
_TRUNC_PARAM = prim("StatelessParameterizedTruncatedNormal", _trunc_param, differentiable=False)
stateless_parameterized_truncated_normal._tf_types = ("StatelessParameterizedTruncatedNormal",)

_FOLD = prim("StatelessFoldIn", lambda seed, data: jax.random.key_data(jax.random.fold_in(_seed_key(seed), data))
             .astype(seed.dtype), differentiable=False)
_SPLIT = prim("StatelessSplit", lambda seed, *, num: jax.random.key_data(jax.random.split(_seed_key(seed), num))
              .astype(seed.dtype), differentiable=False)


@tf_types("StatelessFoldIn")
def fold_in(seed, data, alg="auto_select"):
    """``tf.random.fold_in``: a new seed (shape ``[2]``) from ``seed`` and the integer ``data``."""
    return bind(_FOLD, _seed(seed), convert_to_tensor(data))


@tf_types("StatelessSplit")
def split(seed, num=2, alg="auto_select"):
    """``tf.random.split``: ``num`` new seeds (shape ``[num, 2]``) from ``seed``."""
    return bind(_SPLIT, _seed(seed), num=int(num))


def create_rng_state(seed, alg):
    """``tf.random.create_rng_state``: a generator state (a NumPy ``uint32[2]`` key here) from an int seed."""
    return np.asarray(jax.random.key_data(jax.random.PRNGKey(int(seed))))


# -- stateful gamma / poisson (the global stream, TF's seed rules) ----------------------------------

@tf_types("RandomGammaKeyed")
def gamma(shape, alpha, beta=None, dtype=_dtypes.float32, seed=None, name=None):
    """``tf.random.gamma``: shape ``shape + alpha.shape``; divided by ``beta`` when given."""
    dt = _float_dtype(dtype, "gamma")
    a = _param(alpha, dt)
    out = bind(_KEYED["gamma"], _next_key(seed), a, shape=output_shape(shape, "RandomGamma") + tuple(a.shape), dtype=dt)
    return out if beta is None else out / _param(beta, dt)


@tf_types("RandomPoissonKeyed")
def poisson(shape, lam, dtype=_dtypes.float32, seed=None, name=None):
    """``tf.random.poisson``: shape ``shape + lam.shape``."""
    lm = _param(lam, "float32")
    return bind(_KEYED["poisson"], _next_key(seed), lm, shape=output_shape(shape, "RandomPoisson") + tuple(lm.shape),
                dtype=_dtypes.storage_dtype(_dtypes.as_dtype(dtype)._np, "dtype").name)


# -- Generator --------------------------------------------------------------------------------------

class Generator:
    """``tf.random.Generator``: a random stream whose state (a JAX key) is a Variable."""

    #: The op types its draws bind (the ``Random*Keyed`` ops), for the op-coverage check.
    _tf_types = tuple(p.name for p in _KEYED.values())

    def __init__(self, copy_from=None, state=None, alg=None):
        if copy_from is not None:
            key = copy_from.state.read_value()._value
        elif state is not None:
            key = jnp.asarray(getattr(state, "_value", state)).astype(jnp.uint32).reshape(-1)[:2]
        else:
            raise ValueError("Generator needs `copy_from` or `state`; use Generator.from_seed(seed) or "
                             "Generator.from_non_deterministic_state()")
        with jax.ensure_compile_time_eval():
            self._state = Variable(jnp.asarray(key, jnp.uint32), trainable=False, name="generator_state")
        self._alg = alg
        self._lock = threading.Lock()

    @classmethod
    def from_seed(cls, seed, alg=None):
        """A generator whose stream is determined by the int ``seed``."""
        return cls(state=np.asarray(jax.random.key_data(jax.random.PRNGKey(int(seed)))), alg=alg)

    @classmethod
    def from_non_deterministic_state(cls, alg=None):
        """A generator seeded from the OS's entropy."""
        return cls.from_seed(int.from_bytes(os.urandom(4), "little"), alg)

    @classmethod
    def from_state(cls, state, alg):
        return cls(state=state, alg=alg)

    @classmethod
    def from_key_counter(cls, key, counter, alg):
        """A generator from TF's (key, counter) pair: the key folded with the counter's words."""
        k = jax.random.PRNGKey(int(np.asarray(getattr(key, "_value", key))))
        for c in np.asarray(getattr(counter, "_value", counter)).reshape(-1):
            k = jax.random.fold_in(k, int(c) & 0xFFFFFFFF)
        return cls(state=np.asarray(jax.random.key_data(k)), alg=alg)

    @property
    def state(self) -> Variable:
        return self._state

    @property
    def algorithm(self) -> int:
        return Algorithm.THREEFRY.value

    @property
    def key(self):
        return self._state.read_value()[0]

    def _next_key(self):
        with self._lock:
            k = self._state.read_value()._value
            nxt, sub = split_key(k)
            self._state.assign(nxt)
            return sub

    def reset(self, state):
        self._state.assign(jnp.asarray(getattr(state, "_value", state)).astype(jnp.uint32).reshape(-1)[:2])

    def reset_from_seed(self, seed):
        self.reset(jax.random.key_data(jax.random.PRNGKey(int(seed))))

    def reset_from_key_counter(self, key, counter):
        self.reset(Generator.from_key_counter(key, counter, None).state.read_value())

    def skip(self, delta):
        """Advance the stream by ``delta`` draws (folded into the key)."""
        self._state.assign(jax.random.key_data(jax.random.fold_in(self._state.read_value()._value, int(delta))))

    def normal(self, shape, mean=0.0, stddev=1.0, dtype=_dtypes.float32, name=None):
        dt = _float_dtype(dtype, "normal")
        return _make("normal", self._next_key(), (_param(mean, dt), _param(stddev, dt)), shape, dt, False)

    def truncated_normal(self, shape, mean=0.0, stddev=1.0, dtype=_dtypes.float32, name=None):
        dt = _float_dtype(dtype, "truncated_normal")
        return _make("truncated_normal", self._next_key(), (_param(mean, dt), _param(stddev, dt)), shape, dt, False)

    def uniform(self, shape, minval=0, maxval=None, dtype=_dtypes.float32, name=None):
        d = _dtypes.as_dtype(dtype)
        if d.is_integer and maxval is None:
            raise ValueError(f"Must specify maxval for integer dtype {d!r} (or use uniform_full_int)")
        kind, params, store = _uniform_args(shape, minval, maxval, dtype)
        return _make(kind, self._next_key(), params, shape, store, False)

    def uniform_full_int(self, shape, dtype=_dtypes.uint64, name=None):
        return _make("full_int", self._next_key(), (), shape, _int_store(dtype), False)

    def binomial(self, shape, counts, probs, dtype=_dtypes.int32, name=None):
        return _make("binomial", self._next_key(), (_param(counts, "float32"), _param(probs, "float32")), shape,
                     _int_store(dtype), False)

    def make_seeds(self, count=1):
        """``count`` stateless seeds (``[2, count]`` int, int32 without x64), one per column."""
        keys = jax.random.key_data(jax.random.split(self._next_key(), int(count)))
        dt = jnp.int64 if _dtypes.x64_enabled() else jnp.int32
        return Tensor(keys.astype(dt).T)

    def split(self, count=1):
        """``count`` new independent generators (this one advances)."""
        keys = jax.random.split(self._next_key(), int(count))
        return [Generator(state=np.asarray(jax.random.key_data(k)) if not isinstance(k, jax.core.Tracer) else
                          jax.random.key_data(k)) for k in keys]

    def __repr__(self):
        return f"<tapejax.random.Generator state={np.asarray(self._state._value).tolist()}>"


_GLOBAL_GENERATOR: "list[Generator | None]" = [None]


def set_global_generator(generator):
    """``tf.random.set_global_generator``: make ``generator``'s state the global stream's key (the ops
    with ``seed=None`` draw from it from now on)."""
    if not isinstance(generator, Generator):
        raise TypeError(f"Argument `generator` must be a tapejax.random.Generator; got {generator!r}")
    _GLOBAL.key = generator.state.read_value()._value
    _GLOBAL_GENERATOR[0] = generator


__all__ = ["Algorithm", "Generator", "create_rng_state", "fold_in", "gamma", "poisson", "set_global_generator", "split",
           "stateless_binomial", "stateless_categorical", "stateless_gamma", "stateless_normal",
           "stateless_parameterized_truncated_normal", "stateless_poisson", "stateless_truncated_normal",
           "stateless_uniform"]
