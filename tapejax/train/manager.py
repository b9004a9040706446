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

import dataclasses
import logging
import os
import shutil
import tempfile
import time
from typing import Any, Callable, Optional

import numpy as np

from . import storage as _storage

_log = logging.getLogger("tapejax")
STATE_FILE = "checkpoint"


@dataclasses.dataclass
class CheckpointState:
    """TF's ``CheckpointState`` proto, as a record (paths made absolute when read)."""

    model_checkpoint_path: str = ""
    all_model_checkpoint_paths: list = dataclasses.field(default_factory=list)
    all_model_checkpoint_timestamps: list = dataclasses.field(default_factory=list)
    last_preserved_timestamp: float = 0.0


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unquote(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] == '"':
        s = s[1:-1]
    return s.replace('\\"', '"').replace("\\\\", "\\")


def _is_primary() -> bool:
    import jax
    return jax.process_index() == 0


def _atomic_write_text(path: str, text: str) -> None:
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-checkpoint-", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def update_checkpoint_state(save_dir: str, model_checkpoint_path: str, all_model_checkpoint_paths=None,
                            all_model_checkpoint_timestamps=None, last_preserved_timestamp=None,
                            latest_filename: Optional[str] = None) -> None:
    """Write ``save_dir/checkpoint`` (paths inside ``save_dir`` are stored relative, as TF)."""
    if not _is_primary():
        return

    def rel(p: str) -> str:
        inside = os.path.dirname(os.path.abspath(p)) == os.path.abspath(save_dir)
        return os.path.basename(p) if inside else p

    paths = list(all_model_checkpoint_paths or [model_checkpoint_path])
    lines = [f"model_checkpoint_path: {_quote(rel(model_checkpoint_path))}"]
    lines += [f"all_model_checkpoint_paths: {_quote(rel(p))}" for p in paths]
    lines += [f"all_model_checkpoint_timestamps: {float(t)!r}" for t in (all_model_checkpoint_timestamps or ())]
    if last_preserved_timestamp is not None:
        lines.append(f"last_preserved_timestamp: {float(last_preserved_timestamp)!r}")
    _atomic_write_text(os.path.join(save_dir, latest_filename or STATE_FILE), "\n".join(lines) + "\n")


def get_checkpoint_state(checkpoint_dir: str, latest_filename: Optional[str] = None) -> Optional[CheckpointState]:
    """The state file of ``checkpoint_dir`` (None when there is none), paths joined with the directory."""
    checkpoint_dir = os.fspath(checkpoint_dir)
    fname = os.path.join(checkpoint_dir, latest_filename or STATE_FILE)
    if not os.path.isfile(fname):
        return None
    st = CheckpointState()
    with open(fname) as f:
        for line in f:
            if ":" not in line:
                continue
            key, value = line.split(":", 1)
            key = key.strip()
            if key == "model_checkpoint_path":
                st.model_checkpoint_path = _unquote(value)
            elif key == "all_model_checkpoint_paths":
                st.all_model_checkpoint_paths.append(_unquote(value))
            elif key == "all_model_checkpoint_timestamps":
                st.all_model_checkpoint_timestamps.append(float(value))
            elif key == "last_preserved_timestamp":
                st.last_preserved_timestamp = float(value)

    def absolute(p: str) -> str:
        return p if os.path.isabs(p) else os.path.join(checkpoint_dir, p)

    st.model_checkpoint_path = absolute(st.model_checkpoint_path) if st.model_checkpoint_path else ""
    st.all_model_checkpoint_paths = [absolute(p) for p in st.all_model_checkpoint_paths]
    return st


def latest_checkpoint(checkpoint_dir: str, latest_filename: Optional[str] = None) -> Optional[str]:
    """The newest checkpoint recorded in ``checkpoint_dir``'s state file, or None."""
    st = get_checkpoint_state(checkpoint_dir, latest_filename)
    if st is None or not st.model_checkpoint_path:
        return None
    if _storage.checkpoint_exists(st.model_checkpoint_path):
        return st.model_checkpoint_path
    _log.error("Couldn't match files for checkpoint %s", st.model_checkpoint_path)
    return None


def delete_checkpoint(prefix: str) -> None:
    """Remove a checkpoint of any format (process 0 only)."""
    if not _is_primary():
        return
    if os.path.isdir(prefix):
        shutil.rmtree(prefix, ignore_errors=True)
    d, base = os.path.split(prefix)
    if os.path.isdir(d or "."):
        for name in os.listdir(d or "."):
            if name in (base + ".index", base + ".npz") or name.startswith(base + ".data-"):
                try:
                    os.remove(os.path.join(d, name))
                except OSError:
                    pass


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
        from .checkpoint import Checkpoint
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
