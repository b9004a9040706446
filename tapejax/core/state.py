"""Per-thread state shared by every layer: the stack of recording tapes.

It lives in the lowest module so that ``core.bind`` (which records) and
``autodiff.tape`` (which owns tapes) need not import each other.  A tape is on the
stack exactly while it records; ``stop_recording`` takes it off.
"""
import itertools
import os
import threading
from typing import Any, Dict, List, Optional, Protocol


class Recorder(Protocol):
    """What sits on a thread's tape stack (``_local.tapes``): a ``GradientTape``, or another
    recorder (a forward accumulator's, a control-flow body's capture, a custom gradient's
    Variable watcher).  The executor that runs an op offers it to each (``core.executor.record``)."""

    #: Whether the deferred executor may leave the ops it records pending (plain tapes only).
    _defers: bool

    def _record_read(self, var: Any, t: Any) -> None:
        """``var`` was read as the Tensor ``t``."""

    def _record_simple(self, prim: Any, skey: tuple, ids: tuple, vals: tuple, result: Any) -> Any:
        """A one-output op with no gradient override (static parameters as items ``skey``).  A
        plain ``GradientTape`` (the only recorder whose ops the deferred executor leaves
        pending: ``_defers``) returns whether it kept the op as a node."""

    def _record_op(self, prim: Any, static: dict, grad_type: Any, ids: Any, vals: Any, result: Any) -> None:
        """Any op (``grad_type``: the gradient ``gradient_override_map`` names for it, or None)."""


class Collector(Protocol):
    """What a ``tapejax.function`` or control-flow trace installs as ``_local.collector``."""

    def touch(self, var: Any, assign: bool) -> None:
        """``var`` is read (``assign`` False) or assigned while the trace runs."""

    def created(self, var: Any) -> None:
        """``var`` was created while the trace runs."""


class _Local(threading.local):
    tapes: List[Recorder]
    def __init__(self):
        #: The tapes recording on this thread (innermost last); a list per thread.
        self.tapes = []

    #: The ``tapejax.function`` variable collector tracing on this thread, or
    #: None.  ``Variable`` reads, assigns and creation consult it (one ``if``
    #: when no function is tracing); see ``compile.function``.
    collector: Optional[Collector] = None
    #: The current ``tapejax.name_scope`` prefix ("outer/inner/" or ""), used
    #: by ``Variable`` names; see ``train.module``.
    name_scope = ""
    #: The active ``gradient_override_map`` mappings on this thread (innermost
    #: last), or None; see ``autodiff.custom``.  Consulted by ``bind`` only while a
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


def tapes() -> List[Recorder]:
    """The list of tapes recording on this thread (innermost last)."""
    return _local.tapes


def env_flag(name: str) -> bool:
    """An on/off setting from the environment variable ``name``: on unless 0/false/no/off."""
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "no", "off")


def set_flag(flags: Any, enabled: bool) -> bool:
    """``flags.enabled = enabled`` (a bool, else TypeError); returns the previous setting."""
    if not isinstance(enabled, bool):
        raise TypeError(f"Argument `enabled` must be a bool; got {enabled!r} of type "
                        f"{type(enabled).__name__}")
    prev = flags.enabled
    flags.enabled = enabled
    return prev


try:   # JAX's own test: no trace (jit, vmap, grad, eval_shape ...) is running on this thread
    from jax._src.core import trace_state_clean as _trace_state_clean
except ImportError:  # pragma: no cover - a JAX without it: assume a trace may be running
    def _trace_state_clean() -> bool:
        return False


def tracing() -> bool:
    """Whether a JAX trace is running on this thread (a pending value computed now must be
    computed outside it: ``jax.core.eval_context``)."""
    return not _trace_state_clean()
