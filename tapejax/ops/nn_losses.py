"""``tf.nn``'s losses: softmax, sparse softmax, sigmoid and weighted cross-entropies, ``l2_loss``
and ``log_poisson_loss``, each one primitive with TF's formula (so its gradient is TF's:
``_grads.softmax_xent``'s ``softmax - labels`` for the logits, ``-log_softmax`` for the labels)
and TF's argument rules (labels cast to the logits' dtype, half precision logits computed in
float32, out-of-range sparse labels a NaN loss as TF's GPU kernel)."""
import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.bind import bind
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Pending, Tensor
from ..core.variable import Variable
from . import _grads as G
from ._registry import NONE_OPERAND, check_binary, check_float, dtype_of, prim, tf_types
from .math import cast

_TENSORISH = (Tensor, Variable)


def _shape(x):
    # (``_meta``: a pending value's shape is known without computing it)
    return tuple(x._meta.shape) if isinstance(x, _TENSORISH) else tuple(np.shape(x))


def _bad(op_type, msg):
    return InvalidArgumentError(None, None, f"{msg} [Op:{op_type}]")


def _sparse_xent(labels, logits):
    lse = jax.nn.logsumexp(logits, axis=-1)
    ids = labels.astype(jnp.int32)
    ok = (ids >= 0) & (ids < logits.shape[-1])
    # (the picked logit by a one-hot ``where`` and a sum, not ``take_along_axis``: that one cannot
    # be traced with symbolic sizes such as ``t - 1`` from ``x[:, 1:]``, so a step compiled with
    # ``input_signature=[TensorSpec([None, None])]`` would trace once per shape; the sum adds
    # exact zeros, and the other logits, -inf or NaN, are never read)
    hit = jnp.arange(logits.shape[-1], dtype=jnp.int32) == jnp.where(ok, ids, 0)[..., None]
    picked = jnp.sum(jnp.where(hit, logits, jnp.zeros((), logits.dtype)), axis=-1)
    # Out-of-range labels: NaN (TF's GPU kernel; its CPU kernel raises, which needs a host sync).
    return jnp.where(ok, lse - picked, jnp.nan)


_SPARSE_XENT = prim("SparseSoftmaxCrossEntropyWithLogits", _sparse_xent)


@tf_types("SparseSoftmaxCrossEntropyWithLogits")
def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """``tf.nn.sparse_softmax_cross_entropy_with_logits``: per-example loss; labels are class ids.
    A label outside ``[0, classes)`` gives a NaN loss (TF's GPU behaviour; TF's CPU kernel raises
    InvalidArgumentError, which would need a host sync of the labels)."""
    if labels is None or logits is None:
        raise ValueError("Both `labels` and `logits` must be provided.")
    labels = convert_to_tensor(labels)
    logits = convert_to_tensor(logits)
    if labels.dtype.is_floating:
        raise _bad("SparseSoftmaxCrossEntropyWithLogits", f"`labels` must be an integer tensor of class ids (int32 or int64); got dtype {labels.dtype.name}")
    if labels.ndim != logits.ndim - 1:
        raise ValueError(f"Rank mismatch: Rank of labels (received {labels.ndim}) should equal rank "
                         f"of logits minus 1 (received {logits.ndim}).")
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"Shape mismatch: The shape of labels (received {tuple(labels.shape)}) "
                         f"should equal the shape of logits except for the last dimension "
                         f"(received {tuple(logits.shape)}).")
    return bind(_SPARSE_XENT, labels, logits)


def _xent(labels, logits, *, axis):
    return G.softmax_xent(labels, logits, axis)   # (the logits' gradient is TF's softmax - labels)


_XENT = prim("SoftmaxCrossEntropyWithLogits", _xent)


@tf_types("SoftmaxCrossEntropyWithLogits")
def softmax_cross_entropy_with_logits(labels, logits, axis=-1, name=None):
    """``tf.nn.softmax_cross_entropy_with_logits``: ``-sum(labels * log_softmax(logits))`` over
    ``axis``; ``labels`` get a gradient too (``-log_softmax(logits)``, as TF v2).  As TF's: half
    precision logits are computed in float32 and the loss cast back, and ``labels`` are cast to
    that dtype (integer labels too)."""
    if logits is None or labels is None:
        raise ValueError(NONE_OPERAND)
    if not isinstance(logits, (Tensor, Variable, Pending)):
        logits = convert_to_tensor(logits)
    dg = dtype_of(logits)
    assert dg is not None
    half = dg.name in ("float16", "bfloat16")
    precise = _dtypes.float32 if half else dg
    if half:
        logits = cast(logits, precise)
    labels = convert_to_tensor(labels, dtype_hint=precise) if not isinstance(labels, (Tensor, Variable, Pending)) \
        else labels
    if dtype_of(labels) != precise:
        labels = cast(labels, precise)
    try:
        np.broadcast_shapes(_shape(labels), _shape(logits))
    except ValueError:
        raise _bad("SoftmaxCrossEntropyWithLogits", f"logits and labels must be broadcastable: logits_size"
                   f"={list(_shape(logits))} labels_size={list(_shape(labels))}") from None
    out = bind(_XENT, labels, logits, axis=int(axis))
    return cast(out, dg) if half else out


def _sigmoid_xent(labels, logits):
    # TF's formula, so the gradient at logits == 0 is sigmoid(0) - labels exactly.
    zeros = jnp.zeros_like(logits)
    cond = logits >= zeros
    relu_logits = jnp.where(cond, logits, zeros)
    neg_abs = jnp.where(cond, -logits, logits)
    return relu_logits - logits * labels + jnp.log1p(jnp.exp(neg_abs))


_SIGMOID_XENT = prim("SigmoidCrossEntropyWithLogits", _sigmoid_xent)


def _same_shape(labels, logits):
    if _shape(labels) != _shape(logits):
        raise ValueError(f"`logits` and `labels` must have the same shape, received "
                         f"({_shape(logits)} vs {_shape(labels)}).")


@tf_types("SigmoidCrossEntropyWithLogits")
def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """``tf.nn.sigmoid_cross_entropy_with_logits`` (elementwise; ``labels`` and ``logits`` same shape)."""
    if labels is None or logits is None:
        raise ValueError("Both `labels` and `logits` must be provided.")
    _same_shape(labels, logits)
    check_binary(labels, logits, "SigmoidCrossEntropyWithLogits")
    return bind(_SIGMOID_XENT, labels, logits)


def _weighted_xent(labels, logits, pos_weight):
    log_weight = 1 + (pos_weight - 1) * labels
    return (1 - labels) * logits + log_weight * (jnp.log1p(jnp.exp(-G.tf_abs(logits))) + jax.nn.relu(-logits))


_WEIGHTED_XENT = prim("WeightedCrossEntropyWithLogits", _weighted_xent)


@tf_types("WeightedCrossEntropyWithLogits")
def weighted_cross_entropy_with_logits(labels, logits, pos_weight, name=None):
    """``tf.nn.weighted_cross_entropy_with_logits``: positives weighted by ``pos_weight``."""
    _same_shape(labels, logits)
    check_binary(labels, logits, "WeightedCrossEntropyWithLogits")
    return bind(_WEIGHTED_XENT, labels, logits, pos_weight)


_L2_LOSS = prim("L2Loss", lambda t: jnp.sum(jnp.square(t)) / 2)


@tf_types("L2Loss")
def l2_loss(t, name=None):
    """``tf.nn.l2_loss``: ``sum(t ** 2) / 2``."""
    check_float(t, "L2Loss", "real", "t")
    return bind(_L2_LOSS, t)


def _log_poisson(targets, log_input, *, full):
    out = jnp.exp(log_input) - log_input * targets
    if full:
        t = targets
        approx = t * jnp.log(jnp.where(t > 0, t, 1)) - t + 0.5 * jnp.log(2 * np.pi * jnp.where(t > 0, t, 1))
        out = out + jnp.where((t >= 0) & (t <= 1), jnp.zeros_like(t), approx)
    return out


_LOG_POISSON = prim("LogPoissonLoss", _log_poisson)


@tf_types("LogPoissonLoss")
def log_poisson_loss(targets, log_input, compute_full_loss=False, name=None):
    """``tf.nn.log_poisson_loss``: ``exp(log_input) - log_input * targets`` (+ Stirling's term)."""
    _same_shape(targets, log_input)
    return bind(_LOG_POISSON, targets, log_input, full=bool(compute_full_loss))


__all__ = ["sparse_softmax_cross_entropy_with_logits", "softmax_cross_entropy_with_logits",
           "sigmoid_cross_entropy_with_logits", "weighted_cross_entropy_with_logits", "l2_loss",
           "log_poisson_loss"]
