"""``tapejax.autograph`` (``tf.autograph``): AutoGraph's public API on diastatic-malt.

``tapejax.function`` converts the Python control flow of the functions it
traces (``autograph=True``, the default) with diastatic-malt, the standalone
fork of TF's AutoGraph (``pip install tapejax[autograph]``); this module is
the ``tf.autograph`` namespace around it:

* ``to_code(f)`` / ``to_graph(f)``: the converted source / function;
* ``experimental.do_not_convert``: a function AutoGraph calls as it is;
* ``experimental.set_loop_options(maximum_iterations=, shape_invariants=)``:
  a directive read by the converter from the loop it opens (malt's own
  function: the converter recognises it by identity);
* ``experimental.Feature``: optional conversions for
  ``tapejax.function(experimental_autograph_options=...)``
  (``EQUALITY_OPERATORS``, ``BUILTIN_FUNCTIONS``: ``print`` of tensors at run
  time, ``ASSERT_STATEMENTS``: ``assert`` on a tensor as a run-time check);
* ``set_verbosity``, ``trace``: as TF.

malt is imported on first use, so ``import tapejax`` does not need it; when it
is missing, ``tapejax.function`` traces functions as written and these raise
ImportError naming the extra.  The machinery: ``autograph_convert.py`` (the
transformer, recursive conversion, error messages) and ``autograph_ops.py``
(the operators on tapejax's staged control flow).
"""
from __future__ import annotations

import functools
import types
from typing import Any, Callable, Optional

_EXTRA = "AutoGraph needs diastatic-malt: pip install 'tapejax[autograph]'"
_MISSING: Optional[bool] = None


def available() -> bool:
    """Whether diastatic-malt can be imported."""
    global _MISSING
    if _MISSING is None:
        try:
            import malt  # noqa: F401
            _MISSING = False
        except ImportError:
            _MISSING = True
    return not _MISSING


def _impl():
    if not available():
        raise ImportError(_EXTRA)
    from . import autograph_convert
    return autograph_convert


def converted(fn: Callable[..., Any], features=None) -> Callable[..., Any]:
    """What ``tapejax.function`` traces: ``fn`` converted (``fn`` itself without malt)."""
    if not available():
        return fn
    return _impl().converted(fn, features)


def to_graph(entity, recursive=True, experimental_optional_features=None):
    """``tf.autograph.to_graph``: ``entity`` with its control flow converted (a function that
    stages ``if``/``while``/``for`` on tensors when called inside a trace)."""
    return _impl().to_graph(entity, recursive, experimental_optional_features)


def to_code(entity, recursive=True, experimental_optional_features=None) -> str:
    """``tf.autograph.to_code``: the source AutoGraph generates for ``entity``."""
    return _impl().to_code(entity, recursive, experimental_optional_features)


def set_verbosity(level, alsologtostdout=False) -> None:
    """``tf.autograph.set_verbosity``: malt's conversion log level (0: silent)."""
    from malt.utils import ag_logging
    ag_logging.set_verbosity(level, alsologtostdout)


def trace(*args) -> None:
    """``tf.autograph.trace``: print ``args`` when the function is traced (tensors symbolically)."""
    print(*args)


def _do_not_convert(func=None):
    """``tf.autograph.experimental.do_not_convert``: AutoGraph calls ``func`` as it is (Python
    control flow on a traced tensor in it then raises OperatorNotAllowedInGraphError)."""
    if func is None:
        return _do_not_convert
    if available():
        from malt.impl.api import do_not_convert
        return do_not_convert(func)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)
    return wrapper


def _set_loop_options(parallel_iterations=None, swap_memory=None, maximum_iterations=None,
                      shape_invariants=None):
    """Without malt nothing is converted and the directive has no effect (as TF outside loops)."""


class _Experimental(types.ModuleType):
    """``tf.autograph.experimental``; ``set_loop_options`` and ``Feature`` come from malt on first
    access (the converter recognises the directive by identity)."""

    do_not_convert = staticmethod(_do_not_convert)

    def __getattr__(self, name):
        if name == "set_loop_options":
            if not available():
                return _set_loop_options
            from malt.lang.directives import set_loop_options
            return set_loop_options
        if name == "Feature":
            if not available():
                raise ImportError(_EXTRA)
            from malt.core.converter import Feature
            return Feature
        raise AttributeError(f"module 'tapejax.autograph.experimental' has no attribute {name!r}")


experimental = _Experimental("tapejax.autograph.experimental")

__all__ = ["experimental", "set_verbosity", "to_code", "to_graph", "trace"]
