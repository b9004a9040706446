"""``tapejax.keras``: the part of ``tf.keras`` that training loops touch, so TF code ports unchanged.

``tapejax.keras.optimizers`` is ``tapejax.optimizers``;
``tapejax.keras.optimizers.legacy`` (``tapejax/optimizers/legacy.py``) holds
the Keras-2 ``OptimizerV2`` classes (the same classes: tapejax's optimizers
*are* the legacy rules).  Keras 2 has no legacy ``AdamW``, so neither does
``legacy`` here.
"""
from .. import optimizers

__all__ = ["optimizers"]
