"""Round nineteen (b) of realistic user programs, second half: variable-length text data and the
Keras layers text models are built of, run under real TensorFlow 2.21 and under tapejax (the
programs of tf ops and ``tf.data`` also with deferred execution and predicted updates off,
``modes=True``; the Keras ones in the default mode only, to keep the file's time).

Variable-length data: ``padded_batch`` and ``bucket_by_sequence_length`` feeding a step compiled
with ``input_signature=[TensorSpec([None, None], tf.int32)]`` (one trace for every batch shape, as
TF), a masked perplexity over a dataset by a weighted ``Mean`` metric, ``tf.RaggedTensor`` tokens
padded by ``.to_tensor(default_value=...)`` beside a ragged ``gather`` and ``reduce_mean``,
``tf.sequence_mask``, ``tf.reverse_sequence`` for a backward RNN by hand and masked mean pooling,
and a sequence tagger whose per-sentence losses come from ``tf.math.segment_sum`` over the real
tokens.  Keras layers (tf_keras on TF's side, Keras 3 on JAX on tapejax's): ``Embedding
(mask_zero=True)`` into ``LSTM`` / ``GRU`` / ``Bidirectional`` (outputs at real steps, final
states, what ``compute_mask`` returns), ``MultiHeadAttention`` with an ``attention_mask`` and with
``use_causal_mask=True``, ``Masking`` into ``TimeDistributed(Dense)`` and ``LayerNormalization``,
a tied Keras embedding read as ``embeddings`` by ``matmul``, greedy decoding of a Keras decoder
over a fixed-size, padded prefix inside ``tf.function``, the Keras losses with ``ignore_class``
and ``label_smoothing`` over padding, and a compiled evaluation by ``Dataset.reduce``.  Strict
xfails: Keras 3's ``Mean`` over rank-2 sample weights, and ``Dataset.reduce`` inside a function
over batches of different lengths (static shapes).  The raw-op language models and decoding
loops are in ``test_user_programs19b.py``.  Every number is drawn with NumPy.
"""
import numpy as np

from .harness import init_array, parity, xfail_on_tapejax

TOL = dict(rtol=2e-5, atol=2e-6)
LOOSE = dict(rtol=1e-4, atol=1e-5)
KTOL = dict(rtol=2e-4, atol=2e-5)

VOCAB, D = 12, 8


def _set(layer, seed):
    layer.set_weights([init_array(tuple(v.shape), seed + i) for i, v in enumerate(layer.weights)])


def _sentences(seed, lengths=(3, 6, 2, 5, 4, 1)):
    rs = np.random.RandomState(seed)
    return [rs.randint(1, VOCAB, n).astype(np.int32) for n in lengths]


# ---------------------------------------------------------------------------
# Variable-length data
# ---------------------------------------------------------------------------

def _bucketed_lm(tf):
    """Eight sentences bucketed by length (boundaries 3, 5), an embedding, an output layer, SGD."""
    sents = _sentences(2011, lengths=(3, 6, 2, 5, 4, 2, 6, 3))
    ds = tf.data.Dataset.from_generator(lambda: iter(sents), output_signature=tf.TensorSpec([None], tf.int32))
    ds = ds.bucket_by_sequence_length(lambda s: tf.shape(s)[0], bucket_boundaries=[3, 5],
                                      bucket_batch_sizes=[2, 2, 2])
    return (ds, tf.Variable(init_array((VOCAB, D), 2012)), tf.Variable(init_array((D, VOCAB), 2013)),
            tf.keras.optimizers.legacy.SGD(0.5))


@parity(modes=True, **LOOSE)
def test_padded_batch_feeds_a_step_compiled_once_by_its_input_signature(tf):
    """Sentences of lengths 1..6 from ``from_generator`` are ``padded_batch``-ed in twos (each
    batch padded to its own longest); a bag-of-embeddings classifier with masked mean pooling is
    trained by a step with ``input_signature=[TensorSpec([None, None], tf.int32), ...]``: every
    batch shape reuses one trace (a Python counter counts traces, as TF).  The embedding
    gradient is ``IndexedSlices``; the batch shapes and losses come back."""
    sents = _sentences(2001)
    labels = np.array([0, 1, 0, 1, 1, 0], np.int32)

    def gen():
        for s, y in zip(sents, labels):
            yield s, y

    ds = tf.data.Dataset.from_generator(
        gen, output_signature=(tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.int32)))
    ds = ds.padded_batch(2, padded_shapes=([None], []), padding_values=(0, 0))
    emb = tf.Variable(init_array((VOCAB, D), 2002))
    w = tf.Variable(init_array((D, 2), 2003))
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    traces = []

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32)])
    def step(x, y):
        traces.append(1)
        with tf.GradientTape() as tape:
            mask = tf.cast(tf.not_equal(x, 0), tf.float32)
            h = tf.gather(emb, x) * mask[:, :, None]
            pooled = tf.reduce_sum(h, 1) / tf.maximum(tf.reduce_sum(mask, 1, keepdims=True), 1.0)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, tf.matmul(pooled, w)))
        g = tape.gradient(loss, [emb, w])
        opt.apply_gradients(zip(g, [emb, w]))
        return loss, g

    out = []
    for epoch in range(2):
        for x, y in ds:
            loss, g = step(x, y)
            out.append((tuple(x.shape), loss, type(g[0]).__name__ == "IndexedSlices", tf.convert_to_tensor(g[0]),
                        g[1]))
    return out, len(traces), emb, w


@parity(modes=True, **LOOSE)
def test_bucket_by_sequence_length_batches_and_a_masked_perplexity_metric(tf):
    """``bucket_by_sequence_length`` (boundaries 3 and 5, batch sizes 2, 2, 2, padded to each
    bucket's longest) groups the sentences; a bigram language model (next-token logits from an
    embedding and an output matrix) is trained by a signature-compiled step, then evaluated by a
    ``tf.keras.metrics.Mean`` fed the flattened per-token losses with the padding mask as
    ``sample_weight``: its result's ``exp`` is the perplexity."""
    ds, emb, out_w, opt = _bucketed_lm(tf)
    traces = []

    def token_losses(x):
        inp, tar = x[:, :-1], x[:, 1:]
        logits = tf.matmul(tf.gather(emb, inp), out_w)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(tar, logits), tf.cast(tar > 0, tf.float32)

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def step(x):
        traces.append(1)
        with tf.GradientTape() as tape:
            ce, mask = token_losses(x)
            loss = tf.reduce_sum(ce * mask) / tf.reduce_sum(mask)
        opt.apply_gradients(zip(tape.gradient(loss, [emb, out_w]), [emb, out_w]))
        return loss

    out = [(x.numpy(), step(x)) for x in ds]
    metric = tf.keras.metrics.Mean()
    for x in ds:
        ce, mask = token_losses(x)
        metric.update_state(tf.reshape(ce, [-1]), sample_weight=tf.reshape(mask, [-1]))
    return out, metric.result(), tf.exp(metric.result()), emb, out_w


@xfail_on_tapejax("tapejax's tf.keras is Keras 3 (README): its Mean metric reduces a [batch, time] sample_weight "
                  "per sample first (the mean of values * weights over time, and the mean weight), tf_keras "
                  "sums values * weights and weights over all tokens; flattened first (above) they agree")
@parity(**TOL)
def test_a_mean_metric_given_per_token_weights_of_rank_two(tf):
    """``tf.keras.metrics.Mean().update_state(token_losses, sample_weight=padding_mask)`` with
    ``[batch, time]`` arguments over batches of different lengths: tf_keras gives the masked mean
    over tokens, ``sum(ce * mask) / sum(mask)``."""
    rs = np.random.RandomState(2015)
    metric = tf.keras.metrics.Mean()
    for shape in ((2, 5), (2, 3), (1, 2)):
        metric.update_state(rs.rand(*shape).astype(np.float32),
                            sample_weight=(rs.rand(*shape) > 0.3).astype(np.float32))
    return metric.result(), [v.numpy() for v in metric.variables]


@parity(modes=True, **TOL)
def test_language_model_step_with_shifted_tokens_traces_once_for_all_bucket_shapes(tf):
    """The bucketed step above counted: two traces (the optimizer's first step creates its
    iteration Variable, so TF traces again) for the bucket shapes (2, 6), (2, 4), (2, 2), (1, 3),
    (1, 6): tapejax traces with symbolic sizes, and the embedding's gradient rows are a reshape
    to ``b*t - b``, which JAX proves non-negative only when told ``b*t >= b``."""
    ds, emb, out_w, opt = _bucketed_lm(tf)
    traces = []

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def step(x):
        traces.append(1)
        with tf.GradientTape() as tape:
            logits = tf.matmul(tf.gather(emb, x[:, :-1]), out_w)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(x[:, 1:], logits))
        opt.apply_gradients(zip(tape.gradient(loss, [emb, out_w]), [emb, out_w]))
        return loss

    return [step(x) for x in ds], len(traces)


@parity(modes=True, **TOL)
def test_ragged_tokens_to_tensor_sequence_mask_reverse_sequence_and_masked_mean(tf):
    """Token ids as a ``tf.ragged.constant``: ``.to_tensor(default_value=PAD)``, the mask from
    ``tf.sequence_mask(row_lengths)``, a backward pass of an RNN by hand over
    ``tf.reverse_sequence(x, lengths, seq_axis=1, batch_axis=0)`` (padding stays at the end) and
    its outputs reversed back (``row_lengths`` is int64 in TF, int32 in tapejax without x64,
    README: compared cast), and two masked means (dense with the mask; ragged by ``gather`` of
    the ragged ids and ``reduce_mean(axis=1)``) that must agree; gradients wrt the table and the
    recurrence."""
    ids = tf.ragged.constant([[3, 5, 7], [4], [6, 8, 9, 10, 11]], dtype=tf.int32)
    emb = tf.Variable(init_array((VOCAB, D), 2021))
    u = tf.Variable(init_array((D, D), 2022))
    with tf.GradientTape(persistent=True) as tape:
        lengths = ids.row_lengths()
        dense = ids.to_tensor(default_value=-1)
        padded = ids.to_tensor(default_value=0)
        mask = tf.sequence_mask(lengths, maxlen=tf.shape(padded)[1])
        x = tf.gather(emb, padded)
        rev = tf.reverse_sequence(x, lengths, seq_axis=1, batch_axis=0)
        h = tf.zeros([3, D])
        outs = []
        for t in range(5):
            h_new = tf.tanh(rev[:, t] + tf.matmul(h, u))
            h = tf.where(mask[:, t:t + 1], h_new, h)
            outs.append(h)
        back = tf.reverse_sequence(tf.stack(outs, 1), lengths, seq_axis=1, batch_axis=0)
        fmask = tf.cast(mask, tf.float32)[:, :, None]
        dense_mean = tf.reduce_sum(x * fmask, 1) / tf.reduce_sum(fmask, 1)
        ragged_mean = tf.reduce_mean(tf.gather(emb, ids), axis=1)
        loss = tf.reduce_sum(back * fmask) + tf.reduce_sum(dense_mean ** 2)
        loss2 = tf.reduce_sum(ragged_mean ** 2)
    g = tape.gradient(loss, [emb, u])
    g2 = tape.gradient(loss2, emb)
    return (tf.cast(lengths, tf.int32), dense, mask, rev, back, dense_mean,
            ragged_mean, loss, [tf.convert_to_tensor(x) for x in g], tf.convert_to_tensor(g2))


@parity(modes=True, rtol=1e-4, atol=5e-5)
def test_sequence_tagger_with_a_token_mask_and_per_sentence_losses_by_segment_sum(tf):
    """A CTC-free tagger: a 1-D convolution by hand (``tf.pad`` and three shifted matmuls) over
    padded tokens, per-token tag logits, the real tokens picked by ``tf.boolean_mask``, their
    sentence ids by ``tf.repeat(tf.range(batch), lengths)``, per-sentence losses by
    ``tf.math.segment_sum`` (and token counts by ``unsorted_segment_sum``), the batch loss their
    mean per token, in eager steps (``boolean_mask`` and ``segment_sum`` size their outputs by
    the data: eager only in tapejax, docs/ops.md); the compiled steps in between compute the same
    loss the XLA-friendly way (``unsorted_segment_sum`` of the masked per-token losses over
    ``tf.range(batch)`` broadcast to the tokens) and Adam carries over.  (Adam divides each step
    by its gradients' root mean square, so an element whose gradients are near zero turns last-bit
    differences between XLA's and TF's CPU kernels, which vary with the CPU, into 2e-5 after four
    steps: an absolute tolerance of 5e-5 here.)"""
    rs = np.random.RandomState(2031)
    ids = rs.randint(1, VOCAB, (3, 6)).astype(np.int32)
    lengths = np.array([4, 6, 2], np.int32)
    ids[np.arange(6)[None] >= lengths[:, None]] = 0
    tags = rs.randint(0, 3, (3, 6)).astype(np.int32)
    emb = tf.Variable(init_array((VOCAB, D), 2032))
    ks = [tf.Variable(init_array((D, D), 2033 + i)) for i in range(3)]
    head = tf.Variable(init_array((D, 3), 2036))
    params = [emb] + ks + [head]
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def step(ids, tags, lengths, eager=True):
        with tf.GradientTape() as tape:
            mask = tf.sequence_mask(lengths, tf.shape(ids)[1])
            x = tf.gather(emb, ids) * tf.cast(mask, tf.float32)[:, :, None]
            xp = tf.pad(x, [[0, 0], [1, 1], [0, 0]])
            h = tf.nn.relu(sum(tf.einsum("btd,de->bte", xp[:, i:i + tf.shape(ids)[1]], k) for i, k in enumerate(ks)))
            logits = tf.einsum("btd,dk->btk", h, head)
            if eager:
                real_logits = tf.boolean_mask(logits, mask)
                real_tags = tf.boolean_mask(tags, mask)
                sent = tf.repeat(tf.range(tf.shape(ids)[0]), lengths)
                ce = tf.nn.sparse_softmax_cross_entropy_with_logits(real_tags, real_logits)
                per_sentence = tf.math.segment_sum(ce, sent)
                counts = tf.math.unsorted_segment_sum(tf.ones_like(ce), sent, 3)
                hits = tf.cast(tf.argmax(real_logits, -1, output_type=tf.int32) == real_tags, tf.float32)
                acc = tf.reduce_mean(hits)
            else:
                fmask = tf.cast(mask, tf.float32)
                ce = tf.nn.sparse_softmax_cross_entropy_with_logits(tags, logits) * fmask
                sent = tf.broadcast_to(tf.range(tf.shape(ids)[0])[:, None], tf.shape(ids))
                per_sentence = tf.math.unsorted_segment_sum(ce, sent, 3)
                counts = tf.math.unsorted_segment_sum(fmask, sent, 3)
                hits = tf.cast(tf.argmax(logits, -1, output_type=tf.int32) == tags, tf.float32) * fmask
                acc = tf.reduce_sum(hits) / tf.reduce_sum(fmask)
            loss = tf.reduce_sum(per_sentence) / tf.reduce_sum(counts)
        g = tape.gradient(loss, params)
        opt.apply_gradients(zip(g, params))
        return loss, per_sentence, counts, acc, [tf.convert_to_tensor(x) for x in g]

    compiled = tf.function(lambda *a: step(*a, eager=False))
    out = [(compiled if i % 2 else step)(ids, tags, lengths) for i in range(4)]
    return out, params


# ---------------------------------------------------------------------------
# Keras layers with masks (tf_keras on TF's side, Keras 3 on tapejax's)
# ---------------------------------------------------------------------------

_IDS = np.array([[4, 7, 2, 0, 0], [3, 9, 11, 5, 1], [6, 0, 0, 0, 0]], np.int32)


def _real(tf, x, ids=_IDS):
    """The entries of ``x`` [batch, time, ...] at real (non-PAD) tokens."""
    return tf.boolean_mask(x, ids > 0)


@parity(**KTOL)
def test_embedding_mask_zero_into_an_lstm_with_sequences_and_states(tf):
    """``Embedding(mask_zero=True)`` into ``LSTM(return_sequences=True, return_state=True)`` in a
    custom loop: ``compute_mask`` of the ids, the outputs (at padded steps the last real step's
    output repeated, in both Kerases), the final ``h`` and ``c``
    (each row's state at its last real token: the row of length 1 too) against the sequence output
    at that token, a masked loss and two Adam steps with their gradients (the table's
    ``IndexedSlices`` densified)."""
    emb = tf.keras.layers.Embedding(VOCAB, 4, mask_zero=True)
    lstm = tf.keras.layers.LSTM(3, return_sequences=True, return_state=True)
    lstm(emb(_IDS))
    _set(emb, 2101)
    _set(lstm, 2111)
    params = emb.trainable_variables + lstm.trainable_variables
    opt = tf.keras.optimizers.Adam(0.05)
    last = np.array([2, 4, 0])
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            seq, h, c = lstm(emb(_IDS))
            target = tf.cast(tf.one_hot(_IDS, 3), tf.float32)
            mask = tf.cast(emb.compute_mask(_IDS), tf.float32)
            loss = tf.reduce_sum(tf.reduce_sum((seq - target) ** 2, -1) * mask) / tf.reduce_sum(mask)
        g = tape.gradient(loss, params)
        opt.apply_gradients(zip(g, params))
        at_last = tf.gather(seq, last[:, None], batch_dims=1)[:, 0]
        out.append((loss, seq, _real(tf, seq), h, c, at_last, [tf.convert_to_tensor(x) for x in g]))
    return emb.compute_mask(_IDS), out


@parity(**KTOL)
def test_masked_gru_and_bidirectional_lstm_final_states(tf):
    """A stacked encoder: ``Embedding(mask_zero=True)`` -> ``GRU(return_sequences=True)`` ->
    ``Bidirectional(LSTM(return_state=True), merge_mode='concat')``; the bidirectional layer's
    output and its four states (forward h, c, backward h, c: the backward direction starts at
    each row's last real token), then ``merge_mode='sum'`` and ``return_sequences=True`` (zeros at
    padded steps) on the same weights, the GRU's outputs at padded steps, and the gradient of
    a loss on the concatenated final states."""
    emb = tf.keras.layers.Embedding(VOCAB, 4, mask_zero=True)
    gru = tf.keras.layers.GRU(3, return_sequences=True)
    bi = tf.keras.layers.Bidirectional(tf.keras.layers.LSTM(2, return_state=True))
    bi_sum = tf.keras.layers.Bidirectional(tf.keras.layers.LSTM(2), merge_mode="sum")
    bi_seq = tf.keras.layers.Bidirectional(tf.keras.layers.LSTM(2, return_sequences=True))
    x = gru(emb(_IDS))
    bi(x)
    bi_sum(x)
    bi_seq(x)
    for i, layer in enumerate((emb, gru, bi)):
        _set(layer, 2121 + 10 * i)
    bi_sum.set_weights(bi.get_weights())
    bi_seq.set_weights(bi.get_weights())
    params = emb.trainable_variables + gru.trainable_variables + bi.trainable_variables
    with tf.GradientTape() as tape:
        seq = gru(emb(_IDS))
        merged, fh, fc, bh, bc = bi(seq)
        loss = tf.reduce_sum(tf.concat([fh, bh], -1) ** 2) + 0.1 * tf.reduce_sum(fc * bc)
    g = tape.gradient(loss, params)
    return (seq, merged, fh, fc, bh, bc, bi_sum(seq), bi_seq(seq), loss,
            [tf.convert_to_tensor(x) for x in g])


@parity(**KTOL)
def test_multi_head_attention_with_a_padding_attention_mask_and_a_causal_mask(tf):
    """``MultiHeadAttention(num_heads=2, key_dim=4)`` in a cross-attention (queries of length 3,
    keys of length 5 with padding) with ``attention_mask`` built by ``tf.sequence_mask`` as
    ``[batch, T, S]`` and ``return_attention_scores=True`` (padded keys get probability 0), then a
    self-attention with ``use_causal_mask=True`` (a lower-triangular pattern), both in one tape:
    the scores, the outputs and the gradients wrt the query input and the layer's kernels."""
    rs = np.random.RandomState(2131)
    q = tf.Variable(rs.randn(3, 3, D).astype(np.float32))
    kv = rs.randn(3, 5, D).astype(np.float32)
    lengths = np.array([3, 5, 1], np.int32)
    mha = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    self_mha = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    mha(q, kv)
    self_mha(q, q)
    _set(mha, 2132)
    _set(self_mha, 2142)
    with tf.GradientTape() as tape:
        key_mask = tf.sequence_mask(lengths, 5)
        att_mask = tf.broadcast_to(key_mask[:, None, :], [3, 3, 5])
        out, scores = mha(q, kv, attention_mask=att_mask, return_attention_scores=True)
        s_out, s_scores = self_mha(q, q, use_causal_mask=True, return_attention_scores=True)
        loss = tf.reduce_sum(out ** 2) + tf.reduce_sum(tf.sin(s_out))
    params = mha.trainable_variables + self_mha.trainable_variables
    g = tape.gradient(loss, [q] + params)
    return out, scores, s_out, s_scores, loss, g


@parity(**KTOL)
def test_masking_into_time_distributed_dense_and_layer_normalization(tf):
    """Zero-padded feature frames through ``Masking(0.0)`` -> ``TimeDistributed(Dense(4))`` ->
    ``LayerNormalization`` -> ``SimpleRNN(return_sequences=True)``: what ``compute_mask`` returns
    at each layer (the mask passes through ``TimeDistributed`` and ``LayerNormalization``), the
    RNN outputs at real frames, and a compiled training step whose loss weights the frames by
    the mask (SGD, three steps)."""
    rs = np.random.RandomState(2151)
    x = rs.randn(3, 5, 3).astype(np.float32)
    x[0, 3:] = 0.0
    x[2, 1:] = 0.0
    frame_mask = np.abs(x).sum(-1) > 0
    y = rs.randn(3, 5, 2).astype(np.float32)
    masking = tf.keras.layers.Masking(0.0)
    td = tf.keras.layers.TimeDistributed(tf.keras.layers.Dense(4))
    ln = tf.keras.layers.LayerNormalization()
    rnn = tf.keras.layers.SimpleRNN(2, return_sequences=True)
    rnn(ln(td(masking(x))))
    for i, layer in enumerate((td, ln, rnn)):
        _set(layer, 2152 + 10 * i)
    params = td.trainable_variables + ln.trainable_variables + rnn.trainable_variables
    opt = tf.keras.optimizers.SGD(0.1)
    m0 = masking.compute_mask(x)
    masks = (m0, td.compute_mask(x, m0), ln.compute_mask(x, m0))

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            seq = rnn(ln(td(masking(x))))
            w = tf.cast(frame_mask, tf.float32)
            loss = tf.reduce_sum(tf.reduce_sum((seq - y) ** 2, -1) * w) / tf.reduce_sum(w)
        g = tape.gradient(loss, params)
        opt.apply_gradients(zip(g, params))
        return loss, g

    out = [step(x, y) for _ in range(3)]
    return masks, out, tf.boolean_mask(rnn(ln(td(masking(x)))), frame_mask)


@parity(**KTOL)
def test_keras_embedding_tied_to_the_output_projection(tf):
    """A Keras ``Embedding`` whose ``embeddings`` Variable is also the output projection
    (``tf.matmul(h, emb.embeddings, transpose_b=True)``): the table's gradient, a gather's
    ``IndexedSlices`` plus a matmul's dense gradient, is summed to a dense Tensor (TF's type);
    untied (the projection a separate Dense), the table's gradient stays ``IndexedSlices``.
    Two Adam steps each."""
    emb = tf.keras.layers.Embedding(VOCAB, D)
    proj = tf.keras.layers.Dense(VOCAB, use_bias=False)
    proj(emb(_IDS))
    _set(emb, 2171)
    _set(proj, 2172)
    opt = tf.keras.optimizers.Adam(0.05)
    opt2 = tf.keras.optimizers.legacy.Adam(0.05)
    tar = np.roll(_IDS, -1, axis=1)
    mask = (tar > 0).astype(np.float32)
    out = []
    for tied in (True, False, True, False):
        with tf.GradientTape() as tape:
            h = tf.tanh(emb(_IDS))
            logits = tf.matmul(h, emb.embeddings, transpose_b=True) if tied else proj(h)
            ce = tf.nn.sparse_softmax_cross_entropy_with_logits(tar, logits)
            loss = tf.reduce_sum(ce * mask) / tf.reduce_sum(mask)
        params = emb.trainable_variables + ([] if tied else proj.trainable_variables)
        g = tape.gradient(loss, params)
        (opt if tied else opt2).apply_gradients(zip(g, params))
        out.append((loss, type(g[0]).__name__ == "IndexedSlices", [tf.convert_to_tensor(x) for x in g]))
    return out, emb.embeddings, proj.kernel


@parity(**KTOL)
def test_greedy_decoding_of_a_keras_decoder_over_a_fixed_padded_prefix(tf):
    """Decoding the XLA way inside ``tf.function``: a Keras decoder (``Embedding`` + position
    table, ``MultiHeadAttention(use_causal_mask=True)``, ``LayerNormalization``, ``Dense``) is
    called on the whole ``[batch, max_len]`` buffer each step; the next token is the ``argmax`` of
    the logits at position ``i`` (``tf.gather(..., batch_dims=1)``), written at ``i + 1`` by
    ``tensor_scatter_nd_update``; finished rows (EOS = 2) write PAD.  The causal mask makes the
    answer independent of the not-yet-written positions."""
    emb = tf.keras.layers.Embedding(VOCAB, D)
    pos = tf.constant(init_array((6, D), 2181))
    mha = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    ln = tf.keras.layers.LayerNormalization()
    head = tf.keras.layers.Dense(VOCAB)

    def decoder(buf):
        h = emb(buf) + pos
        h = ln(h + mha(h, h, use_causal_mask=True))
        return head(h)

    decoder(tf.zeros([2, 6], tf.int32))
    for i, layer in enumerate((emb, mha, ln, head)):
        _set(layer, 2182 + 10 * i)

    @tf.function
    def greedy(start):
        buf = tf.concat([start[:, None], tf.zeros([2, 5], tf.int32)], axis=1)
        finished = tf.zeros([2], tf.bool)
        for i in tf.range(5):
            logits = decoder(buf)
            at_i = tf.gather(logits, tf.fill([2, 1], i), batch_dims=1)[:, 0]
            nxt = tf.where(finished, 0, tf.argmax(at_i, -1, output_type=tf.int32))
            idx = tf.stack([tf.range(2), tf.fill([2], i + 1)], axis=1)
            buf = tf.tensor_scatter_nd_update(buf, idx, nxt)
            finished = finished | tf.equal(nxt, 2)
        return buf, finished

    buf, finished = greedy(tf.constant([1, 5]))
    return buf, finished, decoder(buf)


@parity(**KTOL)
def test_keras_losses_with_ignore_class_label_smoothing_and_padding_weights(tf):
    """The Keras losses text code reaches for, on ``[batch, time, vocab]`` logits with padding:
    ``SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)`` (the padded tokens drop
    out of the mean), the same with ``reduction='none'`` and the mask as ``sample_weight``,
    ``CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)`` on ``one_hot`` targets
    with the mask as ``sample_weight``, and each one's gradient wrt the logits."""
    rs = np.random.RandomState(2231)
    logits = tf.Variable(rs.randn(3, 5, 6).astype(np.float32))
    y = np.array([[3, 1, 4, 0, 0], [2, 5, 1, 5, 3], [1, 0, 0, 0, 0]], np.int32)
    mask = (y > 0).astype(np.float32)
    ignore = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    none = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    smooth = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    with tf.GradientTape(persistent=True) as tape:
        a = ignore(y, logits)
        per_token = none(y, logits)
        b = tf.reduce_sum(per_token * mask) / tf.reduce_sum(mask)
        c = smooth(tf.one_hot(y, 6), logits, sample_weight=mask)
    return a, per_token, b, c, [tape.gradient(v, logits) for v in (a, b, c)]


@parity(modes=True, **TOL)
def test_masked_token_accuracy_by_dataset_reduce_inside_a_compiled_eval(tf, padded_shapes=(6,)):
    """A compiled evaluation that folds a ``padded_batch(2, padded_shapes=[6])`` dataset (every
    batch one shape, as TPU input pipelines pad) with ``Dataset.reduce``: the state is (correct
    tokens, real tokens, summed masked loss) of a bigram model's predictions; accuracy and
    perplexity come out, and the same numbers from an eager Python loop."""
    sents = _sentences(2241, lengths=(4, 6, 2, 5, 3, 1))
    ds = tf.data.Dataset.from_generator(lambda: iter(sents), output_signature=tf.TensorSpec([None], tf.int32))
    ds = ds.padded_batch(2, padded_shapes=padded_shapes)
    emb = tf.constant(init_array((VOCAB, D), 2242))
    out_w = tf.constant(init_array((D, VOCAB), 2243))

    def fold(state, x):
        inp, tar = x[:, :-1], x[:, 1:]
        logits = tf.matmul(tf.gather(emb, inp), out_w)
        mask = tf.cast(tar > 0, tf.float32)
        hit = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), tar), tf.float32) * mask
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(tar, logits) * mask
        return state[0] + tf.reduce_sum(hit), state[1] + tf.reduce_sum(mask), state[2] + tf.reduce_sum(ce)

    @tf.function
    def evaluate():
        correct, count, total = ds.reduce((tf.constant(0.0), tf.constant(0.0), tf.constant(0.0)), fold)
        return correct / count, tf.exp(total / count), count

    state = (tf.constant(0.0), tf.constant(0.0), tf.constant(0.0))
    for x in ds:
        state = fold(state, x)
    return evaluate(), state


@xfail_on_tapejax("a dataset iterated inside a tapejax.function gets its first element's shapes where the spec "
                  "leaves sizes unknown (XLA's static shapes): Dataset.reduce over batches padded to each one's "
                  "longest raises InvalidArgumentError (tapejax/data/README.md)")
@parity(**TOL)
def test_dataset_reduce_inside_a_compiled_eval_over_batches_of_different_lengths(tf):
    """The evaluation above over ``padded_batch(2)`` (each batch padded to its own longest, so the
    batches are (2, 6), (2, 5), (2, 3)): TF folds them all in one compiled call."""
    return test_masked_token_accuracy_by_dataset_reduce_inside_a_compiled_eval.case(tf, padded_shapes=None)
