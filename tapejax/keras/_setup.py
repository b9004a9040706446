"""Loading Keras 3 on the JAX backend, once, and putting it on the tape.

``load()`` is what the first access to a Keras name of ``tapejax.keras``
runs.  Everything it checks is checked before anything changes (the
environment, Keras's classes):

* Keras missing, or a Keras older than 3: ImportError naming the ``keras``
  extra;
* ``KERAS_BACKEND`` set to another backend, Keras already imported with
  another backend, or Keras's NNX variables switched on: ImportError saying
  which and what to do;

then it sets ``KERAS_BACKEND=jax`` (when Keras is not imported yet), imports
Keras and installs the integration: Keras variables that are tapejax
Variables (``variables``), one tape op per top-level call (``calls``),
metric results as Tensors and TF-style ``train_step`` under ``fit``
(``trainer``), Keras models in ``tapejax.train.Checkpoint`` and seeds from
``tf.random.set_seed`` (``hooks``).
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
import threading
from types import ModuleType
from typing import Optional

__all__ = ["EXTRA_HINT", "load"]

EXTRA_HINT = "pip install 'tapejax[keras]'"
_MIN_VERSION = (3, 15)   # (the Keras internals used here are those of 3.15: CallSpec, StatelessScope)
_LOCK = threading.RLock()
_KERAS: Optional[ModuleType] = None


def _version(text: str) -> tuple:
    parts = []
    for p in text.split(".")[:2]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _check_loaded(keras: ModuleType) -> None:
    version = getattr(keras, "__version__", "0")
    if _version(version) < _MIN_VERSION:
        raise ImportError(f"tapejax.keras needs Keras 3 (>= {'.'.join(map(str, _MIN_VERSION))}); the "
                          f"installed keras is {version}. Install it with {EXTRA_HINT}.")
    backend = keras.backend.backend()
    if backend != "jax":
        raise ImportError(
            f"Keras is already imported with the {backend!r} backend; tapejax.keras runs Keras on JAX. "
            "Import tapejax.keras before anything imports keras (tapejax then selects the JAX "
            "backend), or set KERAS_BACKEND=jax.")
    from keras.src.backend import config
    if config.is_nnx_enabled():
        raise ImportError("tapejax.keras does not support Keras's NNX variables (KERAS_NNX_ENABLED): "
                          "unset it to use Keras models on the tape.")


def load() -> ModuleType:
    """Keras 3 on the JAX backend with tapejax's hooks installed (ImportError otherwise)."""
    global _KERAS
    if _KERAS is not None:
        return _KERAS
    with _LOCK:
        if _KERAS is not None:
            return _KERAS
        keras = sys.modules.get("keras")
        if keras is None:
            if importlib.util.find_spec("keras") is None:
                raise ImportError(f"tapejax.keras needs Keras 3, which is not installed: {EXTRA_HINT}")
            try:
                installed = importlib.metadata.version("keras")
            except importlib.metadata.PackageNotFoundError:   # (a source checkout on the path)
                installed = None
            if installed is not None and _version(installed) < _MIN_VERSION:
                raise ImportError(f"tapejax.keras needs Keras 3 (>= {'.'.join(map(str, _MIN_VERSION))}); "
                                  f"the installed keras is {installed}. Install it with {EXTRA_HINT}.")
            chosen = os.environ.get("KERAS_BACKEND")
            if chosen not in (None, "", "jax"):
                raise ImportError(
                    f"KERAS_BACKEND={chosen!r} is set, but tapejax.keras runs Keras on the JAX backend: "
                    "unset KERAS_BACKEND (tapejax selects 'jax') or set it to 'jax'.")
            if os.environ.get("KERAS_NNX_ENABLED", "").lower() in ("1", "true"):
                raise ImportError("tapejax.keras does not support Keras's NNX variables "
                                  "(KERAS_NNX_ENABLED): unset it to use Keras models on the tape.")
            os.environ["KERAS_BACKEND"] = "jax"
            keras = importlib.import_module("keras")
        _check_loaded(keras)
        from . import calls, data_adapter, hooks, optimizer_state, trainer, variables
        variables.install()
        calls.install()
        trainer.install()
        hooks.install()
        data_adapter.install()
        optimizer_state.install()
        _KERAS = keras
        return keras
