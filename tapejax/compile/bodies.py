"""Tracing the body of a control-flow op (a branch, a loop body) into a jaxpr.

``close(fn, in_tree, in_avals, what)`` traces ``fn`` (Tensors in, Tensors out)
with ``jax.make_jaxpr`` and gives a ``Closed`` record:

* a *capture tape* is alone on the tape stack while it traces: it sees every
  op input created before the trace (a Tensor captured by the Python
  closure) and every Variable read, so the jaxpr's constants can be handed
  back as the op's inputs (``handles``: the Variable, to be read again by
  ``bind``, or the Tensor with its id), and tapes record the op as reading
  them (gradients flow to closed-over Variables and watched Tensors);
* a ``BodyCollector`` is the collector while it traces: reads pass to the
  enclosing one (a ``tapejax.function``'s, so the Variable becomes an input of
  the program), assignments are allowed and recorded (``Closed.assigned``),
  and every Variable gets its value back afterwards.

A body that assigns Variables is traced again with them *carried*
(``carried=``): their values enter as extra inputs (a loop's state) and leave
as extra outputs; the op assigns the results after it runs.  TF's rules for
a tape around the op hold: an assignment is not differentiated, and every
read of the Variable counts as a read *of the Variable*, before or after an
assignment, in any iteration.  So a carried Variable's value after an
assignment is ``reads_of(new, anchor)``: the new value, whose derivative is
that of ``anchor``, the value the Variable had when the body began (a loop
body's carried input, whose own derivative passes to the previous
iteration's, back to the op's read of the Variable; a branch's captured
read).  The derivative of ``d(loss)/dv`` is then the sum over all reads, as
TF's gradient of a ResourceVariable read inside ``tf.while_loop``.  A
Variable created inside a body needs a concrete initial value (an optimizer's
slots: then the enclosing function's rules apply); one computed by the body is
refused.
"""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Sequence, Tuple

import jax
import jax.core
from jax.extend import core as jex_core

from ..core import state as _state
from ..core.bind import with_id
from ..core.convert import convert_to_tensor
from ..core.errors import OperatorNotAllowedInGraphError
from ..core.tensor import Tensor
from ..core.variable import Variable
from ..ops import affine as _affine

_Tracer = jax.core.Tracer


def is_tensor_leaf(x) -> bool:
    return isinstance(x, (Tensor, Variable))


def to_tensors(struct):
    """Every leaf of a nested structure as a Tensor (Variables are read, Python numbers converted)."""
    return like(struct, jax.tree_util.tree_map(lambda x: x if type(x) is Tensor else convert_to_tensor(x),
                                               struct, is_leaf=is_tensor_leaf))


def like(ref: Any, value: Any) -> Any:
    """``value``, a structure JAX's ``tree_util`` rebuilt from ``ref``'s (its dicts in sorted key
    order), with every dict in ``ref``'s key order, as TF's ``nest`` packs one."""
    if type(value) is dict and isinstance(ref, dict) and len(ref) == len(value):
        return {k: like(ref[k], value[k]) for k in ref} if all(k in value for k in ref) else value
    if type(value) in (list, tuple) and isinstance(ref, (list, tuple)) and len(ref) == len(value):
        items = [like(r, v) for r, v in zip(ref, value)]
        return items if type(value) is list else tuple(items)
    if isinstance(value, tuple) and hasattr(value, "_fields") and isinstance(ref, tuple) and len(ref) == len(value):
        return type(value)(*[like(r, v) for r, v in zip(ref, value)])
    return value


def flatten(struct):
    return jax.tree_util.tree_flatten(struct, is_leaf=is_tensor_leaf)


def traced(x) -> bool:
    return isinstance(getattr(x, "_value", x), _Tracer)


def avals(leaves) -> List[jax.ShapeDtypeStruct]:
    return [jax.ShapeDtypeStruct(t._value.shape, t._value.dtype) for t in leaves]


class CaptureTape:
    """Alone on the tape stack while a body traces: collects what the body captures."""

    _defers = False   # (a recorder: see ``core.state.Recorder``)

    def __init__(self, start: int):
        self.start = start
        self.caps: Dict[int, Any] = {}   # id(value object) -> Variable or (tensor id, value)

    def _record_read(self, var, t):
        self.caps.setdefault(id(var._value), var)

    def _record_op(self, prim, static, grad_type, ids, vals, result):
        start = self.start
        for i, v in zip(ids, vals):
            if 0 < i < start:
                self.caps.setdefault(id(v), (i, v))

    def _record_simple(self, prim, skey, ids, vals, result):
        self._record_op(prim, dict(skey), None, ids, vals, result)

    def returned(self, leaves: Sequence[Any]) -> None:
        """The body's outputs: one made before the trace is captured as if an op had read it."""
        start = self.start
        for t in leaves:
            i = getattr(t, "_id", 0)
            if 0 < i < start:
                self.caps.setdefault(id(t._value), (i, t._value))


@jax.custom_jvp
def reads_of(value: Any, anchor: Any) -> Any:
    """``value``, differentiated as ``anchor``: a read of a carried Variable after an assignment
    (the assignment not differentiated, the read counted as one of the Variable's)."""
    return value


@reads_of.defjvp
def _reads_of_jvp(primals, tangents):
    return primals[0], tangents[1]


def _differentiable(x: Any) -> bool:
    return jax.numpy.issubdtype(x.dtype, jax.numpy.inexact)


class BodyCollector:
    """The collector while a body traces: reads and assignments are reported to the enclosing
    collector; assignments are recorded and undone when the trace ends.  A carried Variable
    with an ``anchor`` (``anchor``) is read after an assignment as ``reads_of(new, anchor)``."""

    #: a control-flow body's collector (``state.traces_function`` looks past it to ``outer``)
    body = True

    def __init__(self, outer, what: str, carried: Sequence[Variable], cap: "CaptureTape"):
        self.outer = outer
        self.what = what
        self.cap = cap
        self.carried = {v._id for v in carried}
        self.assigned: Dict[int, Variable] = {}
        self.saved: Dict[int, Any] = {}
        self.anchors: Dict[int, Any] = {}   # Variable id -> its value when the body began
        self.current: Dict[int, Any] = {}   # Variable id -> the value its reads are of

    def anchor(self, var: Variable, value: Any) -> None:
        """``var`` (carried, holding ``value`` now) is read as ``reads_of(., value)`` once
        assigned; a branch's ``value`` (no loop input) is a captured read of ``var``."""
        if _differentiable(value):
            self.anchors[var._id] = value
            self.current[var._id] = value

    def _anchored(self, var: Variable) -> None:
        anchor = self.anchors.get(var._id)
        if anchor is None or var._val is self.current[var._id]:
            return
        self.cap.caps.setdefault(id(anchor), var)   # (a branch: the anchor is the op's read)
        var._value = reads_of(var._val, anchor)
        self.current[var._id] = var._val

    def value_out(self, var: Variable) -> Any:
        """The carried Variable's value when the body ends, as the body's extra output."""
        self._anchored(var)
        return var._val

    def touch(self, var, assign: bool) -> None:
        if self.outer is not None:
            self.outer.touch(var, assign)   # (first: the function's read is bound before saving)
        if not assign:
            self._anchored(var)
        elif var._id not in self.carried:
            if var._id not in self.saved:
                self.saved[var._id] = var._state()
            self.assigned[var._id] = var

    def created(self, var) -> None:
        if isinstance(var._val, _Tracer):
            raise ValueError(f"A Variable is created inside the {self.what} of a tapejax control-flow op (a "
                             "converted `if`, `while` or `for` on a tensor, or tapejax.cond / while_loop / "
                             "scan) with an initial value computed there; create it before the loop, or from "
                             "a value that does not depend on the loop.")
        if self.outer is not None:   # a concrete initial value (an optimizer's slots): TF's rules apply
            self.outer.created(var)

    def restore(self) -> None:
        for vid, st in self.saved.items():
            self.assigned[vid]._restore(st)


class Closed(NamedTuple):
    """A traced body: the jaxpr, its constants and their handles (op inputs), the output tree,
    and the Variables it assigned that were not carried."""

    jaxpr: Any
    consts: List[Any]
    handles: List[Any]
    out_tree: Any
    assigned: Tuple[Variable, ...]


def close(fn, in_tree, in_avals: Sequence[Any], what: str, carried: Sequence[Variable] = (),
          carry_in: bool = True) -> Closed:
    """Trace ``fn`` (Tensors in, Tensors out) -> ``Closed``.

    With ``carried`` Variables, the jaxpr takes their values as extra last inputs
    (``carry_in``; a branch reads them as captured values instead) and gives their values at
    the end as extra last outputs.
    """
    out_box: List[Any] = []
    n_in = len(in_avals)

    def flat_fn(*vals):
        saved = [v._state() for v in carried]
        try:
            for i, v in enumerate(carried):
                if carry_in:
                    v._value = vals[n_in + i]
                col.anchor(v, v._value)
            # an integer scalar (a loop index) knows its linear form: slices by it have static sizes
            args = jax.tree_util.tree_unflatten(in_tree, [_affine.index(v) for v in vals[:n_in]])
            out = to_tensors(fn(*args))
            leaves, tree = flatten(out)
            out_box.append(tree)
            # a Tensor from before the trace returned as it is (``lambda: x``, an ``if`` branch
            # that leaves ``loss`` unchanged) is an input of the op as much as one an op read
            cap.returned(leaves)
            # a loop's state passes its derivative back to the previous iteration's (reads_of);
            # a branch's result is only assigned: not differentiated
            new = [col.value_out(v) if carry_in and v._id in col.anchors
                   else jax.lax.stop_gradient(convert_to_tensor(v._value)._value) for v in carried]
        finally:
            for v, st in zip(carried, saved):
                v._restore(st)
        return [t._value for t in leaves] + new

    cap = CaptureTape(_state.next_id())
    col = BodyCollector(_state._local.collector, what, carried, cap)
    extra = [jax.ShapeDtypeStruct(v._meta.shape, v._meta.dtype) for v in carried] if carry_in else []
    try:
        with _state.swap(tapes=(cap,), collector=col):
            closed = jax.make_jaxpr(flat_fn)(*in_avals, *extra)
    except jax.errors.JAXTypeError as e:
        from .tracing import CF_HINT, is_value_error
        if is_value_error(e):
            raise OperatorNotAllowedInGraphError(
                f"In the {what} of a tapejax control-flow op, a traced tensor was used where Python "
                f"needs its value. {CF_HINT}") from None
        raise
    finally:
        col.restore()
    handles = []
    for c in closed.consts:
        h = cap.caps.get(id(c))
        if h is None:
            handles.append(c)          # a constant: an untracked input
        elif isinstance(h, Variable):
            handles.append(h)          # read again by bind: tapes record the read
        else:
            handles.append(with_id(h[1], h[0]))
    return Closed(closed.jaxpr, list(closed.consts), handles, out_box[-1], tuple(col.assigned.values()))


def run_jaxpr(jaxpr, consts, args):
    return jex_core.jaxpr_as_fun(jex_core.ClosedJaxpr(jaxpr, list(consts)))(*args)


__all__ = ["BodyCollector", "CaptureTape", "Closed", "avals", "close", "flatten", "is_tensor_leaf",
           "run_jaxpr", "to_tensors", "traced"]
