"""Loop indices that know their linear form while a trace runs (``AffineTensor``).

Inside ``tapejax.function`` a loop index (``for i in tf.range(n)``, a ``tf.while_loop`` variable, a
``scan`` element, an integer argument) is a tracer: its value is known only when the program
runs.  ``xs[i * 3:(i + 1) * 3]`` then has two traced bounds, and XLA needs the slice's *size*
while it traces.  TF's graph computes that size at run time; here it is computed symbolically:
the index is an ``AffineTensor`` that carries, beside its traced value, a linear form
``sum(a_k * s_k) + b`` over *symbols* ``s_k`` (the traced integers it came from) with Python-int
coefficients.  ``+``, ``-``, unary ``-`` and ``*`` by a static integer (a Python int, a
``StaticTensor`` such as ``tf.shape(x)[0] // 4``, a concrete integer Tensor) keep the form;
``//`` and ``%`` by a positive static integer keep it when the coefficients divide, else the
result is a new symbol named by its expression (``(i % 4) * 2`` written twice is the same
symbol).  So ``(i + 1) * 3 - i * 3`` is known to be 3 while tracing, and the slice lowers to
``lax.dynamic_slice`` of a static size (``ops.indexing``).

A symbol may know its range: a ``for`` over ``tf.range`` with static bounds gives its index
``[start, last]``, a ``%`` by ``c`` gives ``[0, c - 1]``; a form's range follows.  A slice whose
range is proven inside the sliced dimension needs no run-time check.

Any other traced integer scalar (a Variable's value, an ``argmax``, a cast) gets a symbol of its
own when one of these operators is applied to it (``lifted``, installed on ``Tensor`` by
``ops.math``), so ``start + 3 - start`` is 3 for it too; an integer scalar Variable's ``+``,
``-``, ``*``, ``//``, ``%`` in a trace apply to its read (``variable_operator``), so
``queue[ptr:ptr + 2]`` is 2 long.  Every other op on an ``AffineTensor`` (``tf.add``,
comparisons, casts ...) gives a plain Tensor, as does flattening it (a loop's state, a
function's result): the form exists only while the trace that made it runs.
"""
from typing import Any, Dict, Optional, Tuple

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ..core import state as _state
from ..core.convert import convert_to_tensor
from ..core.tensor import StaticTensor, Tensor, _flatten, _unflatten

_Tracer = jax.core.Tracer
_Array = type(jnp.zeros(()))   # the concrete array type
_Concrete = type(jax.numpy.zeros(()))


class Sym:
    """A symbol of a linear form: a traced integer (``leaf``, compared by identity) or an
    expression over a form (``op`` ``"//"`` or ``"%"`` by the positive int ``c``), with its range
    ``[lo, hi]`` when known."""

    __slots__ = ("leaf", "op", "form", "c", "lo", "hi", "_hash")

    def __init__(self, leaf: Any = None, op: Optional[str] = None, form: "Optional[Form]" = None, c: int = 0,
                 lo: Optional[int] = None, hi: Optional[int] = None):
        self.leaf, self.op, self.form, self.c, self.lo, self.hi = leaf, op, form, c, lo, hi
        self._hash = hash(id(leaf)) if leaf is not None else hash((op, form, c))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sym):
            return NotImplemented
        if self.leaf is not None or other.leaf is not None:
            return self.leaf is other.leaf
        return self.op == other.op and self.c == other.c and self.form == other.form

    def __repr__(self) -> str:
        return f"s{id(self.leaf) % 10000}" if self.leaf is not None else f"({self.form!r} {self.op} {self.c})"


class Form:
    """``sum(a * s for s, a in terms) + b``: Python-int coefficients over ``Sym``s."""

    __slots__ = ("terms", "b")

    def __init__(self, terms: Dict[Sym, int], b: int):
        self.terms = {s: a for s, a in terms.items() if a}
        self.b = b

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Form) and self.b == other.b and self.terms == other.terms

    def __hash__(self) -> int:
        return hash((frozenset(self.terms.items()), self.b))

    def __repr__(self) -> str:
        parts = [f"{a}*{s!r}" for s, a in self.terms.items()] + [str(self.b)]
        return " + ".join(parts)

    def plus(self, other: "Form", sign: int = 1) -> "Form":
        terms = dict(self.terms)
        for s, a in other.terms.items():
            terms[s] = terms.get(s, 0) + sign * a
        return Form(terms, self.b + sign * other.b)

    def times(self, c: int) -> "Form":
        return Form({s: a * c for s, a in self.terms.items()}, self.b * c)

    def constant(self) -> Optional[int]:
        """The form's value when it has no symbol left (``stop - start`` of a slice)."""
        return None if self.terms else self.b

    def bounds(self) -> Optional[Tuple[int, int]]:
        """``(lo, hi)`` when every symbol's range is known."""
        lo = hi = self.b
        for s, a in self.terms.items():
            if s.lo is None or s.hi is None:
                return None
            lo += min(a * s.lo, a * s.hi)
            hi += max(a * s.lo, a * s.hi)
        return lo, hi


def _int_dtype(v: Any) -> bool:
    return getattr(v.dtype, "kind", None) in ("i", "u") and v.ndim == 0


def static_int(x: Any) -> Optional[int]:
    """``x`` as a Python int when it is known while tracing (a Python int, a NumPy integer, a
    ``StaticTensor`` or a Tensor holding a concrete integer scalar); None otherwise."""
    if isinstance(x, (bool, np.bool_)):
        return None
    if isinstance(x, (int, np.integer)):
        return int(x)
    if type(x) is StaticTensor or type(x) is Tensor:
        v = x._value
        if type(v) is _Concrete and _int_dtype(v):
            return int(v)
    return None


def form_of(x: Any) -> Optional[Form]:
    """The linear form of ``x``: its own for an ``AffineTensor``, a constant for a static integer,
    a fresh symbol for any other traced integer scalar Tensor; None for anything else."""
    if type(x) is AffineTensor:
        return x._form
    c = static_int(x)
    if c is not None:
        return Form({}, c)
    if isinstance(x, Tensor) and type(x._value) is not _Concrete:
        v = x._value
        if isinstance(v, _Tracer) and _int_dtype(v):
            return Form({Sym(leaf=v): 1}, 0)
    return None


class AffineTensor(Tensor):
    """A traced integer scalar Tensor with its linear form (see the module docstring)."""

    __slots__ = ("_form",)

    _form: Form

    def _with(self, out: Any, form: Optional[Form]) -> Any:
        if form is None or not isinstance(out, Tensor) or not isinstance(out._value, _Tracer):
            return out
        return _wrap(out, form)

    def _binary(self, other: Any, op: str, reflected: bool) -> Any:
        base = getattr(Tensor, op if not reflected else "__r" + op[2:])
        out = base(self, other)
        if out is NotImplemented:
            return out
        mine, theirs = self._form, form_of(other)
        if op == "__mul__":
            c = static_int(other)
            return self._with(out, None if c is None else mine.times(c))
        if theirs is None:
            return out
        if op == "__add__":
            return self._with(out, mine.plus(theirs))
        # __sub__: self - other, or other - self when reflected
        return self._with(out, theirs.plus(mine, -1) if reflected else mine.plus(theirs, -1))

    def __add__(self, other):
        return self._binary(other, "__add__", False)

    def __radd__(self, other):
        return self._binary(other, "__add__", True)

    def __sub__(self, other):
        return self._binary(other, "__sub__", False)

    def __rsub__(self, other):
        return self._binary(other, "__sub__", True)

    def __mul__(self, other):
        return self._binary(other, "__mul__", False)

    def __rmul__(self, other):
        return self._binary(other, "__mul__", True)

    def __neg__(self):
        return self._with(Tensor.__neg__(self), self._form.times(-1))

    def __pos__(self):
        return self._with(Tensor.__pos__(self), self._form)

    def __floordiv__(self, other):
        out = Tensor.__floordiv__(self, other)
        c = static_int(other)
        if c is None or c <= 0:
            return out
        f = self._form
        if all(a % c == 0 for a in f.terms.values()):   # (a*s + b) // c == (a/c)*s + b // c
            return self._with(out, Form({s: a // c for s, a in f.terms.items()}, f.b // c))
        r = f.bounds()
        sym = Sym(op="//", form=f, c=c, lo=None if r is None else r[0] // c, hi=None if r is None else r[1] // c)
        return self._with(out, Form({sym: 1}, 0))

    def __mod__(self, other):
        out = Tensor.__mod__(self, other)
        c = static_int(other)
        if c is None or c <= 0:
            return out
        f = self._form
        if all(a % c == 0 for a in f.terms.values()):   # (a*s + b) % c == b % c
            return self._with(out, Form({}, f.b % c))
        return self._with(out, Form({Sym(op="%", form=f, c=c, lo=0, hi=c - 1): 1}, 0))


def _wrap(t: Tensor, form: Form) -> AffineTensor:
    out = AffineTensor.__new__(AffineTensor)
    out._value, out._id, out._form = t._value, t._id, form
    return out


def index(x: Any, lo: Optional[int] = None, hi: Optional[int] = None) -> Any:
    """``x`` (a Tensor or an array) as an ``AffineTensor`` symbol when it is a traced integer
    scalar, with its range ``[lo, hi]`` when known; anything else unchanged (an array as a
    Tensor)."""
    t = x if isinstance(x, Tensor) else Tensor(x)
    v = t._value
    if not isinstance(v, _Tracer) or not _int_dtype(v):
        return t
    if type(t) is AffineTensor and lo is None:
        return t
    return _wrap(t, Form({Sym(leaf=v, lo=lo, hi=hi): 1}, 0))


def lifted(name: str, fn: Any) -> Any:
    """The Tensor operator ``name`` (``fn``: the op) that gives a traced integer scalar a linear
    form first: ``start = ptr.read_value(); x[start:start + 3]`` (any traced integer, not only a
    loop index) then knows its size, 3, while tracing.  (A binary op's own operators take
    ``lift(name)`` into their body instead: ``ops._binary.binary_operator``.)"""
    # (every Tensor operator runs this: a concrete array is ruled out by one type compare, before
    # the slower isinstance against JAX's Tracer)
    def unary(a: Any) -> Any:
        if type(a) is Tensor:
            v = a._value
            if type(v) is not _Array and isinstance(v, _Tracer) and _int_dtype(v):
                return getattr(index(a), name)()
        return fn(a)

    def binary(a: Any, b: Any) -> Any:
        if type(a) is Tensor:
            v = a._value
            if type(v) is not _Array and isinstance(v, _Tracer) and _int_dtype(v):
                return getattr(index(a), name)(b)
        return fn(a, b)

    op = unary if name in UNARY else binary
    op.__name__ = name
    return op


def lift(name: str) -> Any:
    """``lift(a, b)`` for the binary Tensor operator ``name``: ``a`` (a Tensor whose value is no
    concrete array) as a linear form's ``AffineTensor`` and the operator applied to it when ``a``
    is a traced integer scalar, else None (the op runs as it is)."""
    def lift_(a: Tensor, b: Any) -> Any:
        v = a._value
        if isinstance(v, _Tracer) and _int_dtype(v):
            return getattr(index(a), name)(b)
        return None

    lift_.__name__ = f"lift{name}"
    return lift_


def variable_operator(tensor_op: Any, fn: Any) -> Any:
    """A Variable's binary operator (``fn``: the op) that, in a trace, applies the Tensor operator
    ``tensor_op`` to an integer scalar Variable's read, so the read gets its linear form:
    ``queue[ptr:ptr + 2].assign(k)`` then knows its size, 2 (``ptr``'s reads between two assigns
    are one traced value, ``ops.indexing_traced``)."""
    def op(a: Any, b: Any) -> Any:
        # (a Keras variable, whose operators these are too, has a tuple shape and a string dtype)
        if _state._local.collector is not None and getattr(a.shape, "rank", None) == 0 \
                and getattr(a.dtype, "is_integer", False):
            return tensor_op(convert_to_tensor(a), b)
        return fn(a, b)

    op.__name__ = fn.__name__
    return op


UNARY = ("__neg__", "__pos__")

#: the operators an ``AffineTensor`` keeps a form through
FORM_OPERATORS = ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__neg__", "__pos__",
                  "__floordiv__", "__mod__")


# a pytree as a Tensor (unflattened, it is a plain Tensor: the form lives only in its trace)
jax.tree_util.register_pytree_node(AffineTensor, _flatten, _unflatten)

__all__ = ["AffineTensor", "FORM_OPERATORS", "Form", "Sym", "form_of", "index", "lift", "lifted", "static_int", "UNARY", "variable_operator"]
