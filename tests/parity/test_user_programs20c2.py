"""Round twenty (c) of realistic user programs, second half: optimizer configuration for
fine-tuning and knowledge transfer, as the research code writes them, under real TensorFlow 2.21
(tf_keras) and under tapejax (Keras 3 on JAX behind ``tf.keras``).

Optimizer configuration: discriminative and layer-wise decayed learning rates with one optimizer
per group (``apply_gradients`` on disjoint lists in one step) and the same by scaling gradients,
``AdamW`` with ``exclude_from_weight_decay(var_names=["bias", "LayerNorm"])`` (tf_keras matches
``LayerNorm/gamma:0``; a Keras 3 variable is ``gamma`` with the layer in its path), a warm-up then
cosine ``LearningRateSchedule`` beside the built-in ``CosineDecay(warmup_steps=...)``, clipping per
group, ``tf.stop_gradient`` on the base's features against freezing (equal losses, other
None-ness), gradient accumulation over micro-batches.  Knowledge transfer: keras.io's
``Distiller`` under ``fit``, feature matching through a functional sub-model, EWC with a Fisher
diagonal from per-example gradients (a loop and ``tape.jacobian``), L2-SP towards pre-trained
constants, model soups by ``assign``, and a base restored from a checkpoint into a bigger model
(``expect_partial``).  Keras-heavy programs run in the default mode only.
"""
import tempfile

import numpy as np

from .harness import init_array, keras_init, parity, raises, xfail_on_tapejax
from .test_user_programs20c import LOOSE, _xy


def _mlp(tf, dims, seed, name="m", last=None):
    """A Sequential of Dense layers ``dims[1:]`` (tanh, the last ``last``) on ``dims[0]`` inputs."""
    L = tf.keras.layers
    layers = [tf.keras.Input((dims[0],))]
    for i, units in enumerate(dims[1:]):
        act = last if i == len(dims) - 2 else "tanh"
        layers.append(L.Dense(units, activation=act, name=f"{name}_l{i}"))
    model = tf.keras.Sequential(layers, name=name)
    keras_init(model, seed)
    return model


# ---------------------------------------------------------------------------
# Optimizer configuration
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_layerwise_decayed_rates_with_one_optimizer_per_layer_in_one_compiled_step(tf):
    """Layer-wise learning-rate decay (ULMFiT / BEiT style): layer ``i`` of ``L`` gets
    ``lr * decay**(L - 1 - i)``, one legacy Adam per layer, all applied in one compiled step on
    disjoint lists; each optimizer's ``iterations`` and first-moment slots, and the weights."""
    x, y = _xy(8, seed=3001)
    model = _mlp(tf, (4, 5, 4, 1), 3002)
    rates = [0.05 * 0.5 ** (2 - i) for i in range(3)]
    opts = [tf.keras.optimizers.legacy.Adam(r) for r in rates]

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        for i, opt in enumerate(opts):
            opt.apply_gradients(zip(grads[2 * i:2 * i + 2], model.trainable_variables[2 * i:2 * i + 2]))
        return loss, grads

    out = [step(x, y) for _ in range(3)]
    slots = [[opt.get_slot(v, "m") for v in model.layers[i].trainable_variables] for i, opt in enumerate(opts)]
    return out, [int(o.iterations) for o in opts], slots, [len(o.variables()) for o in opts], model.get_weights()


@parity(modes=True, **LOOSE)
def test_discriminative_rates_by_two_optimizers_equal_one_optimizer_on_scaled_gradients(tf):
    """A base at 1/10 of the head's rate, written twice with momentum SGD (a linear rule, so the
    two agree): two tf_keras SGDs on the two groups, and one SGD at the head's rate given the
    base's gradients times 0.1.  Both runs' losses, their weights' difference, and the
    optimizers' iterations (1 + 1 per step for the pair)."""
    x, y = _xy(8, seed=3011)
    runs = []
    for mode in ("two", "scaled"):
        base = _mlp(tf, (4, 5), 3012, name="base")
        head = _mlp(tf, (5, 1), 3013, name="head", last=None)
        if mode == "two":
            opts = [tf.keras.optimizers.SGD(0.01, momentum=0.9), tf.keras.optimizers.SGD(0.1, momentum=0.9)]
        else:
            opts = [tf.keras.optimizers.SGD(0.1, momentum=0.9)]
        losses = []
        for _ in range(4):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(head(base(x)) - y))
            gb, gh = tape.gradient(loss, [base.trainable_variables, head.trainable_variables])
            if mode == "two":
                opts[0].apply_gradients(zip(gb, base.trainable_variables))
                opts[1].apply_gradients(zip(gh, head.trainable_variables))
            else:
                pairs = [(g * 0.1, v) for g, v in zip(gb, base.trainable_variables)]
                opts[0].apply_gradients(pairs + list(zip(gh, head.trainable_variables)))
            losses.append(loss)
        runs.append((losses, base.get_weights() + head.get_weights(), [int(o.iterations) for o in opts]))
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(runs[0][1], runs[1][1]))
    return runs, diff < 1e-5


@parity(modes=True, **LOOSE)
def test_adamw_excluding_bias_and_layernorm_from_weight_decay(tf):
    """BERT fine-tuning's optimizer: ``AdamW(weight_decay=0.1)`` with
    ``exclude_from_weight_decay(var_names=["bias", "LayerNorm"])`` on a Dense -> LayerNormalization
    (named "LayerNorm") -> Dense model in a compiled step; a gradient of zero on a decayed kernel
    shows the decay alone.  Calling the exclusion again after the first update is TF's ValueError."""
    x, y = _xy(6, seed=3021)
    L = tf.keras.layers
    model = tf.keras.Sequential([tf.keras.Input((4,)), L.Dense(3, name="dense"), L.LayerNormalization(name="LayerNorm"),
                                 L.Dense(1, name="out")])
    keras_init(model, 3022)
    opt = tf.keras.optimizers.AdamW(learning_rate=0.05, weight_decay=0.1)
    opt.exclude_from_weight_decay(var_names=["bias", "LayerNorm"])
    idle = tf.Variable(init_array((2, 2), 3023), name="idle_kernel")

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(list(zip(grads, variables)) + [(tf.zeros_like(idle), idle)])
        return loss, grads

    out = [step(x, y) for _ in range(3)]
    late = raises(opt.exclude_from_weight_decay, var_names=["out"])
    return out, model.get_weights(), idle, int(opt.iterations), late


@parity(modes=True, **LOOSE)
def test_warmup_then_cosine_schedule_subclass_and_the_built_in_cosine_decay_warmup(tf):
    """A ``LearningRateSchedule`` subclass (linear warm-up over 3 steps to 0.1, then cosine to 0
    at step 8, ``tf.where`` on the step) drives tf_keras' new Adam in a compiled step; the rate
    the optimizer reports after each update, the schedule's values at steps 0..9 (float and
    tensor steps), the built-in ``CosineDecay(0.0, 5, warmup_target=0.1, warmup_steps=3)`` beside
    it, and the weights."""
    x, y = _xy(6, seed=3031)
    w = tf.Variable(init_array((4, 1), 3032))

    class WarmupCosine(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self, peak, warmup, total):
            self.peak, self.warmup, self.total = peak, warmup, total

        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            warm = self.peak * step / self.warmup
            progress = tf.minimum((step - self.warmup) / (self.total - self.warmup), 1.0)
            return tf.where(step < self.warmup, warm, 0.5 * self.peak * (1.0 + tf.cos(np.pi * progress)))

        def get_config(self):
            return {"peak": self.peak, "warmup": self.warmup, "total": self.total}

    sched = WarmupCosine(0.1, 3, 8)
    builtin = tf.keras.optimizers.schedules.CosineDecay(0.0, 5, warmup_target=0.1, warmup_steps=3)
    opt = tf.keras.optimizers.Adam(sched)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    out = []
    for _ in range(5):
        out.append((step(x, y), tf.convert_to_tensor(opt.learning_rate), int(opt.iterations)))
    values = [sched(s) for s in range(10)] + [sched(tf.constant(4))]
    return out, values, [builtin(s) for s in range(10)], w, sched.get_config()


@parity(modes=True, **LOOSE)
def test_gradient_clipping_per_group_with_an_unused_variable(tf):
    """Clipping the pre-trained base's gradients to a small global norm and the new head's to a
    larger one, separately (``tf.clip_by_global_norm`` per group, each returning its norm); the
    head group holds a Variable the loss does not use (None: skipped by the clip and the
    optimizer, with its warning).  A compiled step, legacy SGD."""
    x, y = _xy(8, seed=3041)
    wb = [tf.Variable(init_array((4, 5), 3042)), tf.Variable(np.zeros(5, np.float32))]
    wh = [tf.Variable(init_array((5, 1), 3043)), tf.Variable([0.2]), tf.Variable([1.0], name="unused")]
    opt = tf.keras.optimizers.legacy.SGD(0.5)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, wb[0]) + wb[1])
            loss = tf.reduce_mean(tf.square(tf.matmul(h, wh[0]) + wh[1] - y))
        gb, gh = tape.gradient(loss, [wb, wh])
        cb, nb = tf.clip_by_global_norm(gb, 0.05)
        ch, nh = tf.clip_by_global_norm(gh, 1.0)
        opt.apply_gradients([(g, v) for g, v in zip(cb + ch, wb + wh) if g is not None])
        return loss, nb, nh, cb, [g is None for g in ch]

    out = [step(x, y) for _ in range(3)]
    return out, wb, wh, int(opt.iterations)


@parity(**LOOSE)
def test_stop_gradient_on_the_base_features_against_freezing_the_base(tf):
    """Two ways to train only a head on a base: ``tf.stop_gradient(base(x))`` with the base
    trainable (its Variables listed and watched, their gradients None) and ``base.trainable =
    False`` (not listed; a gradient asked for explicitly has values).  Same losses and head
    weights, different lists and None-ness."""
    x, labels = _xy(8, seed=3051, classes=3)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    out = {}
    for mode in ("stop_gradient", "frozen"):
        base = _mlp(tf, (4, 5, 4), 3052, name="base")
        head = tf.keras.layers.Dense(3, name="head")
        inputs = tf.keras.Input((4,))
        feats = base(inputs)
        model = tf.keras.Model(inputs, head(feats))
        head.set_weights([init_array((4, 3), 3053), np.zeros(3, np.float32)])
        if mode == "frozen":
            base.trainable = False
        opt = tf.keras.optimizers.legacy.Adam(0.05)
        rows = []
        for _ in range(3):
            with tf.GradientTape() as tape:
                f = base(x)
                if mode == "stop_gradient":
                    f = tf.stop_gradient(f)
                loss = loss_fn(labels, head(f))
            variables = model.trainable_variables
            grads = tape.gradient(loss, variables + [base.layers[0].kernel])
            opt.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])
            rows.append((loss, [g is None for g in grads], grads[-1], len(tape.watched_variables())))
        out[mode] = (rows, len(variables), head.get_weights(), base.get_weights())
    return out


@parity(modes=True, **LOOSE)
def test_gradient_accumulation_over_micro_batches_with_a_frozen_base(tf):
    """Fine-tuning a head over a frozen Keras base with accumulated gradients: accumulators are
    non-trainable Variables like the trainable ones, ``assign_add`` each micro-batch in a compiled
    step, applied (divided by the count) and zeroed every 2 micro-batches by a second compiled
    function; 6 micro-batches give 3 updates."""
    rs = np.random.RandomState(3061)
    xs = rs.randn(6, 2, 4).astype(np.float32)
    ys = rs.randn(6, 2, 1).astype(np.float32)
    base = _mlp(tf, (4, 5), 3062, name="base")
    base.trainable = False
    head = tf.keras.layers.Dense(1, name="head")
    head.build((None, 5))
    head.set_weights([init_array((5, 1), 3063), np.zeros(1, np.float32)])
    accum = [tf.Variable(tf.zeros_like(v), trainable=False) for v in head.trainable_variables]
    opt = tf.keras.optimizers.Adam(0.05)

    @tf.function
    def micro(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(head(base(x, training=False)) - y))
        grads = tape.gradient(loss, head.trainable_variables)
        for a, g in zip(accum, grads):
            a.assign_add(g)
        return loss

    @tf.function
    def apply():
        opt.apply_gradients([(a / 2.0, v) for a, v in zip(accum, head.trainable_variables)])
        for a in accum:
            a.assign(tf.zeros_like(a))

    out = []
    for i in range(6):
        loss = micro(xs[i], ys[i])
        snapshot = [a.numpy() for a in accum]
        if i % 2 == 1:
            apply()
        out.append((loss, snapshot, int(opt.iterations)))
    return out, head.get_weights(), base.get_weights(), accum, len(base.trainable_variables)


# ---------------------------------------------------------------------------
# Knowledge transfer
# ---------------------------------------------------------------------------

@parity(**LOOSE)
def test_keras_io_distiller_under_fit_with_a_frozen_teacher_and_temperature(tf):
    """keras.io's knowledge distillation (the TF-era version): a ``Distiller(keras.Model)`` whose
    ``compile`` takes the student and distillation losses, ``alpha`` and the temperature, whose
    ``train_step`` calls the teacher with ``training=False`` outside the tape and applies the
    gradients of ``alpha * student_loss + (1 - alpha) * T^2 * KL`` to the student's Variables, then
    updates ``compiled_metrics``; fit for two epochs.  The student's loss and distillation loss
    per epoch, the student's weights and the (unchanged) teacher's."""
    x, labels = _xy(8, seed=3071, classes=3)
    teacher = _mlp(tf, (4, 6, 3), 3072, name="teacher")
    student = _mlp(tf, (4, 3), 3073, name="student")

    class Distiller(tf.keras.Model):
        def __init__(self, student, teacher):
            super().__init__()
            self.teacher = teacher
            self.student = student

        def compile(self, optimizer, metrics, student_loss_fn, distillation_loss_fn, alpha=0.1, temperature=3):
            super().compile(optimizer=optimizer, metrics=metrics)
            self.student_loss_fn = student_loss_fn
            self.distillation_loss_fn = distillation_loss_fn
            self.alpha = alpha
            self.temperature = temperature

        def call(self, x):
            return self.student(x)

        def train_step(self, data):
            x, y = data
            teacher_predictions = self.teacher(x, training=False)
            with tf.GradientTape() as tape:
                student_predictions = self.student(x, training=True)
                student_loss = self.student_loss_fn(y, student_predictions)
                distillation_loss = self.distillation_loss_fn(
                    tf.nn.softmax(teacher_predictions / self.temperature, axis=1),
                    tf.nn.softmax(student_predictions / self.temperature, axis=1)) * self.temperature ** 2
                loss = self.alpha * student_loss + (1 - self.alpha) * distillation_loss
            trainable_vars = self.student.trainable_variables
            gradients = tape.gradient(loss, trainable_vars)
            self.optimizer.apply_gradients(zip(gradients, trainable_vars))
            self.compiled_metrics.update_state(y, student_predictions)
            return {"student_loss": student_loss, "distillation_loss": distillation_loss}

    teacher_weights = teacher.get_weights()
    distiller = Distiller(student=student, teacher=teacher)
    distiller.compile(optimizer=tf.keras.optimizers.Adam(0.05),
                      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()],
                      student_loss_fn=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      distillation_loss_fn=tf.keras.losses.KLDivergence(), alpha=0.1, temperature=10)
    h = distiller.fit(x, labels, batch_size=4, epochs=2, shuffle=False, verbose=0)
    hist = {k: [float(v) for v in h.history[k]] for k in ("student_loss", "distillation_loss")}
    return (hist, student.get_weights(), [bool(np.array_equal(a, b)) for a, b in zip(teacher_weights,
                                                                                      teacher.get_weights())],
            int(distiller.optimizer.iterations))


def _functional(tf, dims, seed, name):
    """``_mlp`` as a functional model (Keras 3's ``Sequential`` has no ``.input`` until called
    symbolically: the xfail below)."""
    inputs = tf.keras.Input((dims[0],))
    h = inputs
    for i, units in enumerate(dims[1:]):
        h = tf.keras.layers.Dense(units, activation="tanh" if i < len(dims) - 2 else None, name=f"{name}_l{i}")(h)
    model = tf.keras.Model(inputs, h, name=name)
    keras_init(model, seed)
    return model


@xfail_on_tapejax("Keras 3's Sequential (tapejax's tf.keras, Keras 3 on TF too) has no `.input` until it is "
                  "called on a symbolic input: AttributeError 'has never been called and thus has no defined "
                  "input', where tf_keras' Sequential built from an Input has one (`.inputs` works in both)")
@parity(**LOOSE)
def test_feature_extractor_from_a_sequential_input_and_an_inner_layer_output(tf):
    """The Keras FAQ's feature extractor on a Sequential: ``Model(inputs=seq.input,
    outputs=seq.get_layer("t_l0").output)``, then its features."""
    x, _ = _xy(4, seed=3085)
    seq = _mlp(tf, (4, 5, 1), 3086, name="t")
    extractor = tf.keras.Model(inputs=seq.input, outputs=seq.get_layer("t_l0").output)
    return extractor(x), len(extractor.weights)


@parity(**LOOSE)
def test_feature_matching_through_a_functional_sub_model_of_the_frozen_teacher(tf):
    """FitNets-style hints: ``Model(teacher.input, teacher.get_layer("teacher_l0").output)`` gives
    the frozen teacher's intermediate features; the student's own sub-model's features pass a
    trainable regressor and an L2 to them is added to the task loss.  The sub-models share the
    teacher's and the student's Variables (lists counted), the teacher's gradients are None."""
    x, y = _xy(8, seed=3081)
    teacher = _functional(tf, (4, 5, 1), 3082, name="teacher")
    student = _functional(tf, (4, 3, 1), 3083, name="student")
    teacher.trainable = False
    t_feat = tf.keras.Model(teacher.input, teacher.get_layer("teacher_l0").output)
    s_feat = tf.keras.Model(student.input, student.get_layer("student_l0").output)
    regressor = tf.Variable(init_array((3, 5), 3084), name="regressor")
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    counts = (len(t_feat.trainable_variables), len(t_feat.weights), len(s_feat.trainable_variables))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            hint = tf.reduce_mean(tf.square(tf.matmul(s_feat(x), regressor) - t_feat(x)))
            task = tf.reduce_mean(tf.square(student(x) - y))
            loss = task + 0.5 * hint
        variables = student.trainable_variables + [regressor]
        grads = tape.gradient(loss, variables + teacher.weights)
        opt.apply_gradients(zip(grads[:len(variables)], variables))
        out.append((loss, hint, grads[:len(variables)], [g is None for g in grads[len(variables):]]))
    return counts, out, student.get_weights(), regressor


@parity(modes=True, **LOOSE)
def test_ewc_with_a_fisher_diagonal_from_per_example_gradients(tf):
    """Elastic weight consolidation: after task A, the Fisher diagonal is the mean over examples
    of squared per-example gradients of the log-likelihood, computed by a Python loop of tapes and
    by ``tape.jacobian`` of the per-example losses (equal); the task-A weights are kept as
    constants; task B trains on ``ce_B + lam/2 * sum(F * (w - w_A)^2)`` in a compiled step."""
    xa, ya = _xy(6, seed=3091, classes=2)
    xb, yb = _xy(6, seed=3092, classes=2)
    ws = [tf.Variable(init_array((4, 3), 3093)), tf.Variable(np.zeros(3, np.float32)),
          tf.Variable(init_array((3, 2), 3094)), tf.Variable(np.zeros(2, np.float32))]
    opt = tf.keras.optimizers.legacy.SGD(0.2)

    def logits(x):
        return tf.matmul(tf.tanh(tf.matmul(x, ws[0]) + ws[1]), ws[2]) + ws[3]

    def per_example(x, y):
        return tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits(x))

    for _ in range(3):   # task A
        with tf.GradientTape() as tape:
            loss_a = tf.reduce_mean(per_example(xa, ya))
        opt.apply_gradients(zip(tape.gradient(loss_a, ws), ws))
    fisher_loop = [tf.zeros_like(w) for w in ws]
    for i in range(6):
        with tf.GradientTape() as tape:
            li = per_example(xa[i:i + 1], ya[i:i + 1])[0]
        fisher_loop = [f + tf.square(g) / 6.0 for f, g in zip(fisher_loop, tape.gradient(li, ws))]
    with tf.GradientTape() as tape:
        losses = per_example(xa, ya)
    jac = tape.jacobian(losses, ws)
    fisher = [tf.reduce_mean(tf.square(j), axis=0) for j in jac]
    anchors = [tf.constant(w.numpy()) for w in ws]

    @tf.function
    def step_b(x, y):
        with tf.GradientTape() as tape:
            ce = tf.reduce_mean(per_example(x, y))
            penalty = tf.add_n([tf.reduce_sum(f * tf.square(w - a)) for f, w, a in zip(fisher, ws, anchors)])
            loss = ce + 50.0 * penalty
        grads = tape.gradient(loss, ws)
        opt.apply_gradients(zip(grads, ws))
        return loss, ce, penalty, grads

    out = [step_b(xb, yb) for _ in range(3)]
    return fisher_loop, fisher, [tf.shape(j) for j in jac], out, ws, tf.reduce_mean(per_example(xa, ya))


@parity(modes=True, **LOOSE)
def test_l2_sp_pulls_the_fine_tuned_base_to_its_pre_trained_weights(tf):
    """L2-SP: the pre-trained base's weights kept as constants (``tf.constant(v.numpy())``), the
    loss adds ``alpha/2 * ||w - w0||^2`` over the base and ``beta/2 * ||w||^2`` over the new head;
    at the first step the base's penalty and its gradient are zero.  Keras base and head, compiled
    step, tf_keras' new SGD with momentum."""
    x, y = _xy(8, seed=3101)
    base = _mlp(tf, (4, 5), 3102, name="base")
    head = _mlp(tf, (5, 1), 3103, name="head", last=None)
    w0 = [tf.constant(v.numpy()) for v in base.trainable_variables]
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)

    @tf.function
    def step(x, y):
        with tf.GradientTape(persistent=True) as tape:
            task = tf.reduce_mean(tf.square(head(base(x)) - y))
            sp = tf.add_n([tf.reduce_sum(tf.square(v - c)) for v, c in zip(base.trainable_variables, w0)])
            l2 = tf.add_n([tf.reduce_sum(tf.square(v)) for v in head.trainable_variables])
            loss = task + 0.5 * 1.0 * sp + 0.5 * 0.01 * l2
        variables = base.trainable_variables + head.trainable_variables
        grads = tape.gradient(loss, variables)
        g_sp = tape.gradient(sp, variables)
        del tape
        opt.apply_gradients(zip(grads, variables))
        return loss, sp, l2, grads, [g is None for g in g_sp], g_sp[:2]

    out = [step(x, y) for _ in range(3)]
    return out, base.get_weights(), head.get_weights()


@parity(**LOOSE)
def test_uniform_and_greedy_model_soups_by_assign_of_averaged_weights(tf):
    """Model soups: three copies of one pre-trained model (``clone_model`` + ``set_weights``)
    fine-tuned by ``fit`` at different rates, the uniform soup written into a fresh clone by
    ``v.assign(tf.add_n([...]) / 3)`` per Variable, and a greedy soup (ingredients sorted by held-out
    loss, each kept if the average with it does not get worse).  Held-out losses of all."""
    x, y = _xy(12, seed=3111)
    xv, yv = _xy(6, seed=3112)
    pre = _mlp(tf, (4, 5, 1), 3113, name="pre")
    ingredients = []
    for lr in (0.01, 0.05, 0.1):
        m = tf.keras.models.clone_model(pre)
        m.set_weights(pre.get_weights())
        m.compile(optimizer=tf.keras.optimizers.legacy.SGD(lr), loss="mse")
        m.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
        ingredients.append(m)

    def held_out(m):
        return float(tf.reduce_mean(tf.square(m(xv) - yv)))

    soup = tf.keras.models.clone_model(pre)
    for i, v in enumerate(soup.weights):
        v.assign(tf.add_n([m.weights[i] for m in ingredients]) / 3.0)
    order = sorted(range(3), key=lambda i: held_out(ingredients[i]))
    greedy, kept = tf.keras.models.clone_model(pre), [order[0]]
    greedy.set_weights(ingredients[order[0]].get_weights())
    best = held_out(greedy)
    for i in order[1:]:
        trial = kept + [i]
        for j, v in enumerate(greedy.weights):
            v.assign(tf.add_n([ingredients[k].weights[j] for k in trial]) / float(len(trial)))
        score = held_out(greedy)
        if score <= best:
            kept, best = trial, score
    for j, v in enumerate(greedy.weights):
        v.assign(tf.add_n([ingredients[k].weights[j] for k in kept]) / float(len(kept)))
    return ([held_out(m) for m in ingredients], held_out(pre), held_out(soup), order, kept, held_out(greedy),
            soup.get_weights())


@parity(**LOOSE)
def test_pre_trained_base_restored_from_a_checkpoint_into_a_bigger_model(tf):
    """Pre-training saves ``tf.train.Checkpoint(base=base, head=old_head, optimizer=opt)``; the
    fine-tuning program builds a fresh base (other values) inside a bigger model with a new head
    and restores ``tf.train.Checkpoint(base=new_base)`` from it: ``assert_existing_objects_matched``
    passes, ``assert_consumed`` raises AssertionError (the old head and optimizer are left), and
    ``expect_partial()`` silences it; the restored base equals the pre-trained one and trains on."""
    x, y = _xy(8, seed=3121)
    base = _mlp(tf, (4, 5), 3122, name="base")
    old_head = _mlp(tf, (5, 2), 3123, name="old_head", last=None)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(old_head(base(x)) - y))
        variables = base.trainable_variables + old_head.trainable_variables
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
    path = tf.train.Checkpoint(base=base, head=old_head, optimizer=opt).save(tempfile.mkdtemp() + "/pre")

    new_base = _mlp(tf, (4, 5), 9999, name="base")
    inputs = tf.keras.Input((4,))
    bigger = tf.keras.Model(inputs, tf.keras.layers.Dense(1, name="new_head")(new_base(inputs)))
    keras_init(bigger.get_layer("new_head"), 3124)
    status = tf.train.Checkpoint(base=new_base).restore(path)
    matched = raises(status.assert_existing_objects_matched)
    consumed = raises(status.assert_consumed)
    status.expect_partial()
    same = [bool(np.array_equal(a, b)) for a, b in zip(base.get_weights(), new_base.get_weights())]
    ft = tf.keras.optimizers.legacy.Adam(0.01)
    losses = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(bigger(x) - y))
        ft.apply_gradients(zip(tape.gradient(loss, bigger.trainable_variables), bigger.trainable_variables))
        losses.append(loss)
    return type(matched).__name__, consumed, same, losses, bigger.get_weights(), int(ft.iterations)
