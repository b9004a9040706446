"""Pending values and the programs that compute them (the deferred executor's data).

A ``Thunk`` is how to compute one pending value: ``call(*args)``, the op's jitted callable
and its input arrays or thunks, with the value's ``aval`` (shape, dtype, weak type) known
without computing it.  It implements the core's ``Lazy``: a ``Pending`` Tensor holds one, so
does a Variable whose update is pending.  ``valued`` makes one that already holds its value
(a gradient handed out as ``Pending``).

Thunks form graphs (an op on a pending input holds its thunk).  The pending values a read
needs are computed together (``force_many``): one compiled program per structure of that
graph (the ops' jitted callables and their wiring), from the second time that structure is
seen (a structure seen once, or a graph of one op or of more than ``_FLUSH_MAX`` ops, runs op
by op: nothing is compiled for code that does not repeat).  Such a program returns the value
of every node it computes, and each node keeps its value (dropping its inputs).
``call_with_pending`` runs a graph inside another program (a gradient's: a training step's
pending Variable updates join it, one dispatch).  Walks tolerate a node computed meanwhile by
another thread (its ``args`` are read once: found computed, it is an input).

A pending value is never computed inside a JAX trace: while one runs (a value read while
``tapejax.function``, a control-flow body or ``jax.jit`` traces), it is computed outside it
(``jax.core.eval_context``), so it is never a tracer.
"""
from operator import attrgetter
from typing import Any, NamedTuple, Optional

import jax
import jax.core
import jax.numpy as jnp

from ..core.caches import LRU
from ..core.state import tracing
from ..core.tensor import Lazy

_Array = type(jnp.zeros(()))   # the concrete array type
_Tracer = jax.core.Tracer
_ShapeDtype = jax.ShapeDtypeStruct
_tuple_new = tuple.__new__

_AGELESS = 1 << 62


class Thunk(Lazy):
    """How to compute one pending value: ``call(*args)``, args being arrays or thunks.

    ``aval`` has the value's shape, dtype and weak type (the attribute name
    arrays use too, so a signature is built the same way for both).  ``tag``:
    a gradient's (call record, position), see ``runtime.speculate``; else None.
    What ``settle`` reads: ``used``, whether a later op took it as an input;
    ``born``, for an untaped op's result (``defer_untaped``), the oldest step
    whose pending graph it needs while it is pending (``_AGELESS`` for others);
    ``owner``, for a recorded op's result (``defer``), the recording thread's
    tape stack (which thread's step it belongs to); ``held``, for the same, a weak reference to
    the ``Pending`` that hands it out (alive while the user can still read it: the fused
    gradient returns such a value too, ``autodiff.gradient``).  ``group``, set on a Variable's
    pending update only (``updates``): what computes it together with every other pending update.
    """

    __slots__ = ("call", "args", "aval", "value", "tag", "used", "born", "owner", "held", "group",
                 "__weakref__")

    def __init__(self, call, args, aval):
        self.call = call
        self.args: Optional[tuple] = args
        self.aval = aval
        self.value = None
        self.tag: Optional[tuple] = None
        self.used = False
        self.born = _AGELESS
        self.owner: Optional[list] = None
        self.held: Any = None

    def set(self, value):
        # A pending value is computed outside any trace (``force_many``): a traced value is
        # never kept (the thunk stays pending and is computed when read outside the trace).
        if self.value is None and (type(value) is _Array or not isinstance(value, _Tracer)):
            self.value = value
            self.args = None   # the inputs are no longer needed

    def _holds_inputs(self):
        """Whether this still holds its inputs (pending: a lent buffer may be one of them,
        ``core.ownership.Loan``)."""
        return self.args is not None

    def force(self):
        """The value, computing what is still pending (``force_many``)."""
        if self.value is None:
            group = getattr(self, "group", None)   # (unset on all but a Variable's update)
            if group is not None:
                group()
            if self.value is None:
                force_many((self,))
        return self.value


def valued(value):
    """A thunk that already holds ``value`` (a gradient handed out as ``Pending``, see
    ``pending_results``)."""
    th = Thunk(None, None, value.aval)
    th.value = value
    return th



# -- computing pending values ---------------------------------------------------
# The pending thunks a value needs are computed together: one compiled program
# per structure of that graph (the ops' jitted callables and their wiring), from
# the second time that structure is seen (a structure seen once, or a graph of
# one op or of more than ``_FLUSH_MAX`` ops, runs op by op: nothing is compiled
# for code that does not repeat).  The graph is walked recursively (each node once)
# up to depth ``_DEPTH``, deeper graphs with an explicit stack.

_FLUSH_MAX = 256
_FLUSH = LRU("deferred_programs", 256)     # structure -> jitted program
_SEEN = LRU("deferred_structures", 1024)    # structures seen once
_FLUSH_PEEK = _FLUSH._data.get


def _run_op_by_op(order):
    for th in order:
        args = th.args
        if args is not None:   # None: computed meanwhile (by another thread)
            th.set(th.call(*[a.value if type(a) is Thunk else a for a in args]))


def _program(spec):
    """The pure function of a pending graph's inputs that computes every node (``spec``, see
    ``_Walk``) and returns all their values."""
    def run(*inputs):
        vals = []
        for call, refs in spec:
            vals.append(call(*[vals[r] if r >= 0 else inputs[-1 - r] for r in refs]))
        return vals
    return run


class _Step(NamedTuple):
    """One node of a pending graph's program (part of its key): the node's callable and where
    its arguments come from (an earlier node j >= 0, or input k as -1 - k)."""

    call: Any
    refs: tuple


class _Deep(Exception):
    """A pending graph deeper than the recursive walk goes (``_walk_deep`` walks it)."""


_DEPTH = 200   # the recursive walk's depth limit (Python's own is 1000)


class _Walk:
    """A pending graph as a walk lays it out, inputs before their users: ``order`` the nodes,
    ``index`` node -> position, ``spec`` a ``_Step`` per node (an input used twice is passed
    once), ``inputs`` the arrays, ``at`` id(input) -> k.

    A node's ``args`` are read once, into a local: another thread that computes a node meanwhile
    sets its value before it drops its ``args`` (``Thunk.set``), so ``args`` None means "an
    input now", and a node whose value comes while it is walked is computed here once more, from
    the inputs it had (the same value; ``set`` keeps the first)."""

    __slots__ = ("order", "index", "spec", "inputs", "at")

    def __init__(self):
        self.order = []
        self.index = {}
        self.spec = []
        self.inputs = []
        self.at = {}

    def input_ref(self, a):
        at = self.at
        k = at.get(id(a))
        if k is None:
            k = at[id(a)] = len(self.inputs)
            self.inputs.append(a)
        return -1 - k

    def place(self, th, refs):
        j = self.index[th] = len(self.order)
        self.order.append(th)
        self.spec.append(_tuple_new(_Step, (th.call, tuple(refs))))   # (one C call: a hot path)
        return j


def _visit(th, args, depth, w):
    """Place ``th`` (pending, its ``args`` read by the caller) after its pending arguments; its
    index in ``w``."""
    if depth > _DEPTH:
        raise _Deep
    index = w.index
    refs = []
    for a in args:
        if type(a) is Thunk:
            v = a.value
            if v is None:
                j = index.get(a)
                if j is None:
                    a_args = a.args
                    if a_args is None:   # computed meanwhile (another thread): an input now
                        refs.append(w.input_ref(a.value))
                        continue
                    j = _visit(a, a_args, depth + 1, w)
                refs.append(j)
                continue
            a = v
        refs.append(w.input_ref(a))
    return w.place(th, refs)


def _walk(roots):
    """The pending graph ``roots`` need (``_Walk``).  Recursive (the common, shallow graph: each
    node is visited once); ``_Deep`` past ``_DEPTH``."""
    w = _Walk()
    index = w.index
    for root in roots:
        if root.value is None and root not in index:
            args = root.args
            if args is not None:
                _visit(root, args, 0, w)
    return w


def _walk_deep(roots):
    """``_walk`` for a graph of any depth: an explicit stack (a node is looked at again once
    its pending arguments are placed)."""
    w = _Walk()
    index = w.index
    for root in roots:
        if root.value is not None or root in index:
            continue
        stack = [root]
        while stack:
            th = stack[-1]
            args = th.args
            if th in index or args is None:   # placed, or computed meanwhile
                stack.pop()
                continue
            refs = []
            for a in args:   # the wiring, unless an argument is still to be visited
                if type(a) is Thunk:
                    v = a.value
                    if v is None:
                        j = index.get(a)
                        if j is not None:
                            if refs is not None:
                                refs.append(j)
                            continue
                        if a.args is not None:
                            stack.append(a)
                            refs = None
                            continue
                        v = a.value   # computed meanwhile (another thread): an input
                    a = v
                if refs is not None:
                    refs.append(w.input_ref(a))
            if refs is None:
                continue
            stack.pop()
            w.place(th, refs)
    return w


def _graph(roots):
    """The pending graph ``roots`` need (``_Walk``), walked recursively, or with an explicit stack
    where it is deeper than ``_DEPTH``.  A forced program returns the value of every node it
    computes, and each node keeps it (dropping its inputs): whoever holds a node (a Pending
    tensor, a tape's node, a Variable, a pending user outside this graph) reads it without
    computing it again, and a node nobody holds is freed with its value.  (Which nodes are
    returned is a rule of the graph alone, not of who refers to them.)"""
    try:
        return _walk(roots)
    except _Deep:
        return _walk_deep(roots)


def clear_programs():
    """Drop the compiled programs of pending values and the structures seen once."""
    _FLUSH.clear()
    _SEEN.clear()


def _compiled(key, build):
    """The jitted program for ``key`` (built by ``build()``), or None the first time ``key`` is
    seen (the caller runs op by op: nothing is compiled for code that does not repeat)."""
    fn = _FLUSH_PEEK(key)   # a hit does not refresh recency (as the aval cache)
    if fn is None:
        if _SEEN.get(key) is None:
            _SEEN[key] = True
            return None
        fn = _FLUSH.setdefault(key, jax.jit(build()))
    return fn


def force_many(roots):
    """Compute the pending thunks ``roots`` need, in one compiled program when the graph's
    structure repeats (see above).  Inside a JAX trace (a value read while ``tapejax.function``,
    a control-flow body or ``jax.jit`` traces) they are computed outside it
    (``jax.core.eval_context``): a pending value is never a tracer."""
    if tracing():
        with jax.core.eval_context():
            _force_many(roots)
    else:
        _force_many(roots)


def _force_many(roots):
    g = _graph(roots)
    order = g.order
    n = len(order)
    if n == 0:
        return
    if n == 1 or n > _FLUSH_MAX:
        _run_op_by_op(order)
        return
    key = tuple(g.spec)
    fn = _compiled(key, lambda: _program(key))
    if fn is None:
        _run_op_by_op(order)
        return
    for th, v in zip(order, fn(*g.inputs)):
        th.set(v)


def call_with_pending(entry_key, fn, leaves, extra):
    """``fn(leaves, extra)`` (a pure function, e.g. the fused forward and gradient) where some
    ``leaves`` are thunks: their pending graph runs inside the same compiled program (a training
    step's pending Variable updates join its gradient: one dispatch, not two), from the second
    time the structure is seen.  Returns ``fn``'s result, computed; the graph's thunks get their
    values.  None where it did not run (the first time, a graph too large, or no thunk still
    pending): the caller computes the thunks (``force_all``) and calls its own program."""
    roots = [v for v in leaves if type(v) is Thunk and v.value is None]
    if not roots or tracing():   # (inside a trace the caller computes them: ``force_all``)
        return None
    g = _graph(roots)
    order, index, spec = g.order, g.index, g.spec
    if not order or len(order) > _FLUSH_MAX:
        return None
    # a leaf computed meanwhile (another thread) and not placed in the graph is passed directly
    slots = tuple([index.get(v, -1) if type(v) is Thunk else -1 for v in leaves])
    key = (entry_key, tuple(spec), slots)
    prog = _compiled(key, lambda: _with_graph(fn, _program(spec), slots))
    if prog is None:
        return None
    direct = tuple([(v.value if type(v) is Thunk else v) for v, s in zip(leaves, slots) if s < 0])
    result, values = prog(g.inputs, direct, extra)
    for th, v in zip(order, values):
        th.set(v)
    return result


def _with_graph(fn, graph, slots):
    """``fn`` with its pending leaves (``slots[i] >= 0``: that node of ``graph``) computed first;
    returns ``fn``'s result and every node's value."""
    def run(inputs, direct, extra):
        vals = graph(*inputs)
        it = iter(direct)
        leaves = tuple([vals[s] if s >= 0 else next(it) for s in slots])
        return fn(leaves, extra), vals
    return run


def force_all(vals):
    """``vals`` with every thunk replaced by its value (the pending ones computed together)."""
    force_many([v for v in vals if type(v) is Thunk])
    return [v.value if type(v) is Thunk else v for v in vals]


# -- shapes and dtypes without computing ------------------------------------------

#: (jitted callable, input avals) -> output aval (``jax.eval_shape``).  Bounded.
_AVALS = LRU("deferred_avals", 8192)
_AVAL_PEEK = _AVALS._data.get
_ShapedArray = type(jnp.zeros(()).aval)


def _out_aval(call, args, key):
    out = jax.eval_shape(call, *[_ShapeDtype(a.aval.shape, a.aval.dtype, weak_type=a.aval.weak_type)
                                 for a in args])
    aval = _ShapedArray(out.shape, out.dtype, weak_type=getattr(out, "weak_type", False))
    return _AVALS.setdefault(key, aval)


def aval_for(call, args):
    """The output aval of ``call(*args)`` (arrays or thunks); raises what tracing ``call`` raises."""
    if len(args) == 1:
        key = (call, args[0].aval)
    elif len(args) == 2:
        key = (call, args[0].aval, args[1].aval)
    else:
        key = (call, *[a.aval for a in args])
    a = _AVAL_PEEK(key)
    return a if a is not None else _out_aval(call, args, key)


def avals_for(call, args):
    """The output avals of ``call(*args)`` (arrays or thunks) for a call that returns a sequence of
    arrays; raises what tracing ``call`` raises."""
    key = ("many", call, *[a.aval for a in args])
    a = _AVAL_PEEK(key)
    if a is not None:
        return a
    outs = jax.eval_shape(call, *[_ShapeDtype(a.aval.shape, a.aval.dtype, weak_type=a.aval.weak_type)
                                  for a in args])
    avals = tuple([_ShapedArray(o.shape, o.dtype, weak_type=getattr(o, "weak_type", False)) for o in outs])
    return _AVALS.setdefault(key, avals)


#: Whether a concrete array is committed to a device (``jax.device_put``, a sharded Variable).
committed = attrgetter("_committed" if hasattr(jnp.zeros(()), "_committed") else "committed")


def concrete(vals):
    """Whether every value is a thunk or a concrete array on the default device, not committed to
    one (what a thunk may take: a committed array keeps its device checks, which run eagerly)."""
    for v in vals:
        tv = type(v)
        if tv is not Thunk and (tv is not _Array or committed(v)):
            return False
    return True
