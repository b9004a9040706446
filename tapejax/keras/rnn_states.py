"""Stateful RNNs carry their state through Keras's own ``fit`` / ``evaluate`` / ``predict`` loops.

A ``stateful=True`` recurrent layer keeps its last states in Variables (``RNN.states``) that the
next batch starts from, in TF's loops as in direct calls.  Keras 3 creates them untracked
(``RNN._create_state_variables``): they are in no variable list (as in tf_keras, whose
``non_trainable_variables`` do not list them either), and Keras 3's JAX trainer threads only the
listed variables through its jitted steps (``stateless_call``), so on JAX a stateful RNN under
``predict`` / ``evaluate`` (and ``fit`` with a Keras 3 optimizer) started every batch from the
states before the loop, and the loop's end left them there.  (Direct calls and tapejax's own
TF-style steps carry them already: ``keys.layer_state``.)

Here, while one of those loops runs for a model (``running``), that model's
``non_trainable_variables`` also lists the state Variables of the stateful RNNs in it (after the
others), so Keras's trainer passes them into each step, takes their new values out, and writes
them back at the loop's end (``jax_state_sync``).  Outside such a loop, and for every other
layer, the lists are Keras's.
"""
from __future__ import annotations

import contextvars
import functools
from typing import Any, Callable

import jax

#: The model whose Keras loop runs now (its ``non_trainable_variables`` list the RNN states).
_RUNNING: contextvars.ContextVar[Any] = contextvars.ContextVar("tapejax_keras_running_model", default=None)
_ORIG: dict = {}
#: Keras's loops over batches (``JAXTrainer``'s methods).
LOOPS = ("fit", "evaluate", "predict", "train_on_batch", "test_on_batch", "predict_on_batch")


def rnn_state_variables(layer: Any) -> list:
    """The state Variables of the stateful recurrent layers in ``layer`` (created, not None)."""
    out: list = []
    for sub in layer._flatten_layers(include_self=True):
        states = getattr(sub, "states", None) if getattr(sub, "stateful", False) else None
        if states is not None:
            out += [v for v in jax.tree_util.tree_leaves(states) if hasattr(v, "assign")]
    return out


def _non_trainable_variables(self: Any) -> list:
    out = _ORIG["non_trainable_variables"].fget(self)
    if _RUNNING.get() is self:
        out = list(out)
        out += [v for v in rnn_state_variables(self) if all(v is not o for o in out)]
    return out


def _running(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def loop(self, *args, **kwargs):
        if _RUNNING.get() is self or not rnn_state_variables(self):
            return method(self, *args, **kwargs)
        token = _RUNNING.set(self)
        try:
            return method(self, *args, **kwargs)
        finally:
            _RUNNING.reset(token)

    loop.__name__ = loop.__qualname__ = name
    return loop


def install() -> None:
    """Thread the stateful RNNs' states through Keras's JAX loops (see the module docstring)."""
    if _ORIG:
        return
    from keras.src.backend.jax.trainer import JAXTrainer
    from keras.src.layers.layer import Layer
    _ORIG["non_trainable_variables"] = Layer.non_trainable_variables
    setattr(Layer, "non_trainable_variables", property(_non_trainable_variables,
                                                       doc=Layer.non_trainable_variables.__doc__))
    for name in LOOPS:
        setattr(JAXTrainer, name, _running(name, getattr(JAXTrainer, name)))


__all__ = ["LOOPS", "install", "rnn_state_variables"]
