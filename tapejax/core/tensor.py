"""``Tensor``: an immutable value (a ``jax.Array`` or a tracer) plus an int id.

The id is what tapes track: recording stores ids, never Tensor objects, so a
tape does not keep the user's Tensors alive and the hot path only hashes
ints.  Operators (``+``, ``@``, ``[]`` ...) are declared here and registered by
``tapejax.ops`` (``register_operators``), so every operator goes through the op
registry and its one entry point, ``bind``.  A Tensor is a pytree (its leaf is
the array), so it can be passed to ``jax.jit`` and ``jnp.asarray``.

``Pending`` is the Tensor whose value is computed later (deferred execution):
it holds a ``Lazy``, the interface the core knows of a value not computed yet;
``tapejax.runtime`` implements it.  Host data becomes arrays here too
(``host_snapshot``: a NumPy buffer is copied when an op is called, as TF reads
it then); ``convert_to_tensor`` is in ``convert`` (a list holding Tensors is
the recorded Pack op, above this module).
"""
from typing import Any, Callable, ClassVar, Iterator, Optional, Sequence

import jax
import jax.core
import numpy as np

from . import dtypes as _dtypes
from .array_protocol import protocol as _protocol
from .devices import device_name
from .errors import OperatorNotAllowedInGraphError, SymbolicArrayError, SymbolicNumpyError
from .shape import TensorShape
from .state import next_id, traces_function
from .transfer import to_device

_Array = jax.Array
_new_tuple = tuple.__new__

# TF's OperatorNotAllowedInGraphError for Python iteration over a tensor a tapejax.function traces:
# AutoGraph turns a converted ``for x in t`` into a loop; ``list(t)``, ``a, b = t``, ``enumerate(t)``,
# ``zip``, ``*t`` and comprehensions (which AutoGraph leaves as Python) iterate it, and TF refuses
# them.  Other traces iterate (eager tf.scan / foldl bodies, which TF runs as Python; tf.data
# functions, which tapejax runs eagerly where TF's AutoGraph would convert them).
_ITERATING = ("Iterating over a symbolic `tf.Tensor` is not allowed (inside a tapejax.function): AutoGraph "
              "converts `for x in tensor` in converted code into a loop, but `list(t)`, `a, b = t`, `enumerate(t)`, `zip(a, b)`, `*t`, "
              "comprehensions and unconverted code (autograph=False) iterate in Python; use `tf.unstack(t)` "
              "for a tensor of static length, or loop over `tf.range(tf.shape(t)[0])` and index")


class Tensor:
    """An immutable tensor (``tf.Tensor``), backed by a ``jax.Array``.

    ``numpy()`` returns the value, ``shape`` a TensorShape, ``dtype`` a DType.
    Tensors compare elementwise (``==`` gives a bool Tensor), so they are not
    hashable; use ``ref()`` as a dict key, as in TF.
    """

    # ``_keras_mask``: set only on the outputs of a Keras layer that makes a mask (as on TF's
    # eager tensors; unset, reading it raises AttributeError as TF's does); Keras stores it there.
    __slots__ = ("_value", "_id", "_keras_mask", "__weakref__")
    __array_priority__ = 100

    # The operators, installed on the class by ``tapejax.ops`` (``ops/math.py``: arithmetic,
    # comparisons and logic; ``ops/array.py``: ``[]``) so that each goes through the op registry
    # and its one recording entry point.  Declared here for readers and type checkers.
    __getitem__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __add__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __radd__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __sub__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __rsub__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __mul__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __rmul__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __truediv__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __rtruediv__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __floordiv__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __rfloordiv__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __mod__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __rmod__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __pow__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __rpow__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __matmul__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __rmatmul__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __lt__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __le__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __gt__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __ge__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __and__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __rand__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __or__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __ror__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __xor__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __rxor__: ClassVar[Callable[[Any, Any], "Tensor"]]
    __neg__: ClassVar[Callable[[Any], "Tensor"]]
    __pos__: ClassVar[Callable[[Any], "Tensor"]]
    __abs__: ClassVar[Callable[[Any], "Tensor"]]
    __invert__: ClassVar[Callable[[Any], "Tensor"]]
    # ``==`` / ``!=`` are elementwise; against None (or an unbroadcastable shape) a Python bool
    __eq__: ClassVar[Callable[[Any, Any], Any]]
    __ne__: ClassVar[Callable[[Any, Any], Any]]

    _value: jax.Array   # a concrete array, or a tracer inside a compiled function
    _id: int

    def __init__(self, value: jax.Array):
        self._value = value
        self._id = next_id()

    # -- value access -------------------------------------------------
    @property
    def _meta(self):
        """What has the shape and dtype without computing a pending value (see ``runtime.deferred``)."""
        return self._value

    @property
    def shape(self) -> TensorShape:
        return _new_tuple(TensorShape, self._value.shape)   # (shape.shape_of, inlined)

    def get_shape(self) -> TensorShape:
        return self.shape

    def set_shape(self, shape) -> None:
        """``tf.Tensor.set_shape``: shapes here are always known, so this checks that ``shape``
        (a list with ``None`` sizes, a TensorShape, ``None`` for any) is compatible; ValueError
        as TF's otherwise.  Does not compute a pending value."""
        if shape is None or (isinstance(shape, TensorShape) and shape.rank is None):
            return
        try:
            dims = (shape,) if isinstance(shape, int) else tuple(
                None if d is None else int(d) for d in getattr(shape, "as_list", lambda: shape)())
        except (TypeError, ValueError):
            raise TypeError(f"Failed to convert {shape!r} to a shape: a shape should be a single "
                            "dimension (e.g. 10) or an iterable of dimensions (e.g. [1, 10, None]).") from None
        have = tuple(self._meta.shape)
        if len(dims) != len(have) or any(d is not None and isinstance(h, int) and d != h for d, h in zip(dims, have)):
            raise ValueError(f"Tensor's shape {have} is not compatible with supplied shape "
                             f"{tuple('?' if d is None else d for d in dims)}.".replace("'?'", "None"))

    @property
    def dtype(self) -> _dtypes.DType:
        return _dtypes.as_dtype(self._value.dtype)

    @property
    def ndim(self) -> int:
        return self._value.ndim

    @property
    def device(self) -> str:
        try:
            return device_name(next(iter(self._value.devices())))  # TF's name
        except Exception:  # tracers have no device
            return ""

    @property
    def value(self) -> jax.Array:
        """The underlying ``jax.Array`` (or tracer inside a compiled function)."""
        return self._value

    def numpy(self) -> Any:
        """The value as NumPy data: an array, or a NumPy scalar (``np.float32`` ...) for a 0-d
        tensor, as TF's ``numpy()``."""
        if isinstance(self._value, jax.core.Tracer):
            raise SymbolicNumpyError(f"numpy() of a traced tensor {_traced_what}")
        return host_value(self._value)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        if isinstance(self._value, jax.core.Tracer):
            raise SymbolicArrayError(f"Cannot convert a traced tensor to a NumPy array {_traced_what}")
        return array_of(self._value, dtype, copy)

    @_protocol
    def __jax_array__(self):   # (hidden from jax.Array's operators: ``array_protocol``)
        return self._value

    def ref(self) -> "_Ref":
        return _Ref(self)

    experimental_ref = ref

    def __hash__(self):
        raise TypeError("Tensor is unhashable. Instead, use tensor.ref() as the key.")

    # -- Python protocol (these read the value: a host sync the user asked for)
    def __bool__(self) -> bool:
        return bool(self._value)

    def __float__(self) -> float:
        return float(self._value)

    def __int__(self) -> int:
        return int(self._value)

    def __index__(self) -> int:
        return index_value(self._value)

    def __round__(self, ndigits=None):
        raise ProtocolError(f"round() of a tapejax Tensor is not defined (TF raises here too): use "
                            f"tf.round(x), or round(float(x)) for a Python number; got {self!r}")

    def __complex__(self) -> complex:
        return complex(self._value)

    def __len__(self) -> int:
        v = self._value
        if isinstance(v, jax.core.Tracer) and traces_function():   # TF's symbolic tensor (a converted
            raise TypeError("len is not well defined for a symbolic Tensor (one traced by a tapejax.function). "
                            "Please call `x.shape` rather than `len(x)` for shape information.")
        if not v.ndim:
            raise TypeError("Scalar tensor has no `len()`")
        return v.shape[0]

    def __iter__(self) -> Iterator["Tensor"]:
        v = self._value
        if isinstance(v, jax.core.Tracer) and traces_function():   # TF's symbolic tensor (a converted
            raise OperatorNotAllowedInGraphError(_ITERATING)       # ``for`` never gets here)
        if not v.ndim:
            raise TypeError("Cannot iterate over a scalar tensor.")
        return (self[i] for i in range(v.shape[0]))

    def __repr__(self) -> str:
        if isinstance(self._value, jax.core.Tracer):
            return f"<tapejax.Tensor: shape={self._value.shape}, dtype={self._value.dtype.name}, traced>"
        a = np.asarray(self._value)
        text = repr(a.item()) if a.ndim == 0 else repr(a)
        sep = "\n" if "\n" in text else ""
        return f"<tapejax.Tensor: shape={tuple(a.shape)}, dtype={self.dtype.name}, numpy={sep}{text}>"

    def __str__(self) -> str:
        if isinstance(self._value, jax.core.Tracer):
            return repr(self)
        text = str(np.asarray(self._value))
        sep = "\n" if "\n" in text else ""
        return f"tapejax.Tensor({sep}{text}, shape={tuple(self._value.shape)}, dtype={self.dtype.name})"

    def __format__(self, spec: str) -> str:
        if isinstance(self._value, jax.core.Tracer):   # TF's symbolic tensor: object's format
            return object.__format__(self, spec)         # (str(t); a spec is a TypeError)
        a = np.asarray(self._value)
        # TF formats the NumPy value: ``f"{acc}"`` of a vector is '[0.5 1. ]' (not ``str(t)``), a
        # format spec on it NumPy's TypeError; a scalar formats its Python number
        return format(a.item(), spec) if a.ndim == 0 else format(a, spec)

    def __copy__(self):
        # TF: an eager tensor is immutable, so a copy is the tensor itself (and stays on the tape)
        return self

    def __deepcopy__(self, memo):
        if isinstance(self._value, jax.core.Tracer):
            # TF: a graph tensor inside tf.function cannot be deep-copied (pickled); copy.copy can
            raise TypeError("cannot pickle 'SymbolicTensor' object: a Tensor inside a tapejax.function (a traced "
                            "value) cannot be deep-copied, as in TF's tf.function; copy.copy(t), or t itself, "
                            "is the same tensor")
        return self

    def __reduce__(self):
        return (_unpickle, (np.asarray(self._value),))


_traced_what = ("(inside tapejax.function, or a jax transformation): it has no value until the program "
                "runs; use tf ops on it, or tapejax.print / tapejax.py_function for host code")


class ProtocolError(TypeError, AttributeError):
    """A Python protocol a tensor does not support (a float tensor as an index, ``round()``).

    A TypeError, Python's class for such misuse; also an AttributeError, the class TF happens to
    raise there (its tensors lack the NumPy method the protocol looks for), so ``except`` clauses
    written for TF still catch it."""


def host_value(a: Any) -> Any:
    """``numpy()`` of a value: a NumPy array, or a NumPy scalar for a 0-d value (TF's rule).
    The array is the caller's own writable copy, as TF's ``numpy()`` (a user edits it in place:
    ``w = v.numpy(); w[mask] = 0``), never a view of the device buffer."""
    out = np.array(a)
    return out[()] if out.ndim == 0 else out


def array_of(a: Any, dtype: Any = None, copy: Any = None) -> np.ndarray:
    """``__array__`` of a value: a read-only view of the host value where NumPy allows one (TF's
    ``np.asarray(t)`` is read-only too); a writable copy for ``np.array(t)`` (``copy=True``) or
    another ``dtype``."""
    out = np.asarray(a)
    if dtype is not None and np.dtype(dtype) != out.dtype:
        return out.astype(dtype)
    return out.copy() if copy else out


def index_value(a: Any) -> int:
    """``operator.index`` of a value: only integer scalars are indices (TF: AttributeError for a
    float, whose NumPy scalar has no ``__index__``)."""
    dt = np.dtype(a.dtype)
    if dt.kind not in "iu":
        raise ProtocolError(f"only integer scalar tensors can be used as an index (a list index, "
                            f"range(), operator.index); got a tensor of dtype {dt.name}")
    return int(a)


def _unpickle(a: np.ndarray) -> Tensor:
    return Tensor(_to_array(a, None, "value"))


class _Ref:
    """Hashable reference to a Tensor or Variable (``tensor.ref()``)."""

    __slots__ = ("_obj",)

    def __init__(self, obj):
        self._obj = obj

    def deref(self):
        return self._obj

    def __hash__(self):
        return self._obj._id

    def __eq__(self, other):
        return isinstance(other, _Ref) and other._obj is self._obj

    def __repr__(self):
        return f"<Reference wrapping {self._obj!r}>"


def _flatten(t):
    return (t._value,), None


def _unflatten(_, children):
    # A JAX array or tracer is a Tensor again; anything else a pytree function put at the leaf is
    # itself (``jax.device_get``'s NumPy data, ``tree_map(lambda t: t.shape, ...)``, JAX's
    # placeholders): a Tensor holding it was no Tensor (``tapejax.function`` refused it).
    v = children[0]
    return Tensor(v) if isinstance(v, jax.Array) else v


jax.tree_util.register_pytree_node(Tensor, _flatten, _unflatten)


# -- values computed later -------------------------------------------------------

class Lazy:
    """A value computed later: what a ``Pending`` Tensor or a Variable's pending update holds.

    The core knows only this interface; ``tapejax.runtime`` makes them (its ``Thunk``) and knows
    how to compute them, together, in one compiled program.  ``aval`` has the value's shape,
    dtype and weak type (the attribute arrays have too), ``value`` is None until computed, and
    ``force()`` computes it (with what else is pending that it needs) and returns it; ``set``
    gives it a value another program computed.
    """

    __slots__ = ()
    aval: Any
    value: Any

    def force(self) -> jax.Array:
        raise NotImplementedError   # pragma: no cover - an abstract method

    def set(self, value: jax.Array) -> None:
        """Take ``value``, computed by another program (a gradient's, which also computes the
        targets it left pending)."""
        raise NotImplementedError   # pragma: no cover - an abstract method

    def stage(self, call: Callable[..., Any], vals: Sequence[Any]) -> "Optional[Lazy]":
        """The op ``call(*vals)`` (one of ``vals`` is this value; nothing records it) as a new
        pending value, not computed now; None (the default): the executor computes ``vals`` and
        runs the op.  ``tapejax.data``'s host values stage the ops a dataset function runs on them."""
        return None


class StaticTensor(Tensor):
    """A Tensor holding a concrete value that a trace knows statically: ``tf.shape(x)`` (and
    ``size``, ``rank``) inside a ``tapejax.function``, where every shape is static.  An op whose
    operands are all concrete, one of them a ``StaticTensor``, is computed while tracing (the
    executor folds it: ``executor.fold``) and gives a ``StaticTensor`` again, so that
    ``x[:tf.shape(x)[0] // 2]``, ``tf.reshape(x, [tf.shape(x)[0], -1])`` or
    ``tf.zeros([tf.shape(x)[0], 3])`` see Python numbers, as TF's graph folds its static shapes.
    Outside a trace ``tf.shape`` gives a plain Tensor."""

    __slots__ = ()


class Pending(Tensor):
    """A Tensor whose value is computed when first needed (deferred execution, ``tapejax.runtime``).

    Its ``_thunk`` is a ``Lazy``.  Shape, dtype and rank are known without computing it; anything
    that reads ``_value`` forces it.  An op given a Pending input takes its thunk (``_meta``
    for shapes), never its value, so a chain of ops stays pending.
    """

    __slots__ = ("_thunk",)

    def __init__(self, thunk: Lazy):
        self._thunk = thunk
        self._id = next_id()

    @property
    def _value(self):   # pyright: ignore[reportIncompatibleVariableOverride] - computed on read
        th = self._thunk
        v = th.value
        return v if v is not None else th.force()

    @property
    def _meta(self):
        return self._thunk.aval

    @property
    def shape(self) -> TensorShape:
        return _new_tuple(TensorShape, self._thunk.aval.shape)

    @property
    def dtype(self) -> _dtypes.DType:
        return _dtypes.as_dtype(self._thunk.aval.dtype)

    @property
    def ndim(self) -> int:
        return len(self._thunk.aval.shape)


def _flatten_pending(t):
    return (t._value,), None


jax.tree_util.register_pytree_node(Pending, _flatten_pending, _unflatten)


#: The Tensor operators (``+``, ``@``, ``[]`` ...) by dunder name: what ``register_operators``
#: accepts (each declared on ``Tensor`` above).
OPERATOR_NAMES = frozenset(name for name in Tensor.__annotations__ if name.startswith("__"))


def register_methods(cls: type, methods: "dict[str, Callable[..., Any]]") -> None:
    """Install ``methods`` (name -> function) on ``cls``, each declared (annotated) in its class body:
    the op library defines the Variable methods that are ops (``sparse_read``, the scatter updates)
    where it defines the ops, as it does the operators."""
    declared = {n for k in cls.__mro__ for n in getattr(k, "__annotations__", {})}
    unknown = set(methods) - declared
    if unknown:
        raise ValueError(f"not methods declared on {cls.__name__}: {sorted(unknown)}")
    for name, fn in methods.items():
        setattr(cls, name, fn)


def register_operators(cls: type, methods: "dict[str, Callable[..., Any]]") -> None:
    """Install ``methods`` (dunder name -> function) as the operators of ``cls`` (``Tensor`` or
    ``Variable``).  The op library calls it where it defines the ops (``tapejax.ops``), so each
    operator goes through the op registry and its one entry point, ``bind``."""
    unknown = set(methods) - OPERATOR_NAMES
    if unknown:
        raise ValueError(f"not Tensor operators: {sorted(unknown)}")
    for name, fn in methods.items():
        setattr(cls, name, fn)


# -- conversion --------------------------------------------------------------

def _python_dtype(value):
    """TF's dtype for Python data (before any dtype argument)."""
    if isinstance(value, bool):
        return np.dtype(np.bool_)
    if isinstance(value, int):
        return np.dtype(np.int32) if -2**31 <= value < 2**31 else np.dtype(np.int64)
    if isinstance(value, float):
        return np.dtype(np.float32)
    if isinstance(value, complex):
        return np.dtype(np.complex128)
    try:
        arr = np.asarray(value)
    except ValueError:  # NumPy: "inhomogeneous shape"
        raise ValueError(f"Can't convert non-rectangular Python sequence to Tensor: {value!r}") from None
    if arr.dtype.kind == "f":
        return np.dtype(np.float32)
    if arr.dtype.kind in "iu":
        return np.dtype(np.int32) if arr.size == 0 or (arr.min() >= -2**31 and arr.max() < 2**31) else np.dtype(np.int64)
    if arr.dtype.kind == "O":
        raise ValueError(f"Attempt to convert a value ({value!r}) with an unsupported type "
                         f"({type(value)}) to a Tensor.")
    if arr.dtype.kind in "US":
        raise TypeError(f"tapejax has no string or object tensors (JAX arrays are numeric); got a value of dtype "
                        f"{arr.dtype}: keep strings in Python or NumPy and map them to integer ids on the host")
    return arr.dtype


def _contains_tensor(value):
    if isinstance(value, Tensor) or hasattr(value, "_read"):
        return True
    if isinstance(value, (list, tuple)):
        return any(_contains_tensor(v) for v in value)
    return False


#: Python data: ``np.asarray`` of it makes a new array that nobody else holds.
_PYTHON_DATA = (list, tuple, bool, int, float, complex)
#: What ``foreign_array`` leaves alone: JAX's and NumPy's own arrays, Tensors (and strings).
_FOREIGN_SKIP = (_Array, jax.core.Tracer, np.ndarray, np.generic, Tensor, str, bytes)
#: XLA's CPU client reads (and keeps reading, asynchronously) a host buffer with this alignment
#: in place instead of copying it; a snapshot this large is made with it, so that it is the
#: only copy.  A small one is a plain copy (JAX's own copy of it costs next to nothing).
_ALIGN = 64
_ALIGN_MIN_BYTES = 1 << 14


def host_snapshot(a: np.ndarray, dtype: "np.dtype | None" = None) -> np.ndarray:
    """A private copy of the host array ``a`` (converted to ``dtype``), taken now.

    TF reads host data when an op is called: ``w * buf`` followed by ``buf[:] = 7`` computes
    with the old ``buf``, also in its gradient.  JAX does not promise that: a NumPy argument of
    a jitted call, ``jax.device_put`` or ``jnp.asarray`` may be read in place, asynchronously
    (on the CPU, a 64-byte aligned buffer), and a tape or a pending op keeps its inputs for
    later.  So every op path copies mutable host data once, here, before JAX or a tape sees it.
    A large snapshot is 64-byte aligned: JAX then reads it in place, so it is the only copy;
    a conversion (``dtype``) is the copy."""
    dtype = a.dtype if dtype is None else np.dtype(dtype)
    nbytes = a.size * dtype.itemsize
    if nbytes < _ALIGN_MIN_BYTES:
        return np.array(a, dtype=dtype, copy=True)
    buf = np.empty(nbytes + _ALIGN, np.uint8)
    off = -buf.ctypes.data % _ALIGN
    out = buf[off:off + nbytes].view(dtype).reshape(a.shape)
    np.copyto(out, a, casting="unsafe")
    return out


def is_foreign(value) -> bool:
    """Whether ``value`` is another library's array (a TF EagerTensor, a PyTorch or CuPy tensor
    ...): not Python data, not JAX's or NumPy's own, but readable through ``__array__`` or DLPack."""
    if isinstance(value, _FOREIGN_SKIP) or type(value) in _PYTHON_DATA or hasattr(value, "_read"):
        return False   # (``_read``: a Variable, which an op reads)
    return hasattr(value, "__array__") or hasattr(value, "__dlpack__")


def foreign_array(value):
    """``value`` (``is_foreign``) as a NumPy array (through ``__array__``: a host view) or, when it
    has no host view (a GPU tensor), a ``jax.Array`` through DLPack; its own dtype is kept.  The
    caller copies it (``_to_array``)."""
    if hasattr(value, "__array__"):
        try:
            return np.asarray(value)
        except (TypeError, RuntimeError, ValueError):
            if not hasattr(value, "__dlpack__"):
                raise
    return jax.dlpack.from_dlpack(value)


def _to_array(value, dtype, what):
    """Host/array data -> jax.Array of TF's dtype (``dtype`` a NumPy dtype or None).  Host data
    is copied now (``host_snapshot``: a later change to a NumPy buffer changes no Tensor).
    Another library's array keeps its dtype, as a NumPy array does (``foreign_array``)."""
    if is_foreign(value):
        value = foreign_array(value)
        if isinstance(value, _Array):   # DLPack: a copy, since the producer may change its buffer later
            return _to_array(value, dtype, what).copy()
    if isinstance(value, (_Array, jax.core.Tracer)):
        if not isinstance(value.dtype, np.dtype):   # (a typed PRNG key array: was NumPy's "Cannot interpret")
            raise TypeError(f"{what} is a JAX PRNG key array (dtype {value.dtype}), which has no TF dtype: no "
                            "Tensor or Variable holds one. Pass keys to tapejax.op functions and "
                            "tapejax.function steps as they are (or jax.random.key_data(key) as uint32 data)")
        src = np.dtype(value.dtype)
        if dtype is None:
            return value
        return value.astype(_dtypes.storage_dtype(dtype, what))
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        src = value.dtype
        if dtype is not None:  # NumPy data is cast, as TF does (truncating floats to ints)
            return to_device(host_snapshot(np.asarray(value), _dtypes.storage_dtype(dtype, what)))
        if src.kind in "USO":
            raise TypeError(f"tapejax has no string or object tensors (JAX arrays are numeric); {what} has dtype "
                            f"{src}: keep strings in Python or NumPy and map them to integer ids on the host")
        target = src if dtype is None else dtype
    else:
        src = _python_dtype(value)
        target = src if dtype is None else dtype
        if dtype is not None and ((dtype.kind in "iub" and src.kind in "fc") or
                                  (dtype.kind == "b" and src.kind != "b")) and np.size(value) != 0:
            raise TypeError(f"Cannot convert {value!r} to EagerTensor of dtype {dtype.name}")
    store = _dtypes.storage_dtype(target, what)
    arr = np.asarray(value)
    owned = type(value) in _PYTHON_DATA or isinstance(value, np.generic)   # a new array already
    if arr.dtype != target:
        arr = host_snapshot(arr, target)
        owned = True
    if store != target:  # int64 -> int32 stand-in: only when lossless
        if arr.size and (arr.min() < np.iinfo(store).min or arr.max() > np.iinfo(store).max):
            raise TypeError(f"{what} does not fit in {store.name} and JAX's 64-bit mode is off: "
                            "call jax.config.update('jax_enable_x64', True) to hold int64.")
        arr = host_snapshot(arr, store)
        owned = True
    if not owned:   # a NumPy array or another host buffer that its owner may change
        arr = host_snapshot(arr)
    try:
        return to_device(arr)
    except FloatingPointError:   # NaN/Inf data under JAX's checker (check numerics checks op outputs)
        with jax.debug_nans(False), jax.debug_infs(False):
            return jax.numpy.asarray(arr)
