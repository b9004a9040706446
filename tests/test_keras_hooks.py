"""tapejax/keras/hooks.py: metric results as Tensors; Keras models and optimizers in
tapejax.train.Checkpoint by their attribute paths."""
import os

import numpy as np
import pytest

import tapejax as tf

keras = tf.keras
import keras as K3  # noqa: E402

RS = np.random.RandomState(0)
X = RS.randn(8, 5).astype(np.float32)
Y = RS.randint(0, 3, size=8).astype(np.int32)


def test_metric_results_are_tensors_outside_keras_scopes():
    acc = keras.metrics.SparseCategoricalAccuracy()
    acc.update_state(Y, X[:, :3])
    r = acc.result()
    assert isinstance(r, tf.Tensor)
    np.testing.assert_allclose(r.numpy(), np.mean(np.argmax(X[:, :3], 1) == Y))

    class Custom(K3.metrics.Metric):   # a subclass defined after tapejax.keras was loaded
        def __init__(self):
            super().__init__()
            self.total = self.add_variable(shape=(), initializer="zeros")

        def update_state(self, x):
            self.total.assign_add(K3.ops.sum(x))

        def result(self):
            return self.total.value * 2

    c = Custom()
    c.update_state(np.ones(3, np.float32))
    assert isinstance(c.result(), tf.Tensor) and float(c.result()) == 6.0
    inside = c.stateless_result([np.asarray(1.0, np.float32)])   # Keras's own scope: a JAX array
    assert not isinstance(inside, tf.Tensor)


def _model():
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4), keras.layers.BatchNormalization(),
                              keras.layers.Dense(3)])
    return model


def _train(model, opt, steps=2):
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = loss_fn(Y, model(X, training=True))
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))


def test_checkpoint_keys_are_attribute_paths(tmp_path):
    model, opt = _model(), tf.keras.optimizers.Adam(0.1)
    _train(model, opt)
    ckpt = tf.train.Checkpoint(model=model, optimizer=opt)
    path = ckpt.save(os.path.join(tmp_path, "ckpt"))
    keys = {name for name, _ in tf.train.list_variables(path)}
    # a child name is Keras's weights-file path ("layers/dense/vars/0"), its "/" escaped as TF does
    assert "model/layers.Sdense.Svars.S0/.ATTRIBUTES/VARIABLE_VALUE" in keys
    assert "model/layers.Sbatch_normalization.Svars.S3/.ATTRIBUTES/VARIABLE_VALUE" in keys
    # tapejax's tf.keras.optimizers.Adam keeps tf_keras' new layout: its state under _variables
    assert "optimizer/_variables/1/.ATTRIBUTES/VARIABLE_VALUE" in keys


def test_checkpoint_restores_into_a_model_built_elsewhere(tmp_path):
    model, opt = _model(), tf.keras.optimizers.Adam(0.1)
    kmodel, kopt = _model(), K3.optimizers.Adam(0.1)
    _train(model, opt)
    _train(kmodel, kopt)
    path = tf.train.Checkpoint(model=model, optimizer=opt, kmodel=kmodel, kopt=kopt).save(
        os.path.join(tmp_path, "ckpt"))
    keras.layers.Dense(7)   # other layers made first: the auto names differ from the saved model's
    model2, opt2 = _model(), tf.keras.optimizers.Adam(0.1)
    kmodel2, kopt2 = _model(), K3.optimizers.Adam(0.1)
    kopt2.build(kmodel2.trainable_variables)
    assert model2.layers[0].name != model.layers[0].name
    status = tf.train.Checkpoint(model=model2, optimizer=opt2, kmodel=kmodel2, kopt=kopt2).restore(path)
    status.assert_existing_objects_matched()   # (opt2's state: when its first update makes it)
    for a, b in zip(model.weights + kmodel.weights + kopt.variables, model2.weights + kmodel2.weights + kopt2.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    _train(model, opt, 1)
    _train(model2, opt2, 1)   # the optimizer's slots came back too: the next step is the same
    status.assert_consumed()
    for a, b in zip(model.weights, model2.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


def test_restore_into_an_unbuilt_layer_applies_when_its_build_makes_the_weights(tmp_path):
    """TF's deferred restoration into Keras objects not built yet: the weights ``build`` makes get
    the checkpoint's values at the end of the build (``Layer._post_build``), before the first call
    reads them, whether the build is the layer's first call, a subclassed model's (its sublayer
    built inside Keras's symbolic build) or an explicit ``build``: 2 + 3 + 1 = 6 at once."""
    x = np.ones((1, 2), np.float32)
    kernel, bias = np.array([[2.0], [3.0]], np.float32), np.array([1.0], np.float32)
    saved = keras.layers.Dense(1)
    saved(x)
    saved.set_weights([kernel, bias])
    path = tf.train.Checkpoint(model=saved).save(os.path.join(tmp_path, "ckpt"))

    fresh = keras.layers.Dense(1)
    status = tf.train.Checkpoint(model=fresh).restore(path)
    np.testing.assert_array_equal(fresh(x).numpy(), [[6.0]])   # (the first call: no status check before)
    np.testing.assert_array_equal(fresh.kernel.numpy(), kernel)
    status.assert_consumed()

    fresh = keras.layers.Dense(1)
    tf.train.Checkpoint(model=fresh).restore(path)
    fresh.build((None, 2))
    np.testing.assert_array_equal(fresh.bias.numpy(), bias)

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(1)

        def call(self, inputs):
            return self.d(inputs)

    net = Net()
    net(x)
    net.set_weights([kernel, bias])
    net.save_weights(os.path.join(tmp_path, "w"))
    fresh_net = Net()
    status = fresh_net.load_weights(os.path.join(tmp_path, "w"))
    np.testing.assert_array_equal(fresh_net(x).numpy(), [[6.0]])
    status.assert_consumed()


def test_metric_update_on_tensors_is_one_op_with_keras_values():
    from tapejax.keras import calls
    a, b = keras.metrics.SparseCategoricalAccuracy(), keras.metrics.SparseCategoricalAccuracy()
    m, n = keras.metrics.Mean(), keras.metrics.Mean()
    for i in range(0, 8, 4):
        a.update_state(tf.constant(Y[i:i + 4]), tf.constant(X[i:i + 4, :3]))   # Tensors: one op
        b.update_state(Y[i:i + 4], X[i:i + 4, :3])                            # NumPy: Keras's own
        m.update_state(tf.constant(X[i:i + 4]), sample_weight=tf.constant(np.arange(4.0, dtype=np.float32)))
        n.update_state(X[i:i + 4], sample_weight=np.arange(4.0, dtype=np.float32))
    for p, q in ((a, b), (m, n)):
        np.testing.assert_allclose(p.result().numpy(), q.result().numpy(), rtol=1e-6)
        for v, w in zip(p.variables, q.variables):
            np.testing.assert_allclose(v.numpy(), w.numpy(), rtol=1e-6)
    keys = [k for k, _ in list(calls._PLANS._data)]
    targets = [k.target._ref() if k.target._ref is not None else k.target._strong for k in keys]
    assert any(t is a for t in targets) and not any(t is b for t in targets)


def test_a_metric_whose_result_is_its_variable_trains_under_fit():
    """``result()`` returning the metric's variable itself (TF reads it): Keras's JAX trainer got the
    variable among its traced outputs ("Triggering __jax_array__() during abstractification")."""

    class MaxError(K3.metrics.Metric):
        def __init__(self, name="max_error", **kwargs):
            super().__init__(name=name, **kwargs)
            self.worst = self.add_variable(shape=(), initializer="zeros", name="worst")

        def update_state(self, y_true, y_pred, sample_weight=None):
            self.worst.assign(K3.ops.maximum(self.worst, K3.ops.max(K3.ops.abs(y_true - y_pred))))

        def result(self):
            return self.worst

    model = K3.Sequential([K3.Input((2,)), K3.layers.Dense(1, kernel_initializer="ones")])
    model.compile(optimizer=K3.optimizers.SGD(0.0), loss="mse", metrics=[MaxError()])
    x, y = np.array([[1.0, 0.0], [2.0, 1.0]], np.float32), np.zeros((2, 1), np.float32)
    hist = model.fit(x, y, epochs=1, batch_size=2, verbose=0)
    assert hist.history["max_error"] == [3.0]
    assert model.evaluate(x, y, verbose=0, return_dict=True)["max_error"] == 3.0


def _sgd_steps(compiled, **kwargs):
    """A Keras 3 SGD(0.1) on one variable, stepped by a tape with gradients 1, 3, 5, ...: the
    variable, ``iterations`` and whether it is a Tensor after each step; the value after
    ``finalize_variable_values``."""
    v = K3.Variable(1.0)
    opt = K3.optimizers.SGD(0.1, **kwargs)

    def step(g):
        with tf.GradientTape() as tape:
            loss = v * g
        opt.apply_gradients([(tape.gradient(loss, v), v)])
    step = tf.function(step) if compiled else step
    seen = []
    for g in (1.0, 3.0, 5.0, 7.0, 9.0, 11.0):
        step(tf.constant(g))
        it = opt.iterations
        seen.append((round(float(v.numpy()), 5), int(it), tf.is_tensor(it)))
    opt.finalize_variable_values([v])
    return seen, round(float(v.numpy()), 5)


def test_keras3_optimizer_accumulates_gradients_on_the_tape():
    """``gradient_accumulation_steps`` in a tape loop (it raised: ``jax.lax.cond`` on a tapejax
    predicate): every second step applies the two gradients' mean, and ``iterations`` is the update
    count as a Tensor, eagerly and compiled (TF 2.21's Keras 3 values)."""
    want = ([(1.0, 0, True), (0.8, 1, True), (0.8, 1, True), (0.2, 2, True), (0.2, 2, True), (-0.8, 3, True)], -0.8)
    for compiled in (False, True):
        assert _sgd_steps(compiled, gradient_accumulation_steps=2) == want


def test_keras3_optimizer_ema_overwrites_on_its_frequency_on_the_tape():
    """``use_ema`` with ``ema_overwrite_frequency`` in a tape loop (it raised: ``.astype`` on a
    tapejax Tensor), alone and with accumulation (there the JAX array ``iterations`` made a
    ``jax.lax.cond`` that ran the overwrite every step): TF 2.21's Keras 3 values."""
    ema = {"use_ema": True, "ema_momentum": 0.5}
    for compiled in (False, True):
        assert _sgd_steps(compiled, ema_overwrite_frequency=2, **ema) == (
            [(0.9, 1, True), (0.75, 2, True), (0.25, 3, True), (0.025, 4, True), (-0.875, 5, True), (-1.2, 6, True)],
            -1.2)
        assert _sgd_steps(compiled, ema_overwrite_frequency=3, gradient_accumulation_steps=2, **ema) == (
            [(1.0, 0, True), (0.8, 1, True), (0.8, 1, True), (0.2, 2, True), (0.35, 2, True), (-0.15, 3, True)],
            -0.15)


def test_keras3_optimizer_inside_keras_scopes_stays_keras_jax():
    """Under ``fit`` (a Keras scope) the accumulating optimizer is Keras's JAX one: it trains, and
    ``iterations`` read inside a stateless scope is a JAX value, not a Tensor."""
    model = K3.Sequential([K3.Input((5,)), K3.layers.Dense(1)])
    model.compile(optimizer=K3.optimizers.SGD(0.1, gradient_accumulation_steps=2), loss="mse")
    model.fit(X, X[:, :1], batch_size=2, epochs=1, verbose=0)
    assert int(model.optimizer.iterations) == 2
    from keras.src.backend.common.stateless_scope import StatelessScope
    with StatelessScope():
        assert not isinstance(model.optimizer.iterations, tf.Tensor)


def test_loss_scale_optimizer_in_a_tape_loop():
    """Keras 3's ``LossScaleOptimizer`` in a tape loop: ``scale_loss`` is on the tape (it gave a
    JAX array: no gradient), and ``apply_gradients`` unscales, skips a non-finite step halving the
    scale and doubles it after ``dynamic_growth_steps`` finite ones (its conds on JAX-array
    predicates traced both branches' assigns), eagerly and compiled: TF 2.21's Keras 3 values."""
    want = [(0.9, 4.0, 1, 1), (0.9, 2.0, 0, 1), (0.7, 2.0, 1, 2), (0.4, 4.0, 0, 3), (0.3, 4.0, 1, 4)]
    for compiled in (False, True):
        v = K3.Variable(1.0)
        opt = K3.optimizers.LossScaleOptimizer(K3.optimizers.SGD(0.1), initial_scale=4.0, dynamic_growth_steps=2)

        def step(g):
            with tf.GradientTape() as tape:
                scaled = opt.scale_loss(v * g)
            opt.apply_gradients([(tape.gradient(scaled, v), v)])
            return scaled
        step = tf.function(step) if compiled else step
        seen = []
        for g in (1.0, float("inf"), 2.0, 3.0, 1.0):
            scaled = step(tf.constant(g))
            assert isinstance(scaled, tf.Tensor)
            seen.append((round(float(v.numpy()), 5), float(opt.dynamic_scale), int(opt.step_counter),
                         int(opt.iterations)))
        assert seen == want


def test_keras_cond_on_jax_values_outside_scopes_stays_jax():
    """Keras's ``cond`` on a concrete JAX predicate outside a Keras scope runs one branch (as TF's
    eager cond), and raw JAX branches keep giving JAX arrays."""
    import jax.numpy as jnp
    out = K3.ops.cond(jnp.asarray(True), lambda: jnp.ones(2), lambda: jnp.zeros(2))
    assert not isinstance(out, tf.Tensor)
    np.testing.assert_array_equal(np.asarray(out), [1.0, 1.0])
    ran = []
    K3.ops.cond(jnp.asarray(False), lambda: ran.append("true"), lambda: ran.append("false"))
    assert ran == ["false"]


def test_tf_keras_checkpoint_names_find_layers_and_variables():
    """``tf_keras_lookup``: ``layer_with_weights-N`` counts only layers with weights (Dropout and
    the Input layer do not shift it), attribute names find variables and sublayers, other names
    and weightless ``layer-N`` find nothing."""
    from tapejax.keras.hooks import tf_keras_lookup
    from tapejax.train import trackable
    m = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4), keras.layers.Dropout(0.5),
                          keras.layers.Dense(2)])
    first, second = m.layers[0], m.layers[2]
    assert tf_keras_lookup(m, "layer_with_weights-0") is first
    assert tf_keras_lookup(m, "layer_with_weights-1") is second
    assert tf_keras_lookup(m, "layer_with_weights-2") is None and tf_keras_lookup(m, "layer-1") is None
    assert tf_keras_lookup(first, "kernel") is first.kernel and tf_keras_lookup(first, "name") is None
    assert trackable.lookup(m, "layer_with_weights-1") is second   # (through the registered kind)
    rnn = keras.layers.LSTM(2)
    rnn.build((1, 3, 2))
    assert tf_keras_lookup(rnn, "cell") is rnn.cell and tf_keras_lookup(rnn.cell, "recurrent_kernel") is rnn.cell.recurrent_kernel


def test_register_trackable_checks_lookup():
    with pytest.raises(TypeError, match="lookup"):
        tf.train.register_trackable(type("Mine", (), {}), children=lambda o: [], lookup=5)


def test_built_in_layers_compute_mask_gives_tensors_outside_keras_scopes():
    """``Embedding(mask_zero=True).compute_mask(ids)`` and ``Masking``'s are tapejax Tensors (tf_keras
    gives ``tf.Tensor`` s; Keras 3's are computed by ``keras.ops``: JAX arrays, with no ``.numpy()``),
    eagerly and in a ``tapejax.function``; a mask-consuming layer still reads the mask inside its
    call, and the RNN's outputs carry theirs."""
    ids = np.array([[4, 7, 0], [3, 0, 0]], np.int32)
    emb = keras.layers.Embedding(12, 4, mask_zero=True)
    m = emb.compute_mask(ids)
    assert isinstance(m, tf.Tensor)
    np.testing.assert_array_equal(m.numpy(), ids > 0)
    traced = tf.function(lambda i: emb.compute_mask(i))(tf.constant(ids))
    np.testing.assert_array_equal(traced.numpy(), ids > 0)
    x = np.zeros((2, 3, 2), np.float32)
    x[0, 0] = 1.0
    masking = keras.layers.Masking(0.0)
    assert isinstance(masking.compute_mask(x), tf.Tensor)
    np.testing.assert_array_equal(masking.compute_mask(x).numpy(), [[True, False, False], [False] * 3])
    out = keras.layers.GRU(2, return_sequences=True)(emb(ids))
    np.testing.assert_array_equal(out[0, 1].numpy(), out[0, 2].numpy())   # the padded step repeats


def test_save_weights_to_a_prefix_writes_a_checkpoint_load_weights_reads(tmp_path):
    """tf_keras' TF-format weights: ``save_weights(prefix)`` writes a checkpoint rooted at the model
    and records it for ``latest_checkpoint``; ``load_weights`` returns the status; ``.weights.h5``
    stays Keras's (None)."""
    def make():
        return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    a, b = make(), make()
    prefix = str(tmp_path / "ckpts" / "w")
    assert a.save_weights(prefix) is None
    assert tf.train.latest_checkpoint(str(tmp_path / "ckpts")) == prefix
    status = b.load_weights(prefix)
    status.assert_consumed()
    for x, y in zip(a.weights, b.weights):
        np.testing.assert_array_equal(x.numpy(), y.numpy())
    a.save_weights(str(tmp_path / "w.weights.h5"))
    assert make().load_weights(str(tmp_path / "w.weights.h5")) is None


def test_model_reset_states_resets_the_stateful_layers_only():
    """tf_keras' ``Model.reset_states`` (Keras 3 has none): each stateful layer's states are zeroed,
    a non-stateful RNN's call is unaffected, and a model without stateful layers accepts the call."""
    inp = keras.Input(batch_shape=(2, 3, 2))
    stateful = keras.layers.GRU(3, stateful=True, return_sequences=True)
    model = keras.Model(inp, keras.layers.LSTM(2)(stateful(inp)))
    x = np.random.RandomState(0).randn(2, 3, 2).astype(np.float32)
    first = model(x).numpy()
    assert np.asarray(stateful.states[0]).any()
    assert not np.allclose(model(x).numpy(), first)   # the carried state changes the answer
    model.reset_states()
    assert not np.asarray(stateful.states[0]).any()
    np.testing.assert_allclose(model(x).numpy(), first, rtol=1e-6)
    keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]).reset_states()


def test_model_checkpoint_with_weights_only_to_a_prefix_writes_tf_keras_checkpoints(tmp_path):
    """TF's "Save and load models" tutorial: ``ModelCheckpoint("training_1/cp.ckpt",
    save_weights_only=True)`` saves each epoch by ``save_weights(prefix)`` (TF 2.21 with tf_keras:
    ``latest_checkpoint`` is ``.../cp.ckpt``; Keras 3 refused the path with a ValueError); a
    ``{epoch:02d}`` pattern and a positional ``save_weights_only`` work too; a ``.keras`` path
    saves the whole model as before."""
    def make():
        inp = keras.Input((5,))
        model = keras.Model(inp, keras.layers.Dense(3)(inp))
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    path = str(tmp_path / "training_1" / "cp.ckpt")
    model = make()
    pattern = str(tmp_path / "each" / "cp-{epoch:02d}")
    callbacks = [keras.callbacks.ModelCheckpoint(filepath=path, save_weights_only=True),
                 keras.callbacks.ModelCheckpoint(pattern, "loss", 0, False, True)]
    model.fit(X, Y, batch_size=4, epochs=2, shuffle=False, callbacks=callbacks, verbose=0)
    assert tf.train.latest_checkpoint(str(tmp_path / "training_1")) == path
    assert tf.train.latest_checkpoint(str(tmp_path / "each")) == str(tmp_path / "each" / "cp-02")
    fresh = make()
    fresh.load_weights(path)
    for a, b in zip(model.get_weights(), fresh.get_weights()):
        np.testing.assert_array_equal(a, b)
    whole = keras.callbacks.ModelCheckpoint(str(tmp_path / "m.keras"))
    assert whole.filepath.endswith("m.keras") and not whole.save_weights_only


def test_a_metric_result_dict_keeps_its_order():
    """A metric whose ``result()`` is a dict (Keras's ``compile_metrics``: each output's metrics,
    then the weighted ones) keeps its keys' order; JAX's tree_map would sort them."""
    class Pair(K3.metrics.Metric):
        def __init__(self):
            super().__init__()
            self.total = self.add_variable(shape=(), initializer="zeros")

        def update_state(self, x):
            self.total.assign_add(K3.ops.sum(x))

        def result(self):
            return {"zeta": self.total, "alpha": self.total * 2.0}

    m = Pair()
    m.update_state(np.ones(3, np.float32))
    r = m.result()
    assert list(r) == ["zeta", "alpha"] and float(r["alpha"]) == 6.0
