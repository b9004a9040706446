"""Neural-network ops (``tf.nn``): activations, losses, convolutions, pooling, normalisation.

Layouts are TF's: NHWC / NWC by default (``data_format='NCHW'``/``'NCW'`` are
accepted), filters HWIO, ``padding`` ``'SAME'``/``'VALID'`` (or explicit
pairs), ``strides``/``dilations`` an int or per-dimension list.
Kink conventions are TF's (``_grads``): ``relu'(0) = 0``,
``leaky_relu'(0) = alpha``, ``selu'(0) = scale``; ``max_pool2d`` routes the
gradient to the first maximum of each window.
"""
import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core.bind import REGISTRY, bind
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import _grads as G
from ._registry import (
    check_binary,
    check_float,
    dtype_of,
    op_error,
    prim,
    static_axis,
    tf_types,
    unary_ops,
)
from .array import concat, reshape
from .indexing import gather
from .math import cast, log_sigmoid, sigmoid, softplus, softsign, tanh  # noqa: F401
from .reduce import clip_by_norm, l2_normalize  # noqa: F401

_TENSORISH = (Tensor, Variable)


def _shape(x):
    # (``_meta``: a pending value's shape is known without computing it)
    return tuple(x._meta.shape) if isinstance(x, _TENSORISH) else tuple(np.shape(x))


def _bad(op_type, msg):
    return InvalidArgumentError(None, None, f"{msg} [Op:{op_type}]")


def _elu(x):   # (x < 0 as TF's kernel selects: elu'(NaN) = 1, as TF's EluGrad gives)
    return jnp.where(x < 0, jnp.expm1(jnp.where(x < 0, x, 0)), x)


_ns = {}
unary_ops(_ns, [
    ("relu", "Relu", G.relu, True, None, "features"),
    ("relu6", "Relu6", G.relu6, True, None, "features"),
    ("elu", "Elu", _elu, True, "real", "features"),
    ("selu", "Selu", G.selu, True, "real", "features"),
])
relu, relu6, elu, selu = _ns["relu"], _ns["relu6"], _ns["elu"], _ns["selu"]
relu_prim = REGISTRY["Relu"]
for _f in (relu, relu6, elu, selu):
    _f.__doc__ = f"``tf.nn.{_f.__name__}`` (TF op type ``{_f._tf_types[0]}``)."

_LEAKY = prim("LeakyRelu", lambda x, *, alpha: G.leaky_relu(x, jnp.asarray(alpha, x.dtype)))


@tf_types("LeakyRelu")
def leaky_relu(features, alpha=0.2, name=None):
    """``tf.nn.leaky_relu``: ``x`` if ``x > 0`` else ``alpha * x``; the gradient at 0 is ``alpha`` (TF)."""
    check_float(features, "LeakyRelu", "real", "features")
    return bind(_LEAKY, features, alpha=float(alpha))


_GELU = prim("Gelu", lambda x, *, approximate: jax.nn.gelu(x, approximate=approximate))


@tf_types("Gelu")
def gelu(features, approximate=False, name=None):
    """``tf.nn.gelu``: exact (erf) by default, the tanh approximation with ``approximate=True``."""
    check_float(features, "Gelu", "real", "features")
    return bind(_GELU, features, approximate=bool(approximate))


_SILU = prim("Silu", lambda x, beta: x * jax.nn.sigmoid(beta * x))


@tf_types("Silu")
def silu(features, beta=1.0):
    """``tf.nn.silu`` / ``tf.nn.swish``: ``x * sigmoid(beta * x)``."""
    check_float(features, "Silu", "real", "features")
    return bind(_SILU, features, convert_to_tensor(beta, dtype_hint=dtype_of(features) or np.float32))


swish = silu


def _softmax(x, *, axis):
    return jax.nn.softmax(x, axis=axis)


def _log_softmax(x, *, axis):
    return jax.nn.log_softmax(x, axis=axis)


_SOFTMAX = prim("Softmax", _softmax)
_LOG_SOFTMAX = prim("LogSoftmax", _log_softmax)


def _softmax_op(p, op_type, logits, axis):
    check_float(logits, op_type, "real", "logits")
    nd = len(_shape(logits))
    ax = -1 if axis is None else int(axis)
    if not -nd <= ax < max(nd, 1):
        raise _bad(op_type, f"`axis` must be in the range [{-nd}, {nd}) where {nd} is the number of "
                   f"dimensions in the input. Received: axis={ax}")
    return bind(p, logits, axis=ax)


@tf_types("Softmax")
def softmax(logits, axis=None, name=None):
    """``tf.nn.softmax`` over ``axis`` (last when None)."""
    return _softmax_op(_SOFTMAX, "Softmax", logits, axis)


@tf_types("LogSoftmax")
def log_softmax(logits, axis=None, name=None):
    """``tf.nn.log_softmax`` over ``axis`` (last when None)."""
    return _softmax_op(_LOG_SOFTMAX, "LogSoftmax", logits, axis)


# -- normalisation -------------------------------------------------------------------

def _moments(x, *, axes, keepdims):
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - lax.stop_gradient(mean)), axis=axes, keepdims=True)
    if not keepdims:
        mean, var = jnp.squeeze(mean, axes), jnp.squeeze(var, axes)
    return mean, var


_MOMENTS = prim("Moments", _moments, multiple_results=True, pure_results=True)


@tf_types("Moments")
def moments(x, axes, shift=None, keepdims=False, name=None):
    """``tf.nn.moments``: ``(mean, variance)`` over ``axes`` (the variance's gradient treats the mean
    as a constant, as TF's formula does; mathematically the same)."""
    nd = len(_shape(x))
    ax = static_axis(axes)
    ax = tuple(range(nd)) if ax is None else ax if isinstance(ax, tuple) else (ax,)  # None: every axis
    for a in ax:   # (TF's Mean kernel: wrapping an axis would average over another one)
        if not -nd <= a < nd:
            raise InvalidArgumentError(None, None, f"Invalid reduction dimension ({a} for input with {nd} "
                                       f"dimension(s)) (argument `axes`) [Op:Mean]")
    return tuple(bind(_MOMENTS, x, axes=tuple(a % nd for a in ax), keepdims=bool(keepdims)))


def _batch_norm(x, mean, var, offset, scale, *, eps):
    inv = G.rsqrt(var + eps)
    if scale is not None:
        inv = inv * scale
    return x * inv + ((offset if offset is not None else 0) - mean * inv)


_BATCH_NORM = prim("BatchNormalization",
                   lambda x, mean, var, offset, scale, *, eps, has_offset, has_scale:
                   _batch_norm(x, mean, var, offset if has_offset else None, scale if has_scale else None,
                               eps=eps))


@tf_types("BatchNormalization")
def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None):
    """``tf.nn.batch_normalization``: ``(x - mean) * scale / sqrt(variance + eps) + offset``."""
    return bind(_BATCH_NORM, x, mean, variance, 0.0 if offset is None else offset,
                1.0 if scale is None else scale, eps=float(variance_epsilon),
                has_offset=offset is not None, has_scale=scale is not None)


def _bias_add(x, b, *, channel_axis):
    shape = [1] * x.ndim
    shape[channel_axis] = b.shape[0]
    return x + b.reshape(shape)


_BIAS_ADD = prim("BiasAdd", _bias_add)


@tf_types("BiasAdd")
def bias_add(value, bias, data_format=None, name=None):
    """``tf.nn.bias_add``: add a 1-D ``bias`` along the channel axis (last; 1 for ``NC...``)."""
    check_binary(value, bias, "BiasAdd")
    s, b = _shape(value), _shape(bias)
    ca = 1 if data_format is not None and str(data_format).startswith("NC") else len(s) - 1
    if len(b) != 1 or len(s) < 2 or s[ca] != b[0]:
        raise _bad("BiasAdd", f"Must provide as many biases as the channel dimension of the input tensor: "
                   f"bias shape {list(b)} vs value shape {list(s)} (argument `bias`)")
    return bind(_BIAS_ADD, value, bias, channel_axis=ca)


def _div_partition(ids, sizes):
    """TF's "div" strategy over shards of ``sizes`` rows: for each id its shard and row there.
    (Shard ``p`` holds ids ``[start_p, start_p + n_p)`` with the first ``N % P`` shards one row
    longer, ``N`` the total rows.)"""
    n, k = sum(sizes), len(sizes)
    per, extras = divmod(n, k)
    if per == 0:  # fewer rows than shards: one row in each of the first n shards
        return ids, jnp.zeros_like(ids)
    shard = jnp.maximum(ids // (per + 1), (ids - extras) // per)
    row = jnp.where(shard < extras, ids % (per + 1), (ids - extras) % per)
    return shard, row


@tf_types("GatherV2")
def embedding_lookup(params, ids, max_norm=None, name=None):
    """``tf.nn.embedding_lookup``: rows of ``params`` at ``ids``.  ``params`` may be a list of
    shards, split by TF2's "div" strategy (ids ``0..`` fill the first shard, then the next); with
    concrete ids each shard is gathered at its rows, so a Variable shard's gradient is an
    ``IndexedSlices`` of its rows, as TF's."""
    if isinstance(params, (list, tuple)):
        if not params:
            raise ValueError("Need at least one param (argument `params` of embedding_lookup is empty)")
        if len(params) == 1:
            params = params[0]
        else:
            params, where = _sharded(list(params), ids)
            if isinstance(params, list):   # concrete ids: one gather per shard, as TF
                return _clip_rows(_stitched(params, where), where[2], max_norm)
            ids = where
    return _clip_rows(gather(params, ids), ids, max_norm)


def _clip_rows(out, ids_or_shape, max_norm):
    if max_norm is not None:
        n = len(ids_or_shape) if isinstance(ids_or_shape, tuple) else len(_shape(ids_or_shape))
        out = clip_by_norm(out, max_norm, axes=tuple(range(n, len(_shape(out)))))
    return out


def _stitched(shards, ids):
    """TF's sharded lookup on concrete ids: a gather from each shard at its rows (so a shard that
    is a Variable gets an ``IndexedSlices`` of its own rows, in the ids' order) and the results
    stitched back into the ids' order; ``ids`` is ``(shard, row)`` per id (``_sharded``)."""
    shard, row, shape = ids
    order = np.concatenate([np.flatnonzero(shard == p) for p in range(len(shards))])
    parts = [gather(p, row[shard == k]) for k, p in enumerate(shards)]
    out = gather(concat(parts, 0), np.argsort(order, kind="stable").astype(np.int32))
    return reshape(out, list(shape) + list(_shape(out)[1:]))


def _sharded(shards, ids):
    """Under TF's div layout, after checking on concrete ids what TF's kernels check (every id's
    shard exists and holds its row): ``(shards, (each id's shard, its row there, ids' shape))``;
    for traced ids, (the shards concatenated, each id's row in that table)."""
    sizes = [int(_shape(p)[0]) for p in shards]
    idv = ids._value if isinstance(ids, (Tensor, Variable)) else jnp.asarray(ids)
    if not isinstance(idv, jax.core.Tracer):
        flat = np.asarray(idv).reshape(-1)
        shard, row = (np.asarray(a) for a in _div_partition(jnp.asarray(flat), sizes))
        for i, (p, r) in enumerate(zip(shard.tolist(), row.tolist())):
            if not 0 <= p < len(shards):
                raise InvalidArgumentError(None, None, f"partitions[{i}] = {p} is not in [0, {len(shards)}): "
                                           f"id {int(flat[i])} is past the {sum(sizes)} rows of the "
                                           "sharded `params` [Op:DynamicPartition]")
            if not 0 <= r < sizes[p]:
                raise InvalidArgumentError(None, None, f"indices[{i}] = {r} is not in [0, {sizes[p]}): "
                                           f"id {int(flat[i])} falls in shard {p} of `params`, which has "
                                           f"{sizes[p]} rows under the div strategy [Op:GatherV2]")
        return shards, (shard, row.astype(flat.dtype), tuple(idv.shape))
    n, k = sum(sizes), len(sizes)
    if sizes != [n // k + (p < n % k) for p in range(k)]:  # not the div layout: map ids to rows
        shard, row = _div_partition(idv, sizes)
        starts = jnp.asarray(np.cumsum([0] + sizes[:-1]), idv.dtype)
        ids = Tensor(starts[jnp.clip(shard, 0, k - 1)] + row)
    return concat(shards, 0), ids


# -- dropout --------------------------------------------------------------------------

def _dropout(x, key, *, rate, noise_shape):
    keep = jax.random.uniform(key, noise_shape, x.dtype) >= rate
    return jnp.where(keep, x / (1 - rate), jnp.zeros((), x.dtype))


_DROPOUT = prim("Dropout", _dropout)
# a Tensor rate is an input (differentiable, as TF's: ``x * mask / (1 - rate)``)
_DROPOUT_T = prim("DropoutRate", lambda x, key, rate, *, noise_shape: _dropout(x, key, rate=rate, noise_shape=noise_shape))


def _dropout_input(x):
    """``x`` as a Tensor (or Variable) of a floating dtype: TF's ValueError for any other."""
    t = x if isinstance(x, _TENSORISH) else convert_to_tensor(x)
    if not t.dtype.is_floating:
        raise ValueError(f"`x.dtype` must be a floating point tensor as `x` will be scaled. "
                         f"Received: x_dtype=<dtype: '{t.dtype.name}'>")
    return t


def _noise_shape(x, noise_shape):
    """``noise_shape`` (``x``'s shape when None): it must broadcast with ``x``'s shape, as TF's
    select of the kept entries requires (InvalidArgumentError); the result has the broadcast shape."""
    shape = _shape(x)
    if noise_shape is None:
        return shape
    ns = tuple(int(d) for d in noise_shape)
    try:
        np.broadcast_shapes(ns, shape)
    except ValueError:
        raise _bad("SelectV2", f"condition [{', '.join(map(str, ns))}], then [{', '.join(map(str, shape))}] "
                   f"must be broadcastable: argument `noise_shape` {list(ns)} vs `x`'s shape {list(shape)}") from None
    return ns


@tf_types("Dropout", "DropoutRate")
def dropout(x, rate, noise_shape=None, seed=None, name=None):
    """``tf.nn.dropout``: zero entries with probability ``rate`` (a float or a scalar Tensor), scale the
    rest by ``1/(1-rate)``.  The mask comes from ``tapejax.random`` with TF's seed rules.  A Python
    ``rate`` of 0 returns ``x`` itself, after the checks and after advancing the random state as
    a draw would (TF's fast path)."""
    from . import random as _random
    if isinstance(rate, (int, float)) and not isinstance(rate, bool):
        if not 0 <= rate < 1:
            raise ValueError(f"`rate` must be a scalar tensor or a float in the range [0, 1). "
                             f"Received: rate={rate}")
    elif isinstance(rate, _TENSORISH) and tuple(rate.shape) == () and rate.dtype.is_floating:
        x = _dropout_input(x)
        ns = _noise_shape(x, noise_shape)
        return bind(_DROPOUT_T, x, _random._next_key(seed), rate, noise_shape=ns)
    else:
        raise ValueError(f"`rate` must be a scalar tensor or a float in the range [0, 1). Received: "
                         f"rate={rate!r}")
    x = _dropout_input(x)
    ns = _noise_shape(x, noise_shape)
    key = _random._next_key(seed)   # (drawn for rate 0 too: later draws are as after any dropout, TF)
    if rate == 0:   # TF's fast path for a Python 0: the input itself (a Variable's read), no mask
        return convert_to_tensor(x)
    return bind(_DROPOUT, x, key, rate=float(rate), noise_shape=ns)


# -- convolutions and pooling -----------------------------------------------------------

def _tuple(v, n, what):
    if v is None:
        return (1,) * n
    if isinstance(v, (int, np.integer)):
        return (int(v),) * n
    v = tuple(int(a) for a in v)
    if len(v) == n:
        return v
    if len(v) == n + 2:
        return v[1:-1]
    if len(v) == 1:
        return v * n
    raise ValueError(f"`{what}` should be an int or a list of {n} (or {n + 2}) ints; got {list(v)}")


def _padding(padding, op_type, n):
    if isinstance(padding, str):
        if padding not in ("SAME", "VALID"):
            raise _bad(op_type, f"Value for attr 'padding' of \"{padding}\" is not in the list of allowed "
                       f"values: \"SAME\", \"VALID\", \"EXPLICIT\" (argument `padding`)")
        return padding
    pads = [tuple(int(a) for a in p) for p in padding]
    if len(pads) == n + 2:
        pads = pads[1:-1]
    return tuple(pads)


def _channels_first(data_format):
    return data_format is not None and str(data_format).startswith("NC")


def _conv(x, w, *, strides, padding, dilations, nchw, groups):
    n = x.ndim - 2
    sp = "".join("DHW"[-n:])
    lhs = ("NC" + sp) if nchw else ("N" + sp + "C")
    dn = lax.conv_dimension_numbers(x.shape, w.shape, (lhs, sp + "IO", lhs))
    return lax.conv_general_dilated(x, w, strides, padding, rhs_dilation=dilations, dimension_numbers=dn,
                                    feature_group_count=groups)


_CONV2D = prim("Conv2D", _conv)
_CONV1D = prim("Conv1D", _conv)


def _check_conv(x, w, op_type, n, nchw, depthwise=False):
    check_binary(x, w, op_type)
    check_float(x, op_type, "real", "input")
    xs, ws = _shape(x), _shape(w)
    if len(xs) != n + 2 or len(ws) != n + 2:
        raise _bad(op_type, f"input must be {n + 2}-dimensional and filter {n + 2}-dimensional; got "
                   f"input shape {list(xs)}, filter shape {list(ws)}")
    cin = xs[1] if nchw else xs[-1]
    if depthwise:
        if ws[-2] != cin:
            raise _bad(op_type, f"input and filter must have the same depth: {cin} vs {ws[-2]}")
    elif cin % ws[-2]:
        raise _bad(op_type, f"input depth must be evenly divisible by filter depth: {cin} vs {ws[-2]}")
    return cin


@tf_types("Conv2D")
def conv2d(input, filters, strides, padding, data_format="NHWC", dilations=None, name=None):
    """``tf.nn.conv2d``: NHWC input, HWIO filters."""
    nchw = _channels_first(data_format)
    cin = _check_conv(input, filters, "Conv2D", 2, nchw)
    try:
        return bind(_CONV2D, input, filters, strides=_tuple(strides, 2, "strides"),
                    padding=_padding(padding, "Conv2D", 2), dilations=_tuple(dilations, 2, "dilations"),
                    nchw=nchw, groups=cin // _shape(filters)[-2])
    except (TypeError, ValueError) as e:
        raise op_error(e, "Conv2D") from e


@tf_types("Conv1D")
def conv1d(input, filters, stride, padding, data_format="NWC", dilations=None, name=None):
    """``tf.nn.conv1d``: NWC input, WIO filters."""
    nchw = _channels_first(data_format)
    cin = _check_conv(input, filters, "Conv1D", 1, nchw)
    try:
        return bind(_CONV1D, input, filters, strides=_tuple(stride, 1, "stride"),
                    padding=_padding(padding, "Conv1D", 1), dilations=_tuple(dilations, 1, "dilations"),
                    nchw=nchw, groups=cin // _shape(filters)[-2])
    except (TypeError, ValueError) as e:
        raise op_error(e, "Conv1D") from e


def _depthwise(x, w, *, strides, padding, dilations, nchw):
    kh, kw, cin, m = w.shape
    return _conv(x, w.reshape(kh, kw, 1, cin * m), strides=strides, padding=padding, dilations=dilations,
                 nchw=nchw, groups=cin)


_DEPTHWISE = prim("DepthwiseConv2dNative", _depthwise)


@tf_types("DepthwiseConv2dNative")
def depthwise_conv2d(input, filter, strides, padding, data_format=None, dilations=None, name=None):
    """``tf.nn.depthwise_conv2d``: filter ``[kh, kw, in_channels, channel_multiplier]``."""
    nchw = _channels_first(data_format)
    _check_conv(input, filter, "DepthwiseConv2dNative", 2, nchw, depthwise=True)
    st = _tuple(strides, 2, "strides")
    return bind(_DEPTHWISE, input, filter, strides=st, padding=_padding(padding, "DepthwiseConv2dNative", 2),
                dilations=_tuple(dilations, 2, "dilations"), nchw=nchw)


def _conv_transpose(x, w, *, out_shape, strides, padding, dilations, nchw):
    # The gradient of conv2d with respect to its input, as TF defines conv2d_transpose.
    def fwd(y):
        return _conv(y, w, strides=strides, padding=padding, dilations=dilations, nchw=nchw, groups=1)
    _, vjp = jax.vjp(fwd, jnp.zeros(out_shape, x.dtype))
    return vjp(x)[0]


_CONV2D_T = prim("Conv2DBackpropInput", _conv_transpose)


@tf_types("Conv2DBackpropInput")
def conv2d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NHWC",
                     dilations=None, name=None):
    """``tf.nn.conv2d_transpose``: filters ``[kh, kw, out_channels, in_channels]``."""
    nchw = _channels_first(data_format)
    check_binary(input, filters, "Conv2DBackpropInput")
    out_shape = tuple(int(d) for d in np.asarray(getattr(output_shape, "_value", output_shape)))
    ws = _shape(filters)
    cin = _shape(input)[1 if nchw else -1]
    if ws[-1] != cin:
        raise _bad("Conv2DBackpropInput", f"input depth {cin} must equal the filters' last dimension "
                   f"{ws[-1]} (argument `filters`)")
    try:
        return bind(_CONV2D_T, input, filters, out_shape=out_shape, strides=_tuple(strides, 2, "strides"),
                    padding=_padding(padding, "Conv2DBackpropInput", 2),
                    dilations=_tuple(dilations, 2, "dilations"), nchw=nchw)
    except (TypeError, ValueError) as e:
        raise op_error(e, "Conv2DBackpropInput") from e


def _window(nchw, k, s):
    return ((1, 1) + k, (1, 1) + s) if nchw else ((1,) + k + (1,), (1,) + s + (1,))


def _max_pool(x, *, ksize, strides, padding, nchw):
    win, st = _window(nchw, ksize, strides)
    return _first_max_pool(x, win, st, padding)


def _first_max_pool(x, win, st, padding):
    return lax.reduce_window(x, -jnp.inf, lax.max, win, st, padding)


def _avg_pool(x, *, ksize, strides, padding, nchw):
    win, st = _window(nchw, ksize, strides)
    s = lax.reduce_window(x, 0.0, lax.add, win, st, padding)
    if padding == "VALID":
        return s / np.prod(ksize)
    ones = jnp.ones(x.shape, x.dtype)
    return s / lax.reduce_window(ones, 0.0, lax.add, win, st, padding)  # TF excludes padding


_MAX_POOL = prim("MaxPool", _max_pool)
_AVG_POOL = prim("AvgPool", _avg_pool)


def _pool(p, op_type, input, ksize, strides, padding, data_format):
    check_float(input, op_type, "real", "input")
    if len(_shape(input)) != 4:
        raise _bad(op_type, f"input must be 4-dimensional, got shape {list(_shape(input))}")
    if not isinstance(padding, str) or padding not in ("SAME", "VALID"):
        raise _bad(op_type, f"Value for attr 'padding' of \"{padding}\" is not in the list of allowed "
                   f"values: \"SAME\", \"VALID\" (argument `padding`)")
    ks, st = _tuple(ksize, 2, "ksize"), _tuple(strides, 2, "strides")
    if min(ks) <= 0:
        raise _bad(op_type, f"Sliding window ksize must be positive: got {list(ks)} (argument `ksize`)")
    if min(st) <= 0:
        raise _bad(op_type, f"Sliding window stride must be positive: got {list(st)} (argument `strides`)")
    return bind(p, input, ksize=ks, strides=st, padding=padding, nchw=_channels_first(data_format))


@tf_types("MaxPool")
def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):
    """``tf.nn.max_pool2d``: the gradient goes to the first maximum of each window (TF)."""
    return _pool(_MAX_POOL, "MaxPool", input, ksize, strides, padding, data_format)


@tf_types("AvgPool")
def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):
    """``tf.nn.avg_pool2d`` (SAME padding averages over the valid entries only, as TF)."""
    return _pool(_AVG_POOL, "AvgPool", input, ksize, strides, padding, data_format)


__all__ = ["relu", "relu6", "leaky_relu", "elu", "selu", "gelu", "silu", "swish", "softmax",
           "log_softmax", "softsign", "softplus", "sigmoid", "tanh", "l2_normalize", "moments", "batch_normalization", "bias_add", "embedding_lookup",
           "dropout", "conv1d", "conv2d", "conv2d_transpose", "depthwise_conv2d", "max_pool2d",
           "avg_pool2d"]
