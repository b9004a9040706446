"""A TensorArray crossing a ``tapejax.function`` boundary, and ``tf.TensorArraySpec``.

TF 2 gives a TensorArray a type spec (``TensorArraySpec``: element shape, dtype, dynamic size,
infer shape), so a graph TensorArray can be a function's argument or result.  Here a TensorArray
flattens, at the boundary, to its **stacked buffer** (one dynamic leaf: ``size`` rows of the
element shape, zeros where nothing was written) and **static metadata** (its ``_Aux``: dtype,
size, element shape, ``dynamic_size``, ``clear_after_read``), which keys the cache with the
buffer's abstract value:

* an argument (``signature.arg_key``): an eager TensorArray (a list of Tensors) is stacked when
  the step is called, so the step reads its values *now*: a TensorArray written in place between
  two calls gives the second call the new values, with no retrace (TF keys an eager TensorArray
  argument by identity and freezes its values into the first trace: a silent stale value this
  module does not copy).  Inside the trace the argument is a TensorArray in buffer form (the
  form a TensorArray created in the trace has), so ``read``, ``write``, ``stack`` and loops work
  as on one created there.  An array with no element shape and nothing written has no buffer.
* a result (``signature.split_out``): the buffer (and the length of a ``dynamic_size`` array)
  are outputs of the program; the caller gets an eager TensorArray (the list form) of the
  buffer's rows.  TF returns the TensorArray's variant tensor to eager callers, which has no
  TensorArray methods; tapejax returns the TensorArray.

``TensorArraySpec`` is TF's record (``from_value``, ``is_compatible_with``, ``value_type``,
equality and ``repr``); ``tf.type_spec_from_value(ta)`` gives it.  Under a recording tape a TensorArray argument's buffer is stacked by
a recorded op, so gradients reach the elements written eagerly.
"""
from __future__ import annotations

from typing import Any, Iterator, List, NamedTuple, Tuple, TypeGuard

import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.tensor import Tensor, TensorShape
from ..ops import array as _array
from .tensor_array import TensorArray, _Aux, _full

__all__ = ["TAArg", "TAOut", "TensorArraySpec", "is_tensor_array", "key", "out", "spec_of", "tensors",
           "template"]


def is_tensor_array(x: Any) -> TypeGuard[TensorArray]:
    return isinstance(x, TensorArray)


class TensorArraySpec:
    """``tf.TensorArraySpec(element_shape=None, dtype=tf.float32, dynamic_size=False,
    infer_shape=True)``: the type of a TensorArray (its elements' shape and dtype, not its size).
    As TF's, its fields are private (``_element_shape``, ``_dtype``, ``_dynamic_size``,
    ``_infer_shape``); ``value_type`` is ``TensorArray``."""

    __slots__ = ("_element_shape", "_dtype", "_dynamic_size", "_infer_shape")

    def __init__(self, element_shape: Any = None, dtype: Any = _dtypes.float32, dynamic_size: bool = False,
                 infer_shape: bool = True):
        if isinstance(element_shape, TensorShape):
            element_shape = tuple(element_shape)
        if element_shape is not None and not (isinstance(element_shape, (list, tuple)) and all(
                d is None or (isinstance(d, (int, np.integer)) and not isinstance(d, bool)) for d in element_shape)):
            raise TypeError(f"Failed to convert {element_shape!r} to a shape (argument `element_shape` of "
                            "TensorArraySpec): a shape is a list of dimensions (ints or None, e.g. [1, 10, None]), "
                            "or None for an unknown shape")
        self._element_shape = None if element_shape is None else tuple(None if d is None else int(d)
                                                                       for d in element_shape)
        self._dtype = _dtypes.as_dtype(dtype)
        self._dynamic_size = bool(dynamic_size)
        self._infer_shape = bool(infer_shape)

    @classmethod
    def from_value(cls, value: Any) -> "TensorArraySpec":
        if not isinstance(value, TensorArray):
            raise TypeError(f"Expected value to be a TensorArray, but got: `{type(value)}` (argument `value` of "
                            "TensorArraySpec.from_value)")
        return spec_of(value)

    @property
    def value_type(self) -> type:
        return TensorArray

    def is_compatible_with(self, other: Any) -> bool:
        """Whether ``other`` (a TensorArraySpec or a TensorArray) fits: same dtype, dynamic size and
        infer shape, element shapes that agree where both are known."""
        if isinstance(other, TensorArray):
            other = spec_of(other)
        if not isinstance(other, TensorArraySpec):
            return False
        if (self._dtype, self._dynamic_size, self._infer_shape) != (other._dtype, other._dynamic_size,
                                                                    other._infer_shape):
            return False
        a, b = self._element_shape, other._element_shape
        return a is None or b is None or (len(a) == len(b) and all(x is None or y is None or x == y
                                                                   for x, y in zip(a, b)))

    def _key(self) -> tuple:
        return (self._element_shape, self._dtype, self._dynamic_size, self._infer_shape)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, TensorArraySpec) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        shape = "TensorShape(None)" if self._element_shape is None else f"TensorShape({list(self._element_shape)})"
        return f"TensorArraySpec({shape}, tf.{self._dtype.name}, {self._dynamic_size}, {self._infer_shape})"


def spec_of(ta: TensorArray) -> TensorArraySpec:
    """``tf.type_spec_from_value(ta)``: TF's spec of a TensorArray."""
    a = ta._a
    return TensorArraySpec(a.shape, a.dtype, a.dynamic, a.infer)


# ---------------------------------------------------------------------------
# Arguments: the stacked buffer and the static metadata
# ---------------------------------------------------------------------------

class TAArg(NamedTuple):
    """A TensorArray argument in a function's template: its buffer-form metadata; ``has_buf``: one
    dynamic leaf (the buffer) follows; ``has_len``: the length of a dynamic array whose length is
    only known at run time follows too."""

    aux: _Aux
    has_buf: bool
    has_len: bool

    def fill(self, it: Iterator[Any]) -> TensorArray:
        buf = next(it) if self.has_buf else None
        length = next(it) if self.has_len else (self.aux.static_len if self.aux.dynamic else self.aux.cap)
        return TensorArray._make(self.aux, None, buf, length)


def _parts(ta: TensorArray, recorded: bool) -> Tuple[TAArg, List[Any]]:
    """The buffer-form metadata and dynamic leaves (Tensors) of ``ta``."""
    a = ta._a
    if ta._elems is not None:   # eager: a list of Tensors, stacked (zeros where nothing was written)
        written = [t for t in ta._elems if t is not None]
        shape = tuple(a.shape or ()) if _full(a.shape) else (tuple(written[0].shape) if written else None)
        n = len(ta._elems)
        base = a._replace(listed=False, present=(), cleared=frozenset(), cap=n,
                          static_len=n if a.dynamic else None)
        if shape is None:
            return TAArg(base._replace(materialized=False), False, False), []
        rows = [t if t is not None else _array.zeros(shape, a.dtype) for t in ta._elems]
        if recorded:
            buf = _array.stack(rows) if rows else _array.zeros((0,) + shape, a.dtype)
        else:
            buf = Tensor(jnp.stack([r._value for r in rows]) if rows else jnp.zeros((0,) + shape, a.dtype._np))
        return TAArg(base._replace(materialized=True, shape=shape), True, False), [buf]
    leaves: List[Any] = [ta._buf] if ta._buf is not None else []
    has_len = a.dynamic and (a.static_len is None or isinstance(ta._len, Tensor))
    if has_len:
        leaves.append(ta._len if isinstance(ta._len, Tensor) else Tensor(jnp.asarray(ta._len, jnp.int32)))
    return TAArg(a._replace(static_len=None) if has_len else a, ta._buf is not None, has_len), leaves


def key(ta: TensorArray, dyn: List[Any]) -> tuple:
    """``signature.arg_key`` of a TensorArray: its metadata and its leaves' abstract values."""
    tpl, leaves = _parts(ta, recorded=False)
    vals = [t._value for t in leaves]
    dyn.extend(vals)
    return ("TensorArray", tpl, tuple(v.aval for v in vals))


def tensors(ta: TensorArray, out: List[Any]) -> None:
    """``signature.tensor_args``: the leaves as recorded Tensors (the tape reaches the elements)."""
    out.extend(_parts(ta, recorded=True)[1])


def template(ta: TensorArray) -> TAArg:
    return _parts(ta, recorded=False)[0]


# ---------------------------------------------------------------------------
# Results: the buffer out of the program, an eager TensorArray for the caller
# ---------------------------------------------------------------------------

class TAOut(NamedTuple):
    """A TensorArray result in a function's output template (see ``TAArg``)."""

    aux: _Aux
    has_buf: bool
    has_len: bool

    def fill(self, it: Iterator[Any]) -> TensorArray:
        buf = next(it) if self.has_buf else None
        a = self.aux
        if self.has_len:
            n = int(next(it)._value)
        else:
            n = a.static_len if a.dynamic and a.static_len is not None else a.cap
        elems: List[Any] = [None] * n
        if buf is not None:   # (concrete: the caller's values after the program ran)
            elems = [Tensor(buf._value[i]) for i in range(n)]
        listed = a._replace(listed=True, present=(), cleared=frozenset(), materialized=False, cap=n,
                            static_len=n if a.dynamic else None)
        return TensorArray._make(listed, elems)


def out(ta: TensorArray, dyn: List[Any]) -> TAOut:
    """``signature.split_out`` of a TensorArray result: its leaves go to ``dyn``."""
    tpl, leaves = _parts(ta, recorded=False)
    dyn.extend(t._value for t in leaves)
    return TAOut(tpl.aux, tpl.has_buf, tpl.has_len)
