"""Array ops (shapes, indexing, stacking, constructors)."""
import jax.numpy as jnp
import numpy as np

from .. import _dtypes, _tensor
from .._primitives import bind, define
from .._tensor import Tensor, convert_to_tensor
from .._variable import Variable
from ._registry import static_shape

_RESHAPE = define("Reshape", lambda x, shape: jnp.reshape(x, shape))


def reshape(tensor, shape, name=None):
    """``tf.reshape`` (one dimension may be -1)."""
    return bind(_RESHAPE, tensor, shape=static_shape(shape))


_PACK = define("Pack", lambda *xs, axis: jnp.stack(xs, axis=axis))


def stack(values, axis=0, name="stack"):
    """``tf.stack``: join equally shaped tensors along a new ``axis``."""
    return bind(_PACK, *values, axis=int(axis))


def _pack_nested(value):
    """convert_to_tensor of a (nested) list holding Tensors: a recorded Pack."""
    items = [(_pack_nested(v) if isinstance(v, (list, tuple)) else v) for v in value]
    dtype = next((x.dtype for x in items if isinstance(x, (Tensor, Variable))), None)
    items = [x if isinstance(x, (Tensor, Variable)) else convert_to_tensor(x, dtype=dtype) for x in items]
    return stack(items)


_tensor.pack_hook = _pack_nested


# -- __getitem__ -------------------------------------------------------------
# The index is split into a static spec (part of the cache key) and dynamic
# tensor indices (inputs, so x[i] with a tensor i does not recompile per i).

def _getitem_impl(x, *dyn, spec):
    it = iter(dyn)
    idx = []
    for kind, *a in spec:
        if kind == "i":
            idx.append(a[0])
        elif kind == "s":
            idx.append(slice(*a))
        elif kind == "n":
            idx.append(None)
        elif kind == "e":
            idx.append(Ellipsis)
        else:
            idx.append(next(it))
    return x[tuple(idx)]


_GETITEM = define("StridedSlice", _getitem_impl)


def _slice_bound(b):
    if b is None or isinstance(b, (int, np.integer)):
        return None if b is None else int(b)
    return int(np.asarray(getattr(b, "_value", b)))


def getitem(x, key):
    """``tensor[key]``: ints, slices, ``...``, ``None`` and integer tensors."""
    if not isinstance(key, tuple):
        key = (key,)
    spec = []
    dyn = []
    for k in key:
        if k is None:
            spec.append(("n",))
        elif k is Ellipsis:
            spec.append(("e",))
        elif isinstance(k, slice):
            spec.append(("s", _slice_bound(k.start), _slice_bound(k.stop), _slice_bound(k.step)))
        elif isinstance(k, (bool, np.bool_)):
            raise TypeError("Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) and "
                            "scalar tf.int32/tf.int64 tensors are valid indices, got True/False")
        elif isinstance(k, (int, np.integer)):
            spec.append(("i", int(k)))
        else:
            t = convert_to_tensor(k)
            if t.dtype.is_floating or t.dtype.is_bool:
                raise TypeError(f"Only integers, slices (`:`), ellipsis (`...`), tf.newaxis (`None`) "
                                f"and integer tensors are valid indices, got a {t.dtype.name} tensor")
            spec.append(("t",))
            dyn.append(t)
    return bind(_GETITEM, x, *dyn, spec=tuple(spec))


Tensor.__getitem__ = getitem
Variable.__getitem__ = getitem


# -- constructors (constants: never recorded) ---------------------------------

def _const_dtype(dtype):
    return _dtypes.storage_dtype(_dtypes.as_dtype(dtype)._np, "dtype")


def zeros(shape, dtype=_dtypes.float32, name=None, layout=None):
    """``tf.zeros``."""
    return Tensor(jnp.zeros(static_shape(shape), _const_dtype(dtype)))


def ones(shape, dtype=_dtypes.float32, name=None, layout=None):
    """``tf.ones``."""
    return Tensor(jnp.ones(static_shape(shape), _const_dtype(dtype)))


def zeros_like(input, dtype=None, name=None, layout=None):
    """``tf.zeros_like`` (a constant: TF gives its input no gradient)."""
    v = convert_to_tensor(input)._value
    return Tensor(jnp.zeros(v.shape, v.dtype if dtype is None else _const_dtype(dtype)))


def ones_like(input, dtype=None, name=None, layout=None):
    """``tf.ones_like`` (a constant: TF gives its input no gradient)."""
    v = convert_to_tensor(input)._value
    return Tensor(jnp.ones(v.shape, v.dtype if dtype is None else _const_dtype(dtype)))


def shape(input, out_type=_dtypes.int32, name=None):
    """``tf.shape``: the shape as an int32 tensor (a constant to tapes)."""
    return Tensor(jnp.asarray(np.asarray(convert_to_tensor(input)._value.shape, dtype=np.int32)))


__all__ = ["reshape", "stack", "getitem", "zeros", "ones", "zeros_like", "ones_like", "shape"]
