"""Round five of realistic user programs, each run under real TensorFlow 2.21 and under tapejax;
the cheap eager loops also with deferred execution and predicted updates off (``modes=True``),
compiled steps, data pipelines and the eager loops slower than a few seconds on a loaded 2-core
machine in the default mode only (to keep the suite short): Keras-style
``tf.Module`` trees built on first call, ``tf.function`` methods and concrete functions,
AutoGraph loops that stop on a tensor predicate or return early, Variables assigned in converted
branches, tape subtleties (a target given twice, dict targets with dict ``output_gradients``,
integer paths, non-trainable Variables, ties in ``reduce_max`` / ``segment_max``, the boundary of
``clip_by_value``), optimizers fed partial or no gradients, schedules read with a Variable step,
``tf.data`` pipelines built by ``interleave``, ``group_by_window``, ``bucket_by_sequence_length``,
``scan``, ``take_while`` and ``choose_from_datasets``, and losses that solve linear systems.
"""
import os
import tempfile

import numpy as np

from .harness import init_array, parity, raises, regression_data, warned

TOL = dict(rtol=2e-5, atol=2e-6)


# ---------------------------------------------------------------------------
# Modules built on first call, compiled methods, concrete functions
# ---------------------------------------------------------------------------

def _module_classes(tf):
    class Dense(tf.Module):
        def __init__(self, units, seed, name=None):
            super().__init__(name=name)
            self.units, self.seed, self.built = units, seed, False

        def __call__(self, x):
            if not self.built:
                d = int(x.shape[-1])
                self.w = tf.Variable(init_array((d, self.units), self.seed), name="w")
                self.b = tf.Variable(np.zeros(self.units, np.float32), name="b")
                self.calls = tf.Variable(0, trainable=False, name="calls")
                self.built = True
            self.calls.assign_add(1)
            return tf.matmul(x, self.w) + self.b

    class MLP(tf.Module):
        def __init__(self, name=None):
            super().__init__(name=name)
            self.layers = [Dense(4, 1, name="hidden"), Dense(1, 2, name="out")]
            self.scale = tf.Variable(1.0, trainable=False, name="scale")

        def __call__(self, x):
            return self.layers[1](tf.nn.relu(self.layers[0](x))) * self.scale

    return Dense, MLP


@parity(**TOL)
def test_module_tree_built_on_first_call_trained_eagerly(tf):
    """A ``tf.Module`` tree whose layers make their Variables on the first call (a non-trainable
    call counter among them); ``trainable_variables`` (sorted by attribute name, as TF's) feeds
    an optimizer; the non-trainable ones never get a gradient."""
    _, MLP = _module_classes(tf)
    x, y = regression_data()
    m = MLP()
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((m(x) - y) ** 2)
        tv = m.trainable_variables
        g = tape.gradient(loss, tv)
        opt.apply_gradients(zip(g, tv))
        out.append((loss, g, tape.gradient(loss, m.scale) if False else None))
    names = [v.name for v in m.trainable_variables]
    return out, names, len(m.variables), len(m.submodules), m.layers[0].calls, m.trainable_variables


@parity(**TOL)
def test_module_tree_built_inside_a_reduce_retracing_step(tf):
    """The same Module tree built inside a ``tf.function(reduce_retracing=True)`` train step on its
    first call (Variables created once), then called with three batch sizes; an eager evaluation
    between steps reads the trained weights."""
    _, MLP = _module_classes(tf)
    x, y = regression_data(n=12)
    m = MLP()
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    @tf.function(reduce_retracing=True)
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((m(xb) - yb) ** 2)
        g = tape.gradient(loss, m.trainable_variables)
        opt.apply_gradients(zip(g, m.trainable_variables))
        return loss

    out = []
    for n in (12, 8, 4, 12):
        out.append(step(x[:n], y[:n]))
        out.append(tf.reduce_mean((m(x) - y) ** 2))
    return out, m.trainable_variables, m.layers[1].calls


@parity(**TOL)
def test_tf_function_method_on_a_module_with_a_signature(tf):
    """A ``@tf.function(input_signature=...)`` method on a ``tf.Module`` subclass (the train step
    lives in the model); its concrete function is fetched and called too; eval is eager."""
    x, y = regression_data(n=10)

    class Regressor(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(init_array((3, 1), 5))
            self.b = tf.Variable([0.0])
            self.opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)

        def __call__(self, x):
            return tf.matmul(x, self.w) + self.b

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None, 1], tf.float32)])
        def train(self, xb, yb):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((self(xb) - yb) ** 2)
            g = tape.gradient(loss, [self.w, self.b])
            self.opt.apply_gradients(zip(g, [self.w, self.b]))
            return {"loss": loss, "gnorm": tf.linalg.global_norm(g)}

    r = Regressor()
    out = [r.train(x, y), r.train(x[:4], y[:4])]
    cf = r.train.get_concrete_function()
    out.append(cf(tf.constant(x[4:]), tf.constant(y[4:])))
    out.append(tf.reduce_mean((r(x) - y) ** 2))
    return out, r.w, r.b


@parity(**TOL)
def test_checkpoint_rollback_into_the_same_objects(tf):
    """Train, ``checkpoint.write`` a snapshot, train two more steps, ``read`` the snapshot back
    into the same Variables and optimizer (slots and iterations roll back), and train again:
    the replayed steps equal the first ones."""
    x, y = regression_data(n=6)
    w = tf.Variable(init_array((3, 1), 9))
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    ck = tf.train.Checkpoint(w=w, opt=opt)

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    step()
    path = ck.write(os.path.join(tempfile.mkdtemp(), "snap"))
    first = [step(), step()]
    w_after = w.numpy().copy()
    ck.read(path).assert_consumed()
    second = [step(), step()]
    return first, second, w_after, w, int(opt.iterations.numpy())


# ---------------------------------------------------------------------------
# AutoGraph in compiled steps
# ---------------------------------------------------------------------------

@parity(**TOL)
def test_inner_solver_while_gradient_norm_above_eps(tf):
    """A compiled inner optimisation ``while tf.norm(g) > eps`` (with ``maximum_iterations`` set by
    ``set_loop_options``) fits ridge weights for each batch; the number of iterations and the
    solution come back; a Python float eps is part of the trace."""
    x, y = regression_data(n=10, seed=2)
    w = tf.Variable(np.zeros((3, 1), np.float32))

    @tf.function
    def solve(xb, yb, lr):
        g = tf.ones([3, 1])
        it = tf.constant(0)
        while tf.norm(g) > 1e-3:
            tf.autograph.experimental.set_loop_options(maximum_iterations=200)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2) + 0.1 * tf.reduce_sum(w ** 2)
            g = tape.gradient(loss, w)
            w.assign_sub(lr * g)
            it += 1
        return it, loss

    out = [solve(x, y, 0.2), solve(x[:5], y[:5], 0.2)]
    return out, w


@parity(**TOL)
def test_range_loop_collects_per_step_losses_in_a_tensor_array(tf):
    """``for i in tf.range(n)`` over mini-batches inside one compiled epoch, each step's loss and
    gradient norm written to ``tf.TensorArray``s (one sized ``n``, one ``dynamic_size``), stacked
    and returned; ``n`` is a Python int (a static size: XLA's rule, README's compile section)."""
    x, y = regression_data(n=12, seed=4)
    w = tf.Variable(init_array((3, 1), 11))
    b = tf.Variable([0.0])

    @tf.function
    def epoch(xs, ys, n):
        losses = tf.TensorArray(tf.float32, size=n)
        norms = tf.TensorArray(tf.float32, size=0, dynamic_size=True)
        for i in tf.range(n):
            xb, yb = tf.slice(xs, [i * 3, 0], [3, -1]), tf.slice(ys, [i * 3, 0], [3, 1])
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2)
            gw, gb = tape.gradient(loss, [w, b])
            w.assign_sub(0.1 * gw)
            b.assign_sub(0.1 * gb)
            losses = losses.write(i, loss)
            norms = norms.write(i, tf.norm(gw))
        return losses.stack(), norms.stack()

    return epoch(x, y, 4), epoch(x, y, 2), epoch(x, y, 4), w, b


@parity(**TOL)
def test_python_slice_of_a_loop_index_inside_a_compiled_epoch(tf):
    """``xs[i * 3:(i + 1) * 3]`` with ``i`` from ``tf.range`` inside a compiled epoch."""
    x, y = regression_data(n=12, seed=4)
    w = tf.Variable(init_array((3, 1), 11))

    @tf.function
    def epoch(xs, ys):
        total = tf.constant(0.0)
        for i in tf.range(4):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xs[i * 3:(i + 1) * 3], w) - ys[i * 3:(i + 1) * 3]) ** 2)
            w.assign_sub(0.1 * tape.gradient(loss, w))
            total += loss
        return total

    return epoch(x, y), w


@parity(**TOL)
def test_early_return_from_a_loop_in_a_compiled_evaluator(tf):
    """An evaluation function that returns from inside ``for i in tf.range(4)`` on a tensor
    predicate: TF's AutoGraph refuses it (NotImplementedError); the form users then write, a
    ``break`` with the result kept in loop variables, finds the first batch whose loss exceeds a
    threshold (else -1)."""
    xn, yn = regression_data(n=12, seed=5)
    x, y = tf.constant(xn), tf.constant(yn)
    w = tf.Variable(init_array((3, 1), 12))

    @tf.function
    def first_bad_batch_return(thresh):
        for i in tf.range(4):
            loss = tf.reduce_mean((tf.matmul(x[i * 3:(i + 1) * 3], w) - y[i * 3:(i + 1) * 3]) ** 2)
            if loss > thresh:
                return i, loss
        return tf.constant(-1), tf.constant(0.0)

    @tf.function
    def first_bad_batch(thresh):
        found, worst = tf.constant(-1), tf.constant(0.0)
        for i in tf.range(4):
            xb, yb = tf.slice(x, [i * 3, 0], [3, 3]), tf.slice(y, [i * 3, 0], [3, 1])
            loss = tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2)
            if loss > thresh:
                found, worst = i, loss
                break
        return found, worst

    out = [raises(first_bad_batch_return, tf.constant(0.1))]
    out += [first_bad_batch(tf.constant(t)) for t in (0.1, 1.0, 100.0)]
    w.assign(w * 0.0)
    out.append(first_bad_batch(tf.constant(0.5)))
    return out


@parity(**TOL)
def test_variables_assigned_in_converted_branches(tf):
    """A compiled step keeps the best loss and a patience counter in Variables assigned in the
    branches of ``if loss < best:`` (converted to ``tf.cond``), and halves a learning-rate
    Variable when patience runs out (a nested ``if``)."""
    x, y = regression_data(n=8, seed=6)
    w = tf.Variable(init_array((3, 1), 13))
    best = tf.Variable(np.inf, dtype=tf.float32)
    wait = tf.Variable(0)
    lr = tf.Variable(0.5)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        w.assign_sub(lr * tape.gradient(loss, w))
        if loss < best:
            best.assign(loss)
            wait.assign(0)
        else:
            wait.assign_add(1)
            if wait >= 2:
                lr.assign(lr * 0.5)
                wait.assign(0)
        return loss

    out = [(step(), best.read_value(), wait.read_value(), lr.read_value()) for _ in range(8)]
    return out, w


@parity(**TOL)
def test_nested_compiled_functions_with_converted_control_flow(tf):
    """An outer compiled step calls an inner ``tf.function`` loss (which clips with a converted
    ``if``) and a plain Python helper with a ``while`` on a tensor (converted recursively)."""
    x, y = regression_data(n=8, seed=7)
    w = tf.Variable(init_array((3, 1), 14))

    @tf.function
    def robust_loss(pred, target):
        err = tf.abs(pred - target)
        if tf.reduce_max(err) > 1.0:
            err = tf.minimum(err, 1.0)
        return tf.reduce_mean(err ** 2)

    def shrink(g):
        while tf.norm(g) > 0.5:
            g = g * 0.5
        return g

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = robust_loss(tf.matmul(x, w), y)
        g = shrink(tape.gradient(loss, w))
        w.assign_sub(g)
        return loss, g

    return [step() for _ in range(4)], w


@parity(**TOL)
def test_break_on_converged_loss_inside_a_while_true(tf):
    """``while True:`` with a ``break`` on a tensor predicate is TF's NotImplementedError (the
    condition turns from Python to tensor); ``while n < 50:`` with the same ``break`` runs a
    Newton iteration for a square root to a tolerance."""
    @tf.function
    def newton_true(a):
        x = a
        while True:
            nx = 0.5 * (x + a / x)
            if tf.reduce_max(tf.abs(nx - x)) < 1e-6:
                break
            x = nx
        return x

    @tf.function
    def newton_sqrt(a):
        x = a
        n = tf.constant(0)
        while n < 50:
            nx = 0.5 * (x + a / x)
            n += 1
            if tf.reduce_max(tf.abs(nx - x)) < 1e-6:
                x = nx
                break
            x = nx
        return x, n

    return [raises(newton_true, tf.constant([2.0]))] + [newton_sqrt(tf.constant(v)) for v in ([2.0, 9.0], [100.0, 0.25])]


# ---------------------------------------------------------------------------
# Tape subtleties in training losses
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_target_given_twice_and_dict_targets_with_dict_output_gradients(tf):
    """``tape.gradient([loss, loss, aux], w)`` counts ``loss`` twice; a dict of targets with a dict of
    ``output_gradients`` (per-head weights) trains a two-head model."""
    x, y = regression_data(n=6, seed=8)
    w = tf.Variable(init_array((3, 2), 15))
    opt = tf.keras.optimizers.legacy.SGD(0.05)
    out = []
    for i in range(3):
        with tf.GradientTape(persistent=True) as tape:
            h = tf.matmul(x, w)
            heads = {"a": tf.reduce_mean((h[:, :1] - y) ** 2), "b": tf.reduce_mean(h[:, 1:] ** 2)}
            aux = tf.reduce_sum(w) * 0.01
        twice = tape.gradient([heads["a"], heads["a"], aux], w)
        g = tape.gradient(heads, w, output_gradients={"a": tf.constant(1.0), "b": tf.constant(0.5 * (i + 1))})
        del tape
        opt.apply_gradients([(g, w)])
        out.append((heads, twice, g))
    return out, w


@parity(modes=True, **TOL)
def test_integer_paths_give_none_and_the_straight_through_fix(tf):
    """A quantised forward ``cast(round(x*w)) -> int32 -> float`` has a None gradient (TF's integer
    rule); the straight-through estimator ``w + stop_gradient(q - w)`` trains; an argmax-selected
    row trains through ``gather`` only."""
    x, y = regression_data(n=6, seed=9)
    w = tf.Variable(init_array((3, 1), 16))
    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            qi = tf.cast(tf.round(w * 4.0), tf.int32)
            q = tf.cast(qi, tf.float32) / 4.0
            none_loss = tf.reduce_mean((tf.matmul(x, q) - y) ** 2)
            ste = w + tf.stop_gradient(q - w)
            loss = tf.reduce_mean((tf.matmul(x, ste) - y) ** 2)
            idx = tf.argmax(tf.reshape(w, [-1]))
            picked = tf.gather(tf.reshape(w, [-1]), idx)
        out.append((tape.gradient(none_loss, w), tape.gradient(qi, w), tape.gradient(idx, w),
                    tape.gradient(loss, w), tape.gradient(picked, w), q))
        w.assign_sub(0.1 * tape.gradient(loss, w))
        del tape
    return out, w


@parity(modes=True, **TOL)
def test_non_trainable_variable_is_not_watched_unless_asked(tf):
    """A ``trainable=False`` running scale read in the loss: its gradient is None under the
    automatic watch; ``tape.watch`` of it gives a value; the trainable weight trains."""
    x, y = regression_data(n=6, seed=10)
    w = tf.Variable(init_array((3, 1), 17))
    s = tf.Variable(2.0, trainable=False)
    out = []
    for i in range(3):
        with tf.GradientTape(persistent=True) as tape:
            loss = tf.reduce_mean((s * tf.matmul(x, w) - y) ** 2)
        with tf.GradientTape() as t2:
            t2.watch(s)
            loss2 = tf.reduce_mean((s * tf.matmul(x, w) - y) ** 2)
        gw, gs = tape.gradient(loss, [w, s])
        out.append((loss, gs, t2.gradient(loss2, [s, w]), len(tape.watched_variables())))
        del tape
        w.assign_sub(0.1 * gw)
        s.assign(s * 0.9)
    return out, w, s


@parity(modes=True, **TOL)
def test_reduce_max_ties_share_the_gradient(tf):
    """Max-pooling over features where the maximum is tied (ReLU zeros and duplicated
    weights): TF splits the gradient equally among the tied entries; trained three steps."""
    x = np.array([[1.0, 2.0], [-1.0, -2.0], [0.5, 0.5]], np.float32)
    w = tf.Variable([[1.0, 1.0, -1.0], [0.5, 0.5, 0.0]])
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, w))
            pooled = tf.reduce_max(h, axis=1)
            loss = tf.reduce_sum((pooled - 1.0) ** 2)
        g = tape.gradient(loss, w)
        w.assign_sub(0.05 * g)
        out.append((pooled, g))
    return out, w


@parity(**TOL)
def test_segment_max_readout_with_ties_and_empty_segments(tf):
    """A graph readout: node states pooled per graph with ``unsorted_segment_max`` (a graph with
    no nodes, tied maxima) and ``segment_mean``; the pooled vector trains a linear head."""
    feats = np.array([[1.0, 0.0], [1.0, 2.0], [0.0, 2.0], [3.0, -1.0], [3.0, -1.0]], np.float32)
    seg = np.array([0, 0, 0, 2, 2], np.int32)
    target = np.array([[1.0], [0.0], [-1.0]], np.float32)
    w = tf.Variable(init_array((2, 2), 18))
    v = tf.Variable(init_array((4, 1), 19))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h = tf.matmul(feats, w)
            mx = tf.math.unsorted_segment_max(h, seg, num_segments=3)
            mx = tf.where(mx < -1e30, tf.zeros_like(mx), mx)
            mean = tf.math.unsorted_segment_mean(h, seg, num_segments=3)
            pred = tf.matmul(tf.concat([mx, mean], axis=1), v)
            loss = tf.reduce_mean((pred - target) ** 2)
        gw, gv = tape.gradient(loss, [w, v])
        w.assign_sub(0.1 * gw)
        v.assign_sub(0.1 * gv)
        out.append((loss, gw, gv))
    ties = tf.constant([[2.0, 1.0], [2.0, 3.0], [1.0, 3.0]])
    with tf.GradientTape() as t:
        t.watch(ties)
        s = tf.math.segment_max(ties, tf.constant([0, 0, 0]))
    out.append(t.gradient(s, ties))
    return out, w, v


@parity(modes=True, **TOL)
def test_clip_by_value_gradient_at_the_boundary(tf):
    """Weights clipped into [-1, 1] in the forward (``tf.clip_by_value``), some exactly on the
    bounds: TF passes the gradient at the bounds; ``tf.minimum`` / ``tf.maximum`` ties too."""
    w = tf.Variable([-1.0, -0.5, 1.0, 2.0, 1.0])
    target = tf.constant([0.0, 0.0, 0.0, 0.0, 0.0])
    out = []
    for _ in range(2):
        with tf.GradientTape(persistent=True) as tape:
            c = tf.clip_by_value(w, -1.0, 1.0)
            loss = tf.reduce_sum((c - target) ** 2)
            mn = tf.reduce_sum(tf.minimum(w, 1.0))
            mx = tf.reduce_sum(tf.maximum(w, -1.0))
            relu6 = tf.reduce_sum(tf.nn.relu6(w * 6.0))
        out.append((loss, tape.gradient(loss, w), tape.gradient(mn, w), tape.gradient(mx, w),
                    tape.gradient(relu6, w)))
        del tape
        w.assign(w * 1.0)
    return out


@parity(modes=True, **TOL)
def test_custom_gradient_with_variables_eagerly(tf):
    """A ``tf.custom_gradient`` layer that reads a Variable: its ``grad_fn(dy, variables=None)``
    returns the input gradient and a scaled Variable gradient (gradient scaling for one layer);
    trained eagerly with Adam."""
    x, y = regression_data(n=6, seed=11)
    w = tf.Variable(init_array((3, 1), 20))
    b = tf.Variable([0.2])

    @tf.custom_gradient
    def scaled_dense(inp):
        out = tf.matmul(inp, w)

        def grad_fn(dy, variables=None):
            dx = tf.matmul(dy, w, transpose_b=True)
            return dx, [0.5 * tf.matmul(inp, dy, transpose_a=True)]

        return out, grad_fn

    opt = tf.keras.optimizers.legacy.Adam(0.05)
    xt = tf.constant(x)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            tape.watch(xt)
            loss = tf.reduce_mean((scaled_dense(xt) + b - y) ** 2)
        gx, gw, gb = tape.gradient(loss, [xt, w, b])
        opt.apply_gradients(zip([gw, gb], [w, b]))
        out.append((loss, gx, gw, gb))
    return out, w, b


@parity(**TOL)
def test_stop_gradient_target_network_mixed_into_the_loss(tf):
    """A bootstrapped target built from the same weights and ``tf.stop_gradient``; a second term
    with ``watch_accessed_variables=False`` and an explicit watch of one Variable."""
    x, y = regression_data(n=6, seed=12)
    w = tf.Variable(init_array((3, 1), 21))
    v = tf.Variable(init_array((3, 1), 22))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            q = tf.matmul(x, w)
            tgt = y + 0.9 * tf.stop_gradient(tf.matmul(x, w) + tf.matmul(x, v))
            loss = tf.reduce_mean((q - tgt) ** 2)
        with tf.GradientTape(watch_accessed_variables=False) as t2:
            t2.watch(v)
            reg = tf.reduce_sum(tf.matmul(x, w) * tf.matmul(x, v))
        gw, gv = tape.gradient(loss, [w, v])
        rw, rv = t2.gradient(reg, [w, v])
        w.assign_sub(0.05 * gw)
        v.assign_sub(0.01 * rv)
        out.append((loss, gv, rw, rv))
    return out, w, v


@parity(modes=True, **TOL)
def test_split_unstack_and_scatter_update_gradients(tf):
    """A model that splits its hidden state (``tf.split``, ``tf.unstack``) and uses only some parts,
    then overwrites rows with ``tensor_scatter_nd_update``: unused parts and overwritten rows get
    zeros, not None."""
    x, _ = regression_data(n=4, seed=13)
    w = tf.Variable(init_array((3, 6), 23))
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            h = tf.matmul(x, w)
            a, b, c = tf.split(h, 3, axis=1)
            rows = tf.unstack(h, axis=0)
            upd = tf.tensor_scatter_nd_update(h, [[1], [3]], tf.zeros([2, 6]))
            loss = tf.reduce_sum(a ** 2) + tf.reduce_sum(rows[2]) + tf.reduce_sum(upd * 0.1)
        g = tape.gradient(loss, w)
        w.assign_sub(0.01 * g)
        out.append((loss, g))
    xt = tf.constant(x)
    with tf.GradientTape() as t:
        t.watch(xt)
        p, q = tf.split(xt, [1, 2], axis=1)
        s = tf.reduce_sum(q)
    out.append(t.gradient(s, [xt, p]))
    return out, w


# ---------------------------------------------------------------------------
# Optimizers fed partial gradients, schedules, clipping
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_apply_gradients_with_some_and_all_none(tf):
    """A frozen head leaves its gradients None: ``apply_gradients`` warns and updates the rest;
    when every gradient is None it raises ValueError and changes nothing."""
    x, y = regression_data(n=6, seed=14)
    w1 = tf.Variable(init_array((3, 2), 24))
    w2 = tf.Variable(init_array((2, 1), 25))
    unused = tf.Variable([1.0, 2.0])
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(tf.matmul(x, w1), w2) - y) ** 2)
        g = tape.gradient(loss, [w1, w2, unused])
        _, did_warn = warned(opt.apply_gradients, zip(g, [w1, w2, unused]))
        out.append((loss, g[2] is None, did_warn))
    before = opt.iterations.numpy()
    out.append(raises(opt.apply_gradients, [(None, w1), (None, unused)]))
    out.append((int(before), int(opt.iterations.numpy()), unused))
    return out, w1, w2


@parity(**TOL)
def test_schedules_read_with_a_variable_step_and_global_norm_clipping(tf):
    """``CosineDecay`` and ``PolynomialDecay`` schedules called with a Variable step inside a
    compiled step (clip by global norm, then a manual SGD update with the scheduled rate); a
    schedule as an optimizer's learning rate advances with ``iterations``."""
    x, y = regression_data(n=8, seed=15)
    w = tf.Variable(init_array((3, 1), 26))
    b = tf.Variable([0.0])
    step_v = tf.Variable(0, dtype=tf.int64)
    cos = tf.keras.optimizers.schedules.CosineDecay(0.5, decay_steps=5, alpha=0.1)
    poly = tf.keras.optimizers.schedules.PolynomialDecay(0.3, decay_steps=4, end_learning_rate=0.01, power=2.0)
    opt = tf.keras.optimizers.legacy.SGD(poly)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
        g = tape.gradient(loss, [w, b])
        clipped, norm = tf.clip_by_global_norm(g, 0.5)
        lr = cos(step_v)
        w.assign_sub(lr * clipped[0])
        opt.apply_gradients([(clipped[1], b)])
        step_v.assign_add(1)
        return loss, norm, lr

    out = [step() for _ in range(6)]
    return out, w, b, [cos(tf.constant(s)) for s in (0, 3, 7)], poly(opt.iterations)


@parity(**TOL)
def test_gan_disjoint_variable_sets_in_one_compiled_step(tf):
    """Generator and discriminator Variables in two ``tf.Module``s, two Adam optimizers, both
    updates in one compiled step from one persistent tape (the generator's loss reads the
    discriminator, whose gradient there is dropped)."""
    rs = np.random.RandomState(16)
    real = rs.randn(6, 2).astype(np.float32) + 2.0
    noise = rs.randn(6, 1).astype(np.float32)

    class Lin(tf.Module):
        def __init__(self, din, dout, seed):
            super().__init__()
            self.w = tf.Variable(init_array((din, dout), seed))
            self.b = tf.Variable(np.zeros(dout, np.float32))

        def __call__(self, z):
            return tf.matmul(z, self.w) + self.b

    gen, disc = Lin(1, 2, 27), Lin(2, 1, 28)
    g_opt, d_opt = tf.keras.optimizers.legacy.Adam(0.05), tf.keras.optimizers.legacy.Adam(0.02, beta_1=0.5)

    @tf.function
    def step(z, xr):
        with tf.GradientTape(persistent=True) as tape:
            fake = gen(z)
            d_real, d_fake = disc(xr), disc(fake)
            d_loss = tf.reduce_mean(tf.nn.softplus(-d_real)) + tf.reduce_mean(tf.nn.softplus(d_fake))
            g_loss = tf.reduce_mean(tf.nn.softplus(-d_fake))
        d_opt.apply_gradients(zip(tape.gradient(d_loss, disc.trainable_variables), disc.trainable_variables))
        g_opt.apply_gradients(zip(tape.gradient(g_loss, gen.trainable_variables), gen.trainable_variables))
        return d_loss, g_loss

    out = [step(noise, real) for _ in range(4)]
    return out, gen.trainable_variables, disc.trainable_variables, int(d_opt.iterations.numpy()), int(g_opt.iterations.numpy())


# ---------------------------------------------------------------------------
# tf.data pipelines feeding training loops
# ---------------------------------------------------------------------------

def _linear_step(tf, w, b, xb, yb, lr=0.1):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2)
    gw, gb = tape.gradient(loss, [w, b])
    w.assign_sub(lr * gw)
    b.assign_sub(lr * gb)
    return loss


@parity(**TOL)
def test_interleaved_shards_feed_a_training_loop(tf):
    """Three "files" (ranges of rows) read by ``interleave(cycle_length=2, block_length=2)``, each
    mapped to (features, label) rows, batched by 3; a linear model trains on the stream."""
    x, y = regression_data(n=12, seed=20)
    ds = (tf.data.Dataset.range(3)
          .interleave(lambda k: tf.data.Dataset.range(k * 4, k * 4 + 4), cycle_length=2, block_length=2)
          .map(lambda i: (tf.gather(x, i), tf.gather(y, i), i))
          .batch(3))
    w, b = tf.Variable(init_array((3, 1), 30)), tf.Variable([0.0])
    out = []
    for xb, yb, idx in ds:
        out.append((idx.numpy().tolist(), _linear_step(tf, w, b, xb, yb)))
    return out, w, b


@parity(**TOL)
def test_group_by_window_trains_per_class_batches(tf):
    """``group_by_window`` keyed on the label's class gathers same-class rows into windows of 2,
    each window reduced by ``batch``; the model trains on the class-pure batches."""
    x, y = regression_data(n=10, seed=21)
    cls = (y[:, 0] > 0).astype(np.int64)
    ds = (tf.data.Dataset.from_tensor_slices((x, y, cls))
          .group_by_window(key_func=lambda a, b, c: c, reduce_func=lambda key, win: win.batch(2),
                           window_size=2))
    w, b = tf.Variable(init_array((3, 1), 31)), tf.Variable([0.0])
    out = []
    for xb, yb, cb in ds:
        out.append((cb.numpy().tolist(), _linear_step(tf, w, b, xb, yb)))
    return out, w, b


@parity(**TOL)
def test_bucket_by_sequence_length_feeds_a_masked_rnn(tf):
    """Variable-length sequences bucketed by ``bucket_by_sequence_length`` (boundaries [3, 5],
    padded per bucket), then a masked Elman RNN (a Python loop over the padded time axis)
    trains on each bucket."""
    rs = np.random.RandomState(22)
    lengths = [2, 4, 1, 5, 3, 2, 6, 4]
    seqs = [rs.randn(n).astype(np.float32) for n in lengths]
    ds = tf.data.Dataset.from_generator(lambda: iter(seqs), output_signature=tf.TensorSpec([None], tf.float32))
    ds = ds.bucket_by_sequence_length(lambda s: tf.shape(s)[0], bucket_boundaries=[3, 5],
                                      bucket_batch_sizes=[2, 2, 2])
    wx, wh, wo = tf.Variable(0.5), tf.Variable(0.3), tf.Variable(0.8)
    out = []
    for batch in ds:
        mask = tf.cast(tf.not_equal(batch, 0.0), tf.float32)
        target = tf.reduce_sum(batch, axis=1)
        with tf.GradientTape() as tape:
            h = tf.zeros([tf.shape(batch)[0]])
            for t in range(batch.shape[1]):
                nh = tf.tanh(wx * batch[:, t] + wh * h)
                h = mask[:, t] * nh + (1.0 - mask[:, t]) * h
            loss = tf.reduce_mean((wo * h - target) ** 2)
        g = tape.gradient(loss, [wx, wh, wo])
        for v, gv in zip([wx, wh, wo], g):
            v.assign_sub(0.05 * gv)
        out.append((batch.shape.as_list(), loss, g))
    return out, wx, wh, wo


@parity(**TOL)
def test_scan_running_normaliser_and_take_while(tf):
    """``Dataset.scan`` keeps a running mean of a stream (the state is a tuple), each element is
    normalised by it; ``take_while`` stops at the first large value; the rest trains a scale."""
    vals = np.array([1.0, 2.0, 4.0, 3.0, 5.0, 30.0, 2.0], np.float32)

    def step(state, v):
        n, mean = state
        n = n + 1.0
        mean = mean + (v - mean) / n
        return (n, mean), (v, v / mean)

    ds = (tf.data.Dataset.from_tensor_slices(vals)
          .scan((tf.constant(0.0), tf.constant(0.0)), step)
          .take_while(lambda v, r: v < 10.0))
    s = tf.Variable(0.5)
    out = []
    for v, r in ds:
        with tf.GradientTape() as tape:
            loss = (s * v - r) ** 2
        s.assign_sub(0.01 * tape.gradient(loss, s))
        out.append((v, r, loss))
    return out, s


@parity(**TOL)
def test_choose_and_sample_from_datasets_mix_two_sources(tf):
    """Two sources mixed by ``choose_from_datasets`` (a fixed choice pattern: the order is TF's)
    and by ``sample_from_datasets`` with weights [1, 0] (only the first source); a model trains
    on the chosen mixture; the sampled stream is compared as its values."""
    xa, ya = regression_data(n=6, seed=23)
    xb, yb = regression_data(n=6, seed=24)
    a = tf.data.Dataset.from_tensor_slices((xa, ya))
    b = tf.data.Dataset.from_tensor_slices((xb, yb + 1.0))
    choice = tf.data.Dataset.from_tensor_slices(np.array([0, 1, 1, 0, 0, 1, 0, 1], np.int64))
    mixed = tf.data.Dataset.choose_from_datasets([a, b], choice).batch(2)
    w, bias = tf.Variable(init_array((3, 1), 32)), tf.Variable([0.0])
    out = [_linear_step(tf, w, bias, xb_, yb_) for xb_, yb_ in mixed]
    sampled = tf.data.Dataset.sample_from_datasets([a, b], weights=[1.0, 0.0], seed=3)
    out.append([yv for _, yv in sampled.take(4)])
    return out, w, bias


@parity(**TOL)
def test_reduce_statistics_then_standardised_training(tf):
    """``Dataset.reduce`` computes the feature means and second moments of the training set in
    one pass; a ``map`` standardises with them; ``shard(2, 0)`` takes every other row; the
    compiled step trains on the shard."""
    x, y = regression_data(n=10, seed=25)
    x = x * np.array([1.0, 10.0, 0.1], np.float32) + np.array([0.0, 5.0, -2.0], np.float32)
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    n, s1, s2 = ds.reduce((tf.constant(0.0), tf.zeros([3]), tf.zeros([3])),
                          lambda st, e: (st[0] + 1.0, st[1] + e[0], st[2] + e[0] ** 2))
    mean = s1 / n
    std = tf.sqrt(s2 / n - mean ** 2)
    train = ds.map(lambda a, b: ((a - mean) / std, b)).shard(2, 0).batch(5)
    w, b = tf.Variable(init_array((3, 1), 33)), tf.Variable([0.0])

    @tf.function
    def step(xb, yb):
        return _linear_step(tf, w, b, xb, yb)

    out = [mean, std]
    for _ in range(2):
        for xb, yb in train:
            out.append(step(xb, yb))
    return out, w, b


@parity(**TOL)
def test_generator_with_output_signature_prefetched_into_a_signature_step(tf):
    """``from_generator`` with a dict ``output_signature``, ``padded_batch`` on the ragged
    feature, ``prefetch``; a compiled step with a nested-dict ``input_signature`` trains a
    bag-of-values model (one trace for every batch size)."""
    rs = np.random.RandomState(26)
    rows = [{"vals": rs.randn(k).astype(np.float32), "y": np.float32(k)} for k in (2, 3, 1, 4, 2)]
    ds = tf.data.Dataset.from_generator(
        lambda: iter(rows), output_signature={"vals": tf.TensorSpec([None], tf.float32), "y": tf.TensorSpec([], tf.float32)})
    ds = ds.padded_batch(2, padded_shapes={"vals": [4], "y": []}).prefetch(tf.data.AUTOTUNE)
    w = tf.Variable(np.ones(4, np.float32) * 0.1)
    c = tf.Variable(0.0)

    @tf.function(input_signature=[{"vals": tf.TensorSpec([None, 4], tf.float32), "y": tf.TensorSpec([None], tf.float32)}])
    def step(batch):
        with tf.GradientTape() as tape:
            pred = tf.reduce_sum(tf.abs(batch["vals"]) * w, axis=1) + c
            loss = tf.reduce_mean((pred - batch["y"]) ** 2)
        gw, gc = tape.gradient(loss, [w, c])
        w.assign_sub(0.02 * gw)
        c.assign_sub(0.02 * gc)
        return loss

    out = [step(b) for _ in range(2) for b in ds]
    return out, w, c, step.experimental_get_tracing_count()


# ---------------------------------------------------------------------------
# Numerics and linear algebra in losses
# ---------------------------------------------------------------------------

@parity(rtol=1e-4, atol=1e-5)
def test_gaussian_process_marginal_likelihood_by_cholesky(tf):
    """GP regression hyperparameters (log length-scale, log signal and noise variances) trained
    on the negative log marginal likelihood: ``cholesky``, ``cholesky_solve``, log-determinant
    from the factor's diagonal."""
    rs = np.random.RandomState(27)
    x = np.linspace(0, 3, 7).astype(np.float32)[:, None]
    y = (np.sin(2 * x) + 0.1 * rs.randn(7, 1)).astype(np.float32)
    log_l, log_s, log_n = tf.Variable(0.0), tf.Variable(0.0), tf.Variable(-2.0)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            d2 = (x - tf.transpose(x)) ** 2
            k = tf.exp(log_s) * tf.exp(-0.5 * d2 / tf.exp(2.0 * log_l)) + tf.exp(log_n) * tf.eye(7)
            chol = tf.linalg.cholesky(k)
            alpha = tf.linalg.cholesky_solve(chol, y)
            nll = 0.5 * tf.reduce_sum(y * alpha) + tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol)))
        g = tape.gradient(nll, [log_l, log_s, log_n])
        opt.apply_gradients(zip(g, [log_l, log_s, log_n]))
        out.append((nll, g))
    return out, log_l, log_s, log_n


@parity(rtol=1e-4, atol=1e-5)
def test_least_squares_readout_solved_inside_the_loss(tf):
    """A random-features model whose readout is solved in closed form in the loss
    (``tf.linalg.lstsq`` with L2 regulariser, ``triangular_solve`` on a QR factor for the
    validation fit); the feature map's weights train through the solves."""
    x, y = regression_data(n=10, d=2, seed=28)
    w = tf.Variable(init_array((2, 4), 34, scale=1.0))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            phi = tf.tanh(tf.matmul(x[:7], w))
            beta = tf.linalg.lstsq(phi, y[:7], l2_regularizer=0.1)
            q, r = tf.linalg.qr(tf.tanh(tf.matmul(x[7:], w)) + 0.0 * tf.eye(3, 4))
            _ = q
            z = tf.linalg.triangular_solve(r[:3, :3] + 2.0 * tf.eye(3), tf.ones([3, 1]), lower=False)
            loss = tf.reduce_mean((tf.matmul(tf.tanh(tf.matmul(x[7:], w)), beta) - y[7:]) ** 2) + 0.01 * tf.reduce_sum(z ** 2)
        g = tape.gradient(loss, w)
        w.assign_sub(0.1 * g)
        out.append((loss, g))
    return out, w


@parity(**TOL)
def test_sampled_softmax_with_given_samples_trains_an_embedding(tf):
    """``tf.nn.sampled_softmax_loss`` with ``sampled_values`` given (so both sides use the same
    negatives) and ``remove_accidental_hits``; the class embeddings, biases and the input
    projection train with Adagrad (their gradients are IndexedSlices)."""
    rs = np.random.RandomState(29)
    inputs = rs.randn(4, 3).astype(np.float32)
    labels = np.array([[1], [4], [2], [1]], np.int64)
    sampled = (np.array([0, 2, 5, 6], np.int64), np.full([4, 1], 0.5, np.float32), np.full([4], 0.4, np.float32))
    emb = tf.Variable(init_array((8, 3), 35))
    bias = tf.Variable(np.zeros(8, np.float32))
    proj = tf.Variable(np.eye(3, dtype=np.float32))
    opt = tf.keras.optimizers.legacy.Adagrad(0.2)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h = tf.matmul(inputs, proj)
            loss = tf.reduce_mean(tf.nn.sampled_softmax_loss(
                emb, bias, labels, h, num_sampled=4, num_classes=8, sampled_values=sampled,
                remove_accidental_hits=True))
        g = tape.gradient(loss, [emb, bias, proj])
        opt.apply_gradients(zip(g, [emb, bias, proj]))
        out.append((loss, [tf.convert_to_tensor(x) for x in g]))
    return out, emb, bias, proj


@parity(modes=True, **TOL)
def test_norm_and_masked_logsumexp_gradients_at_the_edges(tf):
    """Gradients where textbook formulas divide by zero: ``tf.norm`` of a zero row (TF: NaN),
    ``tf.math.reduce_euclidean_norm``, ``reduce_logsumexp`` over a row masked with -inf, and
    ``softmax_cross_entropy_with_logits`` w.r.t. soft labels."""
    v = tf.Variable([[0.0, 0.0], [3.0, 4.0]])
    logits = tf.Variable([[1.0, -np.inf, 2.0], [0.5, 0.5, -np.inf]])
    labels = tf.Variable([[0.2, 0.0, 0.8], [0.5, 0.5, 0.0]])
    out = []
    for _ in range(2):
        with tf.GradientTape(persistent=True) as tape:
            n = tf.reduce_sum(tf.norm(v, axis=1))
            en = tf.reduce_sum(tf.math.reduce_euclidean_norm(v, axis=1))
            lse = tf.reduce_sum(tf.reduce_logsumexp(logits, axis=1))
            finite = tf.where(tf.math.is_finite(logits), logits, -1e9 * tf.ones_like(logits))
            xent = tf.reduce_sum(tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=finite))
        out.append((n, tape.gradient(n, v), en, tape.gradient(en, v), lse, tape.gradient(lse, logits),
                    xent, tape.gradient(xent, [labels, logits])))
        del tape
        v.assign(v * 1.5)
    return out


@parity(**TOL)
def test_dynamic_partition_and_stitch_mixture_of_experts(tf):
    """Hard routing: rows partitioned to two experts by ``tf.dynamic_partition`` on an argmax,
    each expert a matmul, results put back by ``tf.dynamic_stitch``; the gate trains through a
    soft weight, the experts through the partition."""
    x, y = regression_data(n=6, seed=30)
    gate = tf.Variable(init_array((3, 2), 36))
    e0, e1 = tf.Variable(init_array((3, 1), 37)), tf.Variable(init_array((3, 1), 38))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            scores = tf.nn.softmax(tf.matmul(x, gate))
            route = tf.cast(tf.argmax(scores, axis=1), tf.int32)
            parts = tf.dynamic_partition(x, route, 2)
            idx = tf.dynamic_partition(tf.range(6), route, 2)
            outs = [tf.matmul(parts[0], e0), tf.matmul(parts[1], e1)]
            pred = tf.dynamic_stitch(idx, outs) * tf.reduce_max(scores, axis=1, keepdims=True)
            loss = tf.reduce_mean((pred - y) ** 2)
        g = tape.gradient(loss, [gate, e0, e1])
        for v, gv in zip([gate, e0, e1], g):
            v.assign_sub(0.1 * gv)
        out.append((route, loss, g))
    return out, gate, e0, e1


@parity(modes=True, **TOL)
def test_top_k_and_sort_ranking_loss(tf):
    """A ranking loss on the top-2 scores (``tf.math.top_k`` values, ties included) plus a
    ``tf.sort``-based quantile penalty; gradients flow to the selected entries only."""
    feats = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0], [1.0, 1.0], [0.5, 0.5]], np.float32)
    w = tf.Variable([[0.6], [0.4]])
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            s = tf.reshape(tf.matmul(feats, w), [-1])
            top = tf.math.top_k(s, k=2)
            srt = tf.sort(s, direction="DESCENDING")
            loss = -tf.reduce_sum(top.values) + tf.reduce_sum(srt ** 2) * 0.1 + (srt[2] - 0.5) ** 2
        g = tape.gradient(loss, w)
        w.assign_sub(0.1 * g)
        out.append((top.indices, loss, g))
    return out, w


@parity(**TOL)
def test_cumsum_exclusive_reverse_returns_and_gather_nd_batch_dims(tf):
    """Returns-to-go by ``tf.math.cumsum(reverse=True, exclusive=True)`` and a pointer-network
    style pick of one logit per (batch, step) by ``tf.gather_nd(batch_dims=1)``."""
    rewards = np.array([[1.0, 0.0, 2.0, 1.0], [0.0, 1.0, 1.0, 0.0]], np.float32)
    actions = np.array([[0, 2, 1, 1], [2, 2, 0, 1]], np.int32)
    w = tf.Variable(init_array((4, 3), 39))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            logits = tf.einsum("bt,tk->btk", rewards + 1.0, w)
            logp = tf.nn.log_softmax(logits)
            picked = tf.gather_nd(logp, actions[..., None], batch_dims=2)
            togo = tf.math.cumsum(rewards, axis=1, reverse=True, exclusive=True)
            loss = -tf.reduce_mean(picked * togo)
        g = tape.gradient(loss, w)
        w.assign_sub(0.1 * g)
        out.append((togo, loss, g))
    return out, w


@parity(**TOL)
def test_jacobian_without_pfor_and_with_zero_unconnected(tf):
    """``tape.jacobian(..., experimental_use_pfor=False)`` in a sensitivity penalty, and a
    jacobian w.r.t. an unused Variable with ``unconnected_gradients=ZERO`` (zeros of shape
    target + source) against the default None."""
    x, _ = regression_data(n=3, d=2, seed=31)
    w = tf.Variable(init_array((2, 2), 40))
    u = tf.Variable([1.0, 2.0, 3.0])
    out = []
    for _ in range(2):
        with tf.GradientTape() as outer:
            with tf.GradientTape(persistent=True) as inner:
                y = tf.tanh(tf.matmul(x, w))
            j = inner.jacobian(y, w, experimental_use_pfor=False)
            jz = inner.jacobian(y, u, unconnected_gradients=tf.UnconnectedGradients.ZERO)
            jn = inner.jacobian(y, u)
            loss = tf.reduce_sum(y ** 2) + 0.1 * tf.reduce_sum(j ** 2)
        g = outer.gradient(loss, w)
        w.assign_sub(0.1 * g)
        out.append((j.shape.as_list(), jz, jn is None, loss, g))
    return out, w


# ---------------------------------------------------------------------------
# Round five, part three: restoration, retracing, converted loops and branches in gradients
# ---------------------------------------------------------------------------

@parity(**TOL)
def test_restore_before_a_lazy_module_builds_then_continue(tf):
    """``Checkpoint.restore`` into a fresh Module tree whose Variables do not exist yet (built on
    the first call): TF restores each one when it is created (deferred restoration), so the
    resumed run continues the saved one exactly."""
    _, MLP = _module_classes(tf)
    x, y = regression_data(n=6, seed=33)
    d = tempfile.mkdtemp()

    def train(m, opt, n):
        losses = []
        for _ in range(n):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((m(x) - y) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, m.trainable_variables), m.trainable_variables))
            losses.append(loss)
        return losses

    m = MLP()
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    first = train(m, opt, 2)
    path = tf.train.Checkpoint(model=m, opt=opt).save(os.path.join(d, "ck"))
    cont = train(m, opt, 2)

    m2 = MLP()
    opt2 = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)
    status = tf.train.Checkpoint(model=m2, opt=opt2).restore(path)
    resumed = train(m2, opt2, 2)
    status.assert_consumed()
    return first, cont, resumed, m2.trainable_variables, m2.layers[0].calls


@parity(**TOL)
def test_reduce_retracing_counts_traces_over_batch_sizes(tf):
    """``reduce_retracing=True``: the second batch size generalises the trace (TF traces twice for
    three sizes, once more for a new rank); the losses are those of the eager step."""
    x, y = regression_data(n=12, seed=34)
    w = tf.Variable(init_array((3, 1), 42))

    @tf.function(reduce_retracing=True)
    def loss_of(xb, yb):
        return tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2)

    out = [loss_of(x[:n], y[:n]) for n in (4, 8, 12, 2)]
    counts = [loss_of.experimental_get_tracing_count()]
    out.append(loss_of(x[:4], y[:4, 0]))   # a new rank for the target: one more trace
    counts.append(loss_of.experimental_get_tracing_count())
    return out, counts


@parity(**TOL)
def test_for_row_in_tensor_accumulates_inside_a_compiled_step(tf):
    """``for row in xb:`` over a tensor's leading axis (converted by AutoGraph), with a per-row
    hinge loss accumulated in a tensor and the count of margin violations; trained by SGD."""
    x, y = regression_data(n=6, seed=35)
    lab = np.sign(y)
    w = tf.Variable(init_array((3, 1), 43))

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            total = tf.constant(0.0)
            viol = tf.constant(0)
            k = 0
            for row in xb:
                m = yb[k, 0] * tf.reduce_sum(row * tf.reshape(w, [-1]))
                total += tf.nn.relu(1.0 - m)
                viol += tf.cast(m < 1.0, tf.int32)
                k += 1
            loss = total / 6.0
        w.assign_sub(0.2 * tape.gradient(loss, w))
        return loss, viol

    return [step(tf.constant(x), tf.constant(lab)) for _ in range(3)], w


@parity(**TOL)
def test_piecewise_loss_by_if_elif_on_a_tensor_compiled_and_eager(tf):
    """A robust loss written with ``if / elif / else`` on a scalar tensor (converted to nested
    ``tf.cond`` in the compiled step, plain Python eagerly): the gradient flows through the
    taken branch; both steps train the same weights."""
    x, y = regression_data(n=6, seed=36)

    def loss_fn(err):
        if err < 0.5:
            return err ** 2
        elif err < 2.0:
            return err - 0.25
        else:
            return tf.math.log(err) + 1.75 - tf.math.log(2.0)

    def make():
        return tf.Variable(init_array((3, 1), 44, scale=1.5))

    def step_body(w, xb, yb):
        with tf.GradientTape() as tape:
            err = tf.reduce_mean(tf.abs(tf.matmul(xb, w) - yb))
            loss = loss_fn(err)
        g = tape.gradient(loss, w)
        w.assign_sub(0.3 * g)
        return err, loss, g

    w_c, w_e = make(), make()
    compiled = tf.function(lambda xb, yb: step_body(w_c, xb, yb))
    out = []
    for i in range(4):
        xb = x * (1.0 + i)          # a growing error visits the branches
        out.append((compiled(xb, y), step_body(w_e, xb, y)))
    return out, w_c, w_e


@parity(rtol=1e-4, atol=1e-5)
def test_maml_outer_gradient_through_an_inner_range_loop(tf):
    """MAML: three inner SGD steps on a support set in ``for _ in tf.range(3)`` (converted loop,
    fast weights as loop variables), the query loss's gradient w.r.t. the initial weights taken
    through the loop by the outer tape (second order); compiled, then the same eagerly."""
    xs, ys = regression_data(n=5, d=2, seed=37)
    xq, yq = regression_data(n=5, d=2, seed=38)
    w = tf.Variable(init_array((2, 1), 45))

    def inner_loss(fw, xb, yb):
        return tf.reduce_mean((tf.tanh(tf.matmul(xb, fw)) - yb) ** 2)

    def meta_step(loop):
        with tf.GradientTape() as outer:
            fw = tf.identity(w)
            for _ in loop(3):
                with tf.GradientTape() as inner:
                    inner.watch(fw)
                    li = inner_loss(fw, xs, ys)
                fw = fw - 0.5 * inner.gradient(li, fw)
            lq = inner_loss(fw, xq, yq)
        g = outer.gradient(lq, w)
        w.assign_sub(0.1 * g)
        return lq, g

    compiled = tf.function(lambda: meta_step(tf.range))
    out = [compiled() for _ in range(2)]
    out += [meta_step(range) for _ in range(2)]
    return out, w


@parity(**TOL)
def test_window_of_feature_label_pairs_zipped_back(tf):
    """``window(3, shift=2)`` of (feature, label) pairs gives a tuple of window datasets; each is
    batched and zipped back by ``flat_map``; a sequence model trains on the windows."""
    x, y = regression_data(n=9, d=2, seed=39)
    ds = (tf.data.Dataset.from_tensor_slices((x, y)).window(3, shift=2, drop_remainder=True)
          .flat_map(lambda wx, wy: tf.data.Dataset.zip((wx.batch(3), wy.batch(3)))))
    w = tf.Variable(init_array((2, 1), 46))
    b = tf.Variable([0.0])
    out = []
    for xb, yb in ds:
        out.append((xb.shape.as_list(), _linear_step(tf, w, b, xb, yb)))
    return out, w, b


@parity(**TOL)
def test_rebatch_unique_and_counter_pipeline(tf):
    """``Dataset.counter`` zipped with user ids, ``unique`` on the ids, ``batch(4).rebatch(2)``:
    the rebatched pieces train a per-user bias table through ``tf.gather``."""
    ids = np.array([3, 1, 3, 2, 1, 0, 2, 4], np.int32)
    uniq = tf.data.Dataset.from_tensor_slices(ids).unique()
    ds = tf.data.Dataset.zip((tf.data.Dataset.counter(start=1, dtype=tf.int32), uniq)).batch(4).rebatch(2)
    table = tf.Variable(np.zeros(5, np.float32))
    out = []
    for step, uid in ds:
        with tf.GradientTape() as tape:
            pred = tf.gather(table, uid)
            loss = tf.reduce_sum((pred - tf.cast(step, tf.float32)) ** 2)
        g = tape.gradient(loss, table)
        table.assign_sub(0.25 * tf.convert_to_tensor(g))
        out.append((step.numpy().tolist(), uid.numpy().tolist(), loss))
    return out, table


@parity(rtol=1e-4, atol=1e-5)
def test_masked_embedding_gru_on_padded_batches(tf):
    """Token sequences padded by ``padded_batch`` (0 is padding), ``Embedding(mask_zero=True)``
    feeding a ``GRU`` that skips the masked steps, a Dense head; weights set from NumPy; a
    custom loop with SGD (one epoch of two batches)."""
    seqs = [[1, 2, 3], [4, 1], [2, 2, 2, 3], [3]]
    ds = tf.data.Dataset.from_generator(lambda: iter(seqs), output_signature=tf.TensorSpec([None], tf.int32))
    ys = tf.data.Dataset.from_tensor_slices(np.array([[0.5], [-0.5], [1.0], [0.0]], np.float32))
    ds = tf.data.Dataset.zip((ds.padded_batch(2), ys.batch(2)))
    emb = tf.keras.layers.Embedding(5, 3, mask_zero=True)
    gru = tf.keras.layers.GRU(2)
    head = tf.keras.layers.Dense(1)
    model = tf.keras.Sequential([tf.keras.Input((None,), dtype="int32"), emb, gru, head])
    model.set_weights([init_array(tuple(v.shape), 50 + i) for i, v in enumerate(model.weights)])
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for tok, yb in ds:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(tok, training=True) - yb) ** 2)
        g = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(g, model.trainable_variables))
        out.append((tok.shape.as_list(), loss))
    return out, [v.numpy() for v in model.weights]


@parity(modes=True, **TOL)
def test_clip_by_norm_of_sparse_embedding_gradients(tf):
    """An embedding's gradient (IndexedSlices, a row looked up twice) clipped by ``clip_by_norm``
    (TF keeps it IndexedSlices) and a dense one clipped alike; SGD applies both."""
    table = tf.Variable(init_array((6, 2), 47, scale=2.0))
    proj = tf.Variable(init_array((2, 1), 48))
    ids = np.array([1, 4, 1, 5], np.int32)
    y = np.array([[1.0], [0.0], [1.0], [-1.0]], np.float32)
    opt = tf.keras.optimizers.legacy.SGD(0.5)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h = tf.nn.embedding_lookup(table, ids)
            loss = tf.reduce_mean((tf.matmul(h, proj) - y) ** 2)
        gt, gp = tape.gradient(loss, [table, proj])
        ct, cp = tf.clip_by_norm(gt, 0.1), tf.clip_by_norm(gp, 0.1)
        opt.apply_gradients([(ct, table), (cp, proj)])
        out.append((loss, type(ct).__name__, tf.convert_to_tensor(ct), cp))
    return out, table, proj


@parity(modes=True, **TOL)
def test_nested_custom_gradients_and_a_none_input_gradient(tf):
    """A custom-gradient clip (gradient clipped in the backward) wrapping a custom-gradient
    ``log1pexp`` (stable gradient); a second custom op returns None for its mask input (the
    mask's gradient is compared in the next program); trained eagerly."""
    @tf.custom_gradient
    def log1pexp(z):
        e = tf.exp(z)

        def grad(dy):
            return dy * (1.0 - 1.0 / (1.0 + e))

        return tf.math.log(1.0 + e), grad

    @tf.custom_gradient
    def clip_grad(z):
        def grad(dy):
            return tf.clip_by_value(dy, -0.1, 0.1)

        return tf.identity(z), grad

    @tf.custom_gradient
    def masked(z, mask):
        def grad(dy):
            return dy * mask, None

        return z * mask, grad

    x, y = regression_data(n=6, seed=40)
    w = tf.Variable(init_array((3, 1), 49, scale=3.0))
    mask = tf.constant([[1.0], [0.0], [1.0], [1.0], [0.0], [1.0]])
    out = []
    for _ in range(3):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(mask)
            z = masked(tf.matmul(x, w), mask)
            loss = tf.reduce_mean(clip_grad(log1pexp(z)) - y * z)
        g, gm = tape.gradient(loss, [w, mask])
        del tape
        w.assign_sub(0.5 * g)
        out.append((loss, g, gm is None or float(tf.reduce_sum(tf.abs(gm))) == 0.0))
    return out, w


@parity(**TOL)
def test_custom_gradient_none_for_an_input_is_none_at_the_tape(tf):
    """``grad_fn`` returning None for a watched input reached only through the op: TF's tape
    gives None for it."""
    @tf.custom_gradient
    def masked(z, mask):
        def grad(dy):
            return dy * mask, None

        return z * mask, grad

    z, m = tf.constant([1.0, 2.0]), tf.constant([1.0, 0.0])
    with tf.GradientTape() as t:
        t.watch([z, m])
        y = tf.reduce_sum(masked(z, m))
    return t.gradient(y, [z, m])


@parity(modes=True, **TOL)
def test_module_variables_gradient_includes_int_step_and_non_trainable(tf):
    """``tape.gradient(loss, module.variables)`` over every Variable of a module (an int step
    counter, a non-trainable moving mean, the trainable weights): None for the int and the
    non-trainable ones (not watched), values for the rest."""
    x, y = regression_data(n=6, seed=41)

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(init_array((3, 1), 50))
            self.steps = tf.Variable(0)
            self.mean = tf.Variable(tf.zeros([3]), trainable=False)

        def __call__(self, xb):
            self.steps.assign_add(1)
            self.mean.assign(0.9 * self.mean + 0.1 * tf.reduce_mean(xb, axis=0))
            return tf.matmul(xb - self.mean, self.w)

    net = Net()
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((net(x) - y) ** 2)
        vs = net.variables
        g = tape.gradient(loss, vs)
        out.append(([v.name for v in vs], [gi is None for gi in g], loss))
        net.w.assign_sub(0.1 * g[[v is net.w for v in vs].index(True)])
    return out, net.variables


# ---------------------------------------------------------------------------
# Round five, part four: optimizer bookkeeping, sliced Variables, gradients through compiled loops
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_adam_slots_follow_variables_when_the_list_order_changes(tf):
    """``apply_gradients`` with the (gradient, Variable) pairs in another order each step: the
    slots belong to the Variable, not the position."""
    x, y = regression_data(n=6, seed=42)
    a = tf.Variable(init_array((3, 1), 51))
    b = tf.Variable([0.3])
    opt = tf.keras.optimizers.legacy.Adam(0.1)
    out = []
    for i in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, a) + b - y) ** 2)
        ga, gb = tape.gradient(loss, [a, b])
        pairs = [(ga, a), (gb, b)] if i % 2 == 0 else [(gb, b), (ga, a)]
        opt.apply_gradients(pairs)
        out.append(loss)
    out.append([s.numpy() for s in (opt.get_slot(a, "m"), opt.get_slot(b, "m"), opt.get_slot(b, "v"))])
    return out, a, b, int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_sliced_variable_reads_and_sliced_assigns_in_training(tf):
    """A parameter block read by slices (``v[:, :2]``, ``v[1]``) and partly frozen by assigning a
    slice back (``v[:, 2:].assign(...)``) after each step: the slices' gradients land in the
    right places."""
    x, y = regression_data(n=5, seed=43)
    v = tf.Variable(init_array((3, 3), 52))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            h = tf.matmul(x, v[:, :2])
            loss = tf.reduce_mean((tf.reduce_sum(h, axis=1, keepdims=True) + tf.reduce_sum(v[1]) - y) ** 2)
        g = tape.gradient(loss, v)
        v.assign_sub(0.1 * g)
        v[:, 2:].assign(tf.zeros([3, 1]))
        v[0, 0].assign(v[0, 0] * 0.5)
        out.append((loss, g))
    return out, v


@parity(**TOL)
def test_compiled_apply_gradients_with_a_none_gradient_warns_once(tf):
    """A compiled step whose gradient list has None for a Variable the loss does not read: the
    optimizer skips it (TF logs a warning while tracing) and updates the rest every call."""
    x, y = regression_data(n=6, seed=44)
    w = tf.Variable(init_array((3, 1), 53))
    spare = tf.Variable([1.0, -1.0])
    opt = tf.keras.optimizers.legacy.RMSprop(0.05, momentum=0.5, centered=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        vs = [w, spare]
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        return loss

    first, did_warn = warned(step)
    out = [first, did_warn] + [step() for _ in range(3)]
    return out, w, spare, int(opt.iterations.numpy())


@parity(**TOL)
def test_eager_tape_around_a_compiled_while_loop(tf):
    """An eager tape around a call of a compiled fixed-point solver (a converted ``while`` with
    ``maximum_iterations``) that reads a Variable: the gradient flows back through the loop's
    iterations to the Variable; trained by SGD."""
    w = tf.Variable(0.5)
    target = tf.constant(0.8)

    @tf.function
    def fixed_point(x0):
        x = x0
        i = tf.constant(0)
        while i < 8:
            tf.autograph.experimental.set_loop_options(maximum_iterations=8)
            x = tf.tanh(w * x + 0.5)
            i += 1
        return x

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            z = fixed_point(tf.constant(0.1))
            loss = (z - target) ** 2
        g = tape.gradient(loss, w)
        w.assign_sub(0.5 * g)
        out.append((z, loss, g))
    return out, w


@parity(**TOL)
def test_checkpoint_model_optimizer_and_iterator_mid_epoch(tf):
    """A ``tf.train.Checkpoint`` of model, optimizer and a dataset iterator saved mid-epoch; the
    run continues; a fresh model, optimizer and iterator restored from it replay the same
    batches and the same losses."""
    x, y = regression_data(n=12, seed=45)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(2)
    d = tempfile.mkdtemp()

    def make():
        w, b = tf.Variable(init_array((3, 1), 54)), tf.Variable([0.0])
        opt = tf.keras.optimizers.legacy.Adam(0.05)
        it = iter(ds)
        return w, b, opt, it, tf.train.Checkpoint(w=w, b=b, opt=opt, it=it)

    def train(w, b, opt, it, n):
        losses = []
        for _ in range(n):
            xb, yb = next(it)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xb, w) + b - yb) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
            losses.append((xb[0, 0], loss))
        return losses

    w, b, opt, it, ck = make()
    train(w, b, opt, it, 2)
    path = ck.save(os.path.join(d, "mid"))
    cont = train(w, b, opt, it, 3)
    w2, b2, opt2, it2, ck2 = make()
    ck2.restore(path)
    resumed = train(w2, b2, opt2, it2, 3)
    return cont, resumed, w2, b2


@parity(**TOL)
def test_eval_function_with_keras_metrics_between_eager_steps_and_reset(tf):
    """An eager training loop; every other step a compiled evaluation updates a ``Mean`` and a
    ``MeanSquaredError`` metric over two validation batches, reads them and resets them."""
    x, y = regression_data(n=8, seed=46)
    xv, yv = regression_data(n=4, seed=47)
    w = tf.Variable(init_array((3, 1), 55))
    mean = tf.keras.metrics.Mean()
    mse = tf.keras.metrics.MeanSquaredError()

    @tf.function
    def evaluate(xb, yb):
        pred = tf.matmul(xb, w)
        mean.update_state(tf.abs(pred - yb))
        mse.update_state(yb, pred)

    out = []
    for i in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        if i % 2 == 1:
            evaluate(xv[:2], yv[:2])
            evaluate(xv[2:], yv[2:])
            out.append((loss, mean.result(), mse.result()))
            mean.reset_state()
            mse.reset_state()
    return out, w


# ---------------------------------------------------------------------------
# Round five, part five: per-example gradients, spectral and count-data losses, safe ops at zero
# ---------------------------------------------------------------------------

@parity(**TOL)
def test_dp_sgd_per_example_gradients_clipped_and_averaged(tf):
    """DP-SGD without noise: per-example gradients by ``tape.jacobian`` of the per-example losses
    (and again by ``tf.vectorized_map`` over an inner tape), each clipped to norm 0.5, averaged,
    applied; both ways agree."""
    x, y = regression_data(n=4, seed=48)
    w = tf.Variable(init_array((3, 1), 56, scale=1.5))

    def per_example(xi, yi):
        with tf.GradientTape() as t:
            li = tf.reduce_sum((tf.matmul(xi[None], w) - yi) ** 2)
        return t.gradient(li, w)

    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            losses = tf.reshape((tf.matmul(x, w) - y) ** 2, [-1])
        jac = tape.jacobian(losses, w)                       # [4, 3, 1]
        vm = tf.vectorized_map(lambda e: per_example(e[0], e[1]), (tf.constant(x), tf.constant(y)))
        norms = tf.norm(tf.reshape(jac, [4, -1]), axis=1)
        scale = tf.minimum(1.0, 0.5 / norms)
        g = tf.reduce_mean(jac * scale[:, None, None], axis=0)
        w.assign_sub(0.2 * g)
        out.append((tf.reduce_mean(losses), norms, vm, g))
    return out, w


@parity(rtol=1e-4, atol=1e-5)
def test_spectral_regulariser_by_eigh_and_nuclear_norm_by_svd(tf):
    """A weight matrix trained with a penalty on the largest eigenvalue of ``W^T W``
    (``tf.linalg.eigh``) and on its nuclear norm (``tf.linalg.svd`` singular values)."""
    x, y = regression_data(n=6, seed=49)
    w = tf.Variable(np.array([[0.9, 0.1, 0.0], [0.2, -0.7, 0.3], [0.0, 0.4, 0.5]], np.float32))
    v = tf.Variable(init_array((3, 1), 57))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            pred = tf.matmul(tf.matmul(x, w), v)
            evals, _ = tf.linalg.eigh(tf.matmul(w, w, transpose_a=True))
            s = tf.linalg.svd(w, compute_uv=False)
            loss = tf.reduce_mean((pred - y) ** 2) + 0.1 * evals[-1] + 0.05 * tf.reduce_sum(s)
        gw, gv = tape.gradient(loss, [w, v])
        w.assign_sub(0.05 * gw)
        v.assign_sub(0.05 * gv)
        out.append((loss, evals, s, gw))
    return out, w, v


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_negative_binomial_count_model_with_lgamma(tf):
    """A count regression with a negative-binomial likelihood written with ``tf.math.lgamma``,
    ``xlogy`` and ``softplus`` for the dispersion; trained with Adam."""
    x, _ = regression_data(n=8, seed=50)
    counts = np.array([0, 3, 1, 0, 7, 2, 0, 4], np.float32)[:, None]
    w = tf.Variable(init_array((3, 1), 58))
    raw_r = tf.Variable(0.5)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            mu = tf.exp(tf.matmul(x, w))
            r = tf.nn.softplus(raw_r)
            ll = (tf.math.lgamma(counts + r) - tf.math.lgamma(r) - tf.math.lgamma(counts + 1.0)
                  + r * tf.math.log(r / (r + mu)) + tf.math.xlogy(counts, mu / (r + mu)))
            loss = -tf.reduce_mean(ll)
        g = tape.gradient(loss, [w, raw_r])
        opt.apply_gradients(zip(g, [w, raw_r]))
        out.append((loss, g))
    return out, w, raw_r


@parity(modes=True, **TOL)
def test_safe_ops_at_zero_l2_normalize_divide_no_nan_xlogy(tf):
    """Embeddings normalised by ``tf.nn.l2_normalize`` (one row all zero), a ratio by
    ``divide_no_nan`` with a zero denominator, an entropy by ``xlogy`` with zero probabilities:
    TF's gradients at the zeros (finite) train the weights."""
    e = tf.Variable([[0.0, 0.0], [3.0, 4.0], [1.0, -1.0]])
    den = tf.Variable([0.0, 2.0, 0.5])
    p = tf.Variable([0.0, 0.3, 0.7])
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            n = tf.nn.l2_normalize(e, axis=1)
            ratio = tf.math.divide_no_nan(tf.constant([1.0, 1.0, 1.0]), den)
            ent = -tf.reduce_sum(tf.math.xlogy(p, p))
            loss = tf.reduce_sum(n * tf.constant([[1.0, 2.0]])) + tf.reduce_sum(ratio) + ent
        ge, gd, gp = tape.gradient(loss, [e, den, p])
        e.assign_sub(0.1 * ge)
        den.assign_sub(0.01 * gd)
        p.assign_sub(0.01 * gp)
        out.append((n, ratio, ent, ge, gd, gp))
    return out


@parity(modes=True, **TOL)
def test_layer_norm_by_moments_with_a_constant_feature_row(tf):
    """A hand-written layer norm (``tf.nn.moments`` over features, ``tf.nn.batch_normalization``
    with gain and bias Variables) where one row is constant (zero variance): gradients stay finite
    thanks to the epsilon; a sigmoid cross-entropy head trains on it."""
    x = np.array([[1.0, 2.0, 3.0], [2.0, 2.0, 2.0], [0.5, -1.0, 0.0], [3.0, 1.0, 2.0]], np.float32)
    labels = np.array([[1.0], [0.0], [1.0], [0.0]], np.float32)
    gain, bias = tf.Variable(np.ones(3, np.float32)), tf.Variable(np.zeros(3, np.float32))
    head = tf.Variable(init_array((3, 1), 59))
    out = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            mean, var = tf.nn.moments(x, axes=[1], keepdims=True)
            h = tf.nn.batch_normalization(x, mean, var, bias, gain, 1e-3)
            logits = tf.matmul(h, head)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        g = tape.gradient(loss, [gain, bias, head])
        for var_, gv in zip([gain, bias, head], g):
            var_.assign_sub(0.5 * gv)
        out.append((var, loss, g))
    return out, gain, bias, head


# ---------------------------------------------------------------------------
# Round five, part six: tracing rules users trip over
# ---------------------------------------------------------------------------

@parity(**TOL)
def test_compiled_method_on_two_module_instances_keeps_their_variables_apart(tf):
    """One ``@tf.function`` method, two instances with their own Variables and optimizers,
    trained alternately: each call updates its own instance (one trace per instance, as TF)."""
    x, y = regression_data(n=6, seed=51)

    class Lin(tf.Module):
        def __init__(self, seed):
            super().__init__()
            self.w = tf.Variable(init_array((3, 1), seed))
            self.opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.5)
            self.py_traces = 0

        @tf.function
        def step(self, xb, yb):
            self.py_traces += 1
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(xb, self.w) - yb) ** 2)
            self.opt.apply_gradients([(tape.gradient(loss, self.w), self.w)])
            return loss

    a, b = Lin(60), Lin(61)
    out = [a.step(x, y), b.step(x, y), a.step(x, y), b.step(x[:3], y[:3]), a.step(x, y)]
    return out, a.w, b.w, a.py_traces, b.py_traces


@parity(**TOL)
def test_keyword_and_positional_calls_share_a_trace_and_python_args_retrace(tf):
    """A step called positionally and by keyword (one trace, as TF canonicalises the call), and
    with a Python float learning rate (a new trace per value, TF's rule for Python scalars)."""
    x, y = regression_data(n=6, seed=52)
    w = tf.Variable(init_array((3, 1), 62))

    @tf.function
    def step(xb, yb, lr=0.1):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2)
        w.assign_sub(lr * tape.gradient(loss, w))
        return loss

    out = [step(x, y), step(xb=x, yb=y), step(x, yb=y)]
    counts = [step.experimental_get_tracing_count()]
    out += [step(x, y, 0.05), step(x, y, lr=0.05), step(x, y, 0.2)]
    counts.append(step.experimental_get_tracing_count())
    return out, counts, w


@parity(**TOL)
def test_variable_created_on_a_later_call_is_an_error(tf):
    """A ``tf.function`` that makes a new Variable at every trace is TF's ValueError already on its
    first call (TF traces a body that creates Variables twice, and the second trace makes another
    one), and again on a new signature; the guarded form (create once) trains."""
    x, y = regression_data(n=6, seed=53)

    @tf.function
    def bad(xb):
        v = tf.Variable(tf.ones([3, 1]))
        return tf.reduce_sum(tf.matmul(xb, v))

    holder = {}

    @tf.function
    def good(xb, yb):
        if "w" not in holder:
            holder["w"] = tf.Variable(tf.ones([3, 1]) * 0.1)
        w = holder["w"]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(xb, w) - yb) ** 2)
        w.assign_sub(0.1 * tape.gradient(loss, w))
        return loss

    out = [raises(bad, x), raises(bad, x[:3])]
    out += [good(x, y), good(x[:4], y[:4]), good(x, y)]
    return out, holder["w"]


# ---------------------------------------------------------------------------
# Round five, part seven: what a trace captures
# ---------------------------------------------------------------------------

@parity(**TOL)
def test_layer_list_grown_after_the_trace_is_not_seen_until_a_retrace(tf):
    """Progressive growing: a compiled step loops over a Python list of layer Variables; a layer
    appended after the trace is not used by that trace (TF captured the list as it was), a new
    input signature retraces and uses it; its gradient is None until then."""
    x, y = regression_data(n=6, seed=54)
    layers = [tf.Variable(np.eye(3, dtype=np.float32) * 0.9)]
    head = tf.Variable(init_array((3, 1), 63))

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            h = xb
            for m in layers:
                h = tf.tanh(tf.matmul(h, m))
            loss = tf.reduce_mean((tf.matmul(h, head) - yb) ** 2)
        vs = layers + [head]
        grads = tape.gradient(loss, vs)
        for v, g in zip(vs, grads):
            v.assign_sub(0.1 * g)
        return loss, len(layers)

    out = [step(x, y), step(x, y)]
    layers.append(tf.Variable(np.eye(3, dtype=np.float32)))
    out.append(step(x, y))             # the old trace: one layer, the new one untouched
    out.append(step(x[:4], y[:4]))     # a new trace: both layers
    out.append(step(x[:4], y[:4]))
    return out, layers, head


@parity(**TOL)
def test_recompute_grad_block_inside_a_compiled_step_with_adam(tf):
    """``tf.recompute_grad`` around a residual block reading two Variables, called twice in the
    forward of a compiled step (weights shared), trained with Adam."""
    x, y = regression_data(n=6, seed=55)
    w1, w2 = tf.Variable(init_array((3, 3), 64)), tf.Variable(init_array((3, 3), 65))
    head = tf.Variable(init_array((3, 1), 66))
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    @tf.recompute_grad
    def block(h):
        return h + tf.matmul(tf.nn.relu(tf.matmul(h, w1)), w2)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(block(block(tf.constant(x))), head) - y) ** 2)
        vs = [w1, w2, head]
        g = tape.gradient(loss, vs)
        opt.apply_gradients(zip(g, vs))
        return loss, g

    return [step() for _ in range(3)], w1, w2, head
