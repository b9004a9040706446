"""Round 17a: the models JAX users have, under a tapejax tape: flax linen and flax nnx.

Part three of the JAX users' programs (``test_jax_users_programs.py``, round 15a;
``test_jax_users_programs2.py``, round 16c); equinox and mixed models are in
``test_jax_users_programs3b.py``.  A flax user wraps ``model.apply`` (or an
``nnx.merge``-ing function) with ``tapejax.op`` and makes the parameters
Variables (``jax.tree_util.tree_map(tf.Variable, params)``): the tape's
sources are then the parameter pytree itself, and the gradients come back in
its structure (dict, FrozenDict, ``nnx.State``, an nnx module).  Each program is
also written in pure JAX (``jax.grad`` / ``jax.value_and_grad`` + optax, flax's
own ``nnx.grad`` / ``nnx.Optimizer``), its own oracle, and the two must agree.
The rules where they cannot agree by design are TF's, written next to the
comparison:

- a source the target does not reach through recorded ops has gradient ``None``
  (pure JAX: zeros); an input of a recorded op the op's output does not depend on
  gets JAX's zeros (the op's vjp gives them, as TF's gradient function does);
- ``model.apply`` called on Tensors directly runs flax's ``jnp`` code on their
  arrays, outside the tape, as ``np.sin(t)`` is in TF: the gradient is ``None``;
- a mutable collection (``batch_stats``) or an nnx module's state changed inside
  an op comes back as the op's output, and the user assigns it, as under ``jax.jit``.

Every program runs with deferred execution and predicted updates on and off
(the ``mode`` fixture).
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn, nnx
from flax.core import FrozenDict, freeze

import tapejax as tf
from jax_users_common import close, mode  # noqa: F401  (mode: the autouse fixture)

RNG = np.random.default_rng(17)
X = RNG.normal(size=(6, 4)).astype(np.float32)
Y = RNG.normal(size=(6, 2)).astype(np.float32)
IMG = RNG.normal(size=(2, 6, 6, 1)).astype(np.float32)
SEQ = RNG.normal(size=(2, 5, 3)).astype(np.float32)


def to_vars(tree):
    return jax.tree_util.tree_map(tf.Variable, tree)


def flat_vars(tree):
    """The Variables (or Tensors) of a pytree: ``is_leaf`` keeps them whole (a Tensor is a JAX pytree
    whose leaf is its array: plain ``tree_leaves`` gives arrays the tape does not track)."""
    return jax.tree_util.tree_leaves(tree, is_leaf=lambda v: isinstance(v, (tf.Variable, tf.Tensor)))


class MLP(nn.Module):
    width: int = 5

    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(jnp.tanh(nn.Dense(self.width)(x)))


def mse(pred, y):
    return jnp.mean((pred - y) ** 2)


# --- flax linen: model.apply as one tape op --------------------------------------------------------

@pytest.mark.parametrize("frozen", [False, True], ids=["dict", "FrozenDict"])
def test_linen_apply_as_op_with_variable_params(frozen):
    """``tapejax.op(model.apply)`` with the params dict (or FrozenDict) of Variables: the loss and
    the gradients, which come back in the params' structure, are jax.value_and_grad's."""
    m = MLP()
    p = m.init(jax.random.key(0), X)
    p = freeze(p) if frozen else p
    vs = to_vars(p)
    apply = tf.op(m.apply)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(apply(vs, X) - Y))
    g = tape.gradient(loss, vs)
    assert isinstance(g, FrozenDict if frozen else dict)
    want_loss, want_g = jax.value_and_grad(lambda p: mse(m.apply(p, X), Y))(p)
    close(loss, want_loss)
    close(g, want_g, rtol=1e-5)


def test_linen_apply_with_watched_tensor_params():
    """The params as Tensors the tape watches (``tape.watch(params)``, a nested dict), and a
    persistent tape asked twice: once for the params, once for the input."""
    m = MLP()
    p = m.init(jax.random.key(1), X)
    tp = jax.tree_util.tree_map(tf.convert_to_tensor, p)
    x = tf.constant(X)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([tp, x])
        loss = tf.reduce_sum(tf.op(m.apply)(tp, x) ** 2)
    f = lambda p, x: jnp.sum(m.apply(p, x) ** 2)  # noqa: E731
    close(tape.gradient(loss, tp), jax.grad(f)(p, X), rtol=1e-5)
    close(tape.gradient(loss, x), jax.grad(f, 1)(p, X), rtol=1e-5)


def test_linen_apply_on_tensors_directly_is_outside_the_tape():
    """``model.apply(variables, x)`` called on Variables without ``tapejax.op`` runs flax's jnp code
    on their arrays: the value is right but nothing is recorded, so the gradient is None (the
    documented rule for a jnp function on a Tensor, TF's for ``np.sin(t)``); ``tapejax.op`` records it."""
    m = MLP()
    p = m.init(jax.random.key(2), X)
    vs = to_vars(p)
    with tf.GradientTape() as tape:
        y = m.apply(vs, X)
        loss = tf.reduce_sum(tf.convert_to_tensor(y))
    close(y, m.apply(p, X), rtol=1e-5)
    assert all(g is None for g in jax.tree_util.tree_leaves(tape.gradient(loss, vs), is_leaf=lambda g: g is None))
    assert "never" in tape.explain(loss, flat_vars(vs)[0]) or tape.explain(loss, flat_vars(vs)[0])


@pytest.mark.parametrize("name", ["Conv", "BatchNorm", "LayerNorm", "RNN"])
def test_linen_layers_called_directly_on_variables_never_give_a_wrong_gradient(name):
    """Without ``tapejax.op``, flax's code meets Variables as JAX meets foreign objects: some layers
    run on their arrays (outside the tape: gradient None), others raise (a Variable has no
    ``reshape``, as TF's has not; ``np.dtype(tf.float32)`` is NumPy's TypeError, as with TF's DType;
    JAX refuses ``__jax_array__`` in abstractification).  Either way, never a wrong gradient;
    ``tapejax.op(model.apply)`` is the way, and gives jax.grad's."""
    m, x = {"Conv": (nn.Conv(2, (3, 3)), IMG), "BatchNorm": (nn.BatchNorm(use_running_average=True), IMG),
            "LayerNorm": (nn.LayerNorm(), IMG), "RNN": (nn.RNN(nn.LSTMCell(3)), SEQ)}[name]
    p = m.init(jax.random.key(14), x)
    vs = to_vars(p)
    with tf.GradientTape(persistent=True) as tape:
        try:
            y = tf.convert_to_tensor(m.apply(vs, tf.constant(x)))
        except (TypeError, ValueError, AttributeError):
            y = None
        loss = tf.reduce_sum(tf.op(m.apply)(vs, x) ** 2)
    if y is not None:
        close(y, m.apply(p, x), rtol=1e-5)
        assert all(g is None for g in jax.tree_util.tree_leaves(tape.gradient(y, vs), is_leaf=lambda g: g is None))
    close(tape.gradient(loss, vs), jax.grad(lambda p: jnp.sum(m.apply(p, x) ** 2))(p), rtol=1e-4, atol=1e-6)


def test_unconnected_params_none_and_unused_op_inputs_zero():
    """TF's rule, checked against JAX's zeros: a Variable outside every recorded op has gradient
    None; a parameter passed into the op that the output does not use (a second head) gets the
    op's vjp, zeros; ``unconnected_gradients='zero'`` gives zeros for the first too."""
    class TwoHeads(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = jnp.tanh(nn.Dense(3)(x))
            return nn.Dense(2, name="a")(h), nn.Dense(1, name="b")(h)
    m = TwoHeads()
    p = m.init(jax.random.key(3), X)
    vs, extra = to_vars(p), tf.Variable(np.ones(2, np.float32))
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_sum(tf.op(m.apply)(vs, X)[0])
    g, ge = tape.gradient(loss, [vs, extra])
    want = jax.grad(lambda p: jnp.sum(m.apply(p, X)[0]))(p)
    close(g, want)
    assert not np.any(np.asarray(g["params"]["b"]["kernel"]))
    assert ge is None
    close(tape.gradient(loss, extra, unconnected_gradients="zero"), np.zeros(2, np.float32))


def test_frozendict_of_losses_as_the_target():
    """An op returning a FrozenDict of losses, the FrozenDict the tape's target: the gradient of
    their sum, as TF's nest takes any Mapping (round 17a: it was NotATensorError)."""
    m = MLP()
    p = m.init(jax.random.key(13), X)
    vs = to_vars(p)

    def losses(p, x, y):
        out = m.apply(p, x)
        return freeze({"mse": mse(out, y), "l2": 1e-2 * sum(jnp.sum(w ** 2) for w in jax.tree_util.tree_leaves(p))})
    with tf.GradientTape() as tape:
        out = tf.op(losses)(vs, X, Y)
    assert isinstance(out, FrozenDict)
    close(tape.gradient(out, vs), jax.grad(lambda p: sum(losses(p, X, Y).values()))(p), rtol=1e-5)


def test_tied_weights_one_variable_at_two_leaves_gets_the_total_gradient():
    """Weights tied by putting one Variable at two leaves of the params (a square encoder and decoder
    kernel): TF's rule, the gradient with respect to that Variable, the total, at both places; pure
    JAX, given the same array at two leaves, gives each leaf its part, so the oracle is their sum."""
    class AE(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(4, name="dec")(jnp.tanh(nn.Dense(4, name="enc")(x)))
    m = AE()
    p = m.init(jax.random.key(15), X)
    p["params"]["dec"]["kernel"] = p["params"]["enc"]["kernel"]
    vs = to_vars(p)
    vs["params"]["dec"]["kernel"] = vs["params"]["enc"]["kernel"]
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.op(m.apply)(vs, X) - X))
    g = tape.gradient(loss, vs)
    want = jax.grad(lambda p: jnp.mean((m.apply(p, X) - X) ** 2))(p)
    total = want["params"]["enc"]["kernel"] + want["params"]["dec"]["kernel"]
    close(g["params"]["enc"]["kernel"], total, rtol=1e-5)
    close(g["params"]["dec"]["kernel"], total, rtol=1e-5)
    close(g["params"]["enc"]["bias"], want["params"]["enc"]["bias"], rtol=1e-5)


def test_second_order_hessian_vector_product_of_a_linen_loss():
    """Nested tapes around the op give a Hessian-vector product: jax.jvp of jax.grad's."""
    m = MLP(width=3)
    p = m.init(jax.random.key(4), X)
    vs = to_vars(p)
    vec = jax.tree_util.tree_map(lambda a: jnp.full_like(a, 0.1), p)
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            loss = tf.reduce_mean(tf.square(tf.op(m.apply)(vs, X) - Y))
        g = inner.gradient(loss, vs)
        gv = tf.add_n([tf.reduce_sum(a * b) for a, b in zip(flat_vars(g), jax.tree_util.tree_leaves(vec))])
    hv = outer.gradient(gv, vs)
    f = lambda p: mse(m.apply(p, X), Y)  # noqa: E731
    close(hv, jax.jvp(jax.grad(f), (p,), (vec,))[1], rtol=1e-4, atol=1e-6)


# --- state and randomness -------------------------------------------------------------------------

class BNNet(nn.Module):
    @nn.compact
    def __call__(self, x, train):
        x = nn.Dense(4)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.5)(x)
        return nn.Dense(2)(jnp.tanh(x))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "function"])
def test_linen_batchnorm_mutable_batch_stats_assigned_back(compiled):
    """``apply(..., mutable=['batch_stats'])`` inside the op returns (out, updates); the step assigns
    the new batch stats to their Variables and SGD-updates the params (eagerly and in
    ``tapejax.function``); three steps vs the pure JAX loop
    with ``has_aux``, then one inference call with the running averages."""
    m = BNNet()
    v0 = m.init(jax.random.key(5), X, train=False)
    params, stats = to_vars(v0["params"]), to_vars(v0["batch_stats"])
    apply = tf.op(lambda p, s, x: m.apply({"params": p, "batch_stats": s}, x, train=True, mutable=["batch_stats"]))
    opt = tf.optimizers.SGD(0.1)

    def pure_loss(p, s, x, y):
        out, upd = m.apply({"params": p, "batch_stats": s}, x, train=True, mutable=["batch_stats"])
        return mse(out, y), upd["batch_stats"]
    rp, rs = v0["params"], v0["batch_stats"]

    def step(x, y):
        with tf.GradientTape() as tape:
            out, upd = apply(params, stats, x)
            loss = tf.reduce_mean(tf.square(out - y))
        g = tape.gradient(loss, params)
        opt.apply_gradients(zip(flat_vars(g), flat_vars(params)))
        for v, new in zip(flat_vars(stats), flat_vars(upd["batch_stats"])):
            v.assign(new)
        return loss
    step = tf.function(step) if compiled else step
    for i in range(3):
        x, y = _batch(i)
        loss = step(x, y)
        (want, new_rs), rg = jax.value_and_grad(pure_loss, has_aux=True)(rp, rs, x, y)
        rp, rs = jax.tree_util.tree_map(lambda a, b: a - 0.1 * b, rp, rg), new_rs
        close(loss, want, rtol=1e-5)
    close(params, rp, rtol=1e-4, atol=1e-6)
    close(stats, rs, rtol=1e-5, atol=1e-6)
    infer = tf.op(lambda p, s, x: m.apply({"params": p, "batch_stats": s}, x, train=False))
    close(infer(params, stats, X), m.apply({"params": rp, "batch_stats": rs}, X, train=False), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make_key", [jax.random.key, jax.random.PRNGKey], ids=["typed", "uint32"])
def test_linen_dropout_with_an_rngs_dict_and_a_fresh_key_each_step(make_key):
    """Dropout with ``rngs={'dropout': key}`` given to ``tapejax.op(model.apply)`` as a keyword (a
    typed key stays a JAX key array; a raw uint32 key is a Tensor: flax takes both), a new key each
    step by ``jax.random.fold_in``: the same masks, losses and gradients as pure JAX."""
    class Drop(nn.Module):
        @nn.compact
        def __call__(self, x, train):
            return nn.Dense(2)(nn.Dropout(0.5, deterministic=not train)(nn.Dense(8)(x)))
    m = Drop()
    p = m.init(jax.random.key(6), X, train=False)
    vs = to_vars(p)
    apply = tf.op(m.apply)
    base = make_key(60)
    for i in range(3):
        key = jax.random.fold_in(base, i)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(apply(vs, X, train=True, rngs={"dropout": key}) - Y))
        f = lambda p: mse(m.apply(p, X, train=True, rngs={"dropout": key}), Y)  # noqa: E731,B023
        want_loss, want_g = jax.value_and_grad(f)(p)
        close(loss, want_loss, rtol=1e-5)
        close(tape.gradient(loss, vs), want_g, rtol=1e-5, atol=1e-6)
    close(apply(vs, X, train=False), m.apply(p, X, train=False), rtol=1e-5)


# --- architectures --------------------------------------------------------------------------------

def test_linen_cnn_conv_and_max_pool():
    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(3, (3, 3), padding="SAME")(x))
            x = nn.max_pool(x, (2, 2), strides=(2, 2))
            return nn.Dense(2)(x.reshape((x.shape[0], -1)))
    m = CNN()
    p = m.init(jax.random.key(7), IMG)
    vs = to_vars(p)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(tf.op(m.apply)(vs, IMG)))
    want_loss, want_g = jax.value_and_grad(lambda p: jnp.sum(m.apply(p, IMG) ** 2))(p)
    close(loss, want_loss, rtol=1e-5)
    close(tape.gradient(loss, vs), want_g, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("how", ["RNN", "scan"])
def test_linen_lstm_cell_over_a_sequence(how):
    """An ``nn.LSTMCell`` run over time by ``nn.RNN`` or by ``nn.scan`` (lifted lax.scan): the
    gradient with respect to the params and to the input sequence."""
    class ScanLSTM(nn.Module):
        @nn.compact
        def __call__(self, xs):
            cell = nn.scan(nn.LSTMCell, variable_broadcast="params", split_rngs={"params": False},
                           in_axes=1, out_axes=1)(features=4)
            carry = nn.LSTMCell(4, parent=None).initialize_carry(jax.random.key(0), xs[:, 0].shape)
            return cell(carry, xs)[1]
    m = nn.RNN(nn.LSTMCell(4)) if how == "RNN" else ScanLSTM()
    p = m.init(jax.random.key(8), SEQ)
    vs, xs = to_vars(p), tf.constant(SEQ)
    with tf.GradientTape() as tape:
        tape.watch(xs)
        loss = tf.reduce_sum(tf.op(m.apply)(vs, xs)[:, -1] ** 2)
    g, gx = tape.gradient(loss, [vs, xs])
    f = lambda p, xs: jnp.sum(m.apply(p, xs)[:, -1] ** 2)  # noqa: E731
    close(loss, f(p, SEQ), rtol=1e-5)
    close(g, jax.grad(f)(p, SEQ), rtol=1e-4, atol=1e-6)
    close(gx, jax.grad(f, 1)(p, SEQ), rtol=1e-4, atol=1e-6)


def test_linen_remat_and_vmap_lifted_modules():
    """``nn.remat`` (rematerialised block) and ``nn.vmap`` (a per-row Dense with shared params)."""
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.remat(MLP)(width=3)(x)
            row = nn.vmap(nn.Dense, in_axes=0, out_axes=0, variable_axes={"params": None},
                          split_rngs={"params": False})(2)
            return row(x)
    m = Net()
    p = m.init(jax.random.key(9), X)
    vs = to_vars(p)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.op(m.apply)(vs, X) - Y))
    want_loss, want_g = jax.value_and_grad(lambda p: mse(m.apply(p, X), Y))(p)
    close(loss, want_loss, rtol=1e-5)
    close(tape.gradient(loss, vs), want_g, rtol=1e-4, atol=1e-6)


# --- training -------------------------------------------------------------------------------------

def _pure_training(m, p, tx, steps):
    @jax.jit
    def step(p, s, x, y):
        loss, g = jax.value_and_grad(lambda p: mse(m.apply(p, x), y))(p)
        u, s = tx.update(g, s, p)
        return optax.apply_updates(p, u), s, loss
    s, losses = tx.init(p), []
    for i in range(steps):
        p, s, loss = step(p, s, *_batch(i))
        losses.append(loss)
    return p, np.array(losses)


def _batch(i):
    return X[i % 2 * 3:i % 2 * 3 + 3], Y[i % 2 * 3:i % 2 * 3 + 3]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "function"])
@pytest.mark.parametrize("which", ["SGD-momentum", "from_optax-adam"])
def test_linen_model_trained_vs_optax_loop(which, compiled):
    """Four steps of a flax MLP trained by tapejax (its SGD with momentum, or ``from_optax(adam)``),
    eagerly and inside ``tapejax.function``, vs the pure ``jax.jit`` + optax loop; the op
    ``tapejax.op(m.apply)`` written inside the step is made once (it was one op per step)."""
    m = MLP()
    p = m.init(jax.random.key(10), X)
    if which == "SGD-momentum":
        opt, tx = tf.optimizers.SGD(0.1, momentum=0.9), optax.sgd(0.1, momentum=0.9)
    else:
        opt, tx = tf.optimizers.from_optax(optax.adam(0.05)), optax.adam(0.05)
    vs = to_vars(p)

    def step(x, y):
        with tf.GradientTape() as tape:   # (the op written inline: made once, round 17a)
            loss = tf.reduce_mean(tf.square(tf.op(m.apply)(vs, x) - y))
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(flat_vars(g), flat_vars(vs)))
        return loss
    step = tf.function(step) if compiled else step
    losses = [np.asarray(step(*_batch(i))) for i in range(4)]
    want_p, want_losses = _pure_training(m, p, tx, 4)
    close(np.array(losses), want_losses, rtol=1e-5)
    close(vs, want_p, rtol=1e-4, atol=1e-5)
    assert tf.op(m.apply) is tf.op(m.apply)


def test_linen_params_saved_and_restored_by_checkpoint(tmp_path):
    """``tapejax.train.Checkpoint(params=variables)`` of a flax params dict: restored into fresh
    Variables, the model's output is the saved params'."""
    m = MLP()
    p = m.init(jax.random.key(11), X)
    vs = to_vars(p)
    path = tf.train.Checkpoint(params=vs).save(str(tmp_path / "ck"))
    fresh = to_vars(m.init(jax.random.key(12), X))
    tf.train.Checkpoint(params=fresh).restore(path).assert_consumed()
    close(fresh, p)
    close(tf.op(m.apply)(fresh, X), m.apply(p, X), rtol=1e-5)


# --- flax nnx -------------------------------------------------------------------------------------

class NNXMLP(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(4, 5, rngs=rngs)
        self.l2 = nnx.Linear(5, 2, rngs=rngs)

    def __call__(self, x):
        return self.l2(jnp.tanh(self.l1(x)))


def test_nnx_split_state_as_sources_merge_inside_the_op():
    """``graphdef, state = nnx.split(model)``; the state's arrays as Variables are the sources and
    ``nnx.merge(graphdef, state)`` runs inside the op (graphdef a static argument): the gradient is
    an ``nnx.State`` equal to ``nnx.grad``'s."""
    model = NNXMLP(nnx.Rngs(0))
    gd, state = nnx.split(model)
    sv = to_vars(state)
    f = tf.op(lambda gd, s, x: jnp.mean((nnx.merge(gd, s)(x) - Y) ** 2))
    with tf.GradientTape() as tape:
        loss = f(gd, sv, X)
    g = tape.gradient(loss, sv)
    assert isinstance(g, nnx.State)
    want = nnx.grad(lambda m: mse(m(X), Y))(model)
    close(loss, mse(model(X), Y))
    close(g, want, rtol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "function"])
def test_nnx_training_loop_vs_nnx_optimizer(compiled):
    """The loop of ``nnx.Optimizer`` done by tapejax (Variables of the split state, SGD with momentum,
    eagerly and in ``tapejax.function``, ``nnx.update`` to write the trained state back into the
    module) vs ``nnx.Optimizer`` itself."""
    model, ref = NNXMLP(nnx.Rngs(1)), NNXMLP(nnx.Rngs(1))
    gd, state = nnx.split(model)
    sv = to_vars(state)
    opt = tf.optimizers.SGD(0.1, momentum=0.9)
    loss_op = tf.op(lambda s, x, y: jnp.mean((nnx.merge(gd, s)(x) - y) ** 2))
    ref_opt = nnx.Optimizer(ref, optax.sgd(0.1, momentum=0.9), wrt=nnx.Param)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_op(sv, x, y)
        g = tape.gradient(loss, sv)
        opt.apply_gradients(zip(flat_vars(g), flat_vars(sv)))
        return loss
    step = tf.function(step) if compiled else step
    for i in range(3):
        x, y = _batch(i)
        loss = step(x, y)
        want, rg = nnx.value_and_grad(lambda m: mse(m(x), y))(ref)  # noqa: B023
        ref_opt.update(ref, rg)
        close(loss, want, rtol=1e-5)
    nnx.update(model, jax.tree_util.tree_map(jnp.asarray, sv, is_leaf=lambda v: isinstance(v, tf.Variable)))
    close(model(X), ref(X), rtol=1e-4, atol=1e-5)


def test_nnx_module_itself_into_an_op_and_as_a_source():
    """An nnx module is a JAX pytree: passed into an op, its arrays are the op's inputs (the value is
    the module's call; constants to the tape).  As a gradient source it needs Variables at its
    leaves (``tree_map(tf.Variable, model)``): then the gradient is a module of the same class,
    equal to ``nnx.grad``'s.  A module still holding arrays is an error naming ``sources``.  Called
    directly (no op), nnx's jnp code runs on the Variables' arrays: right values, gradient None."""
    model = NNXMLP(nnx.Rngs(2))
    call = tf.op(lambda m, x: jnp.mean((m(x) - Y) ** 2))
    close(call(model, X), mse(model(X), Y))
    with tf.GradientTape() as tape:
        loss = call(model, X)
    with pytest.raises(TypeError, match="`sources`.*Variable"):
        tape.gradient(loss, model)
    mv = to_vars(model)
    with tf.GradientTape() as tape:
        loss = call(mv, X)
    g = tape.gradient(loss, mv)
    assert isinstance(g, NNXMLP)
    close(g, jax.grad(lambda m: mse(m(X), Y))(model), rtol=1e-5)   # (jax.grad of the module pytree)
    close(flat_vars(g), jax.tree_util.tree_leaves(nnx.grad(lambda m: mse(m(X), Y))(model)), rtol=1e-5)
    with tf.GradientTape() as tape:   # (called directly: nnx's jnp code on the arrays, outside the tape)
        y = mv(tf.constant(X))
        loss = tf.reduce_sum(tf.convert_to_tensor(y))
    close(y, model(X), rtol=1e-5)
    assert all(d is None for d in jax.tree_util.tree_leaves(tape.gradient(loss, mv), is_leaf=lambda d: d is None))


def test_nnx_batchnorm_and_dropout_state_returned_from_the_op():
    """An nnx module with BatchNorm and Dropout: its mutable state (batch stats, the dropout RNG
    counter, the key) changes inside the op, so the op returns the new non-param state and the step
    passes it to the next call, as a JAX user returns it from ``jax.jit``; params trained by SGD, three steps vs pure JAX."""
    class Net(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(4, 6, rngs=rngs)
            self.bn = nnx.BatchNorm(6, momentum=0.5, rngs=rngs)
            self.drop = nnx.Dropout(0.3, rngs=rngs)
            self.l2 = nnx.Linear(6, 2, rngs=rngs)

        def __call__(self, x):
            return self.l2(self.drop(jnp.tanh(self.bn(self.l1(x)))))
    gd, params, rest = nnx.split(Net(nnx.Rngs(3, dropout=30)), nnx.Param, ...)
    ref = Net(nnx.Rngs(3, dropout=30))
    ref_opt = nnx.Optimizer(ref, optax.sgd(0.1), wrt=nnx.Param)

    def loss_fn(p, rest, x, y):
        m = nnx.merge(gd, p, rest)
        loss = mse(m(x), y)
        return loss, nnx.state(m, nnx.Not(nnx.Param))
    with pytest.raises(TypeError, match="initial_value is a JAX PRNG key array"):
        to_vars(rest)   # (the Rngs' key: no Variable holds one, so the rest is threaded as a value)
    pv, rv = to_vars(params), rest
    loss_op = tf.op(loss_fn)
    for i in range(3):
        x, y = _batch(i)
        with tf.GradientTape() as tape:
            loss, new_rest = loss_op(pv, rv, x, y)
        g = tape.gradient(loss, pv)
        for v, d in zip(flat_vars(pv), flat_vars(g)):
            v.assign_sub(0.1 * d)
        rv = new_rest
        want, rg = nnx.value_and_grad(lambda m: mse(m(x), y))(ref)  # noqa: B023
        ref_opt.update(ref, rg)
        close(loss, want, rtol=1e-5)
    close(flat_vars(pv), jax.tree_util.tree_leaves(nnx.state(ref, nnx.Param)), rtol=1e-4, atol=1e-6)
    stats = nnx.state(ref, nnx.BatchStat)
    close(flat_vars(nnx.filter_state(rv, nnx.BatchStat)), jax.tree_util.tree_leaves(stats), rtol=1e-5, atol=1e-6)


def test_nnx_module_mutated_in_an_op_is_returned_as_from_jax_jit():
    """An nnx BatchNorm module (a pytree of arrays) passed into an op and updated there: as under
    ``jax.jit``, the module outside is unchanged, and returning it gives the updated module (its
    statistics as Tensors); ``nnx.update`` writes them back."""
    bn = nnx.BatchNorm(4, momentum=0.5, rngs=nnx.Rngs(4))
    y, new = tf.op(lambda m, x: (m(x), m))(bn, X)
    want_y, want = jax.jit(lambda m, x: (m(x), m))(bn, X)
    assert isinstance(new, nnx.BatchNorm)
    close(bn.mean[...], np.zeros(4, np.float32))
    close(y, want_y, rtol=1e-5)
    close(new, want, rtol=1e-5)
    nnx.update(bn, nnx.state(jax.tree_util.tree_map(jnp.asarray, new, is_leaf=lambda t: isinstance(t, tf.Tensor))))
    close(bn.mean[...], want.mean[...], rtol=1e-5)
