"""Round eighteen (b) of realistic user programs: mixed-precision training (float16 and bfloat16)
as GPU and TPU users write it, run under real TensorFlow 2.21 (tf_keras) and under tapejax.

Three groups.  Keras policies (``set_global_policy('mixed_float16')`` / ``'mixed_bfloat16'``, put
back to float32 after each program; default execution mode only): the dtypes of each layer's
outputs, ``compute_dtype`` / ``variable_dtype`` of Dense, Conv2D, BatchNormalization,
LayerNormalization, Embedding and MultiHeadAttention, the float32 output ``Activation``, what a
kernel reads as inside ``call`` (TF's AutoCastVariable) and outside it, float32 gradients of the
float32 Variables, a custom ``GradientTape`` loop and ``fit`` (which wraps the optimizer in loss
scaling under ``mixed_float16`` only).  Loss scaling in custom loops (``modes=True``): the default
scale 2**15 overflowing a float16 loss until it halves enough, doubling after
``dynamic_growth_steps``, a fixed scale, ``loss_scale`` read as a value, ``minimize``, a
checkpoint of a new-optimizer ``LossScaleOptimizer`` restored and resumed, compiled and eager
steps.  Manual half precision (``modes=True``): float16 Variables under legacy and new optimizers
(slot dtypes, Adam's epsilon), bfloat16 casts over float32 master weights, softmax /
log-softmax / cross-entropies / reductions in float16, ``clip_by_global_norm`` and ``add_n`` over
mixed dtypes (TF's errors), an EMA of float16 weights.  Two programs are strict xfails on
tapejax: a float16 mean whose running sum overflows (TF's CPU kernel accumulates in float16,
tapejax in float32: docs/ops.md) and float16 logits fed to a Keras loss (Keras 3's loss dtypes).

float16 values are compared within ``F16`` (bfloat16 within ``BF16``); dtypes, None-ness,
skipped steps and loss-scale values are exact (strings, booleans and Python floats of powers of
two).
"""
import os
import tempfile

import numpy as np

from .harness import init_array, keras_init, parity, raises, xfail_on_tapejax

F16 = dict(rtol=1e-2, atol=1e-2)
BF16 = dict(rtol=5e-2, atol=5e-2)


def _dt(tf, x):
    """A dtype's name, from a Tensor, a Variable or a dtype (Keras 3 gives strings)."""
    d = getattr(x, "dtype", x)
    return tf.as_dtype(d).name


def _policy(tf, name):
    """Set the global policy; the caller puts float32 back in a ``finally``."""
    tf.keras.mixed_precision.set_global_policy(name)


def _reset(tf):
    tf.keras.mixed_precision.set_global_policy("float32")


def _scale(opt):
    return float(opt.loss_scale.numpy())


# ---------------------------------------------------------------------------
# Keras policies
# ---------------------------------------------------------------------------

def _zoo(tf):
    """A functional model over every layer kind: Embedding -> MultiHeadAttention -> LayerNorm,
    a Conv1D-as-Conv2D branch with BatchNorm, Dense, and a float32 softmax."""
    tokens = tf.keras.Input(shape=(5,), dtype="int32")
    e = tf.keras.layers.Embedding(11, 8)(tokens)
    a = tf.keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)(e, e)
    h = tf.keras.layers.LayerNormalization()(tf.keras.layers.Add()([e, a]))
    c = tf.keras.layers.Reshape((5, 8, 1))(h)
    c = tf.keras.layers.Conv2D(3, (2, 2), padding="same")(c)
    c = tf.keras.layers.BatchNormalization()(c)
    c = tf.keras.layers.Flatten()(c)
    d = tf.keras.layers.Dense(4, activation="relu")(c)
    logits = tf.keras.layers.Dense(3)(d)
    out = tf.keras.layers.Activation("softmax", dtype="float32")(logits)
    model = tf.keras.Model(tokens, out)
    keras_init(model, 3)
    return model


def _tokens(seed, n=4):
    return np.random.RandomState(seed).randint(0, 11, size=(n, 5)).astype(np.int32)


@parity(**F16)
def test_mixed_float16_layer_zoo_dtypes_and_outputs(tf):
    """Under ``mixed_float16`` every layer's compute dtype is float16 and its Variables float32;
    each intermediate output is float16 but the final ``Activation(dtype='float32')``; the
    model's probabilities match TF's within float16 tolerance."""
    _policy(tf, "mixed_float16")
    try:
        model = _zoo(tf)
        inner = tf.keras.Model(model.inputs, [layer.output for layer in model.layers[1:]])
        outs = inner(_tokens(1))
        names = [type(layer).__name__ for layer in model.layers[1:]]
        policies = [(layer.compute_dtype, layer.variable_dtype, layer.dtype_policy.name) for layer in model.layers[1:]]
        var_dtypes = sorted({_dt(tf, v) for v in model.weights})
    finally:
        _reset(tf)
    return names, policies, [_dt(tf, o) for o in outs], var_dtypes, outs[-1]


@parity(**F16)
def test_mixed_float16_zoo_custom_tape_loop_gradients_are_float32(tf):
    """A custom ``GradientTape`` loop on the layer zoo under ``mixed_float16``: the loss is float32
    (the float32 softmax), every gradient is float32 (as its Variable), and three SGD steps train
    the float32 weights as TF does."""
    _policy(tf, "mixed_float16")
    try:
        model = _zoo(tf)
        x = _tokens(2, 6)
        y = np.array([0, 1, 2, 0, 1, 2], np.int32)
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()
        opt = tf.keras.optimizers.SGD(0.05)
        out = []
        for _ in range(3):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            out.append((loss, _dt(tf, loss), sorted({_dt(tf, g) for g in grads}), sum(g is None for g in grads)))
    finally:
        _reset(tf)
    return out, [v.numpy() for v in model.weights]


@parity(**F16)
def test_autocast_kernel_reads_float16_inside_call_float32_outside(tf):
    """A custom layer under ``mixed_float16`` records ``self.kernel.dtype`` and the dtype of
    ``self.kernel`` converted to a tensor inside ``call``: float16 there (TF's AutoCastVariable),
    float32 outside; ``tf.matmul(inputs, self.kernel)`` of float16 inputs works; the kernel's
    gradient is float32."""
    seen = []

    class Scale(tf.keras.layers.Layer):
        def build(self, shape):
            self.kernel = self.add_weight(name="kernel", shape=(shape[-1], 2), initializer="ones")

        def call(self, inputs):
            seen.append((_dt(tf, self.kernel.dtype), _dt(tf, tf.convert_to_tensor(self.kernel)),
                         _dt(tf, inputs)))
            return tf.matmul(inputs, self.kernel) * 0.5

    _policy(tf, "mixed_float16")
    try:
        layer = Scale()
        x = tf.constant([[1.0, 2.0, 3.0]])
        with tf.GradientTape() as tape:
            y = layer(x)
            loss = tf.reduce_sum(tf.cast(y, tf.float32))
        g = tape.gradient(loss, layer.kernel)
        outside = (_dt(tf, layer.kernel.dtype), _dt(tf, tf.convert_to_tensor(layer.kernel)), layer.compute_dtype)
    finally:
        _reset(tf)
    # (tapejax traces a Keras call to plan it: ``call``'s Python runs more than once, so the
    # distinct records are compared)
    return sorted(set(seen)), outside, y, _dt(tf, y), g


@parity(**BF16)
def test_mixed_bfloat16_dense_layernorm_batchnorm_model(tf):
    """``mixed_bfloat16`` (TPU's policy): Dense / LayerNormalization / BatchNormalization compute
    in bfloat16 with float32 Variables and moving statistics; a training call updates the
    moving mean; the float32 head gives float32; gradients are float32."""
    _policy(tf, "mixed_bfloat16")
    try:
        model = tf.keras.Sequential([
            tf.keras.Input((6,)), tf.keras.layers.Dense(8, activation="gelu"), tf.keras.layers.LayerNormalization(),
            tf.keras.layers.BatchNormalization(), tf.keras.layers.Dense(2),
            tf.keras.layers.Activation("linear", dtype="float32")])
        keras_init(model, 4)
        x = init_array((5, 6), 5, 2.0)
        with tf.GradientTape() as tape:
            y = model(x, training=True)
            loss = tf.reduce_mean(y ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        dts = [(layer.compute_dtype, layer.variable_dtype) for layer in model.layers]
        bn = model.layers[2]
    finally:
        _reset(tf)
    return (dts, _dt(tf, y), y, loss, [_dt(tf, g) for g in grads], grads, _dt(tf, bn.moving_mean),
            bn.moving_mean.numpy())


@parity(**F16)
def test_fit_under_mixed_float16_wraps_and_under_mixed_bfloat16_does_not(tf):
    """``compile`` + ``fit`` of a small Conv/BatchNorm model: under ``mixed_float16`` the optimizer
    becomes a ``LossScaleOptimizer`` (scale 2**15, counting good steps), under ``mixed_bfloat16``
    it stays as given (bfloat16 has float32's range: no scaling); both train."""
    rs = np.random.RandomState(6)
    x = rs.randn(8, 4, 4, 1).astype(np.float32)
    y = rs.randint(0, 2, size=8).astype(np.int32)
    out = []
    for name in ("mixed_float16", "mixed_bfloat16"):
        _policy(tf, name)
        try:
            model = tf.keras.Sequential([
                tf.keras.Input((4, 4, 1)), tf.keras.layers.Conv2D(2, 3, activation="relu"),
                tf.keras.layers.BatchNormalization(), tf.keras.layers.Flatten(), tf.keras.layers.Dense(2),
                tf.keras.layers.Activation("softmax", dtype="float32")])
            keras_init(model, 7)
            model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy")
            wrapped = isinstance(model.optimizer, tf.keras.mixed_precision.LossScaleOptimizer)
            h = model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
            scale = _scale(model.optimizer) if wrapped else None
            out.append((wrapped, scale, h.history["loss"],
                        _dt(tf, model.predict(x, verbose=0))))
        finally:
            _reset(tf)
    return out


@parity(**F16)
def test_per_layer_policies_and_a_pure_float16_layer(tf):
    """Policies per layer under the float32 global policy: ``Dense(dtype=Policy('mixed_float16'))``
    computes in float16 over float32 Variables, ``Dense(dtype='float16')`` keeps float16
    Variables, a float32 layer after them casts its float16 input back; a float64 NumPy batch is
    cast to each layer's compute dtype; the Policy's names and dtypes."""
    pol = tf.keras.mixed_precision.Policy("mixed_float16")
    mixed = tf.keras.layers.Dense(3, dtype=pol)
    half = tf.keras.layers.Dense(3, dtype="float16")
    full = tf.keras.layers.Dense(2)
    x = np.random.RandomState(22).randn(2, 4)   # float64
    h1 = mixed(x)
    h2 = half(h1)
    y = full(h2)
    for layer, seed in ((mixed, 23), (half, 24), (full, 25)):
        layer.set_weights([init_array(w.shape, seed) for w in layer.get_weights()])
    h1, h2, y = mixed(x), half(mixed(x)), full(half(mixed(x)))
    return ((pol.name, pol.compute_dtype, pol.variable_dtype, tf.keras.mixed_precision.global_policy().name),
            [(layer.compute_dtype, layer.variable_dtype, sorted({_dt(tf, v) for v in layer.weights}))
             for layer in (mixed, half, full)], [_dt(tf, t) for t in (h1, h2, y)], h1, h2, y)


@xfail_on_tapejax("design limit: tapejax's tf.keras is Keras 3, whose Loss objects compute and return float32 "
                  "(their dtype is floatx) and whose JAX sparse_categorical_crossentropy promotes float16 logits "
                  "by a float32 one-hot; tf_keras keeps float16, so its scaled loss overflows where tapejax's does not")
@parity(**F16)
def test_float16_logits_without_a_float32_output_layer(tf):
    """The guide's warning case: a ``mixed_float16`` model whose last Dense gives float16 logits
    (no float32 output layer) trained with ``SparseCategoricalCrossentropy(from_logits=True)``
    under the default loss scale: tf_keras' loss is float16, so ``get_scaled_loss`` overflows
    float16 at 2**15: the first step is skipped and the scale halves."""
    _policy(tf, "mixed_float16")
    try:
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(5, activation="relu"),
                                     tf.keras.layers.Dense(3)])
        keras_init(model, 26)
        x = init_array((6, 4), 27, 8.0)
        y = np.array([0, 1, 2, 0, 1, 2], np.int32)
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.1))
        out = []
        for _ in range(3):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = loss_fn(y, logits)
                scaled = opt.get_scaled_loss(loss)
            grads = opt.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
            opt.apply_gradients(zip(grads, model.trainable_variables))
            out.append((_dt(tf, logits), _dt(tf, loss), _dt(tf, scaled), _scale(opt)))
        fn = tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
    finally:
        _reset(tf)
    return out, _dt(tf, fn), loss


# ---------------------------------------------------------------------------
# Loss scaling in custom loops
# ---------------------------------------------------------------------------

def _half_mlp_step(tf, opt, ws, x, y):
    """float32 master weights cast to float16 in the forward; the loss is float16."""
    with tf.GradientTape() as tape:
        h = tf.nn.relu(tf.matmul(tf.cast(x, tf.float16), tf.cast(ws[0], tf.float16)))
        pred = tf.matmul(h, tf.cast(ws[1], tf.float16))
        loss = tf.reduce_mean(tf.square(pred - tf.cast(y, tf.float16)))
        scaled = opt.get_scaled_loss(loss)
    sg = tape.gradient(scaled, ws)
    grads = opt.get_unscaled_gradients(sg)
    opt.apply_gradients(zip(grads, ws))
    return loss, scaled, grads


@parity(modes=True, **F16)
def test_default_scale_overflows_a_float16_loss_until_it_halves_enough(tf):
    """The default dynamic scale 2**15 on a float16 regression: the backward pass overflows
    float16, the step is skipped and the scale halves, three steps running; at 4096 the
    gradients are finite and the weights move although the scaled loss itself is still inf in
    float16 (the gradient never passes through it).  Scales and skips are exact."""
    rs = np.random.RandomState(8)
    x = rs.randn(8, 4).astype(np.float32) * 3
    y = (rs.randn(8, 1) * 10).astype(np.float32)
    ws = [tf.Variable(init_array((4, 6), 9)), tf.Variable(init_array((6, 1), 10))]
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(1e-3))
    out = []
    for _ in range(12):
        before = ws[0].numpy()
        loss, scaled, grads = _half_mlp_step(tf, opt, ws, x, y)
        out.append((_dt(tf, loss), _dt(tf, scaled), bool(np.isinf(scaled.numpy())), _scale(opt),
                    bool(np.array_equal(before, ws[0].numpy())), [_dt(tf, g) for g in grads]))
    return out, loss, ws


@parity(modes=True, **F16)
def test_scale_doubles_after_growth_steps_in_a_compiled_step(tf):
    """A compiled float16 step under ``LossScaleOptimizer(Adam, initial_scale=64,
    dynamic_growth_steps=2)``: the scale doubles every two finite steps, a huge batch (x * 1e4)
    overflows the float16 forward and skips the step; ``loss_scale`` read after every step as a
    float and its dtype."""
    rs = np.random.RandomState(11)
    x = rs.randn(8, 4).astype(np.float32)
    y = rs.randn(8, 1).astype(np.float32)
    ws = [tf.Variable(init_array((4, 6), 12)), tf.Variable(init_array((6, 1), 13))]
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(0.01), initial_scale=64.0,
                                                      dynamic_growth_steps=2)

    @tf.function
    def step(xb):
        loss, _, grads = _half_mlp_step(tf, opt, ws, xb, y)
        return loss, tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])

    out = []
    for i in range(7):
        loss, finite = step(x * 1e4 if i == 3 else x)
        out.append((bool(finite), _scale(opt), _dt(tf, opt.loss_scale), int(opt.iterations.numpy())))
    return out, [w.numpy() for w in ws]


@parity(modes=True, **F16)
def test_fixed_scale_float16_loss_and_minimize(tf):
    """``dynamic=False, initial_scale=1024``: the float16 scaled loss is loss * 1024 in float16;
    the unscaled float32 gradients equal the unscaled loss's; ``minimize`` with a callable float16
    loss trains eagerly; the scale never changes."""
    w = tf.Variable([[0.5], [-0.25]])
    x = tf.constant([[1.0, 2.0], [3.0, -1.0]], tf.float16)
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.SGD(0.1), dynamic=False,
                                                      initial_scale=1024)

    def loss_fn():
        return tf.reduce_mean(tf.square(tf.matmul(x, tf.cast(w, tf.float16)) - 1.0))

    with tf.GradientTape() as tape:
        loss = loss_fn()
        scaled = opt.get_scaled_loss(loss)
    g = opt.get_unscaled_gradients(tape.gradient(scaled, [w]))
    out = [(loss, scaled, _dt(tf, scaled), g, _scale(opt))]
    for _ in range(3):
        opt.minimize(loss_fn, [w])
        out.append((w.numpy(), _scale(opt), int(opt.iterations.numpy())))
    return out


@parity(modes=True, **F16)
def test_new_optimizer_loss_scale_checkpoint_restores_and_resumes(tf):
    """A ``LossScaleOptimizer`` around a new Adam after a skipped and some good steps, saved by
    ``tf.train.Checkpoint``; restored into a fresh one (slots built first), the scale, counter and
    iterations come back and the next steps continue exactly as the uninterrupted run."""
    rs = np.random.RandomState(14)
    x = rs.randn(6, 4).astype(np.float32)
    y = rs.randn(6, 1).astype(np.float32)

    def make():
        ws = [tf.Variable(init_array((4, 6), 15)), tf.Variable(init_array((6, 1), 16))]
        opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(0.02), initial_scale=512.0,
                                                          dynamic_growth_steps=3)
        return ws, opt

    ws, opt = make()
    for i in range(5):
        _half_mlp_step(tf, opt, ws, x * 1e4 if i == 1 else x, y)
    state = (_scale(opt), int(opt.dynamic_counter.numpy()), int(opt.iterations.numpy()))
    with tempfile.TemporaryDirectory() as d:
        path = tf.train.Checkpoint(opt=opt, ws=ws).save(os.path.join(d, "ckpt"))
        ws2, opt2 = make()
        opt2.inner_optimizer.build(ws2)
        tf.train.Checkpoint(opt=opt2, ws=ws2).restore(path)
        restored = (_scale(opt2), int(opt2.dynamic_counter.numpy()), int(opt2.iterations.numpy()))
    cont = []
    for o, vs in ((opt, ws), (opt2, ws2)):
        losses = [_half_mlp_step(tf, o, vs, x, y)[0] for _ in range(3)]
        cont.append((losses, _scale(o), [v.numpy() for v in vs]))
    return state, restored, cont


@parity(modes=True, **F16)
def test_new_adam_loss_scale_minimize_with_a_tape_over_float16_and_float32_variables(tf):
    """``LossScaleOptimizer(Adam())`` (tf_keras' new Adam) ``minimize(loss, vars, tape=tape)``
    inside ``tf.function`` over a float16 and a float32 Variable: the float16 Variable's slots are
    float16 and its step is computed in float16 (TF's roundings of ``1 - beta``); a deliberately
    infinite loss skips the step and halves the scale; growth every 2 good steps."""
    w16 = tf.Variable(np.array([0.5, -0.25], np.float16))
    w32 = tf.Variable([1.0, 2.0])
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(0.01), initial_scale=256.0,
                                                      dynamic_growth_steps=2)

    @tf.function
    def step(k):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.cast(w16, tf.float32) ** 2) * k + tf.reduce_sum(w32 ** 2)
        opt.minimize(loss, [w16, w32], tape=tape)
        return loss

    out = []
    for k in (1.0, 1.0, np.inf, 1.0, 1.0):
        loss = step(tf.constant(k))
        out.append((loss, w16.numpy(), w32.numpy(), _scale(opt), int(opt.iterations.numpy())))
    return out, sorted(_dt(tf, s) for s in opt.variables if len(s.shape) == 1)


@parity(modes=True, **F16)
def test_loss_scale_around_float16_variables_unscales_in_float16(tf):
    """Loss scaling around float16 Variables (a user who skipped the float32 master weights):
    ``get_unscaled_gradients`` multiplies by ``1/scale`` cast to float16 (2**-12 is exact, the
    gradient is float16), the legacy SGD updates the float16 weights in float16."""
    w = tf.Variable(np.array([[0.5], [-0.75], [0.25]], np.float16))
    x = tf.constant(np.random.RandomState(17).randn(4, 3).astype(np.float16))
    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.legacy.SGD(0.1), initial_scale=4096.0,
                                                      dynamic_growth_steps=2)
    out = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
            scaled = opt.get_scaled_loss(loss)
        sg = tape.gradient(scaled, w)
        (g,) = opt.get_unscaled_gradients([sg])
        opt.apply_gradients([(g, w)])
        out.append((loss, _dt(tf, sg), bool(np.all(np.isfinite(sg.numpy()))), _dt(tf, g), g, _scale(opt)))
    return out, w, _dt(tf, w)


# ---------------------------------------------------------------------------
# Manual half precision
# ---------------------------------------------------------------------------

@parity(modes=True, **F16)
def test_float16_variables_under_legacy_and_new_optimizers_slot_dtypes(tf):
    """float16 Variables trained by legacy SGD(momentum), legacy Adam, new Adam and new RMSprop:
    the slots are float16 (as the Variable), the hyperparameters are cast to float16, the
    weights stay float16 and move as TF's."""
    x = tf.constant(np.random.RandomState(18).randn(5, 3).astype(np.float16))
    out = []
    for make in (lambda: tf.keras.optimizers.legacy.SGD(0.05, momentum=0.9),
                 lambda: tf.keras.optimizers.legacy.Adam(0.01),
                 lambda: tf.keras.optimizers.Adam(0.01), lambda: tf.keras.optimizers.RMSprop(0.01)):
        w = tf.Variable(np.array([[0.5], [-0.75], [0.25]], np.float16))
        opt = make()
        for _ in range(3):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
            opt.apply_gradients([(tape.gradient(loss, w), w)])
        slots = opt.variables() if callable(opt.variables) else opt.variables
        out.append((w, loss, sorted(_dt(tf, s) for s in slots if s.shape == w.shape)))
    return out


@parity(modes=True, rtol=2e-2, atol=2e-2)
def test_float16_adam_epsilon_and_tiny_gradients(tf):
    """Adam on float16 Variables with gradients of 1e-4: their squares (1e-8) underflow float16 to
    zero, so the update is about ``lr_t * m / epsilon`` with epsilon 1e-7 cast to float16, each
    product rounded to float16 (subnormals) in TF's order; a user's epsilon of 1e-4 tames it.
    Legacy and new Adam as TF."""
    out = []
    for make in (lambda e: tf.keras.optimizers.legacy.Adam(0.1, epsilon=e),
                 lambda e: tf.keras.optimizers.Adam(0.1, epsilon=e)):
        for eps in (1e-7, 1e-4):
            w = tf.Variable(np.array([1.0, -1.0], np.float16))
            opt = make(eps)
            for _ in range(2):
                opt.apply_gradients([(tf.constant([1e-4, -1e-4], tf.float16), w)])
            out.append(w)
    return out


@parity(modes=True, **BF16)
def test_bfloat16_forward_over_float32_master_weights(tf):
    """A TPU-style step: float32 master weights cast to bfloat16 in the forward (bf16 matmuls and
    activations), the loss cast back to float32; the gradients are float32 as the Variables;
    Adam trains them; eager and compiled steps agree with TF."""
    rs = np.random.RandomState(19)
    x = rs.randn(8, 4).astype(np.float32)
    y = rs.randn(8, 1).astype(np.float32)
    ws = [tf.Variable(init_array((4, 8), 20)), tf.Variable(np.zeros(8, np.float32)),
          tf.Variable(init_array((8, 1), 21))]
    opt = tf.keras.optimizers.Adam(0.01)

    def step():
        with tf.GradientTape() as tape:
            xb = tf.cast(x, tf.bfloat16)
            h = tf.nn.gelu(tf.matmul(xb, tf.cast(ws[0], tf.bfloat16)) + tf.cast(ws[1], tf.bfloat16))
            pred = tf.matmul(h, tf.cast(ws[2], tf.bfloat16))
            loss = tf.reduce_mean(tf.square(tf.cast(pred, tf.float32) - y))
        grads = tape.gradient(loss, ws)
        opt.apply_gradients(zip(grads, ws))
        return loss, h.dtype == tf.bfloat16, [g.dtype == tf.float32 for g in grads]

    compiled = tf.function(step)
    out = [step(), step(), compiled(), compiled()]
    return [(loss, bool(b), [bool(v) for v in gs]) for loss, b, gs in out], ws


@parity(modes=True, **F16)
def test_softmax_cross_entropies_and_reductions_in_float16(tf):
    """A classifier head computed in float16: ``softmax``, ``log_softmax``, the dense and sparse
    softmax cross-entropies, ``reduce_logsumexp``, ``reduce_mean`` / ``reduce_sum`` / ``reduce_max``
    of float16 logits (all float16, as TF) and their float16 gradients."""
    logits = tf.Variable(np.array([[2.0, -1.0, 0.5], [8.0, 7.5, -3.0], [0.1, 0.2, 0.3]], np.float16))
    labels = tf.constant([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.2, 0.3, 0.5]], tf.float16)
    sparse = tf.constant([1, 0, 2])
    with tf.GradientTape(persistent=True) as tape:
        sm = tf.nn.softmax(logits)
        lsm = tf.nn.log_softmax(logits)
        dense = tf.nn.softmax_cross_entropy_with_logits(labels, logits)
        sp = tf.nn.sparse_softmax_cross_entropy_with_logits(sparse, logits)
        lse = tf.reduce_logsumexp(logits, axis=-1)
        red = (tf.reduce_mean(logits), tf.reduce_sum(logits, 0), tf.reduce_max(logits, 1))
        loss = tf.reduce_mean(dense) + tf.reduce_mean(sp)
    results = [sm, lsm, dense, sp, lse, *red]
    return ([_dt(tf, r) for r in results], results, tape.gradient(loss, logits),
            tape.gradient(tf.reduce_sum(lsm * labels), logits))


@parity(modes=True, **F16)
def test_sigmoid_cross_entropy_on_float16_logits(tf):
    """``tf.nn.sigmoid_cross_entropy_with_logits`` on float16 logits (large ones included: the
    stable form keeps them finite), its float16 gradient, and ``weighted_cross_entropy_with_logits``;
    mismatched label dtype is TF's error."""
    z = tf.Variable(np.array([-12.0, -1.0, 0.0, 0.5, 9.0, 20.0], np.float16))
    lab = tf.constant([0.0, 1.0, 0.0, 1.0, 1.0, 0.0], tf.float16)
    with tf.GradientTape() as tape:
        ce = tf.nn.sigmoid_cross_entropy_with_logits(labels=lab, logits=z)
        wce = tf.nn.weighted_cross_entropy_with_logits(lab, z, pos_weight=2.0)
        loss = tf.reduce_sum(ce) + tf.reduce_sum(wce)
    bad = raises(tf.nn.sigmoid_cross_entropy_with_logits, labels=tf.constant([1.0] * 6), logits=z)
    return ce, wce, _dt(tf, ce), loss, tape.gradient(loss, z), bad


@parity(modes=True, **F16)
def test_clip_by_global_norm_over_float16_and_float32_gradients(tf):
    """``tf.clip_by_global_norm`` of a float16 gradient and a float32 one together is TF's error
    (its norms are stacked); the usual fix casts them to float32 first, then back; each alone
    keeps its dtype, and ``global_norm`` of float16 gradients is float16."""
    v16 = tf.Variable(np.array([3.0, -4.0], np.float16))
    v32 = tf.Variable([1.0, 2.0, 2.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.cast(v16, tf.float32) ** 2) + tf.reduce_sum(v32 ** 2)
    g16, g32 = tape.gradient(loss, [v16, v32])
    mixed = raises(tf.clip_by_global_norm, [g16, g32], 5.0)
    clipped, norm = tf.clip_by_global_norm([tf.cast(g16, tf.float32), g32], 5.0)
    back = tf.cast(clipped[0], tf.float16)
    only16, norm16 = tf.clip_by_global_norm([g16, None], 5.0)
    return (_dt(tf, g16), _dt(tf, g32), mixed, clipped, norm, back, only16, norm16, _dt(tf, norm16),
            tf.linalg.global_norm([g16]))


@parity(modes=True, **F16)
def test_add_n_and_arithmetic_of_mixed_half_and_float32(tf):
    """Summing float16 and float32 gradients (gradient accumulation across a mixed model):
    ``tf.add_n`` and ``+`` of mixed dtypes are TF's errors, and ``tf.add_n`` of float16 ones
    stays float16; casting first works."""
    a = tf.constant([1.5, 2.0], tf.float16)
    b = tf.constant([0.25, 0.5])
    c = tf.constant([1.0, 1.0], tf.bfloat16)
    return (raises(tf.add_n, [a, b]), raises(lambda: a + b), raises(lambda: a * c),
            tf.add_n([a, a, a]), tf.add_n([tf.cast(a, tf.float32), b]), _dt(tf, tf.add_n([c, c])))


@parity(modes=True, **F16)
def test_ema_of_float16_weights(tf):
    """``tf.train.ExponentialMovingAverage(0.9)`` over float16 and float32 Variables trained by SGD:
    the shadow of a float16 Variable is float16, the decay (float32) is cast; averages after each
    step as TF; ``num_updates`` makes the early decay smaller."""
    v16 = tf.Variable(np.array([1.0, -2.0], np.float16))
    v32 = tf.Variable([0.5, 0.25])
    step = tf.Variable(0, dtype=tf.int64) if hasattr(tf, "int64") else None
    ema = tf.train.ExponentialMovingAverage(0.9, num_updates=step)
    ema.apply([v16, v32])
    out = []
    for i in range(3):
        v16.assign_sub(tf.constant([0.5, 0.5], tf.float16))
        v32.assign_add([0.1, 0.2])
        step.assign_add(1)
        ema.apply([v16, v32])
        out.append((ema.average(v16).numpy(), ema.average(v32).numpy()))
    return out, _dt(tf, ema.average(v16)), _dt(tf, ema.average(v32)), ema.average_name(v16) is not None


@parity(modes=True, **F16)
def test_half_loss_reductions_keep_the_input_dtype(tf):
    """Losses of float16 predictions: ``reduce_mean`` / ``reduce_sum`` of float16 squared errors,
    ``tf.keras.losses.mean_squared_error`` / ``binary_crossentropy`` on float16 give float16 (as
    TF), within float16 tolerance; the user's float32 cast gives float32."""
    err = tf.constant(np.linspace(-2, 2, 16).astype(np.float16))
    p = tf.constant(np.linspace(0.05, 0.95, 16).astype(np.float16))
    t = tf.constant((np.arange(16) % 2).astype(np.float16))
    out = (tf.reduce_mean(tf.square(err)), tf.reduce_sum(tf.square(err)), tf.reduce_mean(tf.cast(err, tf.float32) ** 2),
           tf.keras.losses.mean_squared_error(tf.zeros([2, 16], tf.float16), tf.stack([err, err])),
           tf.keras.losses.binary_crossentropy(t, p))
    return [_dt(tf, o) for o in out], out


@xfail_on_tapejax("documented deviation (docs/ops.md): tapejax's float16 sums and means accumulate in float32 "
                  "(XLA's rule) where TF's CPU kernels accumulate in float16, so TF's mean of 64 x 3000 is inf")
@parity(modes=True, **F16)
def test_float16_mean_whose_running_sum_overflows(tf):
    """``reduce_mean`` of float16 values whose running sum passes 65504: TF's CPU kernel
    accumulates in float16 and gives inf; ``reduce_sum`` is inf everywhere; casting to float32
    first is the user's fix."""
    big = tf.constant(np.full((64,), 3000.0, np.float16))
    return tf.reduce_mean(big), tf.reduce_sum(big), tf.reduce_mean(tf.cast(big, tf.float32))


@parity(modes=True, **F16)
def test_half_precision_overflow_pitfalls_in_norms_moments_and_casts(tf):
    """float16 activations around 1000: ``tf.nn.moments`` / ``reduce_variance`` / ``reduce_std`` stay
    finite (TF's moments compute a float16 input in float32), ``l2_loss`` and ``tf.norm`` overflow
    to inf (so ``clip_by_norm`` gives zeros) while ``l2_loss``'s gradient is finite; a float16
    weight-norm regularizer the user moves to float32; ``saturate_cast`` clamps to 65504, a plain
    cast of 70000 is inf, inf cast to int32 is INT_MIN; assigning a float32 tensor to a float16
    Variable is TF's ValueError, a Python list is converted."""
    x = tf.Variable(np.array([[1000.0, 1010.0, 990.0], [1.0, 2.0, 3.5]], np.float16))
    with tf.GradientTape(persistent=True) as tape:
        l2 = tf.nn.l2_loss(x)
        norm = tf.norm(x)
        mean, var = tf.nn.moments(x, axes=[1])
        safe = tf.nn.l2_loss(tf.cast(x, tf.float32))
    grads = [tape.gradient(t, x) for t in (l2, norm, var, safe)]
    v = tf.Variable(np.array([1.0, 2.0], np.float16))
    return (l2, norm, mean, var, tf.math.reduce_variance(x, axis=1), tf.math.reduce_std(x, axis=1), safe, grads,
            tf.clip_by_norm(x, 1.0), tf.dtypes.saturate_cast(tf.constant([1e6, -1e6]), tf.float16),
            tf.cast(tf.constant([70000, 3]), tf.float16), tf.cast(tf.constant([np.inf, 3.7], tf.float16), tf.int32),
            raises(v.assign, tf.constant([1.0, 1.0])), v.assign_add([0.5, 0.5]), v * np.float64(0.1))
