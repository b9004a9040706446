"""``tf.TensorArray``: a list of same-dtype Tensors that TF 2 code fills inside loops.

Two representations, one class (TF has the same split: an eager Python list and a graph
``TensorList``):

* **eagerly** (no ``tapejax.function`` trace) a Python list of Tensors, with TF's eager
  semantics and messages: ``write`` stores the Tensor itself (so a ``read`` is that Tensor and
  the tape's gradient is the identity; an element never written is unconnected: ``None``),
  ``write`` changes the array in place and returns it, ``clear_after_read`` forgets an element
  once read, indices are checked now (``OutOfRangeError``);
* **traced** (created inside a ``tapejax.function``, or entering a traced loop) a buffer of
  ``size`` rows, updated with ``lax.dynamic_update_index_in_dim`` by tapejax ops that the tape
  records (``TensorListSetItem`` / ``GetItem`` / ``Gather`` / ``Scatter``): ``write`` returns a
  new TensorArray (TF's graph rule: ``ta = ta.write(i, x)``), an element never written reads as
  zeros and is connected (gradient zeros, as TF's graph ``TensorList``), an index that is only
  known at run time is checked in the program (``InvalidArgumentError``, TF's graph class).

A TensorArray is a JAX pytree (its buffer, and its length when ``dynamic_size``, are the
children; dtype, sizes and element shape the static part), so it is a loop variable of
``tapejax.while_loop`` / ``scan`` / ``foldl`` and of AutoGraph's converted ``for``/``while``.
``tensor_array_loop.enter_loop`` puts it in loop form first; a TensorArray whose element shape is not known
yet (``TensorArray(tf.float32, size=n)`` filled in the loop) is given its shape by one trace of
the body (``tensor_array_loop.refine``), and the body is traced again.  So is one written in one
branch of a staged ``if`` only: the other branch's array gets zeros of that shape, TF's unwritten
rows (``tensor_array_loop.match_branches``).

XLA compiles static shapes, so in a traced loop a ``dynamic_size=True`` array needs a bound:
it grows by the loop's trip count on entry (a ``for`` over a tensor or ``tf.range`` of static
length, ``maximum_iterations`` of ``while_loop``, or
``tf.autograph.experimental.set_loop_options(maximum_iterations=...)``), one element per
iteration; without a bound it is a ValueError naming those alternatives.  ``stack()`` of an
array whose length is only known at run time gives the bound's length and checks at run time
that every row was written (else ``InvalidArgumentError``): give the array a static ``size``
to fill it partially.  A dynamic array grown inside a loop nested in another traced loop
changes the outer loop variable's shape (an error): give it a static ``size`` there.

Differences from TF 2.21 kept on purpose: none in values; ``element_shape`` is a
``TensorShape`` when fully known, else the known dimensions as a tuple (``None`` for an
unknown rank), since tapejax's ``TensorShape`` holds full shapes only.
"""
from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Tuple, cast

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core import dtypes as _dtypes, state as _state
from ..core.bind import Primitive, bind
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError, OutOfRangeError
from ..core.tensor import Tensor, TensorShape
from ..ops import array as _array
from ..ops.checks import require, require_in_range
from ..ops.indexing_traced import TracedSizeError

_Tracer = jax.core.Tracer

_SET = Primitive("TensorListSetItem", lambda buf, value, index: lax.dynamic_update_index_in_dim(
    buf, value.astype(buf.dtype), index, 0))
_GET = Primitive("TensorListGetItem", lambda buf, index: lax.dynamic_index_in_dim(buf, index, 0, keepdims=False))
_GATHER = Primitive("TensorListGather", lambda buf, indices: jnp.take(buf, indices, axis=0, mode="clip"))
_SCATTER = Primitive("TensorListScatterIntoExistingList",
                     lambda buf, value, indices: buf.at[indices].set(value.astype(buf.dtype), mode="drop"))
_GROW = Primitive("TensorListResize", lambda buf, *, rows: jnp.pad(buf, [(0, rows)] + [(0, 0)] * (buf.ndim - 1)))


def _in_trace() -> bool:
    return _state._local.collector is not None


def _traced(x: Any) -> bool:
    return isinstance(getattr(x, "_value", x), _Tracer)


def _indices(x: Any) -> Any:
    """``indices`` of ``gather`` / ``scatter``: a Python list or tuple holding a traced scalar
    (``ta.gather([0, n - 1])`` inside a compiled function) packed into one traced Tensor, as TF
    packs it; anything else as it is."""
    def has_traced(v: Any) -> bool:
        return any(has_traced(e) for e in v) if isinstance(v, (list, tuple)) else _traced(v)

    return convert_to_tensor(x) if isinstance(x, (list, tuple)) and has_traced(x) else x


def _dim(d: Any) -> Any:
    """A buffer's length: an int, or a symbolic size (kept: ``_static_int``)."""
    return int(d) if isinstance(d, (int, np.integer)) else d


def _zeros(rows: Any, shape: tuple, dtype: Any) -> Tensor:
    """A zero buffer of ``rows`` elements (a symbolic ``rows`` made by JAX: tf.zeros takes ints)."""
    if isinstance(rows, int):
        return _array.zeros((rows,) + tuple(shape), dtype)
    return Tensor(jnp.zeros((rows,) + tuple(shape), np.dtype(dtype.as_numpy_dtype)))


def _static_int(x: Any, what: str) -> Optional[int]:
    """``x`` as a Python int when it is known now, else None (a traced scalar); ``tf.shape(x)[k]`` of a
    symbolic size (a None signature's trace) as that size."""
    if getattr(x, "_dim", None) is not None:
        return x._dim
    if _traced(x):
        return None
    v = np.asarray(getattr(x, "_value", x))
    if v.shape != () or v.dtype.kind not in "iu":
        raise TypeError(f"{what} must be an int32 scalar; got {x!r}")
    return int(v)


def _as_shape(shape: Any) -> Optional[Tuple[Optional[int], ...]]:
    if shape is None:
        return None
    if getattr(shape, "rank", 0) is None:   # a TF-style unknown shape
        return None
    return tuple(None if d is None else int(d) for d in shape)


def _compatible(a: Optional[tuple], b: tuple) -> bool:
    return a is None or (len(a) == len(b) and all(x is None or x == y for x, y in zip(a, b)))


def _merge(a: Optional[tuple], b: tuple) -> tuple:
    return b if a is None else tuple(y if x is None else x for x, y in zip(a, b))


def _full(shape: Optional[tuple]) -> bool:
    return shape is not None and all(d is not None for d in shape)


def _fmt(shape: Optional[tuple]) -> str:
    if shape is None:
        return "<unknown>"
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


class _Aux(NamedTuple):
    """The static part of a TensorArray (its pytree aux data)."""

    dtype: Any
    dynamic: bool
    clear: bool
    infer: bool
    shape: Optional[tuple]     # the element shape (None dims unknown; None rank unknown)
    cap: int                   # rows of the buffer / length of the list
    listed: bool               # eager list form
    present: tuple             # list form: the indices holding a Tensor (the children)
    cleared: frozenset         # list form: indices cleared by a read
    materialized: bool         # buffer form: the buffer exists (else: nothing written, shape unknown)
    static_len: Optional[int]  # buffer form of a dynamic array: its length when known now


class TensorArray:
    """``tf.TensorArray(dtype, size, dynamic_size, clear_after_read, tensor_array_name, handle, flow,
    infer_shape, element_shape, colocate_with_first_write_call, name)`` (see the module docstring)."""

    __slots__ = ("_a", "_elems", "_buf", "_len")
    _a: _Aux
    _elems: Optional[List[Optional[Tensor]]]
    _buf: Optional[Tensor]
    _len: Any

    def __init__(self, dtype, size=None, dynamic_size=None, clear_after_read=None, tensor_array_name=None,
                 handle=None, flow=None, infer_shape=True, element_shape=None, colocate_with_first_write_call=True,
                 name=None):
        if handle is not None:
            raise ValueError("TensorArray handles are not supported in tapejax (TF's eager rule): give dtype "
                             "and size")
        if flow is not None:
            raise ValueError("TensorArray flow is not supported in tapejax: give dtype and size")
        if size is None:
            raise ValueError("Size must be declared for TensorArrays (size=...; with dynamic_size=True it is the "
                             "initial size)")
        dt = _dtypes.as_dtype(dtype)
        n = _static_int(size if not isinstance(size, (int, np.integer)) else int(size), "size")
        if n is None:
            raise ValueError("TensorArray size must be known when the function is traced (XLA compiles static "
                             "shapes); give a Python int or a concrete tensor, or use dynamic_size=True with a "
                             "loop bound")
        n = max(n, 0)
        shape = _as_shape(element_shape)
        listed = not _in_trace()
        self._a = _Aux(dt, bool(dynamic_size), True if clear_after_read is None else bool(clear_after_read),
                       bool(infer_shape), shape, n, listed, (), frozenset(), False, n if dynamic_size else None)
        self._elems = [cast(Optional[Tensor], None)] * n if listed else None
        self._buf = None
        self._len: Any = n
        if not listed and shape is not None and _full(shape):
            self._materialize(shape)

    # -- construction helpers ------------------------------------------------------------------
    @classmethod
    def _make(cls, a: _Aux, elems=None, buf=None, length: Any = None) -> "TensorArray":
        ta = object.__new__(cls)
        ta._a, ta._elems, ta._buf = a, elems, buf
        ta._len = a.cap if length is None else length
        return ta

    def _materialize(self, shape: tuple) -> None:
        self._buf = _zeros(self._a.cap, shape, self._a.dtype)
        self._a = self._a._replace(shape=tuple(shape), materialized=True)

    def _with(self, buf: Optional[Tensor], length: Any, **changes: Any) -> "TensorArray":
        a = self._a._replace(**changes)
        if buf is not None:
            a = a._replace(materialized=True, cap=_dim(buf._value.shape[0]))
        if a.dynamic:
            a = a._replace(static_len=None if _traced(length) or isinstance(length, Tensor) else int(length))
        return TensorArray._make(a, None, buf if buf is not None else self._buf, length)

    # -- properties ----------------------------------------------------------------------------
    @property
    def dtype(self):
        return self._a.dtype

    @property
    def dynamic_size(self) -> bool:
        return self._a.dynamic

    @property
    def element_shape(self):
        s = self._a.shape
        return TensorShape(s or ()) if _full(s) else s

    @property
    def flow(self) -> Tensor:
        return convert_to_tensor(0)

    @property
    def handle(self):
        return None

    def identity(self) -> "TensorArray":
        return self

    def grad(self, source, flow=None, name=None):
        raise NotImplementedError("TensorArray.grad is not supported in tapejax (TF's eager rule): the tape "
                                  "differentiates reads, writes and stacks of a TensorArray directly")

    def mark_used(self) -> None:
        return None

    def close(self, name=None) -> None:
        return None

    def __repr__(self) -> str:
        return (f"<tapejax.TensorArray dtype={self._a.dtype.name} size={self._len!r} "
                f"element_shape={_fmt(self._a.shape)}>")

    # -- value checks ----------------------------------------------------------------------------
    def _value(self, value: Any, what: str = "value") -> Tensor:
        t = value if isinstance(value, Tensor) else convert_to_tensor(value, dtype_hint=self._a.dtype)
        if t.dtype != self._a.dtype:
            raise InvalidArgumentError(None, None, f"TensorArray dtype is {self._a.dtype.name} but Op is trying "
                                       f"to write dtype {t.dtype.name} ")
        return t

    def _check_shape(self, shape: tuple) -> Optional[tuple]:
        """The element shape after writing an element of ``shape`` (ValueError when incompatible)."""
        if not _compatible(self._a.shape, shape):
            raise ValueError(f"Incompatible shape for value ({_fmt(shape)}), expected ({_fmt(self._a.shape)})")
        return _merge(self._a.shape, shape) if self._a.infer else self._a.shape

    # -- eager list form ---------------------------------------------------------------------------
    def _zero(self, i: int) -> Tensor:
        assert self._elems is not None
        t = self._elems[i]
        if t is None:
            if not _full(self._a.shape):
                raise ValueError(f"Could not read from TensorArray index {i}: it was never written and the element "
                                 f"shape is not fully defined: {_fmt(self._a.shape)}. Give the TensorArray a full "
                                 "element_shape to read unwritten elements as zeros.")
            t = self._elems[i] = _array.zeros(self._a.shape, self._a.dtype)
        return t

    def _list_write(self, index: int, value: Any) -> None:
        assert self._elems is not None
        if index < 0:
            raise OutOfRangeError(None, None, f"Writing to negative indices (index {index}) is not allowed.")
        size = len(self._elems)
        if index >= size and not self._a.dynamic:
            raise OutOfRangeError(None, None, f"Tried to write to index {index} but array is not resizeable and "
                                  f"size is: {size} ")
        t = self._value(value)
        shape = self._check_shape(tuple(t.shape))
        if index >= size:
            self._elems.extend([None] * (index - size + 1))
        self._a = self._a._replace(shape=shape)
        self._elems[index] = t

    def _list_read(self, index: int) -> Tensor:
        assert self._elems is not None
        if index < 0:
            raise OutOfRangeError(None, None, f"Reading from negative indices (index {index}) is not allowed.")
        if index >= len(self._elems):
            raise OutOfRangeError(None, None, f"Tried to read from index {index} but array size is: "
                                  f"{len(self._elems)} ")
        t = self._elems[index]
        if t is None:
            if index in self._a.cleared:
                raise InvalidArgumentError(None, None, f"Could not read index {index} twice because it was cleared "
                                           "after a previous read (perhaps try setting clear_after_read = false?)")
            t = self._zero(index)
        if self._a.clear:
            self._elems[index] = None
            self._a = self._a._replace(cleared=self._a.cleared | {index})
        return t

    # -- buffer form ---------------------------------------------------------------------------
    def _buffer(self, shape: Optional[tuple] = None) -> Tensor:
        if self._buf is not None:
            return self._buf
        shape = shape if shape is not None else self._a.shape
        if not _full(shape):
            raise InvalidArgumentError(None, None, "Tried to read from an unwritten TensorArray whose element "
                                       f"shape is not fully defined ({_fmt(self._a.shape)}): give it a full "
                                       "element_shape")
        assert shape is not None
        return _zeros(self._a.cap, shape, self._a.dtype)

    def _index(self, index: Any, what: str, rows: int, allow_grow: bool) -> Tuple[Any, Optional[int]]:
        i = _static_int(index, "index")
        if i is None:
            t = convert_to_tensor(index)
            bound = "the buffer's capacity (size + the loop's bound)" if self._a.dynamic else "size"
            require_in_range(t._value, rows, "index", f"is not in [0, {rows}): TensorArray {what} outside its "
                             f"{bound}", "TensorList" + what.capitalize())
            return t, None
        if i < 0:
            raise InvalidArgumentError(None, None, f"{what.capitalize()} to negative indices (index {i}) is not "
                                       "allowed.")
        if i >= rows and not allow_grow:
            raise InvalidArgumentError(None, None, f"Tried to {what} index {i} but array is not resizeable and "
                                       f"size is: {rows} ")
        return convert_to_tensor(i), i

    def _buf_write(self, index: Any, value: Any) -> "TensorArray":
        t = self._value(value)
        shape = self._check_shape(tuple(t.shape))
        buf = self._buffer(tuple(t.shape))
        if self._a.dynamic and self._a.cap == 0 and _static_int(index, "index") is None:
            raise TracedSizeError(   # (a dataset function raising it runs eagerly per element instead)
                "A dynamic_size TensorArray with no rows yet is written at an index known only at run time "
                "outside a staged loop: XLA compiles its length statically. Write it in a loop with a bound "
                "(AutoGraph's `for i in tf.range(n)`, maximum_iterations), or give it a static size.")
        idx, i = self._index(index, "write to", self._a.cap, self._a.dynamic)
        if i is not None and i >= self._a.cap:
            buf = bind(_GROW, buf, rows=i + 1 - self._a.cap)
        new = bind(_SET, buf, t, idx)
        length = self._len
        if self._a.dynamic:
            if i is not None and isinstance(length, int):
                length = max(length, i + 1)
            else:
                length = convert_to_tensor(jnp.maximum(jnp.asarray(getattr(length, "_value", length), jnp.int32),
                                                       jnp.asarray(idx._value, jnp.int32) + 1))
        return self._with(new, length, shape=shape)

    def _rows(self) -> Tensor:
        """The buffer's rows that hold elements (all of them; the length checked when only known at run
        time)."""
        buf = self._buffer()
        if not self._a.dynamic:
            return buf
        n = self._a.static_len
        if n is not None:
            return buf if n == self._a.cap else buf[:n]
        require(jnp.asarray(self._len._value) == self._a.cap,
                "a dynamic_size TensorArray filled in a compiled loop has {length} elements, but XLA gives it the "
                f"loop's bound ({self._a.cap}) as its static length: give it a static size to fill it partially",
                length=jnp.asarray(self._len._value))
        return buf

    # -- the API ---------------------------------------------------------------------------------
    def write(self, index, value, name=None) -> "TensorArray":
        """Write ``value`` at ``index``; eagerly in place (returns this array), traced a new array."""
        if self._elems is not None:
            self._list_write(_eager_index(index), value)
            return self
        return self._buf_write(index, value)

    def read(self, index, name=None) -> Tensor:
        if self._elems is not None:
            return self._list_read(_eager_index(index))
        idx, _ = self._index(index, "read from", self._size_rows(), False)
        return bind(_GET, self._buffer(), idx)

    def _size_rows(self) -> int:
        return self._a.static_len if self._a.dynamic and self._a.static_len is not None else self._a.cap

    def stack(self, name=None) -> Tensor:
        if self._elems is not None:
            if not self._elems:
                if _full(self._a.shape):
                    return _array.zeros((0,) + tuple(self._a.shape or ()), self._a.dtype)
                return _array.zeros((0,), self._a.dtype)
            for i in range(len(self._elems)):
                if self._elems[i] is None and not _full(self._a.shape):
                    raise ValueError(f"Cannot convert a partially known TensorShape {_fmt(self._a.shape)} to a "
                                     f"Tensor: element {i} of the TensorArray was never written")
                self._zero(i)
            return _array.stack(list(self._elems))
        if self._buf is None and self._a.cap == 0:
            return _array.zeros((0,) + tuple((self._a.shape or ()) if _full(self._a.shape) else ()), self._a.dtype)
        return self._rows()

    def gather(self, indices, name=None) -> Tensor:
        indices = _indices(indices)
        if self._elems is not None:
            if _traced(indices):
                _no_traced_index()
            idx = np.asarray(getattr(indices, "_value", indices)).reshape(-1)
            return _array.stack([self._zero(self._checked(int(i))) for i in idx])
        if _traced(indices):
            t = convert_to_tensor(indices)
            require_in_range(t._value, self._size_rows(), "indices", f"is not in [0, {self._size_rows()})",
                             "TensorListGather")
        else:
            raw = np.asarray(getattr(indices, "_value", indices), np.int32)
            bad = [int(i) for i in raw.reshape(-1) if not 0 <= int(i) < self._size_rows()]
            if bad:
                raise InvalidArgumentError(None, None, f"Tried to gather index {bad[0]} but array size is: "
                                           f"{self._size_rows()} ")
            t = convert_to_tensor(raw)
        return bind(_GATHER, self._buffer(), t)

    def _checked(self, i: int) -> int:
        assert self._elems is not None
        if not 0 <= i < len(self._elems):
            raise OutOfRangeError(None, None, f"Tried to read from index {i} but array size is: {len(self._elems)} ")
        return i

    def unstack(self, value, name=None) -> "TensorArray":
        """The rows of ``value`` become the elements (the array's size becomes their number)."""
        t = self._value(value)
        if t.shape.rank == 0:
            raise ValueError("Cannot unstack a scalar into a TensorArray: value must have rank >= 1")
        n = int(t._value.shape[0])
        if n > self._a.cap and not self._a.dynamic:
            raise ValueError(f"Cannot unstack {n} tensors into a TensorArray of static size {self._a.cap} ")
        shape = self._check_shape(tuple(t.shape[1:]))
        if self._elems is not None:
            self._elems = list(_array.unstack(t)) if n else []
            self._a = self._a._replace(shape=shape, cap=n)
            return self
        return self._with(t, n, shape=shape, cap=n)

    def scatter(self, indices, value, name=None) -> "TensorArray":
        indices = _indices(indices)
        t = self._value(value)
        if self._elems is not None:
            if _traced(indices):
                _no_traced_index()
            idx = np.asarray(getattr(indices, "_value", indices)).reshape(-1)
            for i, row in zip(idx, _array.unstack(t) if t.shape[0] else []):
                self._list_write(int(i), row)
            return self
        shape = self._check_shape(tuple(t.shape[1:]))
        buf = self._buffer(tuple(t.shape[1:]))
        length = self._len
        if _traced(indices):
            idx = convert_to_tensor(indices)
            require_in_range(idx._value, self._a.cap, "indices", f"is not in [0, {self._a.cap})", "TensorListScatter")
            if self._a.dynamic:
                length = convert_to_tensor(jnp.maximum(jnp.asarray(getattr(length, "_value", length), jnp.int32),
                                                       jnp.max(idx._value).astype(jnp.int32) + 1))
        else:
            raw = [int(i) for i in np.asarray(getattr(indices, "_value", indices)).reshape(-1)]
            top = max(raw) + 1 if raw else 0
            if any(i < 0 for i in raw) or (top > self._a.cap and not self._a.dynamic):
                bad = next(i for i in raw if i < 0 or i >= self._a.cap)
                raise InvalidArgumentError(None, None, f"Tried to write to index {bad} but array is not resizeable "
                                           f"and size is: {self._a.cap} ")
            if top > self._a.cap:
                buf = bind(_GROW, buf, rows=top - self._a.cap)
            if self._a.dynamic and isinstance(length, int):
                length = max(length, top)
            idx = convert_to_tensor(np.asarray(raw, np.int32))
        return self._with(bind(_SCATTER, buf, t, idx), length, shape=shape)

    def concat(self, name=None) -> Tensor:
        if self._elems is not None:
            parts = [self._zero(i) for i in range(len(self._elems))]
            for i, p in enumerate(parts):
                if p.shape.rank == 0:
                    raise InvalidArgumentError(None, None, f"Concat saw a scalar shape at index {i} but requires at "
                                               "least vectors.")
            if not parts:
                return _array.zeros((0,), self._a.dtype)
            return _array.concat(parts, 0)
        rows = self.stack()
        if len(rows.shape) < 2:
            raise InvalidArgumentError(None, None, "Concat saw a scalar shape at index 0 but requires at least "
                                       "vectors.")
        return _array.reshape(rows, (-1,) + tuple(rows.shape[2:]))

    def split(self, value, lengths, name=None) -> "TensorArray":
        t = self._value(value)
        lens = np.asarray(getattr(lengths, "_value", lengths))
        if _traced(lengths):
            raise ValueError("TensorArray.split needs lengths known when the function is traced (XLA compiles "
                             "static shapes)")
        if lens.ndim != 1:
            raise InvalidArgumentError(None, None, f"Expected lengths to be a vector, received shape: "
                                       f"{list(lens.shape)} ")
        if t.shape.rank == 0:
            raise InvalidArgumentError(None, None, "Expected value to be at least a vector, but received shape: [] ")
        if int(lens.sum()) != int(t._value.shape[0]):
            raise InvalidArgumentError(None, None, "Expected sum of lengths to be equal to values.shape[0], but sum "
                                       f"of lengths is {int(lens.sum())} and value's shape is: {list(t.shape)} ")
        if not self._a.dynamic and len(lens) != self._a.cap:
            raise InvalidArgumentError(None, None, "TensorArray's size is not equal to the size of lengths "
                                       f"({self._a.cap} vs. {len(lens)}), and the TensorArray is not marked as "
                                       "dynamically resizeable.")
        if self._elems is not None:
            self._elems = list(_array.split(t, [int(x) for x in lens], 0)) if len(lens) else []
            self._a = self._a._replace(cap=len(self._elems), shape=None if not self._elems else self._a.shape)
            return self
        if len(set(int(x) for x in lens)) > 1:
            raise ValueError("TensorArray.split inside a tapejax.function needs equal lengths (its elements share "
                             "one shape in a compiled buffer); got lengths " + str([int(x) for x in lens]))
        k = int(lens[0]) if len(lens) else 0
        rows = _array.reshape(t, (len(lens), k) + tuple(t.shape[1:]))
        shape = self._check_shape((k,) + tuple(t.shape[1:]))
        return self._with(rows, len(lens), shape=shape, cap=len(lens))

    def size(self, name=None) -> Tensor:
        if self._elems is not None:
            return convert_to_tensor(len(self._elems))
        if self._a.dynamic and self._a.static_len is None:
            return convert_to_tensor(self._len)
        return convert_to_tensor(self._size_rows())


def _eager_index(index: Any) -> int:
    i = None if _traced(index) else _static_int(index, "index")
    return _no_traced_index() if i is None else i


def _no_traced_index() -> Any:
    raise ValueError("An eager TensorArray cannot be indexed with a traced tensor; create it inside the "
                     "tapejax.function (or pass it through the loop) so that it is a compiled buffer")


# ---------------------------------------------------------------------------
# pytree: the loop-carried form
# ---------------------------------------------------------------------------

def _flatten(ta: TensorArray):
    a = ta._a
    if ta._elems is not None:
        present = tuple(i for i, t in enumerate(ta._elems) if t is not None)
        a = a._replace(present=present, cap=len(ta._elems))
        return tuple(ta._elems[i] for i in present), a
    kids: Tuple[Any, ...] = (ta._buf,) if ta._buf is not None else ()
    if a.dynamic:
        kids += (ta._len if a.static_len is None or isinstance(ta._len, Tensor) else convert_to_tensor(ta._len),)
        a = a._replace(static_len=None)
    return kids, a


def _unflatten(a: _Aux, kids) -> TensorArray:
    kids = list(kids)
    if a.listed:
        elems: List[Any] = [None] * a.cap
        for i, t in zip(a.present, kids):
            elems[i] = t
        return TensorArray._make(a._replace(present=()), elems)
    buf = kids[0] if a.materialized else None
    length = kids[-1] if a.dynamic else a.cap
    return TensorArray._make(a, None, buf, length)


jax.tree_util.register_pytree_node(TensorArray, _flatten, _unflatten)


__all__ = ["TensorArray"]
