"""Deferred execution: the forward runs inside the compiled gradient, the updates in one program.

An eager op costs a JAX dispatch (4-6 µs on a small CPU) whatever its size,
and in a training step most ops are recorded by a tape whose ``gradient``
replays them anyway.  So, while plain ``GradientTape``s record, an op that a
tape records is not dispatched: its result is a ``Pending`` tensor that knows
its shape and dtype (``jax.eval_shape``, cached per op and input signature)
and how to compute its value (a ``_Thunk``: the op's jitted callable and its
input arrays or thunks).  ``tape.gradient`` then computes the targets'
values and the gradients in one compiled program (``_replay``: the replay
form, forward from the true leaves inside ``jax.vjp``), and fills in the
pending targets, e.g. the loss the step prints.

The gradients come back computed, as ``Pending`` tensors that hold their
values (``pending_results``).  An op that no tape records, on a pending input,
stays pending too (``defer_untaped``: ``lr * g``), and so does a Variable's
``assign_sub``/``assign_add`` with a pending delta (``Variable._defer_update``:
the Variable's value becomes a thunk).  The next step's tape reads the
Variable and the read stays pending (``Variable._read``: the tape's node
holds the thunk); its gradient then computes the pending updates inside its
own compiled program (``call_with_pending``: the update graph, then the fused
forward and gradient), so a training step is ONE dispatch.  (Where a loop's
updates repeat, ``assign_sub``s or an optimizer's, ``_speculate`` goes one step
further: the gradient's program computes this step's updates itself and
returns no gradients.)  Any other read of
a Variable with a pending update computes every pending update together; a
graph of pending thunks is computed by ``force_many`` as one compiled
program per structure.  Both compile from the second time a structure is
seen (a structure seen once runs op by op); such a program returns the value
of every node it computes.  Walks tolerate a node computed meanwhile by another
thread (its ``args`` are read once: found computed, it is an input).

What an unread pending value keeps alive is bounded (``settle``): a gradient
call ends a step, and the pending values of earlier steps that may still be
read (a metric kept in a list, ``tot = tot + loss``) are computed then, so a
loop holds about two steps' graphs, not one per step.

Anything else that needs a pending value (``numpy()``, printing, an op that
is not deferred, ``jnp.asarray``) *computes* it (``force_many``).  Semantics
are unchanged: a thunk holds the input *values* (a Variable's value as it was
read; host data is copied when the op is called, ``_tensor.host_snapshot``, and
never deferred), shape and dtype errors are raised when the op is called (``eval_shape``
traces the same function the eager call would), ops that no tape records and
that have no pending input run at once, and nothing is deferred inside
``tapejax.function`` or control-flow traces, under ``gradient_override_map``,
while any other recorder (a forward accumulator, a custom-gradient trace) is
on the tape stack, or when an input is not a concrete array or is committed
to a device (``jax.device_put``, sharded Variables: their device checks stay
eager).

``set_deferred_execution(False)`` (or ``TAPEJAX_DEFERRED=0`` in the
environment) runs every op at once, as before.
"""
import os
import threading
import weakref

import jax
import jax.core
import jax.numpy as jnp

from ..core.caches import LRU
from ..core.state import _local, next_id
from ..core.tensor import Tensor, TensorShape

_Array = type(jnp.zeros(()))   # the concrete array type
_ShapeDtype = jax.ShapeDtypeStruct
_Tracer = jax.core.Tracer

try:   # JAX's own test: no trace (jit, vmap, grad, eval_shape ...) is running on this thread
    from jax._src.core import trace_state_clean as _trace_state_clean
except ImportError:  # pragma: no cover - a JAX without it: assume a trace may be running
    def _trace_state_clean() -> bool:
        return False


def tracing():
    """Whether a JAX trace is running on this thread (a pending value computed now must be
    computed outside it: ``jax.core.eval_context``, see ``force_many``)."""
    return not _trace_state_clean()


def env_flag(name):
    """An on/off setting from the environment variable ``name``: on unless 0/false/no/off."""
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "no", "off")


def set_flag(flags, enabled):
    """``flags.enabled = enabled`` (a bool, else TypeError); returns the previous setting."""
    if not isinstance(enabled, bool):
        raise TypeError(f"Argument `enabled` must be a bool; got {enabled!r} of type "
                        f"{type(enabled).__name__}")
    prev = flags.enabled
    flags.enabled = enabled
    return prev


class _Flags:
    enabled = env_flag("TAPEJAX_DEFERRED")


_flags = _Flags()


def set_deferred_execution(enabled):
    """Turn deferred execution of recorded ops on (the default) or off, for every thread.

    Off, every op is dispatched when it is called (the values are the same;
    only the number of dispatches changes).  Returns the previous setting.
    """
    return set_flag(_flags, enabled)


def deferred_execution():
    """Whether recorded ops are deferred into the compiled gradient (see ``set_deferred_execution``)."""
    return _flags.enabled


#: ``_Thunk.born`` of a thunk that makes nothing old: one computed, or one that is not an
#: untaped op's result (see ``settle``).
_AGELESS = 1 << 62


class _Thunk:
    """How to compute one pending value: ``call(*args)``, args being arrays or thunks.

    ``aval`` has the value's shape, dtype and weak type (the attribute name
    arrays use too, so a signature is built the same way for both).  ``tag``:
    a gradient's (call record, position), see ``_speculate``; else None.
    What ``settle`` reads: ``used``, whether a later op took it as an input;
    ``born``, for an untaped op's result (``defer_untaped``), the oldest step
    whose pending graph it needs while it is pending (``_AGELESS`` for others);
    ``owner``, for a recorded op's result (``defer``), the recording thread's
    tape stack (which thread's step it belongs to).
    """

    __slots__ = ("call", "args", "aval", "value", "tag", "used", "born", "owner", "__weakref__")

    def __init__(self, call, args, aval):
        self.call = call
        self.args = args
        self.aval = aval
        self.value = None
        self.tag = None
        self.used = False
        self.born = _AGELESS
        self.owner = None

    def set(self, value):
        # A pending value is computed outside any trace (``force_many``): a traced value is
        # never kept (the thunk stays pending and is computed when read outside the trace).
        if self.value is None and (type(value) is _Array or not isinstance(value, _Tracer)):
            self.value = value
            self.args = None   # the inputs are no longer needed

    def force(self):
        """The value, computing what is still pending (``force_many``)."""
        if self.value is None:
            force_many((self,))
        return self.value


def valued(value):
    """A thunk that already holds ``value`` (a gradient handed out as ``Pending``, see
    ``pending_results``)."""
    th = _Thunk(None, None, value.aval)
    th.value = value
    return th


def pending_results(values):
    """``values`` (the concrete arrays a gradient call returns) as Tensors: ``Pending`` ones
    holding them while deferral is on (what ``valued`` makes), so that untaped ops on them
    (``lr * g``) and a Variable update with the result (``assign_sub``) are deferred too and
    run as one program (``force_many``).  A gradient call ends a step: ``settle``."""
    if _flags.enabled:
        out = []
        for v in values:
            if type(v) is _Array:
                out.append(Pending(valued(v)))
            else:
                out.append(Tensor(v))
        settle()   # the end of a step: values of earlier steps nobody read are computed now
        return tuple(out)
    return tuple([Tensor(v) for v in values])


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
            th.set(th.call(*[a.value if type(a) is _Thunk else a for a in args]))


def _program(spec):
    """The pure function of a pending graph's inputs that computes every node (``spec``, see
    ``_Walk``) and returns all their values."""
    def run(*inputs):
        vals = []
        for call, refs in spec:
            vals.append(call(*[vals[r] if r >= 0 else inputs[-1 - r] for r in refs]))
        return vals
    return run


class _Deep(Exception):
    """A pending graph deeper than the recursive walk goes (``_walk_deep`` walks it)."""


_DEPTH = 200   # the recursive walk's depth limit (Python's own is 1000)


class _Walk:
    """A pending graph as a walk lays it out, inputs before their users: ``order`` the nodes,
    ``index`` node -> position, ``spec`` each node's callable and where its arguments come from (an earlier node j >= 0, or input k
    as -1 - k; an input used twice is passed once), ``inputs`` the arrays, ``at`` id(input) -> k.

    A node's ``args`` are read once, into a local: another thread that computes a node meanwhile
    sets its value before it drops its ``args`` (``_Thunk.set``), so ``args`` None means "an
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
        self.spec.append((th.call, tuple(refs)))
        return j


def _visit(th, args, depth, w):
    """Place ``th`` (pending, its ``args`` read by the caller) after its pending arguments; its
    index in ``w``."""
    if depth > _DEPTH:
        raise _Deep
    index = w.index
    refs = []
    for a in args:
        if type(a) is _Thunk:
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
                if type(a) is _Thunk:
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
    roots = [v for v in leaves if type(v) is _Thunk and v.value is None]
    if not roots or tracing():   # (inside a trace the caller computes them: ``force_all``)
        return None
    g = _graph(roots)
    order, index, spec = g.order, g.index, g.spec
    if not order or len(order) > _FLUSH_MAX:
        return None
    # a leaf computed meanwhile (another thread) and not placed in the graph is passed directly
    slots = tuple([index.get(v, -1) if type(v) is _Thunk else -1 for v in leaves])
    key = (entry_key, tuple(spec), slots)
    prog = _compiled(key, lambda: _with_graph(fn, _program(spec), slots))
    if prog is None:
        return None
    direct = tuple([(v.value if type(v) is _Thunk else v) for v, s in zip(leaves, slots) if s < 0])
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


class Pending(Tensor):
    """A Tensor whose value is computed when first needed (see the module docstring).

    Shape, dtype and rank are known without computing it; anything that reads
    ``_value`` forces it.
    """

    __slots__ = ("_thunk",)

    def __init__(self, thunk):
        self._thunk = thunk
        self._id = next_id()

    @property
    def _value(self):
        th = self._thunk
        v = th.value
        return v if v is not None else th.force()

    @property
    def _meta(self):
        return self._thunk.aval

    @property
    def shape(self):
        return TensorShape(self._thunk.aval.shape)

    @property
    def dtype(self):
        from ..core.dtypes import as_dtype
        return as_dtype(self._thunk.aval.dtype)

    @property
    def ndim(self):
        return len(self._thunk.aval.shape)


def _flatten(t):
    return (t._value,), None


def _unflatten(_, children):
    return Tensor(children[0])


jax.tree_util.register_pytree_node(Pending, _flatten, _unflatten)


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


_TAPE_TYPES = set()   # the recorder types that may defer (plain GradientTape; set by _tape)


def can_defer(tapes):
    """Whether ops recorded by ``tapes`` (this thread's recording tapes, non-empty) may be deferred."""
    if not _flags.enabled or _local.collector is not None or _local.overrides:
        return False
    for t in tapes:
        if type(t) not in _TAPE_TYPES:
            return False
    return True


def concrete(vals):
    """Whether every value is a thunk or a concrete array on the default device, not committed to
    one (what a thunk may take: a committed array keeps its device checks, which run eagerly)."""
    for v in vals:
        tv = type(v)
        if tv is not _Thunk and (tv is not _Array or v._committed):
            return False
    return True


if not hasattr(jnp.zeros(()), "_committed"):  # pragma: no cover - the attribute behind ``committed``
    def concrete(vals):  # noqa: F811 - the public property where the attribute is not there
        for v in vals:
            tv = type(v)
            if tv is not _Thunk and (tv is not _Array or v.committed):
                return False
        return True


def defer(tapes, prim, call, skey, ids, vals, aval=None):
    """Record ``prim`` (one output; static parameters ``skey`` bound into ``call``) on ``tapes``
    with a pending result.  An op that no tape keeps as a node runs at once."""
    if aval is None:
        aval = aval_for(call, vals)
    th = _Thunk(call, vals, aval)
    result = Pending(th)
    rid = result._id
    kept = False
    for tape in tapes:
        tape._record_simple(prim, skey, ids, vals, result)
        if not kept and rid in tape._codes:
            kept = True
    if not kept:
        th.force()
        return result
    for a in vals:
        if type(a) is _Thunk:
            a.used = True
    th.owner = tapes
    _TAPED.append(_ref(th))
    if len(_TAPED) > _OPEN_MAX:
        settle(everyone=True)
    return result


def force_all(vals):
    """``vals`` with every thunk replaced by its value (the pending ones computed together)."""
    force_many([v for v in vals if type(v) is _Thunk])
    return [v.value if type(v) is _Thunk else v for v in vals]


def defer_untaped(call, vals):
    """An op no tape records, on a pending input: its result stays pending (``call(*vals)``,
    ``vals`` arrays or thunks), so a chain on a gradient (``lr * g``, a Variable update with it)
    runs as one program.  None where it may not be deferred (the caller runs it now)."""
    if not _flags.enabled or _local.collector is not None or not concrete(vals):
        return None
    th = _Thunk(call, vals, aval_for(call, vals))
    result = Pending(th)
    st = _open
    born = st.gen
    for a in vals:
        if type(a) is _Thunk:
            a.used = True
            if a.born < born and a.value is None:
                born = a.born
    th.born = born
    untaped = st.untaped
    untaped.append(_ref(result))
    if len(untaped) > _OPEN_MAX:
        settle()
    return result


# -- what an unread pending value keeps alive --------------------------------------
# A pending value holds its thunk, which holds its inputs: the arrays it reads, or the thunks
# of pending inputs and, through them, their graphs.  Kept and never read (a metric appended
# to a list each step, ``tot = tot + loss``), it would keep every step's inputs (a step's
# weights) or a chain as long as the loop.  A gradient call ends a step (``settle``), and the
# pending values of earlier steps that may still be read are computed then, together (one
# program per structure, compiled from the second time), so what they keep alive is bounded
# by about two steps' graphs, whatever the number of steps:
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
# tracking costs each deferred op a weak reference and a list append.  ``_OPEN_MAX``
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
#: (a module list: the hot path appends to it; ``_Thunk.owner`` says whose).  Weak: a value
#: nobody holds any more (not its Pending, a tape, a later op) is forgotten with its inputs.
_TAPED = []
_SETTLE_LOCK = threading.Lock()
_OPEN_MAX = 4096
_ref = weakref.ref


def settle(everyone=False):
    """End this thread's step: compute the pending values of its earlier steps that may still
    be read (see above), and keep an eye on this step's that are not used or computed yet.
    ``everyone``: the recorded values of every thread (``_OPEN_MAX`` of them were tracked)."""
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
        n = len(_TAPED)
        entries = _TAPED[:n]
        del _TAPED[:n]   # (appends meanwhile land after them)
    for r in entries:
        th = r()
        if th is None:   # nobody holds it any more
            continue
        if th.owner is not mine and not everyone:
            others.append(r)   # another thread's step
        elif th.value is None and not th.used:
            taped_kept.append(r)
    if others:
        _TAPED.extend(others)
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
    return len(_TAPED) + len(st.untaped) + len(st.taped_kept) + len(st.untaped_kept)
