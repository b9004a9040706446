"""tf_keras' new optimizers (``tf.keras.optimizers.SGD`` ... under Keras 2, tf_keras 2.21's
``tf_keras/src/optimizers/{sgd,rmsprop,adam,adamax,adagrad,adadelta,ftrl,nadam}.py``): the same
classes as ``tf.keras.optimizers.legacy`` (``_rules``: hyperparameters, slots, checkpoints,
compiled update) with the new ``update_step`` in tf_keras' order of operations.

What the new rules change (checked against tf_keras in ``tests/parity/test_optimizers.py``):

* An ``IndexedSlices`` gradient (duplicates summed first, ``_deduplicate_sparse_grad``) decays the
  slots of every row and moves every row: SGD with momentum (``m *= momentum``, the rows'
  ``-lr g`` added, ``w += m``), RMSprop (``velocity``, ``average_gradient`` and ``momentum``
  decayed everywhere; with momentum every row moves), Adam, Adamax (``m`` and ``u`` over the
  whole table, the step on every row), Adadelta, Nadam (the gradient densified in the step),
  Ftrl (no sparse rule: the dense rule on the densified gradient, which recomputes every row,
  a row never looked up set from its ``linear``).  Adagrad and plain SGD touch the rows alone.
* Dense rules that differ: RMSprop puts epsilon inside the root (``lr g / sqrt(v + eps)``,
  centered ``sqrt(v - mg^2 + eps)``), Adagrad too (``lr g / sqrt(acc + eps)``); Nadam's momentum
  schedule is ``b1 (1 - 0.5 * 0.96^t)`` (no ``schedule_decay``: legacy's exponent is
  ``0.004 t``), with the product of the schedule kept in one extra Variable (``u_product``).
* The constructors take the new optimizers' arguments: ``weight_decay`` (``w -= w * wd * lr``
  before the rule; ``exclude_from_weight_decay``), ``use_ema``, ``ema_momentum``,
  ``ema_overwrite_frequency`` (a moving average of the weights, ``_ema``; ``finalize_variable_values``),
  ``jit_compile`` (tapejax always compiles),
  Adam's ``adaptive_epsilon``; ``decay`` is TF's ValueError and ``lr`` is ignored with a warning,
  as tf_keras.  Hyperparameters stay
  float32 Variables as in the legacy classes, but where tf_keras' new ``update_step`` reads the
  plain float (``1 - self.beta_1``, ``rho``, Adamax's ``beta_2``; not where it casts it,
  ``tf.cast(self.beta_1, dtype)``), the rule uses the Python float the optimizer was made with
  while the Variable still holds it (``_New._hyper_and_complement``), so ``1 - beta`` is computed
  in float64 before the cast to the Variable's dtype: ``1 - f32(0.999)`` is 1.3e-5 away from
  ``f32(1 - 0.999)``, which moved Adam's steps by 6.4e-6 (float32 and float64 Variables alike).
"""
import logging

import jax.numpy as jnp
from jax import lax

from . import _rules
from ._args import _float_hyper, _hyper_arg
from ._base import Optimizer
from ._ema import NO_DECAY, NewOptimizerState, check_ema
from ._sparse import add_rows, dedup_rows, take_rows

_log = logging.getLogger("tapejax")

__all__ = ["SGD", "RMSprop", "Adam", "Adamax", "Adagrad", "Adadelta", "Ftrl", "Nadam", "CallableList"]


def _c(x, like):
    return jnp.asarray(x, like.dtype)


def _dense(g, u, v):
    """The deduplicated rows ``g`` at ``u`` as a dense gradient of ``v`` (TF's IndexedSlices to Tensor)."""
    return add_rows(jnp.zeros_like(v), u, g)


class CallableList(list):
    """tf_keras' ``CallableList``: the new optimizers' ``variables`` is the list of their Variables
    (``for v in opt.variables``), and calling it gives the same list (``opt.variables()``, the
    legacy optimizers' method)."""

    def __call__(self) -> "CallableList":
        return self


class _New(NewOptimizerState):
    """The new optimizers' constructor arguments, ``weight_decay`` and ``use_ema`` (``_ema``; a mixin
    before the legacy class)."""

    _SCHEDULE_STEP_FLOAT = False   # (tf_keras' new optimizers call a schedule with ``iterations``)
    _SPARSE_REFUSES_CONSTRAINT = False   # (the constraint runs after a sparse update too)

    @property
    def variables(self) -> CallableList:   # pyright: ignore[reportIncompatibleMethodOverride]
        """The Variables (``iterations``, then the slots), as a list that may also be called."""
        return CallableList(self._weights)   # pyright: ignore[reportAttributeAccessIssue]  (the legacy class keeps them)

    def _set_new(self, new):
        """Keep the new optimizers' own arguments (after the legacy class' constructor)."""
        self.weight_decay = None if new["weight_decay"] is None else _float_hyper("weight_decay",
                                                                                  new["weight_decay"])
        self.set_ema(new["use_ema"], new["ema_momentum"], new["ema_overwrite_frequency"])
        self.jit_compile = bool(new["jit_compile"])
        # (the Python floats given, for ``_hyper_and_complement``)
        object.__setattr__(self, "_hyper_py0", dict(self._hyper_py))   # pyright: ignore[reportAttributeAccessIssue]

    def _hyper_config(self):
        return {**super()._hyper_config(),   # type: ignore[misc]
                "weight_decay": self.weight_decay, "use_ema": self.use_ema, "ema_momentum": self.ema_momentum,
                "ema_overwrite_frequency": self.ema_overwrite_frequency, "jit_compile": self.jit_compile,
                "is_legacy_optimizer": False}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config.pop("is_legacy_optimizer", None)
        return cls(**config)

    def _hyper_and_complement(self, c, name, v):
        """``(h, 1 - h)`` in ``v``'s dtype for the hyperparameter ``name`` as tf_keras' new
        ``update_step`` reads ``self.<name>``, a Python float: ``1 - h`` computed in Python
        (float64), then cast.  That holds while the hyperparameter's Variable (traced: ``c[name]``)
        has the float32 value of the number the optimizer was made with (a select in the compiled
        update, no host read); a value set or assigned since takes the float32 arithmetic."""
        h = c[name]
        hv, omh = _c(h, v), _c(1 - h, v)
        py = self.__dict__.get("_hyper_py0", {}).get(name)
        if py is None:
            return hv, omh
        made = h == jnp.float32(py)
        return jnp.where(made, _c(py, v), hv), jnp.where(made, _c(1 - py, v), omh)

    def _decayed(self, c, v):
        if self.weight_decay is None or c.get(NO_DECAY):
            return v
        return v - v * _c(self.weight_decay, v) * _c(c["lr"], v)

    def _apply(self, c, g, v, s):
        return self._rule(c, g, self._decayed(c, v), s)

    def _apply_sparse(self, c, g, ind, v, s):
        g, u = dedup_rows(g, ind, v.shape[0])
        return self._rule_sparse(c, g, u, self._decayed(c, v), s)

    def _rule(self, c, g, v, s):
        raise NotImplementedError

    def _rule_sparse(self, c, g, u, v, s):
        raise NotImplementedError


def _split(name, kwargs, ema_overwrite_frequency=None):
    """The new optimizers' own arguments, taken out of ``kwargs`` (TF's errors for ``decay`` and
    the EMA arguments)."""
    if "decay" in kwargs:
        raise ValueError("decay is deprecated in the new TF-Keras optimizer, please check the docstring for "
                         "valid arguments, or use the legacy optimizer, e.g., "
                         f"tf.keras.optimizers.legacy.{name}.")
    if "lr" in kwargs:   # tf_keras' new optimizers warn and ignore it (the learning rate stays)
        kwargs.pop("lr")
        _log.warning("`lr` is deprecated in TF-Keras optimizer, please use `learning_rate` or use the legacy "
                     f"optimizer, e.g.,tf.keras.optimizers.legacy.{name}.")
    defaults = dict(weight_decay=None, use_ema=False, ema_momentum=0.99,
                    ema_overwrite_frequency=ema_overwrite_frequency, jit_compile=True)
    new = {k: kwargs.pop(k, d) for k, d in defaults.items()}
    check_ema(new["use_ema"], new["ema_momentum"], new["ema_overwrite_frequency"])
    return new


class SGD(_New, _rules.SGD):
    """``tf.keras.optimizers.SGD`` (tf_keras' new rule): dense as the legacy SGD; a sparse gradient
    decays the momentum of every row (``m = momentum * m``, the rows' ``-lr g`` added) and
    ``w += m`` moves every row (Nesterov: the rows' ``-lr g`` added, then ``w += momentum * m``)."""
    _TF_SLOT_LISTS = {"momentums": "momentum"}
    _TF_ALWAYS_LISTS = ("momentums",)   # (tf_keras builds them without momentum too: TF-format checkpoints)

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD", **kwargs):
        new = _split(name, kwargs)
        super().__init__(learning_rate, momentum, nesterov, name, **kwargs)
        self._set_new(new)

    def _rule(self, c, g, v, s):
        return _rules.SGD._apply(self, c, g, v, s)

    def _rule_sparse(self, c, g, u, v, s):
        lr = _c(c["lr"], v)
        if not self._momentum:
            return add_rows(v, u, -g * lr), ()
        mom = _c(c["momentum"], v)
        m = add_rows(s[0] * mom, u, -g * lr)
        if self.nesterov:
            return add_rows(v, u, -g * lr) + m * mom, (m,)
        return v + m, (m,)


class RMSprop(_New, _rules.RMSprop):
    """``tf.keras.optimizers.RMSprop`` (tf_keras' new rule): ``velocity = rho v + (1 - rho) g^2``,
    ``increment = lr g / sqrt(velocity + eps)`` (centered: ``sqrt(velocity - mg^2 + eps)``), then
    ``momentum = momentum * m + increment; w -= m`` or ``w -= increment``; a sparse gradient decays
    ``velocity`` (and ``average_gradient``, ``momentum``) over the whole table."""
    _TF_SLOT_LISTS = {"_velocities": "rms", "_momentums": "momentum", "_average_gradients": "mg"}

    def __init__(self, learning_rate=0.001, rho=0.9, momentum=0.0, epsilon=1e-7, centered=False, name="RMSprop",
                 **kwargs):
        new = _split(name, kwargs, ema_overwrite_frequency=100)
        super().__init__(learning_rate, rho, momentum, epsilon, centered, name, **kwargs)
        self._set_new(new)

    def _rule(self, c, g, v, s):
        (rho, omr), eps, lr = self._hyper_and_complement(c, "rho", v), _c(self.epsilon, v), _c(c["lr"], v)
        slots = dict(zip(self._SLOTS, s))
        vel = slots["rms"] = rho * slots["rms"] + omr * jnp.square(g)
        if self.centered:
            mg = slots["mg"] = rho * slots["mg"] + omr * g
            denom = vel - jnp.square(mg) + eps
        else:
            denom = vel + eps
        inc = lr * g * lax.rsqrt(denom)
        if self._momentum:
            mom = slots["momentum"] = _c(c["momentum"], v) * slots["momentum"] + inc
            return v + -mom, tuple(slots[k] for k in self._SLOTS)
        return v + -inc, tuple(slots[k] for k in self._SLOTS)

    def _rule_sparse(self, c, g, u, v, s):
        (rho, omr), eps, lr = self._hyper_and_complement(c, "rho", v), _c(self.epsilon, v), _c(c["lr"], v)
        slots = dict(zip(self._SLOTS, s))
        vel = slots["rms"] = add_rows(rho * slots["rms"], u, jnp.square(g) * omr)
        if self.centered:
            mg = slots["mg"] = add_rows(rho * slots["mg"], u, g * omr)
            denom = vel - jnp.square(mg) + eps
        else:
            denom = vel + eps
        inc = lr * g * lax.rsqrt(take_rows(denom, u))
        if self._momentum:
            mom = slots["momentum"] = add_rows(_c(c["momentum"], v) * slots["momentum"], u, inc)
            return v + -mom, tuple(slots[k] for k in self._SLOTS)
        return add_rows(v, u, -inc), tuple(slots[k] for k in self._SLOTS)


class Adam(_New, _rules.Adam):
    """``tf.keras.optimizers.Adam`` (tf_keras' new rule): dense as the legacy Adam; a sparse gradient
    decays ``m`` and ``v`` over the whole table (``m += -m (1 - b1)``, the rows' ``(1 - b1) g``
    added) and steps every row.  ``adaptive_epsilon``: epsilon times ``sqrt(1 - b2^t)``."""
    _TF_SLOT_LISTS = {"_momentums": "m", "_velocities": "v", "_velocity_hats": "vhat"}

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, adaptive_epsilon=False,
                 amsgrad=False, name="Adam", **kwargs):
        new = _split(name, kwargs)
        super().__init__(learning_rate, beta_1, beta_2, epsilon, amsgrad, name, **kwargs)
        self._set_new(new)
        self.adaptive_epsilon = bool(adaptive_epsilon)

    def _hyper_config(self):
        return {**super()._hyper_config(), "adaptive_epsilon": self.adaptive_epsilon}

    def _creation_order(self, new):   # tf_keras: m and v variable by variable, then the vhat
        return [(v, k) for v in new for k in ("m", "v")] + [(v, "vhat") for v in new if self.amsgrad]

    def _prepare(self, c, step, extra):
        c, extra = super()._prepare(c, step, extra)
        c["b2p"] = jnp.power(c["beta_2"], step)
        return c, extra

    def _eps(self, c, v):
        eps = _c(self.epsilon, v)
        return eps * jnp.sqrt(1 - _c(c["b2p"], v)) if self.adaptive_epsilon else eps

    def _rule(self, c, g, v, s):
        # (``1 - beta`` before the cast to the Variable's dtype, as tf_keras' Python float: for a
        # float16 Variable 1 - f16(0.999) would be 0.000977 where TF has f16(0.001))
        d1, d2 = self._hyper_and_complement(c, "beta_1", v)[1], self._hyper_and_complement(c, "beta_2", v)[1]
        m = s[0] + (g - s[0]) * d1
        vv = s[1] + (jnp.square(g) - s[1]) * d2
        return self._step(c, v, m, vv, s)

    def _rule_sparse(self, c, g, u, v, s):
        d1, d2 = self._hyper_and_complement(c, "beta_1", v)[1], self._hyper_and_complement(c, "beta_2", v)[1]
        m = add_rows(s[0] + -s[0] * d1, u, g * d1)
        vv = add_rows(s[1] + -s[1] * d2, u, jnp.square(g) * d2)
        return self._step(c, v, m, vv, s)

    def _step(self, c, v, m, vv, s):
        alpha, eps = _rules._alpha(c, v), self._eps(c, v)
        if self.amsgrad:
            vhat = jnp.maximum(s[2], vv)
            return v - (m * alpha) / (jnp.sqrt(vhat) + eps), (m, vv, vhat)
        return v - (m * alpha) / (jnp.sqrt(vv) + eps), (m, vv)


class Adamax(_New, _rules.Adamax):
    """``tf.keras.optimizers.Adamax`` (tf_keras' new rule): ``w -= lr m / ((1 - b1^t) (u + eps))``; a
    sparse gradient decays ``m`` and ``u`` over the whole table and steps every row."""
    _TF_SLOT_LISTS = {"_m": "m", "_u": "v"}

    _INTERLEAVED = True   # (tf_keras: m and u variable by variable)

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, name="Adamax", **kwargs):
        new = _split(name, kwargs)
        super().__init__(learning_rate, beta_1, beta_2, epsilon, name, **kwargs)
        self._set_new(new)

    def _step(self, c, v, m, uu):
        lr, b1p, eps = _c(c["lr"], v), _rules._b1p(c, v), _c(self.epsilon, v)
        return v - (lr * m) / ((1 - b1p) * (uu + eps)), (m, uu)

    def _rule(self, c, g, v, s):
        d1, b2 = self._hyper_and_complement(c, "beta_1", v)[1], self._hyper_and_complement(c, "beta_2", v)[0]
        m = s[0] + (g - s[0]) * d1
        return self._step(c, v, m, jnp.maximum(b2 * s[1], jnp.abs(g)))

    def _rule_sparse(self, c, g, u, v, s):
        d1, b2 = self._hyper_and_complement(c, "beta_1", v)[1], self._hyper_and_complement(c, "beta_2", v)[0]
        m = add_rows(s[0] + -s[0] * d1, u, g * d1)
        uu = s[1] * b2
        rows = take_rows(uu, u)
        return self._step(c, v, m, add_rows(uu, u, jnp.maximum(rows, jnp.abs(g)) - rows))


class Adagrad(_New, _rules.Adagrad):
    """``tf.keras.optimizers.Adagrad`` (tf_keras' new rule): ``acc += g^2``,
    ``w -= lr g / sqrt(acc + eps)`` (legacy: ``sqrt(acc) + eps``); a sparse gradient: the rows alone."""
    _TF_SLOT_LISTS = {"_accumulators": "accumulator"}

    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, epsilon=1e-7, name="Adagrad",
                 **kwargs):
        new = _split(name, kwargs)
        super().__init__(learning_rate, initial_accumulator_value, epsilon, name, **kwargs)
        self._set_new(new)

    def _rule(self, c, g, v, s):
        acc = s[0] + g * g
        return v - _c(c["lr"], v) * g / jnp.sqrt(acc + _c(self.epsilon, v)), (acc,)

    def _rule_sparse(self, c, g, u, v, s):
        acc = add_rows(s[0], u, g * g)
        den = jnp.sqrt(take_rows(acc, u) + _c(self.epsilon, v))
        return add_rows(v, u, -_c(c["lr"], v) * g / den), (acc,)


class Adadelta(_New, _rules.Adadelta):
    """``tf.keras.optimizers.Adadelta`` (tf_keras' new rule, the legacy kernel's dense maths); a
    sparse gradient decays ``accumulated_grad`` over the whole table and steps every row with the
    densified gradient."""
    _TF_SLOT_LISTS = {"_accumulated_grads": "accum_grad", "_accumulated_delta_vars": "accum_var"}

    _INTERLEAVED = True   # (tf_keras: both accumulators variable by variable)

    def __init__(self, learning_rate=0.001, rho=0.95, epsilon=1e-7, name="Adadelta", **kwargs):
        new = _split(name, kwargs)
        super().__init__(learning_rate, rho, epsilon, name, **kwargs)
        self._set_new(new)

    def _step(self, c, g, v, ag, adv):
        (rho, omr), eps, lr = self._hyper_and_complement(c, "rho", v), _c(self.epsilon, v), _c(c["lr"], v)
        dv = -jnp.sqrt(adv + eps) * g / jnp.sqrt(ag + eps)
        adv = rho * adv + omr * dv * dv
        return v + lr * dv, (ag, adv)

    def _rule(self, c, g, v, s):
        rho, omr = self._hyper_and_complement(c, "rho", v)
        return self._step(c, g, v, rho * s[0] + omr * g * g, s[1])

    def _rule_sparse(self, c, g, u, v, s):
        rho, omr = self._hyper_and_complement(c, "rho", v)
        ag = add_rows(s[0] + -omr * s[0], u, omr * jnp.square(g))
        return self._step(c, _dense(g, u, v), v, ag, s[1])


class Ftrl(_New, _rules.Ftrl):
    """``tf.keras.optimizers.Ftrl`` (tf_keras' new rule): ``linear += g' - (n'^-p - n^-p) / lr * w``,
    ``w = (clip(linear, -l1, l1) - linear) / (n'^-p / lr + 2 l2)``; no sparse rule: an
    ``IndexedSlices`` is densified and every row recomputed."""
    _TF_SLOT_LISTS = {"_accumulators": "accumulator", "_linears": "linear"}

    def __init__(self, learning_rate=0.001, learning_rate_power=-0.5, initial_accumulator_value=0.1,
                 l1_regularization_strength=0.0, l2_regularization_strength=0.0,
                 l2_shrinkage_regularization_strength=0.0, beta=0.0, name="Ftrl", **kwargs):
        new = _split(name, kwargs)
        super().__init__(learning_rate, learning_rate_power, initial_accumulator_value, l1_regularization_strength,
                         l2_regularization_strength, name, l2_shrinkage_regularization_strength, beta, **kwargs)
        self._set_new(new)

    def _rule(self, c, g, v, s):
        lr = _c(c["lr"], v)
        l1 = _c(c["l1_regularization_strength"], v)
        l2 = _c(c["l2_regularization_strength"], v) + _c(c["beta"], v) / (2.0 * lr)
        p = _c(c["learning_rate_power"], v)
        accum, linear = s
        g_use = g + 2 * _c(self.l2_shrinkage_regularization_strength, v) * v
        new_accum = accum + g * g
        up_new = jnp.power(new_accum, -p)
        linear = linear + (g_use - (up_new - jnp.power(accum, -p)) / lr * v)
        quad = up_new / lr + 2 * l2
        return (jnp.clip(linear, -l1, l1) - linear) / quad, (new_accum, linear)

    def _rule_sparse(self, c, g, u, v, s):
        return self._rule(c, _dense(g, u, v), v, s)


class Nadam(_New, _rules.Nadam):
    """``tf.keras.optimizers.Nadam`` (tf_keras' new rule): ``u_t = b1 (1 - 0.5 * 0.96^t)``, their
    product kept in an extra Variable, ``m_hat = u_{t+1} m / (1 - prod_{t+1}) + (1 - u_t) g /
    (1 - prod_t)``, ``w -= lr m_hat / (sqrt(v / (1 - b2^t)) + eps)``; a sparse gradient decays
    ``m`` and ``v`` over the whole table and steps every row with the densified gradient.
    Takes a learning-rate schedule (the legacy Nadam refuses one)."""
    _TF_SLOT_LISTS = {"_momentums": "m", "_velocities": "v"}

    _INTERLEAVED = True          # (tf_keras: m and v variable by variable)
    _EXTRA_IN_VARIABLES = False  # (tf_keras keeps u_product outside variables(); checkpointed)

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, name="Nadam", **kwargs):
        new = _split(name, kwargs)
        Optimizer.__init__(self, name, learning_rate, **kwargs)
        self._set_new(new)
        self._schedule_decay = 0.0   # (unused: the legacy Nadam's momentum schedule)
        self.beta_1 = _hyper_arg("beta_1", beta_1)
        self.beta_2 = _hyper_arg("beta_2", beta_2)
        self.epsilon = _float_hyper("epsilon", 1e-7 if epsilon is None else epsilon)

    def _extra_init(self, dtype):
        from ..core.variable import Variable
        # (tf_keras: ``tf.Variable(1.0, dtype=var_list[0].dtype)``, the schedule computed in it)
        return [Variable(jnp.ones((), dtype), trainable=False, name="u_product")]

    def _prepare(self, c, step, extra):
        dt = extra[0].dtype   # (tf_keras' ``tf.cast(self.beta_1, var_dtype)``, ``tf.cast(0.96, ...)``)
        b1, decay, step = c["beta_1"].astype(dt), jnp.asarray(jnp.float32(0.96), dt), step.astype(dt)
        u_t = b1 * (1.0 - 0.5 * jnp.power(decay, step))
        u_t_1 = b1 * (1.0 - 0.5 * jnp.power(decay, step + 1))
        u_prod = extra[0] * u_t
        c.update({"u_t": u_t, "u_t_1": u_t_1, "u_prod": u_prod, "u_prod_1": u_prod * u_t_1,
                  "b2p": jnp.power(c["beta_2"].astype(dt), step)})
        return c, [u_prod]

    def _step(self, c, g, v, m, vv):
        k = {n: _c(c[n], v) for n in ("u_t", "u_t_1", "u_prod", "u_prod_1", "b2p", "lr")}
        m_hat = k["u_t_1"] * m / (1 - k["u_prod_1"]) + (1 - k["u_t"]) * g / (1 - k["u_prod"])
        v_hat = vv / (1 - k["b2p"])
        return v - (m_hat * k["lr"]) / (jnp.sqrt(v_hat) + _c(self.epsilon, v)), (m, vv)

    def _rule(self, c, g, v, s):
        b1, b2 = _c(c["beta_1"], v), _c(c["beta_2"], v)
        m = s[0] + (g - s[0]) * (1 - b1)
        vv = s[1] + (jnp.square(g) - s[1]) * (1 - b2)
        return self._step(c, g, v, m, vv)

    def _rule_sparse(self, c, g, u, v, s):
        b1, b2 = _c(c["beta_1"], v), _c(c["beta_2"], v)
        m = add_rows(s[0] + -s[0] * (1 - b1), u, g * (1 - b1))
        vv = add_rows(s[1] + -s[1] * (1 - b2), u, jnp.square(g) * (1 - b2))
        return self._step(c, _dense(g, u, v), v, m, vv)
