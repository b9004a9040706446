"""tape.explain on the classic "why is my gradient None?" mistakes (their TF parity:
tests/parity/test_gradient_pitfalls.py): each answer names the cause in the user's terms and,
where there is one, the fix.  The oracle for connectedness is the gradient itself (TF's None-ness,
checked by the parity programs); the phrases are what a user must read to fix the program."""
import numpy as np

import tapejax as tf
from test_explain import _check  # (explain's phrases, and the gradient's None-ness as the oracle)

# -- what the tape watches ----------------------------------------------------------------------


def test_constant_source():
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as tape:
        y = x * x
    _check(tape, y, x, "never watched", "tape.watch(x)")
    zeros = tape.gradient(y, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    assert float(zeros) == 0.0 and "never watched" in tape.explain(y, x)


def test_integer_tensor_and_integer_variable():
    x = tf.constant([1, 2, 3])
    v = tf.Variable([1, 2], dtype=tf.int32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = tf.reduce_sum(tf.cast(x, tf.float32) ** 2) + tf.reduce_sum(tf.cast(v, tf.float32))
    _check(tape, y, x, "integer", "Cast it to a float dtype")
    _check(tape, y, v, "integer", "Cast it to a float dtype")


def test_non_trainable_variable_and_watch_accessed_false():
    v = tf.Variable(2.0, trainable=False)
    with tf.GradientTape(persistent=True) as tape:
        y = v * v
    _check(tape, y, v, "trainable=False", "tape.watch(variable)")
    a, b = tf.Variable(2.0), tf.Variable(3.0)
    with tf.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
        tape.watch(a)
        y = a * b
    _check(tape, y, b, "watch_accessed_variables=False", "tape.watch()")


# -- values that left the tape -------------------------------------------------------------------


def test_numpy_inside_the_tape():
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        y1 = tf.reduce_sum(tf.constant(np.square(v.numpy())))
        y2 = tf.reduce_sum(np.mean(v * v))
    for y in (y1, y2):
        _check(tape, y, v, "went through NumPy", "keep the computation in tf ops")


def test_python_float_and_constant_of_numpy():
    v = tf.Variable(3.0)
    with tf.GradientTape(persistent=True) as tape:
        loss = v * v
        f = tf.convert_to_tensor(float(loss)) * 2.0
        c = tf.constant(loss.numpy()) + 1.0
    _check(tape, f, v, "float()", "new constant")
    _check(tape, c, v, "tf.constant() of such a value", "new constant")
    _check(tape, loss, v, "Connected", connected=True)


def test_variable_recreated_inside_the_step():
    outer = tf.Variable(1.0)
    with tf.GradientTape(persistent=True) as tape:
        w = tf.Variable(1.0)
        loss = (w * 2.0 - 5.0) ** 2
    msg = _check(tape, loss, outer, "never read", "The usual causes: a new Variable created inside the block",
                 "create Variables once")
    assert "stop_recording" not in msg, msg  # no pause on this tape: not named as a cause
    _check(tape, loss, w, "Connected", connected=True)


def test_variable_rebound_to_a_tensor():
    w = tf.Variable(2.0)
    orig = w
    with tf.GradientTape() as tape:
        loss = (w - 5.0) ** 2
    w = w - 0.1 * tape.gradient(loss, w)
    with tf.GradientTape(persistent=True) as tape:
        loss = (w - 5.0) ** 2
    _check(tape, loss, w, "created before the tape", "x = x - lr * g", "assign_sub")
    _check(tape, loss, orig, "never read", "w = w - lr * g", "w.assign_sub(lr * g)")


def test_assign_inside_the_tape_and_variable_from_a_tensor():
    v, u = tf.Variable(3.0), tf.Variable(0.0)
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        u.assign(v * 2.0)
        y = u * u
        w = tf.Variable(x * 2.0)
        z = w * w
    _check(tape, y, v, "does not depend", "Variable.assign")
    _check(tape, z, x, "does not depend", "tf.Variable's initial value")


def test_value_computed_before_the_tape():
    v = tf.Variable(3.0)
    h = v * 2.0
    with tf.GradientTape(persistent=True) as tape:
        y = h * h
    _check(tape, y, v, "never read", "computed from it before the `with` block (move that code inside)")


# -- ops with no gradient --------------------------------------------------------------------------


def test_argmax_and_accuracy_as_a_loss():
    w = tf.Variable([[0.5, -0.5], [0.1, 0.2]])
    x = tf.constant([[1.0, 2.0], [3.0, -1.0]])
    with tf.GradientTape(persistent=True) as tape:
        logits = tf.matmul(x, w)
        idx = tf.cast(tf.argmax(logits, axis=1), tf.float32)
        acc = tf.reduce_mean(tf.cast(tf.math.equal(tf.argmax(logits, axis=1), tf.constant([1, 0], tf.int64)),
                                     tf.float32))
        loss = 1.0 - acc
    _check(tape, idx, w, "cut at op ArgMax", "softmax cross-entropy")
    _check(tape, loss, w, "cut at op ArgMax", "instead of an accuracy")


def test_round_and_floor_name_a_straight_through_estimator():
    x = tf.Variable([0.4, 1.6])
    with tf.GradientTape(persistent=True) as tape:
        r = tf.reduce_sum(tf.round(x) * 2.0)
        f = tf.reduce_sum(tf.floor(x))
    _check(tape, r, x, "cut at op Round", "x + tf.stop_gradient(tf.round(x) - x)")
    _check(tape, f, x, "cut at op Floor", "straight-through")


def test_cast_to_int_and_back():
    x = tf.Variable([1.5, 2.5])
    with tf.GradientTape(persistent=True) as tape:
        z = tf.reduce_sum(tf.cast(tf.cast(x, tf.int32), tf.float32))
    _check(tape, z, x, "cut at op Cast", "returns int32", "keep the computation in a float dtype")


def test_where_of_constants_on_a_condition():
    x = tf.Variable([-1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as tape:
        mask = tf.reduce_sum(tf.where(x > 0, 1.0, 0.0))
        selected = tf.reduce_sum(tf.where(x > 0, x * x, tf.zeros_like(x)))
    _check(tape, mask, x, "cut at op Greater", "tf.where(cond, a, b)")
    _check(tape, selected, x, "Connected", connected=True)


def test_stop_gradient():
    x = tf.Variable(3.0)
    with tf.GradientTape(persistent=True) as tape:
        whole = tf.stop_gradient(x * x)
    _check(tape, whole, x, "cut at op StopGradient", "remove tf.stop_gradient")


def test_zero_gradients_sign_and_dead_relu():
    """Connected, but zeros: explain says which op makes them zero."""
    x = tf.Variable([0.4, -1.6])
    w = tf.Variable([[-1.0], [-2.0]])
    with tf.GradientTape(persistent=True) as tape:
        s = tf.reduce_sum(tf.sign(x))
        r = tf.reduce_sum(tf.nn.relu(tf.matmul(tf.constant([[1.0, 1.0]]), w)))
        plain = tf.reduce_sum(x * x)
    _check(tape, s, x, "Connected", "op Sign's gradient is zero everywhere", connected=True)
    _check(tape, r, w, "Connected", "dead ReLU", connected=True)
    assert "zero" not in _check(tape, plain, x, "Connected", connected=True)


# -- Keras --------------------------------------------------------------------------------------


def _mlp():
    model = tf.keras.Sequential([tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(4, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
    return model, np.ones((6, 3), np.float32), np.ones((6, 1), np.float32)


def test_keras_predict_and_numpy_output():
    """predict alone never reads the weights on the tape; model(x).numpy() reads them, and the
    target is a NumPy round trip."""
    model, x, y = _mlp()
    kernel = model.trainable_variables[0]
    with tf.GradientTape(persistent=True) as tape:
        bad = tf.reduce_mean((model.predict(x, verbose=0) - y) ** 2)
    _check(tape, bad, kernel, "never read", "model.predict() call (it returns NumPy: call model(x))")
    with tf.GradientTape(persistent=True) as tape:
        out = tf.reduce_mean((model(x).numpy() - y) ** 2)
    _check(tape, out, kernel, "went through NumPy", "x.numpy()")


def test_keras_layer_called_before_the_tape():
    model, x, y = _mlp()
    h = model.layers[0](x)
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_mean((model.layers[1](h) - y) ** 2)
    _check(tape, loss, model.layers[0].kernel, "never read", "before the `with` block")
    _check(tape, loss, model.layers[1].kernel, "Connected", connected=True)


def test_keras_variables_of_an_unbuilt_model():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    early = model.trainable_variables
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_sum(model(np.ones((2, 3), np.float32)))
    assert early == [] and tape.gradient(loss, early) == []
    assert "trainable_variables is empty until the model is built" in tape.explain(loss, early)


# -- the tape's lifetime and structures -------------------------------------------------------------


def test_target_after_the_block_and_stop_recording():
    x = tf.Variable(3.0)
    with tf.GradientTape(persistent=True) as tape:
        y = x * x
    _check(tape, y * 2.0, x, "after the tape's `with` block ended", "compute the loss inside the block")
    with tf.GradientTape(persistent=True) as tape:
        with tape.stop_recording():
            y = x * x
    msg = _check(tape, y, x, "never read", "The usual causes: its reads only inside tape.stop_recording()")
    assert msg.count("stop_recording") == 1, msg


def test_python_if_choosing_the_other_branch():
    a, b = tf.Variable(2.0), tf.Variable(-1.0)
    with tf.GradientTape(persistent=True) as tape:
        y = a * 2.0 if tf.constant(-1.0) > 0 else b * b
    _check(tape, y, a, "never read", "a Python `if` that took the branch not using it")


def test_structures_name_each_source_and_target():
    p = {"w": tf.Variable(2.0), "unused": tf.Variable(5.0)}
    with tf.GradientTape(persistent=True) as tape:
        y = p["w"] * 3.0
        z = p["w"] * 2.0
    lines = tape.explain(y, p).splitlines()
    assert lines[0].startswith("source['unused']: The source") and "never read" in lines[0], lines
    assert lines[1].startswith("source['w']: Connected"), lines
    lines = tape.explain([y, z], [p["w"], [p["unused"]]]).splitlines()
    assert [ln.split(":")[0] for ln in lines] == [
        "target[0], source[0]", "target[0], source[1][0]", "target[1], source[0]", "target[1], source[1][0]"]


def test_second_gradient_on_a_non_persistent_tape():
    x = tf.Variable(3.0)
    with tf.GradientTape() as tape:
        y = x * x
    tape.gradient(y, x)
    assert "use GradientTape(persistent=True)" in tape.explain(y, x)


def test_watch_after_use():
    """Ops run before tape.watch(x) are not recorded: the target made then, even one the tape tracks
    through another source, is named as made before the watch."""
    x, w = tf.constant(3.0), tf.Variable(2.0)
    v = tf.Variable(2.0, trainable=False)
    with tf.GradientTape(persistent=True) as tape:
        y = x * x
        both = x * w
        vy = v * v
        tape.watch([x, v])
        z = x * 5.0 + v
    for target, source in ((y, x), (both, x), (vy, v)):
        _check(tape, target, source, "computed before tape.watch() was called", "call tape.watch() first")
    _check(tape, z, x, "Connected", connected=True)
    before = x * 2.0
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
    _check(tape, before, x, "computed before the tape started recording")


def test_second_derivative_outside_the_outer_tape_and_numpy_function():
    x = tf.Variable(2.0)
    with tf.GradientTape(persistent=True) as outer:
        with tf.GradientTape() as inner:
            y = x ** 3
        z = tf.reduce_sum(tf.numpy_function(lambda a: a * a, [x], tf.float32))
    dy = inner.gradient(y, x)
    _check(outer, dy, x, "after the tape's `with` block ended", "inner tape's gradient() inside the outer")
    _check(outer, z, x, "tf.numpy_function", "new constant")


def test_numpy_or_python_target_and_source():
    """explain answers (gradient raises) for a target or source that is NumPy or a Python number."""
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_sum(v * v)
    assert "target is a NumPy float32, not a Tensor" in tape.explain(loss.numpy(), v)
    assert "target is a Python float" in tape.explain(float(loss), v)
    msg = tape.explain(loss, v.numpy())
    assert "source is a NumPy ndarray" in msg and "pass the tensor itself and watch it" in msg, msg
    assert tape.explain(loss, v).startswith("Connected")


def test_target_before_reset_and_an_assigned_variable_as_target():
    x, u = tf.Variable(3.0), tf.Variable(0.0)
    with tf.GradientTape(persistent=True) as tape:
        early = x * x
        tape.reset()
        late = x * 4.0
        u.assign(x * 2.0)
    _check(tape, early, x, "computed before tape.reset()", "compute it again after the reset")
    _check(tape, late, x, "Connected", connected=True)
    _check(tape, u, x, "The target is a Variable", "Differentiate the tensor that was assigned")
    before = x * 2.0
    with tf.GradientTape(persistent=True) as tape:
        tape.reset()
        tape.watch(x)
    _check(tape, before, x, "computed before the tape started recording")
