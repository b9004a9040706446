"""Keras's symbolic call with TF's ``None`` dimensions where a symbolic one cannot be divided.

Keras 3's JAX backend infers a layer's output spec (a functional model's construction, a build by
a symbolic call) by ``jax.eval_shape`` with one symbolic dimension for every ``None``.  An op whose
result needs that dimension to divide evenly (``tf.reshape(windows, [-1, 16, C])`` in a layer of
its own, merging Swin's windows back into images) raises ``InconclusiveDimensionOperation``, where
TF's backend (and tf_keras) gives ``None``.  Then the spec is found as Keras 3 found it before
symbolic shapes: twice, the ``None`` dimensions set to two sizes of many divisors, a dimension
that differs between the two being ``None``.  So is a layer that needs a ``None`` dimension as
a static value (``tf.random.normal(tf.shape(x))``: a random op's shape is static in JAX, while TF's
graph takes a dynamic one): JAX raises a tracer-conversion error on the symbolic dimension.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
from keras.src import tree
from keras.src.backend.common.keras_tensor import KerasTensor

__all__ = ["infer"]

#: The sizes given to ``None`` dimensions in the fallback (divisible by 1..10, 12, 14, 15 ...).
SIZES = (5040, 10080)


def _filled(x: Any, n: int) -> Any:
    if isinstance(x, KerasTensor) and any(d is None for d in x.shape):
        return KerasTensor(tuple(n if d is None else d for d in x.shape), dtype=x.dtype, sparse=x.sparse,
                           ragged=x.ragged, record_history=False)
    return x


def _merged(a: Any, b: Any) -> Any:
    if isinstance(a, KerasTensor):
        return KerasTensor(tuple(d if d == e else None for d, e in zip(a.shape, b.shape)), dtype=a.dtype,
                           sparse=a.sparse, ragged=a.ragged)
    return a


def infer(spec: Callable[..., Any], fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``spec(fn, *args, **kwargs)`` (Keras's ``compute_output_spec``), or the fallback above."""
    try:
        return spec(fn, *args, **kwargs)
    except (jax.errors.InconclusiveDimensionOperation, jax.errors.TracerArrayConversionError,
            jax.errors.ConcretizationTypeError):
        filled: "list[Any]" = [tree.map_structure(lambda x, n=n: _filled(x, n), (args, kwargs)) for n in SIZES]
        if all(f == (args, kwargs) for f in filled):   # (no None dimension: the error is the layer's)
            raise
        first, second = (spec(fn, *a, **k) for a, k in filled)
        return tree.map_structure(_merged, first, second)
