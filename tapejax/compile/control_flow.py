"""Control flow on tensor values: ``cond``, ``while_loop``, ``scan``, ``foldl`` (TF's signatures).

Inside ``tapejax.function`` (or any JAX trace) Python ``if``/``while`` cannot
branch on a tensor's value; these run ``lax.cond`` / ``lax.while_loop`` /
``lax.scan`` instead, and each is **one recorded op** on the tape:

1. the user's branch/body function (which takes and returns Tensors) is
   traced once to a jaxpr, with a *capture tape* alone on the tape stack: it
   sees every op input created before the trace (a Tensor captured by the
   Python closure) and every Variable read, so those become explicit inputs
   of the op (tapes then record the op as reading them: gradients flow to
   closed-over Variables and watched Tensors);
2. the op's ``impl`` is ``lax.cond(...)`` over ``jaxpr_as_fun`` of those jaxprs,
   a pure function of (operands, captured values), so the compiled replay's
   ``jax.vjp`` differentiates it.  Ops are cached by the jaxpr text, so a
   training loop that builds the same loop each step reuses one compiled
   gradient; a jaxpr that calls back into Python (``numpy_function``, an
   iterator read) is keyed by its own identity too: two callbacks print alike,
   and sharing the first one's op would run the wrong Python function; so is a
   jaxpr with symbolic sizes (each symbolic trace names its own ``d0``).

Eagerly (no trace), ``cond`` with a concrete predicate runs the chosen branch
in Python, and ``while_loop`` runs a Python loop, exactly as TF's eager mode
does (each op is recorded on its own).  ``while_loop`` is reverse-mode
differentiable when compiled only with ``maximum_iterations`` (it then runs a
masked ``lax.scan`` of that length; ``lax.while_loop`` has no reverse-mode
derivative); ``scan`` and ``foldl`` always are.

Variables assigned inside a branch or a loop body (``v.assign_add(1)`` under
``if x > 0:``, an optimizer step in a loop) are carried: the body is traced
again with their values as state (``bodies.py``), and the op assigns the
results when it has run, as TF's stateful control flow.  Assignments are not
differentiated, and every read of a carried Variable, before or after an
assignment, in any iteration, counts as a read of the Variable for a tape
around the op (TF's rules; ``bodies.reads_of``).

Deliberate differences from TF (XLA compiles static shapes): traced, both
``cond`` branches must return the same structure, shapes and dtypes
(ValueError naming the mismatch; TF's graph allows branches of different
shapes), and a ``while_loop`` body must keep its loop variables' shapes
(``shape_invariants`` is accepted and ignored).  ``back_prop``,
``parallel_iterations`` and ``swap_memory`` are accepted and, as in TF 2,
have no effect (gradients flow even with ``back_prop=False``).  Eagerly ``while_loop``
accepts a body that returns a list for tuple loop variables (TF's eager mode
is stricter about the container type).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import checkify

from ..core import state as _state
from ..core.bind import Primitive, bind
from ..core.caches import LRU
from ..core.convert import convert_to_tensor
from ..ops.checks import CHECK_ERRORS, raise_if_failed
from . import tensor_array_loop as _ta
from .bodies import (
    Closed,
    avals as _avals,
    close,
    flatten as _flatten,
    like as _like,
    run_jaxpr as _run_jaxpr,
    to_tensors as _to_tensors,
    traced as _traced,
)
from .tracing import calls_back, checks

_PRIMS = LRU("control_flow", 1024)
_EMPTY = jax.tree_util.tree_structure(())


class _Same:
    """A key part equal only to itself (holding its object, so its id is not reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self):
        return id(self.obj)

    def __eq__(self, other):
        return isinstance(other, _Same) and other.obj is self.obj


def _symbolic(jaxpr) -> bool:
    """Does a shape in this jaxpr's signature hold a symbolic size (``jax.export``'s ``d0``)?
    Every symbolic size inside it comes from one there."""
    return any(not isinstance(d, (int, np.integer))
               for v in (*jaxpr.constvars, *jaxpr.invars, *jaxpr.outvars)
               for d in getattr(getattr(v, "aval", None), "shape", ()))


def _text(j):
    """A body's part of an op's cache key: its jaxpr text, and itself when it calls back into
    Python (the text does not tell two callbacks apart) or has symbolic sizes (the text names
    them ``d0``, ``d1``, ... in every trace: the sizes of one ``tapejax.function``'s trace are not
    another's, and a body holding the other's does not fit this trace's shapes)."""
    jaxpr = getattr(j, "jaxpr", j)
    if calls_back(jaxpr) or _symbolic(jaxpr):
        return (str(j), _Same(j))
    return str(j)


def _prim(key, name, make_impl):
    """One Primitive per structure (the jaxpr texts), so replays hit the compile cache."""
    p = _PRIMS.get(key)
    if p is None:
        p = _PRIMS.setdefault(key, Primitive(name, make_impl(), multiple_results=True))
    return p


def _same(x):
    return x


def _then(f, g):
    return lambda x: g(f(x))


def _check_same(tree_a, tree_b, avals_a, avals_b, what):
    if tree_a != tree_b:
        raise ValueError(f"{what}: both must return the same nested structure; got {tree_a} and {tree_b}")
    for i, (a, b) in enumerate(zip(avals_a, avals_b)):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise ValueError(f"{what}: output {i} must have the same shape and dtype in both; got "
                             f"{tuple(a.shape)} {a.dtype} and {tuple(b.shape)} {b.dtype}")


def _carried(*closed: Closed, before=()):
    """The Variables to carry: those carried before and every one a body assigned (in order)."""
    out = {v._id: v for v in before}
    for c in closed:
        for v in c.assigned:
            out.setdefault(v._id, v)
    return tuple(out.values())


def _assign(carried, values) -> None:
    for v, x in zip(carried, values):
        v.assign(x)


def _checked(impl):
    """``impl`` functionalized with ``checkify``: its outputs, then the error's leaves (their tree
    kept on the function, found by ``_raise_failed``)."""
    def run(*args):
        err, outs = checkify.checkify(impl, errors=CHECK_ERRORS)(*args)
        return tuple(outs) + tuple(jax.tree_util.tree_leaves(err))
    run.unchecked = impl
    run.error_tree = None
    return run


def _raise_failed(prim, operands, outs, n_out):
    """The op's outputs (its first ``n_out``), after raising the first failed check among the
    error leaves that follow them (``ops.checks.raise_if_failed``: reading them is a host sync)."""
    run = prim.impl
    if run.error_tree is None:
        specs = [jax.ShapeDtypeStruct(x._meta.shape, x._meta.dtype) if hasattr(x, "_meta") else x
                 for x in operands]
        err, _ = jax.eval_shape(checkify.checkify(run.unchecked, errors=CHECK_ERRORS), *specs)
        run.error_tree = jax.tree_util.tree_structure(err)
    raise_if_failed(jax.tree_util.tree_unflatten(run.error_tree, [t._value for t in outs[n_out:]]))
    return outs[:n_out]


# ---------------------------------------------------------------------------
# cond
# ---------------------------------------------------------------------------

def cond(pred, true_fn=None, false_fn=None, name=None):
    """``tf.cond``: ``true_fn()`` if ``pred`` else ``false_fn()`` (both take no arguments).

    ``pred`` is a scalar boolean Tensor (or Python bool).  Eagerly the chosen
    branch runs in Python; traced (in ``tapejax.function``) both branches are
    traced and one ``lax.cond`` runs, differentiable on the tape.  Both must
    return the same structure, shapes and dtypes.
    """
    if true_fn is None or not callable(true_fn):
        raise TypeError(f"true_fn must be callable; got {true_fn!r}")
    if false_fn is None or not callable(false_fn):
        raise TypeError(f"false_fn must be callable; got {false_fn!r}")
    p = convert_to_tensor(pred)
    if p._value.shape != ():
        raise ValueError(f"Shape must be rank 0 but is rank {p._value.ndim} for the `pred` of cond "
                         f"(got shape {tuple(p._value.shape)})")
    if not _traced(p):
        return true_fn() if bool(p._value) else false_fn()
    return staged_cond(p, true_fn, false_fn)


def staged_cond(pred, true_fn, false_fn):
    """``cond`` with both branches traced even when ``pred`` is concrete (AutoGraph's staged
    ``if``: TF checks both branches of a conditional on a tensor)."""
    p = convert_to_tensor(pred)
    carried: tuple = ()
    shown: list = []   # (true_fn's output: the result's dicts in its key order, as TF's)
    other: list = []   # (false_fn's)
    post_t = post_f = _same
    for _ in range(4):   # traced again with the Variables a branch assigns carried, or a TensorArray
        t = close(lambda: shown.append(post_t(true_fn())) or shown[-1], _EMPTY, [], "true_fn", carried,
                  carry_in=False)
        f = close(lambda: other.append(post_f(false_fn())) or other[-1], _EMPTY, [], "false_fn", carried,
                  carry_in=False)
        more = _carried(t, f, before=carried)
        fixes = None if t.out_tree == f.out_tree else _ta.match_branches(shown[-1], other[-1])
        if fixes is None and len(more) == len(carried):
            break
        if fixes is not None:   # a TensorArray written in one branch only: given a buffer in the other
            post_t, post_f = _then(post_t, fixes[0]), _then(post_f, fixes[1])
        carried = more
    jt, jf = t.jaxpr, f.jaxpr
    nv = len(carried)
    out_t = [v.aval for v in jt.outvars]
    out_f = [v.aval for v in jf.outvars]
    _check_same(t.out_tree, f.out_tree, out_t, out_f, "cond: true_fn and false_fn")
    nt = len(t.consts)

    def make():
        def impl(pred, *consts):
            return tuple(lax.cond(pred.astype(bool),
                                  lambda c: _run_jaxpr(jt, c[:nt], ()),
                                  lambda c: _run_jaxpr(jf, c[nt:], ()),
                                  consts))
        return impl

    prim = _prim(("cond", _text(jt), _text(jf)), "StatelessIf", make)
    outs = list(bind(prim, p, *t.handles, *f.handles))
    if nv:
        _assign(carried, outs[len(outs) - nv:])
        outs = outs[:len(outs) - nv]
    return _like(shown[-1], jax.tree_util.tree_unflatten(t.out_tree, outs))


# ---------------------------------------------------------------------------
# while_loop
# ---------------------------------------------------------------------------

def _while_to_a_traced_bound(cond, body, loop_vars, limit):
    """``while_loop`` whose ``maximum_iterations`` is known only when the step runs (an argument):
    TF's bound as an iteration counter in the condition, so the loop runs as one without a bound
    (``lax.while_loop``: forward only; a static bound is what makes a loop reverse-differentiable)."""
    from ..ops import math as _math

    limit = _math.cast(limit, "int32")
    seq = isinstance(loop_vars, (list, tuple))

    def call(f, v):
        return f(*v) if seq else f(v)

    def cond2(k, v):
        return _math.logical_and(_math.less(k, limit), call(cond, v))

    def body2(k, v):
        out = call(body, v)
        if seq:
            out = type(loop_vars)(out) if isinstance(out, (list, tuple)) else out
        elif isinstance(out, (list, tuple)) and len(out) == 1 and not isinstance(loop_vars, (list, tuple)):
            out = out[0]
        return k + 1, out

    return while_loop(cond2, body2, (convert_to_tensor(0), loop_vars))[1]


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10, back_prop=True,
               swap_memory=False, maximum_iterations=None, name=None):
    """``tf.while_loop``: repeat ``loop_vars = body(*loop_vars)`` while ``cond(*loop_vars)``.

    ``loop_vars`` is a tuple/list (or nested structure) of Tensors; ``body``
    returns the same structure with the same shapes and dtypes.  At most
    ``maximum_iterations`` iterations run when it is given.  Eagerly this is
    a Python loop (as TF); traced it is ``lax.while_loop``, or with
    ``maximum_iterations`` a masked ``lax.scan`` that reverse-mode
    differentiates.  Returns the final ``loop_vars`` (a single Tensor if
    ``loop_vars`` was one).
    """
    if not callable(cond):
        raise TypeError(f"cond must be callable; got {cond!r}")
    if not callable(body):
        raise TypeError(f"body must be callable; got {body!r}")
    if loop_vars is None or (isinstance(loop_vars, (list, tuple)) and not loop_vars):
        raise ValueError("loop_vars must be a non-empty structure of tensors; got " + repr(loop_vars))
    if maximum_iterations is not None:
        if _traced(maximum_iterations):
            return _while_to_a_traced_bound(cond, body, loop_vars, maximum_iterations)
        m = getattr(maximum_iterations, "_value", maximum_iterations)
        maximum_iterations = int(m)
        if maximum_iterations < 0:
            raise ValueError(f"maximum_iterations must be >= 0; got {maximum_iterations}")
    single = not isinstance(loop_vars, (list, tuple, dict))
    vars_ = _to_tensors(loop_vars)
    packed = (vars_,) if single else tuple(vars_) if isinstance(vars_, (list, tuple)) else (vars_,)
    leaves, in_tree = _flatten(packed)
    tracing = _state._local.collector is not None or any(_traced(t) for t in leaves)
    if not tracing:
        return _eager_while(cond, body, vars_, single, maximum_iterations)
    if _ta.has_tensor_arrays(packed):   # TensorArrays as buffers, grown by the loop's bound
        packed = _ta.enter_loop(packed, maximum_iterations)
        leaves, in_tree = _flatten(packed)
    in_avals = _avals(leaves)

    def body_flat(*args):
        out = body(*_like(packed, args))
        if single:
            return (out,) if not isinstance(out, (list, tuple)) or len(packed) != 1 else tuple(out)
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)

    carried: tuple = ()
    for _ in range(5):   # a body that assigns Variables: traced again with them as loop state
        c = close(lambda *a: cond(*_like(packed, a)), in_tree, in_avals, "cond", carried)
        b = close(body_flat, in_tree, in_avals, "body", carried)
        refined = _ta.refine(packed, b.out_tree) if b.out_tree != in_tree else None
        if refined is not None:   # a TensorArray's element shape, learnt from the body: again
            packed = refined
            leaves, in_tree = _flatten(packed)
            in_avals = _avals(leaves)
            continue
        more = _carried(c, b, before=carried)
        if len(more) == len(carried):
            break
        carried = more
    jc, jb, nv = c.jaxpr, b.jaxpr, len(carried)
    if len(jc.outvars) != 1 + nv or jc.outvars[0].aval.shape != ():
        raise ValueError("while_loop: cond must return a scalar boolean tensor")
    out_b = [v.aval for v in jb.outvars][:len(jb.outvars) - nv]
    if b.out_tree != in_tree or any(a.shape != tuple(o.shape) or a.dtype != o.dtype
                                    for a, o in zip(out_b, in_avals)):
        raise ValueError(f"while_loop: body must return the structure, shapes and dtypes of loop_vars; "
                         f"loop_vars are {in_tree} {[(tuple(a.shape), str(a.dtype)) for a in in_avals]}, "
                         f"body returned {b.out_tree} {[(tuple(a.shape), str(a.dtype)) for a in out_b]}")
    n, nc = len(leaves) + nv, len(c.consts)
    maxit = maximum_iterations

    def make():
        def impl(*args):
            xs, consts = args[:n], args[n:]
            c_c, c_b = consts[:nc], consts[nc:]

            def pred(v):
                return _run_jaxpr(jc, c_c, v)[0].astype(bool)

            def step(v):
                return tuple(_run_jaxpr(jb, c_b, v))

            if maxit is None:
                return tuple(lax.while_loop(pred, step, tuple(xs)))

            def scan_body(carry, _):
                v, done = carry
                go = jnp.logical_and(jnp.logical_not(done), pred(v))
                new = lax.cond(go, step, lambda u: tuple(u), v)
                return (new, jnp.logical_not(go)), None

            (final, _), _ = lax.scan(scan_body, (tuple(xs), jnp.asarray(False)), None, length=maxit)
            return tuple(final)
        return impl

    key = ("while", _text(jc), _text(jb), maxit)
    prim = _prim(key, "While", make)
    outs = list(bind(prim, *leaves, *carried, *c.handles, *b.handles))
    if nv:
        _assign(carried, outs[len(leaves):])
        outs = outs[:len(leaves)]
    res = _like(packed, jax.tree_util.tree_unflatten(in_tree, outs))
    if single:
        return res[0]
    return type(loop_vars)(res) if isinstance(loop_vars, (list, tuple)) else res


def staged_while(cond, body, loop_vars, maximum_iterations=None):
    """``while_loop`` over a tuple of loop variables (AutoGraph's staged ``while``); returns a
    tuple.  A loop with no variables gets a dummy one (its body may still print or check)."""
    if not loop_vars:
        while_loop(lambda _: cond(), lambda d: (body(), d)[1], (convert_to_tensor(0),),
                   maximum_iterations=maximum_iterations)
        return ()
    out = while_loop(cond, body, tuple(loop_vars), maximum_iterations=maximum_iterations)
    return tuple(out)


def trace_only(fn, tensors, what):
    """Trace ``fn(*tensors)`` as a control-flow body would be, and throw the trace away (AutoGraph
    stages one loop iteration to learn the types of variables first defined inside the loop)."""
    leaves, tree = _flatten(tuple(tensors))
    close(fn, tree, _avals(leaves), what)


def _eager_while(cond, body, vars_, single, maximum_iterations):
    it = 0
    args = (vars_,) if single else tuple(vars_)
    while maximum_iterations is None or it < maximum_iterations:
        c = convert_to_tensor(cond(*args))
        if not bool(c._value):
            break
        out = body(*args)
        out = _to_tensors(out)
        args = (out,) if single else tuple(out) if isinstance(out, (list, tuple)) else (out,)
        it += 1
    if single:
        return args[0]
    return type(vars_)(args) if isinstance(vars_, list) else tuple(args)


# ---------------------------------------------------------------------------
# scan / foldl
# ---------------------------------------------------------------------------

def _scan_core(fn, elems, initializer, reverse, want_all, what):
    elems_t = _to_tensors(elems)
    e_leaves, e_tree = _flatten(elems_t)
    if not e_leaves:
        raise ValueError(f"{what}: elems must hold at least one tensor")
    n = None
    for t in e_leaves:
        if t._value.ndim == 0:
            raise ValueError(f"{what}: every element of elems must have rank >= 1 (it is unstacked on "
                             "axis 0); got a scalar")
        if n is None:
            n = t._value.shape[0]
        elif t._value.shape[0] != n:
            raise ValueError(f"{what}: all elems must have the same first dimension; got {n} and "
                             f"{t._value.shape[0]}")
    assert n is not None  # e_leaves is non-empty, so the loop set it
    if initializer is None:
        if n == 0:
            raise ValueError(f"{what}: elems is empty and no initializer was given")
        first = 0 if not reverse else n - 1
        init_leaves = [t[first] for t in e_leaves]
        init = _like(elems_t, jax.tree_util.tree_unflatten(e_tree, init_leaves))
        rest = [t[1:] if not reverse else t[:-1] for t in e_leaves]
        skip_first = True
    else:
        init = _to_tensors(initializer)
        rest = e_leaves
        skip_first = False
    if _ta.has_tensor_arrays(init):   # TensorArrays as buffers, grown by the scan's length
        init = _ta.enter_loop(init, n - (1 if skip_first else 0))
    a_leaves, a_tree = _flatten(init)
    a_avals = _avals(a_leaves)
    x_avals = [jax.ShapeDtypeStruct(t._value.shape[1:], t._value.dtype) for t in rest]
    # structure (acc, x): unflatten acc and x separately inside
    na = len(a_leaves)

    def fn_flat(*vals):
        acc = _like(init, jax.tree_util.tree_unflatten(a_tree, list(vals[:na])))
        x = _like(elems_t, jax.tree_util.tree_unflatten(e_tree, list(vals[na:])))
        return fn(acc, x)

    flat_tree = jax.tree_util.tree_structure(tuple(range(na + len(rest))))
    carried: tuple = ()
    for _ in range(5):   # fn assigns Variables: traced again with them in the accumulator
        f = close(fn_flat, flat_tree, a_avals + x_avals, "fn", carried)
        refined = _ta.refine(init, f.out_tree) if f.out_tree != a_tree else None
        if refined is not None:   # a TensorArray's element shape, learnt from fn: again
            init = refined
            a_leaves, a_tree = _flatten(init)
            a_avals = _avals(a_leaves)
            na = len(a_leaves)
            flat_tree = jax.tree_util.tree_structure(tuple(range(na + len(rest))))
            continue
        more = _carried(f, before=carried)
        if len(more) == len(carried):
            break
        carried = more
    jf, nv = f.jaxpr, len(carried)
    out_avals = [v.aval for v in jf.outvars][:len(jf.outvars) - nv]
    if f.out_tree != a_tree or any(a.shape != tuple(b.shape) or a.dtype != b.dtype
                                   for a, b in zip(out_avals, a_avals)):
        raise ValueError(f"{what}: fn must return the structure, shapes and dtypes of the accumulator; "
                         f"accumulator {a_tree} {[(tuple(a.shape), str(a.dtype)) for a in a_avals]}, fn "
                         f"returned {f.out_tree} {[(tuple(a.shape), str(a.dtype)) for a in out_avals]}")
    nx = len(rest)

    def make():
        def impl(*args):
            acc, xs, cv, consts = (args[:na], args[na:na + nx], args[na + nx:na + nx + nv],
                                   args[na + nx + nv:])

            def body(carry, x):
                new = tuple(_run_jaxpr(jf, consts, tuple(carry[:na]) + tuple(x) + tuple(carry[na:])))
                return new, (new[:na] if want_all else None)

            final, ys = lax.scan(body, tuple(acc) + tuple(cv), tuple(xs), reverse=reverse)
            if not want_all:
                return tuple(final)
            assert ys is not None  # want_all: body stacks every step
            if skip_first:
                ys = tuple(jnp.concatenate([a[None], y], 0) if not reverse else
                           jnp.concatenate([y, a[None]], 0) for a, y in zip(acc, ys))
            return tuple(ys) + tuple(final[na:])
        return impl

    operands = (*a_leaves, *rest, *carried, *f.handles)
    # run outside any trace, a body's run-time checks (ops.checks) are the op's own to raise
    eager_checks = (_state._local.collector is None and not any(_traced(t) for t in a_leaves + rest)
                    and checks(jf))
    key = (what, _text(jf), reverse, want_all, skip_first, nv, eager_checks)
    prim = _prim(key, "Scan", (lambda: _checked(make())) if eager_checks else make)
    outs = list(bind(prim, *operands))
    if eager_checks:
        outs = _raise_failed(prim, operands, outs, na + nv)
    if nv:
        _assign(carried, outs[len(outs) - nv:])
        outs = outs[:len(outs) - nv]
    return _like(init, jax.tree_util.tree_unflatten(a_tree, outs))


def scan(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False,
         infer_shape=True, reverse=False, name=None):
    """``tf.scan``: ``acc = fn(acc, x)`` over ``elems`` unstacked on axis 0; returns every ``acc`` stacked.

    Without ``initializer`` the first element is the initial accumulator (and
    the first output).  ``fn`` returns the accumulator's structure, shapes
    and dtypes.  One ``lax.scan`` (differentiable on the tape).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable; got {fn!r}")
    return _scan_core(fn, elems, initializer, bool(reverse), True, "scan")


def foldl(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False,
          name=None):
    """``tf.foldl``: ``acc = fn(acc, x)`` over ``elems`` from the left; returns the final ``acc``."""
    if not callable(fn):
        raise TypeError(f"fn must be callable; got {fn!r}")
    return _scan_core(fn, elems, initializer, False, False, "foldl")


def foldr(fn, elems, initializer=None, parallel_iterations=10, back_prop=True, swap_memory=False,
          name=None):
    """``tf.foldr``: as ``foldl`` from the right."""
    if not callable(fn):
        raise TypeError(f"fn must be callable; got {fn!r}")
    return _scan_core(fn, elems, initializer, True, False, "foldr")
