"""``tf.map_fn``, ``tf.vectorized_map``, ``tf.switch_case`` and ``tf.case``: TF's functional ops,
built on ``cond`` (``control_flow``) and the tape's ops.

``map_fn`` applies ``fn`` to each slice of ``elems`` along axis 0 in Python and stacks the results:
eagerly as TF runs it, and inside ``tapejax.function`` unrolled into the one compiled program (the
length is static there; gradients are the tape's own).  ``vectorized_map`` gives map_fn's results
(TF's pfor vectorizes the same computation; here it runs as map_fn's loop).  ``switch_case`` and
``case`` pick a branch in Python eagerly; with a traced index or predicates they are nested
``cond``\\ s, so every branch is traced and one runs.  ``grad_pass_through`` is a
``custom_gradient`` whose gradient is the identity; ``recompute_grad`` one whose gradient runs
``f`` again under a tape.
"""
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

from ..autodiff.custom_gradient import custom_gradient
from ..autodiff.tape import GradientTape
from ..core import dtypes as _dtypes, nest as _nest
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..core.variable import Variable
from ..ops.array import stack
from ..ops.checks import require
from ..ops.math import equal
from ..ops.utilities import inside_function
from .control_flow import _traced, cond


def map_fn(fn, elems, dtype=None, parallel_iterations=None, back_prop=True, swap_memory=False, infer_shape=True,
           name=None, fn_output_signature=None):
    """``tf.map_fn``: ``stack([fn(e) for e in unstack(elems)])``, ``elems`` a tensor or a nest of
    tensors of one leading length; ``fn_output_signature`` (or the deprecated ``dtype``) names the
    output dtypes when they differ from ``elems``'s (TF raises otherwise)."""
    if not callable(fn):
        raise TypeError(f"fn must be callable; got {fn!r}")
    leaves = [convert_to_tensor(e) for e in _nest.flatten(elems)]
    if not leaves:
        raise ValueError("elems must be a Tensor or a (possibly nested) sequence of Tensors; got no tensors")
    shapes = [tuple(int(d) for d in t.shape.as_list()) for t in leaves]
    if any(not s for s in shapes):
        raise ValueError("Elements in elems must be 1+ dimensional Tensors, not scalars")
    lengths = sorted({s[0] for s in shapes})
    if len(lengths) != 1:
        raise ValueError(f"Dimensions {lengths[0]} and {lengths[1]} are not compatible")
    n = lengths[0]
    signature = fn_output_signature if fn_output_signature is not None else dtype
    if signature is None:   # TF's default: fn returns elems's structure and dtypes
        signature = _nest.pack_sequence_as(elems, [t.dtype for t in leaves])
    want = [_dtypes.as_dtype(getattr(s, "dtype", s)) for s in _nest.flatten(signature)]
    if n == 0:   # (TF: each output a length-0 vector of its dtype)
        return _nest.pack_sequence_as(signature, [Tensor(jnp.zeros((0,), d._np)) for d in want])
    outs = [_nest.flatten(fn(_nest.pack_sequence_as(elems, [t[i] for t in leaves]))) for i in range(n)]
    if len(outs[0]) != len(want):
        raise ValueError(f"fn returned {len(outs[0])} tensors where fn_output_signature (by default elems's "
                         f"structure) has {len(want)}: give map_fn fn_output_signature")
    for got, d in zip(outs[0], want):
        g = convert_to_tensor(got).dtype
        if g != d:
            raise InvalidArgumentError(None, None, f"TensorArray dtype is {d.name} but Op is trying to write dtype "
                                       f"{g.name} (give map_fn fn_output_signature={g.name})")
    return _nest.pack_sequence_as(signature, [stack([o[j] for o in outs]) for j in range(len(want))])


def vectorized_map(fn, elems, fallback_to_while_loop=True, warn=True):
    """``tf.vectorized_map``: ``map_fn(fn, elems)``'s result (TF vectorizes the loop with pfor; here
    it runs as ``map_fn``), the output structure being whatever ``fn`` returns."""
    leaves = [convert_to_tensor(e) for e in _nest.flatten(elems)]
    if not leaves or leaves[0].shape.rank == 0:
        raise ValueError("elems must be a Tensor or a nest of Tensors of rank >= 1")
    first = fn(_nest.pack_sequence_as(elems, [t[0] for t in leaves]))
    signature = _nest.pack_sequence_as(first, [convert_to_tensor(t).dtype for t in _nest.flatten(first)])
    return map_fn(fn, elems, fn_output_signature=signature)


def _branch_list(branch_fns) -> "list[Callable[[], Any]]":
    """TF's canonical form: a list, a dict {index: fn} or (index, fn) pairs, indices 0 .. n-1."""
    if isinstance(branch_fns, dict):
        pairs = list(branch_fns.items())
    elif all(isinstance(b, tuple) and len(b) == 2 for b in branch_fns):
        pairs = list(branch_fns)
    else:
        pairs = list(enumerate(branch_fns))
    keys = sorted(k for k, _ in pairs)
    if keys != list(range(len(pairs))):
        found = "{" + ",".join(str(k) for k in keys) + "}"
        raise ValueError(f"branch indices (keys) must form contiguous range of [0 to {len(pairs)}) but found {found}")
    for _, f in pairs:
        if not callable(f):
            raise TypeError(f"fn for branch must be callable; got {f!r}")
    return [f for _, f in sorted(pairs, key=lambda p: p[0])]


def switch_case(branch_index, branch_fns, default=None, name="switch_case"):
    """``tf.switch_case``: ``branch_fns[branch_index]()``; an index out of range runs ``default`` (the
    last branch when there is none)."""
    fns = _branch_list(branch_fns)
    if not fns:
        raise ValueError("Must provide at least one item in branch_fns")
    if not isinstance(branch_index, (Tensor, Variable)):
        raise TypeError(f"'branch_index' must be a Tensor, got {type(branch_index)}")
    idx = convert_to_tensor(branch_index)
    if not idx.dtype.is_integer:
        raise TypeError(f"'branch_index' must be an integer Tensor, got {idx.dtype!r}")
    if idx.shape.rank != 0:
        raise ValueError(f"'branch_index' must be a scalar; got shape {idx.shape.as_list()}")
    if default is None:
        default = fns[-1]
    if not _traced(idx):
        i = int(np.asarray(idx._value))
        return fns[i]() if 0 <= i < len(fns) else default()

    def chain(k):
        if k == len(fns):
            return default()
        return cond(equal(idx, k), fns[k], lambda: chain(k + 1))
    return chain(0)


def case(pred_fn_pairs, default=None, exclusive=False, strict=False, name="case"):
    """``tf.case``: the fn of the first true predicate, else ``default``; with no default and no true
    predicate TF's InvalidArgumentError.  ``exclusive`` checks (traced too) that at most one holds."""
    pairs = list(pred_fn_pairs.items()) if isinstance(pred_fn_pairs, dict) else list(pred_fn_pairs)
    for p in pairs:
        if not (isinstance(p, tuple) and len(p) == 2 and callable(p[1])):
            raise TypeError(f"Each entry in pred_fn_pairs must be a 2-tuple of (predicate, callable); got {p!r}")
    preds = [convert_to_tensor(p) for p, _ in pairs]
    for p in preds:
        if p.dtype != _dtypes.bool or p.shape.rank != 0:
            raise TypeError(f"pred must be a scalar bool Tensor; got {p!r}")
    if not any(_traced(p) for p in preds):
        vals = [bool(np.asarray(p._value)) for p in preds]
        if exclusive and sum(vals) > 1:
            raise InvalidArgumentError(None, None, "Input error: exclusive=True: more than 1 conditions were true")
        for v, (_, f) in zip(vals, pairs):
            if v:
                return f()
        if default is None:
            raise InvalidArgumentError(None, None, "Input error: None of conditions evaluated as True")
        return default()
    all_preds = preds
    if default is None:   # traced without a default: one predicate must hold (checked), the last fn
        # runs when no earlier one does
        count = jnp.sum(jnp.stack([jnp.asarray(p._value, jnp.int32) for p in preds]))
        require(count >= 1, "Input error: None of conditions evaluated as True")
        *pairs, (_, default) = pairs
        preds = preds[:len(pairs)]
    if exclusive and len(all_preds) > 1:   # a check in the compiled program (ops.checks)
        count = jnp.sum(jnp.stack([jnp.asarray(p._value, jnp.int32) for p in all_preds]))
        require(count <= 1, "Input error: exclusive=True: more than 1 conditions were true")

    def chain(k):
        if k == len(pairs):
            return default()
        return cond(preds[k], pairs[k][1], lambda: chain(k + 1))
    return chain(0)


def grad_pass_through(f):
    """``tf.grad_pass_through(f)``: a function computing ``f``'s value whose gradient passes the
    upstream gradient to the inputs unchanged (as if ``f`` were the identity); Variables ``f``
    reads get None (TF's rule)."""
    @custom_gradient
    def passed(*args, **kwargs):
        def grad(*dys, variables=None):
            if variables is not None:
                return dys, [None] * len(variables)
            return dys
        return f(*args, **kwargs), grad
    return passed


def recompute_grad(f):
    """``tf.recompute_grad(f)``: ``f`` whose intermediate values are not kept for the gradient: the
    forward pass is a ``custom_gradient`` (the tape records only its result), and the gradient runs
    ``f`` again under a tape and differentiates that (TF's algorithm: memory for compute).  The
    gradients of the inputs and of the trainable Variables ``f`` reads are ``f``'s.  Inside a
    ``tapejax.function`` ``f`` is recorded as it is (the compiled program's memory is XLA's to
    schedule; a Variable cannot be read again at gradient time there), with the same values and
    gradients."""
    def call(*args):
        if inside_function():
            return f(*args)
        return recomputed(*args)

    @custom_gradient
    def recomputed(*args):
        def grad(*dys, variables=None):
            watched = [a for a in args if isinstance(a, (Tensor, Variable))]
            with GradientTape() as tape:
                tape.watch(watched)
                out = f(*args)
            flat = _nest.flatten(out)
            targets = list(variables or [])
            g = tape.gradient(flat, watched + targets, output_gradients=[d for d in _nest.flatten(list(dys))])
            it = iter(g[:len(watched)])
            arg_grads = [next(it) if isinstance(a, (Tensor, Variable)) else None for a in args]
            if variables is not None:
                return arg_grads, list(g[len(watched):])
            return arg_grads
        return f(*args), grad
    return call


__all__ = ["case", "grad_pass_through", "map_fn", "recompute_grad", "switch_case", "vectorized_map"]
