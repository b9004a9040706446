"""Compile settings: ``tf.config.run_functions_eagerly`` and JAX's persistent compilation cache.

``run_functions_eagerly``: for debugging, as TF: while on, calling a ``tapejax.function`` runs its
Python function directly (no trace, no compile, no AutoGraph; ``print`` and breakpoints see
concrete values each call), and tracing counts do not change.  The switch is global (all
threads), as TF's.

``set_compilation_cache(directory)`` (or ``TAPEJAX_COMPILATION_CACHE=directory`` in the
environment, read at ``import tapejax``): every XLA program tapejax compiles (a
``tapejax.function``'s step, an eager step's gradient and predicted programs, an optimizer's
update, the ops' own programs) is written to JAX's persistent compilation cache in
``directory`` and read back by the next process that compiles the same program, so a second run
of a script skips XLA's compile (tracing still runs: it is Python).  AutoGraph's conversions
are kept beside the programs (``autograph_cache``: ``directory/tapejax-autograph``), so that
process does not convert its functions again either.  It is JAX's own cache
(``jax_compilation_cache_dir``) with its thresholds lowered so that small programs are kept too
(``jax_persistent_cache_min_compile_time_secs = 0``: JAX's default keeps only programs that took
a second to compile, which misses every program of a small model).  As JAX warns, the
directory is trusted: do not share it with users you do not trust.  ``None`` turns it off and
puts JAX's thresholds back.
"""
from __future__ import annotations

import os
import threading
from typing import Optional, Union

import jax
from jax.experimental.compilation_cache import compilation_cache as _jax_cache

_LOCK = threading.Lock()


class _Flags:
    __slots__ = ("eager", "cache_dir", "saved")

    def __init__(self):
        self.eager = False
        self.cache_dir: Optional[str] = None
        self.saved: Optional[tuple] = None   # JAX's thresholds before the cache was turned on


FLAGS = _Flags()


def run_functions_eagerly(run_eagerly: bool) -> None:
    """``tf.config.run_functions_eagerly``: ``True`` makes every ``tapejax.function`` call run its
    Python body eagerly; ``False`` compiles again."""
    with _LOCK:   # (TF takes any value by its truth, as here)
        FLAGS.eager = bool(run_eagerly)


def functions_run_eagerly() -> bool:
    """``tf.config.functions_run_eagerly``: whether ``run_functions_eagerly(True)`` is in effect."""
    return FLAGS.eager


#: The environment variable ``import tapejax`` reads (a directory: the cache is on).
CACHE_ENV = "TAPEJAX_COMPILATION_CACHE"

_THRESHOLDS = ("jax_persistent_cache_min_compile_time_secs", "jax_persistent_cache_min_entry_size_bytes")


def set_compilation_cache(directory: Union[str, "os.PathLike[str]", None]) -> None:
    """Keep every compiled XLA program in ``directory`` (created if missing) and reuse them across
    processes (JAX's persistent compilation cache; see the module docstring); ``None`` turns it
    off.  Takes effect for the next compile, also after programs were compiled."""
    if directory is not None and not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"set_compilation_cache(): `directory` must be a path (str or os.PathLike) or None; "
                        f"got {directory!r} of type {type(directory).__name__}")
    path = None if directory is None else os.path.abspath(os.fspath(directory))
    if path == "" or (path is not None and os.path.exists(path) and not os.path.isdir(path)):
        raise ValueError(f"set_compilation_cache(): `directory` must be a directory; got {directory!r}")
    with _LOCK:
        if path is not None:
            os.makedirs(path, exist_ok=True)
            if FLAGS.saved is None:
                FLAGS.saved = tuple(getattr(jax.config, name) for name in _THRESHOLDS)
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
            jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)   # (-1: no size limit)
        elif FLAGS.saved is not None:
            for name, value in zip(_THRESHOLDS, FLAGS.saved):
                jax.config.update(name, value)
            FLAGS.saved = None
        jax.config.update("jax_compilation_cache_dir", path)
        _jax_cache.reset_cache()   # JAX decides once whether its cache is used: decide again
        FLAGS.cache_dir = path


def get_compilation_cache() -> Optional[str]:
    """The directory ``set_compilation_cache`` (or ``TAPEJAX_COMPILATION_CACHE``) set, or None."""
    return FLAGS.cache_dir


def _from_environment() -> None:
    value = os.environ.get(CACHE_ENV, "").strip()
    if value:
        set_compilation_cache(value)


_from_environment()

__all__ = ["CACHE_ENV", "functions_run_eagerly", "get_compilation_cache", "run_functions_eagerly",
           "set_compilation_cache"]
