"""``TensorShape`` and ``Dimension``: a tensor's static shape with TF's methods (the shape of a
``Tensor``, ``tapejax.TensorShape``).

A known-rank shape is a tuple of its sizes (ints, ``None`` for an unknown size), so the shape of
a ``Tensor`` costs one tuple and NumPy / JAX take it as a shape.  TF's ``TensorShape`` is no
tuple, and tapejax's follows TF where the two differ: ``dims`` is a list of ``Dimension``
(``.value``), ``bool(shape)`` is True for every known rank (a scalar's ``()`` too), ``==``
takes lists, tuples and ``None`` (TF's ``as_shape``), ``+`` concatenates.

``TensorShape(None)`` (an unknown rank: a ``Variable`` made with ``shape=tf.TensorShape(None)``,
a ``TensorSpec(None)``) is one instance of a subclass holding no sizes: ``rank`` / ``dims`` are
None, ``len``, iteration and ``as_list`` raise TF's ValueError, indexing gives None, and it is
compatible with every shape.

Inside a trace with symbolic sizes (``compile/polymorphism.py``: an ``input_signature`` with
``None``, ``reduce_retracing``) a dimension can be a JAX symbolic size.  The shape holds it (so
``tf.reshape(x, x.shape[:-1] + [h, d])`` traces), while indexing, ``as_list``, ``dims``,
``repr``, ``is_fully_defined`` and ``num_elements`` give TF's unknown size, ``None`` (so user
code's ``if x.shape[0] is None:`` takes TF's branch; ``int(x.shape[0])`` fails there, and the
function then traces per concrete shape).
"""
from __future__ import annotations

import operator
from typing import Any, Optional, SupportsIndex, overload

import numpy as np


def _known(d) -> bool:
    """Whether a dimension is a number (not None, not a symbolic size of a polymorphic trace)."""
    return isinstance(d, (int, np.integer))


class Dimension:
    """``tf.compat.v1.Dimension``: one size of a ``TensorShape`` (``value``: an int or None).
    Arithmetic with an unknown size is unknown; ``==`` with an unknown size is None (TF's)."""

    __slots__ = ("_value",)

    def __init__(self, value: Any):
        if isinstance(value, Dimension):
            value = value.value
        if value is not None:
            if isinstance(value, float) or isinstance(value, np.floating):
                raise TypeError(f"Dimension value must be integer or None, got {value!r}")
            value = operator.index(value)
            if value < 0:
                raise ValueError(f"Dimension {value} must be >= 0")
        self._value = value

    @property
    def value(self) -> Optional[int]:
        return self._value

    def __int__(self) -> int:
        if self._value is None:
            raise TypeError("Cannot convert an unknown Dimension to an int")
        return self._value

    __index__ = __int__

    def __eq__(self, other):
        other = _dim_value(other)
        return None if self._value is None or other is None else self._value == other

    def __ne__(self, other):
        other = _dim_value(other)
        return None if self._value is None or other is None else self._value != other

    def __hash__(self):
        return hash(self._value)

    def _arith(self, other, fn):
        other = _dim_value(other)
        return Dimension(None if self._value is None or other is None else fn(self._value, other))

    def __add__(self, other):
        return self._arith(other, operator.add)

    __radd__ = __add__

    def __sub__(self, other):
        return self._arith(other, operator.sub)

    def __rsub__(self, other):
        return self._arith(other, lambda a, b: b - a)

    def __mul__(self, other):
        return self._arith(other, operator.mul)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        return self._arith(other, operator.floordiv)

    def __mod__(self, other):
        return self._arith(other, operator.mod)

    def is_compatible_with(self, other) -> bool:
        other = _dim_value(other)
        return self._value is None or other is None or self._value == other

    def merge_with(self, other) -> "Dimension":
        o = _dim_value(other)
        if not self.is_compatible_with(o):
            raise ValueError(f"Dimensions {self} and {Dimension(o)} are not compatible")
        return Dimension(o if self._value is None else self._value)

    def __repr__(self):
        return f"Dimension({self._value})"

    def __str__(self):
        return "?" if self._value is None else str(self._value)


def _dim_value(d: Any) -> Any:
    """A size as a shape holds it: None, an int, or a JAX symbolic size kept as it is; TF's
    ``as_dimension`` errors otherwise (a negative size, a float or a string)."""
    if d is None:
        return d
    if isinstance(d, Dimension):
        return d.value
    if not isinstance(d, (int, np.integer)):
        try:
            d = operator.index(d)   # (a scalar integer tensor: TF's as_dimension)
        except Exception:  # noqa: BLE001 - the class varies
            if type(d).__module__.startswith("jax"):
                return d   # (a symbolic size of a polymorphic trace)
            raise TypeError(f"Dimension value must be integer or None or have an __index__ method, got value "
                            f"{d!r} with type {type(d)!r}") from None
    if d < 0:
        raise ValueError(f"Dimension {d} must be >= 0")
    return int(d)


def dimension_value(d: Any) -> Any:
    """``tf.compat.dimension_value``: a ``Dimension``'s value, or the int / None itself."""
    return d.value if isinstance(d, Dimension) else d


def dimension_at_index(shape: Any, index: int) -> Dimension:
    """``tf.compat.dimension_at_index``: size ``index`` of ``shape`` as a ``Dimension`` (an unknown
    one for a shape of unknown rank)."""
    shape = as_shape(shape)
    return Dimension(None) if shape.rank is None else Dimension(shape[index])


def as_shape(shape: Any) -> "TensorShape":
    """TF's ``as_shape``: ``shape`` itself when a ``TensorShape``, else ``TensorShape(shape)``."""
    return shape if isinstance(shape, TensorShape) else TensorShape(shape)


class TensorShape(tuple):
    """A static shape with TF's methods (see the module docstring): a tuple of sizes."""

    __slots__ = ()

    def __new__(cls, dims: Any = ()):
        if type(dims) is tuple:   # (an array's shape: ints, converted only when one is not)
            for d in dims:
                if type(d) is not int or d < 0:
                    break
            else:
                return tuple.__new__(cls, dims)
        elif dims is None:
            return UNKNOWN_RANK
        if isinstance(dims, TensorShape):
            return dims
        if isinstance(dims, (int, np.integer, Dimension)):
            dims = (dims,)   # TF: a single dimension
        return tuple.__new__(cls, [_dim_value(d) for d in dims])

    def as_list(self) -> list:
        return [d if _known(d) else None for d in self]

    @property
    def rank(self) -> Optional[int]:
        return len(self)

    @property
    def ndims(self) -> Optional[int]:
        return len(self)

    @property
    def dims(self) -> Optional[list]:
        return [Dimension(d if _known(d) else None) for d in self]

    def __bool__(self) -> bool:   # TF: a known rank is true, a scalar's shape too
        return True

    def num_elements(self) -> Optional[int]:
        n = 1
        for d in self:
            if not _known(d):
                return None
            n *= d
        return n

    def is_fully_defined(self) -> bool:
        return all(_known(d) for d in self)

    def assert_is_fully_defined(self) -> None:
        if not self.is_fully_defined():
            raise ValueError(f"Shape {self} is not fully defined")

    def is_compatible_with(self, other) -> bool:
        other = as_shape(other)
        if self.rank is None or other.rank is None:
            return True
        return len(other) == len(self) and all(
            o is None or s is None or o == s for s, o in zip(self.as_list(), other.as_list()))

    def assert_is_compatible_with(self, other) -> None:
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {self} and {other} are incompatible")

    def merge_with(self, other) -> "TensorShape":
        """The shape both describe, each unknown size (or rank) taken from the other one; ValueError
        when they conflict."""
        other = as_shape(other)
        if self.rank is None:
            return other
        if other.rank is None:
            return self
        if not self.is_compatible_with(other):
            raise ValueError(f"Shapes {self} and {other} are not compatible")
        return TensorShape([o if s is None else s for s, o in zip(self, other)])

    def most_specific_compatible_shape(self, other) -> "TensorShape":
        """The most specific shape compatible with both: sizes where they agree, else unknown."""
        other = as_shape(other)
        if self.rank is None or other.rank is None or self.rank != other.rank:
            return UNKNOWN_RANK
        return TensorShape([s if s == o else None for s, o in zip(self, other)])

    def is_subtype_of(self, other) -> bool:
        if not isinstance(other, TensorShape):
            return False
        if other.rank is None:
            return True
        if self.rank != other.rank:
            return False
        return all(o is None or s == o for s, o in zip(self, other))

    def assert_has_rank(self, rank: int) -> None:
        if self.rank not in (None, rank):
            raise ValueError(f"Shape {self} must have rank {rank}")

    def assert_same_rank(self, other) -> None:
        other = as_shape(other)
        if self.rank is not None and other.rank is not None and self.rank != other.rank:
            raise ValueError(f"Shapes {self} and {other} must have the same rank")

    def with_rank(self, rank: int) -> "TensorShape":
        if self.rank is None:
            return TensorShape([None] * rank)
        if self.rank != rank:
            raise ValueError(f"Shape {self} must have rank {rank}")
        return self

    def with_rank_at_least(self, rank: int) -> "TensorShape":
        if self.rank is not None and self.rank < rank:
            raise ValueError(f"Shape {self} must have rank at least {rank}")
        return self

    def with_rank_at_most(self, rank: int) -> "TensorShape":
        if self.rank is not None and self.rank > rank:
            raise ValueError(f"Shape {self} must have rank at most {rank}")
        return self

    def __eq__(self, other):
        if isinstance(other, str):
            return NotImplemented
        try:
            other = as_shape(other)
        except (TypeError, ValueError):
            return NotImplemented
        if self.rank is None or other.rank is None:
            return self.rank is None and other.rank is None
        return tuple.__eq__(self, other)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = tuple.__hash__

    @overload
    def __getitem__(self, key: SupportsIndex) -> Any: ...

    @overload
    def __getitem__(self, key: slice) -> "TensorShape": ...

    def __getitem__(self, key):
        r = tuple.__getitem__(self, key)
        if isinstance(key, slice):
            return TensorShape(r)
        # a symbolic size is TF's unknown size: ``x.shape[0] is None`` under ``TensorSpec([None])``
        return r if r is None or type(r) is int or _known(r) else None

    def concatenate(self, other) -> "TensorShape":
        """TF's: this shape's dimensions followed by ``other``'s (a list, tuple or shape); unknown
        when either rank is."""
        other = as_shape(other)
        if other.rank is None:
            return UNKNOWN_RANK
        return TensorShape(tuple(self) + tuple(other))

    # TF's ``+`` concatenates too: ``tf.reshape(x, x.shape[:-1] + [heads, d])`` (tuple's ``+``
    # took no list, and gave a plain tuple)
    __add__ = concatenate

    def __radd__(self, other) -> "TensorShape":
        return as_shape(other).concatenate(self)

    def __repr__(self):
        return f"TensorShape({self.as_list()})"

    def __str__(self):
        return tuple.__repr__(tuple(self.as_list()))


class _UnknownRank(TensorShape):
    """``TensorShape(None)``: a shape whose rank is unknown (one instance, ``UNKNOWN_RANK``)."""

    __slots__ = ()

    def __new__(cls, dims: Any = None):
        return UNKNOWN_RANK

    def __reduce__(self):
        return (TensorShape, (None,))

    @property
    def rank(self) -> Optional[int]:
        return None

    ndims = rank

    @property
    def dims(self) -> Optional[list]:
        return None

    def __bool__(self) -> bool:
        return False

    def __len__(self) -> int:
        raise ValueError("Cannot take the length of shape with unknown rank.")

    def __iter__(self):
        raise ValueError("Cannot iterate over a shape with unknown rank.")

    def as_list(self) -> list:
        raise ValueError("as_list() is not defined on an unknown TensorShape.")

    def num_elements(self) -> Optional[int]:
        return None

    def is_fully_defined(self) -> bool:
        return False

    def __getitem__(self, key):
        if not isinstance(key, slice):
            return None
        if key.step is not None:
            raise ValueError("Steps are not yet handled")
        start = 0 if key.start is None else key.start
        if key.stop is None or start < 0 or key.stop < 0:   # (TF's: no rank it can tell)
            return self
        return TensorShape([None] * max(key.stop - start, 0))

    def concatenate(self, other) -> "TensorShape":
        as_shape(other)
        return self

    __add__ = concatenate

    def __radd__(self, other) -> "TensorShape":
        return self

    def __hash__(self):
        return hash(None)

    def __repr__(self):
        return "TensorShape(None)"

    def __str__(self):
        return "<unknown>"


# TF's class name for both (``type(shape).__name__``)
_UnknownRank.__name__ = _UnknownRank.__qualname__ = "TensorShape"
UNKNOWN_RANK: TensorShape = tuple.__new__(_UnknownRank, ())

_new_tuple = tuple.__new__


def shape_of(sizes: tuple) -> TensorShape:
    """The ``TensorShape`` of an array's ``shape`` tuple (ints or symbolic sizes), made without
    ``TensorShape(...)``'s look at each size (``core.tensor`` inlines it: a shape is read per op)."""
    return _new_tuple(TensorShape, sizes)
