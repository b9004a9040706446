"""Round twenty (b) of realistic user programs, second half: policy-gradient machinery and
model-based reinforcement learning, run under real TensorFlow 2.21 and under tapejax with deferred
execution and predicted updates on and off (``modes=True``).

Policy gradients: GAE by a reversed ``tf.scan`` and by a Python loop over time with ``done``
masks (eagerly and compiled), V-trace with clipped ``rho`` / ``c``, PPO with a clipped value
function and an entropy bonus at saturated logits and KL early stopping read as a Python float
between epochs, a recurrent policy (an ``LSTMCell`` state carried across steps and reset by a
mask), categorical sampling by the Gumbel-max trick on NumPy noise driving a CartPole simulated
in NumPy, advantage normalisation by ``tf.nn.moments`` (the one-sample batch whose std is 0), and
per-network gradient clipping.  Model-based: a world model trained by multi-step rollouts (BPTT
through the learned dynamics), Dreamer-style imagined lambda-returns, a CEM planner in a
``tf.function`` (``tf.math.top_k`` of returns, elite means and stds), and reward normalisation by
running statistics in Variables.  The off-policy and value-based programs are in
``test_user_programs20b.py``, masking, soft Q, tabular and tracing programs in ``test_user_programs20b3.py``.
"""
import numpy as np

from .harness import init_array, parity
from .test_user_programs20b import LOOSE, _mlp_vars


def _mlp(tf, ws, x):   # (tanh: the first half's is relu)
    return tf.matmul(tf.tanh(tf.matmul(x, ws[0]) + ws[1]), ws[2]) + ws[3]


def _rollout(seed, T=7, d=3, actions=3):
    rs = np.random.RandomState(seed)
    obs = rs.randn(T + 1, d).astype(np.float32)
    act = rs.randint(0, actions, T).astype(np.int32)
    rew = rs.randn(T).astype(np.float32)
    done = np.zeros(T, np.float32)
    done[T // 2] = 1.0
    return obs, act, rew, done


# ---------------------------------------------------------------------------
# Advantage estimation
# ---------------------------------------------------------------------------

@parity(modes=True, **LOOSE)
def test_gae_by_a_reversed_scan_trains_the_value_function_in_a_compiled_step(tf):
    """GAE(gamma, lambda) by ``tf.scan(..., reverse=True)`` over ``(delta, not_done)`` pairs,
    returns = advantages + values behind ``stop_gradient``; the value net is trained on them and
    the policy on ``-logp * adv`` in one compiled step with two optimizers over disjoint
    Variable sets."""
    obs, act, rew, done = _rollout(3001)
    pi, vf = _mlp_vars(tf, (3, 5, 3), 3002), _mlp_vars(tf, (3, 5, 1), 3004)
    opt_pi, opt_v = tf.keras.optimizers.legacy.Adam(0.01), tf.keras.optimizers.legacy.RMSprop(0.01)

    @tf.function
    def step(obs, act, rew, done):
        v = _mlp(tf, vf, obs)[:, 0]
        delta = rew + 0.99 * v[1:] * (1 - done) - v[:-1]
        adv = tf.scan(lambda acc, x: x[0] + 0.99 * 0.95 * x[1] * acc, (delta, 1 - done),
                      initializer=tf.constant(0.0), reverse=True)
        adv = tf.stop_gradient(adv)
        ret = adv + tf.stop_gradient(v[:-1])
        with tf.GradientTape() as tp, tf.GradientTape() as tv:
            logp = tf.gather(tf.nn.log_softmax(_mlp(tf, pi, obs[:-1])), act[:, None], batch_dims=1)[:, 0]
            lpi = -tf.reduce_mean(logp * adv)
            lv = tf.reduce_mean(tf.square(ret - _mlp(tf, vf, obs[:-1])[:, 0]))
        gp, gv = tp.gradient(lpi, pi + vf), tv.gradient(lv, vf)
        opt_pi.apply_gradients(zip(gp[:4], pi))
        opt_v.apply_gradients(zip(gv, vf))
        return adv, lpi, lv, gp[:4], [g is None for g in gp[4:]], gv

    return [step(obs, act, rew, done) for _ in range(3)], pi, vf


@parity(modes=True, **LOOSE)
def test_gae_by_a_python_loop_over_time_with_done_masks_eager_and_compiled(tf):
    """The CleanRL-style GAE: ``for t in reversed(range(T))`` with ``nextnonterminal`` masks and
    a bootstrap value for the last step, over a batch of 2 environments; run eagerly on Tensors,
    then compiled (the loop unrolls), then on NumPy; all three agree.  The gradient of the summed
    advantages wrt the value net (a user who forgets the stop-gradient) is returned too."""
    rs = np.random.RandomState(3011)
    T, E = 5, 2
    obs = rs.randn(T + 1, E, 3).astype(np.float32)
    rew = rs.randn(T, E).astype(np.float32)
    dones = (rs.rand(T, E) < 0.3).astype(np.float32)
    vf = _mlp_vars(tf, (3, 4, 1), 3012)

    def gae(values, rew, dones):
        adv = [None] * T
        last = 0.0
        for t in reversed(range(T)):
            nonterminal = 1.0 - dones[t]
            delta = rew[t] + 0.9 * values[t + 1] * nonterminal - values[t]
            last = delta + 0.9 * 0.8 * nonterminal * last
            adv[t] = last
        return tf.stack(adv)

    with tf.GradientTape() as tape:
        values = _mlp(tf, vf, tf.reshape(obs, [-1, 3]))
        values = tf.reshape(values, [T + 1, E])
        eager = gae(values, rew, dones)
        total = tf.reduce_sum(eager)
    g = tape.gradient(total, vf)
    compiled = tf.function(gae)(values, rew, dones)
    vnp = values.numpy()
    by_numpy = gae(vnp, rew, dones)
    return eager, compiled, by_numpy, g


@parity(modes=True, **LOOSE)
def test_vtrace_with_clipped_rho_and_c_trains_an_impala_learner(tf):
    """IMPALA's V-trace: ``rho = min(rho_bar, pi/mu)``, ``c = lambda min(c_bar, pi/mu)`` from the
    learner's log-softmax and the actor's logged log-probabilities (some ratios far above the
    clips), ``vs`` by a reversed ``tf.scan``, policy-gradient advantages ``rho (r + gamma v_{s+1} -
    V)``, the baseline's loss and an entropy term; one loss, one optimizer, a compiled step with
    ``clip_by_global_norm``."""
    obs, act, rew, done = _rollout(3021, T=6)
    rs = np.random.RandomState(3022)
    mu_logp = np.log(rs.uniform(0.05, 0.9, 6)).astype(np.float32)
    net = _mlp_vars(tf, (3, 6, 4), 3023)
    opt = tf.keras.optimizers.legacy.RMSprop(0.01, epsilon=0.01)

    @tf.function
    def step(obs, act, rew, done, mu_logp):
        with tf.GradientTape() as tape:
            out = _mlp(tf, net, obs)
            logits, v = out[:-1, :3], out[:, 3]
            logp_all = tf.nn.log_softmax(logits)
            logp = tf.gather(logp_all, act[:, None], batch_dims=1)[:, 0]
            ratio = tf.exp(logp - mu_logp)
            rho, c = tf.minimum(1.0, ratio), 0.95 * tf.minimum(1.0, ratio)
            disc = 0.9 * (1 - done)
            vsg = tf.stop_gradient(v)
            deltas = rho * (rew + disc * vsg[1:] - vsg[:-1])
            corr = tf.scan(lambda acc, x: x[0] + x[1] * x[2] * acc, (deltas, disc, c),
                           initializer=tf.constant(0.0), reverse=True)
            vs = corr + vsg[:-1]
            vs_next = tf.concat([vs[1:], vsg[-1:]], 0)
            pg_adv = tf.stop_gradient(rho * (rew + disc * vs_next - vsg[:-1]))
            entropy = -tf.reduce_sum(tf.nn.softmax(logits) * logp_all, 1)
            loss = -tf.reduce_sum(logp * pg_adv) + 0.5 * tf.reduce_sum(tf.square(vs - v[:-1])) \
                - 0.01 * tf.reduce_sum(entropy)
        g = tape.gradient(loss, net)
        clipped, norm = tf.clip_by_global_norm(g, 1.0)
        opt.apply_gradients(zip(clipped, net))
        return loss, vs, rho, pg_adv, g, norm

    return [step(obs, act, rew, done, mu_logp) for _ in range(3)], net


@parity(modes=True, **LOOSE)
def test_ppo_value_clip_saturated_entropy_and_kl_early_stopping_between_epochs(tf):
    """PPO2 as the baselines port writes it: the clipped surrogate, the value loss
    ``max((v - R)^2, (v_old + clip(v - v_old, -eps, eps) - R)^2)``, an entropy bonus from
    ``softmax`` and ``log_softmax`` where one observation's logits saturate (entropy 0, probability
    exactly 1 in float32), and an approximate KL ``mean(logp_old - logp)`` read by ``float()``
    after each epoch to stop early; epochs run a compiled step on two minibatches."""
    rs = np.random.RandomState(3031)
    n = 8
    obs = rs.randn(n, 3).astype(np.float32)
    obs[0] = [40.0, -40.0, 40.0]
    act = rs.randint(0, 3, n).astype(np.int32)
    adv = rs.randn(n).astype(np.float32)
    ret = rs.randn(n).astype(np.float32)
    net = _mlp_vars(tf, (3, 6, 4), 3032)
    net[0].assign(net[0] * 3.0)
    out0 = _mlp(tf, net, obs)
    logp_old = tf.gather(tf.nn.log_softmax(out0[:, :3]), act[:, None], batch_dims=1)[:, 0].numpy()
    v_old = out0[:, 3].numpy()
    opt = tf.keras.optimizers.legacy.Adam(0.03)

    @tf.function
    def step(o, a, adv, ret, lp_old, v_old):
        with tf.GradientTape() as tape:
            out = _mlp(tf, net, o)
            logits, v = out[:, :3], out[:, 3]
            logp_all = tf.nn.log_softmax(logits)
            logp = tf.gather(logp_all, a[:, None], batch_dims=1)[:, 0]
            ratio = tf.exp(logp - lp_old)
            surr = tf.minimum(ratio * adv, tf.clip_by_value(ratio, 0.8, 1.2) * adv)
            v_clip = v_old + tf.clip_by_value(v - v_old, -0.2, 0.2)
            lv = 0.5 * tf.reduce_mean(tf.maximum(tf.square(v - ret), tf.square(v_clip - ret)))
            ent = -tf.reduce_sum(tf.nn.softmax(logits) * logp_all, 1)
            loss = -tf.reduce_mean(surr) + 0.5 * lv - 0.01 * tf.reduce_mean(ent)
        g = tape.gradient(loss, net)
        opt.apply_gradients(zip(g, net))
        return loss, lv, ent, tf.reduce_mean(lp_old - logp), g

    log, epochs = [], 0
    for epoch in range(6):
        kls = []
        for mb in (np.arange(0, 4), np.arange(4, 8)):
            res = step(obs[mb], act[mb], adv[mb], ret[mb], logp_old[mb], v_old[mb])
            kls.append(float(res[3]))
            log.append(res)
        epochs = epoch + 1
        if np.mean(kls) > 0.02:
            break
    return log, epochs, net


@parity(modes=True, **LOOSE)
def test_recurrent_policy_with_an_lstm_cell_state_reset_by_a_done_mask(tf):
    """A recurrent A2C policy: a ``tf.keras.layers.LSTMCell`` whose ``[h, c]`` state is carried
    across 6 steps of 2 environments and multiplied by ``1 - done`` where an episode ended; the
    logits and values of the whole unroll are recorded by one tape (BPTT through the carried
    state, cut by the mask), and the initial state, watched, gets its gradient."""
    rs = np.random.RandomState(3041)
    T, E = 6, 2
    obs = rs.randn(T, E, 3).astype(np.float32)
    act = rs.randint(0, 2, (T, E)).astype(np.int32)
    adv = rs.randn(T, E).astype(np.float32)
    dones = np.zeros((T, E), np.float32)
    dones[2, 0] = dones[4, 1] = 1.0
    cell = tf.keras.layers.LSTMCell(4)
    cell.build((None, 3))
    cell.set_weights([init_array(tuple(w.shape), 3042 + i) for i, w in enumerate(cell.get_weights())])
    head = tf.Variable(init_array((4, 3), 3050))
    opt = tf.keras.optimizers.legacy.SGD(0.1)
    h0 = tf.constant(init_array((E, 4), 3051))
    c0 = tf.constant(np.zeros((E, 4), np.float32))
    out = []
    for _ in range(2):
        with tf.GradientTape() as tape:
            tape.watch([h0, c0])
            h, c = h0, c0
            loss = 0.0
            for t in range(T):
                y, (h, c) = cell(obs[t], [h, c])
                o = tf.matmul(y, head)
                logp = tf.gather(tf.nn.log_softmax(o[:, :2]), act[t][:, None], batch_dims=1)[:, 0]
                loss += -tf.reduce_sum(logp * adv[t]) + 0.5 * tf.reduce_sum(tf.square(o[:, 2] - adv[t]))
                mask = (1.0 - dones[t])[:, None]
                h, c = h * mask, c * mask
        ws = cell.trainable_variables + [head]
        g = tape.gradient(loss, ws + [h0, c0])
        opt.apply_gradients(zip(g[:len(ws)], ws))
        out.append((loss, g, h, c))
    return out, cell.get_weights(), head


@parity(modes=True, **LOOSE)
def test_gumbel_max_sampling_drives_a_numpy_cartpole_and_reinforce_updates(tf):
    """Categorical sampling by the Gumbel-max trick, ``argmax(logits - log(-log(u)))`` with
    NumPy uniforms, picks CartPole's pushes (the classic equations integrated in NumPy); the
    chosen actions decide the trajectory, so they are compared step by step.  After each
    20-step episode, REINFORCE with discounted returns normalised by ``reduce_mean`` /
    ``reduce_std`` updates the policy in a compiled step."""
    rs = np.random.RandomState(3061)
    pi = _mlp_vars(tf, (4, 8, 2), 3062)
    opt = tf.keras.optimizers.legacy.Adam(0.02)

    def cartpole(s, a):
        x, xd, th, thd = s
        force = 10.0 if a == 1 else -10.0
        ct, st = np.cos(th), np.sin(th)
        temp = (force + 0.05 * thd ** 2 * st) / 1.1
        thacc = (9.8 * st - ct * temp) / (0.5 * (4.0 / 3.0 - 0.1 * ct ** 2 / 1.1))
        xacc = temp - 0.05 * thacc * ct / 1.1
        s2 = np.array([x + 0.02 * xd, xd + 0.02 * xacc, th + 0.02 * thd, thd + 0.02 * thacc], np.float32)
        return s2, abs(s2[2]) > 0.21 or abs(s2[0]) > 2.4

    @tf.function
    def update(obs, act, ret):
        ret = (ret - tf.reduce_mean(ret)) / (tf.math.reduce_std(ret) + 1e-8)
        with tf.GradientTape() as tape:
            logp = tf.gather(tf.nn.log_softmax(_mlp(tf, pi, obs)), act[:, None], batch_dims=1)[:, 0]
            loss = -tf.reduce_sum(logp * ret)
        g = tape.gradient(loss, pi)
        opt.apply_gradients(zip(g, pi))
        return loss, g

    log = []
    for _ in range(2):
        s = rs.uniform(-0.05, 0.05, 4).astype(np.float32)
        obs, acts = [], []
        for _t in range(20):
            u = rs.uniform(1e-6, 1.0, 2).astype(np.float32)
            logits = _mlp(tf, pi, s[None])[0]
            a = int(tf.argmax(logits - tf.math.log(-tf.math.log(u))))
            obs.append(s)
            acts.append(a)
            s, done = cartpole(s, a)
            if done:
                break
        ret = np.cumsum(0.99 ** np.arange(len(acts)))[::-1].astype(np.float32)
        log.append((acts, update(np.stack(obs), np.array(acts, np.int32), ret.copy())))
    return log, pi


@parity(modes=True, **LOOSE)
def test_advantage_normalisation_by_moments_including_a_one_sample_batch(tf):
    """Advantages standardised by ``tf.nn.moments``: ``(a - mean) / (sqrt(var) + 1e-8)`` on a
    batch of 5 and on a batch of one (variance 0, the result 0), and without the epsilon on the
    one-sample batch (0/0: NaN, as TF gives it); the gradients of a weighted sum through the
    normalisation wrt the raw advantages, including ``sqrt``'s at 0 (inf times 0: NaN)."""
    rs = np.random.RandomState(3071)
    outs = []
    for adv in (rs.randn(5).astype(np.float32), np.array([0.7], np.float32)):
        a = tf.constant(adv)
        w = tf.constant(np.linspace(-1, 1, len(adv)).astype(np.float32))
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(a)
            mean, var = tf.nn.moments(a, axes=[0])
            safe = (a - mean) / (tf.sqrt(var) + 1e-8)
            bare = (a - mean) / tf.sqrt(var)
            ls, lb = tf.reduce_sum(w * safe), tf.reduce_sum(w * bare)
        outs.append((mean, var, safe, bare, tape.gradient(ls, a), tape.gradient(lb, a)))
    return outs


@parity(modes=True, **LOOSE)
def test_gradients_clipped_per_network_by_their_own_global_norms(tf):
    """An actor and a critic trained from one tape with ``clip_by_global_norm`` applied to each
    network's gradients separately (the actor's far above its clip, the critic's below its), a
    ``None`` gradient (an unused bias) passing through the clip, and the two norms logged; the
    same updates are done eagerly and in a compiled step from equal copies."""
    rs = np.random.RandomState(3081)
    obs = rs.randn(6, 3).astype(np.float32)
    act = rs.randint(0, 2, 6).astype(np.int32)
    ret = (10 * rs.randn(6)).astype(np.float32)

    def make():
        actor = _mlp_vars(tf, (3, 4, 2), 3082) + [tf.Variable(np.zeros(2, np.float32))]
        critic = _mlp_vars(tf, (3, 4, 1), 3084)
        return actor, critic, tf.keras.optimizers.legacy.Adam(0.01), tf.keras.optimizers.legacy.Adam(0.01)

    def step(actor, critic, oa, oc):
        with tf.GradientTape(persistent=True) as tape:
            v = _mlp(tf, critic, obs)[:, 0]
            adv = tf.stop_gradient(ret - v)
            logp = tf.gather(tf.nn.log_softmax(_mlp(tf, actor[:4], obs)), act[:, None], batch_dims=1)[:, 0]
            la = -tf.reduce_mean(logp * adv) * 50.0
            lc = 1e-3 * tf.reduce_mean(tf.square(ret - v))
        ga, gc = tape.gradient(la, actor), tape.gradient(lc, critic)
        ca, na = tf.clip_by_global_norm(ga, 0.5)
        cc, nc = tf.clip_by_global_norm(gc, 100.0)
        oa.apply_gradients([(g, w) for g, w in zip(ca, actor) if g is not None])
        oc.apply_gradients(zip(cc, critic))
        return la, lc, ca, cc, na, nc

    eager_nets, compiled_nets = make(), make()
    compiled = tf.function(step)
    out = []
    for _ in range(3):
        out.append((step(*eager_nets), compiled(*compiled_nets)))
    return out, eager_nets[:2], compiled_nets[:2]


# ---------------------------------------------------------------------------
# Model-based and miscellaneous
# ---------------------------------------------------------------------------

def _point_mass_traj(seed, n=4, T=5):
    """``n`` NumPy trajectories of the 1-D point mass under random forces: states [n, T+1, 2],
    actions [n, T, 1]."""
    rs = np.random.RandomState(seed)
    s = np.zeros((n, T + 1, 2), np.float32)
    s[:, 0] = rs.uniform(-1, 1, (n, 2))
    a = rs.uniform(-1, 1, (n, T, 1)).astype(np.float32)
    for t in range(T):
        v = s[:, t, 1] + 0.1 * a[:, t, 0]
        s[:, t + 1] = np.stack([s[:, t, 0] + 0.1 * v, v], 1)
    return s, a


@parity(modes=True, **LOOSE)
def test_world_model_trained_by_multi_step_rollouts_through_its_own_predictions(tf):
    """A residual dynamics model ``s' = s + f(s, a)`` trained on 4-step open-loop rollouts that
    feed its own predictions back (BPTT through the model), the per-horizon losses logged; the
    same loss by a Python loop eagerly and by a ``tf.range`` loop over a ``TensorArray`` in a
    compiled step, from equal copies."""
    s, a = _point_mass_traj(3091)
    H = 4

    def loss_py(ws, s, a):
        pred, losses = s[:, 0], []
        for t in range(H):
            pred = pred + _mlp(tf, ws, tf.concat([pred, a[:, t]], 1))
            losses.append(tf.reduce_mean(tf.square(pred - s[:, t + 1])))
        return tf.add_n(losses), tf.stack(losses)

    def loss_graph(ws, s, a):
        pred = tf.convert_to_tensor(s[:, 0])
        ta = tf.TensorArray(tf.float32, size=H)
        for t in tf.range(H):
            pred = pred + _mlp(tf, ws, tf.concat([pred, tf.gather(a, t, axis=1)], 1))
            ta = ta.write(t, tf.reduce_mean(tf.square(pred - tf.gather(s, t + 1, axis=1))))
        per = ta.stack()
        return tf.reduce_sum(per), per

    out = []
    for fn, compile_ in ((loss_py, False), (loss_graph, True)):
        ws = _mlp_vars(tf, (3, 8, 2), 3092)
        opt = tf.keras.optimizers.legacy.Adam(0.01)

        def step(s, a, ws=ws, opt=opt, fn=fn):
            with tf.GradientTape() as tape:
                total, per = fn(ws, s, a)
            g = tape.gradient(total, ws)
            opt.apply_gradients(zip(g, ws))
            return total, per, g

        run = tf.function(step) if compile_ else step
        out.append(([run(s, a) for _ in range(3)], ws))
    return out


@parity(modes=True, **LOOSE)
def test_dreamer_imagined_lambda_returns_train_the_actor_through_the_dynamics(tf):
    """Dreamer-style behaviour learning: from fed start states, imagine 5 steps with the
    reparameterised actor and a frozen learned dynamics and reward model; lambda-returns are
    computed backwards (``R_t = r_t + gamma ((1 - lambda) v_{t+1} + lambda R_{t+1})``) and weighted
    by ``tf.math.cumprod(..., exclusive=True)`` discounts; the actor maximises them (gradient
    through the dynamics, whose Variables get gradients but are not updated), the value regresses
    on ``sg(returns)``.  Compiled."""
    rs = np.random.RandomState(3101)
    start = rs.randn(4, 2).astype(np.float32)
    noise = rs.randn(5, 4, 1).astype(np.float32)
    dyn = _mlp_vars(tf, (3, 6, 3), 3102)          # next-state delta (2) and reward (1)
    actor = _mlp_vars(tf, (2, 5, 2), 3104)
    value = _mlp_vars(tf, (2, 5, 1), 3106)
    opt_a, opt_v = tf.keras.optimizers.legacy.Adam(0.01), tf.keras.optimizers.legacy.Adam(0.01)
    H, gamma, lam = 5, 0.9, 0.95

    @tf.function
    def step(start, noise):
        with tf.GradientTape(persistent=True) as tape:
            s, states, rewards = start, [], []
            for t in range(H):
                out = _mlp(tf, actor, s)
                act = tf.tanh(out[:, :1] + tf.exp(tf.clip_by_value(out[:, 1:], -3.0, 1.0)) * noise[t])
                d = _mlp(tf, dyn, tf.concat([s, act], 1))
                s = s + 0.1 * tf.tanh(d[:, :2])
                states.append(s)
                rewards.append(d[:, 2])
            v = [_mlp(tf, value, x)[:, 0] for x in states]
            ret, last = [None] * H, v[-1]
            for t in reversed(range(H)):
                nxt = v[t + 1] if t + 1 < H else v[-1]
                last = rewards[t] + gamma * ((1 - lam) * nxt + lam * last)
                ret[t] = last
            returns = tf.stack(ret)
            weights = tf.math.cumprod(tf.fill([H, 1], gamma), axis=0, exclusive=True)
            actor_loss = -tf.reduce_mean(weights * returns)
            vpred = tf.stack([_mlp(tf, value, tf.stop_gradient(x))[:, 0] for x in states])
            value_loss = tf.reduce_mean(weights * tf.square(vpred - tf.stop_gradient(returns)))
        ga = tape.gradient(actor_loss, actor + dyn)
        gv = tape.gradient(value_loss, value + actor)
        opt_a.apply_gradients(zip(ga[:4], actor))
        opt_v.apply_gradients(zip(gv[:4], value))
        return actor_loss, value_loss, returns, weights, ga, gv[:4], [g is None for g in gv[4:]]

    return [step(start, noise) for _ in range(3)], actor, value, dyn


@parity(modes=True, **LOOSE)
def test_cem_planner_with_top_k_elites_in_a_compiled_function(tf):
    """A cross-entropy-method planner for the point mass, all in one ``tf.function``: for 3
    iterations, 8 action sequences of length 4 from ``mean + std * noise`` (NumPy noise fed in,
    clipped to the action box), returns by rolling the known dynamics forward, the 3 elites by
    ``tf.math.top_k`` (two candidates tie exactly, as clipped sequences do), the new mean and std
    from the elites kept in Variables; the first planned action and the elite indices are
    returned per call (MPC over 2 environment steps)."""
    rs = np.random.RandomState(3111)
    mean = tf.Variable(np.zeros((4,), np.float32))
    std = tf.Variable(np.ones((4,), np.float32))

    @tf.function
    def plan(s0, noise):
        mean.assign(tf.zeros([4]))
        std.assign(tf.ones([4]))
        elites_log = []
        for i in range(3):
            seqs = tf.clip_by_value(mean + std * noise[i], -1.0, 1.0)
            x, v, ret = tf.fill([8], s0[0]), tf.fill([8], s0[1]), tf.zeros([8])
            for t in range(4):
                v = v + 0.1 * seqs[:, t]
                x = x + 0.1 * v
                ret += -tf.square(x) - 0.1 * tf.square(seqs[:, t])
            top = tf.math.top_k(ret, k=3)
            elites = tf.gather(seqs, top.indices)
            m, var = tf.nn.moments(elites, axes=[0])
            mean.assign(m)
            std.assign(tf.sqrt(var) + 1e-3)
            elites_log.append((top.values, top.indices))
        return mean[0], elites_log

    s = np.array([0.5, -0.2], np.float32)
    out = []
    for _ in range(2):
        noise = rs.randn(3, 8, 4).astype(np.float32)
        noise[:, 5] = noise[:, 2] = 5.0            # both clip to +1 everywhere: equal returns
        a0, elites = plan(s, noise)
        out.append((a0, elites, mean.numpy().copy(), std.numpy().copy()))
        v = s[1] + 0.1 * float(a0)
        s = np.array([s[0] + 0.1 * v, v], np.float32)
    return out


@parity(modes=True, **LOOSE)
def test_reward_normalisation_by_running_statistics_in_variables(tf):
    """Reward scaling as the baselines' ``VecNormalize`` does it, in Variables: a discounted
    return filter ``ret = ret * gamma * (1 - done) + r`` per environment, its running mean / var /
    count merged with each batch's ``tf.nn.moments`` by the parallel-variance formula inside a
    compiled step, rewards divided by ``sqrt(var + eps)`` and clipped; a critic trains on the
    normalised rewards.  The first batch has one environment done."""
    rs = np.random.RandomState(3121)
    E = 3
    ret = tf.Variable(np.zeros(E, np.float32))
    mean, var, count = tf.Variable(0.0), tf.Variable(1.0), tf.Variable(1e-4)
    critic = _mlp_vars(tf, (2, 4, 1), 3122)
    opt = tf.keras.optimizers.legacy.SGD(0.05)

    @tf.function
    def step(obs, rew, done):
        ret.assign(ret * 0.99 * (1.0 - done) + rew)
        bm, bv = tf.nn.moments(ret, axes=[0])
        bc = tf.cast(tf.size(ret), tf.float32)
        delta, tot = bm - mean, count + bc
        m2 = var * count + bv * bc + tf.square(delta) * count * bc / tot
        mean.assign(mean + delta * bc / tot)
        var.assign(m2 / tot)
        count.assign(tot)
        r = tf.clip_by_value(rew / tf.sqrt(var + 1e-8), -10.0, 10.0)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(_mlp(tf, critic, obs)[:, 0] - r))
        g = tape.gradient(loss, critic)
        opt.apply_gradients(zip(g, critic))
        return r, loss, g

    out = []
    for k in range(4):
        obs = rs.randn(E, 2).astype(np.float32)
        rew = (5 * rs.randn(E)).astype(np.float32)
        done = np.array([0, 1, 0], np.float32) if k == 1 else np.zeros(E, np.float32)
        out.append((step(obs, rew, done), ret.numpy().copy(), float(mean), float(var), float(count)))
    return out, critic
