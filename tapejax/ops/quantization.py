"""``tf.quantization``'s float-to-float ops: the fake quantisers of quantization-aware training and
``quantize_and_dequantize``.  They take and give float32, so they have a JAX representation (the
ops on TF's quantized dtypes, ``quantize`` / ``dequantize`` / ``quantized_concat``, do not:
``tests/test_api_coverage.py``).

The arithmetic is TF's kernels' (``fake_quant_ops_functor.h``, ``quantize_and_dequantize_op.h``),
in float32:

* ``fake_quant_*``: ``[min, max]`` is *nudged* so that 0 is a grid point (scale
  ``(max - min) / (quant_max - quant_min)``, the zero point rounded half away from 0 and kept in
  ``[quant_min, quant_max]``), the input clamped to the nudged range and rounded to the grid by
  ``floor(x / scale + 0.5)``.  ``min == max == 0`` gives zeros (TF's special case).  The gradients
  are TF's registered ones: the input's passes where ``nudged_min <= x <= nudged_max``; ``min``
  gets the sum of the gradient where ``x < nudged_min``, ``max`` where ``x > nudged_max`` (per
  channel: summed over all but the last axis); at ``min == max == 0`` everything passes to the
  input and ``min`` / ``max`` get 0.
* ``quantize_and_dequantize_v2`` (TF's ``QuantizeAndDequantizeV4``): one scale from the side of
  the range that needs the smaller one, the input clamped (``range_given``) or not, rounded half to
  even or half up; its gradient passes where ``input_min <= x <= input_max`` (the arguments, even
  when the range was not given) and gives ``min`` / ``max`` zeros.  The deprecated
  ``quantize_and_dequantize`` passes every gradient to the input and gives ``None`` to the range.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core.bind import bind
from ..core.errors import InvalidArgumentError, NotFoundError
from ._registry import _bad, _shape, dtype_of, prim, tf_types
from .special import no_gradient

_F32 = jnp.float32


class FakeQuantWithMinMaxVarsGradient(NamedTuple):
    """What TF's ``fake_quant_with_min_max_vars_gradient`` returns."""

    backprops_wrt_input: object
    backprop_wrt_min: object
    backprop_wrt_max: object


class FakeQuantWithMinMaxVarsPerChannelGradient(NamedTuple):
    """What TF's ``fake_quant_with_min_max_vars_per_channel_gradient`` returns."""

    backprops_wrt_input: object
    backprop_wrt_min: object
    backprop_wrt_max: object


def _nudge(mn, mx, num_bits, narrow_range):
    """TF's ``Nudge``: the nudged min, max and scale (float32, broadcast like ``mn``)."""
    qmin = 1.0 if narrow_range else 0.0
    qmax = float((1 << num_bits) - 1)
    scale = (mx - mn) / _F32(qmax - qmin)
    zp_from_min = _F32(qmin) - mn / scale
    zp = jnp.where(zp_from_min < qmin, _F32(qmin),
                   jnp.where(zp_from_min > qmax, _F32(qmax), jnp.floor(zp_from_min + _F32(0.5))))
    return (_F32(qmin) - zp) * scale, (_F32(qmax) - zp) * scale, scale


def _fake_quant(x, mn, mx, num_bits, narrow_range):
    nmin, nmax, scale = _nudge(mn, mx, num_bits, narrow_range)
    shifted = jnp.maximum(jnp.minimum(x, nmax), nmin) - nmin
    level = jnp.floor(shifted * (_F32(1.0) / scale) + _F32(0.5)) * scale
    # (TF rounds the product before adding: an XLA that fuses ``level * scale + nmin`` into one
    # multiply-add, JAX 0.12's CPU code, leaves 3e-8 where TF's level 0 is exactly 0)
    out = lax.optimization_barrier(level) + nmin
    return jnp.where((mn == 0) & (mx == 0), _F32(0.0), out)


def _fake_quant_grads(g, x, mn, mx, num_bits, narrow_range, axes):
    """TF's ``FakeQuantWithMinMaxVars*Gradient``: the input's, min's and max's gradients."""
    nmin, nmax, _ = _nudge(mn, mx, num_bits, narrow_range)
    zero = (mn == 0) & (mx == 0)
    gx = jnp.where(((x >= nmin) & (x <= nmax)) | zero, g, _F32(0.0))
    gmin = jnp.where(zero, _F32(0.0), jnp.sum(jnp.where(x < nmin, g, _F32(0.0)), axis=axes))
    gmax = jnp.where(zero, _F32(0.0), jnp.sum(jnp.where(x > nmax, g, _F32(0.0)), axis=axes))
    return gx, gmin, gmax


def _vars_fn(x, mn, mx, num_bits, narrow_range, per_channel):
    return _fake_quant(x, mn, mx, num_bits, narrow_range)


def _vars_jvp(num_bits, narrow_range, per_channel, primals, tangents):
    """Linear in the tangents: the vjp of this jvp is the masks and sums of TF's gradient."""
    x, mn, mx = primals
    dx, dmn, dmx = tangents
    nmin, nmax, _ = _nudge(mn, mx, num_bits, narrow_range)
    zero = (mn == 0) & (mx == 0)
    inside = ((x >= nmin) & (x <= nmax)) | zero
    d = (jnp.where(inside, dx, _F32(0.0)) + jnp.where((x < nmin) & ~zero, dmn, _F32(0.0))
         + jnp.where((x > nmax) & ~zero, dmx, _F32(0.0)))
    return _vars_fn(x, mn, mx, num_bits, narrow_range, per_channel), d


_vars = jax.custom_jvp(_vars_fn, nondiff_argnums=(3, 4, 5))
_vars.defjvp(_vars_jvp)


def _fq_vars(x, mn, mx, *, num_bits, narrow_range, per_channel):
    return _vars(x, mn, mx, num_bits, narrow_range, per_channel)


def _args_fn(x, *, min, max, num_bits, narrow_range):   # noqa: A002 - TF's attr names
    return _vars(x, _F32(min), _F32(max), num_bits, narrow_range, False)


_FQ_ARGS = prim("FakeQuantWithMinMaxArgs", _args_fn)
_FQ_VARS = prim("FakeQuantWithMinMaxVars", _fq_vars)


def _fq_grad(g, x, mn, mx, *, num_bits, narrow_range, per_channel):
    axes = tuple(range(x.ndim - 1)) if per_channel else None
    return _fake_quant_grads(g, x, mn, mx, num_bits, narrow_range, axes)


_FQ_GRAD = prim("FakeQuantWithMinMaxVarsGradient", _fq_grad, differentiable=False, multiple_results=True)


def _check_bits(num_bits, op, lo=2, hi=16):
    if not lo <= int(num_bits) <= hi:
        raise _bad(op, f"num_bits must be between {lo} and {hi}, inclusive")
    return int(num_bits)


def _f32(x, op=None, arg="inputs"):
    """An argument of a float32-only op: a Tensor of another dtype is TF's error."""
    d = dtype_of(x)
    if d is None:
        return np.asarray(x, np.float32)
    if op and d != np.float32:
        raise _bad(op, f"cannot compute {op} as input `{arg}` was expected to be a float tensor but is a "
                   f"{d.name} tensor")
    return x


def _qdq_input(x, op):
    """``QuantizeAndDequantize*``'s input: TF's CPU kernels take float32 and float64 only."""
    d = dtype_of(x)
    if d is None:
        return np.asarray(x, np.float32)
    if d not in (np.float32, np.float64):
        err = NotFoundError if d.kind in "fV" else InvalidArgumentError
        raise err(None, None, f"Could not find device for node: {op}[T={d.name}] (CPU kernels: float, double) "
                  f"[Op:{op}]")
    return x


@tf_types("FakeQuantWithMinMaxArgs")
def fake_quant_with_min_max_args(inputs, min=-6.0, max=6.0, num_bits=8, narrow_range=False,  # noqa: A002
                                 name=None):
    """``tf.quantization.fake_quant_with_min_max_args``: fake quantisation to the fixed range
    ``[min, max]`` (attributes), gradient passed inside the nudged range."""
    op = "FakeQuantWithMinMaxArgs"
    num_bits = _check_bits(num_bits, op)
    if not float(min) < float(max):
        raise _bad(op, f"min has to be smaller than max, was: {float(min):g} >= {float(max):g}")
    d = dtype_of(inputs)
    if d is not None and d != np.float32:   # (TF converts the input to the op's float32)
        raise ValueError(f"Tensor conversion requested dtype float32 for Tensor with dtype {d.name}")
    return bind(_FQ_ARGS, _f32(inputs, op), min=float(min), max=float(max), num_bits=num_bits,
                narrow_range=bool(narrow_range))


@tf_types("FakeQuantWithMinMaxVarsGradient")
def fake_quant_with_min_max_args_gradient(gradients, inputs, min=-6.0, max=6.0, num_bits=8,  # noqa: A002
                                          narrow_range=False, name=None):
    """``tf.quantization.fake_quant_with_min_max_args_gradient``: the input's gradient."""
    num_bits = _check_bits(num_bits, "FakeQuantWithMinMaxArgsGradient")
    return bind(_FQ_GRAD, _f32(gradients), _f32(inputs), np.float32(min), np.float32(max), num_bits=num_bits,
                narrow_range=bool(narrow_range), per_channel=False)[0]


def _vars_op(op, inputs, mn, mx, num_bits, narrow_range, per_channel):
    num_bits = _check_bits(num_bits, op)
    depth = tuple(_shape(inputs)[-1:]) if per_channel else ()
    for arg, v in (("min", mn), ("max", mx)):
        if tuple(_shape(v)) != depth:
            what = f"a 1-D tensor of size {depth}" if per_channel else "a scalar"
            raise _bad(op, f"`{arg}` must be {what}, got shape {list(_shape(v))}")
    return num_bits


@tf_types("FakeQuantWithMinMaxVars")
def fake_quant_with_min_max_vars(inputs, min, max, num_bits=8, narrow_range=False, name=None):  # noqa: A002
    """``tf.quantization.fake_quant_with_min_max_vars``: fake quantisation to the range of the
    scalar tensors ``min`` and ``max`` (trainable: they get TF's gradients, see the module)."""
    op = "FakeQuantWithMinMaxVars"
    num_bits = _vars_op(op, inputs, min, max, num_bits, narrow_range, False)
    return bind(_FQ_VARS, _f32(inputs, op), _f32(min, op, "min"), _f32(max, op, "max"), num_bits=num_bits,
                narrow_range=bool(narrow_range), per_channel=False)


@tf_types("FakeQuantWithMinMaxVars")
def fake_quant_with_min_max_vars_per_channel(inputs, min, max, num_bits=8, narrow_range=False,  # noqa: A002
                                             name=None):
    """``tf.quantization.fake_quant_with_min_max_vars_per_channel``: one range per entry of the
    last axis (``min`` and ``max`` of shape ``[d]``)."""
    op = "FakeQuantWithMinMaxVarsPerChannel"
    num_bits = _vars_op(op, inputs, min, max, num_bits, narrow_range, True)
    return bind(_FQ_VARS, _f32(inputs, op), _f32(min, op, "min"), _f32(max, op, "max"), num_bits=num_bits,
                narrow_range=bool(narrow_range), per_channel=True)


@tf_types("FakeQuantWithMinMaxVarsGradient")
def fake_quant_with_min_max_vars_gradient(gradients, inputs, min, max, num_bits=8,  # noqa: A002
                                          narrow_range=False, name=None):
    """``tf.quantization.fake_quant_with_min_max_vars_gradient``: ``(d_inputs, d_min, d_max)``."""
    num_bits = _vars_op("FakeQuantWithMinMaxVarsGradient", inputs, min, max, num_bits, narrow_range, False)
    return FakeQuantWithMinMaxVarsGradient(*bind(_FQ_GRAD, _f32(gradients), _f32(inputs), _f32(min), _f32(max),
                                                  num_bits=num_bits, narrow_range=bool(narrow_range), per_channel=False))


@tf_types("FakeQuantWithMinMaxVarsGradient")
def fake_quant_with_min_max_vars_per_channel_gradient(gradients, inputs, min, max, num_bits=8,  # noqa: A002
                                                      narrow_range=False, name=None):
    """``tf.quantization.fake_quant_with_min_max_vars_per_channel_gradient``."""
    num_bits = _vars_op("FakeQuantWithMinMaxVarsPerChannelGradient", inputs, min, max, num_bits, narrow_range,
                        True)
    return FakeQuantWithMinMaxVarsPerChannelGradient(*bind(
        _FQ_GRAD, _f32(gradients), _f32(inputs), _f32(min), _f32(max), num_bits=num_bits,
        narrow_range=bool(narrow_range), per_channel=True))


# -- quantize_and_dequantize -------------------------------------------------------------------

def _qdq(x, lo, hi, signed_input, num_bits, range_given, round_mode, narrow_range, axis):
    """TF's ``QuantizeAndDequantize*`` forward (one scale per slice of ``axis``, or one)."""
    if axis is None:
        red, keep = None, lambda v: v
    else:
        red = tuple(a for a in range(x.ndim) if a != axis)
        shape = [1] * x.ndim
        shape[axis] = x.shape[axis]
        keep = lambda v: jnp.reshape(v, shape)   # noqa: E731
    dt = x.dtype.type
    if range_given:
        lo, hi = keep(lo.astype(dt)), keep(hi.astype(dt))
    else:
        lo, hi = keep(jnp.min(x, axis=red)), keep(jnp.max(x, axis=red))
    half = 1 << (num_bits - 1)
    qmin = dt((-half + 1 if narrow_range else -half) if signed_input else 0)
    qmax = dt(half - 1 if signed_input else (1 << num_bits) - 1)
    big = dt(np.finfo(dt).max)
    from_min = jnp.where(qmin * lo > 0, qmin / lo, big)
    from_max = jnp.where(qmax * hi > 0, qmax / hi, big)
    use_min = from_min < from_max
    scale = jnp.where(use_min, from_min, from_max)
    inverse = jnp.where(use_min, lo / (qmin if qmin else dt(1)), hi / qmax)
    lo, hi = jnp.where(use_min, lo, qmin * inverse), jnp.where(use_min, qmax * inverse, hi)
    if range_given:
        x = jnp.maximum(jnp.minimum(x, hi), lo)
    y = x * scale
    y = jnp.round(y) if round_mode == "HALF_TO_EVEN" else jnp.floor(y + dt(0.5))
    return y * inverse


def _qdq_v4_fn(x, lo, hi, signed_input, num_bits, range_given, round_mode, narrow_range, axis):
    return _qdq(x, lo, hi, signed_input, num_bits, range_given, round_mode, narrow_range, axis)


def _qdq_v4_jvp(signed_input, num_bits, range_given, round_mode, narrow_range, axis, primals, tangents):
    """``QuantizeAndDequantizeV4Grad``: the input's gradient inside ``[input_min, input_max]`` (the
    arguments), zeros for the range."""
    x, lo, hi = primals
    if axis is not None:
        shape = [1] * x.ndim
        shape[axis] = x.shape[axis]
        lo, hi = jnp.reshape(lo, shape), jnp.reshape(hi, shape)
    out = _qdq_v4_fn(primals[0], primals[1], primals[2], signed_input, num_bits, range_given, round_mode, narrow_range, axis)
    return out, jnp.where((x >= lo) & (x <= hi), tangents[0], jnp.zeros((), x.dtype))


_qdq_v4 = jax.custom_jvp(_qdq_v4_fn, nondiff_argnums=(3, 4, 5, 6, 7, 8))
_qdq_v4.defjvp(_qdq_v4_jvp)


def _v4(x, lo, hi, *, signed_input, num_bits, range_given, round_mode, narrow_range, axis):
    return _qdq_v4(x, lo, hi, signed_input, num_bits, range_given, round_mode, narrow_range, axis)


def _straight(x, lo, hi, *, signed_input, num_bits, range_given, round_mode, narrow_range, axis):
    """The deprecated op's forward with an identity gradient (``x + sg(q(x) - x)``)."""
    q = _qdq(x, lo, hi, signed_input, num_bits, range_given, round_mode, narrow_range, axis)
    return x + lax.stop_gradient(q - x)


_QDQ_V4 = prim("QuantizeAndDequantizeV4", _v4)
_QDQ_V2 = prim("QuantizeAndDequantizeV2", _straight)


def _qdq_args(op, input, input_min, input_max, signed_input, num_bits, range_given, round_mode,  # noqa: A002
              narrow_range, axis):
    if round_mode not in ("HALF_TO_EVEN", "HALF_UP"):
        raise _bad(op, f"Value for attr 'round_mode' of \"{round_mode}\" is not in the list of allowed values: "
                   "\"HALF_TO_EVEN\", \"HALF_UP\"")
    if not 0 < int(num_bits) < (62 if signed_input else 63):
        raise _bad(op, f"num_bits is out of range: {int(num_bits)} with signed_input_ {int(bool(signed_input))}")
    ndim = len(_shape(input))
    if axis is not None:   # (TF's Python maps a negative axis into range; only None is one scale)
        if not -ndim <= axis < ndim:
            raise _bad(op, f"Axis requested is larger than input dimensions. Axis: {axis} Input Dimensions: {ndim}")
        axis = int(axis) % ndim
    if range_given:   # (TF 2.21's kernel: a per-axis given range fails so too)
        for v in (input_min, input_max):
            if len(_shape(v)):
                raise _bad(op, "input_min must be a scalar.")
    d = np.dtype(dtype_of(input) or np.float32)
    lo, hi = (v if dtype_of(v) is not None else np.asarray(v, d) for v in (input_min, input_max))
    if range_given and not (hasattr(lo, "_meta") or hasattr(hi, "_meta")) and float(lo) > float(hi):
        raise _bad(op, f"Invalid range: input_min {float(lo):g} > input_max {float(hi):g}")
    return dict(signed_input=bool(signed_input), num_bits=int(num_bits), range_given=bool(range_given),
                round_mode=round_mode, narrow_range=bool(narrow_range), axis=axis), lo, hi


@tf_types("QuantizeAndDequantizeV4")
def quantize_and_dequantize_v2(input, input_min, input_max, signed_input=True, num_bits=8,  # noqa: A002
                               range_given=False, round_mode="HALF_TO_EVEN", name=None, narrow_range=False,
                               axis=None):
    """``tf.quantization.quantize_and_dequantize_v2``: quantise to ``num_bits`` over the given range
    (or the input's own, per slice of ``axis``) and back; TF's gradient (see the module)."""
    static, lo, hi = _qdq_args("QuantizeAndDequantizeV4", input, input_min, input_max, signed_input, num_bits,
                               range_given, round_mode, narrow_range, axis)
    return bind(_QDQ_V4, _qdq_input(input, "QuantizeAndDequantizeV4"), lo, hi, **static)


@tf_types("QuantizeAndDequantizeV2")
def quantize_and_dequantize(input, input_min, input_max, signed_input=True, num_bits=8,  # noqa: A002
                            range_given=False, round_mode="HALF_TO_EVEN", name=None, narrow_range=False,
                            axis=None):
    """``tf.quantization.quantize_and_dequantize`` (deprecated in TF): the same forward, the whole
    gradient passed to the input and ``None`` to the range."""
    static, lo, hi = _qdq_args("QuantizeAndDequantizeV2", input, input_min, input_max, signed_input, num_bits,
                               range_given, round_mode, narrow_range, axis)
    return bind(_QDQ_V2, _qdq_input(input, "QuantizeAndDequantizeV2"), no_gradient(lo), no_gradient(hi), **static)


__all__ = ["fake_quant_with_min_max_args", "fake_quant_with_min_max_args_gradient", "fake_quant_with_min_max_vars",
           "fake_quant_with_min_max_vars_gradient", "fake_quant_with_min_max_vars_per_channel",
           "fake_quant_with_min_max_vars_per_channel_gradient", "quantize_and_dequantize",
           "quantize_and_dequantize_v2"]
