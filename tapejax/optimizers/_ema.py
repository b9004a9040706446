"""What tf_keras' new ``Optimizer`` base adds to every new optimizer (``tf_keras/src/optimizers/
optimizer.py``, TF 2.11+): a moving average of the trained weights (``use_ema``) and the
Variables left out of ``weight_decay`` (``exclude_from_weight_decay``).

``use_ema=True``: each trained Variable gets an ``average`` slot, made from its value when the
optimizer first updates it (before that update), listed by ``variables()`` right after
``iterations`` (tf_keras' order: the averages, then the rule's slots) and saved by
``tapejax.train.Checkpoint`` with the other slots.  Every update, after the rule (and the weight
decay), ``average = ema_momentum * average + (1 - ema_momentum) * new_value``; with
``ema_overwrite_frequency = N`` the Variable takes its average when ``(iterations + 1) % N == 0``
(``iterations`` before the update is counted), as tf_keras'
``_distributed_apply_gradients_fn``.  It is part of the one compiled update, eagerly and inside
``tapejax.function``.  ``finalize_variable_values(var_list)`` assigns the averages to the
Variables (a no-op without ``use_ema``).

``exclude_from_weight_decay(var_list=None, var_names=None)``, before the first update: those
Variables, and those whose name ``re.search``-matches one of ``var_names``, get no weight decay.

The learning rate given to the constructor is kept in the optimizer's own Variable, as tf_keras'
``_build_learning_rate`` (``tf.Variable(learning_rate)``): a ``tf.Variable``'s value then (the
user's later ``assign`` does not reach the optimizer) or a zero-argument callable's value then (it
is not called again); a schedule is kept.  (The legacy optimizers keep the user's Variable and call
the callable at every update.)

``learning_rate`` (and ``lr``) under a ``LearningRateSchedule`` is, as tf_keras' new optimizers'
(their ``current_learning_rate`` Variable), the rate of the last update: the schedule at
``iterations - 1`` (at step 0 before the first update), here a float32 Tensor computed when read
(a callback's ``float(self.model.optimizer.learning_rate)``); the legacy optimizers give the
schedule itself, as ``OptimizerV2`` does.
"""
import re
from typing import Any, Callable, Optional

import jax.numpy as jnp

from ..core.tensor import Tensor
from ..core.variable import Variable
from . import schedules as _schedules
from ._args import _takes_step

#: The key of a per-Variable coefficient that turns the weight decay off (``_var_flags``).
NO_DECAY = "weight_decay_off"


def check_ema(use_ema: Any, ema_momentum: Any, ema_overwrite_frequency: Any) -> None:
    """tf_keras' checks of the EMA arguments (made only with ``use_ema``)."""
    if not use_ema:
        return
    if ema_momentum > 1 or ema_momentum < 0:
        raise ValueError(f"`ema_momentum` must be in the range [0, 1]. Received: ema_momentum={ema_momentum}")
    if ema_overwrite_frequency and (not isinstance(ema_overwrite_frequency, int) or ema_overwrite_frequency < 1):
        raise ValueError("`ema_overwrite_frequency` must be an integer > 1 or None. Received: "
                         f"ema_overwrite_frequency={ema_overwrite_frequency}")


#: Called with a new optimizer once it has made the state of newly trained Variables: a checkpoint
#: restore waiting for that state by position (tf_keras' lists, ``train.restore``) applies it then,
#: before the first update reads it.
BUILD_HOOKS: list[Callable[[Any], None]] = []


class NewOptimizerState:
    """A mixin (first in the bases) of the new optimizers: ``use_ema``'s ``average`` slot and
    update, ``exclude_from_weight_decay``.  The class sets ``use_ema``, ``ema_momentum`` and
    ``ema_overwrite_frequency`` (``set_ema``); the average is a leading slot of ``Optimizer``
    (``_leading_slots``: made first, updated after the rule by ``_after_rule``)."""

    #: The lists tf_keras' new optimizer saves its per-Variable state in (a checkpoint's
    #: ``optimizer/_momentums/0``, parallel to ``_trainable_variables``) -> tapejax's slot names
    #: (``train.trackable``'s checkpoint layout of the new optimizers).  Adafactor has none: tf_keras
    #: saves its state only in ``_variables``.
    _TF_SLOT_LISTS: dict = {}
    use_ema: bool = False
    ema_momentum: Any = 0.99
    ema_overwrite_frequency: Optional[int] = None
    _SLOTS: tuple
    _slots: dict

    _lr_sched: Any
    _lr_var: Any
    iterations: Any

    # -- the learning rate (tf_keras' new ``Optimizer.learning_rate``) ------------------------
    @property
    def learning_rate(self):
        """The learning-rate Variable; under a ``LearningRateSchedule``, the rate the last update
        used (the module docstring); any other callable as it was given."""
        sched = self._lr_sched
        if sched is None:
            return self._lr_var
        if not isinstance(sched, _schedules.LearningRateSchedule):
            return sched
        step = Tensor(jnp.maximum(self.iterations._value - 1, 0))
        value = sched(step)
        return Tensor(jnp.asarray(getattr(value, "_value", value), jnp.float32))

    @learning_rate.setter
    def learning_rate(self, value):
        self._set_learning_rate(value)   # pyright: ignore[reportAttributeAccessIssue]  (``Optimizer``'s)

    lr = learning_rate

    def set_ema(self, use_ema, ema_momentum, ema_overwrite_frequency):
        check_ema(use_ema, ema_momentum, ema_overwrite_frequency)
        self.use_ema = bool(use_ema)
        self.ema_momentum = ema_momentum
        self.ema_overwrite_frequency = ema_overwrite_frequency

    # -- the learning rate --------------------------------------------------------------
    def _set_learning_rate(self, value):
        """tf_keras' new optimizers keep the learning rate in a Variable of their own
        (``_build_learning_rate``: ``tf.Variable(learning_rate)``): a Variable given to the
        constructor is read once, so its later assigns do not reach the optimizer (the legacy
        optimizers keep the user's Variable), and a zero-argument callable is called once, its
        value kept; a schedule (a ``LearningRateSchedule``, or optax's: it takes the step) stays,
        and one made with a ``LearningRateSchedule`` refuses a rate that is not one (tf_keras' TypeError; a
        callback such as ``ReduceLROnPlateau`` then fails as in TF instead of dropping the schedule)."""
        kept = self.__dict__.get("_lr_sched")
        if isinstance(kept, _schedules.LearningRateSchedule):
            if not isinstance(value, _schedules.LearningRateSchedule):   # (another schedule: taken)
                raise TypeError("This optimizer was created with a `LearningRateSchedule` object as its "
                                "`learning_rate` constructor argument, hence its learning rate is not settable. "
                                "If you need the learning rate to be settable, you should instantiate the "
                                "optimizer with a float `learning_rate` argument.")
        elif self.__dict__.get("_lr_var") is None and kept is None:
            if isinstance(value, Variable):
                value = value.read_value()
            elif callable(value) and not _takes_step(value):
                value = value()
        super()._set_learning_rate(value)   # pyright: ignore[reportAttributeAccessIssue]  (Optimizer's)

    # -- the Variables it was built for (tf_keras' ``_index_dict``) ---------------------------
    def build(self, var_list):
        """Make the slots for ``var_list`` now (tf_keras' new optimizers; the first update would),
        e.g. before a checkpoint restore fills them.  Only the first build counts (tf_keras'
        ``_built``): these are the Variables the optimizer will ever update."""
        _ = self.iterations
        if self.__dict__.get("_known_ids") is not None:
            return
        var_list = list(var_list)
        self._known_ids = {v._id for v in var_list}
        self._built_variables = tuple(var_list)   # (in build order: a checkpoint's state lists)
        self._create_slots(var_list)   # pyright: ignore[reportAttributeAccessIssue]  (``Optimizer``'s)

    def _apply_gradients(self, grads_and_vars, guard):
        """tf_keras' new optimizers are built by their first update (or ``build``) for its
        Variables with a gradient; a later update of another Variable is TF's ``KeyError`` (raised
        here before anything changes; TF's eager update has moved the known Variables listed
        before it)."""
        pairs = list(grads_and_vars)
        if not pairs:   # (an empty list: tf_keras' no-op, before the build and the learning rate)
            return self.iterations
        known = self.__dict__.get("_known_ids")
        if known is None:
            with_grad = [p[1] for p in pairs   # (malformed pairs: ``Optimizer``'s TypeError)
                         if isinstance(p, (tuple, list)) and len(p) == 2 and p[0] is not None
                         and isinstance(p[1], Variable)]
            if with_grad:   # (all None: ``Optimizer``'s ValueError, nothing built)
                self._known_ids = {v._id for v in with_grad}
                self._built_variables = tuple(with_grad)
        else:
            try:   # (the steady step: one set lookup per pair)
                unknown = [v for g, v in pairs if g is not None and v._id not in known and isinstance(v, Variable)]
            except (TypeError, ValueError, AttributeError):   # (malformed pairs: ``Optimizer``'s TypeError)
                unknown = []
            if unknown:
                raise KeyError(
                    f"The optimizer cannot recognize variable {unknown[0].name}. This usually means you are "
                    "trying to call the optimizer to update different parts of the model separately. Please "
                    "call `optimizer.build(variables)` with the full list of trainable variables before the "
                    "training loop or use legacy optimizer "
                    f"`tf.keras.optimizers.legacy.{type(self).__name__}.")
        return super()._apply_gradients(pairs, guard)   # pyright: ignore[reportAttributeAccessIssue]

    def _create_slots_now(self, new):
        super()._create_slots_now(new)   # pyright: ignore[reportAttributeAccessIssue]  (``Optimizer``'s)
        for hook in tuple(BUILD_HOOKS):
            hook(self)

    # -- the average slot (``Optimizer``'s leading-slot hooks) --------------------------------
    def _leading_slots(self):
        return ("average",) if self.use_ema else ()

    def _leading_slot_init(self, slot_name, var):
        return jnp.array(var._value, copy=True)   # (its value now: before this first update)

    def _after_rule(self, c, new, leading):
        """tf_keras' ``_update_model_variables_moving_average`` (``ema_momentum`` and ``1 -
        ema_momentum`` rounded from Python floats), then the overwrite every N iterations."""
        (average,) = leading
        m = float(self.ema_momentum)
        average = jnp.asarray(m, new.dtype) * average + jnp.asarray(1 - m, new.dtype) * new
        freq = self.ema_overwrite_frequency
        if freq:
            new = jnp.where((c["iterations"] + 1) % freq == 0, average, new)
        return new, (average,)

    def finalize_variable_values(self, var_list):
        """With ``use_ema``, assign each Variable its moving average (tf_keras' end of ``fit``)."""
        if not self.use_ema:
            return None
        if not self._slots:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute "
                                 "'_model_variables_moving_average' (no update has run: the averages are made "
                                 "by the first apply_gradients)")
        averages = []
        for var in var_list:
            slots = self._slots.get(getattr(var, "_id", None))
            if slots is None or "average" not in slots:
                raise KeyError(f"{getattr(var, 'name', var)!r}: the optimizer keeps no moving average of this "
                               "variable (it never updated it)")
            averages.append(slots["average"])
        for var, average in zip(var_list, averages):
            var.assign(average)
        return None

    # -- weight decay ------------------------------------------------------------------
    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """Leave ``var_list`` and the Variables whose name matches one of ``var_names`` (regular
        expressions, ``re.search``) out of ``weight_decay``; only before the first update."""
        if self._slots:
            raise ValueError("`exclude_from_weight_decay()` can only be configued before the optimizer is built.")
        self._exclude_ids = {v._id for v in var_list} if var_list else set()
        self._exclude_names = list(var_names or [])
        updates = self.__dict__.get("_updates")
        if updates is not None:
            updates.clear()

    def _use_weight_decay(self, var) -> bool:
        if var._id in getattr(self, "_exclude_ids", ()):
            return False
        # (a Keras 3 variable's name is its attribute, ``gamma``: its path, ``model/LayerNorm/gamma``,
        # holds the layer's name that tf_keras' ``LayerNorm/gamma:0`` holds)
        names = (var.name, getattr(var, "path", None) or "")
        return not any(re.search(n, s) is not None for n in getattr(self, "_exclude_names", ()) for s in names)

    def _var_flags(self, var_list):
        if not getattr(self, "_exclude_ids", None) and not getattr(self, "_exclude_names", None):
            return None
        return tuple({} if self._use_weight_decay(v) else {NO_DECAY: True} for v in var_list)


__all__ = ["BUILD_HOOKS", "NO_DECAY", "NewOptimizerState", "check_ema"]
