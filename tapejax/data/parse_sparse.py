"""``tf.io.SparseFeature``: a SparseTensor assembled from an Example's index and value features.

``SparseFeature(index_key, value_key, dtype, size, already_sorted=False)`` reads the int64
feature(s) ``index_key`` (one key, or a list of keys: one per dimension) and the feature
``value_key`` (of ``dtype``) of each Example, and gives the SparseTensor of dense shape ``size``
(``[batch] + size`` for a batch, each entry prefixed by its Example's position) whose entries are
those indices and values, sorted row-major (stably) unless ``already_sorted``.  As TF's: the
indices are not checked against ``size``, a missing feature has no entries, and index and value
lists of different lengths are ValueError ("Dimensions i and v are not compatible").

``parse_single_example`` / ``parse_example`` here are ``parse_example``'s with the SparseFeatures
taken out of ``features`` and assembled after, their keys last in the result as in TF's (the
public ``tf.io`` names are these).
"""
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from ..core.errors import UnimplementedError
from ..ops.sparse_tensor import SparseTensor
from . import parse_example as _pe
from .hostops import host_strings


class SparseFeature(NamedTuple):
    """``tf.io.SparseFeature(index_key, value_key, dtype, size, already_sorted=False)``."""

    index_key: Any
    value_key: str
    dtype: Any
    size: Any
    already_sorted: bool = False


class _SparseConfig(NamedTuple):
    key: str
    index: Tuple[_pe.FeatureConfig, ...]   # one int64 VarLen config per dimension
    value: _pe.FeatureConfig
    size: Tuple[int, ...]
    already_sorted: bool


def _config(key: Any, f: SparseFeature) -> _SparseConfig:
    keys = [f.index_key] if isinstance(f.index_key, str) else list(f.index_key)
    size = [f.size] if isinstance(f.size, (int, np.integer)) else list(f.size)
    if len(keys) != len(size):
        raise ValueError(f"SparseFeature {key!r}: index_key has {len(keys)} keys but size has {len(size)} "
                         "dimensions (one index key per dimension).")
    value = _pe.feature_config(f.value_key, _pe.VarLenFeature(f.dtype))
    index = tuple(_pe.feature_config(k, _pe.VarLenFeature(np.int64)) for k in keys)
    return _SparseConfig(str(key), index, value, tuple(int(d) for d in size), bool(f.already_sorted))


def _split(features: Any) -> "Tuple[Any, List[_SparseConfig]]":
    if not isinstance(features, dict) or not any(isinstance(f, SparseFeature) for f in features.values()):
        return features, []
    plain = {k: f for k, f in features.items() if not isinstance(f, SparseFeature)}
    return plain, [_config(k, f) for k, f in sorted(features.items()) if isinstance(f, SparseFeature)]


def _entries(example: Any, sc: _SparseConfig, where: str) -> "Tuple[np.ndarray, np.ndarray]":
    feats = example.features.feature

    def values(c: _pe.FeatureConfig) -> np.ndarray:
        v: Optional[np.ndarray] = _pe._values(feats[c.key] if c.key in feats else None, c, where)
        return np.empty(0, _pe.kind_dtype(c.kind)) if v is None else v

    vals = values(sc.value)
    cols = [values(c) for c in sc.index]
    for c in cols:
        if len(c) != len(vals):
            raise ValueError(f"Dimensions {len(c)} and {len(vals)} are not compatible (the index and value features "
                             f"of SparseFeature {sc.key!r})")
    ind = np.stack(cols, axis=1).astype(np.int64) if cols else np.zeros((len(vals), 0), np.int64)
    if not sc.already_sorted and len(vals) > 1:
        order = np.lexsort(tuple(ind[:, k] for k in range(ind.shape[1] - 1, -1, -1)))
        ind, vals = ind[order], vals[order]
    return ind, vals


def _output(examples: List[Any], sc: _SparseConfig, batched: bool, names: Optional[List[str]]) -> SparseTensor:
    if sc.value.kind == "bytes_list":
        raise UnimplementedError(None, None, f"SparseFeature {sc.key!r}: string values would be a string "
                                 "SparseTensor, and tapejax has no string tensors.")
    parts = [_entries(ex, sc, f"Name: {names[i]}, " if names else "") for i, ex in enumerate(examples)]
    if not batched:
        ind, vals = parts[0]
        return SparseTensor._of(ind, _pe.to_output(vals, sc.value), sc.size)
    ind = np.concatenate([np.concatenate([np.full((len(i), 1), b, np.int64), i], axis=1)
                          for b, (i, _) in enumerate(parts)]) if parts else np.zeros((0, len(sc.size) + 1), np.int64)
    vals = np.concatenate([v for _, v in parts]) if parts else np.empty(0, _pe.kind_dtype(sc.value.kind))
    return SparseTensor._of(ind, _pe.to_output(vals, sc.value), (len(parts),) + sc.size)


def parse_single_example(serialized: Any, features: Any, example_names: Any = None,
                         name: Optional[str] = None) -> Dict[str, Any]:
    """``tf.io.parse_single_example`` (``parse_example``'s, with SparseFeatures)."""
    plain, sparse = _split(features)
    if not sparse:
        return _pe.parse_single_example(serialized, features, example_names, name)
    out = _pe.parse_single_example(serialized, plain) if plain else {}
    a = host_strings(serialized, "tf.io.parse_single_example", "serialized")
    if a.ndim != 0:
        raise ValueError(f"Input serialized must be a scalar; got shape {list(a.shape)}.")
    example = _pe._parse(bytes(a[()]), "")
    for sc in sparse:   # (after the others, as TF's)
        out[sc.key] = _output([example], sc, False, None)
    return out


def parse_example(serialized: Any, features: Any, example_names: Any = None,
                  name: Optional[str] = None) -> Dict[str, Any]:
    """``tf.io.parse_example`` (``parse_example``'s, with SparseFeatures)."""
    plain, sparse = _split(features)
    if not sparse:
        return _pe.parse_example(serialized, features, example_names, name)
    a = host_strings(serialized, "tf.io.parse_example", "serialized")
    if a.ndim == 0:
        return parse_single_example(a[()], features)
    _pe.check_vector(a)
    out = _pe.parse_example(serialized, plain, example_names) if plain else {}
    examples = [_pe._parse(bytes(s), "") for s in a]
    for sc in sparse:
        out[sc.key] = _output(examples, sc, True, None)
    return out


__all__ = ["SparseFeature", "parse_example", "parse_single_example"]
