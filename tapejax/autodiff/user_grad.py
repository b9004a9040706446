"""Running a user's gradient function: no tape records it, and what it returns is checked.

Shared by ``custom_gradient`` (``autodiff.custom_gradient``: ``f`` and ``grad_fn``)
and the gradient registry (``autodiff.custom``: functions registered with
``RegisterGradient``).  A user's gradient function runs under
``core.state.swap(tapes=())`` (or a watcher of its own) so no recording tape sees the
ops it computes; each gradient it returns goes through ``check_grad``: an
array of the input's shape and dtype, None for zero, or TF's ValueError
naming the shapes.  A user's gradient function speaks TF's convention for
complex values (``conj_complex``): it gets conjugated cotangents, and what it
returns is conjugated back.
"""
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.tensor import Tensor


def conj_complex(x: Any) -> Any:
    """``x`` conjugated where its dtype is complex, else ``x`` itself.

    TF's gradient of a complex value is the conjugate of JAX's cotangent (TF
    differentiates ``f(z)`` as a function of ``z`` and ``conj(z)``: the
    gradient of ``c * z`` is ``conj(c)``; ``jax.vjp`` gives ``c``).  So a
    TF gradient is ``conj(vjp(conj(cotangent)))``: every place where a
    cotangent crosses between TF's convention (``output_gradients``, the
    returned gradients, a user's gradient function) and JAX's goes through
    this.  Free for real dtypes (no op is added)."""
    dt = getattr(x, "dtype", None)
    if dt is not None and dt != jax.dtypes.float0 and jnp.issubdtype(dt, jnp.complexfloating):
        return jnp.conj(x)
    return x


def is_float(x: Any) -> bool:
    """Does ``x`` (a value or a dtype) get gradients: a floating or complex dtype?"""
    return _dtypes.is_trainable_dtype(jnp.result_type(x))


def _shape(x: Any) -> tuple:
    return tuple(np.shape(x))


def _dtype_name(x: Any) -> str:
    return np.dtype(jnp.result_type(x)).name


def describe(grads: Sequence[Any]) -> str:
    """The shapes of returned gradients, for an error message."""
    return "[" + ", ".join("None" if g is None else
                           f"shape {tuple(np.shape(getattr(g, '_value', g)))}" for g in grads) + "]"


def check_grad(g: Any, x: Any, what: str) -> Any:
    """One returned gradient as an array of ``x``'s shape and dtype (None: zero)."""
    if g is None or not is_float(x):
        return None
    if hasattr(g, "_read"):
        g = g._read()
    arr = g._value if isinstance(g, Tensor) else jnp.asarray(g)
    if _shape(arr) != _shape(x):
        raise ValueError(f"The {what} has shape {_shape(arr)} and dtype {_dtype_name(arr)}, but the input has "
                         f"shape {_shape(x)} and dtype {_dtype_name(x)}: the shapes must be equal")
    return conj_complex(arr.astype(jnp.result_type(x)))   # back to JAX's convention
