"""``keras.ops``' control flow (``cond``, ``switch``, ``while_loop``, ``fori_loop``, ``map``,
``vectorized_map``) and ``custom_gradient`` on tapejax values, as Keras's TensorFlow backend
defines them.

Keras's JAX backend builds these on ``jax.lax``, which takes neither a tapejax Tensor as a
predicate nor user functions that compute tapejax ops, and no tape would see inside; TF's Keras 3
builds them on ``tf.cond``, ``tf.while_loop``, ``tf.switch_case``, ``tf.map_fn`` and
``tf.vectorized_map``.  So, outside a Keras scope and with no JAX array among the arguments, each
is Keras's TensorFlow-backend definition over tapejax's control flow (differentiable by the tape,
eagerly and inside ``tapejax.function``); otherwise Keras's own (a layer's call, raw JAX code).
``custom_gradient(f)`` decides at each call of the function it makes: TF's backend's
``tf.custom_gradient`` (tapejax's) on tapejax values, Keras's own on JAX values or inside a Keras
scope.  ``scan`` and ``associative_scan`` stay Keras's.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import numpy as np

from ..core.tensor import Tensor
from . import variables as _kvars

__all__ = ["CONTROL", "control", "custom_gradient"]


def _cond(pred: Any, true_fn: Callable[[], Any], false_fn: Callable[[], Any]) -> Any:
    from ..compile.control_flow import cond
    if isinstance(pred, (bool, np.bool_)):   # (TF's smart_cond: a Python predicate picks a branch)
        return true_fn() if pred else false_fn()
    return cond(pred, true_fn, false_fn)


def _switch(index: Any, branches: list, *operands: Any) -> Any:
    from ..compile.functional_ops import switch_case
    from ..core.convert import convert_to_tensor
    from ..ops.reduce import clip_by_value
    index = clip_by_value(convert_to_tensor(index, "int32"), 0, len(branches) - 1)
    return switch_case(index, [functools.partial(b, *operands) for b in branches])


def _while_loop(cond: Callable[..., Any], body: Callable[..., Any], loop_vars: Any,
                maximum_iterations: Any = None) -> Any:
    from ..compile.control_flow import while_loop
    is_tuple = isinstance(loop_vars, (tuple, list))
    loop_vars = tuple(loop_vars) if is_tuple else (loop_vars,)

    def _body(*args):
        outputs = body(*args)
        return tuple(outputs) if is_tuple else (outputs,)

    outputs = while_loop(cond, _body, loop_vars, maximum_iterations=maximum_iterations)
    return outputs if is_tuple else outputs[0]


def _fori_loop(lower: Any, upper: Any, body_fun: Callable[[Any, Any], Any], init_val: Any) -> Any:
    from ..compile.control_flow import while_loop
    # (static bounds bound the trip count: reverse mode through the loop needs it here, where TF's
    # while_loop needs none)
    static = isinstance(lower, int) and isinstance(upper, int)
    return while_loop(lambda i, val: i < upper, lambda i, val: (i + 1, body_fun(i, val)), (lower, init_val),
                      maximum_iterations=max(0, upper - lower) if static else None)[1]


def _map(f: Callable[[Any], Any], xs: Any) -> Any:
    from ..compile.functional_ops import map_fn
    from ..compile.signature import TensorSpec
    from ..core import nest
    from ..core.convert import convert_to_tensor
    xs = nest.map_structure(convert_to_tensor, xs)
    first = nest.pack_sequence_as(xs, [x[0] for x in nest.flatten(xs)])
    signature = nest.map_structure(lambda t: TensorSpec(t.shape, t.dtype), f(first))
    return map_fn(f, xs, fn_output_signature=signature)


def _vectorized_map(function: Callable[[Any], Any], elements: Any) -> Any:
    from ..compile.functional_ops import vectorized_map
    return vectorized_map(function, elements)


def custom_gradient(keras_fn: Callable[..., Any]) -> Callable[..., Any]:
    """``keras.ops.custom_gradient`` choosing, at each call, tapejax's ``custom_gradient`` (TF's
    backend: ``tf.custom_gradient(f)``) or Keras's own."""
    if getattr(keras_fn, "_tapejax_on_tape", False):
        return keras_fn

    @functools.wraps(keras_fn)
    def wrapper(fun: Callable[..., Any]) -> Callable[..., Any]:
        from ..autodiff.custom_gradient import custom_gradient as tj_custom_gradient
        theirs, ours = keras_fn(fun), tj_custom_gradient(fun)

        @functools.wraps(fun)
        def call(*args, **kwargs):
            if _kvars.in_keras_scope() or _holds_jax(args) or _holds_jax(kwargs):
                return theirs(*args, **kwargs)
            return ours(*args, **kwargs)
        return call

    setattr(wrapper, "_tapejax_on_tape", True)
    return wrapper


#: Keras's name -> its TensorFlow-backend definition over tapejax's ops.
CONTROL: dict[str, Callable[..., Any]] = {"cond": _cond, "switch": _switch, "while_loop": _while_loop,
                                          "fori_loop": _fori_loop, "map": _map, "vectorized_map": _vectorized_map}


def _holds_jax(x: Any) -> bool:
    """Whether ``x`` (lists, tuples and dicts looked into) holds a JAX array: raw JAX code."""
    if isinstance(x, jax.Array) and not isinstance(x, Tensor):
        return True
    if isinstance(x, (list, tuple)):
        return any(_holds_jax(e) for e in x)
    if isinstance(x, dict):
        return any(_holds_jax(e) for e in x.values())
    return False


def control(name: str, keras_fn: Callable[..., Any]) -> Callable[..., Any]:
    """Keras's ``name`` that runs ``CONTROL[name]`` outside a Keras scope on non-JAX values."""
    if getattr(keras_fn, "_tapejax_on_tape", False):
        return keras_fn
    ours = CONTROL[name]

    @functools.wraps(keras_fn)
    def wrapper(*args, **kwargs):
        if _kvars.in_keras_scope() or _holds_jax(args) or _holds_jax(kwargs):
            return keras_fn(*args, **kwargs)
        return ours(*args, **kwargs)

    setattr(wrapper, "_tapejax_on_tape", True)
    return wrapper
