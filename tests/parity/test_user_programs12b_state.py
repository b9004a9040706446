"""Round twelve (b), second file: the strategies and the Variables and tape options of training
steps, each program run under real TensorFlow 2.21 and under tapejax (the first file,
``test_user_programs12b.py``, has tracing, custom gradients, DP-SGD and loops). The default,
one-device and one-device mirrored strategies running one train step by ``strategy.run`` with
``compute_average_loss`` and ``strategy.reduce``; Variables in a tape at their edges
(``trainable=False`` statistics and an explicitly watched frozen scale, a Module making its
Variables on the first trace, a Variable made on every trace, a padding row zeroed by a slice
assign and rows reset by ``scatter_nd_update``, ``IndexedSlices`` gradients from ``tf.gather`` and
built by hand fed to optimizers, a replay ring written at a tensor offset, a layer frozen after
its step was traced); the tape's options (``UnconnectedGradients.ZERO`` in PCGrad,
``watch_accessed_variables=False`` with explicit watches, ``tape.reset()`` in a retry loop, a
persistent tape giving three gradients). Data is drawn with NumPy and fed in.
"""
import numpy as np

from .harness import init_array, mlp, mlp_vars, parity, raises, xfail_on_tapejax
from .test_user_programs12b import TOL, _reg

# ---------------------------------------------------------------------------
# Strategies running a train step
# ---------------------------------------------------------------------------

def _strategy_program(tf, strategy):
    """One program for any strategy: Variables and optimizer made in ``scope()``, a dataset
    distributed by the strategy, ``strategy.run`` of a step scaling its loss by
    ``compute_average_loss`` (global batch 4), losses reduced by SUM and the per-example errors
    by MEAN over axis 0."""
    x, y = _reg(8, seed=37)
    with strategy.scope():
        vs = mlp_vars(tf, seed=38)
        steps = tf.Variable(0, trainable=False)
        opt = tf.keras.optimizers.Adam(0.05)
    ds = strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(4))

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            err = tf.reshape(tf.square(mlp(tf, vs, xb) - yb), [-1])
            loss = tf.nn.compute_average_loss(err, global_batch_size=4)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        steps.assign_add(1)
        return loss, err

    @tf.function
    def dist_step(xb, yb):
        loss, err = strategy.run(train_step, args=(xb, yb))
        return (strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None),
                strategy.reduce(tf.distribute.ReduceOp.MEAN, err, axis=0))

    out = [dist_step(xb, yb) for _ in range(2) for xb, yb in ds]
    return out, [v.numpy() for v in vs], steps.numpy(), strategy.num_replicas_in_sync


@parity(**TOL)
def test_one_train_step_under_the_default_one_device_and_mirrored_strategies(tf):
    """The same custom training loop under ``tf.distribute.get_strategy()`` (the default),
    ``OneDeviceStrategy('/cpu:0')`` and ``MirroredStrategy(['/cpu:0'])`` gives the same numbers
    each time; ``has_strategy()`` is False outside and True inside a scope."""
    default = _strategy_program(tf, tf.distribute.get_strategy())
    one = _strategy_program(tf, tf.distribute.OneDeviceStrategy("/cpu:0"))
    mirrored_strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    mirrored = _strategy_program(tf, mirrored_strategy)
    with mirrored_strategy.scope():
        inside = tf.distribute.has_strategy()
    return default, one, mirrored, tf.distribute.has_strategy(), inside


# ---------------------------------------------------------------------------
# Variables at their edges in a tape
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_module_making_its_variables_on_the_first_traced_call(tf):
    """A ``tf.Module`` whose compiled ``__call__`` makes its kernel and a non-trainable call
    counter on the first trace (``if self.w is None``), sized from the input's static width; a
    compiled step under a tape trains it for three steps; the counter is incremented inside the
    call and is neither watched nor in ``trainable_variables``; a function that makes a Variable
    unconditionally fails on its first call (TF traces it again to check no Variable is made)."""
    class LazyDense(tf.Module):
        def __init__(self, units):
            super().__init__()
            self.units, self.w, self.calls = units, None, None

        @tf.function
        def __call__(self, x):
            if self.w is None:
                self.w = tf.Variable(init_array((x.shape[-1], self.units), 39), name="w")
                self.calls = tf.Variable(0, trainable=False, name="calls")
            self.calls.assign_add(1)
            return tf.matmul(x, self.w)

    layer = LazyDense(2)
    x, y = _reg(6, seed=40)
    y2 = np.concatenate([y, -y], 1)
    watched = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(layer(tf.constant(x)) - y2))
        watched.append(len(tape.watched_variables()))
        g = tape.gradient(loss, layer.trainable_variables)
        layer.w.assign_sub(0.1 * g[0])

    @tf.function
    def bad(v):
        return v * tf.Variable(2.0)

    first = raises(bad, tf.constant(1.0))
    second = raises(bad, tf.constant([1.0, 2.0]))
    return (loss, layer.w.numpy(), layer.calls.numpy(), watched, len(layer.trainable_variables),
            len(layer.variables), first, second)


@parity(modes=True, **TOL)
def test_frozen_batch_statistics_and_a_trainable_false_scale_in_a_tape(tf):
    """A normalising layer with ``trainable=False`` running mean and variance updated by ``assign``
    inside the step (not watched: their gradient is None) and a ``trainable=False`` scale that is
    watched explicitly by ``tape.watch`` for a sensitivity readout; the trainable kernel gets Momentum
    updates in a compiled step."""
    mean = tf.Variable(np.zeros(3, np.float32), trainable=False)
    var = tf.Variable(np.ones(3, np.float32), trainable=False)
    scale = tf.Variable(np.full(3, 1.5, np.float32), trainable=False)
    w = tf.Variable(init_array((3, 1), 41))
    opt = tf.keras.optimizers.SGD(0.05, momentum=0.5)
    x, y = _reg(8, seed=42)

    @tf.function
    def step(x, y):
        m, v = tf.reduce_mean(x, 0), tf.math.reduce_variance(x, 0)
        mean.assign(0.9 * mean + 0.1 * m)
        var.assign(0.9 * var + 0.1 * v)
        with tf.GradientTape() as tape:
            tape.watch(scale)
            xn = (x - mean) / tf.sqrt(var + 1e-3) * scale
            loss = tf.reduce_mean(tf.square(tf.matmul(xn, w) - y))
        gw, gscale, gmean, gvar = tape.gradient(loss, [w, scale, mean, var])
        opt.apply_gradients([(gw, w)])
        return loss, gscale, gmean is None, gvar is None, len(tape.watched_variables())

    outs = [step(x, y) for _ in range(3)]
    return outs, w.numpy(), mean.numpy(), var.numpy()


@parity(modes=True, **TOL)
def test_embedding_with_a_zeroed_padding_row_and_reset_rows_by_scatter_nd_update(tf):
    """A bag-of-embeddings classifier: ``tf.gather`` of the table gives an ``IndexedSlices``
    gradient (repeated ids summed) that Adagrad applies; after each step the padding row is zeroed
    by a slice assign ``table[0:1].assign`` and rows 5 and 6 are reset by ``scatter_nd_update``;
    the gradient's type and dense value are returned."""
    table = tf.Variable(init_array((8, 3), 43))
    head = tf.Variable(init_array((3, 2), 44))
    opt = tf.keras.optimizers.Adagrad(0.3)
    ids = np.array([[1, 2, 2, 0], [3, 5, 0, 0], [6, 1, 1, 4]], np.int32)
    labels = np.array([0, 1, 1], np.int32)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            emb = tf.gather(table, ids)
            mask = tf.cast(ids > 0, tf.float32)[..., None]
            bag = tf.reduce_sum(emb * mask, 1) / tf.reduce_sum(mask, 1)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
                labels=labels, logits=tf.matmul(bag, head)))
        g_table, g_head = tape.gradient(loss, [table, head])
        out.append((loss, isinstance(g_table, tf.IndexedSlices), tf.convert_to_tensor(g_table)))
        opt.apply_gradients([(g_table, table), (g_head, head)])
        table[0:1].assign(tf.zeros([1, 3]))
        table.scatter_nd_update([[5], [6]], tf.fill([2, 3], 0.01))
    return out, table.numpy(), head.numpy()


@parity(modes=True, **TOL)
def test_hand_built_indexed_slices_gradient_for_the_rows_a_batch_used(tf):
    """A recommender updating only the user rows of the batch: the gradient of the looked-up rows
    (a dense tensor under the tape) is wrapped by hand in ``tf.IndexedSlices(values, ids,
    dense_shape)`` and given to SGD with momentum together with the item table's dense gradient;
    duplicate user ids in the batch add up."""
    users = tf.Variable(init_array((5, 2), 45))
    items = tf.Variable(init_array((4, 2), 46))
    opt = tf.keras.optimizers.SGD(0.2, momentum=0.9)
    u_ids = np.array([0, 3, 3, 1], np.int32)
    i_ids = np.array([2, 0, 1, 3], np.int32)
    ratings = np.array([1.0, -0.5, 0.3, 0.8], np.float32)
    out = []
    for _ in range(3):
        u = tf.gather(users, u_ids)
        with tf.GradientTape() as tape:
            tape.watch(u)
            pred = tf.reduce_sum(u * tf.gather(items, i_ids), 1)
            loss = tf.reduce_mean(tf.square(pred - ratings))
        gu, gi = tape.gradient(loss, [u, items])
        sparse = tf.IndexedSlices(gu, tf.constant(u_ids), dense_shape=tf.constant([5, 2]))
        opt.apply_gradients([(sparse, users), (gi, items)])
        out.append((loss, gu))
    return out, users.numpy(), items.numpy()


# ---------------------------------------------------------------------------
# The tape's options
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_pcgrad_in_a_compiled_step_with_zero_unconnected_head_gradients(tf):
    """PCGrad for two regression tasks on a shared trunk: one persistent tape gives each task's
    gradient for all Variables (the other task's head unconnected, so ``UnconnectedGradients.ZERO``),
    each flattened; where the two conflict (negative dot product) each is projected off the other,
    then they are summed, split back and applied by SGD; two compiled steps."""
    trunk = [tf.Variable(init_array((3, 4), 47)), tf.Variable(np.zeros(4, np.float32))]
    heads = [tf.Variable(init_array((4, 1), 48)), tf.Variable(init_array((4, 1), 49))]
    variables = trunk + heads
    opt = tf.keras.optimizers.SGD(0.1)
    x, y1 = _reg(6, seed=50)
    y2 = -y1 + 0.3

    @tf.function
    def step(x, y1, y2):
        with tf.GradientTape(persistent=True) as tape:
            h = tf.tanh(tf.matmul(x, trunk[0]) + trunk[1])
            losses = [tf.reduce_mean(tf.square(tf.matmul(h, hd) - t)) for hd, t in zip(heads, (y1, y2))]
        flats = [tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(
            loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)], 0) for loss in losses]
        del tape
        dot = tf.reduce_sum(flats[0] * flats[1])
        projected = [tf.where(dot < 0, g - dot / tf.reduce_sum(o * o) * o, g)
                     for g, o in ((flats[0], flats[1]), (flats[1], flats[0]))]
        total = projected[0] + projected[1]
        grads, start = [], 0
        for v in variables:
            n = int(np.prod(v.shape))
            grads.append(tf.reshape(total[start:start + n], v.shape))
            start += n
        opt.apply_gradients(zip(grads, variables))
        return losses, dot, total

    outs = [step(x, y1, y2) for _ in range(2)]
    return outs, [v.numpy() for v in variables]


@parity(modes=True, **TOL)
def test_fine_tuning_only_the_explicitly_watched_head(tf):
    """Transfer learning by tape options: ``watch_accessed_variables=False`` and ``tape.watch`` on
    the head's two Variables only, in a compiled step and eagerly; the frozen backbone's gradient is
    None, only the head moves, and ``watched_variables()`` lists two."""
    backbone = tf.Variable(init_array((3, 5), 51))
    head_w = tf.Variable(init_array((5, 1), 52))
    head_b = tf.Variable([0.0])
    x, y = _reg(7, seed=53)

    def step(x, y):
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch([head_w, head_b])
            feats = tf.nn.relu(tf.matmul(x, backbone))
            loss = tf.reduce_mean(tf.square(tf.matmul(feats, head_w) + head_b - y))
        gb, gw, gbias = tape.gradient(loss, [backbone, head_w, head_b])
        head_w.assign_sub(0.1 * gw)
        head_b.assign_sub(0.1 * gbias)
        return loss, gb is None, gw, len(tape.watched_variables())

    compiled = tf.function(step)
    outs = [compiled(x, y) for _ in range(2)] + [step(x, y) for _ in range(2)]
    return outs, backbone.numpy(), head_w.numpy(), head_b.numpy()


@parity(modes=True, **TOL)
def test_tape_reset_discards_a_non_finite_attempt_and_retries_with_a_smaller_input_scale(tf):
    """An eager loop that computes ``exp`` of a scaled input under a tape; when the loss is not
    finite it calls ``tape.reset()`` and recomputes at half the scale inside the same ``with``
    block, so the gradient is that of the finite attempt only; the number of attempts per step is
    recorded."""
    w = tf.Variable(np.array([[30.0], [40.0], [-5.0]], np.float32))
    x = tf.constant(init_array((4, 3), 54, 1.0) + 2.0)
    out = []
    for _ in range(2):
        scale, attempts = 4.0, 0
        with tf.GradientTape() as tape:
            while True:
                attempts += 1
                loss = tf.reduce_mean(tf.exp(scale * tf.matmul(x, w)))
                if bool(tf.math.is_finite(loss)) or attempts > 10:
                    break
                tape.reset()
                scale /= 2.0
        g = tape.gradient(loss, w)
        w.assign_sub(1e-3 * tf.clip_by_norm(g, 1.0) * 1000.0)
        out.append((loss, g, attempts, scale))
    return out, w.numpy()


@parity(modes=True, **TOL)
def test_persistent_tape_for_task_loss_penalty_and_an_input_gradient_norm(tf):
    """One persistent tape records a classifier's logits; three gradients come from it: the task
    loss for the weights, an L1 penalty for the weights (taken separately to log its share), and
    the input gradient whose norm is the robustness score; the first two are added and applied;
    the tape is deleted after use; two compiled steps."""
    w = tf.Variable(init_array((4, 3), 55))
    b = tf.Variable(np.zeros(3, np.float32))
    opt = tf.keras.optimizers.SGD(0.2)
    rs = np.random.RandomState(56)
    x = rs.randn(6, 4).astype(np.float32)
    labels = rs.randint(0, 3, 6).astype(np.int32)

    @tf.function
    def step(x, labels):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            logits = tf.matmul(x, w) + b
            task = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            penalty = 0.01 * tf.reduce_sum(tf.abs(w))
        g_task = tape.gradient(task, [w, b])
        g_pen = tape.gradient(penalty, [w, b])
        g_x = tape.gradient(task, x)
        del tape
        grads = [gt if gp is None else gt + gp for gt, gp in zip(g_task, g_pen)]
        opt.apply_gradients(zip(grads, [w, b]))
        return task, penalty, g_pen[1] is None, tf.norm(g_x, axis=1)

    outs = [step(x, labels) for _ in range(2)]
    return outs, w.numpy(), b.numpy()


@parity(modes=True, **TOL)
def test_replay_buffer_ring_written_by_slice_assigns_at_a_tensor_offset(tf):
    """A DQN-style replay buffer held in Variables: a compiled ``add`` writes each batch of 3
    transitions with ``buf[start:start + 3].assign`` at a tensor write pointer (wrapping by
    ``tf.math.floormod``, the pointer a non-trainable int Variable); a compiled train step gathers a
    NumPy-chosen sample of rows and fits a linear Q-function to the stored targets."""
    obs = tf.Variable(tf.zeros([9, 2]), trainable=False)
    tgt = tf.Variable(tf.zeros([9]), trainable=False)
    ptr = tf.Variable(0, trainable=False)
    q = tf.Variable(init_array((2, 1), 68))
    opt = tf.keras.optimizers.SGD(0.2)
    rs = np.random.RandomState(69)

    @tf.function
    def add(o, t):
        start = ptr.read_value()
        obs[start:start + 3].assign(o)
        tgt[start:start + 3].assign(t)
        ptr.assign(tf.math.floormod(start + 3, 9))

    @tf.function
    def train(idx):
        with tf.GradientTape() as tape:
            pred = tf.squeeze(tf.matmul(tf.gather(obs, idx), q), 1)
            loss = tf.reduce_mean(tf.square(pred - tf.gather(tgt, idx)))
        g = tape.gradient(loss, q)
        opt.apply_gradients([(g, q)])
        return loss, g

    out = []
    for step in range(5):
        o = rs.randn(3, 2).astype(np.float32)
        add(o, (o @ np.array([1.0, -2.0], np.float32)).astype(np.float32))
        filled = min(9, 3 * (step + 1))
        out.append((ptr.numpy(), train(rs.randint(0, filled, 4).astype(np.int32))))
    return out, obs.numpy(), q.numpy(), add.experimental_get_tracing_count()


@parity(**TOL)
def test_freezing_a_layer_after_the_step_was_traced_has_no_effect_until_a_new_function(tf):
    """TF's tracing gotcha: a compiled step reads ``model.trainable_variables`` when it is traced,
    so setting ``layer.trainable = False`` afterwards still trains that layer in the same
    ``tf.function``; a freshly wrapped step (a new trace) leaves it alone."""
    model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(4, activation="tanh"),
                                 tf.keras.layers.Dense(1)])
    model.set_weights([init_array((3, 4), 70), np.zeros(4, np.float32), init_array((4, 1), 71),
                       np.zeros(1, np.float32)])
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(6, seed=72)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        variables = model.trainable_variables
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    compiled = tf.function(step)
    compiled(x, y)
    model.layers[0].trainable = False
    before = model.layers[0].kernel.numpy()
    stale = compiled(x, y)
    moved_by_stale = np.abs(model.layers[0].kernel.numpy() - before).max() > 0
    fresh = tf.function(step)
    after_stale = model.layers[0].kernel.numpy()
    new = fresh(x, y)
    return (stale, new, moved_by_stale, after_stale - model.layers[0].kernel.numpy(),
            model.layers[1].kernel.numpy(), len(model.trainable_variables))


@parity(modes=True, **TOL)
def test_greedy_decoder_whose_length_limit_is_a_tensor_argument(tf):
    """Inference after training: a compiled greedy decoder runs a ``tf.while_loop`` until the end
    token or ``maximum_iterations=max_len``, where ``max_len`` is a Tensor argument (one trace for
    every limit), writing tokens into a fixed buffer of 8 by ``tensor_scatter_nd_update``; the
    next-token model was first trained for two steps by a tape."""
    emb = tf.Variable(init_array((5, 3), 73))
    out_w = tf.Variable(init_array((3, 5), 74))
    traces = []
    pairs = np.array([[0, 2], [2, 3], [3, 1], [1, 4]], np.int32)
    for _ in range(2):
        with tf.GradientTape() as tape:
            logits = tf.matmul(tf.gather(emb, pairs[:, 0]), out_w)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=pairs[:, 1], logits=logits))
        g_emb, g_out = tape.gradient(loss, [emb, out_w])
        emb.scatter_sub(tf.IndexedSlices(0.5 * g_emb.values, g_emb.indices))
        out_w.assign_sub(0.5 * g_out)

    @tf.function
    def decode(start, max_len):
        traces.append(1)

        def body(i, tok, buf):
            nxt = tf.argmax(tf.matmul(tf.gather(emb, tok)[None], out_w)[0], output_type=tf.int32)
            return i + 1, nxt, tf.tensor_scatter_nd_update(buf, [[i]], [nxt])

        return tf.while_loop(lambda i, tok, buf: tok != 4, body, (tf.constant(0), start, tf.fill([8], -1)),
                             maximum_iterations=max_len)

    return loss, [decode(tf.constant(0), tf.constant(m)) for m in (1, 2, 6)], len(traces)


@xfail_on_tapejax("tapejax keys a Variable argument of a tf.function by identity (documented in "
                  "tapejax/compile/signature.py: 'Variables and every other object ... by identity'); "
                  "TF 2.21 traces a Variable argument by its shape and dtype, so a second Variable of the "
                  "same shape reuses the trace (2 traces here, tapejax 3)")
@parity(**TOL)
def test_one_compiled_gradient_function_shared_by_layers_passed_as_variables(tf):
    """A compiled helper taking a layer's kernel Variable and an input, returning the gradient of a
    penalty; called for two kernels of one shape and one of another: TF traces it twice."""
    traces = []

    @tf.function
    def penalty_grad(kernel, x):
        traces.append(kernel.shape.as_list())
        with tf.GradientTape() as tape:
            p = tf.reduce_sum(tf.square(tf.matmul(x, kernel)))
        return tape.gradient(p, kernel)

    ks = [tf.Variable(init_array((3, 2), 75)), tf.Variable(init_array((3, 2), 76)),
          tf.Variable(init_array((3, 4), 77))]
    x = tf.constant(init_array((2, 3), 78))
    return [penalty_grad(k, x) for k in ks], len(traces)
