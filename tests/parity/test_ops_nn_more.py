"""tf.nn's CTC ops, candidate samplers and sampled losses, the pooling extras and the top-level
ops of the API sweep's last gaps (tapejax.ops.nn_ctc, nn_sampled, pooling_more), under TensorFlow
and tapejax: values, gradients and errors.  Random samplers are compared through TF's rules (shapes,
dtypes, ranges, expected counts); the losses take fixed ``sampled_values``, so they agree exactly.
TF's SparseTensor results are compared through their components."""
import numpy as np

from .harness import parity, raises

RNG = np.random.default_rng(3)
CTC_LOGITS = RNG.standard_normal((6, 3, 5)).astype(np.float32)
CTC_LABELS = np.array([[1, 2, 2, 0], [3, 1, 0, 0], [4, 3, 3, 1]], np.int32)
CTC_LABEL_LEN = np.array([3, 2, 4], np.int32)
CTC_LOGIT_LEN = np.array([6, 5, 6], np.int32)


def _sparse_parts(tf, s):
    return [tf.cast(s.indices, tf.int32), tf.cast(s.values, tf.int32), tf.cast(s.dense_shape, tf.int32)]


@parity(rtol=1e-5, atol=1e-5)
def test_ctc_loss_values_and_gradients(tf):
    """ctc_loss (dense labels, repeated labels, padded frames) with blank_index 0, -1 and 2 (a label
    equal to the blank, as TF shifts it), batch-major logits, and with `unique`: losses and the
    gradient w.r.t. the logits (zero beyond logit_length)."""
    out = []
    for kw in ({}, {"blank_index": -1}, {"blank_index": 2}, {"unique": "yes"}, {"time_major": False}):
        x = tf.constant(CTC_LOGITS)
        with tf.GradientTape() as t:
            t.watch(x)
            if "unique" in kw:
                loss = tf.nn.ctc_loss(CTC_LABELS, x, CTC_LABEL_LEN, CTC_LOGIT_LEN,
                                      unique=tf.nn.ctc_unique_labels(CTC_LABELS))
            elif "time_major" in kw:
                loss = tf.nn.ctc_loss(CTC_LABELS, tf.transpose(x, [1, 0, 2]), CTC_LABEL_LEN, CTC_LOGIT_LEN,
                                      logits_time_major=False)
            else:
                loss = tf.nn.ctc_loss(CTC_LABELS, x, CTC_LABEL_LEN, CTC_LOGIT_LEN, **kw)
            weighted = loss * tf.constant([1.0, 2.0, -0.5])
        out.append((loss, t.gradient(weighted, x)))
    return out


@parity
def test_ctc_loss_half_and_errors(tf):
    """float16 logits give a float16 loss; 2-D logits raise (TF: an IndexError by accident; tapejax a
    ValueError naming `logits`)."""
    h = tf.nn.ctc_loss(CTC_LABELS, tf.constant(CTC_LOGITS, tf.float16), CTC_LABEL_LEN, CTC_LOGIT_LEN)
    return (h.dtype.name, h.shape.as_list(),
            raises(tf.nn.ctc_loss, CTC_LABELS, CTC_LOGITS[0], CTC_LABEL_LEN, CTC_LOGIT_LEN,
                   ok=("ValueError",)))


@parity
def test_ctc_unique_labels(tf):
    """ctc_unique_labels: distinct labels in order of first appearance, 0-padded, and indices."""
    y, idx = tf.nn.ctc_unique_labels(tf.constant([[3, 4, 4, 3], [1, 1, 0, 0], [0, 5, 0, 6]]))
    return tf.cast(y, tf.int32), idx, y.shape.as_list()


@parity
def test_ctc_greedy_decoder(tf):
    """ctc_greedy_decoder: merged and unmerged, default and explicit blank; the SparseTensor's parts
    and the negative sum of the best logits."""
    out = []
    x = np.concatenate([CTC_LOGITS, CTC_LOGITS[::-1]], axis=0)
    for kw in ({}, {"merge_repeated": False}, {"blank_index": 0}, {"blank_index": -2}):
        d, neg = tf.nn.ctc_greedy_decoder(x, [12, 7, 3], **kw)
        out.append((_sparse_parts(tf, d[0]), neg))
    return out


BEAM_X = (RNG.standard_normal((7, 3, 4)) * 2.0).astype(np.float32)


@parity(rtol=1e-5, atol=1e-5)
def test_ctc_beam_search_decoder(tf):
    """ctc_beam_search_decoder: TF's prefix beam search (beam widths 1, 3 and 8, top paths 1 to 3,
    a sequence of length 0), the paths' SparseTensor parts and log probabilities; top_paths above the
    beam width raises."""
    out = []
    for width, top, lens in ((1, 1, [7, 4, 0]), (3, 2, [7, 4, 1]), (8, 3, [7, 4, 1])):
        d, lp = tf.nn.ctc_beam_search_decoder(BEAM_X, lens, beam_width=width, top_paths=top)
        out.append(([_sparse_parts(tf, p) for p in d], lp))
    out.append(raises(tf.nn.ctc_beam_search_decoder, BEAM_X, [7, 4, 0], beam_width=2, top_paths=3))
    return out


# -- candidate samplers and sampled losses -------------------------------------------------

SW = RNG.standard_normal((10, 4)).astype(np.float32)
SB = RNG.standard_normal((10,)).astype(np.float32)
SX = RNG.standard_normal((3, 4)).astype(np.float32)
SLABELS = np.array([[2, 7], [5, 5], [0, 9]], np.int64)


def _sampled_values(tf, ids):
    return (tf.constant(np.asarray(ids, np.int64)), tf.constant(np.linspace(0.2, 0.7, 6, dtype=np.float32).reshape(3, 2)),
            tf.constant(np.linspace(0.1, 0.9, len(ids), dtype=np.float32)))


@parity(rtol=2e-5, atol=2e-5)
def test_sampled_losses_with_given_samples(tf):
    """nce_loss and sampled_softmax_loss with fixed sampled_values (num_true 2; an id sampled twice and
    ids equal to labels, with and without remove_accidental_hits; weights as two "div" shards): losses
    and gradients w.r.t. weights, biases and inputs."""
    out = []
    for fn, remove in ((tf.nn.nce_loss, False), (tf.nn.nce_loss, True), (tf.nn.sampled_softmax_loss, True),
                       (tf.nn.sampled_softmax_loss, False)):
        w, b, x = tf.constant(SW), tf.constant(SB), tf.constant(SX)
        with tf.GradientTape() as t:
            t.watch([w, b, x])
            loss = fn([w[:5], w[5:]], b, SLABELS, x, 5, 10, num_true=2,
                      sampled_values=_sampled_values(tf, [7, 1, 5, 3, 5]), remove_accidental_hits=remove)
            weighted = loss * tf.constant([1.0, -2.0, 0.5])
        out.append((loss, t.gradient(weighted, [w, b, x])))
    return out


@parity
def test_compute_accidental_hits(tf):
    """compute_accidental_hits: TF's order, the last position of an id sampled twice, duplicated
    labels hit twice."""
    h = tf.nn.compute_accidental_hits(tf.constant([[1, 2], [3, 3]], tf.int64), tf.constant([3, 1, 0, 3], tf.int64), 2)
    return h.indices, tf.cast(h.ids, tf.int32), h.weights


@parity
def test_candidate_samplers_rules(tf):
    """Each sampler: shapes, dtypes, ids in range, unique ids distinct, expected counts TF's where they
    do not depend on the draws; all_candidate_sampler exactly; errors (range too small, num_true, a
    true class out of range, unigrams not matching range_max)."""
    tc = tf.constant([[3, 1], [0, 4]], tf.int64)
    res = []
    for f, kw in ((tf.random.uniform_candidate_sampler, {}), (tf.random.log_uniform_candidate_sampler, {}),
                  (tf.random.learned_unigram_candidate_sampler, {}),
                  (tf.random.fixed_unigram_candidate_sampler, {"unigrams": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})):
        for unique in (True, False):
            s, t, e = f(tc, 2, 5, unique, 6, seed=11, **kw)
            v = s.numpy()
            res.append((s.dtype.name in ("int64", "int32"), s.shape.as_list(), t.shape.as_list(), e.shape.as_list(),
                        t.dtype.name, bool(np.all((v >= 0) & (v < 6))), (len(set(v.tolist())) == 5) if unique else None))
        if not kw:
            res.append(raises(f, tc, 2, 7, True, 6))
            res.append(raises(f, tc, 1, 3, True, 6))
            res.append(raises(f, tf.constant([[3, 9], [0, 4]], tf.int64), 2, 3, True, 6))
    _, t, e = tf.random.uniform_candidate_sampler(tc, 2, 3, False, 6, seed=1)
    res.append((t, e))
    _, t, e = tf.random.fixed_unigram_candidate_sampler(tc, 2, 3, False, 6, unigrams=[1.0, 2.0, 3.0, 4.0],
                                                        num_reserved_ids=2, distortion=0.5, seed=1)
    res.append(t)
    s, t, e = tf.random.all_candidate_sampler(tc, 2, 5, True)
    res.append((tf.cast(s, tf.int32), t, e))
    res.append(raises(tf.random.all_candidate_sampler, tc, 2, 4, True))
    res.append(raises(tf.random.fixed_unigram_candidate_sampler, tc, 2, 3, False, 6, unigrams=[1.0, 2.0]))
    return res


# -- pooling extras ----------------------------------------------------------------------------

POOL_X = RNG.standard_normal((2, 5, 6, 3)).astype(np.float32)
POOL_X[0, 0, 0, 0] = POOL_X[0, 0, 1, 0] = 9.0   # a tie: TF keeps the first


@parity
def test_max_pool_with_argmax(tf):
    """max_pool_with_argmax, VALID and SAME, strides 1 and 2, with and without the batch in the index,
    int32 indices; values, indices and the gradient w.r.t. the input (to the maxima; int64 indices)."""
    out = []
    for k, s, pad, batch, dt in ((2, 2, "VALID", False, tf.int64), (3, 2, "SAME", True, tf.int64),
                                 ([1, 2, 3, 1], [1, 1, 2, 1], "SAME", False, tf.int32)):
        x = tf.constant(POOL_X)
        with tf.GradientTape() as t:
            t.watch(x)
            v, i = tf.nn.max_pool_with_argmax(x, k, s, pad, output_dtype=dt, include_batch_in_index=batch)
            y = v * tf.reshape(tf.range(tf.size(v), dtype=tf.float32), v.shape)
        # (TF has no CPU gradient kernel for int32 indices)
        out.append((v, tf.cast(i, tf.int32), t.gradient(y, x) if dt == tf.int64 else None))
    return out


@parity
def test_isotonic_regression(tf):
    """isotonic_regression: decreasing and increasing, along axis 0 and -1, equal neighbours kept
    apart; outputs, segments and the gradient (averaged over each block)."""
    x0 = np.array([[3.0, 1.0, 2.0, 2.0, 5.0, -1.0], [1.0, 1.0, 1.0, 0.0, 4.0, 4.0]], np.float32)
    out = []
    for kw in ({}, {"decreasing": False}, {"axis": 0}):
        x = tf.constant(x0)
        with tf.GradientTape() as t:
            t.watch(x)
            y, seg = tf.nn.isotonic_regression(x, **kw)
            z = y * tf.reshape(tf.range(12, dtype=tf.float32), y.shape)
        out.append((y, seg, t.gradient(z, x)))
    return out


STB_X = RNG.standard_normal((1, 7, 8, 2)).astype(np.float32)
STB_W = RNG.standard_normal((3, 2, 2, 4)).astype(np.float32)


@parity
def test_with_space_to_batch(tf):
    """with_space_to_batch around a VALID/SAME convolution and a pool (rates 2 and [2, 3]) equals the
    dilated op."""
    x, w = tf.constant(STB_X), tf.constant(STB_W)
    out = []
    for rate, pad in ((2, "VALID"), ([2, 3], "SAME"), (1, "SAME")):
        r = [rate, rate] if isinstance(rate, int) else rate
        out.append(tf.nn.with_space_to_batch(x, r, pad, lambda inp, n, p: tf.nn.convolution(inp, w, padding=p),
                                             filter_shape=[3, 2]))
    out.append(tf.nn.with_space_to_batch(x, [2, 2], "VALID", lambda inp, n, p: tf.nn.max_pool2d(inp, 2, 1, p)))
    return out


FRAC_X = RNG.standard_normal((2, 8, 9, 2)).astype(np.float32)


def _pool_from(x, rows, cols, overlapping, kind):
    """Fractional pooling of NumPy ``x`` over the given sequences (the oracle both sides share)."""
    out = np.zeros((x.shape[0], len(rows) - 1, len(cols) - 1, x.shape[3]), np.float32)
    for i in range(len(rows) - 1):
        for j in range(len(cols) - 1):
            r1 = min(rows[i + 1] + (1 if overlapping else 0), x.shape[1])
            c1 = min(cols[j + 1] + (1 if overlapping else 0), x.shape[2])
            win = x[:, rows[i]:r1, cols[j]:c1, :]
            out[:, i, j, :] = win.max(axis=(1, 2)) if kind == "max" else win.mean(axis=(1, 2))
    return out


@parity(rtol=1e-5, atol=1e-6)
def test_fractional_pools(tf):
    """fractional_max_pool / fractional_avg_pool: the sequences follow TF's rules (0 to the input size;
    random: steps k and k + 1; pseudo-random: increasing) and the output is the pooling over them
    (random and pseudo-random, overlapping or not); an evenly dividing ratio is deterministic in TF,
    so its values and gradients are compared exactly."""
    res = []
    for f, kind in ((tf.nn.fractional_max_pool, "max"), (tf.nn.fractional_avg_pool, "avg")):
        for pseudo in (False, True):
            for overlapping in (False, True):
                out, rows, cols = f(FRAC_X, [1.0, 1.6, 2.2, 1.0], pseudo_random=pseudo, overlapping=overlapping, seed=5)
                r, c = rows.numpy().tolist(), cols.numpy().tolist()
                steps = sorted(set(np.diff(r).tolist()) | set(np.diff(c).tolist()))
                res.append((out.shape.as_list(), r[0], r[-1], c[0], c[-1], len(r), len(c),
                            all(s > 0 for s in steps), (max(steps) <= 3) if not pseudo else None,
                            bool(np.allclose(out.numpy(), _pool_from(FRAC_X, r, c, overlapping, kind), atol=1e-6))))
        x = tf.constant(FRAC_X[:, :8, :8])
        with tf.GradientTape() as t:
            t.watch(x)
            out, rows, cols = f(x, [1.0, 2.0, 2.0, 1.0], seed=1)
            y = out * tf.reshape(tf.range(tf.size(out), dtype=tf.float32), out.shape)
        res.append((out, tf.cast(rows, tf.int32), tf.cast(cols, tf.int32), t.gradient(y, x)))
    res.append(raises(tf.nn.fractional_max_pool, FRAC_X, [1.0, 0.5, 2.0, 1.0], ok=("InvalidArgumentError",)))
    return res


# -- top level: volume patches, Sobol points --------------------------------------------------

VOL_X = RNG.standard_normal((2, 5, 4, 6, 3)).astype(np.float32)


@parity
def test_extract_volume_patches(tf):
    """extract_volume_patches, VALID and SAME with uneven padding and strides: the patches and the
    gradient w.r.t. the input (overlapping windows add up)."""
    out = []
    for k, s, pad in (([1, 2, 2, 2, 1], [1, 2, 2, 2, 1], "VALID"), ([1, 3, 2, 2, 1], [1, 2, 1, 3, 1], "SAME"),
                      ([1, 2, 3, 2, 1], [1, 1, 1, 1, 1], "SAME")):
        x = tf.constant(VOL_X)
        with tf.GradientTape() as t:
            t.watch(x)
            p = tf.extract_volume_patches(x, k, s, pad)
            y = p * tf.reshape(tf.range(tf.size(p), dtype=tf.float32), p.shape)
        out.append((p, t.gradient(y, x)))
    x = np.zeros((1, 3, 3, 3, 1), np.float32)
    out.append(tf.extract_volume_patches(x, [1, 4, 2, 2, 1], [1, 1, 1, 1, 1], "VALID").shape.as_list())
    out.append(raises(tf.extract_volume_patches, x, [2, 2, 2, 2, 1], [1, 1, 1, 1, 1], "VALID"))
    out.append(raises(tf.extract_volume_patches, x[0], [1, 2, 2, 2, 1], [1, 1, 1, 1, 1], "VALID"))
    return out


@parity(rtol=0, atol=0)
def test_sobol_sample(tf):
    """sobol_sample: TF's points exactly (dims 1, 5, 40 and 1000, skips 0, 3, 100 and 12345)."""
    return ([tf.math.sobol_sample(d, n, skip=s) for d, n, s in ((1, 6, 0), (5, 9, 3), (40, 4, 100), (1000, 3, 12345))],
            raises(tf.math.sobol_sample, 0, 3), raises(tf.math.sobol_sample, 2, 3, skip=-1))


@parity
def test_random_index_shuffle(tf):
    """random_index_shuffle: TF's values for block sizes 16 to 32 bits, 4 and 6 rounds, one seed or one
    per index, max_index 0 and 1; a scalar stays a scalar; bad seed shapes raise."""
    idx = np.array([0, 1, 2, 77, 1000, 65535], np.int32)
    out = [tf.random_index_shuffle(idx, np.array(s, np.int32), np.int32(m), rounds=r)
           for s, m, r in (([1, 2, 3], 65535, 4), ([7, -1, 2**30], 70000, 6), ([0, 0, 0], 2**31 - 1, 4))]
    seeds = np.arange(18, dtype=np.int32).reshape(6, 3)
    out.append(tf.random_index_shuffle(idx, seeds, np.array([5, 9, 2, 100, 2000, 2**20], np.int32)))
    out.append(tf.random_index_shuffle(np.int32(0), [4, 5, 6], np.int32(0)))
    out.append(tf.random_index_shuffle(np.int32(1), [4, 5, 6], np.int32(1)))
    out.append(raises(tf.random_index_shuffle, idx, np.zeros((2, 3), np.int32), np.int32(9)))
    return out


@parity(x64=True)
def test_random_index_shuffle_64_bit(tf):
    """int64 indices above 2**32 (blocks of 34 to 64 bits, TF's double log2 near 2**62), 64-bit seeds
    (their low 32 bits)."""
    out = []
    for m in (2**40 + 7, 2**62 + 5, 2**63 - 1):
        idx = np.array([0, 1, m // 3, m], np.int64)
        seed = np.array([[5, 6, 7], [2**40 + 1, -3, 9], [1, 1, 1], [0, 2, 4]], np.int64)
        out.append(tf.random_index_shuffle(idx, seed, np.int64(m)))
    return out


# -- a user's programs ---------------------------------------------------------------------------

PROG_X = RNG.standard_normal((4, 8, 6)).astype(np.float32)          # [batch, time, features]
PROG_W = (RNG.standard_normal((6, 5)) * 0.3).astype(np.float32)
PROG_LABELS = np.array([[1, 2, 0], [3, 3, 1], [2, 0, 0], [4, 1, 4]], np.int32)
PROG_LABEL_LEN = np.array([2, 3, 1, 3], np.int32)
PROG_FRAMES = np.array([8, 7, 8, 6], np.int32)
EMB = (RNG.standard_normal((20, 6)) * 0.3).astype(np.float32)
EMB_X = RNG.standard_normal((5, 6)).astype(np.float32)
EMB_Y = np.array([[3], [7], [0], [19], [7]], np.int64)


@parity(rtol=2e-4, atol=2e-5, modes=True)
def test_training_programs(tf):
    """Two small models trained by SGD as a user writes them, evaluated between steps: a linear CTC
    acoustic model (batch-major logits, the loss in a tf.function step, greedy decoding of the
    result) and a sampled-softmax classifier with fixed sampled classes (the weights as a Variable,
    nce_loss as the metric)."""
    w = tf.Variable(PROG_W)
    opt_lr = 0.5

    @tf.function
    def ctc_step(x):
        with tf.GradientTape() as t:
            logits = tf.einsum("btf,fk->btk", x, w)
            loss = tf.reduce_mean(tf.nn.ctc_loss(PROG_LABELS, logits, PROG_LABEL_LEN, PROG_FRAMES,
                                                 logits_time_major=False, blank_index=0))
        w.assign_sub(opt_lr * t.gradient(loss, w))
        return loss

    ctc_losses = [ctc_step(tf.constant(PROG_X)) for _ in range(4)]
    logits = tf.transpose(tf.einsum("btf,fk->btk", tf.constant(PROG_X), w), [1, 0, 2])
    (decoded,), neg = tf.nn.ctc_greedy_decoder(logits, PROG_FRAMES, blank_index=0)

    emb = tf.Variable(EMB)
    bias = tf.Variable(np.zeros(20, np.float32))
    sampled = (tf.constant(np.array([1, 5, 7, 12], np.int64)), tf.constant(np.full((5, 1), 0.2, np.float32)),
               tf.constant(np.array([0.3, 0.25, 0.2, 0.1], np.float32)))
    ssm_losses, metrics = [], []
    for _ in range(3):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.nn.sampled_softmax_loss(emb, bias, EMB_Y, EMB_X, 4, 20, sampled_values=sampled))
        g_emb, g_bias = t.gradient(loss, [emb, bias])
        emb.assign_sub(0.3 * tf.convert_to_tensor(g_emb))
        bias.assign_sub(0.3 * tf.convert_to_tensor(g_bias))
        ssm_losses.append(loss)
        metrics.append(tf.reduce_mean(tf.nn.nce_loss(emb, bias, EMB_Y, EMB_X, 4, 20, sampled_values=sampled)))
    return ctc_losses, w, _sparse_parts(tf, decoded), neg, ssm_losses, metrics, emb, bias
