"""``fit`` / ``evaluate`` with a TF-style ``train_step(self, data)``, and ``compute_loss`` on the tape.

Keras 3's JAX trainer accepts only a stateless ``train_step(self, state,
data)``.  TensorFlow's "customizing what happens in fit" guide writes it with
state: a ``GradientTape``, ``self(x, training=True)``, ``self.compute_loss``,
``self.optimizer.apply_gradients``, metric updates.  Here a model whose
``train_step`` (or ``test_step``) takes one argument gets a train (test)
function that runs that method as a stateful step:
``tapejax.function(model.train_step)`` (one XLA program per batch shape:
Keras variables, optimizer and metric state are threaded and donated by
``tapejax.function``), or the plain method when ``run_eagerly=True``.
Keras's ``fit`` loop is unchanged: it hands the step the variables' values
(``_get_jax_state``, after emptying the variables) and expects the state
back; the step puts the values back into the variables first, and returns
empty state, so ``fit``'s later syncs leave the variables, which hold the
truth, alone.

``Trainer.compute_loss`` (Keras's default, which sums the compiled loss and
``model.losses``) is one tape op when called on tapejax Tensors outside a
Keras scope: Keras's own function, in a ``StatelessScope`` mapping the
metrics' variables (its loss trackers update), with ``model.losses`` (read
outside, on the tape) as inputs.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

from . import calls as _calls, keys as _keys, variables as _kvars

__all__ = ["install", "tf_style"]

_ORIG: dict = {}


def tf_style(method: Callable[..., Any]) -> bool:
    """Does this bound ``train_step``/``test_step`` take one argument (``data``), TF's form?"""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 1 and not any(p.kind is p.VAR_POSITIONAL for p in params)


# ---------------------------------------------------------------------------
# compute_loss on the tape
# ---------------------------------------------------------------------------

def _metrics_state(model) -> _keys.State:
    return _keys.State([], list(model.metrics_variables))


def _compute_loss_caller(model, args, kwargs):
    extra = kwargs.pop("_tapejax_losses")
    prev = model._losses_override
    model._losses_override = list(extra)
    try:
        return _ORIG["compute_loss"](model, *args, **kwargs)
    finally:
        model._losses_override = prev


def _compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
    if _kvars.in_keras_scope() or not _keys.has_tensor((x, y, y_pred, sample_weight), {}):
        return _ORIG["compute_loss"](self, x, y, y_pred, sample_weight, training)
    losses = self._losses_override or self.losses   # on the tape: read here, inputs of the op
    return _calls.call_stateful(
        self, (x, y, y_pred, sample_weight), {"training": training, "_tapejax_losses": list(losses)},
        _compute_loss_caller, _metrics_state, f"{type(self).__name__}.compute_loss")


# ---------------------------------------------------------------------------
# TF-style train_step / test_step under fit / evaluate
# ---------------------------------------------------------------------------

_GROUPS = {
    "train": ("trainable_variables", "non_trainable_variables", "optimizer_variables", "metrics_variables"),
    "test": ("trainable_variables", "non_trainable_variables", "metrics_variables"),
}


def _group(model, name):
    if name == "optimizer_variables":
        return list(model.optimizer.variables)
    return list(getattr(model, name))


def _put_back(model, state, groups) -> None:
    """The values ``fit`` took out of the variables (``_get_jax_state``) go back into them."""
    for name, values in zip(groups, state):
        if not values:
            continue
        for v, x in zip(_group(model, name), values):
            if v._val is not x:
                v._value = x


def _stateful_function(model, method, kind: str):
    groups = _GROUPS[kind]
    if model.run_eagerly or not model.jit_compile:
        step = method
    else:
        from ..compile.function import function
        step = function(method)

    def step_function(state, iterator):
        _put_back(model, state, groups)
        logs = step(next(iterator))
        for _ in range(model.steps_per_execution - 1):
            try:
                data = next(iterator)
            except StopIteration:
                break
            logs = step(data)
        return logs, tuple([] for _ in groups)

    return step_function


def _make_train_function(self, force=False):
    if self.train_function is not None and not force:
        return self.train_function
    if not tf_style(self.train_step):
        return _ORIG["make_train_function"](self, force)
    self.train_function = _stateful_function(self, self.train_step, "train")
    return self.train_function


def _make_test_function(self, force=False):
    if self.test_function is not None and not force:
        return self.test_function
    if not tf_style(self.test_step):
        return _ORIG["make_test_function"](self, force)
    self.test_function = _stateful_function(self, self.test_step, "test")
    return self.test_function


def _compile(self, optimizer="rmsprop", *args, **kwargs):
    from ..optimizers import Optimizer as TapejaxOptimizer
    if isinstance(optimizer, TapejaxOptimizer):
        raise ValueError(
            f"model.compile: `optimizer` must be a Keras 3 optimizer ('adam', keras.optimizers.Adam(...)); "
            f"got {optimizer!r}, one of tapejax.keras.optimizers, tapejax's Keras-2 optimizers for "
            "GradientTape loops (use it in a custom train_step or training loop instead).")
    return _ORIG["compile"](self, optimizer, *args, **kwargs)


def install() -> None:
    from keras.src.backend.jax.trainer import JAXTrainer
    from keras.src.trainers.trainer import Trainer
    if _ORIG:
        return
    _ORIG["compile"] = Trainer.compile
    setattr(Trainer, "compile", _compile)
    _ORIG["compute_loss"] = Trainer.compute_loss
    _ORIG["make_train_function"] = JAXTrainer.make_train_function
    _ORIG["make_test_function"] = JAXTrainer.make_test_function
    setattr(Trainer, "compute_loss", _compute_loss)
    setattr(JAXTrainer, "make_train_function", _make_train_function)
    setattr(JAXTrainer, "make_test_function", _make_test_function)
