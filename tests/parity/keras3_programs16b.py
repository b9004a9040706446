"""Round 16b's research training tricks written with Keras 3 layers and models (``test_keras3.py``
runs them as it runs ``keras3_programs.py``: TF 2.21 with Keras 3 on its TF backend in one
process, tapejax in another), beside the tape-level programs of ``test_user_programs16b.py``.
They are here because tapejax's ``keras`` is Keras 3 while the in-process parity cases' TF side is
tf_keras (Keras 2), and the tricks lean on Keras 3's own code: ``SpectralNormalization``'s power
iteration (which ``assign``s ``u`` inside the layer's call), keras.io's SAM ``train_step`` under
``fit`` (``assign_add`` / ``assign_sub`` of the perturbation around a second tape), the guide's
weight-standardised ``Conv2D`` by a ``convolution_op`` override, distillation from a frozen Keras
teacher, keras.io's VQ-VAE quantiser (``tf.*`` ops on a codebook weight, ``add_loss`` and a
straight-through estimator) and weight normalisation with mean-only batch norm (a running mean
``assign``ed in ``call`` and read after).

Weights are set from NumPy, so both sides start equal; nothing draws random numbers.  (An R1
penalty on a Keras discriminator in a compiled step was left out: TF gave it a different first
update in one of three fresh processes, so it is no oracle here; ``test_user_programs16b.py``
has R1 on hand-written layers.)
"""
import numpy as np


def _init(model, seed=1, scale=0.5):
    rs = np.random.RandomState(seed)
    model.set_weights([np.asarray(rs.randn(*w.shape) * scale, np.float32) for w in model.weights])


def _xy(n=6, d=3, seed=0):
    rs = np.random.RandomState(seed)
    return rs.randn(n, d).astype(np.float32), rs.randn(n, 1).astype(np.float32)


def program_spectral_normalization_layer_in_a_custom_loop(tf, keras):
    """``keras.layers.SpectralNormalization`` around a Dense layer, trained by a tape loop (two
    eager steps, two compiled): each training call runs one power-iteration step that writes the
    layer's ``u`` vector; the non-trainable ``u`` gets no gradient; inference leaves it alone."""
    x, y = _xy(seed=701)
    sn = keras.layers.SpectralNormalization(keras.layers.Dense(4, activation="tanh"))
    model = keras.Sequential([keras.Input((3,)), sn, keras.layers.Dense(1)])
    _init(model, 702)
    opt = keras.optimizers.Adam(0.05)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
        g = tape.gradient(loss, model.trainable_variables + model.non_trainable_variables)
        opt.apply_gradients(zip(g[:len(model.trainable_variables)], model.trainable_variables))
        return loss, g

    compiled = tf.function(step)
    out = [(step if i < 2 else compiled)(x, y) for i in range(4)]
    u_before = [np.array(w) for w in model.non_trainable_variables]
    pred = model(x, training=False)
    return (out, [np.array(w) for w in model.weights], [tuple(w.shape) for w in model.weights], pred,
            [bool(np.array_equal(a, np.array(b))) for a, b in zip(u_before, model.non_trainable_variables)])


def program_sam_train_step_of_keras_io_under_fit(tf, keras):
    """keras.io's sharpness-aware minimisation: a Model subclass whose ``train_step`` takes the
    gradient, ``assign_add``s ``rho * g / |g|`` to each parameter, takes the gradient again at the
    perturbed point, ``assign_sub``s the perturbation and applies the second gradient, then updates
    the metrics; ``fit`` over two epochs of two batches, then ``evaluate``."""
    rs = np.random.RandomState(711)
    x = rs.randn(8, 3).astype(np.float32)
    y = rs.randint(0, 2, size=(8, 1)).astype(np.float32)

    class SAMModel(keras.Model):
        def __init__(self, inner, rho=0.05):
            super().__init__()
            self.inner = inner
            self.rho = rho

        def call(self, x):
            return self.inner(x)

        def train_step(self, data):
            images, labels = data
            e_ws = []
            with tf.GradientTape() as tape:
                predictions = self.inner(images)
                loss = self.compute_loss(y=labels, y_pred=predictions)
            params = self.inner.trainable_variables
            gradients = tape.gradient(loss, params)
            grad_norm = tf.norm(tf.stack([tf.norm(g) for g in gradients if g is not None]))
            scale = self.rho / (grad_norm + 1e-12)
            for grad, param in zip(gradients, params):
                e_w = grad * scale
                param.assign_add(e_w)
                e_ws.append(e_w)
            with tf.GradientTape() as tape:
                predictions = self.inner(images)
                loss = self.compute_loss(y=labels, y_pred=predictions)
            sam_gradients = tape.gradient(loss, params)
            for param, e_w in zip(params, e_ws):
                param.assign_sub(e_w)
            self.optimizer.apply_gradients(zip(sam_gradients, params))
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(labels, predictions)
            return {m.name: m.result() for m in self.metrics}

    inner = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    _init(inner, 712)
    model = SAMModel(inner)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="binary_crossentropy", metrics=["accuracy"])
    h = model.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False)
    return (sorted(h.history), {k: [float(v) for v in vals] for k, vals in h.history.items()},
            [np.array(w) for w in inner.weights], int(model.optimizer.iterations))


def program_weight_standardised_conv2d_by_convolution_op_override(tf, keras):
    """The Keras guide's weight standardisation: a ``Conv2D`` subclass whose ``convolution_op``
    standardises the kernel by ``tf.nn.moments`` before ``tf.nn.conv2d``; a small CNN trained by a
    compiled tape step with SGD momentum."""
    rs = np.random.RandomState(721)
    x = rs.randn(2, 5, 5, 1).astype(np.float32)
    y = rs.randn(2, 1).astype(np.float32)

    class StandardizedConv2DWithOverride(keras.layers.Conv2D):
        def convolution_op(self, inputs, kernel):
            mean, var = tf.nn.moments(kernel, axes=[0, 1, 2], keepdims=True)
            return tf.nn.conv2d(inputs, (kernel - mean) / tf.sqrt(var + 1e-10), padding="VALID",
                                strides=list(self.strides), name=self.__class__.__name__)

    model = keras.Sequential([keras.Input((5, 5, 1)), StandardizedConv2DWithOverride(2, 3),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(1)])
    _init(model, 722)
    opt = keras.optimizers.SGD(0.05, momentum=0.9)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        return loss, g

    out = [step(x, y) for _ in range(3)]
    return out, [np.array(w) for w in model.weights]


def program_distillation_from_a_frozen_keras_teacher(tf, keras):
    """A teacher model with ``trainable = False`` and a student; the student minimises
    ``T^2 * KLDivergence`` of the temperature-softened outputs plus the hard-label loss in a tape
    loop; the gradients w.r.t. the teacher's weights are None and it lists no trainable ones."""
    rs = np.random.RandomState(731)
    x = rs.randn(8, 3).astype(np.float32)
    labels = rs.randint(0, 3, size=8)
    teacher = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])
    student = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])
    _init(teacher, 732, 2.0)
    _init(student, 733)
    teacher.trainable = False
    kl = keras.losses.KLDivergence()
    ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = keras.optimizers.Adam(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            t = tf.nn.softmax(teacher(x, training=False) / 3.0)
            s_logits = student(x, training=True)
            soft = 9.0 * kl(t, tf.nn.softmax(s_logits / 3.0))
            loss = 0.7 * soft + 0.3 * ce(labels, s_logits)
        g = tape.gradient(loss, student.trainable_variables + teacher.weights)
        opt.apply_gradients(zip(g[:2], student.trainable_variables))
        out.append((loss, soft, g[:2], [gi is None for gi in g[2:]]))
    return out, len(teacher.trainable_variables), [np.array(w) for w in student.weights]


def program_vq_vae_quantizer_with_a_straight_through_estimator(tf, keras):
    """keras.io's VQ-VAE quantiser: a layer holding its codebook (by ``add_weight``), nearest
    codes by ``argmin`` of distances, the commitment and codebook losses by ``add_loss`` and the
    straight-through ``x + stop_gradient(quantized - x)``; encoder, quantiser and decoder trained
    by a tape loop on the reconstruction loss plus ``sum(model.losses)`` (the codebook's gradient
    comes only from the codebook loss)."""
    rs = np.random.RandomState(751)
    x = rs.randn(6, 4).astype(np.float32)

    class VectorQuantizer(keras.layers.Layer):
        def __init__(self, num_embeddings, embedding_dim, beta=0.25, **kwargs):
            super().__init__(**kwargs)
            self.embedding_dim = embedding_dim
            self.num_embeddings = num_embeddings
            self.beta = beta
            # (keras.io's Keras 2 version holds a ``tf.Variable``, which Keras 3 on TF does not
            # track, so its codebook never trains there; tapejax tracks it as tf_keras does)
            self.embeddings = self.add_weight(shape=(embedding_dim, num_embeddings), name="embeddings_vqvae")
            self.embeddings.assign(np.random.RandomState(752).randn(embedding_dim, num_embeddings))

        def call(self, x):
            input_shape = tf.shape(x)
            flattened = tf.reshape(x, [-1, self.embedding_dim])
            encoding_indices = self.get_code_indices(flattened)
            encodings = tf.one_hot(encoding_indices, self.num_embeddings)
            quantized = tf.matmul(encodings, self.embeddings, transpose_b=True)
            quantized = tf.reshape(quantized, input_shape)
            commitment_loss = tf.reduce_mean((tf.stop_gradient(quantized) - x) ** 2)
            codebook_loss = tf.reduce_mean((quantized - tf.stop_gradient(x)) ** 2)
            self.add_loss(self.beta * commitment_loss + codebook_loss)
            return x + tf.stop_gradient(quantized - x)

        def get_code_indices(self, flattened_inputs):
            similarity = tf.matmul(flattened_inputs, self.embeddings)
            distances = (tf.reduce_sum(flattened_inputs ** 2, axis=1, keepdims=True)
                         + tf.reduce_sum(self.embeddings ** 2, axis=0) - 2 * similarity)
            return tf.argmin(distances, axis=1)

    enc = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    dec = keras.Sequential([keras.Input((2,)), keras.layers.Dense(4)])
    _init(enc, 753)
    _init(dec, 754)
    vq = VectorQuantizer(3, 2)
    opt = keras.optimizers.Adam(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            z = enc(x)
            q = vq(z)
            recon = tf.reduce_mean((dec(q) - x) ** 2)
            loss = recon + sum(vq.losses)
        variables = enc.trainable_variables + vq.trainable_variables + dec.trainable_variables
        g = tape.gradient(loss, variables)
        opt.apply_gradients(zip(g, variables))
        out.append((recon, loss, g, vq.get_code_indices(z)))
    return out, np.array(vq.embeddings), [np.array(w) for w in enc.weights + dec.weights]


def program_weight_norm_with_data_dependent_init_and_mean_only_batch_norm(tf, keras):
    """Weight normalisation (Salimans & Kingma) as a Keras 3 layer, ``kernel = g * v / |v|``, with
    its data-dependent initialisation (``g`` and the bias ``assign``ed from one batch's
    pre-activation statistics by a method called once before training), followed by mean-only
    batch norm, whose running mean (a non-trainable weight) is ``assign``ed in ``call`` and read
    after it: the output is centred by the new running mean, and the gradient w.r.t. the input
    does not flow through the batch mean (TF's assign records no gradient)."""
    rs = np.random.RandomState(761)
    x = rs.randn(8, 3).astype(np.float32)
    y = rs.randn(8, 1).astype(np.float32)

    class WeightNormDense(keras.layers.Layer):
        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.units = units

        def build(self, shape):
            self.v = self.add_weight(shape=(shape[-1], self.units), name="v")
            self.g = self.add_weight(shape=(self.units,), initializer="ones", name="g")
            self.b = self.add_weight(shape=(self.units,), initializer="zeros", name="b")

        def data_init(self, x):   # once, eagerly, before training (not a layer call)
            t = tf.matmul(x, self.v / tf.norm(self.v, axis=0))
            mean, var = tf.nn.moments(t, axes=[0])
            self.g.assign(1.0 / tf.sqrt(var + 1e-6))
            self.b.assign(-mean / tf.sqrt(var + 1e-6))

        def call(self, x):
            return tf.matmul(x, self.v / tf.norm(self.v, axis=0) * self.g) + self.b

    class MeanOnlyBN(keras.layers.Layer):
        def build(self, shape):
            self.running = self.add_weight(shape=(shape[-1],), initializer="zeros", trainable=False,
                                           name="running_mean")

        def call(self, x, training=False):
            if training:
                self.running.assign(0.5 * self.running + 0.5 * tf.reduce_mean(x, axis=0))
            return x - self.running

    wn = WeightNormDense(4)
    bn = MeanOnlyBN()
    head = keras.layers.Dense(1)
    wn.build((None, 3))
    bn.build((None, 4))
    head.build((None, 4))
    wn.v.assign(np.random.RandomState(762).randn(3, 4).astype(np.float32))
    head.kernel.assign(np.random.RandomState(763).randn(4, 1).astype(np.float32))
    opt = keras.optimizers.SGD(0.05)
    xs = tf.constant(x)
    wn.data_init(xs)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            tape.watch(xs)
            h = bn(tf.tanh(wn(xs)), training=True)
            loss = tf.reduce_mean((head(h) - y) ** 2)
        variables = wn.trainable_variables + head.trainable_variables
        g = tape.gradient(loss, variables + [xs])
        opt.apply_gradients(zip(g[:-1], variables))
        out.append((loss, g, np.array(wn.g), np.array(bn.running)))
    return out, [np.array(w) for w in wn.weights + head.weights]


def program_spectral_normalization_under_fit_with_tf_keras_optimizer(tf, keras):
    """``SpectralNormalization`` in a model trained by ``fit`` with ``tf.keras.optimizers.SGD``
    (TF's default train step): each training call's ``kernel / sigma`` assign is kept and the
    optimizer steps from it.  (With a Keras 3 optimizer tapejax's ``fit`` is Keras's JAX trainer,
    whose ``stateless_call`` keeps only non-trainable updates, so the assign is lost there.)"""
    rs = np.random.RandomState(961)
    x = rs.randn(8, 3).astype(np.float32)
    y = rs.randn(8, 1).astype(np.float32)
    model = keras.Sequential([keras.Input((3,)),
                              keras.layers.SpectralNormalization(keras.layers.Dense(4, activation="tanh")),
                              keras.layers.Dense(1)])
    _init(model, 962)
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    h = model.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False)
    return h.history["loss"], [np.array(w) for w in model.weights]
