"""tf_keras' rules for the hyperparameters an optimizer keeps in Variables (its ``_set_hyper``
and ``_get_hyper``): the ``HyperParameters`` mixin of ``Optimizer``.

Each name in the class's ``_HYPERS`` is a float32 Variable that the compiled update takes as an
input, so a change needs no recompile.  What a hyperparameter can be given as:

* a number or a Tensor: its value, assigned to the hyperparameter's own Variable (made on first
  set);
* a scalar Variable, before the first update: that Variable itself, followed (the user's
  ``assign`` changes the next update; ``opt.momentum = x`` assigns it, as tf_keras'
  ``backend.set_value``); after the first update, its value, as tf_keras;
* a callable: called now and before every update (once per trace in a compiled step).

The learning rate follows the same rules (``_lr_now``): a zero-argument callable or a schedule
of the user's (a ``LearningRateSchedule`` subclass) is called before every eager update, with
the optimizer's ``iterations`` (the legacy optimizers: cast to float32, as tf_keras'
``_decayed_lr``), so it may read Variables and Python state as TF's does; its value is an input
of the compiled update.  A built-in schedule or an optax schedule, pure functions of the step,
runs inside the compiled update instead.
"""
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..core.tensor import Tensor
from ..core.variable import Variable
from . import schedules as _schedules
from ._args import _scalar_float, _takes_step


def _per_update(sched: Any) -> bool:
    """Whether the learning-rate callable ``sched`` is called before each eager update (its
    value an input of the compiled update) rather than inside the compiled update: a
    zero-argument callable or a user's ``LearningRateSchedule`` may read Python state and
    Variables, which a compiled update would freeze; the built-in schedules and optax's are
    pure functions of the step."""
    if isinstance(sched, _schedules.LearningRateSchedule):
        return type(sched).__module__ != _schedules.__name__
    return not _takes_step(sched)


class HyperParameters:
    """The ``_HYPERS`` machinery of ``Optimizer`` (the module docstring).  The optimizer's
    ``__init__`` sets ``_hyper``, ``_hyper_py``, ``_hyper_user``, ``_hyper_fn`` and ``_hv``."""

    _HYPERS: tuple[str, ...] = ()
    #: A schedule called before an eager update is given ``iterations`` cast to float32 (the
    #: legacy optimizers' ``_decayed_lr``); the new optimizers give the Variable itself.
    _SCHEDULE_STEP_FLOAT = True
    _name: str
    _hyper: dict
    _hyper_py: dict
    _hyper_user: set
    _hyper_fn: dict
    _hv: Any
    _lr_sched: Any
    _lr_var: Any
    iterations: Any

    def _set_hyper(self, name, value):
        """Set a ``_HYPERS`` hyperparameter, as tf_keras' ``_set_hyper``:

        * a scalar Variable given before the first update is followed: it becomes the
          hyperparameter, so the user's ``assign`` changes the next update;
        * a callable is called now and at every update (its value assigned to the
          hyperparameter's Variable, inside a compiled step when it is traced, as TF);
        * anything else (a number, a Tensor, a Variable given after the first update) is a
          value: assigned to the hyperparameter's Variable (the user's, when it follows one:
          ``opt.momentum = 0.5`` assigns it, as tf_keras' ``backend.set_value``), made on first
          set."""
        fn = None
        if callable(value) and not isinstance(value, (Tensor, Variable, type)):
            fn, value = value, value()
        var = self._hyper.get(name)
        if isinstance(value, (Tensor, Variable)):
            if tuple(value.shape) != ():
                raise ValueError(f"Argument `{name}` must be a scalar; received: {name} of shape "
                                 f"{tuple(value.shape)}")
            if not (value.dtype.is_floating or value.dtype.is_integer):
                raise TypeError(f"Argument `{name}` must be a float; received: {name}={value!r}")
            if (fn is None and isinstance(value, Variable) and value is not var
                    and (var is None or (name not in self._hyper_user and self.__dict__.get("_iterations") is None))):
                self._hyper[name] = value
                self._hyper_user.add(name)
                self._hyper_fn.pop(name, None)
                self._hyper_py[name] = None
                object.__setattr__(self, "_hv", None)
                return
            new = jnp.asarray(value._value, jnp.float32)
            py = None
        else:
            py = _scalar_float(name, value)
            new = np.float32(py)
        if fn is not None and name in self._hyper_user:   # (a callable never writes the user's Variable)
            var = None
            self._hyper_user.discard(name)
            object.__setattr__(self, "_hv", None)
        if var is None:
            with jax.ensure_compile_time_eval():
                self._hyper[name] = Variable(new, trainable=False, name=f"{self._name}/{name}")
        else:
            var.assign(jnp.asarray(new, var._meta.dtype))
        if fn is None:
            self._hyper_fn.pop(name, None)
        else:
            self._hyper_fn[name] = fn
        self._hyper_py[name] = py

    def _call_hypers(self) -> None:
        """Assign each callable hyperparameter's value now (before an update reads them)."""
        for name, fn in self._hyper_fn.items():
            value = fn()
            var = self._hyper[name]
            value = value._value if isinstance(value, (Tensor, Variable)) else _scalar_float(name, value)
            var.assign(jnp.asarray(value, var._meta.dtype))

    def _lr_now(self):
        """The learning rate an eager update takes as input: the learning-rate Variable's value;
        a per-update callable's or schedule's value now (``_per_update``; TF calls them at every
        update); None where the compiled update computes it from the step (a built-in or optax
        schedule).  A Python number equal to the last one gives the same array (an unchanged
        input lets the deferred executor use a predicted update)."""
        sched = self._lr_sched
        if sched is None:
            lr_var = self._lr_var
            return None if lr_var is None else lr_var._value
        if not _per_update(sched):
            return None
        if _takes_step(sched):
            it = self.iterations
            value = sched(Tensor(jnp.asarray(it._value, jnp.float32)) if self._SCHEDULE_STEP_FLOAT else it)
        else:
            value = sched()
        if isinstance(value, (Tensor, Variable)):
            return jnp.asarray(value._value, jnp.float32)
        py = _scalar_float("learning_rate", value)
        last = self.__dict__.get("_lr_last")
        if last is not None and last[0] == py:
            return last[1]
        arr = np.float32(py)
        object.__setattr__(self, "_lr_last", (py, arr))
        return arr

    def _hyper_value(self, name):
        """A hyperparameter's value for ``get_config``: a callable's value now; a followed
        Variable's value (a NumPy scalar, as tf_keras); the number last set while the Variable
        still holds it, else the Variable's value (Python floats)."""
        fn = self._hyper_fn.get(name)
        if fn is not None:
            value = fn()
            return float(np.asarray(value.numpy() if isinstance(value, (Tensor, Variable)) else value))
        if name in self._hyper_user:   # (tf_keras: the Variable's value, a NumPy scalar)
            return self._hyper[name].numpy()
        now = self._hyper[name].numpy().item()
        py = self._hyper_py.get(name)
        return py if py is not None and np.float32(py) == np.float32(now) else now

    def _update_hypers(self) -> tuple[str, ...]:
        """The ``_HYPERS`` the update reads (all of them; SGD and RMSprop without momentum
        leave ``momentum`` out, as tf_keras does)."""
        return self._HYPERS

    def _hyper_vars(self):
        hv = self._hv
        if hv is None:
            hv = self._hv = tuple(self._hyper[n] for n in self._update_hypers())
        return hv
