"""GradientTape semantics; oracle: jax.vjp/jax.grad of the same pure function, and
TF 2.21's rules (the parity suite runs the same programs under real TF)."""
import dataclasses
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf


def _mlp_pure(w1, b1, w2, x, y):
    h = jnp.tanh(x @ w1 + b1)
    return jnp.mean(jnp.square(h @ w2 - y))


def test_mlp_gradient_matches_jax_vjp():
    rng = np.random.default_rng(0)
    arrs = [rng.normal(size=s).astype(np.float32) for s in [(4, 8), (8,), (8, 1), (16, 4), (16, 1)]]
    w1, b1, w2 = (tf.Variable(a) for a in arrs[:3])
    x, y = tf.constant(arrs[3]), tf.constant(arrs[4])
    with tf.GradientTape() as t:
        h = tf.tanh(tf.matmul(x, w1) + b1)
        loss = tf.reduce_mean(tf.square(tf.matmul(h, w2) - y))
    got = t.gradient(loss, [w1, b1, w2])
    want = jax.grad(_mlp_pure, argnums=(0, 1, 2))(*arrs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-6)


def test_result_has_the_structure_of_sources():
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
    assert isinstance(t.gradient(y, (x,)), tuple)
    g = t.gradient(y, (x, [x], {"k": x}))
    assert g[0].numpy() == 6.0 and g[1][0].numpy() == 6.0 and g[2]["k"].numpy() == 6.0
    assert t.gradient(y, []) == []
    assert [v.numpy() for v in t.gradient(y, [x, x])] == [6.0, 6.0]


def test_several_targets_sum_and_target_as_source_counts_one():
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = x * x
        z = x * 3.0
    assert t.gradient([y, z], x).numpy() == 9.0
    assert t.gradient([y, x], x).numpy() == 7.0
    assert t.gradient({"b": y, "a": z}, x).numpy() == 9.0


def test_gradient_of_a_tensor_by_itself_is_one_even_unwatched():
    x = tf.constant([1.0, 2.0])
    v = tf.Variable(2.0)
    t = tf.GradientTape()
    with t:
        pass
    np.testing.assert_array_equal(t.gradient(x, x).numpy(), [1.0, 1.0])
    w = tf.Variable(5.0)
    with tf.GradientTape() as t:
        _ = v * 1.0
    g = t.gradient(v, [v, w])
    assert g[0].numpy() == 1.0 and g[1] is None


def test_output_gradients_rules():
    xv = tf.constant([1.0, 2.0, 3.0])

    def grad(og, targets=None):
        with tf.GradientTape() as t:
            t.watch(xv)
            y = xv * xv
            y2 = 2.0 * xv
        tgt = y if targets is None else [y, y2]
        return t.gradient(tgt, xv, output_gradients=og).numpy().tolist()

    assert grad(tf.constant([3.0, 4.0, 5.0])) == [6.0, 16.0, 30.0]
    assert grad([3.0, 4.0, 5.0]) == [6.0, 12.0, 18.0]      # a Python list is flattened: 3.0
    assert grad(2.0) == [4.0, 8.0, 12.0]                    # scalar broadcasts
    assert grad(tf.constant([[1.0, 2.0, 3.0]])) == [2.0, 8.0, 18.0]  # size-1 extra dims
    assert grad([tf.ones(3), 2 * tf.ones(3)]) == [2.0, 4.0, 6.0]    # extras ignored
    assert grad([2 * tf.ones(3)], targets=2) == [6.0, 10.0, 14.0]   # missing seeded with ones
    for bad, exc in [(2, tf.errors.InvalidArgumentError),
                     (np.array([3.0, 4.0, 5.0]), tf.errors.InvalidArgumentError),
                     (tf.constant([1.0, 2.0]), tf.errors.InvalidArgumentError),
                     (tf.ones([2, 3]), tf.errors.InvalidArgumentError),
                     ([None], ValueError)]:
        with pytest.raises(exc):
            grad(bad)


def test_output_gradient_that_is_itself_a_gradient_seed_000():
    w = [tf.Variable([0.0, 0.1]), tf.Variable([0.0, 0.2])]
    with tf.GradientTape(persistent=True) as tape:
        y = tf.reduce_mean(2.0 * (w[0] + w[1]))
        y2 = 7.0 * y
    direct = tape.gradient(y2, w)
    chained = tape.gradient(y, w, output_gradients=tape.gradient(y2, y))
    flipped = tape.gradient(y2, w, output_gradients=-1.0)
    for d, c, f in zip(direct, chained, flipped):
        np.testing.assert_allclose(d.numpy(), [7.0, 7.0])
        np.testing.assert_allclose(c.numpy(), [7.0, 7.0])
        np.testing.assert_allclose(f.numpy(), [-7.0, -7.0])


@pytest.mark.parametrize("mode", ["zero", tf.UnconnectedGradients.ZERO])
def test_unconnected_zero(mode):
    x = tf.constant(3.0)
    z = tf.constant([1.0, 2.0])
    i = tf.constant([3, 4])
    with tf.GradientTape() as t:
        t.watch([x, i])
        y = x * x
    g = t.gradient(y, [x, z, i], unconnected_gradients=mode)
    assert g[0].numpy() == 6.0
    np.testing.assert_array_equal(g[1].numpy(), [0.0, 0.0])
    assert g[2].dtype == tf.int32 and g[2].numpy().tolist() == [0, 0]


@pytest.mark.parametrize("bad", ["ZERO", "Zero", "NONE", "", 1, None])
def test_unconnected_bad_values_raise_before_anything(bad):
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
    with pytest.raises(ValueError, match="Unknown value for unconnected_gradients"):
        t.gradient(y, x, unconnected_gradients=bad)
    assert t.gradient(y, x).numpy() == 6.0  # the failed call did not use the tape up


def test_integer_sources_are_none(tapejax_log):
    i = tf.constant(3)
    with tf.GradientTape() as t:
        t.watch(i)
        y = tf.cast(i, tf.float32) * 2.0
    assert "must be floating" in tapejax_log.text
    assert t.gradient(y, i) is None


def test_integer_intermediate_cuts_the_path():
    x = tf.constant(2.5)
    with tf.GradientTape() as t:
        t.watch(x)
        y = tf.cast(tf.cast(x, tf.int32), tf.float32) * x
    assert t.gradient(y, x).numpy() == 2.0  # only the direct path: d(2 * x)/dx


def test_intermediate_source_and_upstream_variable_total_derivative():
    v = tf.Variable(2.0)
    with tf.GradientTape() as t:
        h = v * 3.0
        y = h * h
    gh, gv = t.gradient(y, [h, v])
    assert gh.numpy() == 12.0 and gv.numpy() == 36.0


def test_identity_outputs_are_distinct_tensors():
    x = tf.constant(2.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        a = tf.identity(x)
        b = x + 0.0
        y = a * 3.0 + b * 5.0
    assert [g.numpy() for g in t.gradient(y, [a, b, x])] == [3.0, 5.0, 8.0]


def test_tensor_from_before_the_tape_is_a_constant():
    x = tf.constant(3.0)
    s = x * 2.0
    with tf.GradientTape(persistent=True) as t:
        y = s * s
    assert t.gradient(y, s) is None
    with tf.GradientTape() as t:
        t.watch(s)
        y = s * s
    g = t.gradient(y, [s, x])
    assert g[0].numpy() == 12.0 and g[1] is None


def test_watch_nested_structures_and_bad_inputs():
    a, b = tf.constant(2.0), tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch([a, {"k": b}])
        y = a * b
    assert [g.numpy() for g in t.gradient(y, [a, b])] == [3.0, 2.0]
    t = tf.GradientTape()
    with t:
        for bad in (np.array([1.0]), 1.5, 3, None, [a, 2.0]):
            with pytest.raises(ValueError, match="Passed in object"):
                t.watch(bad)
        y = a * a
    assert t.gradient(y, a) is None  # the failed watch([a, 2.0]) watched nothing


def test_watched_variables_order_persistence_and_reset():
    a, b = tf.Variable(1.0), tf.Variable(2.0)
    with tf.GradientTape() as t:
        c = tf.Variable(3.0)
        y = c * b * a
        assert [id(v) for v in t.watched_variables()] == [id(a), id(b), id(c)]
    t.gradient(y, [a])
    assert [id(v) for v in t.watched_variables()] == [id(a), id(b), id(c)]
    with tf.GradientTape() as t:
        _ = a * b
        t.reset()
        assert t.watched_variables() == ()
        z = b * 3.0
    assert [id(v) for v in t.watched_variables()] == [id(b)]
    assert t.gradient(z, b).numpy() == 3.0
    assert tf.GradientTape().watched_variables() == ()


def test_watch_accessed_variables_false_and_trainable_false():
    v = tf.Variable(2.0)
    nt = tf.Variable(2.0, trainable=False)
    with tf.GradientTape(watch_accessed_variables=False) as t:
        y = v * v
    assert t.gradient(y, v) is None and t.watched_variables() == ()
    with tf.GradientTape(watch_accessed_variables=False) as t:
        t.watch(v)
        y = v * v
    assert t.gradient(y, v).numpy() == 4.0
    with tf.GradientTape(persistent=True) as t:
        y = nt * nt
    assert t.gradient(y, nt) is None and t.watched_variables() == ()
    with tf.GradientTape() as t:
        t.watch(nt)
        y = nt * nt
    assert t.gradient(y, nt).numpy() == 4.0


def test_int_variable_is_listed_but_gets_none():
    iv = tf.Variable(3)
    with tf.GradientTape() as t:
        y = tf.cast(iv, tf.float32) * 2.0
    assert t.watched_variables()[0] is iv
    assert t.gradient(y, iv) is None


def test_lifecycle_errors():
    x = tf.constant(3.0)
    with pytest.raises(RuntimeError, match="non-persistent"):
        tf.GradientTape().gradient(x, x)  # never entered
    t = tf.GradientTape()
    with pytest.raises(RuntimeError, match="not recording"):
        t.stop_recording()
    with pytest.raises(ValueError, match="not recording"):
        t.reset()
    with t:
        t.watch(x)
        y = x * x
        with pytest.raises(ValueError, match="still recording"):
            t.__enter__()
        with t.stop_recording():
            with pytest.raises(ValueError, match="not recording"):
                t.stop_recording()
    with pytest.raises(ValueError, match="not recording"):
        t.stop_recording()
    with pytest.raises(ValueError, match="not recording"):
        t.reset()
    with pytest.raises(TypeError, match="received None"):
        t.gradient(None, x)
    with pytest.raises(TypeError):
        t.gradient(y, None)
    with pytest.raises(AttributeError):  # TF raises AttributeError for a float here
        t.gradient(3.0, x)
    assert t.gradient(y, x).numpy() == 6.0
    with pytest.raises(RuntimeError, match="non-persistent"):
        t.gradient(y, x)


def test_gradient_inside_a_non_persistent_block_stops_recording():
    x = tf.constant(3.0)
    v = tf.Variable(1.0)
    with tf.GradientTape() as t:
        t.watch(x)
        y = x * x
        assert t.gradient(y, x).numpy() == 6.0
        _ = v * 2.0  # no longer recorded or watched
        with pytest.raises(RuntimeError):
            t.gradient(y, x)
    assert t.watched_variables() == ()


def test_reentering_tapes():
    x = tf.constant(3.0)
    t = tf.GradientTape(persistent=True)
    with t:
        t.watch(x)
        y = x * x
    with t:
        z = x * 3.0
    assert t.gradient(y, x).numpy() == 6.0 and t.gradient([y, z], x).numpy() == 9.0
    t = tf.GradientTape()
    with t:
        t.watch(x)
        y = x * x
    t.gradient(y, x)
    with t:  # a spent non-persistent tape starts afresh
        t.watch(x)
        z = x * 3.0
    assert t.gradient(z, x).numpy() == 3.0


def test_stop_recording_and_ops_after_exit():
    x = tf.constant(3.0)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        with t.stop_recording():
            ys = x * x
        z = 2.0 * x
    after = z * 3.0
    assert t.gradient([ys, z], x).numpy() == 2.0
    assert t.gradient(after, x) is None


def test_nested_tapes_second_and_third_order():
    x = tf.constant(2.0)
    with tf.GradientTape() as t3:
        t3.watch(x)
        with tf.GradientTape() as t2:
            t2.watch(x)
            with tf.GradientTape() as t1:
                t1.watch(x)
                y = x ** 4.0
            g1 = t1.gradient(y, x)
        g2 = t2.gradient(g1, x)
    g3 = t3.gradient(g2, x)
    assert [g1.numpy(), g2.numpy(), g3.numpy()] == [32.0, 48.0, 48.0]


def test_watching_is_per_tape():
    a = tf.constant(1.0)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            inner.watch(a)
            b = a ** 2.0
        g1 = inner.gradient(b, a)
    assert g1.numpy() == 2.0 and outer.gradient(g1, a) is None


def test_persistent_tape_inside_its_context_gives_higher_order(tapejax_log):
    from tapejax.autodiff import tape as _tape
    _tape.LOGGED_ONCE.discard("persistent_inside")   # (logged once a process, as TF's log_first_n)
    w = tf.Variable(1.0)
    with tf.GradientTape(persistent=True) as t:
        y = w ** 3.0
        g = t.gradient(y, w)
        g2 = t.gradient(g, w)
    assert "persistent tape inside its context" in tapejax_log.text
    assert (g.numpy(), g2.numpy(), t.gradient(g2, w).numpy()) == (3.0, 6.0, 6.0)


def test_second_order_matches_jax_hessian_vector():
    rng = np.random.default_rng(1)
    x0 = rng.normal(size=3).astype(np.float32)

    def f(x):
        return jnp.sum(jnp.tanh(x) * jnp.exp(x))

    x = tf.constant(x0)
    with tf.GradientTape() as outer:
        outer.watch(x)
        with tf.GradientTape() as inner:
            inner.watch(x)
            y = tf.reduce_sum(tf.tanh(x) * tf.exp(x))
        g = inner.gradient(y, x)
        gsum = tf.reduce_sum(g)
    hv = outer.gradient(gsum, x)
    want = jax.grad(lambda v: jnp.sum(jax.grad(f)(v)))(x0)
    np.testing.assert_allclose(hv.numpy(), want, rtol=1e-5)


def test_gradient_dtype_is_the_source_dtype():
    a = tf.constant(2.0, dtype=tf.float16)
    with tf.GradientTape() as t:
        t.watch(a)
        y = tf.cast(a, tf.float32) ** 2.0
    g = t.gradient(y, a)
    assert g.dtype == tf.float16 and g.numpy() == 4.0
    b = tf.constant(2.0, dtype=tf.bfloat16)
    with tf.GradientTape() as t:
        t.watch(b)
        y = b * b
    assert t.gradient(y, b).dtype == tf.bfloat16


def test_tapes_are_per_thread():
    x = tf.constant(3.0)
    seen = {}
    with tf.GradientTape() as t:
        t.watch(x)

        def other():
            seen["y"] = x * x  # computed on another thread: not recorded here

        th = threading.Thread(target=other)
        th.start()
        th.join()
        mine = x * 2.0
    g = t.gradient([seen["y"], mine], x)
    assert g.numpy() == 2.0


def test_threads_train_independently():
    def train(seed, out):
        rng = np.random.default_rng(seed)
        w = tf.Variable(rng.normal(size=(3, 1)).astype(np.float32))
        x = tf.constant(rng.normal(size=(8, 3)).astype(np.float32))
        for _ in range(20):
            with tf.GradientTape() as t:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
            w.assign_sub(0.1 * t.gradient(loss, w))
        out[seed] = w.numpy()

    together, alone = {}, {}
    threads = [threading.Thread(target=train, args=(s, together)) for s in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for s in range(4):
        train(s, alone)
        np.testing.assert_allclose(together[s], alone[s], rtol=1e-6)


def test_higher_order_unconnected_follows_what_the_gradient_uses():
    """TF's None at higher order is structural: d(2x)/dx = 2 does not use x."""
    x = tf.constant(3.0)
    with tf.GradientTape() as t2:
        t2.watch(x)
        with tf.GradientTape() as t1:
            t1.watch(x)
            y = 2.0 * x
        g = t1.gradient(y, x)
    assert g.numpy() == 2.0 and t2.gradient(g, x) is None
    a = tf.constant(1.0)
    for f, third in ((lambda v: v * v, None), (lambda v: tf.pow(v, 2.0), 0.0)):
        with tf.GradientTape(persistent=True) as t:
            t.watch(a)
            g1 = t.gradient(f(a), a)
            g2 = t.gradient(g1, a)
        g3 = t.gradient(g2, a)
        assert (g1.numpy(), g2.numpy()) == (2.0, 2.0)
        assert (g3 if g3 is None else g3.numpy()) == third


def test_dependence_analysis_of_a_compiled_gradient():
    import jax.numpy as jnp

    from tapejax.autodiff.replay import input_dependence
    deps = input_dependence(lambda a, b, c: (a * 2.0, jnp.sin(b), a * b), 1.0, 2.0, 3.0)
    assert deps.any == [True, True, False]
    assert deps.per_output == ((True, False, False), (False, True, False), (True, True, False))


def test_higher_order_none_follows_each_gradient_separately():
    """One gradient call for two sources is one recorded op, but TF's second-order None is per
    gradient: for ``y = x*x + 2z``, ``dy/dz = 2`` uses neither x nor z (TF 2.21: None for both)
    while ``dy/dx = 2x`` uses x only; the outer tape follows which inputs each output uses."""
    x, z = tf.constant(3.0), tf.constant(4.0)
    with tf.GradientTape(persistent=True) as t2:
        t2.watch([x, z])
        with tf.GradientTape() as t1:
            t1.watch([x, z])
            y = x * x + 2.0 * z
        dx, dz = t1.gradient(y, [x, z])
    assert t2.gradient(dz, [x, z]) == [None, None]
    dxx, dxz = t2.gradient(dx, [x, z])
    assert float(dxx) == 2.0 and dxz is None
    both = t2.gradient([dx, dz], [x, z])
    assert float(both[0]) == 2.0 and both[1] is None
    jac = t2.jacobian(dx, [x, z])
    assert float(jac[0]) == 2.0 and jac[1] is None


def test_sources_may_be_registered_jax_pytrees():
    """A dataclass registered with jax.tree_util (as flax / equinox modules are) among the sources
    is flattened by JAX with Variables as leaves: the gradients come back in its structure, static
    fields kept, None where unconnected; watch accepts one too (both were NotATensorError /
    ValueError: tf.nest treats such an object as a leaf)."""
    import dataclasses

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Lin:
        w: object
        b: object
        name: str = dataclasses.field(metadata={"static": True}, default="lin")

    m = Lin(tf.Variable([[1.0], [2.0]]), tf.Variable([0.5]), "first")
    x0 = tf.constant([[1.0, -1.0]])
    with tf.GradientTape() as t:
        x = tf.identity(x0)
        t.watch(Lin(x, None))
        y = tf.reduce_sum(tf.matmul(x, m.w) * 3.0)
    g = t.gradient(y, {"model": m, "x": Lin(x, None)})
    assert isinstance(g["model"], Lin) and g["model"].name == "first" and g["model"].b is None
    np.testing.assert_allclose(g["model"].w.numpy(), [[3.0], [-3.0]])
    np.testing.assert_allclose(g["x"].w.numpy(), [[3.0, 6.0]])
    st = tf.sparse.SparseTensor([[0], [1]], tf.constant([1.0, 2.0]), [2])   # (a tapejax pytree: TF's rule)
    with tf.GradientTape() as t:
        y = tf.reduce_sum(st.values * 2.0)
    with pytest.raises(TypeError, match="must be a Tensor or Variable"):
        t.gradient(y, st)


def test_jax_pytree_sources_with_non_array_leaves_and_forwarding_wrappers():
    """Inside a JAX pytree source, a non-array leaf (an equinox module's activation function, a
    Python number) or an integer array is a static part: gradient None, as ``eqx.filter_grad``
    gives (it was NotATensorError); a float array leaf is still an error, which says to make it a
    Variable.  A pytree
    node that forwards attributes to the Variable it holds (flax nnx's ``Param``) is a node, not a
    Variable: the gradient keeps it (it was replaced by the bare gradient)."""
    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Layer:
        w: object
        act: object
        scale: object

    class Box:   # forwards attributes (``_read`` included) to its value, as nnx.Param does
        def __init__(self, value):
            self.value = value

        def __getattr__(self, name):
            return getattr(self.__dict__["value"], name)
    jax.tree_util.register_pytree_node(Box, lambda b: ((b.value,), None), lambda _, c: Box(c[0]))
    w = tf.Variable([1.0, 2.0])
    m = Layer(Box(w), jnp.tanh, (3.0, jnp.arange(2)))
    with tf.GradientTape(persistent=True) as t:
        t.watch(m)
        y = tf.reduce_sum(w * w)
    g = t.gradient(y, m)
    assert isinstance(g, Layer) and g.act is None and g.scale == (None, None) and isinstance(g.w, Box)
    np.testing.assert_allclose(g.w.value.numpy(), [2.0, 4.0])
    with pytest.raises(TypeError, match="`sources`.*make the parameters Variables"):
        t.gradient(y, Layer(jnp.ones(2), jnp.tanh, 3.0))


def test_watching_an_array_says_how_to_watch_it():
    """An array has no identity the tape can follow: the ValueError (TF's for a NumPy array) says
    to convert it first."""
    with tf.GradientTape() as t:
        for a in (jnp.ones(2), np.ones(2)):
            with pytest.raises(ValueError, match="tf.convert_to_tensor"):
                t.watch(a)


def test_gradient_through_an_unbounded_staged_while_loop_names_the_bound_it_needs():
    """A ``tf.while_loop`` without ``maximum_iterations`` traced in a tapejax.function is XLA's while
    loop, which JAX cannot differentiate in reverse mode (TF can: a documented limit): the tape's
    ``gradient`` / ``jacobian`` raise ``UnboundedWhileGradientError`` (a ValueError naming
    ``maximum_iterations``) at their call, whether the tape is inside the function or around its
    call.  Eagerly the loop runs in Python and its gradient is TF's (x**3 at 1.5: 6.75)."""
    from tapejax.autodiff.gradient import UnboundedWhileGradientError

    def loop(x):
        return tf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), (tf.constant(0), tf.constant(1.0)))[1]

    x = tf.constant(1.5)
    with tf.GradientTape() as t:
        t.watch(x)
        y = loop(x)
    assert t.gradient(y, x).numpy() == pytest.approx(6.75)

    @tf.function
    def inside(x):
        with tf.GradientTape() as t:
            t.watch(x)
            y = loop(x)
        return t.gradient(y, x)

    with pytest.raises(UnboundedWhileGradientError, match="maximum_iterations=N"):
        inside(x)
    fwd = tf.function(loop)
    with tf.GradientTape(persistent=True) as t:
        t.watch(x)
        y = fwd(x)
    for f in (t.gradient, t.jacobian):
        with pytest.raises(ValueError, match="maximum_iterations=N"):
            f(y, x)


def test_targets_may_be_mappings_that_are_jax_pytrees():
    """A target that is a Mapping registered with JAX (flax's FrozenDict; an nnx State) is flattened
    as TF's nest flattens a Mapping: the gradient of the sum of its values (was NotATensorError)."""
    import collections.abc

    class Frozen(collections.abc.Mapping):
        def __init__(self, d):
            self._d = dict(d)

        def __getitem__(self, k):
            return self._d[k]

        def __iter__(self):
            return iter(self._d)

        def __len__(self):
            return len(self._d)
    jax.tree_util.register_pytree_node(Frozen, lambda f: (tuple(f._d[k] for k in sorted(f._d)), tuple(sorted(f._d))),
                                       lambda keys, vals: Frozen(zip(keys, vals)))
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as t:
        out = Frozen({"b": v * v, "a": v * 2.0})
    np.testing.assert_allclose(t.gradient(out, v).numpy(), [4.0, 6.0])
