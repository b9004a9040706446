"""Round twenty-three (b) of realistic user programs, first half: vision transformers as keras.io's
TF-era examples (image classification with Vision Transformers, Swin, masked image modeling) and
the research code write them, run under real TensorFlow 2.21 and under tapejax.

Patch embeddings by ``tf.image.extract_patches`` and by a strided convolution of the same kernel
(the same tokens), a class token joined by ``tf.repeat`` / ``tf.tile``, learned and sinusoidal
position embeddings (a frozen table gets no gradient), Swin's window partition and shifted windows
by ``tf.roll`` with the shifted-window attention mask and a relative position bias gathered from a
table, Swin's patch merging by strided slices, hand-written scaled dot-product attention under
padding and causal masks (``-1e9``, ``-inf`` and ``tf.where``: a fully masked row is uniform under
``-1e9`` and NaN under ``-inf``), talking-heads and class attention (CaiT), and masked image
modeling (MAE's random masking by ``tf.argsort`` of uniform noise, ``ids_restore``, the loss on
masked patches only).  Keras' ``MultiHeadAttention`` over 2-D token grids, attention dropout and
the blocks and training recipes are in ``test_user_programs23b2.py``.  Images are 8x8 with 2x2
patches, widths 4 to 8; every number trained on is drawn with NumPy.
"""
import numpy as np

from .harness import init_array, parity

LOOSE = dict(rtol=1e-4, atol=1e-5)


def _images(seed, n=2, hw=8, c=3):
    return np.random.RandomState(seed).rand(n, hw, hw, c).astype(np.float32)


def _labels(seed, n=2, k=3):
    return np.random.RandomState(seed).randint(0, k, n).astype(np.int32)


def _patches(tf, images, p=2):
    """keras.io's ``Patches`` layer: ``extract_patches`` then one row per patch."""
    patches = tf.image.extract_patches(images=images, sizes=[1, p, p, 1], strides=[1, p, p, 1],
                                       rates=[1, 1, 1, 1], padding="VALID")
    return tf.reshape(patches, [tf.shape(patches)[0], -1, patches.shape[-1]])


def _layer_norm(tf, x, gamma, beta, eps=1e-6):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + eps) * gamma + beta


# ---------------------------------------------------------------------------
# Patch embeddings and position embeddings
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_vit_patch_embedding_by_extract_patches_and_by_a_strided_conv_with_a_class_token(tf):
    """ViT's stem two ways: ``extract_patches`` + a projection (``einsum``) and ``conv2d`` of the
    projection reshaped to a 2x2 kernel with stride 2 give the same tokens; a learned class token
    is joined by ``tf.repeat`` (and equals ``tf.tile``'s), a learned position table added, the class
    token's output classified.  SGD steps, the second and fourth compiled: losses, gradients of
    the projection, bias, class token, position table and head, and the Variables after."""
    images, labels = _images(2301), _labels(2302)
    proj = tf.Variable(init_array((12, 8), 2303))
    bias = tf.Variable(np.zeros(8, np.float32))
    cls = tf.Variable(init_array((1, 1, 8), 2304))
    pos = tf.Variable(init_array((1, 17, 8), 2305, 0.02))
    head = tf.Variable(init_array((8, 3), 2306))
    ws = [proj, bias, cls, pos, head]
    opt = tf.keras.optimizers.legacy.SGD(0.5)

    def by_patches(x):
        return tf.einsum("bnd,de->bne", _patches(tf, x), proj) + bias

    def by_conv(x):
        y = tf.nn.conv2d(x, tf.reshape(proj, [2, 2, 3, 8]), strides=2, padding="VALID") + bias
        return tf.reshape(y, [tf.shape(y)[0], -1, 8])

    def step(x, y):
        with tf.GradientTape() as tape:
            seq = by_patches(x)
            b = tf.shape(seq)[0]
            tokens = tf.concat([tf.repeat(cls, repeats=b, axis=0), seq], axis=1) + pos
            logits = tf.matmul(tf.nn.gelu(tokens[:, 0]), head)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        same = tf.reduce_max(tf.abs(by_conv(x) - seq))
        tiled = tf.reduce_all(tf.equal(tf.tile(cls, [b, 1, 1]), tf.repeat(cls, b, axis=0)))
        return loss, g, same < 1e-5, tiled, tuple(tokens.shape)

    compiled = tf.function(step)
    out = [(compiled if k % 2 else step)(images, labels) for k in range(4)]
    return out, ws


@parity(modes=True, **LOOSE)
def test_sinusoidal_1d_and_2d_sincos_position_tables_frozen_beside_learned_tokens(tf):
    """The Transformer's sinusoidal table (``sin`` / ``cos`` interleaved by ``tf.stack`` + reshape)
    and MAE's 2-D sin-cos table (half the width per grid axis, ``tf.meshgrid``), both built from
    ``tf.range``; the 2-D one kept in a non-trainable Variable added to patch tokens: it is not
    watched (gradient ``None``) and unchanged by Adam, while the projection trains."""
    images = _images(2311)
    target = np.random.RandomState(2312).randn(2, 16, 8).astype(np.float32)

    def sincos_1d(pos, d):
        i = tf.cast(tf.range(d // 2), tf.float32)
        angle = tf.cast(pos, tf.float32)[:, None] / tf.pow(10000.0, 2.0 * i / d)[None, :]
        return tf.reshape(tf.stack([tf.sin(angle), tf.cos(angle)], axis=-1), [-1, d])

    def sincos_2d(grid, d):
        gy, gx = tf.meshgrid(tf.range(grid), tf.range(grid), indexing="ij")
        emb_h = sincos_1d(tf.reshape(gy, [-1]), d // 2)
        emb_w = sincos_1d(tf.reshape(gx, [-1]), d // 2)
        return tf.concat([emb_h, emb_w], axis=1)

    table1 = sincos_1d(tf.range(5), 6)
    pos = tf.Variable(sincos_2d(4, 8)[None], trainable=False)
    proj = tf.Variable(init_array((12, 8), 2313))
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            tokens = tf.matmul(_patches(tf, images), proj) + pos
            loss = tf.reduce_mean(tf.square(tokens - target))
        g_proj, g_pos = tape.gradient(loss, [proj, pos])
        opt.apply_gradients([(g_proj, proj)])
        out.append((loss, g_proj, g_pos is None, [v.name.split(":")[0] for v in tape.watched_variables()]))
    return table1, pos, proj, out


@parity(modes=True, **LOOSE)
def test_token_merging_by_strided_slices_and_by_space_to_depth(tf):
    """Swin's ``PatchMerging``: the four ``x[:, i::2, j::2, :]`` slices concatenated on channels
    (the order keras.io uses), layer-normalised and reduced ``4C -> 2C``; the same tokens by
    ``tf.nn.space_to_depth`` after the matching channel permutation; gradients wrt the watched
    input grid and the Variables, two compiled SGD steps."""
    x = tf.constant(np.random.RandomState(2321).randn(2, 4, 4, 3).astype(np.float32))
    gamma = tf.Variable(np.ones(12, np.float32))
    beta = tf.Variable(np.zeros(12, np.float32))
    red = tf.Variable(init_array((12, 6), 2322))
    target = np.random.RandomState(2323).randn(2, 4, 6).astype(np.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.2)

    def merge(x):
        x0, x1 = x[:, 0::2, 0::2, :], x[:, 1::2, 0::2, :]
        x2, x3 = x[:, 0::2, 1::2, :], x[:, 1::2, 1::2, :]
        return tf.reshape(tf.concat([x0, x1, x2, x3], axis=-1), [-1, 4, 12])

    def by_s2d(x):
        y = tf.reshape(tf.nn.space_to_depth(x, 2), [-1, 4, 4, 3])  # (0,0) (0,1) (1,0) (1,1)
        return tf.reshape(tf.gather(y, [0, 2, 1, 3], axis=2), [-1, 4, 12])

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            merged = merge(x)
            y = tf.matmul(_layer_norm(tf, merged, gamma, beta, 1e-5), red)
            loss = tf.reduce_mean(tf.square(y - target))
        g = tape.gradient(loss, [x, gamma, beta, red])
        opt.apply_gradients(zip(g[1:], [gamma, beta, red]))
        return loss, g, merged, tf.reduce_max(tf.abs(by_s2d(x) - merged))

    return [step(x) for _ in range(2)], gamma, beta, red


# ---------------------------------------------------------------------------
# Swin: shifted windows, the shifted-window mask, relative position bias
# ---------------------------------------------------------------------------

def _window_partition(tf, x, ws):
    _, h, w, c = x.shape
    x = tf.reshape(x, [-1, h // ws, ws, w // ws, ws, c])
    return tf.reshape(tf.transpose(x, [0, 1, 3, 2, 4, 5]), [-1, ws * ws, c])


def _window_reverse(tf, windows, ws, h, w):
    c = windows.shape[-1]
    x = tf.reshape(windows, [-1, h // ws, w // ws, ws, ws, c])
    return tf.reshape(tf.transpose(x, [0, 1, 3, 2, 4, 5]), [-1, h, w, c])


def _relative_index(ws):
    """keras.io's relative position index (NumPy, as the example computes it)."""
    coords = np.stack(np.meshgrid(np.arange(ws), np.arange(ws), indexing="ij")).reshape(2, -1)
    rel = (coords[:, :, None] - coords[:, None, :]).transpose(1, 2, 0) + (ws - 1)
    return (rel[..., 0] * (2 * ws - 1) + rel[..., 1]).astype(np.int32)


@parity(modes=True, **LOOSE)
def test_swin_shifted_window_attention_with_mask_and_relative_position_bias(tf):
    """One Swin block's attention on a 4x4 grid of width 4, window 2, shift 1, two heads: the grid
    is rolled by ``tf.roll(shift=[-1, -1], axis=[1, 2])``, partitioned into windows, attended with
    a relative position bias ``tf.gather``-ed from a learned table and the shifted-window mask
    (region labels partitioned the same way, ``tf.where(diff != 0, -100, 0)``), merged back and
    rolled back.  Two Adam steps (the second compiled): attention weights, losses, gradients of
    qkv, the bias table (its unused rows get zeros) and the projection."""
    h = w = 4
    ws, shift, heads, c = 2, 1, 2, 4
    x = np.random.RandomState(2331).randn(2, h, w, c).astype(np.float32)
    target = np.random.RandomState(2332).randn(2, h, w, c).astype(np.float32)
    wqkv = tf.Variable(init_array((c, 3 * c), 2333))
    table = tf.Variable(init_array(((2 * ws - 1) ** 2, heads), 2334, 0.1))
    wproj = tf.Variable(init_array((c, c), 2335))
    ws_vars = [wqkv, table, wproj]
    index = _relative_index(ws)
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    labels = np.zeros((1, h, w, 1), np.float32)
    cnt = 0
    for hs in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
        for wsl in (slice(0, -ws), slice(-ws, -shift), slice(-shift, None)):
            labels[:, hs, wsl, :] = cnt
            cnt += 1
    mask_windows = tf.reshape(_window_partition(tf, tf.constant(labels), ws), [-1, ws * ws])
    diff = mask_windows[:, None, :] - mask_windows[:, :, None]
    attn_mask = tf.where(diff != 0, -100.0, 0.0)
    n_win = attn_mask.shape[0]

    def block(x):
        shifted = tf.roll(x, shift=[-shift, -shift], axis=[1, 2])
        win = _window_partition(tf, shifted, ws)
        qkv = tf.reshape(tf.matmul(win, wqkv), [-1, ws * ws, 3, heads, c // heads])
        q, k, v = tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]), axis=0)
        attn = tf.matmul(q * (c // heads) ** -0.5, k, transpose_b=True)
        bias = tf.reshape(tf.gather(table, tf.reshape(index, [-1])), [ws * ws, ws * ws, heads])
        attn = attn + tf.transpose(bias, [2, 0, 1])[None]
        attn = tf.reshape(attn, [-1, n_win, heads, ws * ws, ws * ws]) + attn_mask[None, :, None]
        attn = tf.nn.softmax(tf.reshape(attn, [-1, heads, ws * ws, ws * ws]), axis=-1)
        y = tf.reshape(tf.transpose(tf.matmul(attn, v), [0, 2, 1, 3]), [-1, ws * ws, c])
        y = _window_reverse(tf, tf.matmul(y, wproj), ws, h, w)
        return tf.roll(y, shift=[shift, shift], axis=[1, 2]) + x, attn

    def step(x):
        with tf.GradientTape() as tape:
            y, attn = block(x)
            loss = tf.reduce_mean(tf.square(y - target))
        g = tape.gradient(loss, ws_vars)
        opt.apply_gradients(zip(g, ws_vars))
        return loss, g, attn

    out = [step(x), tf.function(step)(x)]
    return attn_mask, out, ws_vars


# ---------------------------------------------------------------------------
# Hand-written attention with masks; talking heads; class attention
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_scaled_dot_product_attention_with_minus_1e9_minus_inf_and_where_masks(tf):
    """The tutorial's ``scaled_dot_product_attention``: ``logits += mask * -1e9`` with a padding
    mask (one sequence entirely padded: its rows are uniform), the same by ``tf.where(mask,
    -inf, logits)`` (the fully padded rows are NaN, their gradients too), and a causal
    ``band_part`` mask; the attention weights, outputs and gradients wrt q, k, v, with NaNs shown
    by ``tf.math.is_nan`` and zeroed by ``tf.where`` before a loss over the finite rows."""
    rs = np.random.RandomState(2341)
    q, k, v = (tf.constant(rs.randn(3, 4, 4).astype(np.float32)) for _ in range(3))
    pad = tf.cast(tf.constant([[0, 0, 0, 1], [0, 0, 1, 1], [1, 1, 1, 1]]), tf.float32)[:, None, :]
    causal = 1.0 - tf.linalg.band_part(tf.ones((4, 4)), -1, 0)

    def sdpa(q, k, v, mask=None, where=None):
        logits = tf.matmul(q, k, transpose_b=True) / tf.math.sqrt(tf.cast(tf.shape(k)[-1], tf.float32))
        if mask is not None:
            logits += mask * -1e9
        if where is not None:
            logits = tf.where(where, float("-inf"), logits)
        w = tf.nn.softmax(logits, axis=-1)
        return tf.matmul(w, v), w

    out = []
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([q, k, v])
        o1, w1 = sdpa(q, k, v, mask=pad)
        o2, w2 = sdpa(q, k, v, where=tf.cast(tf.broadcast_to(pad, [3, 4, 4]), tf.bool))
        o3, w3 = sdpa(q, k, v, mask=tf.maximum(pad, causal))
        l1 = tf.reduce_sum(tf.sin(o1))
        l2 = tf.reduce_sum(tf.sin(o2))
        l2_finite = tf.reduce_sum(tf.sin(tf.where(tf.math.is_nan(o2), 0.0, o2)))
        l3 = tf.reduce_sum(tf.sin(o3))
    for loss in (l1, l2, l2_finite, l3):
        g = tape.gradient(loss, [q, k, v])
        out.append((loss, [tf.where(tf.math.is_nan(t), -7.0, t) for t in g],
                    [tf.reduce_sum(tf.cast(tf.math.is_nan(t), tf.int32)) for t in g]))
    return w1, w2, w3, o1, o3, tf.math.is_nan(o2), out


@parity(**LOOSE)
def test_talking_heads_attention_and_cait_class_attention(tf):
    """CaiT's two attention variants by hand: talking heads (the logits and the softmax weights mixed
    across heads by ``einsum`` with two learned 2x2 matrices) over patch tokens, then class
    attention where only the class token queries (``x[:, :1]``) keys and values of
    ``concat([cls, patches])`` and the patches pass through untouched.  A compiled Adam step and an
    eager one: the weights of both attentions, losses, and gradients of every Variable."""
    rs = np.random.RandomState(2351)
    x = rs.randn(2, 4, 4).astype(np.float32)
    y = _labels(2352)
    wq, wk, wv = (tf.Variable(init_array((4, 4), 2353 + i)) for i in range(3))
    pre, post = tf.Variable(init_array((2, 2), 2356) + np.eye(2, dtype=np.float32)), tf.Variable(np.eye(2, dtype=np.float32))
    cls = tf.Variable(init_array((1, 1, 4), 2357))
    cq, ckv = tf.Variable(init_array((4, 4), 2358)), tf.Variable(init_array((4, 8), 2359))
    head = tf.Variable(init_array((4, 3), 2360))
    ws = [wq, wk, wv, pre, post, cls, cq, ckv, head]
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def split(t):
        return tf.transpose(tf.reshape(t, [tf.shape(t)[0], -1, 2, 2]), [0, 2, 1, 3])

    def step(x, y):
        with tf.GradientTape() as tape:
            q, k, v = split(tf.matmul(x, wq)), split(tf.matmul(x, wk)), split(tf.matmul(x, wv))
            logits = tf.einsum("bhqd,bhkd->bhqk", q, k) * 2 ** -0.5
            logits = tf.einsum("bhqk,hg->bgqk", logits, pre)
            th = tf.einsum("bhqk,hg->bgqk", tf.nn.softmax(logits), post)
            z = tf.reshape(tf.transpose(tf.matmul(th, v), [0, 2, 1, 3]), [-1, 4, 4]) + x
            u = tf.concat([tf.tile(cls, [tf.shape(z)[0], 1, 1]), z], axis=1)
            cq_ = split(tf.matmul(u[:, :1], cq))
            kv = tf.matmul(u, ckv)
            ck, cv = split(kv[..., :4]), split(kv[..., 4:])
            ca = tf.nn.softmax(tf.matmul(cq_, ck, transpose_b=True) * 2 ** -0.5)
            cls_out = tf.reshape(tf.transpose(tf.matmul(ca, cv), [0, 2, 1, 3]), [-1, 4]) + u[:, 0]
            logits_out = tf.matmul(cls_out, head)
            loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, logits_out, from_logits=True))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, g, th, ca

    out = [tf.function(step)(x, y), step(x, y)]
    return out, ws


# ---------------------------------------------------------------------------
# Masked image modeling (MAE)
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_mae_random_masking_by_argsort_of_noise_and_loss_on_masked_patches(tf):
    """MAE's ``random_masking``: ``ids_shuffle = argsort(noise)``, ``ids_restore =
    argsort(ids_shuffle)``, the kept tokens by ``tf.gather(..., batch_dims=1)``, the binary mask
    unshuffled by the same gather; a one-layer encoder on the visible tokens, mask tokens
    appended and unshuffled, a linear decoder, and the per-patch MSE against normalised pixels
    (``norm_pix_loss``) averaged over the masked patches only.  Noise is NumPy's uniform (one
    draw per step); three steps, the last two compiled."""
    images = _images(2371)
    noises = [np.random.RandomState(2372 + i).rand(2, 16).astype(np.float32) for i in range(3)]
    enc = tf.Variable(init_array((12, 8), 2375))
    pos = tf.Variable(init_array((1, 16, 8), 2376, 0.1))
    mask_token = tf.Variable(np.zeros((1, 1, 8), np.float32))
    dec = tf.Variable(init_array((8, 12), 2377))
    ws = [enc, pos, mask_token, dec]
    opt = tf.keras.optimizers.legacy.Adam(0.02)
    keep = 4

    def step(images, noise):
        with tf.GradientTape() as tape:
            patches = _patches(tf, images)
            tokens = tf.matmul(patches, enc) + pos
            ids_shuffle = tf.argsort(noise, axis=1)
            ids_restore = tf.argsort(ids_shuffle, axis=1)
            visible = tf.gather(tokens, ids_shuffle[:, :keep], batch_dims=1)
            mask = tf.concat([tf.zeros([2, keep]), tf.ones([2, 16 - keep])], axis=1)
            mask = tf.gather(mask, ids_restore, batch_dims=1)
            latent = tf.nn.gelu(visible, approximate=True)
            full = tf.concat([latent, tf.tile(mask_token, [2, 16 - keep, 1])], axis=1)
            full = tf.gather(full, ids_restore, batch_dims=1) + pos
            pred = tf.matmul(full, dec)
            mean, var = tf.nn.moments(patches, axes=[-1], keepdims=True)
            target = (patches - mean) / (var + 1e-6) ** 0.5
            per_patch = tf.reduce_mean(tf.square(pred - target), axis=-1)
            loss = tf.reduce_sum(per_patch * mask) / tf.reduce_sum(mask)
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, g, ids_shuffle, ids_restore, mask

    compiled = tf.function(step)
    out = [(compiled if i else step)(images, n) for i, n in enumerate(noises)]
    return out, ws


@parity(**LOOSE)
def test_mae_masking_from_seeded_uniform_noise_keeps_the_counts(tf):
    """The same masking with noise from ``tf.random.uniform`` under ``tf.random.set_seed``: the
    streams differ by design (README: TF's seed rules on JAX keys), so the program compares what
    does not depend on the draw: each row keeps exactly ``keep`` patches, ``ids_restore`` inverts
    ``ids_shuffle``, the unshuffled mask has ``16 - keep`` ones per row, and the kept tokens are
    the tokens at the kept indices."""
    tf.random.set_seed(2381)
    tokens = tf.constant(np.random.RandomState(2382).randn(3, 16, 4).astype(np.float32))
    keep = 5
    noise = tf.random.uniform([3, 16])
    ids_shuffle = tf.argsort(noise, axis=1)
    ids_restore = tf.argsort(ids_shuffle, axis=1)
    visible = tf.gather(tokens, ids_shuffle[:, :keep], batch_dims=1)
    mask = tf.gather(tf.concat([tf.zeros([3, keep]), tf.ones([3, 16 - keep])], axis=1), ids_restore, batch_dims=1)
    inverse = tf.gather(ids_shuffle, ids_restore, batch_dims=1)
    kept_sum = tf.reduce_sum(tokens * (1.0 - mask)[..., None], axis=1)
    return (tf.reduce_sum(mask, axis=1), inverse, tuple(visible.shape),
            tf.reduce_max(tf.abs(kept_sum - tf.reduce_sum(visible, axis=1))) < 1e-5,
            tf.reduce_all((noise >= 0) & (noise < 1)))
