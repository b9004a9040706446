"""``tf.data.Options``: the option groups TF has, with TF's strict attribute setting.

What each option does here (grain runs the pipeline, not TF's runtime):

* ``deterministic = False``: a ``map(num_parallel_calls=N)`` over a stream gives elements as
  they finish (a ``map``'s own ``deterministic=`` argument wins).  Over random-access input,
  and everywhere else, elements keep their order (which TF's ``False`` allows).
* ``threading.private_threadpool_size``: the most worker threads one ``map`` uses (for
  ``num_parallel_calls=AUTOTUNE``: this, else the machine's CPU count; an explicit N is capped
  by it).
* ``autotune.enabled = False``: ``AUTOTUNE`` means one thread and a prefetch buffer of one.
* accepted no-ops, kept by ``options()``: ``threading.max_intra_op_parallelism``,
  ``autotune.cpu_budget`` / ``ram_budget``, ``experimental_optimization.*`` (TF's graph
  rewrites: map fusion, map-and-batch fusion, ``map_parallelization``, ``inject_prefetch`` ...;
  grain's pipeline is not rewritten, and a ``map`` is already compiled with ``jax.jit``),
  ``experimental_slack``, ``experimental_warm_start``, ``experimental_symbolic_checkpoint``
  (iterator checkpoints are always small here: see the README).
* carried, typed and merged, but with nothing to act on here: ``experimental_distribute``
  (``DistributeOptions``: ``auto_shard_policy``, an ``AutoShardPolicy``, default ``AUTO``;
  ``num_devices``: ``tapejax.distribute`` runs one pipeline per process and splits its global
  batches over the devices, so no worker shards a dataset), ``autotune.autotune_algorithm``
  (an ``AutotuneAlgorithm``: grain has no autotuner), ``experimental_external_state_policy`` (an
  ``ExternalStatePolicy``: an iterator over ``from_generator`` is never saved, TF's own rule for
  it; other functions' state is not part of a saved iterator).
"""
import enum
from typing import Any, Dict, Optional, Tuple, TypeVar

_O = TypeVar("_O", bound="_OptionsBase")


class _OptionsBase:
    """A group of options: declared attributes only (TF's AttributeError otherwise), each None
    until set, type-checked when set; ``merge`` lets set values of a later group win."""

    _FIELDS: Dict[str, Tuple[type, ...]] = {}
    _GROUPS: Dict[str, type] = {}
    _ALIASES: Dict[str, str] = {}
    #: what an unset field reads as (it stays unset for ``merge``)
    _DEFAULTS: Dict[str, Any] = {}

    def __init__(self):
        for name in self._FIELDS:
            if name not in self._DEFAULTS:
                object.__setattr__(self, name, None)
        for name, cls in self._GROUPS.items():
            object.__setattr__(self, name, cls())

    def __setattr__(self, name: str, value: Any) -> None:
        name = self._ALIASES.get(name, name)
        if name in self._GROUPS:
            if not isinstance(value, self._GROUPS[name]):
                raise TypeError(f"`{name}` must be a {self._GROUPS[name].__name__}; got {value!r}")
        elif name in self._FIELDS:
            types = self._FIELDS[name]
            if value is not None and (not isinstance(value, types) or (bool not in types and isinstance(value, bool))):
                raise TypeError(f"Option `{name}` must be of type {' or '.join(t.__name__ for t in types)}; "
                                f"got {value!r} of type {type(value).__name__}")
        else:
            raise AttributeError(f"Cannot set the property {name} on {type(self).__name__}.")
        if value is None and name in self._DEFAULTS:
            self.__dict__.pop(name, None)
            return
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:   # (only for a field left unset that has a default)
        defaults = type(self)._DEFAULTS
        if name in defaults:
            return defaults[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def merge(self: _O, other: _O) -> _O:
        out = type(self)()
        for name in self._FIELDS:
            mine, theirs = self.__dict__.get(name), other.__dict__.get(name)
            if theirs is not None or mine is not None:
                object.__setattr__(out, name, theirs if theirs is not None else mine)
        for name in self._GROUPS:
            object.__setattr__(out, name, getattr(self, name).merge(getattr(other, name)))
        return out

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and all(
            getattr(self, n) == getattr(other, n) for n in list(self._FIELDS) + list(self._GROUPS))

    def __repr__(self) -> str:
        set_ = [f"{n}={getattr(self, n)!r}" for n in self._FIELDS if getattr(self, n) is not None]
        return f"{type(self).__name__}({', '.join(set_)})"


class AutoShardPolicy(enum.IntEnum):
    """``tf.data.experimental.AutoShardPolicy``: how ``tf.distribute`` would shard a dataset."""
    OFF = -1
    AUTO = 0
    FILE = 1
    DATA = 2
    HINT = 3


class AutotuneAlgorithm(enum.Enum):
    """``tf.data.experimental.AutotuneAlgorithm``: TF's autotuner's algorithm."""
    DEFAULT = 0
    HILL_CLIMB = 1
    GRADIENT_DESCENT = 2
    MAX_PARALLELISM = 3
    STAGE_BASED = 4


class ExternalStatePolicy(enum.Enum):
    """``tf.data.experimental.ExternalStatePolicy``: what saving a pipeline with external state does."""
    WARN = 0
    IGNORE = 1
    FAIL = 2


class AutotuneOptions(_OptionsBase):
    enabled: Optional[bool]
    cpu_budget: Optional[int]
    ram_budget: Optional[int]
    autotune_algorithm: Optional[AutotuneAlgorithm]
    _FIELDS = {"enabled": (bool,), "cpu_budget": (int,), "ram_budget": (int,),
               "autotune_algorithm": (AutotuneAlgorithm,)}


class DistributeOptions(_OptionsBase):
    """``tf.data.experimental.DistributeOptions`` (``Options.experimental_distribute``)."""
    auto_shard_policy: AutoShardPolicy
    num_devices: Optional[int]
    _FIELDS = {"auto_shard_policy": (AutoShardPolicy,), "num_devices": (int,)}
    _DEFAULTS = {"auto_shard_policy": AutoShardPolicy.AUTO}


class ThreadingOptions(_OptionsBase):
    max_intra_op_parallelism: Optional[int]
    private_threadpool_size: Optional[int]
    _FIELDS = {"max_intra_op_parallelism": (int,), "private_threadpool_size": (int,)}


class OptimizationOptions(_OptionsBase):
    _FIELDS = {name: (bool,) for name in (
        "apply_default_optimizations", "filter_fusion", "inject_prefetch", "map_and_batch_fusion",
        "map_and_filter_fusion", "map_fusion", "map_parallelization", "noop_elimination", "parallel_batch",
        "shuffle_and_repeat_fusion")}


class Options(_OptionsBase):
    """``tf.data.Options``: set attributes, then ``dataset.with_options(options)``."""

    deterministic: Optional[bool]
    experimental_slack: Optional[bool]
    experimental_warm_start: Optional[bool]
    experimental_symbolic_checkpoint: Optional[bool]
    dataset_name: Optional[str]
    experimental_external_state_policy: Optional[ExternalStatePolicy]
    autotune: AutotuneOptions
    experimental_distribute: DistributeOptions
    threading: ThreadingOptions
    experimental_optimization: "OptimizationOptions"

    _FIELDS = {"deterministic": (bool,), "experimental_slack": (bool,), "experimental_warm_start": (bool,),
               "experimental_symbolic_checkpoint": (bool,), "dataset_name": (str,),
               "experimental_external_state_policy": (ExternalStatePolicy,)}
    _GROUPS = {"autotune": AutotuneOptions, "threading": ThreadingOptions,
               "experimental_optimization": OptimizationOptions, "experimental_distribute": DistributeOptions}

    _ALIASES = {"experimental_deterministic": "deterministic"}

    @property
    def experimental_deterministic(self):
        return self.deterministic


#: ``tf.data.experimental.enable_debug_mode()``: set once, read when datasets are made and built.
_DEBUG_MODE = [False]


def debug_mode() -> bool:
    """Whether ``enable_debug_mode()`` was called: dataset functions run eagerly, one thread."""
    return _DEBUG_MODE[0]


def toggle_debug_mode(on: bool) -> None:
    _DEBUG_MODE[0] = bool(on)


__all__ = ["Options", "AutotuneOptions", "ThreadingOptions", "OptimizationOptions", "DistributeOptions",
           "AutoShardPolicy", "AutotuneAlgorithm", "ExternalStatePolicy", "debug_mode", "toggle_debug_mode"]
