"""``tf.keras.backend`` as TF-era code uses it (``from tensorflow.keras import backend as K``): Keras 2's
backend functions (reductions, ``clip``, ``epsilon``, ``switch``, ``batch_dot``, ``dot``, the
cross-entropies, ``l2_normalize``, reshaping and padding helpers) under TF 2.21 (tf_keras) and
tapejax (Keras 3's legacy backend code on tapejax ops); their gradients; a Dice loss written with
``K`` in a custom training loop; a ``K``-written custom loss under ``compile`` / ``fit``."""
import numpy as np

from .harness import keras_init, parity

TOL = dict(rtol=1e-5, atol=1e-6)


@parity(**TOL)
def test_backend_functions(tf):
    """A table of ``K`` functions on fixed inputs (values and dtypes)."""
    K = tf.keras.backend
    rs = np.random.RandomState(0)
    x = tf.constant(rs.randn(2, 3).astype(np.float32))
    y = tf.constant(rs.randn(2, 3).astype(np.float32))
    p = tf.constant([[0.9, 0.05, 0.05], [0.2, 0.3, 0.5]])
    t = tf.constant([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    v = tf.constant(rs.randn(2, 3, 4).astype(np.float32))
    return {
        "reductions": [K.mean(x), K.mean(x, axis=1, keepdims=True), K.sum(x, 0), K.max(x, 1), K.min(x), K.prod(x, 1),
                       K.std(x, 1), K.var(x), K.any(x > 1.0), K.all(x > -5.0),
                       tf.cast(K.argmax(x), tf.int32), tf.cast(K.argmin(x, 0), tf.int32)],
        "elementwise": [K.abs(x), K.square(x), K.sqrt(K.abs(x)), K.exp(x), K.log(K.abs(x) + 1), K.round(x * 3), K.sign(x),
                        K.pow(K.abs(x), 1.5), K.clip(x, -0.5, 0.5), K.clip(x, 1.0, 0.5), K.maximum(x, y), K.minimum(x, y),
                        K.equal(x, x), K.greater(x, y), K.sigmoid(x), K.hard_sigmoid(x), K.softplus(x), K.softsign(x),
                        K.relu(x, alpha=0.1, max_value=1.0), K.elu(x, 0.5), K.tanh(x), K.softmax(x)],
        "linear": [K.dot(x, tf.transpose(y)), K.batch_dot(x, y, axes=1), K.batch_dot(v, v, axes=[2, 2]),
                   K.l2_normalize(x, axis=1), K.transpose(x), K.permute_dimensions(v, (2, 0, 1))],
        "shapes": [K.flatten(x), K.batch_flatten(v), K.expand_dims(x), K.squeeze(K.expand_dims(x, 1), 1),
                   K.concatenate([x, y], axis=0), K.stack([x, y]), K.reshape(v, (4, 6)), K.tile(x, (1, 2)),
                   K.repeat_elements(x, 2, axis=1), K.repeat(x, 2), K.temporal_padding(v, (1, 2)),
                   K.spatial_2d_padding(tf.reshape(v, (1, 2, 3, 4))), K.one_hot(tf.constant([[0, 2]]), 3),
                   K.int_shape(v), K.ndim(v), K.cast(x > 0, "float32"), K.zeros_like(x), K.ones((2, 2)),
                   K.eye(2), K.arange(5), K.reverse(x, 1), K.cumsum(x, 1), K.gather(x, [1, 0])],
        "selection": [K.switch(x > 0, x, -x), K.switch(tf.constant(True), x, y), K.in_top_k(x, tf.constant([0, 2]), 1)],
        "losses": [K.binary_crossentropy(t, p), K.binary_crossentropy(t, x, from_logits=True),
                   K.categorical_crossentropy(t, p), K.categorical_crossentropy(t, x, from_logits=True),
                   K.sparse_categorical_crossentropy(tf.constant([0, 2]), p), K.epsilon(), K.floatx()],
    }


@parity(**TOL)
def test_gradients_through_backend_functions(tf):
    """A loss of ``K`` functions (``mean``, ``square``, ``clip``, ``l2_normalize``, ``batch_dot``,
    ``categorical_crossentropy``, ``switch``) and its gradients to two Variables."""
    K = tf.keras.backend
    rs = np.random.RandomState(1)
    w = tf.Variable(rs.randn(3, 3).astype(np.float32))
    b = tf.Variable(rs.randn(3).astype(np.float32))
    x = tf.constant(rs.randn(4, 3).astype(np.float32))
    t = tf.constant(np.eye(3, dtype=np.float32)[[0, 1, 2, 1]])
    with tf.GradientTape() as tape:
        h = K.dot(x, w) + b
        z = K.l2_normalize(h, axis=1)
        probs = K.softmax(K.switch(h > 0, h, 0.5 * h))
        loss = (K.mean(K.categorical_crossentropy(t, K.clip(probs, K.epsilon(), 1.0 - K.epsilon())))
                + K.mean(K.square(K.batch_dot(z, z, axes=1) - 1.0)) + 0.01 * K.sum(K.square(w)))
    return loss, tape.gradient(loss, [w, b])


def _dice_loss(K, y_true, y_pred, smooth=1.0):
    yt, yp = K.flatten(y_true), K.flatten(y_pred)
    inter = K.sum(yt * yp)
    return 1.0 - (2.0 * inter + smooth) / (K.sum(yt) + K.sum(yp) + smooth)


@parity(modes=True, **TOL)
def test_dice_loss_written_with_backend_in_a_custom_loop(tf):
    """A 1x1-convolution segmenter trained 3 eager Adam steps on a Dice + BCE loss written with
    ``K.flatten`` / ``K.sum`` / ``K.binary_crossentropy``, one step under ``tf.function``."""
    K = tf.keras.backend
    rs = np.random.RandomState(2)
    img = rs.randn(2, 4, 4, 3).astype(np.float32)
    mask = (rs.rand(2, 4, 4, 1) > 0.5).astype(np.float32)
    w = tf.Variable(rs.randn(1, 1, 3, 1).astype(np.float32) * 0.5)
    opt = tf.keras.optimizers.Adam(0.1)

    def step(x, m):
        with tf.GradientTape() as tape:
            p = K.sigmoid(tf.nn.conv2d(x, w, 1, "SAME"))
            loss = _dice_loss(K, m, p) + K.mean(K.binary_crossentropy(m, p))
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    out = [step(img, mask) for _ in range(2)]
    out.append(tf.function(step)(img, mask))
    return out, w


@parity(**TOL)
def test_custom_loss_written_with_backend_under_fit(tf):
    """A Huber-like loss of ``K.abs`` / ``K.switch`` / ``K.mean`` passed to ``compile`` with SGD,
    then ``fit`` and ``evaluate``."""
    K = tf.keras.backend

    def loss(y_true, y_pred):
        err = K.abs(y_true - y_pred)
        return K.mean(K.switch(err < 1.0, 0.5 * K.square(err), err - 0.5), axis=-1)

    rs = np.random.RandomState(3)
    x = rs.randn(16, 4).astype(np.float32)
    y = (x @ rs.randn(4, 1) * 2).astype(np.float32)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
    keras_init(model, 4)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss=loss)
    hist = model.fit(x, y, batch_size=8, epochs=2, verbose=0, shuffle=False)
    return [float(v) for v in hist.history["loss"]], model.evaluate(x, y, verbose=0), model.get_weights()


@parity(rtol=1e-4, atol=1e-5)
def test_ctc_batch_cost_and_greedy_decode_as_keras_io_ocr_uses_them(tf):
    """keras.io's TF-era OCR: ``K.ctc_batch_cost`` of softmax outputs against padded labels with
    per-example lengths (blank last), its gradient to the logits, and ``K.ctc_decode`` (greedy) of
    the predictions, dense with -1 padding."""
    K = tf.keras.backend
    rs = np.random.RandomState(5)
    logits = tf.Variable(rs.randn(3, 7, 5).astype(np.float32))
    labels = tf.constant([[1, 2, 2], [3, 0, 0], [0, 1, 3]], tf.float32)
    label_len = tf.constant([[3], [1], [3]], tf.int64)
    input_len = tf.constant([[7], [7], [6]], tf.int64)
    with tf.GradientTape() as tape:
        loss = K.ctc_batch_cost(labels, tf.nn.softmax(logits), input_len, label_len)
    decoded, log_prob = K.ctc_decode(tf.nn.softmax(logits).numpy(), input_length=np.array([7, 7, 6]), greedy=True)
    return loss, tape.gradient(K.mean(loss), logits), tf.cast(decoded[0], tf.int32), log_prob
