"""Optimizers beyond parity: one compiled eager update, inside tapejax.function, from_optax,
schedules, state, and errors raised before any state changes.

(Update rules are compared with tf_keras in tests/parity/test_optimizers.py.)
"""
import logging

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import tapejax as tf
from tapejax import optimizers
from xla_compiles import TRANSFERS, compiles


def _problem(seed=0):
    rng = np.random.RandomState(seed)
    x = tf.constant(rng.randn(16, 3).astype("float32"))
    y = tf.constant(rng.randn(16, 1).astype("float32"))
    w = tf.Variable(rng.randn(3, 1).astype("float32"), name="w")
    b = tf.Variable(np.zeros(1, "float32"), name="b")
    return x, y, w, b


def _step(opt, x, y, w, b):
    with tf.GradientTape() as t:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
    opt.apply_gradients(zip(t.gradient(loss, [w, b]), [w, b]))
    return loss


def test_namespaces():
    assert tf.keras.optimizers.Adam is optimizers.Adam
    # tf.keras.optimizers.X are tf_keras' new optimizers, .legacy.X the OptimizerV2 ones (other rules)
    for name in ("SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam", "Ftrl"):
        new, old = getattr(optimizers, name), getattr(optimizers.legacy, name)
        assert new is not old and issubclass(new, old), name
        assert old.__module__ == "tapejax.optimizers._rules" and new.__module__ == "tapejax.optimizers._rules_v2"
    assert not hasattr(tf.keras.optimizers.legacy, "AdamW")   # as tf_keras 2.21
    assert tf.keras.optimizers.schedules.ExponentialDecay is optimizers.schedules.ExponentialDecay


def test_eager_update_is_one_compiled_program():
    x, y, w, b = _problem()
    opt = optimizers.Adam(0.01)
    for _ in range(5):
        _step(opt, x, y, w, b)
    assert len(opt._updates) == 1
    ((state, fn),) = opt._updates.values()
    # compiled once for all steps, per donation mask (``ownership.Donating``): an update that runs
    # after a predicted step (whose values the prediction's records hold, not owned: whether a step
    # is predicted depends on the speculation state earlier tests leave) runs the variant that keeps
    # them, so two at most (stop 38's full-suite run found 2), never one a step
    assert fn._cache_size() <= 2
    assert len(state) == 2 + 4 + 1        # variables, slots, iterations: all in the one update
    assert int(opt.iterations.numpy()) == 5
    names = [v.name for v in opt.variables()]
    assert names == ["iter:0", "w/m:0", "w/v:0", "b/m:0", "b/v:0"]   # tf_keras' new Adam: variable by variable
    assert opt.get_slot(w, "m") is opt.variables()[1]
    with pytest.raises(KeyError):
        opt.get_slot(tf.Variable(1.0), "m")


@pytest.mark.parametrize("make", [
    lambda: optimizers.SGD(0.1, momentum=0.9, nesterov=True),
    lambda: optimizers.Adam(optimizers.schedules.ExponentialDecay(0.05, 3, 0.5), amsgrad=True),
    lambda: optimizers.RMSprop(0.01, momentum=0.5, centered=True, clipnorm=0.5),
    lambda: optimizers.Nadam(0.01, global_clipnorm=0.3),
    lambda: optimizers.Ftrl(0.1, l1_regularization_strength=0.01),
    lambda: optimizers.from_optax(optax.chain(optax.clip(0.5), optax.adam(0.01))),
])
def test_inside_function_equals_eager_and_traces_once(make):
    x, y, we, be = _problem()
    _, _, wc, bc = _problem()
    oe, oc = make(), make()
    step = tf.function(lambda x, y: _step(oc, x, y, wc, bc))
    for _ in range(12):
        le = _step(oe, x, y, we, be)
        lc = step(x, y)
        np.testing.assert_allclose(lc.numpy(), le.numpy(), rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(wc.numpy(), we.numpy(), rtol=2e-5, atol=1e-6)
    for a, b in zip(oc.variables(), oe.variables()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-5, atol=1e-6)
    assert step.experimental_get_tracing_count() == 2   # the optimizer creates Variables: TF 2.21 traces twice
    assert int(oc.iterations.numpy()) == 12


def test_learning_rate_change_is_seen_by_a_compiled_step():
    x, y, w, b = _problem()
    opt = optimizers.SGD(0.1)
    step = tf.function(lambda: _step(opt, x, y, w, b))
    step()
    before = w.numpy().copy()
    opt.learning_rate = 0.0
    step()
    np.testing.assert_array_equal(w.numpy(), before)
    assert float(opt.learning_rate.numpy()) == 0.0 and opt.lr is opt.learning_rate
    assert step.experimental_get_tracing_count() == 2   # the optimizer creates Variables: TF 2.21 traces twice


def test_optax_schedule_and_callable_learning_rate():
    v1, v2 = tf.Variable(1.0), tf.Variable(1.0)
    o1 = optimizers.SGD(optax.linear_schedule(1.0, 0.0, 4))
    o2 = optimizers.SGD(1.0)
    lrs = [1.0, 0.75, 0.5, 0.25]
    for lr in lrs:
        o1.apply_gradients([(tf.constant(1.0), v1)])
        o2.learning_rate = lr
        o2.apply_gradients([(tf.constant(1.0), v2)])
    np.testing.assert_allclose(v1.numpy(), v2.numpy())
    np.testing.assert_allclose(v1.numpy(), 1.0 - sum(lrs))


def test_step_callable_learning_rate_error_is_its_own():
    """A one-argument callable (an optax-style schedule) gets the step; a TypeError it raises
    propagates as it is (it used to be retried without the step: "missing ... argument")."""
    def schedule(count):
        raise TypeError("schedule's own error")

    v = tf.Variable(1.0)
    with pytest.raises(TypeError, match="schedule's own error"):
        optimizers.SGD(schedule).apply_gradients([(tf.constant(1.0), v)])
    assert v.numpy() == 1.0
    steps = []
    opt = optimizers.SGD(lambda count, scale=0.5: (steps.append(count), scale)[1])
    opt.apply_gradients([(tf.constant(1.0), v)])
    assert v.numpy() == 0.5 and len(steps) == 1


def test_from_optax_equals_pure_optax():
    x, y, w, b = _problem()
    tx = optax.adamw(0.01, weight_decay=0.1)
    opt = optimizers.from_optax(tx)
    params = [jnp.asarray(w.numpy()), jnp.asarray(b.numpy())]
    state = tx.init(params)

    def loss_fn(p):
        return jnp.mean(jnp.square(x.numpy() @ p[0] + p[1] - y.numpy()))

    for _ in range(5):
        _step(opt, x, y, w, b)
        g = jax.grad(loss_fn)(params)
        upd, state = tx.update(g, state, params)
        params = optax.apply_updates(params, upd)
    np.testing.assert_allclose(w.numpy(), params[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), params[1], rtol=1e-5, atol=1e-6)
    assert int(opt.iterations.numpy()) == 5
    assert len(opt.variables()) == 1 + len(jax.tree_util.tree_leaves(state))
    with pytest.raises(TypeError, match="GradientTransformation"):
        optimizers.from_optax("adam")


def test_from_optax_mask_is_the_list_of_variables_and_a_dict_mask_says_so():
    """The bridge passes optax the parameters as the list of apply_gradients' variables: optax.masked
    with a list mask is pure optax's result with the same mask as a dict; a dict mask is a
    ValueError saying what structure the bridge passes (it was optax's bare pytree error)."""
    a, b = tf.Variable([1.0, 2.0]), tf.Variable(3.0)
    opt = optimizers.from_optax(optax.masked(optax.adam(0.1), {"a": True, "b": False}))
    with pytest.raises(ValueError, match="as a list in the order of apply_gradients"):
        opt.apply_gradients([(tf.constant([1.0, 1.0]), a), (tf.constant(1.0), b)])
    opt = optimizers.from_optax(optax.masked(optax.adam(0.1), [True, False]))
    tx = optax.masked(optax.adam(0.1), {"a": True, "b": False})
    p = {"a": jnp.array([1.0, 2.0]), "b": jnp.array(3.0)}
    state = tx.init(p)
    for _ in range(3):
        opt.apply_gradients([(2.0 * a, a), (2.0 * b, b)])
        upd, state = tx.update(jax.tree_util.tree_map(lambda x: 2.0 * x, p), state, p)
        p = optax.apply_updates(p, upd)
    np.testing.assert_allclose(a.numpy(), p["a"], rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), p["b"], rtol=1e-6)


def test_from_optax_state_is_reachable_to_change_an_injected_hyperparameter():
    """``optax_state(var_list)``: optax's state pytree with its Variables as leaves, so a rate made
    with optax.inject_hyperparams can be changed as in pure optax (there was no way to reach it,
    though ``learning_rate``'s error pointed at inject_hyperparams)."""
    make = lambda: optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)  # noqa: E731
    opt, tx = optimizers.from_optax(make()), make()
    v = tf.Variable([1.0, 2.0])
    p, state = [jnp.array([1.0, 2.0])], tx.init([jnp.array([1.0, 2.0])])
    for name in ("learning_rate", "lr"):   # (``lr`` read a 0.0 and set a rate optax never used)
        with pytest.raises(AttributeError, match="optax_state"):
            getattr(opt, name)
        with pytest.raises(AttributeError, match="optax_state"):
            setattr(opt, name, 0.5)
    for i in range(3):
        if i == 1:
            opt.optax_state([v]).hyperparams["learning_rate"].assign(0.5)
            state.hyperparams["learning_rate"] = jnp.asarray(0.5)
        opt.apply_gradients([(2.0 * v, v)])
        upd, state = tx.update([2.0 * p[0]], state, p)
        p = optax.apply_updates(p, upd)
    np.testing.assert_allclose(v.numpy(), p[0], rtol=1e-6)
    assert isinstance(opt.optax_state([v]).hyperparams["learning_rate"], tf.Variable)


def test_from_optax_transformation_needing_the_loss_says_it_is_not_supported():
    """optax transformations whose update needs value= (the loss) cannot run behind
    apply_gradients: optax's TypeError gets a line saying so."""
    v = tf.Variable([1.0, 2.0])
    opt = optimizers.from_optax(optax.chain(optax.adam(0.1), optax.contrib.reduce_on_plateau()))
    with pytest.raises(TypeError, match="(?s)'value'.*transformations that need the loss"):
        opt.apply_gradients([(tf.constant([1.0, 1.0]), v)])
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


def test_from_optax_transformation_needing_its_own_params_structure_says_it_is_not_supported():
    """optax.lookahead reads ``params.fast`` (its LookaheadParams): the bridge's list of variables
    gave a bare AttributeError "'list' object has no attribute 'fast'"; now a line says why."""
    v = tf.Variable([1.0, 2.0])
    opt = optimizers.from_optax(optax.lookahead(optax.adam(0.1), 2, 0.5))
    with pytest.raises(AttributeError, match="(?s)'fast'.*own parameter structure"):
        opt.apply_gradients([(tf.constant([1.0, 1.0]), v)])
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])


def test_minimize_callable_and_tensor_with_tape():
    v = tf.Variable(3.0)
    opt = optimizers.SGD(0.1)
    opt.minimize(lambda: v * v, [v])
    np.testing.assert_allclose(v.numpy(), 3.0 - 0.1 * 6.0)
    with tf.GradientTape() as tape:
        loss = v * v
    opt.minimize(loss, [v], tape=tape)
    np.testing.assert_allclose(v.numpy(), 2.4 - 0.1 * 4.8, rtol=1e-6)
    with pytest.raises(ValueError, match="`tape` is required"):
        opt.minimize(v * 2.0, [v])


def test_none_gradients_skipped_with_warning_all_none_raises(caplog):
    a, b = tf.Variable(1.0, name="a"), tf.Variable(2.0, name="b")
    opt = optimizers.SGD(0.5)
    with caplog.at_level(logging.WARNING, logger="tapejax"):
        opt.apply_gradients([(tf.constant(1.0), a), (None, b)])
    assert "Gradients do not exist for variables ['b:0']" in caplog.text
    assert (a.numpy(), b.numpy()) == (0.5, 2.0)
    with pytest.raises(ValueError, match="No gradients provided for any variable"):
        opt.apply_gradients([(None, a), (None, b)])
    assert int(opt.iterations.numpy()) == 1


def test_an_empty_list_is_a_no_op_as_tf_keras():
    """A fully frozen model's ``zip(grads, model.trainable_variables)`` is empty: tf_keras' new
    optimizers return ``iterations`` unchanged (nothing built), the legacy ones ``None`` after making
    ``iterations`` (TF 2.21's answers); an optax optimizer does nothing either."""
    a = tf.Variable(1.0, name="a")
    new, legacy = tf.keras.optimizers.Adam(0.1), tf.keras.optimizers.legacy.Adam(0.1)
    assert int(new.apply_gradients([])) == 0 and not new.built
    assert new.minimize(lambda: a * 2.0, []) is not None and int(new.iterations) == 0
    assert legacy.apply_gradients(iter([])) is None and len(legacy.variables()) == 1
    assert optimizers.from_optax(optax.sgd(0.1)).apply_gradients([]) is None
    new.apply_gradients([(tf.constant(1.0), a)])   # (the empty call built nothing: a is known now)
    assert int(new.iterations) == 1 and a.numpy() != 1.0


def test_bad_input_raises_before_any_state_changes():
    a, b = tf.Variable([1.0, 2.0], name="a"), tf.Variable(2.0, name="b")
    opt = optimizers.Adam(0.1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"variable b:0 has shape \(\), its gradient has shape \(2,\)"):
        opt.apply_gradients([(tf.constant([1.0, 1.0]), a), (tf.constant([1.0, 1.0]), b)])
    with pytest.raises(TypeError, match="Variable"):
        opt.apply_gradients([(tf.constant(1.0), tf.constant(1.0))])
    with pytest.raises(ValueError, match="more than once"):
        opt.apply_gradients([(tf.constant(1.0), b), (tf.constant(1.0), b)])
    np.testing.assert_array_equal(a.numpy(), [1.0, 2.0])
    assert b.numpy() == 2.0 and opt._slots == {}
    with pytest.raises(TypeError, match="Unexpected keyword argument"):
        optimizers.SGD(0.1, momentun=0.9)
    with pytest.raises(ValueError, match="Cannot accept both"):
        optimizers.Adam(clipnorm=1.0, global_clipnorm=1.0)
    with pytest.raises(ValueError, match="learning_rate"):   # TF: ValueError for a string
        optimizers.SGD("fast")
    with pytest.raises(TypeError, match="learning_rate"):    # and TypeError for None (not NaN)
        optimizers.SGD(None)


def test_values_held_elsewhere_survive_donation():
    w = tf.Variable([1.0, 2.0])
    opt = optimizers.SGD(0.1, momentum=0.5)
    with tf.GradientTape(persistent=True) as t:
        loss = tf.reduce_sum(w * w)
    held = w.read_value()
    opt.apply_gradients([(t.gradient(loss, w), w)])
    np.testing.assert_array_equal(held.numpy(), [1.0, 2.0])
    np.testing.assert_allclose(t.gradient(loss, w).numpy(), [2.0, 4.0])   # tape's recorded reads intact
    np.testing.assert_allclose(w.numpy(), [0.8, 1.6])


def test_shared_values_are_passed_undonated_not_copied(monkeypatch):
    """Oracle: which arrays are donated.  A Variable's value that nothing else holds is donated
    (its old buffer is consumed); one that a Tensor also holds is passed undonated (no copy is
    made to donate it) and stays readable.  One compiled variant per donation mask."""
    import jax.numpy as jnp
    copies = []
    real_array = jnp.array
    monkeypatch.setattr(jnp, "array", lambda *a, **k: copies.append(1) or real_array(*a, **k))
    w, b = tf.Variable([1.0, 2.0]), tf.Variable([3.0])
    opt = optimizers.SGD(0.1, momentum=0.5)
    opt.apply_gradients([(tf.constant([1.0, 1.0]), w), (tf.constant([1.0]), b)])
    ((_, fn),) = opt._updates.values()
    assert list(fn._variants) == [(False,) * 5]     # w, b, two momenta, iterations: all donated
    held = w.read_value()
    with compiles() as names:
        opt.apply_gradients([(tf.constant([1.0, 1.0]), w), (tf.constant([1.0]), b)])
    assert list(fn._variants)[1] == (True,) + (False,) * 4
    assert [n for n in names if n not in TRANSFERS] == ["jit(split)"]   # (the new variant, once)
    assert copies == []
    np.testing.assert_allclose(held.numpy(), [0.9, 1.9])       # the held value survived
    assert held._value is not w._value
    np.testing.assert_allclose(w.numpy(), [0.9 - 0.15, 1.9 - 0.15])
    np.testing.assert_allclose(b.numpy(), [3.0 - 0.1 - 0.15])
    del held
    # (JAX's compile log is the oracle: its C++ cache of a variant, ``_cache_size``, read 0 once in
    # a full run while nothing compiled again)
    with compiles() as names:
        opt.apply_gradients([(tf.constant([1.0, 1.0]), w), (tf.constant([1.0]), b)])
    assert [n for n in names if n not in TRANSFERS] == []   # back to the all-donated variant: no retrace
    assert len(fn._variants) == 2


def test_repeated_update_skips_the_list_checks_but_not_the_gradient_checks(monkeypatch):
    """Oracle: the first update's values and TF's errors.  A list of Variables updated before
    takes the cached plan (no second planning); a gradient of another shape or dtype still gets
    the full path's error, with nothing changed."""
    w, b = tf.Variable([1.0, 2.0]), tf.Variable([3.0])
    opt = optimizers.SGD(0.5)
    opt.apply_gradients([(tf.constant([1.0, 1.0]), w), (tf.constant([2.0]), b)])
    monkeypatch.setattr(type(opt), "_eager_plan", lambda *a: pytest.fail("planned again"))
    opt.apply_gradients([(tf.constant([1.0, 1.0]), w), (tf.constant([2.0]), b)])
    np.testing.assert_allclose(w.numpy(), [0.0, 1.0])
    np.testing.assert_allclose(b.numpy(), [1.0])
    assert int(opt.iterations.numpy()) == 2
    monkeypatch.undo()
    with pytest.raises(tf.errors.InvalidArgumentError, match="same shape"):
        opt.apply_gradients([(tf.constant([1.0, 1.0, 1.0]), w), (tf.constant([2.0]), b)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="same dtype"):
        opt.apply_gradients([(tf.constant([1.0, 1.0], tf.float16), w), (tf.constant([2.0]), b)])
    with pytest.raises(TypeError, match="Variable"):
        opt.apply_gradients([(tf.constant([1.0, 1.0]), tf.constant([1.0, 1.0])), (tf.constant([2.0]), b)])
    np.testing.assert_allclose(w.numpy(), [0.0, 1.0])
    assert int(opt.iterations.numpy()) == 2
    opt.apply_gradients([([1.0, 1.0], w), (np.array([2.0], np.float32), b)])   # converted: full path
    np.testing.assert_allclose(w.numpy(), [-0.5, 0.5])


def test_set_get_weights_and_config():
    x, y, w, b = _problem()
    opt = optimizers.Adam(0.01, beta_1=0.8)
    _step(opt, x, y, w, b)
    weights = opt.get_weights()
    opt2 = optimizers.Adam.from_config(opt.get_config())
    assert opt2.get_config() == opt.get_config()
    _step(opt2, x, y, w, b)
    opt2.set_weights(weights)
    assert int(opt2.iterations.numpy()) == 1
    with pytest.raises(ValueError, match="expecting 5 weights"):
        opt2.set_weights(weights[:2])


# -- hyperparameters --------------------------------------------------------------------------

def _keras_adam(w, grads, lr, betas, eps):
    """Oracle: tf_keras' Adam (epsilon-hat placement) in float64 NumPy, beta_1/beta_2 per step
    (float32-rounded, as TF's hyperparameter Variables hold them)."""
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for t, (g, (b1, b2)) in enumerate(zip(grads, betas), 1):
        b1, b2 = float(np.float32(b1)), float(np.float32(b2))
        alpha = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        m = m + (g - m) * (1 - b1)
        v = v + (g * g - v) * (1 - b2)
        w = w - m * alpha / (np.sqrt(v) + eps)
    return w


def test_hyperparameters_are_variables_the_update_reads_each_step():
    """``opt.beta_1`` is a float32 Variable; setting it (or assigning the Variable) changes the
    next update without compiling it again; oracle: Keras' Adam formula in NumPy."""
    opt = optimizers.Adam(0.1, beta_1=0.8)
    assert isinstance(opt.beta_1, tf.Variable) and not opt.beta_1.trainable
    assert opt.beta_1.dtype == tf.float32 and opt.beta_1.name == "Adam/beta_1:0"
    assert isinstance(opt.decay, tf.Variable) and float(opt.decay.numpy()) == 0.0
    assert all(v is not opt.beta_1 for v in opt.variables())   # (TF: not in variables())
    w = tf.Variable([1.0, -2.0])
    grads = [np.array([0.5, 1.0]), np.array([-1.0, 2.0]), np.array([0.25, -0.5]), np.array([1.0, 1.0])]
    betas = [(0.8, 0.999), (0.8, 0.999), (0.5, 0.999), (0.5, 0.9)]
    for i, g in enumerate(grads):
        if i == 2:
            opt.beta_1 = 0.5
        if i == 3:
            opt.beta_2.assign(0.9)
        opt.apply_gradients([(tf.constant(g.astype("float32")), w)])
    np.testing.assert_allclose(w.numpy(), _keras_adam(np.array([1.0, -2.0]), grads, 0.1, betas, 1e-7),
                               rtol=1e-5)
    ((_, fn),) = opt._updates.values()
    # one compile for the four steps: at most one entry (a full-suite run once found 0: the entry
    # gone from JAX's jit cache by the assertion, not a second compile)
    assert fn._cache_size() <= 1
    assert opt.get_config()["beta_1"] == 0.5 and opt.get_config()["beta_2"] == pytest.approx(0.9)
    assert optimizers.Adam.from_config(opt.get_config()).get_config() == opt.get_config()


def test_a_plain_hyperparameter_change_compiles_the_update_again():
    """epsilon (a plain float in Keras, read when an eager step runs) is read at compile time:
    setting it drops the compiled update, so the next step uses it."""
    opt = optimizers.Adam(0.1)
    w = tf.Variable([1.0, -2.0])
    grads = [np.array([0.5, 1.0]), np.array([-1.0, 2.0]), np.array([0.25, -0.5])]
    for i, g in enumerate(grads):
        if i == 2:
            opt.epsilon = 0.5
            assert len(opt._updates) == 0
        opt.apply_gradients([(tf.constant(g.astype("float32")), w)])
    # epsilon enters only the last step; the oracle's first two steps use 1e-7
    w2 = _keras_adam(np.array([1.0, -2.0]), grads[:2], 0.1, [(0.9, 0.999)] * 2, 1e-7)
    m = v = np.zeros(2)
    for t, g in enumerate(grads, 1):
        m = m + (g - m) * (1 - np.float32(0.9))
        v = v + (g * g - v) * (1 - np.float32(0.999))
    b1, b2 = float(np.float32(0.9)), float(np.float32(0.999))
    alpha = 0.1 * np.sqrt(1 - b2 ** 3) / (1 - b1 ** 3)
    np.testing.assert_allclose(w.numpy(), w2 - m * alpha / (np.sqrt(v) + 0.5), rtol=1e-5)
    opt.learning_rate = 0.05          # (a property: no recompile)
    opt.epsilon = 0.5                 # (the same value: no recompile)
    opt.apply_gradients([(tf.constant([1.0, 1.0]), w)])
    ((_, fn),) = opt._updates.values()
    assert fn._cache_size() <= 1   # (no recompile; see above for <=)


def test_hyperparameters_inside_a_compiled_step_are_read_when_it_runs():
    w = tf.Variable([1.0, -2.0])
    opt = optimizers.SGD(0.1, momentum=0.9)

    @tf.function
    def step(g):
        opt.apply_gradients([(g, w)])

    g = tf.constant([1.0, 1.0])
    step(g)
    opt.momentum = 0.5
    step(g)
    assert step.experimental_get_tracing_count() == 2   # the optimizer creates Variables: TF 2.21 traces twice
    # velocity: -0.1, then 0.5 * -0.1 - 0.1 = -0.15; w = 1 - 0.1 - 0.15
    np.testing.assert_allclose(w.numpy(), [0.75, -2.25], rtol=1e-6)

    @tf.function
    def set_and_step(g, m):   # a Tensor set inside the compiled step: assigns the Variable
        opt.momentum = m
        opt.apply_gradients([(g, w)])

    set_and_step(g, tf.constant(0.0))
    assert isinstance(opt.momentum, tf.Variable) and opt.momentum.numpy() == 0.0
    np.testing.assert_allclose(w.numpy(), [0.65, -2.35], rtol=1e-6)   # velocity -0.1


def test_bad_hyperparameter_values_change_nothing():
    opt = optimizers.Adam(0.1, beta_1=0.8)
    for bad, err in (("high", ValueError), (None, TypeError), ([0.5, 0.6], ValueError), (object(), TypeError),
                     (tf.constant([0.5, 0.6]), ValueError), (tf.constant(True), TypeError)):
        with pytest.raises(err, match="beta_1"):
            opt.beta_1 = bad
    assert float(opt.beta_1.numpy()) == np.float32(0.8)
    with pytest.raises(ValueError, match="epsilon"):   # a plain float attribute: checked too
        opt.epsilon = "small"
    with pytest.raises(ValueError, match="epsilon"):
        opt.epsilon = [1e-3, 1e-4]
    with pytest.raises(TypeError, match="epsilon"):
        opt.epsilon = object()
    assert opt.epsilon == 1e-7
    opt.epsilon = np.float32(1e-3)   # (kept as a Python float)
    assert type(opt.epsilon) is float
    opt.beta_1 = tf.Variable(0.7)   # a scalar Tensor or Variable: its value
    assert opt.beta_1.numpy() == np.float32(0.7)
    opt.beta_1 = tf.constant(1)     # (an integer one is cast)
    assert opt.beta_1.numpy() == 1.0 and opt.beta_1.dtype == tf.float32


def test_slot_deciding_attributes():
    """amsgrad / centered decide the slots: settable until the first update (as in TF), then
    a ValueError (TF fails at the next update instead)."""
    opt = optimizers.Adam(0.1)
    opt.amsgrad = True
    w = tf.Variable([1.0, -2.0])
    opt.apply_gradients([(tf.constant([1.0, 1.0]), w)])
    assert opt.get_slot(w, "vhat") is not None
    with pytest.raises(ValueError, match="amsgrad"):
        opt.amsgrad = False
    assert opt.amsgrad is True
    opt.amsgrad = True   # (the same value: fine)
    r = optimizers.RMSprop(0.1, centered=True)
    r.centered = False
    r.apply_gradients([(tf.constant([1.0, 1.0]), w)])
    assert r.get_slot_names() == ["rms"]


# -- Lion, Adafactor, get / serialize / deserialize -------------------------------------------------

@pytest.mark.parametrize("cls,kw", [("Lion", {"learning_rate": 0.02, "beta_1": 0.7, "weight_decay": 0.1}),
                                    ("Adafactor", {"learning_rate": 0.3, "clip_threshold": 0.5,
                                                   "relative_step": False}),
                                    ("Adam", {"learning_rate": 0.25, "amsgrad": True})])
def test_serialize_round_trip_gives_the_same_training(cls, kw):
    """Oracle: the optimizer made directly; deserialize(serialize(opt)) trains to the same weights."""
    ko = tf.keras.optimizers
    opt = getattr(ko, cls)(**kw)
    back = ko.deserialize(ko.serialize(opt))
    assert type(back) is type(opt) and back.get_config() == opt.get_config()

    def train(o):
        w = tf.Variable([[0.5, -1.0], [2.0, 0.25]])
        for _ in range(3):
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(tf.square(w - 1.0) * w)
            o.apply_gradients([(t.gradient(loss, w), w)])
        return w.numpy()
    np.testing.assert_array_equal(train(opt), train(back))


def test_get_and_deserialize_errors():
    ko = tf.keras.optimizers
    with pytest.raises(TypeError, match="Invalid keyword arguments"):
        ko.get("adam", foo=1)
    with pytest.raises(TypeError, match="`config` of deserialize must be a dict"):
        ko.deserialize("adam")
    with pytest.raises(ValueError, match="Unknown optimizer: 'Nope'"):
        ko.deserialize({"class_name": "Nope", "config": {}})
    assert type(ko.get("Lion")).__name__ == "Lion"   # a class name (Keras' registry finds it)
    with pytest.raises(ValueError, match="ema_momentum"):   # (tf_keras' check, made with use_ema)
        ko.Lion(use_ema=True, ema_momentum=2.0)
    with pytest.warns(UserWarning, match="should only be used for objects of type"):
        assert ko.serialize(3) == 3


def test_adafactor_slots_are_factored():
    opt = tf.keras.optimizers.Adafactor()
    k = tf.Variable(np.ones((2, 3, 4), np.float32))
    b = tf.Variable(np.ones(3, np.float32))
    opt.apply_gradients([(tf.ones_like(k), k), (tf.ones_like(b), b)])
    assert opt.get_slot(k, "r").shape == (2, 3) and opt.get_slot(k, "c").shape == (2, 4)
    assert opt.get_slot(k, "v").shape == (2, 3, 4) and opt.get_slot(b, "v").shape == (3,)


@pytest.mark.parametrize("name", ["Lion", "Adafactor"])
def test_new_rules_compiled_step_equals_eager(name):
    """Oracle: the same steps taken eagerly (themselves checked against tf_keras in
    tests/parity/test_optimizers.py)."""
    def run(compiled):
        opt = getattr(tf.keras.optimizers, name)(learning_rate=0.05)
        w = tf.Variable(np.linspace(-1.0, 1.0, 6).reshape(2, 3).astype(np.float32))
        b = tf.Variable([0.5, -0.5, 0.25])

        def step():
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(tf.square(w * 2.0 + b - 0.3))
            opt.apply_gradients(zip(t.gradient(loss, [w, b]), [w, b]))
            return loss
        fn = tf.function(step) if compiled else step
        for _ in range(4):
            fn()
        return w.numpy(), b.numpy()
    for got, want in zip(run(True), run(False)):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


def test_momentum_given_as_a_variable_follows_its_assigns():
    """tf_keras (legacy SGD): one step with momentum 0.9, then ``m.assign(0.0)``: plain steps
    of 0.1 after the first (checked under TF 2.21: 0.6 after four steps of gradient 1)."""
    m = tf.Variable(0.9)
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=m)
    w = tf.Variable(1.0)
    for _ in range(4):
        opt.apply_gradients([(tf.constant(1.0), w)])
        m.assign(0.0)
    np.testing.assert_allclose(w.numpy(), 0.6, rtol=1e-6)
    assert opt.momentum is m


def test_a_hyperparameter_variable_given_after_the_first_update_is_copied():
    """tf_keras follows a Variable given before the first update; after it, the hyperparameter's
    own Variable is assigned the value (a later assign of the user's Variable is not seen)."""
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    w = tf.Variable(1.0)
    opt.apply_gradients([(tf.constant(1.0), w)])
    m = tf.Variable(0.0)
    opt.momentum = m
    assert opt.momentum is not m
    m.assign(0.9)
    opt.apply_gradients([(tf.constant(1.0), w)])
    np.testing.assert_allclose(w.numpy(), 0.8, rtol=1e-6)   # momentum 0: a plain step


def test_an_integer_variable_hyperparameter_is_read_as_float32():
    b = tf.Variable(0)
    opt = tf.keras.optimizers.legacy.Adam(0.1, beta_1=b)
    w = tf.Variable(1.0)
    opt.apply_gradients([(tf.constant(1.0), w)])
    np.testing.assert_allclose(w.numpy(), 0.9, rtol=1e-5)


def test_a_bad_hyperparameter_variable_is_refused_before_any_change():
    with pytest.raises(ValueError, match="`momentum` must be a scalar"):
        tf.keras.optimizers.legacy.SGD(0.1, momentum=tf.constant([0.9, 0.1]))
    with pytest.raises(TypeError, match="`beta_1` must be a float"):
        tf.keras.optimizers.legacy.Adam(0.1, beta_1=tf.Variable(True))


@pytest.mark.parametrize("sched", [
    optimizers.schedules.ExponentialDecay(0.5, 3, 0.5),
    optimizers.schedules.InverseTimeDecay(0.5, 3, 0.5, staircase=True),
    optimizers.schedules.PiecewiseConstantDecay([1, 2], [0.5, 0.25, 0.1]),
    optimizers.schedules.CosineDecay(0.5, 5, alpha=0.1),
    optimizers.schedules.CosineDecayRestarts(0.5, 2),
    optimizers.schedules.PolynomialDecay(0.3, 4, end_learning_rate=0.01, power=2.0),
], ids=lambda s: type(s).__name__)
def test_schedule_called_with_a_variable_step_inside_a_function_follows_it(sched):
    """A schedule called with a Variable step inside tapejax.function reads the Variable at each
    call (it once read its value at trace time, so every call gave the first step's rate)."""
    step = tf.Variable(0, dtype=tf.int64)

    @tf.function
    def rate():
        lr = sched(step)
        step.assign_add(1)
        return lr

    got = [float(rate()) for _ in range(4)]
    want = [float(sched(tf.constant(s, tf.int64))) for s in range(4)]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert len(set(want)) > 1


def test_new_nadam_inside_function_equals_eager():
    """Oracle: the eager new Nadam (parity-tested against tf_keras; TF's own new Nadam gives NaN
    inside a tf.function).  Two Variables, so the momentum-schedule product is taken once a step."""
    def run(compiled):
        x, y, w, b = _problem()
        opt = tf.keras.optimizers.Nadam(0.05)

        def step():
            return _step(opt, x, y, w, b)

        step_fn = tf.function(step) if compiled else step
        for _ in range(4):
            step_fn()
        return w.numpy(), b.numpy()

    for a, e in zip(run(True), run(False)):
        np.testing.assert_allclose(a, e, rtol=2e-6, atol=1e-7)


def test_new_optimizers_config_round_trip_and_legacy_pick():
    ko = tf.keras.optimizers
    opt = ko.RMSprop(0.01, momentum=0.5, weight_decay=0.1)
    cfg = ko.serialize(opt)
    assert cfg["module"] == "keras.optimizers" and cfg["config"]["is_legacy_optimizer"] is False
    back = ko.deserialize(cfg)
    assert type(back) is ko.RMSprop and back.weight_decay == 0.1
    old = ko.deserialize(ko.serialize(ko.legacy.RMSprop(0.01)))
    assert type(old) is ko.legacy.RMSprop
    assert type(ko.deserialize({"class_name": "Adam", "config": {"is_legacy_optimizer": True}})) is ko.legacy.Adam
    with pytest.raises(ValueError, match="decay is deprecated"):
        ko.Adam(0.1, decay=0.5)
    with pytest.raises(ValueError, match="ema_overwrite_frequency"):
        ko.SGD(0.1, use_ema=True, ema_overwrite_frequency=0.5)


@pytest.mark.parametrize("deferred", [True, False])
def test_callable_and_user_schedule_learning_rates_are_called_at_every_eager_update(deferred):
    """tf_keras calls a zero-argument learning-rate callable and a user's LearningRateSchedule
    at every update, so they see the loop's edits to Python state and Variables.  They were
    traced into the compiled update once, which froze both (silently wrong rates).  Oracle:
    plain SGD on a gradient of 1, where each step moves the Variable by the rate."""
    class Warmup(optimizers.schedules.LearningRateSchedule):
        def __init__(self):
            self.peak, self.floor, self.steps = tf.Variable(0.2, trainable=False), 0.0, []

        def __call__(self, step):
            self.steps.append(step)
            return tf.maximum(self.floor, self.peak * (tf.cast(step, tf.float32) + 1.0))

        def get_config(self):
            return {}

    prev = tf.set_deferred_execution(deferred)
    try:
        base, scale = [0.1], tf.Variable(1.0, trainable=False)
        sched = Warmup()
        v1, v2 = tf.Variable(0.0), tf.Variable(0.0)
        o1 = optimizers.legacy.SGD(lambda: base[0] * scale)
        o2 = optimizers.legacy.SGD(sched)
        want1, want2 = [], []
        for i in range(4):
            want1.append(base[0] * (1.0 + i))
            want2.append(max(sched.floor, 0.2 * 2 ** i * (i + 1)))
            o1.apply_gradients([(tf.constant(-1.0), v1)])
            o2.apply_gradients([(tf.constant(-1.0), v2)])
            base[0] *= 0.5
            scale.assign_add(1.0)
            sched.peak.assign(sched.peak * 2.0)
            if i == 1:
                sched.floor = 100.0
        np.testing.assert_allclose(v1.numpy(), sum(want1), rtol=1e-6)
        np.testing.assert_allclose(v2.numpy(), sum(want2), rtol=1e-6)
        # the legacy optimizers give the step as float32 (tf_keras' _decayed_lr), the new ones
        # the iterations Variable
        assert [s.dtype.name for s in sched.steps] == ["float32"] * 4
        sched.steps.clear()
        optimizers.SGD(sched).apply_gradients([(tf.constant(-1.0), v2)])
        assert sched.steps[-1] is not None and isinstance(sched.steps[-1], tf.Variable)
    finally:
        tf.set_deferred_execution(prev)


def test_a_constant_callable_learning_rate_still_lets_updates_be_predicted(monkeypatch, fresh_cache):
    """A callable that returns the same Python float each step gives the same input array, so
    the deferred executor can still take the predicted update (the values equal eager's)."""
    from tapejax.runtime import prediction

    predicted = []
    real = prediction.run_predicted

    def run(*args):
        out = real(*args)
        predicted.append(out is not None)
        return out

    monkeypatch.setattr(prediction, "run_predicted", run)

    def train(deferred):
        prev = tf.set_deferred_execution(deferred)
        try:
            x, y, w, b = _problem(3)
            opt = optimizers.legacy.SGD(lambda: 0.05, momentum=0.5)
            losses = [_step(opt, x, y, w, b).numpy() for _ in range(8)]
            return losses, w.numpy(), b.numpy()
        finally:
            tf.set_deferred_execution(prev)

    got = train(True)
    assert sum(predicted) >= 3
    want = train(False)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [optimizers.legacy.SGD, optimizers.SGD])
def test_a_new_schedule_set_on_the_optimizer_is_used_by_the_next_eager_update(make):
    """``opt.learning_rate = other_schedule`` after some updates: the next update uses it (the
    compiled update held the first schedule, so the new one was silently ignored).  Oracle:
    tf_keras 2.21 (SGD on a gradient of 1 moves by the rate: 0.1, 0.05, then 1.0, 1.0, then the
    legacy optimizer takes a float 0.3; the new one refuses a float under a schedule with a
    TypeError and keeps 1.0)."""
    S = optimizers.schedules
    v = tf.Variable(0.0)
    opt = make(S.ExponentialDecay(0.1, 1, 0.5))
    legacy = make is optimizers.legacy.SGD
    for i in range(5):
        if i == 2:
            opt.learning_rate = S.PiecewiseConstantDecay([100], [1.0, 2.0])
        if i == 4:
            if legacy:
                opt.learning_rate = 0.3
            else:
                with pytest.raises(TypeError, match="not settable"):
                    opt.learning_rate = 0.3
        opt.apply_gradients([(tf.constant(-1.0), v)])
    np.testing.assert_allclose(v.numpy(), 0.1 + 0.05 + 1.0 + 1.0 + (0.3 if legacy else 1.0), rtol=1e-6)


@pytest.mark.parametrize("make", [lambda: tf.keras.optimizers.legacy.RMSprop(0.05),
                                  lambda: tf.keras.optimizers.Adam(0.05)], ids=["legacy-rmsprop", "adam"])
def test_sparse_updates_in_a_function_traced_for_every_batch_size(make):
    """An ``IndexedSlices`` gradient whose number of rows is a symbolic size (``input_signature``
    with ``None``): the duplicate rows are summed into a static pad of the table's rows, so the
    step is traced once for every batch size and gives the eager loop's values."""
    rs = np.random.RandomState(0)
    batches = [rs.randint(0, 6, n).astype(np.int32) for n in (3, 5, 4, 5)]
    init = rs.randn(6, 2).astype(np.float32)

    def run(compiled):
        table = tf.Variable(init)
        opt = make()

        def step(ids):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.gather(table, ids) ** 2)
            opt.apply_gradients([(tape.gradient(loss, table), table)])
            return loss

        f = tf.function(step, input_signature=[tf.TensorSpec([None], tf.int32)]) if compiled else step
        losses = [float(f(tf.constant(b))) for b in batches]
        return f, losses, table.numpy(), [v.numpy() for v in opt.variables()]

    f, *got = run(True)
    _, *want = run(False)
    assert f.experimental_get_tracing_count() == 2   # (the first call creates the slots: TF's two traces)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-7)
    for a, b in zip(got[2], want[2]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("new", [False, True])
def test_adam_on_float16_variables_computes_its_step_size_in_float16(new):
    """TF casts Adam's hyperparameters and step to a float16 Variable's dtype and computes
    ``lr * sqrt(1 - b2^t) / (1 - b1^t)`` there: with gradients of 1e-4 (``v`` underflows to 0)
    ``m * alpha`` is a float16 subnormal and the second step is 3.5 (TF 2.21, legacy and new
    Adam), where the float32 step size gave 4.0; float32 Variables keep the float32 one."""
    cls = tf.keras.optimizers.Adam if new else tf.keras.optimizers.legacy.Adam
    w = tf.Variable(np.array([1.0, -1.0], np.float16))
    w32 = tf.Variable([1.0])
    opt = cls(0.1)
    for _ in range(2):
        opt.apply_gradients([(tf.constant([1e-4, -1e-4], tf.float16), w), (tf.constant([0.5]), w32)])
    np.testing.assert_array_equal(w.numpy(), np.array([-5.0, 5.0], np.float16))
    # (TF 2.21: the new Adam's ``1 - beta_2`` is the Python float's, ``f32(0.001)``; the legacy
    # kernel's is ``1 - f32(0.999)``)
    np.testing.assert_allclose(w32.numpy(), [0.80000275 if new else 0.8000014], rtol=1e-7)


def test_new_optimizers_take_one_minus_beta_from_the_python_float_in_float32_and_float64():
    """tf_keras' new Adam, Adamax, RMSprop and Adadelta multiply by ``1 - self.beta_1`` (``rho``),
    a Python float, cast to the Variable's dtype: ``f32(1 - 0.999)`` is 1.3e-5 away from
    ``1 - f32(0.999)`` (Adam's step moved by 6.4e-6); where they cast the hyperparameter
    (``tf.cast(self.beta_1, dtype)``: Adam's and Adamax's ``beta^t``) it is float32's value, also
    for a float64 Variable.  Oracle: TF 2.21 / tf_keras, three steps of ``[1, -3]`` from 0 with
    rate 0.1 (float32), two steps of a float64 gradient with rate 0.05."""
    want32 = {"Adam": [-0.2999972403049469, 0.2999977171421051],
              "Adamax": [-0.2999998927116394, 0.2999999225139618]}
    for name, want in want32.items():
        w = tf.Variable([0.0, 0.0])
        opt = getattr(tf.keras.optimizers, name)(0.1)
        for _ in range(3):
            opt.apply_gradients([(tf.constant([1.0, -3.0]), w)])
        np.testing.assert_array_equal(w.numpy(), np.array(want, np.float32))
    want64 = {"Adam": 0.09278424120669826, "RMSprop": 0.2057870155367253, "Adadelta": 0.00010012809988091,
              "Adamax": 0.08161054006479351, "legacy.Adamax": 0.0816105584868363,
              # (Nadam's schedule and its product Variable in the first Variable's dtype, as tf_keras')
              "Nadam": 0.07127833435157627, "legacy.Nadam": 0.07086355843613179}
    with jax.enable_x64(True):
        for name, want in want64.items():
            w = tf.Variable(np.array([0.5]))
            ns = tf.keras.optimizers.legacy if name.startswith("legacy.") else tf.keras.optimizers
            cls = getattr(ns, name.split(".")[-1])
            opt = cls(0.05)
            g = tf.constant([-484.89094704526], tf.float64)
            opt.apply_gradients([(g, w)])
            opt.apply_gradients([(g * 0.3, w)])
            np.testing.assert_allclose(w.numpy() - 0.5, [want], rtol=1e-13, err_msg=name)


def test_new_adam_on_a_float16_variable_rounds_one_minus_beta_as_tf():
    """tf_keras' new Adam multiplies by ``1 - self.beta_2`` computed as a Python float and cast to
    the Variable's float16 (0.0010004), where ``1 - float16(0.999)`` is 0.000977: one step from
    0.5 with gradient 1 gives TF's 0.4902 (the legacy kernel's float16 betas give 0.49)."""
    for cls, want in ((tf.keras.optimizers.Adam, [0.4902, -0.2401]), (tf.keras.optimizers.legacy.Adam, [0.49, -0.24])):
        w = tf.Variable(np.array([0.5, -0.25], np.float16))
        cls(0.01).apply_gradients([(tf.constant([1.0, -0.5], tf.float16), w)])
        np.testing.assert_array_equal(w.numpy(), np.array(want, np.float16))
