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
    __slots__ = ("calls_per_tracing", "call_count", "warnings")

    def __init__(self):
        self.calls_per_tracing: List[int] = []
        self.call_count = 0
        self.warnings = 0

    def traced(self, fname: str) -> None:
        """A call that traced (under the Function's lock)."""
        self.call_count += 1
        self.calls_per_tracing.append(1)
        while self.calls_per_tracing and self.call_count - self.calls_per_tracing[0] > MAX_CALL_HISTORY:
            self.call_count -= self.calls_per_tracing.pop(0)
        if self.warnings >= MAX_WARNINGS or len(self.calls_per_tracing) < THRESHOLD:
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
            len(self.calls_per_tracing), self.call_count, fname)

    def not_traced(self) -> None:
        """A call that did not trace (no lock: the counts only decide when to warn)."""
        if not self.calls_per_tracing:
            self.calls_per_tracing = [0]
        self.calls_per_tracing[-1] += 1
        self.call_count += 1


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
