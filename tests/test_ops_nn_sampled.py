"""Candidate samplers and sampled losses (tapejax.ops.nn_sampled) against hand oracles: the
samplers' frequencies against their distributions over many draws, TF's expected-count formulas,
learned_unigram's state, the seed rules; the losses against a hand-written JAX formula of TF's
``_compute_sampled_logits`` (values and ``jax.grad``).  TF parity (exact, with given
``sampled_values``): tests/parity/test_ops_nn_more.py."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf

TC = tf.constant([[1], [2]], tf.int64)


@pytest.fixture(autouse=True)
def _seeded():
    """The frequency checks draw from a seeded global stream: the same draws in any test order
    (a 3.5-standard-error bound fails once in a few thousand unseeded runs)."""
    tf.random.set_seed(20261124)
    yield
    tf.random.set_seed(None)


def _freq(sample_fn, r, rounds):
    counts = np.zeros(r)
    for _ in range(rounds):
        np.add.at(counts, sample_fn().numpy(), 1)
    return counts / counts.sum()


def test_uniform_and_log_uniform_frequencies():
    """Non-unique draws follow P: uniform 1/R, log-uniform log((k+2)/(k+1))/log(R+1) (4000 draws;
    3.5 standard errors)."""
    r = 8
    f = _freq(lambda: tf.random.uniform_candidate_sampler(TC, 1, 400, False, r)[0], r, 10)
    assert np.all(np.abs(f - 1 / r) <= 3.5 * np.sqrt(1 / r / 4000)), f
    p = np.log((np.arange(r) + 2) / (np.arange(r) + 1)) / np.log(r + 1)
    f = _freq(lambda: tf.random.log_uniform_candidate_sampler(TC, 1, 400, False, r)[0], r, 10)
    assert np.all(np.abs(f - p) <= 3.5 * np.sqrt(p * (1 - p) / 4000)), (f, p)


def test_fixed_unigram_frequencies_and_counts():
    """fixed_unigram: P proportional to unigrams**distortion after the reserved ids (never drawn);
    non-unique expected counts are P * num_sampled."""
    uni = [1.0, 4.0, 9.0]
    s, t, e = tf.random.fixed_unigram_candidate_sampler(TC, 1, 4000, False, 5, unigrams=uni, distortion=0.5,
                                                        num_reserved_ids=2)
    p = np.array([0, 0, 1, 2, 3]) / 6.0
    f = np.bincount(s.numpy(), minlength=5) / 4000
    assert f[0] == f[1] == 0
    assert np.all(np.abs(f - p) <= 3.5 * np.sqrt(p * (1 - p) / 4000) + 1e-9), (f, p)
    np.testing.assert_allclose(t.numpy(), [[0.0], [1 / 6 * 4000]], rtol=1e-6)
    np.testing.assert_allclose(e.numpy(), p[s.numpy()] * 4000, rtol=1e-6)


def test_unique_draws_and_expected_counts():
    """unique=True: distinct ids; every expected count is 1 - (1 - P(k)) ** tries with one integer
    tries >= num_sampled shared by all (or P(k) * num_sampled when tries == num_sampled)."""
    r, n = 20, 12
    for _ in range(5):
        s, t, e = tf.random.log_uniform_candidate_sampler(tf.constant([[0], [7]], tf.int64), 1, n, True, r)
        ids = s.numpy()
        assert len(set(ids.tolist())) == n
        p = np.log((np.arange(r) + 2) / (np.arange(r) + 1)) / np.log(r + 1)
        first = e.numpy()[0]
        tries = np.log1p(-first) / np.log1p(-p[ids[0]])
        if np.allclose(e.numpy(), p[ids] * n, rtol=1e-5):
            continue
        assert tries >= n - 1e-3 and abs(tries - round(tries)) < 1e-3, tries
        np.testing.assert_allclose(e.numpy(), -np.expm1(round(tries) * np.log1p(-p[ids])), rtol=1e-5)
        np.testing.assert_allclose(t.numpy().ravel(), -np.expm1(round(tries) * np.log1p(-p[[0, 7]])), rtol=1e-5)


def test_learned_unigram_state_is_kept_per_seed():
    """The weights start at 1 and each call's true classes add 1 after its draws (TF's kernel state),
    one state per op seed; a state with another seed starts fresh."""
    tc = tf.constant([[3], [3]], tf.int64)
    got = [tf.random.learned_unigram_candidate_sampler(tc, 1, 4, False, 5, seed=123)[1].numpy()[0, 0] for _ in range(3)]
    np.testing.assert_allclose(got, [4 * 1 / 5, 4 * 3 / 7, 4 * 5 / 9], rtol=1e-6)
    other = tf.random.learned_unigram_candidate_sampler(tc, 1, 4, False, 5, seed=124)[1].numpy()[0, 0]
    np.testing.assert_allclose(other, 4 / 5, rtol=1e-6)


def test_samplers_follow_the_seed_rules():
    """An op seed after set_seed repeats its sequence; without seeds draws differ."""
    tf.random.set_seed(5)
    a = [tf.random.uniform_candidate_sampler(TC, 1, 6, True, 50, seed=2)[0].numpy() for _ in range(2)]
    tf.random.set_seed(5)
    b = [tf.random.uniform_candidate_sampler(TC, 1, 6, True, 50, seed=2)[0].numpy() for _ in range(2)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b)) and not np.array_equal(a[0], a[1])
    tf.random.set_seed(None)


def test_sampler_errors():
    with pytest.raises(tf.errors.InvalidArgumentError, match="range is too small"):
        tf.random.uniform_candidate_sampler(TC, 1, 6, True, 5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="num_true columns"):
        tf.random.uniform_candidate_sampler(TC, 2, 3, True, 5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of range.*received 9"):
        tf.random.log_uniform_candidate_sampler(tf.constant([[9], [2]], tf.int64), 1, 3, True, 5)
    with pytest.raises(TypeError, match="`true_classes`.*float32"):
        tf.random.uniform_candidate_sampler([[1.0]], 1, 3, True, 5)
    with pytest.raises(NotImplementedError, match="`vocab_file`"):
        tf.random.fixed_unigram_candidate_sampler(TC, 1, 3, False, 5, vocab_file="counts.txt")
    with pytest.raises(tf.errors.InvalidArgumentError, match="weights size"):
        tf.random.fixed_unigram_candidate_sampler(TC, 1, 3, False, 5, unigrams=[1.0, 2.0, 3.0])
    with pytest.raises(tf.errors.InvalidArgumentError, match="`shard`"):
        tf.random.fixed_unigram_candidate_sampler(TC, 1, 3, False, 3, unigrams=[1.0, 2.0, 3.0], shard=1)


# -- the losses -------------------------------------------------------------------------------

RNG = np.random.default_rng(2)
W = RNG.standard_normal((10, 4)).astype(np.float32)
B = RNG.standard_normal(10).astype(np.float32)
X = RNG.standard_normal((3, 4)).astype(np.float32)
LABELS = np.array([[2, 7], [5, 5], [0, 9]])
SAMPLED = np.array([7, 1, 5, 3, 5])
TRUE_Q = np.linspace(0.2, 0.7, 6).reshape(3, 2)
SAMPLED_Q = np.linspace(0.1, 0.9, 5)


def hand_logits(w, b, x, remove):
    """TF's _compute_sampled_logits written out (num_true 2)."""
    true = jnp.einsum("bd,btd->bt", x, w[LABELS]) + b[LABELS] - jnp.log(TRUE_Q)
    samp = x @ w[SAMPLED].T + b[SAMPLED]
    if remove:
        last = np.array([j == max(k for k in range(5) if SAMPLED[k] == SAMPLED[j]) for j in range(5)])
        hit = np.array([[SAMPLED[j] in LABELS[i] and last[j] for j in range(5)] for i in range(3)])
        samp = samp + jnp.where(hit, -np.finfo(np.float32).max, 0.0)
    samp = samp - jnp.log(SAMPLED_Q)
    return jnp.concatenate([true, samp], 1), jnp.concatenate([jnp.full((3, 2), 0.5), jnp.zeros((3, 5))], 1)


def hand_nce(w, b, x, remove):
    z, y = hand_logits(w, b, x, remove)
    return jnp.sum(jnp.maximum(z, 0) - z * y + jnp.log1p(jnp.exp(-jnp.abs(z))), 1)


def hand_ssm(w, b, x, remove):
    z, y = hand_logits(w, b, x, remove)
    return -jnp.sum(y * jax.nn.log_softmax(z), 1)


@pytest.mark.parametrize("name,hand", [("nce_loss", hand_nce), ("sampled_softmax_loss", hand_ssm)])
@pytest.mark.parametrize("remove", [False, True])
def test_losses_match_the_formula_and_its_gradient(name, hand, remove):
    """Values and gradients w.r.t. weights, biases and inputs equal the hand formula's (jax.grad)."""
    fn = getattr(tf.nn, name)
    w, b, x = (tf.constant(a, tf.float32) for a in (W, B, X))
    ct = np.array([1.0, -2.0, 0.5])
    with tf.GradientTape() as t:
        t.watch([w, b, x])
        loss = fn(w, b, LABELS, x, 5, 10, num_true=2, remove_accidental_hits=remove,
                  sampled_values=(SAMPLED, TRUE_Q.astype(np.float32), SAMPLED_Q.astype(np.float32)))
    grads = t.gradient(loss, [w, b, x], output_gradients=tf.constant(ct, tf.float32))
    args = tuple(jnp.asarray(a, jnp.float32) for a in (W, B, X))
    want = hand(*args, remove)
    np.testing.assert_allclose(loss.numpy(), want, rtol=1e-5, atol=1e-5)
    jg = jax.grad(lambda *a: jnp.sum(hand(*a, remove) * ct), argnums=(0, 1, 2))(*args)
    for g, j in zip(grads, jg):
        np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), j, rtol=1e-4, atol=1e-5)


def test_losses_sample_by_default_and_train():
    """Without sampled_values the classes come from the log-uniform sampler: a few SGD steps of a
    sampled softmax lower the full softmax loss, in and out of tf.function."""
    w = tf.Variable(np.zeros((50, 8), np.float32))
    b = tf.Variable(np.zeros(50, np.float32))
    x = tf.constant(RNG.standard_normal((16, 8)), tf.float32)
    y = RNG.integers(0, 50, (16, 1))

    def full():
        return float(tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            y[:, 0], tf.matmul(x, w, transpose_b=True) + b)).numpy())

    before = full()
    for _ in range(20):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.nn.sampled_softmax_loss(w, b, y, x, 10, 50, seed=1) +
                                  tf.nn.nce_loss(w, b, y, x, 10, 50))
        for v, g in zip([w, b], t.gradient(loss, [w, b])):
            v.assign_sub(0.5 * tf.convert_to_tensor(g))
    assert full() < before


def test_loss_errors():
    with pytest.raises(ValueError, match="`labels`.*num_true"):
        tf.nn.nce_loss(W, B, [1, 2, 3], X, 5, 10)
    with pytest.raises(ValueError, match="`sampled_values`"):
        tf.nn.sampled_softmax_loss(W, B, LABELS[:, :1], X, 4, 10, sampled_values=(SAMPLED, TRUE_Q.astype(np.float32), SAMPLED_Q.astype(np.float32)))
    with pytest.raises(ValueError, match="`inputs`"):
        tf.nn.nce_loss(W, B, LABELS[:, :1], X[0], 5, 10)


def test_samplers_and_losses_in_a_function():
    """With op seeds the samplers and sampled_softmax_loss's own sampling run inside tf.function (the
    true classes are traced: their range is checked eagerly only); a training step lowers the loss."""
    f = tf.function(lambda tc: tf.random.log_uniform_candidate_sampler(tc, 1, 5, True, 50, seed=4))
    s, t, e = f(tf.constant([[3], [9]], tf.int64))
    assert len(set(s.numpy().tolist())) == 5 and t.shape == (2, 1) and e.shape == (5,)
    w = tf.Variable(RNG.standard_normal((30, 6)).astype(np.float32))
    b = tf.Variable(np.zeros(30, np.float32))
    x = tf.constant(RNG.standard_normal((8, 6)).astype(np.float32))
    y = RNG.integers(0, 30, (8, 1))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sampled_softmax_loss(w, b, y, x, 6, 30, seed=3))
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.2 * tf.convert_to_tensor(gw))
        b.assign_sub(0.2 * tf.convert_to_tensor(gb))
        return loss

    losses = [float(step()) for _ in range(4)]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


@pytest.mark.parametrize("loss_fn", [tf.nn.sampled_softmax_loss, tf.nn.nce_loss])
def test_weight_gradient_indices_are_int64_as_tf(loss_fn):
    """TF casts labels and samples to int64 before the lookup, so the weights' ``IndexedSlices``
    has int64 indices (labels, then samples) even for int32 labels; tapejax's were int32 (in x64
    mode too).  Without x64 mode tapejax holds int64 as int32 (README)."""
    with jax.enable_x64(True):
        w = tf.Variable(np.ones((6, 2), np.float32))
        b = tf.Variable(np.zeros(6, np.float32))
        sv = (tf.constant([4, 1], tf.int64), tf.constant([[0.5], [0.5]]), tf.constant([0.5, 0.5]))
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(loss_fn(w, b, tf.constant([[2], [3]]), tf.constant([[1.0, 2.0], [0.5, -1.0]]), 2, 6,
                                         sampled_values=sv))
        gw, gb = t.gradient(loss, [w, b])
        for g in (gw, gb):
            assert isinstance(g, tf.IndexedSlices)
            assert g.indices.dtype == tf.int64 and g.indices.numpy().tolist() == [2, 3, 4, 1]
