"""Round twenty-one (a), third part: pruning at initialisation and rewinding by saved state, under
real TensorFlow 2.21 and under tapejax with deferred execution and predicted updates on and off
(``modes=True``): SNIP's connection sensitivity by a tape that watches only the masks, rewinding a
Keras model and its Adam state by ``get_weights`` / ``set_weights`` and by zeroing
``opt.variables()``, and rewinding raw Variables from a ``tf.train.Checkpoint`` written before
training.  (The other compression programs are in ``test_user_programs21a2.py``.)
"""
import os
import tempfile

import numpy as np

from .harness import init_array, keras_init, mlp, mlp_vars, parity, regression_data

LOOSE = dict(rtol=1e-4, atol=1e-5)


@parity(modes=True, **LOOSE)
def test_snip_connection_sensitivity_from_a_tape_watching_only_the_masks(tf):
    """SNIP (Lee et al.): masks of ones multiply the weights; a tape with
    ``watch_accessed_variables=False`` watches only the masks, so the weights get ``None`` and
    ``tape.watched_variables()`` lists the masks; the saliency ``|dL/dm * m|`` normalised to sum 1
    keeps the top 50% over both layers (``tf.math.top_k`` of the concatenation), the kept masks are
    assigned and the pruned network trained three steps."""
    x, y = regression_data(n=6, d=3, seed=2401)
    ws = [tf.Variable(init_array((3, 4), 2402)), tf.Variable(init_array((4, 1), 2403))]
    masks = [tf.Variable(tf.ones_like(w), trainable=False) for w in ws]

    def forward(x):
        return tf.matmul(tf.tanh(tf.matmul(x, ws[0] * masks[0])), ws[1] * masks[1])

    with tf.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(masks)
        loss0 = tf.reduce_mean((forward(x) - y) ** 2)
    gm = tape.gradient(loss0, masks + ws)
    watched = [v.shape.as_list() for v in tape.watched_variables()]
    sal = tf.concat([tf.reshape(tf.abs(g * m), [-1]) for g, m in zip(gm[:2], masks)], axis=0)
    sal = sal / tf.reduce_sum(sal)
    _, keep = tf.math.top_k(sal, k=8)
    flat = tf.scatter_nd(keep[:, None], tf.ones([8]), [16])
    masks[0].assign(tf.reshape(flat[:12], [3, 4]))
    masks[1].assign(tf.reshape(flat[12:], [4, 1]))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((forward(x) - y) ** 2)
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        out.append((loss, g))
    return loss0, gm[:2], [g is None for g in gm[2:]], watched, sal, masks, out, ws


@parity(modes=True, **LOOSE)
def test_rewinding_a_keras_model_and_its_adam_state(tf):
    """Late rewinding as lottery-ticket code does it on a Keras model: weights saved by
    ``get_weights()`` after one step; after two more, ``set_weights`` restores them and the Adam
    state is reset by assigning zeros to ``opt.variables()[1:]`` and 0 to ``opt.iterations`` (its
    bias correction starts again); later ``opt.set_weights`` restores the saved optimizer state
    (``opt.get_weights()``), and training continues."""
    x, y = regression_data(n=5, d=3, seed=2411)
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, activation="tanh"), tf.keras.layers.Dense(1)])
    model.build((None, 3))
    keras_init(model, 2412)
    opt = tf.keras.optimizers.legacy.Adam(0.1)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    first = step()
    rewind_w, rewind_opt = model.get_weights(), opt.get_weights()
    more = [step() for _ in range(2)]
    model.set_weights(rewind_w)
    for v in opt.variables()[1:]:
        v.assign(tf.zeros_like(v))
    opt.iterations.assign(0)
    fresh = [step() for _ in range(2)]
    model.set_weights(rewind_w)
    opt.set_weights(rewind_opt)
    resumed = [step() for _ in range(2)]
    return (first, more, fresh, resumed, [np.shape(w) for w in rewind_opt],
            [np.asarray(w, np.float32) for w in rewind_opt[1:]], int(opt.iterations), model.get_weights())


@parity(modes=True, **LOOSE)
def test_rewinding_raw_variables_from_a_checkpoint_written_before_training(tf):
    """``tf.train.Checkpoint(vs=...)`` written before training, read back after two Adam steps
    (``assert_consumed`` passes: every saved value has its Variable): the Variables hold their
    initial values again, then a masked retraining step runs from them."""
    x, y = regression_data(n=4, d=3, seed=2421)
    vs = mlp_vars(tf, seed=2422)
    ckpt = tf.train.Checkpoint(vs=vs)
    path = ckpt.write(os.path.join(tempfile.mkdtemp(), "init"))
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    losses = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        losses.append(loss)
    trained = [v.numpy() for v in vs]
    mask = (np.abs(trained[0]) >= np.median(np.abs(trained[0]))).astype(np.float32)
    ckpt.read(path).assert_consumed()
    restored = [v.numpy() for v in vs]
    vs[0].assign(vs[0] * mask)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((mlp(tf, vs, x) - y) ** 2)
    g = tape.gradient(loss, vs)
    return losses, trained, restored, mask, loss, g
