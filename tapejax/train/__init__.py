"""Training state; as a namespace, ``tapejax.train`` is TF's ``tf.train``.

``Checkpoint``, ``CheckpointManager``, ``CheckpointOptions``,
``latest_checkpoint``, ``get_checkpoint_state``, ``list_variables``,
``load_variable`` and ``load_checkpoint`` behave as TF's, on orbax-checkpoint
storage; ``register_trackable`` / ``register_value`` / ``track`` let other
object kinds take part (see README.md).  ``module`` holds ``tapejax.Module``;
``saved_model`` is ``tapejax.saved_model``.  ``Example``, ``Features``, ``Feature`` and the other
``tf.train`` protocol buffers are ``tapejax.data.example_proto``'s (built on first use: protobuf
is the ``data`` extra).
"""
from typing import Any as _Any

from .checkpoint import Checkpoint, CheckpointOptions
from .manager import CheckpointManager
from .moving_averages import ExponentialMovingAverage
from .reader import CheckpointReader, list_variables, load_checkpoint, load_variable
from .state_file import CheckpointState, checkpoints_iterator, get_checkpoint_state, latest_checkpoint
from .status import CheckpointLoadStatus, InitializationOnlyStatus
from .trackable import GroupRef, SlotRef, register_trackable, register_value, track
from .views import CheckpointView, TrackableView

__all__ = ["Checkpoint", "ExponentialMovingAverage", "CheckpointOptions", "CheckpointManager", "CheckpointState", "CheckpointLoadStatus",
           "InitializationOnlyStatus", "CheckpointReader", "checkpoints_iterator", "get_checkpoint_state", "latest_checkpoint",
           "list_variables", "load_checkpoint", "load_variable", "register_trackable", "register_value", "track",
           "SlotRef", "GroupRef", "CheckpointView", "TrackableView"]


def __getattr__(name: str) -> _Any:
    """``tf.train.Example`` and its parts (``tapejax.data.example_proto``), built on first use."""
    from ..data import example_proto
    if name in example_proto.NAMES:
        return getattr(example_proto, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
