"""``tf.keras.mixed_precision.LossScaleOptimizer``: tf_keras' loss scaling around tapejax's optimizers.

As tf_keras (``tf_keras/src/mixed_precision/loss_scale_optimizer.py``): the class the user calls
is ``BaseLossScaleOptimizer``, which makes a ``LossScaleOptimizer`` around a legacy optimizer
(``tf.keras.optimizers.legacy.X``, tf_keras' ``OptimizerV2``) and a ``LossScaleOptimizerV3``
around a new one (``tf.keras.optimizers.X``); ``isinstance(opt, BaseLossScaleOptimizer)`` holds
for both.  The custom loop::

    with tf.GradientTape() as tape:
        scaled_loss = opt.get_scaled_loss(loss_fn())           # loss * scale (the loss's dtype)
    grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, variables))   # g / scale
    opt.apply_gradients(zip(grads, variables))

The dynamic scale (``dynamic=True``: ``initial_scale`` 2**15, ``dynamic_growth_steps`` 2000) is
two Variables, ``current_loss_scale`` (float32) and ``good_steps`` (the counter; int64 in TF,
int32 here without JAX's x64 mode, as ``iterations``), saved by ``tapejax.train.Checkpoint``
under TF's keys (``optimizer/loss_scale/current_loss_scale``, ``.../good_steps``; the rest of
the optimizer's keys are the inner optimizer's, as TF's ``DelegatingTrackableMixin``).
``apply_gradients`` follows TF's ``_DynamicLossScaleState.update``:

* a step whose gradients are all finite is applied; the counter counts it, and when
  ``counter + 1 >= dynamic_growth_steps`` the scale doubles (unless the double is not finite)
  and the counter restarts at 0;
* a step with a NaN or Inf anywhere (an ``IndexedSlices`` by its values) changes no Variable
  and no slot: the scale halves (never below 1) and the counter restarts at 0;
* either way ``iterations`` counts the step, as TF's skipped branch (``do_not_apply_fn``)
  increments it: a schedule or Adam's bias correction sees skipped steps too.

``get_scaled_loss`` is one op (``ScaleLoss``: ``loss * cast(scale, loss.dtype)``) and
``get_unscaled_gradients`` one op for all the gradients (``UnscaleGradients``: each times
``cast(1 / scale, its dtype)``), so scaling adds two dispatches to an eager step, not one per
gradient; both are recorded and differentiable like TF's ``Mul``.

The decision is staged, never a host sync: the inner optimizer's one compiled update takes the
scale and counter as two more state Variables, computes the update, and selects it with
``jnp.where(all_finite, new, old)`` for every Variable, slot and state Variable (``Guard``), so
an eager step is still one dispatch and a ``tapejax.function`` step one program; deferral and
donation are the inner optimizer's.  Differences from TF, forced by that: a legacy optimizer
makes its slots on the first step even when it is skipped (TF's eager legacy path makes them at
the first applied step; TF's ``tf.function`` path, and V3 always, make them at once), and a
Variable's ``constraint`` runs after a skipped step too (on its unchanged value).

``dynamic=False`` is a fixed ``initial_scale``: every step is applied, as TF.  Attributes follow
tf_keras: ``learning_rate`` / ``lr`` and (the legacy class) every hyperparameter the inner
optimizer keeps in a Variable (``opt.beta_1``, ``opt.momentum = 0.5``) are the inner
optimizer's; ``iterations``, ``variables()``, ``get_slot`` ... delegate; ``minimize`` scales and
unscales itself.  TF's argument errors, raised before anything changes (TF marks the inner
optimizer as wrapped before it converts ``initial_scale``).  An optimizer of another library
(Keras 3's, for ``model.compile``) is wrapped by that library's class (``FOREIGN``).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import jax.numpy as jnp
import numpy as np

from ..autodiff.tape import GradientTape
from ..core.bind import bind, define
from ..core.convert import convert_to_tensor
from ..core.indexed_slices import IndexedSlices
from ..core.variable import Variable, counter
from ._base import Optimizer
from ._ema import NewOptimizerState
from ._optax import OptaxOptimizer
from ._serialization import deserialize, register, serialize

__all__ = ["BaseLossScaleOptimizer", "LossScaleOptimizer", "LossScaleOptimizerV3", "Guard", "FOREIGN"]

_log = logging.getLogger("tapejax")

_DEFAULT_INITIAL_SCALE = 2 ** 15
_DEFAULT_GROWTH_STEPS = 2000
_MULTIPLIER = 2.0

#: Optimizer base classes of other libraries -> the loss-scale optimizer class that wraps them
#: (filled where that library is wired in: ``tapejax.keras.namespace`` adds Keras 3's).
FOREIGN: dict = {}


# -- the pure rules ---------------------------------------------------------------------------
def all_finite(grads) -> Any:
    """Whether every gradient is finite (a scalar bool array): ``grads`` as the optimizer's pure
    update takes them (arrays, or ``(values, indices)`` for a sparse one: its values)."""
    flags = [jnp.all(jnp.isfinite(g[0] if type(g) is tuple else g)) for g in grads]
    return jnp.all(jnp.stack(flags))


def dynamic_rule(finite, scale, counter, growth_steps: int):
    """TF's ``_DynamicLossScaleState.update``: the new (scale, counter) after a step whose
    gradients were all finite (``finite``) or not."""
    # (a counter never passes its dtype's maximum: a larger ``growth_steps`` is never reached)
    grow = counter + 1 >= min(growth_steps, int(jnp.iinfo(counter.dtype).max))
    doubled = scale * jnp.float32(_MULTIPLIER)
    grown = jnp.where(grow & jnp.isfinite(doubled), doubled, scale)
    counted = jnp.where(grow, jnp.zeros_like(counter), counter + 1)
    halved = jnp.maximum(scale / jnp.float32(_MULTIPLIER), jnp.float32(1))
    return (jnp.where(finite, grown, halved).astype(scale.dtype),
            jnp.where(finite, counted, jnp.zeros_like(counter)).astype(counter.dtype))


class Guard:
    """A dynamic loss scale as a condition on an optimizer's update (``Optimizer._apply_gradients``):
    ``state`` its Variables (appended to the optimizer's own state), ``key`` its part of the
    compiled update's cache key, ``wrap(pure)`` the guarded pure update."""

    __slots__ = ("state", "key", "growth_steps")

    def __init__(self, scale: Variable, counter: Variable, growth_steps: int):
        self.state = (scale, counter)
        self.growth_steps = growth_steps
        self.key = ("loss_scale", growth_steps, scale._id)

    def wrap(self, pure: Callable[..., Any]) -> Callable[..., Any]:
        """``pure(vars, slots, extra, grads, it, lr, hyp, flags)`` (``Optimizer._pure_update``),
        whose ``extra`` ends with this guard's (scale, counter): the update where every gradient is
        finite, else the old values; ``it + 1`` either way; the new scale and counter."""
        growth = self.growth_steps

        def guarded(var_vals, slot_vals, extra_vals, grads, it, lr_in, hyp, flags=None):
            own, (scale, counter) = list(extra_vals[:-2]), extra_vals[-2:]
            ok = all_finite(grads)
            nv, ns, ne, it1 = pure(var_vals, slot_vals, own, grads, it, lr_in, hyp, flags)
            nv = [jnp.where(ok, n, o) for n, o in zip(nv, var_vals)]
            ns = [tuple(jnp.where(ok, n, o) for n, o in zip(nss, oss)) for nss, oss in zip(ns, slot_vals)]
            ne = [jnp.where(ok, n, o) for n, o in zip(ne, own)]
            return nv, ns, ne + list(dynamic_rule(ok, scale, counter, growth)), it1

        return guarded


class DynamicLossScaleState:
    """The dynamic scale's state (tf_keras' ``_DynamicLossScaleState``): ``current_loss_scale``
    (float32) and ``counter`` (TF's name ``good_steps``), the checkpoint's ``loss_scale`` node."""

    def __init__(self, initial_loss_scale: float, growth_steps: int):
        self.initial_loss_scale = initial_loss_scale
        self.growth_steps = growth_steps
        self.multiplier = _MULTIPLIER
        self.current_loss_scale = Variable(np.float32(initial_loss_scale), trainable=False,
                                           name="current_loss_scale")
        self.counter = counter("good_steps")
        self.guard = Guard(self.current_loss_scale, self.counter, growth_steps)

    def _checkpoint_children(self):
        return [("current_loss_scale", self.current_loss_scale), ("good_steps", self.counter)]


# -- the two ops (one dispatch each, however many gradients) ----------------------------------
def _scale_loss(loss, scale):
    """tf_keras' ``loss * tf.cast(loss_scale, loss.dtype)``."""
    return loss * scale.astype(loss.dtype)


def _unscale(scale, *grads):
    """tf_keras' ``g * tf.cast(1.0 / loss_scale, g.dtype)`` for every gradient (``_multiply_gradient``)."""
    reciprocal = jnp.float32(1.0) / scale
    return tuple([g * reciprocal.astype(g.dtype) for g in grads])


_SCALE_LOSS = define("ScaleLoss", _scale_loss)
_UNSCALE = define("UnscaleGradients", _unscale, multiple_results=True, pure_results=True)

# -- helpers ------------------------------------------------------------------------------------
_EXAMPLE = """
    with tf.GradientTape() as tape:
      loss = loss_fn()
      scaled_loss = opt.get_scaled_loss(loss)
    scaled_grads = tape.gradient(scaled_loss, vars)
    grads = opt.get_unscaled_gradients(scaled_grads)
    opt.apply_gradients([(grads, var)])"""


def _maybe_warn_about_scaling(scaled: bool, unscaled: bool) -> None:
    """tf_keras' warning when ``apply_gradients`` runs before ``get_scaled_loss`` or
    ``get_unscaled_gradients`` was ever called."""
    if scaled and unscaled:
        return
    which = ("LossScaleOptimizer.get_scaled_loss() and LossScaleOptimizer.get_unscaled_gradients()"
             if not (scaled or unscaled) else "LossScaleOptimizer.get_scaled_loss()" if not scaled
             else "LossScaleOptimizer.get_unscaled_gradients()")
    _log.warning("You forgot to call %s before calling LossScaleOptimizer.apply_gradients(). This will "
                 "likely result in worse model quality, so please call them in the correct places! For "
                 "example:%s", which, _EXAMPLE)


def _scale_args(dynamic, initial_scale, dynamic_growth_steps):
    """(initial scale as a float, growth steps or None), checked as tf_keras' constructor."""
    if not isinstance(dynamic, bool):
        raise TypeError(f'"dynamic" argument to LossScaleOptimizer.__init__ must be a bool, but got: {dynamic!r}')
    if dynamic:
        initial_scale = _DEFAULT_INITIAL_SCALE if initial_scale is None else initial_scale
        dynamic_growth_steps = _DEFAULT_GROWTH_STEPS if dynamic_growth_steps is None else dynamic_growth_steps
    elif initial_scale is None:
        raise ValueError('"initial_scale" must be specified if "dynamic" is False')
    elif dynamic_growth_steps is not None:
        raise ValueError(f'"dynamic_growth_steps" must be None if "dynamic" is False, but got: '
                         f"{dynamic_growth_steps}")
    try:
        scale = float(initial_scale)
    except (TypeError, ValueError) as e:
        raise type(e)(f'"initial_scale" must be a number; got {initial_scale!r} ({e})') from None
    if dynamic_growth_steps is None:
        return scale, None
    try:
        steps = int(dynamic_growth_steps)
    except (TypeError, ValueError) as e:
        raise type(e)(f'"dynamic_growth_steps" must be an integer; got {dynamic_growth_steps!r} ({e})') from None
    return scale, steps


# -- the classes --------------------------------------------------------------------------------
def _inner(name: str, writable: bool = False) -> property:
    """An attribute of the wrapped optimizer, read (and with ``writable`` set) through the loss
    scale optimizer, as tf_keras' wrapper delegates it."""
    def get(self):
        return getattr(self._optimizer, name)

    def put(self, value):
        setattr(self._optimizer, name, value)
    return property(get, put if writable else None, doc=f"The inner optimizer's ``{name}``.")


class _Dispatch(type):
    """tf_keras' ``LossScaleOptimizerMetaclass``: ``BaseLossScaleOptimizer(opt)`` makes the class
    for ``opt``'s kind; a subclass called directly is made as it is."""

    def __call__(cls, inner_optimizer=None, *args, **kwargs):
        if cls is not BaseLossScaleOptimizer:
            return super().__call__(inner_optimizer, *args, **kwargs)
        if isinstance(inner_optimizer, NewOptimizerState):
            return LossScaleOptimizerV3(inner_optimizer, *args, **kwargs)
        if isinstance(inner_optimizer, Optimizer):
            return LossScaleOptimizer(inner_optimizer, *args, **kwargs)
        for base, wrapper in FOREIGN.items():
            if isinstance(inner_optimizer, base):
                return wrapper(inner_optimizer, *args, **kwargs)
        raise TypeError('"inner_optimizer" must be an instance of `tf.keras.optimizers.Optimizer` or '
                        f"`tf.keras.optimizers.experimental.Optimizer`, but got: {inner_optimizer}.")


class BaseLossScaleOptimizer(Optimizer, metaclass=_Dispatch):
    """``tf.keras.mixed_precision.LossScaleOptimizer(inner_optimizer, dynamic=True,
    initial_scale=None, dynamic_growth_steps=None)`` (the module docstring)."""

    _optimizer: Optimizer
    _loss_scale: Any   # a DynamicLossScaleState, or the fixed scale (a float)
    _loss_has_been_scaled: bool
    _gradients_have_been_unscaled: bool
    #: ``tf.keras.optimizers.serialize``'s module for these classes (tf_keras'; registered by name)
    _KERAS_MODULE = "tf_keras.src.mixed_precision.loss_scale_optimizer"

    def __init__(self, inner_optimizer, dynamic=True, initial_scale=None, dynamic_growth_steps=None):
        self._check_inner(inner_optimizer)
        scale, steps = _scale_args(dynamic, initial_scale, dynamic_growth_steps)
        if isinstance(inner_optimizer, BaseLossScaleOptimizer):
            raise TypeError(f"LossScaleOptimizer cannot wrap another LossScaleOptimizer, but got: {inner_optimizer}")
        if isinstance(inner_optimizer, OptaxOptimizer):
            raise TypeError("LossScaleOptimizer wraps tapejax's Keras optimizers (tf.keras.optimizers.X, "
                            f".legacy.X); got {inner_optimizer!r}, an optax transformation: scale the loss "
                            "by hand, or use optax's own loss-scaling utilities")
        if getattr(inner_optimizer, "_is_wrapped_by_loss_scale_optimizer", False):
            raise ValueError('"inner_optimizer" is already wrapped by a LossScaleOptimizer. An optimizer can '
                             "only be wrapped by a single LossScaleOptimizer")
        object.__setattr__(self, "_optimizer", inner_optimizer)
        # (``steps`` is None exactly when the scale is fixed)
        object.__setattr__(self, "_loss_scale", scale if steps is None else DynamicLossScaleState(scale, steps))
        object.__setattr__(self, "_loss_has_been_scaled", False)
        object.__setattr__(self, "_gradients_have_been_unscaled", False)
        object.__setattr__(inner_optimizer, "_is_wrapped_by_loss_scale_optimizer", True)

    def _check_inner(self, inner):
        raise NotImplementedError   # pragma: no cover - the two subclasses

    # -- attributes: the inner optimizer's ----------------------------------------------------
    def __getattr__(self, name):   # (only for names ordinary lookup does not find)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)

    def __repr__(self):
        return f"<tapejax.optimizers.{type(self).__name__} of {self._optimizer!r}>"

    # -- the loss scale -----------------------------------------------------------------------
    @property
    def dynamic(self) -> bool:
        """Whether the loss scale is dynamic."""
        return isinstance(self._loss_scale, DynamicLossScaleState)

    @property
    def loss_scale(self):
        """The current loss scale: a float32 scalar Tensor."""
        return convert_to_tensor(self._scale_operand())

    def _scale_operand(self):
        """The scale as an op's operand: its Variable (read by the op), or the fixed float32."""
        ls = self._loss_scale
        return ls.current_loss_scale if isinstance(ls, DynamicLossScaleState) else np.float32(ls)

    @property
    def dynamic_counter(self) -> Optional[Variable]:
        """The steps since the scale last changed (a Variable); None when the scale is fixed."""
        return self._loss_scale.counter if self.dynamic else None

    @property
    def initial_scale(self) -> float:
        return self._loss_scale.initial_loss_scale if self.dynamic else self._loss_scale

    @property
    def dynamic_growth_steps(self) -> Optional[int]:
        return self._loss_scale.growth_steps if self.dynamic else None

    @property
    def inner_optimizer(self) -> Optimizer:
        return self._optimizer

    def get_scaled_loss(self, loss):
        """``loss * loss_scale`` in the loss's dtype (a callable loss: a callable giving that)."""
        object.__setattr__(self, "_loss_has_been_scaled", True)
        if callable(loss):
            def new_loss():
                return self._scaled(loss())
            return new_loss
        return self._scaled(loss)

    def _scaled(self, loss):
        if not hasattr(loss, "dtype"):   # (a Python number: tf_keras' AttributeError)
            raise AttributeError(f"{type(loss).__name__!r} object has no attribute 'dtype'")
        return bind(_SCALE_LOSS, loss, self._scale_operand())

    def get_unscaled_gradients(self, grads):
        """Each gradient divided by the loss scale (times ``1 / loss_scale`` cast to its dtype, as
        TF); None stays None, an ``IndexedSlices`` stays one."""
        object.__setattr__(self, "_gradients_have_been_unscaled", True)
        grads = list(grads)
        given = [g for g in grads if g is not None]
        if not given:
            return grads
        outs = iter(bind(_UNSCALE, self._scale_operand(),
                         *[g.values if type(g) is IndexedSlices else g for g in given]))
        return [None if g is None else g._with_values(next(outs)) if type(g) is IndexedSlices else next(outs)
                for g in grads]

    # -- updates ------------------------------------------------------------------------------
    def _apply_scaled(self, grads_and_vars):
        _maybe_warn_about_scaling(self._loss_has_been_scaled, self._gradients_have_been_unscaled)
        ls = self._loss_scale
        guard = ls.guard if isinstance(ls, DynamicLossScaleState) else None
        self._optimizer._apply_gradients(grads_and_vars, guard)

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        """The inner optimizer's gradients of the scaled loss, unscaled (TF's ``_compute_gradients``)."""
        tape = GradientTape() if tape is None else tape
        with tape:
            loss = self.get_scaled_loss(loss)
        pairs = self._optimizer._compute_gradients(loss, var_list, grad_loss=grad_loss, tape=tape)
        grads = self.get_unscaled_gradients([g for g, _ in pairs])
        return list(zip(grads, [v for _, v in pairs]))

    def minimize(self, loss, var_list, grad_loss=None, name=None, tape=None):
        """Scale ``loss``, compute its gradients, unscale and apply them (the scale is updated)."""
        return self.apply_gradients(self._compute_gradients(loss, var_list, grad_loss=grad_loss, tape=tape))

    # -- the inner optimizer's API ------------------------------------------------------------
    iterations = _inner("iterations")
    name = _inner("name")
    learning_rate = _inner("learning_rate", writable=True)
    lr = learning_rate
    built = _inner("built")

    @property
    def variables(self):
        """The inner optimizer's ``variables``: a list that may be called (a new optimizer's), or
        the legacy optimizers' method, as tf_keras' ``LossScaleOptimizer`` gives them."""
        return self._optimizer.variables

    weights = _inner("weights")

    def get_weights(self):
        return self._optimizer.get_weights()

    def set_weights(self, weights):
        return self._optimizer.set_weights(weights)

    def get_slot_names(self):
        return self._optimizer.get_slot_names()

    def get_slot(self, var, slot_name):
        return self._optimizer.get_slot(var, slot_name)

    def get_config(self):
        return {"inner_optimizer": serialize(self._optimizer), "dynamic": self.dynamic,
                "initial_scale": self.initial_scale, "dynamic_growth_steps": self.dynamic_growth_steps}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        inner = config.pop("inner_optimizer")
        if not isinstance(inner, Optimizer):
            inner = deserialize(inner, custom_objects=custom_objects)
        return cls(inner, **config)


class LossScaleOptimizer(BaseLossScaleOptimizer):
    """Loss scaling around a legacy optimizer (tf_keras' ``LossScaleOptimizer``, an ``OptimizerV2``):
    the inner optimizer's Variable hyperparameters are attributes of this one too."""

    def _check_inner(self, inner):
        if isinstance(inner, NewOptimizerState):
            raise TypeError("You passed an instance of the new optimizer (tf.keras.optimizers.X) to "
                            "LossScaleOptimizer, but only the legacy optimizers (tf.keras.optimizers.legacy.X) "
                            "can be passed. Please use `loss_scale_optimizer.LossScaleOptimizerV3` instead of "
                            "`tf.keras.mixed_precision.LossScaleOptimizer`, as the former supports wrapping "
                            f"instances of the new optimizer. Got optimizer: {inner}")
        if not isinstance(inner, Optimizer):
            raise TypeError(f'"inner_optimizer" must be an instance of `tf.keras.optimizers.Optimizer`, but got: '
                            f"{inner}. ")

    def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
        """Apply the pairs through the inner optimizer unless a gradient is not finite (then only
        ``iterations`` counts the step), and update the dynamic scale (the module docstring)."""
        self._apply_scaled(grads_and_vars)

    def get_gradients(self, loss, params):
        """The unscaled gradients of the scaled ``loss`` (a callable, recorded on a new tape)."""
        return [g for g, _ in self._compute_gradients(loss, params)]

    clipnorm = _inner("clipnorm", writable=True)
    global_clipnorm = _inner("global_clipnorm", writable=True)
    clipvalue = _inner("clipvalue", writable=True)

    def __getattr__(self, name):
        inner = self.__dict__.get("_optimizer")
        if inner is not None and name in inner._hyper:   # beta_1, momentum ...: the inner optimizer's Variable (tf_keras' _get_hyper)
            return inner._hyper[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        inner = self.__dict__.get("_optimizer")
        if (inner is not None and name in inner._hyper and name not in self.__dict__
                and not hasattr(type(self), name)):
            setattr(inner, name, value)   # tf_keras' _set_hyper on the inner optimizer
            return
        object.__setattr__(self, name, value)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._optimizer._hyper))


class LossScaleOptimizerV3(BaseLossScaleOptimizer):
    """Loss scaling around a new optimizer (tf_keras' ``LossScaleOptimizerV3``): only
    ``learning_rate`` (and the EMA settings) are the inner optimizer's attributes."""

    def _check_inner(self, inner):
        if isinstance(inner, Optimizer) and not isinstance(inner, NewOptimizerState):
            raise TypeError("You passed a legacy optimizer (tf.keras.optimizers.legacy.X) to "
                            "LossScaleOptimizerV3, but only the new optimizers (tf.keras.optimizers.X) can be "
                            "passed. Please use `tf.keras.mixed_precision.LossScaleOptimizer` instead of "
                            f"LossScaleOptimizerV3. Got optimizer: {inner}")
        if not isinstance(inner, Optimizer):
            raise TypeError(f'"inner_optimizer" must be an instance of Optimizer, but got: {inner}.')

    def apply_gradients(self, grads_and_vars, skip_gradients_aggregation=False, **kwargs):
        """Apply the pairs through the inner optimizer unless a gradient is not finite (then only
        ``iterations`` counts the step), and update the dynamic scale (the module docstring)."""
        self._apply_scaled(grads_and_vars)

    def compute_gradients(self, loss, var_list, tape=None):
        """``(unscaled gradient, variable)`` pairs of the scaled ``loss`` (tf_keras' new API)."""
        return self._compute_gradients(loss, var_list, tape=tape)

    def build(self, var_list):
        """Make the inner optimizer's slots for ``var_list`` now (its first update would)."""
        self._optimizer.build(list(var_list))

    use_ema = _inner("use_ema")
    ema_momentum = _inner("ema_momentum")

    def finalize_variable_values(self, var_list):
        self._optimizer.finalize_variable_values(var_list)


# ``tf.keras.optimizers.deserialize`` of tf_keras' names (the class for the inner optimizer's kind)
register(BaseLossScaleOptimizer, "lossscaleoptimizer", "lossscaleoptimizerv3", "lossscaleoptimizerv1")
