"""A model's tapejax optimizer in Keras's weights files (``model.save``, ``save_weights``).

Keras's saving walks a model's attributes and writes the state of each ``KerasSaveable`` it
finds: a Keras 3 optimizer under ``optimizer/vars``.  tapejax's (tf_keras') optimizers are
not ``KerasSaveable``, so ``model.save`` / ``load_model`` and ``BackupAndRestore`` (which backs
up with ``save_weights``) lost the slots and step count that tf_keras keeps.  Here the walk
(``saving_lib._walk_saveable``) gives, in a tapejax optimizer's place, a ``KerasSaveable`` view
(``state_view``) that writes its Variables (``iterations``, then the slots, in creation order)
as Keras writes its own optimizer's, and on load makes the slots for the model's trainable
variables first (a fresh optimizer has none), then assigns them.  A file whose number of
values differs (another optimizer) is skipped with Keras's warning.
"""
from __future__ import annotations

import warnings
from typing import Any, Iterator

import numpy as np

__all__ = ["install", "state_view"]

_ORIG: dict = {}
_VIEW: list = []   # the view's class, made once Keras is loaded


def _view_class() -> Any:
    if not _VIEW:
        from keras.src.saving.keras_saveable import KerasSaveable

        class OptimizerState(KerasSaveable):
            """What Keras's saving sees of ``model``'s tapejax optimizer."""

            def __init__(self, model: Any, optimizer: Any) -> None:
                self._model = model
                self._optimizer = optimizer

            def _obj_type(self) -> str:
                return "Optimizer"

            @property
            def name(self) -> str:
                return str(getattr(self._optimizer, "name", "optimizer"))

            def save_own_variables(self, store: Any) -> None:
                for i, v in enumerate(self._optimizer.variables):
                    store[str(i)] = np.asarray(v.numpy())

            def load_own_variables(self, store: Any) -> None:
                from .trainer import build_optimizer_slots
                build_optimizer_slots(self._model, self._optimizer)
                variables = list(self._optimizer.variables)
                if len(store.keys()) != len(variables):
                    warnings.warn(f"Skipping variable loading for optimizer '{self.name}', because it has "
                                  f"{len(variables)} variables whereas the saved optimizer has "
                                  f"{len(store.keys())} variables.", stacklevel=2)
                    return
                for i, v in enumerate(variables):
                    v.assign(np.asarray(store[str(i)]))

        _VIEW.append(OptimizerState)
    return _VIEW[0]


def state_view(model: Any, optimizer: Any) -> Any:
    """The ``KerasSaveable`` view of ``model``'s tapejax ``optimizer``."""
    return _view_class()(model, optimizer)


def _walk_saveable(saveable: Any) -> Iterator[Any]:
    from ..optimizers import Optimizer
    if _VIEW and isinstance(saveable, _VIEW[0]):   # (its attributes are not Keras's to walk)
        return
    for attr, obj in _ORIG["_walk_saveable"](saveable):
        if attr == "optimizer" and isinstance(obj, Optimizer):
            obj = state_view(saveable, obj)
        yield attr, obj


def install() -> None:
    """Put ``_walk_saveable`` in Keras's saving (once)."""
    from keras.src.saving import saving_lib
    if _ORIG:
        return
    _ORIG["_walk_saveable"] = saving_lib._walk_saveable
    setattr(saving_lib, "_walk_saveable", _walk_saveable)
