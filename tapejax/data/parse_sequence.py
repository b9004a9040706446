"""``tf.io.parse_single_sequence_example`` / ``tf.io.parse_sequence_example``: serialized
``tf.train.SequenceExample``s (a context of features, and feature lists: one ``Feature`` per
step) on host strings, as ``parse_example`` does for Examples (its configurations, outputs and
spec rule: a feature list's steps are one more under ``hostops.perturbed``).

TF's rules: ``context_features`` are ``FixedLenFeature``s (a default, or required);
``sequence_features`` are ``FixedLenSequenceFeature``s without ``default_value``, each giving
``[steps] + shape`` where every step holds exactly ``prod(shape)`` values of the feature's kind;
a feature list that is absent is ``InvalidArgumentError`` unless ``allow_missing`` (then no
steps).  The batched form pads each feature list to the batch's longest with 0 / ``b""`` and also
gives the lengths (int64, the number of steps per SequenceExample).  Results are dicts in sorted
key order.  A ``VarLenFeature`` in ``context_features`` gives a SparseTensor as ``parse_example``'s
(``varlen_output``); in ``sequence_features`` and ragged configurations: ``UnimplementedError``.
"""
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from ..core.errors import InvalidArgumentError, UnimplementedError
from .example_proto import messages
from .hostops import host_strings
from .parse_example import (
    KIND_NAMES,
    FeatureConfig,
    FixedLenFeature,
    FixedLenSequenceFeature,
    feature_config,
    grown,
    kind_dtype,
    pad_value,
    tf_order,
    to_output,
    varlen_output,
)


class _ListConfig(NamedTuple):
    """A feature list's configuration: the per-step config and whether it may be absent."""

    config: FeatureConfig
    allow_missing: bool


def _context_configs(features: Optional[dict]) -> List[FeatureConfig]:
    out = []
    for key in sorted(features or {}):
        f = features[key] if features else None
        if isinstance(f, FixedLenSequenceFeature):
            raise ValueError(f"Unsupported FixedLenSequenceFeature {f!r} for key {key!r} in `context_features` "
                             "(context features are FixedLenFeature).")
        out.append(feature_config(key, f))
    return out


def _list_configs(features: Optional[dict]) -> List[_ListConfig]:
    out = []
    for key in sorted(features or {}):
        f = features[key] if features else None
        if isinstance(f, FixedLenFeature):
            raise ValueError(f"Unsupported FixedLenFeature {f!r} for key {key!r} in `sequence_features` (feature "
                             "lists are FixedLenSequenceFeature).")
        if isinstance(f, FixedLenSequenceFeature):
            if f.default_value is not None:
                raise ValueError(f"Value feature_list.dense_defaults[{key}] must be None")
            out.append(_ListConfig(feature_config(key, f._replace(allow_missing=True)), bool(f.allow_missing)))
        elif type(f).__name__ == "VarLenFeature":
            raise UnimplementedError(None, None, f"Feature list {key!r}: tapejax does not parse a VarLenFeature in "
                                     "`sequence_features` yet (a rank-2 SparseTensor); use FixedLenSequenceFeature.")
        else:
            out.append(_ListConfig(feature_config(key, f), False))   # (raises: other kinds)
    return out


def _checked(context_features: Any, sequence_features: Any) -> "Tuple[List[FeatureConfig], List[_ListConfig]]":
    if context_features is None and sequence_features is None:
        raise ValueError("Both context_features and sequence_features are None, but at least one should have values.")
    for arg, value in (("context_features", context_features), ("sequence_features", sequence_features)):
        if value is not None and not isinstance(value, dict):
            raise TypeError(f"`{arg}` must be a dict of feature key to feature configuration; got "
                            f"{type(value).__name__}.")
    return _context_configs(context_features), _list_configs(sequence_features)


def _parse(data: bytes, name: str) -> Any:
    msg = messages().SequenceExample()
    try:
        msg.ParseFromString(data)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError (and upb's variants)
        raise InvalidArgumentError(None, None, f"Invalid protocol message input, example id: {name}") from None
    return msg


def _context(msg: Any, c: FeatureConfig, name: str) -> Any:
    feature = msg.context.feature[c.key] if c.key in msg.context.feature else None
    kind = None if feature is None else feature.WhichOneof("kind")
    if kind is None and c.varlen:
        return None
    if kind is None:
        if c.default is None:
            raise InvalidArgumentError(None, None, f"Name: {name}, Context feature: {c.key} (data type: "
                                       f"{c.dtype_name}) is required but could not be found.")
        return c.default.reshape(c.shape)
    if kind != c.kind:
        raise InvalidArgumentError(None, None, f"Name: {name}, Context feature: {c.key}.  Data types don't match. "
                                   f"Data type: {KIND_NAMES[kind]} but expected type: {c.dtype_name}")
    values = np.asarray(list(getattr(feature, kind).value), dtype=kind_dtype(c.kind))
    if c.varlen:
        return values
    if values.size != c.size:
        raise InvalidArgumentError(None, None, f"Name: {name}, Context feature: {c.key}.  Number of values != "
                                   f"expected.  values size: {values.size} but output shape: {list(c.shape)}")
    return values.reshape(c.shape)


def _steps(msg: Any, lc: _ListConfig, name: str) -> np.ndarray:
    c = lc.config
    lists = msg.feature_lists.feature_list
    if c.key not in lists:
        if not lc.allow_missing:
            raise InvalidArgumentError(None, None, f"Name: {name}, Feature list '{c.key}' is required but could not "
                                       "be found.")
        return np.empty((0,) + c.shape, kind_dtype(c.kind))
    rows = []
    for i, feature in enumerate(lists[c.key].feature):
        kind = feature.WhichOneof("kind")
        if kind is not None and kind != c.kind:
            raise InvalidArgumentError(None, None, f"Name: {name}, Feature list: {c.key}, Index: {i}.  Data types "
                                       f"don't match. Expected type: {c.dtype_name} (got {KIND_NAMES[kind]})")
        values = [] if kind is None else list(getattr(feature, kind).value)
        if len(values) != c.size:
            raise InvalidArgumentError(None, None, f"Name: {name}, Key: {c.key}, Index: {i}.  Number of values != "
                                       f"expected.  values size: {len(values)} but output shape: {list(c.shape)}")
        rows.append(np.asarray(values, dtype=kind_dtype(c.kind)).reshape(c.shape))
    return np.stack(rows) if rows else np.empty((0,) + c.shape, kind_dtype(c.kind))


def parse_single_sequence_example(serialized: Any, context_features: Any = None, sequence_features: Any = None,
                                  example_name: Any = None, name: Optional[str] = None) -> "Tuple[dict, dict]":
    """``tf.io.parse_single_sequence_example``: one serialized SequenceExample as ``(context,
    feature_lists)``, two dicts."""
    contexts, lists = _checked(context_features, sequence_features)
    a = host_strings(serialized, "tf.io.parse_single_sequence_example", "serialized")
    if a.ndim != 0:
        raise ValueError(f"Input serialized must be a scalar; got shape {list(a.shape)}.")
    shown = "<unknown>" if example_name is None else str(example_name)
    msg = _parse(bytes(a[()]), shown)
    context = tf_order({c.key: varlen_output([_context(msg, c, shown)], c, False) if c.varlen else
                        to_output(_context(msg, c, shown), c) for c in contexts}, contexts)
    steps = {lc.config.key: to_output(grown(_steps(msg, lc, shown), lc.config), lc.config) for lc in lists}
    return context, steps


def parse_sequence_example(serialized: Any, context_features: Any = None, sequence_features: Any = None,
                           example_names: Any = None, name: Optional[str] = None) -> "Tuple[dict, dict, dict]":
    """``tf.io.parse_sequence_example``: a vector of serialized SequenceExamples as ``(context,
    feature_lists, lengths)``: batched context features, feature lists padded to the longest, and
    each feature list's number of steps per SequenceExample (int64)."""
    contexts, lists = _checked(context_features, sequence_features)
    a = host_strings(serialized, "tf.io.parse_sequence_example", "serialized")
    if a.ndim > 1:
        raise InvalidArgumentError(None, None, "Expected serialized to be a scalar or vector, got shape: "
                                   f"[{','.join(str(d) for d in a.shape)}]")
    flat = a.reshape(-1)
    names = ["<unknown>"] * len(flat)
    if example_names is not None:
        names = [bytes(n).decode("utf-8", "replace") for n in host_strings(
            example_names, "tf.io.parse_sequence_example", "example_names").reshape(-1)]
        if len(names) != len(flat):
            raise InvalidArgumentError(None, None, f"Expected len(example_names) == len(serialized); got "
                                       f"{len(names)} names for {len(flat)} examples.")
    msgs = [_parse(bytes(s), n) for s, n in zip(flat, names)]
    context: Dict[str, Any] = {}
    for c in contexts:
        parts = [_context(m, c, n) for m, n in zip(msgs, names)]
        if c.varlen:
            context[c.key] = varlen_output(parts, c, a.ndim != 0)
            continue
        value = np.stack(parts) if parts else np.empty((0,) + c.shape, kind_dtype(c.kind))
        context[c.key] = to_output(value[0] if a.ndim == 0 else value, c)
    context = tf_order(context, contexts)
    steps: Dict[str, Any] = {}
    lengths: Dict[str, Any] = {}
    length_config = FeatureConfig("lengths", "int64_list", "int64", (), False, None, 1)
    for lc in lists:
        c = lc.config
        parts = [grown(_steps(m, lc, n), c) for m, n in zip(msgs, names)]
        count = np.asarray([p.shape[0] for p in parts], dtype=np.int64)
        longest = int(count.max()) if parts else 0
        pad = pad_value(c)
        parts = [np.concatenate([p, np.full((longest - p.shape[0],) + c.shape, pad, dtype=p.dtype)])
                 if p.shape[0] < longest else p for p in parts]
        value = np.stack(parts) if parts else np.empty((0, 0) + c.shape, kind_dtype(c.kind))
        steps[c.key] = to_output(value[0] if a.ndim == 0 else value, c)
        lengths[c.key] = to_output(count[0] if a.ndim == 0 else count, length_config)
    return context, steps, lengths


__all__ = ["parse_sequence_example", "parse_single_sequence_example"]
