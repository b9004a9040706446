"""The rest of ``tf.nn`` built from the op library: moments from sufficient statistics, weighted
moments, the distributed-loss helpers (``tapejax.distribute``'s global batch), ``crelu``, local response normalization,
``batch_norm_with_global_normalization``, ``top_k`` / ``in_top_k`` / ``zero_fraction``, and
``math.softmax`` / ``math.log_softmax``.  Each is composed of recorded ops (its gradient is theirs),
or is a primitive where TF's has its own kernel (``LRN``)."""
import jax.numpy as jnp
import numpy as np

from ..core.convert import convert_to_tensor
from ..core.distribution import cross_replica_with_strategy, current
from ..core.dtypes import float32
from ..core.errors import InvalidArgumentError
from ._registry import _call, _shape, check_float, prim, static_axis, tf_types
from .array import concat, expand_dims, squeeze
from .checks import require
from .math import cast, divide_no_nan, multiply, negative, square, subtract
from .nn import batch_normalization, relu
from .reduce import reduce_sum


def normalize_moments(counts, mean_ss, variance_ss, shift, name=None):
    """``tf.nn.normalize_moments``: ``(mean, variance)`` from ``sufficient_statistics``."""
    divisor = 1.0 / counts
    shifted_mean = multiply(mean_ss, divisor)
    mean = shifted_mean if shift is None else shifted_mean + shift
    variance = subtract(multiply(variance_ss, divisor), square(shifted_mean))
    return mean, variance


def sufficient_statistics(x, axes, shift=None, keepdims=False, name=None):
    """``tf.nn.sufficient_statistics``: ``(count, mean_ss, variance_ss, shift)`` over ``axes``."""
    x = convert_to_tensor(x)
    ax = static_axis(axes)
    ax = (ax,) if isinstance(ax, int) else tuple(range(len(_shape(x)))) if ax is None else tuple(ax)
    s = _shape(x)
    count = 1
    for a in ax:
        count *= s[a]
    counts = convert_to_tensor(float(count), dtype=x.dtype)
    if shift is not None:
        shift = convert_to_tensor(shift, dtype_hint=x.dtype)
        m_ss = reduce_sum(subtract(x, shift), ax, keepdims=keepdims)
        v_ss = reduce_sum(square(subtract(x, shift)), ax, keepdims=keepdims)
    else:
        m_ss = reduce_sum(x, ax, keepdims=keepdims)
        v_ss = reduce_sum(square(x), ax, keepdims=keepdims)
    return counts, m_ss, v_ss, shift


def weighted_moments(x, axes, frequency_weights, keepdims=False, name=None):
    """``tf.nn.weighted_moments``: ``(mean, variance)`` weighted by ``frequency_weights`` (broadcast);
    where the weights sum to 0 both are 0 (TF's ``div_no_nan``)."""
    x = convert_to_tensor(x)
    w = convert_to_tensor(frequency_weights, dtype_hint=x.dtype)
    ax = static_axis(axes)
    ax = (ax,) if isinstance(ax, int) else tuple(range(len(_shape(x)))) if ax is None else tuple(ax)
    wx = reduce_sum(multiply(w, x), ax, keepdims=True)
    sw = reduce_sum(multiply(w, convert_to_tensor(jnp.ones(_shape(x), x.dtype._np))), ax, keepdims=True)
    mean = divide_no_nan(wx, sw)   # (TF's div_no_nan: weights summing to 0 give 0, not NaN)
    var = divide_no_nan(reduce_sum(multiply(w, square(subtract(x, mean))), ax, keepdims=True), sw)
    if not keepdims:
        from .array import squeeze
        mean, var = squeeze(mean, ax), squeeze(var, ax)
    return mean, var


def _scaled_by_weights(loss, sample_weight):
    """TF's ``scale_losses_by_sample_weight``: both cast to float32, the weights' last dimension
    squeezed or added when their rank differs by one from the losses' (a scalar kept)."""
    loss = cast(loss, float32)
    w = cast(convert_to_tensor(sample_weight), float32)
    lr, wr = len(_shape(loss)), len(_shape(w))
    if wr and wr - lr == 1:
        w = squeeze(w, [-1])
    elif wr and lr - wr == 1:
        w = expand_dims(w, -1)
    return multiply(loss, w)


_NEGATIVE = ("global_batch_size must be non-negative. Condition x >= 0 did not hold element-wise: "
             "x (global_batch_size) = {n}")


def compute_average_loss(per_example_loss, sample_weight=None, global_batch_size=None):
    """``tf.nn.compute_average_loss``: ``sum(per_example_loss * sample_weight) / global_batch_size``
    (0 when it is 0), in the loss's dtype.  Without ``global_batch_size`` the divisor is the
    loss's first dimension: TF multiplies it by the number of replicas, and under a
    ``tapejax.distribute`` strategy the step sees the global batch, so it is that batch's size.
    RuntimeError in a strategy's cross-replica context, as TF."""
    loss = convert_to_tensor(per_example_loss)
    dtype = loss.dtype
    if not _shape(loss):
        raise ValueError("Invalid value passed for `per_example_loss`. Expected a tensor with at least rank 1. "
                         f"Received per_example_loss={loss} with rank 0")
    if sample_weight is not None:
        loss = cast(_scaled_by_weights(loss, sample_weight), dtype)
    if global_batch_size is None:
        if cross_replica_with_strategy():
            raise RuntimeError("You are calling `compute_average_loss` in cross replica context, while it was "
                               "expected to be called in replica context.")
        uneven = _uneven_replica_weights(_shape(loss)[0])
        if uneven is not None:   # a last partial batch split unevenly over the replicas
            weights = uneven.reshape((-1,) + (1,) * (len(_shape(loss)) - 1))
            return reduce_sum(multiply(loss, cast(convert_to_tensor(weights), dtype)))
        n = convert_to_tensor(_shape(loss)[0])
    else:
        n = convert_to_tensor(global_batch_size)
        if _shape(n):
            raise ValueError(f"global_batch_size must be scalar. Expected scalar shape for {n}, got shape "
                             f"{list(_shape(n))}.")
        if not n.dtype.is_integer:
            raise TypeError(f"global_batch_size must be an integer. Expected Tensor {n} to be of integer dtype but "
                            f"got {n.dtype.name}")
        if isinstance(global_batch_size, int):   # (the usual case: checked on the host)
            if global_batch_size < 0:
                raise InvalidArgumentError(None, None, _NEGATIVE.format(n=global_batch_size))
        else:
            require(n._value >= 0, _NEGATIVE, n=n._value)
    return divide_no_nan(reduce_sum(loss), cast(n, dtype))


def _uneven_replica_weights(batch):
    """Under a strategy of N > 1 replicas, in its replica context, with a global batch of
    ``batch`` examples that N does not divide: each example's weight in TF's
    ``compute_average_loss``.  TF splits such a batch (a dataset's last partial one) into
    per-replica batches of ``ceil(batch / N)`` and what is left (``6`` over 4: 2, 2, 2, 0), and
    each replica divides its sum by its own batch size times N; the weights give that sum of
    the replicas' averages.  None otherwise (the divisor is ``batch``, TF's too)."""
    mode = current()
    if mode is None or mode.replica_context is None or mode.default or not isinstance(batch, int) or batch <= 0:
        return None
    replicas = getattr(mode.strategy, "num_replicas_in_sync", 1)
    if not isinstance(replicas, int) or replicas <= 1 or batch % replicas == 0:
        return None
    per = -(-batch // replicas)
    sizes = [min(per, max(0, batch - r * per)) for r in range(replicas)]
    return np.asarray([1.0 / (sizes[i // per] * replicas) for i in range(batch)], np.float32)


def scale_regularization_loss(regularization_loss):
    """``tf.nn.scale_regularization_loss``: the summed loss divided by the number of replicas:
    by 1 here, where the step is one program over the global batch (its gradient is not summed
    again across replicas).  RuntimeError in a strategy's cross-replica context, as TF."""
    if cross_replica_with_strategy():
        raise RuntimeError("You are calling `scale_regularization_loss` in cross replica context, while it was "
                           "expected to be called in replica context.")
    return reduce_sum(regularization_loss)


def crelu(features, name=None, axis=-1):
    """``tf.nn.crelu``: ``concat([relu(x), relu(-x)], axis)``."""
    return concat([relu(features), relu(negative(features))], axis)


def batch_norm_with_global_normalization(t, m, v, beta, gamma, variance_epsilon, scale_after_normalization,
                                         name=None, input=None, mean=None, variance=None):
    """``tf.nn.batch_norm_with_global_normalization``: ``batch_normalization`` with ``gamma`` used only
    when ``scale_after_normalization``."""
    return batch_normalization(t, m, v, beta, gamma if scale_after_normalization else None, variance_epsilon)


def _lrn(x, *, r, bias, alpha, beta):
    sq = jnp.square(x)
    c = x.shape[-1]
    padded = jnp.pad(sq, [(0, 0)] * (x.ndim - 1) + [(r, r)])
    window = sum(padded[..., i:i + c] for i in range(2 * r + 1))
    return x / (bias + alpha * window) ** beta


_LRN = prim("LRN", _lrn)


@tf_types("LRN")
def local_response_normalization(input, depth_radius=5, bias=1.0, alpha=1.0, beta=0.5, name=None):  # noqa: A002
    """``tf.nn.local_response_normalization`` (``lrn``): each entry over ``(bias + alpha * sum of squares of
    the 2r+1 entries around it in the last dimension) ** beta`` (4-D input)."""
    check_float(input, "LRN", "real", "input")
    if len(_shape(input)) != 4:
        raise ValueError(f"`input` must be 4-dimensional; got shape {list(_shape(input))}")
    return _call(_LRN, "LRN", input, r=int(depth_radius), bias=float(bias), alpha=float(alpha), beta=float(beta))


lrn = local_response_normalization

for _f in (normalize_moments, sufficient_statistics, weighted_moments):
    _f._tf_types = ("Mul", "Sum")
compute_average_loss._tf_types = scale_regularization_loss._tf_types = ("Sum",)
crelu._tf_types = ("Relu", "ConcatV2")
batch_norm_with_global_normalization._tf_types = ("BatchNormalization",)

def collapse_repeated(labels, seq_length, name=None):
    """``tf.nn.collapse_repeated``: each row of ``labels`` (``[batch, max_len]``, the first
    ``seq_length[b]`` entries valid) with runs of a repeated label merged into one, left-aligned and
    zero-padded to the longest result; returns ``(collapsed_labels, new_seq_length)`` (TF's
    algorithm, in tapejax's ops; the lengths are read on the host, as ``boolean_mask`` does)."""
    from .array import range as _range, reshape, shape, size
    from .indexing import boolean_mask, scatter_nd
    from .layout import sequence_mask
    from .math import logical_and, not_equal
    from .reduce import reduce_max
    labels = convert_to_tensor(labels)
    if len(_shape(labels)) != 2:
        raise ValueError(f"labels must be a [batch, max_len] matrix; got shape {list(_shape(labels))}")
    first = labels[:, :1] == labels[:, :1]   # (all True, of the first column's shape)
    keep = concat([first, not_equal(labels[:, 1:], labels[:, :-1])], axis=1)
    keep = logical_and(keep, sequence_mask(seq_length, maxlen=_shape(labels)[1]))
    new_len = reduce_sum(cast(keep, "int32"), axis=1)
    idx_mask = sequence_mask(new_len, maxlen=reduce_max(new_len))
    flat_idx = reshape(idx_mask, [-1])
    kept = boolean_mask(reshape(labels, [-1]), reshape(keep, [-1]))
    where = boolean_mask(_range(size(flat_idx)), flat_idx)
    out = scatter_nd(reshape(where, [-1, 1]), kept, shape(flat_idx))
    return reshape(out, shape(idx_mask)), new_len


__all__ = ["batch_norm_with_global_normalization", "collapse_repeated", "compute_average_loss", "crelu", "local_response_normalization", "lrn",
           "normalize_moments", "scale_regularization_loss", "sufficient_statistics", "weighted_moments"]
