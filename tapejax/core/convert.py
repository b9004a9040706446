"""``convert_to_tensor`` and ``constant``: TF's conversion rules for Python, NumPy and Tensor data.

Python floats become float32 and ints int32 (int64 where they do not fit), NumPy arrays keep
their dtype, Tensors pass through, Variables are read (a recorded read), a list holding
Tensors is the recorded Pack op (``bind.pack_nested``), as TF converts it, and an object of a
type with a registered conversion (``core.conversion``: ``IndexedSlices``) is converted by it.  Host data is copied
when converted (``tensor.host_snapshot``).
"""
import jax
import numpy as np

from . import dtypes as _dtypes
from .bind import pack_nested
from .conversion import conversion_for
from .indexed_slices import IndexedSlices
from .tensor import Tensor, TensorShape, _Array, _contains_tensor, _to_array


def convert_to_tensor(value, dtype=None, dtype_hint=None, name=None):
    """``tf.convert_to_tensor``: Tensors pass through, Variables are read.

    Python floats become float32 and ints int32; NumPy arrays keep their
    dtype.  ``dtype`` must match an existing Tensor's dtype (ValueError, as
    TF); ``dtype_hint`` is used only for Python data.
    """
    want = None if dtype is None else _dtypes.as_dtype(dtype)._np
    if isinstance(value, Tensor):
        if want is not None and np.dtype(value._value.dtype) != want:
            raise ValueError(f"Tensor conversion requested dtype {want.name} for Tensor with "
                             f"dtype {np.dtype(value._value.dtype).name}: {value!r}")
        return value
    read = getattr(value, "_read", None)
    if read is not None:
        t = read()
        if want is not None and np.dtype(t._value.dtype) != want:
            raise ValueError(f"Incompatible type conversion requested to type '{want.name}' for "
                             f"variable of type '{t.dtype.name}'")
        return t
    if value is None:
        raise ValueError("Attempt to convert a value (None) with an unsupported type "
                         "(<class 'NoneType'>) to a Tensor.")
    if isinstance(value, TensorShape) and (value.rank is None or any(d is None for d in value)):
        raise ValueError(f"Cannot convert a partially known TensorShape {value} to a Tensor.")   # (TF's)
    conv = conversion_for(type(value))
    if conv is not None:   # a registered conversion (an IndexedSlices, a user's class)
        t = conv(value, dtype=None if want is None else _dtypes.as_dtype(want), name=name, as_ref=False)
        if t is not NotImplemented:
            if not isinstance(t, Tensor):
                t = convert_to_tensor(t)
            if want is not None and np.dtype(t._meta.dtype) != want:
                raise RuntimeError(f"Conversion function {conv!r} for type {type(value).__name__} returned "
                                   f"incompatible dtype: requested = {want.name}, actual = "
                                   f"{np.dtype(t._meta.dtype).name}")
            return t
    if isinstance(value, (list, tuple)) and _contains_tensor(value):
        t = pack_nested(value)
        if want is not None and np.dtype(t._value.dtype) != want:
            raise ValueError(f"Tensor conversion requested dtype {want.name} for Tensor with "
                             f"dtype {np.dtype(t._value.dtype).name}")
        return t
    if want is None and dtype_hint is not None and not isinstance(value, (np.ndarray, np.generic, _Array)):
        hint = _dtypes.as_dtype(dtype_hint)._np
        _dtypes.require_representable(hint, "dtype_hint")  # a float64 hint is a float64 request
        try:
            return Tensor(_to_array(value, hint, "value"))
        except (TypeError, ValueError):
            pass
    return Tensor(_to_array(value, want, "value"))


def constant(value, dtype=None, shape=None, name="Const"):
    """``tf.constant``: a Tensor from Python/NumPy data (``shape`` reshapes or fills)."""
    if isinstance(value, Tensor) or hasattr(value, "_read"):
        t = convert_to_tensor(value)
        if dtype is not None and t.dtype != _dtypes.as_dtype(dtype):
            raise TypeError(f"Expected tensor {t.numpy()} with dtype {_dtypes.as_dtype(dtype)!r}, "
                            f"but got dtype {t.dtype!r}.")
    else:
        want = None if dtype is None else _dtypes.as_dtype(dtype)._np
        t = Tensor(_to_array(value, want, "value"))
    if shape is not None:
        shape = tuple(int(s) for s in shape)
        v = t._value
        if v.size == 1:
            t = Tensor(jax.numpy.broadcast_to(v.reshape(()), shape))
        elif int(np.prod(shape)) == v.size:
            t = Tensor(v.reshape(shape))
        else:
            raise TypeError(f"Eager execution of tf.constant with unsupported shape. Tensor "
                            f"{value!r} (converted from {value!r}) has {v.size} elements, but got "
                            f"`shape` {shape} with {int(np.prod(shape))} elements).")
    return t


def is_tensor(x):
    """``tf.is_tensor``: a Tensor or a tensor-like TF type (a Variable, ``IndexedSlices``, a
    composite type marking itself ``_tapejax_composite = True``: ``tf.SparseTensor``)."""
    return isinstance(x, (Tensor, IndexedSlices)) or hasattr(x, "_read") or getattr(type(x), "_tapejax_composite", False)
