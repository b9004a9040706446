"""Device arrays from host data, device copies and constant fills, compiled only for shapes made often.

JAX offers two ways to make each of these arrays:

* the uncompiled calls (``jax.device_put`` of a host array, ``device_put(x, may_alias=False)``
  for a copy, a NumPy fill put on the device) compile nothing, and cost about 70 µs of Python;
* a jitted identity, copy or fill is called through JAX's C++ path (about 9 µs for a small
  array), but compiles once for every new shape and dtype: 10 to 50 ms each on a CPU.

A training loop makes the same shapes at every step, where the compiled call pays; its
setup and first step make many shapes once each (initial values, constants, optimizer slots,
the first call's copies of Variables), where compiling is most of the time to the first step.
So each function here takes the uncompiled call for the first ``COMPILE_AFTER`` arrays of a
shape and dtype (and placement, for a copy), and the compiled one after that.  What it has seen
is a bounded LRU (``caches``: "transfer_shapes"); an entry it dropped costs one more
uncompiled call.

Host arrays (not scalars) converted while a trace runs (a NumPy mask or id array closed over by
a ``tapejax.function``, as TF embeds it as a constant) are made now, under
``jax.ensure_compile_time_eval``: a concrete constant of the trace, whose value the ops that
read host values (``boolean_mask``'s mask, ``segment_sum``'s ids) can see, not the output of a
``device_put`` or the compiled identity staged into the trace (a tracer).  A scalar stays a
tracer: an integer Variable assigned a Python int in a trace and then used as a slice bound
(``x[p - 1:p + 1]``) needs its reads traced to give them linear forms (``ops.affine``).
"""
import functools
from typing import Any, Hashable, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from .caches import LRU
from .state import tracing

#: How many arrays of one shape and dtype are made uncompiled before the compiled call takes
#: over (an optimizer makes a few slots of each shape at its first step: Adam two per Variable).
COMPILE_AFTER = 8

#: (kind, shape, dtype[, sharding]) -> how many arrays of it were made (up to ``COMPILE_AFTER``).
_SEEN = LRU("transfer_shapes", 4096)

#: A fill bigger than this is compiled even the first time (a host array that large costs more
#: than the compile; a GPU would copy it over its bus).
_HOST_FILL_MAX_BYTES = 64 << 20


def _again(key: Hashable) -> bool:
    """Whether ``key`` was seen ``COMPILE_AFTER`` times before (and count this time)."""
    n = _SEEN.get(key, 0)
    if n >= COMPILE_AFTER:
        return True
    _SEEN[key] = n + 1
    return False


@functools.partial(jax.jit, donate_argnums=0)
def _put(a):
    return a


@jax.jit
def _copy(x):
    return jnp.array(x, copy=True)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _full(shape, dtype, value):
    return jnp.full(shape, value, dtype)


def to_device(a: np.ndarray) -> jax.Array:
    """The private host array ``a`` (a ``tensor.host_snapshot``, or one just made from Python data)
    as a device array on the default device (uncommitted, as ``jnp.asarray``'s).  Once its shape
    and dtype are common, through a compiled identity that takes ``a``'s transfer as its
    own buffer (a quarter of ``jnp.asarray``'s cost for a small array, no second copy of a large
    one).  While a trace runs, a concrete array too (the module docstring)."""
    try:
        if a.ndim and tracing():   # (a scalar stays traced: a loop bound's linear form, ops.affine, needs that)
            with jax.ensure_compile_time_eval():   # (uncompiled: a constant of the trace compiles nothing)
                return jax.device_put(a)
        if _again(("put", a.shape, a.dtype)):
            return _put(a)
        return jax.device_put(a)
    except TypeError:   # (a dtype JAX does not take: ``jnp.asarray`` says what is wrong)
        return jnp.asarray(a)


def copy(x: jax.Array) -> jax.Array:
    """A new buffer holding ``x``'s value, with ``x``'s placement and commitment (an array spread
    over several processes is copied by the compiled call: ``device_put`` takes addressable ones)."""
    if not x.is_fully_addressable or _again(("copy", x.shape, x.dtype, x.sharding)):
        return _copy(x)
    return jax.device_put(x, may_alias=False)


def filled(shape: Tuple[int, ...], dtype: Any, value: Any) -> jax.Array:
    """A new array of ``shape`` and ``dtype`` holding ``value`` everywhere (default device)."""
    dtype = np.dtype(dtype)
    key = ("full", shape, dtype, value)
    if _again(key) or int(np.prod(shape)) * dtype.itemsize > _HOST_FILL_MAX_BYTES:
        return _full(shape, dtype, value)
    return jax.device_put(np.full(shape, value, dtype))


__all__ = ["copy", "filled", "to_device"]
