"""Numerics parity: float64 programs (tapejax side in x64 mode) and float16 / bfloat16 programs give
TF's dtypes and values (values within half-precision tolerance), and TF's errors where a half
dtype has no kernel.  The op-by-op half table is tests/test_numerics.py."""
import numpy as np

from .harness import A, parity, raises

F16 = dict(rtol=1e-2, atol=1e-2)
BF16 = dict(rtol=5e-2, atol=5e-2)


# ---------------------------------------------------------------------------------------------
# float64 (x64 mode)
# ---------------------------------------------------------------------------------------------

def _f64_model(tf):
    w = tf.Variable(np.array([[0.5, -0.25, 1.0], [1.0, 0.125, -0.5]]))
    b = tf.Variable(np.array([0.1, -0.2, 0.3]))
    x = tf.constant(np.array([[1.0, 2.0], [3.0, -1.0]]))
    labels = tf.constant(np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]))
    return w, b, x, labels


@parity(x64=True, rtol=1e-12, atol=1e-14)
def test_float64_model_gradient(tf):
    """A float64 dense + softmax cross-entropy model: loss and gradients float64, equal to TF's to
    1e-12 (no float32 anywhere on the path)."""
    w, b, x, labels = _f64_model(tf)
    with tf.GradientTape() as t:
        logits = tf.nn.bias_add(tf.matmul(x, w), b)
        h = tf.tanh(logits) + tf.math.log1p(tf.exp(logits)) * 1e-3
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels, h))
    gw, gb = t.gradient(loss, [w, b])
    return loss, gw, gb


@parity(x64=True, rtol=1e-12, atol=1e-14)
def test_float64_nested_second_order_and_jacobian(tf):
    """Nested tapes (Hessian-vector product), jacobian and a ForwardAccumulator jvp in float64."""
    x = tf.Variable(np.array([0.3, -1.1, 0.7]))
    with tf.GradientTape(persistent=True) as outer:
        with tf.GradientTape() as inner:
            y = tf.reduce_sum(tf.sin(x) * tf.exp(x))
        g = inner.gradient(y, x)
        gv = tf.reduce_sum(g * tf.constant(np.array([1.0, 2.0, -1.0])))
        z = tf.sigmoid(x) * x
    hv = outer.gradient(gv, x)
    jac = outer.jacobian(z, x)
    with tf.autodiff.ForwardAccumulator(x, tf.constant(np.array([1.0, 0.5, 0.0]))) as acc:
        u = tf.math.softplus(x) * x
    return g, hv, jac, acc.jvp(u)


@parity(x64=True, rtol=1e-12, atol=1e-14)
def test_float64_precision_is_kept(tf):
    """1 + 1e-12 survives in float64 (float32 would round it away), through a gradient too."""
    v = tf.Variable(np.float64(1.0))
    with tf.GradientTape() as t:
        q = (v + 1e-12) * (v + 1e-12)
    return q - 1.0, t.gradient(q, v)


@parity(x64=True, rtol=1e-12, atol=1e-14)
def test_float64_dtype_arguments(tf):
    """dtype=float64 arguments and a float64 dtype_hint give float64, as TF."""
    return (tf.constant(1.5, tf.float64), tf.zeros([2], tf.float64), tf.eye(2, dtype=tf.float64),
            tf.range(3, dtype=tf.float64), tf.one_hot([1], 2, dtype=tf.float64),
            tf.convert_to_tensor(1.25, dtype_hint=tf.float64), tf.cast(tf.constant([1.5]), tf.float64))


@parity(x64=True, rtol=1e-6, atol=1e-9)
def test_float64_optimizer_steps(tf):
    """Keras-2 SGD(momentum) and Adam on float64 Variables keep float64 and TF's values (the
    hyperparameters are float32 variables cast to the Variable's dtype in both)."""
    out = []
    for opt in (tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9), tf.keras.optimizers.legacy.Adam(0.01)):
        v = tf.Variable(np.array([1.0, -2.0, 0.5]))
        for _ in range(3):
            with tf.GradientTape() as t:
                loss = tf.reduce_sum(v * v * v)
            opt.apply_gradients([(t.gradient(loss, v), v)])
        out.append(tf.convert_to_tensor(v))
    return out


# ---------------------------------------------------------------------------------------------
# half precision
# ---------------------------------------------------------------------------------------------

X = np.array([[0.5, -1.25, 2.0], [1.5, 0.25, -0.75]], np.float32)


def _unary_case(tf, dtype):
    x = tf.cast(tf.constant(X), dtype)
    fs = [tf.exp, tf.math.log1p, tf.tanh, tf.sigmoid, tf.sin, tf.math.softplus, tf.nn.relu, tf.nn.elu,
          tf.nn.gelu, tf.square, tf.abs, tf.math.erf, tf.nn.softmax, tf.nn.log_softmax]
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        ys = [f(x) for f in fs] + [tf.sqrt(tf.abs(x) + 0.5), tf.math.log(tf.abs(x) + 0.5)]
    return ys, [t.gradient(y, x) for y in ys]


@parity(**F16)
def test_float16_unary_ops(tf):
    """Math and nn elementwise ops on float16: values and gradients float16, TF's values."""
    return _unary_case(tf, tf.float16)


@parity(**BF16)
def test_bfloat16_unary_ops(tf):
    """Math and nn elementwise ops on bfloat16: values and gradients bfloat16, TF's values."""
    return _unary_case(tf, tf.bfloat16)


def _mlp_case(tf, dtype):
    x = tf.cast(tf.constant(X), dtype)
    w = tf.Variable(tf.cast(tf.constant([[0.5, -0.25], [1.0, 0.5], [-0.5, 0.75]]), dtype))
    b = tf.Variable(tf.cast(tf.constant([0.1, -0.2]), dtype))
    labels = tf.cast(tf.constant([[1.0, 0.0], [0.0, 1.0]]), dtype)
    with tf.GradientTape() as t:
        logits = tf.nn.bias_add(tf.matmul(x, w), b)
        loss = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels, tf.nn.relu(logits) + logits))
        loss += tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        loss += tf.nn.l2_loss(w) * tf.cast(0.01, dtype)
    gw, gb = t.gradient(loss, [w, b])
    return loss, gw, gb


@parity(**F16)
def test_float16_dense_model(tf):
    """A float16 dense model (matmul, bias_add, relu, cross-entropies, l2_loss): gradients float16."""
    return _mlp_case(tf, tf.float16)


@parity(**BF16)
def test_bfloat16_dense_model(tf):
    """The same model in bfloat16: gradients bfloat16."""
    return _mlp_case(tf, tf.bfloat16)


def _array_reduce_case(tf, dtype):
    x = tf.cast(tf.constant(X), dtype)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        ys = [tf.reduce_sum(x, 1), tf.reduce_mean(x), tf.reduce_max(x, 0), tf.math.reduce_prod(x, 1),
              tf.math.cumsum(x, 1), tf.transpose(tf.concat([x, x * 2], 0)), tf.gather(x, [1, 0, 1], axis=1),
              tf.reshape(tf.tile(x, [1, 2]), [3, 4]), tf.pad(x, [[1, 0], [0, 1]]), tf.clip_by_value(x, -1.0, 1.0),
              tf.maximum(x, tf.zeros_like(x)), tf.where(x > 0, x, x * x), tf.math.top_k(x, 2).values]
    return ys, [t.gradient(y, x) for y in ys]


@parity(**F16)
def test_float16_array_and_reduction_ops(tf):
    """Reductions, scans and array ops on float16: results and gradients float16."""
    return _array_reduce_case(tf, tf.float16)


@parity(**BF16)
def test_bfloat16_array_and_reduction_ops(tf):
    """The same on bfloat16."""
    return _array_reduce_case(tf, tf.bfloat16)


def _mixed_case(tf, dtype):
    w = tf.Variable([[0.5, -1.0], [1.5, 0.25]])
    x = tf.cast(tf.constant([[1.0, 2.0], [-0.5, 0.75]]), dtype)
    with tf.GradientTape(persistent=True) as t:
        h = tf.matmul(x, tf.cast(w, dtype))
        loss = tf.reduce_sum(tf.nn.relu(h) * h) * tf.cast(1e-2, dtype)
    scaled = t.gradient(loss, w, output_gradients=tf.cast(1024.0, dtype))
    return loss, t.gradient(loss, w), scaled, raises(t.gradient, loss, w, output_gradients=tf.constant(2.0))


@parity(**F16)
def test_float16_mixed_precision(tf):
    """float32 Variable cast to float16 in the forward: gradient float32; loss scaling through
    output_gradients; a float32 cotangent for a float16 target is InvalidArgumentError."""
    return _mixed_case(tf, tf.float16)


@parity(**BF16)
def test_bfloat16_mixed_precision(tf):
    """The same with bfloat16."""
    return _mixed_case(tf, tf.bfloat16)


@parity(rtol=0, atol=0)
def test_half_sum_of_ones_is_exact(tf):
    """reduce_sum / reduce_mean of 10000 half ones: exact (TF does not accumulate in half here)."""
    out = []
    for d in (tf.float16, tf.bfloat16):
        ones = tf.ones([10000], d)
        out += [tf.reduce_sum(ones), tf.reduce_mean(ones), tf.reduce_max(ones)]
    return out


@parity(rtol=2e-3)
def test_float16_inverse(tf):
    """tf.linalg.inv runs in float16 on TF's CPU; tapejax too (float16 value and gradient)."""
    m = tf.constant([[2.0, 1.0], [0.5, 3.0]], tf.float16)
    with tf.GradientTape() as t:
        t.watch(m)
        y = tf.linalg.inv(m)
    return y, t.gradient(y, m)


@parity(rtol=2e-3, atol=2e-3)
def test_half_linalg_without_kernel_errors(tf):
    """No half kernel: float16 -> NotFoundError, bfloat16 -> InvalidArgumentError (expm: ValueError
    from TF's Python layer; pinv's default rcond reads NumPy's finfo first, which refuses bfloat16
    before ml_dtypes 0.7: ValueError there, and with rcond given the Svd kernel's error);
    float16 qr and inv work, bfloat16 ones are InvalidArgumentError."""
    out = []
    for d in (tf.float16, tf.bfloat16):
        m = tf.cast(tf.constant([[2.0, 0.5], [0.5, 3.0]]), d)
        out.append([raises(f, m) for f in (
            tf.linalg.cholesky, tf.linalg.slogdet, tf.linalg.logdet, tf.linalg.eigh, tf.linalg.eigvalsh,
            tf.linalg.svd, lambda a: list(tf.linalg.qr(a)), tf.linalg.pinv, tf.linalg.expm, lambda a: tf.linalg.solve(a, a),
            lambda a: tf.linalg.lstsq(a, a), lambda a: tf.linalg.cholesky_solve(a, a),
            lambda a: tf.linalg.pinv(a, rcond=0.1))])
    out.append(raises(tf.linalg.inv, tf.cast(tf.constant([[2.0, 0.5], [0.5, 3.0]]), tf.bfloat16)))
    return out


@parity(expected=(A(1.0, "float16"), A(1.0, "bfloat16"), A([0.0, 1.0], "float16")))
def test_half_non_differentiable_paths(tf):
    """Gradients of half sources stay half; argmax/floor paths are None (TF's convention)."""
    x = tf.constant([0.25, 1.5], tf.float16)
    y = tf.constant(2.0, tf.bfloat16)
    with tf.GradientTape(persistent=True) as t:
        t.watch([x, y])
        a = tf.reduce_max(x) - tf.floor(x[0])
        b = y * 1.0
        c = tf.cast(tf.argmax(x), tf.float16)
    assert t.gradient(c, x) is None
    return t.gradient(a, x)[1] + t.gradient(a, x)[0], t.gradient(b, y), t.gradient(a, x)
