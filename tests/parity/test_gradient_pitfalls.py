""""Why is my gradient None?": the classic ``tf.GradientTape`` mistakes, as users write them
(Stack Overflow, the TF forum), under real TensorFlow 2.21 and under tapejax.

Each program makes one mistake (or its neighbour that works) and returns the gradients it gets:
the values, which of them are None and which errors are raised must be TF's.  What the tape does
not watch (constants, integer tensors and Variables, ``trainable=False``,
``watch_accessed_variables=False``); values that left the tape through NumPy or Python floats; a
Variable re-created or rebound to a Tensor; ``assign`` inside the tape; values computed before the
tape or after it; ops with no gradient (argmax, round, casts to int, equal, where on a condition,
stop_gradient); Keras (``predict``, a layer called before the tape, variables of an unbuilt model,
a frozen layer, ``.numpy()`` of a model's output); the tape's lifetime (a second ``gradient`` on a
non-persistent tape, ``gradient`` inside the block, ``stop_recording``); the structures
``gradient`` takes and gives (dict and nested sources, a Variable twice, ``UnconnectedGradients``,
list and non-scalar targets, ``output_gradients``); ``tf.function`` around the forward only; a
Python ``if`` on a tensor.  ``tests/test_explain_pitfalls.py`` checks that ``tape.explain`` names
the cause of each None.
"""
import numpy as np

from .harness import parity, raises, warned

TOL = dict(rtol=1e-4, atol=1e-5)


def _init(model, seed=1):
    """Every weight of a Keras model from NumPy."""
    rs = np.random.RandomState(seed)
    model.set_weights([(rs.randn(*v.shape) * 0.5).astype(np.float32) for v in model.weights])


def _mlp(tf):
    model = tf.keras.Sequential([tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(4, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
    _init(model)
    return model


def _xy():
    rs = np.random.RandomState(0)
    return rs.randn(6, 3).astype(np.float32), rs.randn(6, 1).astype(np.float32)


# -- what the tape watches ----------------------------------------------------------------------


@parity(modes=True)
def test_constant_source_not_watched(tf):
    """A tf.constant is not watched: None, zeros with ZERO; watched, 2x."""
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as tape:
        y = x * x
    none = tape.gradient(y, x)
    zero = tape.gradient(y, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = x * x
    return none, zero, tape.gradient(y, x)


@parity(modes=True)
def test_integer_tensor_watched(tf):
    """Watching an int32 tensor logs a warning and its gradient is None, even cast to float."""
    x = tf.constant([1, 2, 3])

    def grad():
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = tf.reduce_sum(tf.cast(x, tf.float32) ** 2)
        return tape.gradient(y, x)

    xf = tf.cast(x, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(xf)
        y = tf.reduce_sum(xf ** 2)
    return warned(grad), tape.gradient(y, xf)


@parity(modes=True)
def test_integer_variable(tf):
    """tf.Variable(..., dtype=tf.int32) is read but has no gradient (None), with or without a watch."""
    v = tf.Variable([1, 2], dtype=tf.int32)
    with tf.GradientTape(persistent=True) as tape:
        y = tf.reduce_sum(tf.cast(v, tf.float32) * 3.0)
    g1 = tape.gradient(y, v)
    with tf.GradientTape() as tape:
        tape.watch(v)
        y = tf.reduce_sum(tf.cast(v, tf.float32) * 3.0)
    return g1, tape.gradient(y, v), v.trainable


@parity(modes=True)
def test_non_trainable_variable(tf):
    """trainable=False: not in watched_variables, gradient None; tape.watch(v) makes it 2v."""
    v = tf.Variable(2.0, trainable=False)
    with tf.GradientTape() as tape:
        y = v * v
    none, n = tape.gradient(y, v), len(tape.watched_variables())
    with tf.GradientTape() as tape:
        tape.watch(v)
        y = v * v
    return none, n, tape.gradient(y, v)


@parity(modes=True)
def test_watch_accessed_variables_false(tf):
    """watch_accessed_variables=False: only the watched Variable gets a gradient."""
    a, b = tf.Variable(2.0), tf.Variable(3.0)
    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(a)
        y = a * b
    return tape.gradient(y, [a, b]), [v.name for v in tape.watched_variables()] == [a.name]


@parity
def test_watch_a_numpy_array(tf):
    """tape.watch(np array) raises ValueError (it is not a Tensor)."""
    with tf.GradientTape() as tape:
        err = raises(tape.watch, np.ones(2, np.float32))
    return err


# -- values that left the tape -------------------------------------------------------------------


@parity(modes=True)
def test_numpy_inside_the_tape(tf):
    """np.square(x.numpy()) and np.mean of a Variable leave the tape: None."""
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        y1 = tf.reduce_sum(tf.constant(np.square(v.numpy())))
        y2 = tf.reduce_sum(np.mean(v * v))
        y3 = tf.reduce_sum(tf.square(v))
    return tape.gradient(y1, v), tape.gradient(y2, v), tape.gradient(y3, v)


@parity(modes=True)
def test_python_float_loss(tf):
    """float(loss) and tf.constant(loss.numpy()) then more math: the target is a new constant, None."""
    v = tf.Variable(3.0)
    with tf.GradientTape(persistent=True) as tape:
        loss = v * v
        f = tf.convert_to_tensor(float(loss)) * 2.0
        c = tf.constant(loss.numpy()) + 1.0
        mixed = loss + float(loss)
    return tape.gradient(f, v), tape.gradient(c, v), tape.gradient(mixed, v), f, c


@parity(modes=True, **TOL)
def test_variable_recreated_each_step(tf):
    """A Variable made inside the step is watched (its gradient is right) but starts again every
    step, so the loss never goes down; the outer Variable the optimizer was meant for gets None."""
    outer = tf.Variable(1.0)
    losses, grads = [], []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            w = tf.Variable(1.0)
            loss = (w * 2.0 - 5.0) ** 2
        g = tape.gradient(loss, w)
        w.assign_sub(0.1 * g)
        losses.append(loss)
        grads.append((g, tape.gradient(loss, outer)))
    return losses, grads, outer


@parity(modes=True, **TOL)
def test_rebinding_variable_to_tensor(tf):
    """w = w - lr * g turns w into a Tensor: the next step's gradient w.r.t. it (made before the
    tape) and w.r.t. the original Variable are both None."""
    w = tf.Variable(2.0)
    orig = w
    grads = []
    for _ in range(2):
        with tf.GradientTape(persistent=True) as tape:
            loss = (w - 5.0) ** 2
        g = tape.gradient(loss, w)
        grads.append((g, tape.gradient(loss, orig), isinstance(w, tf.Variable)))
        w = w - 0.1 * (g if g is not None else 0.0)
    return grads, w


@parity(modes=True)
def test_assign_inside_the_tape(tf):
    """u.assign(v * 2) is not differentiable: d(u*u)/dv is None, d(u*u)/du reads the new u."""
    v, u = tf.Variable(3.0), tf.Variable(0.0)
    with tf.GradientTape(persistent=True) as tape:
        u.assign(v * 2.0)
        y = u * u
    return tape.gradient(y, v), tape.gradient(y, u), u


@parity(modes=True)
def test_value_computed_before_the_tape(tf):
    """h = v * 2 computed before the tape: a target made from h alone has no gradient w.r.t. v."""
    v = tf.Variable(3.0)
    h = v * 2.0
    with tf.GradientTape(persistent=True) as tape:
        y = h * h
        z = h * v
    return tape.gradient(y, v), tape.gradient(z, v), tape.gradient(y, h)


@parity(modes=True)
def test_variable_made_from_a_tensor(tf):
    """tf.Variable(x * 2) inside the tape: initialising a Variable is not differentiable."""
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        w = tf.Variable(x * 2.0)
        y = w * w
    return tape.gradient(y, x), tape.gradient(y, w)


# -- ops with no gradient --------------------------------------------------------------------------


@parity(modes=True)
def test_argmax_and_one_hot(tf):
    """argmax (and one_hot of it) has no gradient: None; softmax instead has one."""
    x = tf.Variable([[1.0, 3.0, 2.0]])
    with tf.GradientTape(persistent=True) as tape:
        idx = tf.cast(tf.argmax(x, axis=1), tf.float32)
        oh = tf.reduce_sum(tf.one_hot(tf.argmax(x, axis=1), 3) * x)
        soft = tf.reduce_sum(tf.nn.softmax(x) * tf.constant([[0.0, 1.0, 2.0]]))
    return tape.gradient(idx, x), tape.gradient(oh, x), tape.gradient(soft, x)


@parity(modes=True)
def test_round_floor_sign(tf):
    """round and floor give None in TF; sign gives zeros (its gradient is registered as zeros)."""
    x = tf.Variable([0.4, 1.6])
    with tf.GradientTape(persistent=True) as tape:
        r = tf.reduce_sum(tf.round(x) * 2.0)
        f = tf.reduce_sum(tf.floor(x))
        s = tf.reduce_sum(tf.sign(x))
        ste = tf.reduce_sum(x + tf.stop_gradient(tf.round(x) - x))
    return [tape.gradient(t, x) for t in (r, f, s, ste)]


@parity(modes=True)
def test_cast_to_int_and_back(tf):
    """tf.cast(tf.cast(x, tf.int32), tf.float32): the int tensor cuts the gradient."""
    x = tf.Variable([1.5, 2.5])
    with tf.GradientTape(persistent=True) as tape:
        y = tf.reduce_sum(tf.cast(tf.cast(x, tf.int32), tf.float32) * x)
        z = tf.reduce_sum(tf.cast(tf.cast(x, tf.int32), tf.float32))
    return tape.gradient(y, x), tape.gradient(z, x)


@parity(modes=True)
def test_accuracy_as_a_loss(tf):
    """An accuracy made of tf.equal on argmax is not differentiable: None."""
    w = tf.Variable([[0.5, -0.5], [0.1, 0.2]])
    x = tf.constant([[1.0, 2.0], [3.0, -1.0]])
    labels = tf.constant([1, 0], dtype=tf.int64)
    with tf.GradientTape() as tape:
        logits = tf.matmul(x, w)
        acc = tf.reduce_mean(tf.cast(tf.math.equal(tf.argmax(logits, axis=1), labels), tf.float32))
        loss = 1.0 - acc
    return loss, tape.gradient(loss, w)


@parity(modes=True)
def test_where_on_a_condition_of_the_source(tf):
    """tf.where(x > 0, x * x, 0): gradient only through the selected values; where of constants: None."""
    x = tf.Variable([-1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as tape:
        y = tf.reduce_sum(tf.where(x > 0, x * x, tf.zeros_like(x)))
        mask = tf.reduce_sum(tf.where(x > 0, 1.0, 0.0))
        step = tf.reduce_sum(tf.cast(x > 0, tf.float32))
    return tape.gradient(y, x), tape.gradient(mask, x), tape.gradient(step, x)


@parity(modes=True)
def test_stop_gradient_forgotten(tf):
    """stop_gradient(x) * x gives x, not 2x; stop_gradient of everything gives None."""
    x = tf.Variable(3.0)
    with tf.GradientTape(persistent=True) as tape:
        half = tf.stop_gradient(x) * x
        whole = tf.stop_gradient(x * x)
    return tape.gradient(half, x), tape.gradient(whole, x)


@parity(modes=True)
def test_dead_relu_gives_zeros_not_none(tf):
    """relu of negative values: the gradient is zeros (connected), not None."""
    w = tf.Variable([[-1.0], [-2.0]])
    x = tf.constant([[1.0, 1.0]])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.nn.relu(tf.matmul(x, w)))
    return tape.gradient(y, w)


# -- Keras --------------------------------------------------------------------------------------


@parity(modes=True, **TOL)
def test_keras_layer_called_before_the_tape(tf):
    """A layer's output computed before the tape: the first layer's weights get None."""
    model = _mlp(tf)
    first, second = model.layers
    x, y = _xy()
    h = first(x)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((second(h) - y) ** 2)
    return tape.gradient(loss, model.trainable_variables)


@parity(modes=True, **TOL)
def test_keras_variables_of_an_unbuilt_model(tf):
    """model.trainable_variables read before the first call is empty, so the gradient list is too."""
    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.hidden = tf.keras.layers.Dense(4, activation="tanh")
            self.out = tf.keras.layers.Dense(1)

        def call(self, x):
            return self.out(self.hidden(x))

    model = Net()
    x, y = _xy()
    early = model.trainable_variables
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    grads = tape.gradient(loss, early)
    return len(early), grads, len(model.trainable_variables)


@parity(modes=True, **TOL)
def test_keras_frozen_layer(tf):
    """layer.trainable = False drops its weights from trainable_variables (two gradients, not four);
    asked for by name, the frozen kernel still has its gradient (its tf.Variable is still watched)."""
    model = _mlp(tf)
    model.layers[0].trainable = False
    x, y = _xy()
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    return (len(model.trainable_variables), tape.gradient(loss, model.trainable_variables),
            tape.gradient(loss, model.layers[0].kernel))


@parity(modes=True, **TOL)
def test_keras_loss_from_numpy_output(tf):
    """loss from model(x).numpy(): None for every weight."""
    model = _mlp(tf)
    x, y = _xy()
    with tf.GradientTape() as tape:
        out = model(x).numpy()
        loss = tf.reduce_mean((out - y) ** 2)
    return loss, tape.gradient(loss, model.trainable_variables)


# -- the tape's lifetime ------------------------------------------------------------------------


@parity(modes=True)
def test_gradient_twice_on_a_non_persistent_tape(tf):
    """The second gradient() call on a non-persistent tape raises RuntimeError."""
    a, b = tf.Variable(2.0), tf.Variable(3.0)
    with tf.GradientTape() as tape:
        y = a * b
    ga = tape.gradient(y, a)
    return ga, raises(tape.gradient, y, b)


@parity(modes=True)
def test_gradient_inside_the_with_block(tf):
    """gradient() inside the block works; a persistent tape warns that it is less efficient."""
    x = tf.Variable(3.0)
    with tf.GradientTape() as tape:
        y = x * x
        g1 = warned(tape.gradient, y, x)
    with tf.GradientTape(persistent=True) as tape:
        y = x * x
        g2 = warned(tape.gradient, y, x)
    return g1, g2


@parity(modes=True)
def test_target_computed_after_the_block(tf):
    """The loss computed after the `with` block is not recorded: None."""
    x = tf.Variable(3.0)
    with tf.GradientTape() as tape:
        y = x * x
    loss = y * 2.0
    return tape.gradient(loss, x)


@parity(modes=True)
def test_stop_recording_around_the_forward(tf):
    """A forward under tape.stop_recording() is not recorded: None; what follows is."""
    x = tf.Variable(3.0)
    with tf.GradientTape(persistent=True) as tape:
        with tape.stop_recording():
            y = x * x
        z = y + x
    return tape.gradient(y, x), tape.gradient(z, x)


# -- structures ---------------------------------------------------------------------------------


@parity(modes=True)
def test_dict_and_nested_sources(tf):
    """Sources as a dict and a nested list: gradients in the same structure, None where unused."""
    p = {"w": tf.Variable(2.0), "b": tf.Variable(1.0), "unused": tf.Variable(5.0)}
    q = [p["w"], [p["b"], p["unused"]]]
    with tf.GradientTape(persistent=True) as tape:
        y = p["w"] * 3.0 + p["b"]
    return tape.gradient(y, p), tape.gradient(y, q)


@parity(modes=True)
def test_same_variable_twice(tf):
    """A list naming the same Variable twice gets its gradient twice."""
    v = tf.Variable(2.0)
    with tf.GradientTape() as tape:
        y = v ** 3
    return tape.gradient(y, [v, v])


@parity(modes=True)
def test_unconnected_gradients_zero(tf):
    """UnconnectedGradients.ZERO gives zeros of the source's shape; 'none' is the default."""
    a, b = tf.Variable([1.0, 2.0]), tf.Variable([[3.0]])
    with tf.GradientTape(persistent=True) as tape:
        y = tf.reduce_sum(a * a)
    return (tape.gradient(y, [a, b], unconnected_gradients=tf.UnconnectedGradients.ZERO),
            tape.gradient(y, [a, b], unconnected_gradients="none"))


@parity(modes=True)
def test_list_and_non_scalar_targets(tf):
    """A list of targets and a non-scalar target are summed (TF's rule), not stacked."""
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        y1 = tf.reduce_sum(x * x)
        y2 = tf.reduce_sum(3.0 * x)
        vec = x * x
    return tape.gradient([y1, y2], x), tape.gradient(vec, x), tape.gradient({"a": y1, "b": vec}, x)


@parity(modes=True)
def test_output_gradients(tf):
    """output_gradients weights a non-scalar target (a vector-Jacobian product)."""
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        y = x * x
    return tape.gradient(y, x, output_gradients=tf.constant([1.0, 10.0]))


# -- tf.function and Python control flow ---------------------------------------------------------


@parity(modes=True, **TOL)
def test_tf_function_forward_tape_outside(tf):
    """A tf.function forward called inside an eager tape differentiates."""
    w = tf.Variable([[0.5], [-0.3]])
    x = tf.constant([[1.0, 2.0]])

    @tf.function
    def forward(x):
        return tf.reduce_sum(tf.tanh(tf.matmul(x, w)))

    with tf.GradientTape() as tape:
        y = forward(x)
    return y, tape.gradient(y, w)


@parity(modes=True)
def test_python_if_on_a_tensor(tf):
    """A Python `if` on a tensor picks the branch that does not use the source: None."""
    a, b = tf.Variable(2.0), tf.Variable(-1.0)
    grads = []
    for s in (1.0, -1.0):
        with tf.GradientTape() as tape:
            y = a * s if tf.constant(s) > 0 else b * b
        grads.append(tape.gradient(y, [a, b]))
    return grads


@parity(modes=True)
def test_keras_apply_gradients_with_none(tf):
    """apply_gradients with a None gradient skips that variable (a warning); only None gradients
    raise ValueError ("No gradients provided for any variable")."""
    a, b = tf.Variable(1.0), tf.Variable(2.0)
    opt = tf.keras.optimizers.SGD(0.1)
    with tf.GradientTape() as tape:
        y = a * 3.0
    grads = tape.gradient(y, [a, b])
    opt.apply_gradients(zip(grads, [a, b]))
    return grads, a, b, raises(tf.keras.optimizers.SGD(0.1).apply_gradients, [(None, a), (None, b)])
