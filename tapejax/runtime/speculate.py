"""Speculative updates: a training step's Variable updates computed inside its gradient's program.

A manual step (``v.assign_sub(lr * g)`` for each gradient) leaves each Variable
with a pending update (``runtime.deferred``) that the next step's gradient computes
first, inside its own program.  That program takes the gradients as inputs
and the one before returned them as outputs: for a large model those are big
buffers, allocated, written and read back, where pure JAX computes
``w - lr * g`` right where ``g`` is made and never returns ``g`` (measured on
MLP 784-512-512-10, 2-core CPU: 2.59 ms for the two-program form, 2.26 ms for
the same program without the gradients as outputs, 2.31 ms for pure JAX).

So this module predicts the updates.  After each gradient call (of a compiled
entry, on one thread) the updates that use its gradients are noted
(``runtime.updates.defer_update`` calls ``on_update``): which Variable, which
callable (the pending update's, with ``lr * g`` fused into it), where the
gradient goes among its arguments, which concrete arrays are the other
arguments (the cached ``lr``).  When the last call's gradients were each used
by exactly one such update, on distinct Variables that this call reads, and
those updates were the same as the call before's (the same objects: an ``lr``
that is a new number every step is never predicted), this call's program
computes the targets and the updated values and returns no gradients
(``run_predicted``).  Each gradient is then a pending value that recomputes
the call's gradients from its inputs if anything needs it (one thunk per
call, ``_Regrad``).  When the user's update comes it is matched by identity:
the same callable and wiring, the value of the Variable the prediction read,
the same const arrays, this call's gradient at the same position.  A match
sets the Variable to the predicted value, which is the very computation the
pending update would run on the same inputs (fused into the gradient's
program by XLA, so equal up to float rounding); anything else takes the
ordinary pending path.

An optimizer's ``apply_gradients`` is one such update of several Variables (a
``_Group``: ``on_apply``, called before it computes anything): its compiled
pure update (the ``Donating`` of its plan, held weakly, so a cached program
does not keep an optimizer and its slots alive), which gradient goes to which
Variable, the cached ``lr`` and the hyperparameter Variables' values.  Predicted,
the program also reads the slots and counters and computes every state
Variable's new value; the optimizer commits them (constraints run after, as
always) when the gradients, the state values the prediction read, the ``lr``
and the hyperparameters are the same objects, and otherwise computes the
gradients and runs its own update.  The
program cannot update the optimizer's state in place (a mismatch needs the old
values), so an optimizer whose slots and counters are much larger than its Variables
(``_GROUP_SLACK_BYTES``: Adam's, but for small models) is not predicted: its own program
donates them.

A miss costs little unless a gradient the program did not return is needed
after all (read, or used by an update that did not match): that recomputes it,
and the entry then stops predicting for 1, 2, 4, ... up to 1024 calls (a
prediction whose updates all matched halves the wait), so a loop that reads its gradients
every step pays the recompute about log2(steps) times.  The predicted program is compiled on a worker thread while the loop's steps run
without predicting (``runtime.prediction``; ``set_background_compile``).  Nothing is predicted
with deferral off or inside ``tapejax.function`` (no pending gradients), under
an outer tape (``autodiff.replay``), nor for a Variable committed to a
device (its update is not deferred).
"""
import threading
import weakref
from typing import Any, NamedTuple, Sequence, cast

from ..core.caches import LRU
from ..core.state import env_flag, set_flag
from ..core.tensor import Pending
from .thunks import Thunk, _Array

_PENALTY_MAX = 1024
#: An optimizer update is predicted only while its state besides the Variables (slots,
#: counters) is small next to what prediction saves.  The predicted program cannot update that
#: state in place (a mismatch needs the old values), so each step allocates it anew and the old
#: and the new state are both alive while it runs, where the optimizer's own program donates
#: it.  What prediction saves is the gradients, as large as the Variables, which are then never
#: made (nor written and read back), and one dispatch.  So the state may exceed the Variables by
#: at most ``_GROUP_SLACK_BYTES`` (Adam's two slots do only in small models, where the saved
#: dispatch is what counts), and never ``_GROUP_BYTES_MAX``.  Measured on the MLP
#: 784-512-512-10, batch 128, Adam (5.4 MB of slots), 2-core CPU: predicted, 430-740 page faults
#: and 8.5-8.8 ms of CPU time a step; not predicted, 23-36 and 7.0-7.9 ms.  With momentum SGD
#: (slots as large as the Variables) the two are within noise (7.2 and 7.0 ms).
_GROUP_SLACK_BYTES = 1 << 20
_GROUP_BYTES_MAX = 64 << 20


class _Flags:
    enabled = env_flag("TAPEJAX_SPECULATE")


_flags = _Flags()


def set_speculative_updates(enabled):
    """Turn predicted Variable updates on (the default) or off, for every thread (see the
    module docstring of ``tapejax.runtime.speculate``).  Values are the same either way (up to float
    rounding); off, a manual step's updates are computed by the next step's program and an
    optimizer's by its own.  Returns the previous setting."""
    return set_flag(_flags, enabled)


def speculative_updates():
    """Whether a step's updates (``assign_sub``, ``apply_gradients``) are predicted into its gradient's
    program (``set_speculative_updates``)."""
    return _flags.enabled


enabled = speculative_updates


class _BackgroundFlags:
    enabled = env_flag("TAPEJAX_BACKGROUND_COMPILE")


_background = _BackgroundFlags()


def set_background_compile(enabled):
    """Compile a loop's predicted program on a worker thread (the default) while its steps run
    without predicting (``TAPEJAX_BACKGROUND_COMPILE=0``: off), or on the step that first
    predicts (its third).  Values are the same either way; the step from which updates are
    predicted then depends on when the compile ends.  Returns the previous setting."""
    return set_flag(_background, enabled)


def background_compile():
    """Whether predicted programs compile in the background (``set_background_compile``)."""
    return _background.enabled


class _Obs:
    """The updates seen after one gradient call (``items``: gradient position -> the ``_Item``,
    or the ``_Group`` of an optimizer's update, that used it); ``prev``: the previous call's items;
    ``unstable`` when an update differs from the previous call's (another callable or Variable,
    another const array: an ``lr`` that changes every step cannot be predicted); ``bad`` when
    a gradient was used twice; ``forced`` when a gradient the program did not return was
    recomputed; ``predicted`` for a call that predicted, ``hits`` the gradients whose updates matched; the
    gradients' avals."""

    __slots__ = ("items", "prev", "unstable", "bad", "forced", "predicted", "hits", "avals")

    def __init__(self, avals, prev, predicted=False):
        self.items = {}
        self.prev = prev
        self.unstable = False
        self.bad = False
        self.forced = False
        self.predicted = predicted
        self.hits = 0
        self.avals = avals


class _Item(NamedTuple):
    """An update of one Variable by one gradient of a call (``on_update``): the Variable (weakly),
    the update's callable, the gradient's position among its arguments, the other arguments
    (None for the Variable's value and the gradient)."""

    ref: "weakref.ref"
    call: Any
    gpos: int
    rest: tuple


class _Hit(NamedTuple):
    """A predicted update of one Variable, as ``run_predicted`` left it for ``on_update``: the
    gradient's position, the item predicted, the Variable's value the prediction read, the
    predicted value."""

    j: int
    item: _Item
    old: Any
    value: Any


class _GroupHit(NamedTuple):
    """A predicted optimizer update (``on_apply``): the group, the state values it read, the new
    values."""

    group: "_Group"
    olds: tuple
    new: Sequence[Any]


class _Rec:
    """One gradient call, as its gradients' thunks see it (their ``tag`` is ``(rec, j)``): what
    it observes and, where it predicted, Variable id -> its ``_Hit`` (an optimizer's update
    -> its ``_GroupHit``).  Nothing here refers back to
    the thunks: no cycle keeps a call's arrays alive after its gradients are dropped."""

    __slots__ = ("obs", "table")

    def __init__(self, obs, table):
        self.obs = obs
        self.table = table


class _Group:
    """An optimizer's update of several Variables from one call's gradients (``on_apply``):
    ``fn``, a weak reference to its ``Donating`` (whose ``_f(values, grads, *extra)`` is the
    pure update); ``refs``, weak references to the state Variables (the updated ones first, in
    the order of ``js``, then slots and counters); ``js``, the call's gradient for each updated
    Variable; ``extra``, the other arguments (the cached ``lr`` value, or None, then the
    values of the hyperparameter Variables the update reads)."""

    __slots__ = ("fn", "refs", "js", "extra")

    def __init__(self, fn, state, js, extra):
        self.fn = weakref.ref(fn)
        self.refs = tuple([weakref.ref(v) for v in state])
        self.js = js
        self.extra = extra


class _Track:
    """An entry's state on one thread: the last call's observations, the back-off, the layout
    of the last prediction, the calls since the last observed update (``idle``)."""

    __slots__ = ("obs", "penalty", "skip", "layout", "idle")

    def __init__(self):
        self.obs = None
        self.penalty = 0
        self.skip = 0
        self.layout = None
        self.idle = 0


#: (compiled entry, thread id) -> _Track.  Bounded; cleared with the replay cache.
_TRACKS = LRU("speculation_tracks", 256)
_TRACKS_PEEK = _TRACKS._data.get
_get_ident = threading.get_ident
_EMPTY = {}


def tag_results(results, entry, track):
    """Tag the gradients of a call that did not predict, so the updates that follow are seen
    (one call in 32 only while the calls before had their gradients used by no update: a loop
    that transforms them first, clipping them for an optimizer, pays next to nothing).  ``track``: ``track(entry)``."""
    prev = track.obs
    if prev is not None and prev.forced:   # recomputed by this very call (a mismatched update)
        _back_off(track, prev)
    if prev is not None and not prev.items and not prev.predicted:
        track.idle += 1
        if track.idle & 31:
            return
    else:
        track.idle = 0
    avals = []
    for r in results:
        if type(r) is not Pending:
            return
        avals.append(r._thunk.aval)
    obs = track.obs = _Obs(tuple(avals), _EMPTY if prev is None else prev.items)
    rec = _Rec(obs, None)
    j = 0
    for r in results:
        r._thunk.tag = (rec, j)
        j += 1


def track(entry):
    """This thread's ``_Track`` of ``entry`` (made on first use; a hit does not refresh its
    recency, as the aval cache: an evicted track only learns again)."""
    key = (entry, _get_ident())
    tr = _TRACKS_PEEK(key)
    if tr is None:
        tr = _TRACKS.setdefault(key, _Track())
    return tr


def _back_off(track, obs):
    """A gradient ``obs``'s call did not return was recomputed: no predictions for the next
    1, 2, 4, ... calls."""
    obs.forced = False
    track.penalty = min(max(1, 2 * track.penalty), _PENALTY_MAX)
    track.skip = track.penalty


def predicts(track, n):
    """Whether this call (of ``n`` gradients) predicts its updates: the last call's gradients
    were each used by one update, on distinct Variables, as the call's before."""
    obs = track.obs
    if obs is None:
        return False
    if obs.forced:   # the last prediction had to recompute a gradient: back off
        _back_off(track, obs)
    elif track.penalty and obs.predicted and obs.hits == len(obs.avals):   # one that held
        track.penalty //= 2
    if track.skip:
        track.skip -= 1
        return False
    return not (obs.bad or obs.unstable or len(obs.items) != n or len(obs.avals) != n)


def _current(var):
    """A Variable's value: an array, or the thunk of its update while that is still pending."""
    v = var._val
    if type(v) is Thunk and v.value is not None:
        return v.value
    return v


def on_update(var, call, vals):
    """An update of ``var`` by ``call(*vals)`` (``vals[0]`` its value) with a pending delta:
    noted when it uses one gradient of a tagged call; the predicted value where it matches the
    prediction (else None: the caller keeps the update pending)."""
    n = len(vals)
    if n == 3:   # (value, lr, g) or (value, g, lr): the common ``v.assign_sub(lr * g)``
        a, b = vals[1], vals[2]
        if type(a) is Thunk:
            if type(b) is not _Array:
                return None
            g, gpos = a, 1
        elif type(b) is Thunk and type(a) is _Array:
            g, gpos = b, 2
        else:
            return None
        tag = g.tag
    else:
        g = None
        gpos = 0
        for p in range(1, n):
            a = vals[p]
            ta = type(a)
            if ta is Thunk:
                if g is not None or a.tag is None:
                    return None
                g, gpos = a, p
            elif ta is not _Array:
                return None
        if g is None:
            return None
        tag = g.tag
    if tag is None:
        return None
    rec, j = tag
    obs = rec.obs
    items = obs.items
    table = rec.table
    if table:
        hit = table.pop(var._id, None)
        if hit is not None:
            jp, item, old, value = hit
            rest = item.rest
            if (jp == j and item.call is call and item.gpos == gpos and vals[0] is old
                    and len(rest) == n):
                for p in range(1, n):
                    if p != gpos and rest[p] is not vals[p]:
                        break
                else:
                    if j in items:
                        obs.bad = True
                    else:
                        items[j] = item   # seen again: the same prediction next time
                    obs.hits += 1
                    return value
    if j in items:
        obs.bad = True
        return None
    item = obs.prev.get(j)
    if type(item) is _Item and item.call is call and item.gpos == gpos and item.ref() is var:
        rest = item.rest
        if len(rest) == n:
            for p in range(1, n):
                if p != gpos and rest[p] is not vals[p]:
                    break
            else:
                items[j] = item   # as the previous call's: stable
                return None
    obs.unstable = True
    rest = list(vals)
    rest[0] = None
    rest[gpos] = None
    items[j] = _Item(weakref.ref(var), call, gpos, tuple(rest))
    return None


def on_apply(fn, state, grads, extra):
    """An optimizer's update of its ``state`` Variables by ``fn`` (a ``Donating``:
    ``fn._f(values, grads, *extra)``), ``grads`` the gradient Tensors as the user passed them
    (the updated Variables first in ``state``, in that order): noted when they are gradients
    of one tagged call, each once; the predicted values of ``state`` where it matches the
    prediction (else None: the caller runs the update)."""
    rec = None
    js = []
    for g in grads:
        if type(g) is not Pending:
            return None
        tag = cast(Thunk, g._thunk).tag
        if tag is None:
            return None
        r, j = tag
        if rec is None:
            rec = r
        elif r is not rec:
            return None
        js.append(j)
    if rec is None:
        return None
    js = tuple(js)
    obs = rec.obs
    items = obs.items
    table = rec.table
    if table:
        hit = table.pop(fn, None)
        if hit is not None:
            item, olds, new = hit
            if item.js == js and _same_extra(item.extra, extra) and len(olds) == len(state):
                for v, o in zip(state, olds):
                    if _current(v) is not o:
                        break
                else:
                    if _note(obs, items, js, item):
                        obs.hits += len(js)
                    return new
    item = obs.prev.get(js[0])
    if not (type(item) is _Group and item.fn() is fn and item.js == js and _same_extra(item.extra, extra)):
        if not _worth_predicting(state, len(js)):
            return None   # too big to hold twice: not noted, the optimizer updates it in place
        obs.unstable = True
        item = _Group(fn, state, js, extra)
    _note(obs, items, js, item)
    return None


def _worth_predicting(state, n_vars: int) -> bool:
    """Whether an optimizer whose ``state`` is its ``n_vars`` updated Variables, then its slots
    and counters, is small enough to predict (see ``_GROUP_SLACK_BYTES``)."""
    extra = _state_bytes(state[n_vars:])
    return extra <= min(_state_bytes(state[:n_vars]) + _GROUP_SLACK_BYTES, _GROUP_BYTES_MAX)


def _state_bytes(variables):
    n = 0
    for v in variables:
        m = v._meta
        n += m.size * m.dtype.itemsize
    return n


def _same_extra(a, b):
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x is not y:
            return False
    return True


def _note(obs, items, js, item):
    """``item`` uses gradients ``js`` of ``obs``'s call; False (and ``obs.bad``) where one of
    them was used already."""
    if len(set(js)) != len(js):
        obs.bad = True
        return False
    for j in js:
        if j in items:
            obs.bad = True
            return False
    for j in js:
        items[j] = item
    return True
