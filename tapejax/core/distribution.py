"""The per-thread ``tf.distribute`` mode: which strategy is current, and whether the thread is
in a replica context (inside ``strategy.run``) or the cross-replica context (inside
``with strategy.scope():``).

It lives in the core so the ops that read it (``tf.nn.compute_average_loss``,
``scale_regularization_loss``: TF's RuntimeError in the cross-replica context) need not import
``tapejax.distribute``, which defines the strategies and pushes the modes.  The objects in a
mode are opaque here.  An empty stack is TF's default mode: the default strategy in its
default replica context.
"""
import threading
from typing import Any, List, NamedTuple, Optional

__all__ = ["Mode", "SUM_ON_READ", "check_sum_on_read_update", "cross_replica_with_strategy", "current", "modes",
           "pop", "push"]

#: ``id`` -> weak reference of each ON_READ Variable with SUM aggregation that a strategy with
#: per-replica copies made (``MirroredStrategy``; filled by ``tapejax.distribute``).  TF updates
#: such a Variable's copies only in a replica context: ``assign_add`` / ``assign_sub`` elsewhere
#: raise (``assign`` is allowed: TF gives each copy its share of the value).
SUM_ON_READ: dict = {}


class Mode(NamedTuple):
    """One entry of the stack: a strategy, and the replica context (``None`` in the strategy's
    cross-replica context, ``with strategy.scope():`` or a ``merge_call``)."""

    strategy: Any
    replica_context: Any
    #: whether ``strategy`` is TF's default one (``has_strategy()`` is False in its modes)
    default: bool = False


class _Local(threading.local):
    stack: List[Mode]

    def __init__(self):
        self.stack = []


_LOCAL = _Local()


def modes() -> List[Mode]:
    """This thread's stack of modes (innermost last)."""
    return _LOCAL.stack


def current() -> Optional[Mode]:
    """The innermost mode, or None for TF's default mode."""
    stack = _LOCAL.stack
    return stack[-1] if stack else None


def push(mode: Mode) -> None:
    _LOCAL.stack.append(mode)


def pop(mode: Mode) -> None:
    """Remove ``mode``, the innermost entry (scopes exit in the order they were entered)."""
    stack = _LOCAL.stack
    if not stack or stack[-1] is not mode:
        raise RuntimeError("tf.distribute scopes exited out of order: exit the innermost `strategy.scope()` "
                           "(or `strategy.run`) first.")
    stack.pop()


def cross_replica_with_strategy() -> bool:
    """``has_strategy() and in_cross_replica_context()``: a strategy other than the default one
    is current, in its cross-replica context."""
    mode = current()
    return mode is not None and mode.replica_context is None and not mode.default


def check_sum_on_read_update(op: str) -> None:
    """TF's ValueError for ``op`` (``assign_add`` / ``assign_sub``) of a ``SUM_ON_READ`` Variable
    outside its strategy's replica context (eagerly, in a ``tapejax.function`` outside
    ``strategy.run``, in ``scope()`` or a ``merge_call``)."""
    mode = current()
    if mode is None or mode.replica_context is None or mode.default:
        raise ValueError(f"SyncOnReadVariable does not support `{op}` in cross-replica context when aggregation "
                         "is set to `tf.VariableAggregation.SUM`.")
