"""Host values in dataset functions: host op results stay NumPy, the ops after them are staged.

A dataset function over string components (``hostfn``: a ``map`` over TFRecord records or file
names) runs eagerly per element.  Its host ops (``parse_single_example``, ``decode_raw``,
``decode_png`` ...) make NumPy arrays; as Tensors, each would be moved to the device (about
30 us), each op after it (``reshape``, ``cast``, ``resize``, ``/ 255``) would be its own
dispatch (25-80 us), and ``batch`` would stack the results on the host again.  Instead, while an
eager dataset function runs (``host_values()``, entered by ``functions.StructuredFunction``):

* a host op's numeric result (``numeric_result``) and a NumPy input component
  (``host_input``) are ``Pending`` Tensors whose value is a ``HostValue`` leaf holding the
  array: shape and dtype known, nothing moved;
* an op on host values (the executor offers it: ``core.tensor.Lazy.stage``) is not run: it
  becomes a ``HostValue`` node (the op's jitted callable and its inputs); its result's aval comes
  from ``jax.make_jaxpr`` of the callable (cached per callable and input signature: ``_op``),
  which raises the op's shape and dtype errors at the op, as running it would, and says
  whether the op may run over a batch (``_EXACT_UNDER_VMAP``);
* when the function returns, ``outputs`` gives its components: a leaf's NumPy array as it is
  (``batch`` stacks it on the host; the iterator moves the batch), and the nodes computed by
  their ops' own jitted callables in order (``materialize``): the programs the op-by-op path
  runs, so its values bit for bit (one fused program rounds differently: XLA contracts
  ``x / 255 + 1``), without the per-result transfers;
* with a ``batch`` right after the ``map`` (``transforms.Batch``), the nodes stay staged in the
  elements and ``batch_stack`` runs each op once for the whole batch (``jax.vmap`` of its
  callable, inputs stacked on the host or shared) where that gives the same values element by
  element (elementwise arithmetic, comparisons, casts, shape ops), and element by element
  otherwise (a reduction, a dot, ``resize``).  Elements whose staged ops differ are computed one
  by one and stacked (``outputs_of``).

Anything that needs a value earlier (``numpy()``, Python control flow on it, an op that is not
one jitted callable, a ``numpy_function``) computes it there (``HostValue.force``).  Ops with a
Variable operand, ops recorded by a tape, ops with several outputs and ops on traced or
device-committed arrays are never staged.  Outside dataset functions host ops give plain
Tensors, as before; ``TAPEJAX_DATA_HOST_VALUES=0`` / ``set_host_values(False)`` turns it off.
"""
import threading
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import jax
import jax.core
import numpy as np

from ..core.caches import LRU
from ..core.convert import convert_to_tensor
from ..core.state import env_flag, set_flag
from ..core.tensor import Lazy, Pending, Tensor
from ..core.transfer import to_device

_Array = type(jax.numpy.zeros(()))   # the concrete array type
_SCALARS = (bool, int, float, complex)

_local = threading.local()


class _Setting:
    #: host values on (``TAPEJAX_DATA_HOST_VALUES=0`` in the environment: off, every host op
    #: result a Tensor and every op run at once, the op-by-op path)
    enabled = env_flag("TAPEJAX_DATA_HOST_VALUES")


def set_host_values(enabled: bool) -> bool:
    """Turn host values on or off for dataset functions run from now on; the previous setting."""
    return set_flag(_Setting, enabled)


class Counts:
    """What host values did (read by tests): ops staged, ops run for one element
    (``op_runs``), ops run once for a whole batch (``batch_runs``) and the batched programs
    compiled for that, leaves moved to the device alone (``forced``: a value read early)."""

    staged = 0
    op_runs = 0
    batch_runs = 0
    compiles = 0
    forced = 0


class host_values:
    """While a dataset function runs on this thread: host op results are host values (a class:
    entered per element)."""

    __slots__ = ("prev",)

    def __enter__(self) -> None:
        self.prev = getattr(_local, "on", False)
        _local.on = _Setting.enabled

    def __exit__(self, *exc: Any) -> None:
        _local.on = self.prev


def numeric_result(array: np.ndarray) -> Tensor:
    """A host op's numeric result (``array``, of tapejax's storage dtype): a host value inside a
    dataset function, else a Tensor (``convert_to_tensor``)."""
    leaf = _leaf(array)
    return leaf if leaf is not None else convert_to_tensor(array)


def host_input(value: Any) -> Any:
    """A dataset function's numeric input component: a NumPy array as a host value (inside a
    dataset function, of a dtype JAX holds as it is), else as a device array (``jnp.asarray``)."""
    leaf = _leaf(value)
    return leaf if leaf is not None else jax.numpy.asarray(value)


def _leaf(array: Any) -> Optional[Pending]:
    if getattr(_local, "on", False) and type(array) is np.ndarray:
        key = (array.shape, array.dtype, jax.enable_x64.value)
        aval = _LEAF_AVALS.get(key)
        if aval is None and array.dtype.kind in "biufc" and jax.dtypes.canonicalize_dtype(array.dtype) == array.dtype:
            aval = _LEAF_AVALS.setdefault(key, jax.core.ShapedArray(array.shape, array.dtype))
        if aval is not None:
            return Pending(HostValue(None, None, aval, array))
    return None


#: (shape, dtype, 64-bit mode) -> a host leaf's aval, for the shapes and dtypes JAX holds as they are
_LEAF_AVALS = LRU("data_host_value_leaf_avals", 1024)


def _signature(v: Any) -> Any:
    """An input's part of a cache key: shape, dtype and weak type (a Python scalar: its type)."""
    if isinstance(v, HostValue):
        a = v.aval
        return (a.shape, a.dtype, a.weak_type)
    if type(v) in _SCALARS:
        return type(v)
    return (v.shape, v.dtype, bool(getattr(v, "weak_type", False)))


def _struct(v: Any) -> Any:
    if isinstance(v, HostValue):
        return jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype, weak_type=v.aval.weak_type)
    if type(v) in _SCALARS:
        return v
    return jax.ShapeDtypeStruct(v.shape, v.dtype, weak_type=bool(getattr(v, "weak_type", False)))


class _Op(NamedTuple):
    """What staging an op learns once per callable and input signature: its result's aval and
    whether it may run over a batch under ``jax.vmap`` with the values it gives element by
    element (only elementwise arithmetic, comparisons, casts and shape ops: a reduction, a dot
    or a transcendental function may round differently at another shape)."""

    aval: Any
    batchable: bool


#: (callable, input signatures, 64-bit mode) -> ``_Op``
_OPS = LRU("data_host_value_ops", 1024)

#: primitives whose batched result is, element by element, the unbatched one
_EXACT_UNDER_VMAP = frozenset({
    "add", "sub", "mul", "div", "rem", "neg", "sign", "floor", "ceil", "round", "abs", "max", "min",
    "integer_pow", "square", "convert_element_type", "reshape", "broadcast_in_dim", "squeeze",
    "expand_dims", "transpose", "select_n", "eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not",
    "xor", "clamp", "copy", "copy_p", "concatenate", "slice", "rev", "pad", "iota",
    "stop_gradient", "is_finite", "shift_left", "shift_right_logical", "shift_right_arithmetic",
    "bitcast_convert_type", "pjit", "jit", "closed_call"})


def _exact_under_vmap(jaxpr: Any) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name not in _EXACT_UNDER_VMAP:
            return False
        for p in eqn.params.values():
            inner = getattr(p, "jaxpr", None)
            if inner is not None and not _exact_under_vmap(getattr(inner, "jaxpr", inner)):
                return False
    return True


def _op(call: Callable[..., Any], vals: Sequence[Any]) -> _Op:
    key = (call, tuple([_signature(v) for v in vals]), jax.enable_x64.value)
    op = _OPS.get(key)
    if op is None:
        closed, out = jax.make_jaxpr(call, return_shape=True)(*[_struct(v) for v in vals])   # raises what the call would
        op = _OPS.setdefault(key, _Op(jax.core.ShapedArray(out.shape, out.dtype, weak_type=out.weak_type),
                                      _exact_under_vmap(closed.jaxpr)))
    return op


def _stageable(v: Any) -> bool:
    t = type(v)
    if t is HostValue or t in _SCALARS:
        return True
    if t is _Array:
        return not v.committed   # (a committed array keeps its device checks: run op by op)
    return t is np.ndarray or isinstance(v, np.generic)


class HostValue(Lazy):
    """A value in a dataset function: a NumPy array (a leaf: ``host``) or an op on host values
    (a node: ``call(*args)``), computed when needed (module docstring)."""

    __slots__ = ("call", "args", "aval", "value", "host", "batchable")

    def __init__(self, call: Optional[Callable[..., Any]], args: Optional[tuple], aval: Any,
                 host: Optional[np.ndarray] = None, batchable: bool = False):
        self.call = call
        self.args = args
        self.aval = aval
        self.value: Any = None
        self.host = host
        self.batchable = batchable

    @property
    def dtype(self) -> np.dtype:
        return self.aval.dtype

    @property
    def shape(self) -> Tuple[int, ...]:
        return self.aval.shape

    def force(self) -> Any:
        if self.value is None:
            Counts.forced += 1
            if self.host is not None:
                self.value = to_device(self.host)
            else:
                materialize([self])
        return self.value

    def set(self, value: jax.Array) -> None:
        self.value = value

    def stage(self, call: Callable[..., Any], vals: Sequence[Any]) -> Optional[Lazy]:
        if not getattr(_local, "on", False) or jax.debug_nans.value or jax.debug_infs.value:
            return None
        for v in vals:
            if not _stageable(v):
                return None
        op = _op(call, vals)
        Counts.staged += 1
        return HostValue(call, tuple(vals), op.aval, None, op.batchable)


class _Graph(NamedTuple):
    """The pending part of a set of host values: ``steps`` (callable, input references) in
    topological order, ``inputs`` (arrays, scalars, computed values), the roots' step indices."""

    key: Any
    inputs: List[Any]
    nodes: List[HostValue]
    roots: Tuple[int, ...]


def _graph(roots: Sequence[HostValue]) -> _Graph:
    index: Dict[int, Tuple[int, int]] = {}   # id(object) -> (0: node / 1: input, position)
    steps: List[Any] = []
    sigs: List[Any] = []
    inputs: List[Any] = []
    nodes: List[HostValue] = []

    def ref(v: Any) -> Tuple[int, int]:
        r = index.get(id(v))
        if r is not None:
            return r
        if type(v) is HostValue and v.value is None and v.host is None:
            refs = tuple([ref(a) for a in v.args or ()])
            steps.append((v.call, refs, v.batchable))
            nodes.append(v)
            r = (0, len(nodes) - 1)
        else:
            x = v if type(v) is not HostValue else (v.value if v.value is not None else v.host)
            sigs.append(_signature(x))
            inputs.append(x)
            r = (1, len(inputs) - 1)
        index[id(v)] = r
        return r

    root_refs = tuple([ref(r) for r in roots])
    assert all(k == 0 for k, _ in root_refs)
    key = (tuple(steps), tuple(sigs), tuple(j for _, j in root_refs), jax.enable_x64.value)
    return _Graph(key, inputs, nodes, tuple(j for _, j in root_refs))


def materialize(roots: Sequence[HostValue]) -> None:
    """Compute the pending nodes ``roots`` (and what they need): each op's jitted callable on
    its inputs, in order (the op-by-op path's programs, so its values; the NumPy leaves are
    moved by those calls, not one by one first)."""
    g = _graph(roots)
    steps = g.key[0]
    vals: List[Any] = []
    for call, refs, _ in steps:
        Counts.op_runs += 1
        vals.append(call(*[vals[j] if k == 0 else g.inputs[j] for k, j in refs]))
    for j in g.roots:
        g.nodes[j].value = vals[j]


def outputs(values: Sequence[Any], defer: bool = False) -> List[Any]:
    """A dataset function's output components (Tensors or None) as arrays: a host leaf's NumPy
    array, the pending nodes computed together (one program; with ``defer`` left as they are,
    ``HostValue``s for ``batch_stack``), other Tensors' values."""
    out: List[Any] = list(values)
    pending = []
    for i, t in enumerate(values):
        if t is None:
            continue
        th = t._thunk if type(t) is Pending else None
        if type(th) is HostValue:
            if th.value is not None:
                out[i] = th.value
            elif th.host is not None:
                out[i] = th.host
            else:
                pending.append((i, th))
        else:
            out[i] = t.value if isinstance(t, Tensor) else t
    if pending and defer:
        for i, th in pending:
            out[i] = th
    elif pending:
        roots = list({id(th): th for _, th in pending}.values())
        materialize(roots)
        for i, th in pending:
            out[i] = th.value
    return out


Element = Tuple[Any, ...]


def _batch_inputs(graphs: Sequence[_Graph]) -> Optional[Tuple[List[Any], Tuple[Optional[int], ...]]]:
    """The batch's program inputs: each position's values stacked (``in_axes`` 0), or the value
    all elements share (``None``: the same array, or equal Python scalars); None where neither
    (Python scalars that differ, weakly typed arrays that differ: stacking would change types)."""
    inputs: List[Any] = []
    axes: List[Optional[int]] = []
    for p, first in enumerate(graphs[0].inputs):
        vals = [g.inputs[p] for g in graphs]
        if all(v is first for v in vals) or (type(first) in _SCALARS and all(v == first for v in vals)):
            inputs.append(first)
            axes.append(None)
        elif type(first) in _SCALARS or bool(getattr(first, "weak_type", False)):
            return None
        else:
            inputs.append(np.stack([np.asarray(v) for v in vals]))
            axes.append(0)
    return inputs, tuple(axes)


#: (callable, in_axes, batch size) -> the op's jitted ``jax.vmap``
_BATCHED = LRU("data_host_value_batched_ops", 512)


def _batched(call: Callable[..., Any], axes: Tuple[Optional[int], ...], size: int) -> Callable[..., Any]:
    key = (call, axes, size)
    fn = _BATCHED.get(key)
    if fn is None:
        Counts.compiles += 1
        fn = _BATCHED.setdefault(key, jax.jit(jax.vmap(call, in_axes=axes, axis_size=size)))
    return fn


def _run_batch(graphs: Sequence[_Graph], inputs: List[Any], axes: Tuple[Optional[int], ...]) -> List[Any]:
    """The roots' values over the batch: each op once for the whole batch (``jax.vmap`` of its
    callable) where it is exact under vmap, else element by element and stacked."""
    size = len(graphs)
    steps = graphs[0].key[0]
    vals: List[Any] = []
    val_axes: List[Optional[int]] = []
    for call, refs, batchable in steps:
        args = [vals[j] if k == 0 else inputs[j] for k, j in refs]
        in_axes = tuple([val_axes[j] if k == 0 else axes[j] for k, j in refs])
        if all(a is None for a in in_axes):
            Counts.op_runs += 1
            vals.append(call(*args))
            val_axes.append(None)
        elif batchable:
            Counts.batch_runs += 1
            vals.append(_batched(call, in_axes, size)(*args))
            val_axes.append(0)
        else:
            hosts = [np.asarray(a) if ax is not None else a for a, ax in zip(args, in_axes)]
            outs = []
            for i in range(size):
                Counts.op_runs += 1
                outs.append(np.asarray(call(*[a[i] if ax is not None else a for a, ax in zip(hosts, in_axes)])))
            vals.append(np.stack(outs))
            val_axes.append(0)
    out = []
    for j in graphs[0].roots:
        v = vals[j]
        out.append(v if val_axes[j] is not None else np.broadcast_to(np.asarray(v), (size,) + np.shape(v)))
    return out


def batch_stack(elements: Sequence[Element], stack: Callable[[Sequence[Element]], Element]) -> Element:
    """``batch`` of elements from ``StructuredFunction.call_deferred``: components that are
    staged ops on host values (``HostValue``) computed for the whole batch by one program (the
    elements' graph under ``jax.vmap``, their inputs stacked on the host), the others by
    ``stack``.  Elements whose graphs differ (a shape, the ops) are computed one by one and
    stacked (``stack``'s error for shapes that differ)."""
    first = elements[0]
    ks = [k for k, c in enumerate(first) if type(c) is HostValue]
    if not ks and not any(type(c) is HostValue for e in elements for c in e):
        return stack(elements)
    graphs: Optional[List[_Graph]] = []
    for e in elements:
        if graphs is None or any(type(e[k]) is not HostValue for k in ks) or \
                sum(type(c) is HostValue for c in e) != len(ks):
            graphs = None
            break
        graphs.append(_graph([e[k] for k in ks]))
    batched = None
    if graphs is not None and all(g.key == graphs[0].key for g in graphs):
        batched = _batch_inputs(graphs)
    if graphs is None or batched is None:
        return stack([tuple(outputs_of(e)) for e in elements])
    inputs, axes = batched
    outs = _run_batch(graphs, inputs, axes)
    rest = stack([tuple(None if type(c) is HostValue else c for c in e) for e in elements])
    out = list(rest)
    for k, v in zip(ks, outs):
        out[k] = v
    return tuple(out)


def outputs_of(element: Element) -> List[Any]:
    """An element's components with its staged ones computed (one program)."""
    pending = [c for c in element if type(c) is HostValue and c.value is None]
    if pending:
        materialize(list({id(c): c for c in pending}.values()))
    return [c.value if type(c) is HostValue else c for c in element]


__all__ = ["Counts", "HostValue", "batch_stack", "host_input", "host_values", "materialize", "numeric_result", "outputs",
           "outputs_of", "set_host_values"]
