"""Training state; as a namespace, ``tapejax.train`` is TF's ``tf.train``.

``Checkpoint``, ``CheckpointManager``, ``CheckpointOptions``,
``latest_checkpoint``, ``get_checkpoint_state``, ``list_variables``,
``load_variable`` and ``load_checkpoint`` behave as TF's, on orbax-checkpoint
storage; ``register_trackable`` / ``register_value`` / ``track`` let other
object kinds take part (see README.md).  ``module`` holds ``tapejax.Module``;
``saved_model`` is ``tapejax.saved_model``.
"""
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
