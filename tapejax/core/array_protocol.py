"""``__jax_array__`` that lets a ``jax.Array`` operand defer to a Tensor's operator.

``jax_array * tensor``: JAX's operator (``jax._src.numpy.array_methods``'s
``_operator_mul``) asks the right operand for ``__jax_array__`` and, given it,
computes the product itself, before Python tries ``Tensor.__rmul__``.  The
result was a ``jax.Array`` no tape saw: ``x @ w`` with ``x`` a JAX batch and
``w`` a Variable gave the gradient ``None``.  TF's rule is NumPy's: an ndarray
on the left defers to the Tensor (``__array_priority__``), the Tensor's
operator runs and is recorded.  ``protocol(fn)`` makes ``__jax_array__`` a
descriptor that is absent (``None``) to JAX's operator functions only, so they
return ``NotImplemented`` and Python calls the Tensor's reflected operator
(converting the array as TF converts a NumPy operand); ``jnp.asarray(t)``,
``jnp.sin(t)`` and every other caller get the method.
"""
import sys
from typing import Any, Callable

_OPERATORS = "jax._src.numpy.array_methods"


class protocol:
    """The ``__jax_array__`` method ``fn``, hidden from ``jax.Array``'s binary operators."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Any], Any]):
        self.fn = fn

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return self.fn
        caller = sys._getframe(1)
        if caller.f_code.co_name.startswith("_operator_") and caller.f_globals.get("__name__") == _OPERATORS:
            return None
        return self.fn.__get__(obj, cls)


__all__ = ["protocol"]
