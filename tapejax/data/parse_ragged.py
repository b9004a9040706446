"""``tf.io.RaggedFeature``: a RaggedTensor assembled from an Example's value and partition features.

``RaggedFeature(dtype, value_key=None, partitions=(), row_splits_dtype=int32, validate=False)``
reads the feature ``value_key`` (the output key when None) of each Example as a flat list of
``dtype`` values and partitions it by the int64 features ``partitions`` name, outermost first
(``RaggedFeature.RowSplits`` / ``RowLengths`` / ``RowStarts`` / ``RowLimits``: a key;
``UniformRowLength``: a static length).  One Example with no partitions gives a dense Tensor,
with partitions a RaggedTensor of ``len(partitions)`` ragged dimensions; a batch adds one outer
partition (one row per Example).  As TF's: a missing feature is empty, the partitions are checked
only with ``validate=True`` (``InvalidArgumentError``), a key used for values and a partition with
another dtype is ValueError, and the ragged outputs come after the other features.  String values
are ``UnimplementedError`` (tapejax has no string tensors); ``ValueRowIds`` partitions are too.

``parse_single_example`` / ``parse_example`` here are ``parse_sparse``'s (the public ``tf.io``
names) with the RaggedFeatures taken out and assembled after.
"""
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from ..core import dtypes as _dtypes
from ..core.errors import InvalidArgumentError, UnimplementedError
from ..ops.ragged_dense import host_tensor
from ..ops.ragged_partition import splits_dtype_arg
from ..ops.ragged_tensor import RaggedTensor, RaggedTensorSpec
from . import parse_example as _pe, parse_sparse as _ps
from .hostops import host_strings, is_perturbed
from .ragged_elements import RaggedValue, grown, stack


class RowSplits(NamedTuple):
    key: str


class RowLengths(NamedTuple):
    key: str


class RowStarts(NamedTuple):
    key: str


class RowLimits(NamedTuple):
    key: str


class ValueRowIds(NamedTuple):
    key: str


class UniformRowLength(NamedTuple):
    length: int


class RaggedFeature(NamedTuple):
    """``tf.io.RaggedFeature(dtype, value_key=None, partitions=(), row_splits_dtype=int32,
    validate=False)``; its partition kinds are attributes (``RaggedFeature.RowLengths`` ...)."""

    dtype: Any
    value_key: Optional[str] = None
    partitions: Tuple[Any, ...] = ()
    row_splits_dtype: Any = _dtypes.int32
    validate: bool = False


for _p in (RowSplits, RowLengths, RowStarts, RowLimits, ValueRowIds, UniformRowLength):
    setattr(RaggedFeature, _p.__name__, _p)


class _RaggedConfig(NamedTuple):
    key: str
    value: _pe.FeatureConfig
    partitions: Tuple[Any, ...]       # the partition records, outermost first
    keyed: Tuple[Optional[_pe.FeatureConfig], ...]   # their int64 features (None: UniformRowLength)
    splits_dtype: _dtypes.DType
    validate: bool


def _config(key: Any, f: RaggedFeature) -> _RaggedConfig:
    value_key = str(key) if f.value_key is None else str(f.value_key)
    value = _pe.feature_config(value_key, _pe.VarLenFeature(f.dtype))
    parts, keyed = tuple(f.partitions), []
    for p in parts:
        if isinstance(p, ValueRowIds):
            raise UnimplementedError(None, None, f"RaggedFeature {key!r}: tapejax parses RowSplits, RowLengths, "
                                     "RowStarts, RowLimits and UniformRowLength partitions, not ValueRowIds.")
        if isinstance(p, UniformRowLength):
            if int(p.length) <= 0:
                raise ValueError(f"RaggedFeature {key!r}: UniformRowLength must be positive; got {p.length}")
            keyed.append(None)
            continue
        if not isinstance(p, (RowSplits, RowLengths, RowStarts, RowLimits)):
            raise TypeError(f"RaggedFeature {key!r}: unsupported partition {p!r} (argument `partitions`: "
                            "RaggedFeature.RowSplits / RowLengths / RowStarts / RowLimits / UniformRowLength)")
        if p.key == value_key and value.kind != "int64_list":
            raise ValueError(f"Conflicting type {_dtypes.as_dtype(f.dtype)!r} vs {_dtypes.int64!r} for feature "
                             f"{p.key}.")
        keyed.append(_pe.feature_config(p.key, _pe.VarLenFeature(np.int64)))
    return _RaggedConfig(str(key), value, parts, tuple(keyed), splits_dtype_arg(f.row_splits_dtype),
                         bool(f.validate))


def _split(features: Any) -> "Tuple[Any, List[_RaggedConfig]]":
    if not isinstance(features, dict) or not any(isinstance(f, RaggedFeature) for f in features.values()):
        return features, []
    plain = {k: f for k, f in features.items() if not isinstance(f, RaggedFeature)}
    configs = [_config(k, f) for k, f in sorted(features.items()) if isinstance(f, RaggedFeature)]
    seen: Dict[str, _dtypes.DType] = {}
    for rc in configs:   # (TF: a value or partition key read with two row_splits dtypes is ValueError)
        for c in (rc.value,) + rc.keyed:
            if c is not None and seen.setdefault(c.key, rc.splits_dtype) != rc.splits_dtype:
                raise ValueError(f"Conflicting partition type {seen[c.key]!r} vs {rc.splits_dtype!r} for feature "
                                 f"{c.key}.")
    dense = sorted(str(k) for k, f in plain.items() if isinstance(f, (_pe.FixedLenFeature, _pe.FixedLenSequenceFeature)))
    both = set(dense) & set(seen)
    if both:
        raise ValueError(f"Dense and ragged keys must not intersect; dense_keys: {dense}, ragged_keys: {list(seen)}, "
                         f"intersection: {both}")
    return plain, configs


def _bad(rc: _RaggedConfig, msg: str) -> InvalidArgumentError:
    return InvalidArgumentError(None, None, f"RaggedFeature {rc.key!r}: invalid partition: {msg}")


def _value(example: Any, rc: _RaggedConfig, where: str) -> RaggedValue:
    feats = example.features.feature

    def values(c: _pe.FeatureConfig) -> np.ndarray:
        v: Optional[np.ndarray] = _pe._values(feats[c.key] if c.key in feats else None, c, where)
        return np.empty(0, _pe.kind_dtype(c.kind)) if v is None else v

    flat = values(rc.value)
    splits: List[np.ndarray] = []
    n = len(flat)
    for p, c in reversed(list(zip(rc.partitions, rc.keyed))):
        if c is None:
            length = int(p.length)
            if rc.validate and n % length:
                raise _bad(rc, f"{n} values do not divide into rows of UniformRowLength {length}")
            s = np.arange(n // length + 1, dtype=np.int64) * length
        else:
            a = values(c).astype(np.int64)
            s = (a if isinstance(p, RowSplits) else
                 np.concatenate([[0], np.cumsum(a)]) if isinstance(p, RowLengths) else
                 np.concatenate([a, [n]]) if isinstance(p, RowStarts) else np.concatenate([[0], a])).astype(np.int64)
            if rc.validate and (s.size == 0 or s[0] != 0 or (np.diff(s) < 0).any() or s[-1] != n):
                raise _bad(rc, f"partition {type(p).__name__}({p.key!r}) = {a.tolist()} does not split {n} values")
        splits.insert(0, s)
        n = len(s) - 1
    v = RaggedValue(flat, tuple(splits))
    # under ``hostops.perturbed`` (``hostfn``'s spec inference) one more row: the number of rows is
    # data, unknown in the spec, as TF's
    return grown(v, RaggedTensorSpec(None, _dtypes.float32, len(splits))) if is_perturbed() else v


def _output(rc: _RaggedConfig, v: RaggedValue) -> Any:
    if rc.value.kind == "bytes_list":
        raise UnimplementedError(None, None, f"RaggedFeature {rc.key!r}: string values would be a string "
                                 "RaggedTensor, and tapejax has no string tensors.")
    uniform = [int(p.length) if c is None else None for p, c in zip(rc.partitions, rc.keyed)]
    uniform = [None] * (len(v.splits) - len(uniform)) + uniform   # (a batch's outer partition first)
    levels = list(zip(v.splits, uniform))
    flat = v.flat_values
    while levels and levels[-1][1] is not None:   # innermost uniform rows: a dimension of the values, as TF's
        s, length = levels.pop()
        u, rows = int(length or 0), len(s) - 1
        flat = flat[:rows * u].reshape((rows, u) + flat.shape[1:])
    out: Any = _pe.to_output(flat, rc.value)
    for s, u in reversed(levels):
        out = RaggedTensor._of(out, host_tensor(s, rc.splits_dtype), rc.splits_dtype, u)
    return out


def parse_single_example(serialized: Any, features: Any, example_names: Any = None,
                         name: Optional[str] = None) -> Dict[str, Any]:
    """``tf.io.parse_single_example`` (``parse_sparse``'s, with RaggedFeatures)."""
    plain, ragged = _split(features)
    if not ragged:
        return _ps.parse_single_example(serialized, features, example_names, name)
    out = _ps.parse_single_example(serialized, plain) if plain else {}
    a = host_strings(serialized, "tf.io.parse_single_example", "serialized")
    if a.ndim != 0:
        raise ValueError(f"Input serialized must be a scalar; got shape {list(a.shape)}.")
    example = _pe._parse(bytes(a[()]), "")
    for rc in ragged:   # (after the others, as TF's)
        out[rc.key] = _output(rc, _value(example, rc, ""))
    return out


def parse_example(serialized: Any, features: Any, example_names: Any = None,
                  name: Optional[str] = None) -> Dict[str, Any]:
    """``tf.io.parse_example`` (``parse_sparse``'s, with RaggedFeatures)."""
    plain, ragged = _split(features)
    if not ragged:
        return _ps.parse_example(serialized, features, example_names, name)
    a = host_strings(serialized, "tf.io.parse_example", "serialized")
    if a.ndim == 0:
        return parse_single_example(a[()], features)
    _pe.check_vector(a)
    out = _ps.parse_example(serialized, plain, example_names) if plain else {}
    examples = [_pe._parse(bytes(s), "") for s in a]
    for rc in ragged:
        rows = [_value(ex, rc, "") for ex in examples]
        batch = stack(rows, 0) if rows else RaggedValue(np.empty(0, _pe.kind_dtype(rc.value.kind)),
                                                        tuple(np.zeros(1, np.int64) for _ in range(
                                                            len(rc.partitions) + 1)))
        out[rc.key] = _output(rc, batch)
    return out


__all__ = ["RaggedFeature", "RowLengths", "RowLimits", "RowSplits", "RowStarts", "UniformRowLength", "ValueRowIds",
           "parse_example", "parse_single_example"]
