"""More "why is my gradient None / zero / NaN?" mistakes (see ``test_gradient_pitfalls.py``), under
real TensorFlow 2.21 and under tapejax: watching after use, a tape never entered, odd sources and
targets, second derivatives taken outside the outer tape, ``py_function`` and ``numpy_function``,
and the values users read as wrong: ties in max, clipping at its bounds, inf and NaN from ``sqrt``
and ``norm`` at zero, ``tf.where`` over an unsafe branch; cross-entropy's labels; a saliency map
of an input never watched.
"""
import numpy as np

from .harness import parity, raises


@parity(modes=True)
def test_watch_after_use(tf):
    """tape.watch(x) after x was used: the earlier ops are not recorded (None); later ones are."""
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as tape:
        y = x * x
        tape.watch(x)
        z = x * 5.0
    return tape.gradient(y, x), tape.gradient(y + z, x)


@parity(modes=True)
def test_non_trainable_variable_watched_midway(tf):
    """A trainable=False Variable read, then watched, then read again: only the second read counts."""
    v = tf.Variable(2.0, trainable=False)
    with tf.GradientTape() as tape:
        y1 = v * v
        tape.watch(v)
        y2 = v * 3.0
    return tape.gradient(y1 + y2, v)


@parity
def test_tape_never_entered(tf):
    """A GradientTape made but never entered with `with`: gradient() raises RuntimeError."""
    x = tf.Variable(3.0)
    tape = tf.GradientTape()
    y = x * x
    return raises(tape.gradient, y, x)


@parity(modes=True)
def test_gradient_of_target_itself_and_of_an_intermediate(tf):
    """d y / d y is ones; an intermediate h is a fine source (d loss / d h)."""
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        h = x * 3.0
        loss = tf.reduce_sum(h * h)
    return tape.gradient(h, h), tape.gradient(loss, h), tape.gradient(x, x)


@parity
def test_odd_sources(tf):
    """None or a Python float among the sources: TF's errors."""
    x = tf.Variable(3.0)
    with tf.GradientTape(persistent=True) as tape:
        y = x * x
    return raises(tape.gradient, y, [x, None]), raises(tape.gradient, y, 3.0)


@parity(modes=True)
def test_integer_target(tf):
    """An int target (argmax) and a constant target: None."""
    x = tf.Variable([1.0, 3.0])
    with tf.GradientTape(persistent=True) as tape:
        i = tf.argmax(x)
        c = tf.constant(2.0)
    return tape.gradient(i, x), tape.gradient(c, x)


@parity(modes=True)
def test_second_derivative_outside_the_outer_tape(tf):
    """The inner gradient must be taken inside the outer tape: outside it, d2 is None."""
    x = tf.Variable(2.0)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = x ** 3
        dy = inner.gradient(y, x)
    good = outer.gradient(dy, x)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = x ** 3
    dy2 = inner.gradient(y, x)
    return dy, good, dy2, outer.gradient(dy2, x)


@parity(modes=True)
def test_py_function_and_numpy_function(tf):
    """tf.py_function's tf ops are recorded (2x); tf.numpy_function has no gradient."""
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        y = tf.reduce_sum(tf.py_function(lambda a: a * a, [x], tf.float32))
        z = tf.reduce_sum(tf.numpy_function(lambda a: a * a, [x], tf.float32))
    return y, tape.gradient(y, x), z, raises(tape.gradient, z, x)


@parity(modes=True)
def test_ties_in_max_and_maximum(tf):
    """reduce_max splits the gradient among ties; maximum gives a tie to its first argument."""
    x = tf.Variable([2.0, 2.0, 1.0])
    a, b = tf.Variable(1.0), tf.Variable(1.0)
    with tf.GradientTape(persistent=True) as tape:
        m = tf.reduce_max(x)
        mm = tf.maximum(a, b)
        mn = tf.minimum(a, b)
    return tape.gradient(m, x), tape.gradient(mm, [a, b]), tape.gradient(mn, [a, b])


@parity(modes=True)
def test_clip_by_value_at_and_beyond_its_bounds(tf):
    """clip_by_value passes the gradient inside and at its bounds, zeros beyond: not None."""
    x = tf.Variable([-2.0, -1.0, 0.0, 1.0, 2.0])
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.clip_by_value(x, -1.0, 1.0) * tf.constant([1.0, 2.0, 3.0, 4.0, 5.0]))
    return tape.gradient(y, x)


@parity(modes=True)
def test_nan_gradients_at_zero(tf):
    """sqrt at 0 gives inf, norm at 0 gives NaN, abs at 0 gives 0.  tf.where over sqrt of a negative
    gives 0 at the unselected -1 in TF (its Sqrt gradient is 0 where the incoming gradient is 0, where
    a plain chain rule gives 0 * NaN), as the double-where idiom does."""
    z = tf.Variable([0.0, 0.0])
    x = tf.Variable([-1.0, 4.0])
    with tf.GradientTape(persistent=True) as tape:
        s = tf.reduce_sum(tf.sqrt(z))
        n = tf.norm(z)
        a = tf.reduce_sum(tf.abs(z))
        w = tf.reduce_sum(tf.where(x > 0, tf.sqrt(x), 0.0))
        safe = tf.reduce_sum(tf.where(x > 0, tf.sqrt(tf.where(x > 0, x, 1.0)), 0.0))
    return [tape.gradient(t, v) for t, v in ((s, z), (n, z), (a, z), (w, x), (safe, x))]


@parity
def test_output_gradients_of_the_wrong_shape(tf):
    """output_gradients whose shape does not match the target: TF's error class."""
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        y = x * x
    return raises(tape.gradient, y, x, output_gradients=tf.constant([1.0, 2.0, 3.0]))


@parity(modes=True)
def test_sparse_labels_and_soft_labels(tf):
    """Cross-entropy: int labels get None; soft (float) labels get a gradient too."""
    logits = tf.Variable([[1.0, 2.0, 0.5]])
    soft = tf.Variable([[0.2, 0.7, 0.1]])
    labels = tf.constant([1])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(labels)
        sparse = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
        dense = tf.reduce_sum(tf.nn.softmax_cross_entropy_with_logits(labels=soft, logits=logits))
    return (tape.gradient(sparse, [logits, labels]), tape.gradient(dense, [logits, soft]))


@parity(modes=True)
def test_saliency_of_an_input_not_watched(tf):
    """The gradient of a score w.r.t. an input image: None until the input is converted and watched."""
    w = tf.Variable(np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2))
    img = np.array([[0.5, -1.0, 2.0]], np.float32)
    with tf.GradientTape(persistent=True) as tape:
        score = tf.reduce_sum(tf.matmul(img, w))
    x = tf.convert_to_tensor(img)
    with tf.GradientTape() as tape2:
        tape2.watch(x)
        score2 = tf.reduce_sum(tf.matmul(x, w))
    return tape.gradient(score, w), raises(tape.gradient, score, img), tape2.gradient(score2, x)


# -- tf.function, dtypes and sparse gradients -----------------------------------------------------


@parity
def test_numpy_and_float_inside_tf_function(tf):
    """Inside a tf.function a tensor has no value yet: .numpy() raises AttributeError; the eager
    step it was copied from ran."""
    v = tf.Variable(2.0)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = v * v
            host = loss.numpy()
        return tape.gradient(loss, v), host

    return raises(step)


@parity
def test_variable_created_on_every_call_of_a_tf_function(tf):
    """A tf.Variable made unconditionally inside a tf.function raises ValueError at the first call
    (TF traces again to check that no Variable is made after the first trace); made once, outside,
    it works."""
    @tf.function
    def f(x):
        w = tf.Variable(2.0)
        with tf.GradientTape() as tape:
            y = w * x
        return tape.gradient(y, w)

    w_out = tf.Variable(2.0)

    @tf.function
    def g(x):
        with tf.GradientTape() as tape:
            y = w_out * x
        return tape.gradient(y, w_out)

    return raises(f, tf.constant(3.0)), g(tf.constant(3.0))


@parity(modes=True)
def test_gather_gives_indexed_slices(tf):
    """The gradient of a gather from a Variable is an IndexedSlices (no .numpy(); convert it);
    a slice's gradient is a dense Tensor."""
    v = tf.Variable([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    with tf.GradientTape(persistent=True) as tape:
        g = tf.reduce_sum(tf.gather(v, [0, 2, 0]))
        s = tf.reduce_sum(v[1:])
    gg, gs = tape.gradient(g, v), tape.gradient(s, v)
    return (type(gg).__name__, hasattr(gg, "numpy"), tf.convert_to_tensor(gg), type(gs).__name__ == "IndexedSlices", gs)


@parity(x64=True)
def test_mixed_float_dtypes(tf):
    """A float64 constant times a float32 Variable: TF's error (no automatic promotion)."""
    v = tf.Variable(2.0)
    c = tf.constant(np.float64(3.0))
    with tf.GradientTape():
        err = raises(lambda: v * c)
    return err


@parity(modes=True)
def test_log_of_softmax_against_log_softmax(tf):
    """log(softmax(z)) of large logits underflows to -inf with an inf/NaN gradient; log_softmax does not."""
    z = tf.Variable([[0.0, 200.0]])
    with tf.GradientTape(persistent=True) as tape:
        naive = tf.math.log(tf.nn.softmax(z))[0, 0]
        stable = tf.nn.log_softmax(z)[0, 0]
    return naive, tape.gradient(naive, z), stable, tape.gradient(stable, z)


@parity
def test_sources_as_a_generator(tf):
    """A generator of Variables as sources: TF's error (pass a list)."""
    a, b = tf.Variable(1.0), tf.Variable(2.0)
    with tf.GradientTape(persistent=True) as tape:
        y = a * b
    return raises(tape.gradient, y, (v for v in [a, b])), tape.gradient(y, [a, b])


@parity(modes=True)
def test_numpy_target(tf):
    """The loss turned into NumPy (or a Python float) before gradient(): TF's AttributeError."""
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_sum(v * v)
    return (raises(tape.gradient, loss.numpy(), v), raises(tape.gradient, float(loss), v),
            tape.gradient(loss, v))


# -- state changing around the tape -------------------------------------------------------------------


@parity(modes=True)
def test_assign_between_forward_and_gradient(tf):
    """Assigning a Variable after the forward, before gradient(): the gradient uses the values the
    forward read (2 * 3), not the new one."""
    v = tf.Variable(3.0)
    with tf.GradientTape() as tape:
        y = v * v
    v.assign(10.0)
    return tape.gradient(y, v), v


@parity(modes=True)
def test_in_place_add_on_a_variable(tf):
    """v += 1 on a tf.Variable raises RuntimeError (use v.assign_add(1.0)); assign_add inside the
    tape is not differentiable, but the reads after it are."""
    v = tf.Variable(2.0)

    def bump():
        nonlocal v
        v += 1.0

    with tf.GradientTape(persistent=True) as tape:
        err = raises(bump)
        v.assign_add(1.0)
        y = v * v
    return err, isinstance(v, tf.Variable), v, tape.gradient(y, v)


@parity(modes=True)
def test_assigned_variable_as_the_target(tf):
    """A Variable assigned inside the tape is a target with no gradient to what was assigned."""
    v, u = tf.Variable(3.0), tf.Variable(0.0)
    with tf.GradientTape(persistent=True) as tape:
        u.assign(v * 2.0)
    return tape.gradient(u, v), tape.gradient(u, u)


@parity(modes=True)
def test_reset_mid_block(tf):
    """tape.reset() forgets what was recorded: a target made before it has no gradient."""
    x = tf.Variable(3.0)
    with tf.GradientTape(persistent=True) as tape:
        early = x * x
        tape.reset()
        late = x * 4.0
    return tape.gradient(early, x), tape.gradient(late, x)


@parity(modes=True)
def test_unconnected_zero_for_int_and_cut_sources(tf):
    """ZERO for a source cut by an int cast gives zeros; an int Variable source stays None."""
    x = tf.Variable([1.5, 2.5])
    i = tf.Variable([1, 2])
    with tf.GradientTape(persistent=True) as tape:
        y = tf.reduce_sum(tf.cast(tf.cast(x, tf.int32), tf.float32)) + tf.reduce_sum(tf.cast(i, tf.float32))
    return tape.gradient(y, [x, i], unconnected_gradients=tf.UnconnectedGradients.ZERO)


@parity
def test_none_among_the_targets(tf):
    """None inside a list of targets: TF's error."""
    x = tf.Variable(3.0)
    with tf.GradientTape() as tape:
        y = x * x
    return raises(tape.gradient, [y, None], x)


@parity(modes=True)
def test_outer_tape_not_watching_the_inner_source(tf):
    """A tensor watched by the inner tape only: the outer tape gives None for it."""
    x = tf.constant(2.0)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = x ** 3
        dy = inner.gradient(y, x)
    return dy, outer.gradient(dy, x)


# -- conversions that keep or lose the tape ------------------------------------------------------------


@parity(modes=True)
def test_constant_of_a_tensor_and_of_a_variable(tf):
    """tf.constant(t) of an eager Tensor, tf.identity, v.value(), v.read_value() keep the gradient;
    tf.Variable(v) (a copy), v.numpy() and tf.stop_gradient(v) lose it."""
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape(persistent=True) as tape:
        t = v * 1.0
        kept = [tf.constant(t), tf.identity(v), v.value(), v.read_value(), tf.convert_to_tensor(v)]
        copy = tf.Variable(v)
        lost = [copy * 1.0, tf.constant(v.numpy()), tf.stop_gradient(v)]
        kept = [tf.reduce_sum(k * k) for k in kept]
        lost = [tf.reduce_sum(x * x) for x in lost]
        own = tf.reduce_sum(copy * copy)
    return [tape.gradient(k, v) for k in kept], [tape.gradient(x, v) for x in lost], tape.gradient(own, copy)


@parity(modes=True)
def test_accumulating_gradients_with_a_none(tf):
    """Gradient accumulation, clipping and a hand-written update over a list with a None gradient:
    Tensor + None, tf.clip_by_norm(None), tf.norm(None), tf.reduce_sum(None) and b - lr * None raise
    TF's ValueError; clip_by_global_norm ignores the None."""
    a, b = tf.Variable([3.0, 4.0]), tf.Variable(1.0)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(a * a)
    grads = tape.gradient(y, [a, b])
    accum = [tf.zeros_like(a), tf.zeros_like(b)]
    clipped, norm = tf.clip_by_global_norm(grads, 5.0)
    return (grads, raises(lambda: [x + g for x, g in zip(accum, grads)]), clipped, norm,
            raises(lambda: [tf.clip_by_norm(g, 1.0) for g in grads]), raises(tf.norm, grads[1]),
            raises(tf.reduce_sum, grads[1]), raises(lambda: b - 0.1 * tf.convert_to_tensor(1.0) * grads[1]))


@parity(modes=True)
def test_none_gradient_returned_from_a_tf_function(tf):
    """A None gradient inside a tf.function comes out as None (a Python value), beside a real one."""
    w, u = tf.Variable(2.0), tf.Variable(5.0)
    c = tf.constant(3.0)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            y = w * c
        return tape.gradient(y, [w, u, c])

    return step()


@parity(modes=True)
def test_unconnected_jacobians(tf):
    """jacobian of an unconnected source is None (zeros with ZERO); batch_jacobian gives zeros even
    with the default, as TF's."""
    x = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    u = tf.Variable([[0.0, 0.0], [0.0, 0.0]])
    with tf.GradientTape(persistent=True) as tape:
        y = x * x
    return (tape.jacobian(y, u), tape.jacobian(y, u, unconnected_gradients=tf.UnconnectedGradients.ZERO),
            tape.batch_jacobian(y, u), tape.batch_jacobian(y, x))
