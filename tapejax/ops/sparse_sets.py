"""``tf.sets``: set operations along the last dimension (``size``, ``intersection``, ``union``,
``difference``).

As TF's, each input is a set per cell of its leading dimensions (the group): a dense Tensor's
last-axis values, zeros included; a SparseTensor's present entries.  The two inputs' group shapes
must be equal (InvalidArgumentError, "Mismatched shapes"), their dtypes equal (TypeError) and one
of TF's set dtypes (int8, int16, int32, int64, uint8, uint16, string; TypeError otherwise), their
rank at least 2.  A set operation returns a SparseTensor holding each group's result sorted
ascending, at ``[group..., j]``, of dense shape ``group_shape + [largest result]``; ``size`` a
dense int32 Tensor of the group shape.  With ``validate_indices`` (the default) a SparseTensor
input's indices are checked as TF's kernels check them: in bounds, in row-major order, not
repeated (InvalidArgumentError with TF's text).

The results' sizes depend on the values, so the set operations run eagerly on the host, with
NumPy (inside a ``tapejax.function`` trace they raise ValueError, as the other value-dependent
sparse ops: ``ops.sparse_tensor``); ``size``, whose shape is static, runs inside a trace too, as
the op ``SetSize`` (a ``jax.pure_callback`` of the same count).  No op here has a gradient (TF
registers none).
"""
from typing import Any, Dict, List, NamedTuple, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind, define
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from .sparse_tensor import SparseTensor, TracedSparseError, host_indices, is_traced

#: TF's dtypes for set operations.
SET_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "string")
_SUPPORTED_TEXT = ("`frozenset({tf.int32, tf.uint8, tf.int16, tf.int8, tf.string, tf.int64, tf.uint16})`")


class SetInput(NamedTuple):
    """One operand as sets: the group shape, each non-empty group's values, the dtype."""
    group_shape: Tuple[int, ...]
    groups: Dict[Tuple[int, ...], List[Any]]
    dtype: _dtypes.DType


def _dtype_check(dtype: _dtypes.DType, what: str) -> None:
    if dtype.name not in SET_DTYPES:
        raise TypeError(f"{what} dtype `<dtype: '{dtype.name}'>` not in supported dtypes: {_SUPPORTED_TEXT}.")


def _validate(idx: np.ndarray, shape: Tuple[int, ...]) -> None:
    """TF's checks of a SparseTensor's indices: bounds, row-major order, no repeats."""
    def text(i: int) -> str:
        return "[" + ",".join(str(int(v)) for v in idx[i]) + "]"
    for i in range(len(idx)):
        if any(not 0 <= int(v) < d for v, d in zip(idx[i], shape)):
            raise InvalidArgumentError(None, None, f"indices[{i}] = {text(i)} is out of bounds: need 0 <= index < "
                                       f"[{','.join(str(d) for d in shape)}]")
        if i:
            prev, cur = tuple(int(v) for v in idx[i - 1]), tuple(int(v) for v in idx[i])
            if cur == prev:
                raise InvalidArgumentError(None, None, f"indices[{i}] = {text(i)} is repeated")
            if cur < prev:
                raise InvalidArgumentError(None, None, f"indices[{i}] = {text(i)} is out of order. Many sparse ops "
                                           "require sorted indices.\n    Use `tf.sparse.reorder` to create a "
                                           "correctly ordered copy.\n\n")


def _values(values: Any) -> list:
    return list(values) if isinstance(values, np.ndarray) else np.asarray(values.numpy()).tolist()


def _sparse_sets(sp: SparseTensor, validate: bool, op: str) -> SetInput:
    shape = sp.static_shape(op)
    if len(shape) < 2:
        raise InvalidArgumentError(None, None, f"Invalid rank {len(shape)}.")
    idx = host_indices(sp, op)
    if validate:
        _validate(idx, shape)
    groups: Dict[Tuple[int, ...], List[Any]] = {}
    for row, v in zip(idx, _values(sp.values)):
        groups.setdefault(tuple(int(i) for i in row[:-1]), []).append(v)
    return SetInput(shape[:-1], groups, sp.dtype)


def _dense_sets(x: Any, op: str) -> SetInput:
    t = x if isinstance(x, Tensor) else convert_to_tensor(x)
    if is_traced(t):
        raise TracedSparseError(f"{op}: the size of its result depends on the values, which are unknown inside a "
                                "tapejax.function trace (JAX needs static shapes); call it outside the function.")
    a = np.asarray(t.numpy())
    if a.ndim < 2:
        raise InvalidArgumentError(None, None, f"Shape [{','.join(str(d) for d in a.shape)}] has rank {a.ndim} < 2")
    groups = {cell: a[cell].tolist() for cell in np.ndindex(*a.shape[:-1])}
    return SetInput(tuple(a.shape[:-1]), groups, t.dtype)


def _operand(x: Any, validate: bool, op: str) -> SetInput:
    return _sparse_sets(x, validate, op) if isinstance(x, SparseTensor) else _dense_sets(x, op)


def _result(groups: Dict[Tuple[int, ...], List[Any]], group_shape: Tuple[int, ...],
            dtype: _dtypes.DType) -> SparseTensor:
    indices: List[Tuple[int, ...]] = []
    values: List[Any] = []
    width = 0
    for cell in np.ndindex(*group_shape):
        row = groups.get(cell, [])
        width = max(width, len(row))
        indices.extend(cell + (j,) for j in range(len(row)))
        values.extend(row)
    ind = np.asarray(indices, np.int64).reshape(len(indices), len(group_shape) + 1)
    if dtype.name == "string":
        vals: Any = np.empty(len(values), object)
        vals[:] = values
    else:
        vals = convert_to_tensor(np.asarray(values, dtype.as_numpy_dtype), dtype=dtype)
    return SparseTensor._of(ind, vals, group_shape + (width,))


def _set_operation(a: Any, b: Any, kind: str, validate_indices: bool, op: str) -> SparseTensor:
    if not isinstance(a, SparseTensor):
        a = a if isinstance(a, Tensor) else convert_to_tensor(a)
    if not isinstance(b, SparseTensor):
        b = b if isinstance(b, Tensor) else convert_to_tensor(b, dtype=a.dtype)
    _dtype_check(a.dtype, "'a' has invalid")
    _dtype_check(b.dtype, "'b' has invalid")
    if a.dtype != b.dtype:
        raise TypeError(f"Types don't match, <dtype: '{a.dtype.name}'> vs <dtype: '{b.dtype.name}'>.")
    sa, sb = _operand(a, validate_indices, op), _operand(b, validate_indices, op)
    if sa.group_shape != sb.group_shape:
        raise InvalidArgumentError(None, None, f"Mismatched shapes [{','.join(str(d) for d in sa.group_shape)}] vs "
                                   f"[{','.join(str(d) for d in sb.group_shape)}]")
    out: Dict[Tuple[int, ...], List[Any]] = {}
    for cell in set(sa.groups) | set(sb.groups):
        x, y = set(sa.groups.get(cell, ())), set(sb.groups.get(cell, ()))
        r = x & y if kind == "intersection" else x | y if kind == "union" else x - y
        if r:
            out[cell] = sorted(r)
    return _result(out, sa.group_shape, sa.dtype)


def _size_impl(indices, values, *, shape, validate):
    def host(i, v):
        idx = np.asarray(i)
        if validate:
            _validate(idx, shape)
        return _counts(idx, np.asarray(v).tolist(), shape)
    return jax.pure_callback(host, jax.ShapeDtypeStruct(shape[:-1], jnp.int32), indices, values)


def _counts(idx: np.ndarray, values: List[Any], shape: Tuple[int, ...]) -> np.ndarray:
    seen: Dict[Tuple[int, ...], set] = {}
    for row, v in zip(idx, values):
        seen.setdefault(tuple(int(i) for i in row[:-1]), set()).add(v)
    out = np.zeros(shape[:-1], np.int32)
    for cell, s in seen.items():
        out[cell] = len(s)
    return out


SET_SIZE = define("SetSize", _size_impl, differentiable=False, jit=False)


def size(a: Any, validate_indices: bool = True) -> Tensor:
    """``tf.sets.size``: the number of distinct values in each group of SparseTensor ``a``."""
    if not isinstance(a, SparseTensor):
        raise TypeError(f"Expected `SparseTensor`, got {a!r}.")
    _dtype_check(a.dtype, "Invalid")
    shape = a.static_shape("tf.sets.size")
    if len(shape) < 2:
        raise InvalidArgumentError(None, None, f"Invalid rank {len(shape)}.")
    if isinstance(a.values, np.ndarray) or not (is_traced(a.indices) or is_traced(a.values)):
        idx = host_indices(a, "tf.sets.size")
        if validate_indices:
            _validate(idx, shape)
        return Tensor(jnp.asarray(_counts(idx, _values(a.values), shape)))
    return bind(SET_SIZE, a.indices, a.values, shape=shape, validate=bool(validate_indices))


def intersection(a: Any, b: Any, validate_indices: bool = True) -> SparseTensor:
    """``tf.sets.intersection``: each group's values in both ``a`` and ``b``, sorted."""
    return _set_operation(a, b, "intersection", validate_indices, "tf.sets.intersection")


def union(a: Any, b: Any, validate_indices: bool = True) -> SparseTensor:
    """``tf.sets.union``: each group's values in ``a`` or ``b``, sorted."""
    return _set_operation(a, b, "union", validate_indices, "tf.sets.union")


def difference(a: Any, b: Any, aminusb: bool = True, validate_indices: bool = True) -> SparseTensor:
    """``tf.sets.difference``: each group's values of ``a`` not in ``b`` (``aminusb=False``: of
    ``b`` not in ``a``), sorted."""
    if not aminusb:
        a, b = b, a
    return _set_operation(a, b, "difference", validate_indices, "tf.sets.difference")


__all__ = ["difference", "intersection", "size", "union"]
