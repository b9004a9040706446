"""``tf.keras.backend``'s Keras 2 functions (``K.mean``, ``K.clip``, ``K.batch_dot``, ``K.switch`` ...)
on tapejax.

TF 2.21's ``tf.keras.backend`` is Keras 3's, which keeps Keras 1/2's backend functions in
``keras.src.legacy.backend``, written with TensorFlow ops (``tf.reduce_mean``, ``tf.clip_by_value``
...).  TF-era code reaches them as ``from tensorflow.keras import backend as K``: custom losses
(``K.mean(K.square(y_true - y_pred))``, a Dice loss by ``K.flatten`` and ``K.sum``), layers and
metrics.  Here each such function is Keras's own code with its ``tf`` resolved to tapejax: a copy
of the function object whose globals are a copy of that module's, with ``tf`` bound to tapejax
and the module's other functions to their copies (Keras's module itself is untouched).  The
copies are tapejax ops, so tapes record them, ``tapejax.function`` compiles them, and they take
TF's arguments and give TF's values.  A function needing a TF API tapejax lacks raises its
AttributeError when called.  The random functions and ``dropout`` are ``namespace``'s instead
(Keras draws a NumPy op seed per call, which a compiled step would freeze); ``softmax`` and
``switch`` and ``ctc_batch_cost`` are written here (below).
"""
from __future__ import annotations

import functools
import types
from typing import Any, Callable, Dict

__all__ = ["ctc_batch_cost", "function", "names", "softmax", "switch"]


@functools.lru_cache(maxsize=None)
def _copies() -> Dict[str, Callable[..., Any]]:
    import keras.src.legacy.backend as legacy

    scope: Dict[str, Any] = dict(vars(legacy))
    scope["tf"] = _tf()
    out: Dict[str, Callable[..., Any]] = {}
    for name, fn in vars(legacy).items():
        if isinstance(fn, types.FunctionType) and fn.__module__ == legacy.__name__ and not name.startswith("_"):
            copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
            copy.__kwdefaults__ = fn.__kwdefaults__
            copy.__doc__ = f"``tf.keras.backend.{name}`` (Keras 2's, on tapejax ops)."
            copy.__qualname__ = fn.__qualname__
            scope[name] = out[name] = copy
    for fn in (softmax, switch, ctc_batch_cost):   # (tapejax's own forms: see their docstrings)
        scope[fn.__name__] = out[fn.__name__] = fn
    return out


def softmax(x: Any, axis: Any = -1) -> Any:
    """``K.softmax``: Keras's, without caching the logits on the result (a TF Tensor takes any
    attribute; a tapejax Tensor has fixed slots), so a later probability cross-entropy clips the
    probabilities rather than reading the logits."""
    import tapejax as tf
    if x.shape.rank <= 1:
        raise ValueError(f"Cannot apply softmax to a tensor that is 1D. Received input: {x}")
    if isinstance(axis, int):
        return tf.nn.softmax(x, axis=axis)
    numerator = tf.exp(x - tf.reduce_max(x, axis=axis, keepdims=True))
    return numerator / tf.reduce_sum(numerator, axis=axis, keepdims=True)


def ctc_batch_cost(y_true: Any, y_pred: Any, input_length: Any, label_length: Any) -> Any:
    """``K.ctc_batch_cost`` (keras.io's TF-era OCR and speech examples' loss): the CTC loss of
    softmax outputs ``y_pred`` ``[batch, time, classes]`` (the last class the blank) against dense
    ``y_true`` of lengths ``label_length`` ``[batch, 1]``, as ``[batch, 1]``.  Keras converts the
    labels to a SparseTensor (a ``boolean_mask``: sizes a JAX trace cannot know) for TF1's
    ``ctc_loss``; here TF2's ``tf.nn.ctc_loss`` takes the dense labels and their lengths, on the
    same ``log(y_pred + epsilon)``, blank last: the same loss."""
    import keras

    import tapejax as tf
    label_length = tf.cast(tf.squeeze(label_length, axis=-1), tf.int32)
    input_length = tf.cast(tf.squeeze(input_length, axis=-1), tf.int32)
    logits = tf.math.log(tf.convert_to_tensor(y_pred) + keras.backend.epsilon())
    loss = tf.nn.ctc_loss(labels=tf.cast(y_true, tf.int32), logits=logits, label_length=label_length,
                          logit_length=input_length, logits_time_major=False, blank_index=-1)
    return tf.expand_dims(loss, 1)


def switch(condition: Any, then_expression: Any, else_expression: Any) -> Any:
    """``K.switch``: Keras's, with a condition of rank above 1 given trailing 1-dimensions and
    broadcast by ``tf.where`` (Keras tiles it to a shape computed from ``tf.shape``, which a JAX
    trace needs static); a scalar condition picks a branch by ``tf.cond``."""
    import tapejax as tf
    if condition.dtype != tf.bool:
        condition = tf.cast(condition, "bool")
    cond_ndim = condition.shape.rank
    if not cond_ndim:
        then_fn = then_expression if callable(then_expression) else (lambda: then_expression)
        else_fn = else_expression if callable(else_expression) else (lambda: else_expression)
        return tf.cond(condition, then_fn, else_fn)
    if callable(then_expression):
        then_expression = then_expression()
    if callable(else_expression):
        else_expression = else_expression()
    expr_ndim = then_expression.shape.rank
    if cond_ndim > expr_ndim:
        raise ValueError("Rank of `condition` should be less than or equal to rank of `then_expression` and "
                         f"`else_expression`. ndim(condition)={cond_ndim}, ndim(then_expression)={expr_ndim}")
    if cond_ndim > 1:
        condition = tf.reshape(condition, list(condition.shape) + [1] * (expr_ndim - cond_ndim))
    return tf.where(condition, then_expression, else_expression)


def _tf() -> types.SimpleNamespace:
    """What the copies call ``tf``: tapejax's names, and under ``compat.v1`` the TF1 names the legacy
    backend calls, with their TF1 argument orders (``math.in_top_k(predictions, targets, k)``,
    ``assign(ref, value)``), on tapejax's TF2 functions.  Other TF1 names (TF1's ``nn.max_pool`` and
    CTC signatures) are missing: AttributeError."""
    import tapejax

    def assign(ref, value, *a, **k):
        return ref.assign(value)

    def assign_add(ref, value, *a, **k):
        return ref.assign_add(value)

    def assign_sub(ref, value, *a, **k):
        return ref.assign_sub(value)

    def in_top_k(predictions, targets, k, name=None):
        return tapejax.math.in_top_k(targets, predictions, k)

    v1 = types.SimpleNamespace(
        **{n: getattr(tapejax, n) for n in ("pad", "gather", "gather_nd", "boolean_mask", "cond", "foldl", "foldr",
                                            "map_fn", "scan", "while_loop", "where", "random_normal_initializer",
                                            "random_uniform_initializer")},
        gradients=tapejax.compat.v1.gradients, assign=assign, assign_add=assign_add, assign_sub=assign_sub,
        math=types.SimpleNamespace(in_top_k=in_top_k))
    names = {n: getattr(tapejax, n) for n in tapejax.__all__}
    return types.SimpleNamespace(**{**names, "compat": types.SimpleNamespace(v1=v1)})


def names() -> "frozenset[str]":
    """The legacy backend's public function names."""
    return frozenset(_copies())


def function(name: str) -> Callable[..., Any]:
    """The legacy backend function ``name`` on tapejax (KeyError when Keras has none)."""
    return _copies()[name]
