"""Input signatures and cache keys of ``tapejax.function``: ``TensorSpec``, the binding of a call
to an ``input_signature``, and the walk that splits a call's arguments into the dynamic leaves
(Tensors and arrays, keyed by shape and dtype) and the static rest (Python values by value,
Variables and other objects by identity), plus the templates that put them back together."""

import jax
import jax.core
import numpy as np

from ..core import dtypes as _dtypes
from ..core.convert import convert_to_tensor
from ..core.tensor import Tensor
from ..core.variable import Variable

_Tracer = jax.core.Tracer
_Array = jax.Array


class TensorSpec:
    """``tf.TensorSpec``: a shape (``None`` for any size) and a dtype."""

    __slots__ = ("_shape", "_dtype", "_name")

    def __init__(self, shape, dtype=_dtypes.float32, name=None):
        self._shape = None if shape is None else tuple(None if d is None else int(d) for d in shape)
        self._dtype = _dtypes.as_dtype(dtype)
        self._name = name

    @property
    def shape(self):
        return self._shape

    @property
    def dtype(self):
        return self._dtype

    @property
    def name(self):
        return self._name

    def is_compatible_with(self, x):
        shape = tuple(x.shape)
        if np.dtype(x.dtype) != self._dtype._np:
            return False
        if self._shape is None:
            return True
        return len(shape) == len(self._shape) and all(s is None or s == d for s, d in zip(self._shape, shape))

    def __eq__(self, other):
        return (isinstance(other, TensorSpec) and self._shape == other._shape
                and self._dtype == other._dtype and self._name == other._name)

    def __hash__(self):
        return hash((self._shape, self._dtype.name, self._name))

    def __repr__(self):
        shape = None if self._shape is None else list(self._shape)
        return f"TensorSpec(shape={tuple(shape) if shape is not None else None}, dtype=tf.{self._dtype.name}, name={self._name!r})"


def _spec_of(x):
    return f"TensorSpec(shape={tuple(x.shape)}, dtype=tf.{np.dtype(x.dtype).name}, name=None)"


def _bind_signature(signature, args, kwargs, fname):
    """TF's input_signature binding: every argument a Tensor compatible with its spec."""
    if kwargs:
        raise TypeError(f"{fname}: with an input_signature, pass the arguments positionally; "
                        f"got keyword arguments {sorted(kwargs)}")
    if len(args) != len(signature):
        raise TypeError(f"Binding inputs to tapejax.function `{fname}` failed: the input_signature "
                        f"has {len(signature)} argument(s) but the call passed {len(args)}.")
    out = []
    for i, (a, spec) in enumerate(zip(args, signature)):
        if isinstance(a, (Tensor, Variable, _Array, np.ndarray)):
            t = convert_to_tensor(a)
        else:
            try:
                t = convert_to_tensor(a, dtype=spec.dtype)
            except (TypeError, ValueError) as e:
                raise TypeError(f"Binding inputs to tapejax.function `{fname}` failed: argument {i} "
                                f"{a!r} cannot be converted to {spec!r}: {e}") from None
        if not spec.is_compatible_with(t._value):
            raise TypeError(f"Binding inputs to tapejax.function `{fname}` failed due to `Can not cast "
                            f"{_spec_of(t._value)} to {spec!r}` (argument {i}).")
        out.append(t)
    return tuple(out)


# ---------------------------------------------------------------------------
# Argument keys: dynamic arrays by shape/dtype, Python values by value
# ---------------------------------------------------------------------------

_DYN = object()  # marks a dynamic leaf in a template


def _aval_key(v):
    return v.aval   # shape, dtype, weak type (and sharding): hashable, and what jit keys on


def _key(x, dyn):
    """Hashable key of one argument; appends its dynamic arrays to ``dyn``."""
    t = type(x)
    if t is Tensor:
        v = x._value
        dyn.append(v)
        return _aval_key(v)
    if t is tuple or t is list:
        return (t, tuple([_key(e, dyn) for e in x]))
    if t is dict:
        return (dict, tuple([(k, _key(x[k], dyn)) for k in sorted(x)]))
    if t in (int, float, bool, str, type(None)):
        return (t, x)
    if isinstance(x, Tensor):
        v = x._value
        dyn.append(v)
        return _aval_key(v)
    if isinstance(x, Variable):
        return ("var", x._id)
    if isinstance(x, (_Array, _Tracer)):
        dyn.append(x)
        return _aval_key(x)
    if isinstance(x, (np.ndarray, np.generic)):
        v = convert_to_tensor(x)._value
        dyn.append(v)
        return ("np", _aval_key(v))
    if isinstance(x, tuple) and hasattr(x, "_fields"):  # namedtuple
        return (t, tuple([_key(e, dyn) for e in x]))
    if t in (bytes, complex, type) or isinstance(x, (np.dtype, _dtypes.DType)):
        return (t, x)
    # Any other object (a Module, an optimizer, a callable) keys by identity, as TF's
    # weak-reference keys: two equal-but-distinct models must not share Variables.
    # The entry's template holds the object, so its id is not reused while cached.
    return ("obj", t, id(x))


def _tensor_args(x, out):
    """The dynamic leaves as op inputs, in ``_key``'s order (Tensors keep their ids)."""
    if isinstance(x, Tensor):
        out.append(x)
    elif isinstance(x, (_Array, _Tracer)):
        out.append(x)
    elif isinstance(x, (np.ndarray, np.generic)):
        out.append(convert_to_tensor(x))
    elif type(x) is tuple or type(x) is list or (isinstance(x, tuple) and hasattr(x, "_fields")):
        for e in x:
            _tensor_args(e, out)
    elif type(x) is dict:
        for k in sorted(x):
            _tensor_args(x[k], out)


def _template(x):
    """The argument structure with dynamic leaves replaced by ``_DYN`` (holds no arrays)."""
    if isinstance(x, Tensor) or isinstance(x, (_Array, _Tracer, np.ndarray, np.generic)):
        return _DYN
    t = type(x)
    if t is tuple or t is list:
        return t(_template(e) for e in x)
    if t is dict:
        return {k: _template(x[k]) for k in sorted(x)}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return t(*[_template(e) for e in x])
    return x


def _fill(tpl, it):
    """Rebuild the arguments from a template, dynamic leaves as Tensors from ``it``."""
    if tpl is _DYN:
        return next(it)
    t = type(tpl)
    if t is tuple or t is list:
        return t(_fill(e, it) for e in tpl)
    if t is dict:
        return {k: _fill(v, it) for k, v in tpl.items()}
    if isinstance(tpl, tuple) and hasattr(tpl, "_fields"):
        return t(*[_fill(e, it) for e in tpl])
    return tpl


def _split_out(x, dyn):
    """Outputs -> template with arrays taken out into ``dyn``."""
    if isinstance(x, (Tensor, Variable)):
        dyn.append(x._value)
        return _DYN
    if isinstance(x, (_Array, _Tracer)):
        dyn.append(x)
        return _DYN
    t = type(x)
    if t is tuple or t is list:
        return t(_split_out(e, dyn) for e in x)
    if t is dict:
        return {k: _split_out(v, dyn) for k, v in x.items()}
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return t(*[_split_out(e, dyn) for e in x])
    return x


