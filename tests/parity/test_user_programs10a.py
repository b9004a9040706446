"""Round ten (a) of realistic user programs: the training code of TensorFlow's own tutorials on
the vision and generative side (what new users copy first), scaled down to tiny images so each
case runs in seconds, each run under real TensorFlow 2.21 and under tapejax.  The programs built
of tf ops (and the cheap Keras ones) run also with deferred execution and predicted updates off
(``modes=True``), the heavier Keras programs in the default mode only.  Covered: DCGAN (two tapes
in one compiled step, transposed convolutions, batch norm; a checkpoint restored mid-run), CycleGAN
(a user-written instance norm, one persistent tape giving four gradients), pix2pix (U-Net skips by
``Concatenate``, PatchGAN on the concatenated pair, L1 + GAN loss), neural style transfer (an
image Variable under Adam, Gram matrices by ``einsum``, total variation, clipping assigned back),
DeepDream (gradient ascent under ``input_signature`` with unknown image sizes, a ``tf.range``
loop, rolled tiles), FGSM, the CVAE (reparameterisation with fed noise, ``log_normal_pdf``),
Grad-CAM (a two-output functional model), integrated gradients (``linspace`` alphas, batched by a
``TensorArray``, trapezoidal sum), image classification with deterministic preprocessing layers
by ``fit`` on a ``tf.data`` pipeline and by a custom loop, augmentation layers at inference and
``Rescaling`` inside ``dataset.map``, (denoising) autoencoders with anomaly
thresholds, transfer learning with a frozen base then fine-tuning, and per-pixel segmentation
losses with class weights gathered into sample weights.  Random draws are made with NumPy and fed
in; Keras weights are set from NumPy on both sides (tf_keras on TF's side, Keras 3 on JAX on
tapejax's, see ``test_keras.py``).
"""
import numpy as np

from .harness import init_array, keras_init, parity, xfail_on_tapejax

KTOL = dict(rtol=1e-4, atol=1e-5)


def _images(n, h, w, c, seed, lo=-1.0, hi=1.0):
    return np.random.RandomState(seed).uniform(lo, hi, size=(n, h, w, c)).astype(np.float32)


def _fused_bn_layers(tf, model):
    """The BatchNormalization layers of ``model`` on 4-D inputs: tf_keras' fused kernel keeps an
    unbiased (n / (n - 1)) moving variance there, Keras 3 a biased one (a definitional difference
    of the two Kerases, see ``test_user_programs9.py``)."""
    return [layer for layer in model.layers
            if isinstance(layer, tf.keras.layers.BatchNormalization) and len(layer.input.shape) == 4]


def _comparable_weights(tf, *models):
    """Every weight of ``models`` but the moving variances of ``_fused_bn_layers``."""
    out = []
    for model in models:
        skip = {id(layer.moving_variance) for layer in _fused_bn_layers(tf, model)}
        out += [w.numpy() for w in model.weights if id(w) not in skip]
    return out


def _set_fused_moving_variances(tf, model, seed):
    """Both sides' ``_fused_bn_layers`` get the same moving variance, so inference mode compares."""
    for i, layer in enumerate(_fused_bn_layers(tf, model)):
        n = int(layer.moving_variance.shape[0])
        layer.moving_variance.assign(np.random.RandomState(seed + i).uniform(0.5, 1.5, n).astype(np.float32))


# ---------------------------------------------------------------------------
# Generative models
# ---------------------------------------------------------------------------

def _dcgan_models(tf):
    layers = tf.keras.layers
    generator = tf.keras.Sequential([
        tf.keras.Input(shape=(4,)),
        layers.Dense(2 * 2 * 8, use_bias=False),
        layers.BatchNormalization(),
        layers.LeakyReLU(0.3),
        layers.Reshape((2, 2, 8)),
        layers.Conv2DTranspose(4, (3, 3), strides=(1, 1), padding="same", use_bias=False),
        layers.BatchNormalization(),
        layers.LeakyReLU(0.3),
        layers.Conv2DTranspose(3, (3, 3), strides=(2, 2), padding="same", use_bias=False),
        layers.BatchNormalization(),
        layers.LeakyReLU(0.3),
        layers.Conv2DTranspose(1, (3, 3), strides=(2, 2), padding="same", use_bias=False, activation="tanh"),
    ])
    discriminator = tf.keras.Sequential([
        tf.keras.Input(shape=(8, 8, 1)),
        layers.Conv2D(4, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(0.3),
        layers.Conv2D(8, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(0.3),
        layers.Flatten(),
        layers.Dense(1),
    ])
    keras_init(generator, 1)
    keras_init(discriminator, 2)
    return generator, discriminator


@parity(**KTOL)
def test_dcgan_tutorial_train_step_two_tapes_in_a_tf_function(tf):
    """The DCGAN tutorial's ``train_step``: a generator of Dense / BatchNormalization / LeakyReLU /
    ``Conv2DTranspose`` and a convolutional discriminator, two tapes in one ``tf.function`` step,
    ``BinaryCrossentropy(from_logits=True)`` against ``ones_like`` / ``zeros_like``, one Adam(1e-4)
    each; three steps on fed noise, then the generator's images in inference mode (the moving
    variances of the batch norms on 4-D inputs set equal first: ``_fused_bn_layers``)."""
    generator, discriminator = _dcgan_models(tf)
    cross_entropy = tf.keras.losses.BinaryCrossentropy(from_logits=True)

    def discriminator_loss(real_output, fake_output):
        real_loss = cross_entropy(tf.ones_like(real_output), real_output)
        fake_loss = cross_entropy(tf.zeros_like(fake_output), fake_output)
        return real_loss + fake_loss

    def generator_loss(fake_output):
        return cross_entropy(tf.ones_like(fake_output), fake_output)

    generator_optimizer = tf.keras.optimizers.Adam(1e-2)
    discriminator_optimizer = tf.keras.optimizers.Adam(1e-2)

    @tf.function
    def train_step(images, noise):
        with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
            generated_images = generator(noise, training=True)
            real_output = discriminator(images, training=True)
            fake_output = discriminator(generated_images, training=True)
            gen_loss = generator_loss(fake_output)
            disc_loss = discriminator_loss(real_output, fake_output)
        gradients_of_generator = gen_tape.gradient(gen_loss, generator.trainable_variables)
        gradients_of_discriminator = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
        generator_optimizer.apply_gradients(zip(gradients_of_generator, generator.trainable_variables))
        discriminator_optimizer.apply_gradients(zip(gradients_of_discriminator, discriminator.trainable_variables))
        return gen_loss, disc_loss, gradients_of_generator[0], gradients_of_discriminator[-1]

    images = _images(3, 8, 8, 1, 5)
    rs = np.random.RandomState(6)
    out = [train_step(images, rs.randn(3, 4).astype(np.float32)) for _ in range(3)]
    weights = _comparable_weights(tf, generator, discriminator)
    _set_fused_moving_variances(tf, generator, 8)
    seed = np.random.RandomState(7).randn(2, 4).astype(np.float32)
    return out, weights, generator(seed, training=False)


def _unet(tf):
    layers = tf.keras.layers
    inp = tf.keras.Input(shape=(8, 8, 2))
    d1 = layers.LeakyReLU(0.3)(layers.Conv2D(4, 3, strides=2, padding="same", use_bias=False)(inp))
    d2 = layers.LeakyReLU(0.3)(layers.BatchNormalization()(
        layers.Conv2D(8, 3, strides=2, padding="same", use_bias=False)(d1)))
    u1 = layers.ReLU()(layers.BatchNormalization()(
        layers.Conv2DTranspose(4, 3, strides=2, padding="same", use_bias=False)(d2)))
    u1 = layers.Concatenate()([u1, d1])
    out = layers.Conv2DTranspose(2, 3, strides=2, padding="same", activation="tanh")(u1)
    model = tf.keras.Model(inp, out)
    keras_init(model, 11)
    return model


def _patch_discriminator(tf):
    layers = tf.keras.layers
    inp = tf.keras.Input(shape=(8, 8, 2), name="input_image")
    tar = tf.keras.Input(shape=(8, 8, 2), name="target_image")
    x = layers.concatenate([inp, tar])
    x = layers.LeakyReLU(0.3)(layers.Conv2D(4, 3, strides=2, padding="same", use_bias=False)(x))
    x = layers.ZeroPadding2D()(x)
    x = layers.LeakyReLU(0.3)(layers.BatchNormalization()(layers.Conv2D(4, 3, use_bias=False)(x)))
    last = layers.Conv2D(1, 2)(x)
    model = tf.keras.Model(inputs=[inp, tar], outputs=last)
    keras_init(model, 12)
    return model


@parity(**KTOL)
def test_pix2pix_generator_l1_plus_gan_loss_with_patch_discriminator(tf):
    """pix2pix: a U-Net generator (skip by ``Concatenate``) and a PatchGAN discriminator fed the
    ``[input, target]`` pair; ``generator_loss`` = GAN loss + LAMBDA * mean |target - gen|; both
    called with ``training=True`` in a ``tf.function`` step with two tapes; the step returns the
    total, GAN and L1 losses; two steps, then the generator in inference mode (moving variances set
    equal first, as in the DCGAN case)."""
    generator = _unet(tf)
    discriminator = _patch_discriminator(tf)
    loss_object = tf.keras.losses.BinaryCrossentropy(from_logits=True)
    LAMBDA = 100

    def generator_loss(disc_generated_output, gen_output, target):
        gan_loss = loss_object(tf.ones_like(disc_generated_output), disc_generated_output)
        l1_loss = tf.reduce_mean(tf.abs(target - gen_output))
        total_gen_loss = gan_loss + (LAMBDA * l1_loss)
        return total_gen_loss, gan_loss, l1_loss

    def discriminator_loss(disc_real_output, disc_generated_output):
        real_loss = loss_object(tf.ones_like(disc_real_output), disc_real_output)
        generated_loss = loss_object(tf.zeros_like(disc_generated_output), disc_generated_output)
        return real_loss + generated_loss

    generator_optimizer = tf.keras.optimizers.Adam(2e-4, beta_1=0.5)
    discriminator_optimizer = tf.keras.optimizers.Adam(2e-4, beta_1=0.5)

    @tf.function
    def train_step(input_image, target):
        with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
            gen_output = generator(input_image, training=True)
            disc_real_output = discriminator([input_image, target], training=True)
            disc_generated_output = discriminator([input_image, gen_output], training=True)
            gen_total_loss, gen_gan_loss, gen_l1_loss = generator_loss(disc_generated_output, gen_output, target)
            disc_loss = discriminator_loss(disc_real_output, disc_generated_output)
        generator_gradients = gen_tape.gradient(gen_total_loss, generator.trainable_variables)
        discriminator_gradients = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
        generator_optimizer.apply_gradients(zip(generator_gradients, generator.trainable_variables))
        discriminator_optimizer.apply_gradients(zip(discriminator_gradients, discriminator.trainable_variables))
        return gen_total_loss, gen_gan_loss, gen_l1_loss, disc_loss

    inp = _images(2, 8, 8, 2, 13)
    tar = _images(2, 8, 8, 2, 14)
    out = [train_step(inp, tar) for _ in range(2)]
    weights = _comparable_weights(tf, generator, discriminator)
    _set_fused_moving_variances(tf, generator, 15)
    return out, weights, generator(inp, training=False)


@parity(**KTOL)
def test_dcgan_checkpoint_restore_then_train_on_like_an_uninterrupted_run(tf):
    """The DCGAN tutorial's ``tf.train.Checkpoint(generator_optimizer=..., discriminator_optimizer=...,
    generator=..., discriminator=...)`` saved after a step; two more steps; then a fresh pair of
    models and optimizers ``restore(tf.train.latest_checkpoint(dir))`` and redo those two steps
    (Adam's slots and step restored; the fresh optimizers build their slots on their first step,
    after the restore): its losses are TF's and its weights equal the uninterrupted run's exactly,
    on each side."""
    import os
    import tempfile
    checkpoint_dir = tempfile.mkdtemp()
    checkpoint_prefix = os.path.join(checkpoint_dir, "ckpt")
    cross_entropy = tf.keras.losses.BinaryCrossentropy(from_logits=True)
    images = _images(2, 8, 8, 1, 9)
    noises = [np.random.RandomState(10 + i).randn(2, 4).astype(np.float32) for i in range(3)]

    def parts():
        generator, discriminator = _dcgan_models(tf)
        gen_opt, disc_opt = tf.keras.optimizers.Adam(1e-2), tf.keras.optimizers.Adam(1e-2)

        @tf.function
        def train_step(images, noise):
            with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
                fake_output = discriminator(generator(noise, training=True), training=True)
                real_output = discriminator(images, training=True)
                gen_loss = cross_entropy(tf.ones_like(fake_output), fake_output)
                disc_loss = (cross_entropy(tf.ones_like(real_output), real_output)
                             + cross_entropy(tf.zeros_like(fake_output), fake_output))
            gen_opt.apply_gradients(zip(gen_tape.gradient(gen_loss, generator.trainable_variables),
                                        generator.trainable_variables))
            disc_opt.apply_gradients(zip(disc_tape.gradient(disc_loss, discriminator.trainable_variables),
                                         discriminator.trainable_variables))
            return gen_loss, disc_loss

        checkpoint = tf.train.Checkpoint(generator_optimizer=gen_opt, discriminator_optimizer=disc_opt,
                                         generator=generator, discriminator=discriminator)
        return generator, discriminator, gen_opt, train_step, checkpoint

    generator, discriminator, gen_opt, train_step, checkpoint = parts()
    train_step(images, noises[0])
    checkpoint.save(file_prefix=checkpoint_prefix)
    later = [train_step(images, n) for n in noises[1:]]
    final = [v.numpy() for v in generator.variables + discriminator.variables]
    generator2, discriminator2, gen_opt2, train_step2, checkpoint2 = parts()
    status = checkpoint2.restore(tf.train.latest_checkpoint(checkpoint_dir))
    redo = [train_step2(images, n) for n in noises[1:]]
    status.assert_consumed()
    restored = [v.numpy() for v in generator2.variables + discriminator2.variables]
    # (the weights are compared side by side, run against restored run, not with TF's: the Dense
    # kernel under batch norm has near-cancelled gradients (2e-6 of 0.2) whose float32 rounding
    # Adam's normalisation turns into 1e-5 differences; the first DCGAN case compares weights)
    same = all(np.array_equal(a, b) for a, b in zip(final, restored))
    return later, redo, same, int(gen_opt2.iterations.numpy()), os.path.basename(tf.train.latest_checkpoint(checkpoint_dir))


def _cyclegan_generator(tf, seed):
    """pix2pix's ``unet_generator(norm_type='instancenorm')`` in miniature, with the tutorial's
    user-written ``InstanceNormalization`` layer (``tf.nn.moments`` over the spatial axes)."""
    layers = tf.keras.layers

    class InstanceNormalization(tf.keras.layers.Layer):
        def __init__(self, epsilon=1e-5, **kw):
            super().__init__(**kw)
            self.epsilon = epsilon

        def build(self, input_shape):
            self.scale = self.add_weight(name="scale", shape=input_shape[-1:], initializer="ones", trainable=True)
            self.offset = self.add_weight(name="offset", shape=input_shape[-1:], initializer="zeros", trainable=True)

        def call(self, x):
            mean, variance = tf.nn.moments(x, axes=[1, 2], keepdims=True)
            inv = tf.math.rsqrt(variance + self.epsilon)
            normalized = (x - mean) * inv
            return self.scale * normalized + self.offset

    inp = tf.keras.Input(shape=(8, 8, 2))
    d1 = layers.LeakyReLU(0.3)(layers.Conv2D(4, 3, strides=2, padding="same", use_bias=False)(inp))
    d2 = layers.LeakyReLU(0.3)(InstanceNormalization()(layers.Conv2D(6, 3, strides=2, padding="same",
                                                                      use_bias=False)(d1)))
    u1 = layers.ReLU()(InstanceNormalization()(layers.Conv2DTranspose(4, 3, strides=2, padding="same",
                                                                       use_bias=False)(d2)))
    out = layers.Conv2DTranspose(2, 3, strides=2, padding="same", activation="tanh")(layers.Concatenate()([u1, d1]))
    model = tf.keras.Model(inp, out)
    keras_init(model, seed)
    return model


def _cyclegan_discriminator(tf, seed):
    layers = tf.keras.layers
    model = tf.keras.Sequential([
        tf.keras.Input(shape=(8, 8, 2)),
        layers.Conv2D(4, 3, strides=2, padding="same"),
        layers.LeakyReLU(0.3),
        layers.Conv2D(1, 3, padding="same"),
    ])
    keras_init(model, seed)
    return model


@parity(**KTOL)
def test_cyclegan_persistent_tape_four_gradients_with_cycle_and_identity_losses(tf):
    """CycleGAN: generators G (X->Y) and F (Y->X) with a user-written ``InstanceNormalization`` layer,
    discriminators for X and Y; one ``tf.GradientTape(persistent=True)`` in a ``tf.function``
    step gives four gradients (each generator's total loss = its GAN loss (``MeanSquared`` LSGAN
    targets by ``ones_like``) + cycle loss (``LAMBDA * mean |real - cycled|`` of both directions) +
    identity loss, each discriminator's ``0.5 * (real + fake)``), four Adam(2e-4, beta_1=0.5)
    optimizers; two steps, then the translated images."""
    generator_g, generator_f = _cyclegan_generator(tf, 91), _cyclegan_generator(tf, 92)
    discriminator_x, discriminator_y = _cyclegan_discriminator(tf, 93), _cyclegan_discriminator(tf, 94)
    LAMBDA = 10
    loss_obj = tf.keras.losses.BinaryCrossentropy(from_logits=True)

    def discriminator_loss(real, generated):
        real_loss = loss_obj(tf.ones_like(real), real)
        generated_loss = loss_obj(tf.zeros_like(generated), generated)
        total_disc_loss = real_loss + generated_loss
        return total_disc_loss * 0.5

    def generator_loss(generated):
        return loss_obj(tf.ones_like(generated), generated)

    def calc_cycle_loss(real_image, cycled_image):
        loss1 = tf.reduce_mean(tf.abs(real_image - cycled_image))
        return LAMBDA * loss1

    def identity_loss(real_image, same_image):
        loss = tf.reduce_mean(tf.abs(real_image - same_image))
        return LAMBDA * 0.5 * loss

    optimizers = [tf.keras.optimizers.Adam(2e-4, beta_1=0.5) for _ in range(4)]
    generator_g_optimizer, generator_f_optimizer, discriminator_x_optimizer, discriminator_y_optimizer = optimizers

    @tf.function
    def train_step(real_x, real_y):
        with tf.GradientTape(persistent=True) as tape:
            fake_y = generator_g(real_x, training=True)
            cycled_x = generator_f(fake_y, training=True)
            fake_x = generator_f(real_y, training=True)
            cycled_y = generator_g(fake_x, training=True)
            same_x = generator_f(real_x, training=True)
            same_y = generator_g(real_y, training=True)
            disc_real_x = discriminator_x(real_x, training=True)
            disc_real_y = discriminator_y(real_y, training=True)
            disc_fake_x = discriminator_x(fake_x, training=True)
            disc_fake_y = discriminator_y(fake_y, training=True)
            gen_g_loss = generator_loss(disc_fake_y)
            gen_f_loss = generator_loss(disc_fake_x)
            total_cycle_loss = calc_cycle_loss(real_x, cycled_x) + calc_cycle_loss(real_y, cycled_y)
            total_gen_g_loss = gen_g_loss + total_cycle_loss + identity_loss(real_y, same_y)
            total_gen_f_loss = gen_f_loss + total_cycle_loss + identity_loss(real_x, same_x)
            disc_x_loss = discriminator_loss(disc_real_x, disc_fake_x)
            disc_y_loss = discriminator_loss(disc_real_y, disc_fake_y)
        generator_g_gradients = tape.gradient(total_gen_g_loss, generator_g.trainable_variables)
        generator_f_gradients = tape.gradient(total_gen_f_loss, generator_f.trainable_variables)
        discriminator_x_gradients = tape.gradient(disc_x_loss, discriminator_x.trainable_variables)
        discriminator_y_gradients = tape.gradient(disc_y_loss, discriminator_y.trainable_variables)
        generator_g_optimizer.apply_gradients(zip(generator_g_gradients, generator_g.trainable_variables))
        generator_f_optimizer.apply_gradients(zip(generator_f_gradients, generator_f.trainable_variables))
        discriminator_x_optimizer.apply_gradients(zip(discriminator_x_gradients, discriminator_x.trainable_variables))
        discriminator_y_optimizer.apply_gradients(zip(discriminator_y_gradients, discriminator_y.trainable_variables))
        return (total_gen_g_loss, total_gen_f_loss, disc_x_loss, disc_y_loss,
                generator_g_gradients[2], discriminator_y_gradients[0])

    real_x, real_y = _images(2, 8, 8, 2, 95), _images(2, 8, 8, 2, 96)
    out = [train_step(real_x, real_y) for _ in range(2)]
    return out, generator_g(real_x), generator_f(real_y), [v.numpy() for v in generator_g.trainable_variables]


def _feature_extractor(tf):
    """A small fixed conv net standing in for VGG19 (style and content layers by name)."""
    layers = tf.keras.layers
    inp = tf.keras.Input(shape=(None, None, 3))
    c1 = layers.Conv2D(4, 3, padding="same", activation="relu", name="block1_conv1")(inp)
    c2 = layers.Conv2D(4, 3, padding="same", activation="relu", name="block1_conv2")(c1)
    p = layers.MaxPooling2D(2, name="block1_pool")(c2)
    c3 = layers.Conv2D(6, 3, padding="same", activation="relu", name="block2_conv1")(p)
    base = tf.keras.Model(inp, c3)
    keras_init(base, 21)
    base.trainable = False
    return base


@parity(modes=True, **KTOL)
def test_neural_style_transfer_image_variable_with_gram_matrices_and_total_variation(tf):
    """Neural style transfer: a fixed extractor's style layers (Gram matrices by
    ``tf.linalg.einsum('bijc,bijd->bcd')`` over the number of locations) and content layer; the
    image is a ``tf.Variable`` (the content image plus fed noise: at the content image itself the
    content loss's gradient is rounding noise times ``content_weight``) optimised by Adam(0.02, beta_1=0.99, epsilon=0.1) in a
    ``tf.function`` step, the loss adding ``total_variation_weight * tf.image.total_variation``,
    and ``image.assign(clip_0_1(image))`` after each step; the hand-written high-pass total
    variation is compared with ``tf.image.total_variation``."""
    base = _feature_extractor(tf)
    style_layers = ["block1_conv1", "block2_conv1"]
    content_layers = ["block1_conv2"]
    outputs = [base.get_layer(name).output for name in style_layers + content_layers]
    vgg = tf.keras.Model([base.input], outputs)
    vgg.trainable = False

    def gram_matrix(input_tensor):
        result = tf.linalg.einsum("bijc,bijd->bcd", input_tensor, input_tensor)
        input_shape = tf.shape(input_tensor)
        num_locations = tf.cast(input_shape[1] * input_shape[2], input_tensor.dtype)
        return result / num_locations

    def extract(inputs):
        inputs = inputs * 255.0
        outs = vgg(inputs / 127.5 - 1.0)
        style_outputs = [gram_matrix(o) for o in outs[:len(style_layers)]]
        content = outs[len(style_layers):]
        return ({n: v for n, v in zip(style_layers, style_outputs)},
                {n: v for n, v in zip(content_layers, content)})

    style_image = _images(1, 8, 8, 3, 22, 0.0, 1.0)
    content_image = _images(1, 8, 8, 3, 23, 0.0, 1.0)
    style_targets = extract(tf.constant(style_image))[0]
    content_targets = extract(tf.constant(content_image))[1]
    start_noise = np.random.RandomState(24).uniform(-0.1, 0.1, size=content_image.shape).astype(np.float32)
    image = tf.Variable(np.clip(content_image + start_noise, 0.0, 1.0))

    def clip_0_1(img):
        return tf.clip_by_value(img, clip_value_min=0.0, clip_value_max=1.0)

    opt = tf.keras.optimizers.Adam(learning_rate=0.02, beta_1=0.99, epsilon=1e-1)
    # (the tutorial's content_weight 1e4 over 8x8 images makes the gradient float32 rounding noise
    # times ~80: TF's own float32 gradient is 1e-2 off its float64 one there, tapejax's as far)
    style_weight, content_weight, total_variation_weight = 1e-2, 1e2, 30

    def high_pass_x_y(img):
        x_var = img[:, :, 1:, :] - img[:, :, :-1, :]
        y_var = img[:, 1:, :, :] - img[:, :-1, :, :]
        return x_var, y_var

    def style_content_loss(style_outputs, content_outputs):
        style_loss = tf.add_n([tf.reduce_mean((style_outputs[name] - style_targets[name]) ** 2)
                               for name in style_outputs.keys()])
        style_loss *= style_weight / len(style_layers)
        content_loss = tf.add_n([tf.reduce_mean((content_outputs[name] - content_targets[name]) ** 2)
                                 for name in content_outputs.keys()])
        content_loss *= content_weight / len(content_layers)
        return style_loss + content_loss

    @tf.function()
    def train_step(image):
        with tf.GradientTape() as tape:
            style_outputs, content_outputs = extract(image)
            loss = style_content_loss(style_outputs, content_outputs)
            loss += total_variation_weight * tf.image.total_variation(image)
        grad = tape.gradient(loss, image)
        opt.apply_gradients([(grad, image)])
        image.assign(clip_0_1(image))
        return loss, grad

    out = [train_step(image) for _ in range(3)]
    x_deltas, y_deltas = high_pass_x_y(image)
    by_hand = tf.reduce_sum(tf.abs(x_deltas)) + tf.reduce_sum(tf.abs(y_deltas))
    return out, image, by_hand, tf.image.total_variation(image)


def _dream_model(tf):
    layers = tf.keras.layers
    inp = tf.keras.Input(shape=(None, None, 3))
    m1 = layers.Conv2D(4, 3, padding="same", activation="relu", name="mixed3")(inp)
    m2 = layers.Conv2D(5, 3, strides=2, padding="same", activation="relu", name="mixed5")(m1)
    model = tf.keras.Model(inputs=inp, outputs=[m1, m2])
    keras_init(model, 31)
    return model


@parity(**KTOL)
def test_deepdream_gradient_ascent_under_an_input_signature_with_unknown_sizes(tf):
    """DeepDream: ``calc_loss`` sums the mean activation of two layers; the ``DeepDream`` module's
    ``tf.function(input_signature=[TensorSpec([None, None, 3]), TensorSpec([], int32),
    TensorSpec([], float32)])`` runs ``for n in tf.range(steps)`` of gradient ascent, the gradient
    divided by ``tf.math.reduce_std(gradients) + 1e-8`` and the image clipped to [-1, 1]; called
    on two image sizes (one trace in TF) and on an octave-resized image."""
    dream_model = _dream_model(tf)

    def calc_loss(img, model):
        img_batch = tf.expand_dims(img, axis=0)
        layer_activations = model(img_batch)
        if len(layer_activations) == 1:
            layer_activations = [layer_activations]
        losses = []
        for act in layer_activations:
            loss = tf.math.reduce_mean(act)
            losses.append(loss)
        return tf.reduce_sum(losses)

    class DeepDream(tf.Module):
        def __init__(self, model):
            self.model = model

        @tf.function(input_signature=(
            tf.TensorSpec(shape=[None, None, 3], dtype=tf.float32),
            tf.TensorSpec(shape=[], dtype=tf.int32),
            tf.TensorSpec(shape=[], dtype=tf.float32),))
        def __call__(self, img, steps, step_size):
            loss = tf.constant(0.0)
            for n in tf.range(steps):
                with tf.GradientTape() as tape:
                    tape.watch(img)
                    loss = calc_loss(img, self.model)
                gradients = tape.gradient(loss, img)
                gradients /= tf.math.reduce_std(gradients) + 1e-8
                img = img + gradients * step_size
                img = tf.clip_by_value(img, -1, 1)
            return loss, img

    deepdream = DeepDream(dream_model)
    img_a = _images(1, 6, 6, 3, 32)[0]
    img_b = _images(1, 8, 4, 3, 33)[0]
    out = [deepdream(img_a, tf.constant(3), tf.constant(0.05)),
           deepdream(img_b, tf.constant(2), tf.constant(0.1))]
    base_shape = tf.shape(img_a)[:-1]
    new_shape = tf.cast(tf.cast(base_shape, tf.float32) * 1.3, tf.int32)
    img_c = tf.image.resize(img_a, new_shape).numpy()
    out.append(deepdream(img_c, tf.constant(1), tf.constant(0.05)))
    return out, new_shape


def _tiled_gradients(tf, size_argument, guard=True):
    """DeepDream's ``TiledGradients`` module (the tutorial's, with the random shift fed in); the image
    size and tile size arguments of the signature as in the tutorial, or the size read by
    ``tf.shape`` inside and the tile size a Python int; the guard against an empty offset list on a
    tensor as in the tutorial (``tf.cast(len(xs), bool)``) or left out (the images here give at least
    one tile each way)."""
    model = _dream_model(tf)

    def calc_loss(img, model):
        layer_activations = model(tf.expand_dims(img, axis=0))
        return tf.reduce_sum([tf.math.reduce_mean(act) for act in layer_activations])

    def tiles(img, img_size, shift, tile_size):
        img_rolled = tf.roll(img, shift=shift, axis=[0, 1])
        gradients = tf.zeros_like(img_rolled)
        xs = tf.range(0, img_size[1], tile_size)[:-1]
        if guard and not tf.cast(len(xs), bool):
            xs = tf.constant([0])
        ys = tf.range(0, img_size[0], tile_size)[:-1]
        if guard and not tf.cast(len(ys), bool):
            ys = tf.constant([0])
        for x in xs:
            for y in ys:
                with tf.GradientTape() as tape:
                    tape.watch(img_rolled)
                    img_tile = img_rolled[y:y + tile_size, x:x + tile_size]
                    loss = calc_loss(img_tile, model)
                gradients = gradients + tape.gradient(loss, img_rolled)
        gradients = tf.roll(gradients, shift=-shift, axis=[0, 1])
        gradients /= tf.math.reduce_std(gradients) + 1e-8
        return gradients

    img_spec = tf.TensorSpec(shape=[None, None, 3], dtype=tf.float32)
    int2, int0 = tf.TensorSpec(shape=[2], dtype=tf.int32), tf.TensorSpec(shape=[], dtype=tf.int32)
    if size_argument:
        get_tiled_gradients = tf.function(tiles, input_signature=(img_spec, int2, int2, int0))
    else:
        traced = tf.function(lambda img, shift: tiles(img, tf.shape(img)[:-1], shift, 4),
                             input_signature=(img_spec, int2))

        def get_tiled_gradients(img, img_size, shift, tile_size):
            return traced(img, shift)
    img_a = _images(1, 10, 9, 3, 34)[0]
    img_b = _images(1, 7, 12, 3, 35)[0]
    out = []
    for img, shift in ((img_a, [2, -3]), (img_b, [-1, 4]), (img_a, [0, 0])):
        out.append(get_tiled_gradients(img, tf.shape(img)[:-1], tf.constant(shift), tf.constant(4)))
    return out


@parity(**KTOL)
def test_deepdream_tiled_gradients_with_a_traced_roll_shift(tf):
    """DeepDream's ``TiledGradients`` with the image size read by ``tf.shape`` inside the
    ``tf.function(input_signature=...)`` and the tile size a Python int: the image rolled by a shift known only when the step runs
    (``tf.roll`` with a traced shift), a tape per tile over ``tf.range`` offsets with tensor slice
    bounds, the tile gradients summed, rolled back and normalised by ``reduce_std``; two shifts and
    two image sizes."""
    return _tiled_gradients(tf, size_argument=False, guard=False)


@parity(**KTOL)
def test_deepdream_tiled_gradients_guarding_empty_offsets_by_a_tensor_condition(tf):
    """As the case above with the tutorial's guard ``if not tf.cast(len(xs), bool): xs =
    tf.constant([0])``: a conditional on a tensor whose branches give offsets of different lengths."""
    return _tiled_gradients(tf, size_argument=False)


@xfail_on_tapejax("tf.range(0, img_size[1], tile_size)[:-1] with img_size a traced signature argument: "
                  "TracedSizeError (a ValueError): a range of data-dependent length "
                  "inside a compiled function; XLA has static shapes")
@parity(**KTOL)
def test_deepdream_tiled_gradients_with_the_image_size_as_a_signature_argument(tf):
    """The tutorial's exact ``TiledGradients`` signature: ``img_size`` a ``TensorSpec([2], int32)``
    argument and ``tile_size`` a ``TensorSpec([], int32)`` one, so the tile offsets
    ``tf.range(0, img_size[1], tile_size)[:-1]`` have a length known only when the step runs."""
    return _tiled_gradients(tf, size_argument=True)


# ---------------------------------------------------------------------------
# Explaining and attacking a classifier
# ---------------------------------------------------------------------------

def _small_cnn(tf, seed, classes=3, name_conv="last_conv"):
    """A functional CNN classifier on 6x6x3 images (softmax output, as the pretrained models the
    tutorials load); its last conv layer named for Grad-CAM."""
    layers = tf.keras.layers
    inp = tf.keras.Input(shape=(6, 6, 3))
    x = layers.Conv2D(4, 3, padding="same", activation="relu")(inp)
    x = layers.Conv2D(5, 3, strides=2, padding="same", activation="relu", name=name_conv)(x)
    x = layers.GlobalAveragePooling2D()(x)
    out = layers.Dense(classes, activation="softmax", name="predictions")(x)
    model = tf.keras.Model(inp, out)
    keras_init(model, seed)
    return model


@parity(modes=True, **KTOL)
def test_fgsm_adversarial_example_from_the_input_gradient(tf):
    """FGSM: ``CategoricalCrossentropy`` of a softmax CNN against the one-hot label of the predicted
    class, the tape watching the input image, ``tf.sign`` of the input gradient, ``x + eps * sign``
    clipped to [-1, 1] for three epsilons, and the model's predictions on the adversarial images."""
    model = _small_cnn(tf, 41)
    model.trainable = False
    loss_object = tf.keras.losses.CategoricalCrossentropy()
    image = tf.constant(_images(2, 6, 6, 3, 42))

    def create_adversarial_pattern(input_image, input_label):
        with tf.GradientTape() as tape:
            tape.watch(input_image)
            prediction = model(input_image)
            loss = loss_object(input_label, prediction)
        gradient = tape.gradient(loss, input_image)
        signed_grad = tf.sign(gradient)
        return loss, gradient, signed_grad

    probs = model(image)
    label = tf.one_hot(tf.argmax(probs, axis=-1), probs.shape[-1])
    loss, gradient, perturbations = create_adversarial_pattern(image, label)
    out = []
    for eps in [0, 0.01, 0.1]:
        adv_x = image + eps * perturbations
        adv_x = tf.clip_by_value(adv_x, -1, 1)
        # (argmax's int64 is int32 in tapejax without x64 mode: README, Semantics worth knowing)
        out.append((adv_x, model(adv_x), tf.cast(tf.argmax(model(adv_x), axis=-1), tf.int32)))
    return probs, label, loss, gradient, perturbations, out


@parity(modes=True, **KTOL)
def test_grad_cam_heatmap_from_a_two_output_functional_model(tf):
    """Grad-CAM: ``keras.Model(model.inputs, [model.get_layer('last_conv').output, model.output])``;
    under a tape the score of the predicted class (``tf.argmax(preds[0])``, a tensor index) and
    of a given class, the gradient w.r.t. the conv output (not a Variable: the layer output itself),
    ``reduce_mean`` over batch and space, the weighted sum by ``@``, ``squeeze``, ``tf.maximum(.., 0)
    / tf.math.reduce_max``; also the gradient of the score w.r.t. the input (None for an unwatched
    input, as in TF)."""
    model = _small_cnn(tf, 43)
    img_array = _images(1, 6, 6, 3, 44)
    grad_model = tf.keras.models.Model(model.inputs, [model.get_layer("last_conv").output, model.output])

    def make_gradcam_heatmap(img_array, pred_index=None):
        with tf.GradientTape() as tape:
            last_conv_layer_output, preds = grad_model(img_array)
            if pred_index is None:
                pred_index = tf.argmax(preds[0])
            class_channel = preds[:, pred_index]
        grads = tape.gradient(class_channel, last_conv_layer_output)
        pooled_grads = tf.reduce_mean(grads, axis=(0, 1, 2))
        last_conv_layer_output = last_conv_layer_output[0]
        heatmap = last_conv_layer_output @ pooled_grads[..., tf.newaxis]
        heatmap = tf.squeeze(heatmap)
        heatmap = tf.maximum(heatmap, 0) / tf.math.reduce_max(heatmap)
        return heatmap, grads, class_channel

    x = tf.constant(img_array)
    with tf.GradientTape() as tape:
        conv, preds = grad_model(x)
        score = preds[:, 1]
    unwatched = tape.gradient(score, x)
    return make_gradcam_heatmap(img_array), make_gradcam_heatmap(img_array, 2), unwatched


@parity(modes=True, **KTOL)
def test_integrated_gradients_batched_by_a_tensor_array(tf):
    """Integrated gradients as in the tutorial: ``tf.linspace`` alphas, images interpolated by
    broadcasting ``alphas[:, newaxis, newaxis, newaxis]``, the softmax probability of the target
    class differentiated w.r.t. the batch of images by one tape, batches of alphas by a Python loop
    over ``tf.range`` (``from_:to`` slices, ``tf.minimum``) scattered into a ``TensorArray``, the
    trapezoidal Riemann sum, and the attribution mask ``reduce_sum(abs(attributions), axis=-1)``;
    the completeness check (attributions sum vs. the probability difference) is returned too."""
    model = _small_cnn(tf, 45)
    baseline = tf.zeros(shape=(6, 6, 3))
    image = tf.constant(_images(1, 6, 6, 3, 46, 0.0, 1.0)[0])

    def interpolate_images(baseline, image, alphas):
        alphas_x = alphas[:, tf.newaxis, tf.newaxis, tf.newaxis]
        baseline_x = tf.expand_dims(baseline, axis=0)
        input_x = tf.expand_dims(image, axis=0)
        delta = input_x - baseline_x
        images = baseline_x + alphas_x * delta
        return images

    def compute_gradients(images, target_class_idx):
        with tf.GradientTape() as tape:
            tape.watch(images)
            logits = model(images)
            probs = tf.nn.softmax(logits, axis=-1)[:, target_class_idx]
        return tape.gradient(probs, images)

    def integral_approximation(gradients):
        grads = (gradients[:-1] + gradients[1:]) / tf.constant(2.0)
        integrated_gradients = tf.math.reduce_mean(grads, axis=0)
        return integrated_gradients

    @tf.function
    def one_batch(baseline, image, alpha_batch, target_class_idx):
        interpolated_path_input_batch = interpolate_images(baseline=baseline, image=image, alphas=alpha_batch)
        gradient_batch = compute_gradients(images=interpolated_path_input_batch, target_class_idx=target_class_idx)
        return gradient_batch

    def integrated_gradients(baseline, image, target_class_idx, m_steps=10, batch_size=4):
        alphas = tf.linspace(start=0.0, stop=1.0, num=m_steps + 1)
        gradient_batches = tf.TensorArray(tf.float32, size=m_steps + 1)
        for alpha in tf.range(0, len(alphas), batch_size):
            from_ = alpha
            to = tf.minimum(from_ + batch_size, len(alphas))
            alpha_batch = alphas[from_:to]
            gradient_batch = one_batch(baseline, image, alpha_batch, target_class_idx)
            gradient_batches = gradient_batches.scatter(tf.range(from_, to), gradient_batch)
        total_gradients = gradient_batches.stack()
        avg_gradients = integral_approximation(gradients=total_gradients)
        integrated_gradients = (image - baseline) * avg_gradients
        return integrated_gradients

    attributions = integrated_gradients(baseline, image, target_class_idx=2)
    attribution_mask = tf.reduce_sum(tf.math.abs(attributions), axis=-1)
    p = tf.nn.softmax(model(tf.stack([baseline, image])), axis=-1)[:, 2]
    return attributions, attribution_mask, tf.reduce_sum(attributions), p[1] - p[0]


# ---------------------------------------------------------------------------
# The CVAE
# ---------------------------------------------------------------------------

@parity(**KTOL)
def test_cvae_tutorial_elbo_with_fed_reparameterisation_noise(tf):
    """The convolutional VAE tutorial: an encoder Conv2D stack to ``Dense(latent + latent)`` split by
    ``tf.split``, the reparameterisation ``eps * exp(logvar * .5) + mean`` with ``eps`` fed, a
    decoder of Dense / Reshape / ``Conv2DTranspose``, ``log_normal_pdf``, the per-image
    ``sigmoid_cross_entropy_with_logits`` summed over ``axis=[1, 2, 3]``, ``-reduce_mean(logpx_z +
    logpz - logqz_x)`` in a ``tf.function`` train step with Adam(1e-3); the sampled images
    (``sigmoid`` of the decoder, ``apply_sigmoid=True``) at the end."""
    latent_dim = 2
    layers = tf.keras.layers

    class CVAE(tf.keras.Model):
        def __init__(self, latent_dim):
            super().__init__()
            self.latent_dim = latent_dim
            self.encoder = tf.keras.Sequential([
                tf.keras.Input(shape=(8, 8, 1)),
                layers.Conv2D(filters=4, kernel_size=3, strides=(2, 2), activation="relu"),
                layers.Flatten(),
                layers.Dense(latent_dim + latent_dim),
            ])
            self.decoder = tf.keras.Sequential([
                tf.keras.Input(shape=(latent_dim,)),
                layers.Dense(units=4 * 4 * 4, activation="relu"),
                layers.Reshape(target_shape=(4, 4, 4)),
                layers.Conv2DTranspose(filters=4, kernel_size=3, strides=2, padding="same", activation="relu"),
                layers.Conv2DTranspose(filters=1, kernel_size=3, strides=1, padding="same"),
            ])

        def encode(self, x):
            mean, logvar = tf.split(self.encoder(x), num_or_size_splits=2, axis=1)
            return mean, logvar

        def reparameterize(self, mean, logvar, eps):
            return eps * tf.exp(logvar * .5) + mean

        def decode(self, z, apply_sigmoid=False):
            logits = self.decoder(z)
            if apply_sigmoid:
                probs = tf.sigmoid(logits)
                return probs
            return logits

    def log_normal_pdf(sample, mean, logvar, raxis=1):
        log2pi = tf.math.log(2. * np.pi)
        return tf.reduce_sum(-.5 * ((sample - mean) ** 2. * tf.exp(-logvar) + logvar + log2pi), axis=raxis)

    def compute_loss(model, x, eps):
        mean, logvar = model.encode(x)
        z = model.reparameterize(mean, logvar, eps)
        x_logit = model.decode(z)
        cross_ent = tf.nn.sigmoid_cross_entropy_with_logits(logits=x_logit, labels=x)
        logpx_z = -tf.reduce_sum(cross_ent, axis=[1, 2, 3])
        logpz = log_normal_pdf(z, 0., 0.)
        logqz_x = log_normal_pdf(z, mean, logvar)
        return -tf.reduce_mean(logpx_z + logpz - logqz_x)

    model = CVAE(latent_dim)
    keras_init(model.encoder, 51)
    keras_init(model.decoder, 52)
    optimizer = tf.keras.optimizers.Adam(1e-3)

    @tf.function
    def train_step(model, x, eps, optimizer):
        with tf.GradientTape() as tape:
            loss = compute_loss(model, x, eps)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss, gradients

    rs = np.random.RandomState(53)
    train_x = (rs.uniform(size=(4, 8, 8, 1)) > 0.5).astype(np.float32)
    out = []
    for _ in range(3):
        eps = rs.randn(4, latent_dim).astype(np.float32)
        out.append(train_step(model, train_x, eps, optimizer))
    sample_eps = rs.randn(2, latent_dim).astype(np.float32)
    mean, logvar = model.encode(train_x[:2])
    return out, model.decode(sample_eps, apply_sigmoid=True), mean, logvar, compute_loss(model, train_x, rs.randn(4, 2).astype(np.float32))


# ---------------------------------------------------------------------------
# Classification, autoencoders, transfer learning, segmentation
# ---------------------------------------------------------------------------

def _classifier(tf, preprocess):
    layers = tf.keras.layers
    model = tf.keras.Sequential([tf.keras.Input(shape=(10, 10, 3))] + preprocess + [
        layers.Conv2D(4, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Conv2D(6, 3, padding="same", activation="relu"),
        layers.MaxPooling2D(),
        layers.Flatten(),
        layers.Dense(8, activation="relu"),
        layers.Dense(3),
    ])
    keras_init(model, 61)
    return model


@parity(**KTOL)
def test_image_classification_with_preprocessing_layers_fit_on_a_dataset_then_custom_loop(tf):
    """The image classification tutorial: ``Rescaling(1./255)`` and a deterministic
    ``CenterCrop`` / ``Resizing`` in the model, a ``tf.data`` pipeline (``from_tensor_slices``,
    ``map`` casting the uint8-valued pixels, ``batch``, ``prefetch(AUTOTUNE)``), ``compile`` with
    Adam, ``SparseCategoricalCrossentropy(from_logits=True)`` and accuracy, ``fit`` with
    ``validation_data`` for two epochs (history compared), ``evaluate``, ``predict`` and
    ``tf.nn.softmax`` of a prediction; then the same model trained two more steps by a custom
    ``tf.function`` loop with a fresh Adam."""
    layers = tf.keras.layers
    model = _classifier(tf, [layers.Rescaling(1. / 255), layers.CenterCrop(8, 8), layers.Resizing(10, 10)])
    rs = np.random.RandomState(62)
    images = rs.randint(0, 256, size=(12, 10, 10, 3)).astype(np.float32)
    labels = rs.randint(0, 3, size=12).astype(np.int32)
    AUTOTUNE = tf.data.AUTOTUNE
    train_ds = tf.data.Dataset.from_tensor_slices((images[:8], labels[:8]))
    train_ds = train_ds.map(lambda x, y: (tf.cast(x, tf.float32), y)).batch(4).prefetch(buffer_size=AUTOTUNE)
    val_ds = tf.data.Dataset.from_tensor_slices((images[8:], labels[8:])).batch(4)
    model.compile(optimizer="adam",
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(train_ds, validation_data=val_ds, epochs=2, verbose=0)
    hist = {k: [float(v) for v in history.history[k]] for k in ("loss", "accuracy", "val_loss", "val_accuracy")}
    evaluated = model.evaluate(val_ds, verbose=0)
    predictions = model.predict(images[8:], verbose=0)
    score = tf.nn.softmax(predictions[0])
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.Adam(0.01)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss, grads[-1]

    steps = [train_step(x, y) for x, y in train_ds]
    return hist, evaluated, predictions, score, steps, [v.numpy() for v in model.weights]


@parity(**KTOL)
def test_augmentation_layers_pass_through_at_inference_and_rescaling_inside_dataset_map(tf):
    """The tutorial's ``data_augmentation`` Sequential (``RandomFlip('horizontal')``,
    ``RandomRotation(0.1)``, ``RandomZoom(0.1)``) first in the model: at inference (``predict``,
    ``evaluate``, ``model(x)``, ``training=False``) it passes the images through unchanged, so
    those equal TF's; ``Rescaling(1./255)`` applied in ``dataset.map(lambda x, y:
    (normalization_layer(x), y))`` as the tutorial's ``normalized_ds``; the input gradient at
    inference passes the augmentation layers as the identity."""
    layers = tf.keras.layers
    data_augmentation = tf.keras.Sequential([
        layers.RandomFlip("horizontal"),
        layers.RandomRotation(0.1),
        layers.RandomZoom(0.1),
    ])
    model = _classifier(tf, [data_augmentation])
    normalization_layer = layers.Rescaling(1. / 255)
    rs = np.random.RandomState(67)
    images = rs.randint(0, 256, size=(6, 10, 10, 3)).astype(np.float32)
    labels = rs.randint(0, 3, size=6).astype(np.int32)
    train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).batch(3)
    normalized_ds = train_ds.map(lambda x, y: (normalization_layer(x), y))
    image_batch, labels_batch = next(iter(normalized_ds))
    first_image = image_batch[0]
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    evaluated = model.evaluate(normalized_ds, verbose=0)
    predicted = model.predict(normalized_ds, verbose=0)
    x = tf.constant(images[:2] / 255.0)
    with tf.GradientTape() as tape:
        tape.watch(x)
        logits = model(x, training=False)
    augmented = data_augmentation(x)   # (called alone it augments, in both: random, so its shape only)
    return (np.min(first_image), np.max(first_image), labels_batch, evaluated, predicted, logits,
            tape.gradient(logits, x), augmented.shape.as_list())


@parity(modes=True, **KTOL)
def test_anomaly_detection_autoencoder_threshold_from_reconstruction_errors(tf):
    """The autoencoder tutorial's anomaly detector: a subclassed ``Model`` with encoder and decoder
    ``Sequential`` s, ``compile('adam', loss='mae')``, ``fit(x, x)`` on normal rows only with
    ``validation_data`` (no shuffling), reconstruction errors by ``tf.keras.losses.mae``, a
    threshold ``mean + std`` of the training errors (NumPy), and ``tf.math.less(loss, threshold)``
    with accuracy / precision / recall from the boolean predictions."""
    layers = tf.keras.layers

    class AnomalyDetector(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.encoder = tf.keras.Sequential([layers.Dense(6, activation="relu"),
                                                layers.Dense(3, activation="relu")])
            self.decoder = tf.keras.Sequential([layers.Dense(6, activation="relu"),
                                                layers.Dense(8, activation="sigmoid")])

        def call(self, x):
            encoded = self.encoder(x)
            decoded = self.decoder(encoded)
            return decoded

    rs = np.random.RandomState(63)
    normal = (0.5 + 0.2 * np.sin(np.linspace(0, 3, 8))[None] + 0.05 * rs.randn(16, 8)).astype(np.float32)
    anomalous = rs.uniform(0, 1, size=(6, 8)).astype(np.float32)
    train_data, test_data = normal[:10], np.concatenate([normal[10:], anomalous])
    test_labels = np.array([True] * 6 + [False] * 6)
    autoencoder = AnomalyDetector()
    autoencoder(train_data[:1])
    keras_init(autoencoder, 64)
    autoencoder.compile(optimizer="adam", loss="mae")
    history = autoencoder.fit(train_data, train_data, epochs=3, batch_size=4, validation_data=(test_data, test_data),
                              shuffle=False, verbose=0)
    reconstructions = autoencoder.predict(train_data, verbose=0)
    train_loss = tf.keras.losses.mae(reconstructions, train_data)
    threshold = np.mean(train_loss) + np.std(train_loss)

    def predict(model, data, threshold):
        reconstructions = model(data)
        loss = tf.keras.losses.mae(reconstructions, data)
        return tf.math.less(loss, threshold), loss

    preds, test_loss = predict(autoencoder, test_data, threshold)
    accuracy = tf.reduce_mean(tf.cast(tf.equal(preds, test_labels), tf.float32))
    tp = tf.reduce_sum(tf.cast(tf.logical_and(preds, test_labels), tf.float32))
    precision = tp / tf.reduce_sum(tf.cast(preds, tf.float32))
    recall = tp / tf.reduce_sum(tf.cast(test_labels, tf.float32))
    return ({k: [float(v) for v in vs] for k, vs in history.history.items()}, train_loss, np.float32(threshold),
            test_loss, preds, accuracy, precision, recall)


@parity(**KTOL)
def test_denoising_conv_autoencoder_with_fed_noise_and_upsampling(tf):
    """The denoising autoencoder: images plus fed Gaussian noise clipped by
    ``tf.clip_by_value(.., 0., 1.)``, an encoder of strided ``Conv2D`` and a decoder of
    ``Conv2DTranspose`` and ``UpSampling2D`` to a sigmoid ``Conv2D``, ``compile(loss=
    MeanSquaredError())``, ``fit(noisy, clean)`` without shuffling, then the encoded and decoded
    test images and a custom gradient step of the same loss."""
    layers = tf.keras.layers

    class Denoise(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.encoder = tf.keras.Sequential([
                tf.keras.Input(shape=(8, 8, 1)),
                layers.Conv2D(4, (3, 3), activation="relu", padding="same", strides=2),
                layers.Conv2D(2, (3, 3), activation="relu", padding="same", strides=2)])
            self.decoder = tf.keras.Sequential([
                layers.Conv2DTranspose(2, kernel_size=3, strides=2, activation="relu", padding="same"),
                layers.UpSampling2D(2),
                layers.Conv2D(1, kernel_size=(3, 3), activation="sigmoid", padding="same")])

        def call(self, x):
            encoded = self.encoder(x)
            decoded = self.decoder(encoded)
            return decoded

    rs = np.random.RandomState(65)
    x_train = rs.uniform(0, 1, size=(8, 8, 8, 1)).astype(np.float32)
    x_test = rs.uniform(0, 1, size=(2, 8, 8, 1)).astype(np.float32)
    noise_factor = 0.2
    x_train_noisy = x_train + noise_factor * rs.randn(*x_train.shape).astype(np.float32)
    x_test_noisy = x_test + noise_factor * rs.randn(*x_test.shape).astype(np.float32)
    x_train_noisy = tf.clip_by_value(x_train_noisy, clip_value_min=0., clip_value_max=1.)
    x_test_noisy = tf.clip_by_value(x_test_noisy, clip_value_min=0., clip_value_max=1.)
    autoencoder = Denoise()
    autoencoder(x_test)
    keras_init(autoencoder, 66)
    autoencoder.compile(optimizer="adam", loss=tf.keras.losses.MeanSquaredError())
    history = autoencoder.fit(x_train_noisy, x_train, epochs=2, batch_size=4, shuffle=False, verbose=0,
                              validation_data=(x_test_noisy, x_test))
    encoded_imgs = autoencoder.encoder(x_test_noisy).numpy()
    decoded_imgs = autoencoder.decoder(encoded_imgs).numpy()
    with tf.GradientTape() as tape:
        loss = tf.keras.losses.MeanSquaredError()(x_test, autoencoder(x_test_noisy))
    grads = tape.gradient(loss, autoencoder.trainable_variables)
    return ({k: [float(v) for v in vs] for k, vs in history.history.items()}, encoded_imgs, decoded_imgs, loss, grads)


def _base_model(tf):
    """A small stand-in for MobileNetV2 without its top: conv, batch norm, conv."""
    layers = tf.keras.layers
    base = tf.keras.Sequential([
        tf.keras.Input(shape=(8, 8, 3)),
        layers.Conv2D(4, 3, strides=2, padding="same", use_bias=False, name="conv1"),
        layers.BatchNormalization(name="bn1"),
        layers.ReLU(6.0),
        layers.Conv2D(6, 3, padding="same", name="conv2"),
        layers.ReLU(6.0),
    ], name="base")
    keras_init(base, 71)
    return base


@parity(**KTOL)
def test_transfer_learning_frozen_base_then_fine_tuning_with_fit(tf):
    """The transfer learning tutorial: ``base_model.trainable = False``, a functional model
    ``preprocess -> base_model(x, training=False) -> GlobalAveragePooling2D -> Dropout(0.) ->
    Dense(1)``, ``BinaryCrossentropy(from_logits=True)`` and ``BinaryAccuracy(threshold=0)``, fit;
    then ``base_model.trainable = True`` with the layers before ``fine_tune_at`` frozen again,
    recompiled with RMSprop and fit on from ``initial_epoch`` (the optimizers by name, at their
    default rates: ``compile`` takes Keras 3 optimizers in tapejax, not ``tf.keras.optimizers``'
    Keras-2 ones, see ``tapejax/keras/README.md``); the trainable variable
    counts, both histories and all weights (the base's batch norm stays in inference mode: its
    moving statistics never change)."""
    layers = tf.keras.layers
    base_model = _base_model(tf)
    base_model.trainable = False
    inputs = tf.keras.Input(shape=(8, 8, 3))
    x = layers.Rescaling(1. / 127.5, offset=-1)(inputs)
    x = base_model(x, training=False)
    x = layers.GlobalAveragePooling2D()(x)
    x = layers.Dropout(0.0)(x)
    outputs = layers.Dense(1)(x)
    model = tf.keras.Model(inputs, outputs)
    head = model.layers[-1]
    head.set_weights([np.full((6, 1), 0.2, np.float32) * np.arange(6, dtype=np.float32)[:, None] - 0.4,
                      np.zeros(1, np.float32)])
    rs = np.random.RandomState(72)
    images = rs.uniform(0, 255, size=(8, 8, 8, 3)).astype(np.float32)
    labels = rs.randint(0, 2, size=(8, 1)).astype(np.float32)
    model.compile(optimizer="adam",
                  loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
                  metrics=[tf.keras.metrics.BinaryAccuracy(threshold=0, name="accuracy")])
    n_frozen = len(model.trainable_variables)
    history = model.fit(images, labels, epochs=2, batch_size=4, shuffle=False, verbose=0)
    base_model.trainable = True
    fine_tune_at = 3
    for layer in base_model.layers[:fine_tune_at]:
        layer.trainable = False
    model.compile(loss=tf.keras.losses.BinaryCrossentropy(from_logits=True), optimizer="rmsprop",
                  metrics=[tf.keras.metrics.BinaryAccuracy(threshold=0, name="accuracy")])
    n_fine = len(model.trainable_variables)
    history_fine = model.fit(images, labels, epochs=4, initial_epoch=2, batch_size=4, shuffle=False, verbose=0)
    hist = [{k: [float(v) for v in h.history[k]] for k in ("loss", "accuracy")} for h in (history, history_fine)]
    return n_frozen, n_fine, hist, [v.numpy() for v in model.weights], model.predict(images[:2], verbose=0)


@parity(modes=True, **KTOL)
def test_transfer_learning_custom_loop_where_the_optimizer_meets_new_variables(tf):
    """Transfer learning by hand: a legacy Adam over the head only (base frozen), then the base's
    last conv unfrozen and the *same* optimizer given the longer variable list (it creates slots
    for the new variables; the head's moments and the step count carry on); gradients w.r.t. the
    frozen variables asked for explicitly are TF's (values, since freezing only hides them from
    ``trainable_variables``)."""
    layers = tf.keras.layers
    base_model = _base_model(tf)
    base_model.trainable = False
    pool = layers.GlobalAveragePooling2D()
    head = layers.Dense(1)
    rs = np.random.RandomState(73)
    images = rs.uniform(-1, 1, size=(6, 8, 8, 3)).astype(np.float32)
    labels = rs.randint(0, 2, size=(6, 1)).astype(np.float32)
    head(pool(base_model(images, training=False)))
    head.set_weights([init_array((6, 1), 74), np.zeros(1, np.float32)])
    loss_fn = tf.keras.losses.BinaryCrossentropy(from_logits=True)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []

    def step(variables):
        with tf.GradientTape() as tape:
            logits = head(pool(base_model(images, training=False)))
            loss = loss_fn(labels, logits)
        grads = tape.gradient(loss, variables)
        opt.apply_gradients(zip(grads, variables))
        return loss, grads

    for _ in range(2):
        out.append(step(head.trainable_variables))
    conv1_kernel = base_model.get_layer("conv1").kernel
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, head(pool(base_model(images, training=False))))
    out.append(tape.gradient(loss, [conv1_kernel]))
    base_model.get_layer("conv2").trainable = True
    base_model.trainable = True
    for layer in base_model.layers[:3]:
        layer.trainable = False
    variables = head.trainable_variables + base_model.trainable_variables
    for _ in range(2):
        out.append(step(variables))
    return out, len(variables), int(opt.iterations.numpy()), [v.numpy() for v in variables]


def _segmentation_model(tf):
    layers = tf.keras.layers
    inputs = tf.keras.layers.Input(shape=[8, 8, 3])
    d1 = layers.Conv2D(4, 3, strides=2, padding="same", activation="relu")(inputs)
    d2 = layers.Conv2D(6, 3, strides=2, padding="same", activation="relu")(d1)
    u1 = layers.Conv2DTranspose(4, 3, strides=2, padding="same", activation="relu")(d2)
    u1 = layers.Concatenate()([u1, d1])
    x = layers.Conv2DTranspose(3, 3, strides=2, padding="same")(u1)
    model = tf.keras.Model(inputs=inputs, outputs=x)
    keras_init(model, 81)
    return model


@parity(**KTOL)
def test_segmentation_per_pixel_loss_with_class_weights_gathered_into_sample_weights(tf):
    """The segmentation tutorial's class weights: ``add_sample_weights`` mapped over a dataset
    (``class_weights / reduce_sum``, ``tf.gather(class_weights, indices=tf.cast(label, tf.int32))``)
    giving ``(image, label, sample_weight)`` elements with the label and weights of shape
    ``(8, 8, 1)``; ``fit`` with ``SparseCategoricalCrossentropy(from_logits=True)``; the same loss
    object called by hand with the sample weights; ``create_mask`` by ``argmax`` of the prediction."""
    rs = np.random.RandomState(82)
    images = rs.uniform(0, 1, size=(6, 8, 8, 3)).astype(np.float32)
    masks = rs.randint(0, 3, size=(6, 8, 8, 1)).astype(np.float32)

    def add_sample_weights(image, label):
        class_weights = tf.constant([2.0, 2.0, 1.0])
        class_weights = class_weights / tf.reduce_sum(class_weights)
        sample_weights = tf.gather(class_weights, indices=tf.cast(label, tf.int32))
        return image, label, sample_weights

    model = _segmentation_model(tf)
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="adam", loss=loss)
    ds = tf.data.Dataset.from_tensor_slices((images, masks)).batch(3)
    weighted = ds.map(add_sample_weights)
    first = next(iter(weighted))
    by_hand = loss(first[1], model(first[0]), sample_weight=first[2])
    unweighted = loss(first[1], model(first[0]))
    history = model.fit(weighted, epochs=2, verbose=0)

    def create_mask(pred_mask):
        pred_mask = tf.math.argmax(pred_mask, axis=-1)
        pred_mask = pred_mask[..., tf.newaxis]
        return tf.cast(pred_mask[0], tf.int32)

    with tf.GradientTape() as tape:
        step_loss = loss(first[1], model(first[0], training=True), sample_weight=first[2])
    grads = tape.gradient(step_loss, model.trainable_variables)
    return (first[2], by_hand, unweighted, [float(v) for v in history.history["loss"]],
            create_mask(model.predict(images[:1], verbose=0)), step_loss, grads)
