"""Array ops (shapes, stacking, sorting, einsum, constructors; gathers and slices: ``indexing``).

Static arguments (shapes, axes, permutations, paddings) are read in the
Python wrapper and passed to the primitive as hashable tuples; tensor
arguments that only index (``indices``, ``segment_ids``) are inputs, so a
new index value does not recompile anything.
"""
import builtins
import math

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex

from ..core import dtypes as _dtypes, state as _state, transfer
from ..core.bind import PACK, bind
from ..core.convert import convert_to_tensor
from ..core.tensor import StaticTensor, Tensor
from ..core.transfer import to_device
from ._registry import (
    _TENSORISH,
    OP_DISPATCH,
    _bad,
    _call,
    _norm_axis,
    _shape,
    check_binary,
    dispatch_of,
    dtype_of,
    output_shape,
    prim,
    registered,
    static_axis,
    static_shape,
    tf_types,
)
from .indexing_traced import TracedSizeError, is_traced
from .matching import check_list_dtypes, matching_values

_pyrange = builtins.range
_pyslice = builtins.slice


# -- shapes ---------------------------------------------------------------------

_RESHAPE = prim("Reshape", lambda x, *, shape: jnp.reshape(x, shape))


@tf_types("Reshape")
def reshape(tensor, shape, name=None):
    """``tf.reshape`` (one dimension may be -1)."""
    shape = shape._dims if isinstance(shape, _SymbolicShape) else static_shape(shape)
    if shape.count(-1) > 1:
        raise _bad("Reshape", f"Only one input size may be -1: the requested shape {list(shape)} "
                   "(argument `shape`) has more")
    dims = _shape(tensor)
    if all(isinstance(d, (int, np.integer)) for d in dims + shape):   # (a symbolic size, Keras's
        n = int(math.prod(dims))                                        # symbolic call: JAX checks it)
        if -1 in shape and 0 in shape:   # TF infers -1 from the nonzero sizes ([0, 3, 1] to [0, -1]: [0, 3])
            missing = int(math.prod([d for d in dims if d])) // int(math.prod([d for d in shape if d > 0]))
            shape = tuple(missing if d == -1 else d for d in shape)
        known = int(math.prod([s for s in shape if s != -1]))
        if (-1 not in shape and known != n) or (-1 in shape and (known == 0 or n % known)):
            raise _bad("Reshape", f"Input to reshape is a tensor with {n} values, but the requested shape "
                       f"{list(shape)} (argument `shape`) does not fit")
    return bind(_RESHAPE, tensor, shape=shape)


_PACK = registered(PACK)   # (the core registers it: convert_to_tensor packs lists holding Tensors)


@tf_types("Pack")
def stack(values, axis=0, name="stack"):
    """``tf.stack``: join equally shaped tensors along a new ``axis``."""
    values = matching_values(list(values))
    shapes = {_shape(v) for v in values}
    if len(shapes) > 1:
        raise _bad("Pack", f"Shapes of all inputs must match (argument `values`): got {sorted(shapes)}")
    check_list_dtypes(values, "Pack")
    return _call(_PACK, "Pack", *values, axis=int(axis))


def _unstack(x, *, axis):
    return tuple(jnp.moveaxis(x, axis, 0))


_UNPACK = prim("Unpack", _unstack, multiple_results=True, pure_results=True)


@tf_types("Unpack")
def unstack(value, num=None, axis=0, name="unstack"):
    """``tf.unstack``: a list of the slices along ``axis``."""
    shape = _shape(value)
    ax = _norm_axis(axis, len(shape), "Unpack")
    if num is not None and int(num) != shape[ax]:
        raise ValueError(f"Argument `num` ({num}) must equal the dimension {shape[ax]} of axis {axis}")
    return list(bind(_UNPACK, value, axis=ax))


def _split(x, *, sizes, axis):
    idx = np.cumsum(sizes)[:-1].tolist()
    return tuple(jnp.split(x, idx, axis=axis))


_SPLIT = prim("SplitV", _split, multiple_results=True, pure_results=True)


@tf_types("SplitV")
def split(value, num_or_size_splits, axis=0, num=None, name="split"):
    """``tf.split``: ``num_or_size_splits`` an int (equal parts) or a list of sizes (one may be -1)."""
    shape = _shape(value)
    ax = _norm_axis(axis, len(shape), "Split")
    d = shape[ax]
    if isinstance(num_or_size_splits, (int, np.integer)):
        k = int(num_or_size_splits)
        if k <= 0 or d % k:
            raise _bad("Split", f"Number of ways to split should evenly divide the split dimension, but "
                       f"got split_dim {ax} (size = {d}) and num_split {k} (argument `num_or_size_splits`)")
        sizes = (d // k,) * k
    else:
        sizes = list(static_shape(num_or_size_splits))
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = d - (sum(sizes) + 1)
        if sum(sizes) != d or min(sizes, default=0) < 0:
            raise _bad("SplitV", f"Determined shape must either match input shape along split_dim "
                       f"exactly if fully specified, or be less than the size of the input along "
                       f"split_dim if not fully specified: sizes {sizes} vs dimension {d}")
        sizes = tuple(sizes)
    return list(bind(_SPLIT, value, sizes=sizes, axis=ax))


_TRANSPOSE = prim("Transpose", lambda x, *, perm, conj: jnp.conj(jnp.transpose(x, perm)) if conj
                  else jnp.transpose(x, perm))


@tf_types("Transpose")
def transpose(a, perm=None, conjugate=False, name="transpose"):
    """``tf.transpose``: reverses the axes when ``perm`` is None."""
    nd = len(_shape(a))
    if isinstance(perm, (str, bytes)) or (isinstance(perm, (list, tuple)) and any(isinstance(p, (str, bytes))
                                                                                  for p in perm)):
        raise _bad("Transpose", "Value for attr 'Tperm' of string is not in the list of allowed values: "
                   "int32, int64 (argument `perm`)")
    perm = tuple(_pyrange(nd))[::-1] if perm is None else static_shape(perm)
    if len(perm) != nd:
        raise _bad("Transpose", f"transpose expects a vector of size {nd}. But input(1) (argument "
                   f"`perm`) is {list(perm)}")
    if sorted(p % max(nd, 1) for p in perm) != list(_pyrange(nd)):
        raise _bad("Transpose", f"Argument `perm` {list(perm)} is not a permutation of "
                   f"{list(_pyrange(nd))}")
    return bind(_TRANSPOSE, a, perm=tuple(p % nd for p in perm), conj=bool(conjugate))


_CONCAT = prim("ConcatV2", lambda *xs, axis: jnp.concatenate(xs, axis=axis))


@tf_types("ConcatV2")
def concat(values, axis, name="concat"):
    """``tf.concat`` along ``axis``."""
    if not isinstance(values, (list, tuple)):
        values = [values]
    dispatch = dispatch_of("ConcatV2", values)   # composite tensors (ragged_math)
    if dispatch is not None:
        return dispatch(values, axis)
    values = matching_values(values)
    shapes = [_shape(v) for v in values]
    nd = len(shapes[0])
    ax = _norm_axis(axis, max(nd, 1), "ConcatV2")
    head, tail = shapes[0][:ax], shapes[0][ax + 1:]   # (every dimension but the axis must match)
    for s in shapes[1:]:
        if len(s) != nd or s[:ax] != head or s[ax + 1:] != tail:
            raise _bad("ConcatV2", f"ConcatOp : Dimensions of inputs should match (argument `values`): "
                       f"shape[0] = {list(shapes[0])} vs. {list(s)}")
    check_list_dtypes(values, "ConcatV2")
    return _call(_CONCAT, "ConcatV2", *values, axis=ax)


_SQUEEZE = prim("Squeeze", lambda x, *, axis: jnp.squeeze(x, axis))


@tf_types("Squeeze")
def squeeze(input, axis=None, name=None):
    """``tf.squeeze``: drop size-1 dimensions (all, or those in ``axis``)."""
    shape = _shape(input)
    if axis is None:
        ax = tuple(i for i, d in enumerate(shape) if d == 1)
    else:
        ax = static_axis(axis)
        ax = tuple(_norm_axis(a, len(shape), "Squeeze") for a in (ax if isinstance(ax, tuple) else (ax,)))
        for a in ax:
            if shape[a] != 1:
                raise _bad("Squeeze", f"Can not squeeze dim[{a}], expected a dimension of 1, got "
                           f"{shape[a]} (argument `axis`)")
    return bind(_SQUEEZE, input, axis=ax)


_EXPAND = prim("ExpandDims", lambda x, *, axis: jnp.expand_dims(x, axis))


@tf_types("ExpandDims")
def expand_dims(input, axis, name=None):
    """``tf.expand_dims``: insert a size-1 dimension at ``axis`` (``-1`` appends)."""
    nd = len(_shape(input))
    ax = _norm_axis(axis, nd + 1, "ExpandDims")
    return bind(_EXPAND, input, axis=ax)


_TILE = prim("Tile", lambda x, *, reps: jnp.tile(x, reps))


@tf_types("Tile")
def tile(input, multiples, name=None):
    """``tf.tile``: ``multiples`` has one entry per dimension."""
    reps = static_shape(multiples)
    nd = len(_shape(input))
    if len(reps) != nd:
        raise _bad("Tile", f"Expected multiples argument to be a vector of length {nd} but got length "
                   f"{len(reps)}")
    return bind(_TILE, input, reps=reps)


def _pad(x, c, *, pads, mode):
    if mode == "constant":
        return jnp.pad(x, pads, mode="constant", constant_values=c)
    return jnp.pad(x, pads, mode=mode)


_PAD = prim("PadV2", _pad)
_PAD_MIRROR = prim("MirrorPad", _pad)


@tf_types("PadV2", "MirrorPad")
def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None):
    """``tf.pad``: ``paddings`` is ``[[before, after], ...]`` per dimension; modes CONSTANT,
    REFLECT, SYMMETRIC (case-insensitive, as TF)."""
    m = str(mode).upper()
    if m not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
        raise ValueError(f'Value of argument `mode` expected to be one of "CONSTANT", "REFLECT", or '
                         f'"SYMMETRIC". Received `mode` = {m}')
    pads = np.asarray(getattr(paddings, "_value", paddings)).reshape(-1, 2)
    pads = tuple((int(a), int(b)) for a, b in pads)
    nd = len(_shape(tensor))
    if len(pads) != nd:
        raise _bad("Pad", f"The first dimension of paddings must be the rank of inputs [{len(pads)},2], "
                   f"{nd} (argument `paddings`)")
    if m == "CONSTANT":
        d = dtype_of(tensor)
        c = convert_to_tensor(constant_values, dtype_hint=d) if d is not None else constant_values
        dc = dtype_of(c) if isinstance(c, _TENSORISH) else None
        if d is not None and dc is not None and dc != d:
            raise _bad("PadV2", f"cannot compute PadV2 as input #2(zero-based) was expected to be a {d.name} "
                       f"tensor but is a {dc.name} tensor (argument `constant_values`)")
        return bind(_PAD, tensor, c, pads=pads, mode="constant")
    return bind(_PAD_MIRROR, tensor, 0, pads=pads, mode=m.lower() if m == "REFLECT" else "symmetric")


_BROADCAST_TO = prim("BroadcastTo", lambda x, *, shape: jnp.broadcast_to(x, shape))


@tf_types("BroadcastTo")
def broadcast_to(input, shape, name=None):
    """``tf.broadcast_to`` (the gradient sums over the broadcast dimensions)."""
    shape = static_shape(shape)
    try:
        np.broadcast_shapes(_shape(input), shape)
    except ValueError:
        raise _bad("BroadcastTo", f"Unable to broadcast tensor of shape {list(_shape(input))} to tensor "
                   f"of shape {list(shape)} (argument `shape`)") from None
    return bind(_BROADCAST_TO, input, shape=shape)


_REVERSE = prim("ReverseV2", lambda x, *, axis: jnp.flip(x, axis))


@tf_types("ReverseV2")
def reverse(tensor, axis, name=None):
    """``tf.reverse`` along the listed axes."""
    nd = len(_shape(tensor))
    ax = static_axis(axis)
    ax = tuple(_norm_axis(a, nd, "ReverseV2") for a in (ax if isinstance(ax, tuple) else (ax,)))
    if len(set(ax)) != len(ax):
        dup = next(a for a in ax if ax.count(a) > 1)
        raise _bad("ReverseV2", f"axis {dup} specified more than once (argument `axis`)")
    return bind(_REVERSE, tensor, axis=ax)


def _roll(x, *dyn_shift, shift, axis):
    return jnp.roll(x, dyn_shift[0] if dyn_shift else shift, axis)   # a traced shift: XLA's dynamic roll


_ROLL = prim("Roll", _roll)


@tf_types("Roll")
def roll(input, shift, axis, name=None):
    """``tf.roll``: ``shift`` and ``axis`` ints or equally long lists.  A ``shift`` known only when a
    compiled step runs (drawn by ``tf.random.uniform`` in DeepDream's ``random_roll``, or a traced
    argument) is an operand of the op (its gradient the cotangent rolled back, as TF's)."""
    ax = static_axis(axis)
    if is_traced(shift) or (isinstance(shift, (list, tuple)) and builtins.any(is_traced(s) for s in shift)):
        sh = convert_to_tensor(shift, dtype_hint="int32")
        want = () if isinstance(ax, int) else (len(ax),) if isinstance(ax, tuple) else None
        if sh.dtype not in (_dtypes.int32, _dtypes.int64):   # (TF's errors while building its graph)
            raise TypeError(f"Value passed to parameter 'shift' has DataType {sh.dtype.name} not in list of "
                            "allowed values: int32, int64 (tf.roll)")
        if tuple(sh.shape.as_list()) != want:
            raise ValueError(f"tf.roll: `shift` must be an int scalar or a 1-D int tensor as long as `axis` {ax}; "
                             f"got shape {sh.shape.as_list()}")
        return _call(_ROLL, "Roll", input, sh, shift=None, axis=ax)
    sh = static_axis(shift)
    return _call(_ROLL, "Roll", input, shift=sh, axis=ax)


def _repeat(x, *, repeats, axis):
    return jnp.repeat(x, np.asarray(repeats) if isinstance(repeats, tuple) else repeats, axis=axis,
                      total_repeat_length=int(np.sum(repeats)) if isinstance(repeats, tuple) else None)


_REPEAT = prim("Repeat", _repeat)


@tf_types("Repeat")
def repeat(input, repeats, axis=None, name=None):
    """``tf.repeat``: ``repeats`` an int or one int per element along ``axis`` (flattened when None)."""
    r = static_axis(repeats)
    return _call(_REPEAT, "Repeat", input, repeats=r, axis=None if axis is None else int(axis))


# -- einsum, tensordot, meshgrid ---------------------------------------------------------

_EINSUM = prim("Einsum", lambda *xs, equation: jnp.einsum(equation, *xs))


@tf_types("Einsum")
def einsum(equation, *inputs, **kwargs):
    """``tf.einsum``."""
    if not isinstance(equation, str):
        raise TypeError(f"Argument `equation` must be a string; got {equation!r}")
    return _call(_EINSUM, "Einsum", *inputs, equation=equation.replace(" ", ""))


def _tensordot(a, b, *, axes):
    return jnp.tensordot(a, b, axes)


_TENSORDOT = prim("Tensordot", _tensordot)


@tf_types("Tensordot")
def tensordot(a, b, axes, name=None):
    """``tf.tensordot``: ``axes`` an int or a pair of axis lists."""
    check_binary(a, b, "Tensordot")
    if isinstance(axes, (int, np.integer)):
        ax = int(axes)
    else:
        ax = tuple(static_axis(x) if not isinstance(x, (int, np.integer)) else (int(x),) for x in axes)
    return _call(_TENSORDOT, "Tensordot", a, b, axes=ax)


@tf_types("Reshape", "BroadcastTo")
def meshgrid(*args, **kwargs):
    """``tf.meshgrid``: ``indexing='xy'`` (default) or ``'ij'``.  Each output is a reshape and a
    broadcast of its own input (as TF composes it), so each output's gradient reaches only that input."""
    indexing = kwargs.pop("indexing", "xy")
    kwargs.pop("name", None)
    if kwargs:
        raise TypeError(f"Key word arguments {list(kwargs)} are not supported (only `indexing`, `name`)")
    if indexing not in ("xy", "ij"):
        raise ValueError(f"Argument `indexing` parameter must be either 'xy' or 'ij', got '{indexing}'")
    n = len(args)
    sizes = [int(np.prod(_shape(a))) for a in args]
    if indexing == "xy" and n > 1:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    outs = []
    for i, a in enumerate(args):
        shp = [1] * n
        pos = i
        if indexing == "xy" and n > 1 and i < 2:
            pos = 1 - i
        shp[pos] = -1
        outs.append(broadcast_to(reshape(a, shp), sizes))
    return outs


# -- constructors (constants: never recorded) ---------------------------------

def _const_dtype(dtype):
    return _dtypes.storage_dtype(_dtypes.as_dtype(dtype)._np, "dtype")


def _filled(shape, dtype, value) -> Tensor:
    """A constant array (``core.transfer.filled``: a compiled fill, called through JAX's C++ path,
    for a shape made before; ``jnp.zeros`` dispatches its ops one by one)."""
    if all(type(d) is int for d in shape):
        return Tensor(transfer.filled(tuple(shape), np.dtype(dtype), value))
    return Tensor(jnp.full(shape, value, dtype))   # (a symbolic size: a polymorphic trace)


def zeros(shape, dtype=_dtypes.float32, name=None, layout=None):
    """``tf.zeros``."""
    return _filled(output_shape(shape, "Fill"), _const_dtype(dtype), 0)


def ones(shape, dtype=_dtypes.float32, name=None, layout=None):
    """``tf.ones``."""
    return _filled(output_shape(shape, "Fill"), _const_dtype(dtype), 1)


def zeros_like(input, dtype=None, name=None, layout=None):
    """``tf.zeros_like`` (a constant: TF gives its input no gradient)."""
    v = convert_to_tensor(input)._meta
    return _filled(v.shape, v.dtype if dtype is None else _const_dtype(dtype), 0)


def ones_like(input, dtype=None, name=None, layout=None):
    """``tf.ones_like`` (a constant: TF gives its input no gradient)."""
    v = convert_to_tensor(input)._meta
    return _filled(v.shape, v.dtype if dtype is None else _const_dtype(dtype), 1)


_EVAL_TRACE = type(jex.find_top_trace(()))   # (JAX's trace outside any transformation)


def _static(value: np.ndarray) -> Tensor:
    """A shape value: a ``StaticTensor`` inside a trace (a ``tapejax.function``'s, or JAX's own
    around a Keras layer's call: ops on it fold while tracing, as TF's graph folds static
    shapes), a plain Tensor outside."""
    if _state._local.collector is not None or type(jex.find_top_trace(())) is not _EVAL_TRACE:
        with jax.ensure_compile_time_eval():   # (concrete: ``to_device`` may be a compiled call, staged)
            return StaticTensor(jnp.asarray(value))
    return Tensor(to_device(value))


def shape(input, out_type=None, name=None):
    """``tf.shape``: the shape as an int32 tensor (a constant to tapes).  A symbolic dimension
    (``jax.export`` of a signature with ``None``: ``tapejax.saved_model``) is computed by the program."""
    dispatch = OP_DISPATCH.get(("Shape", type(input)))   # a composite tensor (ragged_math)
    if dispatch is not None:
        return dispatch(input, out_type)
    dt = np.int32 if out_type is None else _const_dtype(out_type)
    s = _shape(input)
    if not all(isinstance(d, int) for d in s):   # a symbolic size (tapejax.function's None dims)
        out = _SymbolicShape(jnp.array(s, dtype=dt))
        out._dims = tuple(s)
        return out
    return _static(np.asarray(s, dtype=dt))


class _SymbolicShape(Tensor):
    """``tf.shape`` of a tensor with a symbolic size (Keras 3's symbolic call of a layer, an
    exported signature's ``None``): its value is computed by the program; its dimensions are kept
    for ``tf.reshape(y, tf.shape(x))``, which needs them static (keras.io's VQ-VAE quantiser), and
    one of them for ``tf.reshape(x, [tf.shape(x)[0], -1, d])`` (keras.io's ViT ``Patches``)."""

    __slots__ = ("_dims",)

    def __getitem__(self, key):
        out = Tensor.__getitem__(self, key)
        if isinstance(key, (int, np.integer)) and -len(self._dims) <= key < len(self._dims):
            dim = _SymbolicDim(out._value)
            dim._dim = self._dims[key]
            return dim
        return out


class _SymbolicDim(Tensor):
    """One dimension of a ``_SymbolicShape`` (``tf.shape(x)[0]``): ``static_shape`` takes its size."""

    __slots__ = ("_dim",)


def rank(input, name=None):
    """``tf.rank``: int32 scalar (a constant)."""
    return _static(np.asarray(len(_shape(input)), np.int32))


def size(input, out_type=None, name=None):
    """``tf.size``: number of elements, int32 (a constant)."""
    dt = np.int32 if out_type is None else _const_dtype(out_type)
    s = _shape(input)
    if not all(isinstance(d, int) for d in s):   # a symbolic size (tapejax.function's None dims)
        n = 1
        for d in s:
            n = n * d
        return Tensor(jnp.array(n, dtype=dt))
    return _static(np.asarray(int(np.prod(s)), dtype=dt))


def fill(dims, value, name=None, layout=None):
    """``tf.fill``: ``value``'s dtype (Python float -> float32, int -> int32).  TF gives ``value``
    the sum of the output gradient; here too (it is a recorded BroadcastTo)."""
    v = convert_to_tensor(value)
    if v.ndim:
        raise _bad("Fill", f"value must be a scalar, got shape {list(v.shape)} (argument `value`)")
    return bind(_BROADCAST_TO, v, shape=output_shape(dims, "Fill"))


def range(start, limit=None, delta=1, dtype=None, name="range"):  # noqa: A001  (TF's name)
    """``tf.range``: int32 for ints, float32 when any bound is a float (or ``dtype``)."""
    if limit is None:
        start, limit = 0, start
    for arg, v in zip(("start", "limit", "delta"), (start, limit, delta)):
        if isinstance(getattr(v, "_value", v), jax.core.Tracer):
            raise TracedSizeError(
                f"tf.range with `{arg}` known only when the compiled step runs has a data-dependent length, "
                "which XLA cannot compile as a tensor: iterate it with a `for` loop that AutoGraph converts "
                "(`for i in tf.range(n)` in a tapejax.function whose source Python can read, autograph=True), "
                "or give the bounds as Python ints or static sizes (`x.shape[0]` rather than `tf.shape(x)[0]`)")
    vals = [np.asarray(getattr(v, "_value", v)) for v in (start, limit, delta)]
    if dtype is None:
        kinds = [v.dtype.kind for v in vals]
        dt = np.float32 if "f" in kinds else np.int32
        for v in (start, limit, delta):
            if isinstance(v, _TENSORISH):
                dt = np.result_type(dt, v._meta.dtype) if "f" in kinds else v._meta.dtype
    else:
        dt = _const_dtype(dtype)
        if np.dtype(dt).kind in "iu":   # (TF converts a Python float bound to the dtype: refused)
            for v in (start, limit, delta):
                if type(v) is float:
                    raise TypeError(f"Cannot convert {v!r} to EagerTensor of dtype {np.dtype(dt).name} "
                                    "(argument of tf.range with an integer `dtype`)")
    if float(vals[2]) == 0:
        raise _bad("Range", "Requires delta != 0 (argument `delta`)")
    lo, hi, step = (v.item() for v in vals)
    if step > 0 and lo > hi:
        raise _bad("Range", f"Requires start <= limit when delta > 0: {lo:g}/{hi:g}")
    if step < 0 and lo < hi:
        raise _bad("Range", f"Requires start >= limit when delta < 0: {lo:g}/{hi:g}")
    for arg, v in zip(("start", "limit", "delta"), vals):
        if not np.all(np.isfinite(v)):
            raise _bad("Range", f"Requires finite bounds: argument `{arg}` is {v.item()!r}")
    return Tensor(jnp.arange(vals[0].item(), vals[1].item(), vals[2].item(), dtype=dt))


_LINSPACE = prim("LinSpace", lambda start, stop, *, num, axis: jnp.linspace(start, stop, num, axis=axis))


@tf_types("LinSpace")
def linspace(start, stop, num, name=None, axis=0):
    """``tf.linspace``: ``num`` evenly spaced values, float32 for Python floats and float64 for
    integers (TF's rule: ``tf.linspace(-2, 2, 5)`` is float64, so JAX's x64 mode is needed);
    differentiable in ``start`` and ``stop`` (TF's gradient)."""
    s = convert_to_tensor(start)
    e = convert_to_tensor(stop, dtype_hint=s.dtype)
    if np.dtype(s._meta.dtype).kind in "iu":
        _dtypes.require_representable(np.float64, "tf.linspace of integer start and stop (TF's result)")
        s, e = (Tensor(jnp.asarray(t._value, jnp.float64)) for t in (s, e))
    return bind(_LINSPACE, s, e, num=int(num), axis=int(axis))


def eye(num_rows, num_columns=None, batch_shape=None, dtype=_dtypes.float32, name=None):
    """``tf.eye`` (float32 by default)."""
    dims = (num_rows,) if num_columns is None else (num_rows, num_columns)
    output_shape(dims, "Fill")   # (TF's eye fills its diagonal with these sizes)
    m = jnp.eye(int(num_rows), None if num_columns is None else int(num_columns), dtype=_const_dtype(dtype))
    if batch_shape is not None:
        m = jnp.broadcast_to(m, output_shape(batch_shape, "Fill") + m.shape)
    return Tensor(m)


def _one_hot(indices, on, off, *, depth, axis, dtype):
    oh = jax.nn.one_hot(indices, depth, axis=axis, dtype=jnp.bool_)
    return jnp.where(oh, on, off).astype(dtype)


_ONE_HOT = prim("OneHot", _one_hot, differentiable=False)


@tf_types("OneHot")
def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None):
    """``tf.one_hot``: float32 by default (or the dtype of ``on_value``/``off_value``).  TF gives it
    no gradient (not even to ``on_value``/``off_value``): the tape gives None."""
    idx = convert_to_tensor(indices)
    if idx._meta.dtype.kind not in "iu":
        raise _bad("OneHot", f"Value for attr 'TI' of {idx.dtype.name} is not in the list of allowed "
                   f"values: uint8, int8, int32, int64 (argument `indices`)")
    if type(depth) is float:   # (TF converts it to an int32 tensor)
        raise TypeError(f"Cannot convert {depth!r} to EagerTensor of dtype int32 (argument `depth`)")
    given = on_value if on_value is not None else off_value
    if dtype is None:
        dt = np.dtype(getattr(convert_to_tensor(given), "_value").dtype) if given is not None else np.float32
    else:
        dt = _const_dtype(dtype)
    # (the default 1 and 0 as Python numbers, cast in the op: two transfers per call otherwise)
    on = 1 if on_value is None else convert_to_tensor(on_value, dtype_hint=dt)
    off = 0 if off_value is None else convert_to_tensor(off_value, dtype_hint=dt)
    return bind(_ONE_HOT, idx, on, off, depth=int(depth), axis=-1 if axis is None else int(axis),
                dtype=np.dtype(dt).name)


__all__ = ["reshape", "stack", "unstack", "split", "transpose", "concat", "squeeze", "expand_dims",
           "tile", "pad", "broadcast_to", "reverse", "roll", "repeat",
           "einsum", "tensordot", "meshgrid", "zeros", "ones",
           "zeros_like", "ones_like", "shape", "rank", "size", "fill", "range", "linspace", "eye",
           "one_hot"]
