"""What an unread pending value keeps alive: bounded by ending a step at each gradient call.

A pending value holds its thunk, which holds its inputs: the arrays it reads, or the thunks of
pending inputs and, through them, their graphs.  Kept and never read (a metric appended to a
list each step, ``tot = tot + loss``), it would keep every step's inputs (a step's weights) or
a chain as long as the loop.  A gradient call ends a step (``settle``), and the pending values
of earlier steps that may still be read are computed then, together (one program per
structure), so what they keep alive is about two steps' graphs, whatever the number of steps.
The deferred executor notes each value it defers here (a recorded op's thunk in ``TAPED``,
an untaped op's result with ``note_untaped``).
"""
import threading
import weakref

from ..core.state import _local
from .thunks import Thunk, force_many

# The rules:
#
# * a recorded op's result (``defer``) that no later op took as an input by the end of its
#   step (a metric, a loss) is computed at the end of the next step if it is still pending
#   and something still holds it;
# * an untaped op's result (``defer_untaped``: ``lr * g``, ``tot + loss`` after the tape; a
#   handful per step) is computed at the end of the next step if its ``Pending`` is still
#   alive, or at the end of this one where it needs a pending graph of an earlier step
#   (``born``: a chain ``tot = tot + loss`` is cut every step).
#
# A value read (or computed by a gradient) in its step is never computed again here; the
# tracking costs each deferred op a weak reference and a list append.  ``OPEN_MAX``
# tracked values end a step too, for code that defers ops and never calls a gradient.  The
# steps are a thread's: a settle handles the values its own thread deferred (the recorded ops'
# thunks, appended to one module list on the hot path, carry their thread's tape stack).

class _Open(threading.local):
    """This thread's untaped results since its last ``settle``, and what it kept an eye on."""

    def __init__(self):
        self.gen = 0              # settle() calls so far: the current step
        self.untaped = []         # weak handles of untaped ops' results deferred in this step
        self.taped_kept = []      # weak refs: recorded results pending and unused at the last settle
        self.untaped_kept = []    # untaped results alive and pending at the last settle


_open = _Open()
#: Weak references to the thunks of recorded ops deferred since their thread's last ``settle``
#: (a module list: the hot path appends to it; ``Thunk.owner`` says whose).  Weak: a value
#: nobody holds any more (not its Pending, a tape, a later op) is forgotten with its inputs.
TAPED = []
_SETTLE_LOCK = threading.Lock()
OPEN_MAX = 4096
_ref = weakref.ref


def settle(everyone=False):
    """End this thread's step: compute the pending values of its earlier steps that may still
    be read (see above), and keep an eye on this step's that are not used or computed yet.
    ``everyone``: the recorded values of every thread (``OPEN_MAX`` of them were tracked)."""
    st = _open
    gen = st.gen
    untaped = st.untaped
    due = []
    for r in st.taped_kept:
        th = r()
        if th is not None and th.value is None:
            due.append(th)
    mine = _local.tapes
    taped_kept = []
    others = []
    with _SETTLE_LOCK:
        n = len(TAPED)
        entries = TAPED[:n]
        del TAPED[:n]   # (appends meanwhile land after them)
    for r in entries:
        th = r()
        if th is None:   # nobody holds it any more
            continue
        if th.owner is not mine and not everyone:
            others.append(r)   # another thread's step
        elif th.value is None and not th.used:
            taped_kept.append(r)
    if others:
        TAPED.extend(others)
    for h in st.untaped_kept:
        r = h()
        if r is not None and r._thunk.value is None:
            due.append(r._thunk)
    untaped_kept = []
    for h in untaped:
        r = h()
        if r is None:   # nobody can read it any more
            continue
        th = r._thunk
        if th.value is None:
            if th.born < gen:
                due.append(th)
            else:
                untaped_kept.append(h)
    st.gen = gen + 1
    st.untaped = []
    st.taped_kept, st.untaped_kept = taped_kept, untaped_kept
    if due:
        force_many(due)


def tracked_values():
    """How many deferred results ``settle`` tracks now (a bound the memory tests read)."""
    st = _open
    return len(TAPED) + len(st.untaped) + len(st.taped_kept) + len(st.untaped_kept)


def note_untaped(result, th: Thunk) -> None:
    """An untaped op's result ``result`` (a Pending on ``th``, whose inputs were noted as used)
    was deferred: it is born in the oldest step whose pending graph it needs."""
    st = _open
    born = st.gen
    for a in th.args or ():
        if type(a) is Thunk and a.born < born and a.value is None:
            born = a.born
    th.born = born
    untaped = st.untaped
    untaped.append(_ref(result))
    if len(untaped) > OPEN_MAX:
        settle()
