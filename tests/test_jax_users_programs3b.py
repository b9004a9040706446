"""Round 17a, second file: equinox models, and flax, equinox and tapejax layers mixed in one tape.

The rules are those of ``test_jax_users_programs3.py``.  An equinox model is a
pytree whose leaves are its arrays *and* its non-array fields (an MLP's
activation functions): ``eqx.partition(model, eqx.is_inexact_array)`` splits it
as a JAX user does for ``jax.grad``; the whole model with Variables at its
inexact-array leaves is also a gradient source, and the non-array leaves get
``None``, what ``eqx.filter_grad`` gives there.  As an op argument, the
non-array leaves are static parameters of the op (hashable: functions are).
Every program runs with deferred execution and predicted updates on and off.
"""
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn

import tapejax as tf
from jax_users_common import close, mode  # noqa: F401  (mode: the autouse fixture)

RNG = np.random.default_rng(171)
X = RNG.normal(size=(6, 4)).astype(np.float32)
Y = RNG.normal(size=(6, 2)).astype(np.float32)
IMG = RNG.normal(size=(2, 1, 6, 6)).astype(np.float32)
SEQ = RNG.normal(size=(5, 3)).astype(np.float32)


def is_var(x):
    return isinstance(x, (tf.Variable, tf.Tensor))


def flat_vars(tree):
    """The Variables (or Tensors) of a pytree, whole (a Tensor is a JAX pytree node around its array),
    without the model's non-array leaves."""
    return [x for x in jax.tree_util.tree_leaves(tree, is_leaf=is_var) if is_var(x)]


def to_vars(model):
    """The model with a Variable at each inexact-array leaf (functions and other fields kept)."""
    return jax.tree_util.tree_map(lambda a: tf.Variable(a) if eqx.is_inexact_array(a) else a, model)


def arrays(tree):
    """Back to a pure-JAX pytree (Variables and Tensors as arrays, None kept)."""
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a) if is_var(a) else a, tree, is_leaf=is_var)


def mlp(key=0):
    return eqx.nn.MLP(4, 2, 5, 2, activation=jax.nn.tanh, key=jax.random.key(key))


def batch_loss(model, x, y):
    return jnp.mean((jax.vmap(model)(x) - y) ** 2)


# --- equinox --------------------------------------------------------------------------------------

def test_eqx_partition_params_as_sources_static_part_as_op_argument():
    """``params, static = eqx.partition(model, eqx.is_inexact_array)``; the params as Variables are
    the sources, ``eqx.combine`` runs inside the op (static: a static argument of the op); the
    gradient is an MLP pytree equal to ``eqx.filter_grad``'s, None where that gives None."""
    model = mlp()
    params, static = eqx.partition(model, eqx.is_inexact_array)
    pv = jax.tree_util.tree_map(tf.Variable, params)
    loss_op = tf.op(lambda p, s, x, y: batch_loss(eqx.combine(p, s), x, y))
    with tf.GradientTape() as tape:
        loss = loss_op(pv, static, X, Y)
    g = tape.gradient(loss, pv)
    want_loss, want = eqx.filter_value_and_grad(batch_loss)(model, X, Y)
    assert isinstance(g, eqx.nn.MLP)
    close(loss, want_loss)
    close(g, want, rtol=1e-5)


def test_eqx_model_itself_as_op_argument_and_gradient_source():
    """The model with Variables at its array leaves is the op's argument and the tape's source:
    the gradient is an MLP with None at the activation functions, as ``eqx.filter_grad`` gives
    (round 17a: the non-array leaves were a NotATensorError naming ``sources``)."""
    model = mlp(1)
    mv = to_vars(model)
    with tf.GradientTape() as tape:
        loss = tf.op(batch_loss)(mv, X, Y)
    g = tape.gradient(loss, mv)
    want = eqx.filter_grad(batch_loss)(model, X, Y)
    assert g.activation is None and g.final_activation is None and want.activation is None
    close(g, want, rtol=1e-5)
    with tf.GradientTape() as tape:
        tape.watch(mv)   # (watch takes the model too)
        loss = tf.op(batch_loss)(mv, X, Y)
    close(tape.gradient(loss, mv), want, rtol=1e-5)
    with tf.GradientTape() as tape:
        out = tf.op(lambda m, x: jax.vmap(m)(x))(mv, X[:2])
    jac = tape.jacobian(out, mv)
    want_jac = eqx.filter_jacrev(lambda m: jax.vmap(m)(X[:2]))(model)
    assert jac.activation is None
    close(jac, want_jac, rtol=1e-5)


class Lookup(eqx.Module):
    """A user's module: a float table, an integer index buffer and a function field."""
    table: jax.Array
    ids: jax.Array
    act: object = jax.nn.softplus

    def __call__(self, x):
        return self.act(self.table[self.ids] @ x)


def test_eqx_custom_module_with_an_integer_buffer_as_a_source():
    """A custom ``eqx.Module`` whose integer buffer stays an array (to_vars makes Variables of the
    inexact arrays only): as a source, the buffer and the function get None, the table its
    gradient, as ``eqx.filter_grad`` gives (round 17a: the integer array was a NotATensorError)."""
    model = Lookup(RNG.normal(size=(5, 4)).astype(np.float32), jnp.array([0, 3, 3, 1]))
    mv = to_vars(model)
    f = lambda m, x: jnp.sum(m(x) ** 2)  # noqa: E731
    with tf.GradientTape() as tape:
        loss = tf.op(f)(mv, X[0])
    g = tape.gradient(loss, mv)
    want = eqx.filter_grad(f)(model, X[0])
    assert g.ids is None and g.act is None and want.ids is None
    close(loss, f(model, X[0]), rtol=1e-5)
    close(g, want, rtol=1e-5)


def test_eqx_model_of_arrays_as_a_source_is_an_error_naming_it():
    """A model whose weights are still arrays has nothing the tape can follow: TypeError naming
    ``sources``, which says to make the parameters Variables (an array is no Variable in TF either)."""
    model = mlp(2)
    with tf.GradientTape() as tape:
        loss = tf.op(batch_loss)(model, X, Y)
    close(loss, batch_loss(model, X, Y))
    with pytest.raises(TypeError, match="(?s)`sources`.*make the parameters Variables"):
        tape.gradient(loss, model)


def test_eqx_model_called_directly_on_tensors_meets_tf_operator_rules():
    """Called without ``tapejax.op``, an equinox Linear computes ``weight @ x`` with the Variable's
    operator, which is TF's matmul: a rank-1 ``x`` is TF's InvalidArgumentError (rank >= 2), as a
    tf.Variable gives; through the op the same call is JAX's."""
    model = mlp(17)
    mv = to_vars(model)
    with pytest.raises(tf.errors.InvalidArgumentError, match="rank"):
        mv(tf.constant(X[0]))
    close(tf.op(lambda m, x: m(x))(mv, X[0]), model(X[0]), rtol=1e-5)


def test_eqx_conv2d_value_and_grad():
    conv = eqx.nn.Conv2d(1, 3, 3, padding=1, key=jax.random.key(3))
    head = eqx.nn.Linear(3 * 6 * 6, 2, key=jax.random.key(4))
    model = (conv, head)

    def f(model, x):
        conv, head = model
        return jnp.sum(jax.vmap(lambda im: head(jax.nn.relu(conv(im)).reshape(-1)))(x) ** 2)
    mv = to_vars(model)
    with tf.GradientTape() as tape:
        loss = tf.op(f)(mv, IMG)
    want_loss, want = eqx.filter_value_and_grad(f)(model, IMG)
    close(loss, want_loss, rtol=1e-5)
    close(tape.gradient(loss, mv), want, rtol=1e-4, atol=1e-6)


def test_eqx_lstm_cell_scanned_over_time():
    """An ``eqx.nn.LSTMCell`` run by ``lax.scan`` in the op: gradients for the cell and the sequence."""
    cell = eqx.nn.LSTMCell(3, 4, key=jax.random.key(5))

    def f(cell, xs):
        def step(carry, x):
            carry = cell(x, carry)
            return carry, carry[0]
        _, hs = jax.lax.scan(step, (jnp.zeros(4), jnp.zeros(4)), xs)
        return jnp.sum(hs[-1] ** 2)
    cv, xs = to_vars(cell), tf.constant(SEQ)
    with tf.GradientTape() as tape:
        tape.watch(xs)
        loss = tf.op(f)(cv, xs)
    g, gx = tape.gradient(loss, [cv, xs])
    close(loss, f(cell, SEQ), rtol=1e-5)
    close(g, eqx.filter_grad(f)(cell, SEQ), rtol=1e-4, atol=1e-6)
    close(gx, jax.grad(f, 1)(cell, SEQ), rtol=1e-4, atol=1e-6)


def test_eqx_batchnorm_with_state_threaded_through_the_op():
    """``eqx.nn.BatchNorm`` with ``eqx.nn.State``: the op returns (loss, new state) and the step
    passes the new state on (a State is a pytree of arrays); two SGD steps vs pure equinox, then
    inference mode (``eqx.nn.inference_mode``) with the running statistics."""
    model, state = eqx.nn.make_with_state(lambda key: (eqx.nn.Linear(4, 3, key=key),
                                                       eqx.nn.BatchNorm(3, "batch", momentum=0.5, mode="batch")))(jax.random.key(6))

    def loss_fn(model, state, x, y):
        lin, bn = model
        h, state = jax.vmap(bn, axis_name="batch", in_axes=(0, None), out_axes=(0, None))(jax.vmap(lin)(x), state)
        return jnp.mean((h[:, :2] - y) ** 2), state
    mv, sv = to_vars(model), state
    loss_op = tf.op(loss_fn)
    ref, rs = model, state
    for i in range(2):
        with tf.GradientTape() as tape:
            loss, sv = loss_op(mv, sv, X, Y)
        g = tape.gradient(loss, mv)
        for v, d in zip(flat_vars(mv), flat_vars(g)):
            v.assign_sub(0.1 * d)
        (want, rs), rg = eqx.filter_value_and_grad(loss_fn, has_aux=True)(ref, rs, X, Y)
        ref = eqx.apply_updates(ref, jax.tree_util.tree_map(lambda d: -0.1 * d, rg))
        close(loss, want, rtol=1e-5)
    close(flat_vars(mv), jax.tree_util.tree_leaves(eqx.filter(ref, eqx.is_inexact_array)), rtol=1e-4, atol=1e-6)
    infer = eqx.nn.inference_mode(mv)
    got = tf.op(lambda m, s, x: loss_fn(m, s, x, Y)[0])(infer, sv, X)
    close(got, loss_fn(eqx.nn.inference_mode(ref), rs, X, Y)[0], rtol=1e-4, atol=1e-6)


def test_eqx_dropout_and_inference_mode():
    """``eqx.nn.Dropout`` with a key per step in training, then ``eqx.nn.inference_mode`` (no key)."""
    model = (eqx.nn.Linear(4, 8, key=jax.random.key(7)), eqx.nn.Dropout(0.5), eqx.nn.Linear(8, 2, key=jax.random.key(8)))

    def f(model, x, key):
        a, drop, b = model
        keys = None if key is None else jax.random.split(key, x.shape[0])
        return jax.vmap(lambda xi, k: b(drop(a(xi), key=k)), in_axes=(0, None if key is None else 0))(x, keys)
    mv = to_vars(model)
    for i in range(2):
        key = jax.random.fold_in(jax.random.key(70), i)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.op(f)(mv, X, key) ** 2)
        fl = lambda m: jnp.sum(f(m, X, key) ** 2)  # noqa: E731,B023
        want_loss, want = eqx.filter_value_and_grad(fl)(model)
        close(loss, want_loss, rtol=1e-5)
        close(tape.gradient(loss, mv), want, rtol=1e-5, atol=1e-6)
    infer = eqx.nn.inference_mode(mv)
    assert infer[1].inference is True
    close(tf.op(f)(infer, X, None), f(eqx.nn.inference_mode(model), X, None), rtol=1e-5)


def test_filter_jit_and_filter_grad_of_code_with_a_tape_inside():
    """``eqx.filter_jit`` of a function that takes the model, opens a tapejax tape over its arrays
    (converted to Tensors and watched) and returns the gradient as arrays: jax.grad's; and
    ``eqx.filter_grad`` of a gradient-norm penalty computed by that tape: JAX's second order.  A model
    of Variables given to ``eqx.filter_jit`` is JAX's error for an unhashable static argument."""
    model = mlp(9)
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def tape_grad(params):
        tp = jax.tree_util.tree_map(tf.convert_to_tensor, params)
        with tf.GradientTape() as tape:
            tape.watch(tp)
            loss = tf.op(lambda p, x, y: batch_loss(eqx.combine(p, static), x, y))(tp, X, Y)
        return arrays(tape.gradient(loss, tp))
    want = eqx.filter_grad(batch_loss)(model, X, Y)
    close(eqx.filter_jit(tape_grad)(params), eqx.filter(want, eqx.is_inexact_array), rtol=1e-5)
    close(tape_grad(params), eqx.filter(want, eqx.is_inexact_array), rtol=1e-5)
    with pytest.raises(ValueError, match="Non-hashable static"):   # (a Variable is no array to equinox:
        eqx.filter_jit(lambda m: tf.op(batch_loss)(m, X, Y))(to_vars(model))   # static, and unhashable as TF's)

    def penalty(params):
        return sum(jnp.sum(g ** 2) for g in jax.tree_util.tree_leaves(tape_grad(params)))

    def penalty_pure(params):
        g = jax.grad(lambda p: batch_loss(eqx.combine(p, static), X, Y))(params)
        return sum(jnp.sum(a ** 2) for a in jax.tree_util.tree_leaves(g))
    close(eqx.filter_grad(penalty)(params), eqx.filter_grad(penalty_pure)(params), rtol=1e-4, atol=1e-6)


def test_tree_at_updates_weights_from_tape_gradients():
    """A functional loop: the model stays an equinox pytree of arrays, each step the tape's gradient
    of the first layer's weight (a Tensor made a Variable for the step) is applied with
    ``eqx.tree_at``; three steps vs ``eqx.filter_grad`` + ``tree_at``."""
    model = ref = mlp(10)
    where = lambda m: m.layers[0].weight  # noqa: E731
    for _ in range(3):
        w = tf.Variable(where(model))
        with tf.GradientTape() as tape:
            loss = tf.op(lambda w, m, x, y: batch_loss(eqx.tree_at(where, m, w), x, y))(w, model, X, Y)
        model = eqx.tree_at(where, model, jnp.asarray(w) - 0.1 * jnp.asarray(tape.gradient(loss, w)))
        g = eqx.filter_grad(batch_loss)(ref, X, Y)
        ref = eqx.tree_at(where, ref, where(ref) - 0.1 * where(g))
        close(loss, batch_loss(eqx.tree_at(where, ref, where(ref) + 0.1 * where(g)), X, Y), rtol=1e-5)
    close(where(model), where(ref), rtol=1e-5)
    close(model.layers[1].weight, ref.layers[1].weight)


def test_eqx_functional_update_op_returns_the_model():
    """Equinox's functional loop with tapejax: the tape's gradient (a model pytree, None at the
    functions) and the model go into an op that returns ``eqx.apply_updates(model, -lr * grads)``:
    the op's output is an MLP again (its functions returned as they are, round 17a: they were JAX's
    TypeError), made Variables for the next step; three steps vs the pure equinox loop."""
    model = ref = mlp(22)
    update = tf.op(lambda m, g: eqx.apply_updates(m, jax.tree_util.tree_map(lambda d: -0.1 * d, g)))
    for _ in range(3):
        mv = to_vars(model)
        with tf.GradientTape() as tape:
            loss = tf.op(batch_loss)(mv, X, Y)
        new = update(mv, tape.gradient(loss, mv))
        assert isinstance(new, eqx.nn.MLP) and new.activation is model.activation
        model = arrays(new)
        want, g = eqx.filter_value_and_grad(batch_loss)(ref, X, Y)
        ref = eqx.apply_updates(ref, jax.tree_util.tree_map(lambda d: -0.1 * d, g))
        close(loss, want, rtol=1e-5)
    close(eqx.filter(model, eqx.is_inexact_array), eqx.filter(ref, eqx.is_inexact_array), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "function"])
def test_eqx_model_trained_with_from_optax_vs_optax(compiled):
    """The whole model (Variables at its array leaves), an argument of the step, trained by
    ``from_optax(optax.adamw)`` eagerly and in ``tapejax.function`` (no trace after the first call's), vs the
    filter_jit + optax loop."""
    model = mlp(11)
    mv = to_vars(model)
    opt, tx = tf.optimizers.from_optax(optax.adamw(0.05)), optax.adamw(0.05)
    loss_op = tf.op(batch_loss)

    def step(model, x, y):
        with tf.GradientTape() as tape:
            loss = loss_op(model, x, y)
        g = tape.gradient(loss, model)
        opt.apply_gradients(zip(flat_vars(g), flat_vars(model)))
        return loss
    step = tf.function(step) if compiled else step
    params, static = eqx.partition(model, eqx.is_inexact_array)
    s = tx.init(params)

    @eqx.filter_jit
    def ref_step(params, s, x, y):
        loss, g = jax.value_and_grad(lambda p: batch_loss(eqx.combine(p, static), x, y))(params)
        u, s = tx.update(g, s, params)
        return optax.apply_updates(params, u), s, loss
    traces = []
    for i in range(4):
        x, y = X[i % 2 * 3:i % 2 * 3 + 3], Y[i % 2 * 3:i % 2 * 3 + 3]
        loss = step(mv, x, y)
        params, s, want = ref_step(params, s, x, y)
        close(loss, want, rtol=1e-5)
        traces.append(step.experimental_get_tracing_count() if compiled else 0)
    close(flat_vars(mv), jax.tree_util.tree_leaves(params), rtol=1e-4, atol=1e-5)
    assert traces[1:] == [traces[1]] * 3   # (the model an argument: no trace after the first call's)


def test_forward_accumulator_jvp_of_flax_params_and_an_equinox_model():
    """Forward mode: ``ForwardAccumulator`` with a flax params dict of Variables, and with the equinox
    model itself (tangents from ``eqx.partition``, None at the functions), vs ``jax.jvp``."""
    enc = Encoder()
    p = enc.init(jax.random.key(18), X)
    vec = jax.tree_util.tree_map(lambda a: jnp.full_like(a, 0.1), p)
    vs = jax.tree_util.tree_map(tf.Variable, p)
    with tf.autodiff.ForwardAccumulator(vs, vec) as acc:
        y = tf.op(enc.apply)(vs, X)
    close(acc.jvp(y), jax.jvp(lambda p: enc.apply(p, X), (p,), (vec,))[1], rtol=1e-5)
    model = mlp(19)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    tangents = jax.tree_util.tree_map(lambda a: jnp.full_like(a, -0.2), params)
    mv = to_vars(model)
    with tf.autodiff.ForwardAccumulator(mv, tangents) as acc:
        y = tf.op(lambda m, x: jax.vmap(m)(x))(mv, X)
    want = jax.jvp(lambda p: jax.vmap(eqx.combine(p, static))(X), (params,), (tangents,))[1]
    close(acc.jvp(y), want, rtol=1e-5, atol=1e-6)


def test_eqx_model_and_nnx_state_checkpointed_as_dicts_of_their_variables(tmp_path):
    """``tapejax.train.Checkpoint`` tracks Variables, lists and dicts, not JAX pytrees: an equinox
    model (or an nnx State) of Variables is TF's ValueError, which gives the recipe (a dict of the
    Variables by key path); that dict saves, and restores into a fresh model's Variables."""
    from flax import nnx

    def named(tree):
        return {jax.tree_util.keystr(p): v for p, v in jax.tree_util.tree_leaves_with_path(tree, is_leaf=is_var)
                if is_var(v)}
    mv, fresh = to_vars(mlp(20)), to_vars(mlp(21))
    sv = jax.tree_util.tree_map(tf.Variable, nnx.split(nnx.Linear(3, 2, rngs=nnx.Rngs(0)))[1])
    for tree in (mv, sv):
        with pytest.raises(ValueError, match="trackable.*keystr"):
            tf.train.Checkpoint(model=tree)
    path = tf.train.Checkpoint(model=named(mv)).save(str(tmp_path / "ck"))
    tf.train.Checkpoint(model=named(fresh)).restore(path).assert_consumed()
    close(flat_vars(fresh), flat_vars(mv))
    close(tf.op(batch_loss)(fresh, X, Y), batch_loss(mlp(20), X, Y), rtol=1e-5)


# --- mixed ----------------------------------------------------------------------------------------

class Encoder(nn.Module):
    @nn.compact
    def __call__(self, x):
        return jnp.tanh(nn.Dense(5)(x))


def test_flax_encoder_and_equinox_head_in_one_tape():
    """A flax encoder op and an equinox head op in one tape, and a tapejax Variable-based scale
    between them: gradients for all three kinds of parameters vs jax.grad of the composition."""
    enc = Encoder()
    ep = enc.init(jax.random.key(12), X)
    head = eqx.nn.Linear(5, 2, key=jax.random.key(13))
    scale0 = np.float32(1.5)
    ev, hv, scale = jax.tree_util.tree_map(tf.Variable, ep), to_vars(head), tf.Variable(scale0)
    with tf.GradientTape() as tape:
        h = tf.op(enc.apply)(ev, X) * scale
        loss = tf.reduce_mean(tf.square(tf.op(lambda m, h: jax.vmap(m)(h))(hv, h) - Y))
    g = tape.gradient(loss, {"enc": ev, "head": hv, "scale": scale})

    def pure(ep, head, s):
        return jnp.mean((jax.vmap(head)(enc.apply(ep, X) * s) - Y) ** 2)
    want_loss, (ge, gh, gs) = jax.value_and_grad(pure, argnums=(0, 1, 2))(ep, head, scale0)
    close(loss, want_loss, rtol=1e-5)
    close(g, {"enc": ge, "head": gh, "scale": gs}, rtol=1e-5)


def test_tapejax_variable_layer_feeding_a_flax_layer():
    """A layer written with tapejax ops and Variables (tf.matmul, tf.nn.relu) feeding a flax Dense
    op: the tape connects them, the gradient reaches both; the input gets its gradient too."""
    w0 = RNG.normal(size=(4, 3)).astype(np.float32)
    w, b = tf.Variable(w0), tf.Variable(np.zeros(3, np.float32))
    dense = nn.Dense(2)
    dp = dense.init(jax.random.key(14), np.ones((1, 3), np.float32))
    dv = jax.tree_util.tree_map(tf.Variable, dp)
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        h = tf.nn.relu(tf.matmul(x, w) + b)
        loss = tf.reduce_sum(tf.op(dense.apply)(dv, h) ** 2)
    gw, gb, gd, gx = tape.gradient(loss, [w, b, dv, x])

    def pure(w, b, dp, x):
        return jnp.sum(dense.apply(dp, jax.nn.relu(x @ w + b)) ** 2)
    want = jax.grad(pure, argnums=(0, 1, 2, 3))(w0, np.zeros(3, np.float32), dp, X)
    close([gw, gb, gd, gx], list(want), rtol=1e-5)


def test_per_example_gradients_vmap_over_a_tape_and_an_equinox_model():
    """``jax.vmap`` over a function that opens a tape around an equinox model op: per-example
    gradients equal ``jax.vmap(eqx.filter_grad(...))``; under ``jax.jit`` too; and with the model
    of Variables as the tape's source (read unbatched under vmap)."""
    model = mlp(15)
    params, static = eqx.partition(model, eqx.is_inexact_array)

    def per_example(params, x, y):
        tp = jax.tree_util.tree_map(tf.convert_to_tensor, params)
        with tf.GradientTape() as tape:
            tape.watch(tp)
            loss = tf.op(lambda p, x, y: jnp.sum((eqx.combine(p, static)(x) - y) ** 2))(tp, x, y)
        return arrays(tape.gradient(loss, tp))

    def pure(params, x, y):
        return jnp.sum((eqx.combine(params, static)(x) - y) ** 2)
    want = jax.vmap(jax.grad(pure), in_axes=(None, 0, 0))(params, X, Y)
    close(jax.vmap(per_example, in_axes=(None, 0, 0))(params, X, Y), want, rtol=1e-5, atol=1e-6)
    close(jax.jit(jax.vmap(per_example, in_axes=(None, 0, 0)))(params, X, Y), want, rtol=1e-5, atol=1e-6)
    mv = to_vars(model)   # (the model of Variables, read under vmap, the tape's source: DP-SGD's shape)
    loss_op = tf.op(lambda m, x, y: jnp.sum((m(x) - y) ** 2))

    def per_example_of_variables(x, y):
        with tf.GradientTape() as tape:
            loss = loss_op(mv, x, y)
        return arrays(tape.gradient(loss, mv))
    got = jax.vmap(per_example_of_variables)(X, Y)
    assert got.activation is None
    close(eqx.filter(got, eqx.is_inexact_array), want, rtol=1e-5, atol=1e-6)


def test_tape_gradients_tree_mapped_back_to_optax():
    """The tape's gradients (a flax params dict of Tensors) made arrays with ``tree_map(jnp.asarray,
    is_leaf=...)`` and handed to a pure optax transformation; the updates assigned back to the
    Variables: three steps vs the pure loop.  Unconverted, the structures differ (a Tensor is a
    pytree node around its array): a tree_map led by the gradients raises JAX's structure error."""
    enc = Encoder()
    p = enc.init(jax.random.key(16), X)
    vs = jax.tree_util.tree_map(tf.Variable, p)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(0.05))
    s, ref, rs = tx.init(p), p, tx.init(p)
    loss_of = lambda p: jnp.mean((enc.apply(p, X)[:, :2] - Y) ** 2)  # noqa: E731
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.op(loss_of)(vs)
        g = arrays(tape.gradient(loss, vs))
        u, s = tx.update(g, s, arrays(vs))
        jax.tree_util.tree_map(lambda v, d: v.assign_add(d), vs, u, is_leaf=is_var)
        want, rg = jax.value_and_grad(loss_of)(ref)
        ru, rs = tx.update(rg, rs, ref)
        ref = optax.apply_updates(ref, ru)
        close(loss, want, rtol=1e-5)
    close(vs, ref, rtol=1e-4, atol=1e-6)
    with tf.GradientTape() as tape:
        loss = tf.op(loss_of)(vs)
    with pytest.raises(ValueError, match="pytree structure"):
        jax.tree_util.tree_map(lambda d, a: a - d, tape.gradient(loss, vs), p)
