"""Training state; as a namespace, ``tapejax.train`` is TF's ``tf.train``.

``module`` holds ``tapejax.Module`` and ``name_scope``; ``checkpoint`` holds
``Checkpoint`` and ``latest_checkpoint`` (see README.md).
"""
from .checkpoint import Checkpoint, CheckpointLoadStatus, latest_checkpoint

__all__ = ["Checkpoint", "CheckpointLoadStatus", "latest_checkpoint"]
