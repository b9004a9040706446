"""tape.explain: one test per reason a gradient is None (oracle: the gradient itself
is None exactly when explain says it is not connected)."""

import tapejax as tf


def _check(tape, target, source, *phrases, connected=False):
    msg = tape.explain(target, source)
    for p in phrases:
        assert p in msg, msg
    g = tape.gradient(target, source)
    assert (g is not None) == connected, msg
    return msg


def test_connected():
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    _check(t, y, x, "Connected", connected=True)


def test_created_before_the_tape_and_never_watched():
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        y = x * x
    _check(t, y, x, "created before the tape", "tape.watch")


def test_never_watched_inside():
    with tf.GradientTape(persistent=True) as t:
        x = tf.constant(3.0)
        y = x * x
    _check(t, y, x, "never watched")


def test_integer_source():
    i = tf.constant(3)
    with tf.GradientTape(persistent=True) as t:
        t.watch(i)
        y = tf.cast(i, tf.float32)
    _check(t, y, i, "integer")


def test_cut_by_an_integer_intermediate_names_the_op():
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = tf.cast(tf.cast(x, tf.int32) * 2, tf.float32) + 1.0
    _check(t, y, x, "cut at op Cast", "int32")


def test_cut_by_a_non_differentiable_op_names_the_op():
    x = tf.constant([1.0, 3.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = tf.cast(x > 2.0, tf.float32) * 5.0
    _check(t, y, x, "cut at op Greater", "no gradient")


def test_computed_under_stop_recording():
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        with t.stop_recording():
            p = x * 2.0
        y = p * p
    _check(t, y, p, "stop_recording")


def test_trainable_false_and_watch_accessed_false():
    v = tf.Variable(2.0, trainable=False)
    with tf.GradientTape(persistent=True) as t:
        y = v * v
    _check(t, y, v, "trainable=False")
    w = tf.Variable(2.0)
    with tf.GradientTape(persistent=True, watch_accessed_variables=False) as t:
        y = w * w
    _check(t, y, w, "watch_accessed_variables=False")


def test_variable_never_read_inside():
    v = tf.Variable(2.0)
    r = v * 1.0
    with tf.GradientTape(persistent=True) as t:
        y = r * 3.0
    _check(t, y, v, "never read inside")


def test_target_does_not_depend_on_source():
    x, z = tf.constant(1.0), tf.constant(2.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch([x, z])
        y = x * 2.0
        _ = z * 3.0
    _check(t, y, z, "does not depend")


def test_target_outside_the_tape():
    x = tf.constant(1.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
    y = x * 2.0
    _check(t, y, x, "after the tape's `with` block ended")
    with t:  # entered again: y is before this block's end, made from a constant
        z = tf.constant(2.0) * 3.0
    _check(t, z, x, "not computed from anything this tape tracks")


def test_target_rebuilt_by_jax_tree_map_names_the_cause():
    """jax.tree_util.tree_map over Tensors maps their raw arrays (a Tensor is a JAX pytree), so
    the result is a new Tensor the tape never saw: explain says so and how to map instead."""
    import jax
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape(persistent=True) as t:
        h = jax.tree_util.tree_map(lambda a: a * 2.0, {"a": v * 3.0})
        y = tf.reduce_sum(h["a"])
        ok = jax.tree_util.tree_map(lambda a: a * 2.0, {"a": v * 3.0}, is_leaf=lambda x: isinstance(x, tf.Tensor))
    assert t.gradient(y, v) is None and t.gradient(ok["a"], v) is not None
    _check(t, y, v, "jax.tree_util.tree_map and jax.jit over Tensors")


def test_used_non_persistent_tape():
    x = tf.constant(1.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * 2.0
    t.gradient(y, x)
    assert "already used" in t.explain(y, x)


def test_structures_explain_each_pair():
    x, z = tf.constant(1.0), tf.constant(2.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * 2.0
    lines = t.explain(y, [x, z]).splitlines()
    assert len(lines) == 2 and "Connected" in lines[0] and "before the tape" in lines[1]
