"""What every node of one pipeline build sees (``Build``): the pipeline's merged options and the
iteration's random draws.

One ``Build`` serves one ``Iterator``, including the rebuilds a stream ``repeat`` makes per
epoch.  ``draw(shuffle)`` gives each ``shuffle`` in the plan the iteration number its order is
seeded with: drawn once per iterator (from the shuffle's own counter, so each ``iter(dataset)``
gets a new order) and kept in ``draws``, which is what an iterator checkpoint saves; a restore
presets ``draws``, so the rebuilt pipeline has the saved orders.
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

from . import args as A
from .options import Options, debug_mode


@dataclass
class Build:
    """What every node of one build sees: the pipeline's merged options, the shuffles' draws
    (``id(shuffle) -> iteration number``) and their rebuild counts, and whether the last stream
    made from the plan reads a random-access node directly (``output_random_access``)."""

    options: Options
    draws: Dict[int, int] = field(default_factory=dict)
    rebuilds: Dict[int, int] = field(default_factory=dict)
    output_random_access: bool = False

    def threads(self, requested: Optional[int]) -> int:
        """Worker threads for ``num_parallel_calls=requested`` (None, or debug mode: 0, run in order)."""
        if requested is None or debug_mode():
            return 0
        if requested == A.AUTOTUNE:
            if self.options.autotune.enabled is False:
                return 1
            import os
            cap = self.options.threading.private_threadpool_size
            return max(1, min(os.cpu_count() or 1, cap or 1 << 30))
        cap = self.options.threading.private_threadpool_size
        return min(requested, cap) if cap else requested

    def draw(self, node: Any, fresh: Callable[[], int]) -> "tuple[int, int]":
        """``(iteration, rebuild)`` for one build of ``node``: the iteration number (``fresh()`` the
        first time in this build, the kept one afterwards) and how many times it was built before."""
        key = id(node)
        if key not in self.draws:
            self.draws[key] = fresh()
        n = self.rebuilds.get(key, 0)
        self.rebuilds[key] = n + 1
        return self.draws[key], n
