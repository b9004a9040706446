"""``tf.SparseTensor`` and ``tf.SparseTensorSpec``: a sparse tensor as three dense Tensors.

As TF's, a ``SparseTensor(indices, values, dense_shape)`` stands for the dense tensor of shape
``dense_shape`` whose element ``indices[i]`` is ``values[i]`` and every other element zero:
``indices`` is an int64 ``[N, rank]`` Tensor, ``values`` a ``[N]`` Tensor of any dtype,
``dense_shape`` an int64 ``[rank]`` Tensor (int64 is held as int32 without JAX's 64-bit mode, as
everywhere in tapejax).  The ops (``ops.sparse_ops``: ``tf.sparse``) are ordinary recorded ops on
``indices`` and ``values``, so a tape differentiates them with respect to ``values`` (and a dense
operand) and gives None for ``indices`` (an integer Tensor), as TF's.

**The shape rule.**  A JAX program needs static shapes, so a SparseTensor keeps its dense shape on
the host (``_static``, a tuple of ints) whenever it can be known there: a Python list / tuple /
NumPy ``dense_shape`` is read as it is, an eager Tensor's value is read once at construction (a
host read: the shape is needed by every op that builds a dense result), and every op of
``tf.sparse`` computes its result's shape on the host.  Only a ``dense_shape`` computed *inside*
a ``tapejax.function`` trace (a tracer) is unknown: ``.shape`` is then ``[None] * rank`` and an op
needing it (``to_dense``, a dense reduction, ``sparse_dense_matmul``'s output rows) raises
ValueError saying so.  A SparseTensor *passed* to a ``tapejax.function`` is keyed by its static
dense shape (part of the trace key, as a Tensor's shape is) and its ``indices`` / ``values``
shapes, so each new dense shape or number of entries traces once more; its parts are dynamic.

Ops whose number of output entries depends on the values (``from_dense``, ``retain``, ``slice``,
``fill_empty_rows``, sparse + sparse ``add``, ``output_is_sparse`` reductions) compute the new
indices on the host with NumPy from concrete indices and gather the values with a recorded op
(so the tape still differentiates them, as TF's gradients: a scatter back into the input's
values); inside a ``tapejax.function`` trace they raise ValueError (JAX has no value-dependent
shapes).  Validation TF does eagerly (indices out of bounds, out of order, repeated in
``to_dense``) reads the indices on the host when they are concrete, raising
``InvalidArgumentError`` with TF's text; inside a trace it is skipped (as TF's XLA kernels skip it).

**String values.**  tapejax has no string tensors, so a SparseTensor of strings (values given as
``bytes`` / ``str``, a list of them or a NumPy string array) keeps its ``values`` on the host, a
NumPy object array of ``bytes`` (``dtype`` is ``tf.string``); ``tf.sparse.to_dense`` (``b""`` where
no entry is), ``tf.sparse.from_dense`` of host strings (the non-empty ones) and
``tf.sparse.cross`` / ``cross_hashed`` take it; another op given it is TypeError (``core.bind``
refuses host strings).

A SparseTensor is a JAX pytree (children: indices and values, and ``dense_shape`` when it is not
static), and ``tapejax.function`` passes it as an argument and returns it as a result
(``compile.signature``; ``tf.SparseTensorSpec`` in an ``input_signature`` checks it).

As TF's, it is not a dense Tensor: its registered conversion refuses (ValueError naming
``tf.sparse.to_dense``), so a dense op given one raises; ``tf.is_tensor`` is True.  The unary ops
TF dispatches for it (those with ``f(0) == 0``: ``UNARY_OPS``, through ``ops._registry``'s
``UNARY_DISPATCH``), ``tf.cast`` and ``tf.identity`` map its values; ``sp * dense`` and
``sp / dense`` read the dense operand (broadcast to the dense shape) at the entries (``cwise``).
"""
from typing import Any, NamedTuple, Optional, Tuple

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind, define
from ..core.conversion import register_tensor_conversion_function
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor, TensorShape
from ._registry import UNARY_DISPATCH

_Tracer = jax.core.Tracer

TO_DENSE = define("SparseToDense",
                  lambda indices, values, default, *, shape: jnp.full(shape, default, values.dtype).at[
                      tuple(indices.T)].set(values, mode="drop", unique_indices=False))


def index_dtype() -> Any:
    """The dtype tapejax holds int64 indices in (int32 without JAX's 64-bit mode)."""
    return _dtypes.storage_dtype(np.dtype(np.int64), "SparseTensor indices")


def is_traced(t: Any) -> bool:
    """Whether Tensor ``t``'s value is a tracer (inside a ``tapejax.function`` trace)."""
    return isinstance(getattr(t, "_value", t), _Tracer)


class TracedSparseError(ValueError):
    """A sparse op whose result's size depends on values, called inside a JAX trace (a
    ``tapejax.data`` function catches it and runs eagerly instead)."""


def host_indices(sp: "SparseTensor", op: str) -> np.ndarray:
    """``sp``'s indices on the host (int64), or ValueError inside a trace."""
    if is_traced(sp._indices):
        raise TracedSparseError(f"{op}: the number of entries of its result depends on the values of the SparseTensor's "
                         "indices, which are unknown inside a tapejax.function trace (JAX needs static shapes); "
                         "call it outside the function (eagerly, or in a tf.data map).")
    return np.asarray(sp._indices.numpy(), np.int64).reshape(int(np.shape(sp._indices)[0]), sp.rank)


def _cwise(fn):
    def impl(indices, values, dense, *, shape):
        picked = jnp.broadcast_to(dense, shape)[tuple(indices.T)] if indices.shape[0] else dense.reshape(-1)[:0]
        return fn(values, picked.astype(values.dtype))
    return impl


CWISE_MUL = define("SparseDenseCwiseMul", _cwise(jnp.multiply))
CWISE_DIV = define("SparseDenseCwiseDiv", _cwise(jnp.divide))


def cwise(sp: "SparseTensor", other: Any, prim: Any, what: str) -> "SparseTensor":
    """``sp * dense`` / ``sp / dense``: ``dense`` broadcast to ``sp``'s shape, read at its
    entries (TF's ``SparseDenseCwiseMul`` / ``Div``: a sparse result with ``sp``'s indices)."""
    if isinstance(other, SparseTensor):
        raise TypeError(f"unsupported operand type(s) for {what}: 'SparseTensor' and 'SparseTensor'")
    dense = convert_to_tensor(other, dtype=sp.dtype)
    shape = sp.static_shape(f"SparseTensor.__{what}__")
    if dense.ndim > len(shape) or any(d not in (1, s) for d, s in zip(dense.shape[::-1], shape[::-1])):
        raise InvalidArgumentError(None, None, f"SparseDenseBinaryOpShared broadcasts dense to sparse only; got "
                                   f"incompatible shapes: [{','.join(str(d) for d in shape)}] vs. "
                                   f"[{','.join(str(d) for d in dense.shape)}]")
    return sp.with_values(bind(prim, sp._indices, sp._values, dense, shape=shape))


def _static_shape(dense_shape: Any) -> Optional[Tuple[int, ...]]:
    """``dense_shape`` as a tuple of ints, or None inside a trace."""
    if isinstance(dense_shape, Tensor):
        if is_traced(dense_shape):
            return None
        dense_shape = dense_shape.numpy()
    elif isinstance(dense_shape, _Tracer):
        return None
    if isinstance(dense_shape, TensorShape):
        dense_shape = dense_shape.as_list()
    a = np.asarray(dense_shape)
    if a.dtype.kind not in "iu" and not (a.size == 0):
        raise TypeError(f"Cannot convert {dense_shape!r} to EagerTensor of dtype int64 (argument `dense_shape` of "
                        "SparseTensor: a vector of ints)")
    return tuple(int(d) for d in a.reshape(-1))


def _int_tensor(x: Any, arg: str) -> Tensor:
    """``x`` as an index Tensor: int64 held as ``index_dtype()`` (an integer Tensor of another
    width is cast: without JAX's 64-bit mode int64 and int32 Tensors are the same)."""
    try:
        t = x if isinstance(x, Tensor) else convert_to_tensor(x, dtype=_dtypes.int64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"Cannot convert {x!r} to EagerTensor of dtype int64 (argument `{arg}` of SparseTensor): "
                        f"{e}") from None
    if not t.dtype.is_integer:
        raise TypeError(f"Cannot convert {x!r} to EagerTensor of dtype int64 (argument `{arg}` of SparseTensor: "
                        f"got {t.dtype.name})")
    if t.dtype.name != np.dtype(index_dtype()).name:
        t = bind(_AS_INDEX, t, dtype=index_dtype())
    return t


_AS_INDEX = define("SparseIndexCast", lambda x, *, dtype: x.astype(dtype), differentiable=False)


def host_string_values(values: Any) -> Optional[np.ndarray]:
    """``values`` as a NumPy object array of ``bytes`` when they are strings (``bytes`` / ``str``,
    a list of them, a NumPy ``S`` / ``U`` / object array): a string SparseTensor's values stay on
    the host (tapejax has no string tensors); None for other values."""
    if isinstance(values, np.ndarray) and values.dtype.kind in "OSU":
        a = values
    elif isinstance(values, (list, tuple)) and values and all(isinstance(v, (bytes, str)) for v in values):
        a = np.empty(len(values), object)
        a[:] = list(values)
    else:
        return None
    out = np.empty(a.shape, object)
    for i, v in np.ndenumerate(a):
        if not isinstance(v, (bytes, str, np.bytes_, np.str_)):
            raise TypeError(f"Cannot convert {v!r} to EagerTensor of dtype string (argument `values` of SparseTensor: "
                            "strings, or numbers)")
        out[i] = v.encode() if isinstance(v, str) else bytes(v)
    return out


def _rank_error(shape: tuple, rank: int) -> ValueError:
    return ValueError(f"Shape {tuple(shape)} must have rank {rank}")


class SparseTensor:
    """``tf.SparseTensor(indices, values, dense_shape)`` (see the module docstring)."""

    __slots__ = ("_indices", "_values", "_dense_shape", "_static", "__weakref__")

    #: ``tf.is_tensor`` is True for a SparseTensor, as TF's (``core.convert.is_tensor``)
    _tapejax_composite = True

    def __init__(self, indices: Any, values: Any, dense_shape: Any):
        static = _static_shape(dense_shape)
        ind = _int_tensor(indices, "indices")
        strings = None if isinstance(values, Tensor) else host_string_values(values)
        vals: Any = strings if strings is not None else (
            values if isinstance(values, Tensor) else convert_to_tensor(values))
        if static is not None:
            with jax.ensure_compile_time_eval():
                shape_t = Tensor(jnp.asarray(static, index_dtype()))
        else:
            shape_t = _int_tensor(dense_shape, "dense_shape")
        if ind.ndim != 2:
            raise _rank_error(ind.shape, 2)
        if vals.ndim != 1:
            raise _rank_error(vals.shape, 1)
        if shape_t.ndim != 1:
            raise _rank_error(shape_t.shape, 1)
        if ind.shape[0] != vals.shape[0]:
            raise ValueError(f"Dimensions {ind.shape[0]} and {vals.shape[0]} are not compatible (the number of "
                             "`indices` rows and of `values` of a SparseTensor)")
        if ind.shape[1] != shape_t.shape[0]:
            raise ValueError(f"Dimensions {ind.shape[1]} and {shape_t.shape[0]} are not compatible (the `indices` "
                             "columns and the `dense_shape` length (the rank) of a SparseTensor)")
        self._indices, self._values, self._dense_shape, self._static = ind, vals, shape_t, static

    @classmethod
    def _of(cls, indices: Any, values: Any, shape: Tuple[int, ...]) -> "SparseTensor":
        """One made by the library from checked parts and a static shape."""
        out = cls.__new__(cls)
        ind = indices if isinstance(indices, Tensor) else Tensor(jnp.asarray(indices, index_dtype()))
        with jax.ensure_compile_time_eval():
            shape_t = Tensor(jnp.asarray(shape, index_dtype()).reshape(len(shape)))
        out._indices, out._values, out._dense_shape, out._static = ind, values, shape_t, tuple(shape)
        return out

    @classmethod
    def from_value(cls, value: Any) -> "SparseTensor":
        """``SparseTensor.from_value``: a SparseTensor as it is (TF also takes a
        ``SparseTensorValue``, which tapejax has not)."""
        if isinstance(value, SparseTensor):
            return value
        raise TypeError(f"Neither a SparseTensor nor SparseTensorValue: {value!r}.")

    # -- TF's attributes ----------------------------------------------------------------
    @property
    def indices(self) -> Tensor:
        return self._indices

    @property
    def values(self) -> Any:
        """A Tensor, or for a string SparseTensor a NumPy object array of ``bytes``."""
        return self._values

    @property
    def dense_shape(self) -> Tensor:
        return self._dense_shape

    @property
    def dtype(self) -> _dtypes.DType:
        return _dtypes.string if isinstance(self._values, np.ndarray) else self._values.dtype

    @property
    def rank(self) -> int:
        return int(np.shape(self._indices)[1])

    @property
    def shape(self) -> TensorShape:
        if self._static is not None:
            return TensorShape(self._static)
        return TensorShape((None,) * self.rank)

    def get_shape(self) -> TensorShape:
        return self.shape

    @property
    def ndim(self) -> int:
        return self.rank

    @property
    def _type_spec(self) -> "SparseTensorSpec":
        return SparseTensorSpec(self.shape, self.dtype)

    @property
    def op(self):
        raise AttributeError("Tensor.op is undefined when eager execution is enabled.")

    @property
    def graph(self):
        raise AttributeError("Tensor.graph is undefined when eager execution is enabled.")

    def consumers(self) -> list:
        return []

    def with_values(self, new_values: Any) -> "SparseTensor":
        """The same indices and shape with other ``values`` (of the same length)."""
        vals = new_values if isinstance(new_values, Tensor) else convert_to_tensor(new_values)
        if vals.ndim != 1 or vals.shape[0] != self._values.shape[0]:
            raise ValueError(f"Shapes {tuple(vals.shape)} and {tuple(self._values.shape)} are incompatible "
                             "(`new_values` of SparseTensor.with_values must have the values' shape)")
        out = SparseTensor.__new__(SparseTensor)
        out._indices, out._values, out._dense_shape, out._static = self._indices, vals, self._dense_shape, self._static
        return out

    def static_shape(self, op: str) -> Tuple[int, ...]:
        """The static dense shape, or ValueError naming ``op`` (see the module docstring)."""
        if self._static is None:
            raise ValueError(f"{op}: the SparseTensor's dense_shape was computed inside a tapejax.function trace, so "
                             "it is unknown to JAX, which needs static shapes; pass the SparseTensor (or its "
                             "dense_shape) into the function, or build it from a Python list.")
        return self._static

    # -- operators TF defines on SparseTensor -------------------------------------------
    def __mul__(self, other: Any) -> "SparseTensor":
        return cwise(self, other, CWISE_MUL, "mul")

    def __truediv__(self, other: Any) -> "SparseTensor":
        return cwise(self, other, CWISE_DIV, "truediv")

    __div__ = __truediv__

    def __repr__(self) -> str:
        return f"SparseTensor(indices={self._indices}, values={self._values}, dense_shape={self._dense_shape})"

    __str__ = __repr__


class SparseTensorSpec:
    """``tf.SparseTensorSpec(shape=None, dtype=float32)``: the type of a SparseTensor (a shape of
    ints and Nones; None for an unknown rank, whose ``shape`` is None as ``TensorSpec``'s)."""

    __slots__ = ("_dims", "_dtype")

    def __init__(self, shape: Any = None, dtype: Any = _dtypes.float32):
        self._dims: Optional[Tuple[Optional[int], ...]] = None if shape is None else tuple(
            None if d is None else int(d) for d in (shape.as_list() if hasattr(shape, "as_list") else shape))
        self._dtype = _dtypes.as_dtype(dtype)

    @classmethod
    def from_value(cls, value: Any) -> "SparseTensorSpec":
        if not isinstance(value, SparseTensor):
            raise TypeError(f"Expected SparseTensor, got {value!r}.")
        return value._type_spec

    @property
    def shape(self) -> Optional[TensorShape]:
        return None if self._dims is None else TensorShape(self._dims)

    @property
    def dims(self) -> Optional[Tuple[Optional[int], ...]]:
        """The dense shape as a tuple (None entries unknown), or None for an unknown rank."""
        return self._dims

    @property
    def dtype(self) -> _dtypes.DType:
        return self._dtype

    @property
    def value_type(self) -> type:
        return SparseTensor

    def is_compatible_with(self, other: Any) -> bool:
        if isinstance(other, SparseTensor):
            other = other._type_spec
        if not isinstance(other, SparseTensorSpec) or self._dtype != other._dtype:
            return False
        a, b = self._dims, other._dims
        return a is None or b is None or (len(a) == len(b) and all(
            x is None or y is None or x == y for x, y in zip(a, b)))

    def __eq__(self, other: Any) -> bool:
        return type(other) is SparseTensorSpec and (self._dims, self._dtype.name) == (other._dims, other._dtype.name)

    def __hash__(self) -> int:
        return hash(("SparseTensorSpec", self._dims, self._dtype.name))

    def __repr__(self) -> str:
        shape = "TensorShape(None)" if self._dims is None else f"TensorShape({list(self._dims)})"
        return f"SparseTensorSpec({shape}, tf.{self._dtype.name})"


class SparseParts(NamedTuple):
    """A SparseTensor taken apart for JAX (the pytree's static part): its static dense shape, or
    None where ``dense_shape`` is one of the children."""
    static: Optional[Tuple[int, ...]]


def _flatten(sp: SparseTensor):
    if sp._static is not None:
        return (sp._indices, sp._values), SparseParts(sp._static)
    return (sp._indices, sp._values, sp._dense_shape), SparseParts(None)


def _unflatten(parts: SparseParts, children) -> SparseTensor:
    out = SparseTensor.__new__(SparseTensor)
    if parts.static is not None:
        out._indices, out._values = children
        out._static = parts.static
        with jax.ensure_compile_time_eval():
            out._dense_shape = Tensor(jnp.asarray(parts.static, index_dtype()).reshape(len(parts.static)))
    else:
        out._indices, out._values, out._dense_shape = children
        out._static = None
    return out


jax.tree_util.register_pytree_node(SparseTensor, _flatten, _unflatten)


def _refuse_conversion(value: SparseTensor, dtype: Any = None, name: Any = None, as_ref: bool = False) -> Any:
    """A SparseTensor is not converted to a dense Tensor implicitly (TF's ValueError), so an op
    that takes a dense tensor refuses one rather than reading it as an object."""
    raise ValueError(f"Attempt to convert a value ({value!r}) with an unsupported type ({type(value)}) to a Tensor. "
                     "A SparseTensor is not densified implicitly: use tf.sparse.to_dense(sp), or "
                     "tf.sparse.map_values(op, sp) for an elementwise op on its values.")


register_tensor_conversion_function(SparseTensor, _refuse_conversion, priority=0)

#: The unary ops TF 2.21 applies to a SparseTensor's values (those with f(0) = 0 it dispatches);
#: any other refuses it as a dense op does.
UNARY_OPS = frozenset(["Abs", "Neg", "Square", "Sqrt", "Sin", "Sign", "Tanh", "Erf", "Atan", "Asin", "Tan",
                       "BesselI0e", "BesselI1e", "Asinh", "Atanh"])


def _unary(op: Any, op_type: str, sp: SparseTensor) -> SparseTensor:
    if op_type not in UNARY_OPS:
        _refuse_conversion(sp)
    return sp.with_values(op(sp._values))


UNARY_DISPATCH[SparseTensor] = _unary


def check_indices(ind: np.ndarray, shape: Tuple[int, ...], order: bool = True) -> None:
    """TF's eager ``validate_indices`` of ``SparseToDense``: in bounds, then (``order``) in
    row-major order and not repeated, with TF's messages."""
    if not ind.size:
        return
    bad = np.nonzero(((ind < 0) | (ind >= np.asarray(shape, np.int64))).any(axis=1))[0]
    if bad.size:
        i = int(bad[0])
        raise InvalidArgumentError(None, None, f"indices[{i}] = [{','.join(str(int(v)) for v in ind[i])}] is out of "
                                   f"bounds: need 0 <= index < [{','.join(str(d) for d in shape)}]")
    if not order or ind.shape[0] < 2:
        return
    flat = np.ravel_multi_index(tuple(ind.T), shape) if shape else np.zeros(len(ind), np.int64)
    step = np.diff(flat)
    bad = np.nonzero(step <= 0)[0]
    if bad.size:
        i = int(bad[0]) + 1
        shown = ",".join(str(int(v)) for v in ind[i])
        if step[i - 1] == 0:
            raise InvalidArgumentError(None, None, f"indices[{i}] = [{shown}] is repeated")
        raise InvalidArgumentError(None, None, f"indices[{i}] = [{shown}] is out of order. Many sparse ops require "
                                   "sorted indices.\n    Use `tf.sparse.reorder` to create a correctly ordered copy.")


def to_dense(sp_input: Any, default_value: Any = None, validate_indices: bool = True, name: Any = None) -> Any:
    """``tf.sparse.to_dense``: the dense Tensor, ``default_value`` (0) where no entry is (of a
    string SparseTensor: a NumPy object array, ``b""`` where no entry is)."""
    if not isinstance(sp_input, SparseTensor):
        raise TypeError(f"Input must be a SparseTensor (argument `sp_input` of tf.sparse.to_dense); got "
                        f"{type(sp_input).__name__}.")
    shape = sp_input.static_shape("tf.sparse.to_dense")
    if validate_indices and not is_traced(sp_input._indices):
        check_indices(host_indices(sp_input, "tf.sparse.to_dense"), shape)
    if isinstance(sp_input._values, np.ndarray):   # strings, on the host
        default_bytes = b"" if default_value is None else default_value
        if not isinstance(default_bytes, (bytes, str)):
            raise TypeError(f"Cannot convert {default_value!r} to EagerTensor of dtype string (argument "
                            "`default_value` of tf.sparse.to_dense)")
        out_strings = np.empty(shape, object)
        out_strings[...] = default_bytes.encode() if isinstance(default_bytes, str) else default_bytes
        ind = host_indices(sp_input, "tf.sparse.to_dense")
        ok = ((ind >= 0) & (ind < np.asarray(shape, np.int64))).all(axis=1)   # (TF drops out-of-bounds ones)
        for k in np.nonzero(ok)[0]:
            out_strings[tuple(ind[k])] = sp_input._values[k]
        return out_strings
    default = convert_to_tensor(0 if default_value is None else default_value, dtype=sp_input.dtype)
    out = bind(TO_DENSE, sp_input._indices, sp_input._values, default, shape=shape)
    assert isinstance(out, Tensor)
    return out


__all__ = ["CWISE_DIV", "CWISE_MUL", "SparseParts", "SparseTensor", "SparseTensorSpec", "TO_DENSE", "TracedSparseError", "check_indices", "cwise", "host_indices",
           "host_string_values", "index_dtype", "is_traced", "to_dense"]
