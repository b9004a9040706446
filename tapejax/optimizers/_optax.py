"""``from_optax(tx)``: any optax ``GradientTransformation`` behind the Keras optimizer API.

The optax state (``tx.init(params)``) is kept as one Variable per array leaf,
created on the first ``apply_gradients``, so it is threaded through
``tapejax.function`` and saved by ``tapejax.train.Checkpoint`` like any slot.
The update is ``updates, state = tx.update(grads, state, params)``;
``params = optax.apply_updates(params, updates)``, compiled as one program
eagerly (variables and state donated where nothing else holds them).  ``learning_rate`` belongs to ``tx``
(use ``optax.inject_hyperparams`` to change it); clipping arguments work as
for the Keras optimizers and run before ``tx``.
"""
import jax
import jax.core
import jax.numpy as jnp
import optax

from ..core.convert import convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.ownership import Donating, note_slot
from ..core.state import _local
from ..core.tensor import Pending
from ..core.variable import Variable
from ._args import _filter_empty_gradients, _touch
from ._base import Optimizer, _run_update, place_like


def _owner(path, leaf, var_list):
    """The parameter an optax state leaf belongs to: optax keeps per-parameter state (``mu``,
    ``nu`` ...) as a tree shaped like the parameters, here a list, so such a leaf's path ends
    with the parameter's index and the leaf has its shape; None for anything else (``count``)."""
    last = path[-1] if path else None
    i = getattr(last, "idx", None)
    if isinstance(i, int) and 0 <= i < len(var_list) and getattr(leaf, "shape", None) == var_list[i].shape:
        return var_list[i]
    return None


_NO_LEARNING_RATE = ("an optax optimizer's learning rate lives in its transformation; build it with "
                     "optax.inject_hyperparams to change it, and assign "
                     "opt.optax_state(var_list).hyperparams['learning_rate']")


def _init(tx, params):
    """``tx.init(params)``; a structure error (a mask or labels written for the user's own pytree)
    says what structure the bridge passes."""
    try:
        return tx.init(params)
    except (ValueError, TypeError) as e:
        if type(e) not in (ValueError, TypeError):
            raise
        raise type(e)(f"{e}\n\nfrom_optax hands optax the parameters as a list in the order of "
                      f"apply_gradients' (gradient, variable) pairs ({len(params)} arrays); an argument of "
                      "the transformation shaped like the parameters (optax.masked's mask, "
                      "optax.multi_transform's labels) must be such a list, or a callable of it.") from e


class OptaxOptimizer(Optimizer):
    """An optax transformation with ``apply_gradients`` / ``minimize`` / ``iterations`` / ``variables()``."""

    def __init__(self, tx, name="Optax", **kwargs):
        if not isinstance(tx, optax.GradientTransformation) and not (
                hasattr(tx, "init") and hasattr(tx, "update")):
            raise TypeError(f"from_optax expects an optax.GradientTransformation; got {tx!r} of type "
                            f"{type(tx).__name__}")
        self.tx = tx
        super().__init__(name, 0.0, **kwargs)
        self._groups = {}   # var ids -> (state Variables, treedef)

    @property
    def learning_rate(self):
        raise AttributeError(_NO_LEARNING_RATE)

    @learning_rate.setter
    def learning_rate(self, value):
        raise AttributeError(_NO_LEARNING_RATE)

    lr = learning_rate   # (the base class's alias read and set a rate that optax never uses)

    def __getattr__(self, name):   # (Python calls it when a property raises AttributeError)
        if name in ("learning_rate", "lr"):
            raise AttributeError(_NO_LEARNING_RATE)   # (the base class's message would hide this one)
        return super().__getattr__(name)

    def optax_state(self, var_list):
        """The optax state of ``var_list`` (the variables of ``apply_gradients``' pairs, in that
        order) as optax's pytree with its state Variables at the leaves, made if not yet: for a
        transformation built with ``optax.inject_hyperparams``,
        ``opt.optax_state(vs).hyperparams["learning_rate"].assign(1e-4)`` changes the rate."""
        svars, tree = self._state_for(list(var_list))
        return jax.tree_util.tree_unflatten(tree, svars)

    def _state_for(self, var_list):
        key = tuple(v._id for v in var_list)
        group = self._groups.get(key)
        if group is None:
            params = [v._value for v in var_list]
            with jax.ensure_compile_time_eval():   # concrete state even inside tapejax.function
                state = _init(self.tx, params)
                paths, tree = jax.tree_util.tree_flatten_with_path(state)
                owners = [_owner(path, x, var_list) for path, x in paths]
                svars = [Variable(jnp.asarray(x) if o is None else place_like(jnp.asarray(x), o),
                                  trainable=False, name=f"optax/{i}")
                         for i, ((_, x), o) in enumerate(zip(paths, owners))]
                for s, o in zip(svars, owners):
                    if o is not None:
                        note_slot(s, o)
            self._weights.extend(svars)
            group = self._groups[key] = (svars, tree)
        return group

    def apply_gradients(self, grads_and_vars, name=None, experimental_aggregate_gradients=True):
        pairs = _filter_empty_gradients(grads_and_vars)
        if not pairs:   # (an empty list: TF's no-op)
            return None
        gs, var_list = [], []
        for g, v in pairs:
            if not isinstance(v, Variable):
                raise TypeError(f"apply_gradients expects (gradient, Variable) pairs; got {v!r}")
            if type(g) is not Pending:   # (a gradient stays uncomputed: see ``runtime.speculate``)
                g = convert_to_tensor(g, dtype_hint=v.dtype)
            if tuple(g.shape) != tuple(v._meta.shape):
                raise InvalidArgumentError(None, None, f"var and grad do not have the same shape: variable "
                                           f"{v.name} has shape {tuple(v._meta.shape)}, its gradient has "
                                           f"shape {tuple(g.shape)}")
            gs.append(g)
            var_list.append(v)
        it_var = self.iterations
        svars, tree = self._state_for(var_list)
        state = list(var_list) + list(svars) + [it_var]
        if _local.collector is not None or any(type(g) is not Pending and isinstance(g._value, jax.core.Tracer)
                                               for g in gs):
            _touch(state, True)
            out = self._pure(tree, [v._value for v in state], [g._value for g in gs])
        else:
            key = ("optax", tree, tuple(v._id for v in var_list))
            plan = self._updates.get(key)
            if plan is None:
                plan = self._updates[key] = (tuple(state), Donating(lambda vals, grads: self._pure(tree, vals, grads)))
            _run_update(plan[0], var_list, plan[1], gs, ())
            return it_var
        for v, x in zip(state, out):
            v._value = x
        for v in var_list:
            if v.constraint is not None:
                v.assign(v.constraint(v))
        return it_var

    def _pure(self, tree, vals, grads):
        n = len(grads)
        params, leaves, it = list(vals[:n]), vals[n:-1], vals[-1]
        grads = self._clip([g.astype(p.dtype) for g, p in zip(grads, params)])
        state = jax.tree_util.tree_unflatten(tree, list(leaves))
        try:
            updates, state = self.tx.update(grads, state, params)
        except TypeError as e:
            if type(e) is not TypeError or "required keyword-only argument" not in str(e):
                raise
            raise TypeError(f"{e}\n\nfrom_optax calls tx.update(grads, state, params) with no extra "
                            "arguments: transformations that need the loss (value=..., as "
                            "reduce_on_plateau, polyak_sgd, lbfgs) are not supported.") from e
        except AttributeError as e:   # (optax.lookahead reads params.fast: its own LookaheadParams)
            if type(e) is not AttributeError or "'list' object has no attribute" not in str(e):
                raise
            raise AttributeError(f"{e}\n\nfrom_optax hands tx.update the parameters as a list (the variables "
                                 "of apply_gradients): a transformation that needs its own parameter "
                                 "structure (optax.lookahead's LookaheadParams) is not supported.") from e
        new_params = jax.tree_util.tree_leaves(optax.apply_updates(params, updates))  # the list, as a list
        new_leaves = jax.tree_util.tree_leaves(state)
        new_params = [p.astype(o.dtype) for p, o in zip(new_params, params)]
        new_leaves = [x.astype(o.dtype) for x, o in zip(new_leaves, leaves)]
        return new_params + new_leaves + [it + 1]

    def get_config(self):
        return {"name": self._name, "tx": self.tx}


def from_optax(tx, name="Optax", **kwargs):
    """Wrap an optax ``GradientTransformation`` as a tapejax optimizer (Keras-2 API).

    >>> opt = tapejax.optimizers.from_optax(optax.adamw(1e-3))
    >>> opt.apply_gradients(zip(grads, variables))
    """
    return OptaxOptimizer(tx, name=name, **kwargs)
