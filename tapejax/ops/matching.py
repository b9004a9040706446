"""TF's conversion rule for the values of a list op (``concat``, ``stack``, ``where``'s pair).

TF's eager list ops convert their Python values with ``args_to_matching_eager``: each takes the
dtype of the first Tensor among them, or, with none, the dtype the first value converts to. So
``tf.stack([half_tensor, [3., 4.]])`` is float16 and ``tf.concat([[1, 2], [3.5]], 0)`` is a
TypeError. Tensors of different dtypes are TF's InvalidArgumentError naming the input.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..core.convert import convert_to_tensor
from ._registry import _TENSORISH, _bad, dtype_of


def matching_values(values: Sequence[Any]) -> Sequence[Any]:
    """``values`` with each Python value converted by TF's rule (the tensors untouched)."""
    if all(isinstance(v, _TENSORISH) for v in values):
        return values
    d0 = next((dtype_of(v) for v in values if isinstance(v, _TENSORISH)), None)
    out = []
    for v in values:
        if not isinstance(v, _TENSORISH):
            v = convert_to_tensor(v, dtype=d0)
        if d0 is None:
            d0 = dtype_of(v)
        out.append(v)
    return out


def check_list_dtypes(values: Sequence[Any], op_type: str) -> None:
    """The tensors of a list op share one dtype (TF's InvalidArgumentError naming the input)."""
    dts = [dtype_of(v) if isinstance(v, _TENSORISH) else None for v in values]
    d0 = next((d for d in dts if d is not None), None)
    for i, d in enumerate(dts):
        if d is not None and d != d0:
            assert d0 is not None  # the first dtype that is not None
            raise _bad(op_type, f"cannot compute {op_type} as input #{i}(zero-based) was expected to be "
                       f"a {d0.name} tensor but is a {d.name} tensor (argument `values`)")
