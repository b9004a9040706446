"""Any JAX function as a tape op: ``tapejax.op``.

::

    @tapejax.op(type_name="MLPApply")
    def mlp(params, x):                 # pytrees of arrays in, pytree out
        ...pure jax...

    with tapejax.GradientTape() as tape:
        y = mlp({"w": w_var, "b": b_var}, x)     # one recorded op "MLPApply"
    tape.gradient(y, [w_var, b_var])               # JAX's gradient of mlp

Arguments are pytrees (dicts, lists, tuples, flax/equinox structures).  Their
Tensor, Variable and array leaves are the op's inputs (Variables are read,
so tapes watch them; a jitted op's function that reads a Variable it closes
over, instead of taking it as an argument, is an error: its value would be a
constant of the compiled op); every other leaf (Python numbers, strings, None,
callables) is a *static* parameter, part of the compiled replay's key, so
it must be hashable.  The outputs are the function's pytree with Tensors at
the array leaves (Python numbers there become arrays, as under ``jax.jit``;
typed PRNG keys, ``jax.random.key``, stay JAX key arrays: no TF dtype, no
gradient; any other leaf, an equinox model's activation function, is returned
as it is, as ``eqx.filter_jit`` returns it).  The gradient is JAX's (``jax.vjp`` of the function)
unless a gradient is registered for ``type_name`` (``RegisterGradient`` /
``gradient_override_map``).  The function is run under ``jax.jit`` eagerly, so, as under
``jax.jit``, a Python value it reads (a global, a closure's dict) is the one of its trace: pass a
value that changes as an argument.  ``jit=False`` runs it op by op at each call, reading Python
state then; under a recording tape that call is traced (``CallTrace``) and its gradient is the
derivative of that trace, so value and gradient see the same state.
"""
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from ..core import state as _state
from ..core.bind import REGISTRY, bind, define
from ..core.caches import LRU
from ..core.jaxpr_key import eval_lifted, fingerprint, literals, value_key
from ..core.tensor import Tensor
from ..core.variable import Variable

_TENSORISH = (Tensor, Variable)
_ARRAYS = (Tensor, Variable, jax.Array, np.ndarray, np.generic)
#: The output leaves that become the op's arrays (Python numbers too, as jax.jit makes them).
_OUT_ARRAYS = _ARRAYS + (int, float, complex, bool)
_auto = itertools.count()
#: (op, static key) -> the output pytree structure (bounded LRU; found again by
#: ``jax.eval_shape`` if evicted while JAX still has the op's compiled call).
_OUT_TREES = LRU("op_output_trees", 4096)
#: (function, differentiable, jit) -> the op ``tapejax.op`` made for it without a ``type_name``
#: (bound methods compare by their object and function, so ``op(model.apply)`` is found again).
_OPS_BY_FUNCTION = LRU("jax_op_functions", 1024)


def _is_leaf(x):
    return isinstance(x, _TENSORISH)


def _array(x):
    if isinstance(x, _TENSORISH):
        return x._value
    return x if isinstance(x, jax.Array) else jnp.asarray(x)


def _is_key(dtype):
    """Whether ``dtype`` is a JAX extended dtype (a typed PRNG key's, ``jax.random.key``): such
    outputs are returned as the JAX arrays (no TF dtype, no gradient; a key goes on to ``jax.random``)."""
    return not isinstance(dtype, np.dtype)


def split_args(args, kwargs):
    """(dynamic leaves, static key) of a call: the key is (treedef, ((pos, value), ...))."""
    leaves, tree = jax.tree_util.tree_flatten((args, kwargs), is_leaf=_is_leaf)
    dyn = []
    static = []
    for i, v in enumerate(leaves):
        if isinstance(v, _ARRAYS):
            dyn.append(v)
        else:
            static.append((i, v))
    return dyn, (tree, tuple(static))


def _merge(dyn, static):
    """The flat leaves: ``static``'s (position, value) pairs in place, ``dyn`` in the other places."""
    n = len(dyn) + len(static)
    leaves = [None] * n
    it = iter(dyn)
    pos = dict(static)
    for i in range(n):
        leaves[i] = pos[i] if i in pos else next(it)
    return leaves


def join_args(dyn, key):
    tree, static = key
    return jax.tree_util.tree_unflatten(tree, _merge(dyn, static))


class _ClosedOverVariables:
    """This thread's Variable collector (``core.state.Collector``) while a jitted op's function
    runs outside ``tapejax.function``: a Variable the function reads, assigns or creates (closed
    over, not passed as an argument) is an error.  Read there, its value would be a constant of
    the compiled op, kept by every later call after the Variable changes (and the replay of the
    gradient would read it anew: forward and backward at different values)."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def touch(self, var, assign):
        what = "assigns" if assign else "reads"
        raise ValueError(f"op {self.name}: the function {what} Variable '{var.name}', which is not one of "
                         "its arguments; the compiled op would keep the value of its first call. Pass "
                         "the Variable as an argument (any pytree of arguments may hold Variables: "
                         "f({'w': w}, x)), or make the op with jit=False.")

    def created(self, var):
        raise ValueError(f"op {self.name}: the function creates a Variable; create it outside and pass "
                         "it as an argument.")


class CallTrace:
    """A ``jit=False`` op's function as traced at one call under a recording tape: the op runs
    this jaxpr (its forward op by op, and its gradient's replay), so both see the Python state of
    that call.  Equal (the replay's cache key) when the traced computation is the same: its
    structure, literal values and constants."""

    __slots__ = ("jaxpr", "consts", "lits", "key")

    def __init__(self, closed):
        self.jaxpr = closed.jaxpr
        self.consts = tuple(closed.consts)
        self.lits = literals(self.jaxpr)
        self.key = (fingerprint(self.jaxpr, lifted=False), tuple(value_key(c) for c in self.consts))

    def run(self, dyn):
        return tuple(eval_lifted(self.jaxpr, self.consts, self.lits, dyn))

    def __eq__(self, other):
        return isinstance(other, CallTrace) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    def __repr__(self):
        return f"<tapejax.op call trace: {len(self.jaxpr.eqns)} equations>"


def _abstract(d):
    a = jax.typeof(getattr(d, "_value", d))
    return jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=getattr(a, "weak_type", False))


def make_op(fn, type_name, *, differentiable=True, jit=True, doc=None):
    """The tape op for ``fn`` under TF type name ``type_name`` (registered once)."""
    guard = _ClosedOverVariables(type_name)

    def impl(*dyn, key, traced=None):
        if traced is not None:   # (a jit=False call traced under a tape: ``CallTrace``)
            return traced.run(dyn)
        args, kwargs = join_args(dyn, key)
        if jit and _state._local.collector is None:
            prev = _state.set_collector(guard)
            try:
                out = fn(*args, **kwargs)
            finally:
                _state.set_collector(prev)
        else:   # (inside a tapejax.function its collector makes such a read an input of the program)
            out = fn(*args, **kwargs)
        # (a Tensor the function returns, made by tape ops called inside it, is a leaf: flattened as
        # JAX's pytree its treedef would rewrap the op's recorded output in a new, untracked Tensor)
        flat, tree = jax.tree_util.tree_flatten(out, is_leaf=_is_leaf)
        # (a leaf that is no array and no number, an equinox model's activation function, is a static
        # part of the output, returned as it is, as eqx.filter_jit returns it)
        static = tuple((i, x) for i, x in enumerate(flat) if not isinstance(x, _OUT_ARRAYS))
        _OUT_TREES[(prim, key)] = (tree, static)
        # (a Python number or NumPy leaf becomes an array, as jax.jit makes it: with jit=False and
        # in the gradient's replay the function runs unjitted)
        return tuple([_array(x) for x in flat if isinstance(x, _OUT_ARRAYS)])

    def out_tree(dyn, key):
        tree = _OUT_TREES.get((prim, key))
        if tree is None:
            specs = [jax.ShapeDtypeStruct(np.shape(v), v.dtype)
                     for v in (getattr(d, "_value", d) for d in dyn)]
            jax.eval_shape(lambda *d: impl(*d, key=key), *specs)
            tree = _OUT_TREES[(prim, key)]
        return tree

    prim = define(type_name, impl, differentiable=differentiable, multiple_results=True, jit=jit)

    def op(*args, **kwargs):
        dyn, key = split_args(args, kwargs)
        try:
            hash(key)
        except TypeError:
            raise TypeError(f"op {type_name}: non-array arguments must be hashable (they are static "
                            f"parameters of the op); got {key[1]!r}") from None
        traced = None
        if not jit and differentiable and _state.tapes() and _state._local.collector is None:
            traced = _trace_call(impl, dyn, key)
        outs = bind(prim, *dyn, key=key) if traced is None else bind(prim, *dyn, key=key, traced=traced)
        tree = out_tree(dyn, key)
        if any(_is_key(o._meta.dtype) for o in outs):
            outs = [o._value if _is_key(o._meta.dtype) else o for o in outs]
        tree, static = tree
        if static:
            outs = _merge(outs, static)
        if tree.num_leaves == 1 and jax.tree_util.treedef_is_leaf(tree):
            return outs[0]
        return jax.tree_util.tree_unflatten(tree, outs)

    # (not ``__module__``: the wrapper is library code, so AutoGraph calls it as it is inside a
    # ``tapejax.function``; with the user's module it tried to convert it, and for a lambda warned)
    functools.update_wrapper(op, fn, assigned=tuple(a for a in functools.WRAPPER_ASSIGNMENTS
                                                    if a != "__module__"))
    op._tf_types = (type_name,)
    op.primitive = prim
    if doc is not None:
        op.__doc__ = doc
    return op


def _trace_call(impl, dyn, key):
    """The ``CallTrace`` of a ``jit=False`` op's call, or None where its function cannot be traced
    (it reads values, ``float(x)``, or raises): it then runs on the values, as without a tape
    (its gradient, which traces it, raises JAX's error)."""
    try:
        closed = jax.make_jaxpr(lambda *d: impl(*d, key=key))(*[_abstract(d) for d in dyn])
    except Exception:  # noqa: BLE001 - the call on the values raises what the function raises
        return None
    return CallTrace(closed)


def op(fn=None, *, type_name=None, differentiable=True, jit=True):
    """Decorator: a JAX function ``f(pytree of arrays) -> pytree of arrays`` as a tape op.

    ``type_name`` is the TF op type the tape records (what ``RegisterGradient``
    and ``gradient_override_map`` key on); registering a name twice raises
    KeyError, as TF.  Without it a unique name ``"JaxOp/<qualname>/<n>"`` is
    made, once per function: ``op(f)`` of the same ``f`` (or of ``model.apply``
    of the same model) again is the same op, so writing it inside a loop
    compiles once (as ``jax.jit(f)`` does; so, as there, a Python value ``f``
    reads is its trace's, where ``jit=False`` reads it at each call, for the
    gradient too).  ``differentiable=False`` makes the outputs constants to the tape
    (the gradient is then ``None``, as for TF ops without a gradient).
    """
    def deco(f):
        name = type_name
        if name is None:
            # (the op of a function made before, found again: ``tapejax.op(model.apply)(params, x)``
            # written in a training loop registered and compiled a new op at every step)
            key = (f, differentiable, jit)
            try:
                made = _OPS_BY_FUNCTION.get(key)
            except TypeError:   # (an unhashable callable: a new op each time)
                key = made = None
            if made is None:
                made = make_op(f, f"JaxOp/{getattr(f, '__qualname__', 'fn')}/{next(_auto)}",
                               differentiable=differentiable, jit=jit)
                if key is not None:
                    _OPS_BY_FUNCTION[key] = made
            return made
        elif not isinstance(name, str) or not name:
            raise TypeError(f"`type_name` must be a non-empty string; got {name!r}")
        elif name in REGISTRY:
            raise KeyError(f"Registering two ops with name '{name}': pick another `type_name`")
        return make_op(f, name, differentiable=differentiable, jit=jit)

    if fn is not None:
        return deco(fn)
    return deco


__all__ = ["op"]
