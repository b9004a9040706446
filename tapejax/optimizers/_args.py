"""What ``apply_gradients`` does to its arguments before the rule (``optimizer_v2``'s order):
None gradients are dropped with TF's warning, hyperparameters checked with TF's error classes,
clipping as TF computes it, and the learning-rate callable's signature read."""
import inspect
import logging
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np

from ..core import state as _state
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import schedules as _schedules

_log = logging.getLogger("tapejax")


def _float_hyper(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"Argument `{name}` must be a float; received: {name}={value!r}")
    return float(value)


def _hyper_arg(name: str, value: Any) -> Any:
    """A hyperparameter tf_keras keeps as given (``_set_hyper``): a Tensor or Variable (a
    Variable is followed: its later ``assign`` changes the next update), a callable (called
    at every update), else a number (a Python float)."""
    if isinstance(value, (Tensor, Variable)) or (callable(value) and not isinstance(value, type)):
        return value
    return _float_hyper(name, value)


def _momentum_on(value) -> bool:
    """tf_keras' test for a momentum slot (SGD, RMSprop), made once at construction: a Tensor
    or a callable always; a Variable or a number when its value now is above 0."""
    if isinstance(value, Variable):
        return bool(np.asarray(value.numpy()) > 0)
    if isinstance(value, Tensor) or callable(value):
        return True
    return value > 0


def _scalar_float(name, value):
    """A number ``value`` as a Python float, with TF's error classes: a string is a
    ValueError, None or another object a TypeError, a non-scalar a ValueError."""
    if isinstance(value, str):
        raise ValueError(f"Argument `{name}` must be a float; received: {name}={value!r}")
    try:
        a = None if value is None or isinstance(value, bool) else np.asarray(value)
    except Exception:
        a = None
    if a is None or a.dtype.kind not in "fiu":
        raise TypeError(f"Argument `{name}` must be a float; received: {name}={value!r}")
    if a.shape != ():
        raise ValueError(f"Argument `{name}` must be a scalar; received: {name} of shape {a.shape}")
    return float(a)


def _touch(variables, assign):
    """Report Variables read/assigned without a recorded read (for tapejax.function)."""
    col = _state._local.collector
    if col is not None:
        for v in variables:
            col.touch(v, assign)


def _takes_step(fn: Callable[..., Any]) -> bool:
    """Whether the learning-rate callable ``fn`` takes the step: a schedule (Keras', optax's)
    does; a callable that accepts no positional argument is called with none, as Keras does."""
    if isinstance(fn, _schedules.LearningRateSchedule):
        return True
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):   # no signature to read (some C callables): give the step
        return True
    try:
        sig.bind(0)
    except TypeError:
        return False
    return True


def _filter_empty_gradients(grads_and_vars):
    pairs = tuple(grads_and_vars)
    if not pairs:   # (TF's no-op: the caller returns; a fully frozen model's empty list)
        return []
    for p in pairs:
        if not isinstance(p, (tuple, list)) or len(p) != 2:
            raise TypeError(f"grads_and_vars must be (gradient, variable) pairs; got {p!r}")
    kept = [(g, v) for g, v in pairs if g is not None]
    empty = [v for g, v in pairs if g is None]
    if not kept:
        names = ([v.name for _, v in pairs],)
        raise ValueError(f"No gradients provided for any variable: {names}. Provided `grads_and_vars` "
                         f"is {pairs}.")
    if empty:
        _log.warning("Gradients do not exist for variables %s when minimizing the loss. If you're "
                     "using `model.compile()`, did you forget to provide a `loss` argument?",
                     [v.name for v in empty])
    return kept


def _clip_by_norm(t, clip_norm):
    """``tf.clip_by_norm`` (TF's order of operations)."""
    l2sum = jnp.sum(t * t)
    pred = l2sum > 0
    l2norm = jnp.where(pred, jnp.sqrt(jnp.where(pred, l2sum, 1.0)), l2sum)
    c = jnp.asarray(clip_norm, t.dtype)
    return (t * c) / jnp.maximum(l2norm, c)


def _clip_by_global_norm(ts, clip_norm):
    """``tf.clip_by_global_norm``: scale = clip_norm * min(1/global_norm, 1/clip_norm)."""
    gn = jnp.sqrt(sum(jnp.sum(jnp.square(t.astype(jnp.float32))) for t in ts))
    c = jnp.float32(clip_norm)
    scale = c * jnp.minimum(1.0 / gn, 1.0 / c)
    return [t * scale.astype(t.dtype) for t in ts]
