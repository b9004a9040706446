"""``CheckpointManager``, ``latest_checkpoint`` and TF's ``checkpoint`` state file.

The state file is TF's text ``CheckpointState`` (``model_checkpoint_path``,
``all_model_checkpoint_paths``, their timestamps, ``last_preserved_timestamp``),
paths relative to the directory, written atomically (temporary file, fsync,
rename) by process 0 only, after the checkpoint it names is committed.  So
``latest_checkpoint`` never names a half-written checkpoint, and TF's own
``tf.train.latest_checkpoint`` reads a tapejax directory's state too.

``CheckpointManager`` is TF's, on the same file: ``save()`` numbers
checkpoints ``directory/ckpt-N`` with the checkpoint's ``save_counter`` (or
``checkpoint_number``), keeps the newest ``max_to_keep`` in ``checkpoints``
and deletes older ones unless ``keep_checkpoint_every_n_hours`` preserves
one, saves only every ``checkpoint_interval`` steps of ``step_counter``, and
recovers its list from the state file when made again in the same
directory.  (orbax has a CheckpointManager too; its directory layout, step
names and retention options are not TF's, so TF's bookkeeping is kept here and
each save goes through orbax.)
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable, Optional

import numpy as np

from .checkpoint import Checkpoint
from .state_file import (
    CheckpointState,
    delete_checkpoint,
    get_checkpoint_state,
    latest_checkpoint,
    update_checkpoint_state,
)

_log = logging.getLogger("tapejax")


def _int(value: Any, what: str) -> int:
    dtype = getattr(value, "dtype", None)
    dtype = getattr(dtype, "_np", dtype)
    if isinstance(value, (bool, float)) or (dtype is not None and np.dtype(dtype).kind not in "iu"):
        raise TypeError(f"{what} must be an integer (or an integer Variable/Tensor); got {value!r}")
    try:
        return int(np.asarray(value.numpy() if hasattr(value, "numpy") else value))
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be an integer (or an integer Variable/Tensor); got {value!r}") from None


class CheckpointManager:
    """Keeps some checkpoints of a ``Checkpoint`` and deletes the others (``tf.train.CheckpointManager``)."""

    def __init__(self, checkpoint: Any, directory: Any, max_to_keep: Optional[int],
                 keep_checkpoint_every_n_hours: Optional[float] = None, checkpoint_name: str = "ckpt",
                 step_counter: Any = None, checkpoint_interval: Optional[int] = None,
                 init_fn: Optional[Callable[[], Any]] = None, last_checkpoint_step: Optional[int] = None):
        if not isinstance(checkpoint, Checkpoint):
            raise TypeError(f"CheckpointManager expects a tapejax.train.Checkpoint as `checkpoint`; got "
                            f"{checkpoint!r} of type {type(checkpoint).__name__}")
        if max_to_keep is not None and (isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int)):
            raise TypeError(f"Expected an integer or `None` for `max_to_keep`, got {max_to_keep!r}.")
        if max_to_keep is not None and max_to_keep <= 0:
            raise ValueError(f"Expected a positive integer or `None` for `max_to_keep`, got {max_to_keep}.")
        if checkpoint_interval is not None and step_counter is None:
            raise ValueError("`step_counter` should be passed if `checkpoint_interval` is not None.")
        self._checkpoint = checkpoint
        self._max_to_keep = max_to_keep
        self._keep_checkpoint_every_n_hours = keep_checkpoint_every_n_hours
        self._directory = os.fspath(directory)
        self._checkpoint_prefix = os.path.join(self._directory, checkpoint_name)
        self._init_fn = init_fn
        self._step_counter = step_counter
        self._checkpoint_interval = checkpoint_interval
        self._last_checkpoint_step = last_checkpoint_step
        recovered = get_checkpoint_state(self._directory)
        now = time.time()
        self._maybe_delete: dict[str, float] = {}
        if recovered is None:
            self._latest_checkpoint = None
            self._last_preserved_timestamp = now - 1.0
        else:
            self._latest_checkpoint = recovered.model_checkpoint_path or None
            self._last_preserved_timestamp = recovered.last_preserved_timestamp
            if now < self._last_preserved_timestamp:
                _log.warning("time.time() returned a value %f seconds behind the last preserved checkpoint "
                             "timestamp.", self._last_preserved_timestamp - now)
                self._last_preserved_timestamp = now
            stamps = recovered.all_model_checkpoint_timestamps or \
                [self._last_preserved_timestamp] * len(recovered.all_model_checkpoint_paths)
            for path, stamp in zip(recovered.all_model_checkpoint_paths, stamps):
                stamp = min(stamp, now)
                if stamp > self._last_preserved_timestamp:
                    self._maybe_delete[path] = stamp

    @property
    def directory(self) -> str:
        return self._directory

    @property
    def checkpoint_interval(self) -> Optional[int]:
        return self._checkpoint_interval

    @property
    def latest_checkpoint(self) -> Optional[str]:
        """The newest checkpoint's prefix (``latest_checkpoint(directory)``), or None."""
        return self._latest_checkpoint

    @property
    def checkpoints(self) -> list:
        """The managed checkpoints, oldest first (not those kept by ``keep_checkpoint_every_n_hours``)."""
        return list(self._maybe_delete)

    @property
    def checkpoint(self) -> Any:
        return self._checkpoint

    def _sweep(self) -> None:
        if not self._max_to_keep:
            return
        while len(self._maybe_delete) > self._max_to_keep:
            path = next(iter(self._maybe_delete))
            stamp = self._maybe_delete.pop(path)
            if (self._keep_checkpoint_every_n_hours
                    and stamp - self._keep_checkpoint_every_n_hours * 3600.0 >= self._last_preserved_timestamp):
                self._last_preserved_timestamp = stamp
                continue
            delete_checkpoint(path)

    def _record_state(self) -> None:
        assert self._latest_checkpoint is not None
        update_checkpoint_state(self._directory, self._latest_checkpoint, list(self._maybe_delete),
                                list(self._maybe_delete.values()), self._last_preserved_timestamp)

    def save(self, checkpoint_number: Any = None, check_interval: bool = True, options: Any = None) -> Optional[str]:
        """Save a numbered checkpoint and forget old ones; None when ``checkpoint_interval`` says
        it is too early."""
        if self._checkpoint_interval is not None:
            step = _int(self._step_counter, "step_counter")
            if self._last_checkpoint_step is not None:
                if step == self._last_checkpoint_step:
                    return None
                if check_interval and step < self._last_checkpoint_step + self._checkpoint_interval:
                    return None
            self._last_checkpoint_step = step
        number = None if checkpoint_number is None else _int(checkpoint_number, "checkpoint_number")
        counter = self._checkpoint.save_counter
        counter.assign_add(np.asarray(1, counter.dtype._np))
        if number is None:
            number = int(counter.numpy())
        prefix = f"{self._checkpoint_prefix}-{number}"

        def record_and_sweep() -> None:
            if prefix in self._maybe_delete:
                del self._maybe_delete[prefix]
            self._maybe_delete[prefix] = time.time()
            self._latest_checkpoint = prefix
            self._record_state()   # first with the new one, so a crash while deleting still finds it
            self._sweep()
            self._record_state()

        return self._checkpoint._write(prefix, options, callbacks=[record_and_sweep])

    def restore_or_initialize(self) -> Optional[str]:
        """Restore the latest checkpoint and return its path; else run ``init_fn`` and return None."""
        if self._latest_checkpoint is not None:
            self._checkpoint.restore(self._latest_checkpoint)
            if self._checkpoint_interval is not None:
                self._last_checkpoint_step = _int(self._step_counter, "step_counter")
            return self._latest_checkpoint
        if self._init_fn is not None:
            self._init_fn()
        return None

    def sync(self) -> None:
        """Wait for an async save to be committed."""
        self._checkpoint.sync()


__all__ = ["CheckpointManager", "CheckpointState", "latest_checkpoint", "get_checkpoint_state",
           "update_checkpoint_state"]
