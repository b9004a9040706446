"""Keras models on the tape: the same tf.keras program under TensorFlow 2.21 and tapejax.

The TF side's ``tf.keras`` is ``tf_keras`` (Keras 2, TF backend: ``TF_USE_LEGACY_KERAS=1`` in
``conftest.py``); tapejax's is Keras 3 on the JAX backend.  The programs use the API the two
share (``Sequential``, ``Input``, functional and subclassed models, ``add_weight``, losses,
metrics, regularizers) and set every weight from NumPy (``set_weights``), so both sides start
from the same values.  Random layers are compared where their values do not depend on the
generator (``training=False``).
"""
import numpy as np

from .harness import parity

TOL = dict(rtol=1e-4, atol=1e-5)


def _data(n=8, d=5, classes=3, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randint(0, classes, size=n).astype(np.int32)


def _init(model, seed=1):
    """Every weight from NumPy (BatchNormalization variances positive)."""
    rs = np.random.RandomState(seed)
    ws = []
    for v in model.weights:
        w = (rs.randn(*v.shape) * 0.5).astype(np.float32)
        if "variance" in v.name:
            w = np.abs(w) + 0.5
        ws.append(w)
    model.set_weights(ws)


def _mlp(tf, bn=False):
    layers = [tf.keras.Input(shape=(5,)), tf.keras.layers.Dense(6, activation="relu")]
    if bn:
        layers.append(tf.keras.layers.BatchNormalization())
    layers.append(tf.keras.layers.Dense(3))
    model = tf.keras.Sequential(layers)
    _init(model)
    return model


@parity(**TOL)
def test_dense_layer_gradients(tf):
    """A Dense layer's output and the gradients of a loss of it, in its variables' structure."""
    x, _ = _data()
    layer = tf.keras.layers.Dense(3, activation="tanh")
    layer(x)
    _init(layer)
    with tf.GradientTape(persistent=True) as tape:
        y = layer(x)
        loss = tf.reduce_sum(y * y)
    return y, tape.gradient(loss, layer.trainable_variables), tape.gradient(loss, layer.kernel)


@parity(modes=True, **TOL)
def test_training_loop_with_metric_and_evaluation(tf):
    """Sequential + SparseCategoricalCrossentropy + Adam + accuracy, evaluation between steps."""
    x, y = _data(16)
    xv, yv = _data(8, seed=5)
    model = _mlp(tf)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.Adam(0.05)
    acc = tf.keras.metrics.SparseCategoricalAccuracy()
    val = tf.keras.metrics.Mean()
    out = []
    for step in range(6):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        acc.update_state(y, logits)
        val.update_state(loss_fn(yv, model(xv, training=False)))
        out.append((loss, acc.result(), val.result()))
    acc.reset_state()
    return out, acc.result(), [v.numpy() for v in model.trainable_variables]


@parity(modes=True, **TOL)
def test_batchnorm_moving_statistics(tf):
    """training=True updates BatchNormalization's moving statistics; training=False reads them."""
    x, y = _data()
    model = _mlp(tf, bn=True)
    bn = model.layers[1]
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.SGD(0.1)
    before = [bn.moving_mean.numpy(), bn.moving_variance.numpy()]
    inference = model(x, training=False)
    untouched = [bn.moving_mean.numpy(), bn.moving_variance.numpy()]
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    return (before, inference, untouched, loss, [v.numpy() for v in model.non_trainable_variables],
            model(x, training=False), len(model.trainable_variables), len(grads))


@parity(**TOL)
def test_functional_model(tf):
    """A functional Model(inputs, outputs) with two inputs; gradients w.r.t. variables and inputs."""
    a_in = tf.keras.Input(shape=(5,))
    b_in = tf.keras.Input(shape=(2,))
    h = tf.keras.layers.Dense(4, activation="relu")(a_in)
    h = tf.keras.layers.Concatenate()([h, b_in])
    out = tf.keras.layers.Dense(1)(h)
    model = tf.keras.Model(inputs=[a_in, b_in], outputs=out)
    _init(model)
    x, _ = _data()
    b = tf.constant(np.linspace(-1, 1, 16, dtype=np.float32).reshape(8, 2))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(b)
        y = model([x, b])
        loss = tf.reduce_mean(tf.square(y))
    return y, tape.gradient(loss, model.trainable_variables), tape.gradient(loss, b)


def _subclassed(tf):
    class Linear(tf.keras.layers.Layer):
        """A layer written with tapejax/TF ops in build/call, and a weight the call never uses."""

        def __init__(self, units):
            super().__init__()
            self.units = units

        def build(self, input_shape):
            self.w = self.add_weight(shape=(int(input_shape[-1]), self.units),
                                     initializer=tf.keras.initializers.Constant(0.1), name="w")
            self.b = self.add_weight(shape=(self.units,), initializer="zeros", name="b")
            self.spare = self.add_weight(shape=(2,), initializer="ones", name="spare")

        def call(self, inputs):
            return tf.nn.relu(tf.matmul(inputs, self.w) + self.b)

    class Net(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.lin = Linear(4)
            self.out = tf.keras.layers.Dense(2)

        def call(self, inputs, training=False):
            return self.out(self.lin(inputs))

    return Net()


@parity(**TOL)
def test_subclassed_model_and_layer_with_tf_ops(tf):
    """A subclassed Model holding a Layer written with tf.matmul / tf.nn.relu / add_weight; the weight
    the call never reads gets None (as in TF)."""
    x, _ = _data()
    net = _subclassed(tf)
    net(x)
    _init(net)
    with tf.GradientTape() as tape:
        y = net(x)
        loss = tf.reduce_sum(y)
    grads = tape.gradient(loss, net.trainable_variables)
    return y, grads, [g is None for g in grads]


@parity(**TOL)
def test_gradient_wrt_layer_output(tf):
    """The gradient w.r.t. one layer's output feeding another, and w.r.t. both layers' kernels."""
    x, _ = _data()
    l1 = tf.keras.layers.Dense(3, activation="sigmoid")
    l2 = tf.keras.layers.Dense(1)
    l2(l1(x))
    _init(l1)
    _init(l2, seed=2)
    with tf.GradientTape(persistent=True) as tape:
        h = l1(x)
        y = tf.reduce_sum(l2(h))
    return tape.gradient(y, h), tape.gradient(y, [l1.kernel, l2.kernel]), tape.gradient(y, l2.kernel)


@parity(**TOL)
def test_jacobians_of_a_layer(tf):
    """jacobian of a layer's output w.r.t. its kernel, batch_jacobian w.r.t. its input (advanced autodiff)."""
    x, _ = _data(4, 3)
    layer = tf.keras.layers.Dense(2, activation="elu")
    layer(x)
    _init(layer)
    x = tf.constant(x)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y = layer(x)
    return tape.jacobian(y, layer.kernel), tape.batch_jacobian(y, x)


@parity(**TOL)
def test_hessian_through_a_layer(tf):
    """A Hessian by nested tapes through a Dense layer (the guide's layer.kernel Hessian)."""
    x, _ = _data(4, 3)
    layer = tf.keras.layers.Dense(2, activation=tf.nn.relu)
    layer(x)
    _init(layer)
    layer2 = tf.keras.layers.Dense(1)
    layer2(layer(x))
    _init(layer2, seed=3)
    with tf.GradientTape() as t2:
        with tf.GradientTape() as t1:
            y = layer2(tf.tanh(layer(x)))
            loss = tf.reduce_mean(y ** 2)
        g = t1.gradient(loss, layer.kernel)
    return g, t2.jacobian(g, layer.kernel)


@parity(**TOL)
def test_forward_accumulator_through_a_layer(tf):
    """ForwardAccumulator: the jvp of a layer's output along a kernel tangent."""
    x, _ = _data(4, 3)
    layer = tf.keras.layers.Dense(2, activation="tanh")
    layer(x)
    _init(layer)
    tangent = tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2) / 6)
    with tf.autodiff.ForwardAccumulator(layer.kernel, tangent) as acc:
        y = layer(x)
    return y, acc.jvp(y)


@parity(**TOL)
def test_regularization_losses(tf):
    """kernel_regularizer and activity_regularizer: model.losses, and their gradients."""
    x, y = _data()
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(5,)),
        tf.keras.layers.Dense(4, activation="relu", kernel_regularizer=tf.keras.regularizers.L2(0.1),
                              activity_regularizer=tf.keras.regularizers.L1(0.01)),
        tf.keras.layers.Dense(3, bias_regularizer=tf.keras.regularizers.L1L2(l1=0.02, l2=0.03))])
    _init(model)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        data_loss = loss_fn(y, logits)
        reg = tf.add_n(model.losses)
        loss = data_loss + reg
    return (len(model.losses), sorted(float(v) for v in model.losses), reg,
            tape.gradient(loss, model.trainable_variables))


@parity(**TOL)
def test_loss_and_activation_functions(tf):
    """Functions of tf.keras.losses / activations on tensors are recorded and differentiated."""
    x, y = _data()
    logits = tf.constant(x[:, :3])
    labels = tf.constant(y)
    onehot = tf.one_hot(labels, 3)
    with tf.GradientTape() as tape:
        tape.watch(logits)
        a = tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        b = tf.keras.losses.categorical_crossentropy(onehot, tf.keras.activations.softmax(logits))
        c = tf.keras.losses.mean_squared_error(onehot, tf.keras.activations.sigmoid(logits))
        total = tf.reduce_sum(a) + tf.reduce_sum(b) + tf.reduce_sum(c)
    return a, b, c, tape.gradient(total, logits), tf.keras.activations.relu(logits)


@parity(**TOL)
def test_loss_objects(tf):
    """Loss objects (reductions, sample_weight) and their gradients."""
    x, y = _data()
    logits = tf.constant(x[:, :3])
    weights = tf.constant(np.linspace(0.5, 2.0, 8).astype(np.float32))
    out = []
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        for loss in (tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                     tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")):
            out.append(loss(y, logits))
            out.append(loss(y, logits, sample_weight=weights))
        huber = tf.keras.losses.Huber(delta=0.5)(tf.one_hot(y, 3), logits)
    return out, huber, [tape.gradient(v, logits) for v in out], tape.gradient(huber, logits)


@parity(**TOL)
def test_metrics_update_result_reset(tf):
    """Metrics: update_state, result, reset_state, __call__."""
    x, y = _data(12)
    logits = x[:, :3]
    acc = tf.keras.metrics.SparseCategoricalAccuracy()
    mean = tf.keras.metrics.Mean()
    mse = tf.keras.metrics.MeanSquaredError()
    out = []
    for i in range(0, 12, 4):
        acc.update_state(y[i:i + 4], logits[i:i + 4])
        mean.update_state(tf.constant(logits[i:i + 4]))
        out.append((acc.result(), mean.result(), mse(x[i:i + 4, :2], x[i:i + 4, 2:4])))
    acc.reset_state()
    mean.reset_state()
    return out, acc.result(), mean.result()


@parity(modes=True, **TOL)
def test_compiled_training_step(tf):
    """The training step under tf.function gives the eager step's numbers (BN stats written back)."""
    x, y = _data(16)
    model = _mlp(tf, bn=True)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.Adam(0.02)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = [step(x, y) for _ in range(4)]
    return losses, [v.numpy() for v in model.variables], model(x, training=False)


@parity(modes=True, **TOL)
def test_minimize_with_tape(tf):
    """optimizer.minimize(loss, var_list, tape=tape) on a Keras model's variables."""
    x, y = _data()
    model = _mlp(tf)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x))
        opt.minimize(loss, model.trainable_variables, tape=tape)
        out.append(loss)
    return out, [v.numpy() for v in model.trainable_variables]


@parity(modes=True, **TOL)
def test_gan_step(tf):
    """A DCGAN-tutorial step on synthetic data: two models, two tapes, two optimizers."""
    rs = np.random.RandomState(7)
    gen = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(8, use_bias=False),
                               tf.keras.layers.BatchNormalization(), tf.keras.layers.LeakyReLU(),
                               tf.keras.layers.Dense(6, activation="tanh")])
    disc = tf.keras.Sequential([tf.keras.Input(shape=(6,)), tf.keras.layers.Dense(8),
                                tf.keras.layers.LeakyReLU(), tf.keras.layers.Dropout(0.3),
                                tf.keras.layers.Dense(1)])
    _init(gen, seed=3)
    _init(disc, seed=4)
    bce = tf.keras.losses.BinaryCrossentropy(from_logits=True)
    gopt = tf.keras.optimizers.Adam(1e-2)
    dopt = tf.keras.optimizers.Adam(1e-2)
    out = []
    for _ in range(3):
        images = rs.randn(8, 6).astype(np.float32)
        noise = rs.randn(8, 4).astype(np.float32)
        with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
            generated = gen(noise, training=True)
            real = disc(images, training=False)
            fake = disc(generated, training=False)
            gen_loss = bce(tf.ones_like(fake), fake)
            disc_loss = bce(tf.ones_like(real), real) + bce(tf.zeros_like(fake), fake)
        g_grads = gen_tape.gradient(gen_loss, gen.trainable_variables)
        d_grads = disc_tape.gradient(disc_loss, disc.trainable_variables)
        gopt.apply_gradients(zip(g_grads, gen.trainable_variables))
        dopt.apply_gradients(zip(d_grads, disc.trainable_variables))
        out.append((gen_loss, disc_loss))
    return out, [v.numpy() for v in gen.weights + disc.weights]


@parity(**TOL)
def test_dropout_is_identity_in_inference(tf):
    """Dropout with training=False is the identity, and its gradient is ones."""
    x, _ = _data()
    x = tf.constant(x)
    drop = tf.keras.layers.Dropout(0.5)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = drop(x, training=False)
    return y, tape.gradient(y, x)


@parity(**TOL)
def test_dropout_rate_held_in_a_variable_is_read_at_each_call(tf):
    """Dropout(tf.Variable(0.5)): each eager call reads the rate (0.5 keeps ones scaled by 2, and
    drops some; after ``layer.rate.assign(0.0)`` every value is kept as it is); the gradient of the
    kept values follows the rate too."""
    x = tf.ones((8, 8))
    drop = tf.keras.layers.Dropout(tf.Variable(0.5), seed=3)
    out = []
    for rate in (0.5, 0.0):
        drop.rate.assign(rate)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = drop(x, training=True)
        g = tape.gradient(y, x)
        out.append((sorted(set(np.asarray(y).ravel().tolist())), sorted(set(np.asarray(g).ravel().tolist()))))
    return out


@parity(**TOL)
def test_a_tf_variable_shared_by_two_layers_is_one_weight(tf):
    """Weight tying by one ``tf.Variable`` set on two custom layers: one weight (its gradients summed,
    one update), and the program's own reference to it sees the training and its assigns."""
    class Lin(tf.keras.layers.Layer):
        def __init__(self, w):
            super().__init__()
            self.w = w

        def call(self, x):
            return tf.nn.tanh(tf.matmul(x, self.w))

    shared = tf.Variable(np.array([[0.5, -0.2], [0.1, 0.3]], np.float32))
    a, b = Lin(shared), Lin(shared)
    model = tf.keras.Sequential([a, b])
    x = tf.constant([[1.0, 2.0], [0.5, -1.0]])
    opt = tf.keras.optimizers.SGD(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x) ** 2) + 0.1 * tf.reduce_sum(shared ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        out.append((loss, len(model.trainable_variables), shared.numpy()))
    shared.assign(shared * 0.5)
    return out, b(x), a.w.numpy()


@parity(**TOL)
def test_utils_to_categorical(tf):
    """tf.keras.utils.to_categorical."""
    return tf.keras.utils.to_categorical(np.array([0, 2, 1, 2]), num_classes=3)


@parity(**TOL)
def test_save_and_load_weights(tf):
    """save_weights / load_weights round trip (Keras 3 needs the .weights.h5 suffix; TF takes it)."""
    import os
    import tempfile
    x, _ = _data()
    model = _mlp(tf, bn=True)
    path = os.path.join(tempfile.mkdtemp(), "model.weights.h5")
    model.save_weights(path)
    before = model(x, training=False)
    for v in model.weights:
        v.assign(tf.zeros_like(v))
    zeroed = model(x, training=False)
    model.load_weights(path)
    return before, zeroed, model(x, training=False)


@parity(**TOL)
def test_two_head_model_unconnected_head_is_none(tf):
    """A loss on one head of a two-head model: the other head's variables get None (one call, but
    the tape sees which outputs depend on which variables), and an input only that head reads too."""
    a_in = tf.keras.Input(shape=(5,))
    b_in = tf.keras.Input(shape=(2,))
    trunk = tf.keras.layers.Dense(4, activation="tanh")(a_in)
    head_a = tf.keras.layers.Dense(1)(trunk)
    head_b = tf.keras.layers.Dense(2)(tf.keras.layers.Concatenate()([trunk, b_in]))
    model = tf.keras.Model(inputs=[a_in, b_in], outputs=[head_a, head_b])
    _init(model)
    x, _ = _data()
    b = tf.constant(np.ones((8, 2), np.float32))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(b)
        out_a, out_b = model([x, b])
        loss_a = tf.reduce_sum(out_a)
        loss_b = tf.reduce_sum(out_b)
    grads_a = tape.gradient(loss_a, model.trainable_variables)
    return (out_a, out_b, grads_a, [g is None for g in grads_a], tape.gradient(loss_a, b),
            tape.gradient(loss_b, model.trainable_variables))


@parity(modes=True, **TOL)
def test_initializers_and_constraints(tf):
    """Initializers set the first values; a kernel constraint is applied after each optimizer step."""
    x, _ = _data()
    layer = tf.keras.layers.Dense(3, kernel_initializer=tf.keras.initializers.Constant(0.5),
                                  bias_initializer="ones", kernel_constraint=tf.keras.constraints.NonNeg())
    opt = tf.keras.optimizers.SGD(1.0)
    first = None
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x))
        if first is None:
            first = [layer.kernel.numpy(), layer.bias.numpy()]
        opt.apply_gradients(zip(tape.gradient(loss, layer.trainable_variables), layer.trainable_variables))
    return first, layer.kernel.numpy(), layer.bias.numpy(), np.asarray(tf.keras.initializers.Ones()(shape=(2, 2)))


@parity(modes=True, **TOL)
def test_add_loss_of_tf_ops_inside_a_layer_call(tf):
    """A layer's ``call`` adds an activity penalty computed with ``tf.*`` ops (``self.add_loss``):
    the functional model builds, ``model.losses`` holds it after an eager call and inside a
    compiled step, and it is differentiated with the rest."""
    x, _ = _data()

    class Penalty(tf.keras.layers.Layer):
        def call(self, inputs):
            self.add_loss(0.1 * tf.reduce_mean(tf.square(inputs)))
            return inputs

    inp = tf.keras.Input(shape=(5,))
    out = tf.keras.layers.Dense(3)(Penalty()(tf.keras.layers.Dense(4, activation="tanh")(inp)))
    model = tf.keras.Model(inp, out)
    _init(model)
    with tf.GradientTape() as tape:
        y = model(x)
        penalty = tf.add_n(model.losses)
        loss = tf.reduce_mean(y ** 2) + penalty
    eager = (penalty, tape.gradient(loss, model.trainable_variables), len(model.losses))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            penalty = tf.reduce_sum(model(x)) * 0.0 + tf.add_n(model.losses)
        return penalty, tape.gradient(penalty, model.trainable_variables)

    return eager, step(x)


@parity(modes=True, **TOL)
def test_loss_reduction_names_of_tf_keras(tf):
    """``tf.keras.losses.Reduction`` (TF's custom-loop idiom: ``reduction=Reduction.NONE``, then
    ``tf.nn.compute_average_loss``): its names, ``validate``, and ``AUTO`` / ``NONE`` / ``SUM`` losses
    and their gradients, in one training step."""
    from .harness import raises
    R = tf.keras.losses.Reduction
    x, y = _data()
    model = _mlp(tf)
    out = [R.all(), R.NONE, R.AUTO, raises(R.validate, "mean")]
    for red in (R.AUTO, R.NONE, R.SUM, R.SUM_OVER_BATCH_SIZE):
        loss_obj = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=red)
        with tf.GradientTape() as tape:
            per = loss_obj(y, model(x))
            loss = tf.nn.compute_average_loss(per, global_batch_size=8) if red == R.NONE else per
        out.append((per, tape.gradient(loss, model.trainable_variables)))
    return out


@parity(**TOL)
def test_losses_and_regularizers_at_kinks_take_tf_gradients(tf):
    """Keras's JAX code differentiated with TF's conventions (``ops.tf_rules``): an L1 bias
    penalty on zero-initialised biases (``|b|'(0)``: 0, JAX's 1), MAE with a zero-initialised head
    on targets that are 0 (residuals at the kink), hinge, Huber at ``delta=0`` and MSLE."""
    x = np.array([[0.5, -1.0], [1.0, 2.0], [0.0, 0.3]], np.float32)
    y = np.array([[0.0], [1.0], [0.0]], np.float32)
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(3, activation="relu", kernel_initializer=tf.keras.initializers.Constant(0.2),
                              bias_regularizer=tf.keras.regularizers.L1(0.1)),
        tf.keras.layers.Dense(1, kernel_initializer="zeros")])
    model(x)
    out = []
    for fn in (tf.keras.losses.MeanAbsoluteError(), tf.keras.losses.Hinge(), tf.keras.losses.Huber(delta=0.0),
               tf.keras.losses.MeanSquaredLogarithmicError()):
        with tf.GradientTape() as tape:
            loss = fn(y, model(x)) + tf.add_n(model.losses)
        out.append((loss, tape.gradient(loss, model.trainable_variables)))
    return out


def _embedding_model(tf, tied=False):
    emb = tf.keras.layers.Embedding(7, 4)
    inp = tf.keras.Input((3,), dtype="int32")
    h = emb(inp)
    if tied:   # the table again as the output projection: a dense use besides the gather
        out = tf.keras.layers.Lambda(lambda t: tf.matmul(t, emb.embeddings, transpose_b=True))(h)
    else:
        out = tf.keras.layers.Dense(2)(tf.keras.layers.GlobalAveragePooling1D()(h))
    model = tf.keras.Model(inp, out)
    rs = np.random.RandomState(3)
    model.set_weights([rs.randn(*w.shape).astype(np.float32) for w in model.get_weights()])
    return model


_EMB_IDS = np.array([[1, 2, 2], [5, 0, 1]], np.int32)


@parity(modes=True, **TOL)
def test_embedding_inside_a_model_gives_indexed_slices_and_legacy_momentum_moves_only_its_rows(tf):
    """An ``Embedding`` inside a functional model: the table's gradient is ``IndexedSlices`` of
    the looked-up rows (TF's ``ResourceGather``; duplicates kept, in lookup order), so the
    legacy SGD with momentum leaves rows 3, 4 and 6 where they were, eagerly and in a
    ``tf.function`` step; the Dense kernel's gradient stays dense."""
    model = _embedding_model(tf)
    y = np.array([[1.0, -1.0], [0.5, 2.0]], np.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(_EMB_IDS) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss, grads

    loss, grads = step()
    first = (loss, isinstance(grads[0], tf.IndexedSlices), grads[0].indices, grads[0].values,
             isinstance(grads[1], tf.IndexedSlices), grads[1])
    compiled = tf.function(lambda: step()[0])
    losses = [compiled() for _ in range(3)]
    return first, losses, [v.numpy() for v in model.trainable_variables]


@parity(**TOL)
def test_a_tied_embedding_table_has_a_dense_gradient(tf):
    """The table gathered by ``Embedding`` and multiplied as the output projection (tied
    weights): the gather's ``IndexedSlices`` meets a dense gradient, and TF's sum is dense."""
    model = _embedding_model(tf, tied=True)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(_EMB_IDS) ** 2)
    (g,) = tape.gradient(loss, model.trainable_variables)
    return isinstance(g, tf.IndexedSlices), g


def _angles(length, depth):
    depth = depth / 2
    positions = np.arange(length)[:, np.newaxis]
    depths = np.arange(depth)[np.newaxis, :] / depth
    angle_rads = positions / (10000 ** depths)
    return np.concatenate([np.sin(angle_rads), np.cos(angle_rads)], axis=-1)   # float64, as the tutorial's


@parity(**TOL)
def test_custom_layers_reading_tf_shape_in_call(tf):
    """Layers written as TF's tutorials write them, called eagerly and trained by a tape: the
    Transformer tutorial's ``PositionalEmbedding`` (``length = tf.shape(x)[1]`` slicing a float64
    NumPy encoding cast by ``tf.cast``) and a learned position table looked up by
    ``tf.range(tf.shape(x)[-1])``: ``tf.shape`` inside a layer's call is a static shape, as in TF's
    graph, so the slice and the range have static sizes; both tables' gradients are
    ``IndexedSlices``."""

    class PositionalEmbedding(tf.keras.layers.Layer):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.d_model = d_model
            self.embedding = tf.keras.layers.Embedding(vocab_size, d_model, mask_zero=True)
            self.pos_encoding = tf.cast(_angles(16, d_model), dtype=tf.float32)

        def call(self, x):
            length = tf.shape(x)[1]
            x = self.embedding(x)
            x *= tf.math.sqrt(tf.cast(self.d_model, tf.float32))
            return x + self.pos_encoding[tf.newaxis, :length, :]

    class LearnedPositions(tf.keras.layers.Layer):
        def __init__(self):
            super().__init__()
            self.pos = tf.keras.layers.Embedding(10, 4)

        def call(self, x):
            n = tf.shape(x)[-1]
            return x[..., None] * 0.5 + self.pos(tf.range(n))

    ids = np.array([[1, 2, 2, 0], [4, 3, 1, 1]], np.int32)
    out = []
    for layer, x in ((PositionalEmbedding(6, 4), ids), (LearnedPositions(), ids.astype(np.float32))):
        layer(x)
        rs = np.random.RandomState(1)
        layer.set_weights([rs.randn(*w.shape).astype(np.float32) for w in layer.get_weights()])
        with tf.GradientTape() as tape:
            y = layer(x)
            loss = tf.reduce_sum(y ** 2)
        (g,) = tape.gradient(loss, layer.trainable_variables)
        out.append((y, loss, isinstance(g, tf.IndexedSlices), tf.convert_to_tensor(g)))
    return out
