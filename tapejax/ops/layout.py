"""Layout and shape ops: blocks between space and batch or depth (``space_to_batch_nd``,
``depth_to_space`` ...), sequences (``reverse_sequence``, ``sequence_mask``), searches and
histograms, ``unique_with_counts``, ``dynamic_partition`` / ``dynamic_stitch``, ``bitcast``, the
n-d FFTs, and TF's shape utilities (``shape_n``, ``broadcast_*_shape``, ``ensure_shape``).

Ops whose output size depends on values (``unique_with_counts``, ``dynamic_partition``,
``sequence_mask`` without ``maxlen``) read them on the host (eager only), as ``unique`` does;
their gradients are TF's (``dynamic_partition`` and ``dynamic_stitch`` route them back by index).
"""
import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor, TensorShape
from ._registry import _bad, _call, _contains_tensor, _shape, dtype_of, no_half, prim, static_shape, tf_types

# -- space <-> batch, space <-> depth -------------------------------------------------------


def _space_to_batch(x, *, block, pads):
    b = x.shape[0]
    m = len(block)
    x = jnp.pad(x, [(0, 0)] + list(pads) + [(0, 0)] * (x.ndim - 1 - m))
    spatial = x.shape[1:1 + m]
    rest = x.shape[1 + m:]
    shape = [b]
    for s, k in zip(spatial, block):
        shape += [s // k, k]
    x = x.reshape(tuple(shape) + rest)
    # (b, s1/k1, k1, s2/k2, k2, ...) -> (k1, k2, ..., b, s1/k1, s2/k2, ...)
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + list(range(1 + 2 * m, x.ndim))
    x = x.transpose(perm)
    return x.reshape((b * int(np.prod(block)),) + tuple(s // k for s, k in zip(spatial, block)) + rest)


def _batch_to_space(x, *, block, crops):
    m = len(block)
    nb = x.shape[0] // int(np.prod(block))
    spatial = x.shape[1:1 + m]
    rest = x.shape[1 + m:]
    x = x.reshape(tuple(block) + (nb,) + spatial + rest)
    perm = [m]
    for i in range(m):
        perm += [m + 1 + i, i]
    perm += list(range(2 * m + 1, x.ndim))
    x = x.transpose(perm).reshape((nb,) + tuple(s * k for s, k in zip(spatial, block)) + rest)
    return x[(slice(None),) + tuple(slice(c0, x.shape[1 + i] - c1) for i, (c0, c1) in enumerate(crops))]


_S2B = prim("SpaceToBatchND", _space_to_batch)
_B2S = prim("BatchToSpaceND", _batch_to_space)


def _pairs(p, m, what):
    a = np.asarray(getattr(p, "_value", p), dtype=np.int64).reshape(-1, 2) if p is not None else np.zeros((m, 2), np.int64)
    if a.shape != (m, 2) or (a < 0).any():
        raise _bad("SpaceToBatchND", f"`{what}` must be non-negative and of shape [{m}, 2]; got {a.tolist()}")
    return tuple((int(u), int(v)) for u, v in a)


@tf_types("SpaceToBatchND")
def space_to_batch_nd(input, block_shape, paddings, name=None):  # noqa: A002  (TF's name)
    """``tf.space_to_batch_nd``: zero-pad the spatial dimensions, then move ``block_shape`` blocks of
    them into the batch."""
    block = static_shape(block_shape)
    pads = _pairs(paddings, len(block), "paddings")
    shape = _shape(input)
    for i, (k, (a, b)) in enumerate(zip(block, pads)):
        if k < 1 or (shape[1 + i] + a + b) % k:
            raise _bad("SpaceToBatchND", f"padded spatial dimension {i} ({shape[1 + i] + a + b}) must be divisible by "
                       f"block_shape[{i}] = {k}")
    return _call(_S2B, "SpaceToBatchND", input, block=block, pads=pads)


@tf_types("SpaceToBatchND")
def space_to_batch(input, block_shape, paddings, name=None):  # noqa: A002
    """``tf.space_to_batch`` (TF2: the same as ``space_to_batch_nd``)."""
    return space_to_batch_nd(input, block_shape, paddings)


@tf_types("BatchToSpaceND")
def batch_to_space(input, block_shape, crops, name=None):  # noqa: A002
    """``tf.batch_to_space``: the inverse of ``space_to_batch_nd``, then crop."""
    block = static_shape(block_shape)
    crops_ = _pairs(crops, len(block), "crops")
    shape = _shape(input)
    if shape[0] % int(np.prod(block)):
        raise _bad("BatchToSpaceND", f"the batch dimension ({shape[0]}) must be divisible by prod(block_shape) = "
                   f"{int(np.prod(block))}")
    return _call(_B2S, "BatchToSpaceND", input, block=block, crops=crops_)


def required_space_to_batch_paddings(input_shape, block_shape, base_paddings=None, name=None):
    """``tf.required_space_to_batch_paddings``: ``(paddings, crops)`` that make each padded dimension
    a multiple of its block size (int32 Tensors)."""
    shape = np.asarray(getattr(input_shape, "_value", input_shape), np.int64).reshape(-1)
    block = np.asarray(getattr(block_shape, "_value", block_shape), np.int64).reshape(-1)
    base = (np.zeros((block.size, 2), np.int64) if base_paddings is None
            else np.asarray(getattr(base_paddings, "_value", base_paddings), np.int64).reshape(-1, 2))
    full = shape + base[:, 0] + base[:, 1]
    extra = (block - full % block) % block
    pads = np.stack([base[:, 0], base[:, 1] + extra], 1)
    crops = np.stack([np.zeros_like(extra), extra], 1)
    return Tensor(jnp.asarray(pads, jnp.int32)), Tensor(jnp.asarray(crops, jnp.int32))


def _depth_to_space(x, *, b, to_depth):
    n, h, w, c = x.shape
    if to_depth:   # space_to_depth
        x = x.reshape(n, h // b, b, w // b, b, c).transpose(0, 1, 3, 2, 4, 5)
        return x.reshape(n, h // b, w // b, b * b * c)
    x = x.reshape(n, h, w, b, b, c // (b * b)).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(n, h * b, w * b, c // (b * b))


_D2S = prim("DepthToSpace", _depth_to_space)


def _check_nhwc(x, data_format, op_type):
    if data_format != "NHWC":
        raise _bad(op_type, f"only data_format='NHWC' is supported here; got {data_format!r}")
    if len(_shape(x)) != 4:
        raise _bad(op_type, f"input must be 4-dimensional; got shape {list(_shape(x))}")


@tf_types("DepthToSpace")
def depth_to_space(input, block_size, data_format="NHWC", name=None):  # noqa: A002
    """``tf.nn.depth_to_space``: ``block_size x block_size`` blocks of the depth become space (NHWC)."""
    _check_nhwc(input, data_format, "DepthToSpace")
    b = int(block_size)
    if b < 2 or _shape(input)[3] % (b * b):
        raise _bad("DepthToSpace", f"depth {_shape(input)[3]} must be divisible by block_size^2 = {b * b} (block_size >= 2)")
    return _call(_D2S, "DepthToSpace", input, b=b, to_depth=False)


@tf_types("DepthToSpace")
def space_to_depth(input, block_size, data_format="NHWC", name=None):  # noqa: A002
    """``tf.nn.space_to_depth``: ``block_size x block_size`` spatial blocks become depth (NHWC)."""
    _check_nhwc(input, data_format, "SpaceToDepth")
    b = int(block_size)
    _, h, w, _ = _shape(input)
    if b < 2 or h % b or w % b:
        raise _bad("SpaceToDepth", f"height {h} and width {w} must be divisible by block_size {b} (block_size >= 2)")
    return _call(_D2S, "DepthToSpace", input, b=b, to_depth=True)


# -- sequences ------------------------------------------------------------------------------

def _reverse_sequence(x, lengths, *, seq_axis, batch_axis):
    t = x.shape[seq_axis]
    pos = jnp.arange(t)
    shape = [1] * x.ndim
    shape[seq_axis] = t
    shape[batch_axis] = x.shape[batch_axis]
    lens = lengths.astype(jnp.int32).reshape([-1 if i == batch_axis else 1 for i in range(x.ndim)])
    p = pos.reshape([-1 if i == seq_axis else 1 for i in range(x.ndim)])
    src = jnp.broadcast_to(jnp.where(p < lens, lens - 1 - p, p), shape)
    return jnp.take_along_axis(x, jnp.broadcast_to(src, x.shape), axis=seq_axis)


_REVERSE_SEQUENCE = prim("ReverseSequence", _reverse_sequence)


@tf_types("ReverseSequence")
def reverse_sequence(input, seq_lengths, seq_axis=None, batch_axis=None, name=None):  # noqa: A002
    """``tf.reverse_sequence``: reverse the first ``seq_lengths[b]`` entries of each batch row."""
    nd = len(_shape(input))
    if seq_axis is None:
        raise TypeError("reverse_sequence() needs `seq_axis` (the dimension to reverse); got None")
    for arg, a in (("seq_axis", seq_axis), ("batch_axis", 0 if batch_axis is None else batch_axis)):
        if not -nd <= int(a) < nd:
            raise _bad("ReverseSequence", f"Invalid {arg}: {int(a)} (argument `{arg}`; the input has rank {nd})")
    sa = int(seq_axis) % nd
    ba = 0 if batch_axis is None else int(batch_axis) % nd
    if sa == ba:
        raise _bad("ReverseSequence", f"seq_axis == batch_axis == {sa}")
    return _call(_REVERSE_SEQUENCE, "ReverseSequence", input, convert_to_tensor(seq_lengths), seq_axis=sa, batch_axis=ba)


_SEQ_MASK = prim("SequenceMask", lambda lengths, *, maxlen, dtype: (jnp.arange(maxlen) < lengths[..., None]).astype(dtype),
                 differentiable=False)


@tf_types("SequenceMask")
def sequence_mask(lengths, maxlen=None, dtype=_dtypes.bool, name=None):
    """``tf.sequence_mask``: ``mask[..., j] = j < lengths[...]``; ``maxlen`` defaults to ``max(lengths)``
    (read from the values)."""
    lens = convert_to_tensor(lengths)
    m = int(np.max(np.asarray(lens._value), initial=0)) if maxlen is None else int(np.asarray(getattr(maxlen, "_value", maxlen)))
    return _call(_SEQ_MASK, "SequenceMask", lens, maxlen=m, dtype=_dtypes.as_dtype(dtype)._np.name)


# -- searching and counting -------------------------------------------------------------------

_SEARCHSORTED = prim("LowerBound", lambda s, v, *, side, dtype: jax.vmap(
    lambda a, b: jnp.searchsorted(a, b, side=side))(s.reshape(-1, s.shape[-1]), v.reshape(-1, v.shape[-1]))
    .reshape(v.shape).astype(dtype), differentiable=False)


@tf_types("LowerBound")
def searchsorted(sorted_sequence, values, side="left", out_type=_dtypes.int32, name=None):
    """``tf.searchsorted``: per row, the insertion points of ``values`` into ``sorted_sequence``."""
    if side not in ("left", "right"):
        raise ValueError(f"Argument `side` must be either 'right' or 'left'. Received: `side` = {side}.")
    ss, vv = _shape(sorted_sequence), _shape(values)
    if len(ss) != len(vv) or tuple(ss[:-1]) != tuple(vv[:-1]):
        raise _bad("LowerBound", f"`sorted_sequence` {list(ss)} and `values` {list(vv)} must share all but the last "
                   "dimension")
    return _call(_SEARCHSORTED, "LowerBound", sorted_sequence, values, side=side,
                 dtype=_dtypes.storage_dtype(_dtypes.as_dtype(out_type)._np, "out_type").name)


_UNRAVEL = prim("UnravelIndex", lambda i, dims: jnp.stack(jnp.unravel_index(i, tuple(int(d) for d in dims))),
                differentiable=False, jit=False)


@tf_types("UnravelIndex")
def unravel_index(indices, dims, name=None):
    """``tf.unravel_index``: flat indices to coordinates (``[len(dims), ...]``)."""
    return _call(_UNRAVEL, "UnravelIndex", convert_to_tensor(indices), convert_to_tensor(dims))


def _hist_bins(values, lo, hi, *, nbins):
    scaled = (values - lo) / (hi - lo) * nbins
    return jnp.clip(jnp.floor(scaled), 0, nbins - 1).astype(jnp.int32)


_HIST_BINS = prim("HistogramFixedWidthBins", lambda v, r, *, nbins, dtype: _hist_bins(v, r[0], r[1], nbins=nbins).astype(dtype),
                  differentiable=False)
_HIST = prim("HistogramFixedWidth", lambda v, r, *, nbins, dtype: jnp.bincount(
    _hist_bins(v, r[0], r[1], nbins=nbins).reshape(-1), length=nbins).astype(dtype), differentiable=False)


@tf_types("HistogramFixedWidthBins")
def histogram_fixed_width_bins(values, value_range, nbins=100, dtype=_dtypes.int32, name=None):
    """``tf.histogram_fixed_width_bins``: each value's bin among ``nbins`` equal bins of ``value_range``
    (values outside go to the first or last bin)."""
    return _call(_HIST_BINS, "HistogramFixedWidthBins", values, value_range, nbins=int(nbins),
                 dtype=_dtypes.as_dtype(dtype)._np.name)


@tf_types("HistogramFixedWidth")
def histogram_fixed_width(values, value_range, nbins=100, dtype=_dtypes.int32, name=None):
    """``tf.histogram_fixed_width``: counts per bin (see ``histogram_fixed_width_bins``).  TF's kernel
    checks ``nbins > 0`` and ``value_range[0] < value_range[1]``; the range is checked here when it
    is Python or NumPy data (a tensor's would be a host read: value checks, README)."""
    if int(nbins) <= 0:
        raise _bad("HistogramFixedWidth", f"nbins should be a positive number, but got '{int(nbins)}' "
                   "(argument `nbins`)")
    if isinstance(value_range, (list, tuple, np.ndarray)) and not _contains_tensor(value_range):
        lo, hi = np.asarray(value_range, np.float64).reshape(-1)[:2].tolist()
        if not lo < hi:
            raise _bad("HistogramFixedWidth", f"value_range should satisfy value_range[0] < value_range[1], "
                       f"but got '[{lo:g}, {hi:g}]' (argument `value_range`)")
    return _call(_HIST, "HistogramFixedWidth", values, value_range, nbins=int(nbins),
                 dtype=_dtypes.as_dtype(dtype)._np.name)


def _unique_counts(x, *, dtype):
    x = np.asarray(x)   # (each NaN its own value, a group's value its first element: ``unique``'s rule)
    _, first, inv, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True, equal_nan=False)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return (jnp.asarray(x[first[order]]), jnp.asarray(rank[inv.reshape(-1)].astype(dtype)),
            jnp.asarray(counts[order].astype(dtype)))


_UNIQUE_COUNTS = prim("UniqueWithCounts", _unique_counts, differentiable=False, multiple_results=True, jit=False)
UniqueWithCounts = collections.namedtuple("UniqueWithCounts", ["y", "idx", "count"])


@tf_types("UniqueWithCounts")
def unique_with_counts(x, out_idx=_dtypes.int32, name=None):
    """``tf.unique_with_counts``: ``unique``'s ``(y, idx)`` and each value's count (eager only)."""
    if len(_shape(x)) != 1:
        raise _bad("UniqueWithCounts", f"unique expects a 1D vector (argument `x`), got shape {list(_shape(x))}")
    store = _dtypes.storage_dtype(_dtypes.as_dtype(out_idx)._np, "out_idx")
    return UniqueWithCounts(*bind(_UNIQUE_COUNTS, x, dtype=store.name))


# -- partition and stitch ---------------------------------------------------------------------

_PARTITION = prim("DynamicPartition", lambda data, *, parts, shape, num: tuple(
    data.reshape((len(parts),) + data.shape[len(shape):])[np.nonzero(np.asarray(parts) == i)[0]] for i in range(num)),
    multiple_results=True)


@tf_types("DynamicPartition")
def dynamic_partition(data, partitions, num_partitions, name=None):
    """``tf.dynamic_partition``: ``data``'s entries split by ``partitions`` into ``num_partitions`` lists
    (the partition ids are read on the host: eager only); the gradient routes back by position."""
    parts = convert_to_tensor(partitions)
    p = np.asarray(parts._value)
    n = int(num_partitions)
    if p.size and (p.min() < 0 or p.max() >= n):
        bad = int(p.reshape(-1)[np.argmax((p.reshape(-1) < 0) | (p.reshape(-1) >= n))])
        raise InvalidArgumentError(None, None, f"partitions contains {bad}, which is not in [0, {n}) [Op:DynamicPartition]")
    if tuple(p.shape) != tuple(_shape(data)[:p.ndim]):
        raise _bad("DynamicPartition", f"partitions shape {list(p.shape)} must be a prefix of data shape "
                   f"{list(_shape(data))}")
    return list(bind(_PARTITION, data, parts=tuple(int(v) for v in p.reshape(-1)), shape=tuple(p.shape), num=n))


_STITCH = prim("DynamicStitch", lambda *args, n, size: _stitch(tuple(args[:n]), tuple(args[n:]), size))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _stitch(indices, data, size):
    first = data[0]
    rest = first.shape[indices[0].ndim:]
    out = jnp.zeros((size,) + rest, first.dtype)
    for ind, d in zip(indices, data):
        out = out.at[ind.reshape(-1)].set(d.reshape((-1,) + rest))
    return out


def _stitch_fwd(indices, data, size):
    return _stitch(indices, data, size), indices


def _stitch_bwd(size, indices, g):
    # TF's gradient (``_DynamicStitchGrads``): every piece gathers its rows of the output's gradient,
    # an entry a later list overwrote included (no masking)
    return (None, tuple(jnp.take(g, ind, axis=0) for ind in indices))


_stitch.defvjp(_stitch_fwd, _stitch_bwd)


@tf_types("DynamicStitch")
def dynamic_stitch(indices, data, name=None):
    """``tf.dynamic_stitch``: ``out[indices[m][i]] = data[m][i]``, later lists winning on repeats; the
    output length is ``max(indices) + 1`` (read on the host)."""
    inds = [convert_to_tensor(i) for i in indices]
    if len(inds) != len(data):
        raise ValueError(f"`indices` and `data` must be lists of the same length; got {len(inds)} and {len(data)}")
    size = max((int(np.max(np.asarray(i._value), initial=-1)) for i in inds), default=-1) + 1
    return _call(_STITCH, "DynamicStitch", *inds, *data, n=len(inds), size=size)


# -- bits, FFTs, shapes -------------------------------------------------------------------------

_BITCAST = prim("Bitcast", lambda x, *, dtype: jax.lax.bitcast_convert_type(x, dtype), differentiable=False)


@tf_types("Bitcast")
def bitcast(input, type, name=None):  # noqa: A002  (TF's names)
    """``tf.bitcast``: the same bits as another dtype (a smaller one adds a last dimension, a larger
    one removes it, as TF)."""
    target = _dtypes.storage_dtype(_dtypes.as_dtype(type)._np, "type")
    return _call(_BITCAST, "Bitcast", input, dtype=target.name)


def _fft_op(op_type, fn, real_in=False):
    p = prim(op_type, lambda x, *, s, axes: fn(x, s=s, axes=axes))

    def op(input, fft_length=None, axes=None, norm=None, name=None):  # noqa: A002
        nd = len(_shape(input))
        ax = tuple(range(nd)) if axes is None else tuple(int(a) for a in np.asarray(axes).reshape(-1))
        for a in ax:   # (wrapping an axis would transform another one)
            if not -nd <= a < nd:
                raise _bad(op_type, f"Argument `axes`: axis {a} is out of range for a tensor of rank {nd}")
        ax = tuple(a % nd for a in ax)
        s = None if fft_length is None else tuple(int(v) for v in np.asarray(getattr(fft_length, "_value",
                                                                                     fft_length)).reshape(-1))
        if norm not in (None, "backward"):
            raise ValueError(f"Only the 'backward' norm is supported here (TF's default); got {norm!r}")
        if real_in:   # (TF: RFFT takes float32/float64 input only)
            no_half(input, op_type, "input", f16_error=ValueError, bf16_error=ValueError)
        return _call(p, op_type, input, s=s, axes=ax)

    op._tf_types = (op_type,)
    return op


fftnd = _fft_op("FFTND", jnp.fft.fftn)
ifftnd = _fft_op("IFFTND", jnp.fft.ifftn)
rfftnd = _fft_op("RFFTND", jnp.fft.rfftn, real_in=True)
irfftnd = _fft_op("IRFFTND", jnp.fft.irfftn)
for _f, _n in ((fftnd, "fftnd"), (ifftnd, "ifftnd"), (rfftnd, "rfftnd"), (irfftnd, "irfftnd")):
    _f.__name__ = _f.__qualname__ = _n
    _f.__doc__ = f"``tf.{_n}``: the n-dimensional FFT over ``axes`` (default all), ``fft_length`` per axis."


def shape_n(input, out_type=_dtypes.int32, name=None):  # noqa: A002
    """``tf.shape_n``: the shape of each tensor, as int32 Tensors."""
    dt = _dtypes.storage_dtype(_dtypes.as_dtype(out_type)._np, "out_type")
    return [Tensor(jnp.asarray(_shape(x), dt)) for x in input]


def broadcast_static_shape(shape_x, shape_y):
    """``tf.broadcast_static_shape``: the broadcast of two shapes (ValueError when incompatible)."""
    try:
        return TensorShape(np.broadcast_shapes(tuple(shape_x), tuple(shape_y)))
    except ValueError:
        raise ValueError(f"Incompatible shapes for broadcasting: {tuple(shape_x)} and {tuple(shape_y)}") from None


def broadcast_dynamic_shape(shape_x, shape_y):
    """``tf.broadcast_dynamic_shape``: the broadcast of two shape tensors, an int32 Tensor."""
    a = np.asarray(getattr(shape_x, "_value", shape_x)).reshape(-1)
    b = np.asarray(getattr(shape_y, "_value", shape_y)).reshape(-1)
    try:
        out = np.broadcast_shapes(tuple(int(v) for v in a), tuple(int(v) for v in b))
    except ValueError:
        raise InvalidArgumentError(None, None, f"Incompatible shapes: {a.tolist()} vs. {b.tolist()} "
                                   "[Op:BroadcastArgs]") from None
    return Tensor(jnp.asarray(out, jnp.int32 if dtype_of(shape_x) in (None, np.dtype(np.int32)) else dtype_of(shape_x)))


def ensure_shape(x, shape, name=None):
    """``tf.ensure_shape``: ``x`` itself when its shape is compatible with ``shape`` (None: any size);
    InvalidArgumentError otherwise."""
    want = None if shape is None or (isinstance(shape, TensorShape) and shape.rank is None) else tuple(shape)
    have = _shape(x)
    if want is not None and (len(want) != len(have) or any(w is not None and w != h for w, h in zip(want, have))):
        raise InvalidArgumentError(None, None, f"Shape of tensor x {list(have)} is not compatible with expected shape "
                                   f"{[w if w is not None else None for w in want]}. [Op:EnsureShape]")
    return x if isinstance(x, Tensor) else convert_to_tensor(x)


__all__ = ["UniqueWithCounts", "batch_to_space", "bitcast", "broadcast_dynamic_shape", "broadcast_static_shape",
           "depth_to_space", "dynamic_partition", "dynamic_stitch", "ensure_shape", "fftnd", "histogram_fixed_width",
           "histogram_fixed_width_bins", "ifftnd", "irfftnd", "required_space_to_batch_paddings", "reverse_sequence",
           "rfftnd", "searchsorted", "sequence_mask", "shape_n", "space_to_batch", "space_to_batch_nd",
           "space_to_depth", "unique_with_counts", "unravel_index"]
