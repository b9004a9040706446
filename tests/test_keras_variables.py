"""tapejax/keras/variables.py: Keras variables are tapejax Variables (reads watched, updates
through tapejax), and stay Keras variables inside Keras's scopes."""
import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf

keras = tf.keras
import keras as K3  # noqa: E402
from keras.src.backend.jax.core import JaxVariable  # noqa: E402

from tapejax.keras.variables import KerasVariable  # noqa: E402


def kvar(value, **kw):
    return keras.Variable(np.asarray(value, np.float32), **kw)


def test_every_keras_variable_is_both_kinds():
    v = kvar([1.0, 2.0])
    layer = keras.layers.Dense(2)
    layer.build((None, 3))
    for var in [v] + layer.weights:
        assert type(var) is KerasVariable
        assert isinstance(var, tf.Variable) and isinstance(var, K3.Variable) and isinstance(var, JaxVariable)
    assert v.dtype == "float32" and v.shape == (2,) and v.name.startswith("variable")   # Keras's API


def test_reads_are_watched_as_tf_variables_are():
    w = kvar([1.0, 2.0])
    frozen = kvar([3.0], trainable=False)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(w * w) + tf.reduce_sum(frozen)
    assert tape.watched_variables() == (w,)   # the Keras variable itself
    gw, gf = tape.gradient(y, [w, frozen])
    np.testing.assert_allclose(gw.numpy(), [2.0, 4.0])
    assert gf is None


def test_operators_are_recorded_outside_keras_scopes_and_keras_own_inside():
    w = kvar([1.0, -2.0])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(w ** 2 + 3.0 * w)
    np.testing.assert_allclose(tape.gradient(y, w).numpy(), [5.0, -1.0])
    assert isinstance(w + 1.0, tf.Tensor)
    with K3.StatelessScope(state_mapping=[(w, jnp.asarray([10.0, 20.0]))]):
        inside = w + 1.0
        assert isinstance(inside, jax.Array)
        np.testing.assert_allclose(inside, [11.0, 21.0])
        np.testing.assert_allclose(tf.identity(w).numpy(), [10.0, 20.0])   # tapejax ops see the scope too


def test_assign_casts_as_keras_and_checks_shape_before_changing():
    v = kvar([1.0, 2.0])
    assert v.assign(np.asarray([3.0, 4.0], np.float64)) is v
    np.testing.assert_array_equal(v.numpy(), [3.0, 4.0])
    assert v.numpy().dtype == np.float32
    with pytest.raises(ValueError, match="shape"):
        v.assign(np.zeros(3, np.float32))
    np.testing.assert_array_equal(v.numpy(), [3.0, 4.0])
    v.assign_add(1)
    v.assign_sub(np.asarray([0.5, 0.5]))
    np.testing.assert_array_equal(v.numpy(), [3.5, 4.5])
    with pytest.raises(ValueError, match="shape"):
        v.assign_add(np.zeros(3, np.float32))
    np.testing.assert_array_equal(v.numpy(), [3.5, 4.5])


def test_assign_in_a_stateless_scope_is_a_scope_update():
    v = kvar([1.0])
    with K3.StatelessScope() as scope:
        v.assign(jnp.asarray([5.0]))
    np.testing.assert_array_equal(v.numpy(), [1.0])
    np.testing.assert_array_equal(scope.get_current_value(v), [5.0])


def test_sgd_by_hand_stays_pending_like_any_tapejax_update():
    w = kvar([1.0, 2.0])
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * w)
        g = tape.gradient(loss, w)
        w.assign_sub(0.1 * g)
    np.testing.assert_allclose(w.numpy(), np.asarray([1.0, 2.0]) * 0.8 ** 3, rtol=1e-6)


def test_deepcopy_is_a_new_variable_with_its_own_value():
    v = kvar([1.0, 2.0])
    c = copy.deepcopy(v)
    assert type(c) is KerasVariable and c._id != v._id and c.path == v.path
    c.assign([5.0, 6.0])
    np.testing.assert_array_equal(v.numpy(), [1.0, 2.0])
    assert copy.copy(v) is v
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(v * c)
    np.testing.assert_allclose(tape.gradient(y, [v, c])[0].numpy(), [5.0, 6.0])


def test_function_threads_a_value_read_through_keras():
    v = kvar([1.0, 2.0])

    @tf.function
    def f(x):
        return x * jnp.sum(v.value)   # Keras's value property: the function's state, not a constant

    np.testing.assert_allclose(f(tf.constant(2.0)).numpy(), 6.0)
    v.assign([4.0, 4.0])
    np.testing.assert_allclose(f(tf.constant(2.0)).numpy(), 16.0)
    assert f.experimental_get_tracing_count() == 1


def test_a_model_first_built_inside_a_function_trace_reads_its_new_variables():
    """A subclassed model of two Dense layers first called inside a ``tapejax.function``: Keras
    builds the sublayers inside its symbolic call (a Keras scope), where their variables are not
    initialized yet: a read there is Keras's placeholder, never the function's state (a
    RecursionError before: ``value`` -> ``touch`` -> ``_value`` -> ``value``), and the variables
    made there are the function's created ones (``_deferred_initialize``: given their values when
    the trace ends, then the function traces again reading them).  All-ones kernels:
    ``[[1, 2], [3, 5]]`` gives ``2 * (x1 + x2)``, and twice that through a model around it."""
    class Net(K3.Model):
        def __init__(self, n):
            super().__init__()
            self.d1 = K3.layers.Dense(2, kernel_initializer="ones")
            self.d2 = K3.layers.Dense(n, kernel_initializer="ones")

        def call(self, inputs):
            return self.d2(self.d1(inputs))

    x = np.array([[1.0, 2.0], [3.0, 5.0]], np.float32)
    model = Net(1)
    f = tf.function(lambda x: model(x))
    for _ in range(2):
        np.testing.assert_array_equal(f(x).numpy(), [[6.0], [16.0]])
    assert len(model.weights) == 4
    model.d2.kernel.assign(2 * np.ones((2, 1), np.float32))   # (the kernel is the function's state)
    np.testing.assert_array_equal(f(x).numpy(), [[12.0], [32.0]])

    class Outer(K3.Model):
        def __init__(self):
            super().__init__()
            self.inner = Net(2)
            self.head = K3.layers.Dense(1, kernel_initializer="ones")

        def call(self, inputs):
            return self.head(self.inner(inputs))

    outer = Outer()
    g = tf.function(lambda x: outer(x))
    np.testing.assert_array_equal(g(x).numpy(), [[12.0], [32.0]])
    assert len(outer.weights) == 6


def test_assign_from_another_variable_reads_it():
    """``target.assign(source)`` between Keras variables (a DQN's target sync) reads ``source``:
    inside a ``tapejax.function`` as an input, not its value at trace time as a constant (the
    second sync copied the stale first value); eagerly, the buffer is then shared, so a compiled
    update of ``source`` must not donate it while ``target`` holds it (it did: XLA refused the
    call, 'Attempt to use a buffer that was previously donated')."""
    q, t = kvar([1.0, 2.0]), kvar([0.0, 0.0])

    @tf.function
    def sync():
        t.assign(q)

    sync()
    q.assign([5.0, 6.0])
    sync()
    np.testing.assert_array_equal(t.numpy(), [5.0, 6.0])

    opt = tf.keras.optimizers.SGD(0.5)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(q * t)
        g = tape.gradient(loss, [q])
        opt.apply_gradients(zip(g, [q]))
        return loss

    step()
    t.assign(q)   # eagerly: t shares q's buffer
    np.testing.assert_allclose(step().numpy(), 2.5 * 2.5 + 3.0 * 3.0)
    np.testing.assert_array_equal(t.numpy(), [2.5, 3.0])
    np.testing.assert_allclose(q.numpy(), [2.5 - 1.25, 3.0 - 1.5])


def test_keras_own_stateless_api_still_works():
    layer = keras.layers.Dense(2, kernel_initializer="ones")
    layer.build((None, 3))
    tv = [jnp.full((3, 2), 2.0), jnp.zeros(2)]
    out, ntv = layer.stateless_call(tv, [], jnp.ones((1, 3)))
    np.testing.assert_allclose(out, [[6.0, 6.0]])
    np.testing.assert_allclose(layer.kernel.numpy(), np.ones((3, 2)))


def test_a_tracer_assigned_outside_a_tapejax_trace_is_refused():
    v = kvar([1.0])

    def bad(x):
        v.assign(x)
        return x

    with pytest.raises(ValueError, match="cannot hold a traced value"):
        jax.jit(bad)(jnp.asarray([2.0]))
    np.testing.assert_array_equal(v.numpy(), [1.0])


def test_freezing_a_layer_hides_its_variables_from_keras_but_a_tape_still_watches_them():
    """``layer.trainable = False`` moves the kernel to ``non_trainable_variables`` (Keras's view,
    ``v.trainable`` False), but a tape still watches it on read, as TF's tape watches a
    ``tf.Variable`` created trainable whatever its tf_keras (or TF-backed Keras 3) layer says: a
    gradient asked for explicitly has a value (it was None); variables created non-trainable (batch
    norm statistics) stay unwatched; unfreezing gives Keras's view back."""
    layer = keras.layers.Dense(2)
    bn = keras.layers.BatchNormalization()
    x = tf.constant(np.ones((3, 4), np.float32))
    bn(layer(x))
    layer.trainable = False
    bn.trainable = False
    assert not layer.kernel.trainable and layer.trainable_variables == [] and len(layer.non_trainable_variables) == 2
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(bn(layer(x)) ** 2)
    watched = {v._id for v in tape.watched_variables()}
    assert {layer.kernel._id, layer.bias._id, bn.gamma._id, bn.beta._id} <= watched
    assert bn.moving_mean._id not in watched and bn.moving_variance._id not in watched
    g = tape.gradient(y, [layer.kernel, bn.gamma, bn.moving_mean])
    assert g[0] is not None and g[1] is not None and g[2] is None
    layer.trainable = True
    assert layer.kernel.trainable and len(layer.trainable_variables) == 2
    assert copy.deepcopy(bn.gamma).trainable is False


def test_keras_scopes_are_still_seen_after_clear_session():
    """``clear_session`` gives Keras a new thread-local scope tracker: tapejax must read the current
    one (it kept the first, so after ``tf.keras.backend.clear_session()`` no Keras scope was seen and
    ``fit`` and tape steps failed with "No gradients provided")."""
    from keras.src.backend.common.stateless_scope import StatelessScope

    from tapejax.keras.variables import in_keras_scope
    tf.keras.backend.clear_session()
    with StatelessScope():
        assert in_keras_scope()
    assert not in_keras_scope()
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(1, kernel_initializer="ones")])
    x, y = np.ones((4, 3), np.float32), np.zeros((4, 1), np.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    g = tape.gradient(loss, model.trainable_variables)
    np.testing.assert_allclose(g[0].numpy(), np.full((3, 1), 6.0), rtol=1e-6)   # d mean((3 + b)^2) / dw
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    hist = model.fit(x, y, epochs=2, verbose=0)
    assert hist.history["loss"][1] < hist.history["loss"][0]


def test_asarray_of_a_keras_variable_is_a_writable_copy():
    """As a TF Variable's (tf_keras's kernels are TF Variables): ``k = np.asarray(layer.kernel)``
    is the caller's own copy, edited in place and assigned back (it was a read-only view)."""
    d = tf.keras.layers.Dense(2)
    d.build((None, 3))
    d.kernel.assign(np.arange(6, dtype=np.float32).reshape(3, 2))
    k = np.asarray(d.kernel)
    k[k < 3] = 0.0
    np.testing.assert_array_equal(d.kernel.numpy()[0], [0.0, 1.0])
    d.kernel.assign(k)
    np.testing.assert_array_equal(d.kernel.numpy()[:2], [[0.0, 0.0], [0.0, 3.0]])


def test_plain_tf_variables_on_a_model_and_in_a_build_are_tracked_weights():
    """TF's guides: ``self.w = tf.Variable(5.0)`` in a Model's ``__init__`` and ``tf.Variable``s made in
    a Layer's ``build`` (here built by the model's first call, inside its trace) are the model's
    weights, as tf_keras tracks them: trainable_variables lists them, a tape differentiates the
    call for them, a non-trainable one stays out, and ``fit`` trains them."""
    class Linear(keras.Model):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(5.0, name="w")
            self.b = tf.Variable(0.0)
            self.count = tf.Variable(0, trainable=False)

        def call(self, x):
            return self.w * x + self.b

    class Flexible(keras.layers.Layer):
        def build(self, input_shape):
            self.k = tf.Variable(tf.ones([input_shape[-1], 2]), name="k")

        def call(self, x):
            return tf.matmul(x, self.k)

    class Two(keras.Model):
        def __init__(self):
            super().__init__()
            self.a, self.b = Flexible(), Flexible()

        def call(self, x):
            return self.b(self.a(x))

    m = Linear()
    assert isinstance(m.w, KerasVariable) and m.w.name == "w" and len(m.trainable_variables) == 2
    assert [v.trainable for v in m.non_trainable_variables] == [False]
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(m(x))
    assert [g.numpy().item() for g in tape.gradient(loss, [m.w, m.b])] == [3.0, 2.0]
    two = Two()
    assert two(tf.ones([1, 3])).numpy().tolist() == [[6.0, 6.0]] and len(two.trainable_variables) == 2
    m.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    m.fit(np.ones(4, np.float32), np.full(4, 2.0, np.float32), epochs=2, batch_size=4, verbose=0)
    assert m.w.numpy() < 5.0


def test_a_plain_variable_set_on_layers_is_one_variable_with_them():
    """``shared = tf.Variable(...)`` set on two layers (weight tying) is one variable, as TF's one
    object: the layers hold the same KerasVariable (gradients summed), and the program's own
    reference reads, assigns, is differentiated and checkpointed as that variable."""
    from tapejax.keras.variables import AdoptedVariable

    class Lin(keras.layers.Layer):
        def __init__(self, w):
            super().__init__()
            self.w = w

        def call(self, x):
            return tf.matmul(x, self.w)

    shared = tf.Variable(np.eye(2, dtype=np.float32))
    a, b = Lin(shared), Lin(shared)
    assert a.w is b.w and type(shared) is AdoptedVariable and isinstance(shared, KerasVariable)
    assert shared._id == a.w._id and shared.name == a.w.name
    x = tf.constant([[1.0, 2.0]])
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_sum(b(a(x)) * shared[0, 0])
    g_layer, g_shared = tape.gradient(loss, [a.w, shared])
    np.testing.assert_allclose(g_layer.numpy(), g_shared.numpy())
    np.testing.assert_allclose(g_layer.numpy(), [[5.0, 2.0], [4.0, 4.0]])   # (TF 2.21 with tf_keras)
    keras.optimizers.SGD(0.1).apply_gradients([(g_layer, a.w)])
    np.testing.assert_allclose(shared.numpy(), a.w.numpy())
    shared.assign(np.zeros((2, 2), np.float32))
    np.testing.assert_array_equal(b(x).numpy(), [[0.0, 0.0]])
    shared.assign_add(tf.ones((2, 2)))
    assert float(tf.reduce_sum(shared * 2)) == 8.0 and float(tf.reduce_sum(a.w)) == 4.0
    again = Lin(shared)   # (the alias set on a third layer: the same variable again)
    assert again.w is a.w
    assert copy.deepcopy(shared)._id != a.w._id
