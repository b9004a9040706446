"""The smaller hooks: metric results and masks as Tensors, seeds from ``tf.random.set_seed``, checkpoints.

* ``Metric.result()`` (every Keras metric class, present and future) gives
  tapejax Tensors outside a Keras scope, as ``tf.keras`` metrics give
  ``tf.Tensor`` s (``.numpy()`` works); ``update_state`` on tapejax Tensors
  is one compiled op (``calls.call_stateful`` over the metric's variables)
  instead of Keras's op-by-op eager update; inside a Keras scope (Keras's
  ``fit``) both are Keras's, except that a result which is the metric's variable itself is its
  value there (TF reads it; JAX takes no variable among a traced step's outputs).
  ``Metric.reset_states`` is tf_keras' alias of ``reset_state``, and ``Model.reset_states``
  tf_keras' reset of the model's stateful layers (Keras 3 dropped both).
* A built-in layer's ``compute_mask`` (``Embedding(mask_zero=True)``, ``Masking``) gives a
  tapejax Tensor outside a Keras scope, as tf_keras' gives a ``tf.Tensor``.
* A Keras ``SeedGenerator`` made without a seed (``Dropout(0.5)``) takes its
  seed from Python's ``random`` (Keras); after ``tf.random.set_seed(s)`` it
  takes it from a stream keyed by ``s`` instead, restarted by every
  ``set_seed``, so random layers built after it are reproducible as in TF.
* ``tapejax.train.Checkpoint(model=model, optimizer=opt)``: Keras layers,
  models, optimizers and metrics are trackable objects whose variables are
  keyed by their Keras paths (``model/sequential/dense/kernel``)
  (``train.trackable.register_trackable``).  A restore into a layer or model not built yet
  (TF's deferred restoration) is applied at the end of each layer's ``build``
  (``Layer._post_build``), so the first call already reads the saved weights.
* A Keras 3 optimizer applying gradients outside a Keras scope (a tape loop's
  ``apply_gradients``) runs Keras's backend-agnostic ``_backend_apply_gradients``, the one TF's
  Keras 3 runs, not the JAX backend's (``jax.lax.cond`` on the step's predicate, ``.astype`` on
  it: both fail on tapejax Tensors).  Outside a Keras scope, Keras's internal ``ops.cond`` (the
  optimizers', ``LossScaleOptimizer``'s) runs one branch on a concrete predicate, as TF's eager
  cond does, and is tapejax's ``cond`` (``control``) on a tapejax one, eager or traced
  (``jax.lax.cond`` traced both branches, so both branches' variable assigns ran).  With
  ``gradient_accumulation_steps``, ``optimizer.iterations`` (the update count) is a tapejax
  Tensor there, as TF's is a ``tf.Tensor``, and ``LossScaleOptimizer.scale_loss`` of a Tensor is
  a tape op (Keras's ``ops.multiply`` gave a JAX array: no gradient).  So gradient accumulation,
  EMA with ``ema_overwrite_frequency`` and the mixed precision guide's loss-scaled loop step as
  TF's do, eagerly and in ``tapejax.function``.  Inside a Keras scope (``fit``'s stateless step)
  all of these are Keras's JAX ones.
"""
from __future__ import annotations

import functools
import os
import re
from typing import Any, Optional

import jax
import jax.core
import numpy as np

from ..core import state as _state
from ..core.tensor import Tensor
from ..core.variable import Variable
from . import calls as _calls, keys as _keys, variables as _kvars

__all__ = ["install", "keras_children"]

_Tracer = jax.core.Tracer


def _as_tensor(x):
    if isinstance(x, jax.Array) and (not isinstance(x, _Tracer) or _state._local.collector is not None):
        return Tensor(x)
    return x


def _is_keras_variable(x) -> bool:
    return isinstance(x, _kvars.KerasVariable)


def _scope_value(x):
    return x.value if isinstance(x, _kvars.KerasVariable) else x


def tensor_result(fn):
    """``Metric.result`` giving Tensors outside a Keras scope."""
    if getattr(fn, "_tapejax_result", False):
        return fn

    @functools.wraps(fn)
    def result(self, *args, **kwargs):
        out = fn(self, *args, **kwargs)
        if _kvars.in_keras_scope():   # (a result that is a variable: its scope's value, as TF reads one)
            mapped = jax.tree_util.tree_map(_scope_value, out, is_leaf=_is_keras_variable)
        else:
            mapped = jax.tree_util.tree_map(_as_tensor, out)
        # (a dict of results, ``compile_metrics``', keeps its order: JAX's tree_map sorts the keys)
        return {k: mapped[k] for k in out} if type(out) is dict else mapped

    setattr(result, "_tapejax_result", True)
    return result


class _UpdateCaller:
    """``caller`` of a metric's update op: the class's own ``update_state`` (one per class, compared
    by identity in op keys)."""

    __slots__ = ("fn", "__weakref__")

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, metric, args, kwargs):
        return self.fn(metric, *args, **kwargs)


def _metric_state(metric) -> _keys.State:
    return _keys.State([], list(metric.variables))


def one_op_update(fn):
    """``Metric.update_state`` on tapejax Tensors outside a Keras scope: one compiled op whose
    variable updates are written back (Keras's own runs op by op eagerly, ~ a dispatch per op)."""
    if getattr(fn, "_tapejax_update", False):
        return fn
    caller = _UpdateCaller(fn)

    @functools.wraps(fn)
    def update_state(self, *args, **kwargs):
        if _kvars.in_keras_scope() or not _keys.has_tensor(args, kwargs):
            return fn(self, *args, **kwargs)
        return _calls.call_stateful(self, args, kwargs, caller, _metric_state,
                                    f"{type(self).__name__}.update_state")

    setattr(update_state, "_tapejax_update", True)
    return update_state


def _wrap_result(cls) -> None:
    fn = cls.__dict__.get("result")
    if fn is not None and callable(fn):
        setattr(cls, "result", tensor_result(fn))
    fn = cls.__dict__.get("update_state")
    if fn is not None and callable(fn):
        setattr(cls, "update_state", one_op_update(fn))


def _install_metrics() -> None:
    from keras.src.metrics.metric import Metric
    todo = [Metric]
    seen = set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        _wrap_result(cls)
        todo.extend(cls.__subclasses__())
    previous = Metric.__dict__.get("__init_subclass__")

    def __init_subclass__(cls, **kwargs):
        if previous is not None:
            previous.__func__(cls, **kwargs)
        else:
            super(Metric, cls).__init_subclass__(**kwargs)
        _wrap_result(cls)

    Metric.__init_subclass__ = classmethod(__init_subclass__)   # pyright: ignore[reportAttributeAccessIssue]
    if not hasattr(Metric, "reset_states"):
        Metric.reset_states = _reset_states   # pyright: ignore[reportAttributeAccessIssue]


def _reset_states(self) -> None:
    """tf_keras' ``Metric.reset_states``, its older name of ``reset_state`` (Keras 3 dropped it; the
    custom-loop guides of TF 2 call it at every epoch end)."""
    self.reset_state()


def _model_reset_states(self) -> None:
    """tf_keras' ``Model.reset_states``: ``reset_states()`` of each of the model's layers that is
    stateful (a ``stateful=True`` RNN; the stateful-LSTM tutorials call it between epochs)."""
    for layer in self.layers:
        if hasattr(layer, "reset_states") and getattr(layer, "stateful", False):
            layer.reset_states()


def _install_model_reset_states() -> None:
    from keras.src.models.model import Model
    if not hasattr(Model, "reset_states"):
        Model.reset_states = _model_reset_states   # pyright: ignore[reportAttributeAccessIssue]


def _install_seeds() -> None:
    from keras.src.random import seed_generator

    from ..ops.random import get_global_generator
    keras_default = seed_generator.make_default_seed
    gen = get_global_generator()

    def make_default_seed():
        with gen._lock:
            seed = gen.global_seed
            if seed is None:
                return keras_default()
            n = gen._op_counts.get(("keras", seed), 0)   # restarted by set_seed, as the op seeds
            gen._op_counts[("keras", seed)] = n + 1
        return int(np.random.default_rng([seed & 0xFFFFFFFF, n]).integers(1, int(1e9)))

    seed_generator.make_default_seed = make_default_seed


def keras_children(obj: Any) -> list:
    """(path, variable) for what ``tapejax.train.Checkpoint`` saves of a Keras object: a layer's
    or model's variables (and a compiled model's optimizer) by the attribute paths Keras's own
    weights files use (``layers/dense/vars/0``: attribute names and class names, never the
    auto-generated layer names, so another process building the same model finds them), an
    optimizer's or a metric's variables in order (``vars/3``)."""
    from keras.src.metrics.metric import Metric
    from keras.src.optimizers.base_optimizer import BaseOptimizer
    if isinstance(obj, (BaseOptimizer, Metric)):
        return [(f"vars/{i}", v) for i, v in enumerate(obj.variables)]
    out: list = []
    _walk(obj, "", out, set())
    return out


def _join(path, name):
    return f"{path}/{name}" if path else str(name)


def _walk(saveable, path, out, visited):
    """Keras's ``saving_lib._save_state`` walk, collecting variables instead of writing them."""
    from keras.src.optimizers.base_optimizer import BaseOptimizer
    from keras.src.saving import saving_lib
    from keras.src.saving.keras_saveable import KerasSaveable
    if id(saveable) in visited:
        return
    visited.add(id(saveable))
    if isinstance(saveable, BaseOptimizer):
        own = {str(i): v for i, v in enumerate(saveable.variables)}
    elif hasattr(saveable, "save_own_variables"):
        own = {}
        saveable.save_own_variables(own)
    else:
        own = {}
    for k, v in own.items():
        if isinstance(v, Variable):
            out.append((_join(path, f"vars/{k}"), v))
    for attr, child in saving_lib._walk_saveable(saveable):
        if isinstance(child, KerasSaveable):
            _walk(child, _join(path, attr), out, visited)
        elif isinstance(child, (list, dict, tuple)):
            _walk_container(child, _join(path, attr), out, visited)


def _walk_container(container, path, out, visited):
    from keras.src.saving import saving_lib
    from keras.src.saving.keras_saveable import KerasSaveable
    from keras.src.utils import naming
    used: dict = {}
    for child in (container.values() if isinstance(container, dict) else container):
        if isinstance(child, KerasSaveable):
            name = saving_lib._get_unique_name(naming.to_snake_case(type(child).__name__), used)
            _walk(child, _join(path, name), out, visited)


def _is_keras_object(obj: Any) -> bool:
    from keras.src.layers.layer import Layer
    from keras.src.metrics.metric import Metric
    from keras.src.optimizers.base_optimizer import BaseOptimizer
    return isinstance(obj, (Layer, BaseOptimizer, Metric))


_TF_KERAS_LAYER = re.compile(r"layer(_with_weights)?-(\d+)")


def tf_keras_lookup(obj: Any, name: str) -> Any:
    """A layer's, model's or optimizer's child by the names of a checkpoint TF wrote of the same
    tf_keras model (``tf.train.Checkpoint(model=...)``, TF-format ``save_weights``):
    ``layer_with_weights-N``, the N-th of the model's layers that have weights (TF counts no
    others, so the Input layers Keras 3 leaves out of ``layers`` do not shift it), and the
    attributes that hold something a checkpoint holds (a layer's ``kernel``, ``moving_mean``,
    ``embeddings``, an RNN's ``cell``, a wrapper's ``forward_layer``; a compiled model's
    ``optimizer``; an optimizer's ``_iterations``, ``_learning_rate`` and state lists such as
    ``_momentums``, matched by position): Keras 3 keeps tf_keras' names.  A weightless
    ``layer-N`` holds nothing to restore (None)."""
    from ..train import trackable
    match = _TF_KERAS_LAYER.fullmatch(name)
    if match is not None:
        layers = getattr(obj, "layers", None) if match.group(1) else None
        if not isinstance(layers, list):
            return None
        with_weights = [layer for layer in layers if layer.weights]
        i = int(match.group(2))
        return with_weights[i] if i < len(with_weights) else None
    if name.startswith("__"):
        return None
    try:
        value = getattr(obj, name, None)
    except Exception:  # noqa: BLE001 - a property that needs a built layer: nothing to restore yet
        return None
    if trackable.is_trackable(value) or (isinstance(value, list) and trackable.holds_trackable(value)):
        return value
    return None


def _sweep_after_build(build):
    """A Keras optimizer's ``build``, then the waits of a restore swept: a checkpoint's state for
    it (matched by position in its lists) is in place before its first update reads it."""
    @functools.wraps(build)
    def wrapped(self, *args, **kwargs):
        out = build(self, *args, **kwargs)
        from ..train import restore
        if restore.waiting():
            restore.sweep()
        return out

    setattr(wrapped, "_tapejax_on_tape", True)
    return wrapped


def _sweep_after_layer_build(post_build):
    """A Keras layer's ``_post_build`` (the end of its ``build``, however it was called: its first
    call, ``model.build(shape)``, a parent's build), then the waits of a restore swept: a checkpoint
    restored into the layer before it was built (TF's deferred restoration) gives the variables
    ``build`` made their saved values before anything reads them.  Keras variables are not made by
    ``tapejax.Variable.__init__``, so ``core.variable.CREATION_HOOKS`` never sees them; and the
    whole build must be done first (a layer's checkpoint keys, ``vars/N``, are positions in its
    variable lists).  Inside a Keras scope (a sublayer built by a symbolic or stateless call: its
    variables are initialized when the scope ends) and while a ``tapejax.function`` traces (it
    announces the variables it made when its trace ends, which sweeps) the sweep waits: the
    outermost build, or ``calls.call_stateful`` after a first call's plan, sweeps then."""
    @functools.wraps(post_build)
    def wrapped(self, *args, **kwargs):
        out = post_build(self, *args, **kwargs)
        _kvars.sweep_restore()
        return out

    setattr(wrapped, "_tapejax_on_tape", True)
    return wrapped


def _install_checkpoint() -> None:
    """Keras layers, models, optimizers and metrics as checkpoint trackables (``train.trackable``'s
    protocol): their children are their variables, by Keras's own weights-file paths; a layer
    also answers tf_keras' names (``tf_keras_lookup``), so TF's checkpoints of the same model
    restore into it."""
    from keras.src.layers.layer import Layer
    from keras.src.metrics.metric import Metric
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    from ..train import trackable
    for cls in (Layer, BaseOptimizer):
        trackable.register_trackable(cls, children=keras_children, lookup=tf_keras_lookup)
    trackable.register_trackable(Metric, children=keras_children)
    post_build = Layer._post_build
    if not getattr(post_build, "_tapejax_on_tape", False):
        Layer._post_build = _sweep_after_layer_build(post_build)   # pyright: ignore[reportAttributeAccessIssue]
    todo, seen = [BaseOptimizer], set()
    while todo:   # (every optimizer class's own build: Adam's builds its lists, then calls its base's)
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        build = cls.__dict__.get("build")
        if callable(build) and not getattr(build, "_tapejax_on_tape", False):
            setattr(cls, "build", _sweep_after_build(build))
        todo.extend(cls.__subclasses__())


def _install_optimizer_apply() -> None:
    """Outside a Keras scope: ``JaxOptimizer._backend_apply_gradients`` is ``BaseOptimizer``'s, the
    JAX backend's ``cond`` is eager or tapejax's, an accumulating optimizer's ``iterations`` and
    ``LossScaleOptimizer.scale_loss`` give tapejax Tensors (all idempotent)."""
    from keras.src import ops
    from keras.src.backend.jax import core as jax_core
    from keras.src.backend.jax.optimizer import JaxOptimizer
    from keras.src.optimizers.base_optimizer import BaseOptimizer
    from keras.src.optimizers.loss_scale_optimizer import LossScaleOptimizer

    from .control import CONTROL
    theirs_apply = JaxOptimizer._backend_apply_gradients
    if not getattr(theirs_apply, "_tapejax_on_tape", False):
        @functools.wraps(theirs_apply)
        def _backend_apply_gradients(self, grads, trainable_variables):
            if _kvars.in_keras_scope():
                return theirs_apply(self, grads, trainable_variables)
            return BaseOptimizer._backend_apply_gradients(self, grads, trainable_variables)
        setattr(_backend_apply_gradients, "_tapejax_on_tape", True)
        JaxOptimizer._backend_apply_gradients = _backend_apply_gradients

    theirs_cond = jax_core.cond
    if not getattr(theirs_cond, "_tapejax_on_tape", False):
        @functools.wraps(theirs_cond)
        def cond(pred, true_fn, false_fn):
            if not _kvars.in_keras_scope():
                if isinstance(pred, jax.Array) and not isinstance(pred, _Tracer):
                    return true_fn() if bool(pred) else false_fn()   # (TF's eager cond: one branch runs)
                pred = _as_tensor(pred)   # (a value of tapejax.function's trace)
                if isinstance(pred, Tensor):
                    return CONTROL["cond"](pred, true_fn, false_fn)
            return theirs_cond(pred, true_fn, false_fn)
        setattr(cond, "_tapejax_on_tape", True)
        jax_core.cond = cond

    theirs_scale = LossScaleOptimizer.scale_loss
    if not getattr(theirs_scale, "_tapejax_on_tape", False):
        @functools.wraps(theirs_scale)
        def scale_loss(self, loss):
            if isinstance(loss, Tensor) and not _kvars.in_keras_scope():   # (Keras's multiply as a tape op)
                scale = self.dynamic_scale if self.built else self.initial_scale
                return _calls.call_function(ops.multiply, (loss, scale), {})
            return theirs_scale(self, loss)
        setattr(scale_loss, "_tapejax_on_tape", True)
        LossScaleOptimizer.scale_loss = scale_loss

    theirs_iterations = BaseOptimizer.__dict__["iterations"]
    if not getattr(theirs_iterations.fget, "_tapejax_on_tape", False):
        def iterations(self):
            steps = self.gradient_accumulation_steps
            if steps and not _kvars.in_keras_scope():
                return self._iterations // steps   # (tapejax's floordiv on the Keras variable)
            return theirs_iterations.fget(self)
        setattr(iterations, "_tapejax_on_tape", True)
        setattr(BaseOptimizer, "iterations", property(iterations, doc=theirs_iterations.__doc__))


_KERAS_FILES = (".keras", ".h5", ".json")   # Keras's own weights and model files (and sharded weights' index)


def _install_weights_files() -> None:
    """tf_keras' TF-format weights: ``model.save_weights(prefix)`` (a path that is not a Keras
    file) writes a checkpoint with the model as its root and records it in the directory's
    ``checkpoint`` file (``tf.train.latest_checkpoint`` finds it), as tf_keras' ``save_weights``
    does (Keras 3 raises ValueError there); ``model.load_weights(prefix)`` of such a checkpoint, or
    of one TF wrote (matched by tf_keras' names, ``tf_keras_lookup``), restores the model and
    returns the load status, as tf_keras does.  Keras's own files save and load as before.  So
    ``ModelCheckpoint(prefix, save_weights_only=True)`` (TF's "Save and load models" tutorial's
    ``training_1/cp.ckpt``) writes such a checkpoint each time, where Keras 3's refuses any path
    but ``.weights.h5``."""
    from keras.src.models.model import Model
    theirs_load, theirs_save = Model.load_weights, Model.save_weights
    if getattr(theirs_load, "_tapejax_on_tape", False):
        return

    def tf_format(filepath: Any) -> Optional[str]:
        path = os.fspath(filepath) if isinstance(filepath, (str, os.PathLike)) else None
        return None if path is None or path.endswith(_KERAS_FILES) else path

    @functools.wraps(theirs_load)
    def load_weights(self, filepath, *args, **kwargs):
        path = tf_format(filepath)
        if path is not None:
            from ..train.checkpoint import Checkpoint
            from ..train.storage import checkpoint_exists
            if checkpoint_exists(path):
                if args or kwargs.get("skip_mismatch") or kwargs.get("by_name"):
                    raise NotImplementedError("Weights may only be loaded based on topology into Models when "
                                              "loading TensorFlow-formatted weights (got by_name=True or "
                                              "skip_mismatch=True to load_weights).")
                return Checkpoint(root=self).read(path)
        return theirs_load(self, filepath, *args, **kwargs)

    @functools.wraps(theirs_save)
    def save_weights(self, filepath, overwrite=True, *args, **kwargs):
        path = tf_format(filepath)
        if path is None or args or kwargs:
            return theirs_save(self, filepath, overwrite, *args, **kwargs)
        from keras.src.utils import io_utils

        from ..train.checkpoint import Checkpoint
        from ..train.state_file import update_checkpoint_state
        from ..train.storage import checkpoint_exists
        if not overwrite and checkpoint_exists(path) and not io_utils.ask_to_proceed_with_overwrite(path):
            return None
        Checkpoint(root=self).write(path)
        update_checkpoint_state(os.path.dirname(path) or ".", path, [path])
        return None

    from keras.src.callbacks.model_checkpoint import ModelCheckpoint
    theirs_init = ModelCheckpoint.__init__

    @functools.wraps(theirs_init)
    def checkpoint_init(self, filepath, *args, **kwargs):
        weights_only = kwargs.get("save_weights_only", len(args) > 3 and args[3])
        path = tf_format(filepath) if weights_only else None
        theirs_init(self, filepath if path is None else path + ".weights.h5", *args, **kwargs)
        if path is not None:
            self.filepath = path   # (its save_weights is the one above)

    for fn in (load_weights, save_weights):
        setattr(fn, "_tapejax_on_tape", True)
    Model.load_weights = load_weights   # pyright: ignore[reportAttributeAccessIssue]
    Model.save_weights = save_weights   # pyright: ignore[reportAttributeAccessIssue]
    ModelCheckpoint.__init__ = checkpoint_init


def _tensor_mask(fn):
    """``compute_mask`` giving Tensors outside a Keras scope (tf_keras' gives ``tf.Tensor`` s; Keras
    3's built-in layers compute theirs by ``keras.ops``: JAX arrays, with no ``.numpy()``)."""
    @functools.wraps(fn)
    def compute_mask(self, *args, **kwargs):
        out = fn(self, *args, **kwargs)
        return out if _kvars.in_keras_scope() else jax.tree_util.tree_map(_as_tensor, out)

    return compute_mask


def _install_masks() -> None:
    """Every Keras layer class's own ``compute_mask`` wrapped by ``_tensor_mask`` (a user's layer
    made later computes its mask by tapejax ops, which give Tensors already)."""
    from keras.src.layers.layer import Layer
    todo, seen = [Layer], set()
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        fn = cls.__dict__.get("compute_mask")
        if callable(fn):
            setattr(cls, "compute_mask", _tensor_mask(fn))
        todo.extend(cls.__subclasses__())


_DONE: list = []


def install() -> None:
    if _DONE:
        return
    _install_metrics()
    _install_model_reset_states()
    _install_masks()
    _install_seeds()
    _install_checkpoint()
    _install_weights_files()
    _install_optimizer_apply()
    _DONE.append(True)
