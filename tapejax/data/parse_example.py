"""``tf.io.parse_single_example`` / ``tf.io.parse_example`` and the feature configurations
(``FixedLenFeature``, ``FixedLenSequenceFeature``, ``VarLenFeature``), on host strings.

A serialized ``tf.train.Example`` is a string, so parsing is a host op as ``decode_raw`` is
(``hostops``' conventions): the input is ``bytes`` (or an object array of them), the message is
decoded by protobuf (``example_proto``'s classes), and each configured feature becomes a NumPy
array: numeric features (``float32``, ``int64``) a Tensor, ``string`` features host strings.  In
a ``Dataset.map`` over TFRecord records the function therefore runs eagerly per element
(``hostfn``), and its output spec comes from sample runs: a ``FixedLenSequenceFeature`` gives one
row more under ``hostops.perturbed`` so its first dimension is unknown (``None``), as in TF.

TF's rules: the outputs are a dict in sorted key order (the VarLenFeatures' keys first, as TF's); a ``FixedLenFeature`` has a fully known
shape, its values (or ``default_value``, reshaped to it) fill it, and without a default a
missing feature is ``InvalidArgumentError``; a ``FixedLenSequenceFeature`` (``allow_missing=True``
only) gives ``[rows] + shape``, a batch padded to its longest with ``default_value`` (0 / b"");
a feature stored as another kind than its dtype, a wrong number of values or a message that does
not parse are ``InvalidArgumentError`` with TF's key / index text.  dtypes are ``float32``,
``int64`` (int32 without JAX's 64-bit mode: a value outside int32 is an error, not a wrap) and
``tf.string`` (or ``"string"``).  A ``VarLenFeature`` gives a ``tf.SparseTensor``
(``varlen_output``): for one Example indices ``[[0], [1], ...]`` and dense shape ``[n]``, for a batch
indices ``[[b, j], ...]`` and dense shape ``[batch, longest]``, a missing feature holding no entries;
under ``hostops.perturbed`` each Example's list is one value longer, so the spec's dimensions are
unknown, as TF's.  A string ``VarLenFeature`` (tapejax has no string tensors), ``SparseFeature`` and
``RaggedFeature`` are ``UnimplementedError``.
"""
import functools
import math
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..core import dtypes as _dtypes
from ..core.caches import LRU
from ..core.errors import InvalidArgumentError, UnimplementedError
from ..ops.sparse_tensor import SparseTensor
from . import structure as S
from .example_proto import messages
from .hostops import host_result, host_strings, is_perturbed
from .hostvalues import numeric_result


class FixedLenFeature(NamedTuple):
    """``tf.io.FixedLenFeature(shape, dtype, default_value=None)``: a feature of fixed shape."""

    shape: Any
    dtype: Any
    default_value: Any = None


class FixedLenSequenceFeature(NamedTuple):
    """``tf.io.FixedLenSequenceFeature(shape, dtype, allow_missing=False, default_value=None)``:
    a variable number of rows of shape ``shape`` (``allow_missing=True`` is required)."""

    shape: Any
    dtype: Any
    allow_missing: bool = False
    default_value: Any = None


class VarLenFeature(NamedTuple):
    """``tf.io.VarLenFeature(dtype)``: any number of values, parsed into a ``tf.SparseTensor``."""

    dtype: Any


#: the Example kind of each feature dtype, and TF's name of the dtype in its messages
_KINDS = {"float32": ("float_list", "float"), "int64": ("int64_list", "int64"), "string": ("bytes_list", "string")}
KIND_NAMES = {"float_list": "float", "int64_list": "int64", "bytes_list": "string"}


class FeatureConfig(NamedTuple):
    """One feature's configuration, checked: its key, kind, shape and default (flat values)."""

    key: str
    kind: str           # float_list / int64_list / bytes_list
    dtype_name: str     # float / int64 / string (TF's names in messages)
    shape: Tuple[int, ...]
    sequence: bool
    default: Optional[np.ndarray]   # flat, or None (required / sequence without one)
    size: int           # values per row (the product of ``shape``)
    varlen: bool = False   # a VarLenFeature: a SparseTensor of the values


def _dtype_name(dtype: Any) -> str:
    try:
        return _cached_dtype_name(dtype)
    except TypeError as e:
        if "unhashable" not in str(e):
            raise
        return _find_dtype_name(dtype)


def _find_dtype_name(dtype: Any) -> str:
    if isinstance(dtype, (str, bytes)) and (dtype in ("string", b"string")):
        return "string"
    name = getattr(dtype, "name", None)
    if name == "string":
        return "string"
    try:
        name = _dtypes.as_dtype(dtype).name
    except (TypeError, ValueError, KeyError):
        raise TypeError(f"Cannot convert {dtype!r} to a dtype (feature dtypes are float32, int64 and 'string').")
    if name not in _KINDS:
        raise InvalidArgumentError(None, None, f"Value for attr 'Tdense' of {name} is not in the list of allowed "
                                   "values: float, int64, string")
    return name


_cached_dtype_name = functools.lru_cache(maxsize=64)(lambda dtype: _find_dtype_name(dtype))


def kind_dtype(kind: str) -> Any:
    return {"bytes_list": object, "float_list": np.float32, "int64_list": np.int64}[kind]


def _flat_values(value: Any, name: str, what: str) -> np.ndarray:
    """A default value as a flat array of the feature's dtype."""
    if name == "string":
        v = S.string_value(value)
        return np.asarray([v], dtype=object) if isinstance(v, bytes) else np.asarray(v, dtype=object).reshape(-1)
    v = value.numpy() if hasattr(value, "numpy") else value
    return np.asarray(v, dtype=np.dtype(name)).reshape(-1)


def feature_config(key: Any, feature: Any) -> FeatureConfig:
    if isinstance(feature, VarLenFeature):
        name = _dtype_name(feature.dtype)
        if name == "string":
            raise UnimplementedError(None, None, f"Feature {key!r}: a string tf.io.VarLenFeature parses into a string "
                                     "SparseTensor, and tapejax has no string tensors (XLA has no string type); use "
                                     "tf.io.FixedLenSequenceFeature([], tf.string, allow_missing=True) (host "
                                     "strings, a batch padded with b'').")
        kind, dtype_name = _KINDS[name]
        return FeatureConfig(str(key), kind, dtype_name, (), False, None, 1, True)
    if not isinstance(feature, (FixedLenFeature, FixedLenSequenceFeature)):
        if type(feature).__name__ in ("SparseFeature", "RaggedFeature"):
            raise UnimplementedError(None, None, f"Feature {key!r}: tapejax does not parse {type(feature).__name__} "
                                     "yet; use tf.io.VarLenFeature (a SparseTensor) or FixedLenSequenceFeature.")
        raise ValueError(f"Unsupported {type(feature).__name__} {feature!r} for key {key!r}: expected "
                         "tf.io.FixedLenFeature, tf.io.FixedLenSequenceFeature or tf.io.VarLenFeature.")
    name = _dtype_name(feature.dtype)
    sequence = isinstance(feature, FixedLenSequenceFeature)
    if feature.shape is None:
        raise ValueError(f"Missing shape for feature {key}. Received feature={feature!r}.")
    shape = tuple(feature.shape.as_list() if hasattr(feature.shape, "as_list") else feature.shape)
    if sequence and not feature.allow_missing:
        raise ValueError("Unsupported: FixedLenSequenceFeature requires allow_missing to be True.")
    if shape and shape[0] is None and not sequence:
        raise ValueError(f"First dimension of shape for feature {key} unknown. Consider using "
                         f"FixedLenSequenceFeature. Received feature={feature!r}.")
    if any(d is None for d in shape):
        raise ValueError(f"All dimensions of shape for feature {key} need to be known but received {list(shape)}.")
    shape = tuple(int(d) for d in shape)
    default = None
    if feature.default_value is not None:
        default = _flat_values(feature.default_value, name, "default_value")
        default.setflags(write=False)   # (shared by every parse with this config)
        want = 1 if sequence else int(np.prod(shape, dtype=np.int64))
        if default.size != want and not (sequence and default.size == 1):
            raise InvalidArgumentError(None, None, f"Feature {key!r}: `default_value` has {default.size} values, but "
                                       f"the feature's shape {list(shape)} needs {want} (TF: Input to reshape is a "
                                       f"tensor with {default.size} values, but the requested shape has {want}).")
    kind, dtype_name = _KINDS[name]
    return FeatureConfig(str(key), kind, dtype_name, shape, sequence, default, math.prod(shape))


#: (key, id(feature)) pairs -> (the feature objects, their configs): a dataset function parses
#: every element with the same ``features`` (the objects are kept and compared, so a reused id
#: never gives another feature's config)
_CONFIGS = LRU("data_parse_example_configs", 64)


def _configs(features: Any) -> List[FeatureConfig]:
    if not isinstance(features, dict):
        raise TypeError(f"`features` must be a dict of feature key to tf.io.FixedLenFeature / "
                        f"FixedLenSequenceFeature; got {type(features).__name__}.")
    if not features:
        raise ValueError("Invalid argument: features cannot be empty.")
    items = sorted(features.items(), key=lambda kv: kv[0])
    key = tuple([(k, id(f)) for k, f in items])
    hit = _CONFIGS.get(key)
    if hit is not None and all(a is f for a, (_, f) in zip(hit[0], items)):
        return hit[1]
    configs = [feature_config(k, f) for k, f in items]
    _CONFIGS[key] = (tuple(f for _, f in items), configs)
    return configs


def _parse(data: bytes, where: str) -> Any:
    example = messages().Example()
    try:
        example.ParseFromString(data)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError (and upb's variants)
        shown = data[:64].decode("latin-1")
        raise InvalidArgumentError(None, None, f"{where}Could not parse example input, value: '{shown}'") from None
    return example


def _values(feature: Any, c: FeatureConfig, where: str) -> Optional[np.ndarray]:
    """The flat values of one feature of one Example (None: missing)."""
    if feature is None:
        return None
    kind = feature.WhichOneof("kind")
    if kind is None:
        return None
    if kind != c.kind:
        raise InvalidArgumentError(None, None, f"{where}Key: {c.key}.  Data types don't match. Data type: "
                                   f"{KIND_NAMES[kind]} but expected type: {c.dtype_name}")
    values = getattr(feature, kind).value
    if c.kind == "bytes_list":
        out = np.empty(len(values), object)
        out[:] = list(values)
        return out
    return np.fromiter(values, kind_dtype(c.kind), len(values))


def _dense(values: Optional[np.ndarray], c: FeatureConfig, where: str) -> np.ndarray:
    """One Example's value of feature ``c``: ``shape`` (fixed) or ``[rows] + shape`` (sequence)."""
    size = c.size
    if c.sequence:
        if values is None:
            values = np.empty(0, kind_dtype(c.kind))
        if size == 0:
            if values.size:
                raise InvalidArgumentError(None, None, f"{where}Key: {c.key}: a sequence feature of shape "
                                           f"{list(c.shape)} holds no values, but {values.size} were given.")
            return values.reshape((0,) + c.shape)
        if values.size % size:
            raise InvalidArgumentError(None, None, f"{where}Key: {c.key}.  Number of {c.dtype_name} values is not a "
                                       f"multiple of stride length. Saw {values.size} values but output shape is: "
                                       f"[?,{','.join(str(d) for d in c.shape)}] (expected a multiple of {size}).")
        return values.reshape((values.size // size,) + c.shape)
    if values is None:
        if c.default is None:
            raise InvalidArgumentError(None, None, f"{where}Feature: {c.key} (data type: {c.dtype_name}) is required "
                                       "but could not be found.")
        return c.default.reshape(c.shape)
    if values.size != size:
        raise InvalidArgumentError(None, None, f"{where}Key: {c.key}.  Can't parse serialized Example: number of "
                                   f"{c.dtype_name} values != expected.  Values size: {values.size} but output "
                                   f"shape: {list(c.shape)}")
    return values.reshape(c.shape)


def pad_value(c: FeatureConfig) -> Any:
    if c.default is not None:
        return c.default[0]
    return b"" if c.kind == "bytes_list" else 0


_iinfo = functools.lru_cache(maxsize=8)(np.iinfo)


def to_output(a: np.ndarray, c: FeatureConfig) -> Any:
    """A parsed array as tapejax gives it: host strings, or a Tensor of tapejax's storage dtype."""
    if c.kind == "bytes_list":
        return host_result(a)
    if c.kind == "int64_list":
        store = _dtypes.storage_dtype(np.dtype(np.int64), "int64 feature")
        if store != np.int64:
            info = _iinfo(store)
            small = a.tolist() if a.ndim == 0 else a.ravel().tolist() if a.size <= 16 else None
            if small is not None and not isinstance(small, list):
                small = [small]
            lo, hi = (min(small), max(small)) if small else (a.min(), a.max()) if a.size else (0, 0)
            if lo < info.min or hi > info.max:
                raise InvalidArgumentError(None, None, f"Feature {c.key!r}: int64 values outside int32's range need "
                                           "JAX's 64-bit mode (jax.config.update('jax_enable_x64', True)); without "
                                           "it int64 features are int32.")
            a = a.astype(store)
    return numeric_result(a)


def tf_order(out: Dict[str, Any], configs: Sequence[FeatureConfig]) -> Dict[str, Any]:
    """``out`` in TF's key order: the VarLenFeatures' keys (sorted), then the others' (sorted)."""
    if not any(c.varlen for c in configs):
        return out
    return {**{c.key: out[c.key] for c in configs if c.varlen}, **{c.key: out[c.key] for c in configs if not c.varlen}}


def varlen_output(parts: Sequence[Optional[np.ndarray]], c: FeatureConfig, batched: bool) -> SparseTensor:
    """A VarLenFeature's SparseTensor from each Example's flat values (None: missing), for one
    Example (``batched`` False: ``parts`` has one) or a batch (see the module docstring)."""
    lists = [np.empty(0, kind_dtype(c.kind)) if p is None else p for p in parts]
    if is_perturbed():
        lists = [np.concatenate([p, np.zeros(1, p.dtype)]) for p in lists]
    values = np.concatenate(lists) if lists else np.empty(0, kind_dtype(c.kind))
    if not batched:
        n = len(lists[0])
        return SparseTensor._of(np.arange(n, dtype=np.int64)[:, None], to_output(values, c), (n,))
    rows = np.concatenate([np.full(len(p), b, np.int64) for b, p in enumerate(lists)]) if lists else \
        np.empty(0, np.int64)
    cols = np.concatenate([np.arange(len(p), dtype=np.int64) for p in lists]) if lists else np.empty(0, np.int64)
    longest = max((len(p) for p in lists), default=0)
    return SparseTensor._of(np.stack([rows, cols], axis=1), to_output(values, c), (len(lists), longest))


def grown(rows: np.ndarray, c: FeatureConfig) -> np.ndarray:
    """Under ``hostops.perturbed``: a sequence feature's value with one row more (spec inference)."""
    if not (c.sequence and is_perturbed()):
        return rows
    extra = np.full((1,) + c.shape, pad_value(c), dtype=rows.dtype)
    return np.concatenate([rows, extra], axis=0)


def _batch(examples: Sequence[Any], configs: List[FeatureConfig], names: Sequence[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for c in configs:
        parts = []
        for i, ex in enumerate(examples):
            where = f"Name: {names[i]}, " if names is not None else ""
            feature = ex.features.feature[c.key] if c.key in ex.features.feature else None
            try:
                parts.append(_values(feature, c, where) if c.varlen else _dense(_values(feature, c, where), c, where))
            except InvalidArgumentError as e:
                raise InvalidArgumentError(None, None, e.message.replace("Key: " + c.key, f"Key: {c.key}, Index: {i}",
                                                                          1)) from None
        if c.varlen:
            out[c.key] = varlen_output(parts, c, True)
            continue
        parts = [grown(p, c) for p in parts]
        if c.sequence:
            rows = max((p.shape[0] for p in parts), default=0)
            pad = pad_value(c)
            parts = [np.concatenate([p, np.full((rows - p.shape[0],) + c.shape, pad, dtype=p.dtype)])
                     if p.shape[0] < rows else p for p in parts]
            shape: Tuple[int, ...] = (len(parts), rows) + c.shape
        else:
            shape = (len(parts),) + c.shape
        a = np.stack(parts) if parts else np.empty(shape, kind_dtype(c.kind))
        out[c.key] = to_output(a, c)
    return tf_order(out, configs)


def parse_single_example(serialized: Any, features: Any, example_names: Any = None,
                         name: Optional[str] = None) -> Dict[str, Any]:
    """``tf.io.parse_single_example``: one serialized ``tf.train.Example`` (a scalar string) as a
    dict of its configured features (sorted by key)."""
    configs = _configs(features)
    a = host_strings(serialized, "tf.io.parse_single_example", "serialized")
    if a.ndim != 0:
        raise ValueError(f"Input serialized must be a scalar; got shape {list(a.shape)}.")
    example = _parse(bytes(a[()]), "")
    out: Dict[str, Any] = {}
    for c in configs:
        feature = example.features.feature[c.key] if c.key in example.features.feature else None
        if c.varlen:
            out[c.key] = varlen_output([_values(feature, c, "")], c, False)
            continue
        out[c.key] = to_output(grown(_dense(_values(feature, c, ""), c, ""), c), c)
    return tf_order(out, configs)


def check_vector(serialized: np.ndarray) -> None:
    """A batch of serialized Examples is a vector (TF's error otherwise; a scalar is handled before)."""
    if serialized.ndim != 1:
        raise InvalidArgumentError(None, None, "Expected serialized to be a scalar or vector, got shape: "
                                   f"[{','.join(str(d) for d in serialized.shape)}]")


def parse_example(serialized: Any, features: Any, example_names: Any = None,
                  name: Optional[str] = None) -> Dict[str, Any]:
    """``tf.io.parse_example``: a vector of serialized Examples (a batch) as a dict of batched
    features, sequence features padded to the batch's longest; a scalar is one Example."""
    configs = _configs(features)
    a = host_strings(serialized, "tf.io.parse_example", "serialized")
    if a.ndim == 0:
        return parse_single_example(a[()], features)
    check_vector(a)
    names: Any = None
    if example_names is not None:
        names = [bytes(n).decode("utf-8", "replace") for n in host_strings(example_names, "tf.io.parse_example",
                                                                            "example_names").reshape(-1)]
        if len(names) != a.shape[0]:
            raise InvalidArgumentError(None, None, f"Expected len(example_names) == len(serialized); got "
                                       f"{len(names)} names for {a.shape[0]} examples.")
    shown = names if names is not None else ["<unknown>"] * a.shape[0]
    examples = [_parse(bytes(s), f"Name: {shown[i]}, ") for i, s in enumerate(a)]
    return _batch(examples, configs, shown)


__all__ = ["FeatureConfig", "KIND_NAMES", "FixedLenFeature", "check_vector", "feature_config", "grown", "kind_dtype", "pad_value",
           "tf_order", "to_output", "varlen_output", "FixedLenSequenceFeature", "FixedLenSequenceFeature", "VarLenFeature", "parse_example", "parse_single_example"]
