"""The Keras-2 update rules, written in the order of operations of TF's kernels
(``tensorflow/core/kernels/training_ops.cc``) and of tf_keras'
``optimizers/legacy/*.py``, so results agree to float32 rounding.

Where optax has the same rule (plain SGD) it is used; ``from_optax`` takes
any optax transformation.  A sparse gradient (``IndexedSlices``) follows tf_keras'
``_resource_apply_sparse`` of each optimizer (``_apply_sparse``): the duplicate rows summed, then
TF's sparse kernel on those rows (the base class: SGD with momentum, Adagrad, Adadelta, Ftrl,
RMSprop with momentum) or tf_keras' Python rule, which for Adam, AdamW, Nadam and RMSprop without
momentum decays its slots over the whole table (only Adamax and plain SGD touch the rows alone). Keras' Adam differs from ``optax.adam`` (Keras adds epsilon to
``sqrt(v)`` *before* the bias correction, i.e. epsilon-hat), so Adam,
Adamax, Nadam, RMSprop, Adagrad, Adadelta and Ftrl are written out here.
"""
import jax.numpy as jnp
import optax

from ..core import transfer
from ._args import _float_hyper, _hyper_arg, _momentum_on
from ._base import Optimizer
from ._ema import NO_DECAY, NewOptimizerState, check_ema
from ._sparse import add_rows, dedup_rows, put_rows, take_rows


def _c(x, like):
    return jnp.asarray(x, like.dtype)


def _alpha(c, v):
    """Adam's step size ``lr * sqrt(1 - b2^t) / (1 - b1^t)`` for the Variable ``v``: the float32 one
    of ``_prepare``, or computed again in ``v``'s dtype, as TF casts the hyperparameters and the
    step to a float16 (float64) Variable's dtype and rounds each op in it (in float16's subnormal
    range the float32 value moved a step by whole units: 4.0 where TF gives 3.5)."""
    if v.dtype == c["alpha"].dtype:
        return c["alpha"]
    b1, b2, t = _c(c["beta_1"], v), _c(c["beta_2"], v), _c(c["step"], v)
    return _c(c["lr"], v) * jnp.sqrt(1 - jnp.power(b2, t)) / (1 - jnp.power(b1, t))


def _b1p(c, v):
    """Adamax's ``b1^t`` for the Variable ``v``: the float32 one of ``_prepare``, or computed again
    in ``v``'s dtype (TF's ``pow(cast(beta_1), cast(step))`` for a float64 Variable)."""
    if v.dtype == c["b1p"].dtype:
        return c["b1p"]
    return jnp.power(_c(c["beta_1"], v), _c(c["step"], v))


class SGD(Optimizer):
    """Gradient descent with optional (Nesterov) momentum (``tf.keras.optimizers.legacy.SGD``).

    ``velocity = momentum * velocity - lr * g``; ``w += velocity`` (Nesterov:
    ``w += momentum * velocity - lr * g``); without momentum ``w -= lr * g``.
    """

    _HYPERS = ("momentum",)

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD", **kwargs):
        super().__init__(name, learning_rate, **kwargs)
        if isinstance(momentum, (int, float)) and (momentum < 0 or momentum > 1):
            raise ValueError(f"`momentum` must be between [0, 1]. Received: momentum={momentum} "
                             f"(of type {type(momentum)}).")
        momentum = _hyper_arg("momentum", momentum)
        self._momentum = _momentum_on(momentum)   # fixed here, as in tf_keras: a slot or none
        self.momentum = momentum
        self.nesterov = bool(nesterov)
        self._SLOTS = ("momentum",) if self._momentum else ()

    def _update_hypers(self):
        return self._HYPERS if self._momentum else ()

    def _hyper_config(self):
        return {"momentum": self.momentum, "nesterov": self.nesterov}

    def _apply(self, c, g, v, s):
        lr = _c(c["lr"], v)
        if not self._momentum:
            tx = optax.sgd(lr)
            upd, _ = tx.update(g, tx.init(g))   # -lr * g
            return v + upd, ()
        (accum,) = s
        mom = _c(c["momentum"], v)
        accum = accum * mom - lr * g
        if self.nesterov:
            return v + (accum * mom - lr * g), (accum,)
        return v + accum, (accum,)

    def _apply_sparse(self, c, g, ind, v, s):
        if self._momentum:   # tf_keras: duplicates summed, then ResourceSparseApplyKerasMomentum
            return super()._apply_sparse(c, g, ind, v, s)
        return add_rows(v, ind, -g * _c(c["lr"], v)), ()   # ResourceScatterAdd(-grad * lr): duplicates add


class Adam(Optimizer):
    """Adam (``tf.keras.optimizers.legacy.Adam``), epsilon-hat placement as Keras:
    ``w -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon)``; ``amsgrad`` keeps ``vhat = max(vhat, v)``."""

    _HYPERS = ("beta_1", "beta_2")
    _STRUCTURAL = ("amsgrad",)

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False,
                 name="Adam", **kwargs):
        super().__init__(name, learning_rate, **kwargs)
        arg = _hyper_arg if self._HYPERS else _float_hyper   # (AdamW: Keras 2's plain floats)
        self.beta_1 = arg("beta_1", beta_1)
        self.beta_2 = arg("beta_2", beta_2)
        self.epsilon = _float_hyper("epsilon", 1e-7 if epsilon is None else epsilon)
        self.amsgrad = bool(amsgrad)   # (sets _SLOTS: _set_slots)

    def _set_slots(self):
        self._SLOTS = ("m", "v", "vhat") if self.amsgrad else ("m", "v")

    def _hyper_config(self):
        return {"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon, "amsgrad": self.amsgrad}

    def _prepare(self, c, step, extra):
        b1p = jnp.power(c["beta_1"], step)
        b2p = jnp.power(c["beta_2"], step)
        c["alpha"] = c["lr"] * (jnp.sqrt(1 - b2p) / (1 - b1p))
        c["step"] = step
        return c, extra

    def _apply(self, c, g, v, s):
        b1, b2, eps = _c(c["beta_1"], v), _c(c["beta_2"], v), _c(self.epsilon, v)
        alpha = _alpha(c, v)
        m, vv = s[0], s[1]
        m = m + (g - m) * (1 - b1)
        vv = vv + (jnp.square(g) - vv) * (1 - b2)
        if self.amsgrad:
            vhat = jnp.maximum(s[2], vv)
            return v - (m * alpha) / (jnp.sqrt(vhat) + eps), (m, vv, vhat)
        return v - (m * alpha) / (jnp.sqrt(vv) + eps), (m, vv)

    def _apply_sparse(self, c, g, ind, v, s):
        """tf_keras' sparse Adam: ``m = b1 m`` and ``v = b2 v`` over the whole table, the rows'
        ``(1 - b1) g`` and ``(1 - b2) g^2`` added, then the Adam step on every row."""
        g, u = dedup_rows(g, ind, v.shape[0])
        b1, b2, eps = _c(c["beta_1"], v), _c(c["beta_2"], v), _c(self.epsilon, v)
        alpha = _c(c["alpha"], v)
        m = add_rows(s[0] * b1, u, g * (1 - b1))
        vv = add_rows(s[1] * b2, u, (g * g) * (1 - b2))
        if self.amsgrad:
            vhat = jnp.maximum(s[2], vv)
            return v - alpha * m / (jnp.sqrt(vhat) + eps), (m, vv, vhat)
        return v - alpha * m / (jnp.sqrt(vv) + eps), (m, vv)


class AdamW(NewOptimizerState, Adam):
    """AdamW (``tf.keras.optimizers.AdamW``, Keras 2): decoupled weight decay
    ``w -= w * weight_decay * lr`` first (``exclude_from_weight_decay`` leaves Variables out), then
    the Adam step (Keras 2's order); ``use_ema`` keeps a moving average of the weights (``_ema``).
    Keras 2's new optimizers keep ``beta_1``, ``beta_2`` and ``weight_decay`` as plain floats, so
    they are plain floats here (a change recompiles the update at the next step)."""

    _TF_SLOT_LISTS = {"_momentums": "m", "_velocities": "v", "_velocity_hats": "vhat"}
    _HYPERS = ()

    def __init__(self, learning_rate=0.001, weight_decay=0.004, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, clipnorm=None, clipvalue=None, global_clipnorm=None, use_ema=False,
                 ema_momentum=0.99, ema_overwrite_frequency=None, jit_compile=True, name="AdamW", **kwargs):
        check_ema(use_ema, ema_momentum, ema_overwrite_frequency)
        if weight_decay is None:
            raise ValueError("Argument `weight_decay` must be a float. Received: weight_decay=None")
        super().__init__(learning_rate, beta_1, beta_2, epsilon, amsgrad, name, clipnorm=clipnorm,
                         clipvalue=clipvalue, global_clipnorm=global_clipnorm, **kwargs)
        self.weight_decay = _float_hyper("weight_decay", weight_decay)
        self.set_ema(use_ema, ema_momentum, ema_overwrite_frequency)
        self.jit_compile = bool(jit_compile)   # tapejax always compiles the update

    def _slots_for_creation(self):
        return self._SLOTS   # Keras 2's AdamW interleaves m/v per variable; the values are the same

    def _hyper_config(self):
        return {**super()._hyper_config(), "weight_decay": self.weight_decay, "use_ema": self.use_ema,
                "ema_momentum": self.ema_momentum, "ema_overwrite_frequency": self.ema_overwrite_frequency,
                "jit_compile": self.jit_compile, "is_legacy_optimizer": False}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config.pop("is_legacy_optimizer", None)   # (written by get_config, as tf_keras)
        return cls(**config)

    def _prepare(self, c, step, extra):
        b1p = jnp.power(jnp.float32(self.beta_1), step)
        b2p = jnp.power(jnp.float32(self.beta_2), step)
        c["alpha"] = c["lr"] * jnp.sqrt(1 - b2p) / (1 - b1p)   # Keras 2's order
        # (for ``_alpha`` in another dtype: tf_keras casts the betas, through float32, and the step)
        c.update(beta_1=jnp.float32(self.beta_1), beta_2=jnp.float32(self.beta_2), step=step)
        return c, extra

    def _apply(self, c, g, v, s):
        lr = _c(c["lr"], v)
        if not c.get(NO_DECAY):
            v = v - v * _c(self.weight_decay, v) * lr
        # Keras 2's new optimizers compute ``1 - beta`` in Python (float64), then cast.
        alpha, eps = _alpha(c, v), _c(self.epsilon, v)
        m = s[0] + (g - s[0]) * _c(1 - self.beta_1, v)
        vv = s[1] + (jnp.square(g) - s[1]) * _c(1 - self.beta_2, v)
        if self.amsgrad:
            vhat = jnp.maximum(s[2], vv)
            return v - (m * alpha) / (jnp.sqrt(vhat) + eps), (m, vv, vhat)
        return v - (m * alpha) / (jnp.sqrt(vv) + eps), (m, vv)

    def _apply_sparse(self, c, g, ind, v, s):
        """Keras 2's AdamW on ``IndexedSlices``: weight decay over the whole Variable, the duplicate
        rows summed, ``m -= (1 - b1) m`` everywhere and the rows' ``(1 - b1) g`` added (``v`` alike
        with ``g^2``), then the Adam step on every row."""
        lr = _c(c["lr"], v)
        if not c.get(NO_DECAY):
            v = v - v * _c(self.weight_decay, v) * lr
        g, u = dedup_rows(g, ind, v.shape[0])
        alpha, eps = _alpha(c, v), _c(self.epsilon, v)
        omb1, omb2 = _c(1 - self.beta_1, v), _c(1 - self.beta_2, v)
        m = add_rows(s[0] + -s[0] * omb1, u, g * omb1)
        vv = add_rows(s[1] + -s[1] * omb2, u, jnp.square(g) * omb2)
        if self.amsgrad:
            vhat = jnp.maximum(s[2], vv)
            return v - (m * alpha) / (jnp.sqrt(vhat) + eps), (m, vv, vhat)
        return v - (m * alpha) / (jnp.sqrt(vv) + eps), (m, vv)


class Adamax(Optimizer):
    """Adamax (``tf.keras.optimizers.legacy.Adamax``): ``v = max(b2 v, |g|)``,
    ``w -= lr / (1 - b1^t) * m / (v + epsilon)``."""

    _SLOTS = ("m", "v")
    _HYPERS = ("beta_1", "beta_2")

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, name="Adamax", **kwargs):
        super().__init__(name, learning_rate, **kwargs)
        self.beta_1 = _hyper_arg("beta_1", beta_1)
        self.beta_2 = _hyper_arg("beta_2", beta_2)
        self.epsilon = _float_hyper("epsilon", 1e-7 if epsilon is None else epsilon)

    def _hyper_config(self):
        return {"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}

    def _prepare(self, c, step, extra):
        c["b1p"] = jnp.power(c["beta_1"], step)
        c["step"] = step
        return c, extra

    def _apply(self, c, g, v, s):
        b1, b2, eps = _c(c["beta_1"], v), _c(c["beta_2"], v), _c(self.epsilon, v)
        lr, b1p = _c(c["lr"], v), _b1p(c, v)
        m, u = s
        m = m + (g - m) * (1 - b1)
        u = jnp.maximum(b2 * u, jnp.abs(g))
        return v - lr / (1 - b1p) * (m / (u + eps)), (m, u)

    def _apply_sparse(self, c, g, ind, v, s):
        """tf_keras' sparse Adamax: the rows alone (``m`` and ``u`` gathered, updated, scattered back)."""
        g, rows = dedup_rows(g, ind, v.shape[0])
        b1, b2, eps = _c(c["beta_1"], v), _c(c["beta_2"], v), _c(self.epsilon, v)
        neg_scaled_lr = -_c(c["lr"], v) / (1 - _b1p(c, v))
        m = take_rows(s[0], rows) * b1 + g * (1 - b1)
        u = jnp.maximum(take_rows(s[1], rows) * b2, jnp.abs(g))
        return (add_rows(v, rows, neg_scaled_lr * (m / (u + eps))),
                (put_rows(s[0], rows, m), put_rows(s[1], rows, u)))


class Nadam(Optimizer):
    """Nadam (``tf.keras.optimizers.legacy.Nadam``) with Keras' momentum schedule
    (``schedule_decay`` 0.004) and its ``momentum_cache`` variable."""

    _SLOTS = ("m", "v")
    _HYPERS = ("beta_1", "beta_2")

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, name="Nadam", **kwargs):
        kwargs["decay"] = kwargs.pop("schedule_decay", 0.004)
        from .schedules import LearningRateSchedule
        if isinstance(kwargs.get("lr", learning_rate), LearningRateSchedule):
            raise ValueError("The Nadam optimizer does not support "
                             "tf.keras.optimizers.LearningRateSchedules as the learning rate.")
        super().__init__(name, learning_rate, **kwargs)
        self._schedule_decay = self._initial_decay
        self._initial_decay = 0.0   # Nadam uses it for the momentum schedule, not to decay lr
        self.beta_1 = _hyper_arg("beta_1", beta_1)
        self.beta_2 = _hyper_arg("beta_2", beta_2)
        self.epsilon = _float_hyper("epsilon", 1e-7 if epsilon is None else epsilon)

    def _hyper_config(self):
        return {"beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon}

    def _extra_init(self, dtype):
        from ..core.variable import Variable
        # (tf_keras: in the first Variable's dtype, and the schedule computed in it)
        return [Variable(jnp.ones((), dtype), trainable=False, name="momentum_cache")]

    def _prepare(self, c, step, extra):
        dt = extra[0].dtype   # (float32 hyperparameters cast to it, as tf_keras' _get_hyper)
        b1, b2, step = c["beta_1"].astype(dt), c["beta_2"].astype(dt), step.astype(dt)
        decay_base = jnp.asarray(jnp.float32(0.96), dt)
        d = jnp.asarray(self._schedule_decay, dt)
        next_step = step + 1
        m_t = b1 * (1.0 - 0.5 * jnp.power(decay_base, d * step))
        m_t_1 = b1 * (1.0 - 0.5 * jnp.power(decay_base, d * next_step))
        m_schedule_new = extra[0] * m_t
        m_schedule_next = m_schedule_new * m_t_1
        c.update({"m_t": m_t, "m_t_1": m_t_1,
                  "one_minus_m_t": 1.0 - m_t,
                  "one_minus_m_schedule_new": 1.0 - m_schedule_new,
                  "one_minus_m_schedule_next": 1.0 - m_schedule_next,
                  "v_t_prime_denominator": 1.0 - jnp.power(b2, step)})
        return c, [m_schedule_new]

    def _apply(self, c, g, v, s):
        b1, b2, eps = _c(c["beta_1"], v), _c(c["beta_2"], v), _c(self.epsilon, v)
        m, vv = s
        g_prime = g / _c(c["one_minus_m_schedule_new"], v)
        m = b1 * m + (1 - b1) * g
        m_prime = m / _c(c["one_minus_m_schedule_next"], v)
        vv = b2 * vv + (1 - b2) * jnp.square(g)
        v_prime = vv / _c(c["v_t_prime_denominator"], v)
        m_bar = _c(c["one_minus_m_t"], v) * g_prime + _c(c["m_t_1"], v) * m_prime
        return v - _c(c["lr"], v) * m_bar / (jnp.sqrt(v_prime) + eps), (m, vv)

    def _apply_sparse(self, c, g, ind, v, s):
        """tf_keras' sparse Nadam: ``m`` and ``v`` decayed over the whole table, the rows' terms
        added, the step on the rows alone."""
        g, rows = dedup_rows(g, ind, v.shape[0])
        b1, b2, eps = _c(c["beta_1"], v), _c(c["beta_2"], v), _c(self.epsilon, v)
        g_prime = g / _c(c["one_minus_m_schedule_new"], v)
        m = add_rows(s[0] * b1, rows, g * (1 - b1))
        m_prime = take_rows(m, rows) / _c(c["one_minus_m_schedule_next"], v)
        m_bar = _c(c["one_minus_m_t"], v) * g_prime + _c(c["m_t_1"], v) * m_prime
        vv = add_rows(s[1] * b2, rows, (g * g) * (1 - b2))
        v_prime = take_rows(vv, rows) / _c(c["v_t_prime_denominator"], v)
        step = -_c(c["lr"], v) * m_bar / (jnp.sqrt(v_prime) + eps)
        return add_rows(v, rows, step), (m, vv)


class RMSprop(Optimizer):
    """RMSprop (``tf.keras.optimizers.legacy.RMSprop``): without momentum
    ``w -= lr * g / (sqrt(rms) + eps)``; with momentum TF's kernel
    ``mom = momentum * mom + lr * g / sqrt(rms + eps)`` (epsilon inside the root)."""

    _HYPERS = ("rho", "momentum")
    _STRUCTURAL = ("centered",)

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False,
                 name="RMSprop", **kwargs):
        super().__init__(name, learning_rate, **kwargs)
        rho = _hyper_arg("rho", rho)
        momentum = _hyper_arg("momentum", momentum)
        if isinstance(momentum, float) and (momentum < 0 or momentum > 1):
            raise ValueError(f"`momentum` must be between [0, 1]. Received: momentum={momentum}")
        self._momentum = _momentum_on(momentum)   # fixed here, as in tf_keras: a slot or none
        self.rho = rho
        self.momentum = momentum
        self.epsilon = _float_hyper("epsilon", 1e-7 if epsilon is None else epsilon)
        self.centered = bool(centered)   # (sets _SLOTS: _set_slots)

    def _set_slots(self):
        self._SLOTS = ("rms",) + (("momentum",) if self._momentum else ()) + (("mg",) if self.centered else ())

    def _update_hypers(self):
        return self._HYPERS if self._momentum else ("rho",)

    def _hyper_config(self):
        return {"rho": self.rho, "momentum": self.momentum, "epsilon": self.epsilon, "centered": self.centered}

    def _apply(self, c, g, v, s):
        rho, eps, lr = _c(c["rho"], v), _c(self.epsilon, v), _c(c["lr"], v)
        slots = dict(zip(self._SLOTS, s))
        rms = slots["rms"]
        if self._momentum:
            mom_c = _c(c["momentum"], v)
            rms = rms + (jnp.square(g) - rms) * (1 - rho)
            denom = rms
            if self.centered:
                mg = slots["mg"] + (g - slots["mg"]) * (1 - rho)
                denom = rms - jnp.square(mg)
                slots["mg"] = mg
            mom = slots["momentum"] * mom_c + (g * lr) / jnp.sqrt(denom + eps)
            slots["rms"], slots["momentum"] = rms, mom
            return v - mom, tuple(slots[k] for k in self._SLOTS)
        rms = rho * rms + (1 - rho) * jnp.square(g)
        denom = rms
        slots["rms"] = rms
        if self.centered:
            mg = rho * slots["mg"] + (1 - rho) * g
            slots["mg"] = mg
            denom = rms - jnp.square(mg)
        return v - lr * g / (jnp.sqrt(denom) + eps), tuple(slots[k] for k in self._SLOTS)

    def _apply_sparse(self, c, g, ind, v, s):
        """tf_keras' sparse RMSprop: with momentum TF's sparse kernels on the rows (the base class);
        without, ``rms`` (and ``mg``) decayed over the whole table, the rows' terms added, the
        step on the rows alone."""
        if self._momentum:
            return super()._apply_sparse(c, g, ind, v, s)
        g, rows = dedup_rows(g, ind, v.shape[0])
        rho, eps, lr = _c(c["rho"], v), _c(self.epsilon, v), _c(c["lr"], v)
        slots = dict(zip(self._SLOTS, s))
        rms = slots["rms"] = add_rows(slots["rms"] * rho, rows, (g * g) * (1 - rho))
        denom = take_rows(rms, rows)
        if self.centered:
            mg = slots["mg"] = add_rows(slots["mg"] * rho, rows, g * (1 - rho))
            denom = denom - jnp.square(take_rows(mg, rows))
        return add_rows(v, rows, -lr * g / (jnp.sqrt(denom) + eps)), tuple(slots[k] for k in self._SLOTS)


class Adagrad(Optimizer):
    """Adagrad (``tf.keras.optimizers.legacy.Adagrad``): ``acc += g^2``; ``w -= lr g / (sqrt(acc) + eps)``."""

    _SLOTS = ("accumulator",)

    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7, name="Adagrad",
                 **kwargs):
        if initial_accumulator_value < 0.0:
            raise ValueError("initial_accumulator_value must be non-negative: "
                             f"{initial_accumulator_value}")
        super().__init__(name, learning_rate, **kwargs)
        self.initial_accumulator_value = _float_hyper("initial_accumulator_value", initial_accumulator_value)
        self.epsilon = _float_hyper("epsilon", 1e-7 if epsilon is None else epsilon)

    def _hyper_config(self):
        return {"initial_accumulator_value": self.initial_accumulator_value, "epsilon": self.epsilon}

    def _slot_init(self, slot_name, var):
        meta = var._meta
        return transfer.filled(tuple(meta.shape), meta.dtype, self.initial_accumulator_value)

    def _apply(self, c, g, v, s):
        acc = s[0] + jnp.square(g)
        return v - _c(c["lr"], v) * g / (jnp.sqrt(acc) + _c(self.epsilon, v)), (acc,)


class Adadelta(Optimizer):
    """Adadelta (``tf.keras.optimizers.legacy.Adadelta``), TF's ApplyAdadelta kernel."""

    _SLOTS = ("accum_grad", "accum_var")
    _HYPERS = ("rho",)

    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-7, name="Adadelta", **kwargs):
        super().__init__(name, learning_rate, **kwargs)
        self.rho = _hyper_arg("rho", rho)
        self.epsilon = _float_hyper("epsilon", 1e-7 if epsilon is None else epsilon)

    def _hyper_config(self):
        return {"rho": self.rho, "epsilon": self.epsilon}

    def _apply(self, c, g, v, s):
        rho, eps, lr = _c(c["rho"], v), _c(self.epsilon, v), _c(c["lr"], v)
        accum, accum_update = s
        accum = accum * rho + jnp.square(g) * (1 - rho)
        update = jnp.sqrt(accum_update + eps) * (g / jnp.sqrt(accum + eps))
        accum_update = accum_update * rho + jnp.square(update) * (1 - rho)
        return v - update * lr, (accum, accum_update)


class Ftrl(Optimizer):
    """FTRL-proximal (``tf.keras.optimizers.legacy.Ftrl``), TF's ApplyFtrl(V2) kernel, with
    Keras' ``beta`` folded into l2 (``l2 + beta / (2 lr)``)."""

    _SLOTS = ("accumulator", "linear")
    _INTERLEAVED = True
    _HYPERS = ("learning_rate_power", "l1_regularization_strength", "l2_regularization_strength", "beta")

    def __init__(self, learning_rate=0.001, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0, name="Ftrl",
                 l2_shrinkage_regularization_strength=0.0, beta=0.0, **kwargs):
        if initial_accumulator_value < 0.0:
            raise ValueError("`initial_accumulator_value` needs to be positive or zero. Received: "
                             f"initial_accumulator_value={initial_accumulator_value}.")
        if learning_rate_power > 0.0:
            raise ValueError("`learning_rate_power` needs to be negative or zero. Received: "
                             f"learning_rate_power={learning_rate_power}.")
        for k, val in (("l1_regularization_strength", l1_regularization_strength),
                       ("l2_regularization_strength", l2_regularization_strength),
                       ("l2_shrinkage_regularization_strength", l2_shrinkage_regularization_strength)):
            if val < 0.0:
                raise ValueError(f"`{k}` needs to be positive or zero. Received: {k}={val}.")
        super().__init__(name, learning_rate, **kwargs)
        self.learning_rate_power = _hyper_arg("learning_rate_power", learning_rate_power)
        self.initial_accumulator_value = _float_hyper("initial_accumulator_value", initial_accumulator_value)
        self.l1_regularization_strength = _hyper_arg("l1_regularization_strength", l1_regularization_strength)
        self.l2_regularization_strength = _hyper_arg("l2_regularization_strength", l2_regularization_strength)
        self.l2_shrinkage_regularization_strength = _float_hyper("l2_shrinkage_regularization_strength",
                                                                 l2_shrinkage_regularization_strength)
        self.beta = _hyper_arg("beta", beta)

    def _hyper_config(self):
        return {"learning_rate_power": self.learning_rate_power,
                "initial_accumulator_value": self.initial_accumulator_value,
                "l1_regularization_strength": self.l1_regularization_strength,
                "l2_regularization_strength": self.l2_regularization_strength,
                "l2_shrinkage_regularization_strength": self.l2_shrinkage_regularization_strength,
                "beta": self.beta}

    def _slot_init(self, slot_name, var):
        meta = var._meta
        value = self.initial_accumulator_value if slot_name == "accumulator" else 0
        return transfer.filled(tuple(meta.shape), meta.dtype, value)

    def _apply(self, c, g, v, s):
        lr = _c(c["lr"], v)
        l1 = _c(c["l1_regularization_strength"], v)
        l2 = _c(c["l2_regularization_strength"], v) + _c(c["beta"], v) / (2.0 * lr)
        p = _c(c["learning_rate_power"], v)
        accum, linear = s
        shrink = self.l2_shrinkage_regularization_strength
        g_shr = g + 2 * _c(shrink, v) * v if shrink > 0 else g
        new_accum = accum + g * g
        # TF's kernel: square roots when lr_power is -0.5, else powers (a runtime value here)
        pw = -p
        root = p == -0.5
        up_new = jnp.where(root, jnp.sqrt(new_accum), jnp.power(new_accum, pw))
        up_old = jnp.where(root, jnp.sqrt(accum), jnp.power(accum, pw))
        linear = linear + g_shr - (up_new - up_old) / lr * v
        quad = up_new / lr + 2 * l2
        x = l1 * jnp.sign(linear) - linear
        new_v = jnp.where(jnp.abs(linear) > l1, x / quad, jnp.zeros_like(v))
        return new_v, (new_accum, linear)
