"""Several devices: where a ``tapejax.function`` with a ``mesh`` puts its inputs and Variables.

``in_specs`` is one ``PartitionSpec`` for every dynamic argument, or a
sequence with one per positional argument (``None``: replicated);
``variable_specs(var)`` gives a Variable's spec (default replicated).  The
compiled program constrains each assigned Variable's new value to its
sharding, so Variables keep their placement across steps; XLA inserts the
collectives.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import jax

from ..core.ownership import slot_owner
from .signature import arg_key

P = jax.sharding.PartitionSpec


def check_spec(name: str, spec: Any, allow_seq: bool) -> None:
    if spec is None or isinstance(spec, P):
        return
    if allow_seq and isinstance(spec, (list, tuple)) and all(x is None or isinstance(x, P) for x in spec):
        return
    raise TypeError(f"{name} must be a jax.sharding.PartitionSpec" + (" or a sequence of them (one per "
                    "positional argument, None for replicated)" if allow_seq else "") + f"; got {spec!r}")


class MeshPlan:
    """A mesh with the specs of a function's inputs and Variables."""

    __slots__ = ("mesh", "in_specs", "variable_specs")

    def __init__(self, mesh, in_specs, variable_specs: Optional[Callable[[Any], Any]]):
        if not isinstance(mesh, jax.sharding.Mesh):
            raise TypeError(f"mesh must be a jax.sharding.Mesh; got {mesh!r} of type {type(mesh).__name__}")
        check_spec("in_specs", in_specs, allow_seq=True)
        if variable_specs is not None and not callable(variable_specs):
            raise TypeError("variable_specs must be a callable Variable -> PartitionSpec (or None for "
                            f"replicated); got {variable_specs!r}")
        self.mesh = mesh
        self.in_specs = in_specs
        self.variable_specs = variable_specs

    def var_sharding(self, var) -> jax.sharding.NamedSharding:
        spec = self.variable_specs(var) if self.variable_specs is not None else None
        if spec is None and self.variable_specs is not None:
            owner = slot_owner(var)   # optimizer state is placed like the Variable it belongs to
            if owner is not None:
                spec = self.variable_specs(owner)
        if spec is not None and not isinstance(spec, P):
            raise TypeError(f"variable_specs({var.name}) must return a PartitionSpec or None; got {spec!r}")
        return jax.sharding.NamedSharding(self.mesh, spec if spec is not None else P())

    def constrain(self, var, value):
        return jax.lax.with_sharding_constraint(value, self.var_sharding(var))

    def input_shardings(self, args: Sequence[Any], kwargs, fname: str) -> List[jax.sharding.NamedSharding]:
        """One NamedSharding per dynamic leaf, in the order ``arg_key`` collects them."""
        specs = self.in_specs
        per_arg = isinstance(specs, (list, tuple))
        if per_arg and len(specs) != len(args):
            raise ValueError(f"in_specs has {len(specs)} entries but `{fname}` was called with "
                             f"{len(args)} positional arguments")
        out: List[Any] = []
        for i, a in enumerate(args):
            n: List[Any] = []
            arg_key(a, n)
            out.extend([specs[i] if per_arg else specs] * len(n))
        if kwargs:
            n = []
            arg_key(kwargs, n)
            out.extend([None if per_arg else specs] * len(n))
        return [jax.sharding.NamedSharding(self.mesh, s if s is not None else P()) for s in out]

    @staticmethod
    def place_inputs(dyn: Sequence[Any], shardings: Sequence[Any]) -> List[Any]:
        return [d if getattr(d, "sharding", None) == s else jax.device_put(d, s)
                for d, s in zip(dyn, shardings)]

    def place_variables(self, variables: Sequence[Any]) -> None:
        for v in variables:
            sh = self.var_sharding(v)
            if getattr(v._value, "sharding", None) != sh:
                v._value = jax.device_put(v._value, sh)


__all__ = ["MeshPlan", "check_spec"]
