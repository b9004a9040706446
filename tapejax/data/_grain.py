"""The one place ``grain`` is imported: ``require()`` gives the module or raises ImportError
naming the ``data`` extra.  ``tapejax.data`` imports without grain; building a Dataset needs it."""
from types import ModuleType
from typing import Optional

_GRAIN: Optional[ModuleType] = None

MESSAGE = ("tapejax.data builds its pipelines on grain, which is not installed: "
           "pip install 'tapejax[data]' (or pip install grain)")


def require() -> ModuleType:
    """The ``grain`` module (imported on first use), or ImportError naming the extra."""
    global _GRAIN
    if _GRAIN is None:
        try:
            import grain
        except ImportError as e:
            raise ImportError(MESSAGE) from e
        _GRAIN = grain
    return _GRAIN
