"""TF's small top-level utilities around ops: graph-era names that are no-ops or identities when
ops run eagerly (``control_dependencies``, ``group``, ``no_op``, ``tuple``, ``identity_n``,
``guarantee_const``), questions about the execution context (``executing_eagerly``,
``inside_function``, ``is_symbolic_tensor``, ``get_static_value``), ``timestamp``, ``get_logger``,
``get_current_name_scope``, the enums ``AggregationMethod`` / ``VariableAggregation`` /
``VariableSynchronization``, TF2's initializer classes (``tf.constant_initializer`` ...),
``parallel_stack``, and ``tf.nest.assert_same_structure``.

Ordering: tapejax runs a program's statements in order (eagerly, or traced in order by
``tapejax.function``, where every Variable update is part of the program), so TF's control
dependencies hold without being declared: ``control_dependencies`` is a context manager that
changes nothing, as TF's is when executing eagerly.
"""
import builtins
import contextlib
import enum
import logging
import time
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ..core import dtypes as _dtypes, nest as _nest, state as _state
from ..core.convert import convert_to_tensor
from ..core.tensor import Tensor
from ..core.variable import Variable
from .array import stack
from .math import identity


@contextlib.contextmanager
def _nothing():
    yield


def control_dependencies(control_inputs):
    """``tf.control_dependencies``: a context manager that changes nothing (see the module docstring).
    ``control_inputs`` must be a list (or None), as TF checks."""
    if control_inputs is not None and not isinstance(control_inputs, (list, builtins.tuple)) and not callable(control_inputs):
        raise TypeError(f"`control_inputs` must be a list of tensors or operations, or None; got {control_inputs!r}")
    return _nothing()


def no_op(name=None):
    """``tf.no_op``: nothing (None, as eager TF)."""
    return None


def group(*inputs, **kwargs):
    """``tf.group``: None, as eager TF (the inputs already ran)."""
    return None


def tuple(tensors, name=None, control_inputs=None):  # noqa: A001  (TF's name)
    """``tf.tuple``: the tensors as a list (TF groups them for graphs)."""
    return [None if t is None else identity(t) for t in tensors]


def identity_n(input, name=None):  # noqa: A002
    """``tf.identity_n``: ``identity`` of each tensor of the list."""
    return [identity(t) for t in input]


def guarantee_const(input, name=None):  # noqa: A002
    """``tf.guarantee_const``: the tensor itself (an optimization hint in TF graphs)."""
    return identity(input)


def executing_eagerly():
    """``tf.executing_eagerly``: False while a ``tapejax.function`` traces its body, True otherwise."""
    return _state._local.collector is None


def inside_function():
    """``tf.inside_function``: True while a ``tapejax.function`` traces its body."""
    return _state._local.collector is not None


def is_symbolic_tensor(tensor):
    """``tf.is_symbolic_tensor``: a Tensor whose value is traced (inside a compiled function)."""
    return isinstance(tensor, Tensor) and isinstance(tensor._meta, jax.core.Tracer)


def get_static_value(tensor, partial=False):
    """``tf.get_static_value``: the value as NumPy data when it is known now (not traced, not a
    Variable), else None."""
    if tensor is None or hasattr(tensor, "_read"):
        return None   # (a Variable's value can change: TF gives None too)
    if isinstance(tensor, Tensor):
        if isinstance(tensor._value, jax.core.Tracer):
            return None
        return np.asarray(tensor._value)
    try:
        return np.asarray(convert_to_tensor(tensor)._value)
    except (TypeError, ValueError):
        return None


def timestamp(name=None):
    """``tf.timestamp``: seconds since the epoch, a float64 Tensor (JAX's 64-bit mode is needed for
    float64: without it a TypeError says how to enable it, as everywhere in tapejax)."""
    _dtypes.require_representable(np.dtype(np.float64), "timestamp")
    return Tensor(jnp.asarray(time.time(), jnp.float64))


def get_logger():
    """``tf.get_logger``: tapejax's logger (``logging.getLogger("tapejax")``)."""
    return logging.getLogger("tapejax")


def get_current_name_scope():
    """``tf.get_current_name_scope``: the name scope being built (``"outer/inner"``; ``""`` outside)."""
    return (_state._local.name_scope or "").rstrip("/")


def parallel_stack(values, name="parallel_stack"):
    """``tf.parallel_stack``: ``stack(values, axis=0)`` inside a ``tapejax.function``; eagerly TF's
    RuntimeError (TF has no eager form of it)."""
    if executing_eagerly():
        raise RuntimeError("tf.parallel_stack() is not compatible with eager execution (use tf.stack, or call it "
                           "inside a tapejax.function)")
    return stack(values, axis=0)


class AggregationMethod:
    """``tf.AggregationMethod``: how ``tf.gradients`` sums gradients (tapejax sums them in one
    compiled program whichever is named)."""
    ADD_N = 0
    DEFAULT = ADD_N
    EXPERIMENTAL_TREE = 1
    EXPERIMENTAL_ACCUMULATE_N = 2


class VariableAggregation(enum.Enum):
    """``tf.VariableAggregation`` (accepted by ``tf.Variable``; one replica here)."""
    NONE = 0
    SUM = 1
    MEAN = 2
    ONLY_FIRST_REPLICA = 3


class VariableSynchronization(enum.Enum):
    """``tf.VariableSynchronization`` (accepted by ``tf.Variable``; one replica here)."""
    AUTO = 0
    NONE = 1
    ON_WRITE = 2
    ON_READ = 3


def _sync_property(i: int, default: enum.Enum) -> property:
    """``Variable.synchronization`` / ``.aggregation``: the mode given to ``tf.Variable`` (TF's
    default AUTO / NONE when none was)."""
    def get(v: Any) -> Any:
        given = (getattr(v, "_sync", None) or (None, None))[i]
        return default if given is None else given
    return property(get)


Variable.synchronization = _sync_property(0, VariableSynchronization.AUTO)   # type: ignore[attr-defined]
Variable.aggregation = _sync_property(1, VariableAggregation.NONE)   # type: ignore[attr-defined]


class _Initializer:
    """TF2's initializer protocol: ``init(shape, dtype=tf.float32)`` returns a Tensor."""

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class constant_initializer(_Initializer):  # noqa: N801  (TF's name)
    """``tf.constant_initializer(value)``: a scalar filled in, or a value of the requested size reshaped."""

    def __init__(self, value=0):
        self.value = value

    def __call__(self, shape, dtype=_dtypes.float32, **kwargs):
        v = np.asarray(getattr(self.value, "_value", self.value))
        shape = _shape_tuple(shape)
        d = _dtypes.as_dtype(dtype)._np
        if v.size == 1:
            return Tensor(jnp.full(shape, v.reshape(()), d))
        if v.size != int(np.prod(shape)):
            raise TypeError(f"Eager execution of tf.constant with unsupported shape. Tensor {self.value!r} has "
                            f"{v.size} elements, but got `shape` {shape} with {int(np.prod(shape))} elements")
        return Tensor(jnp.asarray(v.reshape(shape), d))

    def get_config(self):
        return {"value": self.value}


class zeros_initializer(_Initializer):  # noqa: N801
    """``tf.zeros_initializer()``."""

    def __call__(self, shape, dtype=_dtypes.float32, **kwargs):
        return Tensor(jnp.zeros(_shape_tuple(shape), _dtypes.as_dtype(dtype)._np))


class ones_initializer(_Initializer):  # noqa: N801
    """``tf.ones_initializer()``."""

    def __call__(self, shape, dtype=_dtypes.float32, **kwargs):
        return Tensor(jnp.ones(_shape_tuple(shape), _dtypes.as_dtype(dtype)._np))


class random_normal_initializer(_Initializer):  # noqa: N801
    """``tf.random_normal_initializer(mean, stddev, seed)``: ``tapejax.random.normal``, or with a
    ``seed`` ``stateless_normal`` with seed ``[seed, 0]`` (TF's rule: the same values every call)."""

    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def __call__(self, shape, dtype=_dtypes.float32, **kwargs):
        if self.seed is not None:   # TF: a seeded initializer draws the same values on every call
            from .rng import stateless_normal
            return stateless_normal(_shape_tuple(shape), [int(self.seed), 0], self.mean, self.stddev, dtype)
        from .random import normal
        return normal(_shape_tuple(shape), self.mean, self.stddev, dtype)

    def get_config(self):
        return {"mean": self.mean, "stddev": self.stddev, "seed": self.seed}


class random_uniform_initializer(_Initializer):  # noqa: N801
    """``tf.random_uniform_initializer(minval, maxval, seed)``: ``tapejax.random.uniform`` (with a
    ``seed``: ``stateless_uniform``, as ``random_normal_initializer``)."""

    def __init__(self, minval=-0.05, maxval=0.05, seed=None):
        self.minval: Any = minval
        self.maxval: Any = maxval
        self.seed = seed

    def __call__(self, shape, dtype=_dtypes.float32, **kwargs):
        if self.seed is not None:   # (as random_normal_initializer)
            from .rng import stateless_uniform
            return stateless_uniform(_shape_tuple(shape), [int(self.seed), 0], self.minval, self.maxval, dtype)
        from .random import uniform
        return uniform(_shape_tuple(shape), self.minval, self.maxval, dtype)

    def get_config(self):
        return {"minval": self.minval, "maxval": self.maxval, "seed": self.seed}


def _shape_tuple(shape):
    """A shape argument as a tuple of ints (``tuple`` is TF's op name in this module)."""
    return builtins.tuple(int(d) for d in np.asarray(getattr(shape, "_value", shape)).reshape(-1))


#: ``tf.nest.assert_same_structure`` (``core.nest``: ``map_structure`` of several structures checks with it)
assert_same_structure = _nest.assert_same_structure


__all__ = ["AggregationMethod", "VariableAggregation", "VariableSynchronization", "assert_same_structure",
           "constant_initializer", "control_dependencies", "executing_eagerly", "get_current_name_scope", "get_logger",
           "get_static_value", "group", "guarantee_const", "identity_n", "inside_function", "is_symbolic_tensor",
           "no_op", "ones_initializer", "parallel_stack", "random_normal_initializer", "random_uniform_initializer",
           "timestamp", "tuple", "zeros_initializer"]
