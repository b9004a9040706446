"""What every node of one pipeline build sees (``Build``): the pipeline's merged options."""
from dataclasses import dataclass
from typing import Optional

from . import args as A
from .options import Options


@dataclass(frozen=True)
class Build:
    """What every node of one build sees: the pipeline's merged options."""

    options: Options

    def threads(self, requested: Optional[int]) -> int:
        """Worker threads for ``num_parallel_calls=requested`` (None: 0, run in order)."""
        if requested is None:
            return 0
        if requested == A.AUTOTUNE:
            if self.options.autotune.enabled is False:
                return 1
            import os
            cap = self.options.threading.private_threadpool_size
            return max(1, min(os.cpu_count() or 1, cap or 1 << 30))
        return requested
