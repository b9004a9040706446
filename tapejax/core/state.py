"""Per-thread state shared by every layer: what records and what traces on this thread.

It lives in the lowest module so that ``core.bind`` (which records) and
``autodiff.tape`` (which owns tapes) need not import each other.  Three things, each changed
only through the functions here (``tests/test_layout.py`` checks that no other module assigns
them):

* the stack of recording tapes (``_local.tapes``, innermost last): a tape is on it exactly
  while it records (``push_tape`` / ``pop_tape``, in place; ``stop_recording`` takes it off);
  ``swap`` puts another list in its place for a block (a custom gradient's function, a host
  callback, a control-flow body's capture) and the same list back after it, so a loop over the
  stack never sees it change under it but for a tape entering or leaving.  The list names the
  thread's step: ``runtime.settle`` tells a thread's pending values by it (``Thunk.owner``);
* the ``tapejax.function`` collector tracing on this thread (``set_collector``, ``swap``);
* the ``gradient_override_map`` mappings in force (``push_override`` / ``pop_override``).

From the three, each change derives ``_local.defers``: whether ops may be left pending by the
deferred executor (``tapejax.runtime.deferred``): a tape records, every recorder on the stack
is a plain one (``Recorder._defers``), no function traces and no override is in force.  An op's
hot path reads that one attribute instead of re-deriving it per op.
"""
import contextlib
import itertools
import os
import threading
from typing import Any, Dict, Iterator, List, Optional, Protocol, Tuple


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
        #: The tapes recording on this thread (innermost last): changed by the functions below only.
        self.tapes = []

    #: The ``tapejax.function`` variable collector tracing on this thread, or
    #: None.  ``Variable`` reads, assigns and creation consult it (one ``if``
    #: when no function is tracing); see ``compile.function``.
    collector: Optional[Collector] = None
    #: The current ``tapejax.name_scope`` prefix ("outer/inner/" or ""), used
    #: by ``Variable`` names; see ``train.module``.
    name_scope = ""
    #: The active ``gradient_override_map`` mappings on this thread (innermost
    #: last); see ``autodiff.custom``.  Consulted by ``bind`` only while a tape records.
    overrides: Tuple[Dict[str, str], ...] = ()
    #: Derived from the three above (``_refresh``): ops may be left pending.
    defers = False


_local = _Local()

#: Monotonic ids for Tensors and Variables.  An id is never reused, so
#: "created before this tape" is a plain integer comparison.
next_id = itertools.count(1).__next__


def _refresh(loc: _Local) -> None:
    tapes = loc.tapes
    loc.defers = bool(tapes) and loc.collector is None and not loc.overrides and all(
        [t._defers for t in tapes])


def tapes() -> List[Recorder]:
    """The tapes recording on this thread (innermost last); read it, never change it (use
    ``push_tape``, ``pop_tape``, ``swap``)."""
    return _local.tapes


def push_tape(rec: Recorder) -> None:
    """``rec`` starts recording on this thread (innermost)."""
    loc = _local
    loc.tapes.append(rec)
    _refresh(loc)


def pop_tape(rec: Recorder) -> None:
    """``rec`` stops recording on this thread (its innermost place on the stack; nothing if it
    is not there)."""
    loc = _local
    stack = loc.tapes
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is rec:
            del stack[i]
            _refresh(loc)
            return


def set_collector(col: Optional[Collector]) -> Optional[Collector]:
    """``col`` becomes this thread's collector (None: no function traces); the previous one is
    returned, for the caller to put back."""
    loc = _local
    prev = loc.collector
    loc.collector = col
    _refresh(loc)
    return prev


_KEEP: Any = object()


@contextlib.contextmanager
def swap(tapes: Any = _KEEP, collector: Any = _KEEP) -> Iterator[None]:
    """For the block, this thread's tape stack is a list of ``tapes`` (recorders) and its collector
    ``collector`` (each only where given); both are put back after it."""
    loc = _local
    saved = loc.tapes, loc.collector
    if tapes is not _KEEP:
        loc.tapes = list(tapes)
    if collector is not _KEEP:
        loc.collector = collector
    _refresh(loc)
    try:
        yield
    finally:
        loc.tapes, loc.collector = saved
        _refresh(loc)


def push_override(mapping: Dict[str, str]) -> None:
    """A ``gradient_override_map`` mapping comes into force on this thread (innermost)."""
    loc = _local
    loc.overrides = loc.overrides + (mapping,)
    _refresh(loc)


def pop_override(mapping: Dict[str, str]) -> None:
    """``mapping`` (``push_override``'s) is no longer in force on this thread."""
    loc = _local
    stack = loc.overrides
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] is mapping:
            loc.overrides = stack[:i] + stack[i + 1:]
            _refresh(loc)
            return


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


def traces_function() -> bool:
    """Whether a ``tapejax.function`` traces on this thread (TF's graph, where Python iteration and
    ``len`` of a symbolic tensor are refused).  A control-flow body traced eagerly (``tf.scan`` /
    ``tf.foldl`` called outside any function: its collector is marked ``body`` and has no function
    outside it, ``compile.bodies``) does not count: TF runs those eagerly, as Python."""
    col = _local.collector
    while col is not None and getattr(col, "body", False):
        col = getattr(col, "outer", None)
    return col is not None
