"""Convolutions and pooling in 1, 2 and 3 spatial dimensions beyond ``ops.nn``'s 2-D ones
(``tf.nn.convolution``, ``conv3d``, ``conv_transpose``, ``atrous_conv2d``, ``separable_conv2d``,
``max_pool`` / ``avg_pool`` / ``pool`` of any rank, the explicit backprop ops), on the same
``lax.conv_general_dilated`` / ``lax.reduce_window`` functions, so gradients and TF's padding rules
(SAME average pooling counts only the valid entries) are ``ops.nn``'s."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core.bind import bind
from ._registry import _bad, _shape, check_binary, check_float, op_error, prim, tf_types
from .nn import _avg_pool, _channels_first, _check_conv, _conv, _max_pool, _padding, _tuple, depthwise_conv2d


def _call(p, op_type, *args, **static):
    try:
        return bind(p, *args, **static)
    except (TypeError, ValueError) as e:
        raise op_error(e, op_type) from e


_CONV = {n: prim(t, _conv) for n, t in ((3, "Conv3D"),)}
_CONV_ND = prim("Convolution", _conv)


@tf_types("Convolution")
def convolution(input, filters, strides=None, padding="VALID", data_format=None, dilations=None, name=None):  # noqa: A002
    """``tf.nn.convolution``: an N-d convolution (N = rank - 2), channels last unless ``data_format``
    starts with "NC"; filters ``[spatial..., in / groups, out]``."""
    n = len(_shape(input)) - 2
    nchw = _channels_first(data_format)
    cin = _check_conv(input, filters, "Convolution", n, nchw)
    return _call(_CONV_ND, "Convolution", input, filters, strides=_tuple(strides, n, "strides"),
                 padding=_padding(padding, "Convolution", n), dilations=_tuple(dilations, n, "dilations"),
                 nchw=nchw, groups=cin // _shape(filters)[-2])


_CONV_OP = prim("Conv", _conv)


@tf_types("Conv")
def conv(input, filter, strides, padding, explicit_paddings=(), data_format="CHANNELS_LAST", dilations=(),  # noqa: A002
         batch_dims=1, groups=1, name=None):
    """``tf.conv`` (TF's ``Conv`` op): an N-d convolution, N = rank(filter) - 2; ``strides`` and
    ``dilations`` have N + 2 entries (1 for the batch and channel dimensions), ``padding`` is "SAME",
    "VALID" or "EXPLICIT" (``explicit_paddings``: 2 (N + 2) numbers); ``batch_dims`` leading batch
    dimensions are merged for the convolution and split again.  (TF registers no gradient for
    ``Conv``; tapejax's is the convolution's, as ``tf.nn.convolution``'s.)"""
    if data_format not in ("CHANNELS_LAST", "CHANNELS_FIRST"):
        raise _bad("Conv", f"Value for attr 'data_format' of \"{data_format}\" is not in the list of allowed values: "
                   "\"CHANNELS_LAST\", \"CHANNELS_FIRST\" (argument `data_format`)")
    n = len(_shape(filter)) - 2
    nchw = data_format == "CHANNELS_FIRST"
    shape = _shape(input)
    b = int(batch_dims)
    if len(shape) != n + 1 + b:
        raise _bad("Conv", f"input must be {n + 1 + b}-dimensional (batch_dims {b} + {n} spatial + channels); got "
                   f"shape {list(shape)} (argument `input`)")
    st, dl = [int(v) for v in strides], [int(v) for v in dilations] or [1] * (n + 2)
    if len(st) != n + 2 or len(dl) != n + 2:
        raise _bad("Conv", f"strides and dilations must have {n + 2} entries; got {len(st)} and {len(dl)}")
    spatial = slice(2, None) if nchw else slice(1, -1)
    if padding == "EXPLICIT":
        e = [int(v) for v in explicit_paddings]
        if len(e) != 2 * (n + 2):
            raise _bad("Conv", f"explicit_paddings must have {2 * (n + 2)} entries; got {len(e)}")
        pads = tuple((e[2 * i], e[2 * i + 1]) for i in range(n + 2))[spatial]
    else:
        pads = _padding(padding, "Conv", n)
    from .array import reshape
    x = reshape(input, (-1,) + tuple(shape[b:])) if b != 1 else input
    out = _call(_CONV_OP, "Conv", x, filter, strides=tuple(st[spatial]), padding=pads, dilations=tuple(dl[spatial]),
                nchw=nchw, groups=int(groups))
    return reshape(out, tuple(shape[:b]) + tuple(_shape(out)[1:])) if b != 1 else out


@tf_types("Conv3D")
def conv3d(input, filters, strides, padding, data_format="NDHWC", dilations=None, name=None):  # noqa: A002
    """``tf.nn.conv3d``: NDHWC input, DHWIO filters."""
    nchw = _channels_first(data_format)
    cin = _check_conv(input, filters, "Conv3D", 3, nchw)
    return _call(_CONV[3], "Conv3D", input, filters, strides=_tuple(strides, 3, "strides"),
                 padding=_padding(padding, "Conv3D", 3), dilations=_tuple(dilations, 3, "dilations"), nchw=nchw,
                 groups=cin // _shape(filters)[-2])


def atrous_conv2d(value, filters, rate, padding, name=None):
    """``tf.nn.atrous_conv2d``: a 2-D convolution with the filters dilated by ``rate``."""
    return convolution(value, filters, padding=padding, dilations=(int(rate), int(rate)))


atrous_conv2d._tf_types = ("Convolution",)


def _conv_transpose(x, w, *, out_shape, strides, padding, dilations, nchw):
    """The gradient of the convolution with respect to its input (TF's conv_transpose)."""
    def fwd(y):
        return _conv(y, w, strides=strides, padding=padding, dilations=dilations, nchw=nchw, groups=1)
    _, vjp = jax.vjp(fwd, jnp.zeros(out_shape, x.dtype))
    return vjp(x)[0]


_CONV_T = prim("ConvBackpropInput", _conv_transpose)


@tf_types("ConvBackpropInput")
def conv_transpose(input, filters, output_shape, strides, padding="SAME", data_format=None, dilations=None,  # noqa: A002
                   name=None):
    """``tf.nn.conv_transpose`` (any rank): filters ``[spatial..., out_channels, in_channels]``."""
    n = len(_shape(input)) - 2
    nchw = _channels_first(data_format)
    check_binary(input, filters, "ConvBackpropInput")
    out = tuple(int(d) for d in np.asarray(getattr(output_shape, "_value", output_shape)).reshape(-1))
    ws = _shape(filters)
    cin = _shape(input)[1 if nchw else -1]
    if ws[-1] != cin:
        raise _bad("ConvBackpropInput", f"input depth {cin} must equal the filters' last dimension {ws[-1]} "
                   "(argument `filters`)")
    return _call(_CONV_T, "ConvBackpropInput", input, filters, out_shape=out, strides=_tuple(strides, n, "strides"),
                 padding=_padding(padding, "ConvBackpropInput", n), dilations=_tuple(dilations, n, "dilations"),
                 nchw=nchw)


def conv1d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NWC", dilations=None,  # noqa: A002
                     name=None):
    """``tf.nn.conv1d_transpose``."""
    return conv_transpose(input, filters, output_shape, strides, padding, data_format, dilations)


def conv3d_transpose(input, filters, output_shape, strides, padding="SAME", data_format="NDHWC", dilations=None,  # noqa: A002
                     name=None):
    """``tf.nn.conv3d_transpose``."""
    return conv_transpose(input, filters, output_shape, strides, padding, data_format, dilations)


def atrous_conv2d_transpose(value, filters, output_shape, rate, padding, name=None):
    """``tf.nn.atrous_conv2d_transpose``: ``conv2d_transpose`` with the filters dilated by ``rate``."""
    return conv_transpose(value, filters, output_shape, 1, padding, None, (int(rate), int(rate)))


for _f in (conv1d_transpose, conv3d_transpose, atrous_conv2d_transpose):
    _f._tf_types = ("ConvBackpropInput",)


def _filter_grad(x, dy, *, w_shape, strides, padding, dilations, nchw):
    def fwd(w):
        return _conv(x, w, strides=strides, padding=padding, dilations=dilations, nchw=nchw, groups=1)
    _, vjp = jax.vjp(fwd, jnp.zeros(w_shape, x.dtype))
    return vjp(dy)[0]


_CONV2D_FILTER = prim("Conv2DBackpropFilter", _filter_grad)


@tf_types("Conv2DBackpropFilter")
def conv2d_backprop_filter_v2(input, filter, out_backprop, strides, padding, data_format="NHWC",  # noqa: A002
                              dilations=None, name=None):
    """``tf.conv2d_backprop_filter_v2``: the gradient of ``conv2d`` with respect to a filter shaped like
    ``filter`` (its values are not read)."""
    nchw = _channels_first(data_format)
    return _call(_CONV2D_FILTER, "Conv2DBackpropFilter", input, out_backprop, w_shape=tuple(_shape(filter)),
                 strides=_tuple(strides, 2, "strides"), padding=_padding(padding, "Conv2DBackpropFilter", 2),
                 dilations=_tuple(dilations, 2, "dilations"), nchw=nchw)


@tf_types("ConvBackpropInput")
def conv2d_backprop_input_v2(input, filter, out_backprop, strides, padding, data_format="NHWC",  # noqa: A002
                             dilations=None, name=None):
    """``tf.conv2d_backprop_input_v2``: the gradient of ``conv2d`` with respect to an input shaped like
    ``input`` (its values are not read)."""
    return conv_transpose(out_backprop, filter, _shape(input), strides, padding, data_format, dilations)


def _dw_filter_grad(x, dy, *, w_shape, strides, padding, dilations, nchw):
    def fwd(w):
        kh, kw, cin, m = w.shape
        return _conv(x, w.reshape(kh, kw, 1, cin * m), strides=strides, padding=padding, dilations=dilations,
                     nchw=nchw, groups=cin)
    _, vjp = jax.vjp(fwd, jnp.zeros(w_shape, x.dtype))
    return vjp(dy)[0]


def _dw_input_grad(w, dy, *, x_shape, strides, padding, dilations, nchw):
    def fwd(x):
        kh, kw, cin, m = w.shape
        return _conv(x, w.reshape(kh, kw, 1, cin * m), strides=strides, padding=padding, dilations=dilations,
                     nchw=nchw, groups=cin)
    _, vjp = jax.vjp(fwd, jnp.zeros(x_shape, w.dtype))
    return vjp(dy)[0]


_DW_FILTER = prim("DepthwiseConv2dNativeBackpropFilter", _dw_filter_grad)
_DW_INPUT = prim("DepthwiseConv2dNativeBackpropInput", _dw_input_grad)


@tf_types("DepthwiseConv2dNativeBackpropFilter")
def depthwise_conv2d_backprop_filter(input, filter_sizes, out_backprop, strides, padding, data_format="NHWC",  # noqa: A002
                                     dilations=None, name=None):
    """``tf.nn.depthwise_conv2d_backprop_filter``: the gradient of ``depthwise_conv2d`` with respect to a
    filter of shape ``filter_sizes``."""
    ws = tuple(int(d) for d in np.asarray(getattr(filter_sizes, "_value", filter_sizes)).reshape(-1))
    return _call(_DW_FILTER, "DepthwiseConv2dNativeBackpropFilter", input, out_backprop, w_shape=ws,
                 strides=_tuple(strides, 2, "strides"), padding=_padding(padding, "DepthwiseConv2dNative", 2),
                 dilations=_tuple(dilations, 2, "dilations"), nchw=_channels_first(data_format))


@tf_types("DepthwiseConv2dNativeBackpropInput")
def depthwise_conv2d_backprop_input(input_sizes, filter, out_backprop, strides, padding, data_format="NHWC",  # noqa: A002
                                    dilations=None, name=None):
    """``tf.nn.depthwise_conv2d_backprop_input``: the gradient of ``depthwise_conv2d`` with respect to an
    input of shape ``input_sizes``."""
    xs = tuple(int(d) for d in np.asarray(getattr(input_sizes, "_value", input_sizes)).reshape(-1))
    return _call(_DW_INPUT, "DepthwiseConv2dNativeBackpropInput", filter, out_backprop, x_shape=xs,
                 strides=_tuple(strides, 2, "strides"), padding=_padding(padding, "DepthwiseConv2dNative", 2),
                 dilations=_tuple(dilations, 2, "dilations"), nchw=_channels_first(data_format))


def separable_conv2d(input, depthwise_filter, pointwise_filter, strides, padding, data_format=None,  # noqa: A002
                     dilations=None, name=None):
    """``tf.nn.separable_conv2d``: ``depthwise_conv2d`` then a 1x1 ``conv2d`` with ``pointwise_filter``."""
    from .nn import conv2d
    y = depthwise_conv2d(input, depthwise_filter, strides, padding, data_format, dilations)
    return conv2d(y, pointwise_filter, 1, "VALID", data_format or "NHWC")


separable_conv2d._tf_types = ("DepthwiseConv2dNative", "Conv2D")


# -- pooling of any rank ----------------------------------------------------------------------

def _windows(x, win, st, padding, fill):
    """The pooling windows of ``x`` stacked on a new leading axis (one slice per window offset)."""
    pads = lax.padtype_to_pads(x.shape, win, st, padding)
    xp = lax.pad(x, jnp.asarray(fill, x.dtype), [(lo, hi, 0) for lo, hi in pads])
    out = [(xp.shape[d] - win[d]) // st[d] + 1 for d in range(x.ndim)]
    return jnp.stack([lax.slice(xp, off, [o + (n - 1) * s + 1 for o, n, s in zip(off, out, st)], st)
                      for off in np.ndindex(*win)])


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3))
def _max_pool3d_every_tie(x, win, st, padding):
    return lax.reduce_window(x, -jnp.inf, lax.max, win, st, padding)


@_max_pool3d_every_tie.defjvp
def _every_tie_jvp(win, st, padding, p, t):
    # TF's MaxPool3DGrad gives each window's gradient to *every* element equal to its maximum (not
    # to the first, as MaxPool's does): the tangent of a window is the sum of those elements'.
    (x,), (tx,) = p, t
    y = _max_pool3d_every_tie(x, win, st, padding)
    mask = _windows(x, win, st, padding, -jnp.inf) == y
    return y, jnp.sum(jnp.where(mask, _windows(tx, win, st, padding, 0), 0), axis=0)



def _max_pool3d(x, *, ksize, strides, padding, nchw):
    win, st = ((1, 1) + ksize, (1, 1) + strides) if nchw else ((1,) + ksize + (1,), (1,) + strides + (1,))
    return _max_pool3d_every_tie(x, win, st, padding)


_POOLS = {(kind, n): prim(f"{kind}Pool{'' if n == 2 else f'{n}D'}",
                          _avg_pool if kind == "Avg" else _max_pool3d if n == 3 else _max_pool)
          for kind in ("Max", "Avg") for n in (1, 3)}


def _pool_nd(kind, input, ksize, strides, padding, data_format, n=None):  # noqa: A002
    from .nn import avg_pool2d, max_pool2d
    n = len(_shape(input)) - 2 if n is None else n
    op_type = f"{kind}Pool{'' if n == 2 else f'{n}D'}"
    check_float(input, op_type, "real", "input")
    if len(_shape(input)) != n + 2:
        raise _bad(op_type, f"input must be {n + 2}-dimensional, got shape {list(_shape(input))}")
    if n == 2:
        return (max_pool2d if kind == "Max" else avg_pool2d)(input, ksize, strides, padding, data_format or "NHWC")
    if n not in (1, 3):
        raise _bad(op_type, f"pooling over {n} spatial dimensions is not supported (1, 2 or 3)")
    if not isinstance(padding, str) or padding not in ("SAME", "VALID"):
        raise _bad(op_type, f"Value for attr 'padding' of \"{padding}\" is not in the list of allowed values: "
                   "\"SAME\", \"VALID\" (argument `padding`)")
    return _call(_POOLS[(kind, n)], op_type, input, ksize=_tuple(ksize, n, "ksize"), strides=_tuple(strides, n, "strides"),
                 padding=padding, nchw=_channels_first(data_format))


def max_pool(input, ksize, strides, padding, data_format=None, name=None):  # noqa: A002
    """``tf.nn.max_pool``: max pooling over 1, 2 or 3 spatial dimensions (by the input's rank)."""
    return _pool_nd("Max", input, ksize, strides, padding, data_format)


def avg_pool(input, ksize, strides, padding, data_format=None, name=None):  # noqa: A002
    """``tf.nn.avg_pool``: average pooling over 1, 2 or 3 spatial dimensions (by the input's rank)."""
    return _pool_nd("Avg", input, ksize, strides, padding, data_format)


def max_pool1d(input, ksize, strides, padding, data_format="NWC", name=None):  # noqa: A002
    """``tf.nn.max_pool1d``."""
    return _pool_nd("Max", input, ksize, strides, padding, data_format, 1)


def avg_pool1d(input, ksize, strides, padding, data_format="NWC", name=None):  # noqa: A002
    """``tf.nn.avg_pool1d``."""
    return _pool_nd("Avg", input, ksize, strides, padding, data_format, 1)


def max_pool3d(input, ksize, strides, padding, data_format="NDHWC", name=None):  # noqa: A002
    """``tf.nn.max_pool3d``."""
    return _pool_nd("Max", input, ksize, strides, padding, data_format, 3)


def avg_pool3d(input, ksize, strides, padding, data_format="NDHWC", name=None):  # noqa: A002
    """``tf.nn.avg_pool3d``."""
    return _pool_nd("Avg", input, ksize, strides, padding, data_format, 3)


max_pool._tf_types, avg_pool._tf_types = ("MaxPool", "MaxPool1D", "MaxPool3D"), ("AvgPool", "AvgPool1D", "AvgPool3D")
max_pool1d._tf_types, avg_pool1d._tf_types = ("MaxPool1D",), ("AvgPool1D",)
max_pool3d._tf_types, avg_pool3d._tf_types = ("MaxPool3D",), ("AvgPool3D",)


def _window_pool(x, *, kind, window, strides, dilation, padding, nchw):
    win = (1, 1) + window if nchw else (1,) + window + (1,)
    st = (1, 1) + strides if nchw else (1,) + strides + (1,)
    dil = (1, 1) + dilation if nchw else (1,) + dilation + (1,)
    if kind == "MAX":
        return lax.reduce_window(x, -jnp.inf, lax.max, win, st, padding, window_dilation=dil)
    s = lax.reduce_window(x, 0.0, lax.add, win, st, padding, window_dilation=dil)
    cnt = lax.reduce_window(jnp.ones(x.shape, x.dtype), 0.0, lax.add, win, st, padding, window_dilation=dil)
    return s / cnt


_POOL = prim("Pool", _window_pool)


@tf_types("Pool")
def pool(input, window_shape, pooling_type, strides=None, padding="VALID", data_format=None, dilations=None,  # noqa: A002
         name=None):
    """``tf.nn.pool``: "MAX" or "AVG" pooling over N spatial dimensions with ``dilations``."""
    n = len(_shape(input)) - 2
    pt = str(pooling_type).upper()
    if pt not in ("MAX", "AVG"):
        raise ValueError(f"`pooling_type` must be 'MAX' or 'AVG'; got {pooling_type!r}")
    return _call(_POOL, "Pool", input, kind=pt, window=_tuple(window_shape, n, "window_shape"),
                 strides=_tuple(strides, n, "strides"), dilation=_tuple(dilations, n, "dilations"),
                 padding=_padding(padding, "Pool", n), nchw=_channels_first(data_format))


def _dilation2d(x, w, *, strides, rates, padding):
    """Grayscale morphological dilation: ``max`` over the (dilated) window of ``x + w``; positions
    outside the input never win (padded with -inf, as TF's kernel skips them); a tie's gradient goes
    to its first position in the window, as TF's."""
    kh, kw, _ = w.shape
    eff = [(k - 1) * r + 1 for k, r in zip((kh, kw), rates)]
    size = x.shape[1:3]
    if padding == "SAME":
        out = [-(-n // s) for n, s in zip(size, strides)]
        total = [max((o - 1) * s + e - n, 0) for o, s, e, n in zip(out, strides, eff, size)]
        pads = [(t // 2, t - t // 2) for t in total]
    else:
        out = [(n - e) // s + 1 for n, e, s in zip(size, eff, strides)]
        pads = [(0, 0), (0, 0)]
    xp = jnp.pad(x, ((0, 0), pads[0], pads[1], (0, 0)), constant_values=-jnp.inf)
    cands = []
    for dy in range(kh):
        for dx in range(kw):
            y0, x0 = dy * rates[0], dx * rates[1]
            win = xp[:, y0:y0 + (out[0] - 1) * strides[0] + 1:strides[0], x0:x0 + (out[1] - 1) * strides[1] + 1:strides[1]]
            cands.append(win + w[dy, dx])
    # TF's kernels keep the first maximum in (row, column) order and route the gradient there alone
    # (Dilation2DBackpropInput / Filter); jnp.max would share it among ties
    stacked = jnp.stack(cands)
    first = jnp.argmax(stacked, axis=0)
    return jnp.take_along_axis(stacked, first[None], axis=0)[0]


_DILATION = prim("Dilation2D", _dilation2d)


@tf_types("Dilation2D")
def dilation2d(input, filters, strides, padding, data_format, dilations, name=None):  # noqa: A002
    """``tf.nn.dilation2d``: NHWC ``input``, ``filters`` ``[height, width, depth]``; ``strides`` and
    ``dilations`` ``[1, h, w, 1]`` (both required, as TF's); "SAME" or "VALID" padding."""
    if data_format != "NHWC":
        raise ValueError(f"tf.nn.dilation2d only supports data_format NHWC; got {data_format!r}")
    check_binary(input, filters, "Dilation2D")
    st = [int(v) for v in strides]
    dl = [1, 1, 1, 1] if dilations is None else [int(v) for v in dilations]
    if len(st) != 4 or len(dl) != 4 or st[0] != 1 or st[3] != 1 or dl[0] != 1 or dl[3] != 1:
        raise _bad("Dilation2D", f"strides and dilations must be [1, h, w, 1]; got {st} and {dl}")
    if padding not in ("SAME", "VALID"):
        raise _bad("Dilation2D", f"padding must be SAME or VALID; got {padding!r}")
    if len(_shape(input)) != 4 or len(_shape(filters)) != 3 or _shape(input)[3] != _shape(filters)[2]:
        raise _bad("Dilation2D", f"input must be [batch, h, w, depth] and filters [h, w, depth]; got shapes "
                   f"{list(_shape(input))} and {list(_shape(filters))}")
    return _call(_DILATION, "Dilation2D", input, filters, strides=(st[1], st[2]), rates=(dl[1], dl[2]),
                 padding=padding)


def erosion2d(value, filters, strides, padding, data_format, dilations, name=None):
    """``tf.nn.erosion2d``: ``-dilation2d(-value, filters reversed in height and width)`` (TF's
    definition)."""
    from .array import reverse
    from .math import negative
    return negative(dilation2d(negative(value), reverse(filters, [0, 1]), strides, padding, data_format, dilations))


erosion2d._tf_types = ("Dilation2D",)


__all__ = ["atrous_conv2d", "conv", "dilation2d", "erosion2d", "atrous_conv2d_transpose", "avg_pool", "avg_pool1d", "avg_pool3d", "conv1d_transpose",
           "conv2d_backprop_filter_v2", "conv2d_backprop_input_v2", "conv3d", "conv3d_transpose", "conv_transpose",
           "convolution", "depthwise_conv2d_backprop_filter", "depthwise_conv2d_backprop_input", "max_pool",
           "max_pool1d", "max_pool3d", "pool", "separable_conv2d"]
