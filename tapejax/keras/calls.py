"""A top-level Keras call is tape ops over the layer's stateless call, compiled, differentiated by JAX.

``model(x, training=True)`` outside any Keras scope (no ``StatelessScope``,
no symbolic tensors, no raw JAX tracers among its inputs) runs as
``bind(KerasCall, *variables, *inputs, key=CallKey(...))`` (``call_stateful``):

* the op's inputs are the model's variables (trainable, then non-trainable)
  and the array leaves of the arguments.  Variables are passed to ``bind``,
  which *reads* them: each recording tape records the read and watches the
  trainable ones (TF's rule), a tracing ``tapejax.function`` threads them;
* its function (``_run``) is Keras's own ``__call__`` inside a
  ``StatelessScope`` that maps each variable to the op's input, so the op is
  pure: a replay (``tape.gradient``) traces it again and takes ``jax.vjp`` of
  it, compiled with the rest of the backward pass (one recorded op, not one
  per inner layer; inner ``tf.*`` ops in a subclassed layer run on tracers
  and are part of it), with TF's derivatives at kinks and ties
  (``ops.tf_rules``: a Keras MAE at a zero residual, an L1 penalty on zero
  weights, ``clip``'s bounds get TF's gradient, not JAX's);
* its results are the call's outputs, then the new values of the variables
  the call assigns (``BatchNormalization`` moving statistics, Dropout seeds,
  ``SpectralNormalization``'s kernel with ``training=True``; the global random key when a layer
  draws with ``seed=None``: ``keys.WithGenerator``), then the losses the
  call adds (``activity_regularizer``, ``add_loss``).  After the op the
  updates are assigned (not differentiable, as TF's assign) and the losses
  are put in the owning layers' ``_losses``, so ``model.losses`` sees them;
  last come the Keras masks of the outputs (``Embedding(mask_zero=True)``,
  ``Masking``, an RNN with ``return_sequences``): they are put on the output
  Tensors, and a mask on a layer's first input is given to its call, so a
  mask flows from one top-level layer call to the next as on TF's eager
  tensors.

Each key (``keys.CallKey``) and argument shapes are traced once abstractly
(``_plan``, ``jax.make_jaxpr``): that gives the output structure, which
variables the call updates and which layer owns each loss (``CallInfo``), and
which operands each result depends on (a plan whose trace made variables, a
sublayer built by the layer's first call, is dropped and the call keyed again
over all of them: ``_grew``).  Results that depend on the same
operands are one op (a ``Group``) that takes only those, so TF's ``None``
holds for what a result does not depend on; the state updates are one more
op no tape records.  A group with one result is the one-output op, which
deferred execution may keep pending (an eager step's forward then runs
inside its gradient's program).  An embedding table read only by row gathers is
the one exception: its gathers are ``tf.gather`` ops on the table's Variable,
so its gradient is ``IndexedSlices`` as TF's, and the rest of the call runs as
pieces of its traced jaxpr (``SparsePlan``).  Keras functions (losses, activations,
``keras.ops``, regularizers) go through the same op with a function as the
target and no variables (``call_function``); ``Loss.__call__``, weight
regularization losses and ``Layer.__call__`` are hooked to these (``call_hooks``).
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from keras.src.backend.common.keras_tensor import KerasTensor
from keras.src.backend.common.masking import get_keras_mask, set_keras_mask
from keras.src.backend.common.stateless_scope import StatelessScope

from ..core import state as _state
from ..core.bind import bind, define
from ..core.caches import LRU
from ..core.tensor import Tensor
from ..core.variable import Variable
from ..ops.random import DrawInTrace, call_scope
from ..ops.tf_rules import with_tf_rules
from . import keys as _keys, variables as _kvars
from .gathers import SparsePlan, bind_sparse, gathers_a_variable, sparse_plan
from .grouping import group_results, in_order
from .keys import (
    Args,
    CallInfo,
    CallKey,
    State,
    autocast,
    join,
    keep_alive,
    layer_state,
    merge,
    split,
    target_of,
)

_META: Any = Variable.__dict__["_meta"]   # tapejax's shape and dtype of a variable's own value

__all__ = ["CallInfo", "CallKey", "call_function", "call_layer", "call_stateful", "is_tensor"]

_Tracer = jax.core.Tracer

#: Keras's own methods, recorded by ``call_hooks.install`` before it puts its hooks in their place.
KERAS_OWN: dict[str, Any] = {}
class Group(NamedTuple):
    """One op of a call: the results that depend on the same operands, and only those operands."""

    key: CallKey                 # the call's key with ``mapped`` / ``stand_ins`` / ``outputs`` / ``cut`` set
    keep: tuple                  # positions of the operands it takes
    outputs: tuple               # positions (in the call's flat results) it gives
    one: bool                    # one result: the one-output op (deferred execution may keep it pending)
    taped: bool                  # False for the state updates (assigned, never differentiated)
    cut: tuple = ()              # positions (in the call's flat results) of outputs it takes after
    #                              ``keep``, computed by earlier groups (``_plan``)


class Plan(NamedTuple):
    """How calls with one key run: found once (``_plan``), then one dict lookup per call."""

    info: CallInfo
    groups: tuple                # Group per set of operands some results depend on
    n_results: int
    sparse: Optional[SparsePlan] = None   # embedding tables read by gathers only (``gathers``)


#: (call key, the arguments' shapes and dtypes) -> Plan (bounded; a dropped plan is found again by
#: one abstract trace).
_PLANS = LRU("keras_call_plans", 4096)


# ---------------------------------------------------------------------------
# The op's function
# ---------------------------------------------------------------------------

def is_tensor(x):
    return isinstance(x, (Tensor, Variable))


def _flat_out(out, masks=None):
    leaves, tree = jax.tree_util.tree_flatten(out, is_leaf=is_tensor)
    flat = []
    for i, x in enumerate(leaves):
        if masks is not None:
            m = get_keras_mask(x)
            if m is not None:
                masks.append((i, getattr(m, "_value", m)))
        if isinstance(x, (Tensor, Variable)):
            x = x._value
        elif not isinstance(x, (jax.Array, _Tracer)):
            x = jax.numpy.asarray(x)
        flat.append(x)
    return flat, tree


def layer_tree(layer) -> list:
    return layer._flatten_layers(include_self=True)


def _layer_caller(layer, args, kwargs):
    return KERAS_OWN["layer"](layer, *args, **kwargs)


_MASKS = "_tapejax_input_masks"


def _masked_layer_caller(layer, args, kwargs):
    """A layer's call whose first argument carried Keras masks (on its Tensors, from the call that
    made them): they are put back on the arrays inside the op, and Keras's ``__call__`` does the
    rest (the ``mask`` argument, ``compute_mask`` for the outputs), as on TF's eager tensors."""
    kwargs = dict(kwargs)
    masks = kwargs.pop(_MASKS)
    for x, m in zip(jax.tree_util.tree_leaves(args[0]), masks):
        if m is not None:
            set_keras_mask(x, m)
    return KERAS_OWN["layer"](layer, *args, **kwargs)


class _Grown(Exception):
    """Planning a layer's call made new variables (``_grew``): the call is keyed again."""


def _grew(key: CallKey) -> bool:
    """Whether the layer's variables differ from the key's after planning its call: a sublayer that
    builds on its first call (a custom layer whose ``build`` makes only its own weights, a model
    built by ``model.build(shape)``, which in Keras 3 leaves its sublayers unbuilt) made its
    variables inside the plan's trace, as Keras's eager first call does (they are initialized
    concretely when Keras's scope ends: ``KerasVariable._deferred_initialize``)."""
    assert key.state is not None
    obj = key.target.get()
    st = key.state(obj)
    return tuple(v._id for v in st.trainable + st.other) != key.var_ids


def _variables(key: CallKey, obj) -> State:
    assert key.state is not None
    st = key.state(obj)
    if tuple(v._id for v in st.trainable + st.other) != key.var_ids:
        raise RuntimeError(f"Keras object '{key.target.label}' changed its variables since this call "
                           "was recorded (built, or made (non-)trainable, in between).")
    return st


def _arguments(key: CallKey, given):
    """The call's array arguments: the op's own, zeros standing in for those it does not take."""
    if key.stand_ins is None:
        return list(given)
    it = iter(given)
    return [next(it) if s is None else jnp.zeros(s[0], s[1]) for s in key.stand_ins]


def _select(key: CallKey, flat):
    return flat if key.outputs is None else [flat[i] for i in key.outputs]


@jax.custom_jvp
def _read_after_assign(given, new):
    return new


@_read_after_assign.defjvp
def _read_after_assign_jvp(primals, tangents):
    return primals[1], tangents[0]


class _AssignScope(StatelessScope):
    """Keras's stateless scope with TF's ``assign`` inside a call: a later read of the variable
    has the assigned value, and its derivative is the variable's (the op's operand for it, as a
    TF read is watched), never through the assigned value's computation (``assign`` records no
    gradient): a layer that writes its own trainable kernel in ``call`` (``SpectralNormalization``)
    gets TF's gradient.  ``assigned`` keeps the values written, the call's state updates."""

    def __init__(self, state_mapping, **kwargs):
        super().__init__(state_mapping, **kwargs)
        self.given = dict(self.state_mapping)
        self.assigned: dict = {}

    def add_update(self, update):
        variable, value = update
        self.assigned[id(variable)] = value
        given = self.given.get(id(variable))
        if (given is not None and jnp.issubdtype(value.dtype, jnp.inexact)
                and given.shape == value.shape and given.dtype == value.dtype):
            value = _read_after_assign(given, value)
        self.state_mapping[id(variable)] = value


def _run_stateful(key: CallKey, dyn):
    obj = key.target.get()
    trainable, other = _variables(key, obj)
    variables = trainable + other
    if key.mapped is None:
        n_var = len(variables)
        values = list(dyn[:n_var])
    else:   # the variables this op does not take (none of its results depend on them) stand in as
        # zeros: never the variable's own value, which a trace would capture as a constant
        n_var = len(key.mapped)
        values = [jnp.zeros(m.shape, m.dtype) for m in (_META.fget(v) for v in variables)]
        for i, x in zip(key.mapped, dyn[:n_var]):
            values[i] = x
    args, kwargs = join(_arguments(key, dyn[n_var:]), key)
    key_in = None   # (a call that draws: the generator's key, the last variable, is not Keras's)
    if isinstance(key.state, _keys.WithGenerator):
        variables, key_in = variables[:-1], values.pop()
    # Keras's __call__ clears its layers' losses; this function also runs when a gradient
    # replays the call, which must leave the losses of the call the user made (model.losses)
    layers = layer_tree(obj) if hasattr(obj, "_flatten_layers") else [obj]
    kept = [(lay, list(lay._losses), set(lay._loss_ids)) for lay in layers if hasattr(obj, "_flatten_layers")]
    try:
        with _AssignScope(state_mapping=list(zip(variables, values)), collect_losses=True) as scope:
            mapping = scope.state_mapping
            given = [mapping.get(id(v)) for v in variables]
            # (attributes as recorded: a replay after ``activation = f``; draws from ``key_in``)
            with _keys.swapped(layers, key.attrs), call_scope(key_in) as drawn:
                out = key.caller(obj, args, kwargs)
            losses = list(scope.losses)
        owners = [next((j for j, lay in enumerate(layers) if id(x) in lay._loss_ids), 0) for x in losses]
    finally:
        for lay, lost, ids in kept:
            lay._losses[:] = lost
            lay._loss_ids.clear()
            lay._loss_ids.update(ids)
    masks: list = []
    flat, tree = _flat_out(out, masks)
    updated = []
    news = []
    for i, (v, old) in enumerate(zip(variables, given)):
        new = mapping.get(id(v))
        if new is not None and new is not old:
            updated.append(i)
            news.append(scope.assigned.get(id(v), new))
    if key_in is not None and drawn.key is not key_in:
        updated.append(len(variables))
        news.append(drawn.key)
    info = CallInfo(tree, len(flat), tuple(updated), tuple(owners), tuple(i for i, _ in masks))
    return _select(key, flat + news + [getattr(x, "_value", x) for x in losses] + [m for _, m in masks]), info


def _run_function(key: CallKey, dyn):
    fn = key.target.get()
    args, kwargs = join(dyn, key)
    flat, tree = _flat_out(key.caller(fn, args, kwargs))
    return flat, CallInfo(tree, len(flat), (), ())


def _run(key: CallKey, dyn):
    if key.state is not None:
        return _run_stateful(key, dyn)
    return _run_function(key, dyn)


def _run_cut(key: CallKey, dyn):
    """A group that takes some of the call's outputs as operands (``key.cut``): the whole call's
    trace with those outputs' values replaced by the operands, its ``key.outputs`` selected."""
    assert key.cut is not None
    whole = key._replace(outputs=None, cut=None)
    return _select(key, with_tf_rules(lambda *d: _run(whole, d)[0], cut=key.cut)(*dyn))


def _impl_one(*dyn, key):
    if key.cut is not None:
        return _run_cut(key, dyn)[0]
    return with_tf_rules(lambda *d: _run(key, d)[0][0])(*dyn)


def _impl_many(*dyn, key):
    if key.cut is not None:
        return tuple(_run_cut(key, dyn))
    return tuple(with_tf_rules(lambda *d: _run(key, d)[0])(*dyn))


KERAS_CALL = define("KerasCall", _impl_one)
KERAS_CALL_N = define("KerasCallN", _impl_many, multiple_results=True)


def _spec(x):
    if isinstance(x, (Tensor, Variable)):
        m = x._meta
        return jax.ShapeDtypeStruct(m.shape, m.dtype, weak_type=getattr(m, "weak_type", False))
    return jax.ShapeDtypeStruct(np.shape(x), x.dtype, weak_type=getattr(x, "weak_type", False))


def _plan(key: CallKey, operands) -> Plan:
    """Trace the call once, abstractly, and split it into ops by what its results depend on.

    Results that depend on the same operands are one op that takes only those operands (the
    others are never read, or stand in as zeros), so a variable or input a result does not
    depend on gets ``None`` from ``tape.gradient``, as in TF (a loss on one head of a two-head
    model has no gradient for the other head).  The updates of non-trainable state are one
    more op no tape records.  XLA prunes what an op does not need and, in one program (a
    gradient's, a ``tapejax.function``), computes what several ops share once."""
    found = []

    def fn(*d):
        flat, info = _run(key, d)
        found.append(info)
        return tuple(flat)

    specs = [_spec(x) for x in operands]
    closed = jax.make_jaxpr(fn)(*specs)
    info = found[-1]
    n = len(closed.jaxpr.outvars)
    if key.state is None:   # a function: one op, all of it
        group = Group(key, tuple(range(len(operands))), tuple(range(n)), n == 1, True)
        return Plan(info, (group,), n)
    n_var = len(key.var_ids)
    groups = group_results(closed.jaxpr, info)
    if not any(cut for *_, cut in groups) and gathers_a_variable(closed.jaxpr, n_var):
        sparse = sparse_plan(key, fn, specs, info, n_var)
        if sparse is not None:
            return Plan(info, (), n, sparse)
    out = []
    for dep, js, taped, cut in in_order(groups):
        keep = tuple(sorted(dep))
        mapped = tuple(i for i in keep if i < n_var)
        stand_ins = tuple(None if i in dep else (specs[i].shape, specs[i].dtype)
                          for i in range(n_var, len(operands)))
        bound = key._replace(mapped=None if len(mapped) == n_var else mapped,
                             stand_ins=None if all(s is None for s in stand_ins) else stand_ins,
                             outputs=None if js == tuple(range(n)) else js, cut=cut or None)
        out.append(Group(bound, keep, js, len(js) == 1, taped, cut))
    return Plan(info, tuple(out), n)


def _aval(x):
    m = x._meta if isinstance(x, (Tensor, Variable)) else x
    return m.shape, m.dtype, getattr(m, "weak_type", False)


def _bind(key: CallKey, operands, n_var: int):
    """Run the call's ops; its flat results and ``CallInfo``.  The plan is per key and shapes and
    dtypes of the arguments (``n_var`` operands are the key's variables, whose shapes are fixed)."""
    pkey = (key, tuple([_aval(x) for x in operands[n_var:]]))
    plan = _PLANS.get(pkey)
    if plan is None:
        plan = _plan(key, operands)
        if key.state is not None and _grew(key):
            raise _Grown()   # (nothing ran: the plan's trace built a sublayer; its key is not this one)
        plan = _PLANS.setdefault(pkey, plan)
    if plan.sparse is not None:
        return bind_sparse(plan.sparse, operands, plan.n_results), plan.info
    groups = plan.groups
    if len(groups) == 1 and groups[0].taped and len(groups[0].keep) == len(operands):
        g = groups[0]   # (the common case: one op over everything)
        if g.one:
            return (bind(KERAS_CALL, *operands, key=g.key),), plan.info
        return bind(KERAS_CALL_N, *operands, key=g.key), plan.info
    flat: list = [None] * plan.n_results
    for g in groups:
        ops = [operands[i] for i in g.keep] + [flat[i] for i in g.cut]
        if g.taped:
            res = (bind(KERAS_CALL, *ops, key=g.key),) if g.one else bind(KERAS_CALL_N, *ops, key=g.key)
        else:
            with _state.swap(tapes=()):   # (state updates and masks: never differentiated)
                res = bind(KERAS_CALL_N, *ops, key=g.key)
        for j, r in zip(g.outputs, res):
            flat[j] = r
    return flat, plan.info


# ---------------------------------------------------------------------------
# Layers
# ---------------------------------------------------------------------------

def _build(layer, a: Args) -> None:
    """Build ``layer`` as Keras's ``__call__`` would, on symbolic stand-ins of the inputs (no
    forward pass runs, so no state changes but the new variables)."""
    from keras.src.layers.layer import CallSpec

    def sym(x):
        m = x._meta if isinstance(x, (Tensor, Variable)) else x
        return KerasTensor(tuple(m.shape), dtype=np.dtype(m.dtype).name)

    args, kwargs = jax.tree_util.tree_unflatten(
        a.tree, merge([sym(x) for x in a.dyn], a.static))
    kwargs.pop(_MASKS, None)
    with jax.ensure_compile_time_eval():   # concrete initial values, even while a function traces
        with layer._open_name_scope():
            layer._maybe_build(CallSpec(layer._call_signature, layer._call_context_args, args, kwargs))
    if not layer.built:   # Keras marks it built at the end of its first real call
        layer.built = True


def call_stateful(obj, args, kwargs, caller: Callable[..., Any], state: Callable[[Any], State],
                  what: str, convert: Optional[Callable[[Any], Any]] = None, grown: int = 0):
    """``caller(obj, args, kwargs)`` as one tape op over the variables ``state(obj)`` names and the
    arguments' arrays; the updates it makes are written back, the losses it adds put in place.

    A call whose planning builds more of the layer (a sublayer built by the first call: ``_grew``)
    is keyed and planned again over all its variables, once the new ones hold their values (a
    restore waiting for them applied: ``variables.sweep_restore``), so the first call reads the
    variables it made, as Keras's and TF's first calls do.  Later calls of the same structure
    find the plan; a recorded call whose layer changes its variables afterwards still raises
    when replayed (``_variables``)."""
    a = split(args, kwargs, convert)
    if a.symbolic:
        return caller(obj, args, kwargs)
    if hasattr(obj, "_maybe_build") and not obj.built:   # (a layer)
        _build(obj, a)
    if _keys.draws(obj) and not isinstance(state, _keys.WithGenerator):
        state = _keys.WithGenerator(state)
    st = state(obj)
    variables = st.trainable + st.other
    for v in variables:
        if not isinstance(v, Variable):
            _kvars.check_variable(v, what)
    key = CallKey(caller, target_of(obj, weak=True), a.tree, a.static, state, tuple(v._id for v in variables),
                  autocast(), attrs=_keys.swappable(layer_tree(obj)) if hasattr(obj, "_flatten_layers") else ())
    if _state._local.tapes:
        keep_alive(obj)
    try:
        outs, info = _bind(key, variables + a.dyn, len(variables))
    except DrawInTrace:   # (raised while planning: nothing ran) a layer drew with seed=None
        if isinstance(state, _keys.WithGenerator):
            raise
        _keys.mark_drawing(obj)
        return call_stateful(obj, args, kwargs, caller, _keys.WithGenerator(state), what, convert, grown)
    except _Grown:   # (raised after planning: nothing ran) the first call built a sublayer
        if grown >= _MAX_GROWN:
            raise RuntimeError(f"{what}: each call of this Keras layer makes new variables; make them in "
                               "__init__ or build, once, as Keras requires") from None
        _kvars.sweep_restore()
        return call_stateful(obj, args, kwargs, caller, state, what, convert, grown + 1)
    n_out, n_up = info.n_out, len(info.updated)
    for i, t in zip(info.updated, outs[n_out:n_out + n_up]):
        variables[i].assign(t)
    if hasattr(obj, "_flatten_layers"):
        layers = layer_tree(obj)
        for lay in layers:   # a top-level call replaces the losses of the last one (Keras)
            lay._losses.clear()
            lay._loss_ids.clear()
        for owner, t in zip(info.loss_owners, outs[n_out + n_up:]):
            layers[owner]._losses.append(t)
    if info.masked:
        for i, m in zip(info.masked, outs[len(outs) - len(info.masked):]):
            set_keras_mask(outs[i], m)
    return jax.tree_util.tree_unflatten(info.out_tree, outs[:n_out])


_MAX_GROWN = 2   # (one plan's trace builds every sublayer the call reaches: more means each call makes some)


def call_layer(layer, args, kwargs):
    """``layer(*args, **kwargs)`` as one tape op (see the module docstring)."""
    caller = _layer_caller
    if args and kwargs.get("mask") is None:
        masks = [get_keras_mask(x) if isinstance(x, Tensor) else None
                 for x in jax.tree_util.tree_leaves(args[0], is_leaf=is_tensor)]
        if any(m is not None for m in masks):
            caller, kwargs = _masked_layer_caller, dict(kwargs, **{_MASKS: masks})
    out = call_stateful(layer, args, kwargs, caller, layer_state,
                        f"calling Keras layer '{layer.name}'",
                        convert=lambda x: layer.dtype_policy.convert_input(x, layer.autocast, layer.input_dtype))
    layer._called = True
    return out


# ---------------------------------------------------------------------------
# Functions (losses, activations, keras.ops, regularizers)
# ---------------------------------------------------------------------------

def _plain(fn, args, kwargs):
    return fn(*args, **kwargs)


def call_function(fn: Any, args, kwargs, caller: Callable[..., Any] = _plain):
    """``caller(fn, args, kwargs)`` as one tape op over the array leaves of the arguments."""
    a = split(args, kwargs)
    if a.symbolic:
        return caller(fn, args, kwargs)
    key = CallKey(caller, target_of(fn), a.tree, a.static, None, (), autocast())
    try:
        hash(key)
    except TypeError:
        raise TypeError(f"{getattr(fn, '__name__', fn)!r}: its non-array arguments must be hashable "
                        f"to record it on the tape; got {a.static!r}") from None
    outs, info = _bind(key, a.dyn, 0)
    return jax.tree_util.tree_unflatten(info.out_tree, list(outs[:info.n_out]))
