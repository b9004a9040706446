"""Candidate samplers and the sampled losses: ``tf.random.{uniform, log_uniform, fixed_unigram,
learned_unigram, all}_candidate_sampler`` (also in ``tf.nn``), ``tf.nn.compute_accidental_hits``,
``tf.nn.nce_loss`` and ``tf.nn.sampled_softmax_loss``.

A sampler draws ``num_sampled`` class ids from its distribution ``P`` over ``[0, range_max)`` and
reports each id's expected count, TF's formulas (``range_sampler.cc``): without ``unique``, or with
``unique`` when the first ``num_sampled`` draws were already distinct, ``P(k) * num_sampled``;
otherwise ``1 - (1 - P(k)) ** num_tries``, ``num_tries`` being the draws it took to collect
``num_sampled`` distinct ids (rejection, one draw at a time: a ``lax.while_loop``).  The draws
come from tapejax's seed rules (``tapejax.ops.random``), so they differ from TF's bits; the
distributions, expected counts, dtypes and errors are TF's.

``learned_unigram_candidate_sampler`` keeps TF's per-kernel state: class weights starting at 1,
each true class adding 1 after a call's draws.  TF keeps one kernel (and so one state) per set
of attributes, which in eager mode means one per ``(num_true, num_sampled, unique, range_max,
seed)`` with an op seed or without any seed, and a fresh one per call when only the global seed
is set (TF then derives a new op seed each call); this module keeps its host-side counts the same
way, and reads the true classes on the host (eager only).

The losses are composed of recorded ops (gather, matmul, the cross-entropies), so their
gradients w.r.t. ``weights``, ``biases`` and ``inputs`` are those ops' and agree with TF's;
``sampled_values`` are cut from the tape as TF does.  With ``remove_accidental_hits`` a sampled
id equal to one of the row's labels has ``-FLT_MAX`` added to its logit; as in TF, when an id
was sampled twice only its last position gets it (TF writes the hits with ``sparse_to_dense``).
"""
from typing import NamedTuple

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..core import dtypes as _dtypes
from ..core.bind import REGISTRY, define
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from . import random as _random
from ._registry import _call, _shape, prim, tf_types
from .array import concat, ones_like, reshape, zeros_like
from .math import cast, log, matmul, multiply, subtract
from .nn import embedding_lookup
from .nn_losses import sigmoid_cross_entropy_with_logits, softmax_cross_entropy_with_logits
from .reduce import reduce_sum, where

_STOP = REGISTRY.get("StopGradient") or define(
    "StopGradient", lax.stop_gradient, differentiable=False,
    nondiff_reason="tf.stop_gradient (op StopGradient) stops the gradient here")

_FLT_MAX = float(np.finfo(np.float32).max)


def _expected(p, n, tries):
    """TF's ExpectedCountHelper: ``p * n`` when the draws needed no retry, else 1 - (1 - p)^tries."""
    return jnp.where(tries == n, p * n, -jnp.expm1(tries.astype(jnp.float32) * jnp.log1p(-p)))


def _draws(key, draw_one, draw_many, n, unique):
    """``(samples [n] int32, tries)``: ``draw_many(key, n)`` without ``unique``; else one draw at a time
    until ``n`` distinct ids are collected."""
    if not unique:
        return draw_many(key, n), jnp.int32(n)

    def cond(s):
        return s[0] < n

    def body(s):
        i, tries, samples, k = s
        k, sub = jax.random.split(k)
        c = draw_one(sub)
        seen = jnp.any((samples == c) & (jnp.arange(n) < i))
        samples = jnp.where(seen, samples, samples.at[i].set(c))
        return i + jnp.where(seen, 0, 1), tries + 1, samples, k

    _, tries, samples, _ = lax.while_loop(cond, body, (jnp.int32(0), jnp.int32(0), jnp.zeros((n,), jnp.int32), key))
    return samples, tries


def _sample(key, true_classes, weights, *, kind, n, unique, range_max, dtype):
    """The sampled ids and expected counts for sampler ``kind`` (``weights``: the unigram weights of
    the unigram samplers, unused otherwise)."""
    if kind == "uniform":
        prob = lambda k: jnp.full(k.shape, 1.0 / range_max, jnp.float32)   # noqa: E731
        many = lambda k, m: jax.random.randint(k, (m,), 0, range_max, jnp.int32)   # noqa: E731
    elif kind == "log_uniform":
        log_range = np.log(range_max + 1.0)
        prob = lambda k: (jnp.log((k + 2.0) / (k + 1.0)) / log_range).astype(jnp.float32)   # noqa: E731
        many = lambda k, m: jnp.clip(jnp.floor(jnp.exp(jax.random.uniform(k, (m,), jnp.float32) * log_range))   # noqa: E731
                                     .astype(jnp.int32) - 1, 0, range_max - 1)
    else:
        w = weights.astype(jnp.float32)
        prob = lambda k: w[k] / jnp.sum(w)   # noqa: E731
        many = lambda k, m: jax.random.categorical(k, jnp.log(w), shape=(m,)).astype(jnp.int32)   # noqa: E731
    samples, tries = _draws(key, lambda k: many(k, 1)[0], many, n, unique)
    true_count = _expected(prob(true_classes.astype(jnp.int32)), n, tries)
    sampled_count = _expected(prob(samples), n, tries)
    return samples.astype(dtype), true_count, sampled_count


_OP_TYPES = {"uniform": "UniformCandidateSampler", "log_uniform": "LogUniformCandidateSampler",
             "fixed_unigram": "FixedUnigramCandidateSampler", "learned_unigram": "LearnedUnigramCandidateSampler"}
_SAMPLERS = {kind: prim(op, _sample, differentiable=False, multiple_results=True) for kind, op in _OP_TYPES.items()}


def _result_type(op_type):
    """A sampler's result: TF's named tuple, named after its op."""
    return NamedTuple(op_type, [("sampled_candidates", Tensor), ("true_expected_count", Tensor),
                                ("sampled_expected_count", Tensor)])


_RESULTS = {op: _result_type(op) for op in (*_OP_TYPES.values(), "AllCandidateSampler")}


def _check(op, true_classes, num_true, num_sampled, unique, range_max):
    tc = convert_to_tensor(true_classes)
    if not tc.dtype.is_integer:
        raise TypeError(f"{op}: argument `true_classes` must be an int64 tensor; got {tc.dtype.name}")
    if len(_shape(tc)) != 2:
        raise InvalidArgumentError(None, None, f"true_classes must be a matrix (argument `true_classes`); got "
                                   f"shape {list(_shape(tc))} [Op:{op}]")
    if _shape(tc)[1] != int(num_true):
        raise InvalidArgumentError(None, None, f"true_classes must have num_true columns, expected: {int(num_true)} "
                                   f"was: {_shape(tc)[1]} (argument `num_true`) [Op:{op}]")
    if int(num_sampled) < 1:
        raise InvalidArgumentError(None, None, f"Value for attr 'num_sampled' of {int(num_sampled)} must be at least "
                                   f"minimum 1 (argument `num_sampled`) [Op:{op}]")
    if range_max is not None:
        if int(range_max) < 1:
            raise InvalidArgumentError(None, None, f"Value for attr 'range_max' of {int(range_max)} must be at least "
                                       f"minimum 1 (argument `range_max`) [Op:{op}]")
        if unique and int(num_sampled) > int(range_max):
            raise InvalidArgumentError(None, None, f"Sampler's range is too small: cannot sample {int(num_sampled)} "
                                       f"unique values from range_max {int(range_max)} (argument `num_sampled`) "
                                       f"[Op:{op}]")
        # (checked on concrete values; inside a compiled function the classes are traced: unchecked)
        vals = None if isinstance(tc._value, jax.core.Tracer) else np.asarray(tc.numpy())
        bad = np.zeros(0) if vals is None else vals[(vals < 0) | (vals >= int(range_max))]
        if bad.size:
            raise InvalidArgumentError(None, None, f"`true_candidate` out of range [0, {int(range_max)}), received "
                                       f"{int(bad[0])} (argument `true_classes`) [Op:{op}]")
    return tc


def _long():
    return _dtypes.storage_dtype(np.dtype(np.int64), "sampled_candidates").name


def _run(kind, tc, weights, num_sampled, unique, range_max, seed):
    key = _random._next_key(seed, static=True)   # (drawn on the host: a constant in a trace)
    w = convert_to_tensor(np.zeros((1,), np.float32) if weights is None else np.asarray(weights, np.float32))
    out = _call(_SAMPLERS[kind], _OP_TYPES[kind], key, tc, w, kind=kind, n=int(num_sampled), unique=bool(unique),
                range_max=int(range_max), dtype=_long())
    return _RESULTS[_OP_TYPES[kind]](*out)


@tf_types("UniformCandidateSampler")
def uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None, name=None):
    """``tf.random.uniform_candidate_sampler``: ids drawn uniformly from ``[0, range_max)``."""
    tc = _check("UniformCandidateSampler", true_classes, num_true, num_sampled, unique, range_max)
    return _run("uniform", tc, None, num_sampled, unique, range_max, seed)


@tf_types("LogUniformCandidateSampler")
def log_uniform_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None, name=None):
    """``tf.random.log_uniform_candidate_sampler``: Zipfian ids, ``P(k) = log((k + 2) / (k + 1)) /
    log(range_max + 1)`` (for vocabularies sorted by decreasing frequency)."""
    tc = _check("LogUniformCandidateSampler", true_classes, num_true, num_sampled, unique, range_max)
    return _run("log_uniform", tc, None, num_sampled, unique, range_max, seed)


@tf_types("FixedUnigramCandidateSampler")
def fixed_unigram_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, vocab_file="",
                                    distortion=1.0, num_reserved_ids=0, num_shards=1, shard=0, unigrams=(),
                                    seed=None, name=None):
    """``tf.random.fixed_unigram_candidate_sampler``: ids drawn with probability proportional to
    ``unigrams[k] ** distortion``; the first ``num_reserved_ids`` ids have weight 0; with ``num_shards``
    only the ids ``id % num_shards == shard`` are kept (TF's rule, which numbers the unigrams after the
    shard's reserved ids).  ``vocab_file`` (a file of counts TF reads itself) is not supported: read it
    and pass ``unigrams``."""
    op = "FixedUnigramCandidateSampler"
    if vocab_file:
        raise NotImplementedError(f"{op}: argument `vocab_file` is not supported by tapejax (it is read by TF's "
                                  f"kernel); read the counts yourself and pass them as `unigrams`; got {vocab_file!r}")
    if not 0 <= int(shard) < int(num_shards):
        raise InvalidArgumentError(None, None, f"shard must be in [0, num_shards): got shard {int(shard)}, num_shards "
                                   f"{int(num_shards)} (argument `shard`) [Op:{op}]")
    tc = _check(op, true_classes, num_true, num_sampled, unique, None)
    weights = [0.0 for i in range(int(num_reserved_ids)) if i % int(num_shards) == int(shard)]
    word = len(weights)
    for u in np.asarray(unigrams, np.float64).reshape(-1):
        if word % int(num_shards) == int(shard):
            weights.append(float(u) ** float(distortion))
        word += 1
    if len(weights) != int(range_max):
        raise InvalidArgumentError(None, None, f"range is {int(range_max)} must be equal to weights size  "
                                   f"{len(weights)} (argument `range_max` against `unigrams`) [Op:{op}]")
    tc = _check(op, tc, num_true, num_sampled, unique, range_max)
    return _run("fixed_unigram", tc, weights, num_sampled, unique, range_max, seed)


#: learned_unigram's kernel states: attributes -> class weights (see the module docstring).
_LEARNED: "dict[tuple, np.ndarray]" = {}


@tf_types("LearnedUnigramCandidateSampler")
def learned_unigram_candidate_sampler(true_classes, num_true, num_sampled, unique, range_max, seed=None, name=None):
    """``tf.random.learned_unigram_candidate_sampler``: ids drawn in proportion to how often each was a
    true class so far (plus one), TF's kernel state (see the module docstring)."""
    tc = _check("LearnedUnigramCandidateSampler", true_classes, num_true, num_sampled, unique, range_max)
    g = _random.get_global_generator().global_seed
    attrs = (int(num_true), int(num_sampled), bool(unique), int(range_max), g, seed)
    fresh = seed is None and g is not None
    weights = np.ones(int(range_max), np.float64) if fresh else _LEARNED.setdefault(attrs, np.ones(int(range_max)))
    out = _run("learned_unigram", tc, weights, num_sampled, unique, range_max, seed)
    np.add.at(weights, np.asarray(tc.numpy()).reshape(-1), 1.0)
    return out


def all_candidate_sampler(true_classes, num_true, num_sampled, unique, seed=None, name=None):
    """``tf.random.all_candidate_sampler``: the ids ``0 .. num_sampled - 1``, every expected count 1 (the
    range is ``num_sampled``: true classes must lie in it, as TF checks)."""
    tc = _check("AllCandidateSampler", true_classes, num_true, num_sampled, unique, num_sampled)
    ids = convert_to_tensor(np.arange(int(num_sampled)).astype(_long()))
    return _RESULTS["AllCandidateSampler"](ids, convert_to_tensor(np.ones(_shape(tc), np.float32)),
                           convert_to_tensor(np.ones((int(num_sampled),), np.float32)))


all_candidate_sampler._tf_types = ()


def _hits(true_classes, sampled):
    """``[batch, num_true, num_sampled]``: true class equals the sampled id at its last position."""
    s = sampled
    n = s.shape[0]
    later = (s[:, None] == s[None, :]) & (jnp.arange(n)[None, :] > jnp.arange(n)[:, None])
    last = ~jnp.any(later, axis=1)
    return (true_classes[:, :, None] == s[None, None, :]) & last[None, None, :]


_HITS = prim("ComputeAccidentalHits", _hits, differentiable=False)


class ComputeAccidentalHits(NamedTuple):
    """``compute_accidental_hits``' result, TF's named tuple."""
    indices: Tensor
    ids: Tensor
    weights: Tensor


def _hit_mask(true_classes, sampled_candidates, num_true):
    tc = convert_to_tensor(true_classes)
    sc = convert_to_tensor(sampled_candidates)
    if len(_shape(tc)) != 2 or _shape(tc)[1] != int(num_true):
        raise InvalidArgumentError(None, None, f"true_classes must be a matrix with num_true columns, expected: "
                                   f"{int(num_true)}; got shape {list(_shape(tc))} (argument `true_classes`) "
                                   "[Op:ComputeAccidentalHits]")
    if len(_shape(sc)) != 1:
        raise InvalidArgumentError(None, None, f"sampled_candidates must be a vector; got shape {list(_shape(sc))} "
                                   "(argument `sampled_candidates`) [Op:ComputeAccidentalHits]")
    return _call(_HITS, "ComputeAccidentalHits", tc, sc)


@tf_types("ComputeAccidentalHits")
def compute_accidental_hits(true_classes, sampled_candidates, num_true, seed=None, name=None):
    """``tf.nn.compute_accidental_hits``: for each row ``i`` and true class equal to a sampled id (its
    last position ``j``), ``indices`` gets ``i`` (int32), ``ids`` ``j`` (int64) and ``weights``
    ``-FLT_MAX``, in TF's order (rows, then true classes).  The count depends on the values: eager only."""
    hits = np.asarray(_hit_mask(true_classes, sampled_candidates, num_true).numpy())
    rows, _, pos = np.nonzero(hits)
    return ComputeAccidentalHits(convert_to_tensor(rows.astype(np.int32)), convert_to_tensor(pos.astype(_long())),
                          convert_to_tensor(np.full(rows.shape, -_FLT_MAX, np.float32)))


def _sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true, sampled_values,
                    subtract_log_q, remove_accidental_hits, seed):
    """TF's ``_compute_sampled_logits``: ``(logits [batch, num_true + num_sampled], labels)``."""
    labels = convert_to_tensor(labels)
    inputs = convert_to_tensor(inputs)
    if len(_shape(labels)) != 2 or _shape(labels)[1] != int(num_true):
        raise ValueError(f"Argument `labels` must have shape [batch_size, num_true] = [batch_size, {int(num_true)}]; "
                         f"got shape {list(_shape(labels))}")
    if len(_shape(inputs)) != 2:
        raise ValueError(f"Argument `inputs` must have shape [batch_size, dim]; got shape {list(_shape(inputs))}")
    if sampled_values is None:
        sampled_values = log_uniform_candidate_sampler(labels, num_true, num_sampled, True, num_classes, seed=seed)
    if len(sampled_values) != 3:
        raise ValueError("Argument `sampled_values` must be (sampled_candidates, true_expected_count, "
                         f"sampled_expected_count); got {len(sampled_values)} values")
    sampled, true_count, sampled_count = (_call(_STOP, "StopGradient", convert_to_tensor(v)) for v in sampled_values)
    if _shape(sampled) != (int(num_sampled),):
        raise ValueError(f"Argument `sampled_values`: sampled_candidates must have shape [num_sampled] = "
                         f"[{int(num_sampled)}]; got {list(_shape(sampled))}")
    # (int64 as TF's: the weights' and biases' IndexedSlices gradients have int64 indices)
    labels_flat = reshape(cast(labels, _long()), [-1])
    all_ids = concat([labels_flat, cast(sampled, _long())], 0)
    n_true = _shape(labels_flat)[0]
    params = list(weights) if isinstance(weights, (list, tuple)) else weights
    all_w = convert_to_tensor(embedding_lookup(params, all_ids))
    true_w, sampled_w = all_w[:n_true], all_w[n_true:]
    sampled_logits = matmul(inputs, sampled_w, transpose_b=True)
    all_b = convert_to_tensor(embedding_lookup(list(biases) if isinstance(biases, (list, tuple)) else biases, all_ids))
    true_b, sampled_b = all_b[:n_true], all_b[n_true:]
    dim = _shape(true_w)[1]
    rows = multiply(inputs[:, None, :], reshape(true_w, [-1, int(num_true), dim]))
    true_logits = reduce_sum(rows, axis=2) + reshape(true_b, [-1, int(num_true)])
    sampled_logits = sampled_logits + sampled_b
    if remove_accidental_hits:
        hit = _hit_mask(labels, sampled, num_true)
        any_hit = reduce_sum(cast(hit, "int32"), axis=1) > 0
        # (TF adds -FLT_MAX in the logits' dtype: -inf in half precision; no 0 * inf where there is no hit)
        with np.errstate(over="ignore"):
            low = convert_to_tensor(np.full(_shape(sampled_logits), -_FLT_MAX, np.float32).astype(
                np.dtype(sampled_logits.dtype.as_numpy_dtype)))
        sampled_logits = sampled_logits + where(any_hit, low, zeros_like(sampled_logits))
    if subtract_log_q:
        true_logits = subtract(true_logits, log(cast(true_count, true_logits.dtype)))
        sampled_logits = subtract(sampled_logits, log(cast(sampled_count, sampled_logits.dtype)))
    out_logits = concat([true_logits, sampled_logits], 1)
    out_labels = concat([ones_like(true_logits) / float(num_true), zeros_like(sampled_logits)], 1)
    return out_logits, out_labels


@tf_types("GatherV2", "MatMul", "SigmoidCrossEntropyWithLogits")
def nce_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1, sampled_values=None,
             remove_accidental_hits=False, name="nce_loss"):
    """``tf.nn.nce_loss``: noise-contrastive estimation, per example ``[batch]``: the sigmoid
    cross-entropy of the true and sampled logits (each minus log of its expected count).  Without
    ``sampled_values`` the classes are drawn by ``log_uniform_candidate_sampler(unique=True)``."""
    logits, lab = _sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                                  sampled_values, True, remove_accidental_hits, None)
    return reduce_sum(sigmoid_cross_entropy_with_logits(labels=lab, logits=logits), axis=1)


@tf_types("GatherV2", "MatMul", "SoftmaxCrossEntropyWithLogits")
def sampled_softmax_loss(weights, biases, labels, inputs, num_sampled, num_classes, num_true=1, sampled_values=None,
                         remove_accidental_hits=True, seed=None, name="sampled_softmax_loss"):
    """``tf.nn.sampled_softmax_loss``: the softmax cross-entropy over the true classes and
    ``num_sampled`` sampled ones, per example ``[batch]`` (labels weighted ``1 / num_true``)."""
    logits, lab = _sampled_logits(weights, biases, labels, inputs, num_sampled, num_classes, num_true,
                                  sampled_values, True, remove_accidental_hits, seed)
    return softmax_cross_entropy_with_logits(labels=_call(_STOP, "StopGradient", lab), logits=logits)


__all__ = ["all_candidate_sampler", "compute_accidental_hits", "fixed_unigram_candidate_sampler",
           "learned_unigram_candidate_sampler", "log_uniform_candidate_sampler", "nce_loss", "sampled_softmax_loss",
           "uniform_candidate_sampler"]
