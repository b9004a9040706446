"""Per-thread state shared by every layer: the stack of recording tapes.

It lives in the lowest module so that ``_primitives`` (which records) and
``_tape`` (which owns tapes) need not import each other.  A tape is on the
stack exactly while it records; ``stop_recording`` takes it off.
"""
import itertools
import threading
from typing import Any, Dict, List, Optional, Protocol


class Collector(Protocol):
    """What a ``tapejax.function`` or control-flow trace installs as ``_local.collector``."""

    def touch(self, var: Any, assign: bool) -> None:
        """``var`` is read (``assign`` False) or assigned while the trace runs."""

    def created(self, var: Any) -> None:
        """``var`` was created while the trace runs."""


class _Local(threading.local):
    tapes: List[Any]
    def __init__(self):
        #: The tapes recording on this thread (innermost last); a list per thread.
        self.tapes = []

    #: The ``tapejax.function`` variable collector tracing on this thread, or
    #: None.  ``Variable`` reads, assigns and creation consult it (one ``if``
    #: when no function is tracing); see ``_function``.
    collector: Optional[Collector] = None
    #: The current ``tapejax.name_scope`` prefix ("outer/inner/" or ""), used
    #: by ``Variable`` names; see ``_module``.
    name_scope = ""
    #: The active ``gradient_override_map`` mappings on this thread (innermost
    #: last), or None; see ``_custom``.  Consulted by ``bind`` only while a
    #: tape records.
    overrides: Optional[List[Dict[str, str]]] = None


_local = _Local()

#: Monotonic ids for Tensors and Variables.  An id is never reused, so
#: "created before this tape" is a plain integer comparison.
next_id = itertools.count(1).__next__


def overrides() -> List[Dict[str, str]]:
    """This thread's list of ``gradient_override_map`` mappings (innermost last)."""
    ov = _local.overrides
    if ov is None:
        ov = _local.overrides = []
    return ov


def tapes() -> List[Any]:
    """The list of tapes recording on this thread (innermost last)."""
    return _local.tapes
