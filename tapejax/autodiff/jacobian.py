"""``GradientTape.jacobian`` and ``batch_jacobian``: one compiled call over the recorded slice.

The slice, the ``Program`` key and the bounded cache are the ones ``gradient``
uses (``autodiff.program``, ``autodiff.replay.lookup``); only the compiled function differs.
For the one target ``y`` and the connected sources ``x_1 .. x_k`` it runs the
replay once and then

* reverse mode (``jacrev``): ``vmap`` of the replay's ``vjp`` over the rows of
  the identity of ``y``'s size, when ``y`` is no bigger than the sources;
* forward mode (``jacfwd``): ``vmap`` of its ``jvp`` over the identity of the
  sources' total size, when that is smaller (fewer passes).  A program whose
  ops cannot be pushed forward (a ``jax.custom_vjp`` gradient override) falls
  back to reverse mode the first time it is traced.

``parallel_iterations`` bounds how many rows are computed at once
(``jax.lax.map(..., batch_size=parallel_iterations)``) and
``experimental_use_pfor=False`` computes them one at a time (a sequential
loop inside the same compiled call), so both of TF's memory knobs keep their
meaning; neither is ever a Python loop.

``batch_jacobian(y, x)`` with ``y: [b, ...]``, ``x: [b, ...]`` is TF's
definition: row ``k`` of every example is one ``vjp`` with the cotangent
``e_k`` in each example, so ``result[i, k, m] = sum_j dy[j, k] / dx[i, m]``
(exactly TF's value even when examples are not independent).

TF's None / zeros rules: ``jacobian`` gives ``None`` for an unconnected source
(zeros of ``target.shape + source.shape`` in the source's dtype with
``'zero'``); ``batch_jacobian`` gives zeros in the *target's* dtype even with
``'none'`` (zeros in the source's dtype with ``'zero'``), as TF does.

Inside another recording tape the compiled call is bound as an op
(``bind(entry.prim, ...)``), so that tape can differentiate the jacobian again
(Hessians, third derivatives); an operand the jacobian does not read (``b`` in ``f(x) + b``) is
a constant of that op (``used_operands``), so its gradient is TF's ``None``.
"""
import weakref
from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import Tracer

from ..core import state as _state
from ..core.bind import Primitive, bind, with_id
from ..core.dtypes import is_trainable_dtype
from ..core.ownership import note_capture
from ..core.tensor import Tensor
from . import replay as _replay
from .nodes import NotATensorError, _check_leaves, _unconnected, flatten_sources
from .program import Program, aval, build_replay, gather_leaves, slice_tape
from .user_grad import conj_complex

# --------------------------------------------------------------------------
# the compiled entry shared by jacobians and jvps
# --------------------------------------------------------------------------

def _cannot_push_forward(err):
    msg = str(err)
    return "custom_vjp" in msg and ("forward-mode" in msg or "jvp" in msg)


class Entry:
    """A compiled jacobian (or jvp) for one Program.

    ``call(leaves, extra)`` runs it; ``prim`` is the op other tapes record
    when it runs under them.  ``fallback`` (optional) is used instead, for
    good, if ``fn`` cannot be traced because an op has no forward rule.
    """

    __slots__ = ("fn", "fallback", "plan", "prim", "__weakref__")

    def __init__(self, name, fn, plan, fallback=None):
        self.fn = fn
        self.fallback = fallback
        self.plan = plan
        n = len(plan)
        call = self.call
        # fn is jitted already: no second jit layer for the eager call.
        self.prim = Primitive(name, lambda *a: call(a[:n], a[n:]), multiple_results=True, jit=False)

    def call(self, leaves, extra=()):
        if self.fallback is None:
            return self.fn(leaves, extra)
        try:
            if any(isinstance(a, Tracer) for a in (*leaves, *extra)):
                # Under a trace JAX reports a custom_vjp pushed forward only when the enclosing
                # function is lowered, past this try: lower this call now to see it here.
                self.fn.lower(*jax.tree.map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)),
                                            (tuple(leaves), tuple(extra))))
            out = self.fn(leaves, extra)
        except Exception as e:  # noqa: BLE001 - only the "no forward rule" error is handled
            if not _cannot_push_forward(e):
                raise
            self.fn = self.fallback
            out = self.fn(leaves, extra)
        self.fallback = None
        return out


#: Per ``Entry``: which of its operands (leaves, then extras) its outputs depend on (None: all).
_USED: "weakref.WeakKeyDictionary[Entry, Optional[Tuple[bool, ...]]]" = weakref.WeakKeyDictionary()


def used_operands(entry, leaves, extra=()) -> Optional[Tuple[bool, ...]]:
    """Which operands of ``entry`` reach its outputs, by a dead-code pass over its jaxpr (once per
    entry; None, all of them, when the pass fails).  An outer tape records the others as constants
    of the op, so their gradient is ``None`` where TF's per-op derivatives never read them (the
    Jacobian or JVP of ``f(x) + b`` w.r.t. ``x`` does not read ``b``)."""
    if entry in _USED:
        return _USED[entry]
    try:
        from jax._src.interpreters import partial_eval as pe
        closed = jax.make_jaxpr(entry.fn)(tuple(leaves), tuple(extra))
        _, used = pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars))
        mask: Optional[Tuple[bool, ...]] = tuple(bool(u) for u in used)
    except Exception:  # noqa: BLE001 - the pass only sharpens None-ness: all operands then
        mask = None
    _USED[entry] = mask
    return mask


def constants_unread(entry, tensors, n_leaves):
    """``tensors`` (the op's operands, ``n_leaves`` leaves then extras), each one its outputs do not
    read given a fresh id no tape knows (``used_operands``)."""
    vals = [t._value for t in tensors]
    used = used_operands(entry, vals[:n_leaves], vals[n_leaves:])
    if used is None or len(used) != len(tensors):
        return tensors
    return [t if u else with_id(v, _state.next_id()) for t, v, u in zip(tensors, vals, used)]


def _map(fn, xs, chunk):
    """``vmap`` (chunk None) or a ``lax.map`` computing ``chunk`` rows at a time."""
    if chunk is None:
        return jax.vmap(fn)(xs)
    return jax.lax.map(fn, xs, batch_size=None if chunk == 1 else chunk)


def _size(shape):
    return int(np.prod(shape, dtype=np.int64))


# --------------------------------------------------------------------------
# slicing (shared with _forward)
# --------------------------------------------------------------------------

def connect(tape, sources, target_codes, extra=None):
    """(live source codes, their values, first source object per code, slice, needed codes).

    ``sources``: flat Tensors/Variables; ``target_codes``: codes (or None);
    ``extra``: id -> code for tensors the tape does not track itself.
    """
    nodes = tape._nodes
    codes = tape._codes
    src_codes = []
    seen = set()
    first = {}
    for s in sources:
        c = codes.get(s._id)
        if c is None and extra:
            c = extra.get(s._id)
        if c is not None and c not in seen:
            seen.add(c)
            src_codes.append(c)
            first[c] = s
    tgts = [c for c in target_codes if c is not None]
    slice_idx, needed = slice_tape(nodes, src_codes, tgts)
    live = [c for c in src_codes if c in needed]
    return live, [first[c]._value for c in live], first, slice_idx, needed


def leaf_tensors(nodes, program, plan, leaves, first):
    """The leaves as Tensors carrying the ids the recording tapes know them by."""
    sl = program.slice
    live = program.src_codes
    out = []
    for (kind, a, b), v in zip(plan, leaves):
        i = nodes[sl[a]].ids[b] if kind == "node" else first[live[a]]._id
        out.append(with_id(v, i))
    return out


def _resolve_late(nodes, program, values):
    """Custom gradients traced now (``replay.resolve_late``): ``(nodes, program, values)``, sliced
    again where a ``grad_fn`` returned None for an input (the sources no path reaches any more are
    dropped, with their ``values``); program None: none is connected."""
    nodes, resolved, cut = _replay.resolve_late(nodes, program)
    if not cut:
        return nodes, resolved, values
    slice_idx, needed = slice_tape(nodes, program.src_codes, program.tgt_codes)
    keep = [e for e, c in enumerate(program.src_codes) if c in needed]
    if not keep:
        return nodes, None, values
    return nodes, Program(nodes, slice_idx, tuple(program.src_codes[e] for e in keep),
                          tuple(program.src_avals[e] for e in keep), program.tgt_codes,
                          program.ct_given), [values[e] for e in keep]


def _run(entry, nodes, program, leaves, first):
    """Run the entry; under a recording tape, as an op that tape records."""
    if _state.tapes():
        note_capture()   # (the recording tapes hold this call's leaves)
        tensors = leaf_tensors(nodes, program, entry.plan, leaves, first)
        return bind(entry.prim, *constants_unread(entry, tensors, len(tensors)))
    return tuple(Tensor(o) for o in entry.call(leaves))


# --------------------------------------------------------------------------
# argument checks (TF's classes, raised before any state changes)
# --------------------------------------------------------------------------

def _check_target(target, what):
    if isinstance(target, (list, tuple, dict)):
        raise NotATensorError(f"Argument `target` of {what} must be one Tensor or Variable; got a "
                              f"{type(target).__name__} (call {what} once per target, or stack them)")
    return _check_leaves([target], "target")[0]


def _chunk(parallel_iterations, experimental_use_pfor):
    p = parallel_iterations
    if p is not None:
        if isinstance(p, bool) or not isinstance(p, (int, np.integer)):
            raise TypeError(f"Argument `parallel_iterations` must be None or an int > 1; got {p!r} "
                            f"of type {type(p).__name__}")
        if p <= 1:
            raise ValueError(f"Argument `parallel_iterations` must be None or an int > 1; got {p} "
                             "(use experimental_use_pfor=False for one row at a time)")
        p = int(p)
    if not experimental_use_pfor:
        return p or 1
    return p


def _check_pfor(tape, experimental_use_pfor, what):
    """TF's rule: without pfor a non-persistent tape is refused only when executing eagerly (inside
    a ``tf.function`` the loop is traced once)."""
    if not experimental_use_pfor and not tape._persistent and _state._local.collector is None:
        raise RuntimeError(f"GradientTape must be created with persistent=True to compute the {what} "
                           "with eager execution enabled and with experimental_use_pfor set to False.")


# --------------------------------------------------------------------------
# jacobian
# --------------------------------------------------------------------------

def _build_jacobian(forward, chunk):
    def build(nodes, program):
        replay, plan = build_replay(nodes, program, _replay.resolve_impl)
        src_avals = program.src_avals

        def rev(leaves, _extra):
            _replay._stats.compiles += 1
            eps0 = tuple(jnp.zeros(s, d) for s, d in src_avals)
            out, vjp = jax.vjp(lambda e: replay(e, leaves)[0], eps0)
            n = out.size
            if n == 0:
                return tuple(jnp.zeros(out.shape + s, d) for s, d in src_avals)
            basis = jnp.eye(n, dtype=out.dtype).reshape((n,) + out.shape)
            rows = _map(lambda ct: vjp(ct)[0], basis, chunk)
            return tuple(conj_complex(r.reshape(out.shape + s).astype(d)) for r, (s, d) in zip(rows, src_avals))

        def fwd(leaves, _extra):
            _replay._stats.compiles += 1
            eps0 = tuple(jnp.zeros(s, d) for s, d in src_avals)
            f = lambda e: replay(e, leaves)[0]  # noqa: E731
            sizes = [_size(s) for s, _ in src_avals]
            total = sum(sizes)
            out = jax.eval_shape(f, eps0)
            if total == 0 or _size(out.shape) == 0:
                return tuple(jnp.zeros(out.shape + s, d) for s, d in src_avals)
            eye = jnp.eye(total)
            basis, off = [], 0
            for (s, d), k in zip(src_avals, sizes):
                basis.append(eye[:, off:off + k].reshape((total,) + s).astype(d))
                off += k
            cols = _map(lambda t: jax.jvp(f, (eps0,), (t,))[1], tuple(basis), chunk)  # [total, *out]
            res, off = [], 0
            nd = len(out.shape)
            for (s, d), k in zip(src_avals, sizes):
                c = cols[off:off + k].reshape(s + out.shape)
                perm = tuple(range(len(s), len(s) + nd)) + tuple(range(len(s)))
                res.append(jnp.transpose(c, perm).astype(d))
                off += k
            return tuple(res)

        if forward:
            return Entry("Jacobian", jax.jit(fwd), plan, fallback=jax.jit(rev))
        return Entry("Jacobian", jax.jit(rev), plan)

    return build


def jacobian(tape, target, sources, unconnected_gradients, parallel_iterations, experimental_use_pfor):
    """``GradientTape.jacobian``: see the module docstring."""
    tape._check_usable()
    target = _check_target(target, "jacobian")
    flat_sources, pack = flatten_sources(sources, "sources")
    mode = _unconnected(unconnected_gradients)
    chunk = _chunk(parallel_iterations, experimental_use_pfor)
    _check_pfor(tape, experimental_use_pfor, "jacobian")
    for s in flat_sources:
        if not _trainable(s):
            _replay.tape_log_int(s)
    tape._begin_use()
    try:
        flat = _jacobian(tape, target, flat_sources, chunk)
    finally:
        tape._end_use()
    tshape = tuple(target._value.shape)
    if mode.value == "zero":
        flat = [r if r is not None else Tensor(jnp.zeros(tshape + tuple(s._meta.shape), s._meta.dtype))
                for r, s in zip(flat, flat_sources)]
    return pack(flat)


def _trainable(s):
    return is_trainable_dtype(np.dtype(s._meta.dtype))


def _variable_target(tape, target, sources):
    """TF reads a Variable target inside the tape (it reshapes it there), so an
    unread trainable Variable that is also a source is watched then: its
    jacobian with respect to itself is the identity.  A code of its own here."""
    if (tape._codes.get(target._id) is None and hasattr(target, "_read") and tape._watch_accessed
            and target._trainable and _trainable(target) and any(s is target for s in sources)):
        tape._watched_vars.setdefault(target._id, target)
        return {target._id: -(tape._n_leaves + 1)}
    return None


def _jacobian(tape, target, flat_sources, chunk):
    nodes = tape._nodes
    extra = _variable_target(tape, target, flat_sources)
    tcode = tape._codes.get(target._id) if extra is None else extra[target._id]
    trainable = [s for s in flat_sources if _trainable(s)]
    live, values, first, slice_idx, _ = connect(tape, trainable, [tcode], extra)
    if not live:
        return [None] * len(flat_sources)
    avals = tuple(aval(v) for v in values)
    program = Program(nodes, slice_idx, tuple(live), avals, (tcode,), (False,))
    nodes, program, values = _resolve_late(nodes, program, values)
    if program is None:
        return [None] * len(flat_sources)
    avals = program.src_avals
    n_in = sum(_size(s) for s, _ in avals)
    # complex: rows by vjp (TF's convention, conjugated); jvp columns are not its Jacobian
    forward = n_in < _size(target._meta.shape) and not any(
        jnp.issubdtype(d, jnp.complexfloating) for d in (*(d for _, d in avals), target._meta.dtype))
    outs = _replay.lookup_run(
        nodes, program, lambda entry: _run(entry, nodes, program, gather_leaves(nodes, program, entry.plan, values),
                                           first),
        key=("jacobian", forward, chunk, program), build=_build_jacobian(forward, chunk))
    by_code: dict = dict(zip(program.src_codes, outs))   # (connected after custom gradients' cuts)
    codes = tape._codes if extra is None else {**tape._codes, **extra}
    return [by_code.get(codes.get(s._id)) if _trainable(s) else None for s in flat_sources]


# --------------------------------------------------------------------------
# batch_jacobian
# --------------------------------------------------------------------------

def _build_batch_jacobian(chunk):
    def build(nodes, program):
        replay, plan = build_replay(nodes, program, _replay.resolve_impl)
        ((sshape, sdtype),) = program.src_avals

        def rev(leaves, _extra):
            _replay._stats.compiles += 1
            eps0 = (jnp.zeros(sshape, sdtype),)
            y = jax.eval_shape(lambda e: replay(e, leaves)[0], eps0)
            b = y.shape[0]
            row = _size(y.shape[1:])
            shape = (b,) + y.shape[1:] + sshape[1:]
            if b == 0 or row == 0 or _size(sshape) == 0:
                return (jnp.zeros(shape, sdtype),)
            out, vjp = jax.vjp(lambda e: replay(e, leaves)[0].reshape(b, row), eps0)
            basis = jnp.broadcast_to(jnp.eye(row, dtype=out.dtype)[:, None, :], (row, b, row))
            row_vjp = lambda ct: vjp(ct)[0][0]  # noqa: E731
            if chunk is None:  # [b, row, *source dims] straight from vmap
                g = jax.vmap(row_vjp, out_axes=1)(basis)
            else:
                g = jnp.moveaxis(_map(row_vjp, basis, chunk), 0, 1)
            return (conj_complex(g.reshape(shape).astype(sdtype)),)

        return Entry("BatchJacobian", jax.jit(rev), plan)

    return build


def batch_jacobian(tape, target, source, unconnected_gradients, parallel_iterations,
                   experimental_use_pfor):
    """``GradientTape.batch_jacobian``: see the module docstring."""
    tape._check_usable()
    target = _check_target(target, "batch_jacobian")
    if isinstance(source, (list, tuple, dict)):
        raise NotATensorError(f"Argument `source` of batch_jacobian must be one Tensor or Variable; "
                              f"got a {type(source).__name__}")
    source = _check_leaves([source], "source")[0]
    tshape = tuple(target._meta.shape)
    sshape = tuple(source._meta.shape)
    for name, shape in (("target", tshape), ("source", sshape)):
        if len(shape) < 2:
            raise ValueError(f"Shape {shape} must have rank at least 2: batch_jacobian's `{name}` "
                             f"must be [batch, ...]; got shape {shape} (rank {len(shape)})")
    if tshape[0] != sshape[0]:
        raise ValueError(f"Need first dimension of target shape ({tshape}) and source shape "
                         f"({sshape}) to match: batch_jacobian's target and source must have the same "
                         f"batch size; got {tshape[0]} and {sshape[0]}")
    mode = _unconnected(unconnected_gradients)
    chunk = _chunk(parallel_iterations, experimental_use_pfor)
    _check_pfor(tape, experimental_use_pfor, "batch_jacobian")
    if not _trainable(source):
        _replay.tape_log_int(source)
    tape._begin_use()
    try:
        out = None
        if _trainable(source):
            out = _batch_jacobian(tape, target, source, chunk)
    finally:
        tape._end_use()
    if out is None:
        # TF: zeros even with 'none'; in the target's dtype then, the source's with 'zero'.
        dtype = source._meta.dtype if mode.value == "zero" else target._meta.dtype
        out = Tensor(jnp.zeros(tshape + sshape[1:], dtype))
    return out


def _batch_jacobian(tape, target, source, chunk):
    nodes = tape._nodes
    extra = _variable_target(tape, target, [source])
    tcode = tape._codes.get(target._id) if extra is None else extra[target._id]
    live, values, first, slice_idx, _ = connect(tape, [source], [tcode], extra)
    if not live:
        return None
    program = Program(nodes, slice_idx, tuple(live), (aval(values[0]),), (tcode,), (False,))
    nodes, program, values = _resolve_late(nodes, program, values)
    if program is None:
        return None
    (out,) = _replay.lookup_run(
        nodes, program, lambda entry: _run(entry, nodes, program, gather_leaves(nodes, program, entry.plan, values),
                                           first),
        key=("batch_jacobian", chunk, program), build=_build_batch_jacobian(chunk))
    return out
