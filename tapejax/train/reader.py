"""Looking inside a checkpoint: ``list_variables``, ``load_variable``, ``load_checkpoint``.

As TF's, for every format ``storage`` reads (tapejax's, TF's, the first
``.npz``): ``ckpt_dir_or_file`` is a checkpoint's prefix or a directory whose
``checkpoint`` state file names one; names are the checkpoint keys, and
``_CHECKPOINTABLE_OBJECT_GRAPH`` is listed too (for a tapejax checkpoint its
value is the object graph as JSON bytes, for TF's the serialized proto).
"""
from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from ..core import dtypes as _dtypes
from ..core.errors import NotFoundError
from . import storage as _storage
from .state_file import latest_checkpoint
from .storage import ReadTarget

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


def _filename(ckpt_dir_or_file: Any) -> str:
    if isinstance(ckpt_dir_or_file, os.PathLike):
        ckpt_dir_or_file = os.fspath(ckpt_dir_or_file)
    if not isinstance(ckpt_dir_or_file, str):
        raise TypeError(f"`ckpt_dir_or_file` must be a path string; got {ckpt_dir_or_file!r}")
    path = ckpt_dir_or_file
    if os.path.isdir(path) and not _storage.is_tapejax_checkpoint(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise NotFoundError(None, None, f"Unsuccessful TensorSliceReader constructor: Failed to find any "
                                f"matching files for {path}")
        return latest
    return path


class CheckpointReader:
    """Reads single values of a checkpoint (``tf.train.load_checkpoint``'s reader)."""

    def __init__(self, path: str):
        self._data = _storage.open_checkpoint(path)
        self.path = self._data.path

    def has_tensor(self, name: str) -> bool:
        return name == OBJECT_GRAPH_KEY or name in self._data.specs

    def get_tensor(self, name: str) -> Any:
        """The value of ``name`` as a NumPy array (NotFoundError when there is none)."""
        if name == OBJECT_GRAPH_KEY:
            raw = getattr(self._data, "_reader", None)
            if raw is not None:   # a TF checkpoint: its own proto
                return raw.get_tensor(name)
            return json.dumps(self._data.graph.to_json()).encode()
        if name not in self._data.specs:
            raise NotFoundError(None, None, f"Key {name} not found in checkpoint")
        return np.asarray(self._data.read([ReadTarget(name)])[0])

    def get_variable_to_shape_map(self) -> dict:
        out = {k: list(s.shape) for k, s in self._data.specs.items()}
        out[OBJECT_GRAPH_KEY] = []
        return out

    def get_variable_to_dtype_map(self) -> dict:
        out: dict[str, Any] = {k: _dtypes.as_dtype(_storage.np_dtype(s.dtype)) for k, s in self._data.specs.items()}
        out[OBJECT_GRAPH_KEY] = _dtypes.string
        return out

    def debug_string(self) -> bytes:
        return "".join(f"{k} ({s.dtype}) {list(s.shape)}\n" for k, s in sorted(self._data.specs.items())).encode()


def load_checkpoint(ckpt_dir_or_file: Any) -> CheckpointReader:
    """A ``CheckpointReader`` for the checkpoint (or the directory's latest one)."""
    return CheckpointReader(_filename(ckpt_dir_or_file))


def list_variables(ckpt_dir_or_file: Any) -> list:
    """``[(name, shape), ...]`` of every value in the checkpoint, sorted by name."""
    reader = load_checkpoint(ckpt_dir_or_file)
    return sorted((k, v) for k, v in reader.get_variable_to_shape_map().items())


def load_variable(ckpt_dir_or_file: Any, name: str) -> Any:
    """The value ``name`` (a trailing ``:0`` is ignored) as a NumPy array."""
    if not isinstance(name, str):
        raise TypeError(f"`name` must be a string checkpoint key; got {name!r}")
    if name.endswith(":0"):
        name = name[:-2]
    return load_checkpoint(ckpt_dir_or_file).get_tensor(name)


__all__ = ["CheckpointReader", "load_checkpoint", "list_variables", "load_variable"]
