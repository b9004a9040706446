"""Reverse and forward mode on the tape; as a namespace, ``tapejax.autodiff`` is TF's ``tf.autodiff``.

The machinery (see README.md): ``tape`` records, ``program`` slices a tape and names
its structure, ``replay`` compiles and caches the backward, ``jacobian`` and ``forward``
reuse the replay, ``explain`` says why a gradient is None, ``custom`` /
``custom_gradient`` / ``late`` / ``user_grad`` hold gradient control.
"""
from .forward import ForwardAccumulator
from .tape import GradientTape

__all__ = ["ForwardAccumulator", "GradientTape"]
