"""Round twenty-one (a) of realistic user programs, first half: differentially private and federated
training as TF Privacy and TensorFlow Federated's simulation tutorials write them by hand (raw TF
ops and ``tf.keras`` layers, custom ``GradientTape`` loops, some steps under ``tf.function``), run
under real TensorFlow 2.21 and under tapejax with deferred execution and predicted updates on and
off (``modes=True``).  Quantization-aware training and pruning are in ``test_user_programs21a2.py``.

DP-SGD: per-example gradients by ``tape.jacobian`` of a per-example loss vector, by
``tf.vectorized_map`` over examples with a tape inside and by a Python loop over microbatches; each
clipped (``clip_by_global_norm`` / ``clip_by_norm``, an example whose gradient is 0 and one exactly
at the bound), summed, noised, averaged and applied; the host-side accounting in NumPy; adaptive
clipping by a quantile estimate; the jacobian without pfor in a compiled step; Poisson subsampling
with an empty batch; microbatches of an embedding model (``IndexedSlices`` clipped).  Federated averaging simulated in one process: clients made by
``copy.deepcopy`` of Variables and by ``clone_model`` + ``set_weights``, weighted averages of
``get_weights()`` and of Variables by ``assign``, FedProx's proximal term to a snapshot taken
three ways, FedAvgM / FedAdam on the model delta through ``apply_gradients``, a client that skips a
round, SCAFFOLD's control variates, DP-FedAvg, stateful clients averaged by ``tf.nest.map_structure``
over several weight lists, FedBN's local batch norms, compressed client updates (top-k with error
feedback, sign votes, masked int32 sums).

Noise: tapejax's random values are not TF's (README: TF's seed rules, other values), so the
compared programs add NumPy draws; ``tf.random.stateless_normal`` is drawn beside them and checked
for what DP code relies on (the same seed gives the same noise, another step's seed other noise).
"""
import copy

import numpy as np

from .harness import init_array, keras_init, mlp, mlp_vars, parity, raises, regression_data

LOOSE = dict(rtol=1e-4, atol=1e-5)


def _replays(tf, shape, seed):
    """What a DP program relies on in its seeded noise: replayable, and new at a new step."""
    a = tf.random.stateless_normal(shape, seed=seed)
    b = tf.random.stateless_normal(shape, seed=seed)
    c = tf.random.stateless_normal(shape, seed=[seed[0], seed[1] + 1])
    return bool(np.array_equal(a.numpy(), b.numpy())), bool(not np.array_equal(a.numpy(), c.numpy()))


def _noise(shape, seed, step, scale):
    return np.asarray(np.random.RandomState(seed * 100 + step).randn(*shape) * scale, np.float32)


# ---------------------------------------------------------------------------
# DP-SGD by hand
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_dp_sgd_by_jacobian_with_a_zero_gradient_example_and_one_exactly_at_the_bound(tf):
    """TF Privacy's vectorised DP-SGD written out: ``tape.jacobian`` of the per-example squared
    errors of a linear model gives per-example gradients; each example is clipped by
    ``tf.clip_by_global_norm`` (its returned norm logged).  Example 0 is all zeros with target 0
    (gradient 0, norm 0: ``clip_by_global_norm`` leaves it 0, no NaN); the bound is set to example
    1's norm as the host computed it, so that example is exactly at the bound.  The clipped sum
    plus noise (``sigma * C``) divided by the batch is applied by SGD; the host keeps the norms,
    the fraction clipped and a moments-style epsilon in NumPy."""
    x, y = regression_data(n=4, d=3, seed=2101)
    x[0], y[0] = 0.0, 0.0
    w = tf.Variable(init_array((3, 1), 2102))
    b = tf.Variable([0.0])
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    sigma, clip, history = 0.5, None, []
    out = []
    for step in range(3):
        with tf.GradientTape() as tape:
            per_ex = tf.reduce_sum((tf.matmul(x, w) + b - y) ** 2, axis=1)
        jw, jb = tape.jacobian(per_ex, [w, b])
        if clip is None:
            clip = float(np.sqrt(np.sum(jw.numpy()[1] ** 2) + np.sum(jb.numpy()[1] ** 2)))
        summed, norms = [tf.zeros_like(w), tf.zeros_like(b)], []
        for i in range(4):
            clipped, norm = tf.clip_by_global_norm([jw[i], jb[i]], clip)
            norms.append(norm)
            summed = [s + c for s, c in zip(summed, clipped)]
        noisy = [(s + _noise(s.shape, 2103, step, sigma * clip)) / 4.0 for s in summed]
        opt.apply_gradients(zip(noisy, [w, b]))
        norms_np = np.array([float(n) for n in norms])
        history.append(norms_np)
        out.append((per_ex, jw, jb, norms, noisy, float(np.mean(norms_np > clip)),
                    _replays(tf, [3, 1], [2103, step])))
    q, steps, delta = 4 / 100, 3, 1e-5
    eps = q * np.sqrt(steps * np.log(1 / delta)) / sigma
    return out, w, b, clip, float(eps), np.stack(history)


@parity(modes=True, **LOOSE)
def test_dp_sgd_by_vectorized_map_with_a_tape_inside_and_per_variable_clip_by_norm(tf):
    """Per-example gradients of an MLP by ``tf.vectorized_map`` over ``(x, y)`` rows with a tape
    inside the mapped function (TF's pfor over the gradient), each Variable's per-example
    gradient clipped on its own by ``tf.clip_by_norm(g, C_layer)`` (per-layer bounds, as TF
    Privacy's per-layer clipping), summed, noised and applied by momentum SGD in a compiled step."""
    x, y = regression_data(n=5, d=3, seed=2111)
    vs = mlp_vars(tf, seed=2112)
    bounds = [0.5, 0.2, 0.7, 0.1]
    opt = tf.keras.optimizers.legacy.SGD(0.1, momentum=0.9)

    def one(ex):
        xi, yi = ex
        with tf.GradientTape() as t:
            loss = tf.reduce_sum((mlp(tf, vs, xi[None]) - yi) ** 2)
        return t.gradient(loss, vs)

    @tf.function
    def step(x, y, noise):
        per = tf.vectorized_map(one, (x, y))
        clipped = [tf.vectorized_map(lambda g, c=c: tf.clip_by_norm(g, c), p) for p, c in zip(per, bounds)]
        grads = [(tf.reduce_sum(c, axis=0) + n) / 5.0 for c, n in zip(clipped, noise)]
        opt.apply_gradients(zip(grads, vs))
        norms = [tf.norm(tf.reshape(p, [5, -1]), axis=1) for p in per]
        return per, norms, grads

    out = []
    for s in range(3):
        noise = [_noise(v.shape, 2113, s, 0.05) for v in vs]
        out.append(step(tf.constant(x), tf.constant(y), noise))
    return out, vs


@parity(modes=True, **LOOSE)
def test_dp_sgd_over_microbatches_in_a_python_loop_on_a_keras_model(tf):
    """TF Privacy's ``num_microbatches``: a batch of 6 split into 3 microbatches of 2; each
    microbatch's mean loss gets its own tape and gradient, clipped to global norm 0.3, the clipped
    gradients summed, Gaussian noise added, divided by the number of microbatches and applied by
    Adam on a Keras MLP.  The microbatch norms and clip factors are logged."""
    x, y = regression_data(n=6, d=3, seed=2121)
    model = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="tanh"), tf.keras.layers.Dense(1)])
    model.build((None, 3))
    keras_init(model, 2122)
    opt = tf.keras.optimizers.legacy.Adam(0.05)
    out = []
    for step in range(3):
        acc = [tf.zeros_like(v) for v in model.trainable_variables]
        logs = []
        for mb in range(3):
            xb, yb = x[2 * mb:2 * mb + 2], y[2 * mb:2 * mb + 2]
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
            g = tape.gradient(loss, model.trainable_variables)
            clipped, norm = tf.clip_by_global_norm(g, 0.3)
            acc = [a + c for a, c in zip(acc, clipped)]
            logs.append((loss, norm, tf.minimum(1.0, 0.3 / norm)))
        grads = [(a + _noise(a.shape, 2123, step * 10 + i, 0.3 * 0.4)) / 3.0 for i, a in enumerate(acc)]
        opt.apply_gradients(zip(grads, model.trainable_variables))
        out.append((logs, grads))
    return out, model.get_weights()


@parity(modes=True, **LOOSE)
def test_adaptive_clipping_by_a_noisy_quantile_estimate_in_a_clip_variable(tf):
    """Andrew et al.'s adaptive clipping as TF Privacy's quantile estimator does it: the clip norm is
    a non-trainable Variable; each step the per-example norms (by ``batch_jacobian`` of a linear
    model's outputs times the residual, i.e. the closed-form per-example gradient checked against
    the tape's) are compared with it, the noised fraction below the bound ``b`` moves it
    geometrically: ``C.assign(C * exp(-eta * (b - target)))``; the update uses the clip read before
    the assign.  Eager and compiled steps alternate."""
    x, y = regression_data(n=6, d=3, seed=2131)
    w = tf.Variable(init_array((3, 1), 2132))
    clip = tf.Variable(0.1, trainable=False)
    opt = tf.keras.optimizers.legacy.SGD(0.05)

    def step(noise, b_noise):
        with tf.GradientTape() as tape:
            per_ex = tf.reduce_sum((tf.matmul(x, w) - y) ** 2, axis=1)
        jac = tape.jacobian(per_ex, w)                          # [6, 3, 1]
        closed = 2.0 * (tf.matmul(x, w) - y) * x                 # [6, 3]
        norms = tf.norm(tf.reshape(jac, [6, -1]), axis=1)
        factors = tf.minimum(1.0, clip / tf.maximum(norms, 1e-12))
        g = (tf.reduce_sum(jac * factors[:, None, None], axis=0) + noise) / 6.0
        opt.apply_gradients([(g, w)])
        below = tf.reduce_mean(tf.cast(norms <= clip, tf.float32)) + b_noise
        clip.assign(clip * tf.exp(-0.5 * (below - 0.5)))
        return per_ex, norms, closed, factors, below, g

    compiled = tf.function(step)
    out = []
    for s in range(4):
        noise, b_noise = _noise((3, 1), 2133, s, 0.01), float(_noise((), 2134, s, 0.05))
        out.append(((compiled if s % 2 else step)(noise, b_noise), clip.numpy()))
    return out, w, clip


# ---------------------------------------------------------------------------
# Federated averaging simulated in one process
# ---------------------------------------------------------------------------

def _client_data(seed, sizes, d=3):
    rs = np.random.RandomState(seed)
    return [(rs.randn(n, d).astype(np.float32), rs.randn(n, 1).astype(np.float32)) for n in sizes]


@parity(modes=True, **LOOSE)
def test_fedavg_with_deepcopy_clients_and_a_weighted_average_of_variables_by_assign(tf):
    """FedAvg on raw Variables: each round, every client's model is ``copy.deepcopy`` of the server's
    Variables (a new set: training it leaves the server alone), runs two local SGD steps on its
    data, and the server assigns the average weighted by the clients' example counts
    (``tf.add_n`` of scaled Variables).  Deep-copies are checked for independence."""
    server = mlp_vars(tf, seed=2141)
    data = _client_data(2142, [2, 4, 3])
    n_total = float(sum(len(d[0]) for d in data))
    out = []
    for rnd in range(2):
        client_ws, losses = [], []
        for cx, cy in data:
            local = copy.deepcopy(server)
            opt = tf.keras.optimizers.legacy.SGD(0.1)
            for _ in range(2):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean((mlp(tf, local, cx) - cy) ** 2)
                opt.apply_gradients(zip(tape.gradient(loss, local), local))
                losses.append(loss)
            client_ws.append((local, len(cx)))
        independent = [not np.array_equal(c[0][0].numpy(), server[0].numpy()) for c in client_ws]
        for i, v in enumerate(server):
            v.assign(tf.add_n([c[i] * (n / n_total) for c, n in client_ws]))
        out.append((losses, independent, [v.numpy() for v in server]))
    return out


@parity(modes=True, **LOOSE)
def test_fedavg_keras_clone_model_set_weights_and_a_client_that_skips_a_round(tf):
    """TFF's simulation tutorial without TFF: clients are ``tf.keras.models.clone_model(server)`` given
    ``server.get_weights()``; each trains with its own optimizer in a compiled step; the server's
    new weights are the example-weighted mean of the clients' ``get_weights()`` in NumPy, set by
    ``set_weights``.  Client 1 is unavailable in round 1 (skipped: the weights renormalise over
    the others).  Server evaluation loss logged each round."""
    server = tf.keras.Sequential([tf.keras.layers.Dense(4, activation="relu"), tf.keras.layers.Dense(1)])
    server.build((None, 3))
    keras_init(server, 2151)
    data = _client_data(2152, [3, 2, 4])
    ex, ey = regression_data(n=5, d=3, seed=2153)
    out = []
    for rnd in range(3):
        updates, counts, client_losses = [], [], []
        for k, (cx, cy) in enumerate(data):
            if rnd == 1 and k == 1:
                continue
            client = tf.keras.models.clone_model(server)
            client.set_weights(server.get_weights())
            opt = tf.keras.optimizers.legacy.SGD(0.05)

            @tf.function
            def local_step(x, y, client=client, opt=opt):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(client(x, training=True) - y))
                g = tape.gradient(loss, client.trainable_variables)
                opt.apply_gradients(zip(g, client.trainable_variables))
                return loss, g

            for _ in range(2):
                client_losses.append(local_step(cx, cy))
            updates.append(client.get_weights())
            counts.append(len(cx))
        weights = np.array(counts, np.float32) / np.sum(counts)
        server.set_weights([sum(wk * u[i] for wk, u in zip(weights, updates)) for i in range(len(updates[0]))])
        out.append((client_losses, weights, tf.reduce_mean(tf.square(server(ex) - ey))))
    return out, server.get_weights()


@parity(modes=True, **LOOSE)
def test_fedprox_proximal_term_to_snapshots_taken_by_identity_numpy_and_constant(tf):
    """FedProx: the local objective adds ``mu / 2 * sum ||w - w_global||^2`` where ``w_global`` is
    taken before the local steps; three clients take it three ways (``tf.identity(v)``,
    ``v.numpy()``, ``tf.constant(v)``).  A snapshot must not follow the Variable as it trains: the
    proximal gradient ``mu (w - w_global)`` is 0 at the first local step and grows after.  The
    client Variables are the server's by ``assign`` at the start of each round."""
    server = mlp_vars(tf, seed=2161)
    clients = [mlp_vars(tf, seed=2161) for _ in range(3)]
    data = _client_data(2162, [3, 3, 3])
    snap = [lambda v: tf.identity(v), lambda v: v.numpy(), lambda v: tf.constant(v)]
    mu = 0.5
    out = []
    for rnd in range(2):
        for local, (cx, cy), take in zip(clients, data, snap):
            for lv, sv in zip(local, server):
                lv.assign(sv)
            w_global = [take(v) for v in local]
            opt = tf.keras.optimizers.legacy.SGD(0.2)
            for _ in range(3):
                with tf.GradientTape() as tape:
                    task = tf.reduce_mean((mlp(tf, local, cx) - cy) ** 2)
                    prox = mu / 2 * tf.add_n([tf.reduce_sum(tf.square(v - g)) for v, g in zip(local, w_global)])
                    loss = task + prox
                g = tape.gradient(loss, local)
                opt.apply_gradients(zip(g, local))
                out.append((task, prox, g))
        for i, v in enumerate(server):
            v.assign(tf.add_n([c[i] for c in clients]) / 3.0)
    return out, server


@parity(modes=True, **LOOSE)
def test_fedavgm_and_fedadam_apply_the_model_delta_as_a_pseudo_gradient(tf):
    """Adaptive federated optimisation: the round's pseudo-gradient is ``server - mean(clients)``
    (a Tensor per Variable), applied to the server Variables by ``apply_gradients`` of a server
    optimizer: SGD with momentum 0.9 (FedAvgM) on one server model, Adam (FedAdam, eps 1e-3) on
    another; clients do two local SGD steps from the server's weights, copied by ``assign`` into
    shared client Variables.  Server slots are read back (``get_slot``)."""
    servers = [mlp_vars(tf, seed=2171), mlp_vars(tf, seed=2171)]
    server_opts = [tf.keras.optimizers.legacy.SGD(1.0, momentum=0.9), tf.keras.optimizers.legacy.Adam(0.05, epsilon=1e-3)]
    local = mlp_vars(tf, seed=2171)
    data = _client_data(2172, [3, 2])
    out = []
    for rnd in range(3):
        for server, sopt in zip(servers, server_opts):
            finals = []
            for cx, cy in data:
                for lv, sv in zip(local, server):
                    lv.assign(sv)
                copt = tf.keras.optimizers.legacy.SGD(0.1)
                for _ in range(2):
                    with tf.GradientTape() as tape:
                        loss = tf.reduce_mean((mlp(tf, local, cx) - cy) ** 2)
                    copt.apply_gradients(zip(tape.gradient(loss, local), local))
                finals.append([tf.identity(v) for v in local])
            delta = [sv - (a + b) / 2.0 for sv, a, b in zip(server, *finals)]
            sopt.apply_gradients(zip(delta, server))
            out.append((delta, loss))
    slots = [servers[0][0].numpy(), server_opts[0].get_slot(servers[0][0], "momentum"),
             server_opts[1].get_slot(servers[1][2], "m"), server_opts[1].get_slot(servers[1][2], "v")]
    return out, servers, slots


@parity(modes=True, **LOOSE)
def test_scaffold_control_variates_correct_the_local_gradients(tf):
    """SCAFFOLD (option II): server control ``c`` and per-client controls ``c_i`` are non-trainable
    Variables; local steps use ``g - c_i + c``; after ``K`` local steps at rate ``lr`` the client's new
    control is ``c_i - c + (x - y_i) / (K lr)`` (assigned), the server averages the model deltas and
    the control deltas.  The local step is compiled; the controls enter it as Variables."""
    server = [tf.Variable(init_array((3, 1), 2181)), tf.Variable([0.0])]
    c = [tf.Variable(tf.zeros_like(v), trainable=False) for v in server]
    cis = [[tf.Variable(tf.zeros_like(v), trainable=False) for v in server] for _ in range(2)]
    y_vars = [tf.Variable(v) for v in server]
    data = _client_data(2182, [4, 3])
    lr, K = 0.1, 3

    @tf.function
    def local_step(x, y, ci):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, y_vars[0]) + y_vars[1] - y) ** 2)
        g = tape.gradient(loss, y_vars)
        for v, gi, cc, cl in zip(y_vars, g, c, ci):
            v.assign_sub(lr * (gi - cl + cc))
        return loss, g

    out = []
    for rnd in range(3):
        dys, dcs = [], []
        for (cx, cy), ci in zip(data, cis):
            for yv, sv in zip(y_vars, server):
                yv.assign(sv)
            losses = [local_step(cx, cy, ci) for _ in range(K)]
            new_ci = [cl - cc + (sv - yv) / (K * lr) for cl, cc, sv, yv in zip(ci, c, server, y_vars)]
            dys.append([yv - sv for yv, sv in zip(y_vars, server)])
            dcs.append([n - cl for n, cl in zip(new_ci, ci)])
            for cl, n in zip(ci, new_ci):
                cl.assign(n)
            out.append(losses)
        for i in range(2):
            server[i].assign_add((dys[0][i] + dys[1][i]) / 2.0)
            c[i].assign_add((dcs[0][i] + dcs[1][i]) / 2.0)
    return out, server, c, cis


@parity(modes=True, **LOOSE)
def test_dp_fedavg_clips_client_updates_and_the_server_adds_noise(tf):
    """DP-FedAvg (McMahan et al.): each client's update ``local - server`` is clipped to global norm
    ``S`` by ``tf.clip_by_global_norm`` (one client's update is 0: it had no data this round and
    returns the server's weights), the clipped updates averaged with fixed weights, noise
    ``sigma S / n`` added, the server moved by ``assign_add``.  Norms and the pre-clip global norm
    (``tf.linalg.global_norm``) logged."""
    server = mlp_vars(tf, seed=2191)
    data = _client_data(2192, [3, 4, 0])
    S, sigma = 0.05, 0.5
    out = []
    for rnd in range(2):
        updates = []
        for cx, cy in data:
            local = [tf.Variable(v) for v in server]
            if len(cx):
                opt = tf.keras.optimizers.legacy.SGD(0.2)
                for _ in range(2):
                    with tf.GradientTape() as tape:
                        loss = tf.reduce_mean((mlp(tf, local, cx) - cy) ** 2)
                    opt.apply_gradients(zip(tape.gradient(loss, local), local))
            delta = [lv - sv for lv, sv in zip(local, server)]
            clipped, norm = tf.clip_by_global_norm(delta, S)
            updates.append(clipped)
            out.append((norm, tf.linalg.global_norm(clipped)))
        for i, v in enumerate(server):
            mean = tf.add_n([u[i] for u in updates]) / 3.0
            v.assign_add(mean + _noise(v.shape, 2193, rnd * 10 + i, sigma * S / 3.0))
        out.append(_replays(tf, [2], [2193, rnd]))
    return out, server


@parity(modes=True, **LOOSE)
def test_dp_sgd_per_example_jacobian_without_pfor_in_a_compiled_step_on_a_keras_model(tf):
    """TF Privacy's non-vectorised path in a compiled step: ``tape.jacobian(per_example_losses,
    model.trainable_variables, experimental_use_pfor=False)`` on a non-persistent tape (allowed
    inside ``tf.function``; refused eagerly, which the program checks with the same call outside),
    clipped per example by ``clip_by_global_norm`` over ``tf.unstack``ed rows, averaged with noise
    and applied by SGD to a Keras MLP."""
    x, y = regression_data(n=4, d=3, seed=2195)
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, activation="tanh"), tf.keras.layers.Dense(1)])
    model.build((None, 3))
    keras_init(model, 2196)
    opt = tf.keras.optimizers.legacy.SGD(0.1)

    @tf.function
    def step(x, y, noise):
        with tf.GradientTape() as tape:
            per_ex = tf.reduce_sum(tf.square(model(x) - y), axis=1)
        jac = tape.jacobian(per_ex, model.trainable_variables, experimental_use_pfor=False)
        rows = [tf.unstack(j) for j in jac]
        clipped, norms = [], []
        for i in range(4):
            c, n = tf.clip_by_global_norm([r[i] for r in rows], 0.4)
            clipped.append(c)
            norms.append(n)
        grads = [(tf.add_n([c[k] for c in clipped]) + nz) / 4.0 for k, nz in enumerate(noise)]
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return per_ex, jac, tf.stack(norms), grads

    out = []
    for s in range(2):
        noise = [_noise(v.shape, 2197, s * 10 + i, 0.1) for i, v in enumerate(model.trainable_variables)]
        out.append(step(tf.constant(x), tf.constant(y), noise))
    with tf.GradientTape() as tape:
        per_ex = tf.reduce_sum(tf.square(model(x) - y), axis=1)
    eager = raises(tape.jacobian, per_ex, model.trainable_variables, experimental_use_pfor=False)
    return out, model.get_weights(), eager


@parity(modes=True, **LOOSE)
def test_fedavg_of_stateful_clients_by_nest_map_structure_over_their_weights(tf):
    """Stateful clients (each keeps its own Keras model and Adam across rounds, as cross-silo FL
    does): each round the clients load the server weights by assigning ``zip(client.weights,
    server.weights)``, train, and the server takes ``tf.nest.map_structure(lambda *ws: sum(p * w)
    , *client_weights)`` (several structures at once) of their ``get_weights()`` lists; the
    clients' Adam slots persist (``opt.iterations`` logged)."""
    server = tf.keras.Sequential([tf.keras.layers.Dense(3, activation="tanh"), tf.keras.layers.Dense(1)])
    server.build((None, 3))
    keras_init(server, 2198)
    clients, opts = [], []
    for k in range(3):
        m = tf.keras.models.clone_model(server)
        m.build((None, 3))
        clients.append(m)
        opts.append(tf.keras.optimizers.legacy.Adam(0.05))
    data = _client_data(2199, [2, 3, 5])
    p = np.array([2, 3, 5], np.float32) / 10.0
    out = []
    for rnd in range(2):
        for client, opt, (cx, cy) in zip(clients, opts, data):
            for cw, sw in zip(client.weights, server.weights):
                cw.assign(sw)
            for _ in range(2):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(client(cx) - cy))
                opt.apply_gradients(zip(tape.gradient(loss, client.trainable_variables), client.trainable_variables))
            out.append((loss, int(opt.iterations)))
        avg = tf.nest.map_structure(lambda *ws: sum(pk * w for pk, w in zip(p, ws)),
                                    *[c.get_weights() for c in clients])
        server.set_weights(avg)
    return out, server.get_weights()


@parity(modes=True, **LOOSE)
def test_dp_sgd_with_poisson_subsampling_and_an_empty_batch(tf):
    """DP-SGD with Poisson subsampling (each example in a step with probability q, as the privacy
    analysis assumes): batch sizes vary and one step's batch is empty.  Per-example gradients by
    ``tape.jacobian``, flattened by ``tf.reshape(j, [n, -1])`` (``[0, -1]`` for the empty batch:
    TF infers the -1 from the nonzero sizes), clipped per row by ``tf.clip_by_norm(axes=[1])``,
    summed (zeros when empty), noised and divided by the *expected* batch size ``q N`` (TF
    Privacy's normalisation: an empty batch still moves the weights by its noise).  Then the step
    compiled with a ``[None, 3]`` input signature, the flattening by ``[tf.shape(x)[0], -1]``."""
    x, y = regression_data(n=8, d=3, seed=2188)
    w = tf.Variable(init_array((3, 1), 2189))
    b = tf.Variable([0.2])
    q, clip = 0.4, 0.8
    opt = tf.keras.optimizers.legacy.SGD(0.2)
    batches = [[0, 3, 6], [], [1, 2, 4, 7], [5]]
    out = []
    for s, idx in enumerate(batches):
        xb, yb = x[idx].reshape(-1, 3), y[idx].reshape(-1, 1)
        with tf.GradientTape() as tape:
            per_ex = tf.reduce_sum((tf.matmul(xb, w) + b - yb) ** 2, axis=1)
        jw, jb = tape.jacobian(per_ex, [w, b])
        flat = tf.concat([tf.reshape(jw, [len(idx), -1]), tf.reshape(jb, [len(idx), -1])], axis=1)
        clipped = tf.clip_by_norm(flat, clip, axes=[1])
        summed = tf.reduce_sum(clipped, axis=0) + _noise((4,), 2190, s, 0.5 * clip)
        g = summed / (q * 8)
        opt.apply_gradients([(tf.reshape(g[:3], [3, 1]), w), (g[3:], b)])
        out.append((per_ex, jw, flat, clipped, g, tf.norm(flat, axis=1)))

    @tf.function(input_signature=[tf.TensorSpec([None, 3]), tf.TensorSpec([None, 1]), tf.TensorSpec([3, 1])])
    def compiled(xb, yb, noise):   # the same step for the weights alone, one trace for every batch size
        with tf.GradientTape() as tape:
            per_ex = tf.reduce_sum((tf.matmul(xb, w) - yb) ** 2, axis=1)
        flat = tf.reshape(tape.jacobian(per_ex, w), [tf.shape(xb)[0], -1])
        g = tf.reshape(tf.reduce_sum(tf.clip_by_norm(flat, clip, axes=[1]), axis=0), [3, 1]) + noise
        opt.apply_gradients([(g / (q * 8), w)])
        return per_ex, flat, g

    for s, idx in enumerate(batches):
        out.append(compiled(x[idx].reshape(-1, 3), y[idx].reshape(-1, 1), _noise((3, 1), 2184, s, 0.4)))
    return out, w, b


@parity(modes=True, **LOOSE)
def test_dp_microbatches_of_an_embedding_model_clip_indexed_slices_with_dense_gradients(tf):
    """DP-SGD's microbatch loop on a Keras text model (``Embedding``, average pooling, ``Dense``):
    the embedding's gradient is an ``IndexedSlices``; ``tf.clip_by_global_norm`` clips it with the
    dense gradients (its norm counts once per row *occurrence*) and returns it as ``IndexedSlices``;
    the accumulator ``zeros + clipped`` densifies it; the noised mean is applied by SGD."""
    rs = np.random.RandomState(2186)
    ids = rs.randint(0, 6, size=(6, 3)).astype(np.int32)
    ids[0, :2] = 4                                   # a repeated id within one example
    y = rs.randn(6, 1).astype(np.float32)
    model = tf.keras.Sequential([tf.keras.layers.Embedding(6, 2), tf.keras.layers.GlobalAveragePooling1D(),
                                 tf.keras.layers.Dense(1)])
    model.build((None, 3))
    keras_init(model, 2187)
    opt = tf.keras.optimizers.legacy.SGD(0.3)
    out = []
    for step in range(2):
        acc = [tf.zeros_like(v) for v in model.trainable_variables]
        for mb in range(3):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(ids[2 * mb:2 * mb + 2]) - y[2 * mb:2 * mb + 2]))
            g = tape.gradient(loss, model.trainable_variables)
            clipped, norm = tf.clip_by_global_norm(g, 0.2)
            acc = [a + c for a, c in zip(acc, clipped)]
            out.append((loss, norm, [type(c).__name__ == "IndexedSlices" for c in (g[0], clipped[0])], clipped))
        noisy = [(a + _noise(a.shape, 2185, step * 10 + i, 0.05)) / 3.0 for i, a in enumerate(acc)]
        opt.apply_gradients(zip(noisy, model.trainable_variables))
    return out, model.get_weights()


@parity(modes=True, **LOOSE)
def test_fedbn_averages_all_but_the_clients_local_batch_norm_layers(tf):
    """FedBN: clients whose features differ in scale keep their own ``BatchNormalization`` layers
    (weights and moving statistics, updated in training calls of a compiled step); every other
    layer is loaded from the server by ``layer.set_weights`` and averaged back layer by layer,
    BN layers found by ``isinstance``.  Each client's inference uses its own statistics."""
    rs = np.random.RandomState(2183)
    data = [(rs.randn(4, 3).astype(np.float32) * (k + 1), rs.randn(4, 1).astype(np.float32)) for k in range(2)]

    def make():
        m = tf.keras.Sequential([tf.keras.layers.Dense(3), tf.keras.layers.BatchNormalization(),
                                 tf.keras.layers.Activation("relu"), tf.keras.layers.Dense(1)])
        m.build((None, 3))
        return m

    server = make()
    keras_init(server, 2182)
    clients = [make() for _ in range(2)]
    for c in clients:
        c.set_weights(server.get_weights())
    opts = [tf.keras.optimizers.legacy.SGD(0.1) for _ in range(2)]
    steps = []
    for c, o in zip(clients, opts):
        @tf.function
        def step(x, y, c=c, o=o):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((c(x, training=True) - y) ** 2)
            g = tape.gradient(loss, c.trainable_variables)
            o.apply_gradients(zip(g, c.trainable_variables))
            return loss
        steps.append(step)
    out = []
    for rnd in range(2):
        for c, step, (cx, cy) in zip(clients, steps, data):
            for layer, sl in zip(c.layers, server.layers):
                if not isinstance(layer, tf.keras.layers.BatchNormalization):
                    layer.set_weights(sl.get_weights())
            out.append([step(cx, cy) for _ in range(2)])
        for i, sl in enumerate(server.layers):
            if not isinstance(sl, tf.keras.layers.BatchNormalization):
                sl.set_weights([(a + b) / 2 for a, b in zip(*[c.layers[i].get_weights() for c in clients])])
        out.append([c.layers[1].get_weights() for c in clients])
    return out, server.get_weights(), [c(data[0][0], training=False) for c in clients]


@parity(modes=True, **LOOSE)
def test_compressed_client_updates_top_k_with_error_feedback_sign_votes_and_masked_int_sums(tf):
    """Communication compression in federated training: each client sends the top 25% of
    ``gradient + residual`` by magnitude (``tf.math.top_k`` of ``|.|``, ``tf.gather``,
    ``tf.scatter_nd``) and keeps the rest in an error-feedback residual Variable (``assign``);
    signSGD's majority vote (``sign`` of the summed signs, 0 at a tie); secure aggregation simulated
    on int32: updates quantised by ``round(g * 1000)``, masked by large NumPy int32 masks (the sums
    wrap around), summed, unmasked exactly, reduced by ``floormod``."""
    data = [regression_data(n=3, d=3, seed=2174 + k) for k in range(3)]
    server = mlp_vars(tf, seed=2178)
    residuals = [[tf.Variable(tf.zeros_like(v), trainable=False) for v in server] for _ in range(3)]
    out = []
    for rnd in range(2):
        sparse_updates, signs, ints = [], [], []
        for k, ((cx, cy), res) in enumerate(zip(data, residuals)):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((mlp(tf, server, cx) - cy) ** 2)
            g = tape.gradient(loss, server)
            comp = []
            for gi, r in zip(g, res):
                acc = tf.reshape(gi + r, [-1])
                _, idx = tf.math.top_k(tf.abs(acc), k=max(1, int(acc.shape[0]) // 4))
                sp = tf.reshape(tf.scatter_nd(idx[:, None], tf.gather(acc, idx), tf.shape(acc)), gi.shape)
                r.assign(gi + r - sp)
                comp.append(sp)
            sparse_updates.append(comp)
            signs.append([tf.sign(gi) for gi in g])
            rs = np.random.RandomState(2179 + rnd * 10 + k)
            masks = [rs.randint(-2 ** 31, 2 ** 31 - 1, size=gi.shape, dtype=np.int64).astype(np.int32) for gi in g]
            ints.append(([tf.cast(tf.round(gi * 1000.0), tf.int32) + m for gi, m in zip(g, masks)], masks))
        agg = [tf.add_n([u[i] for u in sparse_updates]) / 3.0 for i in range(4)]
        vote = [tf.sign(tf.add_n([s[i] for s in signs])) for i in range(4)]
        masked = [tf.add_n([c[0][i] for c in ints]) for i in range(4)]
        unmasked = [m - tf.add_n([tf.constant(c[1][i]) for c in ints]) for i, m in enumerate(masked)]
        for v, a, vt in zip(server, agg, vote):
            v.assign_sub(0.1 * a + 0.01 * vt)
        out.append((agg, vote, masked, unmasked, [tf.math.floormod(u, 7) for u in unmasked],
                    [r.numpy() for r in residuals[0]]))
    return out, server
