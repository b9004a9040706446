"""``tf.config``'s runtime settings that JAX fixes when it starts, or has no switch for.

* ``enable_tensor_float_32_execution(False)`` is JAX's ``jax_default_matmul_precision =
  "highest"`` (float32 matmuls and convolutions in full float32 on GPUs and TPUs); ``True``
  restores JAX's default (TF32 / bfloat16 passes where the hardware has them).  It applies to
  programs traced afterwards, as TF's to ops run afterwards.  On a CPU both are exact.
* ``enable_op_determinism()``: XLA's CPU programs are deterministic already; on a GPU, XLA
  needs ``XLA_FLAGS=--xla_gpu_deterministic_ops=true`` before JAX starts, which tapejax cannot
  set afterwards: the call logs that once where it is missing.
* ``threading.set_*_op_parallelism_threads``, ``optimizer.set_jit`` /
  ``set_experimental_options``, ``experimental.set_device_policy`` /
  ``set_synchronous_execution``: TF's values are kept and read back as TF gives them, and change
  nothing: XLA sizes its CPU thread pool when JAX starts (``XLA_FLAGS=
  --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=N`` before import), every
  ``tapejax.function`` is XLA-compiled (``jit_compile`` is always on), JAX moves arrays between
  devices as TF's ``silent`` policy, and JAX dispatches asynchronously
  (``jax.block_until_ready`` waits).
* ``set_logical_device_configuration``: JAX fixes its devices when it starts (as TF does once
  its runtime is up: RuntimeError), so the current configuration is accepted and any other
  raises, naming JAX's ways (``XLA_FLAGS=--xla_force_host_platform_device_count=N`` for N CPU
  devices, ``XLA_PYTHON_CLIENT_MEM_FRACTION`` for a GPU memory cap).
"""
import logging
import os
from typing import Any, Dict, List, NamedTuple, Optional

import jax

from ..core.modules import new_module

_log = logging.getLogger("tapejax")


class LogicalDeviceConfiguration(NamedTuple):
    """``tf.config.LogicalDeviceConfiguration``: one logical device of a physical one."""
    memory_limit: Optional[int] = None
    experimental_priority: Optional[int] = None
    experimental_device_ordinal: Optional[int] = None


#: What ``config.set_logical_device_configuration`` kept, by physical device.
LOGICAL: Dict[Any, List[LogicalDeviceConfiguration]] = {}


# -- numerics ----------------------------------------------------------------------------------

def tensor_float_32_execution_enabled() -> bool:
    """Whether float32 matmuls may use TF32 (JAX's default precision): True unless
    ``enable_tensor_float_32_execution(False)`` set ``jax_default_matmul_precision``."""
    return jax.config.jax_default_matmul_precision not in ("highest", "float32")  # pyright: ignore[reportAttributeAccessIssue]


def enable_tensor_float_32_execution(enabled: Any) -> None:
    """``tf.config.experimental.enable_tensor_float_32_execution`` (see the module docstring)."""
    jax.config.update("jax_default_matmul_precision", None if enabled else "highest")


_DETERMINISM = [False]


def enable_op_determinism() -> None:
    """``tf.config.experimental.enable_op_determinism`` (see the module docstring)."""
    _DETERMINISM[0] = True
    if jax.default_backend() == "gpu" and "xla_gpu_deterministic_ops" not in os.environ.get("XLA_FLAGS", ""):
        _log.warning("enable_op_determinism: XLA's GPU programs are deterministic only with "
                     "XLA_FLAGS=--xla_gpu_deterministic_ops=true set before JAX starts (before importing tapejax).")


def op_determinism_enabled() -> bool:
    """Whether ``enable_op_determinism`` was called."""
    return _DETERMINISM[0]


# -- kept settings -----------------------------------------------------------------------------

_THREADS = {"intra": 0, "inter": 0}


def _threads(n: Any, what: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"set_{what}_op_parallelism_threads(): `num_threads` must be an int; got {n!r}")
    return n


def set_intra_op_parallelism_threads(num_threads: Any) -> None:
    _THREADS["intra"] = _threads(num_threads, "intra")


def get_intra_op_parallelism_threads() -> int:
    return _THREADS["intra"]


def set_inter_op_parallelism_threads(num_threads: Any) -> None:
    _THREADS["inter"] = _threads(num_threads, "inter")


def get_inter_op_parallelism_threads() -> int:
    return _THREADS["inter"]


_JIT = [""]
_OPTIONS: Dict[str, Any] = {}


def set_jit(enabled: Any) -> None:
    """``tf.config.optimizer.set_jit``: True or ``"autoclustering"`` read back as
    ``"autoclustering"``, anything else as ``""`` (TF's)."""
    _JIT[0] = "autoclustering" if enabled is True or enabled == "autoclustering" else ""


def get_jit() -> str:
    return _JIT[0]


def set_experimental_options(options: Any) -> None:
    """``tf.config.optimizer.set_experimental_options``: Grappler's options, kept."""
    if not isinstance(options, dict):
        raise TypeError(f"set_experimental_options(): `options` must be a dict; got {options!r}")
    _OPTIONS.update(options)


def get_experimental_options() -> Dict[str, Any]:
    return {**_OPTIONS, "disable_model_pruning": _OPTIONS.get("disable_model_pruning", False),
            "disable_meta_optimizer": _OPTIONS.get("disable_meta_optimizer", False)}


_POLICIES = (None, "warn", "explicit", "silent", "silent_for_int32")
_POLICY = ["silent"]
_SYNC = [True]


def set_device_policy(device_policy: Any) -> None:
    if device_policy not in _POLICIES:
        raise ValueError(f"Invalid argument `device_policy`: {device_policy!r}. Expected one of {_POLICIES}.")
    _POLICY[0] = "silent" if device_policy is None else device_policy


def get_device_policy() -> str:
    return _POLICY[0]


def set_synchronous_execution(enable: Any) -> None:
    _SYNC[0] = bool(enable)


def get_synchronous_execution() -> bool:
    return _SYNC[0]


threading = new_module(
    "tapejax.config.threading", "``tf.config.threading``: TF's thread settings, kept (tapejax.compat.config_settings).",
    {"get_inter_op_parallelism_threads": get_inter_op_parallelism_threads,
     "get_intra_op_parallelism_threads": get_intra_op_parallelism_threads,
     "set_inter_op_parallelism_threads": set_inter_op_parallelism_threads,
     "set_intra_op_parallelism_threads": set_intra_op_parallelism_threads})

optimizer = new_module(
    "tapejax.config.optimizer", "``tf.config.optimizer``: TF's graph-optimizer settings, kept (tapejax.compat.config_settings).",
    {"get_experimental_options": get_experimental_options, "get_jit": get_jit,
     "set_experimental_options": set_experimental_options, "set_jit": set_jit})

#: ``tf.config.experimental``'s names defined here.
EXPERIMENTAL = {
    "enable_op_determinism": enable_op_determinism, "enable_tensor_float_32_execution": enable_tensor_float_32_execution,
    "tensor_float_32_execution_enabled": tensor_float_32_execution_enabled, "get_device_policy": get_device_policy,
    "set_device_policy": set_device_policy, "get_synchronous_execution": get_synchronous_execution,
    "set_synchronous_execution": set_synchronous_execution,
    "VirtualDeviceConfiguration": LogicalDeviceConfiguration,
}

__all__ = ["EXPERIMENTAL", "LOGICAL", "LogicalDeviceConfiguration", "enable_op_determinism",
           "enable_tensor_float_32_execution", "op_determinism_enabled", "optimizer", "tensor_float_32_execution_enabled",
           "threading"]
