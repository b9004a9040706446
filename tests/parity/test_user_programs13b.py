"""Round thirteen (b) of realistic user programs, each run under real TensorFlow 2.21 and under tapejax:
the host-side Python of training scripts around an eager ``GradientTape`` loop, where tapejax's
deferred execution must stay invisible. Values read mid-step (``float(loss)``, ``.numpy()``,
``int(tf.argmax(...))``, ``np.asarray``, ``if loss < best:`` on a tensor, ``.shape`` and ``len``
of deferred results), lists of tensors logged and read later (``np.mean`` over them), early
stopping on a Python comparison, exceptions raised inside ``with tape:`` then the loop going on
with a new tape, a loop left early with work pending, gradients computed and only some applied
(a step skipped on a non-finite or large norm), two models interleaved, evaluation between steps,
Variables assigned from NumPy arrays then edited, tensors as dict keys by ``.ref()``,
``tf.identity`` / ``copy.copy`` snapshots, a generator reusing one buffer, ``None`` gradients
filtered, gradients summed by ``tf.add_n``, Variables made lazily inside the tape, learning rates
changed between steps, one step run eagerly and compiled, threads training two models, stateless
dropout masks, and a ``Mean`` metric updated inside and outside the tape. Data is drawn with
NumPy and fed in.
"""
import copy
import os
import queue
import tempfile
import threading

import numpy as np

from .harness import init_array, mlp, mlp_vars, parity, raises, xfail_on_tapejax
from .test_user_programs12b import TOL, _reg


def _cls(n, d=4, k=3, seed=0):
    rs = np.random.RandomState(seed)
    x = rs.randn(n, d).astype(np.float32)
    y = np.argmax(x @ rs.randn(d, k), 1).astype(np.int32)
    return x, y


# ---------------------------------------------------------------------------
# Values read on the host mid-step
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_float_of_the_loss_read_inside_the_tape_then_the_step_applied(tf):
    """A linear model whose loop reads ``float(loss)`` and ``loss.numpy()`` inside ``with tape:``
    (for a progress line), then takes the gradient and applies SGD; the floats, the logged tensors
    and the weights are what the user looks at."""
    w = tf.Variable(init_array((3, 1), 1))
    b = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(8, seed=1)
    floats, arrays, tensors = [], [], []
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
            floats.append(float(loss))
            arrays.append(loss.numpy())
            loss2 = loss * 2.0
        tensors.append(loss2)
        opt.apply_gradients(zip(tape.gradient(loss2, [w, b]), [w, b]))
    return floats, arrays, tensors, float(np.mean(tensors)), w.numpy(), b.numpy()


@parity(modes=True, **TOL)
def test_argmax_prediction_read_as_int_and_shapes_of_pending_results(tf):
    """A softmax classifier trained by Adam: each step reads ``int(tf.argmax(logits[0]))``, the
    ``.shape`` and ``len()`` of the logits and of the gradient list, and ``np.asarray`` of the
    probabilities before applying; accuracies come from ``np.mean`` of a host comparison."""
    w = tf.Variable(init_array((4, 3), 2))
    opt = tf.keras.optimizers.Adam(0.05)
    x, y = _cls(10, seed=2)
    log = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, w)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        grads = tape.gradient(loss, [w])
        first = int(tf.argmax(logits[0]))
        probs = np.asarray(tf.nn.softmax(logits))
        acc = float(np.mean(np.argmax(probs, 1) == y))
        log.append((first, tuple(logits.shape.as_list()), len(logits), len(grads), tuple(grads[0].shape),
                    acc, probs.dtype.name, probs.shape))
        opt.apply_gradients(zip(grads, [w]))
    return log, w.numpy(), int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_early_stopping_on_a_tensor_comparison_with_patience(tf):
    """An MLP trained with a too-large learning rate: ``if loss < best:`` compares tensors on the
    host, the best loss is kept as a tensor and the best weights as NumPy copies; the loop stops
    after two steps without improvement, and the weights are restored."""
    vs = mlp_vars(tf, seed=3)
    opt = tf.keras.optimizers.SGD(0.9)
    x, y = _reg(8, seed=3)
    best, best_w, wait, stopped = None, None, 0, None
    losses = []
    for step in range(10):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        losses.append(loss)
        if best is None or loss < best:
            best, best_w, wait = loss, [v.numpy() for v in vs], 0
        else:
            wait += 1
            if wait >= 2:
                stopped = step
                break
    for v, a in zip(vs, best_w):
        v.assign(a)
    return losses, best, stopped, [v.numpy() for v in vs]


@parity(modes=True, **TOL)
def test_python_truthiness_of_tensors_drives_a_warmup_branch(tf):
    """A loop branching on host values of tensors: ``bool(tf.reduce_any(...))``, ``if gnorm > 1.0``
    on the global norm, and ``loss.numpy() < 0.5`` choose between a clipped and a plain update; the
    chosen branch per step and the weights are returned."""
    vs = mlp_vars(tf, seed=4)
    opt = tf.keras.optimizers.SGD(0.2)
    x, y = _reg(8, seed=4)
    y = y * 3.0
    branches = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            pred = mlp(tf, vs, x)
            loss = tf.reduce_mean(tf.square(pred - y))
        grads = tape.gradient(loss, vs)
        gnorm = tf.linalg.global_norm(grads)
        big = bool(tf.reduce_any(tf.abs(pred) > 2.0))
        if gnorm > 1.0:
            grads, _ = tf.clip_by_global_norm(grads, 1.0)
            branches.append(("clip", big, loss.numpy() < 0.5))
        else:
            branches.append(("plain", big, loss.numpy() < 0.5))
        opt.apply_gradients(zip(grads, vs))
    return branches, [v.numpy() for v in vs]


# ---------------------------------------------------------------------------
# Exceptions and early exits
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_shape_error_inside_the_tape_then_training_goes_on_with_a_new_tape(tf):
    """A loop fed a malformed batch (4 features) at step 2: the ``matmul`` inside ``with tape:``
    raises TF's InvalidArgumentError, the loop records it and continues; the other steps train
    normally and the step counter Variable bumped inside the tape before the error keeps its bump."""
    w = tf.Variable(init_array((3, 1), 5))
    seen = tf.Variable(0)
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(6, seed=5)
    bad = np.ones((6, 4), np.float32)
    out = []
    for step in range(5):
        xb = bad if step == 2 else x
        try:
            with tf.GradientTape() as tape:
                seen.assign_add(1)
                loss = tf.reduce_mean(tf.square(tf.matmul(xb, w) - y))
            opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
            out.append(float(loss))
        except (tf.errors.InvalidArgumentError, ValueError) as e:
            out.append(type(e).__name__)
    return out, w.numpy(), seen.numpy(), int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_a_user_value_error_raised_inside_the_tape_after_pending_work(tf):
    """A step that validates its loss inside the tape and raises ``ValueError`` when it exceeds a
    threshold (after an ``assign`` of a running loss Variable); the caller catches it, halves the
    input scale and retries with a new tape; the gradient of the abandoned tape is never taken."""
    w = tf.Variable(init_array((3, 1), 6) * 4.0)
    running = tf.Variable(0.0)
    opt = tf.keras.optimizers.SGD(0.05)
    x, y = _reg(8, seed=6)
    scale, log = 1.0, []

    def step(scale):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x * scale, w) - y))
            running.assign(0.5 * running + 0.5 * loss)
            if loss > 5.0:
                raise ValueError(f"loss too high: {float(loss):.3f}")
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        return loss

    for _ in range(6):
        try:
            log.append(("ok", step(scale)))
        except ValueError:
            scale *= 0.5
            log.append(("retry", scale))
    return log, w.numpy(), running.numpy()


@parity(modes=True, **TOL)
def test_keyboard_interrupt_between_gradient_and_apply_then_resume(tf):
    """A loop interrupted (a simulated ``KeyboardInterrupt``) after ``tape.gradient`` but before
    ``apply_gradients`` at step 3: the script catches it, saves NumPy weights, then resumes
    training for two steps from where it was; the discarded gradient never reaches the weights."""
    vs = mlp_vars(tf, seed=7)
    opt = tf.keras.optimizers.Adam(0.03)
    x, y = _reg(8, seed=7)
    losses = []
    try:
        for step in range(6):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
            grads = tape.gradient(loss, vs)
            if step == 3:
                raise KeyboardInterrupt
            opt.apply_gradients(zip(grads, vs))
            losses.append(loss)
    except KeyboardInterrupt:
        saved = [v.numpy() for v in vs]
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        losses.append(loss)
    return losses, saved, [v.numpy() for v in vs], int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_break_out_of_the_loop_with_an_unread_loss_pending(tf):
    """A loop that breaks once a step counter (a Python int) hits a budget, leaving that step's loss
    and gradients unread; after the loop the script evaluates the last loss, a gradient norm and
    the weights (the applied update included)."""
    w = tf.Variable(init_array((3, 1), 8))
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    x, y = _reg(8, seed=8)
    for step in range(10):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        grads = tape.gradient(loss, [w])
        opt.apply_gradients(zip(grads, [w]))
        if step == 3:
            break
    return loss, tf.linalg.global_norm(grads), w.numpy(), step


# ---------------------------------------------------------------------------
# Gradients computed and only some applied
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_non_finite_gradients_skip_the_step_checked_on_the_host(tf):
    """A batch with a NaN feature at step 2 and a spike at step 4: ``tf.math.is_finite`` of the
    global norm (read by ``bool``) skips the NaN step and a norm above 50 skips the spike; the skipped
    steps, the Adam iteration count and the weights are returned."""
    vs = mlp_vars(tf, seed=9)
    opt = tf.keras.optimizers.Adam(0.02)
    x, y = _reg(8, seed=9)
    skipped, losses = [], []
    for step in range(6):
        xb = x.copy()
        if step == 2:
            xb[1, 0] = np.nan
        yb = y * 300.0 if step == 4 else y
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, xb) - yb))
        grads = tape.gradient(loss, vs)
        norm = tf.linalg.global_norm(grads)
        if not bool(tf.math.is_finite(norm)) or float(norm) > 50.0:
            skipped.append(step)
            continue
        opt.apply_gradients(zip(grads, vs))
        losses.append(loss)
    return skipped, losses, int(opt.iterations.numpy()), [v.numpy() for v in vs]


@parity(modes=True, **TOL)
def test_none_gradients_filtered_from_zip_before_apply(tf):
    """A model with an unused head Variable and an integer counter: ``tape.gradient`` gives None for
    them, the loop filters ``(g, v) for g, v in zip(grads, vars) if g is not None`` and applies the
    rest with RMSprop (built on all four first, as TF's message asks); which gradients were None each step is returned."""
    w = tf.Variable(init_array((3, 2), 10))
    head = tf.Variable(init_array((2, 1), 11))
    unused = tf.Variable(init_array((2, 1), 12))
    gate = tf.Variable(1.0)
    opt = tf.keras.optimizers.RMSprop(0.05)
    opt.build([w, head, unused, gate])
    x, y = _reg(6, seed=10)
    nones = []
    for step in range(4):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, w))
            pred = tf.matmul(h, head) * (gate if step % 2 else 1.0)
            loss = tf.reduce_mean(tf.square(pred - y))
        variables = [w, head, unused, gate]
        grads = tape.gradient(loss, variables)
        nones.append([g is None for g in grads])
        opt.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])
    return nones, w.numpy(), head.numpy(), unused.numpy(), gate.numpy()


@parity(modes=True, **TOL)
def test_gradients_kept_in_python_lists_then_summed_by_add_n(tf):
    """Gradient accumulation by hand: three micro-batches per update, each gradient appended to a
    per-variable Python list, then ``tf.add_n(lst) / 3`` applied by SGD; a micro-batch's loss is
    read by ``float`` between micro-batches, and the lists are cleared after each update."""
    vs = mlp_vars(tf, seed=13)
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(12, seed=13)
    acc = [[] for _ in vs]
    micro_losses, updates = [], []
    for i in range(6):
        xb, yb = x[2 * i:2 * i + 2], y[2 * i:2 * i + 2]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, xb) - yb))
        for lst, g in zip(acc, tape.gradient(loss, vs)):
            lst.append(g)
        micro_losses.append(float(loss))
        if len(acc[0]) == 3:
            mean_grads = [tf.add_n(lst) / 3.0 for lst in acc]
            updates.append(tf.linalg.global_norm(mean_grads))
            opt.apply_gradients(zip(mean_grads, vs))
            acc = [[] for _ in vs]
    return micro_losses, updates, [v.numpy() for v in vs]


# ---------------------------------------------------------------------------
# Two models, evaluation between steps, learning rates
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_two_models_and_optimizers_interleaved_step_by_step(tf):
    """A student and a teacher MLP trained alternately on the same batches (teacher by Adam on the
    targets, student by SGD on the teacher's current predictions, read through ``tf.stop_gradient``),
    each step's two losses logged; the teacher's prediction is also read by ``.numpy()`` between
    the two updates."""
    teacher = mlp_vars(tf, seed=14)
    student = mlp_vars(tf, h=2, seed=16)
    t_opt = tf.keras.optimizers.Adam(0.05)
    s_opt = tf.keras.optimizers.SGD(0.2)
    x, y = _reg(8, seed=14)
    log = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            t_loss = tf.reduce_mean(tf.square(mlp(tf, teacher, x) - y))
        t_opt.apply_gradients(zip(tape.gradient(t_loss, teacher), teacher))
        soft = tf.stop_gradient(mlp(tf, teacher, x))
        soft_np = soft.numpy()
        with tf.GradientTape() as tape:
            s_loss = tf.reduce_mean(tf.square(mlp(tf, student, x) - soft))
        s_opt.apply_gradients(zip(tape.gradient(s_loss, student), student))
        log.append((t_loss, s_loss, float(soft_np.sum())))
    return log, [v.numpy() for v in teacher], [v.numpy() for v in student]


@parity(modes=True, **TOL)
def test_validation_between_steps_with_a_compiled_eval_and_an_eager_eval(tf):
    """A training loop evaluating a held-out split after each step twice, eagerly and by a
    ``tf.function`` evaluator, and keeping the step of the best validation loss by a host compare;
    the evaluations must agree with each other and see the updated weights."""
    vs = mlp_vars(tf, seed=17)
    opt = tf.keras.optimizers.Adam(0.05)
    x, y = _reg(12, seed=17)
    xt, yt, xv, yv = x[:8], y[:8], x[8:], y[8:]

    @tf.function
    def evaluate(xb, yb):
        return tf.reduce_mean(tf.square(mlp(tf, vs, xb) - yb))

    log, best_step, best = [], None, float("inf")
    for step in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, xt) - yt))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        eager_val = tf.reduce_mean(tf.square(mlp(tf, vs, xv) - yv))
        comp_val = evaluate(xv, yv)
        if float(comp_val) < best:
            best, best_step = float(comp_val), step
        log.append((loss, eager_val, comp_val))
    return log, best_step, best


@parity(modes=True, **TOL)
def test_learning_rate_set_by_attribute_and_by_assign_between_steps(tf):
    """Adam with a hand-written schedule: ``opt.learning_rate = 0.05`` after step 1,
    ``opt.learning_rate.assign(0.01)`` after step 3, and a Python float read back by
    ``float(opt.learning_rate)`` each step; the losses and weights follow the rates."""
    vs = mlp_vars(tf, seed=18)
    opt = tf.keras.optimizers.Adam(0.1)
    x, y = _reg(8, seed=18)
    log = []
    for step in range(6):
        if step == 2:
            opt.learning_rate = 0.05
        if step == 4:
            opt.learning_rate.assign(0.01)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        log.append((loss, round(float(opt.learning_rate), 6)))
    return log, [v.numpy() for v in vs]


@parity(modes=True, **TOL)
def test_same_step_eager_then_compiled_from_equal_starts(tf):
    """One step function run eagerly for three steps on one copy of the weights and wrapped in
    ``tf.function`` for three steps on another copy made from ``.numpy()``; both copies' losses and
    weights are returned (they must agree), with the eager minus compiled difference."""
    x, y = _reg(8, seed=19)

    def make():
        vs = mlp_vars(tf, seed=19)
        return vs, tf.keras.optimizers.SGD(0.1, momentum=0.5)

    def step(vs, opt, xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, xb) - yb))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        return loss

    (ve, oe), (vc, oc) = make(), make()
    compiled = tf.function(step)
    le = [step(ve, oe, x, y) for _ in range(3)]
    lc = [compiled(vc, oc, tf.constant(x), tf.constant(y)) for _ in range(3)]
    diff = [float(np.max(np.abs(a.numpy() - b.numpy()))) < 1e-5 for a, b in zip(ve, vc)]
    return le, lc, [v.numpy() for v in ve], [v.numpy() for v in vc], diff


# ---------------------------------------------------------------------------
# Variables and tensors kept across steps
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_variables_assigned_from_numpy_arrays_that_are_then_edited(tf):
    """A script resetting its weights from NumPy between steps: ``w.assign(arr)`` then ``arr *= 0``
    in place (the Variable must keep the assigned values), ``tf.constant(arr2)`` kept then
    ``arr2[:] = 5`` (the constant keeps its values), and a ``Variable(arr3)`` made from an array
    edited afterwards."""
    arr = init_array((3, 1), 20)
    arr2 = np.ones((3, 1), np.float32)
    arr3 = np.full((1,), 0.5, np.float32)
    w = tf.Variable(np.zeros((3, 1), np.float32))
    b = tf.Variable(arr3)
    arr3[0] = 100.0
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(6, seed=20)
    kept = tf.constant(arr2)
    losses = []
    for step in range(4):
        if step == 2:
            w.assign(arr)
            arr *= 0.0
            arr2[:] = 5.0
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y)) + 0.01 * tf.reduce_sum(kept * w)
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        losses.append(loss)
    return losses, w.numpy(), b.numpy(), kept, arr.sum()


@parity(modes=True, **TOL)
def test_tensors_as_dict_keys_by_ref_across_steps(tf):
    """Per-variable gradient statistics kept in a dict keyed by ``v.ref()`` (and the gradient tensors
    themselves in a dict keyed by ``g.ref()``) over four steps; the dict's keys deref to the same
    Variables, and the stats are read as floats at the end."""
    vs = mlp_vars(tf, seed=21)
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(8, seed=21)
    sq = {v.ref(): 0.0 for v in vs}
    by_grad = {}
    for _ in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        grads = tape.gradient(loss, vs)
        for g, v in zip(grads, vs):
            sq[v.ref()] += float(tf.reduce_sum(g * g))
            by_grad[g.ref()] = v.name
        opt.apply_gradients(zip(grads, vs))
    same = [k.deref() is v for k, v in zip(sq, vs)]
    names = sorted(by_grad.values())
    grad_sums = [float(tf.reduce_sum(k.deref())) for k in by_grad]
    return [sq[v.ref()] for v in vs], same, names, len(by_grad), grad_sums


@parity(modes=True, **TOL)
def test_identity_and_copy_snapshots_of_weights_kept_across_steps(tf):
    """Snapshots of a Variable before each update by ``tf.identity(w)``, ``copy.copy(w.read_value())``
    and ``tf.convert_to_tensor(w)`` kept in lists; after training, each snapshot still holds its
    step's value and the per-step weight deltas come from ``np.diff``."""
    w = tf.Variable(init_array((3, 1), 22))
    opt = tf.keras.optimizers.SGD(0.2, momentum=0.5)
    x, y = _reg(8, seed=22)
    ids, copies, convs = [], [], []
    for _ in range(4):
        ids.append(tf.identity(w))
        copies.append(copy.copy(w.read_value()))
        convs.append(tf.convert_to_tensor(w))
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
    deltas = np.diff(np.stack([t.numpy() for t in ids] + [w.numpy()]), axis=0)
    return ids, copies, convs, deltas, w


@parity(modes=True, **TOL)
def test_generator_yielding_one_reused_numpy_buffer_into_eager_tape_steps(tf):
    """A Python generator refills one NumPy buffer in place and yields it each step; the step logs
    ``tf.constant(buf)`` and the loss tensor, and the first batch tensor is compared to the buffer's
    last contents at the end (it must keep its own values)."""
    def batches(n):
        rs = np.random.RandomState(23)
        buf = np.empty((4, 3), np.float32)
        for _ in range(n):
            buf[:] = rs.randn(4, 3)
            yield buf

    w = tf.Variable(init_array((3, 1), 23))
    opt = tf.keras.optimizers.Adam(0.05)
    target = np.array([[1.0], [-1.0], [0.5], [0.0]], np.float32)
    kept, losses = [], []
    for buf in batches(5):
        xb = tf.constant(buf)
        kept.append(xb)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(buf, w) - target))
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        losses.append(loss)
    return kept, losses, w.numpy()


@parity(modes=True, **TOL)
def test_variable_created_lazily_inside_the_tape_on_the_first_step(tf):
    """A model whose bias Variable is made on the first call, inside ``with tape:``; it is not
    watched on that step (TF watches a Variable at its first read, which happens under the tape),
    the gradients of both Variables are taken each step and the None ones are filtered."""
    w = tf.Variable(init_array((3, 1), 24))
    state = {}
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(8, seed=24)
    log = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            if "b" not in state:
                state["b"] = tf.Variable(tf.zeros([1]) + 0.3)
            b = state["b"]
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        grads = tape.gradient(loss, [w, b])
        log.append((loss, [g is None for g in grads], len(tape.watched_variables())))
        opt.apply_gradients([(g, v) for g, v in zip(grads, [w, b]) if g is not None])
    return log, w.numpy(), state["b"].numpy()


# ---------------------------------------------------------------------------
# Threads, random masks, metrics
# ---------------------------------------------------------------------------

@parity(modes=True, **TOL)
def test_two_threads_train_independent_models_and_are_joined(tf):
    """Two ``threading.Thread`` workers each train their own linear model with their own SGD
    optimizer on their own data for five eager tape steps, storing losses as floats; after
    ``join`` the main thread reads both models' weights."""
    results = {}

    def worker(name, seed):
        w = tf.Variable(init_array((3, 1), seed))
        opt = tf.keras.optimizers.SGD(0.1)
        x, y = _reg(8, seed=seed)
        losses = []
        for _ in range(5):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
            opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
            losses.append(float(loss))
        results[name] = (losses, w)

    threads = [threading.Thread(target=worker, args=(n, s)) for n, s in [("a", 25), ("b", 26)]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {k: (results[k][0], results[k][1].numpy()) for k in ("a", "b")}


@parity(modes=True, **TOL)
def test_stateless_dropout_masks_seeded_by_the_step_reproduce_a_run(tf):
    """An MLP with dropout drawn by ``tf.random.stateless_uniform(seed=[7, step])`` inside the tape
    (after ``tf.random.set_seed``), trained twice from the same start: the two runs' losses and
    weights are equal, a mask recomputed after the step equals the one used, and the masks of two
    steps differ (TF's stream is not compared: tapejax draws its own, by design)."""
    x, y = _reg(8, seed=27)

    def run():
        tf.random.set_seed(1234)
        vs = mlp_vars(tf, h=6, seed=27)
        opt = tf.keras.optimizers.SGD(0.1)
        losses, masks = [], []
        for step in range(4):
            with tf.GradientTape() as tape:
                w1, b1, w2, b2 = vs
                h = tf.tanh(tf.matmul(x, w1) + b1)
                keep = tf.cast(tf.random.stateless_uniform(tf.shape(h), seed=[7, step]) > 0.3, tf.float32)
                loss = tf.reduce_mean(tf.square(tf.matmul(h * keep / 0.7, w2) + b2 - y))
            opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
            losses.append(float(loss))
            masks.append(keep)
        return losses, [v.numpy() for v in vs], masks

    l1, w1, m1 = run()
    l2, w2, m2 = run()
    again = tf.cast(tf.random.stateless_uniform([8, 6], seed=[7, 2]) > 0.3, tf.float32)
    return (l1 == l2, all(np.array_equal(a, b) for a, b in zip(w1, w2)),
            bool(tf.reduce_all(again == m1[2])), not np.array_equal(m1[0], m1[1]),
            [0.4 < float(tf.reduce_mean(m)) <= 1.0 for m in m1], m2[3].shape.as_list())


@parity(modes=True, **TOL)
def test_mean_metric_updated_inside_and_outside_the_tape(tf):
    """A ``tf.keras.metrics.Mean`` of the loss updated inside ``with tape:`` and a second one updated
    after the step from ``float(loss)``; both are read by ``.result()`` each step and reset at
    step 3; ``np.mean`` of the logged loss tensors checks them."""
    vs = mlp_vars(tf, seed=28)
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(8, seed=28)
    inside, outside = tf.keras.metrics.Mean(), tf.keras.metrics.Mean()
    log, losses = [], []
    for step in range(5):
        if step == 3:
            inside.reset_state()
            outside.reset_state()
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
            inside.update_state(loss)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        outside.update_state(float(loss))
        losses.append(loss)
        log.append((inside.result(), float(outside.result())))
    return log, float(np.mean(losses[3:])), [v.numpy() for v in vs]


@parity(modes=True, **TOL)
def test_numpy_reductions_over_lists_of_pending_tensors(tf):
    """Host statistics over logged tensors: ``np.mean``, ``np.stack`` and ``np.max`` of lists of loss
    and gradient-norm tensors logged over five steps, ``sorted`` of the loss tensors by float, and
    ``np.asarray`` of a gradient; the weights are returned."""
    vs = mlp_vars(tf, seed=29)
    opt = tf.keras.optimizers.Adam(0.05)
    x, y = _reg(8, seed=29)
    losses, norms = [], []
    for _ in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        grads = tape.gradient(loss, vs)
        norms.append(tf.linalg.global_norm(grads))
        opt.apply_gradients(zip(grads, vs))
        losses.append(loss)
    g0 = np.asarray(grads[0])
    order = [float(t) for t in sorted(losses, key=float)]
    return (float(np.mean(losses)), np.stack(losses), float(np.max(norms)), order, g0,
            [v.numpy() for v in vs])


@parity(modes=True, **TOL)
def test_tape_errors_as_values_then_a_good_step(tf):
    """What a script hits when it misuses the tape mid-loop: a second ``gradient`` of a
    non-persistent tape (RuntimeError) and ``matmul`` of mismatched shapes inside a tape; each error is caught as a value and a correct step follows."""
    w = tf.Variable(init_array((3, 1), 30))
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(6, seed=30)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    g = tape.gradient(loss, w)
    second = raises(tape.gradient, loss, w)
    opt.apply_gradients([(g, w)])

    def mismatched():
        with tf.GradientTape():
            return tf.matmul(x, tf.transpose(w))
    shape_err = raises(mismatched, ok=("ValueError",))
    with tf.GradientTape() as tape:
        loss2 = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    opt.apply_gradients([(tape.gradient(loss2, w), w)])
    return loss, second, shape_err, loss2, w.numpy()


@parity(modes=True, **TOL)
def test_magnitude_pruning_edits_np_asarray_of_the_variables_between_steps(tf):
    """Magnitude pruning after each Adam step: ``k = np.asarray(v)`` of each kernel, the small
    entries zeroed in place on that array (TF's is the caller's own copy) and ``v.assign(k)``;
    the sparsity read on the host and the weights are returned."""
    vs = mlp_vars(tf, seed=31)
    opt = tf.keras.optimizers.Adam(0.05)
    x, y = _reg(8, seed=31)
    log = []
    for step in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        zeros = 0
        for v in (vs[0], vs[2]):
            k = np.asarray(v)
            k[np.abs(k) < 0.1 * (step + 1)] = 0.0
            zeros += int((k == 0).sum())
            v.assign(k)
        log.append((loss, zeros))
    return log, [v.numpy() for v in vs]


@parity(modes=True, **TOL)
def test_rows_with_missing_features_dropped_by_a_numpy_bool_mask_inside_the_tape(tf):
    """A regression on data with NaN rows: inside the tape the per-example errors are indexed by the
    NumPy mask ``np.isfinite(x).all(1)`` (TF's ``__getitem__`` masks by a NumPy bool array) and the
    inputs by ``tf.where``; the kept count, the losses and the weights are returned, and a Python
    ``True`` index is TF's ValueError."""
    w = tf.Variable(init_array((3, 1), 32))
    b = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.5)
    x, y = _reg(10, seed=32)
    x[[1, 6], [0, 2]] = np.nan
    ok = np.isfinite(x).all(1)
    log = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            xs = tf.where(tf.math.is_finite(x), x, 0.0)
            err = tf.square(tf.matmul(xs, w) + b - y)[:, 0]
            kept = err[ok]
            loss = tf.reduce_mean(kept)
        opt.apply_gradients(zip(tape.gradient(loss, [w, b]), [w, b]))
        log.append((loss, len(kept), kept.shape.as_list()))
    return log, w.numpy(), b.numpy(), raises(lambda: err[True])


@parity(modes=True, **TOL)
def test_progress_lines_formatted_from_tensors_by_f_strings(tf):
    """A classifier's progress log written by f-strings straight from tensors: the loss with
    ``:.3f``, the per-class accuracy vector bare (TF formats its NumPy value, '[...]'),
    the step count from ``opt.iterations`` with ``:03d``; a spec on the vector is TF's TypeError."""
    w = tf.Variable(init_array((4, 3), 33))
    opt = tf.keras.optimizers.SGD(0.5)
    x, y = _cls(12, seed=33)
    lines = []
    for _ in range(4):
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, w)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        hit = tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y), tf.float32)
        per_class = tf.math.unsorted_segment_sum(hit, y, 3) / np.maximum(np.bincount(y, minlength=3), 1)
        lines.append(f"step {opt.iterations.numpy():03d} loss={loss:.3f} acc={tf.reduce_mean(hit):.2f} "
                     f"per_class={tf.round(per_class * 100)}")
    return lines, raises(lambda: f"{per_class:.2f}")


@parity(modes=True, **TOL)
def test_attention_heads_split_by_shape_arithmetic_on_pending_results(tf):
    """A tiny self-attention regressor whose heads are split by ``tf.reshape(q, q.shape[:-1] + [2, 2])``
    (TF's ``TensorShape + list`` concatenates) on pending results inside the tape, merged back by
    ``[-1] + [q.shape[-1]]``; the shapes seen and the losses of three Adam steps are returned."""
    wq, wk, wv = (tf.Variable(init_array((3, 4), s)) for s in (34, 35, 36))
    head = tf.Variable(init_array((4, 1), 37))
    opt = tf.keras.optimizers.Adam(0.05)
    x = np.random.RandomState(34).randn(2, 5, 3).astype(np.float32)
    y = np.random.RandomState(35).randn(2, 1).astype(np.float32)
    log = []
    for _ in range(3):
        with tf.GradientTape() as tape:
            q, k, v = (tf.einsum("btd,de->bte", x, m) for m in (wq, wk, wv))
            split = q.shape[:-1] + [2, 2]
            qh, kh, vh = (tf.transpose(tf.reshape(t, split), [0, 2, 1, 3]) for t in (q, k, v))
            att = tf.nn.softmax(tf.matmul(qh, kh, transpose_b=True) / 2.0)
            out = tf.reshape(tf.transpose(tf.matmul(att, vh), [0, 2, 1, 3]), [-1] + [q.shape[-1]])
            pooled = tf.reduce_mean(tf.reshape(out, x.shape[:2] + (4,)), 1)
            loss = tf.reduce_mean(tf.square(tf.matmul(pooled, head) - y))
        vs = [wq, wk, wv, head]
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        log.append((loss, split.as_list(), out.shape.as_list()))
    return log, wq.numpy(), head.numpy()


@parity(modes=True, **TOL)
def test_check_numerics_inside_the_tape_raises_at_the_op_and_the_loop_skips_the_batch(tf):
    """``tf.debugging.check_numerics(loss, ...)`` inside ``with tape:`` on a batch holding an Inf:
    TF raises InvalidArgumentError at that line (inside the ``with``), the loop skips the batch and
    trains on the next ones with a momentum optimizer."""
    w = tf.Variable(init_array((3, 1), 38))
    opt = tf.keras.optimizers.SGD(0.05, momentum=0.9)
    x, y = _reg(8, seed=38)
    log = []
    for step in range(5):
        xb = x.copy()
        if step == 1:
            xb[0, 0] = np.inf
        try:
            with tf.GradientTape() as tape:
                loss = tf.debugging.check_numerics(tf.reduce_mean(tf.square(tf.matmul(xb, w) - y)), "loss")
                log.append("checked")
        except tf.errors.InvalidArgumentError:
            log.append("skipped")
            continue
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        log.append(loss)
    return log, w.numpy(), int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_persistent_tape_left_by_an_exception_still_gives_its_gradients(tf):
    """A persistent tape whose ``with`` block is left by a user exception after the loss was
    recorded: the script catches it and still takes two gradients from the tape (TF's tape keeps
    what it recorded), applies one, and a new tape trains the next step."""
    vs = mlp_vars(tf, seed=39)
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(8, seed=39)
    try:
        with tf.GradientTape(persistent=True) as tape:
            pred = mlp(tf, vs, x)
            loss = tf.reduce_mean(tf.square(pred - y))
            raise ValueError("logging backend down")
    except ValueError:
        pass
    g_loss = tape.gradient(loss, vs)
    g_pred = tape.gradient(pred, vs[0])
    del tape
    opt.apply_gradients(zip(g_loss, vs))
    with tf.GradientTape() as tape:
        loss2 = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
    opt.apply_gradients(zip(tape.gradient(loss2, vs), vs))
    return loss, g_pred, loss2, [v.numpy() for v in vs]


@parity(modes=True, **TOL)
def test_best_weights_kept_by_deepcopy_of_variables_with_pending_updates(tf):
    """Early stopping keeping the best model by ``copy.deepcopy(vs)`` right after an optimizer step
    (the copies must hold the updated values and stay fixed as training goes on), then restoring
    them by ``assign`` at the end."""
    vs = mlp_vars(tf, seed=40)
    opt = tf.keras.optimizers.SGD(0.3, momentum=0.8)
    x, y = _reg(8, seed=40)
    best, best_loss, losses = None, float("inf"), []
    for _ in range(7):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        losses.append(float(loss))
        if losses[-1] < best_loss:
            best_loss, best = losses[-1], copy.deepcopy(vs)
    snap = [b.numpy() for b in best]
    for v, b in zip(vs, best):
        v.assign(b)
    return losses, snap, [v.numpy() for v in vs], [type(b).__name__ == type(vs[0]).__name__ for b in best]


@parity(modes=True, **TOL)
def test_double_q_online_and_target_swapped_by_read_value_and_assign(tf):
    """Two linear Q heads trained alternately (double Q-learning): every second step the script swaps
    them by ``tmp = a.read_value(); a.assign(b); b.assign(tmp)`` with an optimizer update pending on
    ``a``; the losses and both heads are returned."""
    a = tf.Variable(init_array((3, 2), 41))
    b = tf.Variable(init_array((3, 2), 42))
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.5)
    x = np.random.RandomState(41).randn(8, 3).astype(np.float32)
    r = np.random.RandomState(42).randn(8).astype(np.float32)
    act = np.random.RandomState(43).randint(0, 2, 8)
    losses = []
    for step in range(6):
        target = r + 0.9 * tf.reduce_max(tf.matmul(x, b), 1)
        with tf.GradientTape() as tape:
            q = tf.gather(tf.matmul(x, a), act, batch_dims=1)
            loss = tf.reduce_mean(tf.square(q - target))
        opt.apply_gradients(zip(tape.gradient(loss, [a]), [a]))
        if step % 2 == 1:
            tmp = a.read_value()
            a.assign(b)
            b.assign(tmp)
        losses.append(loss)
    return losses, a.numpy(), b.numpy()


@parity(modes=True, **TOL)
def test_delayed_gradients_applied_one_step_late(tf):
    """Asynchronous SGD simulated on one machine: each step's gradients are kept in a Python variable
    and applied at the next step (stale by one), with momentum; the last step's gradients are
    applied after the loop. The losses and weights are TF's."""
    vs = mlp_vars(tf, seed=44)
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.5)
    x, y = _reg(8, seed=44)
    prev, losses = None, []
    for _ in range(6):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        grads = tape.gradient(loss, vs)
        if prev is not None:
            opt.apply_gradients(zip(prev, vs))
        prev = grads
        losses.append(loss)
    opt.apply_gradients(zip(prev, vs))
    return losses, [v.numpy() for v in vs], int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_learning_rate_assigned_from_the_pending_loss_each_step(tf):
    """An adaptive rate ``opt.learning_rate.assign(tf.minimum(0.2, 0.05 * loss))`` set from the
    step's own (pending) loss before ``apply_gradients``; the rates read back by ``float`` and the
    weights are TF's."""
    vs = mlp_vars(tf, seed=45)
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(8, seed=45)
    rates = []
    for _ in range(6):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        opt.learning_rate.assign(tf.minimum(0.2, 0.05 * loss))
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        rates.append(float(opt.learning_rate))
    return rates, [v.numpy() for v in vs]


@parity(modes=True, **TOL)
def test_a_logger_thread_reads_the_loss_tensors_the_loop_puts_on_a_queue(tf):
    """The loop puts each step's loss and gradient norm (unread tensors) on a ``queue.Queue``; a
    logger thread takes them and reads them by ``float`` while training goes on; after ``join`` the
    logged floats and the weights are returned."""
    vs = mlp_vars(tf, seed=46)
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.5)
    x, y = _reg(8, seed=46)
    q, logged = queue.Queue(), []

    def logger():
        while (item := q.get()) is not None:
            logged.append(float(item))

    th = threading.Thread(target=logger)
    th.start()
    for _ in range(8):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, x) - y))
        grads = tape.gradient(loss, vs)
        q.put(loss)
        q.put(tf.linalg.global_norm(grads))
        opt.apply_gradients(zip(grads, vs))
    q.put(None)
    th.join()
    return logged, [v.numpy() for v in vs]


@parity(modes=True, **TOL)
def test_tf_print_to_a_file_interleaves_with_python_writes_in_program_order(tf):
    """``tf.print(..., output_stream="file://...")`` of the loss inside the tape, between Python
    writes to the same file before and inside the ``with`` block: the lines come in program order
    (an eager print is not deferred to the gradient)."""
    fd, path = tempfile.mkstemp(suffix=".log")
    os.close(fd)
    w = tf.Variable(init_array((3, 1), 47))
    x, y = _reg(6, seed=47)
    try:
        for step in range(3):
            with open(path, "a") as f:
                f.write(f"before {step}\n")
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
                tf.print("step", step, "loss", tf.round(loss * 100), output_stream="file://" + path)
                with open(path, "a") as f:
                    f.write(f"inside {step}\n")
            w.assign_sub(0.1 * tape.gradient(loss, w))
        with open(path) as f:
            lines = f.read().splitlines()
    finally:
        os.remove(path)
    return lines, w.numpy()


@parity(modes=True, **TOL)
def test_host_clipped_numpy_gradients_given_to_the_optimizer(tf):
    """Gradients clipped on the host by ``np.clip(g.numpy(), -0.5, 0.5)`` for the kernel (the bias's
    left a tensor) and given to SGD with momentum as NumPy arrays; the losses and weights are TF's."""
    w = tf.Variable(init_array((3, 1), 48) * 3.0)
    b = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    x, y = _reg(8, seed=48)
    losses = []
    for _ in range(5):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        gw, gb = tape.gradient(loss, [w, b])
        opt.apply_gradients([(np.clip(gw.numpy(), -0.5, 0.5), w), (gb, b)])
        losses.append(loss)
    return losses, w.numpy(), b.numpy()


@xfail_on_tapejax("tapejax's optimizer update is one compiled program committed atomically (documented in "
                  "tapejax/optimizers/README.md, 'atomic commit'): a wrong-shaped gradient changes no Variable, "
                  "where tf_keras has updated the Variables before it and raises ValueError from SGD's assign")
@parity(modes=True, **TOL)
def test_a_wrong_shaped_gradient_fails_apply_gradients_and_training_goes_on(tf):
    """A bug feeding a gradient of the wrong shape for the bias at step 2: ``apply_gradients`` raises
    (caught as a value), then the loop goes on; TF has already updated the kernel in the failed call
    (its updates run one Variable at a time), and its iteration count skips the failed step."""
    w = tf.Variable(init_array((3, 1), 49))
    b = tf.Variable([0.0])
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(8, seed=49)
    log = []
    for step in range(4):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        gw, gb = tape.gradient(loss, [w, b])
        log.append(raises(opt.apply_gradients, [(gw, w), (tf.zeros([2]) if step == 2 else gb, b)]))
    return [r if not hasattr(r, "value") else None for r in log], w.numpy(), b.numpy(), int(opt.iterations.numpy())


@parity(modes=True, **TOL)
def test_one_step_with_a_host_logger_run_eagerly_then_under_tf_function(tf):
    """A step whose logger reads ``loss.numpy()`` in a ``try`` that treats AttributeError as "in a
    graph" (TF's symbolic tensors have no ``numpy``) and ``np.asarray`` with NotImplementedError the
    same way, run eagerly for two steps then wrapped in ``tf.function`` for two: the logged values
    (None while tracing) and the weights are TF's."""
    vs = mlp_vars(tf, seed=50)
    opt = tf.keras.optimizers.SGD(0.1)
    x, y = _reg(8, seed=50)
    logged = []

    def log(t):
        try:
            value = t.numpy()
        except AttributeError:
            value = None
        try:
            arr = np.asarray(t).shape
        except NotImplementedError:
            arr = None
        logged.append((value, arr))

    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(mlp(tf, vs, xb) - yb))
        log(loss)
        opt.apply_gradients(zip(tape.gradient(loss, vs), vs))
        return loss

    losses = [step(x, y) for _ in range(2)]
    compiled = tf.function(step)
    losses += [compiled(tf.constant(x), tf.constant(y)) for _ in range(2)]
    return losses, logged, [v.numpy() for v in vs]


@parity(modes=True, **TOL)
def test_the_tf2_guides_custom_loop_with_reset_states_and_backend_helpers(tf):
    """The TF 2 custom-loop guide as scripts still write it: an accuracy metric updated inside the
    tape, read and ``reset_states()`` at each epoch end, the loss read by
    ``tf.keras.backend.eval``, the model's size by ``backend.count_params`` and the logits'
    shape by ``backend.int_shape``."""
    w = tf.Variable(init_array((4, 3), 51))
    opt = tf.keras.optimizers.SGD(0.5)
    acc = tf.keras.metrics.SparseCategoricalAccuracy()
    x, y = _cls(12, seed=51)
    log = []
    for _ in range(3):
        for i in range(0, 12, 4):
            with tf.GradientTape() as tape:
                logits = tf.matmul(x[i:i + 4], w)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y[i:i + 4],
                                                                                     logits=logits))
                acc.update_state(y[i:i + 4], logits)
            opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        log.append((float(acc.result()), tf.keras.backend.eval(loss)))
        acc.reset_states()
    return (log, float(acc.result()), int(tf.keras.backend.count_params(w)), tf.keras.backend.int_shape(logits),
            w.numpy())
