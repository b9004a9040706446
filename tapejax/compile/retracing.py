"""TF's warning when a ``tf.function`` retraces too often.

As TF (``polymorphic_function._FrequentTracingDetector``): the calls to one
Python function (keyed by its code object, so a ``tapejax.function`` created
anew in a loop counts as the same function) are remembered over the last 10;
when 5 of them traced, a WARNING is logged on the ``tapejax`` logger, at most
twice per function.
"""
from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, List

MAX_CALL_HISTORY = 10
THRESHOLD = 5
MAX_WARNINGS = 2

logger = logging.getLogger("tapejax")


class _Detector:
    """``calls_per_tracing``: for each of the remembered traces, the calls from it to the next
    (itself included), oldest first: a call that does not trace adds one to the last (the
    steady call of ``Function.__call__`` does so itself, the list being the same object)."""

    __slots__ = ("calls_per_tracing", "warnings")

    def __init__(self):
        self.calls_per_tracing: List[int] = []
        self.warnings = 0

    @property
    def call_count(self) -> int:
        """The calls remembered (at most ``MAX_CALL_HISTORY`` after the oldest trace's group)."""
        return sum(self.calls_per_tracing)

    def traced(self, fname: str) -> None:
        """A call that traced (under the Function's lock)."""
        per = self.calls_per_tracing
        per.append(1)
        while per and sum(per) - per[0] > MAX_CALL_HISTORY:
            del per[0]
        if self.warnings >= MAX_WARNINGS or len(per) < THRESHOLD:
            return
        self.warnings += 1
        logger.warning(
            "%d out of the last %d calls to %s triggered tapejax.function retracing. Tracing is "
            "expensive and the excessive number of tracings could be due to (1) creating "
            "@tapejax.function repeatedly in a loop, (2) passing tensors with different shapes, (3) "
            "passing Python objects instead of tensors. For (1), please define your @tapejax.function "
            "outside of the loop. For (2), @tapejax.function has reduce_retracing=True option that can "
            "avoid unnecessary retracing. For (3), pass tensors, or see "
            "https://www.tensorflow.org/guide/function#controlling_retracing.",
            len(per), self.call_count, fname)

    def not_traced(self) -> None:
        """A call that did not trace (no lock: the counts only decide when to warn)."""
        per = self.calls_per_tracing
        if not per:
            per.append(0)
        per[-1] += 1


_DETECTORS: "weakref.WeakKeyDictionary[Any, _Detector]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def stats_key(fn: Any) -> Any:
    """TF's key for call statistics: the code object of the innermost wrapped function."""
    target = fn
    while hasattr(target, "__wrapped__"):
        target = target.__wrapped__
    target = getattr(target, "__func__", target)
    return getattr(target, "__code__", fn)


def detector(fn: Any) -> "_Detector":
    """The call statistics of ``fn`` (shared by every Function wrapping the same code)."""
    key = stats_key(fn)
    with _LOCK:
        try:
            d = _DETECTORS.get(key)
            if d is None:
                d = _DETECTORS[key] = _Detector()
        except TypeError:   # not weak-referenceable: statistics of its own
            d = _Detector()
    return d


__all__ = ["detector", "stats_key"]
