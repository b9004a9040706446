"""What a call looks like to ``tapejax.function``: specs, cache keys, argument templates.

A call's arguments are walked once (``arg_key``):

* Tensors, ``jax.Array`` and NumPy arrays are *dynamic*: the key holds their
  abstract value (shape, dtype, weak type), the array goes to the dynamic
  list that the compiled program takes;
* Python scalars, strings and ``None`` are *static* by value; Variables and
  every other object (a Module, an optimizer, a callable) by identity, as
  ``tf.function``'s weak-reference keys for objects: two equal-but-distinct
  models must not share Variables.  (TF 2.21 keys a Variable argument by its
  ``VariableSpec``, so Variables of one shape and dtype share a trace; here
  each Variable gets its own trace.)

``template`` keeps the argument structure with each dynamic leaf replaced by
``DYN`` (and no arrays), so a trace rebuilds the arguments from tracers with
``fill``; ``split_out`` does the reverse for the function's outputs.

``TensorSpec`` and ``bind_signature`` implement ``input_signature``;
``LeafSpec`` is one dynamic leaf's shape (``None`` for any size) and dtype, the
unit that ``input_signature`` and ``reduce_retracing`` generalise over
(``tapejax/compile/polymorphism.py``).
"""
from __future__ import annotations

from typing import Any, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import jax
import jax.core
import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.indexed_slices import IndexedSlices
from ..core.shape import Dimension
from ..core.tensor import Tensor, TensorShape
from ..core.variable import Variable
from ..ops.ragged_tensor import RaggedTensor, RaggedTensorSpec
from ..ops.sparse_tensor import SparseTensor, SparseTensorSpec
from . import tensor_array_args as _ta_args

_Tracer = jax.core.Tracer
_Array = jax.Array


class _Dyn:
    """Marks a dynamic leaf in a template (a singleton)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DYN"


DYN = _Dyn()


class ArgRecord:
    """The template of an argument that is neither a tensor nor keyed by identity: a value whose
    type has ``_tapejax_flatten() -> (key, record, leaves)`` (a ``tapejax.data`` iterator: its
    ``IteratorSpec`` as the key, its handle as the one leaf).  ``fill`` rebuilds what the trace
    sees from the leaves' tracers."""

    def fill(self, it: Iterator[Any]) -> Any:
        raise NotImplementedError


class _RawOut(ArgRecord):
    """An output leaf of a JAX extended dtype (a typed PRNG key, ``jax.random.key``): returned as
    the JAX array, not a Tensor (a key has no TF dtype), so ``key, loss = step(key, x)`` threads it."""

    def fill(self, it: Iterator[Any]) -> Any:
        v = next(it)
        return v._value if isinstance(v, Tensor) else v


RAW = _RawOut()


# ---------------------------------------------------------------------------
# TensorSpec and input signatures
# ---------------------------------------------------------------------------

class TensorSpec:
    """``tf.TensorSpec``: a shape (``None`` for any size, or ``None`` for any rank) and a dtype."""

    __slots__ = ("_shape", "_dtype", "_name")

    def __init__(self, shape, dtype=_dtypes.float32, name=None):
        if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
            shape = (int(shape),)   # TF: a single dimension
        elif isinstance(shape, TensorShape):   # (``TensorShape(None)``: any rank)
            shape = None if shape.rank is None else shape.as_list()
        elif isinstance(shape, (list, tuple)):   # (``x.shape.dims``: Dimensions)
            shape = [d.value if isinstance(d, Dimension) else d for d in shape]
        if shape is not None and not (isinstance(shape, (list, tuple)) and all(
                d is None or (isinstance(d, (int, np.integer)) and not isinstance(d, bool)) for d in shape)):
            raise TypeError(f"Failed to convert {shape!r} to a shape (argument `shape` of TensorSpec): a shape "
                            "is a single dimension (e.g. 10) or a list of dimensions (ints or None, e.g. "
                            "[1, 10, None]), or None for an unknown shape")
        self._shape = None if shape is None else tuple(None if d is None else int(d) for d in shape)
        self._dtype = _dtypes.as_dtype(dtype)
        self._name = name

    @classmethod
    def from_tensor(cls, tensor, name=None) -> "TensorSpec":
        t = convert_to_tensor(tensor)
        return cls(tuple(t._value.shape), t.dtype, name)

    @property
    def shape(self):
        return None if self._shape is None else TensorShape(self._shape)

    @property
    def dtype(self):
        return self._dtype

    @property
    def name(self):
        return self._name

    def is_compatible_with(self, x) -> bool:
        """Whether ``x`` (a Tensor, array or TensorSpec) fits this spec."""
        if isinstance(x, TensorSpec):
            if x._dtype != self._dtype:
                return False
            if self._shape is None:
                return True
            if x._shape is None:
                return False
            return len(x._shape) == len(self._shape) and all(
                s is None or o is None or s == o for s, o in zip(self._shape, x._shape))
        v = getattr(x, "_value", x)
        if np.dtype(v.dtype) != self._dtype._np:
            return False
        return self.leaf().accepts(tuple(v.shape))

    def leaf(self) -> "LeafSpec":
        return LeafSpec(self._shape, self._dtype._np)

    def __eq__(self, other):
        return (isinstance(other, TensorSpec) and self._shape == other._shape
                and self._dtype == other._dtype and self._name == other._name)

    def __hash__(self):
        return hash((self._shape, self._dtype.name, self._name))

    def __repr__(self):
        shape = "<unknown>" if self._shape is None else self._shape
        return f"TensorSpec(shape={shape}, dtype=tf.{self._dtype.name}, name={self._name!r})"


class LeafSpec(NamedTuple):
    """One dynamic leaf as a program accepts it: ``shape`` (``None`` dims take any size;
    ``None`` shape any rank) and a NumPy dtype."""

    shape: Optional[Tuple[Optional[int], ...]]
    dtype: Any

    def accepts(self, shape: Sequence[int]) -> bool:
        if self.shape is None:
            return True
        return len(shape) == len(self.shape) and all(s is None or s == d for s, d in zip(self.shape, shape))

    def accepts_aval(self, aval) -> bool:
        return aval.dtype == self.dtype and self.accepts(aval.shape)

    @property
    def polymorphic(self) -> bool:
        return self.shape is None or any(d is None for d in self.shape)

    def __repr__(self):
        shape = "<unknown>" if self.shape is None else tuple(self.shape)
        return f"LeafSpec({shape}, {self.dtype.name})"


def _spec_text(v) -> str:
    return f"TensorSpec(shape={tuple(v.shape)}, dtype=tf.{v.dtype.name}, name=None)"


def is_value_spec(spec: Any) -> bool:
    """A spec of ``input_signature`` other than ``TensorSpec`` (``type_spec.py``): a
    ``TensorArraySpec``, ``tf.SparseTensorSpec`` (the call is still keyed by the SparseTensor's
    static dense shape: ``ops.sparse_tensor``), ``tf.RaggedTensorSpec`` (keyed by its parts'
    shapes), ``tf.data.DatasetSpec`` or ``IteratorSpec``, which
    checks its argument with ``is_compatible_with`` and passes it on as it is."""
    return isinstance(spec, (_ta_args.TensorArraySpec, SparseTensorSpec, RaggedTensorSpec)) or (
        type(spec).__name__ in ("DatasetSpec", "IteratorSpec") and hasattr(spec, "is_compatible_with"))


def bind_signature(signature: Sequence[Any], args, kwargs, fname: str,
                   method: bool = False) -> Tuple[Any, ...]:
    """TF's ``input_signature`` binding: every argument a Tensor compatible with its spec
    (TypeError naming the argument and both specs otherwise), returned positionally.  For a
    method (``method``: decorated in a class body, called through its instance) the signature
    describes the arguments after ``self``."""
    if method and len(args) == len(signature) + 1:
        return (args[0],) + tuple(bind_signature(signature, args[1:], kwargs, fname))
    if kwargs:
        raise TypeError(f"{fname}: with an input_signature, pass the arguments positionally; "
                        f"got keyword arguments {sorted(kwargs)}")
    if len(args) != len(signature):
        raise TypeError(f"Binding inputs to tapejax.function `{fname}` failed: the input_signature "
                        f"has {len(signature)} argument(s) but the call passed {len(args)}.")
    out = []
    for i, (a, spec) in enumerate(zip(args, signature)):
        if type(spec) in (tuple, list, dict):
            out.append(_bind_nested(a, spec, f"argument {i}", fname))
            continue
        if is_value_spec(spec):
            if not getattr(spec, "_binds", spec.is_compatible_with)(a):   # (``_binds``: TF's own binding rule)
                msg = (f"Binding inputs to tapejax.function `{fname}` failed: argument {i} {a!r} is not "
                       f"compatible with {spec!r} (its input_signature).")
                own = getattr(spec, "_binding_error", None)   # (a spec whose TF error is another class)
                raise own(a, msg) if own is not None else TypeError(msg)
            out.append(a)
            continue
        out.append(_bind_tensor(a, spec, f"argument {i}", fname))
    return tuple(out)


def _bind_tensor(a, spec: TensorSpec, where: str, fname: str) -> Tensor:
    """One argument (or a leaf of one) bound to its ``TensorSpec``: converted, checked.  A NumPy
    array of another numeric dtype is cast to the spec's, as TF binds it (a Tensor is not)."""
    if isinstance(a, (np.ndarray, np.generic)) and a.dtype != spec.dtype.as_numpy_dtype \
            and a.dtype.kind in "biuf" and np.dtype(spec.dtype.as_numpy_dtype).kind in "biuf":
        a = np.asarray(a).astype(spec.dtype.as_numpy_dtype)
    if isinstance(a, (Tensor, Variable, _Array, np.ndarray)):
        t = convert_to_tensor(a)
    else:
        try:
            t = convert_to_tensor(a, dtype=spec.dtype)
        except (TypeError, ValueError) as e:
            raise TypeError(f"Binding inputs to tapejax.function `{fname}` failed: {where} "
                            f"{a!r} cannot be converted to {spec!r}: {e}") from None
    if not spec.is_compatible_with(t._value):
        raise TypeError(f"Binding inputs to tapejax.function `{fname}` failed due to `Can not cast "
                        f"{_spec_text(t._value)} to {spec!r}` ({where}).")
    return t


def _bind_nested(a, spec, where: str, fname: str):
    """An argument whose spec is a tuple / list / dict of specs (TF's nested ``input_signature``):
    the same container type, length and keys (TypeError otherwise, as TF's), leaves bound."""
    if isinstance(spec, TensorSpec):
        return _bind_tensor(a, spec, where, fname)
    fail = f"Binding inputs to tapejax.function `{fname}` failed due to `"
    if type(spec) is dict:
        if not isinstance(a, dict):
            raise TypeError(f"{fail}Can not cast {a!r} to a Dict type.` ({where}, spec {spec!r}).")
        if sorted(a) != sorted(spec):
            raise TypeError(f"{fail}{a!r} has different keys with the spec {spec!r}` ({where}).")
        return {k: _bind_nested(a[k], spec[k], f"{where}[{k!r}]", fname) for k in spec}   # (TF: the spec's order)
    if type(a) is not type(spec):
        raise TypeError(f"{fail}Can not cast {a!r} to {type(spec).__name__} type.` ({where}, spec {spec!r}).")
    if len(a) != len(spec):
        raise TypeError(f"{fail}Expected {a!r} to have length of {len(spec)}` ({where}).")
    return type(spec)(_bind_nested(e, s, f"{where}[{j}]", fname) for j, (e, s) in enumerate(zip(a, spec)))


def _nested_tensor_specs(spec) -> bool:
    if isinstance(spec, TensorSpec):
        return True
    if type(spec) in (tuple, list):
        return all(_nested_tensor_specs(e) for e in spec)
    if type(spec) is dict:
        return all(isinstance(k, str) and _nested_tensor_specs(v) for k, v in spec.items())
    return False


def signature_leaves(signature: Sequence[Any]) -> Optional[List[TensorSpec]]:
    """The ``TensorSpec`` leaves of an input signature in the order ``arg_key`` walks a call's
    arguments (dicts by sorted key), or None when it holds another kind of spec."""
    out: List[TensorSpec] = []

    def walk(s) -> bool:
        if isinstance(s, TensorSpec):
            out.append(s)
            return True
        if type(s) in (tuple, list):
            return all(walk(e) for e in s)
        if type(s) is dict:
            return all(walk(s[k]) for k in sorted(s))
        return False

    return out if all(walk(s) for s in signature) else None


def check_signature(input_signature) -> Optional[Tuple[TensorSpec, ...]]:
    """``input_signature`` as a tuple of specs (TypeError naming it otherwise)."""
    if input_signature is None:
        return None
    sig = tuple(input_signature) if isinstance(input_signature, (list, tuple)) else None
    if sig is None or not all(_nested_tensor_specs(s) or is_value_spec(s) for s in sig):
        raise TypeError(f"input_signature must be a list or tuple of tapejax.TensorSpec (or tuples, lists and "
                        f"dicts of them, TensorArraySpec, tf.data.DatasetSpec, tf.data.IteratorSpec); got "
                        f"{input_signature!r}")
    return sig


# ---------------------------------------------------------------------------
# Argument keys: dynamic arrays by abstract value, Python values by value
# ---------------------------------------------------------------------------

def arg_key(x, dyn: List[Any]):
    """Hashable key of one argument; appends its dynamic arrays to ``dyn``."""
    t = type(x)
    if t is Tensor:
        v = x._value
        dyn.append(v)
        return v.aval   # shape, dtype, weak type (and sharding): hashable, and what jit keys on
    if t is tuple or t is list:
        return (t, tuple([arg_key(e, dyn) for e in x]))
    if t is dict:
        return (dict, tuple([(k, arg_key(x[k], dyn)) for k in sorted(x)]))
    if t in (int, float, bool, str, type(None)):
        return (t, x)
    if isinstance(x, Tensor):
        v = x._value
        dyn.append(v)
        return v.aval
    if isinstance(x, Variable):
        return ("var", x._id)
    if isinstance(x, (_Array, _Tracer)):
        dyn.append(x)
        return x.aval
    if isinstance(x, (np.ndarray, np.generic)):
        v = convert_to_tensor(x)._value
        dyn.append(v)
        return ("np", v.aval)
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
        return (t, tuple([arg_key(e, dyn) for e in x]))
    if isinstance(x, IndexedSlices):   # (a gradient passed on: its values and indices are dynamic)
        shape = x._static_shape
        return (t, arg_key(x.values, dyn), arg_key(x.indices, dyn),
                shape if shape is not None else arg_key(x.dense_shape, dyn))
    if isinstance(x, SparseTensor):   # its parts dynamic, its static dense shape in the key (ops.sparse_tensor)
        shape = x._static
        return (t, arg_key(x.indices, dyn), arg_key(x.values, dyn),
                shape if shape is not None else arg_key(x.dense_shape, dyn))
    if isinstance(x, RaggedTensor):   # its values and row splits dynamic (their shapes in the key)
        return (t, x._splits_dtype.name, x._uniform, arg_key(x._values, dyn), arg_key(x._row_splits, dyn))
    if t in (bytes, complex, type) or isinstance(x, (np.dtype, _dtypes.DType)):
        return (t, x)
    if _ta_args.is_tensor_array(x):   # its stacked buffer is dynamic, its metadata static
        return _ta_args.key(x, dyn)
    flat = getattr(t, "_tapejax_flatten", None)
    if flat is not None:
        key, _, leaves = flat(x)
        dyn.extend(leaf._value for leaf in leaves)
        return (t, key, tuple(leaf._value.aval for leaf in leaves))
    # Any other object keys by identity; the entry's template holds the object, so its
    # id is not reused while the entry is cached.
    return ("obj", t, id(x))


def call_key(args, kwargs, dyn: List[Any]):
    """The cache key of a call ``(args, kwargs)``; fills ``dyn`` (the inline loop of
    ``Function.__call__`` builds the same key for Tensor arguments)."""
    return (tuple([arg_key(a, dyn) for a in args]), arg_key(kwargs, dyn) if kwargs else None)


def shape_free(key):
    """``key`` with every abstract value replaced by its rank and dtype: calls whose dynamic
    leaves differ only in sizes have the same ``shape_free`` key."""
    if isinstance(key, jax.core.ShapedArray):   # (its dtype: a NumPy dtype, or a typed PRNG key's)
        return ("leaf", key.ndim, key.dtype)
    if isinstance(key, tuple):
        return tuple(shape_free(k) for k in key)
    return key


def skeleton(key):
    """A ``shape_free`` key with every leaf's rank and dtype left out: calls whose dynamic leaves
    may differ in rank and dtype but whose Python values and structure are the same."""
    if isinstance(key, tuple) and len(key) == 3 and key[0] == "leaf" and isinstance(key[2], np.dtype):
        return "leaf"
    if isinstance(key, tuple):
        return tuple(skeleton(k) for k in key)
    return key


def _flattener(x: Any) -> Any:
    """The ``_tapejax_flatten`` of ``x``'s type (see ``ArgRecord``), or None."""
    return getattr(type(x), "_tapejax_flatten", None)


def tensor_args(x, out: List[Any]) -> None:
    """The dynamic leaves as op inputs, in ``arg_key``'s order (Tensors keep their ids)."""
    if isinstance(x, Tensor):
        out.append(x)
    elif isinstance(x, (_Array, _Tracer)):
        out.append(x)
    elif isinstance(x, (np.ndarray, np.generic)):
        out.append(convert_to_tensor(x))
    elif type(x) is tuple or type(x) is list or (isinstance(x, tuple) and hasattr(x, "_fields")):
        for e in x:
            tensor_args(e, out)
    elif type(x) is dict:
        for k in sorted(x):
            tensor_args(x[k], out)
    elif _ta_args.is_tensor_array(x):
        _ta_args.tensors(x, out)
    elif _flattener(x) is not None:
        out.extend(_flattener(x)(x)[2])
    elif type(x) is RaggedTensor:
        tensor_args(x._values, out)
        tensor_args(x._row_splits, out)
    elif type(x) is SparseTensor:
        tensor_args(x.indices, out)
        tensor_args(x.values, out)
        if x._static is None:
            tensor_args(x.dense_shape, out)
    elif type(x) is IndexedSlices:
        tensor_args(x.values, out)
        tensor_args(x.indices, out)
        if x._static_shape is None:
            tensor_args(x.dense_shape, out)


def template(x):
    """The argument structure with dynamic leaves (and TensorSpecs) replaced by ``DYN`` (``RAW`` for
    a typed PRNG key: the body gets the JAX key array, as ``jax.jit``'s does, for ``jax.random``)."""
    if isinstance(x, (Tensor, TensorSpec)) or isinstance(x, (_Array, _Tracer, np.ndarray, np.generic)):
        if isinstance(x, (_Array, _Tracer)) and not isinstance(x.dtype, np.dtype):
            return RAW
        return DYN
    t = type(x)
    if t is tuple or t is list:
        return t(template(e) for e in x)
    if t is dict:
        return ArgDict([(k, template(x[k])) for k in x])
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return t(*[template(e) for e in x])
    if t is IndexedSlices:
        return _slices_template(x, template)
    if t is SparseTensor:
        return _sparse_template(x, template)
    if isinstance(x, RaggedTensor):
        return RaggedOut(template(x._values), template(x._row_splits), x._splits_dtype.name, x._uniform)
    if _ta_args.is_tensor_array(x):
        return _ta_args.template(x)
    flat = getattr(t, "_tapejax_flatten", None)
    if flat is not None:
        return flat(x)[1]
    return x


class ArgDict(dict):
    """A dict argument's template: its leaves come in sorted key order (``arg_key``,
    ``tensor_args``), the body gets the caller's key order, as TF's function body does."""


class SlicesOut(NamedTuple):
    """An ``IndexedSlices`` in a function's arguments or outputs: its values' and indices'
    templates and its dense shape, static (``static``) or the template of its Tensor (a gradient
    passed to or returned from a compiled step, as TF passes one)."""
    values: Any
    indices: Any
    static: Optional[Tuple[int, ...]]
    shape: Any = None


def _slices_template(x, leaf):
    """``SlicesOut`` of ``IndexedSlices`` ``x``, its parts' templates made by ``leaf``."""
    if x._static_shape is not None:
        return SlicesOut(leaf(x.values), leaf(x.indices), x._static_shape)
    return SlicesOut(leaf(x.values), leaf(x.indices), None, leaf(x.dense_shape))


class SparseOut(NamedTuple):
    """A ``SparseTensor`` in a function's arguments or outputs: its indices' and values' templates
    and its static dense shape, or (computed in the trace) the template of its ``dense_shape``."""
    indices: Any
    values: Any
    static: Optional[Tuple[int, ...]]
    shape: Any = None


def _sparse_template(x, leaf):
    if x._static is not None:
        return SparseOut(leaf(x.indices), leaf(x.values), x._static)
    return SparseOut(leaf(x.indices), leaf(x.values), None, leaf(x.dense_shape))


class RaggedOut(NamedTuple):
    """A ``RaggedTensor`` in a function's arguments or outputs: its values' and row splits'
    templates, its row_splits dtype and uniform row length (``ops.ragged_tensor``)."""
    values: Any
    splits: Any
    splits_dtype: str
    uniform: Optional[int]


def fill(tpl, it: Iterator[Any]) -> Any:
    """Rebuild a structure from a template, dynamic leaves taken from ``it``."""
    if tpl is DYN:
        return next(it)
    t = type(tpl)
    if t is SlicesOut:
        values, indices = fill(tpl.values, it), fill(tpl.indices, it)
        if tpl.static is not None:
            return IndexedSlices._of(values, indices, tpl.static)
        return IndexedSlices(values, indices, fill(tpl.shape, it))
    if t is SparseOut:
        indices, values = fill(tpl.indices, it), fill(tpl.values, it)
        if tpl.static is not None:
            return SparseTensor._of(indices, values, tpl.static)
        return SparseTensor(indices, values, fill(tpl.shape, it))
    if t is TreeOut:
        return jax.tree_util.tree_unflatten(tpl.tree, [fill(k, it) for k in tpl.kids])
    if t is RaggedOut:
        values = fill(tpl.values, it)
        return RaggedTensor._of(values, fill(tpl.splits, it), _dtypes.as_dtype(tpl.splits_dtype), tpl.uniform)
    if t is tuple or t is list:
        return t(fill(e, it) for e in tpl)
    if t is dict:
        return {k: fill(v, it) for k, v in tpl.items()}
    if t is ArgDict:
        filled = {k: fill(tpl[k], it) for k in sorted(tpl)}
        return {k: filled[k] for k in tpl}
    if t is _ta_args.TAArg or t is _ta_args.TAOut or isinstance(tpl, ArgRecord):   # (before namedtuples)
        return tpl.fill(it)
    if isinstance(tpl, tuple) and hasattr(tpl, "_fields"):
        return t(*[fill(e, it) for e in tpl])
    return tpl


def split_out(x, dyn: List[Any]):
    """Outputs -> template with arrays taken out into ``dyn`` (a returned Variable is read:
    its value when the program runs, not a constant of the trace; a Python number or NumPy
    array becomes a Tensor, as TF's function outputs do; strings and other objects stay)."""
    if isinstance(x, Tensor):
        dyn.append(x._value)
        return DYN if isinstance(x._value.dtype, np.dtype) else RAW
    if isinstance(x, Variable):
        dyn.append(convert_to_tensor(x)._value)
        return DYN
    if isinstance(x, (_Array, _Tracer)):
        dyn.append(x)
        return DYN if isinstance(x.dtype, np.dtype) else RAW
    t = type(x)
    if t is IndexedSlices:
        return _slices_template(x, lambda e: split_out(e, dyn))
    if t is SparseTensor:
        return _sparse_template(x, lambda e: split_out(e, dyn))
    if t is RaggedTensor:
        return RaggedOut(split_out(x._values, dyn), split_out(x._row_splits, dyn), x._splits_dtype.name, x._uniform)
    if _ta_args.is_tensor_array(x):
        return _ta_args.out(x, dyn)
    if t is tuple or t is list:
        return t(split_out(e, dyn) for e in x)
    if t is dict:
        return {k: split_out(v, dyn) for k, v in x.items()}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return t(*[split_out(e, dyn) for e in x])
    if t in (bool, int, float, complex) or isinstance(x, (np.ndarray, np.generic)):
        dyn.append(convert_to_tensor(x)._value)   # TF returns a Python number as a constant Tensor
        return DYN
    if x is not None:   # another JAX pytree (``tf.experimental.Optional``): its leaves are outputs
        kids, tree = jax.tree_util.tree_flatten(x, is_leaf=lambda e: e is not x and isinstance(e, (Tensor, Variable)))
        if not jax.tree_util.treedef_is_leaf(tree):
            return TreeOut(tree, tuple(split_out(k, dyn) for k in kids))
    return x


class TreeOut(NamedTuple):
    """An output that is a JAX pytree of another kind: its tree and its leaves' templates."""
    tree: Any
    kids: tuple


__all__ = ["ArgDict", "ArgRecord", "DYN", "LeafSpec", "TensorSpec", "arg_key", "bind_signature", "call_key", "check_signature", "is_value_spec", "skeleton",
           "fill", "shape_free", "split_out", "template", "tensor_args"]
