"""Speculative updates: a manual training step's Variable updates computed inside its gradient.

A manual step (``v.assign_sub(lr * g)`` for each gradient) leaves each Variable
with a pending update (``_lazy``) that the next step's gradient computes
first, inside its own program.  That program takes the gradients as inputs
and the one before returned them as outputs: for a large model those are big
buffers, allocated, written and read back, where pure JAX computes
``w - lr * g`` right where ``g`` is made and never returns ``g`` (measured on
MLP 784-512-512-10, 2-core CPU: 2.59 ms for the two-program form, 2.26 ms for
the same program without the gradients as outputs, 2.31 ms for pure JAX).

So this module predicts the updates.  After each gradient call (of a compiled
entry, on one thread) the updates that use its gradients are noted
(``Variable._defer_update`` calls ``on_update``): which Variable, which
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

A miss costs little unless a gradient the program did not return is needed
after all (read, or used by an update that did not match): that recomputes it,
and the entry then stops predicting for 1, 2, 4, ... up to 1024 calls (a
prediction whose updates all matched halves the wait), so a loop that reads its gradients
every step pays the recompute about log2(steps) times.  Nothing is predicted
with deferral off or inside ``tapejax.function`` (no pending gradients), under
an outer tape (``_replay._call_gradient``), nor for a Variable committed to a
device (its update is not deferred).
"""
import threading
import weakref

import jax

from ._lazy import Pending, _Array, _Thunk, call_with_pending, env_flag, force_all, set_flag
from ._lru import LRU

_PENALTY_MAX = 1024


class _Flags:
    enabled = env_flag("TAPEJAX_SPECULATE")


_flags = _Flags()


def set_speculative_updates(enabled):
    """Turn predicted Variable updates on (the default) or off, for every thread (see the
    module docstring of ``tapejax._speculate``).  Values are the same either way (up to float
    rounding); off, a manual step's updates are computed by the next step's program.  Returns
    the previous setting."""
    return set_flag(_flags, enabled)


def speculative_updates():
    """Whether manual updates are predicted into the gradient's program (``set_speculative_updates``)."""
    return _flags.enabled


class _Obs:
    """The updates seen after one gradient call (``items``: gradient position -> (Variable ref,
    callable, position of the gradient among the callable's arguments, the other arguments with
    None for the Variable's value and the gradient)); ``prev``: the previous call's items;
    ``unstable`` when an update differs from the previous call's (another callable or Variable,
    another const array: an ``lr`` that changes every step cannot be predicted); ``bad`` when
    a gradient was used twice; ``forced`` when a gradient the program did not return was
    recomputed; ``predicted`` for a call that predicted, ``hits`` its updates that matched; the
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


class _Rec:
    """One gradient call, as its gradients' thunks see it (their ``tag`` is ``(rec, j)``): what
    it observes and, where it predicted, Variable id -> (the gradient's position, item, the
    Variable's value the prediction read, the predicted value).  Nothing here refers back to
    the thunks: no cycle keeps a call's arrays alive after its gradients are dropped."""

    __slots__ = ("obs", "table")

    def __init__(self, obs, table):
        self.obs = obs
        self.table = table


class _Layout:
    """How a prediction's inputs are laid out: the items it was built from, the number of
    leaves, the inputs added after them (``ext``: (item index, argument position)), the
    arguments found among the leaves (``checks``: (leaf index, item index, argument position),
    checked by identity on every call), the programs' key (entry, per update (callable,
    gradient index, where each argument comes from)), the program (raw and jitted) and the
    gradients' recompute."""

    __slots__ = ("items", "n_leaves", "ext", "checks", "key", "run", "jitted", "regrad")


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
#: (compiled entry, prediction structure) -> (raw program, jitted program).
_PROGRAMS = LRU("speculative_programs", 256)
#: (compiled entry, number of leaves) -> the jitted gradients alone (``_regrad_fn``).
_REGRADS = LRU("speculative_regradients", 256)
_get_ident = threading.get_ident
_EMPTY = {}


def clear():
    """Forget every prediction and its programs (``clear_cache``)."""
    _TRACKS.clear()
    _PROGRAMS.clear()
    _REGRADS.clear()


def tag_results(results, entry, track):
    """Tag the gradients of a call that did not predict, so the updates that follow are seen
    (one call in 32 only while the calls before had their gradients used by no update: an
    optimizer's loop, which reads them, pays next to nothing).  ``track``: ``track(entry)``."""
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


class _Regrad:
    """The call of a gradient's recompute: notes on the call's observations that a gradient the
    program did not return was needed (the entry backs off), then computes the gradients."""

    __slots__ = ("obs", "fn")

    def __init__(self, obs, fn):
        self.obs = obs
        self.fn = fn

    def __call__(self, *args):
        self.obs.forced = True
        return self.fn(*args)


def _pick(j):
    def pick(grads):
        return grads[j]
    return pick


class _Picks(dict):
    """j -> the callable taking gradient j out of the recomputed gradients (one per j, so a
    forced gradient's graph has the same structure every time)."""

    def __missing__(self, j):
        return self.setdefault(j, _pick(j))


_PICKS = _Picks()


def _regrad_fn(entry, n_leaves):
    """The jitted gradients of ``entry`` alone, from its leaves and cotangents as arguments."""
    fn = _REGRADS.get((entry, n_leaves))
    if fn is None:
        raw = entry.raw

        def regrad(*args):
            return raw(args[:n_leaves], args[n_leaves:])[0]

        fn = _REGRADS.setdefault((entry, n_leaves), jax.jit(regrad))
    return fn


def _layout(entry, items, leaves):
    """A ``_Layout`` for ``items`` (a tuple, gradient order) and these leaves; None where a
    Variable is gone, is updated twice, or is not read by this call (its value is no leaf)."""
    n_leaves = len(leaves)
    at = {}
    for k, v in enumerate(leaves):
        at.setdefault(id(v), k)
    ext, struct, checks, seen = [], [], [], set()
    for j, (ref, call, gpos, rest) in enumerate(items):
        var = ref()
        if var is None or var._id in seen:
            return None
        seen.add(var._id)
        refs = []
        for p, a in enumerate(rest):
            if p == gpos:
                refs.append(-1)
                continue
            if p == 0:
                a = _current(var)
            k = at.get(id(a))
            if k is None:
                if p == 0:   # a Variable this call does not read: an earlier model's, maybe
                    return None
                k = at[id(a)] = n_leaves + len(ext)
                ext.append((j, p))
            elif k < n_leaves:
                checks.append((k, j, p))
            refs.append(k)
        struct.append((call, j, tuple(refs)))
    lay = _Layout()
    lay.items = items
    lay.n_leaves = n_leaves
    lay.ext = tuple(ext)
    lay.checks = tuple(checks)
    lay.key = key = (entry, tuple(struct))
    prog = _PROGRAMS.get(key)
    if prog is None:
        raw = entry.raw
        struct = key[1]

        def run(leaves_all, given):
            grads, values = raw(leaves_all[:n_leaves], given)
            new = [call(*[grads[j] if r < 0 else leaves_all[r] for r in refs]) for call, j, refs in struct]
            return values, new

        prog = _PROGRAMS.setdefault(key, (run, jax.jit(run)))
    lay.run, lay.jitted = prog
    lay.regrad = _regrad_fn(entry, n_leaves)
    return lay


def _current(var):
    """A Variable's value: an array, or the thunk of its update while that is still pending."""
    v = var._val
    if type(v) is _Thunk and v.value is not None:
        return v.value
    return v


def _fits(lay, items, leaves, olds):
    """Whether ``lay`` holds for this call: the same items, and the inputs it found among the
    leaves are still there."""
    if lay is None or lay.n_leaves != len(leaves):
        return False
    prev = lay.items
    for j in range(len(items)):
        if items[j] is not prev[j]:
            return False
    for k, j, p in lay.checks:
        if leaves[k] is not (olds[j] if p == 0 else items[j][3][p]):
            return False
    return True


def run_predicted(track, entry, leaves, given):
    """Run ``entry`` with its updates predicted (see the module docstring); returns (the
    targets' values, the gradients as ``Pending`` tensors that recompute when needed), or None
    where no prediction can be made (a Variable is gone)."""
    obs = track.obs
    items_d = obs.items
    n = len(items_d)
    items = tuple([items_d[j] for j in range(n)])
    variables = []
    olds = []
    for it in items:
        var = it[0]()
        if var is None:
            track.obs = None   # an earlier model's updates: learn again
            return None
        variables.append(var)
        olds.append(_current(var))
    lay = track.layout
    if not _fits(lay, items, leaves, olds):
        lay = track.layout = _layout(entry, items, leaves)
        if lay is None:   # (a Variable the call does not read): not again for a while
            track.penalty = min(max(1, 2 * track.penalty), _PENALTY_MAX)
            track.skip = track.penalty
            return None
    if lay.ext:
        leaves_all = leaves + tuple([olds[j] if p == 0 else items[j][3][p] for j, p in lay.ext])
    else:
        leaves_all = leaves
    out = None
    for v in leaves_all:
        if type(v) is _Thunk:
            out = call_with_pending(lay.key, lay.run, leaves_all, given)
            if out is None:
                leaves_all = tuple(force_all(leaves_all))
            break
    values, new = lay.jitted(leaves_all, given) if out is None else out
    # the gradients: recomputed from this call's inputs if ever needed
    n_leaves = lay.n_leaves
    if out is None:
        args = leaves_all[:n_leaves] + given
    else:
        args = tuple([v.value if type(v) is _Thunk else v for v in leaves_all[:n_leaves]]) + given
    avals = obs.avals
    if obs.forced:   # (recomputed while this call computed the previous updates)
        _back_off(track, obs)
    obs = track.obs = _Obs(avals, items_d, True)
    group = _Thunk(_Regrad(obs, lay.regrad), args, None)
    table = {}
    rec = _Rec(obs, table)
    grads = []
    for j in range(n):
        g = _Thunk(_PICKS[j], (group,), avals[j])
        g.tag = (rec, j)
        grads.append(Pending(g))
        old = olds[j]
        if type(old) is _Thunk:
            old = old.value
        table[variables[j]._id] = (j, items[j], old, new[j])
    return values, tuple(grads)


def on_update(var, call, vals):
    """An update of ``var`` by ``call(*vals)`` (``vals[0]`` its value) with a pending delta:
    noted when it uses one gradient of a tagged call; the predicted value where it matches the
    prediction (else None: the caller keeps the update pending)."""
    n = len(vals)
    if n == 3:   # (value, lr, g) or (value, g, lr): the common ``v.assign_sub(lr * g)``
        a, b = vals[1], vals[2]
        if type(a) is _Thunk:
            if type(b) is not _Array:
                return None
            g, gpos = a, 1
        elif type(b) is _Thunk and type(a) is _Array:
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
            if ta is _Thunk:
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
            rest = item[3]
            if (jp == j and item[1] is call and item[2] == gpos and vals[0] is old
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
    if item is not None and item[1] is call and item[2] == gpos and item[0]() is var:
        rest = item[3]
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
    items[j] = (weakref.ref(var), call, gpos, tuple(rest))
    return None
