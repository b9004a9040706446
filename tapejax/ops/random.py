"""``tapejax.random``: TF's random ops and seed rules on JAX PRNG keys.

The state is one global ``Generator`` (``get_global_generator()``):

* ``key``: a JAX PRNG key (``uint32[2]``): the only device state.  Every op
  called with ``seed=None`` splits it (``key, sub = split(key)``) and draws
  from ``sub``;
* ``global_seed`` and a Python counter per op seed (host state).

TF's rules (``tf.random.set_seed`` docstring), on that state:

1. ``set_seed(s)`` sets the global seed and resets everything: ``key =
   PRNGKey(s)``, op-seed counters cleared, so the sequence of random values
   drawn after it is reproducible (``set_seed(None)`` goes back to rule 2);
2. no global seed and no op seed: values are not reproducible (the key is
   drawn from the OS at import);
3. global seed, no op seed: the next values of the global stream;
4. an op ``seed``: its own stream, keyed by (global seed, op seed), the
   global seed being TF's ``DEFAULT_GRAPH_SEED`` (87654321) when unset.  The
   n-th call with the same seeds draws ``fold_in(fold_in(PRNGKey(global),
   seed), n)``: repeated calls differ, and ``set_seed`` restarts them, as TF.

The *values* differ from TF's (another generator); the rules are TF's.

Inside ``tapejax.function`` the key is state like any Variable's value: it is
held by a Variable (``GlobalGenerator._variable``), so a trace threads it (the
key in, the advanced key out, written back after each call) and an op with
``seed=None`` draws new values at every call, as TF's stateful random ops do
in a ``tf.function``; ``set_seed`` restarts that sequence too.  An op-seeded
call (rule 4) in a trace is, as in TF's graph, a kernel with a state of its
own: a counter Variable from 0 (``_new_counter``), advanced at every call and
reset by ``set_seed``; so two ops with the same seeds in one function draw the
same values, and each draws its next values at the next call.

Inside a user's own ``jax.jit`` the key must be threaded by hand, because a
key written during tracing is a tracer.  Use ``state_scope``::

    def step(key, x):
        with tapejax.random.state_scope(key) as s:
            y = tapejax.nn.dropout(x, 0.5)
        return y, s.key                      # the advanced key: an output

    y, new_key = jax.jit(step)(tapejax.random.get_state(), x)
    tapejax.random.set_state(new_key)
"""
import contextlib
import math
import os
import threading
import weakref

import jax
import jax.core
import numpy as np

from ..core import dtypes as _dtypes, state as _state
from ..core.bind import bind
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..core.variable import Variable
from ._registry import check_float, output_shape, prim, tf_types

DEFAULT_GRAPH_SEED = 87654321


@jax.jit
def split_key(key):
    """``key, sub = split(key)`` as one compiled call: JAX's ``split`` run op by op costs about
    ten times more per eager draw, and inside a trace this inlines."""
    ks = jax.random.split(key)
    return ks[0], ks[1]


@jax.jit
def _fold_twice(base, seed, n):
    return jax.random.fold_in(jax.random.fold_in(base, seed), n)


class DrawInTrace(RuntimeError):
    """A random op drew inside a trace that cannot carry its state (an unseeded op under a bare
    ``jax.jit``; any random op in a dataset function's trace, which then runs eagerly)."""


#: ``getattr``'s default: the running collector is not a dataset function's (``op_seed_calls``).
_NOT_DATA = object()

#: ``PRNGKey(g)`` per global seed ``g`` (the base of rule 4's streams)
_BASES: "dict[int, jax.Array]" = {}


def _op_key(g: int, seed: int, n):
    """Rule 4's key: ``fold_in(fold_in(PRNGKey(g), seed), n)`` (``n`` a count or a traced counter)."""
    base = _BASES.get(g)
    if base is None:
        with jax.ensure_compile_time_eval():   # (a concrete key even while a function traces)
            base = jax.random.PRNGKey(g)
        if len(_BASES) < 64:
            _BASES[g] = base
    return _fold_twice(base, np.uint32(seed), n)


class GlobalGenerator:
    """The global random state (see the module docstring); ``get_global_generator()`` gives it, with
    TF's ``Generator`` draws (``normal``, ``uniform``, ``truncated_normal``) on the global stream.
    (``tapejax.random.Generator`` is TF's class of explicit streams: ``ops.rng``.)"""

    def __init__(self):
        self._lock = threading.Lock()
        self.global_seed = None
        self._holder = None       # the key's Variable, made on first use (importing does no device work)
        self._op_counts = {}
        self._counters: "list[weakref.ref[Variable]]" = []   # traced op-seeded ops' counters
        self.scopes = 0
        self.refusing = 0         # ``call_scope(None)``s open: a draw with seed=None raises

    def _variable(self) -> Variable:
        """The Variable holding the key: a ``tapejax.function`` trace threads it like any other
        Variable its body assigns (the key in, the advanced key out), so an op with
        ``seed=None`` draws new values at every call of a compiled function, as TF's stateful
        random ops do."""
        h = self._holder
        if h is None:
            # (made outside any trace that is running)
            with _state.swap(collector=None), jax.ensure_compile_time_eval():
                key = jax.random.PRNGKey(int.from_bytes(os.urandom(4), "little"))
                # (``type.__call__``: no user variable creator scope makes this one)
                h = self._holder = type.__call__(Variable, key, trainable=False, name="global_generator_key")
        return h

    @property
    def _key(self):
        """The key as stored (no trace is told of the read)."""
        return self._variable()._value

    @_key.setter
    def _key(self, value):
        h = self._variable()
        h._val, h._own = value, None

    @property
    def key(self):
        h = self._variable()
        col = self._threaded()
        if col is not None:   # a tapejax.function traces: the key is its state
            col.touch(h, True)
        return h._value

    def _threaded(self) -> "_state.Collector | None":
        """The collector of a trace that threads Variables, if one runs (not in a ``state_scope``;
        a collector that only watches, as a dataset function's, says so with
        ``threads_random = False``)."""
        col = _state._local.collector
        if col is not None and not self.scopes and getattr(col, "threads_random", True):
            return col
        return None

    @key.setter
    def key(self, value):
        self._key = value

    def reset(self, seed):
        with self._lock:
            self.global_seed = None if seed is None else int(seed)
            with jax.ensure_compile_time_eval():   # (``set_seed`` inside a compiled function too)
                s = int.from_bytes(os.urandom(4), "little") if seed is None else int(seed)
                key = jax.random.PRNGKey(s)
            if self._holder is not None or seed is not None:
                self._key = key
            self._op_counts = {}
            live = [ctr for ctr in (r() for r in self._counters) if ctr is not None]
            self._counters = [weakref.ref(ctr) for ctr in live]
            for ctr in live:   # (compiled op-seeded ops start again, as TF's kernels)
                ctr._val, ctr._own = jax.numpy.zeros((), np.uint32), None

    def next_key(self, seed=None, static=False):
        """A fresh key for one op call with op seed ``seed`` (None: the global stream).  ``static``:
        an op-seeded key that is a constant even in a trace (an op that draws on the host while
        tracing: the same values at every call of the compiled function)."""
        with self._lock:
            if seed is None:
                if self.refusing:
                    raise DrawInTrace("a tapejax.random op with seed=None ran inside a Keras call planned "
                                      "without the generator's key (it is planned again with it)")
                key, sub = split_key(self.key)
                if not self.scopes and isinstance(key, jax.core.Tracer) and self._threaded() is None:
                    raise DrawInTrace(
                        "a tapejax.random op with seed=None ran inside jax.jit without the generator's "
                        "state threaded through: wrap the traced code in `with tapejax.random."
                        "state_scope(key) as s:` (key an argument, s.key an output), or pass an op "
                        "`seed`, so no traced key leaks into the global state")
                self.key = key
                return sub
            g = DEFAULT_GRAPH_SEED if self.global_seed is None else self.global_seed
            s = int(seed)
            watch = _state._local.collector
            calls = getattr(watch, "op_seed_calls", _NOT_DATA) if watch is not None and not static else _NOT_DATA
            col = None if static else self._threaded()
            if calls is not _NOT_DATA:
                # A dataset function: each op-seeded op is a kernel whose counter advances once per
                # call of the function, from 0 at each iteration of the dataset (TF).  Only a run
                # per element knows the call: a trace of the function runs it eagerly instead.
                if calls is None:
                    raise DrawInTrace("a tapejax.random op with an op seed in a traced dataset function: "
                                      "its draws differ per element, so the function runs eagerly")
                n = calls
            elif col is not None:
                # A tapejax.function traces: this op is a stateful kernel of its own, as in TF's
                # graph (its own counter from 0, advanced at every call, reset by ``set_seed``).
                ctr = self._new_counter()
                col.touch(ctr, True)
                n = ctr._value
                ctr._val = n + 1
            else:
                n = self._op_counts.get((g, s), 0)
                self._op_counts[(g, s)] = n + 1
        return _op_key(g, s & 0x7FFFFFFF, n)

    def _new_counter(self) -> Variable:
        """A Variable counting one traced op-seeded op's calls, made outside the running trace."""
        with _state.swap(collector=None), jax.ensure_compile_time_eval():
            ctr = type.__call__(Variable, np.uint32(0), trainable=False, name="random_op_counter")
        self._counters.append(weakref.ref(ctr))
        return ctr


    def normal(self, shape, mean=0.0, stddev=1.0, dtype=_dtypes.float32, name=None):
        return normal(shape, mean, stddev, dtype)

    def uniform(self, shape, minval=0, maxval=None, dtype=_dtypes.float32, name=None):
        return uniform(shape, minval, maxval, dtype)

    def truncated_normal(self, shape, mean=0.0, stddev=1.0, dtype=_dtypes.float32, name=None):
        return truncated_normal(shape, mean, stddev, dtype)


_GLOBAL = GlobalGenerator()


def get_global_generator():
    """The global ``Generator`` every op with ``seed=None`` draws from."""
    return _GLOBAL


def set_seed(seed):
    """``tf.random.set_seed``: set the global seed and restart every stream (None: unseeded)."""
    if seed is not None and not isinstance(seed, (int, np.integer)):
        raise TypeError(f"Argument `seed` must be an int or None; got {seed!r}")
    _GLOBAL.reset(seed)


def get_state():
    """The global generator's key (a ``jax.Array``): thread it through compiled code."""
    return _GLOBAL.key


def set_state(key):
    """Replace the global generator's key (e.g. by the key a compiled step returned)."""
    key = getattr(key, "_value", key)
    if tuple(np.shape(key)) != tuple(_GLOBAL.key.shape):
        raise ValueError(f"set_state: `key` must have shape {tuple(_GLOBAL.key.shape)} (a PRNG key); "
                         f"got {tuple(np.shape(key))}")
    _GLOBAL.key = key


class _Scope:
    __slots__ = ("key",)


@contextlib.contextmanager
def state_scope(key):
    """Within the block the global stream draws from ``key`` (a traced key inside ``jax.jit``);
    on exit the scope's ``.key`` is the advanced key and the previous key is restored."""
    scope = _Scope()
    old = _GLOBAL.key
    _GLOBAL.key = getattr(key, "_value", key)
    _GLOBAL.scopes += 1
    try:
        yield scope
    finally:
        _GLOBAL.scopes -= 1
        scope.key = _GLOBAL.key
        _GLOBAL.key = old


@contextlib.contextmanager
def call_scope(key):
    """Inside a Keras call's op (``keras.calls``): ops with ``seed=None`` draw from ``key`` (the op's
    operand for the generator's key) and the scope's ``.key`` is the advanced key after; with
    ``key=None`` they raise ``DrawInTrace`` (the call is planned again with the key as an operand).
    The held key is neither read as state nor written, so a ``tapejax.function`` tracing around the
    call threads it only as that operand and the call's update of it."""
    scope = _Scope()
    old = _GLOBAL._key
    if key is None:
        _GLOBAL.refusing += 1
    else:
        _GLOBAL._key = key
    _GLOBAL.scopes += 1
    try:
        yield scope
    finally:
        _GLOBAL.scopes -= 1
        if key is None:
            _GLOBAL.refusing -= 1
        scope.key = _GLOBAL._key
        _GLOBAL._key = old


def _next_key(seed, static=False):
    return _GLOBAL.next_key(seed, static)




def _float_dtype(dtype, op_type):
    d = _dtypes.as_dtype(dtype)
    if not d.is_floating:
        raise ValueError(f"Invalid dtype {d!r} for {op_type}: expected a floating dtype (argument `dtype`)")
    return _dtypes.storage_dtype(d._np, "dtype").name


#: Python numbers given as a random op's parameters (``minval``, ``stddev`` ...), as device
#: arrays per (type, value, sign, dtype): converting one costs more than the draw.
_PARAMS: "dict[tuple, jax.Array]" = {}


def _param(v, dt):
    if isinstance(v, (Tensor, Variable)):
        return v
    kind = type(v)
    if (kind is float or kind is int) and v == v:   # (NaN matches no key)
        key = (kind, v, math.copysign(1.0, v) if kind is float else 1.0, dt)
        a = _PARAMS.get(key)
        if a is None:
            # (concrete even while a function traces: a cached tracer would leak into later traces)
            with jax.ensure_compile_time_eval():
                a = convert_to_tensor(v, dtype=dt)._value
            if len(_PARAMS) < 1024 and not isinstance(a, jax.core.Tracer):
                _PARAMS[key] = a
        return a
    return convert_to_tensor(v, dtype=dt)


def _normal(key, mean, stddev, *, shape, dtype):
    return jax.random.normal(key, shape, dtype) * stddev + mean


def _truncated(key, mean, stddev, *, shape, dtype):
    return jax.random.truncated_normal(key, -2.0, 2.0, shape, dtype) * stddev + mean


_NORMAL = prim("RandomStandardNormal", _normal)
_TRUNCATED = prim("TruncatedNormal", _truncated)


@tf_types("RandomStandardNormal")
def normal(shape, mean=0.0, stddev=1.0, dtype=_dtypes.float32, seed=None, name=None):
    """``tf.random.normal``: ``mean + stddev * N(0, 1)`` (gradients flow to ``mean``/``stddev``)."""
    dt = _float_dtype(dtype, "normal")
    return bind(_NORMAL, _next_key(seed), _param(mean, dt), _param(stddev, dt),
                shape=output_shape(shape, "RandomStandardNormal"), dtype=dt)


@tf_types("TruncatedNormal")
def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=_dtypes.float32, seed=None, name=None):
    """``tf.random.truncated_normal``: normal values redrawn beyond 2 standard deviations."""
    dt = _float_dtype(dtype, "truncated_normal")
    return bind(_TRUNCATED, _next_key(seed), _param(mean, dt), _param(stddev, dt),
                shape=output_shape(shape, "TruncatedNormal"), dtype=dt)


def _uniform(key, lo, hi, *, shape, dtype):
    return jax.random.uniform(key, shape, dtype) * (hi - lo) + lo


def _uniform_int(key, lo, hi, *, shape, dtype):
    return jax.random.randint(key, shape, lo, hi, dtype)


_UNIFORM = prim("RandomUniform", _uniform)
_UNIFORM_INT = prim("RandomUniformInt", _uniform_int, differentiable=False)


@tf_types("RandomUniform", "RandomUniformInt")
def uniform(shape, minval=0, maxval=None, dtype=_dtypes.float32, seed=None, name=None):
    """``tf.random.uniform`` in ``[minval, maxval)``; integer dtypes need ``maxval``."""
    d = _dtypes.as_dtype(dtype)
    store = _dtypes.storage_dtype(d._np, "dtype").name
    shape = output_shape(shape, "RandomUniformInt" if d.is_integer else "RandomUniform")
    if d.is_integer:
        if maxval is None:
            raise ValueError(f"Must specify maxval for integer dtype {d!r}")
        return bind(_UNIFORM_INT, _next_key(seed), _param(minval, store), _param(maxval, store),
                    shape=shape, dtype=store)
    if not d.is_floating:
        raise ValueError(f"Invalid dtype {d!r} for uniform (argument `dtype`)")
    return bind(_UNIFORM, _next_key(seed), _param(minval, store), _param(1 if maxval is None else maxval, store),
                shape=shape, dtype=store)


def _categorical(key, logits, *, num_samples, dtype):
    s = jax.random.categorical(key, logits, axis=-1, shape=(num_samples, logits.shape[0]))
    return s.T.astype(dtype)


_CATEGORICAL = prim("Multinomial", _categorical, differentiable=False)


@tf_types("Multinomial")
def categorical(logits, num_samples, dtype=None, seed=None, name=None):
    """``tf.random.categorical``: ``[batch, num_samples]`` class ids drawn from ``logits
    [batch, classes]``; int64 by default (int32 without x64)."""
    check_float(logits, "Multinomial", "real", "logits")
    shp = tuple(logits.shape) if isinstance(logits, (Tensor, Variable)) else np.shape(logits)
    if len(shp) != 2:
        raise InvalidArgumentError(None, None, f"logits should be a matrix, got shape {list(shp)} "
                                   f"(argument `logits`) [Op:Multinomial]")
    store = _dtypes.storage_dtype(np.dtype(np.int64) if dtype is None else _dtypes.as_dtype(dtype)._np,
                                  "dtype").name
    return bind(_CATEGORICAL, _next_key(seed), logits, num_samples=int(num_samples), dtype=store)


_SHUFFLE = prim("RandomShuffle", lambda key, x: jax.random.permutation(key, x, axis=0) if x.ndim else x,
                differentiable=False)


@tf_types("RandomShuffle")
def shuffle(value, seed=None, name=None):
    """``tf.random.shuffle``: permute along the first dimension (no gradient, as TF); a scalar is
    returned as a tensor (TF's kernel copies it), the random state advancing as for a draw."""
    return bind(_SHUFFLE, _next_key(seed), value)


__all__ = ["normal", "uniform", "truncated_normal", "categorical", "shuffle", "set_seed",
           "get_global_generator", "get_state", "set_state", "state_scope",
           "DEFAULT_GRAPH_SEED"]
