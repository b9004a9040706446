"""TF's ``checkpoint`` state file (the latest checkpoint and the kept ones, in TF's text format),
read and written atomically, and the deletion of a checkpoint's files: what ``Checkpoint.save``
and ``CheckpointManager`` share (``tf.train.latest_checkpoint``, ``get_checkpoint_state``)."""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time
from typing import Optional

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


def _wait_for_new_checkpoint(checkpoint_dir: str, last: Optional[str], seconds_to_sleep: float,
                             timeout: Optional[float]) -> Optional[str]:
    """The latest checkpoint once it differs from ``last`` (polled), or None after ``timeout``."""
    stop = None if timeout is None else time.time() + timeout
    while True:
        path = latest_checkpoint(checkpoint_dir)
        if path is not None and path != last:
            return path
        if stop is not None and time.time() + seconds_to_sleep > stop:
            return None
        time.sleep(seconds_to_sleep)


def checkpoints_iterator(checkpoint_dir: str, min_interval_secs: float = 0, timeout: Optional[float] = None,
                         timeout_fn=None):
    """``tf.train.checkpoints_iterator``: yield each new latest checkpoint of ``checkpoint_dir`` as it
    appears (polling the state file every second), at most one per ``min_interval_secs``; after
    ``timeout`` seconds without a new one stop, unless ``timeout_fn`` returns False (keep waiting)."""
    last: Optional[str] = None
    while True:
        path = _wait_for_new_checkpoint(checkpoint_dir, last, 1.0, timeout)
        if path is None:
            if not timeout_fn:
                _log.info("Timed-out waiting for a checkpoint.")
                return
            if timeout_fn():
                return
            continue
        start = time.time()
        last = path
        yield path
        wait = start + min_interval_secs - time.time()
        if wait > 0:
            time.sleep(wait)
