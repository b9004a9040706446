"""Dataset functions over string components: run eagerly per element, their spec from samples.

tapejax has no string tensors, so a string component reaches a ``map`` / ``filter`` / key
function as host bytes (``bytes``, an object array of ``bytes`` when batched) and the string ops
(``tf.io.decode_raw``, ``tf.strings.*``, ``tf.io.decode_csv``: ``hostops``) turn it into Tensors
on the host; such a function cannot be one JAX program and runs op by op, per element.

TF learns the output spec by tracing with shape inference; without string tensors there is no
trace to make, so the spec comes from running the function (``infer_spec``):

* on the input's first two elements (read from a build of the input whose shuffles take the
  first iteration's draw without consuming it), a dimension that differs between them unknown;
* on the first element with each dimension the input spec leaves unknown (a batch's) one
  longer: output dimensions that follow it become unknown;
* and on the first element again with the ops whose output length follows the data
  (``decode_raw``, ``split``, ``bytes_split``) giving one element more (``hostops.perturbed``):
  a dimension that follows from them changes and becomes unknown, as in TF's spec; where that
  run fails (a ``reshape`` to a fixed shape) the dimensions are the ones the samples have, which
  is what TF's shape inference finds there too.  (A dimension TF's inference cannot follow, a
  constant slice ``x[:1]`` of an unknown one, is known here.)

With no element to run on (an empty input, or a function without ``samples``: key functions,
``scan``), it runs on empty strings and zeros instead.  Python side effects therefore run up to
three times when the function is given, as well as once per element.
"""
from typing import Any, Callable, List, Optional, Sequence, Tuple, Type

import numpy as np

from ..compile.signature import TensorSpec
from ..core import dtypes as _dtypes
from ..core.errors import InvalidArgumentError
from ..ops.ragged_tensor import RaggedTensorSpec
from ..ops.sparse_tensor import SparseTensorSpec
from . import ragged_elements as _ragged, sparse_elements as _sparse, structure as S
from .build import Build
from .hostops import perturbed

Flat = Tuple[Any, ...]


class _PeekBuild(Build):
    """A build for reading sample elements: every shuffle takes iteration 0's order, without
    advancing its counter (the first real iteration still gets its own draw)."""

    def draw(self, node: Any, fresh: Callable[[], int]) -> "tuple[int, int]":
        return super().draw(node, lambda: 0)


def peek(dataset: Any, n: int = 2) -> List[Flat]:
    """Up to ``n`` first elements of ``dataset`` as flat component tuples."""
    it = iter(dataset._build_stream(_PeekBuild(dataset.options())))
    out: List[Flat] = []
    try:
        for _ in range(n):
            try:
                out.append(tuple(next(it)))
            except StopIteration:
                break
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    return out


def _zero(spec: S.Spec) -> Any:
    if isinstance(spec, SparseTensorSpec):
        return _sparse.zero(spec)
    if isinstance(spec, RaggedTensorSpec):
        return _ragged.zero(spec)
    if not isinstance(spec, TensorSpec):
        return None
    shape = tuple(1 if d is None else d for d in (spec.shape or ()))
    if S.is_string(spec):
        return b"" if not shape else S.string_value(np.full(shape, b"", object))
    return np.zeros(shape, spec.dtype._np)


def _with_perturbed(run: Callable[[Sequence[Any]], Any], comps: Sequence[Any]) -> Any:
    with perturbed():
        return run(comps)


def _grown(comps: Sequence[Any], in_specs: Sequence[S.Spec]) -> List[Any]:
    """``comps`` with each dimension the input spec leaves unknown (a batch's) one longer (its
    last slice repeated): output dimensions that follow it change and become unknown."""
    out = []
    for c, spec in zip(comps, in_specs):
        if isinstance(c, _sparse.SparseValue) and isinstance(spec, SparseTensorSpec):
            out.append(_sparse.grown(c, spec))
            continue
        if isinstance(c, _ragged.RaggedValue) and isinstance(spec, RaggedTensorSpec):
            out.append(_ragged.grown(c, spec))
            continue
        shape = spec.shape if isinstance(spec, TensorSpec) else None
        if c is not None and shape is not None and None in shape:
            a = np.asarray(c)
            for axis, d in enumerate(shape):
                if d is None and a.shape[axis] > 0:
                    a = np.concatenate([a, np.take(a, [a.shape[axis] - 1], axis=axis)], axis=axis)
            c = a
        out.append(c)
    return out


def output_spec(value: Any) -> S.Spec:
    """The spec of one output component value (all dimensions as they are)."""
    if value is None:
        return S.NoneTensorSpec()
    if isinstance(value, _sparse.SparseValue):
        return _sparse.spec(value)
    if isinstance(value, _ragged.RaggedValue):
        return _ragged.spec(value)
    if S.is_bytes(value):
        return S.string_spec(S.string_shape(value))
    return TensorSpec(tuple(np.shape(value)), _dtypes.as_dtype(np.dtype(value.dtype)))


def _merge(a: S.Spec, b: S.Spec, name: str) -> S.Spec:
    if isinstance(a, S.NoneTensorSpec) or isinstance(b, S.NoneTensorSpec):
        if type(a) is not type(b):
            raise InvalidArgumentError(f"The function passed to {name} returned None for one element and a "
                                       "tensor for another.")
        return a
    if isinstance(a, (SparseTensorSpec, RaggedTensorSpec)) or isinstance(b, (SparseTensorSpec, RaggedTensorSpec)):
        merged = (_sparse.combine(a, b) if isinstance(a, SparseTensorSpec) else
                  _ragged.combine(a, b) if isinstance(a, RaggedTensorSpec) else None)
        if merged is None:
            raise InvalidArgumentError(f"The function passed to {name} returned {a!r} for one element and {b!r} "
                                       "for another.")
        return merged
    assert isinstance(a, TensorSpec) and isinstance(b, TensorSpec)
    if a.dtype.name != b.dtype.name:
        raise InvalidArgumentError(f"The function passed to {name} returned {a.dtype.name} for one element and "
                                   f"{b.dtype.name} for another.")
    if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
        return TensorSpec(None, a.dtype)
    return TensorSpec(tuple(x if x == y else None for x, y in zip(a.shape, b.shape)), a.dtype)


def infer_spec(run: Callable[[Sequence[Any]], Any], in_specs: Sequence[S.Spec],
               samples: Optional[Callable[[], List[Flat]]], name: str, passthrough: Tuple[Type[BaseException], ...]) -> Any:
    """The output spec of ``run`` (the function on flat components, giving its output structure
    of values) from sample runs (the module docstring)."""
    outs: List[Any] = []
    error: Optional[BaseException] = None
    real = samples() if samples is not None else []
    for comps in real:
        try:
            outs.append(run(comps))
        except passthrough:
            raise
        except Exception as e:  # noqa: BLE001 - a bad element: its error comes when it is read
            error = error or e
    if not outs:
        zeros = [_zero(s) for s in in_specs]
        try:
            outs.append(run(zeros))
        except passthrough:
            raise
        except Exception as e:
            raise (error or e)
        real = [tuple(zeros)]
    for variant in (lambda: _with_perturbed(run, real[0]), lambda: run(_grown(real[0], in_specs))):
        try:
            outs.append(variant())
        except passthrough:
            raise
        except Exception:  # noqa: BLE001, S110 - a fixed shape needs the real sizes: those dims stay
            pass
    first = outs[0]
    specs = [output_spec(c) for c in S.flatten(first)]
    for out in outs[1:]:
        if not S.same_structure(out, first):
            raise InvalidArgumentError(f"The function passed to {name} returned {out!r} for one element and "
                                       f"{first!r} for another: their structures differ.")
        specs = [_merge(a, output_spec(c), name) for a, c in zip(specs, S.flatten(out))]
    return S.pack(first, specs)
