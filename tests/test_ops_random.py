"""tapejax.random: TF's global/op seed rules on JAX keys, and threading the state through jax.jit."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf


def _same(a, b):
    return np.array_equal(np.asarray(a), np.asarray(b))


def test_global_seed_makes_sequences_reproducible():
    tf.random.set_seed(11)
    a = [tf.random.normal([3]), tf.random.uniform([2]), tf.random.truncated_normal([2])]
    tf.random.set_seed(11)
    b = [tf.random.normal([3]), tf.random.uniform([2]), tf.random.truncated_normal([2])]
    assert all(_same(x, y) for x, y in zip(a, b))
    assert not _same(a[0], tf.random.normal([3]))


def test_op_seed_streams_repeat_after_set_seed_and_ignore_other_ops():
    """Rule 4: the n-th call with an op seed is fixed by (global seed, op seed, n) only."""
    tf.random.set_seed(3)
    s1, s2 = tf.random.uniform([4], seed=9), tf.random.uniform([4], seed=9)
    assert not _same(s1, s2)
    tf.random.set_seed(3)
    tf.random.normal([5])          # an unseeded op in between does not shift the seeded stream
    assert _same(tf.random.uniform([4], seed=9), s1)


def test_op_seed_without_global_seed_is_reproducible_per_process_state():
    """Op seed and no global seed: TF's DEFAULT_GRAPH_SEED is used, so values repeat after a reset."""
    tf.random.set_seed(None)
    a = tf.random.normal([3], seed=4)
    tf.random.set_seed(None)
    assert _same(tf.random.normal([3], seed=4), a)


def test_unseeded_draws_differ():
    tf.random.set_seed(None)
    assert not _same(tf.random.normal([4]), tf.random.normal([4]))


def test_state_scope_threads_the_key_through_jit():
    """Inside jax.jit the global stream draws from the traced key; the advanced key is returned."""
    tf.random.set_seed(5)

    @jax.jit
    def step(key, x):
        with tf.random.state_scope(key) as s:
            y = tf.nn.dropout(tf.Tensor(x), 0.5)
            z = tf.random.normal([2])
        return y.value, z.value, s.key

    x = np.ones(64, np.float32)
    k0 = tf.random.get_state()
    y1, z1, k1 = step(k0, x)
    tf.random.set_state(k1)
    y2, z2, k2 = step(tf.random.get_state(), x)
    assert not _same(y1, y2) and not _same(z1, z2)       # the compiled step draws fresh values
    assert _same(tf.random.get_state(), k1)
    y1b, z1b, _ = step(k0, x)                           # same key in: same values out
    assert _same(y1, y1b) and _same(z1, z1b)
    assert set(np.unique(np.asarray(y1))) <= {0.0, 2.0}


def test_state_scope_restores_the_previous_key():
    tf.random.set_seed(2)
    before = tf.random.get_state()
    with tf.random.state_scope(jax.random.PRNGKey(0)) as s:
        tf.random.normal([1])
    assert _same(tf.random.get_state(), before) and not _same(s.key, jax.random.PRNGKey(0))


def test_call_scope_draws_from_its_key_or_refuses_and_leaves_the_global_key():
    """``call_scope`` (a Keras call's op): draws from the given key, ``.key`` advanced; with None a
    draw with seed=None raises DrawInTrace; the global key is untouched either way."""
    from tapejax.ops.random import DrawInTrace, call_scope
    tf.random.set_seed(2)
    before = tf.random.get_state()
    with call_scope(jax.random.PRNGKey(0)) as s:
        a = tf.random.uniform([3])
    with call_scope(jax.random.PRNGKey(0)):
        b = tf.random.uniform([3])
    assert _same(a, b) and not _same(s.key, jax.random.PRNGKey(0))
    with pytest.raises(DrawInTrace), call_scope(None):
        tf.random.uniform([3])
    assert _same(tf.random.get_state(), before)
    tf.random.uniform([3])   # (no longer refused)


def test_argument_errors():
    with pytest.raises(ValueError, match="maxval"):
        tf.random.uniform([2], dtype=tf.int32)
    with pytest.raises(TypeError, match="seed"):
        tf.random.set_seed("x")
    with pytest.raises(ValueError, match="key"):
        tf.random.set_state(np.zeros(3, np.uint32))
    with pytest.raises(tf.errors.InvalidArgumentError, match="logits"):
        tf.random.categorical([0.5, 0.5], 2)


def test_categorical_follows_probabilities():
    tf.random.set_seed(1)
    s = tf.random.categorical(tf.math.log([[0.1, 0.9]]), 2000)
    frac = float(np.mean(s.numpy() == 1))
    assert s.shape == (1, 2000) and 0.85 < frac < 0.95


def test_shuffle_is_a_permutation_without_gradient():
    x = tf.constant([1.0, 2.0, 3.0, 4.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.random.shuffle(x, seed=1)
    assert sorted(y.numpy().tolist()) == [1.0, 2.0, 3.0, 4.0]
    assert t.gradient(y, x) is None


def test_unthreaded_draw_inside_jit_is_a_clear_error():
    """Without state_scope a traced key would leak into the global state: refused, with advice."""
    @jax.jit
    def bad(x):
        return tf.random.normal([2]).value + x

    before = tf.random.get_state()
    with pytest.raises(RuntimeError, match="state_scope"):
        bad(1.0)
    assert _same(tf.random.get_state(), before)
    seeded = jax.jit(lambda x: tf.random.normal([2], seed=3).value + x)(1.0)   # an op seed is fine
    assert seeded.shape == (2,)


def test_the_global_key_made_on_first_use_inside_a_trace_is_concrete():
    """The global generator's key is made on its first use; a first use inside ``jax.jit`` (an
    unthreaded draw, refused with the RuntimeError that says what to do) must not leave a tracer
    in the generator: eager draws afterwards work."""
    from tapejax.ops import random as R
    g = R.get_global_generator()
    saved = g._holder
    g._holder = None   # (as before the first use)
    try:
        with pytest.raises(RuntimeError, match="state_scope"):
            jax.jit(lambda x: x + tf.random.uniform([2])._value)(jnp.zeros(2))
        assert isinstance(g._key, jax.Array) and not isinstance(g._key, jax.core.Tracer)
        assert tf.random.uniform([2]).shape == (2,)
    finally:
        g._holder = saved


# -- ops with seed=None inside tapejax.function (TF's stateful random ops) ----------------------
# Checked under TF 2.21: an unseeded tf.random.uniform in a tf.function gives new values at each
# call, and tf.random.set_seed restarts the sequence, so the calls after it repeat exactly.

def test_unseeded_ops_in_a_compiled_function_draw_new_values_at_each_call():
    @tf.function
    def f():
        return tf.random.uniform([4]), tf.random.normal([3])
    tf.random.set_seed(7)
    a, b = f(), f()
    assert not np.array_equal(a[0].numpy(), b[0].numpy())
    assert not np.array_equal(a[1].numpy(), b[1].numpy())
    tf.random.set_seed(7)
    a2, b2 = f(), f()
    for x, y in zip(a + b, a2 + b2):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert f.experimental_get_tracing_count() == 1   # (the key is state, not a constant of the trace)
    assert tf.random.uniform([2]).shape == (2,)      # the eager stream goes on from the same key


def test_dropout_in_a_compiled_training_step_masks_differently_each_step():
    x = tf.Variable(np.ones(64, np.float32))

    @tf.function
    def step():
        with tf.GradientTape() as t:
            y = tf.nn.dropout(x, 0.5)
            loss = tf.reduce_sum(y)
        return y, t.gradient(loss, x)

    (y1, g1), (y2, g2) = step(), step()
    for y, g in ((y1, g1), (y2, g2)):
        np.testing.assert_array_equal(g.numpy(), y.numpy())   # d(sum(x*mask*2))/dx = mask*2 = y here
        assert set(np.unique(y.numpy())) <= {0.0, 2.0}
    assert not np.array_equal(y1.numpy(), y2.numpy())


def _noisy_sum(n):
    acc = tf.zeros([2])
    for _ in tf.range(n):   # (converted: a loop on a tensor)
        acc = acc + tf.random.uniform([2])
    return acc


def test_unseeded_ops_in_a_converted_loop_draw_at_each_iteration_and_each_call():
    f = tf.function(_noisy_sum)
    tf.random.set_seed(3)
    one = f(tf.constant(1)).numpy()
    tf.random.set_seed(3)
    first = tf.random.uniform([2]).numpy()
    np.testing.assert_array_equal(one, first)   # one iteration: the stream's next draw
    a, b = f(tf.constant(3)).numpy(), f(tf.constant(3)).numpy()
    assert not np.array_equal(a, b)
    assert np.all((a > 0) & (a < 3)) and np.all((b > 0) & (b < 3))


def test_op_seeded_ops_in_a_compiled_function_are_kernels_with_their_own_state():
    """TF 2.21: in a tf.function, two ops with the same op seed draw the same values, each
    draws its next values at the next call, and set_seed starts them again."""
    @tf.function
    def f():
        return tf.random.uniform([2], seed=3), tf.random.uniform([2], seed=3)
    a, b = f(), f()
    np.testing.assert_array_equal(a[0].numpy(), a[1].numpy())
    np.testing.assert_array_equal(b[0].numpy(), b[1].numpy())
    assert not np.array_equal(a[0].numpy(), b[0].numpy())
    tf.random.set_seed(5)
    np.testing.assert_array_equal(f()[0].numpy(), a[0].numpy())
    np.testing.assert_array_equal(f()[0].numpy(), b[0].numpy())
    tf.random.set_seed(None)


def test_eager_draws_follow_the_documented_key_arithmetic_and_compile_nothing_in_steady_state():
    """The global stream's draw is ``key, sub = split(key)`` then the draw from ``sub``; an op-seeded
    draw's n-th key is ``fold_in(fold_in(PRNGKey(global), seed), n)`` (the module docstring's rules,
    computed here with JAX's own functions).  The key arithmetic is compiled once: drawing again
    compiles nothing."""
    tf.random.set_seed(5)
    key = jax.random.PRNGKey(5)
    for _ in range(3):
        key, sub = jax.random.split(key)
        np.testing.assert_array_equal(tf.random.uniform([4]).numpy(), jax.random.uniform(sub, (4,)))
    for n in range(3):
        k = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(5), 9), n)
        np.testing.assert_array_equal(tf.random.normal([3], seed=9).numpy(), jax.random.normal(k, (3,)))
    g = tf.random.Generator.from_seed(3)
    gk = g.state.numpy()
    for _ in range(2):
        gk, sub = jax.random.split(gk)
        np.testing.assert_array_equal(g.uniform([2]).numpy(), jax.random.uniform(sub, (2,)))

    import logging
    tf.random.uniform([4], 0.0, 2.0)
    tf.random.normal([3], seed=9)
    g.normal([2])
    records = []
    with jax.log_compiles(True):

        class _Catch(logging.Handler):
            def emit(self, record):
                if "Compiling" in record.getMessage() or "Finished XLA compilation" in record.getMessage():
                    records.append(record.getMessage())

        h = _Catch()
        lg = logging.getLogger("jax")
        lg.addHandler(h)
        try:
            for _ in range(3):
                tf.random.uniform([4], 0.0, 2.0)
                tf.random.normal([3], seed=9)
                g.normal([2])
        finally:
            lg.removeHandler(h)
    assert records == []


def test_random_op_parameters_first_converted_inside_a_trace_stay_concrete(monkeypatch):
    """A random op's Python-number parameters are cached as device arrays: one first made while a
    tapejax.function traces must be a concrete array, not the trace's tracer (a cached tracer
    made the next call's program take the wrong inputs, or leaked into a dataset function)."""
    from tapejax.ops import random as R
    monkeypatch.setattr(R, "_PARAMS", {})   # (as in a fresh process: nothing converted yet)
    tf.random.set_seed(11)

    @tf.function
    def draw(x):
        return x + tf.random.uniform([2], minval=-0.25, maxval=0.75, seed=3) + tf.random.normal([2], 0.5, 2.0)

    outs = [draw(tf.zeros(2)).numpy() for _ in range(3)]
    assert all(not isinstance(a, jax.core.Tracer) for a in R._PARAMS.values()) and R._PARAMS
    assert len({tuple(o.round(6)) for o in outs}) == 3   # new draws at every call
    tf.random.set_seed(11)
    again = [draw(tf.zeros(2)).numpy() for _ in range(3)]
    np.testing.assert_array_equal(np.stack(outs), np.stack(again))
    eager = tf.random.uniform([2], minval=-0.25, maxval=0.75, seed=3).numpy()
    assert eager.shape == (2,) and np.all(eager >= -0.25) and np.all(eager < 0.75)


def test_stateless_gamma_shape_must_end_with_the_parameters_broadcast_shape():
    """tapejax/ops/rng.py: TF's StatelessRandomGammaV3 refuses a ``shape`` that does not end with the
    broadcast shape of ``alpha`` and ``beta`` (an alpha of shape [1] under shape [3] is not
    broadcast); tapejax drew [3] values."""
    for shape, alpha, beta in [([3], [2.0], None), ([3, 2], [2.0], None), ([2], [2.0, 1.0], [[1.0], [2.0], [3.0]])]:
        with pytest.raises(tf.errors.InvalidArgumentError, match="must end with broadcasted shape"):
            tf.random.stateless_gamma(shape, seed=[1, 2], alpha=alpha, beta=beta)
    for shape, alpha, beta in [([3, 2], [2.0, 1.0], None), ([3], 2.0, None), ([3, 2], [2.0, 1.0], [[1.0], [2.0], [3.0]]),
                               ([3, 2], [1.0, 2.0], [1.0])]:
        assert tf.random.stateless_gamma(shape, seed=[1, 2], alpha=alpha, beta=beta).shape == tuple(shape)
