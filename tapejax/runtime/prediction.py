"""Predicted programs: a gradient call that also computes the updates its gradients go to.

``speculate`` observes which updates used a compiled gradient's results and decides when a
call predicts them (``speculate.predicts``); this module builds and runs that call
(``run_predicted``): the gradient program and each predicted update in one jitted program
(``autodiff.program``), with its inputs laid out once per structure (``_Layout``: where each updated
Variable's value and each constant come from among the call's leaves, checked by identity on
every call), and each gradient handed out as a ``Pending`` value that recomputes the call's
gradients only if something needs it (``_Regrad``: with the gradient's own compiled program,
so a read compiles nothing).  The user's updates then take the
predicted values when they match (``speculate.on_update`` / ``on_apply``).

A predicted program is compiled in the background (``speculate.set_background_compile``, on
by default): the first call that would predict with a new program starts XLA's compile on a
worker thread (``jax.jit(...).lower(shapes).compile()``, which fills JAX's caches, so the
program's first call later only lowers it again) and runs the plain call instead, as do the
calls after it until the compile is done; from then on the calls predict.  The plain call is
what a call that does not predict runs anyway (its pending leaves computed first, as a
prediction's first call does), so no value depends on when the compile ends.  The worker traces
and lowers with CPython's switch interval shortened (``WORKER_SWITCH_INTERVAL``), so that the
steps running meanwhile are not held up by its Python.  Off, the first
predicting call compiles on the caller's thread (the third step of a loop waits for it).
"""
import enum
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final, NamedTuple, Optional

import jax

from ..core.caches import LRU
from ..core.ownership import note_capture
from ..core.tensor import Pending
from .settle import settle
from .speculate import (
    _PENALTY_MAX,
    _TRACKS,
    _back_off,
    _current,
    _Group,
    _GroupHit,
    _Hit,
    _Item,
    _Obs,
    _Rec,
    background_compile,
)
from .thunks import Thunk, call_with_pending, force_all

#: (compiled entry, prediction structure) -> its ``_Prog``.
_PROGRAMS = LRU("speculative_programs", 256)
#: (compiled entry, number of leaves) -> the gradients' recompute (``_regrad_fn``).
_REGRADS = LRU("speculative_regradients", 256)

def clear():
    """Forget every prediction and its programs (``clear_cache``)."""
    _TRACKS.clear()
    _PROGRAMS.clear()
    _REGRADS.clear()


class _Prog:
    """A predicted program: ``run`` (raw) and ``jitted``; ``ready`` once its first call may
    run it (compiled, or compiling is left to that call); ``future``, its background compile."""

    __slots__ = ("run", "jitted", "ready", "future")

    def __init__(self, run, jitted):
        self.run = run
        self.jitted = jitted
        self.ready = False
        self.future: Optional[Future] = None


_POOL: "list[ThreadPoolExecutor]" = []   # the one worker thread, made on first use
_POOL_LOCK = threading.Lock()
_INFLIGHT: "set[Future]" = set()


#: CPython's thread switch interval while the worker traces and lowers (seconds; its default is
#: 5 ms).  The training thread gives up the GIL at every dispatch and blocking read; with the
#: default it then waits up to 5 ms for the worker's Python each time (a convoy: a loop's 1 ms
#: step took ~45 ms while a predicted program traced).  XLA's compile itself releases the GIL.
WORKER_SWITCH_INTERVAL: Final = 0.0005


class _ShortSwitch:
    """The process's switch interval at most ``WORKER_SWITCH_INTERVAL`` for a block (the worker's
    trace and lowering), put back after unless someone changed it meanwhile."""

    __slots__ = ("old", "mine")

    def __enter__(self):
        self.old = sys.getswitchinterval()
        self.mine = None
        if self.old > WORKER_SWITCH_INTERVAL:
            sys.setswitchinterval(WORKER_SWITCH_INTERVAL)
            self.mine = sys.getswitchinterval()   # (as CPython keeps it: whole microseconds)

    def __exit__(self, *exc):
        if self.mine is not None and sys.getswitchinterval() == self.mine:   # (a change meanwhile wins)
            sys.setswitchinterval(self.old)


def _compile(jitted, args):
    """XLA's compile of ``jitted`` for ``args`` (shapes), on the worker thread.  A failure is
    left to the caller's first call, which traces and compiles again and raises it there."""
    try:
        with _ShortSwitch():
            lowered = jitted.lower(*args)
        lowered.compile()
    except Exception:  # noqa: BLE001 - raised again, where it belongs, by the program's first call
        pass


def _start_compile(prog, args):
    """Compile ``prog`` for the input shapes ``args`` on the worker thread (once)."""
    with _POOL_LOCK:
        if prog.future is not None:
            return
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="tapejax-compile"))
        fut = prog.future = _POOL[0].submit(_compile, prog.jitted, args)
        _INFLIGHT.add(fut)
    fut.add_done_callback(_INFLIGHT.discard)


def _shape(v):
    """What ``jax.jit(...).lower`` takes for an input: an array's or a pending value's shape."""
    if type(v) is Thunk:
        if v.value is not None:
            v = v.value
        else:
            a = v.aval
            return jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)
    if isinstance(v, jax.Array):
        return jax.ShapeDtypeStruct(v.shape, v.dtype, weak_type=v.weak_type)
    return v


def _compiling(lay, leaves, given) -> bool:
    """Whether this call runs the plain program while ``lay``'s compiles in the background
    (starting that compile on its first call); False once it may run (``prog.ready``) or where
    the call is left to find out what it can (a Variable gone, a shape not known)."""
    prog = lay.prog
    fut = prog.future
    if fut is not None:
        if not fut.done():
            return True
        prog.ready = True
        return False
    if not background_compile():
        prog.ready = True
        return False
    ext = []
    for slot, obj in lay.ext:
        if slot >= 0:
            var = lay.vrefs[slot]()
            if var is None:
                return False
            obj = _current(var)
        ext.append(obj)
    args = (leaves + tuple(ext) if ext else leaves, given)
    for v in args[0]:
        if type(v) is Thunk and v.value is None and v.aval is None:
            return False
    _start_compile(prog, jax.tree_util.tree_map(_shape, args))
    return True


def wait_compiles(timeout: Optional[float] = None) -> None:
    """Wait for the predicted programs compiling in the background (``timeout`` seconds at most)."""
    for fut in list(_INFLIGHT):
        try:
            fut.result(timeout)
        except TimeoutError:
            return


class _Unit(NamedTuple):
    """One predicted update in a layout: the ``_Item`` (or ``_Group``), its first Variable slot
    among the layout's Variables, how many Variables it writes, its (first) gradient's position."""

    item: Any
    first: int
    count: int
    j: int


class _Ext(NamedTuple):
    """An input the prediction adds after the call's leaves: a Variable's value (``slot`` >= 0)
    or the constant ``obj`` (``slot`` -1)."""

    slot: int
    obj: Any


class _Check(NamedTuple):
    """An input found among the call's leaves, checked by identity on every call: leaf ``leaf``
    must be the Variable's value (``slot`` >= 0) or the constant ``obj``."""

    leaf: int
    slot: int
    obj: Any


class _UpdateStep(NamedTuple):
    """A unit of the predicted program (part of its key): ``call`` on the arguments ``refs``
    (-1: gradient ``j``; else an input index)."""

    call: Any
    j: int
    refs: tuple


class _GroupStep(NamedTuple):
    """An optimizer's unit of the predicted program (part of its key): its ``Donating`` (weakly),
    the gradients' positions, the state inputs, the extra inputs (None: not given)."""

    fn: Any
    js: tuple
    refs: tuple
    extra: tuple


class _Layout:
    """How a prediction's inputs are laid out: the items it was built from; the updates among
    them (``units``: ``_Unit`` records), the Variables they update and read (``vrefs``, weak
    references; a unit's outputs are as many, in the same order); the number of leaves; the
    inputs added after them (``ext``: ``_Ext``); the inputs found among the leaves (``checks``:
    ``_Check``, checked by identity on every call); the programs' key (entry, and per unit its
    ``_UpdateStep`` or ``_GroupStep``); the program (raw and jitted) and the gradients'
    recompute."""

    __slots__ = ("items", "units", "vrefs", "groups", "n_leaves", "ext", "checks", "key", "run",
                 "jitted", "regrad", "prog")


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
    """The gradients of ``entry``, from its leaves and cotangents as arguments: its own compiled
    program (``entry.fn``, which the calls before the prediction ran: the same inputs, so no
    compile), its targets' values dropped.  (A program of the gradients alone would be a new
    compile, as long as the gradient's, for what a loop reads once, if ever: a short loop
    reading its last gradient paid it.)"""
    fn = _REGRADS.get((entry, n_leaves))
    if fn is None:
        compiled = entry.fn

        def regrad(*args):
            return compiled(args[:n_leaves], args[n_leaves:])[0]

        fn = _REGRADS.setdefault((entry, n_leaves), regrad)
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
            checks.append(_Check(k, slot, obj))
            return k
        k = consts.get(id(value)) if slot < 0 else None
        if k is None:
            k = n_leaves + len(ext)
            ext.append(_Ext(slot, obj))
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
                k = place(_current(var), len(vrefs) - 1, None)
                if i < len(item.js) and k >= n_leaves:   # an updated Variable this call does not read
                    return None
                refs.append(k)
            extra = tuple([None if e is None else place(e, -1, e) for e in item.extra])
            struct.append(_GroupStep(item.fn, item.js, tuple(refs), extra))
            groups.append(item)
            units.append(_Unit(item, s0, len(item.refs), j))
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
                k = place(_current(var), s0, None)
                if k >= n_leaves:   # a Variable this call does not read: an earlier model's, maybe
                    return None
                refs.append(k)
            else:
                refs.append(place(a, -1, a))
        struct.append(_UpdateStep(call, j, tuple(refs)))
        units.append(_Unit(item, s0, 1, j))
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
    lay.prog = prog
    lay.run, lay.jitted = prog.run, prog.jitted
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
            if type(unit) is _UpdateStep:
                new.append(unit.call(*[grads[unit.j] if r < 0 else leaves_all[r] for r in unit.refs]))
            else:
                new.extend(unit.fn()._f([leaves_all[r] for r in unit.refs], [grads[j] for j in unit.js],
                                        *[None if r is None else leaves_all[r] for r in unit.extra]))
        return values, new

    return _Prog(run, jax.jit(run))



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
        olds.append(v.value if type(v) is Thunk and v.value is not None else v)
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
        if not lay.prog.ready and _compiling(lay, leaves, given):
            force_all(leaves)   # (the plain call then runs the gradient alone, as compiled)
            return None   # compiling in the background: the plain call meanwhile
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
        if not lay.prog.ready and _compiling(lay, leaves, given):
            force_all(leaves)
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
        if type(v) is Thunk:
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
        args = tuple([v.value if type(v) is Thunk else v for v in leaves_all[:n_leaves]]) + given
    avals = obs.avals
    if obs.forced:   # (recomputed while this call computed the previous updates)
        _back_off(track, obs)
    obs = track.obs = _Obs(avals, items_d, True)
    note_capture()   # (the recompute holds this call's inputs)
    group = Thunk(_Regrad(obs, lay.regrad), args, None)
    table = {}
    rec = _Rec(obs, table)
    grads = []
    for j in range(n):
        g = Thunk(_PICKS[j], (group,), avals[j])
        g.tag = (rec, j)
        grads.append(Pending(g))
    for item, s0, m, j in lay.units:
        if type(item) is _Item:
            old = olds[s0]
            if type(old) is Thunk:
                old = old.value
            table[item.ref()._id] = _Hit(j, item, old, new[s0])
        else:
            table[item.fn()] = _GroupHit(item, tuple([o.value if type(o) is Thunk else o for o in olds[s0:s0 + m]]),
                                new[s0:s0 + m])
    settle()   # the end of a step (as ``runtime.deferred.results``)
    return values, tuple(grads)

