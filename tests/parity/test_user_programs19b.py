"""Round nineteen (b) of realistic user programs, first half: language models written from raw tf
ops as TF's text tutorials and research code write them, run under real TensorFlow 2.21 and under
tapejax with deferred execution and predicted updates on and off (``modes=True``).

A GPT-style decoder trained from scratch (token and position embeddings by ``tf.gather``, a causal
mask by ``tf.linalg.band_part``, scores masked by ``-1e9``, LayerNorm by ``tf.nn.moments``, input
and output embeddings tied by ``matmul(h, E, transpose_b=True)``: one Variable read twice, whose
gradient TF sums to a dense Tensor, label-smoothed cross entropy over a padding mask, perplexity,
the tutorial's ``CustomSchedule`` driving Adam with ``beta_2=0.98, epsilon=1e-9`` and
``clip_by_global_norm``); ``-inf`` masks (a fully masked row is NaN forward and backward);
decoding inside ``tf.function`` (greedy by an AutoGraph ``for`` over ``tf.range`` with a
``TensorArray`` and an early stop on ``tf.reduce_all(finished)``, the same by ``tf.while_loop``,
a preallocated KV cache against full recomputation, beam search by ``tf.math.top_k`` over
flattened beam x vocab scores with ties and ``tf.gather(..., batch_dims=1)``, temperature sampling
by the Gumbel-max trick with NumPy noise, nucleus sampling with a repetition penalty by
``tf.sort`` / ``tf.argsort`` / exclusive ``cumsum``); scheduled sampling in a training loop;
sliding-window attention with ALiBi biases.  A KV cache grown by ``tf.concat`` under
``shape_invariants`` is a strict xfail (XLA's static shapes).  The
variable-length data programs and the Keras-layer ones are in ``test_user_programs19b2.py``.
Every number trained on is drawn with NumPy.
"""
import numpy as np

from .harness import init_array, parity, xfail_on_tapejax

TOL = dict(rtol=2e-5, atol=2e-6)
LOOSE = dict(rtol=1e-4, atol=1e-5)

VOCAB, D, T = 12, 8, 6
PAD, BOS, EOS = 0, 1, 2


def _tokens(seed, n=3, length=T + 1, lengths=(7, 5, 4)):
    """Token ids in [3, VOCAB) with PAD after each row's length."""
    rs = np.random.RandomState(seed)
    tok = rs.randint(3, VOCAB, (n, length)).astype(np.int32)
    for r, n_ in enumerate(lengths):
        tok[r, n_:] = PAD
    return tok


def _gpt_vars(tf, seed, vocab=VOCAB, d=D, t=T):
    """A one-block, one-head GPT's Variables: token and position tables, q/k/v/o, LayerNorm gains
    and biases, a ReLU MLP."""
    names = ["wte", "wpe", "wq", "wk", "wv", "wo", "w1", "w2"]
    shapes = [(vocab, d), (t, d), (d, d), (d, d), (d, d), (d, d), (d, 2 * d), (2 * d, d)]
    vs = {n: tf.Variable(init_array(s, seed + i), name=n) for i, (n, s) in enumerate(zip(names, shapes))}
    for n in ("ln1", "ln2", "lnf"):
        vs[n + "_g"] = tf.Variable(np.ones(d, np.float32), name=n + "_g")
        vs[n + "_b"] = tf.Variable(np.zeros(d, np.float32), name=n + "_b")
    return vs


def _layer_norm(tf, x, g, b, eps=1e-5):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + eps) * g + b


def _gpt(tf, vs, ids, neg=-1e9):
    """Logits of the tied-embedding GPT on ``ids`` [B, L] (L <= T)."""
    length = tf.shape(ids)[1]
    h = tf.gather(vs["wte"], ids) + vs["wpe"][:length]
    x = _layer_norm(tf, h, vs["ln1_g"], vs["ln1_b"])
    q, k, v = (tf.matmul(x, vs[n]) for n in ("wq", "wk", "wv"))
    scores = tf.matmul(q, k, transpose_b=True) / tf.math.sqrt(float(D))
    causal = tf.linalg.band_part(tf.ones([length, length]), -1, 0)
    scores = scores + (1.0 - causal) * neg
    h = h + tf.matmul(tf.matmul(tf.nn.softmax(scores, axis=-1), v), vs["wo"])
    x = _layer_norm(tf, h, vs["ln2_g"], vs["ln2_b"])
    h = h + tf.matmul(tf.nn.relu(tf.matmul(x, vs["w1"])), vs["w2"])
    h = _layer_norm(tf, h, vs["lnf_g"], vs["lnf_b"])
    return tf.matmul(h, vs["wte"], transpose_b=True)


def _custom_schedule(tf, d_model, warmup=4):
    class CustomSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self, d_model, warmup_steps=warmup):
            super().__init__()
            self.d_model = tf.cast(d_model, tf.float32)
            self.warmup_steps = warmup_steps

        def __call__(self, step):
            step = tf.cast(step, dtype=tf.float32)
            arg1 = tf.math.rsqrt(step)
            arg2 = step * (self.warmup_steps ** -1.5)
            return tf.math.rsqrt(self.d_model) * tf.math.minimum(arg1, arg2)

    return CustomSchedule(d_model)


# ---------------------------------------------------------------------------
# A GPT trained from scratch
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_gpt_from_raw_ops_tied_embeddings_label_smoothing_custom_schedule(tf):
    """The decoder above on next-token prediction: label-smoothed cross entropy
    (``softmax_cross_entropy_with_logits`` on ``one_hot(on_value=0.9 + 0.1/V, off_value=0.1/V)``)
    times the padding mask over ``reduce_sum(mask)``, the unsmoothed loss and perplexity beside it,
    gradients clipped by ``clip_by_global_norm`` and applied by Adam on the warm-up schedule, in a
    compiled step.  The tied table's gradient (a gather and a matmul) is a dense Tensor in TF; the
    position table's (a slice) is dense too."""
    tok = _tokens(1901)
    inp, tar = tok[:, :-1], tok[:, 1:]
    vs = _gpt_vars(tf, 1910)
    params = list(vs.values())
    schedule = _custom_schedule(tf, D)
    opt = tf.keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    eps = 0.1

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            logits = _gpt(tf, vs, x)
            mask = tf.cast(tf.not_equal(y, PAD), tf.float32)
            soft = tf.one_hot(y, VOCAB, on_value=1.0 - eps + eps / VOCAB, off_value=eps / VOCAB)
            smoothed = tf.nn.softmax_cross_entropy_with_logits(soft, logits)
            loss = tf.reduce_sum(smoothed * mask) / tf.reduce_sum(mask)
        nll = tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits)
        nll = tf.reduce_sum(nll * mask) / tf.reduce_sum(mask)
        grads = tape.gradient(loss, params)
        clipped, norm = tf.clip_by_global_norm(grads, 1.0)
        opt.apply_gradients(zip(clipped, params))
        return loss, nll, tf.exp(nll), norm, grads

    out = []
    for _ in range(3):
        loss, nll, ppl, norm, grads = step(inp, tar)
        out.append((loss, nll, ppl, norm, grads, [type(g).__name__ == "IndexedSlices" for g in grads]))
    return out, [schedule(s) for s in (1, 3, 4, 9)], params


@parity(modes=True, **LOOSE)
def test_gpt_eager_steps_keep_the_embedding_gradient_sparse_when_untied(tf):
    """The same model with an untied output projection, trained eagerly: now the token table is
    only gathered, so its gradient is ``IndexedSlices`` (rows repeated as looked up); densified it
    equals the tied-free dense gradient, and legacy SGD with momentum applies it sparsely (rows
    never looked up keep their value)."""
    tok = _tokens(1921, lengths=(5, 4, 3))
    inp, tar = tok[:, :-1], tok[:, 1:]
    wte = tf.Variable(init_array((VOCAB, D), 1922))
    wpe = tf.Variable(init_array((T, D), 1923))
    wout = tf.Variable(init_array((D, VOCAB), 1924))
    opt = tf.keras.optimizers.legacy.SGD(0.5, momentum=0.9)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h = tf.tanh(tf.gather(wte, inp) + wpe[:tf.shape(inp)[1]])
            causal = tf.linalg.band_part(tf.ones([T, T]), -1, 0)
            ctx = tf.matmul(causal / tf.reduce_sum(causal, -1, keepdims=True), h)
            logits = tf.einsum("btd,dv->btv", ctx, wout)
            mask = tf.cast(tar > 0, tf.float32)
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(tar, logits)
            loss = tf.reduce_sum(ce * mask) / tf.reduce_sum(mask)
        g = tape.gradient(loss, [wte, wpe, wout])
        sparse = type(g[0]).__name__ == "IndexedSlices"
        out.append((loss, g, sparse, g[0].indices if sparse else None, tf.convert_to_tensor(g[0])))
        opt.apply_gradients(zip(g, [wte, wpe, wout]))
    unseen = sorted(set(range(VOCAB)) - set(inp.ravel().tolist()))
    return out, wte, wpe, wout, tf.gather(wte, unseen)


@parity(modes=True, **TOL)
def test_minus_inf_attention_masks_give_nan_rows_and_nan_gradients_where_fully_masked(tf):
    """Scores masked with ``-inf`` instead of ``-1e9``: rows with at least one visible key softmax
    normally (their gradient is finite, 0 at masked keys); a query whose keys are all padding gives
    a NaN row and a NaN loss, yet the query's gradient there is 0 (the ``tf.where`` that placed
    the ``-inf`` routes no gradient to the masked scores).  A ``-1e9`` fill gives the uniform row
    instead, and the common fix (``tf.where`` of the mask over the probabilities) zeros it.  Added
    as ``scores += (1 - mask) * -inf`` the mask itself is NaN at the visible keys (``0 * -inf``):
    every row and the whole gradient are NaN.  Eagerly and compiled."""
    rs = np.random.RandomState(1931)
    q = tf.Variable(rs.randn(2, 3, 4).astype(np.float32))
    k = tf.constant(rs.randn(2, 3, 4).astype(np.float32))
    key_mask = tf.constant([[True, True, False], [False, False, False]])

    def attend(q, fill, guard):
        s = tf.matmul(q, k, transpose_b=True)
        m = tf.broadcast_to(key_mask[:, None, :], tf.shape(s))
        s = tf.where(m, s, fill)
        p = tf.nn.softmax(s, axis=-1)
        if guard:
            p = tf.where(m, p, tf.zeros_like(p))
        return p

    def run(fill, guard):
        with tf.GradientTape() as tape:
            p = attend(q, fill, guard)
            loss = tf.reduce_sum(p * tf.range(3, dtype=tf.float32))
        return p, loss, tape.gradient(loss, q)

    def additive(neg):   # the tutorials' ``scores += (1 - mask) * neg``: 0 * -inf is NaN everywhere
        with tf.GradientTape() as tape:
            s = tf.matmul(q, k, transpose_b=True)
            s += (1.0 - tf.cast(key_mask, tf.float32))[:, None, :] * neg
            p = tf.nn.softmax(s, axis=-1)
            loss = tf.reduce_sum(p[0])
        return p, loss, tape.gradient(loss, q)

    out = [run(-np.inf, False), run(-1e9, False), run(-1e9, True), additive(-np.inf), additive(-1e9)]
    compiled = tf.function(run)
    out += [compiled(tf.constant(-np.inf), False), compiled(tf.constant(-1e9), True),
            tf.function(additive)(tf.constant(-np.inf))]
    return out


# ---------------------------------------------------------------------------
# Decoding inside tf.function
# ---------------------------------------------------------------------------

def _step_logits(tf, emb, w, prev, h):
    """A tiny recurrent decoder step: new state and next-token logits from the previous token
    (PAD and BOS never generated: their logits pushed down by ``-1e9``)."""
    h = tf.tanh(tf.gather(emb, prev) + tf.matmul(h, w))
    banned = tf.one_hot([PAD, BOS], VOCAB, on_value=-1e9, off_value=0.0)
    return h, tf.matmul(h, emb, transpose_b=True) + tf.reduce_sum(banned, axis=0)


def _decoder_weights(seed, bias_eos=1.5):
    emb = init_array((VOCAB, D), seed, scale=0.8)
    emb[EOS] += bias_eos * np.sign(emb[EOS])
    return emb, init_array((D, D), seed + 1)


@parity(modes=True, **TOL)
def test_greedy_decoding_by_autograph_for_with_tensor_array_and_early_stop(tf):
    """Greedy decoding as the tutorials write it: an AutoGraph ``for i in tf.range(max_len)`` that
    writes ids into a ``TensorArray(size=max_len)`` (``max_len`` a Python int: one trace each), marks rows ``finished`` at EOS (later ids
    forced to PAD) and ``break``s once ``tf.reduce_all(finished)``; the loop's count and the
    stacked (transposed) ids come back, with each row's length by ``reduce_sum`` of the not-PAD
    mask.  Unwritten TensorArray slots stack as zeros."""
    emb_np, w_np = _decoder_weights(1945, bias_eos=1.0)
    emb, w = tf.constant(emb_np), tf.constant(w_np)
    h0 = tf.constant(init_array((4, D), 1947))  # all rows end by step 6 of 8

    @tf.function
    def greedy(h, max_len):
        ids = tf.TensorArray(tf.int32, size=max_len)
        prev = tf.fill([4], BOS)
        finished = tf.zeros([4], tf.bool)
        steps = tf.constant(0)
        for i in tf.range(max_len):
            h, logits = _step_logits(tf, emb, w, prev, h)
            nxt = tf.argmax(logits, axis=-1, output_type=tf.int32)
            nxt = tf.where(finished, PAD, nxt)
            ids = ids.write(i, nxt)
            finished = finished | tf.equal(nxt, EOS)
            prev = nxt
            steps += 1
            if tf.reduce_all(finished):
                break
        out = tf.transpose(ids.stack())
        return out, steps, tf.reduce_sum(tf.cast(out != PAD, tf.int32), axis=1)

    return greedy(h0, 8), greedy(h0 * 0.1, 3)


@parity(modes=True, **TOL)
def test_greedy_decoding_by_while_loop_with_finished_flags_and_log_probs(tf):
    """The same decoder by an explicit ``tf.while_loop`` whose ``cond`` is
    ``not reduce_all(finished)`` with ``maximum_iterations=7`` (tapejax differentiates a bounded
    loop only, README); the summed log-probabilities of the chosen
    tokens (``log_softmax`` + ``gather(batch_dims=1)``) are kept only for unfinished rows, and the
    gradient of the total score wrt the embedding table comes back through the loop."""
    emb_np, w_np = _decoder_weights(1951, bias_eos=1.0)
    emb = tf.Variable(emb_np)
    w = tf.constant(w_np)
    h0 = tf.constant(init_array((3, D), 1953))

    @tf.function
    def decode(h0):
        with tf.GradientTape() as tape:
            def cond(i, h, prev, fin, score, ids):
                return tf.logical_not(tf.reduce_all(fin))

            def body(i, h, prev, fin, score, ids):
                h, logits = _step_logits(tf, emb, w, prev, h)
                logp = tf.nn.log_softmax(logits)
                nxt = tf.argmax(logits, axis=-1, output_type=tf.int32)
                picked = tf.gather(logp, nxt[:, None], batch_dims=1)[:, 0]
                score = score + tf.where(fin, 0.0, picked)
                nxt = tf.where(fin, PAD, nxt)
                ids = ids + tf.one_hot(i, 7, dtype=tf.int32)[None, :] * nxt[:, None]
                return i + 1, h, nxt, fin | tf.equal(nxt, EOS), score, ids

            init = (tf.constant(0), h0, tf.fill([3], BOS), tf.zeros([3], tf.bool), tf.zeros([3]),
                    tf.zeros([3, 7], tf.int32))
            i, _, _, fin, score, ids = tf.while_loop(cond, body, init, maximum_iterations=7)
            total = tf.reduce_sum(score)
        g = tape.gradient(total, emb)
        return i, fin, score, ids, tf.convert_to_tensor(g)

    return decode(h0)


@parity(modes=True, **TOL)
def test_kv_cache_decoding_matches_full_recomputation(tf):
    """Incremental self-attention decoding with a KV cache preallocated to ``max_len`` and written
    one position per step by ``tensor_scatter_nd_update`` (positions not yet written masked by
    ``tf.sequence_mask(i + 1)``), under ``tf.function``, against recomputing full causal attention
    over the prefix each step (eager, cache grown by ``tf.concat``): the same outputs and ids."""
    rs = np.random.RandomState(1961)
    emb = tf.constant(rs.randn(VOCAB, D).astype(np.float32))
    wq, wk, wv = (tf.constant(rs.randn(D, D).astype(np.float32) * 0.5) for _ in range(3))
    max_len = 5

    def attend(q, keys, values, mask):
        s = tf.matmul(q[:, None, :], keys, transpose_b=True)[:, 0] / np.sqrt(D)
        s = tf.where(mask, s, -1e9)
        return tf.reduce_sum(tf.nn.softmax(s)[:, :, None] * values, axis=1)

    @tf.function
    def cached(first):
        kc = tf.zeros([2, max_len, D])
        vc = tf.zeros([2, max_len, D])
        tok = first
        ids = tf.TensorArray(tf.int32, size=max_len)
        outs = tf.TensorArray(tf.float32, size=max_len)
        for i in tf.range(max_len):
            x = tf.gather(emb, tok)
            idx = tf.stack([tf.range(2), tf.fill([2], i)], axis=1)
            kc = tf.tensor_scatter_nd_update(kc, idx, tf.matmul(x, wk))
            vc = tf.tensor_scatter_nd_update(vc, idx, tf.matmul(x, wv))
            mask = tf.broadcast_to(tf.sequence_mask(i + 1, max_len)[None], [2, max_len])
            o = attend(tf.matmul(x, wq), kc, vc, mask)
            tok = tf.argmax(tf.matmul(o, emb, transpose_b=True), -1, output_type=tf.int32)
            ids = ids.write(i, tok)
            outs = outs.write(i, o)
        return tf.transpose(ids.stack()), outs.stack()

    def full(first):
        toks, outs, ids = [first], [], []
        for _ in range(max_len):
            x = tf.gather(emb, tf.stack(toks, axis=1))
            keys, values = tf.matmul(x, wk), tf.matmul(x, wv)
            o = attend(tf.matmul(x[:, -1], wq), keys, values, tf.ones(tf.shape(keys)[:2], tf.bool))
            tok = tf.argmax(tf.matmul(o, emb, transpose_b=True), -1, output_type=tf.int32)
            toks.append(tok)
            ids.append(tok)
            outs.append(o)
        return tf.stack(ids, axis=1), tf.stack(outs)

    first = tf.constant([3, 7])
    return cached(first), full(first)


@parity(modes=True, **TOL)
def test_beam_search_by_top_k_over_flattened_scores_with_ties(tf):
    """Beam search in a compiled Python loop: per step the beams' log-probabilities plus each
    beam's score, flattened to ``[batch, beam * vocab]``, ``tf.math.top_k(k=beam)`` (the first
    step's beams are copies of one: started at equal scores every candidate is tied across beams
    and TF takes the lowest flat index, so all beams stay one; started at ``[0, -inf, -inf]`` they
    split), beam ids ``// vocab`` and tokens ``% vocab``, states and histories reordered by
    ``tf.gather(..., batch_dims=1)``; an exact score tie inside a row is built in as well."""
    vocab, beam, steps = 6, 3, 4
    rs = np.random.RandomState(1971)
    emb = tf.constant(rs.randn(vocab, D).astype(np.float32))
    w = tf.constant(rs.randn(D, D).astype(np.float32) * 0.5)
    out_w = rs.randn(D, vocab).astype(np.float32)
    out_w[:, 4] = out_w[:, 5]  # tokens 4 and 5 always score the same
    out_w = tf.constant(out_w)

    @tf.function
    def search(h0, first):
        b = tf.shape(h0)[0]
        h = tf.repeat(h0[:, None, :], beam, axis=1)
        scores = tf.tile(first[None], [b, 1])
        hist = tf.zeros([b, beam, 0], tf.int32)
        prev = tf.fill([b, beam], BOS)
        for _ in range(steps):
            h = tf.tanh(tf.gather(emb, prev) + tf.einsum("bkd,de->bke", h, w))
            logp = tf.nn.log_softmax(tf.einsum("bkd,dv->bkv", h, out_w))
            cand = tf.reshape(scores[:, :, None] + logp, [b, beam * vocab])
            scores, flat = tf.math.top_k(cand, k=beam)
            src, tok = flat // vocab, flat % vocab
            h = tf.gather(h, src, batch_dims=1)
            hist = tf.concat([tf.gather(hist, src, batch_dims=1), tok[:, :, None]], axis=2)
            prev = tok
        return scores, hist

    h0 = tf.constant(rs.randn(2, D).astype(np.float32))
    naive = search(h0, tf.zeros([beam]))
    proper = search(h0, tf.constant([0.0] + [-np.inf] * (beam - 1)))
    vals, idx = tf.math.top_k(tf.constant([[1.0, 3.0, 3.0, 2.0, 3.0]]), k=4)
    return naive, proper, vals, idx


@parity(modes=True, **TOL)
def test_temperature_sampling_by_the_gumbel_max_trick_with_fed_noise(tf):
    """Sampling at temperatures 0.5 and 2 from a decoder by ``argmax(logits / T + g)`` with the
    Gumbel noise ``g = -log(-log(u))`` drawn by NumPy and fed in per step (so both systems draw
    the same tokens), top-k filtering by ``tf.math.top_k(...).values[:, -1]`` and a ``-inf``
    ``tf.where`` below it; ``tf.random.stateless_categorical`` is checked only for what holds in
    both systems: its shape (its int64 is int32 in tapejax without x64, README), ids in range, a ``-inf`` logit never drawn, the same seed
    giving the same draw."""
    emb_np, w_np = _decoder_weights(1981)
    emb, w = tf.constant(emb_np), tf.constant(w_np)
    u = np.random.RandomState(1982).uniform(1e-6, 1.0, (2, 5, 3, VOCAB)).astype(np.float32)
    gumbel = tf.constant(-np.log(-np.log(u)))

    @tf.function
    def sample(h, temps, noise, k):
        prev = tf.fill([3], BOS)
        ids = []
        for t in range(5):
            h, logits = _step_logits(tf, emb, w, prev, h)
            kth = tf.math.top_k(logits, k=k).values[:, -1:]
            logits = tf.where(logits < kth, -np.inf, logits)
            prev = tf.argmax(logits / temps + noise[t], axis=-1, output_type=tf.int32)
            ids.append(prev)
        return tf.stack(ids, axis=1)

    h0 = tf.constant(init_array((3, D), 1983))
    cold = sample(h0, tf.constant(0.5), gumbel[0], 3)
    hot = sample(h0, tf.constant(2.0), gumbel[1], VOCAB)
    logits = tf.constant([[0.0, -np.inf, 1.0, 2.0]] * 3)
    s1 = tf.random.stateless_categorical(logits, 50, seed=[7, 11])
    s2 = tf.random.stateless_categorical(logits, 50, seed=[7, 11])
    return (cold, hot, tuple(s1.shape), bool(tf.reduce_all(s1 == s2)),
            bool(tf.reduce_any(s1 == 1)), bool(tf.reduce_all((s1 >= 0) & (s1 < 4))))


# ---------------------------------------------------------------------------
# Training loops around decoding
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_scheduled_sampling_mixes_gold_and_predicted_tokens_in_a_compiled_step(tf):
    """Scheduled sampling for a GRU-style decoder written by hand: at each step the next input is
    the gold token where a fed coin (NumPy) says so, else the model's own ``argmax`` (no gradient
    flows through the choice); the teacher-forcing probability decays per epoch.  The masked loss,
    gradients and weights after three epochs of a ``tf.function`` step are compared."""
    tok = _tokens(1991, lengths=(7, 6, 4))
    wz, wr, wh = (tf.Variable(init_array((2 * D, D), 1992 + i)) for i in range(3))
    emb = tf.Variable(init_array((VOCAB, D), 1995))
    out_w = tf.Variable(init_array((D, VOCAB), 1996))
    params = [wz, wr, wh, emb, out_w]
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    coins = np.random.RandomState(1997).uniform(size=(3, T, 3)).astype(np.float32)

    def gru(x, h):
        xh = tf.concat([x, h], axis=-1)
        z = tf.sigmoid(tf.matmul(xh, wz))
        r = tf.sigmoid(tf.matmul(xh, wr))
        c = tf.tanh(tf.matmul(tf.concat([x, r * h], axis=-1), wh))
        return (1 - z) * h + z * c

    @tf.function
    def step(tokens, coin, p_teacher):
        with tf.GradientTape() as tape:
            h = tf.zeros([3, D])
            inp = tokens[:, 0]
            losses, used = [], []
            for t in range(T):
                h = gru(tf.gather(emb, inp), h)
                logits = tf.matmul(h, out_w)
                gold = tokens[:, t + 1]
                losses.append(tf.nn.sparse_softmax_cross_entropy_with_logits(gold, logits))
                pred = tf.argmax(logits, -1, output_type=tf.int32)
                inp = tf.where(coin[t] < p_teacher, gold, pred)
                used.append(inp)
            mask = tf.cast(tokens[:, 1:] != PAD, tf.float32)
            loss = tf.reduce_sum(tf.stack(losses, 1) * mask) / tf.reduce_sum(mask)
        g = tape.gradient(loss, params)
        opt.apply_gradients(zip(g, params))
        return loss, tf.stack(used, 1), [tf.convert_to_tensor(x) for x in g]

    out = [step(tok, coins[e], tf.constant(1.0 - 0.4 * e)) for e in range(3)]
    return out, params


@xfail_on_tapejax("a loop variable that grows (a KV cache concatenated each step, shape_invariants with a None "
                  "length) cannot compile in XLA's static shapes: tapejax raises ValueError (documented in "
                  "tapejax/compile/control_flow.py); the preallocated cache above is the compilable form")
@parity(**TOL)
def test_kv_cache_grown_by_concat_under_set_loop_options_shape_invariants(tf):
    """The KV cache as most blog posts grow it: ``tf.concat`` of each step's key and value inside an
    AutoGraph ``for`` over ``tf.range``, declared growing by
    ``tf.autograph.experimental.set_loop_options(shape_invariants=[(k, TensorShape([2, None, D])),
    ...])``; the ids and the cache's final length come back."""
    rs = np.random.RandomState(1961)
    emb = tf.constant(rs.randn(VOCAB, D).astype(np.float32))
    wq, wk, wv = (tf.constant(rs.randn(D, D).astype(np.float32) * 0.5) for _ in range(3))

    @tf.function
    def grow(first):
        keys = tf.zeros([2, 0, D])
        values = tf.zeros([2, 0, D])
        tok = first
        ids = tf.TensorArray(tf.int32, size=5)
        for i in tf.range(5):
            tf.autograph.experimental.set_loop_options(
                shape_invariants=[(keys, tf.TensorShape([2, None, D])), (values, tf.TensorShape([2, None, D]))])
            x = tf.gather(emb, tok)
            keys = tf.concat([keys, tf.matmul(x, wk)[:, None]], axis=1)
            values = tf.concat([values, tf.matmul(x, wv)[:, None]], axis=1)
            s = tf.matmul(tf.matmul(x, wq)[:, None, :], keys, transpose_b=True)[:, 0] / np.sqrt(D)
            o = tf.reduce_sum(tf.nn.softmax(s)[:, :, None] * values, axis=1)
            tok = tf.argmax(tf.matmul(o, emb, transpose_b=True), -1, output_type=tf.int32)
            ids = ids.write(i, tok)
        return tf.transpose(ids.stack()), tf.shape(keys)[1]

    return grow(tf.constant([3, 7]))


@parity(modes=True, **TOL)
def test_nucleus_sampling_with_a_repetition_penalty_and_fed_gumbel_noise(tf):
    """Top-p (nucleus) sampling as the generation scripts write it: logits divided (positive) or
    multiplied (negative) by a repetition penalty at the tokens already generated (a ``one_hot``
    sum of the history, ``tf.where``), sorted by ``tf.sort(direction='DESCENDING')`` /
    ``tf.argsort``, ``tf.cumsum(softmax, exclusive=True) < p`` keeps the nucleus (the top token
    always), the cut logits set to ``-inf`` and scattered back to vocabulary order by
    ``tf.gather`` of the inverse permutation (``tf.argsort`` of the sort order), the token drawn
    by ``argmax(logits + g)`` with NumPy's Gumbel noise; compiled, six steps."""
    emb_np, w_np = _decoder_weights(2201, bias_eos=0.0)
    emb, w = tf.constant(emb_np), tf.constant(w_np)
    u = np.random.RandomState(2202).uniform(1e-6, 1.0, (6, 3, VOCAB)).astype(np.float32)
    gumbel = tf.constant(-np.log(-np.log(u)))

    @tf.function
    def generate(h, p, penalty):
        prev = tf.fill([3], BOS)
        history = tf.zeros([3, VOCAB])
        ids, kept = [], []
        for t in range(6):
            h, logits = _step_logits(tf, emb, w, prev, h)
            seen = history > 0
            logits = tf.where(seen, tf.where(logits > 0, logits / penalty, logits * penalty), logits)
            order = tf.argsort(logits, direction="DESCENDING", stable=True)
            sorted_logits = tf.sort(logits, direction="DESCENDING")
            before = tf.cumsum(tf.nn.softmax(sorted_logits), axis=-1, exclusive=True)
            sorted_logits = tf.where(before < p, sorted_logits, -np.inf)
            logits = tf.gather(sorted_logits, tf.argsort(order, stable=True), batch_dims=1)
            prev = tf.argmax(logits + gumbel[t], axis=-1, output_type=tf.int32)
            history += tf.one_hot(prev, VOCAB)
            ids.append(prev)
            kept.append(tf.reduce_sum(tf.cast(tf.math.is_finite(logits), tf.int32), axis=-1))
        return tf.stack(ids, 1), tf.stack(kept, 1), history

    h0 = tf.constant(init_array((3, D), 2203))
    return generate(h0, tf.constant(0.8), tf.constant(1.3)), generate(h0, tf.constant(0.3), tf.constant(1.0))


@parity(modes=True, **LOOSE)
def test_sliding_window_attention_with_alibi_biases_trained_in_a_compiled_step(tf):
    """Local causal attention: a window of the 2 previous tokens by
    ``tf.linalg.band_part(ones, 2, 0)``, ALiBi's per-head linear biases ``-slope * (i - j)`` from
    ``tf.range`` differences (no position embedding), two heads by ``tf.reshape`` /
    ``tf.transpose``, padded keys masked as well (a padded query still sees itself and the real
    keys in its window); next-token loss under the padding mask, SGD with momentum, three
    compiled steps and the attention map of the last."""
    tok = _tokens(2211, lengths=(7, 5, 3))
    inp, tar = tok[:, :-1], tok[:, 1:]
    emb = tf.Variable(init_array((VOCAB, D), 2212))
    wqkv = tf.Variable(init_array((D, 3 * D), 2213))
    wo = tf.Variable(init_array((D, VOCAB), 2214))
    params = [emb, wqkv, wo]
    opt = tf.keras.optimizers.legacy.SGD(0.3, momentum=0.8)
    slopes = tf.constant([0.5, 0.25])[:, None, None]

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            b, t = tf.shape(x)[0], tf.shape(x)[1]
            qkv = tf.matmul(tf.gather(emb, x), wqkv)
            q, k, v = tf.split(qkv, 3, axis=-1)

            def heads(z):
                return tf.transpose(tf.reshape(z, [b, t, 2, D // 2]), [0, 2, 1, 3])

            q, k, v = heads(q), heads(k), heads(v)
            pos = tf.range(t)
            dist = tf.cast(pos[:, None] - pos[None, :], tf.float32)
            window = tf.linalg.band_part(tf.ones([t, t]), 2, 0) > 0
            keys_real = tf.not_equal(x, PAD)[:, None, None, :]
            visible = window[None, None] & (keys_real | tf.eye(t, dtype=tf.bool)[None, None])
            scores = tf.matmul(q, k, transpose_b=True) / np.sqrt(D // 2) - slopes * dist
            att = tf.nn.softmax(tf.where(visible, scores, -1e9), axis=-1)
            h = tf.reshape(tf.transpose(tf.matmul(att, v), [0, 2, 1, 3]), [b, t, D])
            logits = tf.matmul(h, wo)
            mask = tf.cast(y != PAD, tf.float32)
            loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits) * mask) / \
                tf.reduce_sum(mask)
        g = tape.gradient(loss, params)
        opt.apply_gradients(zip(g, params))
        return loss, att, [tf.convert_to_tensor(x) for x in g]

    out = [step(inp, tar) for _ in range(3)]
    return out, params
