"""``TensorShape``: a tensor's shape, a tuple of ints with TF's ``TensorShape`` methods (the
shape of a ``Tensor``, ``tapejax.TensorShape``)."""
import numpy as np


def _known(d) -> bool:
    """Whether a dimension is a number (not a symbolic size of a polymorphic trace)."""
    return isinstance(d, (int, np.integer))


class TensorShape(tuple):
    """A shape; a tuple of ints with TF's ``TensorShape`` methods.

    Inside a trace with symbolic sizes (``compile/polymorphism.py``: an ``input_signature`` with
    ``None``, ``reduce_retracing``) a dimension can be a JAX symbolic size; indexing gives it
    (so ``tf.reshape(x, [x.shape[0], -1])`` traces), while ``as_list``, ``repr``,
    ``is_fully_defined`` and ``num_elements`` show it as TF's unknown size, ``None``.
    """

    __slots__ = ()

    def as_list(self) -> list:
        return [d if _known(d) else None for d in self]

    @property
    def rank(self):
        return len(self)

    @property
    def ndims(self):
        return len(self)

    @property
    def dims(self):
        return list(self)

    def num_elements(self):
        n = 1
        for d in self:
            if not _known(d):
                return None
            n *= d
        return n

    def is_fully_defined(self):
        return all(_known(d) for d in self)

    def is_compatible_with(self, other):
        other = tuple(other)
        return len(other) == len(self) and all(o is None or o == s for s, o in zip(self, other))

    def __eq__(self, other):
        if isinstance(other, (list, tuple)):
            return tuple.__eq__(self, tuple(other))
        return NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = tuple.__hash__

    def __getitem__(self, key):
        r = tuple.__getitem__(self, key)
        return TensorShape(r) if isinstance(key, slice) else r

    def concatenate(self, other) -> "TensorShape":
        """TF's: this shape's dimensions followed by ``other``'s (a list, tuple or shape)."""
        return TensorShape(tuple(self) + tuple(other))

    # TF's ``+`` concatenates too: ``tf.reshape(x, x.shape[:-1] + [heads, d])`` (tuple's ``+``
    # took no list, and gave a plain tuple)
    __add__ = concatenate

    def __radd__(self, other) -> "TensorShape":
        return TensorShape(tuple(other) + tuple(self))

    def __repr__(self):
        return f"TensorShape({self.as_list()})"

    def __str__(self):
        return tuple.__repr__(tuple(self.as_list()))
