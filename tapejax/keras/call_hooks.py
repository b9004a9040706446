"""The hooks on Keras's classes that send a top-level call to ``calls``.

Outside a Keras scope (``variables.in_keras_scope``), ``Layer.__call__`` is ``calls.call_layer``
(the TF-backed preprocessing layers: ``tf_backed``), ``Loss.__call__`` and each weight
regularizer ``calls.call_function``; ``Layer.add_loss``, ``backend.rnn`` and
``backend.compute_output_spec`` take the arrays of the tapejax Tensors a layer's ``tf.*`` ops
give inside Keras's own traces.  Inside a Keras scope each is Keras's own (``_ORIG``).
``install`` is run once by ``_setup.load``.
"""
from __future__ import annotations

import jax
import jax.core

from ..core.tensor import Tensor
from ..core.variable import Variable
from ..ops.random import state_scope
from . import output_spec, tf_backed as _tf_backed, variables as _kvars
from .calls import KERAS_OWN, call_function, call_layer, is_tensor
from .keys import has_tensor

__all__ = ["install"]

_Tracer = jax.core.Tracer
_ORIG = KERAS_OWN


def _layer_call(self, *args, **kwargs):
    if _kvars.in_keras_scope():
        return _ORIG["layer"](self, *args, **kwargs)
    if _tf_backed.TF_BACKED and isinstance(self, tuple(_tf_backed.TF_BACKED)):
        return _tf_backed.call_tf_backed(_ORIG["layer"], self, args, kwargs)
    return call_layer(self, args, kwargs)


def _loss_init(self, name=None, reduction="sum_over_batch_size", dtype=None):
    """Keras's ``Loss.__init__`` taking ``tf.keras.losses.Reduction.AUTO`` too, as tf.keras's losses
    do: outside a distribution strategy's replica it is ``SUM_OVER_BATCH_SIZE``."""
    if reduction == "auto":
        reduction = "sum_over_batch_size"
    _ORIG["loss_init"](self, name=name, reduction=reduction, dtype=dtype)


def _loss_caller(loss, args, kwargs):
    return _ORIG["loss"](loss, *args, **kwargs)


def _loss_call(self, y_true, y_pred, sample_weight=None):
    if _kvars.in_keras_scope() or not has_tensor((y_true, y_pred, sample_weight), {}):
        return _ORIG["loss"](self, y_true, y_pred, sample_weight)
    return call_function(self, (y_true, y_pred), {"sample_weight": sample_weight}, _loss_caller)


def _regularization_losses(self):
    """``Layer._get_regularization_losses``; outside a Keras scope each regularizer is a tape op
    over its variable's read, so a regularization term is differentiated."""
    if _kvars.in_keras_scope():
        return _ORIG["reg"](self)
    return [call_function(v.regularizer, (v,), {}) for v in self.trainable_weights
            if v.regularizer is not None]


def _traced_value(x):
    if isinstance(x, (Tensor, Variable)) and isinstance(x._value, _Tracer):
        return x._value
    return x


def _add_loss(self, loss):
    """``Layer.add_loss``: a loss made by ``tf.*`` ops inside a layer's ``call`` is a tapejax
    Tensor over a tracer of the call op (or of Keras's symbolic build); Keras takes the tracer
    (it comes back as one of the op's results, ``model.losses``)."""
    return _ORIG["add_loss"](self, jax.tree_util.tree_map(_traced_value, loss, is_leaf=is_tensor))


def _plain_step_results(x):
    return x._value if isinstance(x, Tensor) else x


def _rnn(step_function, inputs, initial_states, *args, **kwargs):
    """Keras's ``backend.rnn`` (the loop of ``keras.layers.RNN``): a user's cell written with
    ``tf.*`` ops returns tapejax Tensors over the loop's tracers; ``lax.scan`` gets their arrays."""
    def step(x, states):
        return jax.tree_util.tree_map(_plain_step_results, step_function(x, states), is_leaf=is_tensor)
    return _ORIG["rnn"](step, inputs, initial_states, *args, **kwargs)


def _compute_output_spec(fn, *args, **kwargs):
    """Keras's symbolic call (a functional model's construction, a build by a symbolic call): a layer
    whose ``call`` uses ``tf.*`` ops returns tapejax Tensors over the trace's tracers; Keras gets
    their arrays (it refused the Tensors: "All operation outputs must be tensors"); TF's ``None``
    where Keras's symbolic dimension cannot be divided (``output_spec``).  A draw from TF's global
    random stream (``tf.random.normal`` with no seed) in it draws from a throwaway key: only shapes
    are computed, and the global stream does not move (TF's symbolic call builds a graph)."""
    def plain(*a, **k):
        with state_scope(jax.random.PRNGKey(0)):
            out = fn(*a, **k)
        return jax.tree_util.tree_map(_plain_step_results, out, is_leaf=is_tensor)
    return output_spec.infer(_ORIG["spec"], plain, args, kwargs)


def install() -> None:
    """Put the hooks on Keras's ``Layer.__call__``, ``Layer.add_loss``, ``Loss.__call__``,
    regularization losses, ``backend.rnn`` and ``backend.compute_output_spec``."""
    from keras.src.layers.layer import Layer
    from keras.src.losses.loss import Loss
    if "layer" in _ORIG:
        return
    _ORIG["layer"] = Layer.__call__
    from keras.src.layers.preprocessing.hashed_crossing import HashedCrossing
    from keras.src.layers.preprocessing.hashing import Hashing
    from keras.src.layers.preprocessing.index_lookup import IndexLookup
    from keras.src.layers.preprocessing.text_vectorization import TextVectorization
    _tf_backed.TF_BACKED[:] = [HashedCrossing, Hashing, IndexLookup, TextVectorization]
    _ORIG["loss"] = Loss.__call__
    _ORIG["loss_init"] = Loss.__init__
    _ORIG["reg"] = Layer._get_regularization_losses
    _ORIG["add_loss"] = Layer.add_loss
    Layer.__call__ = _layer_call
    Loss.__call__ = _loss_call
    Loss.__init__ = _loss_init
    Layer._get_regularization_losses = _regularization_losses
    Layer.add_loss = _add_loss
    from keras.src import backend as _kbackend
    _ORIG["rnn"] = _kbackend.rnn
    _kbackend.rnn = _rnn
    _ORIG["spec"] = _kbackend.compute_output_spec
    _kbackend.compute_output_spec = _compute_output_spec
