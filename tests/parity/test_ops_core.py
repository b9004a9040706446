"""Core ops: value and gradient (with broadcasting and a non-uniform cotangent) under TF and tapejax."""

import numpy as np

from .harness import parity


def _cotangent(tf, y):
    """A deterministic non-uniform cotangent shaped like y: 0.1, 0.2, ... (float32)."""
    shape = tuple(y.shape)
    n = int(np.prod(shape)) if shape else 1
    return tf.constant((np.arange(1, n + 1, dtype=np.float32) * 0.1).reshape(shape))


def vg(tf, fn, *args):
    """Value of fn(*args) and its gradient wrt every (float) arg, under an elementwise cotangent.

    Python lists/floats in args become float32 constants and are watched.
    Returns (y, [vjp of the cotangent wrt each arg]).
    """
    xs = [tf.constant(a, dtype=tf.float32) for a in args]
    with tf.GradientTape() as t:
        for x in xs:
            t.watch(x)
        y = fn(*xs)
    return y, t.gradient(y, xs, output_gradients=_cotangent(tf, y))


M23 = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
V3 = [0.5, -1.0, 2.0]
C21 = [[2.0], [-3.0]]
P23 = [[0.5, 1.0, 1.5], [2.0, 2.5, 3.0]]  # positive, for sqrt / log / pow


# --------------------------------------------------------------------------
# binary elementwise ops with broadcasting
# --------------------------------------------------------------------------

@parity
def test_add_broadcast(tf):
    """add: [2,3]+[3], [2,1]+[3], and Python scalar + tensor; gradients sum over broadcast axes."""
    return (vg(tf, tf.add, M23, V3), vg(tf, tf.add, C21, V3),
            vg(tf, lambda x: tf.add(x, 1.0), V3), vg(tf, lambda x: 2.0 + x, M23))


@parity
def test_subtract_broadcast(tf):
    """subtract and the - operator with broadcasting both ways."""
    return (vg(tf, tf.subtract, M23, V3), vg(tf, tf.subtract, V3, C21), vg(tf, lambda a, b: a - b, C21, M23),
            vg(tf, lambda x: 1.0 - x, V3))


@parity
def test_multiply_broadcast(tf):
    """multiply and * with broadcasting, scalars, and x * x (both inputs the same tensor)."""
    return (vg(tf, tf.multiply, M23, V3), vg(tf, tf.multiply, C21, V3), vg(tf, lambda x: x * x, V3),
            vg(tf, lambda x: tf.multiply(3.0, x), M23), vg(tf, lambda a, b: a * b, 2.0, V3))


@parity
def test_divide_broadcast(tf):
    """divide and / with broadcasting; gradient wrt numerator and denominator."""
    return (vg(tf, tf.divide, M23, V3), vg(tf, tf.divide, V3, C21), vg(tf, lambda a, b: a / b, M23, 2.0),
            vg(tf, lambda x: 1.0 / x, V3))


@parity
def test_pow_broadcast(tf):
    """pow and ** with tensor exponent (broadcast), Python exponents, and a Python base."""
    return (vg(tf, tf.pow, P23, [1.0, 2.0, 0.5]), vg(tf, lambda x: x ** 2, V3), vg(tf, lambda x: x ** 3.0, V3),
            vg(tf, lambda x: tf.pow(x, 0.5), P23), vg(tf, lambda x: tf.pow(2.0, x), V3),
            vg(tf, lambda a, b: a ** b, [[2.0], [3.0]], [1.0, 2.0]))


# --------------------------------------------------------------------------
# unary ops
# --------------------------------------------------------------------------

@parity
def test_negative(tf):
    """negative and unary -."""
    return vg(tf, tf.negative, M23), vg(tf, lambda x: -x, V3)


@parity
def test_square_sqrt(tf):
    """square and sqrt values and gradients."""
    return vg(tf, tf.square, M23), vg(tf, tf.sqrt, P23)


@parity
def test_exp_log(tf):
    """exp and tf.math.log (TF2 has no top-level tf.log) values and gradients."""
    return vg(tf, tf.exp, V3), vg(tf, tf.math.log, P23)


@parity
def test_tanh_sigmoid(tf):
    """tanh and sigmoid values and gradients."""
    return vg(tf, tf.tanh, M23), vg(tf, tf.sigmoid, V3), vg(tf, tf.tanh, [[-20.0, 20.0]]), vg(tf, tf.sigmoid, [[-30.0, 30.0]])


@parity
def test_identity(tf):
    """identity passes value and gradient through."""
    return vg(tf, tf.identity, M23)


@parity(needs="math")
def test_math_namespace_aliases(tf):
    """tf.math.* names for the core ops give the same values and gradients."""
    return (vg(tf, tf.math.add, M23, V3), vg(tf, tf.math.multiply, M23, V3), vg(tf, tf.math.square, V3),
            vg(tf, tf.math.sqrt, P23), vg(tf, tf.math.exp, V3), vg(tf, tf.math.log, P23), vg(tf, tf.math.tanh, V3),
            vg(tf, tf.math.sigmoid, V3), vg(tf, tf.math.reduce_sum, M23), vg(tf, tf.math.reduce_mean, M23),
            vg(tf, tf.math.negative, V3), vg(tf, tf.math.divide, M23, V3), vg(tf, tf.math.subtract, M23, V3),
            vg(tf, tf.math.pow, P23, V3))


# --------------------------------------------------------------------------
# matmul
# --------------------------------------------------------------------------

@parity
def test_matmul(tf):
    """matmul [2,3]@[3,2] and the @ operator; gradients wrt both inputs."""
    b = [[1.0, -1.0], [0.5, 2.0], [-2.0, 1.0]]
    return vg(tf, tf.matmul, M23, b), vg(tf, lambda x, y: x @ y, b, M23)


@parity
def test_matmul_transpose_flags(tf):
    """matmul with transpose_a / transpose_b."""
    return (vg(tf, lambda a, b: tf.matmul(a, b, transpose_b=True), M23, P23),
            vg(tf, lambda a, b: tf.matmul(a, b, transpose_a=True), M23, P23))


@parity
def test_matmul_batched(tf):
    """Batched matmul [2,2,3]@[2,3,2]."""
    a = np.arange(12, dtype=np.float32).reshape(2, 2, 3) * 0.1
    b = np.arange(12, dtype=np.float32).reshape(2, 3, 2) * -0.2 + 1.0
    return vg(tf, tf.matmul, a.tolist(), b.tolist())


# --------------------------------------------------------------------------
# reductions
# --------------------------------------------------------------------------

@parity
def test_reduce_sum_axes(tf):
    """reduce_sum over all, axis 0, 1, -1, [0, 1], and keepdims=True."""
    return (vg(tf, tf.reduce_sum, M23), vg(tf, lambda x: tf.reduce_sum(x, axis=0), M23),
            vg(tf, lambda x: tf.reduce_sum(x, 1), M23), vg(tf, lambda x: tf.reduce_sum(x, axis=-1), M23),
            vg(tf, lambda x: tf.reduce_sum(x, axis=[0, 1]), M23),
            vg(tf, lambda x: tf.reduce_sum(x, axis=1, keepdims=True), M23),
            vg(tf, lambda x: tf.reduce_sum(x, keepdims=True), M23))


@parity
def test_reduce_mean_axes(tf):
    """reduce_mean over all, axis 0, 1, -1, (0, 1), and keepdims=True."""
    return (vg(tf, tf.reduce_mean, M23), vg(tf, lambda x: tf.reduce_mean(x, axis=0), M23),
            vg(tf, lambda x: tf.reduce_mean(x, 1), M23), vg(tf, lambda x: tf.reduce_mean(x, axis=-1), M23),
            vg(tf, lambda x: tf.reduce_mean(x, axis=(0, 1)), M23),
            vg(tf, lambda x: tf.reduce_mean(x, axis=0, keepdims=True), M23))


@parity
def test_reduce_int_dtypes(tf):
    """reduce_sum / reduce_mean of int32 stay int32 (mean truncates)."""
    x = tf.constant([[1, 2], [3, 6]])
    return tf.reduce_sum(x), tf.reduce_mean(x), tf.reduce_mean(x, axis=0), tf.reduce_sum(x, axis=1)


# --------------------------------------------------------------------------
# cast, reshape
# --------------------------------------------------------------------------

@parity(rtol=1e-3, atol=1e-3)
def test_cast_float16_roundtrip(tf):
    """cast float32 -> float16 -> float32 value and gradient."""
    return vg(tf, lambda x: tf.cast(tf.cast(x, tf.float16), tf.float32) * 3.0, V3)


@parity
def test_cast_to_int_values_and_none_gradient(tf):
    """cast to int32 truncates toward zero, int -> float32 works; a path through int gives None."""
    x = tf.constant([1.7, -1.7, 2.5])
    with tf.GradientTape() as t:
        t.watch(x)
        i = tf.cast(x, tf.int32)
        y = tf.cast(i, tf.float32)
    return i, tf.cast(tf.constant([1, 2]), tf.float32), tf.cast(tf.constant([0.0, 2.0]), tf.bool), \
        tf.cast(tf.constant([True, False]), tf.float32), t.gradient(y, x)


@parity
def test_cast_dtype_keyword_and_string(tf):
    """cast(x, dtype=...) and cast(x, 'float16') string dtypes."""
    x = tf.constant([1.5, 2.5])
    return tf.cast(x, dtype=tf.int32), tf.cast(x, "float16"), tf.cast(tf.constant([1, 2]), dtype="float32")


@parity
def test_reshape(tf):
    """reshape with explicit shape, -1, to scalar-ish [6], and shape= keyword; gradient reshapes back."""
    return (vg(tf, lambda x: tf.reshape(x, [3, 2]), M23), vg(tf, lambda x: tf.reshape(x, [-1]), M23),
            vg(tf, lambda x: tf.reshape(x, shape=[1, 6]), M23), vg(tf, lambda x: tf.reshape(x, (3, -1)) * x[0, 0], M23))


# --------------------------------------------------------------------------
# sparse_softmax_cross_entropy_with_logits
# --------------------------------------------------------------------------

LOGITS = [[1.0, 2.0, 3.0], [1.0, 5.0, 3.0]]


@parity
def test_sparse_softmax_ce(tf):
    """sparse_softmax_cross_entropy_with_logits value and gradient wrt logits (keyword, positional, list labels)."""
    f = tf.nn.sparse_softmax_cross_entropy_with_logits
    lab = tf.constant([0, 2])
    return (vg(tf, lambda lg: f(labels=lab, logits=lg), LOGITS), vg(tf, lambda lg: f(lab, lg), LOGITS),
            vg(tf, lambda lg: f(labels=[1, 1], logits=lg), LOGITS))


@parity
def test_sparse_softmax_ce_ranks(tf):
    """1-D logits with a scalar label, 3-D logits with 2-D labels."""
    f = tf.nn.sparse_softmax_cross_entropy_with_logits
    l3 = np.arange(12, dtype=np.float32).reshape(2, 2, 3) * 0.3
    return (vg(tf, lambda lg: f(labels=tf.constant(1), logits=lg), [1.0, 2.0, 0.5]),
            vg(tf, lambda lg: f(labels=tf.constant([[0, 1], [2, 0]]), logits=lg), l3.tolist()))


@parity
def test_sparse_softmax_ce_extreme_logits(tf):
    """Large logits stay finite (log-sum-exp), gradient is softmax - onehot."""
    f = tf.nn.sparse_softmax_cross_entropy_with_logits
    return vg(tf, lambda lg: f(labels=tf.constant([0, 1]), logits=lg), [[1000.0, 0.0, -1000.0], [-50.0, 50.0, 0.0]])


@parity(x64=True)
def test_sparse_softmax_ce_int64_labels(tf):
    """int64 labels work like int32 (tapejax: x64 mode)."""
    f = tf.nn.sparse_softmax_cross_entropy_with_logits
    return vg(tf, lambda lg: f(labels=tf.constant([0, 1], tf.int64), logits=lg), LOGITS)


# --------------------------------------------------------------------------
# compositions and higher order
# --------------------------------------------------------------------------

@parity
def test_mlp_composition(tf):
    """A 2-layer tanh MLP with mean softmax-CE loss: value and gradients for all Variables."""
    x = tf.constant([[0.1, 0.2], [0.5, -0.3], [1.0, 0.0]])
    w1 = tf.Variable([[0.1, -0.2, 0.3], [0.4, 0.5, -0.6]])
    b1 = tf.Variable([0.01, 0.02, 0.03])
    w2 = tf.Variable([[0.2, -0.1], [0.3, 0.1], [-0.5, 0.4]])
    b2 = tf.Variable([0.0, 0.1])
    with tf.GradientTape() as t:
        h = tf.tanh(tf.matmul(x, w1) + b1)
        logits = h @ w2 + b2
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=[0, 1, 1], logits=logits))
    return loss, t.gradient(loss, [w1, b1, w2, b2])


@parity
def test_second_derivatives_of_unary_ops(tf):
    """Nested tapes: second derivatives of exp, log, sqrt, tanh, sigmoid, square, pow, divide."""
    fns = [tf.exp, tf.math.log, tf.sqrt, tf.tanh, tf.sigmoid, tf.square,
           lambda x: tf.pow(x, 3.0), lambda x: tf.divide(1.0, x)]
    out = []
    for f in fns:
        x = tf.constant([0.5, 1.5])
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = f(x)
            g = t1.gradient(y, x)
        out.append((g, t2.gradient(g, x)))
    return out


# --------------------------------------------------------------------------
# Python numbers and Variables on the ops' fast paths (tapejax/ops/_registry.py)
# --------------------------------------------------------------------------

@parity
def test_python_numbers_take_the_tensor_dtype(tf):
    """A Python number next to a tensor converts to the tensor's dtype (bfloat16, int32); a signed
    zero keeps its sign; the same number used twice gives the same result; clip_by_value's Python
    bounds pass the gradient at the bounds."""
    b = tf.constant([1.5, -2.0], dtype=tf.bfloat16)
    i = tf.constant([3, -4])
    x = tf.constant([-1.0, -0.5, 0.0, 0.5, 1.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.clip_by_value(x, -0.5, 0.5) * 0.25 + x * 0.25
    return (b * 0.1, 0.1 * b, i * 2, 2 - i, x * -0.0, 1.0 / (x * -0.0 - 1.0), y,
            t.gradient(y, x))


@parity
def test_matmul_with_variables_records_each_read(tf):
    """matmul reading a Variable twice (a Dense layer applied twice): both reads count."""
    w = tf.Variable([[0.5, -1.0], [2.0, 0.25]])
    x = tf.constant([[1.0, 2.0]])
    with tf.GradientTape() as t:
        y = tf.reduce_sum(tf.matmul(tf.matmul(x, w), w))
    return y, t.gradient(y, w)
