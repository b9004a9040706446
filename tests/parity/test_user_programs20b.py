"""Round twenty (b) of realistic user programs, first half: off-policy continuous control and
value-based reinforcement learning as TF-Agents-era code, keras.io and research repositories write
it (raw tf ops and ``tf.keras`` layers, custom ``GradientTape`` loops, steps under ``tf.function``),
run under real TensorFlow 2.21 and under tapejax with deferred execution and predicted updates on
and off (``modes=True``).

Continuous control: SAC (twin critics, a reparameterised tanh-squashed Gaussian with the
``log(1 - tanh^2 + eps)`` correction, a learned ``log_alpha`` with its own optimizer and target
entropy, Polyak targets by ``assign``) with raw Variables in a compiled step and with Keras layers
eagerly; TD3 (target policy smoothing by clipped NumPy noise, the actor delayed to every second
step by a Python counter and by ``tf.cond`` on a step Variable); DDPG whose actor is trained by the
critic's gradient wrt the actions (``tape.gradient(q, a)`` fed back as ``output_gradients``).
Value-based: Double DQN with a dueling head, C51's distributional projection (by
``tensor_scatter_nd_add`` and by a one-hot scatter, with atoms landing exactly on the support, the
``l == u`` case), QR-DQN's quantile Huber loss, prioritized replay whose priorities are written
back into a Variable by ``tensor_scatter_nd_update``, n-step returns and Retrace's truncated
importance ratios.  The policy-gradient and model-based programs are in
``test_user_programs20b2.py``, the rest in ``test_user_programs20b3.py``.  Environments are tiny NumPy simulations, every random number is
drawn with NumPy and fed in.
"""
import numpy as np

from .harness import init_array, keras_init, parity

LOOSE = dict(rtol=1e-4, atol=1e-5)


def _mlp_vars(tf, dims, seed):
    d, h, o = dims
    return [tf.Variable(init_array((d, h), seed)), tf.Variable(np.zeros(h, np.float32)),
            tf.Variable(init_array((h, o), seed + 1)), tf.Variable(np.zeros(o, np.float32))]


def _mlp(tf, ws, x):
    return tf.matmul(tf.nn.relu(tf.matmul(x, ws[0]) + ws[1]), ws[2]) + ws[3]


def _point_mass(seed, n=6):
    """A batch of transitions of a 1-D point mass (state: position, velocity; action: force in
    [-1, 1]); reward ``-x^2 - 0.1 a^2``, done when ``|x| > 1``."""
    rs = np.random.RandomState(seed)
    s = rs.uniform(-1, 1, (n, 2)).astype(np.float32)
    a = rs.uniform(-1, 1, (n, 1)).astype(np.float32)
    v2 = s[:, 1:] + 0.1 * a
    x2 = s[:, :1] + 0.1 * v2
    s2 = np.concatenate([x2, v2], 1).astype(np.float32)
    r = (-x2[:, 0] ** 2 - 0.1 * a[:, 0] ** 2).astype(np.float32)
    done = (np.abs(x2[:, 0]) > 0.9).astype(np.float32)
    return s, a, r, s2, done


def _chain(seed, n=8, states=5, actions=3):
    """Transitions of a chain MDP with one-hot states: action 0 left, 1 stay, 2 right; reward 1 at
    the right end, which is terminal."""
    rs = np.random.RandomState(seed)
    i = rs.randint(0, states - 1, n)
    a = rs.randint(0, actions, n)
    j = np.clip(i + a - 1, 0, states - 1)
    eye = np.eye(states, dtype=np.float32)
    r = (j == states - 1).astype(np.float32)
    return eye[i], a.astype(np.int32), r, eye[j], r.copy()


# ---------------------------------------------------------------------------
# Off-policy continuous control
# ---------------------------------------------------------------------------

def _squashed_gaussian(tf, actor, s, eps):
    """SAC's policy: ``a = tanh(mu + std * eps)`` with its log-probability corrected by
    ``sum log(1 - tanh(u)^2 + 1e-6)``; ``log_std`` clipped to [-5, 2]."""
    out = _mlp(tf, actor, s)
    mu, log_std = out[:, :1], tf.clip_by_value(out[:, 1:], -5.0, 2.0)
    std = tf.exp(log_std)
    u = mu + std * eps
    a = tf.tanh(u)
    logp = tf.reduce_sum(-0.5 * tf.square(eps) - log_std - 0.5 * np.log(2 * np.pi), axis=1)
    logp -= tf.reduce_sum(tf.math.log(1.0 - tf.square(a) + 1e-6), axis=1)
    return a, logp


@parity(modes=True, **LOOSE)
def test_sac_twin_critics_squashed_gaussian_and_learned_temperature_in_a_compiled_step(tf):
    """SAC in one compiled step: both critics regress on ``r + gamma (1-d) (min(Q1', Q2')(s', a') -
    alpha logp')`` with the next action sampled by the current actor from fed noise and the targets
    read from target critics; the actor minimises ``alpha logp - min(Q1, Q2)``; ``log_alpha`` has
    its own Adam and the loss ``-log_alpha * sg(logp + target_entropy)``; the targets follow by
    Polyak ``assign`` inside the step.  One action is pushed to saturation (``tanh`` of a huge
    ``u``) so the ``+ 1e-6`` keeps the log-probability finite."""
    s, a, r, s2, done = _point_mass(2001)
    rs = np.random.RandomState(2002)
    actor = _mlp_vars(tf, (2, 6, 2), 2003)
    q1, q2 = _mlp_vars(tf, (3, 6, 1), 2005), _mlp_vars(tf, (3, 6, 1), 2007)
    t1, t2 = [tf.Variable(v) for v in q1], [tf.Variable(v) for v in q2]
    log_alpha = tf.Variable(0.0)
    opt_q = tf.keras.optimizers.legacy.Adam(0.01)
    opt_pi = tf.keras.optimizers.legacy.Adam(0.01)
    opt_alpha = tf.keras.optimizers.legacy.Adam(0.05)
    target_entropy = -1.0

    @tf.function
    def step(s, a, r, s2, done, eps_next, eps_pi):
        alpha = tf.exp(log_alpha)
        a2, logp2 = _squashed_gaussian(tf, actor, s2, eps_next)
        sa2 = tf.concat([s2, a2], 1)
        q_next = tf.minimum(_mlp(tf, t1, sa2), _mlp(tf, t2, sa2))[:, 0] - alpha * logp2
        y = tf.stop_gradient(r + 0.99 * (1.0 - done) * q_next)
        with tf.GradientTape() as tq:
            sa = tf.concat([s, a], 1)
            lq = tf.reduce_mean(tf.square(_mlp(tf, q1, sa)[:, 0] - y)) + \
                tf.reduce_mean(tf.square(_mlp(tf, q2, sa)[:, 0] - y))
        gq = tq.gradient(lq, q1 + q2)
        opt_q.apply_gradients(zip(gq, q1 + q2))
        with tf.GradientTape() as tp:
            ap, logp = _squashed_gaussian(tf, actor, s, eps_pi)
            sap = tf.concat([s, ap], 1)
            qp = tf.minimum(_mlp(tf, q1, sap), _mlp(tf, q2, sap))[:, 0]
            lpi = tf.reduce_mean(alpha * logp - qp)
        gp = tp.gradient(lpi, actor + q1)
        opt_pi.apply_gradients(zip(gp[:4], actor))
        with tf.GradientTape() as ta:
            la = -tf.reduce_mean(log_alpha * tf.stop_gradient(logp + target_entropy))
        ga = ta.gradient(la, log_alpha)
        opt_alpha.apply_gradients([(ga, log_alpha)])
        for t, o in zip(t1 + t2, q1 + q2):
            t.assign(0.995 * t + 0.005 * o)
        return lq, lpi, la, gq, gp[:4], [g is None for g in gp[4:]], ga, logp, ap

    out = []
    for _ in range(3):
        eps_next = rs.randn(6, 1).astype(np.float32)
        eps_pi = rs.randn(6, 1).astype(np.float32)
        eps_pi[0] = 40.0
        out.append(step(s, a, r, s2, done, eps_next, eps_pi))
    return out, actor, q1, q2, t1, t2, log_alpha


@parity(modes=True, rtol=2e-4, atol=2e-5)
def test_sac_with_keras_dense_networks_eagerly_and_a_persistent_tape(tf):
    """SAC as keras.io-style code writes it: actor and twin critics are ``tf.keras.Sequential``
    models, one persistent tape records the critic and actor losses, ``alpha = exp(log_alpha)``
    is read as a Python float for logging, and the targets' weights are blended by
    ``set_weights`` of NumPy arrays after each step."""
    s, a, r, s2, done = _point_mass(2011, n=5)
    rs = np.random.RandomState(2012)

    def net(out):
        return tf.keras.Sequential([tf.keras.Input((3 if out == 1 else 2,)),
                                    tf.keras.layers.Dense(5, activation="relu"), tf.keras.layers.Dense(out)])

    actor, c1, c2, tc1, tc2 = net(2), net(1), net(1), net(1), net(1)
    for k, m in enumerate((actor, c1, c2)):
        keras_init(m, 2013 + k)
    tc1.set_weights(c1.get_weights())
    tc2.set_weights(c2.get_weights())
    log_alpha = tf.Variable(np.log(0.2).astype(np.float32))
    opt = tf.keras.optimizers.Adam(0.01)
    opt_a = tf.keras.optimizers.Adam(0.01)
    alpha_opt = tf.keras.optimizers.SGD(0.1)

    def policy(x, eps):
        out = actor(x)
        mu, log_std = out[:, :1], tf.clip_by_value(out[:, 1:], -5.0, 2.0)
        u = mu + tf.exp(log_std) * eps
        act = tf.tanh(u)
        logp = tf.reduce_sum(-0.5 * eps ** 2 - log_std - 0.5 * np.log(2 * np.pi)
                             - tf.math.log(1 - act ** 2 + 1e-6), axis=1)
        return act, logp

    out = []
    for _ in range(3):
        e1, e2 = rs.randn(5, 1).astype(np.float32), rs.randn(5, 1).astype(np.float32)
        alpha = float(tf.exp(log_alpha))
        a2, lp2 = policy(s2, e2)
        x2 = tf.concat([s2, a2], 1)
        y = r + 0.9 * (1 - done) * (tf.squeeze(tf.minimum(tc1(x2), tc2(x2)), 1) - alpha * lp2)
        with tf.GradientTape(persistent=True) as tape:
            x = tf.concat([s, a], 1)
            lc = tf.reduce_mean((tf.squeeze(c1(x), 1) - y) ** 2 + (tf.squeeze(c2(x), 1) - y) ** 2)
            ap, lp = policy(s, e1)
            xp = tf.concat([s, ap], 1)
            la = tf.reduce_mean(alpha * lp - tf.squeeze(tf.minimum(c1(xp), c2(xp)), 1))
            lt = -tf.reduce_mean(log_alpha * (tf.stop_gradient(lp) - 1.0))
        cv = c1.trainable_variables + c2.trainable_variables
        gc, ga, gt = tape.gradient(lc, cv), tape.gradient(la, actor.trainable_variables), tape.gradient(lt, log_alpha)
        del tape
        opt.apply_gradients(zip(gc, cv))
        opt_a.apply_gradients(zip(ga, actor.trainable_variables))
        alpha_opt.apply_gradients([(gt, log_alpha)])
        for t, o in ((tc1, c1), (tc2, c2)):
            t.set_weights([0.9 * tw + 0.1 * ow for tw, ow in zip(t.get_weights(), o.get_weights())])
        out.append((lc, la, lt, alpha, gc, ga, gt))
    return out, actor.get_weights(), tc1.get_weights(), tc2.get_weights(), log_alpha


def _td3_setup(tf, seed):
    actor = _mlp_vars(tf, (2, 5, 1), seed)
    q1, q2 = _mlp_vars(tf, (3, 5, 1), seed + 2), _mlp_vars(tf, (3, 5, 1), seed + 4)
    targets = [[tf.Variable(v) for v in net] for net in (actor, q1, q2)]
    return actor, q1, q2, targets


def _td3_critic_step(tf, actor, q1, q2, targets, opt_q, s, a, r, s2, done, noise):
    ta, t1, t2 = targets
    a2 = tf.clip_by_value(tf.tanh(_mlp(tf, ta, s2)) + tf.clip_by_value(noise, -0.5, 0.5), -1.0, 1.0)
    x2 = tf.concat([s2, a2], 1)
    y = r + 0.99 * (1 - done) * tf.minimum(_mlp(tf, t1, x2), _mlp(tf, t2, x2))[:, 0]
    with tf.GradientTape() as tape:
        x = tf.concat([s, a], 1)
        lq = tf.reduce_mean((_mlp(tf, q1, x)[:, 0] - y) ** 2) + tf.reduce_mean((_mlp(tf, q2, x)[:, 0] - y) ** 2)
    g = tape.gradient(lq, q1 + q2)
    opt_q.apply_gradients(zip(g, q1 + q2))
    return lq, g


def _td3_actor_step(tf, actor, q1, q2, targets, opt_pi, s, tau=0.05):
    with tf.GradientTape() as tape:
        lpi = -tf.reduce_mean(_mlp(tf, q1, tf.concat([s, tf.tanh(_mlp(tf, actor, s))], 1)))
    g = tape.gradient(lpi, actor + q2)
    opt_pi.apply_gradients(zip(g[:4], actor))
    for tnet, net in zip(targets, (actor, q1, q2)):
        for t, o in zip(tnet, net):
            t.assign((1 - tau) * t + tau * o)
    return lpi, g


@parity(modes=True, **LOOSE)
def test_td3_target_smoothing_and_a_delayed_actor_by_a_python_counter(tf):
    """TD3: the target action is the target actor's plus NumPy noise clipped to [-0.5, 0.5], the
    sum clipped to the action box (noise drawn large so both clips bite); the critic step is
    compiled, the actor step (with the Polyak update of all three targets) runs eagerly on every
    second step by a Python counter.  The actor's tape also lists the second critic, whose
    gradients are None (its loss reads only ``q1``)."""
    s, a, r, s2, done = _point_mass(2021)
    rs = np.random.RandomState(2022)
    actor, q1, q2, targets = _td3_setup(tf, 2023)
    opt_q, opt_pi = tf.keras.optimizers.legacy.Adam(0.01), tf.keras.optimizers.legacy.Adam(0.01)
    critic_step = tf.function(lambda *xs: _td3_critic_step(tf, actor, q1, q2, targets, opt_q, *xs))
    out = []
    for it in range(4):
        noise = (rs.randn(6, 1) * 0.8).astype(np.float32)
        out.append(critic_step(s, a, r, s2, done, noise))
        if it % 2 == 1:
            lpi, g = _td3_actor_step(tf, actor, q1, q2, targets, opt_pi, s)
            out.append((lpi, g[:4], [x is None for x in g[4:]]))
    return out, actor, q1, q2, targets


@parity(modes=True, x64=True, **LOOSE)
def test_td3_delayed_actor_by_tf_cond_on_a_step_variable_in_one_compiled_step(tf):
    """TD3 with the delay inside the graph: one ``tf.function`` runs the critic update, increments
    a step Variable, and runs the actor and target updates under ``tf.cond(step % 2 == 0, ...)``
    whose false branch returns a zero loss; the actor's loss is logged per step."""
    s, a, r, s2, done = _point_mass(2031)
    rs = np.random.RandomState(2032)
    actor, q1, q2, targets = _td3_setup(tf, 2033)
    opt_q, opt_pi = tf.keras.optimizers.legacy.Adam(0.01), tf.keras.optimizers.legacy.Adam(0.01)
    it = tf.Variable(0, dtype=tf.int64)

    def actor_update():
        return _td3_actor_step(tf, actor, q1, q2, targets, opt_pi, s, tau=0.1)[0]

    @tf.function
    def train(s, a, r, s2, done, noise):
        lq, _ = _td3_critic_step(tf, actor, q1, q2, targets, opt_q, s, a, r, s2, done, noise)
        it.assign_add(1)
        lpi = tf.cond(it % 2 == 0, actor_update, lambda: tf.constant(0.0))
        return lq, lpi

    out = []
    for _ in range(4):
        out.append(train(s, a, r, s2, done, (rs.randn(6, 1) * 0.3).astype(np.float32)))
    return out, it, actor, targets


@parity(modes=True, **LOOSE)
def test_ddpg_actor_trained_by_the_critics_action_gradient_as_output_gradients(tf):
    """DDPG the way the 2016-era code writes it: the critic's gradient wrt the actions
    (``tape.gradient(q, a)`` with ``a`` watched) is computed separately, then fed to the actor as
    ``actor_tape.gradient(mu, actor_vars, output_gradients=-dq_da / batch)``; this is checked
    against the direct ``-mean Q(s, mu(s))`` gradient.  Ornstein-Uhlenbeck exploration noise is
    simulated in NumPy and the chosen (clipped) actions are returned."""
    s, a, r, s2, done = _point_mass(2041)
    actor = _mlp_vars(tf, (2, 5, 1), 2042)
    critic = _mlp_vars(tf, (3, 5, 1), 2044)
    opt_pi = tf.keras.optimizers.legacy.SGD(0.05)
    ou, rs = np.zeros((6, 1), np.float32), np.random.RandomState(2046)
    out = []
    for _ in range(3):
        act = tf.tanh(_mlp(tf, actor, s))
        with tf.GradientTape() as tq:
            tq.watch(act)
            q = _mlp(tf, critic, tf.concat([s, act], 1))
        dq_da = tq.gradient(q, act)
        with tf.GradientTape() as ta:
            mu = tf.tanh(_mlp(tf, actor, s))
        g_chain = ta.gradient(mu, actor, output_gradients=-dq_da / 6.0)
        with tf.GradientTape() as td:
            direct = -tf.reduce_mean(_mlp(tf, critic, tf.concat([s, tf.tanh(_mlp(tf, actor, s))], 1)))
        g_direct = td.gradient(direct, actor)
        opt_pi.apply_gradients(zip(g_chain, actor))
        ou = ou + 0.15 * (0.0 - ou) + 0.2 * rs.randn(6, 1).astype(np.float32)
        chosen = tf.clip_by_value(tf.tanh(_mlp(tf, actor, s)) + ou, -1.0, 1.0)
        out.append((dq_da, g_chain, g_direct, direct, chosen))
    return out, actor


# ---------------------------------------------------------------------------
# Value-based variants
# ---------------------------------------------------------------------------

def _dueling(tf, ws, x):
    h = tf.nn.relu(tf.matmul(x, ws[0]) + ws[1])
    v = tf.matmul(h, ws[2]) + ws[3]
    adv = tf.matmul(h, ws[4]) + ws[5]
    return v + adv - tf.reduce_mean(adv, axis=1, keepdims=True)


@parity(modes=True, **LOOSE)
def test_double_dqn_with_a_dueling_head_on_a_chain_mdp(tf):
    """Double DQN with a dueling head (``v + a - mean(a)``): the online network picks
    ``argmax Q(s')``, the target evaluates it by ``tf.gather(..., batch_dims=1)``; Huber loss by
    ``tf.keras.losses.Huber``; the greedy actions of every state are returned after each compiled
    step, and the target is hard-synced every second step."""
    s, a, r, s2, done = _chain(2051)

    def net(seed):
        return [tf.Variable(init_array((5, 6), seed)), tf.Variable(np.zeros(6, np.float32)),
                tf.Variable(init_array((6, 1), seed + 1)), tf.Variable(np.zeros(1, np.float32)),
                tf.Variable(init_array((6, 3), seed + 2)), tf.Variable(np.zeros(3, np.float32))]

    online, target = net(2052), net(2055)
    opt = tf.keras.optimizers.legacy.Adam(0.02)
    huber = tf.keras.losses.Huber()

    @tf.function
    def step(s, a, r, s2, done):
        a_star = tf.argmax(_dueling(tf, online, s2), axis=1, output_type=tf.int32)
        q_next = tf.gather(_dueling(tf, target, s2), a_star[:, None], batch_dims=1)[:, 0]
        y = r + 0.9 * (1 - done) * q_next
        with tf.GradientTape() as tape:
            q = tf.gather(_dueling(tf, online, s), a[:, None], batch_dims=1)[:, 0]
            loss = huber(y, q)
        g = tape.gradient(loss, online + target)
        opt.apply_gradients(zip(g[:6], online))
        return loss, g[:6], [x is None for x in g[6:]], a_star

    out = []
    for k in range(4):
        out.append(step(s, a, r, s2, done))
        if k % 2:
            for t, o in zip(target, online):
                t.assign(o)
        out.append(tf.argmax(_dueling(tf, online, np.eye(5, dtype=np.float32)), axis=1, output_type=tf.int32))
    return out, online, target


def _c51_support(n=5, vmin=-2.0, vmax=2.0):
    return np.linspace(vmin, vmax, n).astype(np.float32), (vmax - vmin) / (n - 1)


def _c51_project_scatter(tf, p_next, r, done, gamma, z, dz, vmin, vmax):
    """C51's projection by ``tensor_scatter_nd_add``: where ``b`` is an integer, ``l == u`` and the
    whole mass goes to ``l`` (the classic ``(u - b) + (l == u)`` fix)."""
    n, k = p_next.shape
    tz = tf.clip_by_value(r[:, None] + gamma * (1 - done[:, None]) * z[None, :], vmin, vmax)
    b = (tz - vmin) / dz
    lo, up = tf.math.floor(b), tf.math.ceil(b)
    wl = p_next * (up - b + tf.cast(tf.equal(lo, up), tf.float32))
    wu = p_next * (b - lo)
    rows = tf.tile(tf.range(n)[:, None], [1, k])
    il = tf.stack([rows, tf.cast(lo, tf.int32)], -1)
    iu = tf.stack([rows, tf.cast(up, tf.int32)], -1)
    m = tf.zeros([n, k])
    m = tf.tensor_scatter_nd_add(m, tf.reshape(il, [-1, 2]), tf.reshape(wl, [-1]))
    return tf.tensor_scatter_nd_add(m, tf.reshape(iu, [-1, 2]), tf.reshape(wu, [-1]))


@parity(modes=True, x64=True, **LOOSE)
def test_c51_projection_by_tensor_scatter_nd_add_with_atoms_on_the_support(tf):
    """C51: per-action categorical distributions over 5 atoms; the target distribution of the
    greedy next action is projected onto the support by ``clip_by_value``, ``floor`` / ``ceil``
    indices and ``tensor_scatter_nd_add``.  Rewards 0 and 1 with gamma 1 put the shifted atoms
    exactly on the support (``l == u``), a reward of 3 clips them all to ``vmax``.  The
    cross-entropy trains a compiled step; the projected mass sums to 1 per row."""
    z, dz = _c51_support()
    rs = np.random.RandomState(2061)
    s = rs.randn(4, 3).astype(np.float32)
    s2 = rs.randn(4, 3).astype(np.float32)
    a = np.array([0, 1, 1, 0], np.int32)
    r = np.array([0.0, 1.0, 3.0, 0.3], np.float32)
    done = np.array([0, 0, 0, 1], np.float32)
    ws = _mlp_vars(tf, (3, 6, 10), 2062)
    opt = tf.keras.optimizers.legacy.Adam(0.01)

    @tf.function
    def step(s, a, r, s2, done):
        p2 = tf.nn.softmax(tf.reshape(_mlp(tf, ws, s2), [-1, 2, 5]), axis=-1)
        a2 = tf.argmax(tf.reduce_sum(p2 * z, -1), axis=1)
        m = _c51_project_scatter(tf, tf.gather(p2, a2, batch_dims=1), r, done, 1.0, z, dz, -2.0, 2.0)
        m = tf.stop_gradient(m)
        with tf.GradientTape() as tape:
            logp = tf.nn.log_softmax(tf.reshape(_mlp(tf, ws, s), [-1, 2, 5]), axis=-1)
            loss = -tf.reduce_mean(tf.reduce_sum(m * tf.gather(logp, a, batch_dims=1), -1))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, g, m, tf.reduce_sum(m, -1), a2

    return [step(s, a, r, s2, done) for _ in range(3)], ws


@parity(modes=True, **LOOSE)
def test_c51_projection_by_one_hot_weights_eagerly_with_the_gradient_through_the_target(tf):
    """The same projection as Dopamine writes it without scatter: ``m = sum_j one_hot(l_j) w_l +
    one_hot(u_j) w_u`` by ``tf.one_hot`` and ``reduce_sum``, compared with the scatter version;
    a user who forgets the stop-gradient gets a gradient through the target too, which is the
    returned second gradient (the ``floor`` / ``ceil`` indices give none)."""
    z, dz = _c51_support(7, -3.0, 3.0)
    rs = np.random.RandomState(2071)
    s = rs.randn(5, 2).astype(np.float32)
    r = np.array([1.0, -0.5, 0.25, 10.0, 0.0], np.float32)
    done = np.array([0, 0, 1, 0, 0], np.float32)
    ws = _mlp_vars(tf, (2, 4, 7), 2072)
    with tf.GradientTape(persistent=True) as tape:
        p = tf.nn.softmax(_mlp(tf, ws, s))
        tz = tf.clip_by_value(r[:, None] + 0.5 * (1 - done[:, None]) * z[None, :], -3.0, 3.0)
        b = (tz - (-3.0)) / dz
        lo, up = tf.math.floor(b), tf.math.ceil(b)
        wl = p * (up - b + tf.cast(tf.equal(lo, up), tf.float32))
        wu = p * (b - lo)
        m = tf.reduce_sum(tf.one_hot(tf.cast(lo, tf.int32), 7) * wl[..., None]
                          + tf.one_hot(tf.cast(up, tf.int32), 7) * wu[..., None], axis=1)
        ce = -tf.reduce_sum(m * tf.math.log(p + 1e-8))
    m_scatter = _c51_project_scatter(tf, p, r, done, 0.5, z, dz, -3.0, 3.0)
    return m, m_scatter, ce, tape.gradient(ce, ws), tape.gradient(m, b), tape.gradient(ce, [lo, up])


@parity(modes=True, **LOOSE)
def test_qr_dqn_quantile_huber_loss_in_a_compiled_step(tf):
    """QR-DQN: 4 quantiles per action, the target quantiles of the greedy next action, the pairwise
    TD errors ``u = T theta_j - theta_i`` broadcast to [batch, N, N], the Huber loss ``kappa = 1``
    by ``tf.where(|u| <= kappa, ...)`` weighted by ``|tau_i - 1{u < 0}|``, summed over i and
    averaged over j.  Some errors sit exactly at zero (a terminal transition with equal
    quantiles)."""
    rs = np.random.RandomState(2081)
    s, s2 = rs.randn(5, 3).astype(np.float32), rs.randn(5, 3).astype(np.float32)
    a = rs.randint(0, 2, 5).astype(np.int32)
    r = rs.randn(5).astype(np.float32)
    done = np.array([0, 1, 0, 0, 1], np.float32)
    ws = _mlp_vars(tf, (3, 6, 8), 2082)
    target = [tf.Variable(v) for v in ws]
    tau = ((np.arange(4) + 0.5) / 4).astype(np.float32)
    opt = tf.keras.optimizers.legacy.Adam(0.01)

    @tf.function
    def step(s, a, r, s2, done):
        qn = tf.reshape(_mlp(tf, target, s2), [-1, 2, 4])
        an = tf.argmax(tf.reduce_mean(qn, -1), 1)
        tgt = r[:, None] + 0.9 * (1 - done[:, None]) * tf.gather(qn, an, batch_dims=1)
        with tf.GradientTape() as tape:
            theta = tf.gather(tf.reshape(_mlp(tf, ws, s), [-1, 2, 4]), a, batch_dims=1)
            u = tf.stop_gradient(tgt)[:, None, :] - theta[:, :, None]
            huber = tf.where(tf.abs(u) <= 1.0, 0.5 * tf.square(u), tf.abs(u) - 0.5)
            w = tf.abs(tau[None, :, None] - tf.cast(u < 0, tf.float32))
            loss = tf.reduce_mean(tf.reduce_sum(tf.reduce_mean(w * huber, axis=2), axis=1))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, g, u

    out = [step(s, a, r, s2, done) for _ in range(3)]
    for t, o in zip(target, ws):
        t.assign(o)
    out.append(step(s, a, r, s2, done))
    return out, ws


@parity(modes=True, **LOOSE)
def test_prioritized_replay_with_importance_weights_and_priorities_written_back(tf):
    """Prioritized replay: a priority Variable over a buffer of 8 transitions; the batch is sampled
    by NumPy from ``p^alpha / sum``, importance weights ``(N P)^-beta / max``; the step returns the
    TD errors and writes ``|delta| + eps`` back by ``tensor_scatter_nd_update`` (a repeated index
    in the batch: TF keeps one of the updates) inside a compiled step; beta anneals."""
    s, a, r, s2, done = _chain(2091, n=8)
    ws = _mlp_vars(tf, (5, 6, 3), 2092)
    prio = tf.Variable(np.ones(8, np.float32))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    rs = np.random.RandomState(2093)

    @tf.function
    def step(idx, isw):
        sb, ab, rb, s2b, db = (tf.gather(x, idx) for x in (s, a, r, s2, done))
        y = rb + 0.9 * (1 - db) * tf.reduce_max(_mlp(tf, ws, s2b), 1)
        with tf.GradientTape() as tape:
            q = tf.reduce_sum(_mlp(tf, ws, sb) * tf.one_hot(ab, 3), 1)
            delta = tf.stop_gradient(y) - q
            loss = tf.reduce_mean(isw * tf.square(delta))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        prio.assign(tf.tensor_scatter_nd_update(prio, idx[:, None], tf.abs(delta) + 1e-3))
        return loss, delta, g

    out = []
    for k in range(4):
        p = prio.numpy() ** 0.6
        p = p / p.sum()
        idx = rs.choice(8, 4, p=p).astype(np.int32) if k else np.array([1, 3, 5, 6], np.int32)
        beta = 0.4 + 0.2 * k
        w = (8 * p[idx]) ** -beta
        isw = (w / w.max()).astype(np.float32)
        loss, delta, g = step(idx, isw)
        out.append((idx, isw, loss, delta, g, prio.numpy().copy()))
    return out, ws


@parity(modes=True, **LOOSE)
def test_n_step_returns_and_retrace_truncated_importance_ratios(tf):
    """n-step returns over a NumPy trajectory with a mid-trajectory ``done`` (masked
    accumulation in a Python loop), and Retrace's targets ``Q_ret`` computed backwards with
    ``c = lambda * min(1, pi / mu)`` from the target policy's softmax probabilities and the
    behaviour's logged probabilities; the Q network is trained towards ``sg(Q_ret)`` in a
    compiled step, whose ``tf.range`` loop writes the targets to a ``TensorArray``."""
    rs = np.random.RandomState(2101)
    T = 6
    obs = rs.randn(T + 1, 3).astype(np.float32)
    act = rs.randint(0, 2, T).astype(np.int32)
    rew = rs.randn(T).astype(np.float32)
    done = np.array([0, 0, 1, 0, 0, 0], np.float32)
    mu = rs.uniform(0.2, 0.9, T).astype(np.float32)
    ws = _mlp_vars(tf, (3, 5, 2), 2102)
    opt = tf.keras.optimizers.legacy.Adam(0.02)
    q_all = _mlp(tf, ws, obs)
    v_boot = tf.reduce_max(q_all, 1)
    nstep = []
    for t in range(T):
        g, disc, alive = tf.constant(0.0), 1.0, tf.constant(1.0)
        for k in range(3):
            if t + k >= T:
                break
            g += alive * disc * rew[t + k]
            alive *= 1.0 - done[t + k]
            disc *= 0.9
        last = min(t + 3, T)
        nstep.append(g + alive * disc * v_boot[last])

    @tf.function
    def retrace_step(obs, act, rew, done, mu):
        q = _mlp(tf, ws, obs)
        pi = tf.nn.softmax(q)
        pi_a = tf.gather(pi[:-1], act[:, None], batch_dims=1)[:, 0]
        c = 0.95 * tf.minimum(1.0, pi_a / mu)
        v = tf.reduce_sum(pi * q, 1)
        q_a = tf.gather(q[:-1], act[:, None], batch_dims=1)[:, 0]
        ta = tf.TensorArray(tf.float32, size=T)
        q_ret = v[T]
        for t in tf.range(T - 1, -1, -1):
            q_ret = rew[t] + 0.9 * (1 - done[t]) * q_ret
            ta = ta.write(t, q_ret)
            q_ret = c[t] * (q_ret - q_a[t]) + v[t]
        targets = tf.stop_gradient(ta.stack())
        with tf.GradientTape() as tape:
            qa = tf.gather(_mlp(tf, ws, obs[:-1]), act[:, None], batch_dims=1)[:, 0]
            loss = tf.reduce_mean(tf.square(targets - qa))
        g = tape.gradient(loss, ws)
        opt.apply_gradients(zip(g, ws))
        return loss, targets, c, g

    return tf.stack(nstep), [retrace_step(obs, act, rew, done, mu) for _ in range(3)], ws


@parity(modes=True, **LOOSE)
def test_clipped_double_q_with_identically_initialised_critics_ties_at_minimum(tf):
    """A common bug in a TD3 port: both critics built from the same seed, so ``tf.minimum(q1, q2)``
    ties exactly at the first step; TF routes a tie's gradient to the first argument only, so the
    second critic's gradient from the actor loss is zero and the actor's gradient is that of
    ``q1`` alone.  The critics then train apart on different minibatches and the tie breaks."""
    s, a, r, s2, done = _point_mass(2111)
    actor = _mlp_vars(tf, (2, 5, 1), 2112)
    q1, q2 = _mlp_vars(tf, (3, 5, 1), 2114), _mlp_vars(tf, (3, 5, 1), 2114)
    opt_q = tf.keras.optimizers.legacy.SGD(0.1)
    out = []
    for k in range(3):
        with tf.GradientTape() as tape:
            x = tf.concat([s, tf.tanh(_mlp(tf, actor, s))], 1)
            qmin = tf.minimum(_mlp(tf, q1, x), _mlp(tf, q2, x))
            lpi = -tf.reduce_mean(qmin)
        g = tape.gradient(lpi, actor + q1 + q2)
        out.append((lpi, g))
        half = slice(0, 3) if k % 2 == 0 else slice(3, 6)
        for net in (q1, q2):
            with tf.GradientTape() as tq:
                lq = tf.reduce_mean((_mlp(tf, net, tf.concat([s[half], a[half]], 1))[:, 0] - r[half]) ** 2)
            opt_q.apply_gradients(zip(tq.gradient(lq, net), net))
            half = slice(3, 6) if half.start == 0 else slice(0, 3)
    return out, q1, q2


def _dueling_model(tf):
    class DuelingQ(tf.keras.Model):
        def __init__(self, actions):
            super().__init__()
            self.torso = tf.keras.layers.Dense(6, activation="relu")
            self.value = tf.keras.layers.Dense(1)
            self.adv = tf.keras.layers.Dense(actions)

        def call(self, x):
            h = self.torso(x)
            adv = self.adv(h)
            return self.value(h) + adv - tf.reduce_mean(adv, axis=1, keepdims=True)

    return DuelingQ


@parity(modes=True, rtol=2e-4, atol=2e-5)
def test_subclassed_keras_dueling_q_network_with_a_polyak_target_over_its_variables(tf):
    """A ``tf.keras.Model`` subclass (torso, value and advantage ``Dense`` layers) as the online
    and target Q networks, built by a first call; the target copies ``get_weights`` and follows by
    ``t.assign(tau * o + (1 - tau) * t)`` over ``model.variables`` in the compiled step; the
    epsilon-greedy actions on NumPy uniforms are returned per step."""
    s, a, r, s2, done = _chain(2121)
    DuelingQ = _dueling_model(tf)
    online, target = DuelingQ(3), DuelingQ(3)
    online(s)
    target(s)
    keras_init(online, 2122)
    target.set_weights(online.get_weights())
    opt = tf.keras.optimizers.Adam(0.02)
    rs = np.random.RandomState(2123)

    @tf.function
    def step(s, a, r, s2, done):
        y = r + 0.9 * (1 - done) * tf.reduce_max(target(s2), 1)
        with tf.GradientTape() as tape:
            q = tf.reduce_sum(online(s) * tf.one_hot(a, 3), 1)
            loss = tf.reduce_mean(tf.square(y - q))
        g = tape.gradient(loss, online.trainable_variables)
        opt.apply_gradients(zip(g, online.trainable_variables))
        for t, o in zip(target.variables, online.variables):
            t.assign(0.3 * o + 0.7 * t)
        return loss, g

    out = []
    for _ in range(3):
        loss, g = step(s, a, r, s2, done)
        u, rand = rs.uniform(size=8).astype(np.float32), rs.randint(0, 3, 8).astype(np.int32)
        acts = tf.where(u < 0.2, rand, tf.argmax(online(s), 1, output_type=tf.int32))
        out.append((loss, g, acts))
    return out, online.get_weights(), target.get_weights()
