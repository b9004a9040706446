"""``tf.keras.mixed_precision``: the mixed policy and ``LossScaleOptimizer`` in TF's custom loop,
under TensorFlow 2.21 + tf_keras and tapejax (``tapejax.optimizers.loss_scale``).

The loss-scale cases compare every step's loss, the scale and counter (a skipped step halves
the scale, ``dynamic_growth_steps`` finite steps double it), ``iterations`` (TF counts skipped
steps) and the weights and slots; eagerly and inside ``tf.function``, with deferral on and
off (``modes=True``).  The policy cases run TF's mixed-precision guide loop on a Keras model:
float16 compute, float32 Variables, within float16 tolerances.
"""
import os
import tempfile

import numpy as np
import pytest

from .harness import keras_init, parity, raises

TOL = dict(rtol=2e-5, atol=2e-6)
F16 = dict(rtol=2e-3, atol=2e-3)


def _data(n=8, d=3, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randn(n, 1).astype(np.float32)


def _int(v):
    """An integer Variable's value as a Python int (TF's are int64; tapejax's int32 without x64)."""
    return None if v is None else int(v.numpy())


def _state(opt):
    return opt.loss_scale, _int(opt.dynamic_counter), _int(opt.iterations)


def _values(variables):
    return [_int(v) if v.dtype.is_integer else v.numpy() for v in variables]


def _loop(tf, opt, w, x, y, steps, blowup, compiled=False):
    """TF's custom mixed-precision loop on ``mean((x @ w - y)**2)``; the loss is multiplied by
    ``inf`` at the steps in ``blowup`` (a forced overflow)."""
    def step(k):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2) * k
            scaled = opt.get_scaled_loss(loss)
        grads = opt.get_unscaled_gradients(tape.gradient(scaled, [w]))
        opt.apply_gradients(zip(grads, [w]))
        return loss
    if compiled:
        step = tf.function(step)
    out = []
    for s in range(steps):
        loss = step(tf.constant(np.inf if s in blowup else 1.0))
        out.append((loss, w.numpy(), *_state(opt)))
    return out


@parity(modes=True, **TOL)
def test_legacy_adam_skips_overflowing_steps_halves_and_grows_the_scale(tf):
    """Around a legacy Adam, growth every 2 finite steps: steps 0 and 3 overflow (skipped, the
    scale halves, ``iterations`` still counts them: Adam's bias correction sees them)."""
    x, y = _data()
    w = tf.Variable(np.random.RandomState(1).randn(3, 1).astype(np.float32))
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.Adam(0.1),
                                                      dynamic_growth_steps=2)
    out = _loop(tf, opt, w, x, y, 7, (0, 3))
    return out, w, _values(opt.variables()), type(opt).__name__


@parity(modes=True, **TOL)
def test_new_sgd_momentum_in_a_compiled_step(tf):
    """Around a new SGD with momentum (``LossScaleOptimizerV3``), inside ``tf.function``: the
    skip is a staged decision (one trace); the momentum slot is made by the skipped first step."""
    x, y = _data(seed=2)
    w = tf.Variable(np.random.RandomState(3).randn(3, 1).astype(np.float32))
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.05, momentum=0.9),
                                                      initial_scale=8.0, dynamic_growth_steps=3)
    out = _loop(tf, opt, w, x, y, 8, (0, 4), compiled=True)
    return out, w, type(opt).__name__


@parity(modes=True, **TOL)
def test_legacy_sgd_in_a_compiled_step_makes_its_slots_on_a_skipped_first_step(tf):
    """A legacy SGD with momentum inside ``tf.function``: TF's ``cond`` traces the update, so the
    slot exists after the skipped first step (and is zero)."""
    x, y = _data(seed=4)
    w = tf.Variable(np.random.RandomState(5).randn(3, 1).astype(np.float32))
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.SGD(0.05, momentum=0.5),
                                                      dynamic_growth_steps=2)
    out = _loop(tf, opt, w, x, y, 5, (0, 1), compiled=True)
    return out, w, _values(opt.variables())


@parity(modes=True, **TOL)
def test_the_scale_never_halves_below_one_and_never_doubles_to_inf(tf):
    """Halving stops at 1; a double that overflows float32 is not taken (the counter restarts)."""
    w = tf.Variable([1.0, -2.0])
    low = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.SGD(0.1), initial_scale=3.0)
    high = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.SGD(0.1),
                                                       initial_scale=2.0 ** 127, dynamic_growth_steps=1)
    out = []
    for k in range(3):
        g = low.get_unscaled_gradients([tf.constant([np.nan, 1.0])])
        low.get_scaled_loss(tf.constant(1.0))
        low.apply_gradients(zip(g, [w]))
        out.append(_state(low))
    for k in range(2):
        high.get_scaled_loss(tf.constant(1.0))
        g = high.get_unscaled_gradients([tf.constant([2.0 ** 127, 1.0])])
        high.apply_gradients(zip(g, [w]))
        out.append((w.numpy(), *_state(high)))
    return out


@parity(modes=True, **TOL)
def test_sparse_and_none_gradients(tf):
    """``get_unscaled_gradients`` keeps None and an ``IndexedSlices`` (of a gather): the
    Variable of the None is untouched, the rows of the embedding are updated; an Inf in the
    slices' values skips the step."""
    emb = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0)
    unused = tf.Variable([1.0])
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.Adagrad(0.1))
    out = []
    for k in (1.0, np.inf, 1.0):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(emb, [0, 2, 2]) ** 2) * k
            scaled = opt.get_scaled_loss(loss)
        grads = opt.get_unscaled_gradients(tape.gradient(scaled, [emb, unused]))
        out.append((type(grads[0]).__name__, grads[1] is None, tf.convert_to_tensor(grads[0])))
        opt.apply_gradients(zip(grads, [emb, unused]))
        out.append((emb.numpy(), *_state(opt)))
    return out, unused


@parity(modes=True, **TOL)
def test_fixed_scale_applies_every_step(tf):
    """``dynamic=False``: the scale is ``initial_scale`` for ever, no counter, and a NaN gradient
    is applied (TF does not check it)."""
    w = tf.Variable([1.0, 2.0])
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.SGD(0.5), dynamic=False,
                                                      initial_scale=128)
    out = [opt.dynamic, opt.dynamic_counter, opt.initial_scale, opt.dynamic_growth_steps]
    with tf.GradientTape() as tape:
        scaled = opt.get_scaled_loss(tf.reduce_sum(w * w))
    grads = opt.get_unscaled_gradients(tape.gradient(scaled, [w]))
    opt.apply_gradients(zip(grads, [w]))
    out.append((scaled, grads, w.numpy(), opt.loss_scale, _int(opt.iterations)))
    opt.apply_gradients([(tf.constant([np.nan, 1.0]), w)])
    return out, w.numpy(), opt.loss_scale


@parity(modes=True, **TOL)
def test_minimize_scales_and_unscales(tf):
    """``minimize`` with a callable loss: the scaled loss's gradients are unscaled and the scale's
    counter counts the step; a Tensor loss with its tape too."""
    w = tf.Variable(1.0)
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.SGD(0.25), initial_scale=4.0,
                                                      dynamic_growth_steps=2)
    opt.minimize(lambda: w ** 2, [w])
    out = [(w.numpy(), *_state(opt))]
    with tf.GradientTape() as tape:
        loss = w ** 2
    opt.minimize(loss, [w], tape=tape)
    out.append((w.numpy(), *_state(opt)))
    f = opt.get_scaled_loss(lambda: w * 3.0)
    return out, f()


@parity(**TOL)
def test_scaled_loss_dtypes_and_unscaled_gradient_dtypes(tf):
    """``get_scaled_loss`` casts the scale to the loss's dtype (float16 overflows to inf at
    65536); ``get_unscaled_gradients`` multiplies by ``1/scale`` cast to each gradient's dtype;
    a Python number has no dtype (AttributeError, as TF)."""
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
    scaled = [opt.get_scaled_loss(tf.constant(2.0, dtype)) for dtype in (tf.float32, tf.float16)]
    g = opt.get_unscaled_gradients([tf.constant([32768.0, 1.0]), tf.constant([32768.0, 4.0], tf.float16), None])
    return scaled, g, opt.loss_scale, raises(opt.get_scaled_loss, 2.0)   # (a Python float: AttributeError, as TF)


@parity
def test_argument_errors(tf):
    """TF's errors: not an optimizer (TypeError), ``dynamic`` not a bool (TypeError), a fixed
    scale without ``initial_scale`` or with growth steps (ValueError), non-numbers (ValueError),
    wrapping a loss-scale optimizer (TypeError) or an optimizer wrapped already (ValueError);
    TF's accepted values and its conversions (``int(1.5)``)."""
    LSO = tf.keras.mixed_precision.LossScaleOptimizer
    sgd = tf.keras.optimizers.legacy.SGD
    wrapped = sgd()
    LSO(wrapped)
    ok = LSO(sgd(), initial_scale=np.float32(4.0), dynamic_growth_steps=1.5)
    return (raises(LSO, 3), raises(LSO, sgd(), "dynamic"), raises(LSO, sgd(), dynamic=False),
            raises(LSO, sgd(), dynamic=False, initial_scale=8, dynamic_growth_steps=3),
            raises(LSO, sgd(), initial_scale="a"), raises(LSO, sgd(), dynamic_growth_steps="a"),
            raises(LSO, LSO(sgd())), raises(LSO, LSO(tf.keras.optimizers.Adam())), raises(LSO, wrapped),
            ok.initial_scale, ok.dynamic_growth_steps, ok.loss_scale, LSO(sgd(), initial_scale=0.0).loss_scale,
            isinstance(ok, LSO), isinstance(LSO(tf.keras.optimizers.Adam()), LSO))


@parity
def test_hyperparameters_are_the_inner_optimizers(tf):
    """The legacy class forwards the inner optimizer's Variable hyperparameters (get and set) and
    ``learning_rate`` / ``lr``; a plain attribute (``epsilon``) is not forwarded; the new class
    forwards only ``learning_rate``."""
    inner = tf.keras.optimizers.legacy.Adam(0.01, beta_1=0.8, epsilon=1e-5)
    opt = tf.keras.mixed_precision.LossScaleOptimizer(inner)
    before = (opt.beta_1.numpy(), opt.learning_rate.numpy(), opt.lr.numpy())
    opt.beta_1 = 0.7
    opt.learning_rate = 0.5
    new = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(0.01))
    new.learning_rate = 0.25
    return (before, inner.beta_1.numpy(), inner.learning_rate.numpy(), opt.inner_optimizer is inner,
            raises(lambda: opt.epsilon), raises(lambda: opt.nesterov), new.learning_rate.numpy(),
            new.inner_optimizer.learning_rate.numpy(), raises(lambda: new.beta_1), _int(opt.iterations), opt.clipnorm)


@parity
def test_config_and_serialization(tf):
    """``get_config`` (the inner optimizer serialized), ``from_config`` and
    ``tf.keras.optimizers.serialize`` / ``deserialize`` of both classes."""
    out = []
    for inner in (tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5), tf.keras.optimizers.legacy.Adam(0.1)):
        opt = tf.keras.mixed_precision.LossScaleOptimizer(inner, initial_scale=64, dynamic_growth_steps=10)
        cfg = opt.get_config()
        back = type(opt).from_config(cfg)
        # (the inner optimizer's own config is the inner optimizer's business: its module, class
        # and learning rate here; tf_keras writes class names in lower case ('sgd') once Keras 3 is
        # imported in the process, as the harness does, and 'SGD' alone: compared without case)
        inner_cfg = cfg["inner_optimizer"]
        cfg = {**cfg, "inner_optimizer": (inner_cfg["module"], inner_cfg["class_name"].lower(),
                                          inner_cfg["config"]["learning_rate"], inner_cfg["registered_name"])}
        ser = tf.keras.optimizers.serialize(opt)
        again = tf.keras.optimizers.deserialize(ser)
        out.append((cfg, type(back).__name__, back.initial_scale, back.dynamic_growth_steps,
                    ser["class_name"].lower(), ser["registered_name"], type(again).__name__,
                    type(again.inner_optimizer).__name__, again.inner_optimizer.learning_rate.numpy()))
    fixed = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.SGD(), dynamic=False,
                                                        initial_scale=8)
    return out, fixed.get_config()["dynamic"], fixed.get_config()["dynamic_growth_steps"]


@parity(modes=True, **TOL)
def test_checkpoint_keys_and_restore_of_the_scale_and_counter(tf):
    """``tf.train.Checkpoint`` writes the scale and counter under ``opt/loss_scale/...`` beside the
    inner optimizer's keys; a restore into a new loss-scale optimizer brings them back, and the
    next step continues from them (a skipped step halves the restored scale)."""
    x, y = _data(seed=6)
    w = tf.Variable(np.ones((3, 1), np.float32))
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.Adam(0.05),
                                                      initial_scale=1024.0, dynamic_growth_steps=3)
    _loop(tf, opt, w, x, y, 4, (0,))
    with tempfile.TemporaryDirectory() as d:
        path = tf.train.Checkpoint(opt=opt, w=w).save(os.path.join(d, "ckpt"))
        keys = sorted(k for k, _ in tf.train.list_variables(path) if not k.startswith("_"))
        w2 = tf.Variable(np.zeros((3, 1), np.float32))
        opt2 = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.Adam(0.05),
                                                           dynamic_growth_steps=3)
        tf.train.Checkpoint(opt=opt2, w=w2).restore(path)
        restored = (w2.numpy(), *_state(opt2))
        after = _loop(tf, opt2, w2, x, y, 3, (1,))
    return [k for k in keys if "loss_scale" in k], restored, after


def _guide_model(tf):
    """The guide's model under ``mixed_float16``: float16 Dense layers, a float32 softmax."""
    inputs = tf.keras.Input(shape=(6,))
    h = tf.keras.layers.Dense(8, activation="relu")(inputs)
    h = tf.keras.layers.Dense(3)(h)
    outputs = tf.keras.layers.Activation("softmax", dtype="float32")(h)
    model = tf.keras.Model(inputs=inputs, outputs=outputs)
    keras_init(model, 7)
    return model


@parity(**F16)
def test_mixed_float16_policy_computes_in_half_with_float32_variables(tf):
    """``set_global_policy('mixed_float16')``: a Dense layer's compute dtype is float16, its
    Variables float32; the float32 output layer gives float32; the gradients are float32."""
    x = np.random.RandomState(8).randn(4, 6).astype(np.float32)
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        policy = tf.keras.mixed_precision.global_policy().name
        model = _guide_model(tf)
        dense = model.layers[1]
        with tf.GradientTape() as tape:
            hidden = dense(x)
            out = model(x)
            loss = tf.reduce_sum(out * out)
        grads = tape.gradient(loss, model.trainable_variables)
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    return (policy, tf.as_dtype(dense.compute_dtype).name, tf.as_dtype(dense.variable_dtype).name,
            [tf.as_dtype(v.dtype).name for v in model.weights], hidden, out, [g.dtype.name for g in grads], grads)


@parity(modes=True, **F16)
def test_mixed_precision_guide_custom_loop(tf):
    """TF's mixed-precision guide loop: ``mixed_float16`` model, ``LossScaleOptimizer(Adam())``,
    ``get_scaled_loss`` / ``get_unscaled_gradients``, a forced overflow at step 7: losses, scales,
    counters and final weights against tf_keras."""
    rs = np.random.RandomState(9)
    x = (rs.randn(16, 6) * 3).astype(np.float32)
    y = rs.randint(0, 3, size=16).astype(np.int32)
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = _guide_model(tf)
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(0.01), dynamic_growth_steps=3)
        out = []
        for step in range(10):
            with tf.GradientTape() as tape:
                probs = model(x, training=True)
                loss = loss_fn(y, probs) * (np.float32(np.inf) if step == 7 else np.float32(1.0))
                scaled = opt.get_scaled_loss(loss)
            grads = opt.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
            opt.apply_gradients(zip(grads, model.trainable_variables))
            out.append((loss, scaled.dtype.name, *_state(opt)))
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")
    return out, [v.numpy() for v in model.trainable_variables]


@pytest.mark.parametrize("mode", ["tapejax", "tapejax-eager"])
def test_tf_written_checkpoint_restores_into_tapejax(mode, tmp_path):
    """A loop trained with tf_keras' LossScaleOptimizer (a skipped step included) saved by
    ``tf.train.Checkpoint``; the same program against tapejax restores the scale, counter,
    iterations, slots and weights (every saved value consumed) and continues with TF's values."""
    realtf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
    import tapejax
    x, y = _data(seed=10)

    def make(tf):
        w = tf.Variable(np.random.RandomState(11).randn(3, 1).astype(np.float32))
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.Adam(0.05),
                                                          initial_scale=256.0, dynamic_growth_steps=2)
        return w, opt

    w, opt = make(realtf)
    _loop(realtf, opt, w, x, y, 5, (3,))
    path = realtf.train.Checkpoint(w=w, opt=opt).save(str(tmp_path / "ckpt"))
    saved = (float(opt.loss_scale.numpy()), _int(opt.dynamic_counter), _int(opt.iterations))
    want = [(float(loss.numpy()), ww, float(s.numpy()), c, i) for loss, ww, s, c, i in _loop(realtf, opt, w, x, y, 3, (1,))]
    prev = (tapejax.set_deferred_execution(mode == "tapejax"), tapejax.set_speculative_updates(mode == "tapejax"))
    try:
        tw, topt = make(tapejax)
        status = tapejax.train.Checkpoint(w=tw, opt=topt).restore(path)
        restored = (float(topt.loss_scale.numpy()), _int(topt.dynamic_counter), _int(topt.iterations))
        status.assert_consumed()
        got = [(float(loss.numpy()), ww, float(s.numpy()), c, i) for loss, ww, s, c, i in _loop(tapejax, topt, tw, x, y, 3, (1,))]
    finally:
        tapejax.set_deferred_execution(prev[0])
        tapejax.set_speculative_updates(prev[1])
    assert restored == saved == (256.0, 1, 5)   # (512 after step 1, halved by step 3, counted by step 4)
    for g, t in zip(got, want):
        np.testing.assert_allclose(g[0], t[0], rtol=1e-5)
        np.testing.assert_allclose(g[1], t[1], rtol=1e-5, atol=1e-6)
        assert g[2:] == t[2:]
