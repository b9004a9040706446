"""The static asserts of ``tf.debugging``: ranks, shapes, dtypes.

Shapes are always known in tapejax (XLA compiles static shapes, and a
``tapejax.function`` traces with concrete shapes), so these asserts decide at
the call and raise what TF raises when it knows the shape statically:
``ValueError`` for ranks and sizes, ``TypeError`` for dtypes, with TF's
messages (``Tensor  must have rank 2.  Received rank 1, shape (3,)``; TF's
eager tensors have no name, hence the two spaces).
"""
from typing import Any, Optional

import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor

__all__ = ["assert_rank", "assert_rank_at_least", "assert_rank_in", "assert_scalar", "assert_shapes",
           "assert_type"]


def _prefix(message: Optional[str]) -> str:
    return f"{message}.  " if message else ""


def _tensor(x: Any):
    return convert_to_tensor(x)


def _static_int(value: Any, what: str) -> int:
    """A rank argument: a Python int or a scalar integer tensor (TF: "Rank must be a scalar.")."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (list, tuple)):
        raise ValueError(f"{what.capitalize()} must be a scalar.")
    a = np.asarray(convert_to_tensor(value)._value)   # (a traced rank: TF's dynamic rank, not supported)
    if a.ndim != 0:
        raise ValueError(f"{what.capitalize()} must be a scalar.")
    if a.dtype.kind not in "iu":
        raise TypeError(f"{what.capitalize()} must be an integer; got dtype {a.dtype.name}")
    return int(a)


def assert_rank(x, rank, message=None, name=None):
    """``tf.debugging.assert_rank``: ValueError unless ``x`` has rank ``rank``."""
    t = _tensor(x)
    r = _static_int(rank, "rank")
    if t.ndim != r:
        raise ValueError(f"{_prefix(message)}Tensor  must have rank {r}.  Received rank {t.ndim}, "
                         f"shape {t.shape}")


def assert_rank_at_least(x, rank, message=None, name=None):
    """``tf.debugging.assert_rank_at_least``: ValueError unless ``x``'s rank is >= ``rank``."""
    t = _tensor(x)
    r = _static_int(rank, "rank")
    if t.ndim < r:
        raise ValueError(f"{_prefix(message)}Tensor  must have rank at least {r}.  Received rank {t.ndim}, "
                         f"shape {t.shape}")


def assert_rank_in(x, ranks, message=None, name=None):
    """``tf.debugging.assert_rank_in``: ValueError unless ``x``'s rank is one of ``ranks``."""
    t = _tensor(x)
    rs = tuple(_static_int(r, "rank") for r in ranks)
    if t.ndim not in rs:
        raise ValueError(f"{_prefix(message)}Tensor  must have rank in {rs}.  Received rank {t.ndim}, "
                         f"shape {t.shape}")


def assert_scalar(tensor, message=None, name=None):
    """``tf.debugging.assert_scalar``: ValueError unless ``tensor`` is 0-d; returns it."""
    t = _tensor(tensor)
    if t.ndim != 0:
        raise ValueError(f"{_prefix(message)}Expected scalar shape, saw shape: {t.shape}.")
    return t


def assert_type(tensor, tf_type, message=None, name=None):
    """``tf.debugging.assert_type``: TypeError unless ``tensor``'s dtype is ``tf_type``."""
    t = _tensor(tensor)
    want = _dtypes.as_dtype(tf_type)
    if t.dtype != want:
        raise TypeError(f"{_prefix(message)}tensor must be of type tf.{want.name}; got tf.{t.dtype.name}")


def _shape_dtype(t) -> str:
    return f"shape={t.shape} dtype={t.dtype.name}"


def _is_known(size: Any) -> bool:
    if size is None:
        return False
    try:
        int(size)
    except (TypeError, ValueError):
        return False
    return True


def assert_shapes(shapes, data=None, summarize=None, message=None, name=None):
    """``tf.debugging.assert_shapes``: ``shapes`` is a list of ``(tensor, spec)``; a spec lists
    each dimension as an int (that size), a string symbol (one size shared by every tensor that
    names it), ``None`` or ``'.'`` (any size); a leading ``...`` (Python's Ellipsis) or ``'*'``
    allows any number of outer dimensions.  A scalar counts as rank 1 of size 1 (TF's rule).  ValueError on a
    mismatch, with TF's message."""
    prefix = _prefix(message)
    if isinstance(shapes, dict):   # TF: its eager tensors are unhashable keys
        raise TypeError("Tensor is unhashable. Instead, use tensor.ref() as the key.")
    entries = []
    for x, spec in shapes:
        if spec is None:
            continue
        t = _tensor(x)
        if not (hasattr(spec, "__iter__") or hasattr(spec, "__getitem__")):
            raise ValueError(f"{prefix}Tensor {_shape_dtype(t)}.  Specified shape must be an iterable.  An "
                             "iterable has the attribute `__iter__` or `__getitem__`.  Received specified "
                             f"shape: {spec}")
        spec = tuple(spec)
        outer = False
        for i, sym in enumerate(spec):
            if sym is Ellipsis or (isinstance(sym, str) and sym == "*"):   # (the string '...' is a name)
                if i != 0:
                    raise ValueError(f"{prefix}Tensor {_shape_dtype(t)} specified shape index {i}.  Symbol "
                                     "`...` or `*` for a variable number of unspecified dimensions is only "
                                     "allowed as the first entry")
                outer = True
        sizes = spec[1:] if outer else spec
        entries.append((t, outer, tuple(t.shape) if t.ndim else (1,), sizes or (1,)))
    for t, outer, _actual, sizes in entries:   # ranks first, as TF
        rank = len(sizes)
        if outer:
            if rank > 1:
                assert_rank_at_least(t, rank, message=message)
        elif rank in (0, 1):
            assert_rank_in(t, [0, 1], message=message)
        else:
            assert_rank(t, rank, message=message)
    seen: dict = {}
    for t, outer, actual, sizes in entries:
        for i, sym in enumerate(sizes):
            if sym is None or (isinstance(sym, str) and sym == "."):
                continue
            dim = i - len(sizes) if outer else i
            if _is_known(sym):
                want, why = int(sym), "Specified explicitly"
            elif sym in seen:
                want, by, at = seen[sym]
                why = f"Specified by tensor {_shape_dtype(by)} dimension {at}"
            else:
                seen[sym] = (actual[dim], t, dim)
                continue
            if actual[dim] != want:
                raise ValueError(f"{prefix}{why}.  Tensor {_shape_dtype(t)} dimension {dim} must have size "
                                 f"{want}.  Received size {actual[dim]}, shape {t.shape}")
