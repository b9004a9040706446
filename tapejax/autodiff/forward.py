"""``tapejax.autodiff.ForwardAccumulator``: forward mode over the recorded replay.

TF computes a JVP for every op as it runs.  Here the accumulator *records*
instead, exactly like a tape: a private recorder (a ``GradientTape`` that
watches only the primals and is never used for ``gradient``) sits on the
thread's tape stack while the ``with`` block runs, so ``bind`` and Variable
reads offer it every op.  ``acc.jvp(targets)`` then slices the recording from
the primals to the targets (``autodiff.program.slice_tape``, the same ``Program`` key
and bounded cache as ``gradient``) and runs one compiled ``jax.jvp`` of the
replay with the tangents.  A program whose ops have no forward rule (a
``jax.custom_vjp`` gradient override) is pushed forward by transposing its
``vjp`` instead (TF's own double-vjp trick), decided once per structure.

TF's rules, all checked against TF 2.21:

* ``jvp(primal)`` is its tangent (even outside the block); a tensor not
  computed from the primals inside the block (or computed after it) has
  ``None`` (zeros of its shape and dtype with ``'zero'``);
* Variables may be primals: every read of one carries its tangent;
* nesting follows the stack order, as TF's does: the JVP computation is
  recorded by the tapes and accumulators that were recording *below* (were
  entered before) this accumulator while its ops ran, even if ``jvp`` is
  called after they exit.  So ``tape(acc(f))`` gives ``d(jvp)/dx``
  (backward-over-forward), ``acc(tape(f))`` gives ``jvp(gradient)``
  (forward-over-backward: ``tape.gradient`` is recorded like any op by the
  active accumulator), ``outer(inner(f))`` gives second directional
  derivatives; an accumulator never records its own JVPs.  The JVP op those tapes record
  takes as operands only the values its tangents depend on (a jaxpr dead-code pass): the
  others (a bias added after the last use of the primals) are constants of it, so their
  gradient is ``None``, as TF's per-op JVPs never read them;
* a ``custom_gradient`` call is pushed forward through the ops of its ``f``, not its
  ``grad_fn``: TF's accumulators see ``f``'s ops (they run under them) and keep the JVP those
  give its outputs.  So the accumulators record ``f``'s ops (``recorders``), and an output they
  connect to the primals is that op's output again (``follow_primal``); an output they do not
  connect (``f`` ends in ``round``, a straight-through estimator) is pushed forward through
  ``grad_fn`` by the double vjp, TF's fallback for an op with no forward function.
"""
import weakref
from typing import List, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes, nest as _nest, state as _state
from ..core.bind import Primitive
from ..core.convert import convert_to_tensor
from ..core.tensor import Tensor
from . import replay as _replay
from .custom import _GraphTape
from .jacobian import Entry, connect, constants_unread, leaf_tensors
from .nodes import NotATensorError, UnconnectedGradients, _check_leaves, _unconnected, flatten_sources
from .program import Program, aval, build_replay, gather_leaves
from .tape import GradientTape


class _Recorder(GradientTape):
    """The accumulator's recording: a tape that watches only the primals.

    It also remembers the tapes below it on the stack while it recorded
    (``below``): they are the ones that see the JVP computation in TF.
    """

    def __init__(self):
        super().__init__(persistent=True, watch_accessed_variables=False)
        self.below = weakref.WeakSet()

    def _note_below(self):
        for t in _state.tapes():
            if t is self:
                break
            self.below.add(t)

    def _record_op(self, prim, static, grad_type, ids, vals, result):
        if prim.name == "Sign" and grad_type is None:
            return   # TF's Sign gradient is zeros, not a function of dy: pushed forward, no tangent
        n = len(self._nodes)
        GradientTape._record_op(self, prim, static, grad_type, ids, vals, result)
        if len(self._nodes) != n:
            self._note_below()

    def _record_read(self, var, t):
        n = len(self._nodes)
        GradientTape._record_read(self, var, t)
        if len(self._nodes) != n:
            self._note_below()


#: The op that makes a custom-gradient output, for an accumulator, the output of ``f``'s own ops.
_PRIMAL = Primitive("CustomGradientPrimal", lambda x: x)


def recorders(tapes) -> tuple:
    """The accumulators' recordings among ``tapes`` (in stack order) that record ``f``'s ops: those
    entered since the innermost function body run op by op (``custom.graph_mode``) began.  To one
    entered outside, as to TF's accumulator around a ``tf.function`` call, the function is one op,
    pushed forward through its gradient (``grad_fn``)."""
    out: list = []
    for t in tapes:
        if isinstance(t, _GraphTape):
            out = []
        elif isinstance(t, _Recorder):
            out.append(t)
    return tuple(out)


def follow_primal(recs, outs, results) -> None:
    """On each recording in ``recs``: each of ``results`` that ``f``'s output in ``outs`` is
    connected to the primals becomes that output again (after the custom-gradient op, so it
    replaces it there)."""
    for rec in recs:
        for o, r in zip(outs, results):
            if rec._codes.get(o._id) is not None:
                rec._record_op(_PRIMAL, {}, None, [o._id], [o._value], r)


def _same_structure(a, b):
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and sorted(a) == sorted(b)
                and all(_same_structure(a[k], b[k]) for k in a))
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(_same_structure(x, y) for x, y in zip(a, b)))
    return True


def _trainable(x):
    return _dtypes.is_trainable_dtype(np.dtype(x._meta.dtype))


class ForwardAccumulator:
    """Computes Jacobian-vector products with forward mode (``tf.autodiff.ForwardAccumulator``).

    ``primals``: a Tensor or Variable (or a nested structure of them);
    ``tangents``: the same structure, each tangent of its primal's dtype and
    shape (or broadcastable to it).  Ops run inside ``with acc:`` are
    recorded; ``acc.jvp(y)`` is ``J_y(primals) @ tangents``::

        with tapejax.autodiff.ForwardAccumulator(x, v) as acc:
            y = f(x)
        acc.jvp(y)            # directional derivative of f at x along v

    Nest it with a ``GradientTape`` for Hessian-vector products (either way
    round; see the module docstring).
    """

    def __init__(self, primals, tangents):
        # (a JAX pytree of Variables, an equinox model, is flattened as tape sources are; its tangents
        # a pytree of arrays, None where the model has static leaves, as eqx.partition gives)
        flat_p = flatten_sources(primals)[0]
        flat_t = flatten_sources(tangents)[0]
        for p in flat_p:
            if not isinstance(p, Tensor) and not hasattr(p, "_read"):
                raise NotATensorError(f"Argument `primals` must hold Tensors or Variables; got {p!r} "
                                      f"of type {type(p).__name__}")
        if not _same_structure(primals, tangents) or len(flat_p) != len(flat_t):
            raise ValueError("The two structures don't have the same nested structure: `primals` has "
                             f"{len(flat_p)} element(s) ({_describe(primals)}), `tangents` has "
                             f"{len(flat_t)} ({_describe(tangents)})")
        ids = set()
        for p in flat_p:
            if p._id in ids:
                raise ValueError(f"Tensor {p!r} was specified as a primal multiple times. This may "
                                 "indicate an error. If it was intended, please sum the corresponding "
                                 "tangents.")
            ids.add(p._id)
        converted = []
        for i, (p, t) in enumerate(zip(flat_p, flat_t)):
            want = np.dtype(p._meta.dtype)
            if t is None:
                raise ValueError(f"Attempt to convert a value (None) with an unsupported type "
                                 f"(<class 'NoneType'>) to a Tensor: tangents[{i}] is None")
            try:
                t = convert_to_tensor(t, dtype=want)
            except (TypeError, ValueError) as e:
                raise type(e)(f"tangents[{i}] must have its primal's dtype {want.name}: {e}") from None
            pshape, tshape = tuple(p._meta.shape), tuple(t._meta.shape)
            try:
                ok = np.broadcast_shapes(tshape, pshape) == pshape
            except ValueError:
                ok = False
            if not ok:
                raise ValueError(f"tangents[{i}] has shape {tshape} but its primal has shape {pshape}: "
                                 "a tangent must have its primal's shape (or broadcast to it)")
            converted.append(t)
        self._primals = flat_p
        self._tangents = converted
        self._tangent_of = {p._id: t for p, t in zip(flat_p, converted)}
        rec = _Recorder()
        for p in flat_p:
            if _trainable(p):
                rec._new_leaf(p._id)
        self._rec = rec

    # -- context ----------------------------------------------------------
    def __enter__(self):
        if self._rec._recording:
            raise ValueError("Accumulator is already recording.")
        self._rec._push()
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._rec._recording:
            self._rec._pop()

    # -- results ----------------------------------------------------------
    def jvp(self, primals, unconnected_gradients=UnconnectedGradients.NONE):
        """The JVP of each tensor in ``primals`` (a Tensor or a nested structure).

        ``None`` for a tensor that does not depend on the primals through ops
        recorded in the block (zeros of its shape and dtype with
        ``unconnected_gradients='zero'``).
        """
        mode = _unconnected(unconnected_gradients)
        flat = _check_leaves(_nest.flatten(primals), "primals")
        results = _jvp(self, flat)
        if mode.value == "zero":
            results = [r if r is not None else Tensor(jnp.zeros(t._meta.shape, t._meta.dtype))
                       for r, t in zip(results, flat)]
        return _nest.pack_sequence_as(primals, results)

    def __repr__(self):
        state = "recording" if self._rec._recording else "not recording"
        return f"<ForwardAccumulator: {len(self._primals)} primal(s), {state}>"


def _describe(x):
    if isinstance(x, dict):
        return "dict"
    if isinstance(x, (list, tuple)):
        return f"{type(x).__name__} of {len(x)}"
    return type(x).__name__


def _build_jvp(nodes, program):
    replay, plan = build_replay(nodes, program, _replay.resolve_impl)
    src_avals = program.src_avals

    def tangents_of(tangents):
        return tuple(jnp.broadcast_to(jnp.asarray(t, d), s) for t, (s, d) in zip(tangents, src_avals))

    def jvp_fn(leaves, tangents):
        _replay._stats.compiles += 1
        eps0 = tuple(jnp.zeros(s, d) for s, d in src_avals)
        _, outs = jax.jvp(lambda e: replay(e, leaves), (eps0,), (tangents_of(tangents),))
        return outs

    def jvp_by_transpose(leaves, tangents):
        # J t = (u -> J^T u)^T t: the vjp's own vjp, for ops without a forward rule.
        _replay._stats.compiles += 1
        eps0 = tuple(jnp.zeros(s, d) for s, d in src_avals)
        outs, vjp = jax.vjp(lambda e: replay(e, leaves), eps0)
        u0 = tuple(jnp.zeros_like(o) for o in outs)
        _, vjp2 = jax.vjp(lambda u: vjp(u)[0], u0)
        (res,) = vjp2(tangents_of(tangents))
        return tuple(r.astype(o.dtype) for r, o in zip(res, outs))

    return Entry("ForwardAccumulatorJvp", jax.jit(jvp_fn), plan, fallback=jax.jit(jvp_by_transpose))


def _jvp(acc, flat) -> List[Optional[Tensor]]:
    """The tangent of each of ``flat`` (None where the primals do not reach it)."""
    rec = acc._rec
    nodes = rec._nodes
    codes = rec._codes
    results: List[Optional[Tensor]] = [None] * len(flat)
    todo = []
    for i, t in enumerate(flat):
        tangent = acc._tangent_of.get(t._id)
        if tangent is not None:
            results[i] = tangent
        elif codes.get(t._id) is not None:
            todo.append(i)
    if not todo:
        return results
    tgt_codes = []
    for i in todo:
        c = codes[flat[i]._id]
        if c not in tgt_codes:
            tgt_codes.append(c)
    primals = [p for p in acc._primals if _trainable(p)]
    live, values, first, slice_idx, needed = connect(rec, primals, tgt_codes)
    kept = [c for c in tgt_codes if c in needed]
    if not live or not kept:
        return results
    tangent_by_code = {rec._codes[p._id]: t for p, t in zip(acc._primals, acc._tangents)
                       if p._id in rec._codes}
    tangents = [tangent_by_code[c] for c in live]
    program = Program(nodes, slice_idx, tuple(live), tuple(aval(v) for v in values), tuple(kept),
                      (False,) * len(kept))
    def run(entry):
        leaves = gather_leaves(nodes, program, entry.plan, values)
        return entry, leaves, entry.call(leaves, tuple(t._value for t in tangents))

    entry, leaves, raw = _replay.lookup_run(nodes, program, run, key=("jvp", program), build=_build_jvp)
    outs = tuple(Tensor(o) for o in raw)
    below = [t for t in list(rec.below) if t is not rec]
    if below:  # the tapes that see this JVP computation (see the module docstring)
        args = constants_unread(entry, leaf_tensors(nodes, program, entry.plan, leaves, first) + list(tangents),
                                len(entry.plan))
        ids = [a._id for a in args]
        vals = [a._value for a in args]
        for tape in below:
            tape._record_op(entry.prim, {}, None, ids, vals, outs)
    by_code = dict(zip(kept, outs))
    for i in todo:
        results[i] = by_code.get(codes[flat[i]._id])
    return results
