"""tapejax/keras/calls.py: a top-level Keras call is one tape op; its gradient is jax.vjp of the
layer's stateless call; state written back; functions as ops."""
import gc
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf

keras = tf.keras
import keras as K3  # noqa: E402  (Keras 3 itself, JAX backend: selected by tapejax)
from keras.src.backend.common.masking import get_keras_mask  # noqa: E402

RS = np.random.RandomState(0)
X = RS.randn(8, 5).astype(np.float32)
Y = RS.randint(0, 3, size=8).astype(np.int32)


def mlp(bn=False, dropout=0.0):
    layers = [keras.Input((5,)), keras.layers.Dense(6, activation="tanh")]
    if bn:
        layers.append(keras.layers.BatchNormalization())
    if dropout:
        layers.append(keras.layers.Dropout(dropout))
    layers.append(keras.layers.Dense(3))
    return keras.Sequential(layers)


def values(vs):
    return [jnp.asarray(v.numpy()) for v in vs]


def test_a_top_level_call_is_one_op_over_its_variable_reads():
    model = mlp()
    with tf.GradientTape() as tape:
        logits = model(X, training=True)
        names = [n.prim.name for n in tape._nodes]
    assert names == ["ReadVariableOp"] * 4 + ["KerasCall"]
    assert {v._id for v in tape.watched_variables()} == {v._id for v in model.trainable_variables}
    assert isinstance(logits, tf.Tensor)


def test_gradient_is_the_vjp_of_the_stateless_call():
    model = mlp(bn=True)
    tv, ntv = values(model.trainable_variables), values(model.non_trainable_variables)
    x = tf.constant(X)
    ct = RS.randn(8, 3).astype(np.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        logits = model(x, training=True)
    got = tape.gradient(logits, model.trainable_variables + [x], output_gradients=tf.constant(ct))

    def f(tv, x):
        return model.stateless_call(tv, ntv, x, training=True)[0]

    want_y, vjp = jax.vjp(f, tv, jnp.asarray(X))
    gtv, gx = vjp(jnp.asarray(ct))
    np.testing.assert_allclose(logits.numpy(), want_y, rtol=1e-5, atol=1e-6)
    for g, w in zip(got, list(gtv) + [gx]):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)


class WithSpare(keras.layers.Layer):
    """tapejax ops in build/call, and a weight its call never reads."""

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 2), initializer="ones")
        self.spare = self.add_weight(shape=(3,), initializer="ones")

    def call(self, x):
        return tf.nn.relu(tf.matmul(x, self.w))


def test_a_variable_the_call_does_not_use_gets_none():
    layer = WithSpare()
    with tf.GradientTape(persistent=True) as tape:
        y = layer(X)
    gw, gs = tape.gradient(y, [layer.w, layer.spare])
    assert gw is not None and gs is None
    zero = tape.gradient(y, layer.spare, unconnected_gradients="zero")
    np.testing.assert_array_equal(zero.numpy(), np.zeros(3, np.float32))
    assert layer.spare._id not in {n.ids[0] for n in tape._nodes if n.prim.name == "ReadVariableOp"}


def test_batchnorm_statistics_written_back_only_when_training():
    model = mlp(bn=True)
    bn = model.layers[1]
    tv, ntv = values(model.trainable_variables), values(model.non_trainable_variables)
    _, want = model.stateless_call(tv, ntv, jnp.asarray(X), training=True)
    before = [v.numpy() for v in model.non_trainable_variables]
    model(X, training=False)
    model(X)
    for b, v in zip(before, model.non_trainable_variables):
        np.testing.assert_array_equal(b, v.numpy())
    with tf.GradientTape():
        model(X, training=True)
    for w, v in zip(want, model.non_trainable_variables):
        np.testing.assert_allclose(v.numpy(), w, rtol=1e-6)
    assert not np.allclose(bn.moving_mean.numpy(), before[0])



class _Triples(K3.layers.Layer):
    """A layer that writes its own trainable weight in ``call`` and reads it after."""

    def build(self, shape):
        self.w = self.add_weight(shape=(), initializer="ones")

    def call(self, x):
        self.w.assign(self.w * 3.0)
        return x * self.w


def test_a_trainable_variable_assigned_in_call_is_written_back_and_cut_from_the_gradient():
    """TF (Keras 3 on TF): the assign is kept (w: 1 -> 3 -> 9), the read after it sees the new
    value (y = 9 * sum(x) = 27) and its gradient is the read's, not through ``w * 3`` (3, not 9)."""
    layer = _Triples()
    x = tf.constant([1.0, 2.0])
    layer(x)
    assert float(layer.w.numpy()) == 3.0
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(layer(x))
    assert (float(y), float(tape.gradient(y, layer.w)), float(layer.w.numpy())) == (27.0, 3.0, 9.0)
    traced = tf.function(lambda x: layer(x))
    np.testing.assert_allclose(traced(x).numpy(), [27.0, 54.0])
    assert float(layer.w.numpy()) == 27.0



class _Centre(K3.layers.Layer):
    """Mean-only batch norm: a non-trainable running mean assigned in ``call`` and read after."""

    def build(self, shape):
        self.running = self.add_weight(shape=(shape[-1],), initializer="zeros", trainable=False)

    def call(self, x):
        self.running.assign(0.5 * self.running + 0.5 * tf.reduce_mean(x, axis=0))
        return x - self.running


def test_a_state_read_after_its_assign_in_call_passes_no_gradient_to_what_it_was_computed_from():
    """TF: ``x - running`` reads the Variable after the assign, a read the input does not reach,
    so d sum(out) / dx is all ones (not ``1 - 0.5 / n`` through the batch mean)."""
    layer = _Centre()
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = layer(x)
    np.testing.assert_allclose(tape.gradient(out, x).numpy(), np.ones_like(X))
    np.testing.assert_allclose(layer.running.numpy(), 0.5 * X.mean(axis=0), rtol=1e-6)
    np.testing.assert_allclose(out.numpy(), X - 0.5 * X.mean(axis=0), rtol=1e-5, atol=1e-6)

def test_spectral_normalization_writes_its_kernel_and_takes_the_gradient_at_the_normalised_one():
    """``SpectralNormalization`` assigns ``kernel / sigma`` and ``u`` in a training call: both are
    written back, and the kernel's gradient is the wrapped layer's at the normalised kernel."""
    sn = K3.layers.SpectralNormalization(K3.layers.Dense(3, use_bias=False))
    sn.build((None, 5))
    k0 = RS.randn(5, 3).astype(np.float32)
    sn.kernel.assign(k0)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(sn(X, training=True) ** 2)
    g = tape.gradient(y, sn.kernel)
    k1 = sn.kernel.numpy()
    assert not np.allclose(k1, k0)
    ratio = k0 / k1   # (kernel / sigma: one power-iteration step's estimate of sigma)
    np.testing.assert_allclose(ratio, np.full_like(ratio, ratio[0, 0]), rtol=1e-5)
    want = X.T @ (2.0 * (X @ k1))
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-5)

def test_dropout_masks_follow_the_seed_and_advance():
    model = mlp(dropout=0.5)
    state = model.layers[1].seed_generator.state
    s0 = state.numpy()
    a, b = model(X, training=True).numpy(), model(X, training=True).numpy()
    assert not np.allclose(a, b)                          # the seed state advances per call
    assert not np.array_equal(s0, state.numpy())
    s1 = state.numpy()
    model(X, training=False)
    np.testing.assert_array_equal(s1, state.numpy())     # inference draws nothing
    keras.utils.set_random_seed(5)
    d1 = keras.layers.Dropout(0.5)
    m1 = d1(X, training=True).numpy()
    keras.utils.set_random_seed(5)
    d2 = keras.layers.Dropout(0.5)
    np.testing.assert_array_equal(m1, d2(X, training=True).numpy())
    np.testing.assert_array_equal(d1(X, training=False).numpy(), X)


def test_dropout_reproducible_after_tf_random_set_seed():
    tf.random.set_seed(3)
    m1 = keras.layers.Dropout(0.5)(X, training=True).numpy()
    tf.random.set_seed(3)
    m2 = keras.layers.Dropout(0.5)(X, training=True).numpy()
    tf.random.set_seed(4)
    m3 = keras.layers.Dropout(0.5)(X, training=True).numpy()
    np.testing.assert_array_equal(m1, m2)
    assert not np.array_equal(m1, m3)


class _DropPath(keras.layers.Layer):
    """keras.io's (CCT) ``StochasticDepth``: ``tf.random.uniform`` with seed=None in ``call``."""

    def call(self, x, training=None):
        if training:
            mask = tf.floor(0.5 + tf.random.uniform((tf.shape(x)[0],) + (1,) * (len(tf.shape(x)) - 1)))
            return x / 0.5 * mask
        return x


def test_a_layer_drawing_with_seed_none_takes_the_generator_key_as_state():
    """TF draws eagerly in such a call; here the call's op takes the global key as an operand and
    gives the advanced key as an update: the gradient's replay sees the forward's mask, the next
    call draws anew, ``set_seed`` reproduces, and inference draws nothing."""
    layer, x = _DropPath(), tf.constant(np.ones((32, 2), np.float32))
    tf.random.set_seed(7)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
    g = tape.gradient(y, x).numpy()
    np.testing.assert_array_equal(g, y.numpy())                  # d(x / 0.5 * m)/dx = 2m = y at x = 1
    assert set(np.unique(y.numpy())) == {0.0, 2.0}
    assert not np.array_equal(y.numpy(), layer(x, training=True).numpy())
    tf.random.set_seed(7)
    np.testing.assert_array_equal(y.numpy(), layer(x, training=True).numpy())
    key = tf.random.get_state()
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    np.testing.assert_array_equal(np.asarray(key), np.asarray(tf.random.get_state()))


def test_a_drawing_layer_in_a_function_draws_per_call_and_leaks_no_tracer():
    """Inside ``tapejax.function`` the key is threaded as the call's operand and update (before, the
    trace's key leaked into the global state and the next eager draw failed)."""
    layer, x = _DropPath(), tf.constant(np.ones((64, 1), np.float32))
    f = tf.function(lambda x: layer(x, training=True))
    a, b = f(x).numpy(), f(x).numpy()
    assert not np.array_equal(a, b) and set(np.unique(a)) == {0.0, 2.0}
    assert set(np.unique(layer(x, training=True).numpy())) <= {0.0, 2.0}   # eager after: a concrete key
    assert set(np.unique(tf.random.uniform([3]).numpy() < 1.0)) == {True}


def test_call_losses_are_kept_per_layer_and_replaced_by_the_next_call():
    reg = keras.regularizers.L1(0.5)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activity_regularizer=reg),
                              keras.layers.Dense(2)])
    with tf.GradientTape(persistent=True) as tape:
        model(X)
        loss = tf.add_n(model.losses)
    assert len(model.losses) == 1 and len(model.layers[0].losses) == 1
    h = model.layers[0](X)
    want = 0.5 * np.abs(h.numpy()).sum() / 8
    np.testing.assert_allclose(loss.numpy(), want, rtol=1e-5)
    assert tape.gradient(loss, model.layers[0].kernel) is not None
    assert tape.gradient(loss, model.layers[1].kernel) is None
    model(X)
    assert len(model.losses) == 1   # replaced, not accumulated


class TfPenalty(keras.layers.Layer):
    """Adds a loss made by tapejax ops: Keras's add_loss gets the tracer under the Tensor."""

    def call(self, x):
        self.add_loss(0.1 * tf.reduce_sum(tf.square(x)))
        return x


def test_add_loss_of_tapejax_ops_builds_and_is_differentiated():
    inp = keras.Input((5,))
    dense = keras.layers.Dense(2)
    model = keras.Model(inp, dense(TfPenalty()(inp)))   # Keras's symbolic build runs add_loss
    with tf.GradientTape() as tape:
        model(X)
        (penalty,) = model.losses
    np.testing.assert_allclose(penalty.numpy(), 0.1 * (X ** 2).sum(), rtol=1e-5)
    assert tape.gradient(penalty, dense.kernel) is None
    step = tf.function(lambda x: (model(x), tf.add_n(model.losses))[1])
    np.testing.assert_allclose(step(X).numpy(), 0.1 * (X ** 2).sum(), rtol=1e-5)


def test_a_gradient_replaying_the_call_keeps_its_losses():
    reg = keras.regularizers.L2(0.5)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activity_regularizer=reg)])
    with tf.GradientTape() as tape:
        model(X)
        loss = tf.add_n(model.losses)
    before = [x.numpy() for x in model.layers[0].losses]
    assert tape.gradient(loss, model.layers[0].kernel) is not None
    assert [x.numpy() for x in model.layers[0].losses] == before and len(before) == 1


class Counting(keras.layers.Layer):
    traces = 0

    def build(self, input_shape):
        self.w = self.add_weight(shape=(input_shape[-1], 2), initializer="ones")

    def call(self, x):
        Counting.traces += 1
        return tf.matmul(x, self.w)


def test_a_call_structure_is_traced_once():
    layer = Counting()
    layer(X)
    after_first = Counting.traces       # one abstract trace (the plan) + one jit trace
    for _ in range(3):
        layer(X)
    assert Counting.traces == after_first <= 2
    layer(X[:4])                        # a new shape: one new plan and trace
    assert Counting.traces <= after_first + 2
    opt = tf.keras.optimizers.SGD(0.1)
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(X))
        opt.apply_gradients(zip(tape.gradient(loss, [layer.w]), [layer.w]))
    steady = Counting.traces
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(X))
        opt.apply_gradients(zip(tape.gradient(loss, [layer.w]), [layer.w]))
    assert Counting.traces == steady


def test_a_first_call_that_builds_a_sublayer_is_planned_again_over_all_variables():
    """A custom layer whose ``build`` makes only its own weight (its Dense sublayer builds inside
    ``call``) and a subclassed model built by ``model.build(shape)`` (Keras 3 leaves the sublayer
    unbuilt): the first call's plan makes the sublayer's variables, so the call is keyed and
    planned again over all of them (a RuntimeError before).  Known values: all-ones weights."""
    class Block(K3.layers.Layer):
        def __init__(self):
            super().__init__()
            self.inner = K3.layers.Dense(3, kernel_initializer="ones")

        def build(self, input_shape):
            self.scale = self.add_weight(name="scale", shape=(3,), initializer="ones")

        def call(self, x):
            return self.inner(x) * self.scale

    block = Block()
    x = np.array([[1.0, 2.0]], np.float32)
    with tf.GradientTape() as tape:
        out = block(x)
        loss = tf.reduce_sum(out * tf.constant([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(out.numpy(), [[3.0, 3.0, 3.0]])
    grads = tape.gradient(loss, block.trainable_weights)
    assert [w.name for w in block.trainable_weights] == ["scale", "kernel", "bias"]
    np.testing.assert_array_equal(grads[0].numpy(), [3.0, 6.0, 9.0])
    np.testing.assert_array_equal(grads[1].numpy(), [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]])
    np.testing.assert_array_equal(block(x).numpy(), [[3.0, 3.0, 3.0]])   # (the second call's plan)

    class Net(K3.Model):
        def __init__(self):
            super().__init__()
            self.d = K3.layers.Dense(1, kernel_initializer="ones")

        def call(self, inputs):
            return self.d(inputs)

    model = Net()
    model.build((None, 2))
    assert not model.d.built
    np.testing.assert_array_equal(model(x).numpy(), [[3.0]])
    assert len(model.weights) == 2


def test_a_recorded_call_replayed_after_its_layer_changed_variables_raises():
    """What ``_variables`` guards: a tape's recorded call replayed (``tape.gradient``) after a layer
    of the model was frozen (its variables listed otherwise) is an error, not a wrong gradient."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(model(np.ones((1, 2), np.float32)))
    model.layers[0].trainable = False
    with pytest.raises(RuntimeError, match="changed its variables"):
        tape.gradient(y, model.layers[1].trainable_variables)


def test_one_output_calls_are_deferred_state_updates_run_now():
    model = mlp(bn=True)
    before = model.layers[1].moving_mean.numpy()
    prev = tf.set_deferred_execution(True)
    try:
        with tf.GradientTape():
            y = mlp()(X)
            y_bn = model(X, training=True)
            assert not np.array_equal(before, model.layers[1].moving_mean.numpy())   # written back now
        assert type(y).__name__ == "Pending"
        assert type(y_bn).__name__ == "Pending"
        tf.set_deferred_execution(False)
        with tf.GradientTape():
            y = mlp()(X)
        assert type(y) is tf.Tensor
    finally:
        tf.set_deferred_execution(prev)


def test_a_layer_made_on_the_fly_lives_until_the_gradient():
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(keras.layers.Dense(2, kernel_initializer="ones")(x))
    gc.collect()
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), np.full((8, 5), 2.0, np.float32))


def test_keras_function_is_one_op_with_jax_gradient():
    logits = tf.constant(X[:, :3])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = keras.losses.sparse_categorical_crossentropy(Y, logits, from_logits=True)
        names = [n.prim.name for n in tape._nodes]
    assert names == ["KerasCall"]
    g = tape.gradient(loss, logits)
    want = jax.grad(lambda z: jnp.sum(K3.losses.sparse_categorical_crossentropy(Y, z, from_logits=True)))(
        jnp.asarray(X[:, :3]))
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-6)


def test_keras_ops_namespace():
    t = tf.constant(X)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(t)
        m = keras.ops.mean(keras.ops.square(t))
        s = keras.ops.stop_gradient(t)
        u = tf.reduce_sum(s * 2.0)
    np.testing.assert_allclose(tape.gradient(m, t).numpy(), 2 * X / X.size, rtol=1e-5)
    assert tape.gradient(u, t) is None
    assert tuple(keras.ops.shape(t)) == (8, 5)
    np.testing.assert_allclose(keras.ops.mean(X), X.mean(), rtol=1e-6)   # NumPy in: Keras's own


def test_tf_keras_aliases_of_losses_and_metrics_are_keras_functions_on_the_tape():
    """``tf.keras.losses.mae`` / ``mse`` / ``MAE`` / ``kld`` and ``tf.keras.metrics.mae``: names Keras 3
    keeps only in its tf.keras API (TF 2.21's own ``tf.keras``), used by the tutorials (the
    anomaly detector's ``tf.keras.losses.mae(reconstructions, data)``); they were AttributeErrors."""
    raw = inspect.unwrap   # (Keras's own public functions are on the tape too: ``namespace.install_public``)
    assert tf.keras.losses.mae.__wrapped__ is raw(K3.losses.mean_absolute_error)
    assert tf.keras.losses.MSE.__wrapped__ is raw(K3.losses.mean_squared_error)
    assert tf.keras.metrics.mae.__wrapped__ is raw(K3.losses.mean_absolute_error)
    assert tf.keras.losses.kld.__wrapped__ is raw(K3.losses.kl_divergence)
    t = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(t)
        loss = tf.reduce_sum(tf.keras.losses.mae(tf.zeros_like(t), t))
    np.testing.assert_allclose(tape.gradient(loss, t).numpy(), np.sign(X) / X.shape[1], rtol=1e-6)
    with pytest.raises(AttributeError, match="no_such_loss"):
        tf.keras.losses.no_such_loss   # noqa: B018


def test_a_keras_function_on_numpy_gives_tensors_as_tf_does():
    """``tf.keras.losses.mae(model.predict(x), x)`` (NumPy in) is a Tensor with ``.numpy()``, as TF's
    (it was a raw JAX array); raw JAX arrays in keep Keras's own results."""
    rec = np.abs(X) * 0.5
    out = tf.keras.losses.mae(rec, X)
    assert isinstance(out, tf.Tensor)
    np.testing.assert_allclose(out.numpy(), np.mean(np.abs(rec - X), axis=-1), rtol=1e-6)
    assert isinstance(keras.ops.mean(X), tf.Tensor)
    assert isinstance(tf.keras.losses.mae(jnp.asarray(rec), jnp.asarray(X)), jax.Array)


def test_loss_object_called_inline_is_differentiated():
    logits = tf.constant(X[:, :3])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(Y, logits)
    gc.collect()
    want = jax.grad(lambda z: K3.losses.SparseCategoricalCrossentropy(from_logits=True)(Y, z))(
        jnp.asarray(X[:, :3]))
    np.testing.assert_allclose(tape.gradient(loss, logits).numpy(), want, rtol=1e-5, atol=1e-6)


def test_keras3_optimizer_applied_to_tape_gradients_matches_stateless_apply():
    model, ref = mlp(), mlp()
    ref.set_weights(model.get_weights())
    opt, ref_opt = K3.optimizers.Adam(0.05), K3.optimizers.Adam(0.05)
    ref_opt.build(ref.trainable_variables)
    tv, ov = values(ref.trainable_variables), [v.value for v in ref_opt.variables]
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def ref_loss(tv):
        logits, _ = ref.stateless_call(tv, [], jnp.asarray(X))
        return K3.losses.SparseCategoricalCrossentropy(from_logits=True)(Y, logits)

    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = loss_fn(Y, model(X))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        tv, ov = ref_opt.stateless_apply(ov, jax.grad(ref_loss)(tv), tv)
    for v, w in zip(model.trainable_variables, tv):
        np.testing.assert_allclose(v.numpy(), w, rtol=1e-5, atol=1e-6)
    assert int(opt.iterations.numpy()) == 3


def test_function_threads_and_donates_keras_variables():
    model = mlp(bn=True)
    opt = K3.optimizers.Adam(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    eager_model = mlp(bn=True)
    eager_model.set_weights(model.get_weights())
    eager_opt = K3.optimizers.Adam(0.01)
    for _ in range(3):
        loss = step(tf.constant(X), tf.constant(Y))
        with tf.GradientTape() as tape:
            eager_loss = loss_fn(Y, eager_model(X, training=True))
        eager_opt.apply_gradients(zip(tape.gradient(eager_loss, eager_model.trainable_variables),
                                      eager_model.trainable_variables))
        np.testing.assert_allclose(loss.numpy(), eager_loss.numpy(), rtol=1e-5)
    # TF's count: the first call creates the optimizer's Variables, so it traces twice
    assert step.experimental_get_tracing_count() == 2
    for v, w in zip(model.weights, eager_model.weights):   # BN statistics written back too
        np.testing.assert_allclose(v.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)
    kernel = model.layers[0].kernel
    old = kernel._val
    step(tf.constant(X), tf.constant(Y))
    assert old.is_deleted() and kernel.owns_buffer()     # donated, and the new buffer is its own
    assert step.experimental_get_tracing_count() == 2


def test_jacobian_of_layer_matches_jax():
    layer = keras.layers.Dense(2, activation="tanh")
    x = tf.constant(X[:3])
    layer(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = layer(x)
    jk = tape.jacobian(y, layer.kernel)
    bj = tape.batch_jacobian(y, x)
    k, b = layer.kernel.value, layer.bias.value
    want_k = jax.jacrev(lambda k: jnp.tanh(jnp.asarray(X[:3]) @ k + b))(k)
    np.testing.assert_allclose(jk.numpy(), want_k, rtol=1e-5, atol=1e-6)
    want_b = jax.vmap(jax.jacrev(lambda xi: jnp.tanh(xi @ k + b)))(jnp.asarray(X[:3]))
    np.testing.assert_allclose(bj.numpy(), want_b, rtol=1e-5, atol=1e-6)


def test_calls_under_a_jax_transformation_are_keras_own():
    layer = keras.layers.Dense(2, kernel_initializer="ones")
    layer(X)
    out = jax.jit(lambda x: layer(x))(jnp.asarray(X))   # raw tracers: Keras's own __call__
    assert isinstance(out, jax.Array)
    np.testing.assert_allclose(out, X @ np.ones((5, 2), np.float32), rtol=1e-5)


def _zoo():
    rs = np.random.RandomState(2)
    inp = keras.Input((4, 8))
    attention = keras.Model(inp, keras.layers.MultiHeadAttention(2, 4)(inp, inp))
    return {
        "conv": (keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3, activation="relu"),
                                   keras.layers.MaxPooling2D(), keras.layers.Flatten(), keras.layers.Dense(2)]),
                 rs.randn(2, 8, 8, 3).astype(np.float32)),
        "lstm": (keras.Sequential([keras.Input((5, 3)), keras.layers.LSTM(4), keras.layers.Dense(1)]),
                 rs.randn(2, 5, 3).astype(np.float32)),
        "embedding-gru": (keras.Sequential([keras.Input((5,), dtype="int32"),
                                            keras.layers.Embedding(10, 4, mask_zero=True), keras.layers.GRU(3)]),
                          rs.randint(0, 10, (2, 5)).astype(np.int32)),
        "attention": (attention, rs.randn(2, 4, 8).astype(np.float32)),
        "layernorm": (keras.Sequential([keras.Input((6,)), keras.layers.LayerNormalization(),
                                        keras.layers.Dense(2)]), rs.randn(3, 6).astype(np.float32)),
    }


@pytest.mark.parametrize("name", ["conv", "lstm", "embedding-gru", "attention", "layernorm"])
def test_layer_zoo_gradients_match_jax_grad_of_stateless_call(name):
    model, x = _zoo()[name]
    with tf.GradientTape() as tape:
        y = model(x, training=True)
        loss = tf.reduce_sum(y * y)
    got = tape.gradient(loss, model.trainable_variables)
    ntv = values(model.non_trainable_variables)

    def ref(tv):
        out, _ = model.stateless_call(tv, ntv, jnp.asarray(x), training=True)
        return jnp.sum(out * out)

    want = jax.grad(ref)(values(model.trainable_variables))
    for g, w in zip(got, want):   # (an Embedding's table: IndexedSlices, as TF's; compared dense)
        np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), w, rtol=2e-4, atol=1e-5)
    assert isinstance(got[0], tf.IndexedSlices) == (name == "embedding-gru")


def test_a_dropped_model_is_freed():
    import weakref
    model = mlp(bn=True)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = loss_fn(Y, model(X, training=True))
        tape.gradient(loss, model.trainable_variables)
    ref = weakref.ref(model)
    kernel = weakref.ref(model.layers[0].kernel)
    del model, tape, loss
    gc.collect()
    assert ref() is None and kernel() is None   # no compiled cache keeps it alive


def test_unhashable_python_argument_of_a_keras_function_is_a_clear_error():
    class Opaque:
        __hash__ = None

    t = tf.constant(X)
    with pytest.raises(TypeError, match="must be hashable"):
        with tf.GradientTape():
            keras.ops.mean(t, axis=Opaque())


def test_call_plans_are_a_bounded_cache_found_again_after_eviction():
    from tapejax.keras import calls
    assert "keras_call_plans" in tf.cache_stats()
    layer = keras.layers.Dense(2)
    layer(X)
    old = calls._PLANS.maxsize
    calls._PLANS.clear()
    calls._PLANS.resize(1)
    try:
        first = [layer(X).numpy(), layer(X[:3]).numpy()]
        for _ in range(2):
            np.testing.assert_array_equal(layer(X).numpy(), first[0])
            np.testing.assert_array_equal(layer(X[:3]).numpy(), first[1])
        st = tf.cache_stats()["keras_call_plans"]
        assert st.size == 1 and st.evictions >= 4
    finally:
        calls._PLANS.resize(old)


def test_tf_backed_preprocessing_layers_run_eagerly_on_host_values_and_refuse_a_trace():
    """IntegerLookup / Hashing run TensorFlow inside their ``call`` (JAX cannot trace them): called
    eagerly on host values, their ids are tapejax Tensors a tape treats as constants; inside a
    tapejax.function a TypeError says what to do."""
    pytest.importorskip("tensorflow")   # (Keras' own requirement for these layers)
    lookup = keras.layers.IntegerLookup()
    lookup.adapt(np.array([3, 3, 5, 7, 7, 7], np.int32))
    ids = lookup(tf.constant([7, 3, 9]))
    assert isinstance(ids, tf.Tensor) and ids.numpy().tolist() == [1, 2, 0]
    assert keras.layers.Hashing(num_bins=4)(np.array([1, 2, 3])).shape == (3,)
    emb = keras.layers.Embedding(4, 2)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(emb(lookup(np.array([7, 7, 9], np.int32))))
    g = tf.convert_to_tensor(tape.gradient(loss, emb.trainable_variables)[0]).numpy()
    assert g[:, 0].tolist() == [1.0, 2.0, 0.0, 0.0]
    with pytest.raises(TypeError, match="inside a tapejax.function"):
        tf.function(lambda x: lookup(x))(tf.constant([7, 3]))


def _masked_pair(go_backwards):
    """Zero-padded frames, a Masking layer and a SimpleRNN with weights from NumPy."""
    rs = np.random.RandomState(3)
    x = rs.randn(3, 5, 2).astype(np.float32)
    x[0, 3:] = 0.0
    x[2, 1:] = 0.0
    masking = keras.layers.Masking(0.0)
    rnn = keras.layers.SimpleRNN(3, go_backwards=go_backwards, return_sequences=True, return_state=True)
    rnn(masking(x))
    rnn.set_weights([rs.randn(*v.shape).astype(np.float32) * 0.5 for v in rnn.weights])
    return x, masking, rnn


@pytest.mark.parametrize("go_backwards", [False, True])
def test_a_keras_mask_flows_from_one_top_level_call_to_the_next(go_backwards):
    """TF's eager tensors carry ``_keras_mask`` from ``Masking`` into the next layer's call; so do
    tapejax's Tensors: the RNN skips the padded frames (its final state is the state after the last
    real frame, checked against a NumPy loop), values and gradients as in one Sequential call
    (where Keras propagates the mask itself), eager, deferred and in a tapejax.function."""
    x, masking, rnn = _masked_pair(go_backwards)
    w, u, b = [v.numpy() for v in rnn.weights]
    want = []
    for i in range(3):
        h = np.zeros(3, np.float32)
        for t in (reversed(range(5)) if go_backwards else range(5)):
            if np.any(x[i, t] != 0):
                h = np.tanh(x[i, t] @ w + h @ u + b)
        want.append(h)
    assert get_keras_mask(masking(x)) is not None
    seq_model = keras.Sequential([keras.Input((5, 2)), masking, rnn])

    def run(fn):
        xt = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(xt)
            seq, state = fn(xt)
            loss = tf.reduce_sum(state ** 2) + tf.reduce_sum(tf.sin(seq))
        return [state.numpy(), seq.numpy()] + [g.numpy() for g in tape.gradient(loss, rnn.trainable_variables + [xt])]

    def two_calls(xt):
        return rnn(masking(xt))

    base = run(lambda xt: seq_model(xt))
    np.testing.assert_allclose(base[0], np.stack(want), rtol=1e-5, atol=1e-6)
    for fn in (two_calls, tf.function(two_calls)):
        for got, ref in zip(run(fn), base):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    prev = tf.set_deferred_execution(False)
    try:
        for got, ref in zip(run(two_calls), base):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    finally:
        tf.set_deferred_execution(prev)


@pytest.mark.parametrize("deferred", [False, True])
def test_outputs_carry_keras_mask_as_an_attribute_as_tf_eager_tensors_do(deferred):
    """``out._keras_mask`` after ``Masking`` and ``Embedding(mask_zero=True)``, inside a tape too;
    a Tensor no masking layer made has no such attribute (``hasattr`` False).  Oracle: TF 2.21
    (the same calls on its eager tensors)."""
    x = np.zeros((2, 3, 2), np.float32)
    x[0, :2], x[1, :1] = 1, 2
    prev = tf.set_deferred_execution(deferred)
    try:
        plain = tf.constant(x)
        assert not hasattr(plain, "_keras_mask")
        with tf.GradientTape() as tape:
            tape.watch(plain)
            masked = tf.keras.layers.Masking(0.0)(plain)
            emb = tf.keras.layers.Embedding(5, 2, mask_zero=True)(tf.constant([[1, 2, 0]]))
        assert np.asarray(masked._keras_mask).tolist() == [[True, True, False], [True, False, False]]
        assert np.asarray(emb._keras_mask).tolist() == [[True, True, False]]
        assert not hasattr(plain, "_keras_mask") and not hasattr(masked + 1.0, "_keras_mask")
    finally:
        tf.set_deferred_execution(prev)


def test_embedding_mask_zero_reaches_a_bidirectional_lstm_called_after_it():
    """``Embedding(mask_zero=True)`` called on its own, then ``Bidirectional(LSTM)``: the mask is on
    the embedding's output Tensor and the LSTMs skip the padding, as in one model call; a mask
    given explicitly wins; the output carries the mask on (``return_sequences``)."""
    ids = np.array([[3, 1, 4, 0, 0], [2, 5, 1, 5, 0]], np.int32)
    emb = keras.layers.Embedding(6, 3, mask_zero=True)
    bi = keras.layers.Bidirectional(keras.layers.LSTM(2, return_sequences=True))
    model = keras.Sequential([keras.Input((5,), dtype="int32"), emb, bi])
    e = emb(ids)
    np.testing.assert_array_equal(get_keras_mask(e).numpy(), ids > 0)
    out = bi(e)
    np.testing.assert_allclose(out.numpy(), np.asarray(model(ids)), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(get_keras_mask(out).numpy(), ids > 0)
    unmasked = bi(e, mask=np.ones((2, 5), bool))
    assert not np.allclose(unmasked.numpy(), out.numpy())


def test_a_cell_written_with_tf_ops_runs_inside_keras_rnn():
    """A user's RNN cell written with ``tf.*`` ops (tapejax Tensors over the loop's tracers) in
    ``keras.layers.RNN`` (Keras's ``backend.rnn``, a ``lax.scan``): values and gradients equal a
    Python loop of the same cell."""

    class Cell(keras.layers.Layer):
        state_size = 2

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], 2), name="w")
            self.u = self.add_weight(shape=(2, 2), name="u")

        def call(self, inputs, states):
            h = tf.tanh(tf.matmul(inputs, self.w) + tf.matmul(states[0], self.u))
            return h, [h]

    x = np.random.RandomState(4).randn(3, 4, 2).astype(np.float32)
    rnn = keras.layers.RNN(Cell(), return_sequences=True)
    with tf.GradientTape(persistent=True) as tape:
        seq = rnn(x)
        loss = tf.reduce_sum(seq ** 2)
    cell_w, cell_u = rnn.cell.w, rnn.cell.u
    with tf.GradientTape() as tape2:
        h = tf.zeros((3, 2))
        hs = []
        for t in range(4):
            h = tf.tanh(tf.matmul(x[:, t], cell_w) + tf.matmul(h, cell_u))
            hs.append(h)
        loss2 = tf.reduce_sum(tf.stack(hs, 1) ** 2)
    np.testing.assert_allclose(seq.numpy(), tf.stack(hs, 1).numpy(), rtol=1e-5, atol=1e-6)
    for g, w in zip(tape.gradient(loss, [cell_w, cell_u]), tape2.gradient(loss2, [cell_w, cell_u])):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-6)


def test_an_output_other_outputs_are_computed_from_is_a_tape_edge():
    """A functional model returning an inner layer's output with the predictions (Grad-CAM's
    ``Model(inputs, [conv.output, model.output])``): the predictions are computed from that output
    as in TF's graph, so their gradient w.r.t. it has a value (it was None: one op gave both); the
    chain through it gives the gradient of the whole call; an independent head is not cut."""
    inp = keras.Input((5,))
    h = keras.layers.Dense(4, activation="tanh", name="inner")(inp)
    out = keras.layers.Dense(3, name="head")(h)
    other = keras.layers.Dense(2, name="other")(inp)
    model = keras.Model(inp, [h, out, other])
    w_head = model.get_layer("head").kernel
    x = tf.constant(X)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        hv, preds, side = model(x)
        score = preds[:, 1]
    g_h = tape.gradient(score, hv)
    assert g_h is not None
    np.testing.assert_allclose(g_h.numpy(), np.tile(w_head.numpy()[:, 1], (8, 1)), rtol=1e-6)
    assert tape.gradient(side, hv) is None and tape.gradient(hv, preds) is None
    tv, ntv = values(model.trainable_variables), values(model.non_trainable_variables)

    def f(tv, x):
        return model.stateless_call(tv, ntv, x)[0][1][:, 1]

    want_tv, want_x = jax.grad(lambda tv, x: f(tv, x).sum(), argnums=(0, 1))(tv, jnp.asarray(X))
    got = tape.gradient(score, model.trainable_variables + [x])
    unused = {id(v) for v in model.get_layer("other").trainable_variables}
    for v, g, w in zip(model.trainable_variables + [x], got, list(want_tv) + [want_x]):
        if id(v) in unused:   # the other head: None, as in TF
            assert g is None
        else:
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(preds.numpy(), model.stateless_call(tv, ntv, jnp.asarray(X))[0][1], rtol=1e-5, atol=1e-6)
    def cuts(m):
        with tf.GradientTape() as tape:
            tape.watch(x)
            m(x)
            return [dict(n.static)["key"].cut for n in tape._nodes if n.prim.name.startswith("KerasCall")]

    assert sorted(cuts(model), key=str) == [(0,), None, None]   # the head's op takes the inner output
    assert cuts(keras.Model(inp, [out, other])) == [None, None]   # independent outputs: not cut


def test_an_embedding_call_that_prints_stays_one_op(capsys):
    """A call holding an effect (a ``tf.print`` of a computed value) keeps the one-op form, so
    the print runs once per execution of the call's op, not once per piece of a sparse plan; its
    table's gradient is then dense (the values of TF's IndexedSlices, densified)."""
    class Printing(keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.e = keras.layers.Embedding(5, 2)

        def call(self, x):
            h = self.e(x)
            tf.print("sum", tf.reduce_sum(h) * 0.0)
            return h

    layer = Printing()
    ids = np.array([1, 2, 1], np.int32)
    out = layer(ids)
    out.numpy()
    assert capsys.readouterr().err.count("sum") == 1   # (tf.print writes to stderr, as TF)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(layer(ids) ** 2)
    (g,) = tape.gradient(y, layer.trainable_variables)
    assert not isinstance(g, tf.IndexedSlices)
    table = layer.e.embeddings.numpy()
    want = np.zeros_like(table)
    np.add.at(want, ids, 2 * table[ids])
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-6)


def test_a_layer_of_tf_ops_builds_a_functional_model():
    """Keras's symbolic call of a layer whose ``call`` uses ``tf.matmul`` (TF's modules guide
    ``FlexibleDense`` in ``keras.Input`` -> ``Model``) gets arrays back, not tapejax Tensors."""
    class L(keras.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], 3), initializer="ones")

        def call(self, inputs):
            return tf.nn.relu(tf.matmul(inputs, self.w))

    inputs = keras.Input(shape=[2])
    m = keras.Model(inputs, L()(inputs))
    assert m.output.shape == (None, 3)
    assert m(tf.ones([1, 2])).numpy().tolist() == [[2.0, 2.0, 2.0]]


def _swapped_activation_program():
    """A model called under a tape, then guided backprop's ``layer.activation = guided_relu``
    and a saliency tool's linear last layer; the first tape's gradient is taken after the swap."""
    model = keras.Sequential([keras.layers.Dense(2, activation="relu"), keras.layers.Dense(1, activation="sigmoid")])
    model.build((None, 2))
    model.set_weights([np.array([[1.0, -1.0], [0.5, 2.0]], np.float32), np.array([0.0, -1.0], np.float32),
                       np.array([[1.0], [-2.0]], np.float32), np.array([0.5], np.float32)])
    x = tf.constant([[1.0, 1.0], [-1.0, 0.5]])

    @tf.custom_gradient
    def guided_relu(z):
        def grad(dy):
            return tf.cast(dy > 0, tf.float32) * tf.cast(z > 0, tf.float32) * dy
        return tf.nn.relu(z), grad

    with tf.GradientTape() as before:
        before.watch(x)
        p = model(x)
    model.layers[0].activation = guided_relu
    model.layers[1].activation = keras.activations.linear
    with tf.GradientTape() as after:
        after.watch(x)
        z = model(x)
    return p, before.gradient(p, x), z, after.gradient(z, x), model(x)


@pytest.mark.parametrize("deferred", [True, False])
def test_a_swapped_activation_is_a_new_call_and_a_recorded_call_keeps_the_old_one(deferred):
    """TF's eager call reads ``layer.activation`` at each call, and its tape keeps what it recorded:
    the swap is seen by the next call (not a stale compiled op or plan), while the value pending
    from before it and the first tape's gradient are the old model's (TF 2.21's numbers)."""
    prev = tf.set_deferred_execution(deferred), tf.set_speculative_updates(deferred)
    try:
        p, g_before, z, g_after, again = _swapped_activation_program()
    finally:
        tf.set_speculative_updates(prev[1])
        tf.set_deferred_execution(prev[0])
    np.testing.assert_allclose(p.numpy(), [[0.8807971], [0.18242551]], rtol=1e-6)
    np.testing.assert_allclose(g_before.numpy(), [[0.10499357, 0.05249679], [0.2982929, -0.5965858]], rtol=1e-5)
    np.testing.assert_allclose(z.numpy(), [[2.0], [-1.5]])
    np.testing.assert_allclose(g_after.numpy(), [[1.0, 0.5], [0.0, 0.0]])
    np.testing.assert_allclose(again.numpy(), [[2.0], [-1.5]])


def test_a_layers_activation_is_the_tf_keras_function_so_guided_backprop_finds_its_relus():
    """``Dense(activation="relu").activation`` is ``tf.keras.activations.relu`` (tf_keras' identity;
    it was Keras's unwrapped function), so guided backprop's ``layer.activation ==
    tf.keras.activations.relu`` loop replaces the ReLUs by a ``custom_gradient`` one: TF 2.21's
    guided gradient.  The config still names ``"relu"``; a clone holds the same function."""
    model = keras.Sequential([keras.layers.Dense(2, activation="relu"), keras.layers.Dense(1, activation="sigmoid")])
    model.build((None, 2))
    model.set_weights([np.array([[1.0, -1.0], [0.5, 2.0]], np.float32), np.array([0.0, -1.0], np.float32),
                       np.array([[1.0], [-2.0]], np.float32), np.array([0.5], np.float32)])
    assert model.layers[1].activation is keras.activations.sigmoid and K3.activations.get("tanh") is keras.activations.tanh
    assert model.layers[0].get_config()["activation"] == "relu"
    assert keras.models.clone_model(model).layers[0].activation is keras.activations.relu

    @tf.custom_gradient
    def guided_relu(z):
        def grad(dy):
            return tf.cast(dy > 0, tf.float32) * tf.cast(z > 0, tf.float32) * dy
        return tf.nn.relu(z), grad

    swapped = []
    for layer in model.layers:
        if hasattr(layer, "activation") and layer.activation == tf.keras.activations.relu:
            layer.activation = guided_relu
            swapped.append(layer.name)
    x = tf.constant([[1.0, 1.0], [-1.0, 0.5]])
    with tf.GradientTape() as tape:
        tape.watch(x)
        p = model(x)
    assert len(swapped) == 1
    np.testing.assert_allclose(tape.gradient(p, x).numpy(), [[0.10499357, 0.05249679], [0.0, 0.0]], rtol=1e-5)
