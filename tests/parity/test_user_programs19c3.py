"""Round nineteen (c), Keras-layer programs: keras.io's VQ-VAE (its ``VectorQuantizer`` layer
and ``VQVAETrainer`` with a ``train_step`` under ``fit``) and a small conditional U-Net denoiser
(``Conv2D``, ``GroupNormalization``, a label ``Embedding``, pooling and upsampling) trained by a
compiled tape step.  In-process as the other parity files: TF's ``tf.keras`` is tf_keras (Keras
2), tapejax's is Keras 3; both start from the same NumPy weights.  Heavy, so in the default mode
only.  The raw-op programs of round 19c are in ``test_user_programs19c.py`` and ``...19c2.py``.
"""
import numpy as np

from .harness import keras_init, parity

LOOSE = dict(rtol=2e-4, atol=2e-5)


@parity(**LOOSE)
def test_keras_io_vq_vae_trainer_under_fit_with_a_functional_model(tf):
    """keras.io's VQ-VAE as written there: the quantiser layer keeps its codebook as a
    ``tf.Variable``, flattens by ``tf.reshape(x, [-1, d])``, quantises by a one-hot matmul,
    ``add_loss``es the commitment and codebook terms and restores the shape by
    ``tf.reshape(quantized, tf.shape(x))`` (in a functional model built on a symbolic batch:
    tapejax raised there before); ``VQVAETrainer.train_step`` sums ``vqvae.losses`` into the loss
    and updates three ``Mean`` trackers; ``fit`` for two epochs, the history and the weights."""

    class VectorQuantizer(tf.keras.layers.Layer):
        def __init__(self, num_embeddings, embedding_dim, beta=0.25, **kwargs):
            super().__init__(**kwargs)
            self.embedding_dim = embedding_dim
            self.num_embeddings = num_embeddings
            self.beta = beta
            init = np.random.RandomState(2300).randn(embedding_dim, num_embeddings).astype(np.float32)
            self.embeddings = tf.Variable(initial_value=init, trainable=True, name="embeddings_vqvae")

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

    class VQVAETrainer(tf.keras.models.Model):
        def __init__(self, vqvae, train_variance, **kwargs):
            super().__init__(**kwargs)
            self.train_variance = train_variance
            self.vqvae = vqvae
            self.total_loss_tracker = tf.keras.metrics.Mean(name="total_loss")
            self.reconstruction_loss_tracker = tf.keras.metrics.Mean(name="reconstruction_loss")
            self.vq_loss_tracker = tf.keras.metrics.Mean(name="vq_loss")

        @property
        def metrics(self):
            return [self.total_loss_tracker, self.reconstruction_loss_tracker, self.vq_loss_tracker]

        def train_step(self, x):
            with tf.GradientTape() as tape:
                reconstructions = self.vqvae(x)
                reconstruction_loss = tf.reduce_mean((x - reconstructions) ** 2) / self.train_variance
                total_loss = reconstruction_loss + sum(self.vqvae.losses)
            grads = tape.gradient(total_loss, self.vqvae.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.vqvae.trainable_variables))
            self.total_loss_tracker.update_state(total_loss)
            self.reconstruction_loss_tracker.update_state(reconstruction_loss)
            self.vq_loss_tracker.update_state(sum(self.vqvae.losses))
            return {"loss": self.total_loss_tracker.result(),
                    "reconstruction_loss": self.reconstruction_loss_tracker.result(),
                    "vqvae_loss": self.vq_loss_tracker.result()}

    inp = tf.keras.Input((4, 4, 1))
    enc = tf.keras.layers.Conv2D(2, 3, padding="same", activation="relu")(inp)
    out = tf.keras.layers.Conv2DTranspose(1, 3, padding="same")(VectorQuantizer(5, 2, name="vector_quantizer")(enc))
    vqvae = tf.keras.Model(inp, out)
    rs = np.random.RandomState(2301)
    for w in vqvae.weights:
        if "embeddings" not in w.name:
            w.assign((rs.randn(*w.shape) * 0.5).astype(np.float32))
    x = rs.randn(8, 4, 4, 1).astype(np.float32)
    trainer = VQVAETrainer(vqvae, float(np.var(x)))
    trainer.compile(optimizer=tf.keras.optimizers.Adam(0.01))
    h = trainer.fit(x, epochs=2, batch_size=4, verbose=0, shuffle=False)
    return ({k: [float(v) for v in vals] for k, vals in sorted(h.history.items())},
            [np.array(w) for w in vqvae.weights], vqvae(x[:2]))


@parity(**LOOSE)
def test_conditional_unet_denoiser_with_group_norm_and_a_label_embedding(tf):
    """A two-level U-Net denoiser as the Keras diffusion examples build it: ``Conv2D``,
    ``GroupNormalization``, the timestep embedding through a ``Dense`` plus a class
    ``Embedding`` broadcast by ``Reshape`` and ``Add``, swish, ``AveragePooling2D`` down,
    ``UpSampling2D`` up and a skip ``Concatenate``; the epsilon-MSE in a compiled step with Adam."""
    layers = tf.keras.layers
    img, temb, lab = tf.keras.Input((4, 4, 1)), tf.keras.Input((4,)), tf.keras.Input((), dtype="int32")
    h = layers.GroupNormalization(groups=2)(layers.Conv2D(4, 3, padding="same")(img))
    e = layers.Add()([layers.Dense(4)(temb), layers.Embedding(3, 4)(lab)])
    h = layers.Activation("swish")(layers.Add()([h, layers.Reshape((1, 1, 4))(e)]))
    d = layers.Conv2D(4, 3, padding="same", activation="swish")(layers.AveragePooling2D(2)(h))
    out = layers.Conv2D(1, 1)(layers.Concatenate()([h, layers.UpSampling2D(2)(d)]))
    model = tf.keras.Model([img, temb, lab], out)
    keras_init(model, 2310)
    opt = tf.keras.optimizers.Adam(0.01)
    acp = np.cumprod(1.0 - np.linspace(0.02, 0.3, 6)).astype(np.float32)
    rs = np.random.RandomState(2311)

    @tf.function
    def step(x0, t, y, noise):
        ab = tf.reshape(tf.gather(acp, t), [-1, 1, 1, 1])
        xt = tf.sqrt(ab) * x0 + tf.sqrt(1.0 - ab) * noise
        half = tf.cast(t, tf.float32)[:, None] * tf.constant([[1.0, 0.1]])
        with tf.GradientTape() as tape:
            pred = model([xt, tf.concat([tf.sin(half), tf.cos(half)], axis=1), y], training=True)
            loss = tf.reduce_mean(tf.square(pred - noise))
        g = tape.gradient(loss, model.trainable_weights)
        opt.apply_gradients(zip(g, model.trainable_weights))
        return loss, g

    out = [step(rs.randn(2, 4, 4, 1).astype(np.float32), rs.randint(0, 6, size=2).astype(np.int32),
                rs.randint(0, 3, size=2).astype(np.int32), rs.randn(2, 4, 4, 1).astype(np.float32))
           for _ in range(3)]
    return out, model.get_weights()
