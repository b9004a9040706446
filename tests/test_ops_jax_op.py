"""tapejax.op: any JAX function of pytrees as a tape op with a user-chosen TF type name."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tapejax as tf
import tapejax.numpy as tnp
from tapejax.core.bind import REGISTRY


def _mlp(params, x, activation="tanh"):
    h = getattr(jnp, activation)(x @ params["w1"] + params["b1"])
    return {"out": h @ params["w2"], "hidden": h}


def test_decorator_records_one_op_with_jax_gradient():
    """The decorated function is one recorded op; gradients to Variables in a dict are JAX's."""
    mlp = tf.op(_mlp, type_name="TestMLP")
    rng = np.random.default_rng(0)
    p = {"w1": rng.normal(size=(3, 4)).astype(np.float32), "b1": np.zeros(4, np.float32),
         "w2": rng.normal(size=(4, 2)).astype(np.float32)}
    vs = {k: tf.Variable(v) for k, v in p.items()}
    x = rng.normal(size=(5, 3)).astype(np.float32)
    with tf.GradientTape() as t:
        out = mlp(vs, tf.constant(x))
        loss = tf.reduce_sum(out["out"] ** 2) + tf.reduce_sum(out["hidden"])
    assert [n.prim.name for n in t._nodes if n.prim.name == "TestMLP"] == ["TestMLP"]
    grads = t.gradient(loss, vs)

    def ref(p):
        o = _mlp(p, x)
        return jnp.sum(o["out"] ** 2) + jnp.sum(o["hidden"])
    want = jax.grad(ref)(p)
    for k in p:
        np.testing.assert_allclose(grads[k].numpy(), want[k], rtol=1e-5, atol=1e-6)
    assert "TestMLP" in REGISTRY


def test_static_arguments_are_part_of_the_key():
    """Non-array arguments are static: a different activation is a different program."""
    f = tf.op(_mlp, type_name="TestMLPStatic")
    p = {"w1": tf.ones([2, 2]), "b1": tf.zeros([2]), "w2": tf.ones([2, 1])}
    x = tf.constant([[0.1, 0.2]])
    a = f(p, x, activation="tanh")["out"]
    b = f(p, x, activation="sin")["out"]
    assert not np.allclose(a.numpy(), b.numpy())
    with pytest.raises(TypeError, match="hashable"):
        f(p, x, activation=bytearray(b"tanh"))


def test_duplicate_type_name_is_key_error_and_auto_names_are_unique():
    """Registering a type name twice is a KeyError (as TF); without a name one is made."""
    tf.op(lambda x: x * 2, type_name="TestDup")
    with pytest.raises(KeyError, match="TestDup"):
        tf.op(lambda x: x * 3, type_name="TestDup")
    f = tf.op(lambda x: x * 2)
    g = tf.op(lambda x: x * 2)
    assert f.primitive.name != g.primitive.name


def test_non_differentiable_op_gives_none():
    """differentiable=False: the outputs are constants to the tape."""
    f = tf.op(lambda x: jnp.round(x * 3), type_name="TestRoundish", differentiable=False)
    x = tf.constant([0.2, 0.7])
    with tf.GradientTape() as t:
        t.watch(x)
        y = f(x)
    assert t.gradient(y, x) is None


def test_inside_jax_jit_and_second_order():
    """The op works on tracers inside jax.jit, and nested tapes differentiate it twice."""
    f = tf.op(lambda x: jnp.sin(x) * x, type_name="TestXSin")
    out = jax.jit(lambda a: f(tf.Tensor(a)).value)(jnp.asarray([0.5]))
    np.testing.assert_allclose(out, np.sin(0.5) * 0.5, rtol=1e-6)
    x = tf.constant(0.5)
    with tf.GradientTape() as t2:
        t2.watch(x)
        with tf.GradientTape() as t1:
            t1.watch(x)
            y = f(x)
        g = t1.gradient(y, x)
    want = jax.grad(jax.grad(lambda v: jnp.sin(v) * v))(0.5)
    np.testing.assert_allclose(t2.gradient(g, x).numpy(), want, rtol=1e-5)


def test_gradient_override_applies_to_the_type_name():
    """The type name is what gradient_override_map keys on (issue #4's machinery)."""
    f = tf.op(lambda x: x * x, type_name="TestSquareOverride")

    @tf.RegisterGradient("TestSquareOverrideGrad")
    def _grad(op, g):
        return [g * 10.0]
    x = tf.constant(3.0)
    with tf.GradientTape() as t:
        t.watch(x)
        with tf.gradient_override_map({"TestSquareOverride": "TestSquareOverrideGrad"}):
            y = f(x)
    assert float(t.gradient(y, x)) == pytest.approx(10.0)


def test_typed_prng_key_outputs_are_jax_key_arrays():
    """A typed key (``jax.random.key``) out of an op comes back as the JAX key array (no TF dtype,
    no gradient; it goes on to the next op or to jax.random); the float outputs are JAX's. It was a
    TypeError ("Cannot convert value key<fry> to a tapejax DType") when a tape recorded the op."""
    from tapejax.core import dtypes

    @tf.op
    def noisy(key, x):
        k1, k2 = jax.random.split(key)
        return k1, x * jax.random.normal(k2, x.shape)
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as t:
        k, y = noisy(jax.random.key(0), x)
        k, y = noisy(k, y)
    assert isinstance(k, jax.Array) and jnp.issubdtype(k.dtype, jax.dtypes.prng_key)
    ref = noisy.__wrapped__
    k0, y0 = ref(jax.random.key(0), jnp.array([1.0, 2.0]))
    want = jax.grad(lambda x: jnp.sum(ref(k0, ref(jax.random.key(0), x)[1])[1]))(jnp.array([1.0, 2.0]))
    np.testing.assert_allclose(t.gradient(y, x).numpy(), want, rtol=1e-6)
    np.testing.assert_array_equal(jax.random.key_data(k), jax.random.key_data(ref(k0, y0)[0]))
    assert dtypes.is_trainable_dtype(jax.random.key(0).dtype) is False


@pytest.mark.parametrize("jit", [True, False])
def test_python_number_outputs_are_arrays(jit):
    """Python-number leaves of the output are arrays (as jax.jit makes them), also with jit=False
    and in the gradient's replay, which runs the function unjitted (it was a Tensor holding a float,
    and an AttributeError in the backward pass)."""
    f = tf.op(lambda x: (x * 2.0, 3.0, {"n": 1}), jit=jit)
    x = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as t:
        y, c, d = f(x)
    assert c.dtype == tf.float32 and float(c) == 3.0 and d["n"].dtype == tf.int32
    g = t.gradient(y, x, output_gradients=tf.constant([3.0, 4.0]))
    np.testing.assert_allclose(g.numpy(), [6.0, 8.0])


def test_op_inside_function_is_not_converted_by_autograph(caplog):
    """The op wrapper is library code to AutoGraph (its ``__module__`` is tapejax's; the rest of the
    user function's metadata is copied): inside a tapejax.function it runs as is, as one op, with no
    "could not transform" warning (it was one per lambda op per trace)."""
    import logging
    calls = []
    f = tf.op(lambda x: (calls.append(type(x)), jnp.sin(x) * 2)[1])

    @tf.function
    def step(x):
        return f(x)
    with caplog.at_level(logging.WARNING, logger="tapejax"):
        out = step(tf.constant([1.0, 2.0]))
    assert "could not transform" not in caplog.text
    np.testing.assert_allclose(out.numpy(), np.sin([1.0, 2.0]) * 2, rtol=1e-6)
    assert f.__module__ == "tapejax.ops.jax_op" and f.__name__ == "<lambda>" and calls


def test_function_returning_tensors_of_inner_tape_ops():
    """A function that calls tape ops inside (another tapejax.op, tapejax.numpy, tf ops) and returns
    their Tensors: the outputs are the op's recorded outputs, so the gradient is JAX's (the Tensors
    were flattened as pytrees and rewrapped in new, untracked Tensors: the gradient was None, or
    silently missed those outputs' share when another output was connected)."""
    inner = tf.op(lambda x: jnp.sin(x) * x)
    outer = tf.op(lambda x: {"t": inner(x) * 2.0, "n": tnp.sum(x), "j": jnp.sum(jnp.asarray(inner(x)) ** 2)})
    x0 = np.array([0.3, 0.7], np.float32)
    x = tf.Variable(x0)
    with tf.GradientTape(persistent=True) as t:
        out = outer(x)
        loss = tf.reduce_sum(out["t"]) + out["n"] + out["j"]
    assert t.gradient(out["t"], x) is not None

    def ref(x):
        f = jnp.sin(x) * x
        return jnp.sum(f * 2.0) + jnp.sum(x) + jnp.sum(f ** 2)
    np.testing.assert_allclose(loss.numpy(), ref(x0), rtol=1e-6)
    np.testing.assert_allclose(t.gradient(loss, x).numpy(), jax.grad(ref)(x0), rtol=1e-5)


def test_variable_closed_over_by_a_jitted_op_is_an_error():
    """A jitted op whose function reads a Variable it was not given (a closure) is a ValueError
    saying to pass it: read there, its value was a constant of the compiled op, so after an assign
    the forward kept the old value (3.0 for 30.0) while the gradient's replay read the new one.
    Passed as an argument it is fresh; jit=False reads it anew each call; inside tapejax.function
    the function's collector makes the read a program input (fresh as well)."""
    w = tf.Variable([1.0, 2.0])
    closed = tf.op(lambda x: jnp.sum(x * jnp.asarray(w)))
    with pytest.raises(ValueError, match="reads Variable 'Variable:0', which is not one of its arguments"):
        closed(tf.constant([1.0, 1.0]))
    passed = tf.op(lambda p, x: jnp.sum(x * p["w"]))
    unjitted = tf.op(lambda x: jnp.sum(x * jnp.asarray(w)), jit=False)
    in_function = tf.function(lambda x: closed(x))
    x = tf.constant([1.0, 1.0])
    for value, want in (([1.0, 2.0], 3.0), ([10.0, 20.0], 30.0)):
        w.assign(value)
        assert float(passed({"w": w}, x)) == want and float(unjitted(x)) == want
        assert float(in_function(x)) == want


def test_non_array_output_leaves_are_returned_as_they_are():
    """An output pytree with a leaf that is no array and no number (an equinox model's activation
    function, a string) gives that leaf back as it is, as ``eqx.filter_jit`` does, the array leaves
    as Tensors with their gradients (it was JAX's TypeError converting the function to an array),
    eagerly, from the cache and with ``jit=False``."""
    import dataclasses

    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Layer:
        w: object
        act: object
        name: object

    for jit in (True, False):
        f = tf.op(lambda m, s: Layer(m.w * s, m.act, "scaled"), jit=jit)
        w = tf.Variable([1.0, 2.0])
        for _ in range(2):
            with tf.GradientTape() as t:
                out = f(Layer(w, jnp.tanh, "orig"), 3.0)
                y = tf.reduce_sum(out.w * out.w)
            assert out.act is jnp.tanh and out.name == "scaled" and isinstance(out.w, tf.Tensor)
            np.testing.assert_allclose(t.gradient(y, w).numpy(), [18.0, 36.0])


def test_op_of_the_same_function_is_made_once():
    """``tapejax.op(model.apply)`` written inside a loop (a bound method is a new object each time, but
    compares equal) is the op made the first time: one registered type, one compiled call; another
    function, or other flags, is another op; an unhashable callable gets a new op each time."""
    class Model:
        def apply(self, w, x):
            return jnp.sum(jnp.tanh(x * w))
    m, w = Model(), tf.Variable(2.0)
    ops = []
    for _ in range(3):
        with tf.GradientTape() as t:
            op = tf.op(m.apply)
            y = op(w, jnp.ones(3))
        ops.append(op)
        np.testing.assert_allclose(t.gradient(y, w).numpy(), jax.grad(m.apply)(2.0, jnp.ones(3)), rtol=1e-6)
    assert ops[0] is ops[1] is ops[2]
    assert tf.op(Model().apply) is not ops[0] and tf.op(m.apply, jit=False) is not ops[0]

    class Unhashable:
        __hash__ = None

        def __call__(self, x):
            return x * 2.0
    u = Unhashable()
    assert tf.op(u) is not tf.op(u)


def test_unjitted_op_reads_python_state_at_each_call_for_its_gradient_too():
    """A ``jit=False`` op runs its function when called, so a Python value it reads (a schedule's
    scale in a dict) is the call's, for its gradient too: under a recording tape the call is traced
    then (``CallTrace``) and the replay differentiates that trace (before, the replay traced the
    function once, so the gradient stayed at the first call's scale: 1.0 where the value said 5.0).
    The function runs once a call; a call whose trace is the same computation reuses the compiled
    gradient; a function that reads values (``float(x)``) runs on them and its gradient raises
    JAX's error as before.  A jitted op keeps the value of its trace, as ``jax.jit``."""
    state, runs = {"k": 1.0}, []

    def f(x):
        runs.append(1)
        return x * state["k"]

    x = tf.Variable(2.0)
    once = tf.op(f, jit=False)
    for make in (lambda: once, lambda: tf.op(f, jit=False)):
        for k in (1.0, 5.0, 5.0, 2.0):
            state["k"] = k
            del runs[:]
            with tf.GradientTape() as t:
                y = make()(x)
            assert len(runs) == 1
            assert float(y) == 2.0 * k and float(t.gradient(y, x)) == k
    state["k"] = 3.0
    with tf.GradientTape() as t:
        y = once(x)
    t.gradient(y, x)
    before = tf.cache_info()
    state["k"] = 3.0
    with tf.GradientTape() as t:
        y = once(x)
    assert float(t.gradient(y, x)) == 3.0 and tf.cache_info().compiles == before.compiles

    reads = tf.op(lambda v: v * 2.0 if float(v) > 0 else v, jit=False)
    with tf.GradientTape() as t:
        y = reads(x)
    assert float(y) == 4.0
    with pytest.raises(jax.errors.ConcretizationTypeError):
        t.gradient(y, x)

    jitted = tf.op(f)
    for k in (1.0, 5.0):
        state["k"] = k
        with tf.GradientTape() as t:
            y = jitted(x)
        assert float(y) == 2.0 and float(t.gradient(y, x)) == 1.0   # (jax.jit's rule)
