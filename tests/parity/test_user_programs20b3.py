"""Round twenty (b) of realistic user programs, third part, run under real TensorFlow 2.21 and
under tapejax with deferred execution and predicted updates on and off (``modes=True``): steps
over episodes of varying length compiled once by an ``input_signature`` with a ``None`` time axis
(by ``tf.scan``, and by a ``TensorArray`` of the symbolic length), invalid-action
masking by ``-inf`` and ``float32.min`` logits with three entropies, Munchausen soft Q-learning,
tabular Q-learning by scatter updates into a Variable, an agent class whose Python counter and
float arguments meet ``tf.function``'s tracing (TF's second trace of a first call that makes
Variables, and its ``ValueError`` for Variables made after the first trace), and a target network
created lazily in the first trace.  See ``test_user_programs20b.py`` and
``test_user_programs20b2.py`` for the off-policy, value-based, policy-gradient and model-based
programs.
"""
import numpy as np

from .harness import parity, raises
from .test_user_programs20b import _chain, _point_mass, _td3_actor_step, _td3_critic_step, _td3_setup
from .test_user_programs20b2 import _mlp, _mlp_vars

LOOSE = dict(rtol=1e-4, atol=1e-5)


def _episodes(tf, with_tensor_array):
    """Returns of episodes of lengths 5, 1 and 3 through one ``tf.function`` whose signature has a
    ``None`` time axis; a Python list counts the traces."""
    rs = np.random.RandomState(3201)
    w = tf.Variable([[0.3], [-0.2]])
    traces = []

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None], tf.float32)])
    def step(obs, rew):
        traces.append(1)
        ret = tf.scan(lambda acc, r: r + 0.9 * acc, rew, initializer=tf.constant(0.0), reverse=True)
        extra = ()
        if with_tensor_array:
            n = tf.shape(rew)[0]
            ta = tf.TensorArray(tf.float32, size=n)
            g = 0.0
            for t in tf.range(n - 1, -1, -1):
                g = rew[t] + 0.9 * g
                ta = ta.write(t, g)
            extra = (ta.stack(),)
        mean, var = tf.nn.moments(ret, [0])
        adv = (ret - mean) / (tf.sqrt(var) + 1e-8)
        with tf.GradientTape() as tape:
            v = tf.squeeze(tf.matmul(obs, w), 1)
            loss = tf.reduce_mean(tf.square(v - adv)) + 0.01 * tf.reduce_sum(tf.cumsum(v, reverse=True))
        gw = tape.gradient(loss, w)
        w.assign_sub(0.1 * gw)
        return (ret, adv, loss, gw, tf.shape(ret)) + extra

    out = [step(rs.randn(n, 2).astype(np.float32), rs.randn(n).astype(np.float32)) for n in (5, 1, 3)]
    return out, len(traces), w


@parity(modes=True, **LOOSE)
def test_variable_length_episodes_in_one_trace_by_an_input_signature(tf):
    """Monte-Carlo returns of episodes of lengths 5, 1 and 3 in one ``tf.function`` with
    ``input_signature=[TensorSpec([None, 2]), TensorSpec([None])]`` by a reversed ``tf.scan``;
    advantages standardised by ``tf.nn.moments`` (the one-step episode's std is 0, so 0 there); a
    linear baseline trained on them with a ``reverse`` ``cumsum`` penalty, updated by
    ``assign_sub`` in the step.  The shapes and the number of traces (one) are returned too."""
    return _episodes(tf, False)


@parity(modes=True, **LOOSE)
def test_variable_length_episodes_with_a_tensor_array_of_the_episode_length(tf):
    """The same step with the returns also computed by a ``tf.range(n - 1, -1, -1)`` loop writing a
    ``TensorArray(size=tf.shape(rew)[0])``: TF traces once for all lengths."""
    return _episodes(tf, True)


@parity(modes=True, **LOOSE)
def test_invalid_action_masking_by_minus_inf_and_by_float32_min_logits(tf):
    """Invalid-action masking as MaskablePPO-style code writes it: logits replaced by
    ``tf.where(mask, logits, -inf)`` or by ``tf.float32.min``; log-probabilities of legal actions,
    and the entropy written three ways: naive ``-sum(p * logp)`` (``0 * -inf``: NaN, and a NaN
    gradient), with ``tf.math.multiply_no_nan`` and by ``tf.math.xlogy(p, p)``.  A policy-gradient
    step with the ``float32.min`` masking trains eagerly and compiled."""
    rs = np.random.RandomState(3141)
    obs = rs.randn(4, 3).astype(np.float32)
    mask = np.array([[1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 0], [1, 1, 0, 0]], bool)
    act = np.array([2, 1, 2, 0], np.int32)
    adv = rs.randn(4).astype(np.float32)
    net = _mlp_vars(tf, (3, 5, 4), 3142)
    with tf.GradientTape(persistent=True) as tape:
        logits = _mlp(tf, net, obs)
        out = []
        for fill in (-np.inf, tf.float32.min):
            masked = tf.where(mask, logits, fill)
            logp, p = tf.nn.log_softmax(masked), tf.nn.softmax(masked)
            ents = (-tf.reduce_sum(p * logp, 1), -tf.reduce_sum(tf.math.multiply_no_nan(logp, p), 1),
                    -tf.reduce_sum(tf.math.xlogy(p, p), 1))
            out.append((logp, p, ents))
    grads = [[tape.gradient(e, net[2]) for e in ents] for _, _, ents in out]
    opt = tf.keras.optimizers.legacy.Adam(0.05)

    def pg_step(obs, act, adv):
        with tf.GradientTape() as t:
            masked = tf.where(mask, _mlp(tf, net, obs), tf.float32.min)
            logp = tf.gather(tf.nn.log_softmax(masked), act[:, None], batch_dims=1)[:, 0]
            ent = -tf.reduce_sum(tf.math.xlogy(tf.nn.softmax(masked), tf.nn.softmax(masked)), 1)
            loss = -tf.reduce_mean(logp * adv) - 0.01 * tf.reduce_mean(ent)
        g = t.gradient(loss, net)
        opt.apply_gradients(zip(g, net))
        return loss, g

    steps = [pg_step(obs, act, adv), tf.function(pg_step)(obs, act, adv)]
    return out, grads, steps, net


@parity(modes=True, **LOOSE)
def test_soft_q_learning_with_logsumexp_values_and_munchausen_clipped_log_policy(tf):
    """Munchausen DQN: soft values ``tau * logsumexp(q / tau)`` of the target network, the
    target's log-policy ``q/tau - logsumexp(q/tau)`` at the taken action scaled by ``alpha`` and
    clipped to ``[l0, 0]`` (some entries hit ``l0``), the soft Bellman target with
    ``sum pi (q - tau log pi)``; Huber loss by ``tf.keras.losses.huber``;
    compiled step, target synced by ``assign`` after two steps."""
    rs = np.random.RandomState(3151)
    s, s2 = rs.randn(6, 3).astype(np.float32), rs.randn(6, 3).astype(np.float32)
    a = rs.randint(0, 3, 6).astype(np.int32)
    r = rs.randn(6).astype(np.float32)
    done = np.array([0, 0, 1, 0, 0, 0], np.float32)
    online = _mlp_vars(tf, (3, 6, 3), 3152)
    target = [tf.Variable(v * 4.0) for v in online]
    opt = tf.keras.optimizers.legacy.Adam(0.01)
    tau, alpha, l0 = 0.03, 0.9, -1.0

    @tf.function
    def step(s, a, r, s2, done):
        qt, qt2 = _mlp(tf, target, s), _mlp(tf, target, s2)
        logpi = qt / tau - tf.reduce_logsumexp(qt / tau, 1, keepdims=True)
        bonus = alpha * tf.clip_by_value(tau * tf.gather(logpi, a[:, None], batch_dims=1)[:, 0], l0, 0.0)
        logpi2 = qt2 / tau - tf.reduce_logsumexp(qt2 / tau, 1, keepdims=True)
        soft_v = tf.reduce_sum(tf.exp(logpi2) * (qt2 - tau * logpi2), 1)
        y = r + bonus + 0.9 * (1 - done) * soft_v
        with tf.GradientTape() as tape:
            q = tf.gather(_mlp(tf, online, s), a[:, None], batch_dims=1)[:, 0]
            loss = tf.reduce_mean(tf.keras.losses.huber(y[:, None], q[:, None]))
        g = tape.gradient(loss, online)
        opt.apply_gradients(zip(g, online))
        return loss, bonus, soft_v, g

    out = []
    for k in range(4):
        out.append(step(s, a, r, s2, done))
        if k == 1:
            for t, o in zip(target, online):
                t.assign(o)
    return out, online, target


@parity(modes=True, **LOOSE)
def test_tabular_q_learning_by_scatter_updates_into_a_q_table_variable(tf):
    """Tabular Q-learning on the chain MDP with the Q table a Variable: epsilon-greedy actions by
    ``tf.where`` on NumPy uniforms, the TD update written by ``scatter_nd_add`` (eagerly) and by
    ``tensor_scatter_nd_update`` + ``assign`` (compiled) for a batch with a repeated
    (state, action) pair; both tables are compared after 3 sweeps, and the greedy policy read off
    by ``argmax``."""
    rs = np.random.RandomState(3131)
    q1 = tf.Variable(np.zeros((5, 3), np.float32))
    q2 = tf.Variable(np.zeros((5, 3), np.float32))

    def td(q, st, a, r, st2):
        target = r + 0.9 * tf.reduce_max(tf.gather(q, st2), 1) * tf.cast(st2 != 4, tf.float32)
        idx = tf.stack([st, a], 1)
        return idx, 0.5 * (target - tf.gather_nd(q, idx))

    @tf.function
    def compiled(st, a, r, st2):
        idx, d = td(q2, st, a, r, st2)
        q2.assign(tf.tensor_scatter_nd_update(q2, idx, tf.gather_nd(q2, idx) + d))
        return d

    out = []
    for _ in range(3):
        st = rs.randint(0, 4, 6).astype(np.int32)
        st[1] = st[0]
        u = rs.uniform(size=6).astype(np.float32)
        greedy = tf.argmax(tf.gather(q1, st), 1, output_type=tf.int32)
        a = tf.where(u < 0.3, rs.randint(0, 3, 6).astype(np.int32), greedy)
        a = tf.tensor_scatter_nd_update(a, [[1]], a[:1])
        st2 = tf.clip_by_value(st + a - 1, 0, 4)
        r = tf.cast(st2 == 4, tf.float32)
        idx, d = td(q1, st, a, r, st2)
        q1.scatter_nd_add(idx, d)
        out.append((a, d, compiled(st, a, r, st2)))
    return out, q1, tf.argmax(q1, 1, output_type=tf.int32)


@parity(modes=True, **LOOSE)
def test_agent_class_whose_python_counter_and_float_noise_scale_meet_tf_function_tracing(tf):
    """A TD3 agent class as ported from PyTorch: ``self.total_it += 1`` and ``if self.total_it %
    2 == 0`` inside a ``tf.function`` method run only while tracing (the actor update is frozen
    into or out of the trace by the counter's value then), and the exploration scale is passed as
    a Python float, so each new value retraces and bumps the counter again.  The first call makes
    the critic's Adam slots, so TF traces it a second time (to check no more Variables appear):
    the counter is 2 there, the actor's update is traced in and its Adam makes slots in that
    second trace, which TF refuses (``ValueError``).  Once the slots exist (an eager zero update),
    the retraces at new scales run.  The counter, the losses and the weights are compared, which
    pins when each side traces."""
    s, a, r, s2, done = _point_mass(2131)
    rs = np.random.RandomState(2132)

    class Agent:
        def __init__(self):
            self.actor, self.q1, self.q2, self.targets = _td3_setup(tf, 2133)
            self.opt_q = tf.keras.optimizers.legacy.Adam(0.01)
            self.opt_pi = tf.keras.optimizers.legacy.Adam(0.01)
            self.total_it = 0

        @tf.function
        def train(self, s, a, r, s2, done, noise, scale):
            self.total_it += 1
            lq, _ = _td3_critic_step(tf, self.actor, self.q1, self.q2, self.targets, self.opt_q,
                                     s, a, r, s2, done, noise * scale)
            lpi = tf.constant(0.0)
            if self.total_it % 2 == 0:
                lpi, _ = _td3_actor_step(tf, self.actor, self.q1, self.q2, self.targets, self.opt_pi, s)
            return lq, lpi

    agent = Agent()
    out = []

    def run(scales):
        for scale in scales:
            out.append((agent.train(s, a, r, s2, done, rs.randn(6, 1).astype(np.float32), scale), agent.total_it))

    # the first call's second trace (counter 2) builds the actor's update, whose Adam makes its
    # slots there: TF refuses Variables created after the first trace (ValueError)
    crashed = raises(run, (0.2, 0.2, 0.1, 0.2))
    agent.opt_pi.apply_gradients(zip([tf.zeros_like(v) for v in agent.actor], agent.actor))   # slots made eagerly
    agent.total_it = 1
    after = raises(run, (0.3, 0.3, 0.4, 0.4))
    return out, crashed, after, agent.total_it, agent.actor, agent.targets


@parity(modes=True, **LOOSE)
def test_target_network_created_lazily_on_the_first_call_of_a_compiled_step(tf):
    """DQN whose target Variables are created on the first call of the ``tf.function`` step
    (``if self.target is None``: allowed because the variables are made only in the first trace)
    from the online weights' initial values; later calls reuse them, a sync copies by
    ``assign``.  The Q table of every chain state is read after each step."""
    s, a, r, s2, done = _chain(2141)

    class Learner:
        def __init__(self):
            self.online = _mlp_vars(tf, (5, 6, 3), 2142)
            self.target = None
            self.opt = tf.keras.optimizers.legacy.SGD(0.2, momentum=0.5)

        @tf.function
        def step(self, s, a, r, s2, done, sync):
            if self.target is None:
                self.target = [tf.Variable(v.read_value(), trainable=False) for v in self.online]
            y = r + 0.9 * (1 - done) * tf.reduce_max(_mlp(tf, self.target, s2), 1)
            with tf.GradientTape() as tape:
                q = tf.reduce_sum(_mlp(tf, self.online, s) * tf.one_hot(a, 3), 1)
                loss = tf.reduce_mean(tf.square(y - q))
            g = tape.gradient(loss, self.online + self.target)
            self.opt.apply_gradients(zip(g[:4], self.online))
            if sync:
                for t, o in zip(self.target, self.online):
                    t.assign(o)
            return loss, g[:4], [x is None for x in g[4:]]

    learner = Learner()
    out = []
    for k in range(4):
        out.append((learner.step(s, a, r, s2, done, tf.constant(k == 1)),
                    _mlp(tf, learner.online, np.eye(5, dtype=np.float32))))
    return out, learner.online, learner.target
