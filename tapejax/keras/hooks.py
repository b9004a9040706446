"""The smaller hooks: metric results as Tensors, seeds from ``tf.random.set_seed``, checkpoints.

* ``Metric.result()`` (every Keras metric class, present and future) gives
  tapejax Tensors outside a Keras scope, as ``tf.keras`` metrics give
  ``tf.Tensor`` s (``.numpy()`` works); inside one (Keras's ``fit``) it is
  Keras's.
* A Keras ``SeedGenerator`` made without a seed (``Dropout(0.5)``) takes its
  seed from Python's ``random`` (Keras); after ``tf.random.set_seed(s)`` it
  takes it from a stream keyed by ``s`` instead, restarted by every
  ``set_seed``, so random layers built after it are reproducible as in TF.
* ``tapejax.train.Checkpoint(model=model, optimizer=opt)``: Keras layers,
  models, optimizers and metrics are trackable objects whose variables are
  keyed by their Keras paths (``model/sequential/dense/kernel``)
  (``checkpoint.register_trackable``).
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.core
import numpy as np

from ..core import state as _state
from ..core.tensor import Tensor
from . import variables as _kvars

__all__ = ["install", "keras_children"]

_Tracer = jax.core.Tracer


def _as_tensor(x):
    if isinstance(x, jax.Array) and (not isinstance(x, _Tracer) or _state._local.collector is not None):
        return Tensor(x)
    return x


def tensor_result(fn):
    """``Metric.result`` giving Tensors outside a Keras scope."""
    if getattr(fn, "_tapejax_result", False):
        return fn

    @functools.wraps(fn)
    def result(self, *args, **kwargs):
        out = fn(self, *args, **kwargs)
        if _kvars.in_keras_scope():
            return out
        return jax.tree_util.tree_map(_as_tensor, out)

    setattr(result, "_tapejax_result", True)
    return result


def _wrap_result(cls) -> None:
    fn = cls.__dict__.get("result")
    if fn is not None and callable(fn):
        setattr(cls, "result", tensor_result(fn))


def _install_metrics() -> None:
    from keras.src.metrics.metric import Metric
    todo = [Metric]
    seen = set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        _wrap_result(cls)
        todo.extend(cls.__subclasses__())
    previous = Metric.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(Metric, cls).__init_subclass__(**kwargs)
        _wrap_result(cls)

    Metric.__init_subclass__ = classmethod(__init_subclass__)   # pyright: ignore[reportAttributeAccessIssue]


def _install_seeds() -> None:
    from keras.src.random import seed_generator

    from ..ops.random import get_global_generator
    keras_default = seed_generator.make_default_seed
    gen = get_global_generator()

    def make_default_seed():
        with gen._lock:
            seed = gen.global_seed
            if seed is None:
                return keras_default()
            n = gen._op_counts.get(("keras", seed), 0)   # restarted by set_seed, as the op seeds
            gen._op_counts[("keras", seed)] = n + 1
        return int(np.random.default_rng([seed & 0xFFFFFFFF, n]).integers(1, int(1e9)))

    seed_generator.make_default_seed = make_default_seed


def keras_children(obj: Any):
    """(path, variable) for the variables of a Keras layer, model, optimizer or metric."""
    return [(v.path, v) for v in obj.variables]


def _is_keras_object(obj: Any) -> bool:
    from keras.src.layers.layer import Layer
    from keras.src.metrics.metric import Metric
    from keras.src.optimizers.base_optimizer import BaseOptimizer
    return isinstance(obj, (Layer, BaseOptimizer, Metric))


def _install_checkpoint() -> None:
    from ..train import checkpoint
    checkpoint.register_trackable(_is_keras_object, keras_children)


_DONE: list = []


def install() -> None:
    if _DONE:
        return
    _install_metrics()
    _install_seeds()
    _install_checkpoint()
    _DONE.append(True)
