"""``tf.type_spec_from_value`` and the type specs ``input_signature`` accepts besides ``TensorSpec``.

TF describes every value a ``tf.function`` can take by a ``TypeSpec``.  tapejax has the specs of
the values TF users pass to a compiled step besides tensors: ``TensorSpec`` (a Tensor, array or
Python number), ``TensorArraySpec`` (a ``TensorArray``: ``tensor_array_args``),
``tf.data.DatasetSpec`` and ``tf.data.IteratorSpec`` (a value's ``_type_spec``, as TF's composite
values carry theirs; ``tapejax.data`` defines them, this package never imports it).

In ``input_signature`` (``signature.bind_signature``) such a spec checks that its argument is compatible (TypeError naming the
argument, TF's class) and passes the value on unchanged; the call is then keyed as without a
signature (a TensorArray by its buffer's shape, a Dataset or iterator by identity).
"""
from __future__ import annotations

from typing import Any

from ..core.convert import convert_to_tensor
from ..core.variable import Variable
from .signature import TensorSpec
from .tensor_array_args import is_tensor_array, spec_of

__all__ = ["type_spec_from_value"]


def type_spec_from_value(value: Any) -> Any:
    """``tf.type_spec_from_value``: the spec of ``value``: its own ``_type_spec`` (a Dataset's
    ``DatasetSpec``, an iterator's ``IteratorSpec``), a TensorArray's ``TensorArraySpec``, else
    the ``TensorSpec`` of ``value`` as a tensor.  TypeError for anything else (a Variable too:
    tapejax has no ``VariableSpec``)."""
    own = getattr(type(value), "_type_spec", None)
    if own is not None and not isinstance(value, type):
        return value._type_spec
    if is_tensor_array(value):
        return spec_of(value)
    if not isinstance(value, Variable) and value is not None:
        try:
            t = convert_to_tensor(value)
        except (TypeError, ValueError):
            pass
        else:
            return TensorSpec(tuple(t._value.shape), t.dtype)
    raise TypeError(f"Could not build a TypeSpec for {value!r} of unsupported type {type(value)}.")
