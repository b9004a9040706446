"""cond / while_loop / scan / foldl: TF's results and gradients, eager and inside tapejax.function.

Oracles: the same program under TensorFlow (values checked by running TF
2.21, stated inline) and the eager run of the same tapejax program.
"""
import numpy as np
import pytest

import tapejax as tf


def _program(x, v, tf=tf):
    """Every control-flow op, closing over a watched Tensor and a Variable."""
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.cond(x > 0, lambda: x * v * 3.0, lambda: x * x)
        z = tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * x),
                          (tf.constant(0), tf.constant(1.0)), maximum_iterations=5)[1]
        w = tf.scan(lambda a, e: a * e + v, tf.stack([x, x, 2.0 * x]))
        q = tf.foldl(lambda a, e: a + e * x, tf.constant([1.0, 2.0, 3.0]), initializer=tf.constant(0.5))
        tot = y + z + tf.reduce_sum(w) + q
    gx, gv = t.gradient(tot, [x, v])
    return tot, gx, gv


@pytest.mark.parametrize("xv, expected", [
    # TensorFlow 2.21 on the same program: (tot, d/dx, d/dv)
    (1.5, (42.375, 40.25, 9.5)),
    (-2.0, (-33.5, 39.0, -2.0)),
])
def test_eager_and_compiled_match_tensorflow(xv, expected):
    v = tf.Variable(2.0)
    eager = _program(tf.constant(xv), v)
    compiled = tf.function(_program)(tf.constant(xv), v)
    for e, c, want in zip(eager, compiled, expected):
        np.testing.assert_allclose(e.numpy(), want, rtol=1e-6)
        np.testing.assert_allclose(c.numpy(), want, rtol=1e-6)


def test_tensorflow_oracle_for_the_program():
    tensorflow = pytest.importorskip("tensorflow")
    v = tensorflow.Variable(2.0)
    got = _program(tensorflow.constant(1.5), v, tensorflow)
    np.testing.assert_allclose([g.numpy() for g in got], (42.375, 40.25, 9.5), rtol=1e-6)


def test_tf_signatures_and_values():
    # values printed by TF 2.21 for the same calls
    assert tf.cond(tf.constant(True), lambda: 1.0, lambda: 2.0) == 1.0   # TF eager: the branch's value as is
    i, s = tf.while_loop(lambda i, s: i < 3, lambda i, s: (i + 1, s * 2.0), [0, 1.0])
    assert (i.numpy(), s.numpy()) == (3, 8.0) and i.dtype == tf.int32
    np.testing.assert_array_equal(tf.scan(lambda a, x: a + x, tf.constant([1.0, 2.0, 3.0])).numpy(),
                                  [1.0, 3.0, 6.0])
    np.testing.assert_array_equal(
        tf.scan(lambda a, x: a + x, tf.constant([1.0, 2.0, 3.0]), initializer=tf.constant(10.0)).numpy(),
        [11.0, 13.0, 16.0])
    assert tf.foldl(lambda a, x: a + x, tf.constant([1.0, 2.0, 3.0])).numpy() == 6.0
    assert tf.foldl(lambda a, x: a * x, tf.constant([1.0, 2.0, 3.0]), initializer=2.0).numpy() == 12.0
    np.testing.assert_array_equal(
        tf.scan(lambda a, x: a + x, tf.constant([1.0, 2.0, 3.0]), reverse=True).numpy(), [6.0, 5.0, 3.0])
    assert tf.foldr(lambda a, x: a - x, tf.constant([1.0, -2.0, 4.0])).numpy() == 5.0
    s1, s2 = tf.scan(lambda a, e: (a[0] + e[0], a[1] * e[1]), (tf.constant([1.0, 2.0]), tf.constant([3.0, 4.0])))
    np.testing.assert_array_equal(s1.numpy(), [1.0, 3.0])
    np.testing.assert_array_equal(s2.numpy(), [3.0, 12.0])


def test_compiled_control_flow_matches_eager_values():
    def f(x, n):
        i, acc = tf.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, a + tf.cast(i, tf.float32) * x),
                               (tf.constant(0), tf.zeros_like(x)))
        s = tf.scan(lambda a, e: a + e, x)
        r = tf.scan(lambda a, e: a * 0.5 + e, x, reverse=True)
        c = tf.cond(tf.reduce_sum(x) > 0, lambda: s * 2.0, lambda: s - 1.0)
        return i, acc, c, r, tf.foldr(lambda a, e: a - e, x)

    x = tf.constant([1.0, -2.0, 4.0])
    cf = tf.function(f)
    for n in (tf.constant(0), tf.constant(4)):
        for a, b in zip(f(x, n), cf(x, n)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    assert cf.experimental_get_tracing_count() == 1


def test_while_loop_gradient_in_function_needs_maximum_iterations_and_matches_eager():
    def f(x):
        with tf.GradientTape() as t:
            t.watch(x)
            y = tf.while_loop(lambda s: s < 100.0, lambda s: s * x, [x], maximum_iterations=20)[0]
        return y, t.gradient(y, x)

    x = tf.constant(3.0)
    ye, ge = f(x)
    yc, gc = tf.function(f)(x)
    assert ye.numpy() == yc.numpy() == 243.0   # 3^5
    np.testing.assert_allclose(gc.numpy(), ge.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gc.numpy(), 5 * 81.0, rtol=1e-6)


def test_repeated_eager_calls_reuse_one_compiled_gradient(fresh_cache):
    v = tf.Variable(1.0)

    @tf.function
    def g(x):
        with tf.GradientTape() as t:
            y = tf.foldl(lambda a, e: a + e * v, x)
        return t.gradient(y, v)

    for k in range(3):
        np.testing.assert_allclose(g(tf.constant([1.0, 2.0, 3.0 + k])).numpy(), 5.0 + k)
    x = tf.constant([1.0, 2.0, 3.0])
    for _ in range(3):
        with tf.GradientTape() as t:
            y = tf.scan(lambda a, e: a + e * v, x)
        t.gradient(y, v)
    info = tf.cache_info()
    assert info.misses == 1 + 1 and info.hits >= 2


def test_branch_structure_errors():
    @tf.function
    def bad(x):
        return tf.cond(x > 0, lambda: x, lambda: (x, x))

    with pytest.raises(ValueError, match="same nested structure"):
        bad(tf.constant(1.0))

    @tf.function
    def bad_shape(x):
        return tf.cond(x[0] > 0, lambda: x, lambda: x[:1])

    with pytest.raises(ValueError, match="same shape and dtype"):
        bad_shape(tf.constant([1.0, 2.0]))
    with pytest.raises(TypeError, match="true_fn must be callable"):
        tf.cond(True, None, lambda: 1.0)
    with pytest.raises(ValueError, match="rank 0"):
        tf.cond(tf.constant([True, False]), lambda: 1.0, lambda: 2.0)
    with pytest.raises(ValueError, match="body must return"):
        tf.function(lambda x: tf.while_loop(lambda s: s < 3.0, lambda s: tf.stack([s, s]), [x]))(
            tf.constant(1.0))
    with pytest.raises(ValueError, match="same first dimension"):
        tf.scan(lambda a, e: a, (tf.constant([1.0, 2.0]), tf.constant([1.0])), initializer=(0.0, 0.0))


def test_python_if_inside_a_branch_names_the_fix():
    def f(x):
        def branch():
            if x > 1:
                return x
            return -x
        return tf.cond(x > 0, branch, lambda: x)

    with pytest.raises(tf.errors.OperatorNotAllowedInGraphError, match="tapejax.cond"):
        tf.function(f, autograph=False)(tf.constant(1.0))
    # AutoGraph converts the nested function too (TF 2.21 gives -0.5 and 2.0)
    g = tf.function(f)
    assert (g(tf.constant(0.5)).numpy(), g(tf.constant(2.0)).numpy()) == (-0.5, 2.0)


def test_variables_assigned_inside_bodies_are_carried():
    """Values TF 2.21 gives for the same calls (stateful cond / foldl / while_loop)."""
    v = tf.Variable(1.0)

    @tf.function
    def f(x):
        return tf.cond(x > 0, lambda: v.assign_add(1.0) * 1.0, lambda: x)

    assert (f(tf.constant(1.0)).numpy(), v.numpy()) == (2.0, 2.0)
    assert (f(tf.constant(-3.0)).numpy(), v.numpy()) == (-3.0, 2.0)
    a = tf.foldl(lambda a, e: a + v.assign(e) * 1.0, tf.constant([1.0, 2.0]), initializer=tf.constant(0.0))
    assert (a.numpy(), v.numpy()) == (3.0, 2.0)
    n = tf.Variable(0)

    @tf.function
    def g(k):
        return tf.while_loop(lambda i: i < k, lambda i: (n.assign_add(i), i + 1)[1], [tf.constant(0)])

    assert g(tf.constant(4))[0].numpy() == 4 and n.numpy() == 6
    assert g.experimental_get_tracing_count() == 1

    @tf.function
    def h(x):
        return tf.cond(x > 0, lambda: tf.Variable(x * 2.0) * x, lambda: x)

    with pytest.raises(ValueError, match="created inside the true_fn"):
        h(tf.constant(1.0))


def test_back_prop_false_is_ignored_as_in_tf2():
    """TF 2.21 (eager): back_prop=False is deprecated and gradients still flow: 32.0, 4.0, 3.0."""
    x = tf.constant(2.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        a = tf.while_loop(lambda s: s < 10.0, lambda s: s * x, [x], back_prop=False)[0]
        b = tf.foldl(lambda acc, e: acc * e, tf.stack([x, x]), back_prop=False)
        c = tf.scan(lambda acc, e: acc + e, tf.stack([x, x]))
    assert (t.gradient(a, x).numpy(), t.gradient(b, x).numpy()) == (32.0, 4.0)   # x**4, x*x
    assert t.gradient(c, x).numpy() == 3.0      # [x, 2x] summed: 3
    assert (a.numpy(), b.numpy()) == (16.0, 4.0)


def test_loop_bodies_that_call_back_into_python_are_not_shared_between_functions():
    """Two functions with the same loop text but different numpy_function callbacks: each runs
    its own callback (the op cache keyed by jaxpr text alone reused the first one's: 3.0 twice)."""
    import numpy as np

    def make(k):
        @tf.function
        def f(n):
            s = tf.constant(0.0)
            for _ in tf.range(n):
                s += tf.numpy_function(lambda: np.float32(k), [], tf.float32)
            return s
        return f

    assert float(make(1)(tf.constant(3))) == 3.0
    assert float(make(2)(tf.constant(3))) == 6.0
    g = lambda k: tf.function(lambda p: tf.cond(p, lambda: tf.numpy_function(lambda: np.float32(k), [], tf.float32),
                                                lambda: tf.constant(0.0)))
    assert float(g(1)(tf.constant(True))) == 1.0
    assert float(g(5)(tf.constant(True))) == 5.0


def test_while_loop_with_a_maximum_iterations_known_only_when_the_step_runs():
    """``maximum_iterations`` a Tensor argument of a compiled function: TF's bound as a counter in
    the condition (it raised ValueError); TF 2.21 gives these values."""
    @tf.function
    def f(x, n):
        return tf.while_loop(lambda i, s: i < 10, lambda i, s: (i + 1, s + x[i % 3]), (0, 0.0),
                             maximum_iterations=n)

    x = tf.constant([1.0, 2.0, 3.0])
    assert [float(v) for v in f(x, tf.constant(5))] == [5.0, 9.0]
    assert [float(v) for v in f(x, tf.constant(20))] == [10.0, 19.0]
    assert f.experimental_get_tracing_count() == 1

    @tf.function
    def g(s, n):
        return tf.while_loop(lambda s: s < 100.0, lambda s: s * 2.0, s, maximum_iterations=n)

    assert float(g(tf.constant(1.0), tf.constant(3))) == 8.0


def test_dict_loop_vars_cond_outputs_and_scan_accumulators_keep_their_key_order():
    """TF packs a ``while_loop``'s loop variables, a ``cond``'s outputs (``true_fn``'s) and a ``scan``'s
    accumulator in the given dicts' key order: the body and the result see ``["z", "a"]``
    (tapejax gave JAX's sorted order, so ``list(d.values())`` came in another order)."""
    seen = []

    def body(i, d):
        seen.append(list(d))
        return i + 1, {k: v + 1.0 for k, v in d.items()}

    def scan_fn(acc, x):
        seen.append(list(acc))
        return {k: v + x for k, v in acc.items()}

    @tf.function
    def run(x):
        _, w = tf.while_loop(lambda i, d: i < 2, body, (0, {"z": x, "a": -x}))
        c = tf.cond(x > 0, lambda: {"z": x, "a": -x}, lambda: {"z": -x, "a": x})
        s = tf.scan(scan_fn, tf.ones([2]), initializer={"z": x, "a": x})
        return list(w), list(c), list(s), tf.stack(list(w.values()))

    w, c, s, stacked = run(tf.constant(1.0))
    assert (w, c, s) == (["z", "a"], ["z", "a"], ["z", "a"])
    assert stacked.numpy().tolist() == [3.0, 1.0]
    assert all(keys == ["z", "a"] for keys in seen)
    _, eager = tf.while_loop(lambda i, d: i < 1, body, (0, {"z": tf.constant(1.0), "a": tf.constant(2.0)}))
    assert list(eager) == ["z", "a"]
