"""``tapejax.keras.losses``, ``activations``, ``ops``, ``metrics``, ``utils``: Keras's modules, their
functions on the tape.

A Keras function (``keras.losses.sparse_categorical_crossentropy``,
``keras.activations.relu``, ``keras.ops.mean`` ...) called with a tapejax
Tensor or Variable outside a Keras scope runs as one tape op
(``calls.call_function``), so a loss written with them is differentiated; with
other arguments (JAX arrays, inside a layer's call) it is Keras's own function,
and with NumPy arrays too, its results given as Tensors as TF gives them.  Classes (``SparseCategoricalCrossentropy``, ``Mean``) are Keras's
classes unchanged: their calls are hooked on the base classes (``calls``,
``hooks``).  ``keras.ops.stop_gradient`` is tapejax's ``stop_gradient`` on
Tensors (the source is then unconnected: None, as in TF), its control flow (``cond``,
``while_loop`` ...) tapejax's (``control``), and
``keras.utils.set_random_seed`` also sets ``tapejax.random.set_seed``, as TF's
does; ``to_categorical`` takes TF's ``dtype`` (float32).  A name Keras 3 keeps only
in its tf.keras API (``keras._tf_keras.keras``, TF 2.21's own ``tf.keras``) is
found there: ``tf.keras.losses.mae`` / ``mse`` / ``MAE`` / ``kld``, ``tf.keras.metrics.mae``.

``install_public`` does the same to Keras's own public modules, in place, for programs that
``import keras`` (TF 2.16+'s idiom): ``keras.ops.mean(x)`` in a tape is then one op as
``tf.keras.ops.mean(x)`` is; the tf.keras-only names and dtypes above stay ``tapejax.keras``'s.
"""
from __future__ import annotations

import functools
import importlib
import inspect
from types import ModuleType
from typing import Any, Callable

import jax
import jax.core
import numpy as np
from keras.src.backend.common.keras_tensor import KerasTensor

from ..core.tensor import Tensor
from . import calls as _calls, control as _control, keys as _keys, legacy_backend, variables as _kvars

__all__ = ["PUBLIC", "KerasNamespace", "install_public", "on_tape"]

#: ``keras.ops`` functions that answer with Python values (shapes, dtypes, flags) or run user
#: callables in control flow: called as they are.
_PLAIN = frozenset({"shape", "ndim", "dtype", "is_tensor", "convert_to_numpy", "size", "result_type",
                    "cond", "switch", "while_loop", "fori_loop", "scan", "associative_scan", "map",
                    "vectorized_map", "custom_gradient", "is_int_dtype", "is_float_dtype"})


def on_tape(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` recorded as one tape op when called with a tapejax Tensor outside a Keras scope."""
    if getattr(fn, "_tapejax_on_tape", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _kvars.in_keras_scope():
            return fn(*args, **kwargs)
        if not _keys.has_tensor(args, kwargs):
            out = fn(*args, **kwargs)
            if _host_only(args, kwargs):   # NumPy in: a Tensor out, as TF's (``tf.keras.losses.mae(
                # model.predict(x), x)`` then ``.numpy()``); the values are Keras's own (constants)
                out = jax.tree_util.tree_map(lambda r: Tensor(r) if isinstance(r, jax.Array)
                                             and not isinstance(r, jax.core.Tracer) else r, out)
            return out
        return _calls.call_function(fn, args, kwargs)

    setattr(wrapper, "_tapejax_on_tape", True)
    return wrapper


def _host_only(args, kwargs) -> bool:
    """Whether the arguments hold NumPy arrays and no JAX array (raw JAX code keeps Keras's own
    results) nor Keras symbolic tensor."""
    leaves = jax.tree_util.tree_leaves((args, kwargs))
    return (any(isinstance(x, np.ndarray) for x in leaves)
            and not any(isinstance(x, (jax.Array, KerasTensor)) for x in leaves))


def _stop_gradient(keras_fn):
    if getattr(keras_fn, "_tapejax_on_tape", False):
        return keras_fn

    @functools.wraps(keras_fn)
    def stop_gradient(variable):
        if _kvars.in_keras_scope() or not _keys.has_tensor((variable,), {}):
            return keras_fn(variable)
        from ..autodiff.custom import stop_gradient as tj_stop_gradient
        return tj_stop_gradient(variable)
    setattr(stop_gradient, "_tapejax_on_tape", True)
    return stop_gradient


def _set_random_seed(keras_fn):
    if getattr(keras_fn, "_tapejax_on_tape", False):
        return keras_fn

    @functools.wraps(keras_fn)
    def set_random_seed(seed):
        keras_fn(seed)   # Python, NumPy and Keras's seeds (its own error for a bad seed)
        from ..ops.random import set_seed
        set_seed(seed)   # and tapejax's, as TF's tf.keras.utils.set_random_seed sets TF's
    setattr(set_random_seed, "_tapejax_on_tape", True)
    return set_random_seed


def _to_categorical(keras_fn):
    @functools.wraps(keras_fn)
    def to_categorical(x, num_classes=None, dtype="float32"):
        """Keras's ``to_categorical`` with TF's ``dtype`` argument (float32 by default, as
        ``tf.keras``; Keras 3 returns float64 for NumPy input)."""
        out = keras_fn(getattr(x, "_value", x), num_classes=num_classes)
        return np.asarray(out).astype(dtype)
    return to_categorical


_SPECIAL = {("ops", "stop_gradient"): _stop_gradient, ("utils", "set_random_seed"): _set_random_seed,
            ("utils", "to_categorical"): _to_categorical,
            ("ops", "custom_gradient"): _control.custom_gradient,
            **{("ops", name): functools.partial(_control.control, name) for name in _control.CONTROL}}


def _legacy_reduction():
    from keras.src.legacy.losses import Reduction  # Keras's own copy of tf.keras's class
    return Reduction


def _loss_scale_optimizer():
    """tf_keras' ``LossScaleOptimizer`` around tapejax's optimizers (``tapejax.optimizers.loss_scale``:
    ``get_scaled_loss`` / ``get_unscaled_gradients`` for a GradientTape loop); a Keras 3 optimizer
    (``model.compile``'s) gets Keras 3's own."""
    import keras

    from ..optimizers import loss_scale
    loss_scale.FOREIGN.setdefault(keras.optimizers.Optimizer, keras.optimizers.LossScaleOptimizer)
    return loss_scale.BaseLossScaleOptimizer


def _get_value(x):
    """``tf.keras.backend.get_value``: a Tensor's or Variable's value as NumPy (tapejax's or
    Keras's; a JAX array too); anything else as it is (a schedule, a float), as tf_keras."""
    if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
        return np.asarray(x)
    numpy = getattr(x, "numpy", None)
    return numpy() if callable(numpy) and hasattr(x, "dtype") else x


def _set_value(x, value):
    """``tf.keras.backend.set_value``: ``x.assign(value)``, the value cast to ``x``'s dtype first."""
    dtype = getattr(x.dtype, "name", x.dtype)   # (a tapejax DType, or Keras's string)
    x.assign(np.asarray(getattr(value, "_value", value), dtype=dtype))


def _int_shape(x):
    """``tf.keras.backend.int_shape``: the static shape as a tuple (``None`` for an unknown size)."""
    return tuple(x.shape.as_list()) if hasattr(x.shape, "as_list") else tuple(x.shape)


def _count_params(x):
    """``tf.keras.backend.count_params``: the number of entries (NumPy's product, as tf_keras)."""
    return np.prod(_int_shape(x))


def _timeseries_dataset_from_array():
    from .timeseries import timeseries_dataset_from_array
    return timeseries_dataset_from_array


def _directory_dataset(name: str) -> Callable[[], Any]:
    def get():
        from . import directory_datasets
        return getattr(directory_datasets, name)
    return get


def _legacy_random() -> "dict[str, Callable[..., Any]]":
    """``tf.keras.backend``'s random functions (Keras's TF-based legacy backend: the TF-era VAE's
    ``random_normal(shape=(batch, dim))``): tapejax's random ops in ``floatx`` by default.  With
    ``seed=None`` they draw from TF's global stream (Keras's draws a NumPy op seed per call, so a
    TF program's values depend on NumPy's state; neither is reproducible across systems)."""
    import keras

    from ..core import dtypes as _dtypes
    from ..ops import math as _math, random as _random_module
    _random: Any = _random_module   # (its parameters' defaults are ints; Keras passes floats)

    def random_normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None):
        return _random.normal(shape, mean, stddev, dtype or keras.backend.floatx(), seed=seed)

    def random_uniform(shape, minval=0.0, maxval=1.0, dtype=None, seed=None):
        return _random.uniform(shape, minval, maxval, dtype or keras.backend.floatx(), seed=seed)

    def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=None, seed=None):
        return _random.truncated_normal(shape, mean, stddev, dtype or keras.backend.floatx(), seed=seed)

    def random_bernoulli(shape, p=0.0, dtype=None, seed=None):
        dtype = _dtypes.as_dtype(dtype or keras.backend.floatx())
        u = _random.uniform(shape, dtype=dtype, seed=seed)
        return _math.cast(u <= p, dtype)

    def dropout(x, level, noise_shape=None, seed=None):
        from ..ops import nn as _nn
        return _nn.dropout(x, rate=level, noise_shape=noise_shape, seed=seed)

    return {f.__name__: f for f in (random_normal, random_uniform, truncated_normal, random_bernoulli, dropout)}


def _batch_get_value(tensors):
    return [_get_value(x) for x in tensors]


def _batch_set_value(tuples):
    for x, value in tuples:
        _set_value(x, value)


#: tf.keras names Keras 3 dropped from the module, or has with another API, kept as ``tf.keras``
#: has them: ``tf.keras.losses.Reduction`` (Keras's legacy copy; its ``AUTO`` is accepted by
#: every loss: ``call_hooks.install``); ``tf.keras.mixed_precision.LossScaleOptimizer`` (tf_keras');
#: ``tf.keras.backend.get_value`` / ``set_value`` (the callbacks guide's learning-rate scheduler;
#: Keras 3 keeps them only in its TensorFlow-based legacy backend) and their ``batch_`` forms;
#: ``backend.eval`` (``get_value``), ``int_shape`` and ``count_params`` likewise, and its random
#: functions (``random_normal``, ``random_uniform``, ``truncated_normal``, ``random_bernoulli``);
#: ``utils.timeseries_dataset_from_array`` as a ``tapejax.data.Dataset`` (Keras 3's is TF's own
#: ``tf.data``, which cannot ``map`` tapejax ops: ``timeseries.py``), and so are
#: ``utils.image_dataset_from_directory`` / ``text_dataset_from_directory`` / ``audio_dataset_from_directory``
#: (``directory_datasets.py``).
_LEGACY = {("losses", "Reduction"): _legacy_reduction,
           ("mixed_precision", "LossScaleOptimizer"): _loss_scale_optimizer,
           ("backend", "get_value"): lambda: _get_value, ("backend", "set_value"): lambda: _set_value,
           ("backend", "batch_get_value"): lambda: _batch_get_value, ("backend", "eval"): lambda: _get_value,
           ("backend", "int_shape"): lambda: _int_shape, ("backend", "count_params"): lambda: _count_params,
           ("backend", "batch_set_value"): lambda: _batch_set_value,
           **{("backend", n): (lambda n=n: _legacy_random()[n])
              for n in ("random_normal", "random_uniform", "truncated_normal", "random_bernoulli", "dropout")},
           ("utils", "timeseries_dataset_from_array"): _timeseries_dataset_from_array,
           ("utils", "image_dataset_from_directory"): _directory_dataset("image_dataset_from_directory"),
           ("utils", "text_dataset_from_directory"): _directory_dataset("text_dataset_from_directory"),
           ("utils", "audio_dataset_from_directory"): _directory_dataset("audio_dataset_from_directory")}

#: Namespaces whose missing names are not looked up in Keras's tf.keras API: its ``backend``'s
#: legacy functions are TensorFlow's.
_NO_TF_KERAS_NAMES = frozenset({"backend"})


def _tf_keras_name(module: ModuleType, attr: str) -> Any:
    """A name Keras 3 keeps only in its tf.keras API (``keras._tf_keras.keras``, which is TF 2.21's
    own ``tf.keras``): ``losses.mae`` / ``mse`` / ``MAE`` / ``kld`` / ``logcosh``, ``metrics.mae``
    ..., the aliases tf_keras had and the tutorials use (``tf.keras.losses.mae(reconstructions,
    data)``); AttributeError as Keras's module gives when neither has it."""
    name = module.__name__
    if name.startswith("keras.") and not name.startswith("keras._tf_keras."):
        try:
            tf_module = importlib.import_module("keras._tf_keras.keras." + name[len("keras."):])
        except ImportError:
            tf_module = None
        if tf_module is not None and hasattr(tf_module, attr):
            return getattr(tf_module, attr)
    raise AttributeError(f"module {name!r} has no attribute {attr!r}")


class KerasNamespace(ModuleType):
    """A Keras module whose functions are put on the tape (classes and submodules as they are,
    Keras namespaces below it wrapped too).  Attributes are resolved once and cached."""

    def __init__(self, name: str, module: ModuleType, kind: str, wrap: bool) -> None:
        super().__init__(name, module.__doc__)
        self._keras_module = module
        self._kind = kind
        self._wrap = wrap

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        legacy = _LEGACY.get((self._kind, attr))
        if legacy is not None:
            value = legacy()
        elif hasattr(self._keras_module, attr):
            value = getattr(self._keras_module, attr)
        elif self._kind == "backend" and attr in legacy_backend.names():
            value = legacy_backend.function(attr)   # (tapejax ops already: not wrapped again)
            setattr(self, attr, value)
            return value
        elif self._kind in _NO_TF_KERAS_NAMES:
            raise AttributeError(f"module {self._keras_module.__name__!r} has no attribute {attr!r}")
        else:
            value = _tf_keras_name(self._keras_module, attr)
        special = _SPECIAL.get((self._kind, attr))
        if special is not None and not getattr(value, "_tapejax_on_tape", False):
            value = special(value)
        elif isinstance(value, ModuleType) and value.__name__.startswith("keras."):
            value = KerasNamespace(f"{self.__name__}.{attr}", value, self._kind, self._wrap)
        elif (self._wrap and inspect.isfunction(value) and not attr.startswith("_")
              and not (self._kind == "ops" and attr in _PLAIN)):
            value = on_tape(value)
        setattr(self, attr, value)
        return value

    def __dir__(self):
        extra = legacy_backend.names() if self._kind == "backend" else frozenset()
        return sorted(set(dir(self._keras_module)) | {a for k, a in _LEGACY if k == self._kind} | extra)

    def __repr__(self):
        return f"<tapejax.keras namespace {self.__name__} over {self._keras_module.__name__}>"


#: Keras 3's own public modules whose functions ``install_public`` puts on the tape in place.
PUBLIC = ("ops", "activations", "losses", "metrics")


def install_public(keras: ModuleType) -> None:
    """Keras's own public modules on the tape, in place, as ``tapejax.keras``'s are: a TF 2.16+
    program (``import keras``) that writes ``keras.ops.mean(keras.ops.square(x))`` or
    ``keras.losses.mean_squared_error(y, p)`` in a tape is differentiated, as under TF's Keras 3
    (raw Keras on JAX would give a JAX array no tape records).  With JAX arrays, or inside a
    Keras layer's call, each function is Keras's own (``on_tape``); ``keras.utils.set_random_seed``
    also seeds tapejax.  Keras's internals use ``keras.src``'s modules and are untouched here
    (``hooks`` changes a few of them: its optimizer and ``cond`` hooks).  Idempotent."""
    for kind in PUBLIC:
        _in_place(getattr(keras, kind), kind)
    keras.utils.set_random_seed = _set_random_seed(keras.utils.set_random_seed)
    from keras.src import activations
    activations.get = keras.activations.get = _activation_get(activations.get, keras.activations)


def _activation_get(keras_get, public: ModuleType):
    """Keras's ``activations.get`` (what a layer's ``activation="relu"`` becomes) giving the public
    module's function on the tape for Keras's own, so that ``layer.activation`` *is*
    ``tf.keras.activations.relu``, as in tf_keras (guided backprop finds the ReLUs to replace by
    ``layer.activation == tf.keras.activations.relu``).  In a layer's call it is Keras's own."""
    if getattr(keras_get, "_tapejax_on_tape", False):
        return keras_get

    @functools.wraps(keras_get)
    def get(identifier):
        fn = keras_get(identifier)
        mine = getattr(public, getattr(fn, "__name__", ""), None)
        return mine if getattr(mine, "__wrapped__", None) is fn else fn
    setattr(get, "_tapejax_on_tape", True)
    return get


def _in_place(module: ModuleType, kind: str) -> None:
    for attr, value in list(vars(module).items()):
        if attr.startswith("_"):
            continue
        if isinstance(value, ModuleType):
            if value.__name__.startswith(module.__name__ + "."):   # (``keras.ops.nn`` ...)
                _in_place(value, kind)
        elif (kind, attr) in _SPECIAL:   # (``ops.stop_gradient`` and the control flow)
            setattr(module, attr, _SPECIAL[kind, attr](value))
        elif inspect.isfunction(value) and not (kind == "ops" and attr in _PLAIN):
            setattr(module, attr, on_tape(value))
