"""``tf.device``: a device scope over ``jax.default_device``.

``with tf.device("/GPU:0"):`` makes the named JAX device the default for the
block: new Tensors and Variables are created there, and ops whose inputs are
not committed to a device (tapejax's usual arrays) run there, so their
results live there.  JAX's rule decides the rest: an op on an input committed
to another device (a sharded Variable) runs where that input lives.  Inside a
``tapejax.function`` trace the compiled program runs as one, on its inputs'
devices; a scope there is accepted and places nothing.

A name is parsed as TF's ``DeviceSpec`` does (``/job:localhost/replica:0/
task:0/device:GPU:1``, ``/GPU:1``, ``gpu:1``, ``CPU``; an unknown attribute
such as ``/XPU:0`` is TF's ``ValueError``) and merged with the enclosing scope
(inner fields win; ``None`` or ``""`` clears the scope).  A device that does not
exist here (``/GPU:0`` on a CPU-only machine, ``CPU:3`` with one CPU) follows
TF's soft placement: on (the default) the block runs on JAX's default
device, as TF places such ops on the CPU; off
(``tf.config.set_soft_device_placement(False)``) entering the scope raises TF's
``InvalidArgumentError`` (TF raises it at the scope's first op; tapejax checks
once, before anything runs).  Another job or task raises
``InvalidArgumentError`` ("unknown device") either way.
"""
import threading
from dataclasses import dataclass, replace
from typing import Any, List, Optional

import jax

from ..core.devices import device_index, device_name, device_type
from ..core.errors import InvalidArgumentError

__all__ = ["device", "DeviceSpec", "parse", "soft_placement", "set_soft_placement"]

#: TF's device types (``device_spec._VALID_DEVICE_TYPES``).
_VALID_TYPES = frozenset({"CPU", "GPU", "TPU", "CUSTOM", "EPU"})


@dataclass(frozen=True)
class DeviceSpec:
    """The parts of a TF device name; ``None`` where the name leaves a part out."""

    job: Optional[str] = None
    replica: Optional[int] = None
    task: Optional[int] = None
    device_type: Optional[str] = None
    device_index: Optional[int] = None

    def merged_into(self, outer: "DeviceSpec") -> "DeviceSpec":
        """This spec inside ``outer``'s scope: the fields this one names win."""
        fields = {k: v for k, v in vars(self).items() if v is not None}
        return replace(outer, **fields)

    def to_string(self) -> str:
        """The full name with TF's defaults (``/job:localhost/replica:0/task:0/device:CPU:0``)."""
        return (f"/job:{self.job or 'localhost'}/replica:{self.replica or 0}/task:{self.task or 0}"
                f"/device:{self.device_type}:{0 if self.device_index is None else self.device_index}")


def parse(spec: str) -> DeviceSpec:
    """TF's ``DeviceSpec.from_string``: ValueError for an attribute it does not know."""
    job = replica = task = dtype = index = None
    for part in spec.split("/"):
        y = part.split(":")
        n = len(y)
        if not part:
            continue
        if n == 2 and y[0] == "job":
            job = y[1]
        elif n == 2 and y[0] == "replica":
            replica = int(y[1])
        elif n == 2 and y[0] == "task":
            task = int(y[1])
        elif n in (1, 2) and y[0].upper() in _VALID_TYPES:
            if dtype is not None:
                raise ValueError(f"Multiple device types are not allowed while parsing the device spec: {spec}.")
            dtype = y[0].upper()
            if n == 2 and y[1] != "*":
                index = int(y[1])
        elif n == 3 and y[0] == "device":
            if dtype is not None:
                raise ValueError(f"Multiple device types are not allowed while parsing the device spec: {spec}.")
            dtype = y[1]
            if y[2] != "*":
                index = int(y[2])
        else:
            raise ValueError(f"Unknown attribute '{y[0]}' is encountered while parsing the device spec: '{spec}'.")
    return DeviceSpec(job, replica, task, dtype, index)


class _Local(threading.local):
    specs: List[DeviceSpec]

    def __init__(self):
        self.specs = []   # the merged spec of each enclosing scope, innermost last


_LOCAL = _Local()
_SOFT = [True]


def soft_placement() -> bool:
    """Whether a device that does not exist falls back to the default one (TF's default: True)."""
    return _SOFT[0]


def set_soft_placement(enabled: bool) -> None:
    _SOFT[0] = enabled


def local_devices() -> List[Any]:
    """This process's devices, CPUs first, then the accelerators of JAX's default backend."""
    cpus = jax.local_devices(backend="cpu")
    if jax.default_backend() == "cpu":
        return list(cpus)
    return list(cpus) + [d for d in jax.local_devices() if d not in cpus]


def resolve(spec: DeviceSpec) -> Optional[Any]:
    """The JAX device ``spec`` names, None for "JAX's default" (no type, or soft placement of
    a device that is not here); InvalidArgumentError where TF's placer fails."""
    if (spec.job not in (None, "localhost") or spec.replica not in (None, 0)
            or spec.task not in (None, jax.process_index())):
        raise InvalidArgumentError(None, None, f"{spec.to_string() if spec.device_type else _no_type(spec)} "
                                   "unknown device.")
    if spec.device_type is None:
        return None
    if spec.device_index is not None and spec.device_index < 0:
        raise InvalidArgumentError(None, None, f"Malformed device specification '{spec.to_string()}'")
    index = spec.device_index or 0
    devices = local_devices()
    for d in devices:
        if device_type(d) == spec.device_type and device_index(d) == index:
            return d
    if soft_placement():
        return None
    types = sorted({device_type(d) for d in devices})
    raise InvalidArgumentError(
        None, None, f"Could not satisfy device specification '{spec.to_string()}'. enable_soft_placement=0. "
        f"Supported device types [{', '.join(types)}]. All available devices "
        f"[{', '.join(device_name(d) for d in devices)}].")


def _no_type(spec: DeviceSpec) -> str:
    return f"/job:{spec.job or 'localhost'}/replica:{spec.replica or 0}/task:{spec.task or 0}"


class device:
    """``tf.device(device_name)``: a context manager making that device JAX's default device
    for the block (see the module docstring)."""

    __slots__ = ("_name", "_spec", "_ctx")

    def __init__(self, device_name: Any):
        if callable(device_name):
            raise RuntimeError("tf.device does not support functions.")
        if device_name is not None and not isinstance(device_name, str):
            raise ValueError(f"Expecting a string device name. Got {type(device_name)}({device_name!r})")
        self._name = device_name
        self._spec = parse(device_name) if device_name else None
        self._ctx: Any = None

    def __enter__(self):
        stack = _LOCAL.specs
        if self._spec is None:
            spec = DeviceSpec()
            target = None
        else:
            spec = self._spec.merged_into(stack[-1] if stack else DeviceSpec())
            target = resolve(spec)   # raises before the scope is entered
        ctx = jax.default_device(target)
        ctx.__enter__()
        self._ctx = ctx
        stack.append(spec)
        return self

    def __exit__(self, *exc):
        _LOCAL.specs.pop()
        ctx, self._ctx = self._ctx, None
        return ctx.__exit__(*exc)

    def __repr__(self):
        return f"tapejax.device({self._name!r})"
