"""Keras preprocessing layers whose ``call`` runs TensorFlow (lookup tables, hashing, text).

JAX cannot trace them, so a call outside a Keras scope runs on host values, eagerly, and records
nothing: their outputs are integer ids or counts, constants to a tape as TF's (a lookup's one-hot,
multi-hot or count encoding as floats, tf_keras' dtype).  Numbers come back
as tapejax Tensors; strings (``StringLookup(invert=True)``) as NumPy arrays of bytes, tapejax having
no string tensors.  Keras's StringLookup on JAX turns its TF result into a JAX array, which fails
for strings; given a TF tensor it returns TF's, so an inverting lookup is given one.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ..core.tensor import Tensor
from ..core.variable import Variable

#: The layer classes (filled by ``call_hooks.install``: HashedCrossing, Hashing, IndexLookup, TextVectorization).
TF_BACKED: list = []


def _is_tensor(x: Any) -> bool:
    return isinstance(x, (Tensor, Variable))


def _host(x: Any) -> Any:
    if isinstance(x, (Tensor, Variable)):
        x = x._value
    if isinstance(x, jax.core.Tracer):
        raise TypeError("a Keras preprocessing layer that runs TensorFlow ops (IntegerLookup, StringLookup, "
                        "Hashing, HashedCrossing, TextVectorization) cannot be called inside a "
                        "tapejax.function: call it eagerly, or map it over the tapejax.data pipeline")
    return np.asarray(x) if isinstance(x, jax.Array) else x


def _result(x: Any, dtype: Any = None) -> Any:
    if not isinstance(x, (jax.Array, np.ndarray)) and type(x).__module__.startswith("tensorflow"):
        x = x.numpy()   # (a TF tensor: what an inverting lookup returns)
    if isinstance(x, (jax.Array, np.ndarray)) and np.dtype(x.dtype).kind in "biufc":
        return Tensor(jnp.asarray(x, dtype))
    return x


def _encoded_dtype(layer: Any) -> Any:
    """A lookup's ``one_hot`` / ``multi_hot`` / ``count`` output dtype: floatx, as tf_keras gives it and
    as Keras 3's own ``compute_output_spec`` says (its eager call gives int64, int32 on JAX)."""
    from keras.src import backend
    from keras.src.layers.preprocessing.index_lookup import IndexLookup
    if isinstance(layer, IndexLookup) and not layer.invert and layer.output_mode in ("one_hot", "multi_hot", "count"):
        return backend.floatx()
    return None


def call_tf_backed(call: Callable[..., Any], layer: Any, args: tuple, kwargs: dict) -> Any:
    """``call(layer, *args, **kwargs)`` (Keras's ``Layer.__call__``) on host values."""
    args, kwargs = jax.tree_util.tree_map(_host, (args, kwargs), is_leaf=_is_tensor)
    if getattr(layer, "invert", False) and getattr(layer, "vocabulary_dtype", None) == "string":
        import tensorflow as tf  # (the layer runs TensorFlow already)
        args = tuple(tf.convert_to_tensor(a) if isinstance(a, np.ndarray) else a for a in args)
    dtype = _encoded_dtype(layer)
    return jax.tree_util.tree_map(lambda x: _result(x, dtype), call(layer, *args, **kwargs))
