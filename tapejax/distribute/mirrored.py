"""``tf.distribute.MirroredStrategy`` and ``OneDeviceStrategy``: one SPMD program over a mesh of
devices; the ``CrossDeviceOps`` a script may pass to ``MirroredStrategy``.

A strategy over several devices is a 1-D ``jax.sharding.Mesh`` (axis ``"data"``,
``strategy.extended.mesh``): a Variable created in ``strategy.scope()`` is replicated over it
(``NamedSharding(mesh, P())``), and each global batch a distributed dataset gives is split over
it along its first dimension (``P("data")``; a batch that does not divide into equal parts, or
a scalar, is replicated).  The step is compiled as one program (``tapejax.function`` or the
eager ops) whose inputs carry these shardings, and XLA partitions it and inserts the
collectives (the gradients' all-reduce).  On one device that is JAX's default device nothing is
moved: the strategy changes nothing but the context.  Elsewhere (``OneDeviceStrategy("/gpu:1")``)
Variables and batches are put on that device.
"""
import weakref
from typing import Any, List, Optional, Sequence, Tuple

import jax
import jax.core
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

from ..compat.device import parse, resolve
from ..core import nest, variable as _variable
from ..core.bind import bind, define
from ..core.devices import device_name
from ..core.tensor import Tensor
from ..data.structure import flatten as _flatten_spec
from .context import Strategy, StrategyExtended
from .reduce import across_replicas, as_reduce_op

__all__ = ["CrossDeviceOps", "HierarchicalCopyAllReduce", "MirroredStrategy", "NcclAllReduce", "OneDeviceStrategy",
           "ReductionToOneDevice"]

AXIS = "data"
_Tracer = jax.core.Tracer


def _constrain(x, *, sharding):
    return jax.lax.with_sharding_constraint(x, sharding)


#: A batch inside a compiled step, constrained to its placement (differentiable: the identity).
_PLACE = define("DistributedInputPlacement", _constrain)


def _device(spec: Any, arg: str) -> Tuple[Any, str]:
    """A JAX device and TF's name for it, from a device name (``"/gpu:0"``, ``"CPU:1"``) or a
    ``jax.Device``.  A name of a device that is not here follows TF's soft placement (JAX's
    default device, TF's name kept)."""
    if isinstance(spec, jax.Device):
        return spec, device_name(spec)
    if not isinstance(spec, str):
        raise TypeError(f"{arg} must be a device name (a string such as '/gpu:0') or a jax.Device; got {spec!r} "
                        f"of type {type(spec).__name__}")
    parsed = parse(spec)
    if parsed.device_type is None:
        raise ValueError(f"{arg}: the device name {spec!r} names no device type (CPU, GPU, TPU)")
    found = resolve(parsed)
    return (found if found is not None else jax.devices()[0]), parsed.to_string()


def _default_device() -> Any:
    d = jax.config.jax_default_device  # pyright: ignore[reportAttributeAccessIssue]
    return d if isinstance(d, jax.Device) else jax.devices()[0]


class _DevicesExtended(StrategyExtended):
    """The devices of a strategy and where its Variables and inputs go."""

    def __init__(self, strategy: Strategy, devices: Sequence[Any], names: Sequence[str]):
        super().__init__(strategy)
        self._devices = tuple(devices)
        self._names = tuple(names)
        self._num_replicas = len(self._devices)
        #: the strategy's mesh (one axis, ``"data"``): ``tapejax.function(..., mesh=...)`` takes it too
        self.mesh = Mesh(np.array(self._devices, dtype=object), (AXIS,))
        if self._num_replicas > 1:
            self._variables: Any = NamedSharding(self.mesh, P())
            self._batch: Any = NamedSharding(self.mesh, P(AXIS))
        else:
            self._variables = self._batch = SingleDeviceSharding(self._devices[0])

    @property
    def worker_devices(self) -> tuple:
        return self._names

    @property
    def parameter_devices(self) -> tuple:
        return self._names

    def _moves(self) -> bool:
        """Whether anything is placed (several devices, or one that is not JAX's default)."""
        return self._num_replicas > 1 or self._devices[0] != _default_device()

    def _placement_key(self) -> Any:
        return (self._devices, self._moves())

    # -- Variables ----------------------------------------------------------------
    def _place_variable(self, var: Any) -> None:
        if not self._moves():
            return
        value = var._val
        if isinstance(value, _Tracer):   # created in a tapejax.function's trace: placed when it
            _AWAITING[id(var)] = (weakref.ref(var), self._variables)   # gets its value (``announce``)
            if _place_created not in _variable.CREATION_HOOKS:
                _variable.CREATION_HOOKS.append(_place_created)
            return
        value = var._value
        if getattr(value, "sharding", None) != self._variables:
            var._value = jax.device_put(value, self._variables)

    # -- inputs -------------------------------------------------------------------
    def _sharding_for(self, shape: Tuple[int, ...]) -> Any:
        if self._num_replicas > 1 and (not shape or shape[0] % self._num_replicas):
            return self._variables   # (replicated: a scalar, or a batch that does not split evenly)
        return self._batch

    def _place_input(self, element: Any) -> Any:
        if not self._moves():
            return element

        def place(x):
            if not isinstance(x, Tensor):
                return x
            value = x._value
            sh = self._sharding_for(tuple(value.shape))
            return x if getattr(value, "sharding", None) == sh else Tensor(jax.device_put(value, sh))

        return nest.map_structure(place, element)

    def _place_traced(self, element: Any) -> Any:
        if self._num_replicas == 1:
            return element   # (a compiled program runs where its inputs are)

        def place(x):
            if not isinstance(x, Tensor):
                return x
            return bind(_PLACE, x, sharding=self._sharding_for(tuple(x._meta.shape)))

        return nest.map_structure(place, element)

    def _global_batches(self, dataset: Any) -> Any:
        """Each global batch: the next ``num_replicas_in_sync`` per-replica batches of
        ``dataset`` (the examples cut again into batches of that many times the first batch's
        size)."""
        n = self._num_replicas
        if n == 1:
            return dataset
        per_replica = _batch_size(dataset)
        if per_replica is None:
            return dataset
        return dataset.unbatch().batch(n * per_replica)


def _batch_size(dataset: Any) -> Optional[int]:
    """The per-replica batch size: the elements' static first dimension, else the first
    element's (None for an empty dataset)."""
    sizes = {s._shape[0] for s in _flatten_spec(dataset.element_spec) if getattr(s, "_shape", None)}
    if len(sizes) == 1 and None not in sizes:
        return int(sizes.pop())
    for element in dataset.take(1):
        shapes = [tuple(x._meta.shape) for x in nest.flatten(element) if isinstance(x, Tensor)]
        shapes = [s for s in shapes if s]
        if not shapes:
            raise ValueError("distribute_datasets_from_function: the dataset's elements must be batches (a first "
                             "dimension in each component) to make global batches of several replicas")
        return int(shapes[0][0])
    return None


# Variables created inside a trace under a strategy's scope: placed when they get their values.
_AWAITING: dict = {}


def _place_created(var: Any) -> None:
    entry = _AWAITING.pop(id(var), None)
    if entry is not None and entry[0]() is var:
        var._value = jax.device_put(var._value, entry[1])
    if not _AWAITING and _place_created in _variable.CREATION_HOOKS:
        _variable.CREATION_HOOKS.remove(_place_created)


# ---------------------------------------------------------------------------
# strategies
# ---------------------------------------------------------------------------

class MirroredStrategy(Strategy):
    """``tf.distribute.MirroredStrategy(devices=None, cross_device_ops=None)``: synchronous data
    parallelism over this process's devices (``devices``: names such as ``"/gpu:0"`` or
    ``jax.Device``s; default: every device of JAX's default backend).  One program over a mesh
    of the devices (see the module docstring); ``cross_device_ops`` is accepted and changes
    nothing (XLA chooses the collectives)."""

    def __init__(self, devices: Any = None, cross_device_ops: Any = None):
        if cross_device_ops is not None and not isinstance(cross_device_ops, CrossDeviceOps):
            raise TypeError("`cross_device_ops` must be a tf.distribute.CrossDeviceOps (NcclAllReduce, "
                            f"HierarchicalCopyAllReduce, ReductionToOneDevice) or None; got {cross_device_ops!r}")
        if isinstance(devices, str):
            raise ValueError(f"`devices` must be a list or tuple of device names; got the string {devices!r}")
        found: List[Any] = []
        names: List[str] = []
        if not devices:
            found = list(jax.local_devices())
            names = [device_name(d) for d in found]
        else:
            for spec in devices:
                d, name = _device(spec, "`devices`")
                found.append(d)
                names.append(name)
        if len(set(names)) != len(names):
            raise ValueError(f"No duplicates allowed in `devices` argument: {tuple(names)}")
        if len(set(found)) != len(found):
            raise ValueError(f"`devices` {tuple(names)} name the same device here more than once (a device that is "
                             "not here stands for JAX's default device): one replica per device")
        self._cross_device_ops = cross_device_ops
        super().__init__(_DevicesExtended(self, found, names))
        self._extended._copies_per_replica = True   # (its ON_READ / SUM Variables: TF's update rule)


class OneDeviceStrategy(Strategy):
    """``tf.distribute.OneDeviceStrategy(device)``: one replica on ``device`` (a name such as
    ``"/gpu:0"``, or a ``jax.Device``): Variables created in its scope and the batches of its
    distributed datasets are put there."""

    def __init__(self, device: Any):
        d, name = _device(device, "`device`")
        super().__init__(_DevicesExtended(self, [d], [name]))


# ---------------------------------------------------------------------------
# cross-device ops
# ---------------------------------------------------------------------------

class CrossDeviceOps:
    """``tf.distribute.CrossDeviceOps``: how TF's replicas exchange values.  Here the replicas
    are one program and XLA inserts its collectives, so a ``CrossDeviceOps`` given to
    ``MirroredStrategy`` changes nothing; its methods reduce the program's (global) values as
    ``Strategy.reduce`` does."""

    def reduce(self, reduce_op, per_replica_value, destinations, options=None) -> Any:
        as_reduce_op(reduce_op)
        return across_replicas(per_replica_value, True)

    def batch_reduce(self, reduce_op, value_destination_pairs, options=None) -> list:
        return [self.reduce(reduce_op, v, d, options) for v, d in value_destination_pairs]

    def broadcast(self, tensor, destinations) -> Any:
        return across_replicas(tensor, True)


class ReductionToOneDevice(CrossDeviceOps):
    """``tf.distribute.ReductionToOneDevice(reduce_to_device=None, accumulation_fn=None)``."""

    def __init__(self, reduce_to_device=None, accumulation_fn=None):
        self.reduce_to_device = reduce_to_device
        self.accumulation_fn = accumulation_fn


class _Packed(CrossDeviceOps):
    _WHAT = ""

    def __init__(self, num_packs=1):
        if num_packs < 0:
            raise ValueError(f"{self._WHAT} requires num_packs >= 0, but {num_packs} is specified")
        self.num_packs = num_packs


class NcclAllReduce(_Packed):
    """``tf.distribute.NcclAllReduce(num_packs=1)``."""

    _WHAT = "NCCL all-reduce"


class HierarchicalCopyAllReduce(_Packed):
    """``tf.distribute.HierarchicalCopyAllReduce(num_packs=1)``."""

    _WHAT = "HierarchicalCopy"
