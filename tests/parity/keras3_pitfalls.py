"""The Keras pitfalls of "why is my gradient None?" under TF 2.16+'s ``import keras`` (Keras 3),
run by ``test_keras3.py`` as it runs ``keras3_programs.py``; the tape-level pitfalls are in
``test_gradient_pitfalls.py``.

They are here, not in-process, because Keras 2 and Keras 3 answer some of them differently:
``model.predict`` inside a tape raises LookupError under tf_keras (its predict function's
``IteratorGetNext`` gets recorded) where Keras 3 returns NumPy and every gradient is None; an
unbuilt ``Sequential``'s ``trainable_variables`` raises ValueError under tf_keras and is ``[]``
under Keras 3.  Weights are set from NumPy, so both sides start equal.
"""
import numpy as np


def _xy():
    rs = np.random.RandomState(0)
    return rs.randn(6, 3).astype(np.float32), rs.randn(6, 1).astype(np.float32)


def _mlp(keras):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)])
    rs = np.random.RandomState(1)
    model.set_weights([(rs.randn(*w.shape) * 0.5).astype(np.float32) for w in model.weights])
    return model


def program_predict_inside_the_tape_gives_none(tf, keras):
    """model.predict returns NumPy: every gradient None; model(x) gives them."""
    model = _mlp(keras)
    x, y = _xy()
    with tf.GradientTape(persistent=True) as tape:
        p = model.predict(x, verbose=0)
        bad = tf.reduce_mean((p - y) ** 2)
        good = tf.reduce_mean((model(x) - y) ** 2)
    return (isinstance(p, np.ndarray), tape.gradient(bad, model.trainable_variables),
            tape.gradient(good, model.trainable_variables))


def program_unbuilt_sequential_has_no_variables_yet(tf, keras):
    """A Sequential without an Input lists no variables before its first call: the list the user
    took early gives an empty gradient list; taken after the call, four gradients."""
    model = keras.Sequential([keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)])
    x, y = _xy()
    early = model.trainable_variables
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    grads = tape.gradient(loss, early)
    return len(early), grads, len(model.trainable_variables)


def program_frozen_layer(tf, keras):
    """layer.trainable = False: two trainable variables left, and their gradients; the frozen
    kernel asked for by name."""
    model = _mlp(keras)
    model.layers[0].trainable = False
    x, y = _xy()
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_mean((model(x) - y) ** 2)
    return (len(model.trainable_variables), tape.gradient(loss, model.trainable_variables),
            tape.gradient(loss, model.layers[0].kernel))


def program_loss_from_numpy_output(tf, keras):
    """The loss built from model(x).numpy(): None for every weight."""
    model = _mlp(keras)
    x, y = _xy()
    with tf.GradientTape() as tape:
        out = model(x).numpy()
        loss = tf.reduce_mean((out - y) ** 2)
    return loss, tape.gradient(loss, model.trainable_variables)


def program_layer_called_before_the_tape(tf, keras):
    """The first layer's output computed before the tape: its weights get None."""
    model = _mlp(keras)
    x, y = _xy()
    h = model.layers[0](x)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((model.layers[1](h) - y) ** 2)
    return tape.gradient(loss, model.trainable_variables)


def program_apply_gradients_with_none(tf, keras):
    """apply_gradients with a None gradient skips that variable (with a warning); with only None
    gradients it raises ValueError ("No gradients provided for any variable")."""
    a, b = tf.Variable(1.0), tf.Variable(2.0)
    opt = keras.optimizers.SGD(0.1)
    with tf.GradientTape() as tape:
        y = a * 3.0
    grads = tape.gradient(y, [a, b])
    opt.apply_gradients(zip(grads, [a, b]))
    try:
        keras.optimizers.SGD(0.1).apply_gradients([(None, a), (None, b)])
        err = None
    except Exception as e:  # noqa: BLE001
        err = type(e).__name__
    return grads, a, b, err
