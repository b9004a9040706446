"""``tapejax.keras``: ``tf.keras`` for tapejax: real Keras 3 on the JAX backend, each call on the tape.

``tapejax.keras.optimizers`` is ``tapejax.optimizers`` (tapejax's Keras-2
optimizers: ``optimizers.X`` with tf_keras' new update rules, ``optimizers.legacy.X``
the ``OptimizerV2`` classes and rules).  Every other name is Keras 3's, loaded on first access
(``_setup.load``: the JAX backend is selected before Keras is imported;
ImportError naming the ``keras`` extra when Keras is missing, or when it is
already imported with another backend):

* ``layers``, ``Sequential``, ``Model``, ``Input``, ``initializers``,
  ``regularizers``, ``constraints``, ``callbacks``, ``models`` ... are Keras's
  own modules and classes; a top-level call of any layer or model is one tape
  op (``calls``), and Keras variables are tapejax Variables (``variables``);
* ``losses``, ``activations``, ``ops``, ``metrics`` and ``utils`` are Keras's
  modules whose functions are tape ops on tapejax Tensors (``namespace``).

See README.md in this directory for the design.
"""
import os
from typing import Any

from .. import optimizers
from . import _setup

# tapejax selects Keras's JAX backend before anything imports Keras (``import tapejax`` then
# ``import keras`` gives Keras on JAX); an explicit KERAS_BACKEND is left alone (``_setup.load``
# then refuses another backend with a clear ImportError).
if not os.environ.get("KERAS_BACKEND") and "keras" not in __import__("sys").modules:
    os.environ["KERAS_BACKEND"] = "jax"
# (a user's ``import keras`` then installs the integration at once: ``_setup.watch_import``)
_setup.watch_import()

#: Keras modules whose functions are put on the tape (``namespace.KerasNamespace``).
_WRAPPED = ("losses", "activations", "ops", "metrics", "utils")
#: Keras modules completed with tf.keras names (``namespace._LEGACY``), their functions as they are.
_COMPLETED = ("mixed_precision", "backend")

#: This package's own modules (imported by name, never looked up as Keras names).
_SUBMODULES = frozenset({"call_hooks", "calls", "control", "data_adapter", "directory_datasets", "gathers", "grouping",
                         "hooks", "keys", "legacy_backend", "namespace", "optimizer_state", "output_rules", "output_spec",
                         "resizing", "rnn_cell", "rnn_states", "tf_backed", "tfsm_layer", "timeseries", "trainer",
                         "variables"})

#: Keras's names, loaded by ``__getattr__`` on first access (any other Keras name works too).
KERAS_NAMES = ("layers", "Sequential", "Model", "Input", "Layer", "Variable", "losses", "metrics", "activations",
               "initializers", "regularizers", "constraints", "utils", "ops", "callbacks", "models", "backend",
               "config", "random", "mixed_precision", "saving")

__all__ = ["optimizers"]


def __getattr__(name: str) -> Any:
    if name.startswith("_") or name in _SUBMODULES:   # (the import system probes these)
        raise AttributeError(f"module 'tapejax.keras' has no attribute {name!r}")
    from ._setup import load
    keras = load()
    if name in _WRAPPED or name in _COMPLETED:
        from .namespace import KerasNamespace
        value = KerasNamespace(f"{__name__}.{name}", getattr(keras, name), name, wrap=name in _WRAPPED and name != "utils")
    else:
        try:
            value = getattr(keras, name)
        except AttributeError:
            raise AttributeError(f"module 'tapejax.keras' has no attribute {name!r} (Keras "
                                 f"{keras.__version__} has none either)") from None
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(KERAS_NAMES) | set(globals()))
