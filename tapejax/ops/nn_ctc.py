"""Connectionist temporal classification: ``tf.nn.ctc_loss`` (dense labels), ``ctc_unique_labels``,
``ctc_greedy_decoder`` and ``ctc_beam_search_decoder``.

``ctc_loss`` is one primitive computing what TF's dense-label ``ctc_loss_and_grad`` computes, in
its order: the forward and backward recursions over the ``2 (L + 1)`` alignment states in log
space, each step renormalised by its log-sum-exp (``lax.scan``), the log-likelihood from the
backward pass and the per-frame state posteriors; its gradient is TF's hand-written one
(``softmax - posterior`` per frame, zero beyond ``logit_length``: ``jax.custom_vjp``), not the
derivative of the recursion.  So an infeasible label sequence (longer than its logits allow),
whose probability is 0, costs what TF's does, about ``-log(1e-307)`` plus the renormalisers
(TF's initial and final state log-probabilities use ``log(1e-307)`` for log 0, the transitions
``-inf``), with TF's finite gradient.  TF moves the blank class to index 0 by rotating the logits
and shifting the labels below it (a label equal to the blank thus stands for the class below
it), and so does this op.  Half inputs run in float32 and the loss is cast back, as TF.

The decoders return TF's ``SparseTensor``s (``ops.sparse_tensor``: ``indices`` ``[n, 2]`` rows
``[batch, time]``, ``values``, ``dense_shape`` ``[batch, max_decoded_length]``), so TF code's
``tf.sparse.to_dense(decoded[0])`` works as it is.  The number of decoded labels depends on the
values, so the decoders read them on the host (eager only, no gradient: TF registers none either).
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ._registry import _call, _shape, check_float, prim, tf_types
from .sparse_tensor import SparseTensor, host_indices

#: TF's log(0) in the CTC recursion's initial and final states (``ctc_state_log_probs``).
_LOG_0 = float(np.float32(np.log(1e-307)))


def _logsumexp(x, axis, keepdims=False):
    """TF's ``reduce_logsumexp``: the max (0 where it is not finite) taken out before ``exp``."""
    m = jnp.max(x, axis=axis, keepdims=True)
    m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0.0))
    out = jnp.log(jnp.sum(jnp.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else jnp.squeeze(out, axis)


def _transitions(labels, s):
    """``log`` of TF's ``_ctc_state_trans``: ``[batch, to, from]`` over the states (0: start,
    1..L: the labels, L+1..2L+1: the blanks after them); a repeated label cannot follow itself.
    Built by index comparisons, not NumPy, so the label width may be a symbolic size (a compiled
    step whose ``input_signature`` has ``None`` there: one trace for every width, as TF)."""
    b, n = labels.shape
    k = n + 1
    to, frm = jnp.arange(s)[:, None], jnp.arange(s)[None, :]
    t = ((to == frm) | ((to == 1) & (frm == 0)) | ((to >= 1) & (to < k) & (frm == k + to - 1))
         | ((to >= k) & (frm == to - k))).astype(jnp.float32)
    # label state j (2 <= j <= L) may follow state j - 1 unless their labels are equal: the labels
    # padded out to the states, at j and at j - 1
    here = jnp.pad(labels, ((0, 0), (1, s - k)))
    before = jnp.pad(labels, ((0, 0), (2, s - k - 1)))
    j = jnp.arange(s)[None]
    step = ((j >= 2) & (j < k) & (here != before)).astype(jnp.float32)
    return jnp.log(t[None] + step[:, :, None] * (frm == to - 1).astype(jnp.float32)[None])


def _loss_and_grad(logits, labels, label_length, logit_length, no_path_inf):
    """TF's ``ctc_loss_and_grad`` on time-major float32 ``logits`` with the blank at 0; with
    ``no_path_inf`` (sparse labels: TF's CTCLoss kernel) a label its frames cannot hold once its
    repeats are separated costs ``inf``, its gradient the softmax."""
    t_len, b, c = logits.shape
    n = labels.shape[1]
    s = 2 * (n + 1)
    ilp = jax.nn.log_softmax(logits)
    emit = jnp.take_along_axis(ilp, jnp.broadcast_to(labels[None], (t_len, b, n)), axis=2)
    obs = jnp.concatenate([jnp.full((t_len, b, 1), -jnp.inf, ilp.dtype), emit,
                           jnp.broadcast_to(ilp[:, :, :1], (t_len, b, n + 1))], axis=2)
    trans = _transitions(labels, s)
    init = jnp.where(jnp.arange(s)[None] == 0, 0.0, _LOG_0) * jnp.ones((b, 1), jnp.float32)
    final = jnp.where(jnp.arange(s)[None] % (n + 1) == label_length[:, None], 0.0, _LOG_0)
    mask = (jnp.arange(t_len)[:, None] < logit_length[None, :]).astype(jnp.float32)   # [T, B]

    def forward(prev, o):
        x = _logsumexp(prev[:, None, :] + trans, -1) + o
        x = x - _logsumexp(x, -1, keepdims=True)
        return x, x

    def backward(acc, elems):
        prev, cum = acc
        o, m = elems
        x = _logsumexp((prev + o)[:, None, :] + jnp.swapaxes(trans, 1, 2), -1)
        total = _logsumexp(x, -1, keepdims=True)
        x = x - total
        cum = cum + total[:, 0] * m
        out = x * m[:, None] + final * (1.0 - m[:, None])
        return (out, cum), (out, cum)

    _, fwd = jax.lax.scan(forward, init, obs)
    _, (bwd, cum) = jax.lax.scan(backward, (final, jnp.zeros((b,), jnp.float32)), (obs, mask), reverse=True)
    post = fwd + jnp.concatenate([bwd[1:], final[None]], axis=0)
    post = post - _logsumexp(post, 2, keepdims=True) + jnp.log(mask[:, :, None])
    label_olabels = _logsumexp(post[:, :, 1:n + 1, None] + jnp.where(
        jax.nn.one_hot(labels - 1, c - 1) > 0, 0.0, -jnp.inf)[None], 2)
    olp = jnp.concatenate([_logsumexp(post[:, :, n + 1:], 2, keepdims=True), label_olabels], axis=-1)
    grad = (jnp.exp(ilp) - jnp.exp(olp)) * mask[:, :, None]
    loss = -(bwd[0, :, 0] + cum[0])
    if no_path_inf:
        inside = jnp.arange(1, n)[None] < label_length[:, None]
        need = label_length + jnp.sum((labels[:, 1:] == labels[:, :-1]) & inside, axis=1)
        none = need > logit_length
        loss = jnp.where(none, jnp.inf, loss)
        grad = jnp.where(none[None, :, None], jnp.exp(ilp) * mask[:, :, None], grad)
    return loss, grad


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _tf_ctc(logits, labels, label_length, logit_length, no_path_inf):
    return _loss_and_grad(logits, labels, label_length, logit_length, no_path_inf)[0]


def _tf_ctc_fwd(logits, labels, label_length, logit_length, no_path_inf):
    return _loss_and_grad(logits, labels, label_length, logit_length, no_path_inf)


def _tf_ctc_bwd(no_path_inf, grad, g):
    return g[None, :, None] * grad, None, None, None


_tf_ctc.defvjp(_tf_ctc_fwd, _tf_ctc_bwd)


def _ctc_loss(logits, labels, label_length, logit_length, *, time_major, blank, sparse=False):
    dt = logits.dtype
    x = logits.astype(jnp.float32) if dt in (jnp.float16, jnp.bfloat16) else logits
    if not time_major:
        x = jnp.swapaxes(x, 0, 1)
    if blank:   # TF's rotation: the blank class first, the labels below it shifted up
        x = jnp.concatenate([x[..., blank:blank + 1], x[..., :blank], x[..., blank + 1:]], axis=-1)
        labels = jnp.where(labels < blank, labels + 1, labels)
    loss = _tf_ctc(x, labels.astype(jnp.int32), label_length.astype(jnp.int32), logit_length.astype(jnp.int32),
                   sparse)
    return jnp.asarray(loss).astype(dt)


_CTC_LOSS = prim("CTCLossDense", _ctc_loss)


def _int_tensor(x, arg, op):
    t = convert_to_tensor(x)
    if t.dtype.is_floating or t.dtype.is_complex or t.dtype.is_bool:
        raise TypeError(f"{op}: argument `{arg}` must be an integer tensor; got {t.dtype.name}")
    return t


def _rank(x, arg, rank, op, what):
    if len(_shape(x)) != rank:
        raise ValueError(f"{op}: argument `{arg}` must be {what} (rank {rank}); got shape {list(_shape(x))}")


@tf_types("CTCLossDense")
def ctc_loss(labels, logits, label_length, logit_length, logits_time_major=True, unique=None,
             blank_index=None, name=None):
    """``tf.nn.ctc_loss`` with dense labels: the negative log probability of each ``labels[b, :
    label_length[b]]`` given ``logits`` (``[time, batch, classes]``, or ``[batch, time, classes]``
    with ``logits_time_major=False``) over ``logit_length[b]`` frames; shape ``[batch]``.

    ``blank_index`` (default 0; negative counts from the number of classes) is the blank class.
    ``unique`` (``ctc_unique_labels(labels)``) is TF's speed-up for TPUs: it is checked and gives
    the same loss (tapejax's recursion does not need it).  ``labels`` may be a ``SparseTensor``
    (eager; ``blank_index`` required, ``label_length`` unused): as TF's CTCLoss kernel, a label
    longer than its frames is an InvalidArgumentError and one whose repeats do not fit costs ``inf``
    (its gradient the softmax), where dense labels cost about ``-log(1e-307)``."""
    op = "ctc_loss"
    logits = convert_to_tensor(logits)
    check_float(logits, "CTCLossDense", "real", "logits")
    sparse = isinstance(labels, SparseTensor)
    if sparse:
        labels, label_length = _sparse_labels(labels, blank_index, logit_length, op)
    labels = _int_tensor(labels, "labels", op)
    if label_length is None:
        raise ValueError(f"{op}: argument `label_length` must be given for dense labels; got None")
    label_length = _int_tensor(label_length, "label_length", op)
    logit_length = _int_tensor(logit_length, "logit_length", op)
    _rank(logits, "logits", 3, op, "[time, batch, classes]" if logits_time_major else "[batch, time, classes]")
    _rank(labels, "labels", 2, op, "[batch, max_label_length]")
    ls = _shape(logits)
    batch, classes = (ls[1] if logits_time_major else ls[0]), ls[2]
    for arg, v in (("labels", labels), ("label_length", label_length), ("logit_length", logit_length)):
        if _shape(v)[:1] != (batch,) or (arg != "labels" and len(_shape(v)) != 1):
            raise ValueError(f"{op}: argument `{arg}` must have batch size {batch} (from `logits`) as its "
                             f"first and {'first of two' if arg == 'labels' else 'only'} dimension; got shape "
                             f"{list(_shape(v))}")
    blank = 0 if blank_index is None else int(blank_index)
    if not -classes <= blank < classes:
        raise ValueError(f"{op}: argument `blank_index` must be in [{-classes}, {classes}) for {classes} classes; "
                         f"got {blank}")
    if unique is not None:
        if not isinstance(unique, (tuple, list)) or len(unique) != 2:
            raise TypeError(f"{op}: argument `unique` must be the pair ctc_unique_labels(labels) returns; got "
                            f"{type(unique).__name__}")
        for part in unique:
            if tuple(_shape(part)) != tuple(_shape(labels)):
                raise ValueError(f"{op}: argument `unique` must hold two tensors of the labels' shape "
                                 f"{list(_shape(labels))}; got shape {list(_shape(part))}")
    return _call(_CTC_LOSS, "CTCLossDense", logits, labels, label_length, logit_length,
                 time_major=bool(logits_time_major), blank=blank % classes, **({"sparse": True} if sparse else {}))


def _sparse_labels(sp, blank_index, logit_length, op):
    """Sparse ``labels`` as dense ones and their lengths (host values), with TF's checks."""
    if blank_index is None:
        raise ValueError("Argument `blank_index` must be provided when `labels` is a `SparseTensor`.")
    idx = host_indices(sp, op)
    order = np.lexsort((idx[:, 1], idx[:, 0]))   # (a row's values in column order, gaps closed: TF's kernel)
    rows = idx[order, 0]
    lengths = np.bincount(rows, minlength=int(np.asarray(sp.dense_shape.numpy())[0])).astype(np.int32)
    dense = np.zeros((len(lengths), max(1, int(lengths.max(initial=0)))), np.int32)
    dense[rows, np.arange(len(rows)) - np.searchsorted(rows, rows)] = np.asarray(sp.values.numpy())[order]
    frames = np.asarray(convert_to_tensor(logit_length).numpy()).reshape(-1)
    for need, have in zip(lengths, frames):
        if need > have:
            raise InvalidArgumentError(None, None, f"Not enough time for target transition sequence (required: "
                                       f"{need}, available: {have}) [Op:CTCLoss]")
    return dense, lengths


def _unique_rows(labels, *, dtype):
    n = labels.shape[1]
    eq = labels[:, :, None] == labels[:, None, :]                 # [b, i, j]: labels[i] == labels[j]
    earlier = jnp.tril(jnp.ones((n, n), bool), -1)                # j < i
    first = ~jnp.any(eq & earlier[None], axis=2)                  # first occurrence of its value
    pos = jnp.cumsum(first, axis=1) - 1                           # its place among the unique values
    idx = jnp.take_along_axis(pos, jnp.argmax(eq, axis=2), axis=1).astype(jnp.int32)
    rows = jnp.arange(labels.shape[0])[:, None]
    y = jnp.zeros_like(labels).at[rows, jnp.where(first, pos, n)].set(labels, mode="drop")
    return y.astype(dtype), idx


_UNIQUE = prim("CTCUniqueLabels", _unique_rows, differentiable=False, multiple_results=True)


@tf_types("CTCUniqueLabels")
def ctc_unique_labels(labels, name=None):
    """``tf.nn.ctc_unique_labels``: per row of ``labels`` (``[batch, max_label_length]``), the distinct
    labels in order of first appearance padded with 0 (int64; int32 without x64) and each label's
    index into them (int32)."""
    labels = _int_tensor(labels, "labels", "ctc_unique_labels")
    _rank(labels, "labels", 2, "ctc_unique_labels", "[batch, max_label_length]")
    store = _dtypes.storage_dtype(np.dtype(np.int64), "labels").name
    return list(_call(_UNIQUE, "CTCUniqueLabels", labels, dtype=store))


def _sparse(rows, batch):
    """TF's SparseTensor components of ``rows`` (one label list per batch entry)."""
    long = _dtypes.storage_dtype(np.dtype(np.int64), "decoded")
    ix = [(b, t) for b, r in enumerate(rows) for t in range(len(r))]
    vals = [v for r in rows for v in r]
    width = max((len(r) for r in rows), default=0)
    return SparseTensor(convert_to_tensor(np.asarray(ix, long).reshape(-1, 2)), convert_to_tensor(np.asarray(vals, long)),
                        (batch, width))


def _greedy(inputs, seq_len, *, blank, merge):
    best = jnp.argmax(inputs, axis=2)                          # [time, batch]
    t = inputs.shape[0]
    valid = jnp.arange(t)[:, None] < seq_len[None, :]
    neg = -jnp.sum(jnp.where(valid, jnp.max(inputs, axis=2), 0), axis=0)[:, None]
    prev = jnp.concatenate([jnp.full((1, best.shape[1]), -1, best.dtype), best[:-1]], axis=0)
    keep = valid & (best != blank)
    if merge:
        keep = keep & (best != prev)
    return jnp.where(keep, best, -1).astype(jnp.int32), neg


_GREEDY = prim("CTCGreedyDecoder", _greedy, differentiable=False, multiple_results=True)


def _decoder_inputs(inputs, sequence_length, op):
    inputs = convert_to_tensor(inputs)
    check_float(inputs, op, "real", "inputs")
    _rank(inputs, "inputs", 3, op, "[max_time, batch_size, num_classes]")
    seq = _int_tensor(sequence_length, "sequence_length", op)
    t, b, _ = _shape(inputs)
    if tuple(_shape(seq)) != (b,):
        raise InvalidArgumentError(None, None, f"len(sequence_length) != batch_size.  len(sequence_length):  "
                                   f"{list(_shape(seq))} batch_size: {b} (argument `sequence_length`) [Op:{op}]")
    lens = np.asarray(seq.numpy())
    if np.any(lens > t):
        raise InvalidArgumentError(None, None, f"sequence_length({int(np.argmax(lens > t))}) <= {t}: argument "
                                   f"`sequence_length` must not exceed max_time; got {lens.tolist()} [Op:{op}]")
    return inputs, seq


@tf_types("CTCGreedyDecoder")
def ctc_greedy_decoder(inputs, sequence_length, merge_repeated=True, blank_index=None):
    """``tf.nn.ctc_greedy_decoder``: the best class per frame, repeats merged (``merge_repeated``) and
    blanks dropped.  Returns ``([SparseTensor], neg_sum_logits [batch, 1])``; ``blank_index`` defaults to
    ``num_classes - 1`` (negative counts from ``num_classes``)."""
    inputs, seq = _decoder_inputs(inputs, sequence_length, "CTCGreedyDecoder")
    classes = _shape(inputs)[2]
    blank = classes - 1 if blank_index is None else int(blank_index)
    if blank < 0:
        blank += classes
    if not 0 <= blank < classes:
        raise InvalidArgumentError(None, None, f"blank_index expected to be between {-classes} and {classes} but "
                                   f"was {blank_index} (argument `blank_index`) [Op:CTCGreedyDecoder]")
    best, neg = _call(_GREEDY, "CTCGreedyDecoder", inputs, seq, blank=blank, merge=bool(merge_repeated))
    dense = np.asarray(best.numpy()).T
    return [_sparse([[int(v) for v in row if v >= 0] for row in dense], dense.shape[0])], neg


class _Beam:
    """One prefix in TF's beam search tree: log probabilities ending in blank / in its label."""
    __slots__ = ("parent", "label", "children", "old", "new")

    def __init__(self, parent, label):
        self.parent, self.label, self.children = parent, label, {}
        self.old = self.new = (_NEG_INF, _NEG_INF, _NEG_INF)   # (blank, label, total)

    def active(self):
        return self.new[2] != _NEG_INF

    def labels(self):
        out, b = [], self
        while b.parent is not None:
            out.append(b.label)
            b = b.parent
        return out[::-1]


_NEG_INF = float("-inf")


def _lse(a, b):
    if a == _NEG_INF:
        return b
    if b == _NEG_INF:
        return a
    m = max(a, b)
    return m + float(np.log1p(np.exp(-abs(a - b))))


def _beam_search(frames, width, blank):
    """TF's ``CTCBeamSearchDecoder`` for one sequence (``frames``: log-softmax rows): the leaves,
    best first (TF's tree of prefixes, its update order and its pruning of the weakest leaf)."""
    root = _Beam(None, -1)
    root.new = (0.0, _NEG_INF, 0.0)
    leaves = [root]
    order = lambda b: -b.new[2]   # noqa: E731
    for x in frames:
        branches = sorted(leaves, key=order)
        leaves = []
        for b in branches:
            b.old = b.new
        for b in branches:
            blank_p, label_p, _ = b.new
            if b.parent is not None:
                if b.parent.active():
                    prev = b.parent.old[0] if b.label == b.parent.label else b.parent.old[2]
                    label_p = _lse(label_p, prev)
                label_p = label_p + float(x[b.label])
            blank_p = b.old[2] + float(x[blank])
            b.new = (blank_p, label_p, _lse(blank_p, label_p))
            leaves.append(b)

        def candidate(total):
            return total > _NEG_INF and (len(leaves) < width or total > min(c.new[2] for c in leaves))

        for b in branches:
            if not candidate(b.old[2]):
                continue
            for label in range(len(x)):
                if label == blank:
                    continue
                c = b.children.get(label)
                if c is None:
                    c = b.children[label] = _Beam(b, label)
                if c.active():
                    continue
                prev = b.old[0] if label == b.label else b.old[2]
                lp = float(x[label]) + prev
                if candidate(lp):
                    if len(leaves) == width:
                        bottom = min(leaves, key=lambda e: e.new[2])
                        bottom.new = (_NEG_INF, _NEG_INF, _NEG_INF)
                        leaves.remove(bottom)
                    c.new = (_NEG_INF, lp, lp)
                    leaves.append(c)
                else:
                    c.old = c.new = (_NEG_INF, _NEG_INF, _NEG_INF)
    return sorted(leaves, key=order)


def ctc_beam_search_decoder(inputs, sequence_length, beam_width=100, top_paths=1):
    """``tf.nn.ctc_beam_search_decoder`` (TF2: repeated labels are not merged): TF's prefix beam search
    over the log-softmax of each frame, blank ``num_classes - 1``.  Returns ``([SparseTensor] * top_paths,
    log_probabilities [batch, top_paths])``.  Runs on the host, in NumPy (the search is sequential and
    its result's size depends on the values: eager only, no gradient, as TF)."""
    inputs, seq = _decoder_inputs(inputs, sequence_length, "CTCBeamSearchDecoder")
    if int(beam_width) < 1:
        raise InvalidArgumentError(None, None, f"beam_width must be at least 1; got {int(beam_width)} (argument "
                                   "`beam_width`) [Op:CTCBeamSearchDecoder]")
    if not 1 <= int(top_paths) <= int(beam_width):
        raise InvalidArgumentError(None, None, f"top_paths must be in [1, beam_width = {int(beam_width)}]; got "
                                   f"{int(top_paths)} (argument `top_paths`) [Op:CTCBeamSearchDecoder]")
    x = np.asarray(inputs.numpy()).astype(np.float32)
    x = x - x.max(axis=2, keepdims=True)
    x = x - np.log(np.sum(np.exp(x), axis=2, keepdims=True))
    lens = np.asarray(seq.numpy())
    blank = x.shape[2] - 1
    paths = [[None] * x.shape[1] for _ in range(int(top_paths))]
    logp = np.zeros((x.shape[1], int(top_paths)), np.float32)
    for b in range(x.shape[1]):
        leaves = _beam_search(x[:lens[b], b], int(beam_width), blank)
        if len(leaves) < int(top_paths):
            raise InvalidArgumentError(None, None, f"Less leaves in the beam search than requested: {len(leaves)} < "
                                       f"top_paths {int(top_paths)} [Op:CTCBeamSearchDecoder]")
        for i in range(int(top_paths)):
            paths[i][b] = leaves[i].labels()
            logp[b, i] = leaves[i].new[2]
    out = convert_to_tensor(logp.astype(np.dtype(inputs.dtype.as_numpy_dtype)))
    return [_sparse(p, x.shape[1]) for p in paths], out


ctc_beam_search_decoder._tf_types = ()

__all__ = ["ctc_beam_search_decoder", "ctc_greedy_decoder", "ctc_loss", "ctc_unique_labels"]
