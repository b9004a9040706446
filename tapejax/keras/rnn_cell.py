"""``tf.keras.layers.AbstractRNNCell``: tf.keras' base class of RNN cells, on Keras 3.

Keras 3 dropped the class (any layer with ``state_size`` and ``call(inputs, states)`` is a
cell), but tf.keras code subclasses it, as TF's own docs do::

    class MinimalRNNCell(tf.keras.layers.AbstractRNNCell):
        @property
        def state_size(self): return self.units
        def call(self, inputs, states): ...; return output, output

This is tf_keras' class on Keras 3's ``Layer``: ``call``, ``state_size`` and ``output_size``
are abstract (NotImplementedError), and ``get_initial_state(inputs=None, batch_size=None,
dtype=None)`` gives zeros of ``[batch] + state_size`` for each state (one tensor for an integer
``state_size``, TF's structure for a nested one), the batch size and dtype taken from
``inputs`` where given.  Two adjustments so that Keras 3's ``RNN`` takes such a cell: an
``output_size`` the subclass does not define reads as missing (Keras 3's ``RNN`` looks it up with
``getattr(cell, "output_size", None)`` and falls back to the first state's size, as tf_keras'
does), and ``get_initial_state(batch_size=n)`` without a dtype (Keras 3's call) uses the
cell's compute dtype where tf_keras raises ValueError.  ``install`` puts the class in
``keras.layers``.
"""
from __future__ import annotations

from typing import Any

import keras

from ..core.tensor import Tensor
from .variables import in_keras_scope


class _Abstract(NotImplementedError, AttributeError):
    """An abstract member of ``AbstractRNNCell`` a subclass did not define: NotImplementedError
    as in tf_keras, and missing for ``getattr(cell, name, default)``."""


class AbstractRNNCell(keras.layers.Layer):
    """tf.keras' abstract RNN cell (see the module docstring)."""

    def call(self, inputs: Any, states: Any) -> Any:
        """One step: ``(output, new_states)`` from the step's inputs and the previous states."""
        raise NotImplementedError

    @property
    def state_size(self) -> Any:
        """The size(s) of the cell's state(s): an integer, a shape, or a nested structure of them."""
        raise _Abstract("state_size")

    @property
    def output_size(self) -> Any:
        """The size of the cell's output."""
        raise _Abstract("output_size")

    def get_initial_state(self, inputs: Any = None, batch_size: Any = None, dtype: Any = None) -> Any:
        """Zeros of ``[batch_size] + size`` for each state size (TF's structure)."""
        if inputs is not None:
            batch_size = inputs.shape[0]
            dtype = inputs.dtype
        if dtype is None and batch_size is not None:
            dtype = self.compute_dtype   # (Keras 3's RNN asks without a dtype)
        if batch_size is None or dtype is None:
            raise ValueError("batch_size and dtype cannot be None while constructing initial state. "
                             f"Received: batch_size={batch_size}, dtype={dtype}")
        dtype = getattr(dtype, "name", dtype)   # (a tapejax or NumPy dtype: Keras takes its name)
        size = self.state_size

        def zeros(s: Any) -> Any:
            dims = [s] if isinstance(s, int) else list(getattr(s, "as_list", lambda: s)())
            return keras.ops.zeros([batch_size] + dims, dtype=dtype)

        if isinstance(size, (list, tuple, dict)):   # (a structure of sizes, one per state, as in TF)
            out = keras.tree.map_structure(zeros, size)
        else:
            out = zeros(size)
        if in_keras_scope():   # (Keras's RNN: its arrays)
            return out
        return keras.tree.map_structure(Tensor, out)   # (a user's call: Tensors, as TF gives)


def install(module: Any) -> None:
    """``keras.layers.AbstractRNNCell`` is this class (Keras 3 has none)."""
    module.layers.AbstractRNNCell = AbstractRNNCell


__all__ = ["AbstractRNNCell", "install"]
