"""The gradient driver: ``GradientTape.gradient`` (and ``tapejax.gradients``) run ``gradient``.

``gradient(tape, targets, sources, cotangents, mode)``:

1. codes of sources and targets on the tape; ``program.slice_tape`` (memoized per call
   structure in ``replay._SLICES``: a ``Plan``);
2. the ``Program`` (the key), its custom-gradient nodes traced now (``replay.resolve_late``; a
   ``grad_fn`` returning None for an input cuts that edge, and the slice is taken again, so such
   an input is unconnected as in TF unless another path reaches it); ``replay.lookup_run`` finds
   or builds its compiled entry;
3. the active executor runs it (``Executor.gradient``) on the leaves the entry's plan
   gathers and the given cotangents (missing ones are ones, made inside the compiled
   function); a pending target's value comes back with the gradients (the fused form);
4. ``None`` (or zeros) for unconnected sources, results cast to the sources' dtypes; a source
   whose gradient TF gives as ``IndexedSlices`` (a gather's params: ``autodiff.sparse``) gets one,
   made of the compiled call's two outputs for it (the dense gradient is never made).

Under an outer tape the call is recorded instead: the compiled replay runs through ``bind``
as one op whose inputs are its leaves and cotangents, so the outer tape can differentiate it
again (2nd, 3rd order).
"""
import contextlib
import functools
from typing import Any, Iterator, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from ..core import dtypes as _dtypes, state as _state
from ..core.bind import bind, with_id
from ..core.executor import ACTIVE, peek
from ..core.indexed_slices import IndexedSlices
from ..core.ownership import note_capture
from ..core.tensor import Lazy, Pending, Tensor
from ..runtime.thunks import Thunk, _Array
from .nodes import _TRAINABLE, OUT, Node, _tuple_new
from .program import Aval, LeafPlan, Program, gather_leaves, slice_tape
from .replay import (
    _SLICES,
    Backward,
    Compiled,
    _compile_backward,
    _compile_fused,
    input_dependence,
    lookup_run,
    resolve_late,
    tape_log_int,
)


def _source_codes(tape, sources: Sequence[Any]) -> tuple[list[int | None], list[Aval]]:
    """Each source's code on ``tape`` (None where it is untracked or not of a trainable dtype),
    and each source's (shape, dtype)."""
    get = tape._codes.get
    codes: list[int | None] = []
    avals: list[Aval] = []
    for s in sources:
        m = s._meta
        if type(m) is _Array:
            m = m.aval   # (plain attributes: an array's shape and dtype are Python properties)
        dt = m.dtype
        code = get(s._id)
        if code is not None:
            t = _TRAINABLE.get(dt)
            if t is None:
                t = _TRAINABLE[dt] = _dtypes.is_trainable_dtype(dt)
            if not t:
                code = None
        codes.append(code)
        avals.append((m.shape, dt))
    return codes, avals


class SliceKey(NamedTuple):
    """The structure of a gradient call: the key of ``_SLICES``."""
    sigs: tuple[int, ...]                 # every node's interned signature
    src_codes: tuple[int | None, ...]     # each source's code (None: untracked)
    tgt_codes: tuple[int | None, ...]     # each target's code
    ct_given: tuple[bool, ...]            # which targets bring their own cotangent
    src_avals: tuple[Aval, ...]


#: Memo of slices: ``SliceKey`` -> a ``Plan``.  A training loop then pays one
#: tuple of ints and one dict lookup per call instead of slicing the tape
#: again.  Bounded (LRU); cleared with the cache.


class KeptTarget(NamedTuple):
    """A target that depends on a connected source: its position among the targets, its code."""
    pos: int
    code: int


class Inner(NamedTuple):
    """A value the slice computes that the user may hold (not a target): the input ``j`` of the
    slice node at ``idx`` on the tape, the value's ``code`` and size in bytes."""
    idx: int
    j: int
    code: int
    nbytes: int


class HeldKey(NamedTuple):
    """The replay-cache key of a fused gradient that also returns the values of the slice codes
    ``codes`` (``_held``); ``kind`` is ``"fused"``, as the plain fused form's ``EntryKey``."""
    kind: str
    program: Program
    codes: tuple[int, ...]


class Plan:
    """What one structure of gradient call computes: the connected source codes
    (``live_src``), the kept targets, the Program (None: nothing is connected),
    for each live code the position of its first source (``first``), and for each source the
    position of its gradient among the compiled call's outputs, or -1 (``result_pos``);
    ``result_sparse``, per source, the dense shape where its gradient is IndexedSlices;
    ``inner``, the values inside the slice a fused call may return too (``Inner`` records of
    at most ``HELD_BYTES_MAX`` bytes,
    found on the first fused call); ``held_known``, those of them the last full look of ``_held``
    found held, and ``held_wait`` / ``held_skip``, how many calls look at those alone."""

    __slots__ = ("live_src", "kept", "program", "first", "result_pos", "result_sparse", "inner", "held_known",
                 "held_wait", "held_skip")

    def __init__(self, live_src: list[int], kept: list[KeptTarget], program: "Program | None",
                 first: tuple[int, ...], result_pos: tuple[int, ...],
                 result_sparse: "tuple[tuple[int, ...] | None, ...] | None" = None):
        self.live_src = live_src
        self.kept = kept
        self.program = program
        self.first = first
        self.result_pos = result_pos
        # per source: the dense shape where its gradient is IndexedSlices (its values at
        # ``result_pos``, its indices after them: ``autodiff.sparse``); None: all dense
        self.result_sparse = result_sparse
        self.inner: "tuple[Inner, ...] | None" = None
        self.held_known: "tuple[Inner, ...]" = ()
        self.held_wait = 0
        self.held_skip = 0


def _plan(nodes: Sequence[Node], src_codes_all: list[int | None], tgt_all: list[int | None],
          cts: Sequence[Any], src_avals: list[Aval]) -> Plan:
    # one C call (as ``Node``): this runs on every gradient call
    key = _tuple_new(SliceKey, (tuple([n.sig for n in nodes]), tuple(src_codes_all), tuple(tgt_all),
                                tuple([c is not None for c in cts]), tuple(src_avals)))
    hit = _SLICES.get(key)
    if hit is not None:
        return hit
    uniq = list(dict.fromkeys(c for c in src_codes_all if c is not None))
    slice_idx, needed = slice_tape(nodes, uniq, [c for c in tgt_all if c is not None])
    live_src = [c for c in uniq if c in needed]
    live_set = set(live_src)
    # Targets that depend on a connected source: a source itself, or made by a slice node.
    in_slice = set(slice_idx)
    kept = [KeptTarget(i, c) for i, c in enumerate(tgt_all)
            if c is not None and (c in live_set or (c >= 0 and c // OUT in in_slice))]
    program = None
    first: tuple[int, ...] = ()
    result_pos = (-1,) * len(src_codes_all)
    result_sparse = None
    if live_src and kept:
        aval_of: dict[int | None, Aval] = {}
        for a, c in zip(src_avals, src_codes_all):
            aval_of.setdefault(c, a)
        program = Program(nodes, slice_idx, tuple(live_src), tuple(aval_of[c] for c in live_src),
                          tuple(c for _, c in kept), tuple(cts[i] is not None for i, _ in kept))
        first = tuple(src_codes_all.index(c) for c in live_src)
        layout = program.layout(nodes)
        pos: dict[int | None, int] = {c: j for j, c in enumerate(live_src)}
        result_pos = tuple(layout.starts[pos[c]] if c in pos else -1 for c in src_codes_all)
        if any(sp is not None for sp in layout.sparse):
            shapes = [None if sp is None else sp.dense_shape for sp in layout.sparse]
            result_sparse = tuple(shapes[pos[c]] if c in pos else None for c in src_codes_all)
    return _SLICES.setdefault(key, Plan(live_src, kept, program, first, result_pos, result_sparse))


def gradient(tape, targets: Sequence[Any], sources: Sequence[Any], cts: Sequence[Any], mode) -> list:
    """Flat gradients of the summed ``targets`` w.r.t. each of ``sources`` (``GradientTape.gradient``
    runs it: see ``set_gradient_driver`` below; ``cts``: the given cotangents, None for ones)."""
    nodes = tape._nodes
    src_codes_all, src_avals = _source_codes(tape, sources)
    codes = tape._codes
    if None in src_codes_all:
        # A target that is itself a source has gradient 1 even when the tape never
        # tracked it (TF: gradient(x, x) == 1): give it a code of its own here.
        tgt_ids = {t._id for t in targets}
        virtual: dict[int, int] = {}
        for k, s in enumerate(sources):
            if src_codes_all[k] is None and _dtypes.is_trainable_dtype(src_avals[k][1]):
                if s._id in tgt_ids:
                    virtual.setdefault(s._id, -(tape._n_leaves + 1 + len(virtual)))
                    src_codes_all[k] = virtual[s._id]
            elif src_codes_all[k] is None:
                tape_log_int(s)
        tgt_all = [codes.get(t._id, virtual.get(t._id)) for t in targets]
    else:
        tgt_all = [codes.get(t._id) for t in targets]
    plan = _plan(nodes, src_codes_all, tgt_all, cts, src_avals)
    program = plan.program
    nested = bool(_state.tapes())
    if program is not None and program.late:
        nodes, program, cut = resolve_late(nodes, program, nested)
        if cut:
            # a grad_fn returned None for an input: slice again without those edges (the
            # resolved nodes' signatures say which, so this is memoized like the first)
            plan = _plan(nodes, src_codes_all, tgt_all, cts, src_avals)
            program = plan.program
    results: list[Any]
    if program is None:
        results = [None] * len(sources)
    else:
        kept = plan.kept
        src_objs = [sources[k] for k in plan.first]   # each live code's first source
        if not nested and _pending_targets(targets, kept):
            codes, held = _held(nodes, program, plan)
            outs = lookup_run(
                nodes, program,
                lambda entry: _call_fused(entry, nodes, program, src_objs, kept, cts, targets, held),
                key=HeldKey("fused", program, codes) if codes else program.fused_key,
                build=functools.partial(_compile_fused, held=codes) if codes else _compile_fused)
        else:
            outs = lookup_run(
                nodes, program,
                lambda entry: _call_gradient(entry, nodes, program, src_objs, kept, cts, nested),
                key=None if nested else program.backward_key, build=None if nested else _compile_backward)
        if plan.result_sparse is None:
            results = [outs[j] if j >= 0 else None for j in plan.result_pos]
        else:   # IndexedSlices: values and indices, with the source's shape (``autodiff.sparse``)
            results = [None if j < 0 else outs[j] if sp is None else IndexedSlices._of(outs[j], outs[j + 1], sp)
                       for j, sp in zip(plan.result_pos, plan.result_sparse)]
    if mode.value == "zero":
        results = [r if r is not None else Tensor(jnp.zeros(a[0], a[1]))
                   for r, a in zip(results, src_avals)]
    return results




def _inner(nodes: Sequence[Node], program: Program) -> tuple[Inner, ...]:
    """Every value the slice computes and uses again (an input of a later slice node), once,
    except the targets (whose values a fused call returns anyway)."""
    in_slice = set(program.slice)
    skip = set(program.tgt_codes)
    out = []
    for idx in program.slice:
        node = nodes[idx]
        for j, c in enumerate(node.refs):
            if c is not None and c >= 0 and c // OUT in in_slice and c not in skip:
                skip.add(c)
                a = getattr(node.vals[j], "aval", None)   # (its shape and dtype: part of the structure)
                nbytes = a.size * a.dtype.itemsize if a is not None else HELD_BYTES_MAX + 1
                out.append(Inner(idx, j, c, nbytes))
    return tuple(out)


#: The largest value ``_held`` returns (bytes): a model's logits, not a parameter-sized
#: intermediate (a nested tape's inner gradient, held in a local and seldom read: returning it
#: costs its copy on every step; it is computed when read instead).
HELD_BYTES_MAX = 1 << 16
#: The most calls between two full looks of ``_held`` that found the same values held (a full look
#: is a Python loop over the slice's values; the calls between look only at the values found).
HELD_WAIT_MAX = 16


def _held(nodes: Sequence[Node], program: Program, plan: Plan) -> tuple[tuple[int, ...], list[Any]]:
    """The values inside the slice that are still pending while the user holds their Pending
    Tensors (a model's logits, read by a metric after the step), up to ``HELD_BYTES_MAX`` each:
    their codes (a stable set in a training loop: part of the compiled call's key) and thunks.
    The fused call returns them with the targets', so reading one later costs nothing; one
    nobody holds is not returned.  A full look finds them among all the slice's values; when it
    finds what the last one found, the next ``held_wait`` calls (doubling up to
    ``HELD_WAIT_MAX``) look at those alone.  A value first held meanwhile is computed when read,
    as a larger one is (the same value, in a program of its own)."""
    inner = plan.inner
    if inner is None:   # (the values small enough to return, once per plan)
        inner = plan.inner = tuple([i for i in _inner(nodes, program) if i.nbytes <= HELD_BYTES_MAX])
    if plan.held_skip:
        plan.held_skip -= 1
        look = plan.held_known
    else:
        look = inner
    codes: list[int] = []
    held: list[Any] = []
    found: list[Inner] = []
    for entry in look:
        v = nodes[entry.idx].vals[entry.j]
        if type(v) is Thunk:
            ref = v.held
            if ref is not None and v.value is None and ref() is not None:
                codes.append(entry.code)
                held.append(v)
                found.append(entry)
    if look is inner:
        known = tuple(found)
        plan.held_skip = plan.held_wait = min(2 * plan.held_wait or 1, HELD_WAIT_MAX) \
            if known == plan.held_known else 0
        plan.held_known = known
    return tuple(codes), held


def _pending_targets(targets: Sequence[Any], kept: list[KeptTarget]) -> bool:
    for i, _ in kept:
        t = targets[i]
        if isinstance(t, Pending) and t._thunk.value is None:
            return True
    return False


def _src_values(entry: "Compiled | Backward", src_objs: Sequence[Any]) -> list[Any]:
    """The values of the sources ``entry`` reads itself (None elsewhere).  A pending source
    stays a thunk: the gathering computes it."""
    vals: list[Any] = [None] * len(src_objs)
    for e in entry.srcs:
        s = src_objs[e]
        vals[e] = s._thunk if isinstance(s, Pending) else s._value
    return vals


def _call_fused(entry: Backward, nodes: Sequence[Node], program: Program, src_objs: Sequence[Any],
                kept: list[KeptTarget], cts: Sequence[Any], targets: Sequence[Any], held: Sequence[Any]) -> tuple:
    """Run the fused forward + gradient; the pending targets get their values, and so do the
    ``held`` thunks (``_held``: their values follow the targets')."""
    leaves = gather_leaves(nodes, program, entry.gather, _src_values(entry, src_objs), force=False)
    given = tuple([cts[i]._value for i, _ in kept if cts[i] is not None])
    results, values = ACTIVE.executor.gradient(entry, leaves, given)
    for (i, _), v in zip(kept, values):
        t = targets[i]
        if isinstance(t, Pending):
            t._thunk.set(v)
    if held:
        for th, v in zip(held, values[len(kept):]):
            th.set(v)
    return results


def _call_gradient(entry: "Compiled | Backward", nodes: Sequence[Node], program: Program,
                   src_objs: Sequence[Any], kept: list[KeptTarget], cts: Sequence[Any], nested: bool) -> tuple:
    """Run the compiled gradient: the saved-values backward, or (``nested``: another tape
    records this call) the replay as an op that the outer tapes record (2nd, 3rd order)."""
    given = [cts[i] for i, _ in kept if cts[i] is not None]
    if not nested:
        leaves = gather_leaves(nodes, program, entry.gather, _src_values(entry, src_objs))
        assert isinstance(entry, Backward)   # the saved-values form (``_compile_backward``)
        return ACTIVE.executor.gradient(entry, leaves, tuple(g._value for g in given))[0]
    assert isinstance(entry, Compiled)   # the recorded form (``_compile``)
    # pending leaves stay pending: the executor may leave the whole call pending (the outer
    # gradient then computes it in its own program), or computes them
    leaves = gather_leaves(nodes, program, entry.gather, _src_values(entry, src_objs), force=False)
    if entry.deps is None:
        # (the jitted function, called as the recorded op calls it: its trace is cached, so
        # the op's call below inside a trace does not trace the gradient a second time)
        entry.deps = input_dependence(entry.fn, tuple([_abstract(v) for v in leaves]),
                                      tuple(_abstract(peek(g)) for g in given))
        entry.prim.out_deps = entry.deps.per_output
    deps = entry.deps.any
    ids = _leaf_ids(nodes, program, entry.plan, src_objs)
    # Inputs the gradient does not use are passed as constants (id 0).
    args = [_viewed(v, i if d else 0) for v, i, d in zip(leaves, ids, deps)]
    args += [g if d else g._value for g, d in zip(given, deps[len(leaves):])]
    note_capture()   # (the outer tapes, or the op left pending, hold this call's leaves)
    out = bind(entry.prim, *args)
    assert isinstance(out, tuple)   # the op has multiple results
    return out


def _abstract(v: Any) -> Any:
    """A pending value as its shape and dtype (what the dependence analysis traces with)."""
    if isinstance(v, Lazy):
        a = v.aval
        return jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=a.weak_type)
    return v


def _viewed(v: Any, id_: int) -> Tensor:
    """A leaf value as the operand tapes see as the tensor ``id_``: a Tensor view of an array
    (``with_id``), a ``Pending`` view of a pending value."""
    if isinstance(v, Lazy):
        p = Pending.__new__(Pending)
        p._thunk = v
        p._id = id_
        return p
    return with_id(v, id_)


def _leaf_ids(nodes: Sequence[Node], program: Program, plan: LeafPlan, src_objs: Sequence[Any]) -> list[int]:
    sl = program.slice
    return [nodes[sl[a]].ids[b] if kind == "node" else src_objs[a]._id for kind, a, b in plan]


_JAX_WHILE = "Reverse-mode differentiation does not work for lax.while_loop"


class UnboundedWhileGradientError(ValueError):
    """The tape was asked for a reverse-mode gradient through a staged while loop with no static
    number of iterations: TF differentiates it (its while loop keeps each iteration's values on a
    stack), XLA's while loop is not reverse-differentiable (JAX's limit: compile/control_flow.py),
    so the loop needs a bound: it then runs as a masked scan of that many steps."""


def unbounded_while_error(e: ValueError) -> "UnboundedWhileGradientError | None":
    """JAX's refusal to differentiate a while loop (``e``) as ``UnboundedWhileGradientError`` (None
    for another ValueError): ``GradientTape.gradient`` raises it at its call (a ``try`` there: no
    cost unless something raised), ``jacobian`` and ``tf.gradients`` by ``bounded_whiles_only``."""
    if _JAX_WHILE not in str(e):
        return None
    return UnboundedWhileGradientError(
        "The gradient flows through a while loop with no static number of iterations (a `tf.while_loop` "
        "without `maximum_iterations`, or a converted `while` / `for` over a tf.range of traced length, "
        "in a tapejax.function), and XLA's while loop is not reverse-mode differentiable (TF's is: a "
        "documented limit of tapejax). Bound it: `tf.while_loop(cond, body, loop_vars, "
        "maximum_iterations=N)`, or make the converted loop's first statement "
        "`tf.autograph.experimental.set_loop_options(maximum_iterations=N)`; it then runs as a masked "
        "scan of N steps, which the tape differentiates. Eagerly (outside tapejax.function) the loop "
        "runs in Python and needs no bound; forward mode (tf.autodiff.ForwardAccumulator) needs none "
        "either. A `jax.lax.while_loop` / `fori_loop` of dynamic bounds inside a `tapejax.op` function "
        f"is JAX's own loop: use `lax.scan` or static bounds there (JAX: {str(e).splitlines()[0]})")


@contextlib.contextmanager
def bounded_whiles_only() -> Iterator[None]:
    """Turns JAX's refusal to differentiate a while loop into ``UnboundedWhileGradientError``."""
    try:
        yield
    except ValueError as e:
        err = unbounded_while_error(e)
        if err is None:
            raise
        raise err from e
