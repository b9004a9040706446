"""``tf.RaggedTensor`` and ``tf.RaggedTensorSpec``: rows of varying length as dense Tensors.

As TF's, a RaggedTensor is ``values`` (a Tensor, or a RaggedTensor for more ragged dimensions)
partitioned into rows by ``row_splits`` (``ops.ragged_partition``): row ``i`` is
``values[row_splits[i]:row_splits[i + 1]]``.  The innermost values are ``flat_values``; the
partitions, outermost first, ``nested_row_splits``.  Both are ordinary Tensors, so every op on a
RaggedTensor is ordinary recorded ops on them (``ops.ragged_ops``, ``ops.ragged_math``): a tape
differentiates with respect to a Tensor that fed ``flat_values`` and gives None for the partitions
(integer Tensors), as TF's.

**Shapes.**  Every length of a Tensor is static in JAX, so the number of rows of each level is
static and ``.shape`` is ``[nrows, None, ..., inner dims]`` (None for the ragged dimensions, as
TF's).  Results whose shape depends on the partition's *values* (``to_tensor``'s bounding shape,
``rt[i]``, row slices, ``tf.gather`` of rows, ``from_value_rowids`` without ``nrows``) read the
partition on the host and gather the values with a recorded op (so gradients flow: TF's gradient
of a gather is a scatter back); inside a ``tapejax.function`` trace they raise ValueError
(``TracedRaggedError``), except ``to_tensor`` given a full static ``shape``.  Row-count-preserving
ops (elementwise math, reductions over the ragged dimension, ``row_lengths``, ``value_rowids``)
are static and trace.

A RaggedTensor is a JAX pytree (children: values and row_splits).  It is not a dense Tensor: its
registered conversion refuses (ValueError, as TF's), ``tf.is_tensor`` is True.  Python operators
dispatch to ``ops.ragged_math`` (``OPERATORS``, filled there).
"""
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Union, cast

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind, define
from ..core.conversion import register_tensor_conversion_function
from ..core.convert import convert_to_tensor
from ..core.tensor import Tensor, TensorShape
from . import ragged_partition as _rp
from .sparse_tensor import is_traced

#: Python operator name -> function (``__add__`` ...), filled by ``ops.ragged_math``; and the dense
#: conversions and indexing (``from_tensor``, ``to_tensor``, ``__getitem__`` ...), filled by
#: ``ops.ragged_dense``, which builds on this class.
OPERATORS: Dict[str, Callable[..., Any]] = {}

GATHER = define("RaggedGatherValues", lambda values, sel: values[sel])
FLATTEN = define("RaggedFlattenDense", lambda x, *, shape: x.reshape(shape))


def _to_dense(values, splits, default, *, shape):
    rows = _rp._splits_to_rowids(splits, n=values.shape[0])
    cols = jnp.arange(values.shape[0], dtype=splits.dtype) - splits[rows]
    inner = tuple(shape[2:])
    if tuple(values.shape[1:]) != inner:   # a requested inner shape: crop, then pad with the default
        crop = values[(slice(None),) + tuple(slice(0, d) for d in inner)]
        base = jnp.broadcast_to(default, (values.shape[0],) + inner).astype(values.dtype)
        values = base.at[(slice(None),) + tuple(slice(0, d) for d in crop.shape[1:])].set(crop)
    out = jnp.broadcast_to(default, tuple(shape)).astype(values.dtype)
    return out.at[rows, cols].set(values, mode="drop")


TO_DENSE = define("RaggedTensorToTensor", _to_dense)


def dim(t: Any, i: int) -> int:
    """Dimension ``i`` of Tensor ``t``'s static shape (every Tensor dimension is known)."""
    return cast(int, t.shape[i])


def _nvals(values: "Union[Tensor, RaggedTensor]") -> int:
    return values.nrows_static if isinstance(values, RaggedTensor) else dim(values, 0)


def values_arg(values: Any, arg: str = "values") -> "Union[Tensor, RaggedTensor]":
    if isinstance(values, (Tensor, RaggedTensor)):
        v = values
    else:
        v = convert_to_tensor(values)
    if isinstance(v, Tensor) and v.ndim == 0:
        raise ValueError(f"Shape () must have rank at least 1 (argument `{arg}` of a RaggedTensor)")
    return v


class RaggedTensor:
    """``tf.RaggedTensor`` (see the module docstring); made by its ``from_*`` factories."""

    __slots__ = ("_values", "_row_splits", "_splits_dtype", "_uniform", "__weakref__")

    #: ``tf.is_tensor`` is True for a RaggedTensor, as TF's (``core.convert.is_tensor``)
    _tapejax_composite = True
    # the Python operators TF defines (installed from ``OPERATOR_NAMES`` below, run by ``ragged_math``)
    __add__: Callable[..., Any]
    __radd__: Callable[..., Any]
    __sub__: Callable[..., Any]
    __rsub__: Callable[..., Any]
    __mul__: Callable[..., Any]
    __rmul__: Callable[..., Any]
    __truediv__: Callable[..., Any]
    __rtruediv__: Callable[..., Any]
    __floordiv__: Callable[..., Any]
    __rfloordiv__: Callable[..., Any]
    __mod__: Callable[..., Any]
    __rmod__: Callable[..., Any]
    __pow__: Callable[..., Any]
    __rpow__: Callable[..., Any]
    __neg__: Callable[..., Any]
    __abs__: Callable[..., Any]
    __invert__: Callable[..., Any]
    __and__: Callable[..., Any]
    __rand__: Callable[..., Any]
    __or__: Callable[..., Any]
    __ror__: Callable[..., Any]
    __lt__: Callable[..., Any]
    __le__: Callable[..., Any]
    __gt__: Callable[..., Any]
    __ge__: Callable[..., Any]
    __eq__: Callable[..., Any]
    __ne__: Callable[..., Any]

    def __init__(self, values: Any = None, row_partition: Any = None, internal: bool = False):
        raise ValueError("RaggedTensor constructor is private; please use one of the factory methods instead "
                         "(e.g., RaggedTensor.from_row_lengths())")

    @classmethod
    def _of(cls, values: "Union[Tensor, RaggedTensor]", splits: Tensor, splits_dtype: _dtypes.DType,
            uniform: Optional[int] = None) -> "RaggedTensor":
        """One made by the library from checked parts; ``uniform``: every row has this static length
        (TF's ``uniform_row_length``, as ``from_tensor`` makes: ``.shape`` shows it)."""
        out = cls.__new__(cls)
        out._values, out._row_splits, out._splits_dtype, out._uniform = values, splits, splits_dtype, uniform
        return out

    @staticmethod
    def _inner_dtype(values: Any) -> Optional[_dtypes.DType]:
        return values._splits_dtype if isinstance(values, RaggedTensor) else None

    # -- factories ------------------------------------------------------------------------
    @classmethod
    def from_row_splits(cls, values: Any, row_splits: Any, name: Any = None, validate: bool = True) -> "RaggedTensor":
        v = values_arg(values)
        splits, sd = _rp.partition_arg(row_splits, "row_splits", cls._inner_dtype(v))
        if validate or splits.shape[0] == 0:
            _rp.validate_splits(splits, _nvals(v), "from_row_splits")
        return cls._of(v, splits, sd)

    @classmethod
    def from_row_lengths(cls, values: Any, row_lengths: Any, name: Any = None, validate: bool = True) -> "RaggedTensor":
        v = values_arg(values)
        lengths, sd = _rp.partition_arg(row_lengths, "row_lengths", cls._inner_dtype(v))
        return cls._of(v, _rp.from_lengths(lengths, _nvals(v), "from_row_lengths", validate), sd)

    @classmethod
    def from_value_rowids(cls, values: Any, value_rowids: Any, nrows: Any = None, name: Any = None,
                          validate: bool = True) -> "RaggedTensor":
        v = values_arg(values)
        ids, sd = _rp.partition_arg(value_rowids, "value_rowids", cls._inner_dtype(v))
        return cls._of(v, _rp.from_rowids(ids, nrows, _nvals(v), "from_value_rowids", validate), sd)

    @classmethod
    def from_row_starts(cls, values: Any, row_starts: Any, name: Any = None, validate: bool = True) -> "RaggedTensor":
        v = values_arg(values)
        starts, sd = _rp.partition_arg(row_starts, "row_starts", cls._inner_dtype(v))
        splits = bind(_rp.STARTS_TO_SPLITS, starts, n=_nvals(v))
        if validate:
            _rp.validate_splits(splits, _nvals(v), "from_row_starts", "row_starts")
        return cls._of(v, splits, sd)

    @classmethod
    def from_row_limits(cls, values: Any, row_limits: Any, name: Any = None, validate: bool = True) -> "RaggedTensor":
        v = values_arg(values)
        limits, sd = _rp.partition_arg(row_limits, "row_limits", cls._inner_dtype(v))
        splits = bind(_rp.LIMITS_TO_SPLITS, limits)
        if validate:
            _rp.validate_splits(splits, _nvals(v), "from_row_limits", "row_limits")
        return cls._of(v, splits, sd)

    @classmethod
    def from_uniform_row_length(cls, values: Any, uniform_row_length: Any, nrows: Any = None, validate: bool = True,
                                name: Any = None) -> "RaggedTensor":
        """Rows of ``uniform_row_length`` values each (a static length: ``.shape`` shows it)."""
        v = values_arg(values)
        length = uniform_row_length
        if isinstance(length, Tensor):
            length = _rp.host_splits(length, "from_uniform_row_length's `uniform_row_length`").reshape(())
        length, nvals = int(length), _nvals(v)
        if length < 0:
            raise ValueError(f"uniform_row_length must be >= 0; got {length} (argument `uniform_row_length`)")
        if nrows is None:
            if length == 0:
                raise ValueError("from_uniform_row_length: `nrows` is needed when uniform_row_length is 0")
            nrows = nvals // length
        nrows = int(_rp.host_splits(nrows, "from_uniform_row_length's `nrows`").reshape(())
                    if isinstance(nrows, Tensor) else nrows)
        if length * nrows != nvals:
            raise ValueError(f"uniform_row_length={length} times nrows={nrows} must equal nvals={nvals}")
        sd = cls._inner_dtype(v) or _dtypes.int64
        with jax.ensure_compile_time_eval():
            splits = convert_to_tensor(np.arange(nrows + 1, dtype=np.int64) * length, dtype=sd)
        return cls._of(v, splits, sd, length)

    @classmethod
    def from_sparse(cls, st_input: Any, name: Any = None, row_splits_dtype: Any = _dtypes.int64) -> "RaggedTensor":
        return OPERATORS["from_sparse"](st_input, row_splits_dtype)

    @classmethod
    def _nested(cls, factory: Callable[..., "RaggedTensor"], flat_values: Any, partitions: Any, arg: str,
                validate: bool) -> "RaggedTensor":
        if isinstance(partitions, (Tensor, np.ndarray)) or not isinstance(partitions, (list, tuple)):
            raise TypeError(f"`{arg}` must be a list of Tensors; got {type(partitions).__name__}")
        result: Any = values_arg(flat_values, "flat_values")
        for p in reversed(list(partitions)):
            result = factory(result, p, validate=validate)
        return result

    @classmethod
    def from_nested_row_splits(cls, flat_values: Any, nested_row_splits: Any, name: Any = None,
                               validate: bool = True) -> "RaggedTensor":
        return cls._nested(cls.from_row_splits, flat_values, nested_row_splits, "nested_row_splits", validate)

    @classmethod
    def from_nested_row_lengths(cls, flat_values: Any, nested_row_lengths: Any, name: Any = None,
                                validate: bool = True) -> "RaggedTensor":
        return cls._nested(cls.from_row_lengths, flat_values, nested_row_lengths, "nested_row_lengths", validate)

    @classmethod
    def from_nested_value_rowids(cls, flat_values: Any, nested_value_rowids: Any, nested_nrows: Any = None,
                                 name: Any = None, validate: bool = True) -> "RaggedTensor":
        ids = list(nested_value_rowids)
        nrows = [None] * len(ids) if nested_nrows is None else list(nested_nrows)
        if len(nrows) != len(ids):
            raise ValueError("`nested_value_rowids` and `nested_nrows` must have the same length")
        result: Any = values_arg(flat_values, "flat_values")
        for i, n in reversed(list(zip(ids, nrows))):
            result = cls.from_value_rowids(result, i, n, validate=validate)
        return result

    @classmethod
    def from_tensor(cls, tensor: Any, lengths: Any = None, padding: Any = None, ragged_rank: int = 1,
                    name: Any = None, row_splits_dtype: Any = _dtypes.int64) -> "RaggedTensor":
        return OPERATORS["from_tensor"](tensor, lengths, padding, ragged_rank, row_splits_dtype)

    # -- TF's attributes --------------------------------------------------------------------
    @property
    def values(self) -> "Union[Tensor, RaggedTensor]":
        return self._values

    @property
    def flat_values(self) -> Tensor:
        v: Any = self._values
        while isinstance(v, RaggedTensor):
            v = v._values
        return v

    @property
    def row_splits(self) -> Tensor:
        return self._row_splits

    @property
    def nested_row_splits(self) -> tuple:
        out, rt = [], self
        while isinstance(rt, RaggedTensor):
            out.append(rt._row_splits)
            rt = rt._values
        return tuple(out)

    @property
    def ragged_rank(self) -> int:
        return 1 + (self._values.ragged_rank if isinstance(self._values, RaggedTensor) else 0)

    @property
    def dtype(self) -> _dtypes.DType:
        return self.flat_values.dtype

    @property
    def row_splits_dtype(self) -> _dtypes.DType:
        return self._splits_dtype

    @property
    def nrows_static(self) -> int:
        return int(self._row_splits.shape[0]) - 1

    @property
    def shape(self) -> TensorShape:
        return TensorShape((self.nrows_static, self._uniform) + tuple(self._values.shape[1:]))

    def get_shape(self) -> TensorShape:
        return self.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def _type_spec(self) -> "RaggedTensorSpec":
        return RaggedTensorSpec(self.shape, self.dtype, self.ragged_rank, self._splits_dtype)

    def nrows(self, out_type: Any = None, name: Any = None) -> Tensor:
        dt = _dtypes.as_dtype(out_type) if out_type is not None else self._splits_dtype
        with jax.ensure_compile_time_eval():
            return convert_to_tensor(self.nrows_static, dtype=dt)

    def row_lengths(self, axis: int = 1, name: Any = None) -> Union[Tensor, "RaggedTensor"]:
        if axis == 0:
            raise ValueError("axis=0 is not a ragged axis: use nrows() (argument `axis` of row_lengths)")
        if axis in (1, -self.ndim + 1):
            return bind(_rp.SPLITS_TO_LENGTHS, self._row_splits)
        if not isinstance(self._values, RaggedTensor):
            raise ValueError(f"axis={axis} is not a ragged dimension of a RaggedTensor with ragged_rank "
                             f"{self.ragged_rank} (argument `axis` of row_lengths)")
        return self.with_values(self._values.row_lengths(axis - 1 if axis > 0 else axis))

    def nested_row_lengths(self, name: Any = None) -> tuple:
        return tuple(bind(_rp.SPLITS_TO_LENGTHS, s) for s in self.nested_row_splits)

    def value_rowids(self, name: Any = None) -> Tensor:
        return _rp.segment_ids(self._row_splits, _nvals(self._values))

    def nested_value_rowids(self, name: Any = None) -> tuple:
        out, rt = [], self
        while isinstance(rt, RaggedTensor):
            out.append(rt.value_rowids())
            rt = rt._values
        return tuple(out)

    def row_starts(self, name: Any = None) -> Tensor:
        return bind(_rp.SPLITS_HEAD, self._row_splits)

    def row_limits(self, name: Any = None) -> Tensor:
        return bind(_rp.SPLITS_TAIL, self._row_splits)

    def bounding_shape(self, axis: Any = None, name: Any = None, out_type: Any = None) -> Tensor:
        """The smallest dense shape holding every row (read on the host)."""
        dims = self.host_bounding_shape("RaggedTensor.bounding_shape")
        dt = _dtypes.as_dtype(out_type) if out_type is not None else self._splits_dtype
        if axis is not None:
            return convert_to_tensor(np.asarray(dims, np.int64)[axis], dtype=dt)
        return convert_to_tensor(np.asarray(dims, np.int64), dtype=dt)

    def host_bounding_shape(self, op: str) -> List[int]:
        dims: List[int] = [self.nrows_static]
        rt: Any = self
        while isinstance(rt, RaggedTensor):
            s = _rp.host_splits(rt._row_splits, op)
            dims.append(int(np.diff(s).max()) if s.size > 1 else 0)
            rt = rt._values
        return dims + list(rt.shape[1:])

    @property
    def uniform_row_length(self) -> Optional[Tensor]:
        """The static length of every row (``from_uniform_row_length``, ``from_tensor``), or None."""
        if self._uniform is None:
            return None
        with jax.ensure_compile_time_eval():
            return convert_to_tensor(self._uniform, dtype=self._splits_dtype)

    def merge_dims(self, outer_axis: int, inner_axis: int) -> Union[Tensor, "RaggedTensor"]:
        return OPERATORS["merge_dims"](self, outer_axis, inner_axis)

    def to_sparse(self, name: Any = None) -> Any:
        return OPERATORS["to_sparse"](self)

    def with_values(self, new_values: Any) -> "RaggedTensor":
        v = values_arg(new_values, "new_values")
        if _nvals(v) != _nvals(self._values):
            raise ValueError(f"Dimensions {_nvals(v)} and {_nvals(self._values)} are not compatible (`new_values` of "
                             "with_values must have as many rows as the values)")
        if isinstance(v, RaggedTensor) and v._splits_dtype != self._splits_dtype:
            raise ValueError("`new_values` has a different row_splits dtype than this RaggedTensor")
        return RaggedTensor._of(v, self._row_splits, self._splits_dtype, self._uniform)

    def with_flat_values(self, new_values: Any) -> "RaggedTensor":
        if isinstance(self._values, RaggedTensor):
            return self.with_values(self._values.with_flat_values(new_values))
        return self.with_values(new_values)

    def with_row_splits_dtype(self, dtype: Any) -> "RaggedTensor":
        d = _rp.splits_dtype_arg(dtype, "dtype")
        v = self._values.with_row_splits_dtype(d) if isinstance(self._values, RaggedTensor) else self._values
        splits = self._row_splits
        store = np.dtype(_rp.storage(d)).name
        if splits.dtype.name != store:
            splits = bind(_rp.SPLITS_CAST, splits, dtype=store)
        return RaggedTensor._of(v, splits, d, self._uniform)

    def to_tensor(self, default_value: Any = None, name: Any = None, shape: Any = None) -> Tensor:
        return OPERATORS["to_tensor"](self, default_value, shape)

    def to_list(self) -> list:
        """The rows as nested Python lists (read on the host)."""
        splits = [_rp.host_splits(s, "RaggedTensor.to_list") for s in self.nested_row_splits]
        return _host_rows(np.asarray(self.flat_values.numpy()), splits)

    def numpy(self) -> np.ndarray:
        """TF's: a NumPy object array of the rows (each a NumPy array, or an object array for more
        ragged dimensions)."""
        splits = [_rp.host_splits(s, "RaggedTensor.numpy") for s in self.nested_row_splits]
        return _host_arrays(np.asarray(self.flat_values.numpy()), splits)

    def __getitem__(self, key: Any) -> Any:
        return OPERATORS["__getitem__"](self, key)

    def __len__(self) -> int:
        return self.nrows_static

    def __iter__(self):
        for i in range(self.nrows_static):
            yield self[i]

    def __bool__(self) -> bool:
        raise TypeError("RaggedTensor may not be used as a boolean.")

    @property
    def op(self):
        raise AttributeError("Tensor.op is undefined when eager execution is enabled.")

    def consumers(self) -> list:
        return []

    def __repr__(self) -> str:
        if any(is_traced(s) for s in self.nested_row_splits) or is_traced(self.flat_values):
            return f"tf.RaggedTensor(values={self._values!r}, row_splits={self._row_splits!r})"
        return f"<tf.RaggedTensor {self.to_list()}>"

    __str__ = __repr__


def _operator(name: str) -> Callable[..., Any]:
    def op(self, *args):
        return OPERATORS[name](self, *args)
    op.__name__ = name
    return op


#: the Python operators TF defines on RaggedTensor (each dispatched to ``ops.ragged_math``)
OPERATOR_NAMES = tuple(n for n in RaggedTensor.__annotations__ if n.startswith("__"))
for _name in OPERATOR_NAMES:
    setattr(RaggedTensor, _name, _operator(_name))
RaggedTensor.__hash__ = None   # type: ignore[assignment]  (== is elementwise, as TF's: unhashable)


def _host_rows(flat: np.ndarray, splits: List[np.ndarray]) -> list:
    if not splits:
        return flat.tolist()
    inner = _host_rows(flat, splits[1:])
    s = splits[0]
    return [inner[int(s[i]):int(s[i + 1])] for i in range(len(s) - 1)]


def _host_arrays(flat: np.ndarray, splits: List[np.ndarray]) -> np.ndarray:
    if not splits:
        return flat
    inner = _host_arrays(flat, splits[1:])
    s = splits[0]
    out = np.empty(len(s) - 1, dtype=object)
    for i in range(len(s) - 1):
        out[i] = inner[int(s[i]):int(s[i + 1])]
    return out


class RaggedTensorSpec:
    """``tf.RaggedTensorSpec(shape=None, dtype=float32, ragged_rank=None, row_splits_dtype=int64,
    flat_values_spec=None)``: the type of a RaggedTensor."""

    __slots__ = ("_dims", "_dtype", "_ragged_rank", "_splits_dtype")

    def __init__(self, shape: Any = None, dtype: Any = _dtypes.float32, ragged_rank: Optional[int] = None,
                 row_splits_dtype: Any = _dtypes.int64, flat_values_spec: Any = None):
        dims = None if shape is None else tuple(
            None if d is None else int(d) for d in (shape.as_list() if hasattr(shape, "as_list") else shape))
        if ragged_rank is None:
            if dims is None:
                raise ValueError("Must specify ragged_rank or a shape with a known rank (arguments `ragged_rank`, "
                                 "`shape` of RaggedTensorSpec)")
            ragged_rank = len(dims) - 1
        if not isinstance(ragged_rank, int) or ragged_rank < 0:
            raise TypeError(f"ragged_rank must be an int >= 0; got {ragged_rank!r} (argument `ragged_rank`)")
        if dims is not None and ragged_rank >= len(dims):
            raise ValueError(f"ragged_rank must be smaller than rank, got ragged_rank={ragged_rank} and "
                             f"rank={len(dims)} (arguments `ragged_rank`, `shape` of RaggedTensorSpec)")
        if flat_values_spec is not None:
            dtype = flat_values_spec.dtype
        self._dims: Optional[tuple] = dims
        self._dtype = _dtypes.as_dtype(dtype)
        self._ragged_rank = ragged_rank
        self._splits_dtype = _rp.splits_dtype_arg(row_splits_dtype)

    @classmethod
    def from_value(cls, value: Any) -> "RaggedTensorSpec":
        if not isinstance(value, RaggedTensor):
            raise TypeError(f"Expected RaggedTensor, got {value!r}.")
        return value._type_spec

    @property
    def shape(self) -> Any:
        return None if self._dims is None else TensorShape(self._dims)

    @property
    def dtype(self) -> _dtypes.DType:
        return self._dtype

    @property
    def ragged_rank(self) -> int:
        return self._ragged_rank

    @property
    def row_splits_dtype(self) -> _dtypes.DType:
        return self._splits_dtype

    @property
    def value_type(self) -> type:
        return RaggedTensor

    def _key(self) -> tuple:
        return (self._dims, self._dtype.name, self._ragged_rank, self._splits_dtype.name)

    def is_compatible_with(self, other: Any) -> bool:
        if isinstance(other, RaggedTensor):
            other = other._type_spec
        if not isinstance(other, RaggedTensorSpec) or self._key()[1:] != other._key()[1:]:
            return False
        a, b = self._dims, other._dims
        return a is None or b is None or (len(a) == len(b) and all(
            x is None or y is None or x == y for x, y in zip(a, b)))

    def __eq__(self, other: Any) -> bool:
        return type(other) is RaggedTensorSpec and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(("RaggedTensorSpec",) + self._key())

    def __repr__(self) -> str:
        shape = "TensorShape(None)" if self._dims is None else f"TensorShape({list(self._dims)})"
        return f"RaggedTensorSpec({shape}, tf.{self._dtype.name}, {self._ragged_rank}, tf.{self._splits_dtype.name})"


class RaggedParts(NamedTuple):
    """A RaggedTensor taken apart for JAX (the pytree's static part): its row_splits dtype and
    uniform row length (None: ragged)."""
    splits_dtype: str
    uniform: Optional[int]


def _flatten(rt: RaggedTensor):
    return (rt._values, rt._row_splits), RaggedParts(rt._splits_dtype.name, rt._uniform)


def _unflatten(parts: RaggedParts, children) -> RaggedTensor:
    values, splits = children
    return RaggedTensor._of(values, splits, _dtypes.as_dtype(parts.splits_dtype), parts.uniform)


jax.tree_util.register_pytree_node(RaggedTensor, _flatten, _unflatten)


def _refuse_conversion(value: RaggedTensor, dtype: Any = None, name: Any = None, as_ref: bool = False) -> Any:
    """A RaggedTensor is not converted to a dense Tensor implicitly (TF's ValueError)."""
    raise ValueError(f"Attempt to convert a value ({value!r}) with an unsupported type ({type(value)}) to a Tensor: "
                     "a RaggedTensor is not densified implicitly; use rt.to_tensor(), or "
                     "tf.ragged.map_flat_values(op, rt) for an elementwise op on its values.")


register_tensor_conversion_function(RaggedTensor, _refuse_conversion, priority=0)


def flatten_dense(x: Tensor, leading: int) -> Tensor:
    """``x`` with its first ``leading`` dimensions merged into one (a recorded reshape)."""
    shape = (int(np.prod(x.shape[:leading], dtype=np.int64)),) + tuple(x.shape[leading:])
    return bind(FLATTEN, x, shape=shape)


__all__ = ["FLATTEN", "GATHER", "OPERATORS", "OPERATOR_NAMES", "RaggedParts", "RaggedTensor", "RaggedTensorSpec",
           "TO_DENSE", "dim", "flatten_dense", "values_arg"]
