"""``tf.config``: the devices JAX has, under TF's names, and the placement settings.

Devices come from JAX: this process's CPU devices, then the accelerators of
JAX's default backend (``jax.local_devices()``), named as TF names them
(``PhysicalDevice(name='/physical_device:GPU:0', device_type='GPU')``,
``LogicalDevice(name='/device:GPU:0', device_type='GPU')``; CUDA and ROCm
devices are ``GPU``).  JAX starts its backends at import, so visibility and
virtual devices cannot change afterwards: ``set_visible_devices`` accepts the
current set and otherwise raises TF's ``RuntimeError`` ("cannot be modified
after being initialized"), naming JAX's way (``CUDA_VISIBLE_DEVICES`` /
``JAX_PLATFORMS`` before the first import).

``experimental.set_memory_growth`` is recorded and changes nothing: JAX has
no per-device growth switch at run time.  Its equivalent is the environment,
before JAX starts: ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (grow on demand) or
``XLA_PYTHON_CLIENT_MEM_FRACTION=.5``.  As TF, it refuses non-GPU devices.
``experimental.get_memory_info`` / ``get_memory_usage`` read JAX's allocator statistics
(``Device.memory_stats()``: ``bytes_in_use``, ``peak_bytes_in_use``); the CPU has none, and TF's
default CPU allocator neither (ValueError in both; TF with oneDNN's allocator reports zeros).
``reset_memory_stats`` is not here: JAX has no way to reset a device's peak.
``set_soft_device_placement`` is the switch ``tapejax.device`` reads.
``run_functions_eagerly`` / ``functions_run_eagerly`` are ``tapejax.function``'s
debugging switch, ``set_compilation_cache`` / ``get_compilation_cache`` JAX's persistent
compilation cache for every program tapejax compiles (tapejax's own, not TF's; ``compile.config``).
``set_log_device_placement`` / ``get_log_device_placement`` (``tf.debugging``'s) keep TF's
setting and log nothing: JAX places every op on the default device (``tf.device`` scopes
set it) and has no per-op placement log; ``jax.config.update("jax_log_compiles", True)`` is
its nearest, a log line per compiled program.  The settings JAX fixes when it starts
(threads, logical devices, TF32, determinism) are in ``config_settings``.
"""
import collections
from typing import Any, Dict, List, Optional

from ..compile.config import functions_run_eagerly, get_compilation_cache, run_functions_eagerly, set_compilation_cache
from ..core.devices import device_index, device_type
from ..core.modules import new_module
from . import device as _device
from .config_settings import EXPERIMENTAL, LOGICAL, LogicalDeviceConfiguration, optimizer, threading

__all__ = ["LogicalDevice", "LogicalDeviceConfiguration", "PhysicalDevice", "experimental",
           "experimental_functions_run_eagerly", "experimental_run_functions_eagerly", "functions_run_eagerly",
           "get_compilation_cache", "get_logical_device_configuration", "optimizer", "set_logical_device_configuration",
           "threading",
           "get_log_device_placement", "get_soft_device_placement", "get_visible_devices", "list_logical_devices", "list_physical_devices",
           "run_functions_eagerly", "set_compilation_cache", "set_log_device_placement", "set_soft_device_placement", "set_visible_devices"]

#: TF's records (namedtuples, as in ``tensorflow/python/eager/context.py``).
PhysicalDevice = collections.namedtuple("PhysicalDevice", ["name", "device_type"])
LogicalDevice = collections.namedtuple("LogicalDevice", ["name", "device_type"])


def _physical(d: Any) -> PhysicalDevice:
    return PhysicalDevice(f"/physical_device:{device_type(d)}:{device_index(d)}", device_type(d))


def _jax_device(dev: Any) -> Any:
    """The JAX device behind a PhysicalDevice of this process (TF's ValueError otherwise)."""
    for d in _device.local_devices():
        if _physical(d) == dev:
            return d
    raise ValueError(f"Unrecognized device: {dev!r}")


def list_physical_devices(device_type: Optional[str] = None) -> List[PhysicalDevice]:
    """``tf.config.list_physical_devices``: this process's devices (``device_type`` exact, as TF)."""
    out = [_physical(d) for d in _device.local_devices()]
    return out if device_type is None else [d for d in out if d.device_type == device_type]


def list_logical_devices(device_type: Optional[str] = None) -> List[LogicalDevice]:
    """``tf.config.list_logical_devices``: one logical device per physical one."""
    out = [LogicalDevice(p.name.replace("/physical_device:", "/device:"), p.device_type)
           for p in list_physical_devices()]
    return out if device_type is None else [d for d in out if d.device_type == device_type]


def get_visible_devices(device_type: Optional[str] = None) -> List[PhysicalDevice]:
    """``tf.config.get_visible_devices``: every device (JAX cannot hide one after it started)."""
    return list_physical_devices(device_type)


def set_visible_devices(devices: Any, device_type: Optional[str] = None) -> None:
    """``tf.config.set_visible_devices``: the current set is accepted; any other raises TF's
    RuntimeError (JAX fixed its devices when it started)."""
    devs = [devices] if isinstance(devices, PhysicalDevice) or not isinstance(devices, (list, tuple)) else devices
    wanted = {_jax_device(d) for d in devs}
    current = {d for d in _device.local_devices() if device_type is None or _physical(d).device_type == device_type}
    if wanted != current:
        raise RuntimeError("Visible devices cannot be modified after being initialized (JAX starts its devices "
                           "at import: set CUDA_VISIBLE_DEVICES or JAX_PLATFORMS before importing tapejax)")


def get_soft_device_placement() -> bool:
    """``tf.config.get_soft_device_placement`` (True by default, as TF)."""
    return _device.soft_placement()


def set_soft_device_placement(enabled: bool) -> None:
    """``tf.config.set_soft_device_placement``: whether ``tapejax.device`` of a device that is not
    here runs on the default device (True) or raises InvalidArgumentError (False)."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_soft_device_placement(): `enabled` must be a bool; got {enabled!r} of type "
                        f"{type(enabled).__name__}")
    _device.set_soft_placement(enabled)


def set_logical_device_configuration(device: Any, logical_devices: Any) -> None:
    """``tf.config.set_logical_device_configuration``: one configuration without a memory limit
    (the device as it is) is accepted and kept; anything else raises TF's RuntimeError (see the
    module docstring)."""
    from .config import _jax_device  # (config.py re-exports this module's names)
    _jax_device(device)   # TF's ValueError for a device that is not here
    configs = list(logical_devices) if isinstance(logical_devices, (list, tuple)) else [logical_devices]
    for c in configs:
        if not isinstance(c, LogicalDeviceConfiguration):
            raise ValueError(f"`logical_devices` must be LogicalDeviceConfiguration objects; got {c!r}")
    if len(configs) == 1 and configs[0].memory_limit is None:
        LOGICAL[device] = configs
        return
    raise RuntimeError("Virtual devices cannot be modified after being initialized: JAX fixes its devices when it "
                       "starts. Before importing tapejax set XLA_FLAGS=--xla_force_host_platform_device_count=N for "
                       "N CPU devices, or XLA_PYTHON_CLIENT_MEM_FRACTION / XLA_PYTHON_CLIENT_PREALLOCATE=false to "
                       "bound a GPU's memory.")


def get_logical_device_configuration(device: Any) -> Optional[List[LogicalDeviceConfiguration]]:
    """What ``set_logical_device_configuration`` kept for ``device`` (None: never set, as TF)."""
    _jax_device(device)
    return LOGICAL.get(device)


# -- tf.config.experimental ----------------------------------------------------------------

_MEMORY_GROWTH: Dict[PhysicalDevice, bool] = {}


def set_memory_growth(device: Any, enable: bool) -> None:
    """``tf.config.experimental.set_memory_growth``: recorded, no effect (see the module
    docstring for JAX's equivalent, ``XLA_PYTHON_CLIENT_PREALLOCATE=false``).  TF's
    ValueError for an unknown or non-GPU device."""
    _jax_device(device)
    if device.device_type != "GPU":
        raise ValueError("Cannot set memory growth on non-GPU and non-Pluggable devices")
    _MEMORY_GROWTH[device] = bool(enable)


def get_memory_growth(device: Any) -> bool:
    """``tf.config.experimental.get_memory_growth``: what ``set_memory_growth`` recorded (a GPU
    never set: False; another device: TF's KeyError)."""
    _jax_device(device)
    if device.device_type != "GPU":
        raise KeyError(repr(device))
    return _MEMORY_GROWTH.get(device, False)


def get_memory_info(device: str) -> Dict[str, int]:
    """``tf.config.experimental.get_memory_info('GPU:0')``: ``{'current', 'peak'}`` bytes in use,
    from JAX's allocator statistics (TF's ValueError where there are none: the CPU, as TF's
    default CPU allocator).  ``device`` names a type and an index (``'GPU:0'``, ``'/device:GPU:0'``),
    the type as TF spells it."""
    if not isinstance(device, str):
        raise TypeError(f"get_memory_info(): argument `device` must be a device name string like 'GPU:0'; got "
                        f"{device!r}")
    try:
        spec = _device.parse(device)
    except ValueError:
        spec = None
    if spec is None or spec.device_index is None:
        raise ValueError(f"Failed parsing device name: '{device}'. Note a valid device string should at least contain "
                         'a device type and a device index, like "GPU:0". (argument `device`)')
    typed = device.rsplit("/", 1)[-1].split(":")[-2]   # (TF matches the type as written: 'cpu:0' is no device)
    for d in _device.local_devices():
        if typed == device_type(d) == spec.device_type and device_index(d) == spec.device_index:
            stats = d.memory_stats() if hasattr(d, "memory_stats") else None
            if not stats:
                raise ValueError(f"Allocator stats not available for device '{device}'")
            return {"current": int(stats.get("bytes_in_use", 0)), "peak": int(stats.get("peak_bytes_in_use", 0))}
    raise ValueError(f"No matching devices found for '{device}'")


def get_memory_usage(device: str) -> int:
    """``tf.config.experimental.get_memory_usage`` (deprecated in TF for
    ``get_memory_info(device)['current']``, which it is): bytes in use on ``device``."""
    return get_memory_info(device)["current"]


def get_device_details(device: Any) -> Dict[str, Any]:
    """``tf.config.experimental.get_device_details``: a GPU's ``device_name`` (and its
    ``compute_capability`` where JAX reports one); ``{}`` for other devices, as TF."""
    d = _jax_device(device)
    if device.device_type != "GPU":
        return {}
    out: Dict[str, Any] = {"device_name": d.device_kind}
    cc = getattr(d, "compute_capability", None)
    if cc:
        out["compute_capability"] = tuple(int(x) for x in str(cc).split("."))
    return out


experimental = new_module(
    "tapejax.config.experimental", "``tf.config.experimental``",
    {"set_memory_growth": set_memory_growth, "get_memory_growth": get_memory_growth,
     "get_memory_info": get_memory_info, "get_memory_usage": get_memory_usage, "get_device_details": get_device_details,
     "list_physical_devices": list_physical_devices, "list_logical_devices": list_logical_devices,
     "get_visible_devices": get_visible_devices, "set_visible_devices": set_visible_devices,
     "set_virtual_device_configuration": set_logical_device_configuration,
     "get_virtual_device_configuration": get_logical_device_configuration, **EXPERIMENTAL})

#: TF's older names for ``functions_run_eagerly`` / ``run_functions_eagerly``.
experimental_functions_run_eagerly = functions_run_eagerly
experimental_run_functions_eagerly = run_functions_eagerly


_LOG_DEVICE_PLACEMENT = [False]


def set_log_device_placement(enabled: bool) -> None:
    """``tf.debugging.set_log_device_placement``: kept (see the module docstring: JAX has no
    per-op placement log, so nothing is logged).  ``enabled`` must be a bool (TF's TypeError)."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_log_device_placement(): argument `enabled` must be a bool; got {enabled!r}")
    _LOG_DEVICE_PLACEMENT[0] = enabled


def get_log_device_placement() -> bool:
    """``tf.debugging.get_log_device_placement``: the setting ``set_log_device_placement`` kept."""
    return _LOG_DEVICE_PLACEMENT[0]
