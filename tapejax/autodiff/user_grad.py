"""Running a user's gradient function: no tape records it, and what it returns is checked.

Shared by ``custom_gradient`` (``autodiff.custom_gradient``: ``f`` and ``grad_fn``)
and the gradient registry (``autodiff.custom``: functions registered with
``RegisterGradient``).  A user's gradient function runs under
``tape_stack([])`` (or a watcher of its own) so no recording tape sees the
ops it computes; each gradient it returns goes through ``check_grad``: an
array of the input's shape and dtype, None for zero, or TF's ValueError
naming the shapes.
"""
import contextlib
from typing import Any, Iterator, Sequence

import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes, state as _state
from ..core.tensor import Tensor


@contextlib.contextmanager
def tape_stack(stack: list) -> Iterator[None]:
    """Replace this thread's stack of recording tapes by ``stack`` for the block."""
    local = _state._local
    saved = local.tapes
    local.tapes = stack
    try:
        yield
    finally:
        local.tapes = saved


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
    return arr.astype(jnp.result_type(x))
