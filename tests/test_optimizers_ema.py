"""``tapejax/optimizers/_ema.py``: ``use_ema``'s moving average, checked against the same average
computed with NumPy over the weights the optimizer produced (the oracle), in the places the parity
tests do not reach: slots made inside a compiled first call, sparse gradients, the slot order and
``get_slot``, ``finalize_variable_values`` inside a function, ``exclude_from_weight_decay`` by
Variable and by a Keras layer name in the path, a checkpoint restored before the first update, and
the new optimizers' ``KeyError`` for a Variable their first build did not list."""
import tempfile

import numpy as np
import pytest

import tapejax as tf

ko = tf.keras.optimizers
X = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]], np.float32)


def _run(opt, steps, compiled, w0=((0.5, -1.0), (2.0, 0.25))):
    w = tf.Variable(np.array(w0, np.float32), name="kernel")

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(X, w) - 1.0))
        opt.apply_gradients([(tape.gradient(loss, w), w)])

    step = tf.function(step) if compiled else step
    traj = [w.numpy()]
    for _ in range(steps):
        step()
        traj.append(w.numpy())
    return w, traj


def _ema(traj, m):
    """The oracle: tf_keras' average of the weights after each update (its start: the weights before
    the first)."""
    avg = traj[0].astype(np.float64)
    for w in traj[1:]:
        avg = m * avg + (1 - m) * w
    return avg


@pytest.mark.parametrize("compiled", [False, True])
def test_average_is_the_numpy_average_of_the_trajectory(compiled):
    """The ``average`` slot after five steps (made inside the compiled first call when compiled: its
    start is the weights before the call) is NumPy's average of the weights the optimizer gave."""
    opt = ko.Adam(0.1, use_ema=True, ema_momentum=0.8)
    w, traj = _run(opt, 5, compiled)
    np.testing.assert_allclose(opt.get_slot(w, "average").numpy(), _ema(traj, 0.8), rtol=1e-6)
    names = [v.name for v in opt.variables()]
    assert names[:2] == ["iter:0", "kernel/average:0"] and len(names) == 4   # iterations, average, m, v


def test_overwrite_every_n_steps_sets_the_weights_to_the_average():
    """With ``ema_overwrite_frequency=2`` the weights after steps 2 and 4 are the average then."""
    opt = ko.SGD(0.1, use_ema=True, ema_momentum=0.5, ema_overwrite_frequency=2)
    w = tf.Variable(np.array([[0.5, -1.0], [2.0, 0.25]], np.float32))
    avg = w.numpy().astype(np.float64)
    for t in range(1, 5):
        before = w.numpy()
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(X, w) - 1.0))
        g = tape.gradient(loss, w).numpy()
        opt.apply_gradients([(tf.constant(g), w)])
        stepped = before - 0.1 * g
        avg = 0.5 * avg + 0.5 * stepped
        np.testing.assert_allclose(w.numpy(), avg if t % 2 == 0 else stepped, rtol=1e-6)
        np.testing.assert_allclose(opt.get_slot(w, "average").numpy(), avg, rtol=1e-6)


def test_sparse_gradient_averages_every_row():
    """An embedding's ``IndexedSlices`` gradient: the average moves on every row (the new Adam moves
    every row), as NumPy's average of the table."""
    table = tf.Variable(np.arange(12, dtype=np.float32).reshape(6, 2) / 10.0)
    opt = ko.Adam(0.05, use_ema=True, ema_momentum=0.7)
    traj = [table.numpy()]
    for ids in ([0, 2], [2, 5], [1, 1]):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(tf.gather(table, ids)))
        g = tape.gradient(loss, table)
        assert type(g).__name__ == "IndexedSlices"
        opt.apply_gradients([(g, table)])
        traj.append(table.numpy())
    np.testing.assert_allclose(opt.get_slot(table, "average").numpy(), _ema(traj, 0.7), rtol=1e-6)


def test_finalize_inside_a_function_and_exclusion_by_variable():
    """``finalize_variable_values`` in a compiled function assigns the averages; a Variable left out of
    the weight decay by ``var_list`` takes the step it takes without decay (a run without decay the
    oracle: one step, so its gradient is the same), the others the decayed step."""
    def train(decay, exclude, steps=3):
        w = tf.Variable(np.array([[0.5, -1.0], [2.0, 0.25]], np.float32))
        b = tf.Variable([0.1, -0.2])
        opt = ko.AdamW(0.05, weight_decay=decay, use_ema=True, ema_momentum=0.6)
        if exclude:
            opt.exclude_from_weight_decay(var_list=[b])
        for _ in range(steps):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(X, w) + b - 1.0))
            opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        return w, b, opt

    w, b, opt = train(0.5, True)
    avg_w, avg_b = opt.get_slot(w, "average").numpy(), opt.get_slot(b, "average").numpy()
    tf.function(lambda: opt.finalize_variable_values([w, b]))()
    np.testing.assert_array_equal(w.numpy(), avg_w)
    np.testing.assert_array_equal(b.numpy(), avg_b)
    decayed, plain, excluded = train(0.5, False, 1), train(0.0, False, 1), train(0.5, True, 1)
    assert not np.allclose(decayed[1].numpy(), plain[1].numpy())   # (the decay does move b)
    np.testing.assert_allclose(excluded[1].numpy(), plain[1].numpy(), rtol=1e-6)   # b excluded: no decay
    np.testing.assert_allclose(excluded[0].numpy(), decayed[0].numpy(), rtol=1e-6)   # w still decayed


def test_checkpoint_restored_before_the_first_update():
    """A checkpoint of an optimizer with averages, restored into a new one before it has updated:
    the averages come back with the slots (deferred until the first update makes them)."""
    opt = ko.RMSprop(0.01, use_ema=True, ema_momentum=0.5)
    w, _ = _run(opt, 3, False)
    path = tf.train.Checkpoint(w=w, opt=opt).save(tempfile.mkdtemp() + "/ck")
    w2 = tf.Variable(np.zeros((2, 2), np.float32), name="kernel")
    opt2 = ko.RMSprop(0.01, use_ema=True, ema_momentum=0.5)
    tf.train.Checkpoint(w=w2, opt=opt2).restore(path)
    opt2.apply_gradients([(tf.zeros((2, 2)), w2)])
    np.testing.assert_allclose(opt2.get_slot(w2, "average").numpy(),
                               0.5 * opt.get_slot(w, "average").numpy() + 0.5 * w.numpy(), rtol=1e-6)



def _halved_lr_run(make_opt):
    """Three steps of gradient 1 on ``w = 1.0`` by ``make_opt(lr, calls)``, the learning-rate
    Variable ``lr = 0.2`` halved after each; the optimizer, the weights, the callable's calls."""
    lr, calls = tf.Variable(0.2, trainable=False), []
    opt = make_opt(lr, calls)
    w = tf.Variable(1.0)
    out = []
    for _ in range(3):
        opt.apply_gradients([(tf.constant(1.0), w)])
        out.append(float(w.numpy()))
        lr.assign(lr * 0.5)
    return opt, out, len(calls)


def _counted(lr, calls):
    """A zero-argument learning-rate callable reading ``lr``, counting its calls."""
    return lambda: calls.append(1) or lr.read_value()


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "Nadam", "Lion", "Adafactor"])
def test_new_optimizers_copy_a_variable_or_callable_learning_rate_at_construction(name):
    """tf_keras' new optimizers make ``tf.Variable(learning_rate)``: the user's Variable is read
    once (a later ``assign`` changes nothing) and a zero-argument callable is called once, so both
    train as the constant 0.2; the optimizer's ``learning_rate`` is its own Variable."""
    new = getattr(ko, name)
    _, constant, _ = _halved_lr_run(lambda lr, calls: new(learning_rate=0.2))
    opt, by_var, _ = _halved_lr_run(lambda lr, calls: new(learning_rate=lr))
    assert by_var == constant
    assert isinstance(opt.learning_rate, tf.Variable) and float(opt.learning_rate.numpy()) == np.float32(0.2)
    _, by_fn, calls = _halved_lr_run(lambda lr, calls: new(learning_rate=_counted(lr, calls)))
    assert by_fn == constant and calls == 1


def test_legacy_and_new_sgd_given_a_variable_or_a_callable_learning_rate_match_tf_keras():
    """tf_keras 2.21's values (w from 1.0, gradient 1, lr 0.2 halved after each step): the new SGD
    0.8, 0.6, 0.4 (its copy of the rate); the legacy SGD follows the Variable and calls the callable
    at every update, 0.8, 0.7, 0.65."""
    np.testing.assert_allclose(_halved_lr_run(lambda lr, calls: ko.SGD(learning_rate=lr))[1], [0.8, 0.6, 0.4])
    legacy_var = _halved_lr_run(lambda lr, calls: ko.legacy.SGD(learning_rate=lr))
    np.testing.assert_allclose(legacy_var[1], [0.8, 0.7, 0.65])
    assert legacy_var[0].learning_rate is not None
    _, out, calls = _halved_lr_run(lambda lr, calls: ko.legacy.SGD(learning_rate=_counted(lr, calls)))
    np.testing.assert_allclose(out, [0.8, 0.7, 0.65])
    assert calls == 3


def test_a_scheduled_new_optimizer_refuses_a_new_rate_as_tf_keras():
    """tf_keras 2.21: ``SGD(ExponentialDecay(...)).learning_rate = 0.05`` is a TypeError (the
    schedule stays); the legacy optimizer takes the new rate; a float-rate one takes a new float."""
    sched = tf.keras.optimizers.schedules.ExponentialDecay(0.1, 2, 0.5)
    opt = tf.keras.optimizers.SGD(sched)
    with pytest.raises(TypeError, match="created with a `LearningRateSchedule`.*not settable"):
        opt.learning_rate = 0.05
    w = tf.Variable(1.0)
    opt.apply_gradients([(tf.constant(1.0), w)])
    np.testing.assert_allclose(w.numpy(), 0.9)   # (the schedule's first rate, 0.1)
    legacy = tf.keras.optimizers.legacy.SGD(sched)
    legacy.learning_rate = 0.05
    np.testing.assert_allclose(float(legacy.learning_rate.numpy()), 0.05)
    plain = tf.keras.optimizers.SGD(0.1)
    plain.learning_rate = 0.05
    np.testing.assert_allclose(float(plain.learning_rate.numpy()), 0.05)


# -- the Variables a new optimizer was built for (tf_keras' ``_index_dict``) ------------------
# (the oracle, TF 2.21's tf_keras: ``apply_gradients`` of a Variable the first build did not list
# raises ``KeyError: The optimizer cannot recognize variable ...``, eagerly and while tracing)

@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "Lion"])
def test_a_new_optimizer_refuses_a_variable_its_first_update_did_not_list(name):
    a, b = tf.Variable([1.0, 2.0]), tf.Variable([3.0])
    opt = getattr(ko, name)(0.1)
    opt.apply_gradients([(tf.ones(2), a)])
    before = a.numpy()
    with pytest.raises(KeyError, match="cannot recognize variable"):
        opt.apply_gradients([(tf.ones(2), a), (tf.ones(1), b)])
    assert int(opt.iterations) == 1 and np.array_equal(a.numpy(), before)   # (nothing moved)
    opt.apply_gradients([(tf.ones(2), a)])   # the known list still trains
    assert int(opt.iterations) == 2


def test_the_refusal_inside_a_function_and_the_legacy_optimizer_takes_new_variables():
    a, b = tf.Variable([1.0, 2.0]), tf.Variable([3.0])
    opt, legacy = ko.Adam(0.1), ko.legacy.Adam(0.1)

    @tf.function
    def step(vs):
        opt.apply_gradients([(tf.ones_like(v), v) for v in vs])

    step([a])
    with pytest.raises(KeyError):
        step([a, b])
    legacy.apply_gradients([(tf.ones(2), a)])
    legacy.apply_gradients([(tf.ones(2), a), (tf.ones(1), b)])   # (slots made at the first update listing it)
    assert int(legacy.iterations) == 2 and legacy.get_slot(b, "m") is not None


def test_build_first_names_the_variables_a_second_build_changes_nothing():
    a, b, c = tf.Variable([1.0]), tf.Variable([2.0]), tf.Variable([3.0])
    opt = ko.Adam(0.1)
    opt.build([a, b])
    assert len(opt.variables) == 1 + 2 * 2
    opt.build([a, b, c])   # tf_keras: built already, returns
    assert len(opt.variables) == 5
    opt.apply_gradients([(tf.ones(1), b)])   # a subset of the built list
    with pytest.raises(KeyError):
        opt.apply_gradients([(tf.ones(1), c)])


def test_a_variable_with_a_none_gradient_in_the_first_update_is_not_built():
    a, b = tf.Variable([1.0]), tf.Variable([2.0])
    opt = ko.SGD(0.1, momentum=0.9)
    opt.apply_gradients([(tf.ones(1), a), (None, b)])   # (filtered out before the build, as tf_keras)
    with pytest.raises(KeyError):
        opt.apply_gradients([(tf.ones(1), a), (tf.ones(1), b)])


def test_exclude_from_weight_decay_by_a_keras_layer_name_in_the_variable_path():
    """tf_keras' ``var_names=["LayerNorm"]`` matches ``LayerNorm/gamma:0``; a Keras 3 variable is
    named ``gamma``, its path ``.../LayerNorm/gamma`` holds the layer's name."""
    layers = tf.keras.layers
    model = tf.keras.Sequential([tf.keras.Input((2,)), layers.Dense(2, name="d"), layers.LayerNormalization(name="LayerNorm")])
    opt = ko.AdamW(learning_rate=0.1, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_names=["bias", "LayerNorm"])
    assert [opt._use_weight_decay(v) for v in model.trainable_variables] == [True, False, False, False]
