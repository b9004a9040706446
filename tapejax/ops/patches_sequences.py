"""``tf.extract_volume_patches``, ``tf.math.sobol_sample`` and ``tf.random_index_shuffle``.

``extract_volume_patches`` gathers every window of a 5-D ``[batch, planes, rows, cols, depth]``
input (zeros where SAME pads, TF's split of the padding: the smaller half first) and lays each
patch out as TF does, ``[planes, rows, cols, depth]`` flattened with depth fastest.  It is a
gather, so its gradient is the scatter-add back (TF's gradient of the op).

``sobol_sample`` is TF's Sobol sequence: Joe and Kuo's direction numbers (new-joe-kuo-6.21201),
without the initial all-zero point, ``skip`` points further on.  SciPy's unscrambled
``stats.qmc.Sobol`` uses the same direction numbers, so the points are TF's bit for bit (checked
in tests/parity/test_ops_nn_more.py); SciPy ships with JAX.  The result is data (no inputs to
differentiate), computed on the host.

``random_index_shuffle`` is TF's algorithm in JAX's integer ops (see ``_index_shuffle``): the
same permutation as TF for every seed, elementwise and jittable.
"""
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError, UnimplementedError
from ._registry import _call, _shape, prim, tf_types
from .pooling_more import _windows


def _volume_patches(x, *, ksizes, strides, padding):
    b, p, r, c, d = x.shape
    wins = [_windows(n, k, s, padding) for n, k, s in zip((p, r, c), ksizes, strides)]
    (op, wp), (orr, wr), (oc, wc) = wins
    valid = (wp[:, None, None, :, None, None] >= 0) & (wr[None, :, None, None, :, None] >= 0) & \
        (wc[None, None, :, None, None, :] >= 0)
    flat = np.where(valid, (wp[:, None, None, :, None, None] * r + wr[None, :, None, None, :, None]) * c
                    + wc[None, None, :, None, None, :], p * r * c)
    xs = jnp.concatenate([x.reshape(b, p * r * c, d), jnp.zeros((b, 1, d), x.dtype)], axis=1)
    return xs[:, flat.reshape(-1), :].reshape(b, op, orr, oc, int(np.prod(ksizes)) * d)


_VOLUME_PATCHES = prim("ExtractVolumePatches", _volume_patches)


def _five(v, arg):
    a = [int(t) for t in np.asarray(v).reshape(-1)]
    if len(a) == 5 and min(a) >= 1 and (a[0] != 1 or a[4] != 1):
        raise UnimplementedError(None, None, f"Only support {arg} across space: argument `{arg}` must be [1, planes, "
                                 f"rows, cols, 1]; got {a} [Op:ExtractVolumePatches]")
    if len(a) != 5 or min(a) < 1:
        raise ValueError(f"extract_volume_patches: argument `{arg}` must be [1, planes, rows, cols, 1] of positive "
                         f"ints; got {a}")
    return tuple(a[1:4])


@tf_types("ExtractVolumePatches")
def extract_volume_patches(input, ksizes, strides, padding, name=None):  # noqa: A002
    """``tf.extract_volume_patches``: the ``ksizes`` windows of a 5-D input every ``strides`` (``"SAME"``
    or ``"VALID"``), each flattened into the last dimension."""
    if padding not in ("SAME", "VALID"):
        raise ValueError(f"extract_volume_patches: argument `padding` must be 'SAME' or 'VALID'; got {padding!r}")
    shape = _shape(input)
    if len(shape) != 5:
        raise InvalidArgumentError(None, None, f"input must be 5-dimensional (argument `input`); got shape "
                                   f"{list(shape)} [Op:ExtractVolumePatches]")
    k, s = _five(ksizes, "ksizes"), _five(strides, "strides")
    return _call(_VOLUME_PATCHES, "ExtractVolumePatches", input, ksizes=k, strides=s, padding=padding)


#: The dimensions Joe and Kuo's table (and so TF's and SciPy's Sobol sequence) covers.
_SOBOL_MAX_DIM = 21201


def sobol_sample(dim, num_results, skip=0, dtype=_dtypes.float32, name=None):
    """``tf.math.sobol_sample``: ``[num_results, dim]`` points of the Sobol sequence (TF's: see the
    module docstring), starting ``skip`` points in."""
    d = _dtypes.as_dtype(dtype)
    if d.name not in ("float32", "float64"):
        raise TypeError(f"sobol_sample: argument `dtype` must be float32 or float64; got {d.name}")
    dim, num_results, skip = (int(np.asarray(getattr(v, "_value", v))) for v in (dim, num_results, skip))
    if not 1 <= dim <= _SOBOL_MAX_DIM:
        raise InvalidArgumentError(None, None, f"dim must be in [1, {_SOBOL_MAX_DIM}] (argument `dim`); got {dim} "
                                   "[Op:SobolSample]")
    if num_results < 1:
        raise InvalidArgumentError(None, None, f"num_results must be at least 1 (argument `num_results`); got "
                                   f"{num_results} [Op:SobolSample]")
    if skip < 0:
        raise InvalidArgumentError(None, None, f"skip must be non-negative (argument `skip`); got {skip} "
                                   "[Op:SobolSample]")
    import warnings

    from scipy.stats import qmc
    gen = qmc.Sobol(dim, scramble=False)
    gen.fast_forward(skip + 1)   # (TF leaves out the first point, all zeros)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # (SciPy's note on non-powers of 2)
        pts = gen.random(num_results)
    return convert_to_tensor(pts.astype(_dtypes.storage_dtype(d._np, "dtype")))


sobol_sample._tf_types = ()   # (data made on the host: no registered op)

_Z = 0x7369F885192C0EF5   # (the Simon key schedule's constant sequence, TF's)


def _rotl(x, r, w, mask):
    return ((x << r) | (x >> (w - r))) & mask


def _rotr(x, r, w, mask):
    return ((x >> r) | (x << (w - r))) & mask


def _simon_f(x, w, mask):
    return (_rotl(x, 1, w, mask) & _rotl(x, 8, w, mask)) ^ _rotl(x, 2, w, mask)


def _index_shuffle(index, seed, max_index, *, rounds):
    """TF's ``random_index_shuffle`` (``random_index_shuffle.cc``): a Simon cipher of ``rounds`` rounds
    on a block of ``max(ceil(log2(max_index)) rounded up to even, 16)`` bits, keyed by the three seed
    words, repeated until the value is at most ``max_index`` (cycle walking), elementwise."""
    wide = index.dtype.itemsize == 8
    v = jnp.uint64 if wide else jnp.uint32
    u32 = jnp.uint32
    mi = max_index.astype(v)
    if wide:   # TF's ceil(log2(double(max_index))): above 2**46 it can be one short of the exact bit count
        bits = jnp.ceil(jnp.log2(jnp.maximum(mi, 1).astype(jnp.float64))).astype(u32)
    else:      # (below 2**32 the double's log2 is exact enough: the integer bit count is TF's)
        bits = (32 - lax.clz(jnp.maximum(mi, 1) - 1)).astype(u32)
    block = jnp.maximum(bits + bits % 2, 16)
    w = block // 2
    mask = jnp.where(w >= 32, jnp.uint32(0xFFFFFFFF), (jnp.uint32(1) << jnp.minimum(w, 31)) - 1)
    key = seed.astype(jnp.int64 if seed.dtype.itemsize == 8 else seed.dtype).astype(u32) if wide else seed.astype(u32)
    rk = [key[..., 0] & mask, key[..., 1] & mask, key[..., 2] & mask]
    c = jnp.uint32(0xFFFFFFFC) & mask
    for i in range(3, rounds):
        zbit = jnp.where(i - 3 < w, jnp.uint32((_Z >> (i - 3)) & 1), 0)
        rk.append(c ^ zbit ^ rk[i - 3] ^ _rotr(rk[i - 1], 3, w, mask) ^ _rotr(rk[i - 1], 4, w, mask))
    wv = w.astype(v)

    def encrypt(value):
        left = ((value >> wv) & mask.astype(v)).astype(u32)
        right = (value & mask.astype(v)).astype(u32)
        for i in range(0, rounds, 2):
            left = left ^ _simon_f(right, w, mask) ^ rk[i]
            right = right ^ _simon_f(left, w, mask) ^ rk[i + 1]
        return (left.astype(v) << wv) | right.astype(v)

    first = encrypt(index.astype(v))
    out = lax.while_loop(lambda x: jnp.any(x > mi), lambda x: jnp.where(x > mi, encrypt(x), x), first)
    return jnp.where(mi == 0, 0, out).astype(index.dtype)


_INDEX_SHUFFLE = prim("RandomIndexShuffle", _index_shuffle, differentiable=False)


@tf_types("RandomIndexShuffle")
def random_index_shuffle(index, seed, max_index, rounds=4, name=None):
    """``tf.random_index_shuffle``: the position of ``index`` in a pseudorandom permutation of
    ``[0, max_index]`` fixed by ``seed`` (three words, or one row of three per index): a bijection per
    seed, TF's exact values (its Simon-cipher algorithm).  ``index`` and ``max_index`` are scalars or
    vectors of one integer dtype (64-bit ones need JAX's x64 mode)."""
    op = "RandomIndexShuffle"
    idx, mx, sd = convert_to_tensor(index), convert_to_tensor(max_index), convert_to_tensor(seed)
    for arg, t in (("index", idx), ("max_index", mx), ("seed", sd)):
        if t.dtype.name not in ("int32", "int64", "uint32", "uint64"):
            raise TypeError(f"random_index_shuffle: argument `{arg}` must be int32, int64, uint32 or uint64; got "
                            f"{t.dtype.name}")
    if idx.dtype != mx.dtype:
        raise TypeError(f"random_index_shuffle: arguments `index` and `max_index` must have one dtype; got "
                        f"{idx.dtype.name} and {mx.dtype.name}")
    if int(rounds) < 4 or int(rounds) % 2:
        raise InvalidArgumentError(None, None, f"rounds must be an even integer >= 4 (argument `rounds`); got "
                                   f"{int(rounds)} [Op:{op}]")
    n = max(int(np.prod(_shape(idx))), int(np.prod(_shape(mx))), int(np.prod(_shape(sd))) // 3)
    if not (len(_shape(idx)) == 0 or _shape(idx) == (n,)):
        raise InvalidArgumentError(None, None, f"Index must be a scalar or vector (argument `index`); got shape "
                                   f"{list(_shape(idx))} [Op:{op}]")
    if not (_shape(sd) == (3,) or _shape(sd) == (n, 3)):
        raise InvalidArgumentError(None, None, f"Seed must be a vector of size [3] or a matrix of size [{n}, 3] but "
                                   f"got {list(_shape(sd))} (argument `seed`) [Op:{op}]")
    if not (len(_shape(mx)) == 0 or _shape(mx) == (n,)):
        raise InvalidArgumentError(None, None, f"Maxval must be a scalar or a vector of the same size as index but "
                                   f"got {list(_shape(mx))} (argument `max_index`) [Op:{op}]")
    from .array import broadcast_to, reshape
    scalar = len(_shape(idx)) == 0 and len(_shape(mx)) == 0 and len(_shape(sd)) == 1
    out = _call(_INDEX_SHUFFLE, op, broadcast_to(idx, [n]), broadcast_to(sd, [n, 3]), broadcast_to(mx, [n]),
                rounds=int(rounds))
    return reshape(out, []) if scalar else out


__all__ = ["extract_volume_patches", "random_index_shuffle", "sobol_sample"]
