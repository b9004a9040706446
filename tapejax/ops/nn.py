"""Neural-network ops (``tf.nn``)."""
import jax
import jax.numpy as jnp

from .._primitives import bind, define
from .._tensor import convert_to_tensor

relu_prim = define("Relu", jax.nn.relu)


def relu(features, name=None):
    """``tf.nn.relu``."""
    return bind(relu_prim, features)


def _sparse_xent(labels, logits):
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, labels[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return lse - picked


_SPARSE_XENT = define("SparseSoftmaxCrossEntropyWithLogits", _sparse_xent)


def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """``tf.nn.sparse_softmax_cross_entropy_with_logits``: per-example loss; labels are class ids."""
    if labels is None or logits is None:
        raise ValueError("Both `labels` and `logits` must be provided.")
    labels = convert_to_tensor(labels)
    logits = convert_to_tensor(logits)
    if labels.dtype.is_floating:
        raise ValueError(f"`labels` must be an integer tensor of class ids; got dtype {labels.dtype.name}")
    if labels.ndim != logits.ndim - 1:
        raise ValueError(f"Rank mismatch: Rank of labels (received {labels.ndim}) should equal rank "
                         f"of logits minus 1 (received {logits.ndim}).")
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"Shape mismatch: The shape of labels (received {tuple(labels.shape)}) "
                         f"should equal the shape of logits except for the last dimension "
                         f"(received {tuple(logits.shape)}).")
    return bind(_SPARSE_XENT, labels, logits)


__all__ = ["relu", "sparse_softmax_cross_entropy_with_logits"]
