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

``compile(optimizer=tf.keras.optimizers.Adam(...))``, TF's most common spelling, takes
tapejax's own (tf_keras') optimizers too: Keras's ``compile`` runs without an optimizer and
the model keeps the user's object (``model.optimizer is opt``; under a ``mixed_float16``
policy wrapped in tf_keras' ``LossScaleOptimizer``, as tf_keras' ``compile`` does).  ``fit``
then runs TF's default step as a stateful step (``_tf_train_step``: a ``GradientTape``
around the forward pass and ``compute_loss``, the loss tracker, ``optimizer.minimize``,
``compute_metrics``), and Keras's JAX trainer sees no optimizer variables (its state
round-trip, sharding specs and build skip them; the optimizer's slots are made when Keras
builds the model).  A JAX-style ``train_step(self, state, data)`` needs a Keras 3
optimizer (its ``stateless_apply``): a clear TypeError.  ``model.save`` keeps the optimizer's
config in the compile config (``_get_compile_config``), and ``load_model`` compiles a new one of
it (``_compile_from_config``); its step count and slots travel in the weights file
(``optimizer_state``).  ``model.summary()``
hides it too (tf_keras' summary lists no optimizer variables).  With such an optimizer ``fit`` and
``train_on_batch`` also keep tf_keras' rule that ``compile`` fixes what trains
(``RespectCompiledTrainableState``): a layer's ``trainable`` changed after ``compile`` is set back
to its compile-time value while they run, and restored after.  Their logs are tf_keras' too: what
the last step returned (``_metrics_result_or_logs``), where Keras 3 puts the metrics' results in
place of a step's ``{"loss": loss}`` (the loss tracker's 0 when the step never updated it).

A TF-style ``train_step`` written for tf_keras (the Keras 2 guide) calls ``self.compiled_loss(y,
y_pred, regularization_losses=self.losses)`` and ``self.compiled_metrics.update_state(y, y_pred)``:
tf_keras' meaning here (``_compiled_loss``: the compiled loss, the regularization losses passed,
the ``loss`` tracker updated; ``_CompiledMetrics``: the compiled metrics alone), where Keras's JAX
trainer has neither.

With a Keras 3 optimizer (``compile(optimizer="adam")``) Keras's stateless steps run as Keras's
JAX trainer compiles them (``_keyed_step``), except that a layer drawing from TF's global random
stream (``tf.random.normal`` with no seed in ``call``; Keras refuses such draws in a traced step)
makes the step take the global generator's key and return the advanced key, so that each step
draws new values, as TF's stateful random ops do under ``fit``.

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

__all__ = ["build_optimizer_slots", "install", "tf_style"]

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
# tf_keras' compiled_loss / compiled_metrics (the Keras 2 "customizing fit" guide's train_step)
# ---------------------------------------------------------------------------

def _compiled_loss(self, y, y_pred, sample_weight=None, regularization_losses=None):
    """tf_keras' ``model.compiled_loss(y, y_pred, sample_weight, regularization_losses)``: the loss
    ``compile`` was given plus the ``regularization_losses`` passed (the guide passes
    ``self.losses``; none when not passed, as tf_keras), and the ``loss`` tracker updated with the
    total, weighted by the batch size (Keras's TensorFlow trainer keeps a shim adding
    ``model.losses`` always)."""
    import numpy as np
    from keras.src import tree
    extra = list(regularization_losses or []) or [np.zeros((), np.float32)]   # (an empty override is none)
    prev = self._losses_override
    self._losses_override = extra
    try:
        loss = self.compute_loss(x=None, y=y, y_pred=y_pred, sample_weight=sample_weight)
    finally:
        self._losses_override = prev
    if self._loss_tracker is not None:
        batch = next(i for i in tree.flatten(y_pred) if i is not None)
        self._loss_tracker.update_state(loss, sample_weight=int(batch.shape[0]))
    return loss


class _CompiledMetrics:
    """tf_keras' ``model.compiled_metrics``: ``update_state`` updates the metrics ``compile`` was
    given (not the loss tracker); ``metrics``, ``reset_state``, ``result``."""

    def __init__(self, model):
        self._model = model

    @property
    def metrics(self):
        compiled = self._model._compile_metrics
        return [] if compiled is None else list(compiled.metrics)

    def update_state(self, y_true, y_pred, sample_weight=None):
        compiled = self._model._compile_metrics
        if compiled is not None:
            if not compiled.built:   # (its metrics, whose Variables the update op threads, are made here)
                compiled.build(y_true, y_pred)
            compiled.update_state(y_true, y_pred, sample_weight)

    def reset_state(self):
        for m in self.metrics:
            m.reset_state()

    def result(self):
        compiled = self._model._compile_metrics
        return {} if compiled is None else compiled.result()


def _compiled_metrics(self):
    return _CompiledMetrics(self)


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
        object.__setattr__(model, "_tapejax_step_logs", logs)   # (``_metrics_result_or_logs``)
        return logs, tuple([] for _ in groups)

    return step_function


def _metrics_result_or_logs(self, logs):
    """The epoch's (``fit``) or the evaluation's logs.  Keras 3 puts the model's metric results in
    place of the last step's logs when their keys are the same, so a TF-style step that returns
    ``{"loss": loss}`` without updating the loss tracker logs the tracker's 0; tf_keras logs what
    the last step returned.  A model compiled with a tapejax (tf_keras) optimizer keeps tf_keras'
    rule for the logs of its stateful steps; a Keras 3 optimizer keeps Keras 3's."""
    if logs is not None and logs is self.__dict__.get("_tapejax_step_logs") and _tapejax_optimizer(self):
        return logs
    return _ORIG["_get_metrics_result_or_logs"](self, logs)


def _tapejax_optimizer(model) -> bool:
    """Does ``model`` train with one of tapejax's (tf_keras') optimizers (``compile``)?"""
    from ..optimizers import Optimizer as TapejaxOptimizer  # (tf_keras' LossScaleOptimizer is one too)
    return isinstance(getattr(model, "optimizer", None), TapejaxOptimizer)


def _tf_train_step(model, data):
    """TF's default ``train_step`` (Keras's TensorFlow trainer, tf_keras' ``Model.train_step``) for
    a model compiled with one of tapejax's optimizers."""
    from keras.src import tree
    from keras.src.trainers.data_adapters import data_adapter_utils

    from ..autodiff.tape import GradientTape
    x, y, sample_weight = data_adapter_utils.unpack_x_y_sample_weight(data)
    with GradientTape() as tape:
        y_pred = model(x, training=True) if model._call_has_training_arg else model(x)
        loss = model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
    batch = next(i for i in tree.flatten(x) if i is not None)
    model._loss_tracker.update_state(loss, sample_weight=int(batch.shape[0]))
    if model.trainable_weights:
        model.optimizer.minimize(loss, model.trainable_weights, tape=tape)
    return model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)


def _make_train_function(self, force=False):
    if self.train_function is not None and not force:
        return self.train_function
    if tf_style(self.train_step):
        step = self.train_step
    elif _tapejax_optimizer(self):
        from keras.src.backend.jax.trainer import JAXTrainer
        if getattr(type(self).train_step, "__code__", None) is not JAXTrainer.train_step.__code__:
            raise TypeError(
                f"{type(self).__name__}.train_step(self, state, data) is Keras 3's stateless form, which "
                f"updates through a Keras 3 optimizer; this model is compiled with {self.optimizer!r}, one of "
                "tapejax's (tf_keras') optimizers: write train_step(self, data) with a GradientTape (TF's "
                "form), or compile with a Keras 3 optimizer (keras.optimizers.Adam(...)).")
        def step(data):
            return _tf_train_step(self, data)
    elif _keyed_steps(self):
        self.train_function = self._make_function(_keyed_step(self, self.train_step))
        return self.train_function
    else:
        return _ORIG["make_train_function"](self, force)
    self.train_function = _stateful_function(self, step, "train")
    return self.train_function


def _make_test_function(self, force=False):
    if self.test_function is not None and not force:
        return self.test_function
    if not tf_style(self.test_step):
        if not _keyed_steps(self):
            return _ORIG["make_test_function"](self, force)
        self.test_function = self._make_function(_keyed_step(self, self.test_step))
        return self.test_function
    self.test_function = _stateful_function(self, self.test_step, "test")
    return self.test_function


def _make_predict_function(self, force=False):
    if self.predict_function is not None and not force:
        return self.predict_function
    if not _keyed_steps(self):
        return _ORIG["make_predict_function"](self, force)

    def predict_step(state, data):
        outputs, non_trainable_variables = self.predict_step(state, data)
        return outputs, (state[0], non_trainable_variables)

    self.predict_function = self._make_function(_keyed_step(self, predict_step), concatenate_outputs=True)
    return self.predict_function


# -- TF's global random stream inside Keras's stateless steps ------------------------------------

def _keyed_steps(model) -> bool:
    """Can Keras's stateless steps of ``model`` run as ``_keyed_step`` (no distribution, whose
    output shardings Keras's own functions set; no NNX)?"""
    from keras.src import distribution as distribution_lib
    from keras.src.backend.config import is_nnx_enabled
    return distribution_lib.distribution() is None and not is_nnx_enabled()


def _keyed_step(model, step_fn: Callable[..., Any]) -> Callable[..., Any]:
    """Keras's stateless ``step_fn(state, data)`` as Keras's JAX trainer compiles it (``jax.jit``,
    the state donated), unless a layer draws from TF's global random stream (``tf.random.normal``
    with no seed in a layer's ``call``: ``DrawInTrace`` while the step traces, before anything
    ran): the step is then compiled with the global generator's key as an argument (drawn from in
    ``random.state_scope``) and the advanced key as a result, which the step stores back, so
    each step draws new values as TF's stateful ops do.  Keras's own ``SeedGenerator`` draws are
    state Keras threads itself."""
    import jax

    from ..ops.random import DrawInTrace, get_global_generator, state_scope
    compiled = not model.run_eagerly and model.jit_compile

    def with_key(state, key, data):
        with state_scope(key) as scope:
            out = step_fn(state, data)
        return out, scope.key

    plain = jax.jit(step_fn, donate_argnums=0) if compiled else step_fn
    keyed: Any = None

    def step(state, data):
        nonlocal keyed
        if keyed is None:
            try:
                return plain(state, data)
            except DrawInTrace:
                keyed = jax.jit(with_key, donate_argnums=0) if compiled else with_key
        gen = get_global_generator()
        out, gen._key = keyed(state, gen._key, data)
        return out

    return step


def _compile(self, optimizer="rmsprop", *args, **kwargs):
    from ..optimizers import Optimizer as TapejaxOptimizer
    from ..optimizers.loss_scale import BaseLossScaleOptimizer
    if not isinstance(optimizer, TapejaxOptimizer):
        return _ORIG["compile"](self, optimizer, *args, **kwargs)
    out = _ORIG["compile"](self, None, *args, **kwargs)
    object.__setattr__(self, "_tapejax_compiled_optimizer", optimizer)   # (``_get_compile_config``)
    auto_scale = kwargs.get("auto_scale_loss", True)
    if (auto_scale and self.dtype_policy.name == "mixed_float16"
            and not isinstance(optimizer, BaseLossScaleOptimizer)):
        optimizer = BaseLossScaleOptimizer(optimizer)   # (tf_keras' compile wraps it too; V3 for a new one)
    self.optimizer = optimizer
    object.__setattr__(self, "_tapejax_compiled_trainable", _trainable_state(self))
    return out


# -- tf_keras' ``RespectCompiledTrainableState``: ``fit`` trains what was trainable at ``compile`` --

def _trainable_state(model) -> Any:
    """Each layer's ``trainable``, by layer (tf_keras' ``_get_trainable_state``)."""
    import weakref
    state: Any = weakref.WeakKeyDictionary()
    for layer in model._flatten_layers():
        state[layer] = layer.trainable
    return state


def _set_trainable_state(model, state) -> None:
    for layer in model._flatten_layers():   # (parents first: a parent's setter sets its layers, then theirs)
        if layer in state:
            layer.trainable = state[layer]


def _respecting_compiled_trainable(name: str) -> Callable[..., Any]:
    """``fit`` / ``train_on_batch`` of a model compiled with a tapejax (tf_keras) optimizer run with
    each layer's ``trainable`` as it was at ``compile`` (tf_keras' ``RespectCompiledTrainableState``:
    the guide's "call compile() again" after changing it), and put the values back after.  Keras 3's
    own optimizers keep Keras 3's rule (none)."""
    orig = _ORIG[name]

    def method(self, *args, **kwargs):
        compiled = self.__dict__.get("_tapejax_compiled_trainable")
        if compiled is None or not _tapejax_optimizer(self):
            return orig(self, *args, **kwargs)
        current = _trainable_state(self)
        changed = any(layer in current and current[layer] != t for layer, t in compiled.items())
        if changed:
            _set_trainable_state(self, compiled)
        try:
            return orig(self, *args, **kwargs)
        finally:
            if changed:
                _set_trainable_state(self, current)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = orig.__doc__
    return method


#: The key of a tapejax optimizer's config in a saved compile config (``_compile_from_config``).
_SAVED = "tapejax_optimizer"


def _get_compile_config(self):
    """Keras's compile config, with the tapejax optimizer ``compile`` was given as its config of
    this moment (its learning rate now, as tf_keras saves it); its state is in the weights file."""
    config = _ORIG["get_compile_config"](self)
    given = self.__dict__.get("_tapejax_compiled_optimizer")
    if config and given is not None and _tapejax_optimizer(self):
        from ..optimizers import serialize
        config["optimizer"] = {_SAVED: serialize(given)}
    return config


def _compile_from_config(self, config):
    """A model saved after ``compile(optimizer=<tapejax optimizer>)`` compiles again at load time
    with a new optimizer of that config (Keras's own would build ``None``)."""
    opt = config.get("optimizer") if isinstance(config, dict) else None
    if not (isinstance(opt, dict) and _SAVED in opt):
        return _ORIG["compile_from_config"](self, config)
    from keras.src.saving import serialization_lib

    from ..optimizers import deserialize
    rest = serialization_lib.deserialize_keras_object({k: v for k, v in config.items() if k != "optimizer"})
    self.compile(optimizer=deserialize(opt[_SAVED]), **rest)
    if self.built:
        build_optimizer_slots(self, self.optimizer)


def build_optimizer_slots(model, opt) -> None:
    """``opt``'s step counter and slots for ``model``'s trainable variables, now (Keras builds its
    own optimizer when it builds the model; a slot made inside the compiled step would trace it
    twice)."""
    _ = opt.iterations   # (a legacy optimizer makes it on its first update otherwise)
    # (the slots only: a new optimizer's ``build`` would also fix the Variables it may update, which
    # tf_keras' fit leaves to the first update: a model whose step builds more gets them too; one
    # built already gets none for Variables it does not know, which its update refuses)
    inner = getattr(opt, "inner_optimizer", opt)
    known = inner.__dict__.get("_known_ids")
    inner._create_slots([v for v in model.trainable_variables if known is None or v._id in known])


class _OptimizerHidden:
    """Keras's JAX trainer sees no optimizer while it runs (a tapejax optimizer's Variables are
    tapejax's: TF's ``value()`` method, not Keras's ``value`` property)."""

    def __init__(self, model):
        self.model = model
        self.opt = model.__dict__.get("optimizer") if _tapejax_optimizer(model) else None

    def __enter__(self):
        if self.opt is not None:
            object.__setattr__(self.model, "optimizer", None)   # (past Keras's attribute tracking)
        return self.opt

    def __exit__(self, *exc):
        if self.opt is not None:
            object.__setattr__(self.model, "optimizer", self.opt)


def _get_jax_state(self, trainable_variables=False, non_trainable_variables=False, optimizer_variables=False,
                   metrics_variables=False, purge_model_variables=False):
    with _OptimizerHidden(self) as opt:
        state = _ORIG["_get_jax_state"](self, trainable_variables, non_trainable_variables,
                                        optimizer_variables and opt is None, metrics_variables, purge_model_variables)
    if optimizer_variables and opt is not None:   # (its place in the state, empty)
        at = int(bool(trainable_variables)) + int(bool(non_trainable_variables))
        state = (*state[:at], [], *state[at:])
    return state


def _summary(self, *args, **kwargs):
    """``model.summary()`` as tf_keras prints it: no optimizer line (Keras 3 counts a built Keras 3
    optimizer's variables; a legacy tapejax optimizer's ``variables`` is a method)."""
    with _OptimizerHidden(self):
        return _ORIG["summary"](self, *args, **kwargs)


def _get_state_sharding_spec(self):
    with _OptimizerHidden(self):
        return _ORIG["_get_state_sharding_spec"](self)


def _symbolic_build(self, *args, **kwargs):
    with _OptimizerHidden(self) as opt:
        try:
            out = _ORIG["_symbolic_build"](self, *args, **kwargs)
        except RuntimeError as e:
            # A model with TF-style steps that cannot be built symbolically (a GAN wrapper with
            # no ``call``): TF's trainer builds nothing before its step runs, so neither does this
            if not (_tf_style_steps(self) and "Unable to automatically build the model" in str(e)):
                raise
            out = None
    if opt is not None:   # its slots now, as Keras builds its own optimizer here
        build_optimizer_slots(self, opt)
    return out


def _tf_style_steps(model: Any) -> bool:
    """Whether the model has TF-style steps of its own (which build what they use when they run)."""
    return tf_style(model.train_step) or tf_style(model.test_step)


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
    _ORIG["make_predict_function"] = JAXTrainer.make_predict_function
    setattr(Trainer, "compute_loss", _compute_loss)
    setattr(JAXTrainer, "compiled_loss", _compiled_loss)   # (Keras's TensorFlow trainer has its own shims)
    setattr(JAXTrainer, "compiled_metrics", property(_compiled_metrics))
    setattr(JAXTrainer, "make_train_function", _make_train_function)
    setattr(JAXTrainer, "make_test_function", _make_test_function)
    setattr(JAXTrainer, "make_predict_function", _make_predict_function)
    for name in ("fit", "train_on_batch"):
        _ORIG[name] = getattr(JAXTrainer, name)
        setattr(JAXTrainer, name, _respecting_compiled_trainable(name))
    for name, fn in (("_get_jax_state", _get_jax_state), ("_get_state_sharding_spec", _get_state_sharding_spec)):
        _ORIG[name] = getattr(JAXTrainer, name)
        setattr(JAXTrainer, name, fn)
    for name, fn in (("_symbolic_build", _symbolic_build), ("compile_from_config", _compile_from_config),
                     ("get_compile_config", _get_compile_config),
                     ("_get_metrics_result_or_logs", _metrics_result_or_logs)):
        _ORIG[name] = getattr(Trainer, name)
        setattr(Trainer, name, fn)
    from keras.src.models.model import Model  # (summary is Model's)
    _ORIG["summary"] = Model.summary
    setattr(Model, "summary", _summary)
