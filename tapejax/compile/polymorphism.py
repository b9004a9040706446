"""One trace for many sizes: ``input_signature`` with ``None`` dimensions and ``reduce_retracing``.

TF traces ``tf.function(input_signature=[TensorSpec([None, 3])])`` once for
every batch size.  XLA programs have static shapes, so tapejax traces the
Python body once with *symbolic* sizes (``jax.export.symbolic_shape``) and
exports the program (``jax.export``); each new concrete size then compiles
the exported module (no Python runs), and the tracing count stays 1.

How ``None`` dimensions become symbols (a ``Plan``): dimensions that have the
same size in the call being traced share a symbol (a batch dimension across
``x`` and ``y``), the others get their own; a later call whose sizes break a
sharing (``x`` and ``y`` batches differ) is traced for its own sizes.  Without
a call to look at (``get_concrete_function(TensorSpec([None, 3]))``),
dimensions on the same axis share a symbol.

When the body cannot be traced with symbolic sizes (Python arithmetic on a
size, an op JAX's shape polymorphism does not cover) or the program cannot be
exported (it calls back into Python: ``tapejax.print``), the function falls
back to one trace per concrete shape, as the non-polymorphic path: the body
then runs again for each new size.  JAX's symbols stand for sizes >= 1, so a call
with a ``None`` dimension of size 0 (an empty batch or sequence) is traced for its
own shapes too (``has_empty``): TF's one trace covers it, tapejax's count is one more.  ``Plan.fallback`` records it so the
symbolic trace is tried once per function and signature.

``relax`` is ``reduce_retracing``: a call that misses with the same structure,
ranks and dtypes as an earlier trace generalises the sizes that differ to
``None`` (TF's "relaxed" signature); a different rank is a new trace (TF would
relax to an unknown rank, which XLA cannot compile).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jax
from jax import export as jax_export

from .signature import LeafSpec

_Dim = Tuple[int, int]   # (leaf index, axis)


@dataclasses.dataclass
class Plan:
    """The symbolic avals one polymorphic trace uses, and which dimensions share a symbol."""

    specs: Tuple[LeafSpec, ...]
    avals: Tuple[jax.ShapeDtypeStruct, ...]
    groups: Tuple[Tuple[_Dim, ...], ...]   # dimensions that share one symbol
    fallback: bool = False                  # symbolic tracing failed: trace per concrete shape

    def accepts(self, avals: Sequence[Any]) -> bool:
        """Whether ``avals`` (concrete) fit the specs and the shared symbols."""
        if len(avals) != len(self.specs):
            return False
        if not all(s.accepts_aval(a) for s, a in zip(self.specs, avals)):
            return False
        for group in self.groups:
            sizes = {avals[i].shape[ax] for i, ax in group}
            if len(sizes) > 1 or 0 in sizes:   # (a symbol is >= 1: see ``has_empty``)
                return False
        return True


def has_empty(specs: Sequence[LeafSpec], avals: Sequence[Any]) -> bool:
    """Whether a ``None`` dimension of ``specs`` has size 0 in ``avals`` (JAX's symbolic sizes are
    >= 1, so such a call is traced for its own shapes)."""
    return any(d is None and a.shape[ax] == 0
               for s, a in zip(specs, avals) for ax, d in enumerate(s.shape or ()))


def plan(specs: Sequence[LeafSpec], weak: Sequence[bool], example: Optional[Sequence[Any]] = None) -> Plan:
    """Symbols for the ``None`` dimensions of ``specs`` (see the module docstring)."""
    if any(s.shape is None for s in specs):
        raise ValueError("a dynamic argument of unknown rank cannot be compiled: give its rank in the "
                         "TensorSpec (None for each unknown size)")
    by_key: Dict[Any, List[_Dim]] = {}
    for i, s in enumerate(specs):
        assert s.shape is not None
        for ax, d in enumerate(s.shape):
            if d is None:
                k = ("size", int(example[i].shape[ax])) if example is not None else ("axis", ax)
                by_key.setdefault(k, []).append((i, ax))
    groups = tuple(tuple(g) for g in by_key.values())
    # every size is >= 1, so a product of two is at least each factor: JAX cannot infer it, and
    # without it a reshape of a ``[b, t - 1]`` slice (``x[:, 1:]``, a gather's cotangent made
    # IndexedSlices rows) is an inconclusive 'b*t - b >= 0' and the function traces per shape
    n = len(groups)
    scope = jax_export.SymbolicScope([f"d{i}*d{j} >= d{k}" for i in range(n) for j in range(i + 1, n)
                                      for k in (i, j)])
    syms = jax_export.symbolic_shape(", ".join(f"d{j}" for j in range(len(groups))), scope=scope) \
        if groups else ()
    sym_of = {dim: syms[j] for j, g in enumerate(groups) for dim in g}
    avals = []
    for i, s in enumerate(specs):
        assert s.shape is not None
        shape = tuple(sym_of[(i, ax)] if d is None else d for ax, d in enumerate(s.shape))
        avals.append(jax.ShapeDtypeStruct(shape, s.dtype, weak_type=bool(weak[i])))
    return Plan(tuple(specs), tuple(avals), groups)


def relax(old: Sequence[LeafSpec], avals: Sequence[Any]) -> Optional[Tuple[LeafSpec, ...]]:
    """``reduce_retracing``: ``old`` generalised to also accept ``avals`` (None when a rank or a
    dtype differs)."""
    if len(old) != len(avals):
        return None
    out = []
    for s, a in zip(old, avals):
        if s.shape is None or len(s.shape) != len(a.shape) or a.dtype != s.dtype:
            return None
        out.append(LeafSpec(tuple(None if d is None or d != n else d for d, n in zip(s.shape, a.shape)),
                            s.dtype))
    return tuple(out)


def relax_ranks(old: Sequence[LeafSpec], avals: Sequence[Any]) -> Tuple[LeafSpec, ...]:
    """``reduce_retracing`` after a rank or dtype changed (``len(old) == len(avals)``): a leaf
    like its ``old`` one is relaxed as ``relax`` does, a leaf whose rank or dtype changed gets
    every size generalised (TF relaxes it to an unknown shape; XLA needs the rank)."""
    out = []
    for s, a in zip(old, avals):
        old_shape = s.shape
        if old_shape is not None and len(old_shape) == len(a.shape) and a.dtype == s.dtype:
            shape = tuple(None if d is None or d != n else d for d, n in zip(old_shape, a.shape))
        else:
            shape = (None,) * len(a.shape)
        out.append(LeafSpec(shape, a.dtype))
    return tuple(out)


def concrete(avals: Sequence[Any]) -> Tuple[LeafSpec, ...]:
    return tuple(LeafSpec(tuple(a.shape), a.dtype) for a in avals)


def export(fun, state_avals: Sequence[Any], p: Plan):
    """``fun(*state, *dyn)`` exported for the plan's symbolic sizes (``state_avals``: the
    Variables' values); ``None`` when it cannot be (a host callback: the program then cannot be
    exported)."""
    try:
        return jax_export.export(jax.jit(fun))(*state_avals, *p.avals)
    except Exception:   # noqa: BLE001 - any refusal of export means: trace per concrete shape
        return None


__all__ = ["Plan", "concrete", "export", "has_empty", "plan", "relax", "relax_ranks"]
