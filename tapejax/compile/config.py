"""``tf.config.run_functions_eagerly``: run ``tapejax.function`` bodies as plain Python.

For debugging, as TF: while on, calling a ``tapejax.function`` runs its Python
function directly (no trace, no compile, no AutoGraph; ``print`` and
breakpoints see concrete values each call), and tracing counts do not change.
The switch is global (all threads), as TF's.
"""
from __future__ import annotations

import threading

_LOCK = threading.Lock()


class _Flags:
    __slots__ = ("eager",)

    def __init__(self):
        self.eager = False


FLAGS = _Flags()


def run_functions_eagerly(run_eagerly: bool) -> None:
    """``tf.config.run_functions_eagerly``: ``True`` makes every ``tapejax.function`` call run its
    Python body eagerly; ``False`` compiles again."""
    with _LOCK:   # (TF takes any value by its truth, as here)
        FLAGS.eager = bool(run_eagerly)


def functions_run_eagerly() -> bool:
    """``tf.config.functions_run_eagerly``: whether ``run_functions_eagerly(True)`` is in effect."""
    return FLAGS.eager


__all__ = ["functions_run_eagerly", "run_functions_eagerly"]
