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
"""
from typing import Any, Dict, Optional, Tuple, TypeVar

_O = TypeVar("_O", bound="_OptionsBase")


class _OptionsBase:
    """A group of options: declared attributes only (TF's AttributeError otherwise), each None
    until set, type-checked when set; ``merge`` lets set values of a later group win."""

    _FIELDS: Dict[str, Tuple[type, ...]] = {}
    _GROUPS: Dict[str, type] = {}
    _ALIASES: Dict[str, str] = {}

    def __init__(self):
        for name in self._FIELDS:
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
        object.__setattr__(self, name, value)

    def merge(self: _O, other: _O) -> _O:
        out = type(self)()
        for name in self._FIELDS:
            mine, theirs = getattr(self, name), getattr(other, name)
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


class AutotuneOptions(_OptionsBase):
    enabled: Optional[bool]
    cpu_budget: Optional[int]
    ram_budget: Optional[int]
    _FIELDS = {"enabled": (bool,), "cpu_budget": (int,), "ram_budget": (int,)}


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
    autotune: AutotuneOptions
    threading: ThreadingOptions
    experimental_optimization: "OptimizationOptions"

    _FIELDS = {"deterministic": (bool,), "experimental_slack": (bool,), "experimental_warm_start": (bool,),
               "experimental_symbolic_checkpoint": (bool,), "dataset_name": (str,)}
    _GROUPS = {"autotune": AutotuneOptions, "threading": ThreadingOptions,
               "experimental_optimization": OptimizationOptions}

    _ALIASES = {"experimental_deterministic": "deterministic"}

    @property
    def experimental_deterministic(self):
        return self.deterministic


__all__ = ["Options", "AutotuneOptions", "ThreadingOptions", "OptimizationOptions"]
