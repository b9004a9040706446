"""Module objects built at import time (``tf.math``, ``tf.autodiff``, ``tf.compat.v1`` ...).

``new_module`` fills a ``types.ModuleType`` through its ``__dict__``, so the
members are plain data a reader sees in one place (and a type checker does not
take them for unknown attributes of ``ModuleType``).
"""
import types
from typing import Any, Iterable, Mapping, Optional


def new_module(name: str, doc: str, members: Mapping[str, Any],
               public: Optional[Iterable[str]] = None) -> types.ModuleType:
    """A module ``name`` holding ``members``; its ``__all__`` is ``public`` (default: the member
    names, sorted)."""
    mod = types.ModuleType(name, doc)
    mod.__dict__.update(members)
    mod.__dict__["__all__"] = sorted(members) if public is None else list(public)
    return mod
