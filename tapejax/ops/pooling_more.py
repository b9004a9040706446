"""The rest of tf.nn's pooling family: ``max_pool_with_argmax``, ``isotonic_regression`` and
``with_space_to_batch``.

``max_pool_with_argmax`` gathers each output's window (``-inf`` where SAME pads), takes the first
maximum in the window's row-major order (TF's CPU kernel keeps the first of equal values) and
reports its position in TF's flattened convention: ``(y * width + x) * channels + c``, plus
``b * height * width * channels`` with ``include_batch_in_index``.  The value is a
``take_along_axis`` of the input, so the gradient goes to that position only, which is TF's
``MaxPoolGradWithArgmax``.

``isotonic_regression`` finds the blocks by pool-adjacent-violators on the host (the segments are
integer data, read eagerly; TF merges a block into the previous one only on a strict violation,
so equal neighbours stay apart) and computes the output as each block's mean with recorded ops
(``unsorted_segment_sum`` and ``gather``): the gradient is the incoming gradient averaged over each
block, TF's ``IsotonicRegression`` gradient.

``with_space_to_batch`` is TF's reduction of a dilated op to an undilated one: pad (for SAME, by
the dilated filter's size), ``space_to_batch_nd``, the op with VALID padding, ``batch_to_space``.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ._registry import _call, _shape, check_float, prim, tf_types
from .array import reshape
from .indexing import gather
from .layout import batch_to_space, required_space_to_batch_paddings, space_to_batch_nd
from .math import divide, negative
from .reduce import unsorted_segment_sum


def _windows(size, k, s, padding):
    """Output length and each output's input positions (-1 for padding) along one dimension."""
    if padding == "VALID":
        out, start = max((size - k) // s + 1, 0), 0
    else:
        out = -(-size // s)
        start = -(max((out - 1) * s + k - size, 0) // 2)
    pos = start + np.arange(out)[:, None] * s + np.arange(k)[None, :]
    return out, np.where((pos >= 0) & (pos < size), pos, -1)


def _argmax_pool(x, *, ksize, strides, padding, batch_index, dtype):
    b, h, w, c = x.shape
    oh, ph = _windows(h, ksize[0], strides[0], padding)
    ow, pw = _windows(w, ksize[1], strides[1], padding)
    # flat spatial index of every window entry: [oh, ow, kh * kw]; padding -> h * w (a -inf row)
    flat = np.where((ph[:, None, :, None] >= 0) & (pw[None, :, None, :] >= 0),
                    ph[:, None, :, None] * w + pw[None, :, None, :], h * w).reshape(oh, ow, -1)
    xs = jnp.concatenate([x.reshape(b, h * w, c), jnp.full((b, 1, c), -jnp.inf, x.dtype)], axis=1)
    win = xs[:, flat.reshape(-1), :].reshape(b, oh, ow, flat.shape[-1], c)
    k = jnp.argmax(win, axis=3)                                            # first maximum
    val = jnp.take_along_axis(win, k[:, :, :, None, :], axis=3)[:, :, :, 0, :]
    pos = jnp.asarray(flat)[jnp.arange(oh)[:, None, None], jnp.arange(ow)[None, :, None], k]
    idx = pos.astype(dtype) * c + jnp.arange(c, dtype=dtype)
    if batch_index:
        idx = idx + (jnp.arange(b, dtype=dtype) * (h * w * c))[:, None, None, None]
    return val, idx


_ARGMAX_POOL = prim("MaxPoolWithArgmax", _argmax_pool, multiple_results=True, pure_results=True)


class MaxPoolWithArgmax(NamedTuple):
    """``(output, argmax)``, TF's named tuple."""
    output: Tensor
    argmax: Tensor


def _pair(v, arg, n=2):
    a = [int(t) for t in (np.asarray(v).reshape(-1) if not isinstance(v, int) else [v])]
    if len(a) == 1:
        return (a[0],) * n
    if len(a) == n + 2:
        return tuple(a[1:-1])
    if len(a) == n:
        return tuple(a)
    raise ValueError(f"max_pool_with_argmax: argument `{arg}` must have 1, {n} or {n + 2} elements; got {len(a)}")


@tf_types("MaxPoolWithArgmax")
def max_pool_with_argmax(input, ksize, strides, padding, data_format="NHWC", output_dtype=_dtypes.int64,  # noqa: A002
                         include_batch_in_index=False, name=None):
    """``tf.nn.max_pool_with_argmax``: 2-D max pooling of NHWC ``input`` and the flattened index of
    each maximum (see the module docstring); the gradient flows to the maxima only."""
    check_float(input, "MaxPoolWithArgmax", "real", "input")
    if data_format != "NHWC":
        raise ValueError(f"max_pool_with_argmax: argument `data_format` must be 'NHWC'; got {data_format!r}")
    if padding not in ("SAME", "VALID"):
        raise ValueError(f"max_pool_with_argmax: argument `padding` must be 'SAME' or 'VALID'; got {padding!r}")
    if len(_shape(input)) != 4:
        raise ValueError(f"max_pool_with_argmax: argument `input` must be 4-D [batch, height, width, channels]; got "
                         f"shape {list(_shape(input))}")
    d = _dtypes.as_dtype(output_dtype)
    if d.name not in ("int32", "int64"):
        raise TypeError(f"max_pool_with_argmax: argument `output_dtype` must be int32 or int64; got {d.name}")
    k, s = _pair(ksize, "ksize"), _pair(strides, "strides")
    h, w = _shape(input)[1:3]
    if padding == "VALID" and (k[0] > h or k[1] > w):
        raise InvalidArgumentError(None, None, f"ksize {list(k)} is larger than the input {[h, w]} with VALID padding "
                                   "(argument `ksize`) [Op:MaxPoolWithArgmax]")
    out = _call(_ARGMAX_POOL, "MaxPoolWithArgmax", input, ksize=k, strides=s, padding=padding,
                batch_index=bool(include_batch_in_index), dtype=_dtypes.storage_dtype(d._np, "output_dtype").name)
    return MaxPoolWithArgmax(*out)


def _pav_segments(rows):
    """Segment ids of decreasing isotonic regression of each row (pool adjacent violators)."""
    seg = np.zeros(rows.shape, np.int32)
    for r, row in enumerate(rows):
        sums, counts = [], []
        for v in row.astype(np.float64):
            sums.append(v)
            counts.append(1)
            while len(sums) > 1 and sums[-2] / counts[-2] < sums[-1] / counts[-1]:
                s, c = sums.pop(), counts.pop()
                sums[-1] += s
                counts[-1] += c
        seg[r] = np.repeat(np.arange(len(counts)), counts)
    return seg


class IsotonicRegression(NamedTuple):
    """``(output, segments)``, TF's named tuple."""
    output: Tensor
    segments: Tensor


def isotonic_regression(inputs, decreasing=True, axis=-1):
    """``tf.nn.isotonic_regression``: the closest (least squares) non-increasing sequence along
    ``axis`` (non-decreasing with ``decreasing=False``) and the block id of each entry.  Integer
    inputs are computed in float32 (TF: float64 for int32 and int64, which JAX holds only in x64
    mode); the block search reads the values on the host (eager only)."""
    x = convert_to_tensor(inputs)
    if not (x.dtype.is_floating or x.dtype.is_integer):
        raise TypeError(f"isotonic_regression: argument `inputs` must be a real tensor; got {x.dtype.name}")
    if x.dtype.is_integer:
        from .math import cast
        x = cast(x, "float64" if _dtypes.x64_enabled() else "float32")
    shape = _shape(x)
    if not shape:
        raise ValueError("isotonic_regression: argument `inputs` must have at least one dimension; got a scalar")
    ax = int(axis) % len(shape)
    from .array import transpose
    perm = [i for i in range(len(shape)) if i != ax] + [ax]
    inv = list(np.argsort(perm))
    xt = transpose(x, perm) if ax != len(shape) - 1 else x
    if not decreasing:
        xt = negative(xt)
    n = shape[ax]
    rows = int(np.prod(_shape(xt)[:-1])) if len(shape) > 1 else 1
    seg = _pav_segments(np.asarray(convert_to_tensor(xt).numpy()).reshape(rows, n).astype(np.float64))
    ids = (seg + (np.arange(rows) * n)[:, None]).reshape(-1)
    flat = reshape(xt, [-1])
    sums = unsorted_segment_sum(flat, ids, rows * n)
    counts = np.bincount(ids, minlength=rows * n).astype(np.dtype(xt.dtype.as_numpy_dtype))
    means = divide(sums, convert_to_tensor(np.maximum(counts, 1)))
    out = reshape(gather(means, ids), _shape(xt))
    if not decreasing:
        out = negative(out)
    segments = convert_to_tensor(seg.reshape(_shape(xt)))
    if ax != len(shape) - 1:
        out, segments = transpose(out, inv), transpose(segments, inv)
    if not decreasing:
        return out, segments   # (TF returns a plain tuple here)
    return IsotonicRegression(out, segments)


isotonic_regression._tf_types = ("UnsortedSegmentSum", "GatherV2")


def with_space_to_batch(input, dilation_rate, padding, op, filter_shape=None, spatial_dims=None,  # noqa: A002
                        data_format=None):
    """``tf.nn.with_space_to_batch``: ``op(converted_input, num_spatial_dims, padding)`` computed as a
    dilated op: pad, ``space_to_batch_nd`` by ``dilation_rate``, ``op`` with ``"VALID"``,
    ``batch_to_space`` (TF's algorithm; ``filter_shape`` is needed for SAME)."""
    x = convert_to_tensor(input)
    rate = np.asarray(getattr(dilation_rate, "_value", dilation_rate), np.int64).reshape(-1)
    m = rate.size
    if spatial_dims is None:
        spatial_dims = list(range(1, m + 1))
    dims = sorted(int(d) for d in spatial_dims)
    if dims != [int(d) for d in spatial_dims] or len(set(dims)) != len(dims) or len(dims) != m or dims[0] < 1:
        raise ValueError("`spatial_dims` must be a monotonically increasing sequence of positive integers, one per "
                         f"`dilation_rate` entry. Received: spatial_dims={list(spatial_dims)}")
    rank_needed = dims[-1] if data_format is not None and data_format.startswith("NC") else dims[-1] + 1
    if len(_shape(x)) < rank_needed:
        raise ValueError(f"`input.shape.rank` must be at least {rank_needed}. Received: input.shape="
                         f"{list(_shape(x))} with rank {len(_shape(x))}")
    if np.any(rate < 1):
        raise ValueError(f"`dilation_rate` must be positive. Received: dilation_rate={rate.tolist()}")
    if np.all(rate == 1):
        return op(x, m, padding)
    if padding == "SAME":
        if filter_shape is None:
            raise ValueError("`filter_shape` must be specified for `padding='SAME'`. Received: filter_shape=None and "
                             "padding=SAME")
        f = np.asarray(getattr(filter_shape, "_value", filter_shape), np.int64).reshape(-1)[:m]
        total = (f - 1) * rate
        base = np.stack([total // 2, total - total // 2], 1)
    elif padding == "VALID":
        base = np.zeros((m, 2), np.int64)
    else:
        raise ValueError(f"`padding` must be one of 'SAME' or 'VALID'. Received: padding={padding}")
    last = dims[-1]
    block = np.ones(last, np.int64)
    full_base = np.zeros((last, 2), np.int64)
    spatial = np.zeros(last, np.int64)
    for i, d in enumerate(dims):
        block[d - 1], full_base[d - 1], spatial[d - 1] = rate[i], base[i], _shape(x)[d]
    for d in range(1, last + 1):
        if d not in dims:
            spatial[d - 1] = _shape(x)[d]
    pads, crops = required_space_to_batch_paddings(spatial, block, full_base)
    y = op(space_to_batch_nd(x, block, pads), m, "VALID")
    return batch_to_space(y, block, crops)


with_space_to_batch._tf_types = ("SpaceToBatchND", "BatchToSpaceND")

def _pooling_sequence(n_in, n_out, rng, pseudo_random):
    """TF's fractional pooling sequence (``fractional_pool_common.cc``): ``n_out + 1`` boundaries from
    0 to ``n_in``; random: steps of ``k`` and ``k + 1`` (``k = n_in // n_out``) shuffled; pseudo-random:
    ``ceil(alpha * (i + u)) - 1`` with ``u`` uniform below TF's bound."""
    if pseudo_random:
        alpha = n_in / n_out
        k = n_in // n_out
        max_u = min((k + 2) / alpha - 1, (n_in + 1 - k) / alpha - (n_out - 1))
        u = rng.random() * max_u
        seq = [0] + [int(np.ceil(alpha * (i + u))) - 1 for i in range(1, n_out)] + [n_in]
        return np.asarray(seq, np.int64)
    k, extra = divmod(n_in, n_out)
    diff = np.full(n_out, k, np.int64)
    diff[:extra] += 1
    rng.shuffle(diff)
    return np.concatenate([[0], np.cumsum(diff)]).astype(np.int64)


def _regions(seq, n_in, overlapping):
    """``[n_out, width]`` input positions of each pooling region (-1 pads)."""
    ends = [min(int(b) + (1 if overlapping else 0), n_in) for b in seq[1:]]
    starts = [int(a) for a in seq[:-1]]
    width = max(e - a for a, e in zip(starts, ends))
    return np.asarray([[a + j if a + j < e else -1 for j in range(width)] for a, e in zip(starts, ends)])


def _fractional_pool(x, *, rows, cols, kind):
    b, h, w, c = x.shape
    r, cc = np.asarray(rows), np.asarray(cols)
    flat = np.where((r[:, None, :, None] >= 0) & (cc[None, :, None, :] >= 0),
                    r[:, None, :, None] * w + cc[None, :, None, :], h * w).reshape(r.shape[0], cc.shape[0], -1)
    fill = -jnp.inf if kind == "max" else 0.0
    xs = jnp.concatenate([x.reshape(b, h * w, c), jnp.full((b, 1, c), fill, x.dtype)], axis=1)
    win = xs[:, flat.reshape(-1), :].reshape(b, *flat.shape, c)
    if kind == "max":
        k = jnp.argmax(win, axis=3)
        return jnp.take_along_axis(win, k[:, :, :, None, :], axis=3)[:, :, :, 0, :]
    count = jnp.asarray((flat < h * w).sum(-1), x.dtype)[None, :, :, None]
    return jnp.sum(win, axis=3) / count


_FRACTIONAL = {k: prim(f"Fractional{k.capitalize()}Pool", _fractional_pool) for k in ("max", "avg")}


class FractionalPool(NamedTuple):
    """``(output, row_pooling_sequence, col_pooling_sequence)``, TF's result."""
    output: Tensor
    row_pooling_sequence: Tensor
    col_pooling_sequence: Tensor


def _fractional(kind, value, pooling_ratio, pseudo_random, overlapping, seed):
    op = f"Fractional{kind.capitalize()}Pool"
    check_float(value, op, "real", "value")
    shape = _shape(value)
    if len(shape) != 4:
        raise ValueError(f"{op}: argument `value` must be 4-D [batch, height, width, channels]; got shape "
                         f"{list(shape)}")
    ratio = [float(v) for v in np.asarray(pooling_ratio, np.float64).reshape(-1)]
    ratio = [1.0, *ratio * (2 if len(ratio) == 1 else 1), 1.0] if len(ratio) in (1, 2) else ratio
    if len(ratio) != 4 or ratio[0] != 1.0 or ratio[3] != 1.0:
        raise ValueError(f"{op}: argument `pooling_ratio` must have 1, 2 or 4 entries, the batch and channel ones "
                         f"1.0; got {list(np.asarray(pooling_ratio).reshape(-1))}")
    if min(ratio) < 1.0:
        raise InvalidArgumentError(None, None, f"pooling_ratio cannot be smaller than 1, got: {ratio} (argument "
                                   f"`pooling_ratio`) [Op:{op}]")
    outs = [int(np.floor(shape[i] / ratio[i])) for i in (1, 2)]
    if min(outs) < 1:
        raise InvalidArgumentError(None, None, f"pooling_ratio is too large: output size {outs} from input "
                                   f"{list(shape[1:3])} (argument `pooling_ratio`) [Op:{op}]")
    from . import random as _random
    # (an op seed's key is a constant even inside a compiled function: the regions are static there)
    if seed:
        with jax.ensure_compile_time_eval():
            key = _random._next_key(int(seed), static=True)
    else:
        key = _random._next_key(None)
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key) if jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
                                           else key).astype(np.uint32).tolist())
    seqs = [_pooling_sequence(shape[i], outs[i - 1], rng, pseudo_random) for i in (1, 2)]
    regions = [tuple(map(tuple, _regions(sq, shape[i], overlapping).tolist())) for sq, i in zip(seqs, (1, 2))]
    out = _call(_FRACTIONAL[kind], op, value, rows=regions[0], cols=regions[1], kind=kind)
    long = _dtypes.storage_dtype(np.dtype(np.int64), "pooling sequence")
    return FractionalPool(out, convert_to_tensor(seqs[0].astype(long)), convert_to_tensor(seqs[1].astype(long)))


@tf_types("FractionalMaxPool")
def fractional_max_pool(value, pooling_ratio, pseudo_random=False, overlapping=False, seed=0, name=None):
    """``tf.nn.fractional_max_pool``: max pooling over regions of fractional average size
    ``pooling_ratio`` (TF's pooling sequences; the shuffle draws from tapejax's seed rules, not TF's
    Philox bits).  The gradient goes to each region's first maximum.  The regions are drawn on the
    host: inside a compiled function give an op ``seed`` (they are then fixed for that trace)."""
    return _fractional("max", value, pooling_ratio, pseudo_random, overlapping, seed)


@tf_types("FractionalAvgPool")
def fractional_avg_pool(value, pooling_ratio, pseudo_random=False, overlapping=False, seed=0, name=None):
    """``tf.nn.fractional_avg_pool``: the mean of each fractional pooling region (see
    ``fractional_max_pool``)."""
    return _fractional("avg", value, pooling_ratio, pseudo_random, overlapping, seed)


__all__ = ["fractional_avg_pool", "fractional_max_pool", "isotonic_regression", "max_pool_with_argmax",
           "with_space_to_batch"]
