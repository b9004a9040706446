"""Keras 2's newer optimizers that have no legacy form: ``Lion`` and ``Adafactor``
(``tf.keras.optimizers.Lion`` / ``Adafactor`` of tf_keras 2.21, ``tf_keras/src/optimizers/lion.py``
and ``adafactor.py``), written in tf_keras' order of operations so results agree to float32
rounding (``tests/parity/test_optimizers.py``).

As tf_keras' new optimizers, they keep their hyperparameters as plain floats (a change drops the
compiled update, compiled again at the next step) and apply ``weight_decay`` before the update:
``w -= w * weight_decay * lr``.  optax's ``lion`` and ``adafactor`` are not used: optax's lion
scales the weight decay differently and its adafactor factors and clips otherwise (momentum,
decay-rate schedule, update clipping by RMS over the factored estimate), so neither gives
tf_keras' numbers.  ``use_ema`` keeps tf_keras' moving average of the weights (``_ema``).
"""
import jax.numpy as jnp
from jax import lax

from ..core import transfer
from ._args import _float_hyper
from ._base import Optimizer
from ._ema import NO_DECAY, NewOptimizerState, check_ema
from ._sparse import add_rows


def _c(x, like):
    return jnp.asarray(x, like.dtype)


class _NewOptimizer(NewOptimizerState, Optimizer):
    """tf_keras' new ``Optimizer`` base: ``weight_decay`` before the rule, ``use_ema`` (``_ema``)."""

    _HYPERS = ()

    def __init__(self, name, learning_rate, weight_decay, use_ema, ema_momentum, ema_overwrite_frequency,
                 jit_compile, **kwargs):
        check_ema(use_ema, ema_momentum, ema_overwrite_frequency)
        super().__init__(name, learning_rate, **kwargs)
        self.weight_decay = None if weight_decay is None else _float_hyper("weight_decay", weight_decay)
        self.set_ema(use_ema, ema_momentum, ema_overwrite_frequency)
        self.jit_compile = bool(jit_compile)   # tapejax always compiles the update

    def _hyper_config(self):
        return {"weight_decay": self.weight_decay, "use_ema": self.use_ema, "ema_momentum": self.ema_momentum,
                "ema_overwrite_frequency": self.ema_overwrite_frequency, "jit_compile": self.jit_compile,
                "is_legacy_optimizer": False}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config.pop("is_legacy_optimizer", None)   # (written by get_config, as tf_keras)
        return cls(**config)

    def _decayed(self, c, v):
        if self.weight_decay is None or c.get(NO_DECAY):
            return v
        return v - v * _c(self.weight_decay, v) * _c(c["lr"], v)


class Lion(_NewOptimizer):
    """Lion (``tf.keras.optimizers.Lion``): ``w -= lr * sign(b1 m + (1 - b1) g)``, then
    ``m = b2 m + (1 - b2) g``; one slot ``m``."""

    _SLOTS = ("m",)
    _TF_SLOT_LISTS = {"momentums": "m", "_momentums": "m"}   # (tf_keras', then Keras 3's name)

    def __init__(self, learning_rate=0.0001, beta_1=0.9, beta_2=0.99, weight_decay=None, clipnorm=None,
                 clipvalue=None, global_clipnorm=None, use_ema=False, ema_momentum=0.99,
                 ema_overwrite_frequency=None, jit_compile=True, name="Lion", **kwargs):
        if beta_1 <= 0 or beta_1 > 1:
            raise ValueError(f"`beta_1`={beta_1} must be between ]0, 1]. Otherwise, the optimizer degenerates "
                             "to SignSGD.")
        super().__init__(name, learning_rate, weight_decay, use_ema, ema_momentum, ema_overwrite_frequency,
                         jit_compile, clipnorm=clipnorm, clipvalue=clipvalue, global_clipnorm=global_clipnorm,
                         **kwargs)
        self.beta_1 = _float_hyper("beta_1", beta_1)
        self.beta_2 = _float_hyper("beta_2", beta_2)

    def _hyper_config(self):
        return {**super()._hyper_config(), "beta_1": self.beta_1, "beta_2": self.beta_2}

    def _apply(self, c, g, v, s):
        v = self._decayed(c, v)
        lr, b1, b2 = _c(c["lr"], v), _c(self.beta_1, v), _c(self.beta_2, v)
        (m,) = s
        one = _c(1.0, v)
        v = v - lr * jnp.sign(m * b1 + g * (one - b1))
        return v, (m * b2 + g * (one - b2),)

    def _apply_sparse(self, c, g, ind, v, s):
        """tf_keras' sparse Lion: ``m *= b1``, the rows' ``(1 - b1) g`` added (duplicates add),
        ``w -= lr * sign(m)``, then ``m *= b2 / b1`` and the rows' ``(1 - b2 / b1) g`` added."""
        v = self._decayed(c, v)
        lr, b1, b2 = _c(c["lr"], v), _c(self.beta_1, v), _c(self.beta_2, v)
        one = _c(1.0, v)
        m = add_rows(s[0] * b1, ind, g * (one - b1))
        v = v - lr * jnp.sign(m)
        m = add_rows(m * b2 / b1, ind, g * (one - b2 / b1))
        return v, (m,)


def _rms(x):
    return jnp.sqrt(jnp.mean(jnp.square(x)))


class Adafactor(_NewOptimizer):
    """Adafactor (``tf.keras.optimizers.Adafactor``): for a Variable of rank >= 2 the second moment
    is factored into row and column means (slots ``r``: shape ``[:-1]``, ``c``: shape
    ``[:-2] + [-1]``; ``v`` their outer product), else kept whole (``v``); the step is
    ``max(epsilon_2, rms(w)) * min(lr, 1/sqrt(t))`` times ``g / sqrt(v)`` clipped to RMS
    ``clip_threshold``.  With ``relative_step`` (and no schedule) the learning rate is also
    capped at ``1/sqrt(t)``.  For a Variable of rank < 2, ``r`` and ``c`` are unused scalars (TF
    keeps them outside the optimizer's variables)."""

    _SLOTS = ("r", "c", "v")
    _TF_SLOT_LISTS = {"_r": "r", "_c": "c", "_v": "v"}
    _INTERLEAVED = True   # tf_keras makes r, c and v variable by variable

    def __init__(self, learning_rate=0.001, beta_2_decay=-0.8, epsilon_1=1e-30, epsilon_2=1e-3,
                 clip_threshold=1.0, relative_step=True, weight_decay=None, clipnorm=None, clipvalue=None,
                 global_clipnorm=None, use_ema=False, ema_momentum=0.99, ema_overwrite_frequency=None,
                 jit_compile=True, name="Adafactor", **kwargs):
        super().__init__(name, learning_rate, weight_decay, use_ema, ema_momentum, ema_overwrite_frequency,
                         jit_compile, clipnorm=clipnorm, clipvalue=clipvalue, global_clipnorm=global_clipnorm,
                         **kwargs)
        self.beta_2_decay = _float_hyper("beta_2_decay", beta_2_decay)
        self.epsilon_1 = _float_hyper("epsilon_1", epsilon_1)
        self.epsilon_2 = _float_hyper("epsilon_2", epsilon_2)
        self.clip_threshold = _float_hyper("clip_threshold", clip_threshold)
        self.relative_step = bool(relative_step)

    def _hyper_config(self):
        return {**super()._hyper_config(), "beta_2_decay": self.beta_2_decay, "epsilon_1": self.epsilon_1,
                "epsilon_2": self.epsilon_2, "clip_threshold": self.clip_threshold,
                "relative_step": self.relative_step}

    def _slot_init(self, slot_name, var):
        shape, dtype = tuple(var._meta.shape), var._meta.dtype
        if slot_name == "v":
            return transfer.filled(shape, dtype, 0)
        if len(shape) < 2:   # an unused placeholder, int32 as tf_keras' ``tf.Variable(0)`` (its checkpoint's)
            return transfer.filled((), jnp.int32, 0)
        return transfer.filled(shape[:-1] if slot_name == "r" else shape[:-2] + shape[-1:], dtype, 0)

    def _prepare(self, c, step, extra):
        c["step"] = step
        return c, extra

    def _apply(self, c, g, v, s):
        v = self._decayed(c, v)
        t = _c(c["step"], v)
        lr = _c(c["lr"], v)
        rsqrt_t = lax.rsqrt(t)
        if self._lr_sched is None and self.relative_step:
            lr = jnp.minimum(lr, rsqrt_t)
        rho = jnp.minimum(lr, rsqrt_t)
        alpha = jnp.maximum(_c(self.epsilon_2, v), _rms(v)) * rho
        reg = jnp.square(g) + _c(self.epsilon_1, v)
        b2 = 1 - jnp.power(t, _c(self.beta_2_decay, v))
        r, cc, vv = s
        if v.ndim >= 2:
            r = b2 * r + (1 - b2) * jnp.mean(reg, axis=-1)
            cc = b2 * cc + (1 - b2) * jnp.mean(reg, axis=-2)
            vv = jnp.expand_dims(r / jnp.mean(r, axis=-1, keepdims=True), -1) * jnp.expand_dims(cc, -2)
        else:
            vv = b2 * vv + (1 - b2) * reg
        u = g * lax.rsqrt(vv)
        u_hat = u / jnp.maximum(_c(1.0, v), _rms(u) / _c(self.clip_threshold, v))
        return v + -alpha * u_hat, (r, cc, vv)

    def _apply_sparse(self, c, g, ind, v, s):
        """tf_keras densifies the gradient (``convert_to_tensor``): the rule on the dense sum."""
        dense = add_rows(jnp.zeros_like(v), ind, g)
        return self._apply(c, dense, v, s)
