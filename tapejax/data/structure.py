"""Element structures: tf.data's nesting rules, component specs and host copies of components.

tf.data nests differently from ``tf.nest``: tuples (namedtuples too) and dicts are structure, but a
*list* is a value (``from_tensor_slices([[1, 2], [3, 4]])`` slices one 2x2 tensor), and dicts
flatten in sorted key order.  ``None`` is a component of its own (``NoneTensorSpec``).

Inside a pipeline an element is a flat tuple of *components* (NumPy arrays, CPU ``jax.Array`` s, or
None) in ``flatten`` order; the structure lives once, in the dataset's ``element_spec`` (the same
nesting with a spec per component), and ``pack`` rebuilds it only when an element is handed to
the user.  A component's dtype is the one a tapejax Tensor of it has (``to_component``: TF's
conversion rules, int64 held as int32 without JAX's 64-bit mode, float64 only with it).

A *string component* (``strings``: file names, text lines, binary records) is host bytes: a
Python ``bytes`` at rank 0, a NumPy object array of ``bytes`` at higher ranks (TF's
``as_numpy_iterator`` form), never NumPy ``S`` values, which drop trailing NUL bytes
(``np.bytes_(b"a\\x00") == b"a"``).  ``is_bytes``, ``string_value``, ``stack_strings`` and
``encode_strings`` / ``decode_strings`` (an npz-storable form) keep every byte.
"""
from typing import Any, Callable, List, Optional, Sequence, Union

import jax
import numpy as np

from ..compile.signature import TensorSpec
from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..ops.ragged_tensor import RaggedTensor, RaggedTensorSpec
from ..ops.sparse_tensor import SparseTensor, SparseTensorSpec
from . import ragged_elements as _rg, sparse_elements as _sp


class NoneTensorSpec:
    """The spec of a ``None`` component (TF's ``NoneTensorSpec``): it stays None through the
    pipeline (batching, zipping ...)."""

    __slots__ = ()

    shape = None
    dtype = None

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, NoneTensorSpec)

    def __hash__(self) -> int:
        return hash(NoneTensorSpec)

    def __repr__(self) -> str:
        return "NoneTensorSpec()"


class DatasetSpec:
    """``tf.data.DatasetSpec(element_spec, dataset_shape=())``: the type of a Dataset (its
    ``element_spec``), also the spec of a component that is itself a Dataset (``window``'s
    elements).  ``Dataset._type_spec`` and ``tf.type_spec_from_value(dataset)`` give one."""

    def __init__(self, element_spec: Any, dataset_shape: Any = ()):
        self.element_spec = element_spec
        self._dataset_shape = tuple(None if d is None else int(d) for d in dataset_shape)
        self.shape = self._dataset_shape
        self.dtype = None

    @staticmethod
    def from_value(value: Any) -> "DatasetSpec":
        """The spec of Dataset ``value`` (TypeError naming the argument otherwise)."""
        if not hasattr(type(value), "_build_stream"):
            raise TypeError(f"DatasetSpec.from_value: argument `value` must be a tf.data.Dataset; got {value!r}")
        return DatasetSpec(value.element_spec)

    def is_compatible_with(self, other: Any) -> bool:
        """Whether ``other`` (a DatasetSpec or a Dataset) has a compatible element structure and specs."""
        if hasattr(type(other), "_build_stream"):
            other = DatasetSpec(other.element_spec)
        return isinstance(other, DatasetSpec) and other._dataset_shape == self._dataset_shape and \
            _compatible(self.element_spec, other.element_spec)

    def _binds(self, value: Any) -> bool:
        """TF's ``input_signature`` rule for a DatasetSpec: any Dataset binds (its element spec is
        not checked); anything else is a TypeError."""
        return hasattr(type(value), "_build_stream")

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, DatasetSpec) and other.element_spec == self.element_spec and \
            other._dataset_shape == self._dataset_shape

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        return f"DatasetSpec({self.element_spec!r}, TensorShape({list(self._dataset_shape)}))"


class IteratorSpec:
    """``tf.data.IteratorSpec(element_spec)``: the type of an iterator (``Iterator._type_spec``,
    ``tf.type_spec_from_value(iterator)``); as TF's, the element spec is ``_element_spec``."""

    def __init__(self, element_spec: Any):
        self._element_spec = element_spec

    @staticmethod
    def from_value(value: Any) -> "IteratorSpec":
        """The spec of iterator ``value`` (TypeError naming the argument otherwise)."""
        spec = getattr(value, "_type_spec", None)
        if not isinstance(spec, IteratorSpec):
            raise TypeError(f"IteratorSpec.from_value: argument `value` must be a tf.data.Iterator; got {value!r}")
        return spec

    def is_compatible_with(self, other: Any) -> bool:
        """Whether ``other`` (an IteratorSpec or an iterator) has a compatible element structure and specs."""
        other = getattr(other, "_type_spec", other)
        return isinstance(other, IteratorSpec) and _compatible(self._element_spec, other._element_spec)

    def _binding_error(self, value: Any, message: str) -> Exception:
        """TF's error for an ``input_signature`` argument this spec does not accept: an iterator
        whose elements nest the same way but differ in dtype or shape fails when read, with
        InvalidArgumentError ("Data type mismatch"); anything else is a TypeError."""
        other = getattr(value, "_type_spec", None)
        if isinstance(other, IteratorSpec) and same_structure(self._element_spec, other._element_spec):
            return InvalidArgumentError(None, None, message + f" Its elements are {other._element_spec!r}.")
        return TypeError(message)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, IteratorSpec) and other._element_spec == self._element_spec

    def __hash__(self) -> int:
        return hash(repr(self))

    def __repr__(self) -> str:
        return f"IteratorSpec({self._element_spec!r},)"


def _compatible(a: Any, b: Any) -> bool:
    """Two element specs with the same nesting whose component specs are compatible."""
    if not same_structure(a, b):
        return False
    for x, y in zip(flatten(a), flatten(b)):
        if hasattr(x, "is_compatible_with"):
            if not x.is_compatible_with(y):
                return False
        elif x != y:
            return False
    return True


Spec = Union[TensorSpec, NoneTensorSpec, SparseTensorSpec, RaggedTensorSpec]


# -- nesting -------------------------------------------------------------------

def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def is_structure(x: Any) -> bool:
    """Whether ``x`` is structure (a tuple, namedtuple or dict) rather than a component."""
    return isinstance(x, (tuple, dict))


def flatten(x: Any) -> List[Any]:
    """The components of ``x`` in tf.data's order (dicts by sorted key)."""
    if not isinstance(x, (tuple, dict)):
        return [x]
    out: List[Any] = []
    _flatten_into(x, out)
    return out


def _flatten_into(x: Any, out: List[Any]) -> None:
    if isinstance(x, dict):
        for k in sorted(x):
            _flatten_into(x[k], out)
    elif isinstance(x, tuple):
        for v in x:
            _flatten_into(v, out)
    else:
        out.append(x)


def pack(structure: Any, components: Sequence[Any]) -> Any:
    """``structure`` rebuilt with ``components`` (in ``flatten`` order) as its leaves."""
    if not isinstance(structure, (tuple, dict)):
        return components[0]
    it = iter(components)
    return _pack(structure, it)


def _pack(x: Any, it: Any) -> Any:
    if isinstance(x, dict):
        packed = {k: _pack(x[k], it) for k in sorted(x)}
        return type(x)((k, packed[k]) for k in x)
    if _is_namedtuple(x):
        return type(x)(*[_pack(v, it) for v in x])
    if isinstance(x, tuple):
        return tuple(_pack(v, it) for v in x)
    return next(it)


def map_structure(fn: Callable[[Any], Any], x: Any) -> Any:
    return pack(x, [fn(v) for v in flatten(x)])


def same_structure(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` nest the same way (types of structure, dict keys, lengths)."""
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and sorted(a) == sorted(b)
                and all(same_structure(a[k], b[k]) for k in a))
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
                and _is_namedtuple(a) == _is_namedtuple(b) and all(same_structure(x, y) for x, y in zip(a, b)))
    return True


def describe(spec_structure: Any) -> str:
    """A structure of specs as TF prints it in messages: ``(tf.int32, tf.float32)``."""
    return repr(map_structure(lambda s: "None" if isinstance(s, NoneTensorSpec) else s.dtype, spec_structure))


# -- components ----------------------------------------------------------------

def to_component(value: Any, device: bool = False) -> Any:
    """A private copy of one component, in the dtype its tapejax Tensor has (TF's rules: Python
    floats float32, ints int32; NumPy dtypes kept; int64 as int32 without x64; float64 an error
    without x64; another library's array through ``convert_to_tensor``): a NumPy array, or with
    ``device`` the ``jax.Array`` (on the default device) it was made as."""
    if value is None:
        return None
    if isinstance(value, SparseTensor):   # (a host SparseValue: ``sparse_elements``)
        return _sp.from_sparse(value)
    if isinstance(value, RaggedTensor):   # (a host RaggedValue: ``ragged_elements``)
        return _rg.from_ragged(value)
    if is_string_like(value):
        return string_value(value)   # (host bytes, never a device array: ``strings``)
    array = value.value if isinstance(value, Tensor) else convert_to_tensor(value).value
    return array if device else np.asarray(array)


def is_string_like(value: Any) -> bool:
    """Whether a component given to ``from_tensors`` / ``from_tensor_slices`` is string data (as
    TF's ``tf.string`` tensors): ``str`` / ``bytes``, a NumPy ``U`` / ``S`` array, an object
    array (empty, or of ``str`` / ``bytes``) or a (nested) list of ``str`` / ``bytes``.  A list or
    object array mixing strings with other values: TF's ValueError."""
    if isinstance(value, (str, bytes)):
        return True
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "US":
            return True
        return value.dtype.kind == "O" and _all_strings(value)
    if isinstance(value, list) and value:
        try:
            a = np.asarray(value, dtype=object)
        except ValueError:   # (ragged nesting: not a tensor either)
            return False
        return _all_strings(a)
    return False


def _all_strings(a: np.ndarray) -> bool:
    kinds = {isinstance(v, (str, bytes)) for v in a.flat}
    if kinds == {True, False}:
        raise ValueError("Can't convert Python sequence with mixed types to Tensor.")
    return kinds != {False}   # (an empty object array is a string tensor, as in TF)


def spec_of(component: Any) -> Spec:
    """The spec of one component (an array, or None)."""
    if component is None:
        return NoneTensorSpec()
    if isinstance(component, _sp.SparseValue):
        return _sp.spec(component)
    if isinstance(component, _rg.RaggedValue):
        return _rg.spec(component)
    if is_bytes(component):
        return string_spec(string_shape(component))
    return TensorSpec(tuple(component.shape), _dtypes.as_dtype(component.dtype))


def batched(spec: Spec, size: Optional[int]) -> Spec:
    """``spec`` with a leading batch dimension (None: unknown size)."""
    if isinstance(spec, NoneTensorSpec):
        return spec
    if isinstance(spec, SparseTensorSpec):
        return _sp.batched(spec, size)
    if isinstance(spec, RaggedTensorSpec):
        return _rg.batched(spec, size)
    shape = None if spec.shape is None else (size,) + tuple(spec.shape)
    return TensorSpec(shape, spec.dtype)


def unbatched(spec: Spec) -> Spec:
    if isinstance(spec, SparseTensorSpec):
        return _sp.unbatched(spec)
    if isinstance(spec, RaggedTensorSpec):
        return _rg.unbatched(spec)
    if isinstance(spec, NoneTensorSpec) or spec.shape is None:
        return spec
    return TensorSpec(tuple(spec.shape)[1:], spec.dtype)


def with_shape(spec: Spec, shape: Optional[Sequence[Optional[int]]]) -> Spec:
    if isinstance(spec, NoneTensorSpec):
        return spec
    return TensorSpec(None if shape is None else tuple(shape), spec.dtype)


def combine(a: Spec, b: Spec) -> Optional[Spec]:
    """The most specific spec both ``a`` and ``b`` fit (dimensions that differ become None), or
    None when they cannot be one component (dtype, rank or None-ness differ)."""
    if isinstance(a, NoneTensorSpec) or isinstance(b, NoneTensorSpec):
        return a if isinstance(a, NoneTensorSpec) and isinstance(b, NoneTensorSpec) else None
    if isinstance(a, SparseTensorSpec) or isinstance(b, SparseTensorSpec):
        return _sp.combine(a, b) if isinstance(a, SparseTensorSpec) else None
    if isinstance(a, RaggedTensorSpec) or isinstance(b, RaggedTensorSpec):
        return _rg.combine(a, b) if isinstance(a, RaggedTensorSpec) else None
    if a.dtype != b.dtype:
        return None
    if a.shape is None or b.shape is None:
        return TensorSpec(None, a.dtype)
    if len(a.shape) != len(b.shape):
        return TensorSpec(None, a.dtype)
    return TensorSpec(tuple(x if x == y else None for x, y in zip(a.shape, b.shape)), a.dtype)


def shape_fits(shape: Sequence[int], spec: TensorSpec) -> bool:
    """Whether a concrete ``shape`` fits ``spec``'s (None dimensions take any size)."""
    if spec.shape is None:
        return True
    return len(shape) == len(spec.shape) and all(s is None or s == d for s, d in zip(spec.shape, shape))


def host_dtype(spec: Spec) -> Optional[np.dtype]:
    return None if isinstance(spec, NoneTensorSpec) else np.dtype(spec.dtype._np)


def numpy_value(component: Any) -> Any:
    """A component as ``as_numpy_iterator`` gives it: an ndarray, or a NumPy scalar at rank 0
    (a string: ``bytes``, or an object array of ``bytes``, as TF's; a SparseTensor: its dense
    array, as TF 2.21's)."""
    if component is None or is_bytes(component):
        return component
    if isinstance(component, _sp.SparseValue):   # (TF 2.21's as_numpy_iterator densifies a SparseTensor)
        return _sp.dense(component)
    if isinstance(component, _rg.RaggedValue):   # (TF's RaggedTensor.numpy(): rows, an object array if ragged)
        return component.numpy()
    a = np.asarray(component)
    return a[()] if a.ndim == 0 else a


def is_array(x: Any) -> bool:
    return isinstance(x, (np.ndarray, jax.Array))


# -- string components -----------------------------------------------------------

#: The dtype of a string component: TF's ``tf.string`` (``core.dtypes.string``), held as ``bytes``
#: (object arrays of them) on the host.
StringDType = _dtypes.StringDType
STRING = _dtypes.string


def string_spec(shape: Optional[Sequence[Optional[int]]] = ()) -> TensorSpec:
    return TensorSpec(None if shape is None else list(shape), STRING)


def is_string(spec: Any) -> bool:
    return isinstance(spec, TensorSpec) and isinstance(spec.dtype, StringDType)




def is_bytes(component: Any) -> bool:
    """Whether a component is a string component's value (``bytes``, or an object / ``S`` array)."""
    return isinstance(component, bytes) or (isinstance(component, np.ndarray) and component.dtype.kind in "OS")


def _one_string(v: Any) -> bytes:
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, bytes):
        return bytes(v)   # (an ``np.bytes_`` becomes a plain ``bytes``)
    raise TypeError(f"A string component holds bytes or str values; got {v!r} of type {type(v).__name__}.")


def string_value(value: Any) -> Any:
    """``value`` (``bytes``, ``str``, NumPy bytes, an ``S`` / ``U`` / object array, nested lists of
    them) as a string component's value: ``bytes`` at rank 0, else an object array of ``bytes``.
    (An ``S`` array has already lost its values' trailing NUL bytes: make none.)"""
    if isinstance(value, (bytes, str)):
        return _one_string(value)
    a = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=object)
    if a.ndim == 0:
        return _one_string(a[()])
    out = np.empty(a.shape, object)
    for index, v in np.ndenumerate(a):
        out[index] = _one_string(v)
    return out


def stack_strings(components: Sequence[Any]) -> np.ndarray:
    """String components of one shape stacked on a new leading axis (an object array; ValueError
    when their shapes differ)."""
    shape = np.shape(components[0]) if not isinstance(components[0], bytes) else ()
    out = np.empty((len(components),) + tuple(shape), object)
    for i, c in enumerate(components):
        if (() if isinstance(c, bytes) else np.shape(c)) != shape:
            raise ValueError("shapes differ")
        out[i] = c
    return out


def string_shape(component: Any) -> tuple:
    return () if isinstance(component, bytes) else tuple(np.shape(component))


def encode_strings(value: Any) -> "tuple[np.ndarray, np.ndarray]":
    """A string component as two numeric arrays (storable with ``allow_pickle=False``): its values'
    bytes concatenated (uint8) and their lengths (int64, the component's shape)."""
    if isinstance(value, bytes):
        return np.frombuffer(value, np.uint8).copy(), np.asarray(len(value), np.int64)
    flat = [bytes(v) for v in np.asarray(value, dtype=object).reshape(-1)]
    lengths = np.asarray([len(v) for v in flat], np.int64).reshape(np.shape(value))
    return np.frombuffer(b"".join(flat), np.uint8).copy(), lengths


def decode_strings(data: np.ndarray, lengths: np.ndarray) -> Any:
    """``encode_strings``' inverse."""
    raw = np.asarray(data, np.uint8).tobytes()
    lengths = np.asarray(lengths, np.int64)
    if lengths.ndim == 0:
        return raw
    ends = np.cumsum(lengths.reshape(-1))
    out = np.empty(lengths.size, object)
    for i, (start, end) in enumerate(zip(np.concatenate([[0], ends[:-1]]), ends)):
        out[i] = raw[int(start):int(end)]
    return out.reshape(lengths.shape)
