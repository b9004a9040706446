"""Learning-rate schedules (``tf.keras.optimizers.schedules``): pure functions of the step.

A schedule is called with the optimizer's ``iterations`` (the number of
updates already applied) and returns the learning rate.  A built-in one
(and any optax schedule, a callable ``count -> value``, which the optimizers
accept too) is a pure function of the step: it runs inside the compiled
update, so it never forces a retrace.  A subclass of the user's may read
Variables and Python state, so an eager update calls it first, as tf_keras
does at every update, and takes its value as an input
(``_hypers.HyperParameters._lr_now``).
The built-in schedules compute with jnp (``_rate``) and, as in TF, return a
float32 ``Tensor`` when called (``sched(opt.iterations).numpy()``); the
optimizer unwraps it.
"""
import math

import jax.numpy as jnp

from ..core.tensor import Tensor
from ..core.variable import Variable


class LearningRateSchedule:
    """Base class: subclasses implement ``__call__(step)`` (tapejax or jnp ops) and ``get_config``."""

    def __call__(self, step):
        raise NotImplementedError

    def get_config(self):
        raise NotImplementedError

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class _JnpSchedule(LearningRateSchedule):
    """A built-in schedule: ``_rate(step)`` in jnp; calling it gives that rate as a Tensor."""

    def _rate(self, step):
        raise NotImplementedError

    def __call__(self, step):
        return Tensor(self._rate(step))


def _f32(x):
    return jnp.asarray(x, jnp.float32)


def _step_value(step):
    """The step as a JAX array.  A Variable step is read through ``read_value`` (a recorded read):
    inside ``tapejax.function`` the read binds the Variable, where its raw value would freeze the
    step at trace time."""
    if isinstance(step, Variable):
        step = step.read_value()
    return jnp.asarray(getattr(step, "_value", step))


def _step(step):
    return _step_value(step).astype(jnp.float32)


def _positive(name, value):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"Argument `{name}` must be > 0; received: {name}={value!r}")


class _DecayByRatio(_JnpSchedule):
    """The arguments both ratio decays take, and their ratio ``step / decay_steps`` (floored with
    ``staircase``)."""

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False, name=None):
        _positive("decay_steps", decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.decay_rate = decay_rate
        self.staircase = staircase
        self.name = name

    def _ratio(self, step):
        p = _step(step) / _f32(self.decay_steps)
        return jnp.floor(p) if self.staircase else p

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "decay_rate": self.decay_rate, "staircase": self.staircase, "name": self.name}


class ExponentialDecay(_DecayByRatio):
    """``initial_learning_rate * decay_rate ** (step / decay_steps)`` (floored with ``staircase``)."""

    def _rate(self, step):
        return _f32(self.initial_learning_rate) * jnp.power(_f32(self.decay_rate), self._ratio(step))


class PiecewiseConstantDecay(_JnpSchedule):
    """``values[i]`` while ``boundaries[i-1] < step <= boundaries[i]`` (TF's inclusive upper bounds)."""

    def __init__(self, boundaries, values, name=None):
        boundaries = list(boundaries)
        values = list(values)
        if len(boundaries) != len(values) - 1:
            raise ValueError("The length of boundaries should be 1 less than the length of values. "
                             f"Received: boundaries={boundaries} of length {len(boundaries)}, and "
                             f"values={values} of length {len(values)}.")
        self.boundaries = boundaries
        self.values = values
        self.name = name

    def _rate(self, step):
        s = _step_value(step)
        b = jnp.asarray(self.boundaries, dtype=s.dtype if jnp.issubdtype(s.dtype, jnp.integer) else jnp.float32)
        idx = jnp.sum(s > b)   # number of boundaries passed (step == boundary stays in the lower piece)
        return jnp.asarray(self.values, jnp.float32)[idx]

    def get_config(self):
        return {"boundaries": self.boundaries, "values": self.values, "name": self.name}


class CosineDecay(_JnpSchedule):
    """Cosine decay from ``initial_learning_rate`` to ``alpha * initial_learning_rate`` over
    ``decay_steps`` (after an optional linear warmup to ``warmup_target``), as tf_keras 2.21."""

    def __init__(self, initial_learning_rate, decay_steps, alpha=0.0, name=None, warmup_target=None,
                 warmup_steps=0):
        _positive("decay_steps", decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.alpha = alpha
        self.name = name
        self.warmup_target = warmup_target
        self.warmup_steps = warmup_steps

    def _decay(self, step, decay_steps, decay_from):
        frac = jnp.minimum(step, decay_steps) / decay_steps
        cos = 0.5 * (1.0 + jnp.cos(_f32(math.pi) * frac))
        decayed = (1 - _f32(self.alpha)) * cos + _f32(self.alpha)
        return decay_from * decayed

    def _rate(self, step):
        s = _step(step)
        init = _f32(self.initial_learning_rate)
        decay_steps = _f32(self.decay_steps)
        if self.warmup_target is None:
            return self._decay(s, decay_steps, init)
        target = _f32(self.warmup_target)
        warm = _f32(self.warmup_steps)
        warm_lr = (target - init) * (s / jnp.maximum(warm, 1.0)) + init
        return jnp.where(s < warm, warm_lr, self._decay(s - warm, decay_steps, target))

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "alpha": self.alpha, "name": self.name, "warmup_target": self.warmup_target,
                "warmup_steps": self.warmup_steps}


class InverseTimeDecay(_DecayByRatio):
    """``initial_learning_rate / (1 + decay_rate * step / decay_steps)`` (the ratio floored with
    ``staircase``), as tf_keras 2.21."""

    def _rate(self, step):
        return _f32(self.initial_learning_rate) / (1.0 + _f32(self.decay_rate) * self._ratio(step))


class PolynomialDecay(_JnpSchedule):
    """``(initial - end) * (1 - step / decay_steps) ** power + end``, the step capped at
    ``decay_steps``; with ``cycle`` the horizon grows to the next multiple of ``decay_steps``
    instead, as tf_keras 2.21."""

    def __init__(self, initial_learning_rate, decay_steps, end_learning_rate=0.0001, power=1.0, cycle=False,
                 name=None):
        _positive("decay_steps", decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.decay_steps = decay_steps
        self.end_learning_rate = end_learning_rate
        self.power = power
        self.cycle = cycle
        self.name = name

    def _rate(self, step):
        s = _step(step)
        horizon = _f32(self.decay_steps)
        if self.cycle:
            horizon = horizon * jnp.where(s == 0, 1.0, jnp.ceil(s / horizon))
        else:
            s = jnp.minimum(s, horizon)
        init, end = _f32(self.initial_learning_rate), _f32(self.end_learning_rate)
        return (init - end) * jnp.power(1.0 - s / horizon, _f32(self.power)) + end

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate, "decay_steps": self.decay_steps,
                "end_learning_rate": self.end_learning_rate, "power": self.power, "cycle": self.cycle,
                "name": self.name}


class CosineDecayRestarts(_JnpSchedule):
    """Cosine decay with warm restarts (SGDR): periods ``first_decay_steps * t_mul ** i``, each
    restart's peak scaled by ``m_mul ** i``, floor ``alpha``, as tf_keras 2.21."""

    def __init__(self, initial_learning_rate, first_decay_steps, t_mul=2.0, m_mul=1.0, alpha=0.0, name=None):
        _positive("first_decay_steps", first_decay_steps)
        self.initial_learning_rate = initial_learning_rate
        self.first_decay_steps = first_decay_steps
        self._t_mul = t_mul
        self._m_mul = m_mul
        self.alpha = alpha
        self.name = name

    def _rate(self, step):
        frac = _step(step) / _f32(self.first_decay_steps)
        t_mul, m_mul = _f32(self._t_mul), _f32(self._m_mul)
        if self._t_mul == 1.0:
            i_restart = jnp.floor(frac)
            frac = frac - i_restart
        else:
            i_restart = jnp.floor(jnp.log(1.0 - frac * (1.0 - t_mul)) / jnp.log(t_mul))
            done = (1.0 - t_mul ** i_restart) / (1.0 - t_mul)
            frac = (frac - done) / t_mul ** i_restart
        cosine = 0.5 * m_mul ** i_restart * (1.0 + jnp.cos(_f32(math.pi) * frac))
        return _f32(self.initial_learning_rate) * ((1 - _f32(self.alpha)) * cosine + _f32(self.alpha))

    def get_config(self):
        return {"initial_learning_rate": self.initial_learning_rate, "first_decay_steps": self.first_decay_steps,
                "t_mul": self._t_mul, "m_mul": self._m_mul, "alpha": self.alpha, "name": self.name}


__all__ = ["LearningRateSchedule", "ExponentialDecay", "PiecewiseConstantDecay", "CosineDecay", "CosineDecayRestarts",
           "InverseTimeDecay", "PolynomialDecay"]
