"""``tf.distribute``'s contexts and the strategy base: ``Strategy``, ``StrategyExtended``,
``ReplicaContext``, the default strategy, ``get_strategy`` / ``has_strategy`` /
``in_cross_replica_context`` / ``get_replica_context`` / ``experimental_set_strategy``.

The modes follow TF's (``distribute_lib``): a thread starts in the default strategy's default
replica context; ``with strategy.scope():`` enters the strategy's cross-replica context;
``strategy.run(fn)`` calls ``fn`` in a replica context; ``merge_call`` goes back to the
cross-replica context.  The stack of modes is ``core.distribution``'s (the ops that check the
context read it there).  ``run`` calls ``fn`` once (see the package's README): its replica
context has ``replica_id_in_sync_group`` 0.
"""
import collections
import contextlib
import inspect
import weakref
from typing import Any, Optional

from ..core import distribution as _modes, nest, state as _state
from ..core.convert import constant
from ..core.creator import variable_creator_scope
from ..core.dtypes import int32
from ..ops.math import identity
from . import input as _input
from .reduce import across_replicas, along_axis, as_reduce_op

__all__ = ["ReplicaContext", "RunOptions", "Strategy", "StrategyExtended", "experimental_set_strategy", "get_replica_context",
           "get_strategy", "has_strategy", "in_cross_replica_context"]

_MIXING = "Mixing different tf.distribute.Strategy objects: {} is not {}"
_CROSS_REPLICA_ONLY = "Method requires being in cross-replica context, use get_replica_context().merge_call()"


# ---------------------------------------------------------------------------
# the current mode
# ---------------------------------------------------------------------------

def get_strategy() -> "Strategy":
    """``tf.distribute.get_strategy``: the strategy whose scope (or ``run``) the thread is in,
    else the default strategy."""
    mode = _modes.current()
    return _DEFAULT_STRATEGY if mode is None else mode.strategy


def has_strategy() -> bool:
    """``tf.distribute.has_strategy``: whether a strategy other than the default one is current."""
    return get_strategy() is not _DEFAULT_STRATEGY


def in_cross_replica_context() -> bool:
    """``tf.distribute.in_cross_replica_context``: inside ``with strategy.scope():`` (or a
    ``merge_call``), not inside ``strategy.run``."""
    mode = _modes.current()
    return mode is not None and mode.replica_context is None


def get_replica_context() -> Optional["ReplicaContext"]:
    """``tf.distribute.get_replica_context``: the current ``ReplicaContext`` (the default one
    outside any strategy), or None in a cross-replica context."""
    mode = _modes.current()
    return _DEFAULT_REPLICA_CONTEXT if mode is None else mode.replica_context


def _require_cross_replica_or_default(strategy: "Strategy") -> None:
    """TF's check before a cross-replica method (``scope``, ``run``, ``reduce``, ``gather``):
    the strategy's own cross-replica context, or the default mode."""
    mode = _modes.current()
    if mode is None or (mode.replica_context is None and mode.strategy is strategy):
        return
    if mode.strategy is not strategy:
        if not has_strategy():
            raise RuntimeError(f'Need to be inside "with strategy.scope()" for {strategy}')
        raise RuntimeError(_MIXING.format(mode.strategy, strategy))
    raise RuntimeError(_CROSS_REPLICA_ONLY)


_SET_SCOPE: list = []   # the scope ``experimental_set_strategy`` entered (one at most)


def experimental_set_strategy(strategy: Optional["Strategy"]) -> None:
    """``tf.distribute.experimental_set_strategy``: make ``strategy`` current as if inside its
    ``scope()`` until the next call (``None`` goes back to the default).  RuntimeError inside a
    strategy's scope.  (Modes are per thread here: it applies to the calling thread.)"""
    if _SET_SCOPE:
        _SET_SCOPE.pop().__exit__(None, None, None)
    if has_strategy():
        raise RuntimeError("Must not be called inside a `tf.distribute.Strategy` scope.")
    if strategy is not None:
        if not isinstance(strategy, Strategy):
            raise TypeError(f"`strategy` must be a tf.distribute.Strategy or None; got {strategy!r}")
        scope = strategy.scope()
        scope.__enter__()
        _SET_SCOPE.append(scope)


# ---------------------------------------------------------------------------
# replica contexts
# ---------------------------------------------------------------------------

class ReplicaContext:
    """``tf.distribute.ReplicaContext``: what a function run by ``strategy.run`` can ask of its
    replica.  Here the function runs once, as one SPMD program over the global batch (see the
    package's README), so ``replica_id_in_sync_group`` is 0, and ``all_reduce`` / ``all_gather``
    return their values: a value computed on the global batch is already what TF's replicas
    combine to (a sum over the examples, or the mean of equal shards).
    ``num_replicas_in_sync`` is the strategy's."""

    def __init__(self, strategy: "Strategy", replica_id_in_sync_group: Any):
        if not (replica_id_in_sync_group is None or isinstance(replica_id_in_sync_group, int)
                or hasattr(replica_id_in_sync_group, "dtype")):
            raise ValueError("replica_id_in_sync_group can only be an integer, a Tensor or None.")
        self._strategy = strategy
        self._replica_id = replica_id_in_sync_group
        self._mode = _modes.Mode(strategy, self, strategy is _DEFAULT_STRATEGY)

    def __enter__(self):
        _modes.push(self._mode)
        return self

    def __exit__(self, *exc):
        _modes.pop(self._mode)
        return False

    @property
    def strategy(self) -> "Strategy":
        return self._strategy

    @property
    def num_replicas_in_sync(self) -> int:
        return self._strategy.num_replicas_in_sync

    @property
    def replica_id_in_sync_group(self) -> Any:
        """This replica's index, an int32 Tensor (0: the one program)."""
        if hasattr(self._replica_id, "dtype"):
            return self._replica_id
        return constant(self._replica_id, int32)

    @property
    def devices(self) -> tuple:
        """(Deprecated in TF.)  The current device's name: JAX's choice, TF's ``''``."""
        return ("",)

    def merge_call(self, merge_fn, args=(), kwargs=None) -> Any:
        """``merge_fn(strategy, *args, **kwargs)`` in the cross-replica context (the values it
        gets are the global ones: there is one program)."""
        current = get_replica_context()
        if current is not self:   # (TF's ``require_replica_context``)
            if current is None:
                raise RuntimeError("Need to be inside `call_for_each_replica()`")
            if current.strategy is self._strategy:
                raise RuntimeError("Mismatching ReplicaContext.")
            raise RuntimeError(f"Mismatching tf.distribute.Strategy objects: {current.strategy} is not "
                               f"{self._strategy}.")
        cross = _modes.Mode(self._strategy, None, self._strategy is _DEFAULT_STRATEGY)
        _modes.push(cross)
        try:
            return merge_fn(self._strategy, *args, **(kwargs or {}))
        finally:
            _modes.pop(cross)

    def all_reduce(self, reduce_op, value, options=None) -> Any:
        """``value`` (a nest of tensors) reduced across the replicas: ``value`` itself, each leaf
        through ``tf.identity`` (its gradient flows through; TF's is the all-reduce of the
        gradient, the same here)."""
        as_reduce_op(reduce_op)
        return nest.map_structure(identity, value)

    def all_gather(self, value, axis, options=None) -> Any:
        """The replicas' values concatenated along ``axis``: with one program, ``value`` itself."""
        if not isinstance(axis, int) or isinstance(axis, bool):
            raise TypeError(f"`axis` must be an integer; got {axis!r}")
        return nest.map_structure(identity, value)


class _DefaultReplicaContext(ReplicaContext):
    """The default strategy's replica context: ``replica_id_in_sync_group`` is the int 0, as TF's."""

    @property
    def replica_id_in_sync_group(self) -> Any:
        return 0


# ---------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------

class RunOptions(collections.namedtuple("RunOptions", [
        "experimental_enable_dynamic_batch_size", "experimental_bucketizing_dynamic_shape",
        "experimental_xla_options"])):
    """``tf.distribute.RunOptions`` (for ``strategy.run``; TPU settings in TF: nothing to change
    here, where every step is an XLA program)."""

    def __new__(cls, experimental_enable_dynamic_batch_size=True, experimental_bucketizing_dynamic_shape=False,
                experimental_xla_options=None):
        return super().__new__(cls, experimental_enable_dynamic_batch_size, experimental_bucketizing_dynamic_shape,
                               experimental_xla_options)


class StrategyExtended:
    """``tf.distribute.StrategyExtended`` (``strategy.extended``): the strategy's devices and its
    lower-level methods.  Subclasses say where Variables and inputs go (``_place_variable``,
    ``_place_input``; nothing moves by default)."""

    _num_replicas = 1
    _as_tensors = True          # reductions give Tensors (False: the default strategy's values as given)
    _copies_per_replica = False  # TF keeps a copy of each Variable per replica (MirroredStrategy's)
    experimental_require_static_shapes = False

    def __init__(self, container_strategy: "Strategy"):
        self._strategy = container_strategy

    # -- what a subclass places --------------------------------------------------
    def _place_variable(self, var: Any) -> None:
        """Put a Variable created in the scope where the strategy keeps Variables."""

    def _place_input(self, element: Any) -> Any:
        """A global batch (a dataset element) placed for the program: as it is by default."""
        return element

    def _global_batches(self, dataset: Any) -> Any:
        """The dataset of global batches made from ``distribute_datasets_from_function``'s per-replica one."""
        return dataset

    # -- TF's methods ------------------------------------------------------------
    @property
    def worker_devices(self) -> tuple:
        raise RuntimeError("worker_devices() method unsupported by default tf.distribute.Strategy.")

    @property
    def parameter_devices(self) -> tuple:
        raise RuntimeError("parameter_devices() method unsupported by default tf.distribute.Strategy.")

    def variable_created_in_scope(self, v) -> bool:
        return _created_in.get(id(v), (None, None))[1] is self._strategy

    def colocate_vars_with(self, colocate_with_variable):
        """A scope in which new Variables go with ``colocate_with_variable``: here every Variable
        of the strategy goes to the same devices, so the scope places nothing more."""
        return contextlib.nullcontext()

    def reduce_to(self, reduce_op, value, destinations, options=None) -> Any:
        """``value`` reduced across the replicas (to ``destinations``: the strategy's devices here)."""
        as_reduce_op(reduce_op)
        return across_replicas(value, self._as_tensors)

    def batch_reduce_to(self, reduce_op, value_destination_pairs, options=None) -> list:
        return [self.reduce_to(reduce_op, v, d, options) for v, d in value_destination_pairs]

    def update(self, var, fn, args=(), kwargs=None, group=True) -> Any:
        """``fn(var, *args, **kwargs)``: the update of a Variable (one copy: the program's)."""
        return fn(var, *args, **(kwargs or {}))

    def value_container(self, value) -> Any:
        return value


class Strategy:
    """``tf.distribute.Strategy``: the base of the strategies (see the package's README for what
    a strategy is here: one SPMD program over a mesh of devices)."""

    def __init__(self, extended: StrategyExtended):
        self._extended = extended

    @property
    def extended(self) -> StrategyExtended:
        return self._extended

    @property
    def num_replicas_in_sync(self) -> int:
        """The number of replicas (devices the global batch is split over)."""
        return self._extended._num_replicas

    @property
    def cluster_resolver(self) -> None:
        return None

    def scope(self):
        """``with strategy.scope():`` the strategy is current (cross-replica context) and
        Variables created in the block go where the strategy keeps them."""
        return _Scope(self)

    def run(self, fn, args=(), kwargs=None, options=None) -> Any:
        """``fn(*args, **kwargs)`` in a replica context: called once, on the global values (one
        SPMD program; XLA splits the work over the devices).  Inside a ``tapejax.function``
        ``fn``'s control flow is converted by AutoGraph, as TF converts it."""
        if not isinstance(args, (list, tuple)):
            raise ValueError(f"positional args must be a list or tuple, got {type(args)}")
        if options is not None and not isinstance(options, RunOptions):
            raise TypeError(f"`options` must be a tf.distribute.RunOptions; got {options!r}")
        with self.scope():
            fn = _converted(fn)
            with ReplicaContext(self, 0):
                return fn(*args, **(kwargs or {}))

    def reduce(self, reduce_op, value, axis) -> Any:
        """``value`` reduced across the replicas (``axis=None``) or also along ``axis`` (the batch
        dimension, typically): a sum, or a mean over every entry reduced."""
        _require_cross_replica_or_default(self)
        op = as_reduce_op(reduce_op)
        if axis is None:
            return across_replicas(value, self._extended._as_tensors)
        return along_axis(op, value, axis)

    def gather(self, value, axis) -> Any:
        """The replicas' values concatenated along ``axis``: the global value."""
        _require_cross_replica_or_default(self)
        return across_replicas(value, self._extended._as_tensors)

    def experimental_local_results(self, value) -> tuple:
        """The per-replica values of ``value``: ``(value,)``, the one program's."""
        return (value,)

    def experimental_distribute_dataset(self, dataset, options=None) -> Any:
        """The dataset's elements (global batches) placed for the strategy's program: split over
        its devices along the batch dimension (see ``input.DistributedDataset``)."""
        return _input.distribute_dataset(self, dataset, options)

    def distribute_datasets_from_function(self, dataset_fn, options=None) -> Any:
        """``dataset_fn(tf.distribute.InputContext(...))`` gives each replica's batches; the
        distributed dataset gives the global batches they make (``input.py``)."""
        return _input.distribute_from_function(self, dataset_fn, options)

    experimental_distribute_datasets_from_function = distribute_datasets_from_function

    def __repr__(self) -> str:
        return f"<tapejax.distribute.{type(self).__name__} object at {id(self):#x}>"


class _Scope:
    """``strategy.scope()``: TF's ``_CurrentDistributionContext`` (entering it again inside
    itself is allowed; inside another strategy, or inside ``run``, RuntimeError)."""

    def __init__(self, strategy: Strategy):
        self._strategy = strategy
        self._again = 0
        self._mode = _modes.Mode(strategy, None)
        self._creator: Any = None

    def __enter__(self) -> Strategy:
        if has_strategy():
            _require_cross_replica_or_default(self._strategy)
            self._again += 1
            return self._strategy
        _modes.push(self._mode)
        self._creator = variable_creator_scope(self._create)
        self._creator.__enter__()
        return self._strategy

    def _create(self, next_creator, **kwargs) -> Any:
        var = next_creator(**kwargs)
        remember(var, self._strategy)
        sync, aggregation = getattr(var, "_sync", (None, None))
        if (self._strategy._extended._copies_per_replica and getattr(sync, "name", None) == "ON_READ"
                and getattr(aggregation, "name", None) == "SUM"):
            key = id(var)   # (TF's SyncOnReadVariable: updated only in a replica context)
            _modes.SUM_ON_READ[key] = weakref.ref(var, lambda _r, k=key: _modes.SUM_ON_READ.pop(k, None))
        self._strategy._extended._place_variable(var)
        return var

    def __exit__(self, *exc) -> bool:
        if self._again:
            self._again -= 1
            return False
        _modes.pop(self._mode)   # (first: out of order, it raises with nothing changed)
        creator, self._creator = self._creator, None
        creator.__exit__(*exc)
        return False


class _DefaultScope:
    """The default strategy's scope (TF's ``_DefaultDistributionContext``): changes nothing;
    RuntimeError inside another strategy's scope."""

    def __enter__(self) -> Strategy:
        if has_strategy():
            raise RuntimeError("Must not nest tf.distribute.Strategy scopes.")
        return _DEFAULT_STRATEGY

    def __exit__(self, *exc) -> bool:
        return False


class _DefaultExtended(StrategyExtended):
    _as_tensors = False

    def variable_created_in_scope(self, v) -> bool:
        return id(v) not in _created_in


class _DefaultStrategy(Strategy):
    """The default strategy (``tf.distribute.get_strategy()`` outside any scope): one replica,
    no placement; ``experimental_distribute_dataset`` gives the dataset itself."""

    def __init__(self):
        super().__init__(_DefaultExtended(self))

    def scope(self):
        return _DefaultScope()

    def experimental_distribute_dataset(self, dataset, options=None) -> Any:
        return dataset

    def distribute_datasets_from_function(self, dataset_fn, options=None) -> Any:
        return dataset_fn(_input.InputContext())

    experimental_distribute_datasets_from_function = distribute_datasets_from_function


_DEFAULT_STRATEGY = _DefaultStrategy()
_DEFAULT_REPLICA_CONTEXT = _DefaultReplicaContext(_DEFAULT_STRATEGY, 0)

#: id(Variable) -> (weak reference, the strategy whose scope created it)
_created_in: dict = {}


def remember(var: Any, strategy: Strategy) -> None:
    key = id(var)
    try:
        ref = weakref.ref(var, lambda _r, k=key: _created_in.pop(k, None))
    except TypeError:   # (not weakly referenceable: not tracked)
        return
    _created_in[key] = (ref, strategy)


# ---------------------------------------------------------------------------
# AutoGraph for the function ``run`` calls
# ---------------------------------------------------------------------------

_LIBRARIES = ("tapejax", "jax", "keras", "numpy", "optax")


def _converted(fn: Any) -> Any:
    """``fn`` as AutoGraph converts it when a ``tapejax.function`` is tracing (TF's ``run``
    converts its function in a converted context), else ``fn``."""
    if _state._local.collector is None or not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        return fn
    if (getattr(fn, "__module__", None) or "").split(".")[0] in _LIBRARIES:
        return fn
    from ..compile import autograph
    return autograph.converted(fn) if autograph.available() else fn
