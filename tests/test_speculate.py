"""Predicted Variable updates (``tapejax._speculate``): a manual step's updates in its gradient's program.

The oracle for every value is the same loop with deferral off (every op and
update dispatched when called); counts of predicted calls and of gradients
recomputed come from wrapping the module's two entry points.
"""
import contextlib
import gc
import sys
import threading
import weakref

import jax
import numpy as np
import pytest

import tapejax as tf
from tapejax.autodiff import replay as _replay
from tapejax.core.tensor import Pending
from tapejax.runtime import prediction as _prediction, speculate as _speculate, thunks as _thunks

RNG = np.random.default_rng(0)
X = RNG.normal(size=(8, 4)).astype(np.float32)
Y = RNG.normal(size=(8, 1)).astype(np.float32)
INIT = [RNG.normal(size=(4, 5)).astype(np.float32), RNG.normal(size=(5,)).astype(np.float32),
        RNG.normal(size=(5, 1)).astype(np.float32), RNG.normal(size=(1,)).astype(np.float32)]


@pytest.fixture
def counts(monkeypatch, fresh_cache):
    """Counts of predicted gradient calls and of gradients recomputed (from a clear cache: no
    prediction or back-off left by another test)."""
    c = {"predicted": 0, "recomputed": 0}
    real_run, real_call = _prediction.run_predicted, _prediction._Regrad.__call__

    def run(*args):
        out = real_run(*args)
        c["predicted"] += out is not None
        return out

    def call(self, *args):
        c["recomputed"] += 1
        return real_call(self, *args)

    monkeypatch.setattr(_prediction, "run_predicted", run)
    monkeypatch.setattr(_prediction._Regrad, "__call__", call)
    return c


@contextlib.contextmanager
def _settings(deferral=True, predict=True):
    """Deferred execution and predicted updates set for the block, then restored."""
    prev_d, prev_p = tf.set_deferred_execution(deferral), tf.set_speculative_updates(predict)
    try:
        yield
    finally:
        tf.set_deferred_execution(prev_d)
        tf.set_speculative_updates(prev_p)


def _loss_and_grads(vs, x, y):
    with tf.GradientTape() as tape:
        h = tf.nn.relu(tf.matmul(x, vs[0]) + vs[1])
        loss = tf.reduce_mean(tf.square(tf.matmul(h, vs[2]) + vs[3] - y))
    return loss, tape.gradient(loss, vs)


def _sgd(i, vs, grads):
    for v, g in zip(vs, grads):
        v.assign_sub(0.1 * g)


def _train(update, n=6, deferral=True, predict=True, read=None):
    """``n`` manual steps, ``update(i, vs, grads)`` applying each; the losses (read after the
    update, as a training loop prints them), what ``read(i, vs, grads)`` returns, and the final
    values."""
    with _settings(deferral, predict):
        vs = [tf.Variable(a) for a in INIT]
        x, y = tf.constant(X), tf.constant(Y)
        losses, reads = [], []
        for i in range(n):
            loss, grads = _loss_and_grads(vs, x, y)
            vs = update(i, vs, grads) or vs
            losses.append(loss.numpy())
            if read is not None:
                reads.append(read(i, vs, grads))
        return losses, reads, [v.numpy() for v in vs]


def _assert_same(got, want):
    """Equal up to float32 rounding: XLA fuses a predicted update with the gradient's last
    ops, as it does pure JAX's, which can round the last bit differently."""
    (l1, r1, v1), (l0, r0, v0) = got, want
    np.testing.assert_allclose(l1, l0, rtol=1e-5)
    for a, b in zip(r1, r0):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-4, atol=1e-7)
    for a, b in zip(v1, v0):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


_LR = tf.constant(0.1)

UPDATES = {
    "lr_times_g": _sgd,
    "g_times_lr": lambda i, vs, gs: [v.assign_sub(g * 0.1) for v, g in zip(vs, gs)] and None,
    "add_negative": lambda i, vs, gs: [v.assign_add(-0.1 * g) for v, g in zip(vs, gs)] and None,
    "plain_gradient": lambda i, vs, gs: [v.assign_sub(g) for v, g in zip(vs, gs)] and None,
    "tensor_lr": lambda i, vs, gs: [v.assign_sub(_LR * g) for v, g in zip(vs, gs)] and None,
}


@pytest.mark.parametrize("name", sorted(UPDATES))
def test_manual_loops_are_predicted_from_the_third_step_and_match_eager(counts, name):
    got = _train(UPDATES[name], n=8)
    assert counts == {"predicted": 6, "recomputed": 0}
    _assert_same(got, _train(UPDATES[name], n=8, deferral=False))
    _assert_same(got, _train(UPDATES[name], n=8, predict=False))


def test_a_predicted_step_updates_at_once_and_returns_its_gradients_uncomputed(counts):
    """From step 3: after ``assign_sub`` each Variable holds its new value (no pending update);
    the gradients were not returned by the program, and reading one computes it (the eager
    value); the next call then does not predict (back-off), and values stay right."""
    seen = []

    def update(i, vs, grads):
        _sgd(i, vs, grads)
        seen.append(([type(v._val) is _thunks._Array for v in vs], [g._thunk.value is None for g in grads]))

    def read(i, vs, grads):
        return grads[2].numpy() if i == 4 else 0.0

    got = _train(update, n=8, read=read)
    predicted = [False, False, True, True, True, False, True, True]
    assert [s for s, _ in seen] == [[p] * 4 for p in predicted]
    assert [u for _, u in seen] == [[p] * 4 for p in predicted]
    # step 5's read recomputed the gradients once; step 6 did not predict (back-off), 7-8 did
    assert counts == {"predicted": 5, "recomputed": 1}
    _assert_same(got, _train(_sgd, n=8, deferral=False, read=read))


def test_reading_a_predicted_gradient_compiles_nothing(counts):
    """The recompute of a predicted step's gradients runs the gradient's own compiled program
    (which the steps before the prediction ran, on inputs of the same shapes), its targets'
    values dropped: reading one compiles nothing (before: a program of the gradients alone, as
    long to compile as the step's).  Oracle: XLA's compile log; values: the eager loop."""
    from xla_compiles import compiles
    logs = []

    def read(i, vs, grads):
        if i != 4:
            return 0.0
        with compiles() as names:
            g = grads[2].numpy()
        logs.append(names)
        return g

    got = _train(_sgd, n=6, read=read)
    assert logs == [[]] and counts["recomputed"] == 1
    _assert_same(got, _train(_sgd, n=6, deferral=False, read=read))


def test_reading_gradients_every_step_backs_off(counts):
    """A loop that reads its gradients every step (a norm it logs) pays the recompute at
    exponentially spaced steps only."""
    def read(i, vs, grads):
        return tf.reduce_sum(tf.square(grads[0])).numpy()

    got = _train(_sgd, n=40, read=read)
    assert counts["recomputed"] == counts["predicted"] and 3 <= counts["predicted"] <= 7
    _assert_same(got, _train(_sgd, n=40, deferral=False, read=read))


def test_an_lr_that_changes_every_step_is_never_predicted(counts):
    """A new Python float each step is a new const array: the updates are not the same, nothing
    is predicted, nothing is recomputed."""
    def update(i, vs, grads):
        for v, g in zip(vs, grads):
            v.assign_sub((0.1 / (i + 1)) * g)

    got = _train(update, n=10)
    assert counts == {"predicted": 0, "recomputed": 0}
    _assert_same(got, _train(update, n=10, deferral=False))


def test_an_lr_that_changes_every_other_step_backs_off(counts):
    """Each change of lr misses a prediction and recomputes the gradients (when the next call
    computes the pending updates); the back-off keeps that to a few times in 40 steps."""
    def update(i, vs, grads):
        lr = 0.1 if (i // 2) % 2 == 0 else 0.05
        for v, g in zip(vs, grads):
            v.assign_sub(lr * g)

    got = _train(update, n=40)
    assert 1 <= counts["recomputed"] <= 5
    _assert_same(got, _train(update, n=40, deferral=False))


def _at(k, odd):
    """A loop whose step ``k`` updates differently (``odd(vs, grads)``)."""
    def update(i, vs, grads):
        if i == k:
            return odd(vs, grads)
        _sgd(i, vs, grads)
    return update


def _replace_first(vs, grads):
    _sgd(0, vs, grads)
    return [tf.Variable(vs[0].numpy())] + vs[1:]   # the old Variable is dropped


ODD = {
    "other_lr": lambda vs, gs: [v.assign_sub(0.05 * g) for v, g in zip(vs, gs)] and None,
    "sign_flipped": lambda vs, gs: [v.assign_add(0.1 * g) for v, g in zip(vs, gs)] and None,
    "swapped": lambda vs, gs: [vs[1].assign_sub(0.1 * gs[1]), vs[3].assign_sub(0.1 * gs[3]),
                               vs[0].assign_sub(0.1 * gs[0]), vs[2].assign_sub(0.1 * gs[2])] and None,
    "assigned_before": lambda vs, gs: [vs[0].assign(vs[0] * 0.5)] + [v.assign_sub(0.1 * g)
                                                                      for v, g in zip(vs, gs)] and None,
    "extra_term": lambda vs, gs: [v.assign_sub(0.1 * g + 0.01 * v) for v, g in zip(vs, gs)] and None,
    "twice": lambda vs, gs: [v.assign_sub(0.1 * g) for v, g in zip(vs + vs[:1], gs + gs[:1])] and None,
    "one_missing": lambda vs, gs: [v.assign_sub(0.1 * g) for v, g in zip(vs[1:], gs[1:])] and None,
    "optimizer": lambda vs, gs: tf.keras.optimizers.SGD(0.1).apply_gradients(zip(gs, vs)) and None,
    "replaced_variable": _replace_first,
}


@pytest.mark.parametrize("name", sorted(ODD))
def test_a_step_that_updates_otherwise_keeps_eager_values(counts, name):
    """Step 5 (predicted) updates in another way: the prediction does not match (or cannot be
    made, for a dropped Variable), the ordinary pending path runs, the values stay the eager
    ones at every step after."""
    update = _at(4, ODD[name])
    got = _train(update, n=9)
    _assert_same(got, _train(update, n=9, deferral=False))
    assert counts["predicted"] >= 3   # steps 3-5 at least; after the odd step it learns again


def test_a_variable_updated_by_another_variable_s_gradient(counts):
    """An update wiring other than "each source by its own gradient" is predicted as it is."""
    def update(i, vs, grads):
        vs[1].assign_sub(0.1 * grads[1])
        vs[3].assign_sub(0.1 * grads[3])
        vs[0].assign_sub(0.1 * grads[0])
        vs[2].assign_sub(0.1 * grads[2])

    got = _train(update, n=6)
    assert counts == {"predicted": 4, "recomputed": 0}
    _assert_same(got, _train(update, n=6, deferral=False))


@pytest.mark.parametrize("optimizer", [False, True])
def test_gradients_crossed_between_variables_of_one_shape(counts, optimizer):
    """Step 5 updates each of two same-shaped Variables with the other's gradient (by hand, or
    through the same optimizer with the same Variables in the same order): the prediction
    (each with its own) must not match."""
    x = tf.constant([1.0, 2.0, 3.0])

    def run(deferral):
        with _settings(deferral):
            a, b = tf.Variable([0.5, -1.0, 2.0]), tf.Variable([1.0, 1.0, -0.5])
            opt = tf.keras.optimizers.Adam(0.05) if optimizer else None
            losses = []
            for i in range(8):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(tf.square(a * x)) + tf.reduce_sum(tf.square(b * x + 1.0))
                ga, gb = tape.gradient(loss, [a, b])
                if i == 4:
                    ga, gb = gb, ga
                if optimizer:
                    opt.apply_gradients([(ga, a), (gb, b)])
                else:
                    a.assign_sub(0.01 * ga)
                    b.assign_sub(0.01 * gb)
                losses.append(loss.numpy())
            return losses, [], [a.numpy(), b.numpy()] + ([w.numpy() for w in opt.variables()] if optimizer else [])

    got = run(True)
    assert counts["predicted"] >= 3 and counts["recomputed"] == 1
    _assert_same(got, run(False))


def test_a_loop_with_output_gradients_is_predicted_and_recomputes_with_them(counts):
    """The cotangents go into the predicted program and into the recompute of a gradient that
    is read (step 5)."""
    def run(deferral):
        with _settings(deferral):
            vs = [tf.Variable(a) for a in INIT]
            x, y = tf.constant(X), tf.constant(Y)
            losses, read = [], None
            for i in range(7):
                with tf.GradientTape() as tape:
                    h = tf.nn.relu(tf.matmul(x, vs[0]) + vs[1])
                    loss = tf.reduce_mean(tf.square(tf.matmul(h, vs[2]) + vs[3] - y))
                grads = tape.gradient(loss, vs, output_gradients=tf.constant(0.5))
                _sgd(i, vs, grads)
                losses.append(loss.numpy())
                if i == 4:
                    read = grads[0].numpy()
            return losses, [read], [v.numpy() for v in vs]

    got = run(True)
    assert counts["predicted"] >= 3 and counts["recomputed"] == 1
    _assert_same(got, run(False))


@pytest.mark.parametrize("optimizer", [False, True])
def test_a_compiled_step_between_predicted_eager_steps(counts, optimizer):
    """Eager steps (predicted from step 3), two steps through ``tapejax.function`` (nothing is
    deferred there), eager steps again, updating by hand or with Adam: the eager values
    throughout."""
    def run(deferral):
        with _settings(deferral):
            vs = [tf.Variable(a) for a in INIT]
            x, y = tf.constant(X), tf.constant(Y)
            opt = tf.keras.optimizers.Adam(0.05)

            def step():
                loss, grads = _loss_and_grads(vs, x, y)
                if optimizer:
                    opt.apply_gradients(zip(grads, vs))
                else:
                    _sgd(0, vs, grads)
                return loss

            compiled = tf.function(step)
            losses = [(compiled if 4 <= i < 6 else step)().numpy() for i in range(10)]
            return losses, [], [v.numpy() for v in vs] + [w.numpy() for w in opt.variables()]

    got = run(True)
    assert counts["predicted"] >= 4 and counts["recomputed"] == 0
    _assert_same(got, run(False))


def test_two_gradient_calls_per_step(counts):
    def run(deferral, predict):
        with _settings(deferral, predict):
            vs = [tf.Variable(a) for a in INIT]
            x, y = tf.constant(X), tf.constant(Y)
            losses = []
            for _ in range(6):
                with tf.GradientTape(persistent=True) as tape:
                    h = tf.nn.relu(tf.matmul(x, vs[0]) + vs[1])
                    loss = tf.reduce_mean(tf.square(tf.matmul(h, vs[2]) + vs[3] - y))
                first = tape.gradient(loss, vs[:2])
                second = tape.gradient(loss, vs[2:])
                _sgd(0, vs, list(first) + list(second))
                losses.append(loss.numpy())
            return losses, [], [v.numpy() for v in vs]

    got = run(True, True)
    # the first call (which computes the loss) is predicted from step 3; the second runs on the
    # saved values and hands out computed gradients, whose updates stay pending
    assert counts == {"predicted": 4, "recomputed": 0}
    _assert_same(got, run(False, False))


@pytest.mark.parametrize("optimizer", [False, True])
def test_threads_train_their_own_models(counts, optimizer):
    """Predictions are learned per thread: four threads training their own Variables with the
    same structure (one compiled entry), by hand or each with its own Adam, each get the eager
    values."""
    def update():
        return _with(lambda: tf.keras.optimizers.Adam(0.01))[0] if optimizer else _sgd

    want = _train(update(), n=8, deferral=False)
    results = [None] * 4
    errors = []

    def work(k):
        try:
            results[k] = _train(update(), n=8)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    # (the settings are global: on here too, so that a thread ending first, restoring what it
    # found, does not turn them off under the others when the environment has them off)
    with _settings(True, True):
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    for got in results:
        _assert_same(got, want)
    assert counts["recomputed"] == 0


def test_a_two_tape_two_optimizer_loop_predicts_both_calls(counts):
    """A GAN-shaped step: two tapes record one forward, each gradient call feeds its own Adam;
    both calls are predicted from step 3."""
    rng = np.random.default_rng(1)
    z0, r0 = rng.normal(size=(8, 3)).astype(np.float32), rng.normal(size=(8, 2)).astype(np.float32)
    g0 = [rng.normal(size=(3, 2)).astype(np.float32), np.zeros(2, np.float32)]
    d0 = [rng.normal(size=(2, 1)).astype(np.float32), np.zeros(1, np.float32)]

    def run(deferral):
        with _settings(deferral):
            g, d = [tf.Variable(a) for a in g0], [tf.Variable(a) for a in d0]
            g_opt, d_opt = tf.keras.optimizers.Adam(0.01), tf.keras.optimizers.Adam(0.01)
            z, r = tf.constant(z0), tf.constant(r0)
            losses = []
            for _ in range(10):
                with tf.GradientTape() as g_tape, tf.GradientTape() as d_tape:
                    fake = tf.matmul(z, g[0]) + g[1]
                    fake_out = tf.matmul(fake, d[0]) + d[1]
                    real_out = tf.matmul(r, d[0]) + d[1]
                    g_loss = tf.reduce_mean(tf.nn.softplus(-fake_out))
                    d_loss = tf.reduce_mean(tf.nn.softplus(fake_out)) + tf.reduce_mean(tf.nn.softplus(-real_out))
                g_opt.apply_gradients(zip(g_tape.gradient(g_loss, g), g))
                d_opt.apply_gradients(zip(d_tape.gradient(d_loss, d), d))
                losses += [g_loss.numpy(), d_loss.numpy()]
            return losses, [], [v.numpy() for v in g + d] + [w.numpy() for w in g_opt.variables() + d_opt.variables()]

    got = run(True)
    assert counts == {"predicted": 16, "recomputed": 0}
    _assert_same(got, run(False))


def test_gradients_no_update_uses_are_rarely_watched_and_a_manual_loop_after_is_predicted(counts):
    """Gradients that no update uses as they are (clipped before the optimizer sees them) are
    tagged for observation one call in 32; a manual loop that follows is still learned, within
    that many steps."""
    tagged = []

    def make_update():
        opt = tf.keras.optimizers.SGD(0.1)

        def update(i, vs, grads):
            if i < 64:
                tagged.append(sum(g._thunk.tag is not None for g in grads if type(g) is Pending))
                opt.apply_gradients(zip([tf.clip_by_norm(g, 10.0) for g in grads], vs))
            else:
                _sgd(i, vs, grads)
        return update

    got = _train(make_update(), n=110)
    assert len(tagged) == 64 and sum(t > 0 for t in tagged) <= 4
    assert counts["predicted"] >= 110 - 64 - 32 - 3 and counts["recomputed"] == 0
    _assert_same(got, _train(make_update(), n=110, deferral=False))


# -- optimizers -------------------------------------------------------------------

def _optax_adamw():
    import optax
    return tf.optimizers.from_optax(optax.adamw(0.01))


OPTIMIZERS = {
    "sgd": lambda: tf.keras.optimizers.SGD(0.1),
    "nesterov": lambda: tf.keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
    "adam": lambda: tf.keras.optimizers.Adam(0.01),
    "amsgrad": lambda: tf.keras.optimizers.Adam(0.01, amsgrad=True),
    "adamw": lambda: tf.keras.optimizers.AdamW(0.01),
    "nadam": lambda: tf.keras.optimizers.Nadam(0.01),   # (extra state besides slots)
    "rmsprop_centered": lambda: tf.keras.optimizers.RMSprop(0.01, momentum=0.5, centered=True),
    "adagrad": lambda: tf.keras.optimizers.Adagrad(0.1),
    "ftrl": lambda: tf.keras.optimizers.Ftrl(0.1),
    "schedule": lambda: tf.keras.optimizers.SGD(tf.optimizers.schedules.ExponentialDecay(0.1, 2, 0.5)),
    "decay_clipnorm": lambda: tf.keras.optimizers.legacy.SGD(0.1, decay=0.01, clipnorm=0.5),
    "global_clipnorm": lambda: tf.keras.optimizers.Adam(0.01, global_clipnorm=0.1),
    "optax_adamw": _optax_adamw,
}


def _with(make_opt, odd=None, k=4):
    """An update by ``make_opt()``'s ``apply_gradients`` (``odd(opt, vs, grads)`` instead at
    step ``k``), and a function returning the optimizer's variables' values."""
    box = []

    def update(i, vs, grads):
        if not box:
            box.append(make_opt())
        if odd is not None and i == k:
            odd(box[0], vs, grads)
        else:
            box[0].apply_gradients(zip(grads, vs))

    return update, lambda: [w.numpy() for w in box[0].variables()]


def _assert_same_optimizer(make_opt, n, odd=None):
    """The loop under predictions and with deferral off: the same losses, Variables and
    optimizer state."""
    update, state = _with(make_opt, odd)
    got, got_state = _train(update, n=n), state()
    update, state = _with(make_opt, odd)
    want, want_state = _train(update, n=n, deferral=False), state()
    _assert_same(got, want)
    assert len(got_state) == len(want_state)
    for a, b in zip(got_state, want_state):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_loops_are_predicted_from_the_third_step_and_match_eager(counts, name):
    """``apply_gradients`` takes the values the gradient's program computed with the optimizer's
    own update (slots, counters and clipping included): from step 3 nothing else runs."""
    _assert_same_optimizer(OPTIMIZERS[name], 8)
    assert counts == {"predicted": 6, "recomputed": 0}


def _keras_loop(n, deferral=True):
    """``n`` eager steps of a Keras model (its variables are ``KerasVariable``s) with tapejax's
    Adam: the losses and the final weights."""
    with _settings(deferral, True):
        keras = tf.keras
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5, activation="relu"), keras.layers.Dense(1)])
        model.set_weights(INIT)
        opt = tf.keras.optimizers.Adam(0.01)
        x, y = tf.constant(X), tf.constant(Y)
        losses = []
        for _ in range(n):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x) - y))
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            losses.append(loss.numpy())
        return losses, [w.numpy() for w in model.weights]


def test_a_keras_models_optimizer_loop_is_predicted(counts):
    """A Keras model's variables are a ``Variable`` subclass: its optimizer update is predicted as
    a plain Variable's (from the third step the step is one program), with deferral off's values."""
    (got, got_w), (want, want_w) = _keras_loop(8), _keras_loop(8, deferral=False)
    assert counts == {"predicted": 6, "recomputed": 0}
    np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(got_w, want_w):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_an_optimizer_with_big_state_is_left_to_update_it_in_place(counts, monkeypatch):
    """Above ``_GROUP_BYTES_MAX`` bytes of slots and counters (both copies would be alive while
    a predicted program runs) the optimizer is not predicted and runs its own donating update;
    plain SGD's state is its 4-byte counter."""
    monkeypatch.setattr(_speculate, "_GROUP_BYTES_MAX", 64)
    _assert_same_optimizer(OPTIMIZERS["adam"], 8)
    assert counts == {"predicted": 0, "recomputed": 0}
    tf.clear_cache()   # (else the entry now watches one call in 32: its gradients went unnoted)
    _assert_same_optimizer(OPTIMIZERS["sgd"], 8)
    assert counts == {"predicted": 6, "recomputed": 0}


def test_an_optimizer_with_state_much_larger_than_its_variables_is_not_predicted(counts, monkeypatch):
    """Prediction saves the gradients (as large as the Variables) but must allocate the state
    anew each step: Adam's two slots (twice the Variables) exceed the Variables by more than
    ``_GROUP_SLACK_BYTES`` (here 64 bytes) and run Adam's own donating update; momentum's one
    slot (as large as the Variables, plus the counter) stays predicted."""
    monkeypatch.setattr(_speculate, "_GROUP_SLACK_BYTES", 64)
    _assert_same_optimizer(OPTIMIZERS["adam"], 8)
    assert counts == {"predicted": 0, "recomputed": 0}
    tf.clear_cache()
    _assert_same_optimizer(OPTIMIZERS["nesterov"], 8)
    assert counts == {"predicted": 6, "recomputed": 0}


def test_worth_predicting_compares_the_state_with_the_variables():
    """The rule on sizes alone: a group's updated Variables first, then its slots and counters."""
    v = tf.Variable(np.zeros((512, 512), np.float32))          # 1 MiB
    slot1, slot2 = tf.Variable(np.zeros((512, 512), np.float32)), tf.Variable(np.zeros((512, 512), np.float32))
    small = tf.Variable(np.zeros((8,), np.float32))
    counter = tf.Variable(np.int64(0))
    assert _speculate._worth_predicting((v, slot1, counter), 1)              # momentum: state = Variables
    assert _speculate._worth_predicting((v, slot1, small, counter), 1)       # within the slack
    assert not _speculate._worth_predicting((v, slot1, slot2, counter), 1)   # Adam: 1 MiB and 8 bytes over
    assert _speculate._worth_predicting((small, small, small, counter), 1)   # a small model's Adam


def test_a_predicted_optimizer_step_sets_every_state_variable_at_once(counts):
    update, _ = _with(lambda: tf.keras.optimizers.Adam(0.01))
    seen = []

    def read(i, vs, grads):
        opt = update.__closure__[0].cell_contents[0]
        seen.append((int(opt.iterations.numpy()), all(g._thunk.value is None for g in grads)))

    _train(update, n=5, read=read)
    assert seen == [(1, False), (2, False), (3, True), (4, True), (5, True)]
    assert counts == {"predicted": 3, "recomputed": 0}


def _set_lr(opt, vs, gs):
    opt.learning_rate = 0.05
    opt.apply_gradients(zip(gs, vs))


def _reset_slot(opt, vs, gs):
    opt.get_slot(vs[0], "momentum").assign(tf.zeros_like(vs[0]))
    opt.apply_gradients(zip(gs, vs))


def _assign_iterations(opt, vs, gs):
    opt.iterations.assign(100)
    opt.apply_gradients(zip(gs, vs))


def _assign_variable(opt, vs, gs):
    vs[0].assign(vs[0] * 0.5)
    opt.apply_gradients(zip(gs, vs))


def _set_attribute(name, value):
    def run(opt, vs, gs):
        setattr(opt, name, value)   # momentum: its Variable; nesterov: the compiled update dropped
        opt.apply_gradients(zip(gs, vs))
    return run


ODD_OPTIMIZER = {
    "lr_changed": _set_lr,
    "momentum_changed": _set_attribute("momentum", 0.5),
    "nesterov_changed": _set_attribute("nesterov", True),
    "slot_reset": _reset_slot,
    "iterations_assigned": _assign_iterations,
    "variable_assigned_before": _assign_variable,
    "subset": lambda opt, vs, gs: opt.apply_gradients(zip(gs[1:], vs[1:])),
    "reversed": lambda opt, vs, gs: opt.apply_gradients(zip(gs[::-1], vs[::-1])),
    "scaled_gradients": lambda opt, vs, gs: opt.apply_gradients(zip([g * 1.0 for g in gs], vs)),
    "another_optimizer": lambda opt, vs, gs: tf.keras.optimizers.SGD(0.1, momentum=0.9).apply_gradients(
        zip(gs, vs)),
    "manual_update": lambda opt, vs, gs: _sgd(0, vs, gs),
    "twice": lambda opt, vs, gs: [opt.apply_gradients(zip(gs, vs)) for _ in range(2)],
}


@pytest.mark.parametrize("name", sorted(ODD_OPTIMIZER))
def test_an_optimizer_step_that_updates_otherwise_keeps_eager_values(counts, name):
    """Step 5 (predicted) changes the learning rate, momentum (a Variable), nesterov (drops the
    compiled update), a slot, the counter or a Variable first, updates other Variables or in
    another order, with other gradients or another optimizer, by hand, or twice: the prediction
    does not match (the optimizer computes the gradients and runs its update), and every value
    stays the eager one."""
    _assert_same_optimizer(lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9), 9, ODD_OPTIMIZER[name])
    assert counts["predicted"] >= 3


def test_one_optimizer_applied_to_two_halves_of_a_step_is_not_predicted(counts):
    """Two ``apply_gradients`` of one optimizer per step share its counter (the second sees
    the first's increment): they cannot be computed side by side, so nothing is predicted."""
    def make_update():
        opt = tf.keras.optimizers.legacy.Adam(0.05)   # (a new one refuses the second half: tf_keras' KeyError)

        def update(i, vs, grads):
            opt.apply_gradients(zip(grads[:2], vs[:2]))
            opt.apply_gradients(zip(grads[2:], vs[2:]))
        return update

    got = _train(make_update(), n=9)
    assert counts == {"predicted": 0, "recomputed": 0}
    _assert_same(got, _train(make_update(), n=9, deferral=False))


def test_an_optimizer_and_manual_updates_in_one_step_are_predicted_together(counts):
    def make_update():
        opt = tf.keras.optimizers.Adam(0.01)

        def update(i, vs, grads):
            opt.apply_gradients(zip(grads[:2], vs[:2]))
            vs[3].assign_sub(0.1 * grads[3])
            vs[2].assign_sub(0.1 * grads[2])
        return update

    got = _train(make_update(), n=7)
    assert counts == {"predicted": 5, "recomputed": 0}
    _assert_same(got, _train(make_update(), n=7, deferral=False))


def test_an_optimizer_loop_then_a_manual_loop_then_the_optimizer_again(counts):
    """Each switch misses one prediction (its gradients are recomputed), then the new loop is
    learned."""
    def make_update():
        opt = tf.keras.optimizers.SGD(0.1, momentum=0.5)

        def update(i, vs, grads):
            if 6 <= i < 12:
                _sgd(i, vs, grads)
            else:
                opt.apply_gradients(zip(grads, vs))
        return update

    got = _train(make_update(), n=18)
    assert counts["predicted"] >= 10 and counts["recomputed"] <= 2
    _assert_same(got, _train(make_update(), n=18, deferral=False))


def test_a_constraint_runs_on_the_predicted_values(counts):
    def run(deferral):
        with _settings(deferral):
            vs = [tf.Variable(a, constraint=lambda v: tf.clip_by_value(v, -0.5, 0.5)) if k == 0
                  else tf.Variable(a) for k, a in enumerate(INIT)]
            opt = tf.keras.optimizers.Adam(0.05)
            x, y = tf.constant(X), tf.constant(Y)
            losses = []
            for _ in range(6):
                loss, grads = _loss_and_grads(vs, x, y)
                opt.apply_gradients(zip(grads, vs))
                losses.append(loss.numpy())
                assert np.abs(vs[0].numpy()).max() <= 0.5
            return losses, [], [v.numpy() for v in vs]

    got = run(True)
    assert counts == {"predicted": 4, "recomputed": 0}
    _assert_same(got, run(False))


def test_minimize_is_predicted(counts):
    def run(deferral):
        with _settings(deferral):
            vs = [tf.Variable(a) for a in INIT]
            opt = tf.keras.optimizers.Adam(0.01)
            x, y = tf.constant(X), tf.constant(Y)

            def loss_fn():
                h = tf.nn.relu(tf.matmul(x, vs[0]) + vs[1])
                return tf.reduce_mean(tf.square(tf.matmul(h, vs[2]) + vs[3] - y))

            for _ in range(6):
                opt.minimize(loss_fn, vs)
            return [loss_fn().numpy()], [], [v.numpy() for v in vs]

    got = run(True)
    assert counts == {"predicted": 4, "recomputed": 0}
    _assert_same(got, run(False))


def test_predictions_do_not_keep_an_optimizer_alive():
    """The compiled prediction refers to the optimizer's update weakly: dropping the model and
    the optimizer frees their state (Adam's slots) while the program stays cached."""
    tf.clear_cache()
    update, state = _with(lambda: tf.keras.optimizers.Adam(0.01))
    _train(update, n=5)
    opt = update.__closure__[0].cell_contents[0]
    refs = [weakref.ref(opt)] + [weakref.ref(w) for w in opt.variables()]
    del opt, update, state
    gc.collect()
    assert len(_prediction._PROGRAMS) == 1 and all(r() is None for r in refs)


def test_a_constant_lr_loop_compiles_twice_in_100_steps(fresh_cache):
    """Step 1's gradient, then (from step 3) the gradient with the predicted updates."""
    _, compiles, _ = _train(_sgd, n=100, read=lambda i, vs, grads: tf.cache_info().compiles)
    assert compiles[:3] == [1, 1, 2] and compiles[-1] == 2
    info = tf.cache_info()
    assert info.misses == 1 and info.hits == 99


def test_dropped_gradients_release_the_call_s_inputs():
    """A predicted call's gradients hold its inputs (to recompute them); dropping the
    gradients frees them at once (no reference cycle waits for the garbage collector)."""
    vs = [tf.Variable(a) for a in INIT]
    x, y = tf.constant(X), tf.constant(Y)
    with _settings():   # (whatever TAPEJAX_DEFERRED / TAPEJAX_SPECULATE say)
        for _ in range(3):
            _, grads = _loss_and_grads(vs, x, y)
            _sgd(0, vs, grads)
    group = grads[0]._thunk.args[0]
    assert group.value is None and type(group.call) is _prediction._Regrad   # a predicted step
    ref = weakref.ref(group)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del grads, group
        assert ref() is None
    finally:
        if enabled:
            gc.enable()


def test_clear_cache_drops_predictions_and_their_programs():
    tf.clear_cache()
    _train(_sgd, n=4)
    ((entry, _),) = _prediction._PROGRAMS.keys()
    assert isinstance(entry, _replay.Backward) and len(_speculate._TRACKS) == 1
    tf.clear_cache()
    gc.collect()
    assert len(_prediction._PROGRAMS) == len(_speculate._TRACKS) == len(_prediction._REGRADS) == 0
    assert sys.getrefcount(entry) == 2   # `entry` and getrefcount's argument


# -- the predicted program compiled in the background (``set_background_compile``) ----------

@contextlib.contextmanager
def _background(monkeypatch):
    """Background compiles on, each held back until the returned event is set (so the test,
    not the machine's speed, decides the step from which the loop predicts)."""
    gate = threading.Event()
    real = _prediction._compile

    def held(jitted, args):
        gate.wait(60)
        real(jitted, args)

    monkeypatch.setattr(_prediction, "_compile", held)
    prev = _speculate.set_background_compile(True)
    try:
        yield gate
    finally:
        gate.set()
        _prediction.wait_compiles()
        _speculate.set_background_compile(prev)


def _adam_update():
    opt = tf.keras.optimizers.Adam(0.01)

    def update(i, vs, grads):
        opt.apply_gradients(zip(grads, vs))

    return update


@pytest.mark.parametrize("name", ["manual", "adam"])
def test_a_loop_predicts_once_its_program_compiled_in_the_background(counts, monkeypatch, name):
    """Steps run plain (as with predictions off) while the predicted program compiles on the
    worker thread; the first step after the compile ended predicts, and every later one; the
    values are those of deferral off; the program is traced once (the compile the first
    predicting step finds is the worker's)."""
    make = (lambda: _sgd) if name == "manual" else _adam_update
    with _background(monkeypatch) as gate:
        def read(i, vs, grads):
            if i == 5:   # steps 3-6 ran plain while the compile waited
                assert counts == {"predicted": 0, "recomputed": 0}
                gate.set()
                _prediction.wait_compiles()
            return tf.cache_info().compiles

        got = _train(make(), n=9, read=read)
    assert counts == {"predicted": 3, "recomputed": 0}   # steps 7-9
    assert got[1][-1] == 2   # step 1's gradient and the predicted program (traced on the worker)
    want = _train(make(), n=9, deferral=False)
    _assert_same((got[0], [], got[2]), (want[0], [], want[2]))


def test_a_loop_that_stops_before_the_compile_ends_keeps_eager_values(counts, monkeypatch):
    """A compile that never ends while the loop runs: every step plain, values as deferral off."""
    with _background(monkeypatch):
        got = _train(_sgd, n=6)
    assert counts == {"predicted": 0, "recomputed": 0}
    _assert_same(got, _train(_sgd, n=6, deferral=False))


def test_a_background_compile_that_failed_is_done_by_the_first_predicting_call(counts, monkeypatch):
    """The worker swallows a compile's failure (here: a compile that did nothing): the first
    predicting call then compiles on the caller's thread, as with background compiles off."""
    calls = []
    monkeypatch.setattr(_prediction, "_compile", lambda jitted, args: calls.append(jitted))
    prev = _speculate.set_background_compile(True)
    try:
        got = _train(_sgd, n=8, read=lambda i, vs, grads: _prediction.wait_compiles())
    finally:
        _speculate.set_background_compile(prev)
    assert len(calls) == 1 and counts == {"predicted": 5, "recomputed": 0}   # steps 4-8
    _assert_same(got, _train(_sgd, n=8, deferral=False, read=lambda i, vs, grads: None))


def test_the_worker_traces_with_a_short_switch_interval_and_puts_the_callers_back():
    """While the worker traces and lowers a predicted program, CPython switches threads every
    ``WORKER_SWITCH_INTERVAL`` at most (so a training thread that gives up the GIL at each
    dispatch is not held for the default 5 ms each time); the interval is put back after, a
    shorter one the caller set is kept, and a change made meanwhile is not undone."""
    seen = []

    def f(x):
        seen.append(sys.getswitchinterval())
        return x * 2

    old = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        _prediction._compile(jax.jit(f), (jax.ShapeDtypeStruct((3,), np.float32),))
        assert seen == [_prediction.WORKER_SWITCH_INTERVAL] and sys.getswitchinterval() == 0.005
        sys.setswitchinterval(0.0001)   # already shorter: kept
        short = sys.getswitchinterval()
        _prediction._compile(jax.jit(f), (jax.ShapeDtypeStruct((4,), np.float32),))
        assert seen[-1] == short and sys.getswitchinterval() == short

        def g(x):   # someone sets their own interval while the worker traces: theirs stays
            sys.setswitchinterval(0.002)
            return x + 1

        sys.setswitchinterval(0.005)
        _prediction._compile(jax.jit(g), (jax.ShapeDtypeStruct((3,), np.float32),))
        assert sys.getswitchinterval() == 0.002
        _prediction._compile(jax.jit(lambda x: x.undefined), (jax.ShapeDtypeStruct((3,), np.float32),))
        assert sys.getswitchinterval() == 0.002   # a trace that failed puts it back too
    finally:
        sys.setswitchinterval(old)


def test_set_background_compile_checks_its_argument():
    with pytest.raises(TypeError, match="enabled"):
        _speculate.set_background_compile("yes")
    prev = _speculate.set_background_compile(True)
    assert _speculate.set_background_compile(prev) is True and _speculate.background_compile() is prev
