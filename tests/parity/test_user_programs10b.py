"""Round ten (b) of realistic user programs, each run under real TensorFlow 2.21 and under
tapejax: the training code of TensorFlow's own tutorials (what new users copy first), on the
sequence, reinforcement-learning and scientific side, scaled down to tiny sizes.  The programs
built of tf ops (and the cheap Keras ones) also run with deferred execution and predicted updates
off (``modes=True``), the heavier Keras programs in the default mode only.  Reinforcement
learning: the CartPole actor-critic (expected returns by a reversed ``tf.TensorArray`` loop,
``reduce_std`` standardisation, Huber critic, one tape for both losses, compiled step), REINFORCE
with a learned baseline and returns by a reversed ``scan``, a DQN with a target network synced by
``assign`` and per-gradient ``clip_by_norm``, PPO's clipped objective at its ``minimum`` /
``clip_by_value`` ties.  Sequences: word2vec skip-gram with negative sampling (two ``Embedding``
tables, ``einsum``, sparse gradients into Adam), the Transformer tutorial's pieces (positional
encoding, causal ``MultiHeadAttention``, the warm-up ``CustomSchedule``, masked loss and masked
accuracy, Adam with beta_2=0.98, epsilon=1e-9), a bag-of-embeddings text classifier whose
``GlobalAveragePooling1D`` reads the ``mask_zero`` mask, time-series windows built by ``tf.data``
into an LSTM (``fit`` beside a custom loop, ``MeanAbsoluteError``), seq2seq with Bahdanau
attention by hand under teacher forcing, a character RNN trained with ``clip_by_global_norm`` over
an embedding's ``IndexedSlices``.  Science: a physics-informed network (second derivatives w.r.t.
the input points by nested and persistent tapes, trained in a compiled step), a neural ODE by
RK4 in a Python loop and in ``tf.while_loop``, the CVAE tutorial's loss with fed noise, and a
gradient penalty on a recurrent model.  Structured data: ``Normalization.adapt``,
``CategoryEncoding`` and a dict of ``keras.Input`` trained by ``fit`` on a dict dataset.  Random
draws are made with NumPy and fed in; Keras weights are set from NumPy on both sides (tf_keras on
TF's side, Keras 3 on JAX on tapejax's, see ``test_keras.py``).
"""
import numpy as np

from .harness import init_array, parity

TOL = dict(rtol=2e-5, atol=2e-6)
LOOSE = dict(rtol=1e-4, atol=1e-5)
KTOL = dict(rtol=2e-4, atol=2e-5)


def _set(model, seed):
    model.set_weights([init_array(tuple(v.shape), seed + i) for i, v in enumerate(model.weights)])


def _hist(h, keys):
    return {k: [float(v) for v in h.history[k]] for k in keys}


# ---------------------------------------------------------------------------
# Reinforcement learning
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_cartpole_actor_critic_with_tensor_array_returns_in_a_compiled_step(tf):
    """The CartPole actor-critic tutorial on a fixed fed episode: a subclassed model with a shared
    Dense trunk, an actor and a critic head; inside one tape the episode's action probabilities and
    values are written to ``tf.TensorArray``s in a ``tf.range`` loop, the expected returns are
    computed by a reversed loop over the rewards into another ``TensorArray`` and standardised with
    ``reduce_std`` + eps; actor loss ``-sum(log(prob) * advantage)``, critic ``Huber(reduction=SUM)``;
    one gradient for both, Adam, all in a ``tf.function`` step."""
    rs = np.random.RandomState(0)
    states = rs.randn(7, 4).astype(np.float32)
    actions = rs.randint(0, 2, 7).astype(np.int32)
    rewards = np.ones(7, np.float32)

    class ActorCritic(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.common = tf.keras.layers.Dense(8, activation="relu")
            self.actor = tf.keras.layers.Dense(2)
            self.critic = tf.keras.layers.Dense(1)

        def call(self, inputs):
            x = self.common(inputs)
            return self.actor(x), self.critic(x)

    model = ActorCritic()
    model(states[:1])
    for i, layer in enumerate((model.common, model.actor, model.critic)):
        _set(layer, 3 + 5 * i)
    huber = tf.keras.losses.Huber(reduction=tf.keras.losses.Reduction.SUM)
    opt = tf.keras.optimizers.Adam(learning_rate=0.01)
    eps = np.finfo(np.float32).eps.item()

    def get_expected_return(rewards, gamma, standardize=True):
        n = tf.shape(rewards)[0]
        returns = tf.TensorArray(dtype=tf.float32, size=n)
        rewards = tf.cast(rewards[::-1], dtype=tf.float32)
        discounted_sum = tf.constant(0.0)
        discounted_sum_shape = discounted_sum.shape
        for i in tf.range(n):
            reward = rewards[i]
            discounted_sum = reward + gamma * discounted_sum
            discounted_sum.set_shape(discounted_sum_shape)
            returns = returns.write(i, discounted_sum)
        returns = returns.stack()[::-1]
        if standardize:
            returns = ((returns - tf.math.reduce_mean(returns)) / (tf.math.reduce_std(returns) + eps))
        return returns

    @tf.function
    def train_step(states, actions, rewards, gamma):
        with tf.GradientTape() as tape:
            action_probs = tf.TensorArray(dtype=tf.float32, size=0, dynamic_size=True)
            values = tf.TensorArray(dtype=tf.float32, size=0, dynamic_size=True)
            for t in tf.range(tf.shape(states)[0]):
                state = tf.expand_dims(states[t], 0)
                logits, value = model(state)
                probs = tf.nn.softmax(logits)
                values = values.write(t, tf.squeeze(value))
                action_probs = action_probs.write(t, probs[0, actions[t]])
            action_probs = action_probs.stack()
            values = values.stack()
            returns = get_expected_return(rewards, gamma)
            action_probs, values, returns = [tf.expand_dims(x, 1) for x in [action_probs, values, returns]]
            advantage = returns - values
            actor_loss = -tf.math.reduce_sum(tf.math.log(action_probs) * advantage)
            critic_loss = huber(values, returns)
            loss = actor_loss + critic_loss
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss, returns, grads

    out = [train_step(states, actions, rewards, 0.99) for _ in range(3)]
    return out, [v.numpy() for v in model.trainable_variables]


@parity(modes=True, **LOOSE)
def test_reinforce_with_a_learned_baseline_and_returns_by_reversed_scan(tf):
    """REINFORCE with a baseline over two fed episodes: discounted returns by ``tf.scan(...,
    reverse=True)``, log-probabilities of the taken actions by ``log_softmax`` and ``gather`` with
    ``batch_dims=1``, the advantage under ``stop_gradient`` for the policy loss, an MSE baseline loss,
    an entropy bonus; two optimizers (policy Adam, baseline SGD) from one persistent tape, eagerly."""
    rs = np.random.RandomState(1)
    episodes = [(rs.randn(n, 3).astype(np.float32), rs.randint(0, 3, n).astype(np.int32),
                 rs.rand(n).astype(np.float32)) for n in (5, 4)]
    pw = tf.Variable(init_array((3, 3), 11))
    pb = tf.Variable(np.zeros(3, np.float32))
    bw = tf.Variable(init_array((3, 1), 12))
    bb = tf.Variable([0.0])
    popt = tf.keras.optimizers.Adam(0.05)
    bopt = tf.keras.optimizers.SGD(0.1)
    out = []
    for s, a, r in episodes:
        returns = tf.scan(lambda acc, x: x + 0.9 * acc, tf.constant(r), initializer=0.0, reverse=True)
        with tf.GradientTape(persistent=True) as tape:
            logits = tf.matmul(s, pw) + pb
            logp = tf.nn.log_softmax(logits)
            logp_a = tf.gather(logp, tf.constant(a)[:, None], batch_dims=1)[:, 0]
            baseline = tf.squeeze(tf.matmul(s, bw) + bb, 1)
            adv = tf.stop_gradient(returns - baseline)
            entropy = -tf.reduce_sum(tf.exp(logp) * logp, axis=1)
            policy_loss = -tf.reduce_mean(logp_a * adv) - 0.01 * tf.reduce_mean(entropy)
            baseline_loss = tf.reduce_mean((returns - baseline) ** 2)
        gp = tape.gradient(policy_loss, [pw, pb])
        gb = tape.gradient(baseline_loss, [bw, bb])
        none = tape.gradient(policy_loss, [bw, bb])
        del tape
        popt.apply_gradients(zip(gp, [pw, pb]))
        bopt.apply_gradients(zip(gb, [bw, bb]))
        out.append((returns, policy_loss, baseline_loss, gp, gb, none))
    return out, pw, pb, bw, bb


@parity(modes=True, **LOOSE)
def test_dqn_with_target_network_synced_by_assign_and_clip_by_norm(tf):
    """A DQN training loop on a fed replay batch: the Q network and its target are two Keras
    Sequentials; the target is synced by ``assign`` every second step (eagerly, then by a
    ``tf.function``); targets ``r + gamma *
    max Q_target * (1 - done)``; the Q-value of the taken action by a ``tf.one_hot`` mask;
    ``Huber`` loss; every gradient clipped by ``clip_by_norm`` (some above the norm, some below);
    a ``tf.function`` step with RMSprop."""
    rs = np.random.RandomState(2)
    s = rs.randn(6, 4).astype(np.float32)
    a = rs.randint(0, 3, 6).astype(np.int32)
    r = rs.randn(6).astype(np.float32)
    s2 = rs.randn(6, 4).astype(np.float32)
    done = np.array([0, 0, 1, 0, 0, 1], np.float32)

    def make():
        return tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(6, activation="relu"),
                                    tf.keras.layers.Dense(3)])

    q, target = make(), make()
    _set(q, 20)
    _set(target, 30)
    huber = tf.keras.losses.Huber()
    opt = tf.keras.optimizers.RMSprop(0.01)

    @tf.function
    def train_step(s, a, r, s2, done):
        next_q = target(s2)
        y = r + 0.95 * tf.reduce_max(next_q, axis=1) * (1.0 - done)
        mask = tf.one_hot(a, 3)
        with tf.GradientTape() as tape:
            q_sa = tf.reduce_sum(q(s) * mask, axis=1)
            loss = huber(y, q_sa)
        grads = tape.gradient(loss, q.trainable_variables)
        clipped = [tf.clip_by_norm(g, 0.5) for g in grads]
        opt.apply_gradients(zip(clipped, q.trainable_variables))
        return loss, grads, clipped

    def sync():
        for tv, qv in zip(target.trainable_variables, q.trainable_variables):
            tv.assign(qv)

    compiled_sync = tf.function(sync)
    out = []
    for step in range(6):
        out.append(train_step(s, a, r, s2, done))
        if step == 1:
            sync()
        elif step in (3, 5):   # (the second call must copy the new values, not the first trace's)
            compiled_sync()
        out.append([v.numpy() for v in target.weights])
    return out, [v.numpy() for v in q.weights]


@parity(modes=True, **TOL)
def test_ppo_clipped_objective_at_its_minimum_and_clip_ties(tf):
    """PPO's clipped surrogate: ratio ``exp(logp - old_logp)`` with the old log-probabilities a copy
    of the first step's (ratio exactly 1: ``minimum(ratio * adv, clip(ratio) * adv)`` at a tie,
    ``clip_by_value`` at neither bound), then after two Adam steps (some ratios clipped, so their
    gradient is zero); value loss clipped as in PPO2; the gradients at every step are compared."""
    rs = np.random.RandomState(3)
    x = rs.randn(8, 3).astype(np.float32)
    act = rs.randint(0, 2, 8).astype(np.int32)
    adv = rs.randn(8).astype(np.float32)
    ret = rs.randn(8).astype(np.float32)
    w = tf.Variable(init_array((3, 2), 40, scale=2.0))
    vw = tf.Variable(init_array((3, 1), 41))
    opt = tf.keras.optimizers.Adam(0.1)

    def logp_of(x):
        return tf.reduce_sum(tf.nn.log_softmax(tf.matmul(x, w)) * tf.one_hot(act, 2), axis=1)

    old_logp = tf.identity(logp_of(x))
    old_v = tf.identity(tf.squeeze(tf.matmul(x, vw), 1))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            ratio = tf.exp(logp_of(x) - old_logp)
            surr = tf.minimum(ratio * adv, tf.clip_by_value(ratio, 0.8, 1.2) * adv)
            v = tf.squeeze(tf.matmul(x, vw), 1)
            v_clip = old_v + tf.clip_by_value(v - old_v, -0.2, 0.2)
            vloss = 0.5 * tf.reduce_mean(tf.maximum((v - ret) ** 2, (v_clip - ret) ** 2))
            loss = -tf.reduce_mean(surr) + vloss
        g = tape.gradient(loss, [w, vw])
        opt.apply_gradients(zip(g, [w, vw]))
        out.append((loss, ratio, g))
    return out, w, vw


# ---------------------------------------------------------------------------
# Sequence models
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_word2vec_skipgram_with_negative_sampling_and_sparse_adam(tf):
    """The word2vec tutorial: a subclassed model with a target and a context ``Embedding``, dots by
    ``einsum('be,bce->bc')``, ``CategoricalCrossentropy(from_logits=True)`` against a one-hot on the
    true context; the embedding gradients (``IndexedSlices`` on TF's side, repeated rows among
    them) applied by Adam, whose sparse update (duplicates summed first) is the dense one."""
    rs = np.random.RandomState(4)
    target = rs.randint(0, 9, 6).astype(np.int32)
    context = rs.randint(0, 9, (6, 4)).astype(np.int32)
    target[3] = target[0]
    context[2, 1] = context[0, 0]
    labels = np.zeros((6, 4), np.float32)
    labels[:, 0] = 1.0

    class Word2Vec(tf.keras.Model):
        def __init__(self, vocab_size, embedding_dim):
            super().__init__()
            self.target_embedding = tf.keras.layers.Embedding(vocab_size, embedding_dim, name="w2v_embedding")
            self.context_embedding = tf.keras.layers.Embedding(vocab_size, embedding_dim)

        def call(self, pair):
            target, context = pair
            if len(target.shape) == 2:
                target = tf.squeeze(target, axis=1)
            word_emb = self.target_embedding(target)
            context_emb = self.context_embedding(context)
            return tf.einsum("be,bce->bc", word_emb, context_emb)

    model = Word2Vec(12, 5)
    model((target, context))
    _set(model, 50)
    loss_fn = tf.keras.losses.CategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.Adam(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            dots = model((target[:, None], context))
            loss = loss_fn(labels, dots)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        # (their densified values: the class of a Keras ``Embedding``'s gradient is the next case's)
        out.append((loss, dots, [tf.convert_to_tensor(g) for g in grads]))
    return out, [v.numpy() for v in model.weights]


@parity(**TOL)
def test_keras_embedding_gradient_is_indexed_slices_and_momentum_skips_unseen_rows(tf):
    """A Keras ``Embedding`` called eagerly and inside a ``Sequential``: TF's gradient of its table
    is ``IndexedSlices`` (a ``ResourceGather``), and tf_keras' legacy ``SGD(momentum=0.9)`` applies
    it sparsely (``ResourceSparseApplyKerasMomentum``): a row looked up at the first step but not
    after keeps its value and its momentum, where a dense gradient of zeros would keep moving it."""
    emb = tf.keras.layers.Embedding(4, 1)
    model = tf.keras.Sequential([tf.keras.Input((None,), dtype="int32"), tf.keras.layers.Embedding(4, 1)])
    emb(np.array([0], np.int32))
    out = []
    for layer in (emb, model):
        layer.set_weights([np.ones((4, 1), np.float32)])
        opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
        for ids in ([0, 1], [1, 2], [1, 2]):
            with tf.GradientTape() as tape:
                y = tf.reduce_sum(layer(np.array([ids], np.int32)) ** 2)
            g = tape.gradient(y, layer.trainable_variables)
            opt.apply_gradients(zip(g, layer.trainable_variables))
            out.append((type(g[0]).__name__, tf.convert_to_tensor(g[0])))
        out.append(layer.get_weights())
    return out


def _positional_encoding(length, depth):
    depth = depth / 2
    positions = np.arange(length)[:, np.newaxis]
    depths = np.arange(depth)[np.newaxis, :] / depth
    angle_rads = positions * (1 / (10000 ** depths))
    return np.concatenate([np.sin(angle_rads), np.cos(angle_rads)], axis=-1).astype(np.float32)


@parity(**KTOL)
def test_transformer_decoder_with_causal_attention_custom_schedule_and_masked_metrics(tf):
    """The Transformer tutorial's pieces on a tiny decoder-only model: ``Embedding(mask_zero=True)``
    scaled by ``sqrt(d_model)`` plus the sinusoidal positional encoding, a causal
    ``MultiHeadAttention`` block with ``Add`` + ``LayerNormalization`` and a feed-forward block, the
    tutorial's ``CustomSchedule`` (``rsqrt`` warm-up) subclassing ``LearningRateSchedule``, Adam
    with beta_2=0.98, epsilon=1e-9, the masked ``SparseCategoricalCrossentropy(reduction='none')``
    loss and masked accuracy, in a ``tf.function`` step."""
    d_model, vocab, length = 8, 7, 5
    rs = np.random.RandomState(5)
    tokens = rs.randint(1, vocab, (3, length + 1)).astype(np.int32)
    tokens[0, 4:] = 0
    tokens[2, 3:] = 0
    inp, tar = tokens[:, :-1], tokens[:, 1:]
    pos = _positional_encoding(length, d_model)

    class CustomSchedule(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self, d_model, warmup_steps=4):
            super().__init__()
            self.d_model = tf.cast(d_model, tf.float32)
            self.warmup_steps = warmup_steps

        def __call__(self, step):
            step = tf.cast(step, dtype=tf.float32)
            arg1 = tf.math.rsqrt(step)
            arg2 = step * (self.warmup_steps ** -1.5)
            return tf.math.rsqrt(self.d_model) * tf.math.minimum(arg1, arg2)

    emb = tf.keras.layers.Embedding(vocab, d_model, mask_zero=True)
    mha = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    ln1 = tf.keras.layers.LayerNormalization()
    ln2 = tf.keras.layers.LayerNormalization()
    ff1 = tf.keras.layers.Dense(16, activation="relu")
    ff2 = tf.keras.layers.Dense(d_model)
    final = tf.keras.layers.Dense(vocab)

    def model(x):
        h = emb(x) * tf.math.sqrt(tf.cast(d_model, tf.float32)) + pos[tf.newaxis, :length]
        a = mha(query=h, value=h, key=h, use_causal_mask=True)
        h = ln1(h + a)
        h = ln2(h + ff2(ff1(h)))
        return final(h)

    model(inp)
    for i, layer in enumerate((emb, mha, ln1, ln2, ff1, ff2, final)):
        _set(layer, 60 + 10 * i)
    layers = (emb, mha, ln1, ln2, ff1, ff2, final)
    params = [v for layer in layers for v in layer.trainable_variables]
    schedule = CustomSchedule(d_model)
    opt = tf.keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def masked_loss(label, pred):
        mask = label != 0
        loss = loss_object(label, pred)
        mask = tf.cast(mask, dtype=loss.dtype)
        loss *= mask
        return tf.reduce_sum(loss) / tf.reduce_sum(mask)

    def masked_accuracy(label, pred):
        pred = tf.argmax(pred, axis=2)
        label = tf.cast(label, pred.dtype)
        match = label == pred
        mask = label != 0
        match = match & mask
        match = tf.cast(match, dtype=tf.float32)
        mask = tf.cast(mask, dtype=tf.float32)
        return tf.reduce_sum(match) / tf.reduce_sum(mask)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x)
            loss = masked_loss(y, logits)
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        return loss, masked_accuracy(y, logits), logits

    lrs = [schedule(s) for s in (1, 4, 9)]
    out = [step(inp, tar) for _ in range(3)]
    # the causal mask: the first position's logits do not depend on later tokens
    changed = inp.copy()
    changed[:, 2:] = 1
    # (the key bias is left out: its gradient is 0 up to rounding, softmax being shift-invariant,
    # and Adam scales that noise up to full steps on either side)
    kept = [v.numpy() for v in params if v is not mha.trainable_variables[3]]
    return lrs, out, model(changed)[:, :2], model(inp)[:, :2], kept


@parity(**KTOL)
def test_text_classifier_embedding_mask_zero_into_global_average_pooling_by_fit(tf):
    """The text-classification tutorial with integer inputs prepared by NumPy: ``Embedding``
    (``mask_zero=True``) into ``GlobalAveragePooling1D`` (which averages over the unmasked tokens
    only) and a Dense logit, compiled with ``BinaryCrossentropy(from_logits=True)`` and
    ``BinaryAccuracy(threshold=0.0)``, ``fit`` with validation data, then ``evaluate`` and
    ``predict`` (the padded and unpadded copies of a review must score the same)."""
    rs = np.random.RandomState(6)
    x = rs.randint(1, 20, (10, 6)).astype(np.int32)
    for i, n in enumerate((6, 3, 5, 2, 6, 4, 1, 6, 3, 5)):
        x[i, n:] = 0
    y = rs.randint(0, 2, (10, 1)).astype(np.float32)
    model = tf.keras.Sequential([tf.keras.Input((None,), dtype="int32"),
                                 tf.keras.layers.Embedding(20, 4, mask_zero=True),
                                 tf.keras.layers.GlobalAveragePooling1D(),
                                 tf.keras.layers.Dense(1)])
    _set(model, 80)
    model.compile(loss=tf.keras.losses.BinaryCrossentropy(from_logits=True), optimizer="adam",
                  metrics=[tf.keras.metrics.BinaryAccuracy(threshold=0.0)])
    model.optimizer.learning_rate.assign(0.05)
    h = model.fit(x[:8], y[:8], validation_data=(x[8:], y[8:]), batch_size=4, epochs=3,
                  shuffle=False, verbose=0)
    ev = model.evaluate(x, y, batch_size=5, verbose=0)
    short = x[3:4, :2]
    pred = model.predict(np.concatenate([x[3:4], x[1:2]]), verbose=0)
    return (_hist(h, ["loss", "binary_accuracy", "val_loss", "val_binary_accuracy"]), ev, pred,
            model(short), [v.numpy() for v in model.weights])


@parity(**KTOL)
def test_time_series_windows_by_tf_data_into_an_lstm_fit_and_custom_loop(tf):
    """The time-series tutorial: a sine-plus-noise series cut into windows by ``Dataset.window(6,
    shift=1, drop_remainder=True)``, ``flat_map(lambda w: w.batch(6))``, split into inputs and the
    next value by ``map``, batched; an ``LSTM`` + Dense model trained by ``fit`` with the MSE loss
    and a ``MeanAbsoluteError`` metric, and a twin trained by a tape loop over the same dataset
    with the metric updated by hand; both histories and final weights are compared."""
    series = (np.sin(np.arange(14) * 0.6) + 0.1 * np.random.RandomState(7).randn(14)).astype(np.float32)

    def windows(known=False):
        ds = tf.data.Dataset.from_tensor_slices(series)
        ds = ds.window(6, shift=1, drop_remainder=True)
        ds = ds.flat_map(lambda w: w.batch(6))
        ds = ds.map(lambda w: (tf.expand_dims(w[:-1], -1), w[-1:]))
        if known:
            ds = ds.apply(tf.data.experimental.assert_cardinality(9))
        return ds.batch(3)

    def make():
        m = tf.keras.Sequential([tf.keras.Input((5, 1)), tf.keras.layers.LSTM(4), tf.keras.layers.Dense(1)])
        _set(m, 90)
        return m

    model = make()
    model.compile(loss=tf.keras.losses.MeanSquaredError(), optimizer="adam",
                  metrics=[tf.keras.metrics.MeanAbsoluteError()])
    model.optimizer.learning_rate.assign(0.02)
    # (fit gets the cardinality: on a dataset of unknown cardinality, tf_keras' compiled fit counts
    # one optimizer iteration more at the first epoch's end, where the step that finds the data
    # exhausted still runs its counter's increment; its run_eagerly fit does not, nor does tapejax)
    h = model.fit(windows(known=True), epochs=2, verbose=0)

    twin = make()
    opt = tf.keras.optimizers.Adam(0.02)
    mae = tf.keras.metrics.MeanAbsoluteError()
    mse = tf.keras.losses.MeanSquaredError()
    log = []
    for _ in range(2):
        mae.reset_state()
        for xb, yb in windows():
            with tf.GradientTape() as tape:
                pred = twin(xb, training=True)
                loss = mse(yb, pred)
            grads = tape.gradient(loss, twin.trainable_variables)
            opt.apply_gradients(zip(grads, twin.trainable_variables))
            mae.update_state(yb, pred)
            log.append(loss)
        log.append(mae.result())
    firsts = [x.numpy()[:, 0] for x, _ in windows()]
    return (firsts, _hist(h, ["loss", "mean_absolute_error"]), log,
            [v.numpy() for v in model.weights], [v.numpy() for v in twin.weights])


@parity(**KTOL)
def test_seq2seq_with_bahdanau_attention_by_hand_under_teacher_forcing(tf):
    """The NMT-with-attention tutorial, tiny: a GRU encoder (``return_sequences``,
    ``return_state``), Bahdanau attention written with three Dense layers (``V(tanh(W1(query) +
    W2(values)))``, softmax over time, context by ``reduce_sum``), a decoder GRU called one step at a
    time with ``initial_state`` under teacher forcing, logits per step, a loss masked on padding
    (``SparseCategoricalCrossentropy(reduction='none')``), in a ``tf.function`` step with Adam."""
    rs = np.random.RandomState(8)
    src = rs.randint(1, 6, (2, 4)).astype(np.int32)
    src[1, 3] = 0
    tgt = rs.randint(1, 5, (2, 3)).astype(np.int32)
    tgt[0, 2] = 0
    tgt[:, 0] = 1   # <start>
    enc_emb = tf.keras.layers.Embedding(6, 3)
    enc_gru = tf.keras.layers.GRU(4, return_sequences=True, return_state=True)
    dec_emb = tf.keras.layers.Embedding(5, 3)
    dec_gru = tf.keras.layers.GRU(4, return_sequences=True, return_state=True)
    w1, w2, v = tf.keras.layers.Dense(4), tf.keras.layers.Dense(4), tf.keras.layers.Dense(1)
    fc = tf.keras.layers.Dense(5)

    def attention(query, values):
        score = v(tf.nn.tanh(w1(tf.expand_dims(query, 1)) + w2(values)))
        weights = tf.nn.softmax(score, axis=1)
        return tf.reduce_sum(weights * values, axis=1), weights

    def decode_step(token, hidden, enc_out):
        context, weights = attention(hidden, enc_out)
        x = tf.concat([tf.expand_dims(context, 1), dec_emb(token)], axis=-1)
        out, state = dec_gru(x, initial_state=hidden)
        return fc(tf.reshape(out, (-1, out.shape[2]))), state, weights

    enc_out, enc_state = enc_gru(enc_emb(src))
    decode_step(tgt[:, :1], enc_state, enc_out)
    layers = (enc_emb, enc_gru, dec_emb, dec_gru, w1, w2, v, fc)
    for i, layer in enumerate(layers):
        _set(layer, 100 + 7 * i)
    params = [p for layer in layers for p in layer.trainable_variables]
    opt = tf.keras.optimizers.Adam(0.02)
    loss_object = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

    def loss_function(real, pred):
        mask = tf.math.logical_not(tf.math.equal(real, 0))
        loss_ = loss_object(real, pred)
        return tf.reduce_mean(loss_ * tf.cast(mask, dtype=loss_.dtype))

    @tf.function
    def train_step(inp, targ):
        loss = 0.0
        attn = []
        with tf.GradientTape() as tape:
            enc_output, hidden = enc_gru(enc_emb(inp))
            for t in range(1, targ.shape[1]):
                logits, hidden, weights = decode_step(targ[:, t - 1:t], hidden, enc_output)
                loss += loss_function(targ[:, t], logits)
                attn.append(weights)
        batch_loss = loss / int(targ.shape[1])
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        return batch_loss, attn, [tf.convert_to_tensor(g) for g in grads]

    out = [train_step(tf.constant(src), tf.constant(tgt)) for _ in range(2)]
    return out, [p.numpy() for p in params]


@parity(modes=True, **LOOSE)
def test_char_rnn_with_embedding_lookup_and_clip_by_global_norm(tf):
    """A character RNN written with tf ops: ``tf.nn.embedding_lookup`` on a Variable table (its
    gradient ``IndexedSlices`` with repeated rows), a GRU-like cell unrolled in Python, softmax
    cross-entropy over the next characters, all gradients clipped together by
    ``tf.clip_by_global_norm`` (the embedding's stays ``IndexedSlices``, its values scaled), then
    legacy Adagrad (sparse on the table: unseen rows keep their accumulators) for three steps; a
    greedy generation loop from the trained weights."""
    rs = np.random.RandomState(9)
    text = rs.randint(0, 6, (2, 6)).astype(np.int32)
    text[:, 2] = text[:, 1]
    table = tf.Variable(init_array((8, 3), 110))
    wz, wh = tf.Variable(init_array((7, 4), 111)), tf.Variable(init_array((7, 4), 112))
    wo, bo = tf.Variable(init_array((4, 8), 113)), tf.Variable(np.zeros(8, np.float32))
    params = [table, wz, wh, wo, bo]
    opt = tf.keras.optimizers.legacy.Adagrad(0.3)

    def cell(x, h):
        xh = tf.concat([x, h], axis=1)
        z = tf.sigmoid(tf.matmul(xh, wz))
        return z * h + (1 - z) * tf.tanh(tf.matmul(xh, wh))

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h = tf.zeros((2, 4))
            loss = 0.0
            for t in range(5):
                h = cell(tf.nn.embedding_lookup(table, text[:, t]), h)
                logits = tf.matmul(h, wo) + bo
                loss += tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(text[:, t + 1], logits))
        grads = tape.gradient(loss, params)
        clipped, norm = tf.clip_by_global_norm(grads, 1.0)
        opt.apply_gradients(zip(clipped, params))
        out.append((loss, norm, type(grads[0]).__name__, type(clipped[0]).__name__,
                    [tf.convert_to_tensor(g) for g in clipped]))
    h = tf.zeros((1, 4))
    ch = tf.constant([3])
    gen = []
    for _ in range(4):
        h = cell(tf.nn.embedding_lookup(table, ch), h)
        ch = tf.argmax(tf.matmul(h, wo) + bo, axis=1, output_type=tf.int32)
        gen.append(int(ch[0]))
    return out, gen, params


@parity(modes=True, **LOOSE)
def test_gradient_penalty_on_a_recurrent_critic_with_clip_by_global_norm(tf):
    """A WGAN-GP-style penalty on a sequence critic: an Elman RNN written with ``tf.while_loop`` over
    time; the penalty is ``(||d critic / d x_hat||_2 - 1)^2`` at fed interpolates (an inner tape
    watching them, its gradient taken inside the outer tape: a second derivative through the
    loop), the total loss differentiated w.r.t. the weights, clipped by ``clip_by_global_norm``,
    SGD; compiled and eager steps compared."""
    rs = np.random.RandomState(10)
    real = tf.constant(rs.randn(3, 4, 2).astype(np.float32))
    fake = tf.constant(rs.randn(3, 4, 2).astype(np.float32))
    alpha = tf.constant(rs.rand(3, 1, 1).astype(np.float32))
    wx = tf.Variable(init_array((2, 3), 120))
    wh = tf.Variable(init_array((3, 3), 121))
    wo = tf.Variable(init_array((3, 1), 122))
    params = [wx, wh, wo]
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    def critic(x):
        def body(t, h):
            return t + 1, tf.tanh(tf.matmul(x[:, t], wx) + tf.matmul(h, wh))
        _, h = tf.while_loop(lambda t, h: t < 4, body, (tf.constant(0), tf.zeros((3, 3))),
                             maximum_iterations=4)   # (a static bound: see the neural ODE case)
        return tf.matmul(h, wo)

    def step(real, fake, alpha):
        with tf.GradientTape() as tape:
            x_hat = alpha * real + (1 - alpha) * fake
            with tf.GradientTape() as gp_tape:
                gp_tape.watch(x_hat)
                c = critic(x_hat)
            g = gp_tape.gradient(c, x_hat)
            norm = tf.sqrt(tf.reduce_sum(g ** 2, axis=[1, 2]))
            gp = tf.reduce_mean((norm - 1.0) ** 2)
            loss = tf.reduce_mean(critic(fake)) - tf.reduce_mean(critic(real)) + 10.0 * gp
        grads = tape.gradient(loss, params)
        clipped, gnorm = tf.clip_by_global_norm(grads, 2.0)
        opt.apply_gradients(zip(clipped, params))
        return loss, gp, gnorm, grads

    compiled = tf.function(step)
    out = [step(real, fake, alpha), compiled(real, fake, alpha), step(real, fake, alpha)]
    return out, params


# ---------------------------------------------------------------------------
# Scientific models
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_physics_informed_network_for_a_poisson_problem_in_a_compiled_step(tf):
    """A PINN for ``u'' = -pi^2 sin(pi x)`` on [0, 1] with ``u(0) = u(1) = 0``: an MLP of tf ops,
    ``u_x`` and ``u_xx`` w.r.t. the collocation points by nested tapes (outer persistent, watching
    the points), the residual and boundary losses, the gradient w.r.t. the weights by a third tape
    around both, Adam inside ``tf.function``; the eager derivatives of the trained net against the
    compiled ones."""
    xs = np.linspace(0.05, 0.95, 7, dtype=np.float32)[:, None]
    xb = np.array([[0.0], [1.0]], np.float32)
    vs = [tf.Variable(init_array((1, 6), 130)), tf.Variable(init_array((6,), 131)),
          tf.Variable(init_array((6, 6), 132)), tf.Variable(init_array((6,), 133)),
          tf.Variable(init_array((6, 1), 134)), tf.Variable([0.0])]
    opt = tf.keras.optimizers.Adam(0.01)

    def u(x):
        h = tf.tanh(tf.matmul(x, vs[0]) + vs[1])
        h = tf.tanh(tf.matmul(h, vs[2]) + vs[3])
        return tf.matmul(h, vs[4]) + vs[5]

    def derivatives(x):
        x = tf.convert_to_tensor(x)
        with tf.GradientTape(persistent=True) as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                ux = u(x)
            u_x = t1.gradient(ux, x)
        u_xx = t2.gradient(u_x, x)
        also = t2.gradient(ux, x)
        del t2
        return ux, u_x, u_xx, also

    @tf.function
    def train_step(x, xb):
        with tf.GradientTape() as tape:
            _, _, u_xx, _ = derivatives(x)
            f = u_xx + np.pi ** 2 * tf.sin(np.pi * x)
            loss = tf.reduce_mean(f ** 2) + tf.reduce_mean(u(xb) ** 2)
        grads = tape.gradient(loss, vs)
        opt.apply_gradients(zip(grads, vs))
        return loss, grads

    out = [train_step(xs, xb) for _ in range(3)]
    return out, derivatives(xs), tf.function(derivatives)(xs), vs


@parity(modes=True, **LOOSE)
def test_neural_ode_by_rk4_in_a_python_loop_and_in_a_while_loop(tf):
    """A neural ODE: an MLP vector field integrated by classical RK4 over 6 steps, once in a Python
    loop (eager) and once in ``tf.while_loop`` inside ``tf.function`` (the trajectory collected in
    a ``TensorArray``); the trajectory-matching loss's gradients w.r.t. the field's weights and the
    initial state agree between the two and with TF's; two Adam steps on the loop version."""
    z0 = np.array([[1.0, 0.0], [0.5, -0.5]], np.float32)
    target = np.stack([np.cos(0.2 * k) * z0 for k in range(1, 7)]).astype(np.float32)
    w1, b1 = tf.Variable(init_array((2, 5), 140)), tf.Variable(np.zeros(5, np.float32))
    w2 = tf.Variable(init_array((5, 2), 141))
    params = [w1, b1, w2]
    dt = 0.2

    def f(z):
        return tf.matmul(tf.tanh(tf.matmul(z, w1) + b1), w2)

    def rk4(z):
        k1 = f(z)
        k2 = f(z + 0.5 * dt * k1)
        k3 = f(z + 0.5 * dt * k2)
        k4 = f(z + dt * k3)
        return z + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)

    def loss_python(z):
        traj = []
        for _ in range(6):
            z = rk4(z)
            traj.append(z)
        return tf.reduce_mean((tf.stack(traj) - target) ** 2)

    @tf.function
    def loss_and_grads_while(z0):
        with tf.GradientTape() as tape:
            tape.watch(z0)
            ta = tf.TensorArray(tf.float32, size=6)

            def body(i, z, ta):
                z = rk4(z)
                return i + 1, z, ta.write(i, z)

            # (``maximum_iterations``: tapejax's reverse mode through a while needs a static bound, README)
            _, _, ta = tf.while_loop(lambda i, z, ta: i < 6, body, (0, z0, ta), maximum_iterations=6)
            loss = tf.reduce_mean((ta.stack() - target) ** 2)
        return loss, tape.gradient(loss, params + [z0])

    z0c = tf.constant(z0)
    with tf.GradientTape() as tape:
        tape.watch(z0c)
        lp = loss_python(z0c)
    gp = tape.gradient(lp, params + [z0c])
    lw, gw = loss_and_grads_while(z0c)
    opt = tf.keras.optimizers.Adam(0.05)
    steps = []
    for _ in range(2):
        loss, g = loss_and_grads_while(z0c)
        opt.apply_gradients(zip(g[:3], params))
        steps.append(loss)
    return lp, gp, lw, gw, steps, params


@parity(modes=True, **LOOSE)
def test_cvae_tutorial_loss_with_fed_noise(tf):
    """The convolutional-VAE tutorial's loss on a dense encoder/decoder: ``encode`` splits the
    encoder output into mean and log-variance by ``tf.split``, ``reparameterize`` with fed ``eps``,
    ``log_normal_pdf`` (``tf.math.log(2. * np.pi)``), ``sigmoid_cross_entropy_with_logits`` summed
    over pixels, the single-sample Monte Carlo ELBO ``-mean(logpx_z + logpz - logqz_x)``; a
    ``tf.function`` train step with Adam."""
    rs = np.random.RandomState(11)
    x = (rs.rand(4, 6) > 0.5).astype(np.float32)
    eps_all = rs.randn(3, 4, 2).astype(np.float32)
    enc = tf.keras.Sequential([tf.keras.Input((6,)), tf.keras.layers.Dense(5, activation="relu"),
                               tf.keras.layers.Dense(4)])
    dec = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(5, activation="relu"),
                               tf.keras.layers.Dense(6)])
    _set(enc, 150)
    _set(dec, 160)
    params = enc.trainable_variables + dec.trainable_variables
    opt = tf.keras.optimizers.Adam(1e-2)

    def log_normal_pdf(sample, mean, logvar, raxis=1):
        log2pi = tf.math.log(2. * np.pi)
        return tf.reduce_sum(-.5 * ((sample - mean) ** 2. * tf.exp(-logvar) + logvar + log2pi), axis=raxis)

    def compute_loss(x, eps):
        mean, logvar = tf.split(enc(x), num_or_size_splits=2, axis=1)
        z = eps * tf.exp(logvar * .5) + mean
        x_logit = dec(z)
        cross_ent = tf.nn.sigmoid_cross_entropy_with_logits(logits=x_logit, labels=x)
        logpx_z = -tf.reduce_sum(cross_ent, axis=[1])
        logpz = log_normal_pdf(z, 0., 0.)
        logqz_x = log_normal_pdf(z, mean, logvar)
        return -tf.reduce_mean(logpx_z + logpz - logqz_x)

    @tf.function
    def train_step(x, eps):
        with tf.GradientTape() as tape:
            loss = compute_loss(x, eps)
        grads = tape.gradient(loss, params)
        opt.apply_gradients(zip(grads, params))
        return loss, grads

    out = [train_step(x, e) for e in eps_all]
    return out, [p.numpy() for p in params]


# ---------------------------------------------------------------------------
# Structured data
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_structured_data_with_normalization_category_encoding_and_a_dict_dataset(tf):
    """The structured-data tutorial: numeric features normalised by ``Normalization`` layers
    adapted on their columns, an integer category one-hot encoded by ``CategoryEncoding``, the
    encoded features concatenated in a functional model over a dict of ``keras.Input``s, trained by
    ``fit`` on a ``tf.data`` dataset of (feature dict, label) batches, then ``evaluate`` and
    ``predict`` on a dict."""
    rs = np.random.RandomState(12)
    n = 12
    feats = {"age": (rs.rand(n, 1) * 60 + 20).astype(np.float32),
             "fee": (rs.rand(n, 1) * 5).astype(np.float32),
             "kind": rs.randint(0, 3, (n, 1)).astype(np.int32)}
    labels = rs.randint(0, 2, (n, 1)).astype(np.float32)
    inputs = {"age": tf.keras.Input((1,), name="age"), "fee": tf.keras.Input((1,), name="fee"),
              "kind": tf.keras.Input((1,), name="kind", dtype="int32")}
    encoded = []
    norms = []
    for name in ("age", "fee"):
        norm = tf.keras.layers.Normalization(axis=None)
        norm.adapt(feats[name])
        norms.append(norm)
        encoded.append(norm(inputs[name]))
    encoded.append(tf.keras.layers.CategoryEncoding(num_tokens=3, output_mode="one_hot")(inputs["kind"]))
    h = tf.keras.layers.concatenate(encoded)
    h = tf.keras.layers.Dense(4, activation="relu")(h)
    out = tf.keras.layers.Dense(1)(h)
    model = tf.keras.Model(inputs, out)
    dense = [layer for layer in model.layers if isinstance(layer, tf.keras.layers.Dense)]
    for i, layer in enumerate(dense):
        _set(layer, 170 + 5 * i)
    model.compile(optimizer="adam", loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    model.optimizer.learning_rate.assign(0.05)
    ds = tf.data.Dataset.from_tensor_slices((feats, labels)).batch(4)
    h = model.fit(ds, epochs=3, verbose=0)
    ev = model.evaluate(ds, verbose=0)
    pred = model.predict({k: v[:3] for k, v in feats.items()}, verbose=0)
    stats = [(np.asarray(nm.mean).ravel(), np.asarray(nm.variance).ravel()) for nm in norms]
    return (stats, _hist(h, ["loss", "accuracy"]), ev, pred,
            [w for layer in dense for w in layer.get_weights()])
