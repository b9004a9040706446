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
``tf.random.set_seed`` (``hooks``), Keras's own ``keras.ops``, ``activations``,
``losses`` and ``metrics`` functions on the tape (``namespace.install_public``).

A user's own ``import keras`` after ``import tapejax`` (TF 2.16+'s idiom, beside
``import tensorflow as tf``) runs ``load()`` too, as soon as Keras's module has run:
``watch_import`` puts a finder on ``sys.meta_path`` that wraps Keras's loader
(``_ThenLoad``), so every Keras variable is a tapejax Variable from the first.  It
loads only Keras on the JAX backend; with another backend it does nothing (the
first access to ``tapejax.keras`` then raises the ImportError above).  Where ``load()``
fails there (an old Keras, NNX variables), Keras still imports and a RuntimeWarning names
the cause.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import threading
import warnings
from types import ModuleType
from typing import Any, Optional, Sequence

__all__ = ["EXTRA_HINT", "load", "watch_import"]

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
        _unwatch()   # (its own import of Keras below needs no hook)
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
        from . import (
            call_hooks,
            data_adapter,
            hooks,
            namespace,
            optimizer_state,
            output_rules,
            resizing,
            rnn_cell,
            rnn_states,
            tfsm_layer,
            trainer,
            variables,
        )
        variables.install()
        call_hooks.install()
        trainer.install()
        output_rules.install()
        rnn_states.install()   # (after trainer's: it wraps the loops trainer set)
        hooks.install()
        data_adapter.install()
        optimizer_state.install()
        resizing.install()
        namespace.install_public(keras)
        tfsm_layer.install(keras)
        rnn_cell.install(keras)
        _KERAS = keras
        return keras


class _ThenLoad(importlib.abc.Loader):
    """Keras's own loader, then ``load()`` once Keras's module has run (on the JAX backend)."""

    def __init__(self, loader: Any):
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        backend = getattr(getattr(module, "backend", None), "backend", None)
        if callable(backend) and backend() == "jax":
            try:
                load()
            except ImportError as e:   # (an old Keras, NNX variables: Keras runs as on JAX alone)
                warnings.warn(f"import keras: tapejax could not put Keras on the tape ({e}); Keras runs as "
                              f"it does on JAX alone, and tapejax.keras raises this error", RuntimeWarning,
                              stacklevel=2)

    def __getattr__(self, name: str) -> Any:   # (resources, ``is_package`` ...: Keras's loader's)
        return getattr(self._loader, name)


class _KerasFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: hands the top-level ``keras`` module's spec on with ``_ThenLoad``."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != "keras":
            return None
        _unwatch()
        spec = importlib.util.find_spec("keras")   # (the other finders')
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenLoad(spec.loader)
        return spec


_FINDER = _KerasFinder()


def watch_import() -> None:
    """Load tapejax's Keras integration when the user imports Keras (``import tapejax`` calls
    this while Keras is not imported yet)."""
    if "keras" not in sys.modules and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def _unwatch() -> None:
    try:
        sys.meta_path.remove(_FINDER)
    except ValueError:
        pass
