"""AutoGraph's operators on tapejax's staged forms (the ``ag__`` names converted code calls).

diastatic-malt rewrites ``if``/``while``/``for``, ``and``/``or``/``not`` and
conditional expressions into calls of these functions; each dispatches on its
operand as TF's AutoGraph does (``tensorflow/python/autograph/operators``):

* a tensor (a tapejax Tensor or Variable, a JAX array or tracer) stages:
  ``if`` -> ``tapejax.cond`` (both branches traced), ``while`` ->
  ``tapejax.while_loop``, ``for x in tensor`` and ``for i in tf.range(n)`` ->
  a loop over the leading axis (``tapejax.foldl``, one ``lax.scan``; a
  ``while_loop`` with ``maximum_iterations=n`` when ``break``/``return`` can end
  it early), ``for i in tf.range(n)`` with a traced ``n`` -> ``while_loop``;
  ``and``/``or`` -> ``cond`` (lazy, as TF), ``not`` -> ``logical_not``;
* anything else runs as Python (a loop over a Python range unrolls).

The loop state is what malt's ``get_state``/``set_state`` give: the local
names the loop changes (Variables the body assigns are carried by the staged
forms themselves, ``bodies.py``).  TF's rules are checked with TF's messages
(``autograph_checks``): a loop
variable keeps its structure, dtype and shape (``set_loop_options(
shape_invariants=...)`` is checked as TF; a shape that really changes is a
ValueError, XLA compiling static shapes), a variable defined in one branch
only is an error naming it, a variable first defined inside a loop gets a
placeholder of the type one staged iteration gives it and the loop must then
run at least once (InvalidArgumentError at run time otherwise, through
``checkify``), conditions must be boolean scalars.

Differentiation: the staged forms are tapejax ops, recorded on the tape; a
``while`` is reverse-mode differentiable when it has ``maximum_iterations``
(loops over a tensor or a ``tf.range`` of static length get it; a ``while``
or a ``tf.range(n)`` with traced ``n`` needs
``tf.autograph.experimental.set_loop_options(maximum_iterations=...)``).
"""
from __future__ import annotations

import builtins
import collections
from typing import Any, List, Optional, Tuple, cast

import jax
import jax.core
import numpy as np
from jax.experimental import checkify
from malt.operators import py_builtins as _py_builtins
from malt.operators.control_flow import for_loop_registry as _for_loop_registry
from malt.operators.variables import Undefined, UndefinedReturnValue

from ..core import state as _state
from ..core.conversion import register_tensor_conversion_function
from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..ops import affine as _affine, array as _array, indexing as _indexing, math as _math
from ..ops.indexing_traced import TracedSizeError
from . import control_flow as _cf
from .autograph_checks import (
    BranchShapeError,
    is_tensor,
    verify_branch_vars,
    verify_cond_vars,
    verify_condition,
    verify_loop_init_vars,
    verify_loop_vars,
    verify_single_cond_var,
)
from .tensor_array import TensorArray

_Tracer = jax.core.Tracer
def _stages(x) -> bool:
    """Whether control flow on ``x`` is staged: a tensor while a ``tapejax.function`` traces (even a
    concrete one: TF checks both branches of a conditional on a constant), or a traced tensor.
    A concrete tensor outside any trace (converted code run eagerly, or from a host callback)
    runs as Python, as TF's eager control flow does."""
    if not is_tensor(x):
        return False
    return _state._local.collector is not None or not _concrete(x)


def _is_none_or_undef(v) -> bool:
    return v is None or isinstance(v, (Undefined, UndefinedReturnValue))


def _concrete(x) -> bool:
    return not isinstance(getattr(x, "_value", x), _Tracer)


# ---------------------------------------------------------------------------
# if / conditional expressions / and, or, not
# ---------------------------------------------------------------------------

def if_stmt(cond, body, orelse, get_state, set_state, symbol_names, nouts):
    if _stages(cond):
        _staged_if(cond, body, orelse, get_state, set_state, symbol_names, nouts)
    else:
        body() if cond else orelse()


def _staged_if(cond, body, orelse, get_state, set_state, symbol_names, nouts):
    pred = verify_condition(cond, "if statement")
    if not nouts:   # the conditional still runs (its branches may print or check)
        prev_get, prev_set = get_state, set_state
        get_state = lambda: (0,) + prev_get()   # noqa: E731
        set_state = lambda v: prev_set(v[1:])   # noqa: E731
        symbol_names = tuple(symbol_names) + ("<unused dummy>",)
        nouts = 1
    init_vars = get_state()
    seen: List[Optional[tuple]] = [None, None]

    def branch(fn, which, label):
        def run():
            set_state(init_vars)
            fn()
            new = get_state()[:nouts]
            verify_branch_vars(new, symbol_names, label)
            seen[which] = new
            other = seen[1 - which]
            if other is not None:
                verify_cond_vars(*((new, other) if which == 0 else (other, new)), symbol_names)
            return tuple(new)
        return run

    try:
        final = _cf.staged_cond(pred, branch(body, 0, "main"), branch(orelse, 1, "else"))
    except BranchShapeError as e:
        taken = _known(pred)
        if taken is None:
            raise ValueError(*e.args).with_traceback(e.__traceback__) from None
        # A predicate known while tracing (``tf.cast(len(xs), bool)``) whose branches give a
        # variable different shapes (TF: an unknown shape): the branch it selects, run again.
        set_state(init_vars)
        body() if taken else orelse()
        return
    set_state(tuple(final) + tuple(init_vars[nouts:]))


def _known(pred) -> Optional[bool]:
    """The value of a staged conditional's predicate when it is known while tracing (a Tensor
    holding a concrete array), else None."""
    v = getattr(pred, "_value", None)
    if v is None or isinstance(v, _Tracer):
        return None
    return bool(np.asarray(v))


def if_exp(cond, if_true, if_false, expr_repr):
    if not _stages(cond):
        return if_true() if cond else if_false()
    vals: List[List[Any]] = [[], []]

    def side(fn, which):
        def run():
            vals[which].append(fn())
            if vals[0] and vals[1]:
                verify_single_cond_var(expr_repr, vals[0][0], vals[1][0])
            return vals[which][0]
        return run

    pred = verify_condition(cond, "conditional expression")
    try:
        return _cf.staged_cond(pred, side(if_true, 0), side(if_false, 1))
    except BranchShapeError as e:   # (a predicate known while tracing: the side it selects, as ``if``)
        taken = _known(pred)
        if taken is None:
            raise ValueError(*e.args).with_traceback(e.__traceback__) from None
        return if_true() if taken else if_false()


def not_(a):
    return _math.logical_not(a) if is_tensor(a) else not a


def and_(a, b):
    a_val = a()
    if _stages(a_val):
        return _cf.staged_cond(a_val, b, lambda: a_val)
    return a_val and b()


def or_(a, b):
    a_val = a()
    if _stages(a_val):
        return _cf.staged_cond(a_val, lambda: a_val, b)
    return a_val or b()


def eq(a, b):
    return _math.equal(a, b) if is_tensor(a) or is_tensor(b) else a == b


def not_eq(a, b):
    return not_(eq(a, b))


def assert_stmt(expression1, expression2):
    """``assert`` (with ``Feature.ASSERT_STATEMENTS``): on a tensor, a run-time check that raises
    InvalidArgumentError (TF's ``tf.Assert``)."""
    if not callable(expression2):
        raise ValueError("{} must be a callable".format(expression2))
    if _stages(expression1):
        msg = expression2()
        checkify.check(convert_to_tensor(expression1)._value,
                       "assertion failed: [" + (str(msg) if msg is not None else "") + "]")
        return None
    if not expression1:
        raise AssertionError(expression2())
    return None


# ---------------------------------------------------------------------------
# Loops
# ---------------------------------------------------------------------------

class StagedRange:
    """``tf.range(start, limit, delta)`` with a traced bound: it can only be iterated by a
    converted ``for`` loop (its length is data-dependent, which XLA cannot give a shape)."""

    __slots__ = ("start", "limit", "delta")

    def __init__(self, start, limit, delta):
        self.start, self.limit, self.delta = start, limit, delta

    def __jax_array__(self):
        raise TracedSizeError(_RANGE_AS_TENSOR)

    def __repr__(self):
        return f"StagedRange({self.start!r}, {self.limit!r}, {self.delta!r})"


_RANGE_AS_TENSOR = ("tf.range with a traced bound has a data-dependent length, which XLA cannot compile as a "
                    "tensor; iterate it with a `for` loop inside the converted function, or give the bounds "
                    "as Python ints or static sizes (`x.shape[0]` rather than `tf.shape(x)[0]`).")


def _range_as_tensor(value, dtype=None, name=None, as_ref=False):
    raise TracedSizeError(_RANGE_AS_TENSOR)


def _range_operator(self, *args):
    raise TracedSizeError(_RANGE_AS_TENSOR)


# an op or an operator given the range (``tf.stack([r, r])``, ``r * 2``, ``r[:-1]``) says why it
# cannot be a tensor
register_tensor_conversion_function(StagedRange, _range_as_tensor)
for _name in ("__getitem__", "__len__", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__neg__",
              "__lt__", "__le__", "__gt__", "__ge__", "__array__"):
    setattr(StagedRange, _name, _range_operator)
del _name


def _ranges() -> Optional[dict]:
    """The tracing function's table of ``tf.range`` tensors made by converted code (id -> the
    tensor and its bounds): kept for the trace only."""
    col: Any = _state._local.collector
    while col is not None and not hasattr(col, "ranges"):
        col = getattr(col, "outer", None)
    return None if col is None else col.ranges


def range_(start_or_stop, stop=_py_builtins.UNSPECIFIED, step=_py_builtins.UNSPECIFIED):
    """``range`` in converted code: Python's for Python ints, ``tf.range`` when a bound is a tensor."""
    args = [start_or_stop] + [a for a in (stop, step) if a is not _py_builtins.UNSPECIFIED]
    if not any(is_tensor(a) for a in args):
        return builtins.range(*args)
    if stop is _py_builtins.UNSPECIFIED:
        return tf_range(start_or_stop)
    return tf_range(start_or_stop, stop, cast(Any, 1 if step is _py_builtins.UNSPECIFIED else step))


def tf_range(start, limit=None, delta=1, dtype=None, name="range"):
    """``tf.range`` in converted code: a tensor remembered as a range (a ``for`` over it is a
    range loop, as TF's), or a ``StagedRange`` when a bound is traced."""
    if limit is None:
        start, limit = 0, start
    if all(_concrete(a) for a in (start, limit, delta)):
        t = _array.range(start, limit, delta, dtype=dtype)
        table = _ranges()
        if table is not None:
            table[id(t)] = (t, start, limit, delta)
        return t
    dim = getattr(limit, "_dim", None)   # ``tf.range(tf.shape(x)[k])`` of a None signature's symbolic size:
    if dim is not None and type(start) is int and start == 0 and type(delta) is int and delta == 1 and dtype is None:
        return convert_to_tensor(jax.numpy.arange(dim, dtype=limit._value.dtype))   # (a for over it: a scan)
    if dtype is None:
        floats = any(np.dtype(convert_to_tensor(a)._value.dtype).kind == "f" for a in (start, limit, delta))
        dtype = "float32" if floats else "int32"
    start, limit, delta = (_math.cast(convert_to_tensor(a), dtype) for a in (start, limit, delta))
    return StagedRange(start, limit, delta)


def len_(s):
    """TF's converted ``len``: a tensor's static length as an int, else (a size of an
    ``input_signature``'s None, symbolic in the trace) ``tf.shape(s)[0]``, a tensor."""
    if is_tensor(s):
        shape = tuple(getattr(s, "_value", s).shape)
        if not shape:
            raise ValueError(f"len requires a non-scalar tensor, got one of shape {shape}")
        n = shape[0]
        return n if isinstance(n, (int, np.integer)) else _array.shape(s)[0]
    return len(s)


def int_(x=0, base=_py_builtins.UNSPECIFIED):
    if is_tensor(x):
        return _math.cast(x, "int32")
    return int(x) if base is _py_builtins.UNSPECIFIED else int(cast(Any, x), cast(Any, base))


def float_(x=0):
    return _math.cast(x, "float32") if is_tensor(x) else float(x)


def abs_(x):
    return _math.abs(x) if is_tensor(x) else abs(x)


def print_(*objects, **kwargs):
    """``print`` with ``Feature.BUILTIN_FUNCTIONS``: tensors print their values at run time."""
    unknown = set(kwargs) - {"sep", "end", "file", "flush"}
    if unknown:
        raise ValueError(f"invalid keyword arguments: {tuple(unknown)}")
    if not any(is_tensor(o) for o in objects):
        return print(*objects, **kwargs)
    from ..ops.printing import python_print
    return python_print(objects, kwargs)


BUILTINS = {builtins.range: range_, builtins.len: len_, builtins.int: int_, builtins.float: float_,
            builtins.abs: abs_, builtins.print: print_}


def for_stmt(iter_, extra_test, body, get_state, set_state, symbol_names, opts):
    """``for target in iter_`` (see the module docstring).  A type registered in malt's
    ``for_loop_registry`` (``registry.register(SomeType, fn)``, TF's hook for its datasets) is
    handed to its own function, with the same arguments; so is a type with a
    ``_tapejax_for_stmt`` method (``tapejax.data.Dataset``: a staged loop over a new iteration)."""
    own = getattr(type(iter_), "_tapejax_for_stmt", None)   # (a tapejax.data Dataset: data/staged_for.py)
    if own is not None:
        own(iter_, extra_test, body, get_state, set_state, symbol_names, opts)
        return
    try:
        custom = _for_loop_registry.lookup(iter_)
    except LookupError:
        custom = None
    if custom is not None:
        custom(iter_, extra_test, body, get_state, set_state, symbol_names, opts)
    elif isinstance(iter_, StagedRange):
        _staged_for(None, iter_, extra_test, body, get_state, set_state, symbol_names, opts)
    elif _stages(iter_):
        t = convert_to_tensor(iter_)
        if t._value.ndim == 0:
            raise TypeError(f"Cannot iterate over a scalar tensor: {t!r}")
        table = _ranges()
        rng = None if table is None else table.get(id(iter_))
        rng = rng if rng is not None and rng[0] is iter_ else None
        _staged_for(t, rng, extra_test, body, get_state, set_state, symbol_names, opts)
    else:
        _py_for_stmt(iter_, extra_test, body)


def _guard(result, message: str) -> bool:
    if _stages(result):
        raise NotImplementedError(message + "\nSee https://github.com/tensorflow/tensorflow/blob/master/"
                                  "tensorflow/python/autograph/g3doc/reference/limitations.md"
                                  "#consistency-of-control-flow-types for more info.")
    return bool(result)


_FOR_MSG = ("break and return statements which depend on a TF condition are not supported in Python for "
            "loops. Did you intend to make it a TF loop?")
_WHILE_MSG = ("The condition of while loop started as non-Tensor, then changed to Tensor. This may happen "
              "either because variables changed type, or when a break or return statement inside the loop "
              "depends on a Tensor condition. In both cases, changing to a TF loop should remove the error.")


def _py_for_stmt(iter_, extra_test, body):
    if extra_test is None:
        for target in iter_:
            body(target)
        return
    if _guard(extra_test(), _FOR_MSG):
        for target in iter_:
            body(target)
            if not _guard(extra_test(), _FOR_MSG):
                break


def while_stmt(test, body, get_state, set_state, symbol_names, opts):
    init_test = test()   # one evaluation decides (TF: in a scratch graph; unused ops are dropped)
    if _stages(init_test):
        _staged_while(test, body, get_state, set_state, symbol_names, opts)
        return
    if not init_test:
        return
    body()
    while _guard(test(), _WHILE_MSG):
        body()


def _invariants(opts, init_vars):
    pairs = opts.get("shape_invariants", ())
    by_id = {id(k): v for k, v in pairs}
    return tuple(by_id.get(id(v)) for v in init_vars)


def _describe(v):
    """A loop variable's type after one staged iteration, without keeping tracers."""
    if _is_none_or_undef(v) or isinstance(v, (bool, int, float)):
        return v if _is_none_or_undef(v) else type(v)
    if is_tensor(v):
        a = getattr(v, "_value", v)
        return jax.ShapeDtypeStruct(a.shape, a.dtype)
    if isinstance(v, (list, tuple, dict)):
        return jax.tree_util.tree_map(_describe, v, is_leaf=lambda x: not isinstance(x, (list, tuple, dict)))
    if isinstance(v, TensorArray):   # (defined before the loop: no placeholder needed)
        return None
    raise TypeError(f"Found an unsupported type '{type(v).__name__}' while creating placeholder for {v}. "
                    "Supported types include Tensor, int, float, bool, list, tuple or dict.")


def _placeholder(like, original):
    if like is None or _is_none_or_undef(like):
        return original
    if isinstance(like, type):
        return like(0)
    if isinstance(like, jax.ShapeDtypeStruct):
        return _array.zeros(like.shape, like.dtype)
    return jax.tree_util.tree_map(lambda x: _placeholder(x, original), like,
                                  is_leaf=lambda x: not isinstance(x, (list, tuple, dict)))


def _handle_undefineds(run_once, get_state, set_state, init_vars, nulls, symbol_names):
    """TF's ``_try_handling_undefineds``: stage one iteration to learn the types of the loop
    variables that are undefined (or None) before the loop; placeholders replace them."""
    first: Optional[tuple] = None
    failure = None
    casts = [_cast_init(v) for v in init_vars]
    leaves, tree = jax.tree_util.tree_flatten(casts, is_leaf=is_tensor)
    idx = [i for i, x in enumerate(leaves) if is_tensor(x)]
    box: List[Any] = []

    def probe(*vals):
        full = list(leaves)
        for i, v in zip(idx, vals):
            full[i] = v
        set_state(tuple(jax.tree_util.tree_unflatten(tree, full)))
        run_once()
        box.append(tuple(_describe(v) for v in get_state()))
        return ()

    try:
        _cf.trace_only(probe, [convert_to_tensor(leaves[i]) for i in idx], "loop body")
        first = box[0]
    except (UnboundLocalError, TypeError, ValueError, KeyError) as e:
        failure = f"Note: AutoGraph tried to define it automatically, but ran into a {type(e).__name__}: {e}"
    finally:
        set_state(init_vars)
    if first is not None:
        init_vars = tuple(_placeholder(f, v) if n else v for v, n, f in zip(init_vars, nulls, first))
    verify_loop_init_vars(init_vars, symbol_names, first, extra_message=failure)
    return init_vars


def _cast_init(v):
    """TF's autocast of a Python initial value to a Tensor while one iteration is staged."""
    if isinstance(v, (bool, int, float, np.ndarray, np.generic)) and not isinstance(v, str):
        return convert_to_tensor(v)
    return v


def _zero_iterations_message(symbol_names, nulls, init_vars) -> str:
    names = ["the function return value" if isinstance(v, UndefinedReturnValue) else n
             for n, null, v in zip(symbol_names, nulls, init_vars) if null]
    return "loop must iterate at least once to initialize " + ", ".join(names)


class _Loop(collections.namedtuple("_Loop", "init nulls require invariants")):
    """The loop state ready to stage: initial values (placeholders for undefined ones)."""


def _prepare(run_once, get_state, set_state, symbol_names, opts, iterate_default=None) -> _Loop:
    init = tuple(get_state())
    if iterate_default is not None:   # TF's range loops: an undefined target starts at `start`
        names = opts.get("iterate_names")
        init = tuple(iterate_default if n == names and isinstance(v, Undefined) else v
                     for n, v in zip(symbol_names, init))
    nulls = tuple(_is_none_or_undef(v) for v in init)
    invariants = _invariants(opts, init)
    if not any(nulls):
        return _Loop(init, nulls, False, invariants)
    orig = init
    init = _handle_undefineds(run_once, get_state, set_state, init, nulls, symbol_names)
    invariants = tuple(i if i is not None else _invariants(opts, orig)[k] for k, i in enumerate(invariants))
    return _Loop(init, nulls, True, invariants)


def _check_iterated(flag, loop: _Loop, symbol_names, orig) -> None:
    msg = _zero_iterations_message(symbol_names, loop.nulls, orig)
    if _concrete(flag):
        if not bool(convert_to_tensor(flag)._value):
            raise InvalidArgumentError(None, None, f"assertion failed: [{msg}]")
        return
    checkify.check(convert_to_tensor(flag)._value, f"assertion failed: [{msg}]")


def _staged_while(test, body, get_state, set_state, symbol_names, opts):
    orig = tuple(get_state())
    loop = _prepare(body, get_state, set_state, symbol_names, opts)
    init = loop.init
    one = loop.require

    def aug_test(*vs):
        set_state(vs[1:] if one else vs)
        return verify_condition(test(), "while loop")

    def aug_body(*vs):
        state = vs[1:] if one else vs
        set_state(state)
        body()
        new = tuple(get_state())
        verify_loop_vars(init, state, new, symbol_names, loop.invariants)
        return ((True,) if one else ()) + new

    final: Tuple[Any, ...] = _cf.staged_while(aug_test, aug_body, ((False,) if one else ()) + tuple(init),
                                              maximum_iterations=opts.get("maximum_iterations"))
    if one:
        _check_iterated(final[0], loop, symbol_names, orig)
        final = final[1:]
    set_state(tuple(final))


def _range_bounds(rng, n) -> Tuple[Optional[int], Optional[int]]:
    """The smallest and largest index of a ``tf.range`` of ``n`` static elements (``rng`` its
    bounds), when it holds integers; (None, None) otherwise."""
    if rng is None or not n:
        return None, None
    vals = []
    for v in rng[1:]:
        a = np.asarray(getattr(v, "_value", v))
        if a.dtype.kind not in "iu" or a.ndim:
            return None, None
        vals.append(int(a))
    start, _, delta = vals
    last = start + (n - 1) * delta
    return min(start, last), max(start, last)


def _staged_for(t, rng, extra_test, body, get_state, set_state, symbol_names, opts):
    """A converted ``for``: over the rows of tensor ``t`` (its length static; ``rng`` the bounds
    when ``t`` came from ``tf.range``), or over a ``StagedRange`` ``rng`` (``t`` None)."""
    orig = tuple(get_state())
    if t is None:
        sample = default = rng.start
        n = None
    else:
        n = t._value.shape[0]
        sample = t[0] if n else _array.zeros(t._value.shape[1:], t.dtype)
        default = None if rng is None else _math.cast(convert_to_tensor(rng[1]), t.dtype)
    loop = _prepare(lambda: body(sample), get_state, set_state, symbol_names, opts, default)
    init, one = loop.init, loop.require
    lo, hi = _range_bounds(rng, n) if t is not None else (None, None)
    flag0 = (False,) if one else ()
    if t is not None and extra_test is None:
        # no early exit: one scan over the rows
        def step(state, x):
            cur = tuple(state)[1:] if one else tuple(state)
            set_state(cur)
            body(_affine.index(x, lo, hi))   # (a tf.range index knows its range: ops.affine)
            new = tuple(get_state())
            verify_loop_vars(init, cur, new, symbol_names, loop.invariants)
            return ((True,) if one else ()) + new

        if one and n == 0:
            _check_iterated(False, loop, symbol_names, orig)
        final: Tuple[Any, ...] = tuple(_cf.foldl(step, t, initializer=flag0 + tuple(init)))
    else:
        limit: Any = None if rng is None or t is not None else rng.limit
        delta: Any = None if rng is None or t is not None else rng.delta

        def aug_test(i, *vs):
            set_state(vs[1:] if one else vs)
            if n is not None:
                main = _math.less(i, n)
            elif _concrete(delta):
                up = bool(np.asarray(convert_to_tensor(delta)._value) >= 0)
                main = _math.less(i, limit) if up else _math.greater(i, limit)
            else:
                main = _math.logical_or(_math.logical_and(delta >= 0, i < limit),
                                        _math.logical_and(delta < 0, i > limit))
            if extra_test is not None:
                main = _math.logical_and(main, extra_test())
            return main

        def aug_body(i, *vs):
            state = vs[1:] if one else vs
            set_state(state)
            body(_affine.index(_indexing.gather(t, i), lo, hi) if n is not None else i)
            new = tuple(get_state())
            verify_loop_vars(init, state, new, symbol_names, loop.invariants)
            return (i + 1 if n is not None else i + delta,) + ((True,) if one else ()) + new

        i0 = convert_to_tensor(0) if n is not None else cast(Any, rng).start
        max_it = n if n is not None else opts.get("maximum_iterations")
        final = tuple(_cf.staged_while(aug_test, aug_body, (i0,) + flag0 + tuple(init),
                                       maximum_iterations=max_it))[1:]
    if one:
        _check_iterated(final[0], loop, symbol_names, orig)
        final = final[1:]
    set_state(final)


__all__ = ["BUILTINS", "StagedRange", "abs_", "and_", "assert_stmt", "eq", "float_", "for_stmt", "if_exp",
           "if_stmt", "int_", "is_tensor", "len_", "not_", "not_eq", "or_", "print_", "range_", "tf_range",
           "verify_condition", "while_stmt"]
