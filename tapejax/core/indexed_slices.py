"""``IndexedSlices``: a sparse representation of a dense tensor by rows (``tf.IndexedSlices``).

``IndexedSlices(values, indices, dense_shape)`` stands for the dense tensor of shape
``dense_shape`` whose row ``indices[i]`` is ``values[i]``, repeated indices summed and every
other row zero.  It is what the tape gives as the gradient of a gather (``tf.gather``,
``embedding_lookup``) with respect to its params, as TF's does (``autodiff.sparse``), so an
optimizer can update only the gathered rows (``tapejax.optimizers``).

As TF's, it is not a Tensor (``isinstance(g, Tensor)`` is False, Python's arithmetic operators
are not defined on it, ``-g`` is), but every op and ``convert_to_tensor`` that needs a dense
tensor takes it: its conversion (``core.conversion``) is the recorded op ``IndexedSlicesToDense``
(TF's ``UnsortedSegmentSum``: rows summed, an index out of ``[0, dense_shape[0])`` dropped, as
TF's GPU kernel), so a tape differentiates through it and JAX computes it with no host read.

Gradients made by the tape know their dense shape statically (``_static_shape``); its Tensor
form (``dense_shape``, int32 as TF's) is made when first asked for.  An ``IndexedSlices`` is a
JAX pytree (children: values and indices), so it passes through ``jax.jit`` and ``tree_map``.
"""
import logging
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from . import dtypes as _dtypes
from .bind import bind, define
from .conversion import register_tensor_conversion_function
from .tensor import Tensor, TensorShape

_log = logging.getLogger("tapejax")

#: TF warns when it densifies an IndexedSlices this large (``indexed_slices._LARGE_SPARSE_NUM_ELEMENTS``).
LARGE_SPARSE_NUM_ELEMENTS = 100_000_000

TO_DENSE = define("IndexedSlicesToDense",
                  lambda values, indices, *, rows: jax.ops.segment_sum(values, indices.reshape(-1),
                                                                       num_segments=rows))


def _static_shape(dense_shape: Any) -> "Optional[tuple]":
    """``dense_shape`` as a tuple of ints, or None where it is unknown (None, or a traced value)."""
    if dense_shape is None:
        return None
    v = getattr(dense_shape, "_value", dense_shape)
    try:
        return tuple(int(d) for d in np.asarray(v).reshape(-1))
    except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
        return None


class IndexedSlices:
    """``tf.IndexedSlices``: rows ``values`` of a dense tensor of shape ``dense_shape`` at ``indices``.

    ``values`` has shape ``[n] + dense_shape[1:]``, ``indices`` shape ``[n]`` (an integer dtype);
    ``dense_shape`` is optional (without it the slices cannot be densified, as in TF).  The
    arguments are kept as given, as TF keeps them.
    """

    __slots__ = ("_values", "_indices", "_dense_shape", "_static", "__weakref__")

    def __init__(self, values: Any, indices: Any, dense_shape: Any = None):
        self._values = values
        self._indices = indices
        self._dense_shape = dense_shape
        self._static = _static_shape(dense_shape)

    @classmethod
    def _of(cls, values: Tensor, indices: Tensor, shape: tuple) -> "IndexedSlices":
        """One made by the library, whose dense shape is known (its Tensor made when asked for)."""
        out = cls.__new__(cls)
        out._values = values
        out._indices = indices
        out._dense_shape = None
        out._static = tuple(shape)
        return out

    # -- TF's attributes -------------------------------------------------------------------
    @property
    def values(self) -> Any:
        return self._values

    @property
    def indices(self) -> Any:
        return self._indices

    @property
    def dense_shape(self) -> Any:
        ds = self._dense_shape
        if ds is None and self._static is not None:
            with jax.ensure_compile_time_eval():   # a constant, also while a function traces
                ds = self._dense_shape = Tensor(jnp.asarray(self._static, jnp.int32))
        return ds

    @property
    def _static_shape(self) -> "Optional[tuple]":
        return self._static

    @property
    def dtype(self) -> _dtypes.DType:
        return _dtypes.as_dtype(_dtype_of(self._values))

    @property
    def shape(self) -> TensorShape:
        """The dense shape (TF: the values' row shape under an unknown first size when there is
        no ``dense_shape``)."""
        if self._static is not None:
            return TensorShape(self._static)
        return TensorShape((None,) + tuple(np.shape(getattr(self._values, "_meta", self._values))[1:]))

    @property
    def ndim(self) -> int:
        """The dense rank (what ``np.ndim`` reads, as ``shape`` is what ``np.shape`` reads: an op
        checking its argument's rank sees the dense tensor's, with no host read)."""
        return len(self.shape)

    @property
    def device(self) -> str:
        return getattr(self._values, "device", "")

    @property
    def name(self):
        raise AttributeError("Tensor.name is undefined when eager execution is enabled.")

    @property
    def op(self):
        raise AttributeError("Tensor.op is undefined when eager execution is enabled.")

    @property
    def graph(self):
        raise AttributeError("Tensor.graph is undefined when eager execution is enabled.")

    def consumers(self) -> list:
        return []

    def _with_values(self, values: Any) -> "IndexedSlices":
        """The same slices with other ``values`` (an op applied row by row: ``-g``, ``tf.cast``,
        the clipping ops)."""
        out = IndexedSlices.__new__(IndexedSlices)
        out._values, out._indices, out._dense_shape, out._static = values, self._indices, self._dense_shape, self._static
        return out

    def __neg__(self) -> "IndexedSlices":
        return self._with_values(-self._values)

    def __repr__(self) -> str:
        shape = "" if self._static is None and self._dense_shape is None else f", dense_shape={self.dense_shape}"
        return f"IndexedSlices(indices={self._indices}, values={self._values}{shape})"

    __str__ = __repr__

    # -- the dense tensor ---------------------------------------------------------------
    def _to_dense(self, dtype: Any = None, name: Any = None) -> Tensor:
        """The dense Tensor (the recorded ``IndexedSlicesToDense`` op), with TF's errors."""
        if dtype is not None and _dtypes.as_dtype(dtype) != self.dtype:
            raise ValueError(f"Incompatible tensor conversion requested to `dtype` {_dtypes.as_dtype(dtype).name} "
                             f"for IndexedSlices ({self!r}) with dtype {self.dtype.name}")
        if self._static is None:
            raise ValueError(f"Tensor conversion requested for IndexedSlices for argument `value` without "
                             f"dense_shape: {self!r}")
        n = 1
        for d in self._static:
            n *= d
        if n >= LARGE_SPARSE_NUM_ELEMENTS:
            _log.warning("Converting sparse IndexedSlices to a dense Tensor with %d elements. This may "
                         "consume a large amount of memory.", n)
        out = bind(TO_DENSE, self._values, self._indices, rows=self._static[0])
        assert isinstance(out, Tensor)   # (one result)
        return out

    def __jax_array__(self) -> Any:
        """The dense array, where JAX converts (``jnp.asarray(g)``: Keras 3's optimizers on the JAX
        backend given a tape's gradient), as TF converts an IndexedSlices where an op needs a
        dense tensor (Keras 3's optimizers on TF's backend)."""
        return self._to_dense().__jax_array__()


def _dtype_of(x: Any) -> Any:
    meta = getattr(x, "_meta", None)
    if meta is not None:
        return meta.dtype
    d = getattr(x, "dtype", None)
    return d if d is not None else np.asarray(x).dtype


def _convert(value: IndexedSlices, dtype: Any = None, name: Any = None, as_ref: bool = False) -> Tensor:
    return value._to_dense(dtype, name)


register_tensor_conversion_function(IndexedSlices, _convert, priority=0)


def _flatten(s: IndexedSlices):
    return (s._values, s._indices), s._static


def _unflatten(static, children) -> IndexedSlices:
    values, indices = children
    out = IndexedSlices.__new__(IndexedSlices)
    out._values, out._indices, out._dense_shape, out._static = values, indices, None, static
    return out


jax.tree_util.register_pytree_node(IndexedSlices, _flatten, _unflatten)

__all__ = ["IndexedSlices", "TO_DENSE"]
