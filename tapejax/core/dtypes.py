"""TF dtype objects (``tapejax.float32`` ...) and TF's conversion rules.

``DType`` wraps a NumPy dtype, compares equal to the NumPy dtype, its name,
and other DTypes, and carries TF's predicates (``is_floating`` ...).

Conversion follows TF: a Python float becomes float32, an int int32 (int64
if it does not fit), a bool bool; NumPy arrays keep their dtype.  JAX without
its 64-bit mode cannot hold float64/complex128: asking for one is an error
that says how to enable the mode (never a silent float32).  int64 has the
honest stand-in int32 there, when the values fit.
"""
import builtins
from typing import Any

import jax
import ml_dtypes
import numpy as np


class DType:
    """A TensorFlow-style dtype: ``tapejax.float32.name == 'float32'``."""

    __slots__ = ("_np",)

    def __init__(self, np_dtype):
        self._np: np.dtype[Any] = np.dtype(np_dtype)

    @property
    def name(self) -> str:
        return self._np.name

    @property
    def as_numpy_dtype(self):
        return self._np.type

    @property
    def base_dtype(self) -> "DType":
        return self

    @property
    def size(self) -> int:
        return self._np.itemsize

    @property
    def is_floating(self) -> builtins.bool:
        return _is_float(self._np)

    @property
    def is_complex(self) -> builtins.bool:
        return self._np.kind == "c"

    @property
    def is_integer(self) -> builtins.bool:
        return self._np.kind in "iu"

    @property
    def is_unsigned(self) -> builtins.bool:
        return self._np.kind == "u"

    @property
    def is_bool(self) -> builtins.bool:
        return self._np.kind == "b"

    @property
    def is_numeric(self) -> builtins.bool:
        return not self.is_bool

    @property
    def min(self):
        return np.finfo(self._np).min if self.is_floating else np.iinfo(self._np).min

    @property
    def max(self):
        return np.finfo(self._np).max if self.is_floating else np.iinfo(self._np).max

    def __eq__(self, other: Any) -> builtins.bool:
        if isinstance(other, DType):
            return self._np == other._np
        try:
            return self._np == np.dtype(getattr(other, "_np", other))
        except TypeError:
            return False

    def __ne__(self, other: Any) -> builtins.bool:
        return not self == other

    def __hash__(self):
        return hash(self._np)

    def __repr__(self):
        return f"tf.{self.name}"

    def __str__(self):
        return f"<dtype: '{self.name}'>"

    def __reduce__(self):
        return (as_dtype, (self.name,))


def _is_float(np_dtype):
    return np_dtype.kind == "f" or np_dtype in _EXTRA_FLOATS


_EXTRA_FLOATS = {np.dtype(ml_dtypes.bfloat16)}

float16 = half = DType(np.float16)
bfloat16 = DType(ml_dtypes.bfloat16)
float32 = DType(np.float32)
float64 = double = DType(np.float64)
complex64 = DType(np.complex64)
complex128 = DType(np.complex128)
int8 = DType(np.int8)
int16 = DType(np.int16)
int32 = DType(np.int32)
int64 = DType(np.int64)
uint8 = DType(np.uint8)
uint16 = DType(np.uint16)
uint32 = DType(np.uint32)
uint64 = DType(np.uint64)
bool = DType(np.bool_)  # noqa: A001  (TF's name)



class StringDType(DType):
    """TF's ``tf.string``.  No Tensor holds it (XLA has no string type): it names the dtype of
    host string data, ``tf.data``'s string components (``bytes``, object arrays of them) and the
    string features of ``tf.io.parse_example``, ``TensorSpec`` s and ``CsvDataset`` defaults.  As
    a Tensor's dtype (``tf.zeros([2], tf.string)``, ``tf.cast(x, tf.string)``) it is TypeError
    (``storage_dtype``)."""

    __slots__ = ()

    def __init__(self):
        super().__init__(np.object_)

    @property
    def name(self) -> str:
        return "string"

    @property
    def is_numeric(self) -> builtins.bool:
        return False


string = StringDType()

_BY_NAME = {d.name: d for d in (float16, bfloat16, float32, float64, complex64, complex128,
                                 int8, int16, int32, int64, uint8, uint16, uint32, uint64, bool, string)}
_BY_NAME.update({"half": float16, "double": float64, "float": float32})
_BY_NP = {d._np: d for d in _BY_NAME.values()}
_PY_TYPES = {float: float32, int: int32, complex: complex128, builtins.bool: bool}


def as_dtype(x: Any) -> DType:
    """Convert a DType, NumPy dtype, type or name to a DType (TypeError otherwise)."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        d = _BY_NAME.get(x)
        if d is None:
            raise TypeError(f"Cannot convert {x!r} to a tapejax DType: unknown dtype name.")
        return d
    if x in _PY_TYPES:
        return _PY_TYPES[x]
    try:
        npd = np.dtype(getattr(x, "_np", x))
    except TypeError:
        raise TypeError(f"Cannot convert value {x!r} to a tapejax DType.") from None
    d = _BY_NP.get(npd)
    if d is None:
        raise TypeError(f"Cannot convert value {x!r} to a tapejax DType: {npd} is not supported.")
    return d


def x64_enabled() -> builtins.bool:
    """Whether JAX's 64-bit mode is on here (``jax.config.update`` or a ``jax.enable_x64`` context)."""
    return jax.enable_x64.value


_WIDE = {np.dtype(np.float64): "float64", np.dtype(np.complex128): "complex128"}
_NARROW_INT = {np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.uint64): np.dtype(np.uint32)}


class PrecisionError(TypeError):
    """A float64 / complex128 value while JAX's 64-bit mode is off (a TypeError, as TF raises for
    a dtype it cannot hold; ops pass it on as it is, not as a shape or dtype complaint)."""


def require_representable(np_dtype: Any, what: str = "value") -> None:
    """Raise ``PrecisionError`` if ``np_dtype`` needs JAX's x64 mode and it is off."""
    np_dtype = np.dtype(np_dtype)
    if np_dtype in _WIDE and not x64_enabled():
        raise PrecisionError(
            f"{what} has dtype {_WIDE[np_dtype]}, which JAX holds only in 64-bit mode: "
            "call jax.config.update('jax_enable_x64', True) at start-up (or set "
            "JAX_ENABLE_X64=1), or ask for dtype=tapejax.float32. tapejax never "
            "narrows a float silently.")


def storage_dtype(np_dtype: Any, what: str = "value") -> "np.dtype[Any]":
    """The dtype JAX will actually hold for ``np_dtype`` (int64 -> int32 without x64)."""
    np_dtype = np.dtype(np_dtype)
    if np_dtype.kind in "OUS":
        raise TypeError(f"{what}: tapejax has no string tensors (XLA has no string type); tf.string names host "
                        "string data only (tf.data string components, tf.io.parse_example features): keep strings "
                        "in Python or NumPy and map them to integer ids on the host.")
    if x64_enabled():
        return np_dtype
    require_representable(np_dtype, what)
    return _NARROW_INT.get(np_dtype, np_dtype)


def is_trainable_dtype(np_dtype: "np.dtype[Any]") -> builtins.bool:
    """TF's rule: only floating and complex tensors carry gradients (not JAX's extended dtypes:
    a typed PRNG key array has no ``kind``)."""
    return getattr(np_dtype, "kind", None) in ("f", "c") or np_dtype in _EXTRA_FLOATS


#: The public names of ``tf.dtypes`` this module defines (``tapejax.dtypes`` adds ``cast``: see
#: ``ops.namespaces``).
PUBLIC = ("DType", "as_dtype", "float16", "half", "bfloat16", "float32", "float64", "double", "complex64",
          "complex128", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool", "string")
