"""``tf.experimental.Optional`` (also ``tf.data.experimental.Optional``): a value that may be absent.

TF's Optional is a variant tensor; here it is a small Python record: the value (a structure of
Tensors, or None when empty) and its ``element_spec``.  ``Iterator.get_next_as_optional()``
gives one per call (empty after the last element, where ``get_next`` raises), for the eager
pattern ``while opt.has_value(): use(opt.get_value()); opt = it.get_next_as_optional()``.
``has_value()`` is a scalar bool Tensor, as TF's; ``get_value()`` of an empty Optional raises
TF's InvalidArgumentError.  ``from_value`` converts with tf.data's nesting rules (tuples and dicts
are structure, a list is one tensor) and works inside ``tapejax.function`` too.  It is a JAX
pytree (its flag and its value's components), so it is a loop variable of a converted ``while``
(``while opt.has_value(): ...; opt = it.get_next_as_optional()`` inside a ``tapejax.function``)
and a result of a staged ``if``.
"""
from typing import Any, Sequence, Tuple

import jax

from ..compile.signature import TensorSpec
from ..core.convert import constant, convert_to_tensor
from ..core.errors import InvalidArgumentError
from ..core.tensor import Tensor
from ..ops.array import zeros
from ..ops.checks import require
from . import structure as S

_EMPTY = object()


def _spec_of_value(value: Any) -> Any:
    if value is None:
        return S.NoneTensorSpec()
    if isinstance(value, Tensor):
        return TensorSpec(tuple(value._value.shape), value.dtype)
    if hasattr(type(value), "_build_stream"):   # a Dataset (this module imports none: no cycle)
        return S.DatasetSpec(value.element_spec)
    raise TypeError(f"Optional: {value!r} is not a tensor component")


def _is_spec(x: Any) -> bool:
    return isinstance(x, (TensorSpec, S.NoneTensorSpec, S.DatasetSpec))


class Optional:
    """``tf.experimental.Optional``: ``has_value()``, ``get_value()``, ``element_spec``; made by
    ``Optional.from_value(value)``, ``Optional.empty(element_spec)`` or
    ``Iterator.get_next_as_optional()``."""

    __slots__ = ("_value", "_spec", "_flag")

    def __init__(self, value: Any, element_spec: Any, _token: Any = None, _flag: Any = None):
        if _token is not _EMPTY:
            raise TypeError("Can't instantiate Optional directly: use Optional.from_value(value), "
                            "Optional.empty(element_spec) or Iterator.get_next_as_optional().")
        self._value = value
        self._spec = element_spec
        self._flag = _flag   # a traced bool Tensor: known at run time only (``from_flag``)

    @staticmethod
    def from_value(value: Any) -> "Optional":
        """An Optional holding ``value`` (a structure of tensors; Python and NumPy values become Tensors)."""
        leaves = S.flatten(value)
        if all(v is None for v in leaves):
            raise InvalidArgumentError(None, None, "Optional.from_value: `value` must hold at least one tensor "
                                       f"component; got {value!r} (Length for attr 'Toutput_types' of 0 must be "
                                       "at least minimum 1).")
        comps = [c if c is None or isinstance(c, Tensor) or hasattr(type(c), "_build_stream") else convert_to_tensor(c)
                 for c in leaves]
        packed = S.pack(value, comps)
        return Optional(packed, S.pack(value, [_spec_of_value(c) for c in comps]), _EMPTY)

    @staticmethod
    def empty(element_spec: Any) -> "Optional":
        """An Optional with no value whose value would have ``element_spec`` (a structure of
        ``TensorSpec`` s)."""
        leaves = S.flatten(element_spec)
        bad = [s for s in leaves if not _is_spec(s)]
        if bad or not leaves:
            raise TypeError("Optional.empty: `element_spec` must be a (nested) structure of tf.TypeSpec "
                            f"(TensorSpec ...); got {element_spec!r}.")
        return Optional(None, element_spec, _EMPTY)

    def has_value(self, name: Any = None) -> Tensor:
        """A scalar bool Tensor: whether a value is held."""
        if self._flag is not None:
            return self._flag
        return constant(self._value is not None)

    def get_value(self, name: Any = None) -> Any:
        """The value; InvalidArgumentError when the Optional is empty (when the step runs, for an
        Optional read inside a ``tapejax.function``)."""
        if self._flag is not None:
            require(self._flag._value, "The given optional does not have a value.")
            return self._value
        if self._value is None:
            raise InvalidArgumentError(None, None, "The given optional does not have a value.")
        return self._value

    @property
    def element_spec(self) -> Any:
        """The structure of the value's specs (a ``TensorSpec`` per component)."""
        return self._spec

    def __repr__(self) -> str:
        state = "known when the step runs" if self._flag is not None else (
            "empty" if self._value is None else "has a value")
        return f"<Optional ({state}) element_spec={self._spec!r}>"


def _flatten(opt: Optional) -> Tuple[Tuple[Any, ...], Any]:
    """An Optional as a JAX pytree (a loop variable of a converted ``while``, a ``cond`` result):
    its ``has_value()`` flag and its value's components (zeros of ``element_spec`` when empty, as
    a traced Optional's); ``element_spec`` is the static part."""
    value = opt._value
    if value is None:
        specs = S.flatten(opt._spec)
        if not all(isinstance(sp, TensorSpec) and sp.shape is not None and sp.shape.is_fully_defined() for sp in specs):
            raise ValueError(f"An empty Optional whose element_spec is not fully defined ({opt._spec!r}) cannot be "
                             "a loop variable or a branch result of compiled control flow: XLA needs the value's "
                             "shape")
        comps = [zeros(sp.shape, sp.dtype) for sp in specs]
    else:
        comps = S.flatten(value)
    return (opt.has_value(), *comps), opt._spec


def _unflatten(spec: Any, kids: Sequence[Any]) -> Optional:
    flag, *comps = kids
    return Optional(S.pack(spec, comps), spec, _EMPTY, flag)


jax.tree_util.register_pytree_node(Optional, _flatten, _unflatten)


def from_element(element: Any, element_spec: Any) -> Optional:
    """An Optional holding an iterator's element (already Tensors in ``element_spec``'s structure)."""
    return Optional(element, element_spec, _EMPTY)


def from_flag(flag: Tensor, element: Any, element_spec: Any) -> Optional:
    """An Optional read inside a ``tapejax.function`` (``staged.staged_optional``): ``flag`` is the
    traced ``has_value()``, ``element`` the traced value (zeros when empty; ``get_value`` checks)."""
    return Optional(element, element_spec, _EMPTY, flag)


__all__ = ["Optional"]
