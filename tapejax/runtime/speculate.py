"""Speculative updates: a training step's Variable updates computed inside its gradient's program.

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
values), so an optimizer whose slots and counters exceed ``_GROUP_BYTES_MAX``
is not predicted: its own program donates them.

A miss costs little unless a gradient the program did not return is needed
after all (read, or used by an update that did not match): that recomputes it,
and the entry then stops predicting for 1, 2, 4, ... up to 1024 calls (a
prediction whose updates all matched halves the wait), so a loop that reads its gradients
every step pays the recompute about log2(steps) times.  Nothing is predicted
with deferral off or inside ``tapejax.function`` (no pending gradients), under
an outer tape (``_replay._call_gradient``), nor for a Variable committed to a
device (its update is not deferred).
"""
import enum
import threading
import weakref
from typing import Final

import jax

from ..core.caches import LRU
from .pending import Pending, _Array, _Thunk, call_with_pending, env_flag, force_all, set_flag, settle

_PENALTY_MAX = 1024
#: An optimizer update is predicted only while its state besides the Variables (slots,
#: counters) holds at most this many bytes: the predicted program cannot update that state in
#: place (a mismatch needs the old values), so the old and the new state are both alive while
#: it runs, where the optimizer's own program donates it.  (The Variables cost nothing extra:
#: the gradients, as big, are then never made.)  Above it the step is compute-bound anyway.
_GROUP_BYTES_MAX = 64 << 20


class _Flags:
    enabled = env_flag("TAPEJAX_SPECULATE")


_flags = _Flags()


def set_speculative_updates(enabled):
    """Turn predicted Variable updates on (the default) or off, for every thread (see the
    module docstring of ``tapejax._speculate``).  Values are the same either way (up to float
    rounding); off, a manual step's updates are computed by the next step's program and an
    optimizer's by its own.  Returns the previous setting."""
    return set_flag(_flags, enabled)


def speculative_updates():
    """Whether a step's updates (``assign_sub``, ``apply_gradients``) are predicted into its gradient's
    program (``set_speculative_updates``)."""
    return _flags.enabled


class _Obs:
    """The updates seen after one gradient call (``items``: gradient position -> (Variable ref,
    callable, position of the gradient among the callable's arguments, the other arguments with
    None for the Variable's value and the gradient), or the ``_Group`` of an optimizer's update
    that used it); ``prev``: the previous call's items;
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


class _Rec:
    """One gradient call, as its gradients' thunks see it (their ``tag`` is ``(rec, j)``): what
    it observes and, where it predicted, Variable id -> (the gradient's position, item, the
    Variable's value the prediction read, the predicted value).  Nothing here refers back to
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


class _Layout:
    """How a prediction's inputs are laid out: the items it was built from; the updates among
    them (``units``: (item, first Variable slot, number of Variables, gradient position)), the
    Variables they update and read (``vrefs``, weak references; a unit's outputs are as many, in
    the same order); the number of leaves; the inputs added after them (``ext``: (Variable slot,
    or -1 for the constant ``obj``, obj)); the inputs found among the leaves (``checks``: (leaf
    index, slot, obj), checked by identity on every call); the programs' key (entry, per unit
    its callable and wiring); the program (raw and jitted) and the gradients' recompute."""

    __slots__ = ("items", "units", "vrefs", "groups", "n_leaves", "ext", "checks", "key", "run",
                 "jitted", "regrad")


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


class _Gone(enum.Enum):
    """The mark of a layout whose Variable (or optimizer update) is gone."""
    GONE = "gone"


_GONE: Final = _Gone.GONE


def _layout(entry, items, leaves):
    """A ``_Layout`` for ``items`` (a tuple, gradient order) and these leaves; ``_GONE`` where a
    Variable (or an optimizer's update) is gone, None where a Variable is updated twice or one
    that a gradient updates is not read by this call (its value is no leaf)."""
    n_leaves = len(leaves)
    at = {}
    for k, v in enumerate(leaves):
        at.setdefault(id(v), k)
    consts = {}
    units, vrefs, groups, ext, struct, checks, seen = [], [], [], [], [], [], set()

    def place(value, slot, obj):
        """The input index of a Variable's value (``slot``) or of the constant ``obj``: a leaf
        (checked on every call) or an input of its own.  (A Variable's value is never shared
        with another input that is not a leaf: two Variables holding one array now may not
        later.)"""
        k = at.get(id(value))
        if k is not None:
            checks.append((k, slot, obj))
            return k
        k = consts.get(id(value)) if slot < 0 else None
        if k is None:
            k = n_leaves + len(ext)
            ext.append((slot, obj))
            if slot < 0:
                consts[id(value)] = k
        return k

    def claim(ref):
        """The Variable of ``ref``, now one of the layout's (``_GONE`` where it is gone, None
        where it is updated twice)."""
        var = ref()
        if var is None:
            return _GONE
        if var._id in seen:
            return None
        seen.add(var._id)
        vrefs.append(ref)
        return var

    done = set()
    for j, item in enumerate(items):
        if id(item) in done:   # a group, seen at its first gradient
            continue
        done.add(id(item))
        s0 = len(vrefs)
        if type(item) is _Group:
            fn = item.fn()
            if fn is None:
                return _GONE
            refs = []
            for i, ref in enumerate(item.refs):
                var = claim(ref)
                if var is None or var is _GONE:
                    return var
                var._share()   # (a predicted program's input, which its records keep)
                k = place(_current(var), len(vrefs) - 1, None)
                if i < len(item.js) and k >= n_leaves:   # an updated Variable this call does not read
                    return None
                refs.append(k)
            extra = tuple([None if e is None else place(e, -1, e) for e in item.extra])
            struct.append((item.fn, item.js, tuple(refs), extra))
            groups.append(item)
            units.append((item, s0, len(item.refs), j))
            continue
        ref, call, gpos, rest = item
        var = claim(ref)
        if var is None or var is _GONE:
            return var
        refs = []
        for p, a in enumerate(rest):
            if p == gpos:
                refs.append(-1)
            elif p == 0:
                var._share()
                k = place(_current(var), s0, None)
                if k >= n_leaves:   # a Variable this call does not read: an earlier model's, maybe
                    return None
                refs.append(k)
            else:
                refs.append(place(a, -1, a))
        struct.append((call, j, tuple(refs)))
        units.append((item, s0, 1, j))
    lay = _Layout()
    lay.items = items
    lay.units = tuple(units)
    lay.vrefs = tuple(vrefs)
    lay.groups = tuple(groups)
    lay.n_leaves = n_leaves
    lay.ext = tuple(ext)
    lay.checks = tuple(checks)
    lay.key = key = (entry, tuple(struct))
    prog = _PROGRAMS.get(key)
    if prog is None:
        prog = _PROGRAMS.setdefault(key, _program(entry.raw, key[1], n_leaves))
    lay.run, lay.jitted = prog
    lay.regrad = _regrad_fn(entry, n_leaves)
    return lay


def _program(raw, struct, n_leaves):
    """(raw, jitted) ``run(leaves and the inputs after them, cotangents) -> (targets' values,
    updated values)``: the gradient call ``raw`` and each update of ``struct`` on its gradients.
    An optimizer's update is found through its weak reference when traced (the program does
    not keep the optimizer alive)."""
    def run(leaves_all, given):
        grads, values = raw(leaves_all[:n_leaves], given)
        new = []
        for unit in struct:
            if len(unit) == 3:
                call, j, refs = unit
                new.append(call(*[grads[j] if r < 0 else leaves_all[r] for r in refs]))
            else:
                fn, js, refs, extra = unit
                new.extend(fn()._f([leaves_all[r] for r in refs], [grads[j] for j in js],
                                   *[None if r is None else leaves_all[r] for r in extra]))
        return values, new

    return run, jax.jit(run)


def _current(var):
    """A Variable's value: an array, or the thunk of its update while that is still pending."""
    v = var._val
    if type(v) is _Thunk and v.value is not None:
        return v.value
    return v


def _currents(lay, keep):
    """The current values of the Variables ``lay`` updates (None where one, or an optimizer's
    update, is gone); ``keep`` gets them and the optimizers' updates (held while the call runs)."""
    olds = []
    for ref in lay.vrefs:
        var = ref()
        if var is None:
            return None
        keep.append(var)
        v = var._share()
        olds.append(v.value if type(v) is _Thunk and v.value is not None else v)
    for g in lay.groups:
        fn = g.fn()
        if fn is None:
            return None
        keep.append(fn)
    return olds


def _fits(lay, leaves, olds):
    """Whether ``lay``'s checks hold for this call: the inputs it found among the leaves are
    still there."""
    for k, slot, obj in lay.checks:
        if leaves[k] is not (olds[slot] if slot >= 0 else obj):
            return False
    return True


def _same_items(lay, items, leaves):
    """Whether ``lay`` was built from these very items, for as many leaves."""
    if lay is None or lay.n_leaves != len(leaves):
        return False
    prev = lay.items
    for j in range(len(items)):
        if items[j] is not prev[j]:
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
    lay = track.layout
    olds = None
    keep = []
    if _same_items(lay, items, leaves):
        olds = _currents(lay, keep)
        if olds is None:
            track.obs = None   # an earlier model's updates: learn again
            return None
        if not _fits(lay, leaves, olds):
            olds = None
    if olds is None:
        lay = track.layout = _layout(entry, items, leaves)
        if lay is _GONE:
            track.layout = None
            track.obs = None
            return None
        if lay is None:   # (a Variable the call does not read): not again for a while
            track.penalty = min(max(1, 2 * track.penalty), _PENALTY_MAX)
            track.skip = track.penalty
            return None
        olds = _currents(lay, keep)
        if olds is None:   # (gone meanwhile, on another thread)
            track.obs = None
            return None
    if lay.ext:
        leaves_all = leaves + tuple([olds[slot] if slot >= 0 else obj for slot, obj in lay.ext])
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
    for item, s0, m, j in lay.units:
        if type(item) is tuple:
            old = olds[s0]
            if type(old) is _Thunk:
                old = old.value
            table[item[0]()._id] = (j, item, old, new[s0])
        else:
            table[item.fn()] = (item, tuple([o.value if type(o) is _Thunk else o for o in olds[s0:s0 + m]]),
                                new[s0:s0 + m])
    settle()   # the end of a step (as ``_lazy.pending_results``)
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
    if type(item) is tuple and item[1] is call and item[2] == gpos and item[0]() is var:
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
        tag = g._thunk.tag
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
        if _state_bytes(state[len(js):]) > _GROUP_BYTES_MAX:
            return None   # too big to hold twice: not noted, the optimizer updates it in place
        obs.unstable = True
        item = _Group(fn, state, js, extra)
    _note(obs, items, js, item)
    return None


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
