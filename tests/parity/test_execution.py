"""Execution invariants as user programs (issue #20, behaviours 6 and 7), under real TF.

6. An eager training loop, then a compiled evaluation (``tf.function``, a
   scan or a foldl, an ``input_signature``, a function under a tape,
   ``tf.gradients`` or an optimizer step inside a function, a function
   closing over a gradient product, a Variable created from another in a
   function): TF's values, and training goes on after it.
7. A metric kept from inside the tape (``logits``, ``w.read_value()``) and
   read after the next updates (SGD, Adam, a persistent tape, a
   ``tf.function`` step), and a recorded read followed by a ``tf.function``
   that assigns the Variable: the values TF gives (no "Array has been
   deleted").

Every case runs in each tapejax execution mode (deferral and speculation on,
deferral alone, both off: the ``exec_mode`` fixture), against one TF run.
"""
import numpy as np
import pytest

from .harness import parity

LEG = "keras.optimizers.legacy"
RT = dict(rtol=2e-5, atol=1e-6)   # float32 rounding (XLA fuses into FMAs; TF's kernels do not)
X = np.arange(12, dtype=np.float32).reshape(4, 3) / 10.0

MODES = {"deferred+speculative": (True, True), "deferred": (True, False), "eager": (False, False)}


@pytest.fixture(autouse=True, params=list(MODES))
def exec_mode(request):
    """tapejax's execution mode for the case (TF ignores it; its result is computed once)."""
    import tapejax
    d, s = MODES[request.param]
    prev_d, prev_s = tapejax.set_deferred_execution(d), tapejax.set_speculative_updates(s)
    yield request.param
    tapejax.set_deferred_execution(prev_d)
    tapejax.set_speculative_updates(prev_s)


def _train(tf, w, x, kind, steps):
    """Eager steps: manual ``assign_sub`` or an optimizer (step 3 is the first tapejax
    predicts); returns the optimizer and the last gradient."""
    opt = None
    if kind == "sgd":
        opt = tf.keras.optimizers.legacy.SGD(0.1)
    elif kind == "adam":
        opt = tf.keras.optimizers.legacy.Adam(0.1)
    g = None
    for _ in range(steps):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.matmul(x, w))
        g = t.gradient(loss, w)
        if opt is None:
            w.assign_sub(0.1 * g)
        else:
            opt.apply_gradients([(g, w)])
    return opt, g


def _setup(tf, kind="assign", steps=3):
    w = tf.Variable(tf.ones([3, 2]))
    x = tf.constant(X)
    opt, g = _train(tf, w, x, kind, steps)
    return w, x, opt, g


def _after(tf, w, x, kind="assign"):
    """One more eager step: a Variable left holding a tracer would fail here."""
    _train(tf, w, x, kind, 1)
    return w


# -- behaviour 6 --------------------------------------------------------------------------------

@parity(needs=f"{LEG}.SGD", **RT)
def test_function_after_eager_steps(tf):
    w, x, _, _ = _setup(tf)
    r = tf.function(lambda x: tf.reduce_mean(tf.matmul(x, w)))(x)
    return r, _after(tf, w, x)


@parity(needs=f"{LEG}.Adam", **RT)
def test_function_after_optimizer_steps(tf):
    w, x, _, _ = _setup(tf, "adam", 4)
    r = tf.function(lambda x: tf.reduce_mean(tf.matmul(x, w)))(x)
    return r, _after(tf, w, x, "adam")


@parity(**RT)
def test_scan_and_foldl_reading_a_trained_variable(tf):
    w, x, _, _ = _setup(tf, steps=2)
    s = tf.scan(lambda a, e: a + tf.reduce_sum(e * w[:, 0]), x, initializer=tf.constant(0.0))
    f = tf.foldl(lambda a, e: a + tf.reduce_sum(e * w[:, 1]), x, initializer=tf.constant(0.0))
    return s, f, _after(tf, w, x)


@parity(**RT)
def test_input_signature_after_eager_steps(tf):
    w, x, _, _ = _setup(tf, steps=1)
    f = tf.function(lambda x: tf.reduce_mean(tf.matmul(x, w)),
                    input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    return f(x), f(x[:2]), _after(tf, w, x)


@parity(**RT)
def test_function_under_a_tape_after_eager_steps(tf):
    w, x, _, _ = _setup(tf)
    f = tf.function(lambda x: tf.reduce_mean(tf.matmul(x, w)))
    with tf.GradientTape() as t:
        y = f(x)
    return y, t.gradient(y, w), _after(tf, w, x)


@parity(**RT)
def test_gradients_inside_a_function_after_eager_steps(tf):
    w, x, _, _ = _setup(tf)

    @tf.function
    def f(x):
        return tf.gradients(tf.reduce_sum(tf.square(tf.matmul(x, w))), [w])[0]
    return f(x), _after(tf, w, x)


@parity(needs=f"{LEG}.SGD", **RT)
def test_optimizer_step_inside_a_function_after_eager_steps(tf):
    w, x, opt, _ = _setup(tf, "sgd", 3)

    @tf.function
    def step(x):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
        opt.apply_gradients([(t.gradient(loss, w), w)])
        return loss
    return step(x), step(x), _after(tf, w, x, "sgd"), int(opt.iterations.numpy())


@parity(**RT)
def test_function_closing_over_a_gradient_product(tf):
    w = tf.Variable(tf.ones([3]))
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(w * w)
    g = t.gradient(loss, w)
    h = g * 0.5
    r = tf.function(lambda: tf.reduce_sum(h + w))()
    w.assign_sub(0.1 * g)
    return r, h, w


@parity(**RT)
def test_variable_created_from_a_trained_variable_in_a_function(tf):
    w, x, _, _ = _setup(tf, steps=2)
    made = []

    @tf.function
    def f():
        if not made:
            made.append(tf.Variable(w * 2.0))
        return made[0].read_value() + 1.0
    return f(), f(), made[0], _after(tf, w, x)


# -- behaviour 7 --------------------------------------------------------------------------------

def _metric_loop(tf, opt_name, persistent=False, function_steps=False):
    w = tf.Variable(tf.ones([3, 2]))
    x = tf.constant(X)
    opt = getattr(tf.keras.optimizers.legacy, opt_name)(0.1)

    @tf.function
    def step(x):
        with tf.GradientTape() as t:
            loss = tf.reduce_mean(tf.matmul(x, w))
        opt.apply_gradients([(t.gradient(loss, w), w)])
        return loss

    kept = []
    for _ in range(4):
        with tf.GradientTape(persistent=persistent) as t:
            logits = tf.matmul(x, w)
            r = w.read_value()
            loss = tf.reduce_mean(logits)
        opt.apply_gradients([(t.gradient(loss, w), w)])
        kept.append((logits, r))
        if function_steps:
            step(x)
    return [tf.reduce_sum(k) for k, _ in kept], [r for _, r in kept], w


@parity(needs=f"{LEG}.SGD", **RT)
def test_logits_kept_for_a_metric_sgd(tf):
    return _metric_loop(tf, "SGD")


@parity(needs=f"{LEG}.Adam", **RT)
def test_logits_kept_for_a_metric_adam_persistent_tape(tf):
    return _metric_loop(tf, "Adam", persistent=True)


@parity(needs=f"{LEG}.Adam", **RT)
def test_logits_kept_for_a_metric_with_function_steps(tf):
    return _metric_loop(tf, "Adam", function_steps=True)


@parity(**RT)
def test_recorded_read_value_then_a_function_that_assigns(tf):
    w = tf.Variable(tf.ones([3]))
    with tf.GradientTape():
        r = w.read_value()                       # a recorded read

    @tf.function
    def upd():
        w.assign(w * 2.0)

    upd()
    upd()
    return r, w


@parity(needs=f"{LEG}.SGD", **RT)
def test_read_of_a_pending_update_then_updates(tf):
    """The read shares the buffer with the Variable through tapejax's pending update."""
    w = tf.Variable(tf.ones([3]))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(w * w)
    w.assign_sub(0.1 * t.gradient(loss, w))
    with tf.GradientTape() as t:
        r = w.read_value()
        loss = tf.reduce_sum(w * w)
    g = t.gradient(loss, w)
    opt.apply_gradients([(g, w)])
    opt.apply_gradients([(g, w)])

    @tf.function
    def upd():
        w.assign(w * 2.0)

    upd()
    return r, g, w
