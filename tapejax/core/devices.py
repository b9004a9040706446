"""TF's names for JAX devices: ``/job:localhost/replica:0/task:T/device:GPU:I``.

TF names a device by its type (``CPU``, ``GPU``, ``TPU``) and its index among
the devices of that type in its task; a JAX device has a platform and a
process index.  The type is the platform in TF's spelling (CUDA and ROCm
devices are ``GPU``), the task is the process index, and the index counts the
devices of one platform in one process in JAX's order.
"""
import functools
from typing import Any

import jax

__all__ = ["device_type", "device_index", "device_name"]

_TYPES = {"cpu": "CPU", "gpu": "GPU", "cuda": "GPU", "rocm": "GPU", "tpu": "TPU"}


def device_type(d: Any) -> str:
    """``CPU``, ``GPU`` or ``TPU`` (another platform: its name in capitals) of a ``jax.Device``."""
    platform: str = d.platform
    return _TYPES.get(platform, platform.upper())


@functools.lru_cache(maxsize=None)
def device_index(d: Any) -> int:
    """The index of ``d`` among its process's devices of its platform."""
    same = [x for x in jax.devices(d.platform) if x.process_index == d.process_index]
    return same.index(d)


def device_name(d: Any) -> str:
    """TF's full device name of the JAX device ``d``."""
    return f"/job:localhost/replica:0/task:{d.process_index}/device:{device_type(d)}:{device_index(d)}"
