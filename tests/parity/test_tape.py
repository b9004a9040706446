"""GradientTape semantics (TF_SEMANTICS.md items 1-3, 6-9, 18): same program under TF and tapejax."""

from .harness import A, parity, warned, xfail_on_tapejax

JAC = "GradientTape.jacobian"


# --------------------------------------------------------------------------
# basics, persistence, watching
# --------------------------------------------------------------------------

@parity(expected=(A(9.0), A(6.0)))
def test_watch_constant_square(tf):
    """Watched constant: d(x*x)/dx at 3 is 6."""
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    return y, t.gradient(y, x)


@parity(expected=[A(2.0), None])
def test_unwatched_constant_is_none(tf):
    """A constant that is never watched is unconnected: gradient None."""
    x = tf.constant(3.0)
    z = tf.constant(2.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * z
    return t.gradient(y, [x, tf.constant(1.0)])


@parity(expected=[A(2.0), A([2.0, 2.0])])
def test_variable_auto_watched(tf):
    """Trainable float Variables read inside the tape are watched automatically."""
    v = tf.Variable(2.0)
    w = tf.Variable([1.0, 1.0])
    with tf.GradientTape() as t:
        y = v * v * 0.5 + tf.reduce_sum(w * v)
    g = t.gradient(y, [v, w])
    return [g[0] - 2.0, g[1]]


@parity(expected=(A(6.0), A(6.0), A(27.0)))
def test_persistent_tape_many_gradients(tf):
    """A persistent tape answers several gradient calls."""
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
        z = y * x
    return t.gradient(y, x), t.gradient(y, x), t.gradient(z, x)


@parity(needs=JAC)
def test_persistent_gradient_then_jacobian(tf):
    """Persistent tape: gradient and jacobian of the same recording."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    return t.gradient(y, x), t.jacobian(y, x)


@parity(expected=(A(4.0), (A(2.0),)))
def test_watch_accessed_variables_false_explicit_watch(tf):
    """watch_accessed_variables=False: only explicitly watched Variables count."""
    v = tf.Variable(2.0)
    with tf.GradientTape(watch_accessed_variables=False) as t:
        t.watch(v)
        y = v * v
    return t.gradient(y, v), t.watched_variables()


@parity(expected=(None, ()))
def test_watch_accessed_variables_false_no_watch(tf):
    """watch_accessed_variables=False and no watch(): gradient None, nothing watched."""
    v = tf.Variable(2.0)
    with tf.GradientTape(watch_accessed_variables=False) as t:
        y = v * v
    return t.gradient(y, v), t.watched_variables()


@parity(expected=(None, (), A(4.0), (A(2.0),)))
def test_trainable_false_variable(tf):
    """trainable=False Variables are not auto-watched; watch() makes them differentiable."""
    v = tf.Variable(2.0, trainable=False)
    with tf.GradientTape() as t:
        y = v * v
    with tf.GradientTape() as t2:
        t2.watch(v)
        y2 = v * v
    return t.gradient(y, v), t.watched_variables(), t2.gradient(y2, v), t2.watched_variables()


@parity(expected=(None, (A(2.0),), A(3.0)))
def test_variable_read_only_inside_stop_recording_is_not_watched(tf):
    """A Variable read only under stop_recording() is not watched (watched_variables lists
    just the Variable read while recording); its gradient through that read is None."""
    v = tf.Variable(1.0)
    w = tf.Variable(2.0)
    with tf.GradientTape(persistent=True) as t:
        with t.stop_recording():
            y = v * 2.0
        z = w * 3.0
    return t.gradient(y, v), t.watched_variables(), t.gradient(z, w)


@parity(expected=(None, (A(3, "int32"),), A(0, "int32")))
def test_int_variable_listed_but_none(tf):
    """An int32 Variable read in the tape is in watched_variables() but its gradient is None (int32 zeros with 'zero')."""
    v = tf.Variable(3)
    with tf.GradientTape(persistent=True) as t:
        y = v * v
    return t.gradient(y, v), t.watched_variables(), t.gradient(y, v, unconnected_gradients="zero")


@parity(expected=[A(3.0), A(2.0), A(1.0)])
def test_watch_nested_structure(tf):
    """watch() flattens nested lists/dicts/tuples of tensors."""
    a = tf.constant(2.0)
    b = tf.constant(3.0)
    c = tf.constant(4.0)
    with tf.GradientTape() as t:
        t.watch([a, {"k": b}, (c,)])
        y = a * b + c
    return t.gradient(y, [a, b, c])


@parity(expected=(A(4.0), (A(2.0),)))
def test_watch_variable_explicitly(tf):
    """watch(Variable) on a default tape: listed once, gradient as usual."""
    v = tf.Variable(2.0)
    with tf.GradientTape() as t:
        t.watch(v)
        y = v * v
    return t.gradient(y, v), t.watched_variables()


@parity(expected=((A(1.0), A(2.0), A(3.0)), "tuple"))
def test_watched_variables_creation_order(tf):
    """watched_variables() is a tuple in Variable creation order, not read order."""
    a = tf.Variable(1.0)
    b = tf.Variable(2.0)
    c = tf.Variable(3.0)
    with tf.GradientTape() as t:
        c * b * a  # reads c, then b, then a
    wv = t.watched_variables()
    return wv, type(wv).__name__


@parity(expected=(A(1.0), A(2.0)))
def test_watched_variables_explicit_watch_order(tf):
    """Explicit watch(b); watch(a) still lists a before b (creation order)."""
    a = tf.Variable(1.0)
    b = tf.Variable(2.0)
    with tf.GradientTape(watch_accessed_variables=False) as t:
        t.watch(b)
        t.watch(a)
    return t.watched_variables()


@parity(expected=((A(1.0), A(2.0), A(3.0)), A(6.0)))
def test_variable_created_inside_tape_is_watched(tf):
    """A Variable created inside the tape and read there is watched (creation order kept)."""
    a = tf.Variable(1.0)
    b = tf.Variable(2.0)
    with tf.GradientTape() as t:
        c = tf.Variable(3.0)
        y = c * b * a
    return t.watched_variables(), t.gradient(y, c) * 3.0


@parity(expected=(A(1.0), A(2.0)))
def test_watched_variables_survive_nonpersistent_gradient(tf):
    """watched_variables() still lists the variables after a non-persistent gradient() call."""
    a = tf.Variable(1.0)
    b = tf.Variable(2.0)
    with tf.GradientTape() as t:
        y = b * a
    t.gradient(y, [a, b])
    return t.watched_variables()


@parity(expected=((), ()))
def test_watched_variables_reset_and_never_entered(tf):
    """reset() empties watched_variables(); a never-entered tape has ()."""
    a = tf.Variable(1.0)
    with tf.GradientTape() as t:
        a * 2.0  # a read the reset forgets
        t.reset()
    return t.watched_variables(), tf.GradientTape().watched_variables()


@parity(expected=((A(1.0),), A(2.0)))
def test_reset_inside_then_read_again(tf):
    """After reset() inside the block, later reads are watched again and earlier ops are forgotten."""
    w = tf.Variable(1.0)
    with tf.GradientTape() as t:
        y = w + 1.0
        t.reset()
        z = w * 2.0
    return t.watched_variables(), t.gradient([y, z], w)


@parity(expected=([None], [A(3.0)]))
def test_reset_forgets_watched_tensors(tf):
    """reset() forgets watch()ed tensors too; watching again after reset works."""
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
        t.reset()
        z = x * 3.0
    g1 = t.gradient([y, z], [x])
    with tf.GradientTape() as t2:
        t2.watch(x)
        y = x * x
        t2.reset()
        t2.watch(x)
        z = x * 3.0
    return g1, t2.gradient([y, z], [x])


@parity(expected=(A(2.0), None, (A(1.0),), (A(1.0),)))
def test_watching_is_tape_local(tf):
    """Nested tapes: watch() on the inner tape does not watch on the outer; Variables are seen by both."""
    a = tf.constant(1.0)
    w = tf.Variable(1.0)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            inner.watch(a)
            b = a * a + w
        g1 = inner.gradient(b, a)
    return g1, outer.gradient(g1, a), outer.watched_variables(), inner.watched_variables()


# --------------------------------------------------------------------------
# output_gradients (item 1)
# --------------------------------------------------------------------------

@parity(expected=(A(-6.0), A(-6.0), A(-6.0), A(-6.0)))
def test_output_gradients_python_scalar(tf):
    """A Python scalar or one-element list cotangent scales a scalar target (seed 0's -1.0)."""
    x = tf.constant(3.0)
    outs = []
    for og in (-1.0, [-1.0], [[-1.0]], tf.constant(-1.0)):
        with tf.GradientTape() as t:
            t.watch(x)
            y = x * x
        outs.append(t.gradient(y, x, output_gradients=og))
    return tuple(outs)


@parity(expected=A(-6.0))
def test_output_gradients_shape1_tensor_on_scalar_target(tf):
    """tf.constant([-1.]) (shape [1]) as cotangent of a scalar target (seed 0's commented line) gives a scalar gradient."""
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    return t.gradient(y, x, output_gradients=tf.constant([-1.0]))


@parity(expected=(A([6.0, 12.0, 18.0]), A([6.0, 12.0])))
def test_output_gradients_list_of_numbers_is_flattened(tf):
    """output_gradients=[3., 4., 5.] for ONE vector target means cotangent 3.0 (nest.flatten), not weights."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    g1 = t.gradient(y, x, output_gradients=[3.0, 4.0, 5.0])
    x2 = tf.constant([1.0, 2.0])
    with tf.GradientTape() as t2:
        t2.watch(x2)
        y2 = x2 * x2
    return g1, t2.gradient(y2, x2, output_gradients=[[3.0, 4.0]])


@parity(expected=(A([6.0, 16.0, 30.0]), A([6.0, 16.0, 30.0])))
def test_output_gradients_tensor_is_elementwise(tf):
    """A tensor cotangent (bare or in a one-element list) weights a vector target elementwise."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    w = tf.constant([3.0, 4.0, 5.0])
    return t.gradient(y, x, output_gradients=w), t.gradient(y, x, output_gradients=[w])


@parity(expected=(A([4.0, 8.0, 12.0]), A([4.0, 8.0, 12.0])))
def test_output_gradients_scalar_broadcasts(tf):
    """A scalar cotangent (tensor or Python float) broadcasts over a vector target."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    return t.gradient(y, x, output_gradients=tf.constant(2.0)), t.gradient(y, x, output_gradients=2.0)


@parity(expected=A([2.0, 4.0, 6.0]))
def test_output_gradients_extra_ignored(tf):
    """More output_gradients than targets: the extras are silently ignored."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    return t.gradient(y, x, output_gradients=[tf.constant([1.0, 1.0, 1.0]), tf.constant([2.0, 2.0, 2.0])])


@parity(expected=A([6.0, 10.0, 14.0]))
def test_output_gradients_missing_seeded_with_ones(tf):
    """Fewer output_gradients than targets: the missing ones are seeded with ones."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
        y2 = 2.0 * x
    return t.gradient([y, y2], x, output_gradients=[tf.constant([2.0, 2.0, 2.0])])


@parity(expected=A([2.0, 2.0, 2.0]))
def test_output_gradients_dict_targets_sorted_keys(tf):
    """Dict targets flatten in sorted key order: the first cotangent goes to key 'a'."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as t:
        t.watch(x)
        a = x * 2.0
        b = x * x
    return t.gradient({"b": b, "a": a}, x,
                      output_gradients=[tf.constant([1.0, 1.0, 1.0]), tf.constant([0.0, 0.0, 0.0])])


@parity(expected=A([3.0, 3.0]))
def test_output_gradients_dict_matches_dict_targets(tf):
    """A dict of cotangents is flattened by sorted key too, matching dict targets."""
    x = tf.constant([1.0, 2.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
        z = x * 3.0
    return t.gradient({"y": y, "z": z}, x,
                      output_gradients={"z": tf.constant([1.0, 1.0]), "y": tf.constant([0.0, 0.0])})


@parity(expected=A([2.0, 8.0, 18.0]))
def test_output_gradients_shape_1x3_for_vector_broadcasts(tf):
    """A [1,3] cotangent for a [3] target is not validated: it broadcasts and gives a [3] gradient (TF accident)."""
    x = tf.constant([1.0, 2.0, 3.0])
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    return t.gradient(y, x, output_gradients=tf.constant([[1.0, 2.0, 3.0]]))


@parity(expected=(A([3.0, 3.0]), A([3.0, 3.0]), A(-1.5)))
def test_output_gradients_manual_chain_rule(tf):
    """gradient(y, w, output_gradients=gradient(y2, y)) equals gradient(y2, w) (manual chain rule)."""
    w = tf.Variable([0.0, 0.1])
    with tf.GradientTape(persistent=True) as t:
        y = tf.reduce_mean(w * 2.0)
        y2 = 3.0 * y
    up = t.gradient(y2, y)
    return t.gradient(y2, w), t.gradient(y, w, output_gradients=up), t.gradient(y2, y, output_gradients=-0.5)


# --------------------------------------------------------------------------
# summed targets, sources (item 2)
# --------------------------------------------------------------------------

@parity(expected=A(9.0))
def test_list_targets_are_summed(tf):
    """A list of targets gives the gradient of their sum, never a Jacobian."""
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y1 = x * x
        y2 = x * 3.0
    return t.gradient([y1, y2], x)


@parity(expected=(A(7.0), A(1.0), A(1.0)))
def test_target_that_is_a_source_contributes_one(tf):
    """A target that is also a source contributes 1; gradient(x, x) is 1 even if unwatched."""
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    g = t.gradient([y, x], x)
    u = tf.constant(5.0)
    with tf.GradientTape() as t2:
        pass
    with tf.GradientTape() as t3:
        t3.watch(u)
    return g, t2.gradient(u, u), t3.gradient(u, u)


@parity(expected=(A(12.0), [A(6.0), A(6.0)]))
def test_same_target_twice_and_same_source_twice(tf):
    """targets [y, y] count twice; sources [x, x] each get the full gradient."""
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    return t.gradient([y, y], x), t.gradient(y, [x, x])


@parity(expected=((A(6.0),), [A(6.0), (A(6.0),), {"k": A(6.0)}], {"z": A(6.0), "a": A(6.0)}))
def test_sources_structure_is_kept(tf):
    """The result has the structure of sources: tuple, nested list, dict (keys as given)."""
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    return t.gradient(y, (x,)), t.gradient(y, [x, (x,), {"k": x}]), t.gradient(y, {"z": x, "a": x})


@parity(expected=(A(6.0), []))
def test_dict_target_and_empty_sources(tf):
    """A dict target is flattened; empty sources give []."""
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    return t.gradient({"a": y}, x), t.gradient(y, [])


@parity(expected=None)
def test_empty_target_list_gives_none(tf):
    """gradient([], x) returns None (not a list)."""
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        x * x
    return t.gradient([], x)


# --------------------------------------------------------------------------
# None vs zeros (item 3)
# --------------------------------------------------------------------------

@parity(expected=([A(6.0), None], [A(6.0), A(0.0)], [A(6.0), A(0.0)], [A(6.0), None]))
def test_unconnected_none_and_zero(tf):
    """Unconnected sources: None by default/'none'/NONE; zeros with 'zero' or UnconnectedGradients.ZERO."""
    x = tf.constant(3.0)
    z = tf.constant(1.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    return (t.gradient(y, [x, z]),
            t.gradient(y, [x, z], unconnected_gradients="zero"),
            t.gradient(y, [x, z], unconnected_gradients=tf.UnconnectedGradients.ZERO),
            t.gradient(y, [x, z], unconnected_gradients=tf.UnconnectedGradients.NONE))


@parity(expected=[A([2.0, 2.0]), A([[0.0]])])
def test_unconnected_zero_for_unread_variable(tf):
    """'zero' for a Variable never read gives zeros of the Variable's shape and dtype."""
    w = tf.Variable([1.0, 2.0])
    u = tf.Variable([[1.0]])
    with tf.GradientTape() as t:
        y = w * 2.0
    return t.gradient(y, [w, u], unconnected_gradients="zero")


@parity(expected=(None, A(0, "int32"), A([0, 0], "int32")))
def test_integer_source_none_or_int_zeros(tf):
    """Watched integer tensors give None; with 'zero' the zeros are integer."""
    xi = tf.constant(3)
    xv = tf.constant([3, 4])
    with tf.GradientTape(persistent=True) as t:
        t.watch(xi)
        t.watch(xv)
        y = xi * xi
        yv = xv * xv
    return t.gradient(y, xi), t.gradient(y, xi, unconnected_gradients="zero"), \
        t.gradient(yv, xv, unconnected_gradients="zero")


@parity(x64=True, expected=A([0, 0], "int64"))
def test_int64_source_zero_is_int64(tf):
    """An int64 source with 'zero' gets int64 zeros (tapejax needs x64 mode for int64)."""
    xv = tf.constant([3, 4], tf.int64)
    with tf.GradientTape() as t:
        t.watch(xv)
        yv = xv * xv
    return t.gradient(yv, xv, unconnected_gradients="zero")


@parity(expected=(None, A(0.0)))
def test_path_through_integer_cast_is_unconnected(tf):
    """float -> int32 -> float cuts the path: None, or float zeros with 'zero'."""
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = tf.cast(tf.cast(x, tf.int32), tf.float32) * 2.0
    return t.gradient(y, x), t.gradient(y, x, unconnected_gradients="zero")


@parity(needs=JAC, expected=(None, A([0.0, 0.0])))
def test_jacobian_unconnected(tf):
    """jacobian of an unconnected source: None, or zeros of shape target+source with 'zero'."""
    x = tf.constant([1.0, 2.0])
    z = tf.constant(1.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    return t.jacobian(y, z), t.jacobian(y, z, unconnected_gradients="zero")


# --------------------------------------------------------------------------
# intermediates, total derivative, constants (item 6)
# --------------------------------------------------------------------------

@parity(expected=[A(12.0), A(36.0)])
def test_intermediate_and_upstream_variable(tf):
    """Gradient wrt an intermediate is what flows into it; wrt the upstream Variable it is the total derivative."""
    v = tf.Variable(2.0)
    with tf.GradientTape() as t:
        h = v * 3.0
        t.watch(h)
        y = h * h
    return t.gradient(y, [h, v])


@parity(expected=[A(12.0), A(36.0)])
def test_intermediate_without_watch(tf):
    """An intermediate computed from a watched Variable is on the tape without watch()."""
    v = tf.Variable(2.0)
    with tf.GradientTape() as t:
        h = v * 3.0
        y = h * h
    return t.gradient(y, [h, v])


@parity(expected=[A(10.0), A(1.0), A(2.0), A(3.0), A([4.0]), A(60.0)])
def test_noop_outputs_are_distinct_tensors(tf):
    """identity, x+0 and reshape outputs are distinct tensors: watching them splits the gradient."""
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
        a = tf.identity(y)
        b = tf.identity(y)
        c = y + 0.0
        d = tf.reshape(y, [1])
        z = a + 2.0 * b + 3.0 * c + 4.0 * tf.reduce_sum(d)
    return t.gradient(z, [y, a, b, c, d, x])


@parity(expected=(None, [A(12.0), None], None))
def test_tensor_computed_before_tape_is_constant(tf):
    """A tensor (or Variable read) computed before the tape is a constant there."""
    x = tf.constant(3.0)
    v = tf.Variable(2.0)
    s = x * 2.0
    r = v * 1.0
    with tf.GradientTape(persistent=True) as t:
        y = s * s
    with tf.GradientTape(persistent=True) as t2:
        t2.watch(s)
        y2 = s * s + r
    return t.gradient(y, s), t2.gradient(y2, [s, x]), t2.gradient(y2, r)


@parity(expected=(None, A(6.0), None))
def test_ops_after_block_exit_not_recorded(tf):
    """Ops run after the with block exits are not recorded."""
    x = tf.constant(3.0)
    w = tf.Variable(1.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    z = y * 3.0
    with tf.GradientTape() as t2:
        pass
    return t.gradient(z, x), t.gradient(y, x), t2.gradient(w * 2.0, w)


# --------------------------------------------------------------------------
# Variables (item 7)
# --------------------------------------------------------------------------

@parity(expected=(A(1.0), None, [A(1.0), None], A(1.0)))
def test_variable_as_target(tf):
    """A Variable target does not raise: gradient(v, v) == 1, gradient(v, w) is None."""
    v = tf.Variable(2.0)
    w = tf.Variable(5.0)
    with tf.GradientTape(persistent=True) as t:
        v * w  # both Variables are watched
    with tf.GradientTape() as t2:
        pass
    return t.gradient(v, v), t.gradient(v, tf.Variable(1.0)), t.gradient(v, [v, tf.Variable(3.0)]), t2.gradient(v, v)


@parity(expected=A(11.0))
def test_variable_reads_summed_across_assign(tf):
    """Two reads with an assign between: each read counts at the value read (1 + 2*5)."""
    v = tf.Variable(2.0)
    with tf.GradientTape() as t:
        a = v * 1.0
        v.assign(5.0)
        b = v * v
        y = a + b
    return t.gradient(y, v)


@parity(expected=([A(1.0), None], [A(1.0), None], [A(1.0), None]))
def test_assign_does_not_propagate(tf):
    """assign / assign_add inside the tape do not carry gradients from the assigned value."""
    v = tf.Variable(2.0)
    u = tf.Variable(3.0)
    with tf.GradientTape() as t:
        v.assign(u * 2.0)
        y = v * 1.0
    g1 = t.gradient(y, [v, u])
    with tf.GradientTape() as t2:
        r = v.assign(u * 2.0)
        y = r * 1.0
    g2 = t2.gradient(y, [v, u])
    with tf.GradientTape() as t3:
        r = v.assign_add(u)
        y = r * 1.0
    return g1, g2, t3.gradient(y, [v, u])


@parity(expected=(A([2.0, 0.0]),), needs="gather")
def test_gather_on_variable_indexed_slices(tf):
    """gather on a Variable: the gradient is IndexedSlices (densified here: rows summed)."""
    w = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as t:
        y = tf.gather(w, [0, 0])
    g = t.gradient(y, w)
    assert type(g).__name__ == "IndexedSlices"
    return (tf.convert_to_tensor(g),)


# --------------------------------------------------------------------------
# lifecycle (item 9, non-error parts)
# --------------------------------------------------------------------------

@parity(expected=(A(6.0), ()))
def test_nonpersistent_gradient_inside_block_stops_recording(tf):
    """gradient() inside a non-persistent tape's block works and recording stops (later reads not watched)."""
    x = tf.constant(3.0)
    v = tf.Variable(1.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
        g = t.gradient(y, x)
        v * 2.0
    return g, t.watched_variables()


@parity(expected=(A(6.0), A(3.0), A(9.0), A(9.0)))
def test_reenter_exited_tape_continues(tf):
    """Re-entering an exited tape continues recording on the same tape (persistent and not)."""
    x = tf.constant(3.0)
    t = tf.GradientTape(persistent=True)
    with t:
        t.watch(x)
        y = x * x
    with t:
        z = x * 3.0
    t2 = tf.GradientTape()
    with t2:
        t2.watch(x)
        y2 = x * x
    with t2:
        z2 = x * 3.0
    return t.gradient(y, x), t.gradient(z, x), t.gradient([y, z], x), t2.gradient([y2, z2], x)


@parity(expected=(A(6.0), A(3.0)))
def test_reenter_used_nonpersistent_tape_is_fresh(tf):
    """A non-persistent tape re-entered after its gradient() records afresh."""
    x = tf.constant(3.0)
    t = tf.GradientTape()
    with t:
        t.watch(x)
        y = x * x
    g = t.gradient(y, x)
    with t:
        t.watch(x)
        z = x * 3.0
    return g, t.gradient(z, x)


@parity(expected=(A(2.0), None, ()))
def test_stop_recording_inside(tf):
    """Ops under stop_recording() are not recorded, and a Variable read only there is not watched."""
    x = tf.constant(3.0)
    w = tf.Variable(1.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        with t.stop_recording():
            y = x * x
            yw = w * 2.0
        z = x * 2.0
    return t.gradient([y, z], x), t.gradient(yw, w), t.watched_variables()


@parity(expected=(A(2.0), A(2.0)))
def test_gradient_inside_stop_recording(tf):
    """gradient() under stop_recording() inside the block works for both tape kinds."""
    w = tf.Variable(1.0)
    t = tf.GradientTape()
    with t:
        y = w * 2.0
        with t.stop_recording():
            g = t.gradient(y, w)
    t2 = tf.GradientTape(persistent=True)
    with t2:
        y = w * 2.0
        with t2.stop_recording():
            g2 = t2.gradient(y, w)
    return g, g2


@parity(expected=A(6.0))
def test_second_tape_only_sees_its_block(tf):
    """Seed 3 note: `with t: loss=f(); with t (new tape): loss += g()`: only g is differentiated."""
    w = tf.Variable(1.0)
    with tf.GradientTape() as t:
        loss = w * w * 100.0
    with tf.GradientTape() as t:
        loss += w * 6.0
    return t.gradient(loss, w)


# --------------------------------------------------------------------------
# higher order
# --------------------------------------------------------------------------

@parity(expected=(A(32.0), A(48.0), A(48.0)))
def test_nested_tapes_third_derivative(tf):
    """Three nested tapes give 1st, 2nd, 3rd derivatives of w**4 at 2."""
    w = tf.Variable(2.0)
    with tf.GradientTape() as t1:
        with tf.GradientTape() as t2:
            with tf.GradientTape() as t3:
                y = w ** 4
            g1 = t3.gradient(y, w)
        g2 = t2.gradient(g1, w)
    g3 = t1.gradient(g2, w)
    return g1, g2, g3


@parity(expected=(A(2.0), A(2.0)))
def test_nested_tapes_second_derivative_constant(tf):
    """Nested tapes on a watched constant: d2(a**2)/da2 = 2."""
    a = tf.constant(1.0)
    with tf.GradientTape() as t:
        t.watch(a)
        with tf.GradientTape() as t2:
            t2.watch(a)
            b = a ** 2
        g1 = t2.gradient(b, a)
    return g1, t.gradient(g1, a)


@parity(expected=(A([3.0, 12.0]), A([6.0, 12.0])))
def test_nested_tapes_vector_second_derivative(tf):
    """Second derivative of sum(x**3) through nested tapes, elementwise 6x."""
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = tf.reduce_sum(x ** 3)
        g = inner.gradient(y, x)
    return g, outer.gradient(g, x)


@parity(expected=(A(3.0), A(6.0), A(6.0)))
def test_persistent_tape_inside_own_context_higher_order(tf):
    """A persistent tape's gradient() inside its own block is recorded: 2nd and 3rd derivatives of w**3."""
    w = tf.Variable(1.0)
    with tf.GradientTape(persistent=True) as t:
        y = w ** 3
        g = t.gradient(y, w)
        g2 = t.gradient(g, w)
    return g, g2, t.gradient(g2, w)


@parity(expected=(A(6.0), True, False))
def test_persistent_gradient_inside_context_warns(tf):
    """TF logs a 'significantly less efficient' WARNING for gradient() inside a persistent tape's block,
    once a process (``log_first_n(..., 1)``): both counts start afresh here (an earlier test in the
    process may have logged it), and a second call logs nothing."""
    if tf.__name__ == "tensorflow":
        from tensorflow.python.platform import tf_logging
        tf_logging._log_counter_per_token.clear()
    else:
        from tapejax.autodiff import tape as _tape
        _tape.LOGGED_ONCE.discard("persistent_inside")
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
        g, w = warned(t.gradient, y, x)
        _, again = warned(t.gradient, y, x)
    return g, w, again


@parity(expected=True)
def test_watch_int_tensor_warns(tf):
    """watch() of an int tensor logs 'The dtype of the watched tensor must be floating' (a WARNING)."""
    x = tf.constant(3)
    with tf.GradientTape() as t:
        _, w = warned(t.watch, x)
    return w


# --------------------------------------------------------------------------
# dtypes (item 18)
# --------------------------------------------------------------------------

@parity(x64=True, expected=(A(4.0, "float32"), A(4.0, "float64")))
def test_gradient_dtype_is_source_dtype_x64(tf):
    """float32 source through float64 gives a float32 gradient; float64 through float32 gives float64."""
    a = tf.constant(2.0)
    b = tf.constant(2.0, tf.float64)
    with tf.GradientTape(persistent=True) as t:
        t.watch(a)
        t.watch(b)
        ya = tf.cast(a, tf.float64) ** 2
        yb = tf.cast(b, tf.float32) ** 2
    return t.gradient(ya, a), t.gradient(yb, b)


@parity(expected=(A(4.0, "float16"), A(4.0, "float16")), rtol=1e-3, atol=1e-3)
def test_float16_source_gradient(tf):
    """A float16 source gets a float16 gradient, also through a float32 cast."""
    a = tf.constant(2.0, tf.float16)
    with tf.GradientTape(persistent=True) as t:
        t.watch(a)
        y = a * a
        y2 = tf.cast(a, tf.float32) ** 2
    return t.gradient(y, a), t.gradient(y2, a)


@parity(expected=(A(2.0, "float32"), None))
def test_second_derivative_of_linear_is_none(tf):
    """d(2x)/dx = 2 does not use x, so the nested second derivative is None (not 0)."""
    x = tf.constant(3.0)
    with tf.GradientTape() as t2:
        t2.watch(x)
        with tf.GradientTape() as t1:
            t1.watch(x)
            y = 2.0 * x
        g = t1.gradient(y, x)
    return g, t2.gradient(g, x)


@parity(expected=(A(2.0, "float32"), A(2.0, "float32"), None, A(0.0, "float32")))
def test_third_derivative_connectivity_mul_vs_pow(tf):
    """Third derivative: x*x gives None (its 2nd derivative uses no x); pow(x, 2.) gives 0."""
    a = tf.constant(1.0)
    out = []
    for f in (lambda v: v * v, lambda v: tf.pow(v, 2.0)):
        with tf.GradientTape(persistent=True) as t:
            t.watch(a)
            g1 = t.gradient(f(a), a)
            g2 = t.gradient(g1, a)
        out.append((g1, g2, t.gradient(g2, a)))
    return out[0][0], out[0][1], out[0][2], out[1][2]


@parity(expected=(A([0.0, 0.0]), A([0.0, 0.0]), A([4.481689, 0.13533528])))
def test_second_derivative_of_relu_and_abs_is_zeros(tf):
    """relu'' and abs'' are zeros (not None: their first gradients read x), exp'' = exp."""
    x = tf.constant([1.5, -2.0])
    out = []
    for f in (tf.nn.relu, tf.abs, tf.exp):
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = tf.reduce_sum(f(x))
            g = t1.gradient(y, x)
        out.append(t2.gradient(g, x))
    return tuple(out)


def _second_order_table(tf, cases):
    """Per case ``f(x, z)``: the outer tape's gradients of ``dx`` and ``dz`` (one inner gradient
    call for both) with respect to ``[x, z]``, "-" where the inner gradient is None."""
    x, z = tf.constant([1.5, -2.0]), tf.constant([4.0, 0.5])
    out = {}
    for name, f in cases.items():
        with tf.GradientTape(persistent=True) as t2:
            t2.watch([x, z])
            with tf.GradientTape() as t1:
                t1.watch([x, z])
                y = f(x, z)
            grads = t1.gradient(y, [x, z])
        out[name] = [t2.gradient(d, [x, z]) if d is not None else "-" for d in grads]
    return out


@parity
def test_second_order_none_is_per_gradient_of_one_call(tf):
    """One inner ``gradient`` call for two sources: each gradient's second derivatives are None
    where that gradient does not use the source (TF computes each by its own ops), as for
    ``x*x + exp(z)`` (``dx`` uses x only), ``relu(x)*3 + z`` (``dz`` = 1 uses nothing),
    ``where(x > 0, 2z, z*z)``, ``x*z``, ``matmul``, ``sigmoid(x)*z`` and a mean beside a sum."""
    return _second_order_table(tf, {
        "relu": lambda x, z: tf.nn.relu(x) * 3.0 + z,
        "where": lambda x, z: tf.where(x > 0, 2.0 * z, z * z),
        "where2": lambda x, z: tf.where(x > 0, x * 2.0, z),
        "abs": lambda x, z: tf.abs(x) + z,
        "mulxz": lambda x, z: x * z,
        "sq": lambda x, z: x * x + tf.exp(z),
        "matmul": lambda x, z: tf.matmul(x[None], z[:, None]),
        "softplus": lambda x, z: tf.nn.softplus(x) + 2.0 * z,
        "sigmoid": lambda x, z: tf.sigmoid(x) * z,
        "mean": lambda x, z: tf.reduce_mean(x) + tf.reduce_sum(z * 3.0),
    })


@xfail_on_tapejax((
    "TF's Maximum gradient selects by a boolean mask (greater_equal), which its tape does not "
    "differentiate, so the second derivatives are None; tapejax's dependence analysis counts any "
    "use of an input (the comparison in JAX's max rule), so they are zeros"))
@parity
def test_second_order_of_maximum_is_none(tf):
    """``maximum(x, z)``'s gradients use x and z only through a comparison: TF gives None."""
    return _second_order_table(tf, {"max": lambda x, z: tf.maximum(x, z)})


@xfail_on_tapejax((
    "TF differentiates a tf.function's gradient as one op (its backward function, reading the "
    "forward values it needs), so each second derivative through it is 0 where that op reads the "
    "source, even where the gradient itself does not use it; tapejax follows what each gradient "
    "uses, so dz/dx of x*x + 2z is None through a function as eagerly"))
@parity
def test_second_order_through_a_function_call_is_zeros(tf):
    """``f = tf.function(lambda x, z: x * x + 2 * z)``: TF's second derivatives of both first
    derivatives are 0 (not None), the backward function reading x."""
    f = tf.function(lambda x, z: x * x + 2.0 * z)
    return _second_order_table(tf, {"f": f})


@parity
def test_gradient_keeps_the_structure_of_sources(tf):
    """The result has the structure of ``sources``: a flat list, a tuple, a nested list with a
    tuple and a dict (sorted keys), with None for an unconnected source in each."""
    a, b, c = tf.Variable(1.0), tf.Variable(2.0), tf.Variable(3.0)
    with tf.GradientTape(persistent=True) as t:
        y = a * b
    flat = t.gradient(y, [a, b, c])
    tup = t.gradient(y, (c, a))
    nested = t.gradient(y, [a, (b, c)])
    mapping = t.gradient(y, {"z": a, "b": b, "m": c})
    packed = tf.nest.pack_sequence_as([0, 0], (5, 6)), tf.nest.pack_sequence_as((0, [0]), [5, 6])
    return flat, tup, nested, mapping, tf.nest.flatten([1, (2, [3])]), packed
