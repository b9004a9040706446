"""A TensorArray entering a traced loop (``tapejax.while_loop`` / ``scan`` / AutoGraph's loops).

``enter_loop`` puts every TensorArray of the loop variables in loop form: a buffer (an eager
list is stacked), a ``dynamic_size`` array grown by the loop's bound (its trip count: ValueError
without one, naming the alternatives).  ``refine`` runs after one trace of the body: an array
that had no buffer (element shape unknown until the body wrote it) gets one of the shape written,
and the loop traces the body again.  ``match_branches`` does the same for a staged ``if`` whose
one branch writes an array the other leaves unwritten.  See ``tensor_array``'s docstring for the
rules.
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Dict, Optional, Tuple

import jax

from ..core.bind import bind
from ..core.tensor import Tensor
from ..ops import array as _array
from .tensor_array import _GROW, TensorArray, _full


def _is_ta(x: Any) -> bool:
    return isinstance(x, TensorArray)


def _map(fn, struct):
    return jax.tree_util.tree_map(lambda x: fn(x) if _is_ta(x) else x, struct, is_leaf=lambda x: _is_ta(x) or
                                  isinstance(x, Tensor) or x is None)


def has_tensor_arrays(struct: Any) -> bool:
    return any(_is_ta(x) for x in jax.tree_util.tree_leaves(struct, is_leaf=_is_ta))


def enter_loop(struct: Any, bound: Optional[int]) -> Any:
    """``struct`` with its TensorArrays in loop form: buffers (an eager list becomes one), a
    dynamic array grown by ``bound`` rows (the loop's trip count; ValueError without one)."""
    def convert(ta: TensorArray) -> TensorArray:
        if ta._elems is not None:
            a = ta._a
            if any(t is not None for t in ta._elems) or _full(a.shape):
                shape = tuple(a.shape or ()) if _full(a.shape) else next(tuple(t.shape) for t in ta._elems
                                                                          if t is not None)
                rows = [t if t is not None else _array.zeros(shape, a.dtype) for t in ta._elems]
                buf = _array.stack(rows) if rows else _array.zeros((0,) + tuple(shape), a.dtype)
                ta = TensorArray._make(a._replace(listed=False, materialized=True, shape=shape,
                                                  static_len=len(rows) if a.dynamic else None), None, buf, len(rows))
            else:
                ta = TensorArray._make(a._replace(listed=False, static_len=a.cap if a.dynamic else None), None,
                                       None, a.cap)
        if not ta._a.dynamic:
            return ta
        if bound is None:
            raise ValueError("A TensorArray with dynamic_size=True is a loop variable of a compiled loop with no "
                             "bound on its trip count; XLA compiles static shapes, so give the TensorArray a static "
                             "size, or bound the loop: tf.autograph.experimental.set_loop_options("
                             "maximum_iterations=...) in a converted `while`, maximum_iterations= of "
                             "tapejax.while_loop, or a `for` over a tensor / tf.range of static length")
        known = ta._a.static_len if ta._a.static_len is not None else ta._a.cap
        want = known + int(bound)
        if want <= ta._a.cap:
            return ta
        if ta._buf is None:
            return TensorArray._make(ta._a._replace(cap=want), None, None, ta._len)
        return ta._with(bind(_GROW, ta._buf, rows=want - ta._a.cap), ta._len)
    return _map(convert, struct)


def refine(struct: Any, out_tree: Any) -> Optional[Any]:
    """After one trace of a loop body: ``struct`` with each TensorArray that had no buffer given
    one of the element shape the body wrote (then the body is traced again), or None when no
    TensorArray changed."""
    try:
        skeleton = jax.tree_util.tree_unflatten(out_tree, [None] * out_tree.num_leaves)
    except Exception:   # noqa: BLE001 - a structure mismatch: the loop reports it
        return None
    outs = [x for x in jax.tree_util.tree_leaves(skeleton, is_leaf=_is_ta) if _is_ta(x)]
    ins = [x for x in jax.tree_util.tree_leaves(struct, is_leaf=_is_ta) if _is_ta(x)]
    if len(outs) != len(ins):
        return None
    fix = {}
    for i, o in zip(ins, outs):
        if i._elems is None and i._buf is None and o._a.materialized and _full(o._a.shape):
            fix[id(i)] = o._a.shape
    if not fix:
        return None

    def give(ta: TensorArray) -> TensorArray:
        shape = fix.get(id(ta))
        if shape is None:
            return ta
        new = TensorArray._make(ta._a, None, None, ta._len)
        new._materialize(shape)
        return new
    return _map(give, struct)


def match_branches(a: Any, b: Any) -> Optional[Tuple[Callable[[Any], Any], Callable[[Any], Any]]]:
    """After one trace of both branches of a staged ``if`` whose results ``a`` and ``b`` differ in
    structure: where a TensorArray has no buffer in one (nothing written, element shape unknown)
    and one of a known element shape in the other (``ta = ta.write(i, x)`` in one branch only),
    the pair of functions that give the first one a buffer of zeros in each branch's result (TF's
    unwritten rows), for the branches to be traced again; None when no TensorArray explains it."""
    tas_a = [x for x in jax.tree_util.tree_leaves(a, is_leaf=_is_ta) if _is_ta(x)]
    tas_b = [x for x in jax.tree_util.tree_leaves(b, is_leaf=_is_ta) if _is_ta(x)]
    if not tas_a or len(tas_a) != len(tas_b):
        return None
    fix_a: Dict[int, tuple] = {}
    fix_b: Dict[int, tuple] = {}
    for k, (x, y) in enumerate(zip(tas_a, tas_b)):
        if _bare(x) and y._a.materialized and _full(y._a.shape):
            fix_a[k] = tuple(y._a.shape)
        elif _bare(y) and x._a.materialized and _full(x._a.shape):
            fix_b[k] = tuple(x._a.shape)
    if not fix_a and not fix_b:
        return None
    return _giving(fix_a), _giving(fix_b)


def _bare(ta: TensorArray) -> bool:
    return ta._elems is None and ta._buf is None


def _giving(fix: Dict[int, tuple]) -> Callable[[Any], Any]:
    """A branch's result with its ``k``-th TensorArray given a buffer of shape ``fix[k]``."""
    def give(struct: Any) -> Any:
        order = itertools.count()

        def one(ta: TensorArray) -> TensorArray:
            shape = fix.get(next(order))
            if shape is None or not _bare(ta):
                return ta
            new = TensorArray._make(ta._a, None, None, ta._len)
            new._materialize(shape)
            return new
        return _map(one, struct)
    return give


__all__ = ["enter_loop", "has_tensor_arrays", "match_branches", "refine"]
