"""Keras-2 optimizers (TF_SEMANTICS.md item 17): the same training program under
tf_keras' legacy OptimizerV2 and tapejax.optimizers; weights and every slot after several steps."""

import numpy as np

from .harness import Raised, parity, raises, warned

LEG = "keras.optimizers.legacy"
RT = dict(rtol=2e-6, atol=1e-7)   # float32 rounding
# XLA:CPU contracts a*b+c into FMAs (TF's Eigen kernels do not): an ulp per op, which
# FTRL's division by a small quadratic term amplifies over six steps.
RT_FTRL = dict(rtol=2e-5, atol=1e-6)


def _train(tf, opt, steps=6, constraint=None):
    w = tf.Variable([[0.5, -1.0], [2.0, 0.25]], name="w", constraint=constraint)
    b = tf.Variable([0.1, -0.2], name="b")
    x = tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])
    losses = []
    for _ in range(steps):
        with tf.GradientTape() as t:
            y = tf.matmul(x, w) + b
            loss = tf.reduce_mean(tf.square(y - 1.0))
        grads = t.gradient(loss, [w, b])
        opt.apply_gradients(zip(grads, [w, b]))
        losses.append(loss)
    return {"w": w, "b": b, "loss": losses[-1], "iterations": int(opt.iterations.numpy()),
            "slots": [v.numpy() for v in opt.variables()[1:]]}


def _opt(tf, name, **kw):
    return getattr(tf.keras.optimizers.legacy, name)(**kw)


@parity(needs=f"{LEG}.SGD", **RT)
def test_sgd_plain(tf):
    return _train(tf, _opt(tf, "SGD", learning_rate=0.1))


@parity(needs=f"{LEG}.SGD", **RT)
def test_sgd_momentum(tf):
    return _train(tf, _opt(tf, "SGD", learning_rate=0.05, momentum=0.9))


@parity(needs=f"{LEG}.SGD", **RT)
def test_sgd_nesterov(tf):
    return _train(tf, _opt(tf, "SGD", learning_rate=0.05, momentum=0.8, nesterov=True))


@parity(needs=f"{LEG}.Adam", **RT)
def test_adam_defaults(tf):
    return _train(tf, _opt(tf, "Adam"))


@parity(needs=f"{LEG}.Adam", **RT)
def test_adam_amsgrad_big_epsilon(tf):
    """epsilon is added to sqrt(v) before the bias correction (Keras), not after (optax)."""
    return _train(tf, _opt(tf, "Adam", learning_rate=0.1, epsilon=0.5, amsgrad=True))


@parity(needs="keras.optimizers.AdamW", **RT)
def test_adamw(tf):
    opt = tf.keras.optimizers.AdamW(learning_rate=0.05, weight_decay=0.1)
    r = _train(tf, opt)
    r.pop("slots")   # Keras 2's AdamW interleaves m/v per variable; values checked via the weights
    return r


@parity(needs=f"{LEG}.RMSprop", **RT)
def test_rmsprop_plain(tf):
    return _train(tf, _opt(tf, "RMSprop", learning_rate=0.01))


@parity(needs=f"{LEG}.RMSprop", **RT)
def test_rmsprop_momentum_centered(tf):
    return _train(tf, _opt(tf, "RMSprop", learning_rate=0.01, momentum=0.5, centered=True))


@parity(needs=f"{LEG}.RMSprop", **RT)
def test_rmsprop_centered_no_momentum(tf):
    return _train(tf, _opt(tf, "RMSprop", learning_rate=0.01, centered=True, epsilon=0.1))


@parity(needs=f"{LEG}.Adagrad", **RT)
def test_adagrad(tf):
    return _train(tf, _opt(tf, "Adagrad", learning_rate=0.1, initial_accumulator_value=0.2))


@parity(needs=f"{LEG}.Adadelta", **RT)
def test_adadelta(tf):
    return _train(tf, _opt(tf, "Adadelta", learning_rate=1.0))


@parity(needs=f"{LEG}.Adamax", **RT)
def test_adamax(tf):
    return _train(tf, _opt(tf, "Adamax", learning_rate=0.05))


@parity(needs=f"{LEG}.Nadam", **RT)
def test_nadam(tf):
    return _train(tf, _opt(tf, "Nadam", learning_rate=0.05))


@parity(needs=f"{LEG}.Ftrl", **RT_FTRL)
def test_ftrl(tf):
    return _train(tf, _opt(tf, "Ftrl", learning_rate=0.2, l1_regularization_strength=0.01,
                           l2_regularization_strength=0.02, beta=0.1))


@parity(needs=f"{LEG}.Ftrl", **RT_FTRL)
def test_ftrl_power_and_shrinkage(tf):
    return _train(tf, _opt(tf, "Ftrl", learning_rate=0.2, learning_rate_power=-0.7,
                           l2_shrinkage_regularization_strength=0.05))


@parity(needs=f"{LEG}.SGD", **RT)
def test_clipnorm_clipvalue_decay(tf):
    a = _train(tf, _opt(tf, "SGD", learning_rate=0.1, clipnorm=0.5))
    b = _train(tf, _opt(tf, "SGD", learning_rate=0.1, clipvalue=0.3, decay=0.1))
    c = _train(tf, _opt(tf, "Adam", learning_rate=0.1, global_clipnorm=0.7))
    return a, b, c


@parity(needs="keras.optimizers.schedules.ExponentialDecay", **RT)
def test_schedules(tf):
    s = tf.keras.optimizers.schedules
    scheds = [s.ExponentialDecay(0.1, decay_steps=3, decay_rate=0.5),
              s.ExponentialDecay(0.1, decay_steps=3, decay_rate=0.5, staircase=True),
              s.PiecewiseConstantDecay([2, 4], [0.1, 0.05, 0.01]),
              s.CosineDecay(0.1, decay_steps=5, alpha=0.1),
              s.CosineDecay(0.0, decay_steps=5, warmup_target=0.2, warmup_steps=3)]
    values = [[float(np.asarray(sc(step))) for step in range(9)] for sc in scheds]
    trained = _train(tf, _opt(tf, "SGD", learning_rate=s.PiecewiseConstantDecay([2, 4], [0.1, 0.05, 0.01])))
    return values, trained


@parity(needs="keras.optimizers.schedules.ExponentialDecay", **RT)
def test_inverse_time_polynomial_and_restart_schedules(tf):
    """InverseTimeDecay, PolynomialDecay (capped and cycling) and CosineDecayRestarts (t_mul 1
    and 2, m_mul) at steps 0..14, their configs, and SGD trained with each."""
    s = tf.keras.optimizers.schedules
    scheds = [s.InverseTimeDecay(0.2, decay_steps=2, decay_rate=0.5),
              s.InverseTimeDecay(0.2, decay_steps=2, decay_rate=0.5, staircase=True),
              s.PolynomialDecay(0.1, decay_steps=5, end_learning_rate=0.01, power=2.0),
              s.PolynomialDecay(0.1, decay_steps=4, cycle=True),
              s.CosineDecayRestarts(0.1, first_decay_steps=3, alpha=0.1),
              s.CosineDecayRestarts(0.1, first_decay_steps=2, t_mul=1.0, m_mul=0.5)]
    values = [[float(np.asarray(sc(step))) for step in range(15)] for sc in scheds]
    configs = [sorted(sc.get_config()) for sc in scheds]
    trained = [_train(tf, _opt(tf, "SGD", learning_rate=sc)) for sc in scheds[::2]]
    return values, configs, trained, float(np.asarray(type(scheds[2]).from_config(scheds[2].get_config())(3)))


@parity(needs="keras.optimizers.schedules.ExponentialDecay", **RT)
def test_schedule_called_by_the_user_gives_a_tensor(tf):
    """A built-in schedule called with an int, a Tensor, ``optimizer.iterations`` or inside a
    function returns a float32 Tensor, as in TF (a training loop logs ``sched(step).numpy()``)."""
    s = tf.keras.optimizers.schedules
    scheds = [s.ExponentialDecay(0.1, decay_steps=3, decay_rate=0.5, staircase=True),
              s.PiecewiseConstantDecay([2, 4], [0.1, 0.05, 0.01]), s.CosineDecay(0.1, decay_steps=5)]
    opt = _opt(tf, "SGD", learning_rate=scheds[0])
    w = tf.Variable([1.0, 2.0])
    for _ in range(4):
        opt.apply_gradients([(tf.constant([0.5, -0.5]), w)])
    logged = tf.function(lambda step: [sc(step) for sc in scheds])
    return ([sc(3) for sc in scheds], [sc(tf.constant(4)) for sc in scheds],
            scheds[0](opt.iterations).numpy(), logged(tf.constant(5)), w)


@parity(needs=f"{LEG}.SGD", **RT)
def test_constraint_applied_after_update(tf):
    return _train(tf, _opt(tf, "SGD", learning_rate=0.5), constraint=lambda v: tf.clip_by_value(v, -0.3, 0.3))


@parity(needs=f"{LEG}.SGD", **RT)
def test_minimize_seed_000(tf):
    """Seed 000: minimize with grad_loss and a persistent tape; extra grad_loss entries are dropped."""
    optimizer = tf.keras.optimizers.legacy.SGD(1.0)
    w = [tf.Variable([0.0, 0.1]), tf.Variable([0.0, 0.2])]
    x = 2.0
    with tf.GradientTape(persistent=True) as tape:
        y = x * (w[0] + w[1])
    optimizer.minimize(y, w, grad_loss=[tf.constant([1., 2.]), tf.constant([2., 2.])], tape=tape)
    out1 = [v.numpy() for v in w]          # TF: [[-2 -3.9], [-2 -3.8]]
    w2 = tf.Variable([1.0, 0.0])
    with tf.GradientTape() as tape:
        y = x * w2
    optimizer.minimize(y, w2, grad_loss=tf.constant([2.0, 5.0]), tape=tape)
    return out1, w2                        # TF: [-3 -10]


@parity(needs=f"{LEG}.SGD", **RT)
def test_minimize_callable_and_var_list_callable(tf):
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    v = tf.Variable(3.0)
    opt.minimize(lambda: v * v, [v])
    opt.minimize(lambda: v * v, lambda: [v])
    return v, int(opt.iterations.numpy())


@parity(needs=f"{LEG}.SGD")
def test_none_gradients(tf):
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    a, b = tf.Variable(1.0), tf.Variable(2.0)
    _, skipped_warned = warned(opt.apply_gradients, [(tf.constant(1.0), a), (None, b)])
    all_none = raises(opt.apply_gradients, [(None, a), (None, b)])
    tensor_no_tape = raises(opt.minimize, tf.constant(1.0), [a])
    return a, b, skipped_warned, all_none, tensor_no_tape


@parity(needs=f"{LEG}.SGD")
def test_constructor_errors(tf):
    L = tf.keras.optimizers.legacy
    return (raises(L.SGD, 0.1, clipnorm=1.0, global_clipnorm=1.0),
            raises(L.SGD, 0.1, momentum=-1.0),
            raises(L.Adam, 0.1, foo=1),
            raises(L.SGD, 0.1, clipnorm=-1.0),
            raises(L.Adagrad, 0.1, initial_accumulator_value=-1.0),
            raises(L.Nadam, tf.keras.optimizers.schedules.ExponentialDecay(0.1, 3, 0.5)))


@parity(needs=["function", f"{LEG}.Adam"], **RT)
def test_compiled_training_step_adam(tf):
    """The whole step (tape + Keras optimizer, slots created on the first call) under tf.function."""
    w = tf.Variable([[0.5, -1.0], [2.0, 0.25]], name="w")
    b = tf.Variable([0.1, -0.2], name="b")
    opt = tf.keras.optimizers.legacy.Adam(0.05, amsgrad=True)

    @tf.function
    def step(x):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - 1.0))
        opt.apply_gradients(zip(t.gradient(loss, [w, b]), [w, b]))
        return loss

    x = tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])
    losses = [step(x) for _ in range(5)]
    return losses[-1], w, b, int(opt.iterations.numpy()), [v.numpy() for v in opt.variables()[1:]]


@parity(needs=["function", "cond", "while_loop"], **RT)
def test_compiled_control_flow_gradients(tf):
    """cond / while_loop inside tf.function, differentiated by a tape inside it."""
    v = tf.Variable(2.0)

    @tf.function
    def f(x):
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.cond(x > 0.0, lambda: x * v * 3.0, lambda: x * x)
            z = tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * x),
                              (tf.constant(0), tf.constant(1.0)), maximum_iterations=5)[1]
            total = y + z
        return total, t.gradient(total, [x, v])

    return f(tf.constant(1.5)), f(tf.constant(-2.0))


# --------------------------------------------------------------------------
# tf.function's rules that a compiled training step relies on
# --------------------------------------------------------------------------

@parity(needs="function")
def test_function_tracing_rules(tf):
    """Tensors key by shape/dtype, Python values by value; variables only on the first call."""
    @tf.function
    def h(x, n):
        return x * n

    h(tf.constant(1.0), 2)
    h(tf.constant(2.0), 2)
    h(tf.constant(2.0), 3)
    out = h(tf.constant([2.0]), 3)
    count = h.experimental_get_tracing_count()

    @tf.function
    def every_call():
        v = tf.Variable(1.0)
        return v + 1.0

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def s(x):
        return x * 2.0

    return (count, out, raises(every_call), s(tf.constant([1.0, 2.0])), raises(s, tf.constant([1, 2])),
            raises(s, tf.constant([[1.0]])), raises(tf.function, 5))


@parity(needs="function")
def test_function_lazily_built_module_and_optimizer(tf):
    """Keras-style lazy build: variables and slots created on the first call, updated on later ones."""
    class Lazy(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = None

        def __call__(self, x):
            if self.w is None:
                self.w = tf.Variable(tf.ones([2, 1]), name="w")
            return tf.matmul(x, self.w)

    m = Lazy()
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)

    @tf.function
    def step(x):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(tf.square(m(x)))
        opt.apply_gradients(zip(t.gradient(loss, m.trainable_variables), m.trainable_variables))
        return loss

    x = tf.constant([[1.0, 2.0]])
    losses = [step(x) for _ in range(3)]
    return losses, m.w, [v.numpy() for v in opt.variables()[1:]], len(m.trainable_variables)


@parity(needs=f"{LEG}.Adam", **RT)
def test_an_optimizer_loop_whose_updates_are_predicted(tf):
    """Ten Adam steps (tapejax computes the update inside the gradient's program from step 3):
    the learning rate set at step 5, a gradient read at step 6, a slot reset at step 7 and the
    gradients scaled at step 8 (none of those steps matches a prediction); every loss, the
    read gradient, the weights and every slot."""
    opt = _opt(tf, "Adam", learning_rate=0.1)
    w = tf.Variable([[0.5, -1.0], [2.0, 0.25]], name="w")
    b = tf.Variable([0.1, -0.2], name="b")
    x = tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])
    losses, read = [], None
    for step in range(10):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - 1.0))
        grads = t.gradient(loss, [w, b])
        if step == 4:
            opt.learning_rate = 0.05
        if step == 5:
            read = grads[0]
        if step == 6:
            opt.get_slot(w, "m").assign(tf.zeros_like(w))
        if step == 7:
            grads = [g * 0.5 for g in grads]
        opt.apply_gradients(zip(grads, [w, b]))
        losses.append(loss)
    return {"losses": losses, "read": read, "w": w, "b": b, "iterations": int(opt.iterations.numpy()),
            "slots": [v.numpy() for v in opt.variables()[1:]]}


# -- hyperparameters changed during training ------------------------------------------------
# tf_keras keeps learning_rate, decay, beta_1/beta_2, momentum, rho and Ftrl's strengths in
# Variables that its update reads at every step (``opt.beta_1 = 0.5`` assigns one); epsilon,
# nesterov and the clipping arguments are plain attributes that an eager step reads when it
# runs.  Eight steps, so that tapejax's predicted updates (from step 3) meet the changes;
# XLA's fused multiply-adds (see RT_FTRL) leave a few ulps on values that shrink over them.
RT_LONG = dict(rtol=2e-5, atol=1e-6)

def _train_changing(tf, opt, changes, steps=8):
    w = tf.Variable([[0.5, -1.0], [2.0, 0.25]], name="w")
    b = tf.Variable([0.1, -0.2], name="b")
    x = tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])
    losses = []
    for step in range(steps):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - 1.0))
        grads = t.gradient(loss, [w, b])
        if step in changes:
            changes[step](opt)
        opt.apply_gradients(zip(grads, [w, b]))
        losses.append(loss)
    return {"losses": losses, "w": w, "b": b, "slots": [v.numpy() for v in opt.variables()[1:]]}


def _set(name, value):
    return lambda opt: setattr(opt, name, value)


@parity(needs=f"{LEG}.Adam", **RT_LONG)
def test_adam_hyperparameters_changed_between_steps(tf):
    """beta_1 set by attribute, beta_2 assigned through its Variable, epsilon (a plain float)
    set: each takes effect at the next step; the hyperparameters read back."""
    opt = _opt(tf, "Adam", learning_rate=0.1)
    out = _train_changing(tf, opt, {3: _set("beta_1", 0.5),
                                    5: lambda o: o.beta_2.assign(0.9),
                                    6: _set("epsilon", 0.1)})
    return out, float(opt.beta_1.numpy()), float(opt.beta_2.numpy()), opt.epsilon


@parity(needs=f"{LEG}.Adam", modes=True, **RT_LONG)
def test_learning_rate_given_as_a_variable_follows_its_assigns(tf):
    """``learning_rate=tf.Variable(...)``: the legacy optimizer keeps that Variable, so a decay
    written as ``lr.assign(...)`` (eagerly or in a function) changes the next update; setting
    ``opt.learning_rate`` writes into it."""
    lr = tf.Variable(0.1)
    opt = _opt(tf, "Adam", learning_rate=lr)
    decay = tf.function(lambda: lr.assign(lr * 0.5))
    out = _train_changing(tf, opt, {2: lambda o: lr.assign(0.02), 4: lambda o: decay(),
                                    6: _set("learning_rate", 0.3)})
    return out, lr, opt.learning_rate is lr


@parity(needs=[f"{LEG}.SGD", f"{LEG}.Adam", f"{LEG}.RMSprop", f"{LEG}.Ftrl"], modes=True, **RT_FTRL)
def test_hyperparameters_given_as_variables_follow_their_assigns(tf):
    """tf_keras keeps any hyperparameter given as a Variable (``_set_hyper``): the user's
    ``assign`` (eagerly or in a function) changes the next update, ``opt.momentum = x`` writes
    into that Variable, and the optimizer's attribute is the user's Variable."""
    m, b1, b2, rho, l2 = (tf.Variable(0.9), tf.Variable(0.8), tf.Variable(0.99), tf.Variable(0.9),
                          tf.Variable(0.01))
    sgd = _opt(tf, "SGD", learning_rate=0.05, momentum=m)
    adam = _opt(tf, "Adam", learning_rate=0.1, beta_1=b1, beta_2=b2)
    rms = _opt(tf, "RMSprop", learning_rate=0.01, rho=rho, momentum=tf.Variable(0.5))
    ftrl = _opt(tf, "Ftrl", learning_rate=0.2, l2_regularization_strength=l2)
    halve = tf.function(lambda: b2.assign(b2 * 0.5))
    out = (_train_changing(tf, sgd, {2: lambda o: m.assign(0.1), 4: _set("momentum", 0.0)}),
           _train_changing(tf, adam, {2: lambda o: b1.assign(0.5), 4: lambda o: halve()}),
           _train_changing(tf, rms, {3: lambda o: rho.assign(0.5)}),
           _train_changing(tf, ftrl, {3: lambda o: l2.assign(0.2)}))
    return out, m, b2, sgd.momentum is m, adam.beta_1 is b1, sgd.get_config()["momentum"]


@parity(needs=[f"{LEG}.SGD", f"{LEG}.Adam"], modes=True, **RT_LONG)
def test_hyperparameters_given_as_callables_tensors_and_zero_variables(tf):
    """A callable is called at every update; a Tensor is a constant; a momentum Variable at 0
    when the SGD is made gives no momentum slot (tf_keras decides it then), whatever it is
    assigned later."""
    box = [0.9]
    sgd = _opt(tf, "SGD", learning_rate=0.05, momentum=lambda: box[0])
    adam = _opt(tf, "Adam", learning_rate=0.1, beta_1=tf.constant(0.5))
    zero = tf.Variable(0.0)
    plain = _opt(tf, "SGD", learning_rate=0.05, momentum=zero)
    out = (_train_changing(tf, sgd, {3: lambda o: box.__setitem__(0, 0.2)}),
           _train_changing(tf, adam, {}),
           _train_changing(tf, plain, {1: lambda o: zero.assign(0.9)}))
    return out, sgd.get_config()["momentum"], len(plain.variables())


@parity(needs=f"{LEG}.SGD", **RT_LONG)
def test_sgd_momentum_and_nesterov_changed_between_steps(tf):
    return _train_changing(tf, _opt(tf, "SGD", learning_rate=0.05, momentum=0.9),
                           {2: _set("momentum", 0.5), 4: _set("nesterov", True), 6: _set("momentum", 0.0)})


@parity(needs=f"{LEG}.SGD", **RT_LONG)
def test_changes_tf_ignores(tf):
    """Momentum set on an SGD made without it (no slot: it stays plain SGD) and decay
    assigned (the update reads the constructor's decay): no effect, in both."""
    a = _train_changing(tf, _opt(tf, "SGD", learning_rate=0.1), {3: _set("momentum", 0.9)})
    b = _train_changing(tf, _opt(tf, "SGD", learning_rate=0.1, decay=0.1), {3: _set("decay", 0.9)})
    return a, b


@parity(needs=f"{LEG}.RMSprop", **RT_LONG)
def test_rmsprop_hyperparameters_changed_between_steps(tf):
    return _train_changing(tf, _opt(tf, "RMSprop", learning_rate=0.01, momentum=0.5, centered=True),
                           {2: _set("rho", 0.5), 4: _set("momentum", 0.1), 5: _set("epsilon", 0.01)})


@parity(needs=[f"{LEG}.Adadelta", f"{LEG}.Adamax", f"{LEG}.Nadam"], **RT_LONG)
def test_adadelta_adamax_nadam_hyperparameters_changed(tf):
    return (_train_changing(tf, _opt(tf, "Adadelta", learning_rate=1.0), {3: _set("rho", 0.5)}),
            _train_changing(tf, _opt(tf, "Adamax", learning_rate=0.1),
                            {3: _set("beta_1", 0.5), 5: _set("beta_2", 0.9)}),
            _train_changing(tf, _opt(tf, "Nadam", learning_rate=0.05),
                            {3: _set("beta_1", 0.5), 5: _set("beta_2", 0.9)}))


@parity(needs=f"{LEG}.Ftrl", **RT_FTRL)
def test_ftrl_hyperparameters_changed_between_steps(tf):
    """learning_rate_power leaves (and comes back to) -0.5, where TF's kernel takes square roots."""
    return _train_changing(tf, _opt(tf, "Ftrl", learning_rate=0.2),
                           {2: _set("l1_regularization_strength", 0.01), 3: _set("learning_rate_power", -0.7),
                            4: _set("beta", 0.1), 5: _set("l2_regularization_strength", 0.02),
                            6: _set("learning_rate_power", -0.5)})


@parity(needs=["function", f"{LEG}.SGD", f"{LEG}.Adam"], **RT_LONG)
def test_hyperparameters_changed_between_compiled_steps(tf):
    """A compiled step reads the hyperparameter Variables when it runs (no retrace needed)."""
    out = []
    for opt, name, value in ((_opt(tf, "SGD", learning_rate=0.05, momentum=0.9), "momentum", 0.5),
                             (_opt(tf, "Adam", learning_rate=0.1), "beta_1", 0.5)):
        w = tf.Variable([[0.5, -1.0], [2.0, 0.25]], name="w")

        @tf.function
        def step(x):
            with tf.GradientTape() as t:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
            opt.apply_gradients(zip(t.gradient(loss, [w]), [w]))
            return loss

        x = tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])
        losses = [step(x) for _ in range(2)]
        setattr(opt, name, value)
        losses += [step(x) for _ in range(3)]
        out.append((losses, w, [v.numpy() for v in opt.variables()[1:]]))
    return out


@parity(needs=f"{LEG}.Adam")
def test_hyperparameter_bad_values(tf):
    """(After a step: TF's hyperparameter Variables exist; before, it keeps any value and
    fails when it makes them.)"""
    opt = _opt(tf, "Adam", learning_rate=0.1)
    _train_changing(tf, opt, {}, steps=1)
    return raises(setattr, opt, "beta_1", "high"), raises(setattr, opt, "beta_1", [0.5, 0.6]), \
        float(opt.beta_1.numpy())


@parity(needs=["function", f"{LEG}.SGD"], **RT_LONG)
def test_hyperparameter_set_from_a_tensor_inside_a_compiled_step(tf):
    """``opt.momentum = m`` with ``m`` an argument of the compiled step (TF then leaves a
    graph tensor in ``opt.momentum``; tapejax assigns its Variable: only the weights compare)."""
    w = tf.Variable([1.0, -2.0])
    opt = _opt(tf, "SGD", learning_rate=0.1, momentum=0.9)

    @tf.function
    def step(g, m):
        opt.momentum = m
        opt.apply_gradients([(g, w)])

    g = tf.constant([1.0, 1.0])
    for m in (0.9, 0.5, 0.0):
        step(g, tf.constant(m))
    return w


@parity(needs=[f"{LEG}.SGD", "keras.optimizers.schedules.LearningRateSchedule"], **RT)
def test_learning_rate_callables(tf):
    """A schedule is called with the step; a TypeError it raises is its own (not retried without
    the step); a zero-argument callable is called with nothing, and its own TypeError too."""
    L = tf.keras.optimizers.legacy

    class Raising(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            raise TypeError("the schedule's own error")

        def get_config(self):
            return {}

    class Halving(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            return 0.4 / (1.0 + tf.cast(step, tf.float32))

        def get_config(self):
            return {}

    def message(lr):
        v = tf.Variable([1.0, 2.0])
        try:
            L.SGD(learning_rate=lr).apply_gradients([(tf.constant([1.0, 1.0]), v)])
        except TypeError as e:
            return str(e)
        return "no error"

    def bad_zero_arg():
        raise TypeError("the callable's own error")

    def train(lr):
        v = tf.Variable([1.0, 2.0])
        opt = L.SGD(learning_rate=lr)
        for _ in range(3):
            opt.apply_gradients([(tf.constant([1.0, -1.0]), v)])
        return v

    return (message(Raising()), message(bad_zero_arg), train(Halving()), train(lambda: 0.25))


# -- Lion and Adafactor (tf_keras' new optimizers), get / serialize / deserialize ------------------

def _train3(tf, opt, steps=6):
    """``_train`` plus a rank-3 Variable (Adafactor factors rank >= 2)."""
    w = tf.Variable([[0.5, -1.0], [2.0, 0.25]], name="w")
    b = tf.Variable([0.1, -0.2], name="b")
    k = tf.Variable(np.linspace(-1.0, 1.0, 24).reshape(2, 3, 4).astype(np.float32), name="k")
    x = tf.constant([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])
    for _ in range(steps):
        with tf.GradientTape() as t:
            y = tf.matmul(x, w) + b
            loss = tf.reduce_mean(tf.square(y - 1.0)) + tf.reduce_sum(tf.square(k - 0.3) * k)
        grads = t.gradient(loss, [w, b, k])
        opt.apply_gradients(zip(grads, [w, b, k]))
    return {"w": w, "b": b, "k": k, "loss": loss, "iterations": int(opt.iterations.numpy())}


@parity(needs="keras.optimizers.Lion", modes=True, **RT)
def test_lion_defaults_and_weight_decay(tf):
    return (_train3(tf, tf.keras.optimizers.Lion()),
            _train3(tf, tf.keras.optimizers.Lion(learning_rate=0.05, beta_1=0.8, beta_2=0.95, weight_decay=0.1)))


@parity(needs="keras.optimizers.Lion", **RT)
def test_lion_sparse_gradient(tf):
    """A gather's IndexedSlices gradient, duplicate rows included (tf_keras' sparse Lion)."""
    table = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0)
    opt = tf.keras.optimizers.Lion(learning_rate=0.1)
    for _ in range(3):
        with tf.GradientTape() as t:
            loss = tf.reduce_sum(tf.square(tf.gather(table, [0, 2, 2])) * [[1.0], [2.0], [-3.0]])
        opt.apply_gradients([(t.gradient(loss, table), table)])
    return table


@parity(needs="keras.optimizers.Adafactor", modes=True, rtol=2e-5, atol=1e-6)
def test_adafactor(tf):
    return (_train3(tf, tf.keras.optimizers.Adafactor()),
            _train3(tf, tf.keras.optimizers.Adafactor(learning_rate=0.5, relative_step=False, clip_threshold=0.5,
                                                      epsilon_2=1e-2, weight_decay=0.05)),
            _train3(tf, tf.keras.optimizers.Adafactor(
                learning_rate=tf.keras.optimizers.schedules.ExponentialDecay(0.5, 2, 0.5))))


@parity(needs="keras.optimizers.get")
def test_get_serialize_deserialize(tf):
    """Names, dicts and instances; serialize's dict and back; TF's errors."""
    ko = tf.keras.optimizers
    got = [type(ko.get(n)).__name__ for n in ("adam", "Adam", "sgd", "RMSprop", "adamw", "ftrl")]
    sgd = ko.get({"class_name": "SGD", "config": {"learning_rate": 0.5}})
    same = ko.get(sgd) is sgd
    adamw = ko.AdamW(learning_rate=0.02, beta_1=0.7)
    ser = ko.serialize(adamw)
    # (tf_keras 2.21 does not make its new optimizers back from serialize's dict: its deserialize
    # returns the class name, a string; tapejax's round trip is in tests/test_optimizers.py)
    legacy = ko.serialize(ko.legacy.Adam(learning_rate=0.25))
    adam_back = ko.deserialize(legacy)
    return (got, type(sgd).__name__, float(sgd.learning_rate.numpy()), same,
            ser["module"], ser["class_name"], ser["config"]["beta_1"],
            legacy["module"], legacy["config"]["learning_rate"], type(adam_back).__name__,
            float(adam_back.learning_rate.numpy()), ko.serialize(None),
            raises(ko.get, "lion"), raises(ko.get, "nope"), raises(ko.get, 3), raises(ko.get, None),
            raises(ko.deserialize, {"config": {}}), raises(ko.Lion, beta_1=0.0))


# -- tf.keras.optimizers.X (tf_keras' new rules) against .legacy.X ----------------------------------

_NEW_VS_LEGACY = [("SGD", dict(learning_rate=0.1, momentum=0.9)),
                  ("SGD", dict(learning_rate=0.1, momentum=0.9, nesterov=True)),
                  ("RMSprop", dict(learning_rate=0.05)),
                  ("RMSprop", dict(learning_rate=0.05, momentum=0.5, centered=True)),
                  ("Adam", dict(learning_rate=0.05, amsgrad=True)),
                  ("Adamax", dict(learning_rate=0.05)), ("Adagrad", dict(learning_rate=0.1)),
                  ("Adadelta", dict(learning_rate=1.0)),
                  ("Ftrl", dict(learning_rate=0.1, l1_regularization_strength=0.01)),
                  ("Nadam", dict(learning_rate=0.05))]


def _embedding_train(tf, opt, compiled):
    """Three steps of a 5-row table fed ``IndexedSlices`` (a repeated id included); row 4 is never
    looked up."""
    table = tf.Variable(np.linspace(-1.0, 1.5, 10).reshape(5, 2).astype(np.float32))

    def step(ids):
        with tf.GradientTape() as t:
            e = tf.nn.embedding_lookup(table, ids)
            loss = tf.reduce_sum(tf.sin(e) * e)
        g = t.gradient(loss, table)
        opt.apply_gradients([(g, table)])
        return isinstance(g, tf.IndexedSlices)

    step = tf.function(step) if compiled else step
    kinds = [bool(step(tf.constant(ids))) for ids in ([0, 2, 2], [1, 2, 2], [3, 0, 0])]
    return kinds, table.numpy()


def _new_vs_legacy_sparse(tf, compiled):
    """The new optimizers' tables; beside three, the legacy optimizer's and whether they agree."""
    out = []
    for name, kw in _NEW_VS_LEGACY:
        if compiled and name in ("Nadam", "Adagrad", "Adadelta", "Adam"):
            continue   # (TF's new Nadam gives NaN inside a tf.function: tests/test_optimizers.py)
        new = _embedding_train(tf, getattr(tf.keras.optimizers, name)(**kw), compiled)
        if name in ("SGD", "Adamax", "Ftrl") and not compiled:
            old = _embedding_train(tf, getattr(tf.keras.optimizers.legacy, name)(**kw), compiled)
            new = new + (old, bool(np.allclose(new[1], old[1], rtol=1e-4, atol=1e-5)))
        out.append((name, new))
    return out


@parity(needs="keras.optimizers.SGD", rtol=2e-5, atol=1e-6)
def test_new_and_legacy_optimizers_on_indexed_slices(tf):
    """Each ``tf.keras.optimizers.X`` (tf_keras' new rule) and its ``.legacy.X`` on an embedding's
    ``IndexedSlices``, eagerly: most new rules decay slots and move every row (beside SGD, Adamax
    and Ftrl: the legacy table, and whether the two agree)."""
    return _new_vs_legacy_sparse(tf, compiled=False)


@parity(needs="keras.optimizers.SGD", rtol=2e-5, atol=1e-6)
def test_new_and_legacy_optimizers_on_indexed_slices_compiled(tf):
    """As above, each step a ``tf.function``."""
    return _new_vs_legacy_sparse(tf, compiled=True)


# (tf_keras' new rules compute ``1 - beta`` in float64 from a Python float, tapejax in float32 from
# its Variable: an ulp in ``1 - beta`` that six steps carry to a few ulps)
@parity(needs="keras.optimizers.Nadam", rtol=1e-5, atol=1e-6)
def test_new_nadam_rmsprop_adagrad_dense(tf):
    """The new dense rules that differ from the legacy ones: Nadam's ``0.96^t`` momentum schedule,
    RMSprop's and Adagrad's epsilon inside the root (a large epsilon shows it); the new
    optimizers' ``weight_decay``; a learning-rate schedule for the new Nadam."""
    ko = tf.keras.optimizers
    sched = ko.schedules.ExponentialDecay(0.05, 2, 0.5)
    # (the legacy rules beside them: test_nadam*, test_rmsprop*, test_adagrad* above)
    return [_train(tf, ko.Nadam(0.05)), _train(tf, ko.Nadam(sched, beta_1=0.8, weight_decay=0.1)),
            _train(tf, ko.RMSprop(0.05, epsilon=0.5, centered=True)), _train(tf, ko.Adagrad(0.1, epsilon=0.5)),
            _train(tf, ko.Adam(0.05, epsilon=0.5, adaptive_epsilon=True, weight_decay=0.05)),
            _train(tf, ko.Adam(0.05, amsgrad=True)), _train(tf, ko.Adamax(0.05)), _train(tf, ko.Adadelta(1.0)),
            raises(ko.SGD, 0.1, decay=0.5)]


@parity(rtol=2e-5, atol=2e-6)
def test_a_sparse_gradient_of_a_constrained_variable(tf):
    """A Variable with a ``constraint`` (rows to unit norm) and a ``tf.gather`` gradient
    (``IndexedSlices``): tf_keras' new optimizers apply the sparse update, then the constraint
    (SGD with momentum moves the looked-up rows, Adam every row); the legacy OptimizerV2 refuses
    it with RuntimeError and changes nothing."""
    out = []
    for make in (lambda: tf.keras.optimizers.Adam(0.1), lambda: tf.keras.optimizers.SGD(0.1, momentum=0.5),
                 lambda: tf.keras.optimizers.legacy.SGD(0.1)):
        v = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 7 + 0.33,
                        constraint=lambda w: w / tf.norm(w, axis=1, keepdims=True))
        opt = make()
        for _ in range(2):
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(tf.gather(v, [0, 2, 2]) * [1.0, 2.0, 3.0])
            g = t.gradient(loss, v)
            r = raises(opt.apply_gradients, [(g, v)])
            out.append((r if isinstance(r, Raised) else None, v.numpy()))
    return out


@parity()
def test_the_new_optimizers_variables_is_a_list_that_may_be_called(tf):
    """tf_keras' new optimizers: ``opt.variables`` is the list of their Variables (iterated,
    indexed, its length) and ``opt.variables()`` the same list; a ``LossScaleOptimizer`` around
    one gives the same; the legacy optimizers keep the method."""
    v = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.Adam(0.1)
    opt.apply_gradients([(tf.constant([0.5, -1.0]), v)])
    scaled = tf.keras.mixed_precision.LossScaleOptimizer(opt)
    legacy = tf.keras.optimizers.legacy.Adam(0.1)
    return (int(opt.variables[0].numpy()), [x.numpy() for x in opt.variables[1:]], len(opt.variables),
            [x.numpy() for x in opt.variables()[1:]],   # (iterations: int64 in TF, int32 here, README)
            isinstance(opt.variables, list), len(scaled.variables), isinstance(legacy.variables, list),
            len(legacy.variables()))


@parity
def test_a_scheduled_new_optimizer_takes_a_schedule_and_refuses_a_float(tf):
    """tf_keras' new SGD made with a schedule takes another schedule, and refuses a float rate
    (TypeError: a ``ReduceLROnPlateau`` on it fails in TF too); the legacy SGD takes the float."""
    S = tf.keras.optimizers.schedules
    v = tf.Variable(0.0)
    opt = tf.keras.optimizers.SGD(S.ExponentialDecay(0.1, 1, 0.5))
    refused = None
    for i in range(5):
        if i == 2:
            opt.learning_rate = S.PiecewiseConstantDecay([100], [1.0, 2.0])
        if i == 4:
            refused = raises(lambda: setattr(opt, "learning_rate", 0.3))
        opt.apply_gradients([(tf.constant(-1.0), v)])
    legacy = tf.keras.optimizers.legacy.SGD(S.ExponentialDecay(0.1, 1, 0.5))
    legacy.learning_rate = 0.3
    return refused, v, float(legacy.learning_rate.numpy())
