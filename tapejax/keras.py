"""``tapejax.keras``: the part of ``tf.keras`` that training loops touch, so TF code ports unchanged.

``tapejax.keras.optimizers`` is ``tapejax.optimizers``;
``tapejax.keras.optimizers.legacy`` holds the Keras-2 ``OptimizerV2`` classes
(the same classes: tapejax's optimizers *are* the legacy rules).  Keras 2
has no legacy ``AdamW``, so neither does ``legacy`` here.
"""
import types

from . import optimizers

_LEGACY = ["Optimizer", "SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam", "Ftrl"]
legacy = types.ModuleType("tapejax.keras.optimizers.legacy",
                          "Keras-2 OptimizerV2 classes (``tf.keras.optimizers.legacy``).")
for _n in _LEGACY:
    setattr(legacy, _n, getattr(optimizers, _n))
legacy.__all__ = list(_LEGACY)
optimizers.legacy = legacy

__all__ = ["optimizers"]
