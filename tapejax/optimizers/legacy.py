"""Keras-2 ``OptimizerV2`` classes (``tf.keras.optimizers.legacy``): tapejax's optimizers, which are
the legacy rules.  Keras 2 has no legacy ``AdamW``, so neither does this module."""
from ._base import Optimizer
from ._rules import SGD, Adadelta, Adagrad, Adam, Adamax, Ftrl, Nadam, RMSprop

__all__ = ["Optimizer", "SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam", "Ftrl"]
