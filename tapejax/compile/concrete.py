"""``Function.get_concrete_function``: one traced program, callable on its own.

``f.get_concrete_function(*args)`` takes Tensors or ``TensorSpec``s (none when
``f`` has an ``input_signature``) and Python values, traces ``f`` for them
(``None`` sizes symbolically, see ``polymorphism.py``) and returns a
``ConcreteFunction``.  Its program also serves later calls of ``f`` that fit
it, as in TF.  TF's concrete functions expose a graph; tapejax's expose what
the compiled program takes and gives: ``structured_input_signature``
(TensorSpecs named after the parameters, as TF), ``structured_outputs``
(TensorSpecs where TF shows symbolic Tensors) and ``pretty_printed_signature``.
Calling one checks each Tensor against its spec (an error naming the
argument otherwise: an XLA program takes the shapes it was compiled for; the
class is TF's ``InvalidArgumentError``, what TF's graph raises for a wrong
dtype or for a shape its ops cannot take, and a ``TypeError``); a Python value given for a
parameter traced with another value is TF's ``TypeError``.
"""
from __future__ import annotations

import inspect
from typing import Any, List, Tuple

import jax
import numpy as np

from ..core.convert import convert_to_tensor
from ..core.errors import ConcreteInputError
from ..core.tensor import Tensor
from . import polymorphism
from .signature import TensorSpec, arg_key, bind_signature, fill, is_value_spec, template
from .tensor_array_args import is_tensor_array

_SCALARS = (bool, int, float, str, type(None))


def _as_specs(x, name: str):
    """Tensors and arrays as TensorSpecs (named like TF: the parameter, ``x_1`` in a structure)."""
    if isinstance(x, TensorSpec):
        return TensorSpec(x._shape, x.dtype, x.name or name)
    if isinstance(x, (Tensor, jax.Array, np.ndarray)) or hasattr(x, "_read"):
        t = convert_to_tensor(x)
        return TensorSpec(tuple(t._value.shape), t.dtype, name)
    if type(x) in (list, tuple):
        return type(x)(_as_specs(e, f"{name}_{i}") for i, e in enumerate(x))
    if type(x) is dict:
        return {k: _as_specs(x[k], f"{name}_{k}") for k in x}   # (leaves sorted by key: ``_spec_leaves``)
    return x


def _spec_leaves(x, out: List[TensorSpec]) -> None:
    if isinstance(x, TensorSpec):
        out.append(x)
    elif type(x) in (list, tuple):
        for e in x:
            _spec_leaves(e, out)
    elif type(x) is dict:
        for k in sorted(x):
            _spec_leaves(x[k], out)


def _shape_free(x):
    """The shape-free key a call of these arguments has (``signature.shape_free`` of its key)."""
    if isinstance(x, TensorSpec):
        assert x._shape is not None
        return ("leaf", len(x._shape), x.dtype._np)
    if type(x) in (list, tuple):
        return (type(x), tuple(_shape_free(e) for e in x))
    if type(x) is dict:
        return (dict, tuple((k, _shape_free(x[k])) for k in sorted(x)))
    return arg_key(x, [])


class ConcreteFunction:
    """One traced program of a ``tapejax.function`` (``tf.types.experimental.ConcreteFunction``)."""

    def __init__(self, function, entry, args_specs: Tuple[Any, ...], kwargs_specs: dict, n_lead: int = 0):
        self._function = function
        self._entry = entry
        self._args = args_specs
        self._kwargs = kwargs_specs
        self._n_lead = n_lead   # a method's instance leads ``args_specs``; TF's signature leaves it out
        self.name = function._name
        self._empty: dict = {}   # programs for calls with an empty None dimension (``__call__``)

    @property
    def structured_input_signature(self):
        return self._args[self._n_lead:], self._kwargs

    @property
    def structured_outputs(self):
        e = self._entry
        avals = e.jitted.eval_shape(*[v._value for v in e.rw], *[v._value for v in e.ro],
                                    *[jax.ShapeDtypeStruct(s.shape, s.dtype) for s in self._leaf_avals()])
        outs = (avals[1] if e.checked else avals)[:e.n_out]
        return fill(e.out_tpl, iter([TensorSpec(tuple(o.shape) if all(isinstance(d, int) for d in o.shape)
                                                else tuple(d if isinstance(d, int) else None for d in o.shape),
                                                o.dtype) for o in outs]))

    def _leaf_avals(self):
        e = self._entry
        return list(e.plan.avals) if e.plan is not None else [
            jax.ShapeDtypeStruct(s.shape, s.dtype) for s in e.specs]

    def pretty_printed_signature(self, verbose=True) -> str:
        lines = ["ConcreteFunction Input Parameters:"]
        for i, a in enumerate(self._args[self._n_lead:]):
            lines.append(f"  {getattr(a, 'name', None) or i}: {a!r}")
        lines.append("Output Type:")
        lines.append(f"  {self.structured_outputs!r}")
        return "\n".join(lines)

    def _check_python_values(self, args, kwargs) -> None:
        """A Python value given for a parameter traced with another one: TF's TypeError (the value is
        part of the program; ``pow.get_concrete_function(a=spec, b=2)`` called with ``b=3``)."""
        try:
            params = list(inspect.signature(self._function.python_function).parameters)
        except (TypeError, ValueError):
            return
        traced = dict(zip(params, self._args))
        traced.update(self._kwargs)
        given = dict(zip(params[self._n_lead:], args))
        given.update(kwargs)
        for name, v in given.items():
            t = traced.get(name, v)
            if type(v) in _SCALARS and type(t) in _SCALARS and v != t:
                raise TypeError(f"Binding inputs to tf.function failed due to `Can not cast {v!r} to "
                                f"Literal[{t!r}]`: ConcreteFunction {self.name} was traced with {name}={t!r}")

    def __call__(self, *args, **kwargs):
        self._check_python_values(args, kwargs)
        specs: List[TensorSpec] = []
        _spec_leaves((self._args, self._kwargs), specs)
        dyn: List[Any] = []
        _collect(args, dyn)
        if kwargs:
            _collect(kwargs, dyn)
        if len(dyn) != len(specs):
            raise TypeError(f"ConcreteFunction {self.name} takes {len(specs)} tensor argument(s) "
                            f"{specs}; got {len(dyn)}")
        vals = []
        for i, (t, s) in enumerate(zip(dyn, specs)):
            if not s.is_compatible_with(t._value):
                raise ConcreteInputError(f"ConcreteFunction {self.name}: argument {i} ({s.name}) must match {s!r}; got "
                                f"TensorSpec(shape={tuple(t._value.shape)}, dtype=tf.{t.dtype.name})")
            vals.append(t._value)
        plan = self._entry.plan
        if plan is not None and polymorphism.has_empty(plan.specs, vals):
            # (JAX's symbols are >= 1: an empty batch gets a program of its own shapes, traced once)
            key = tuple((tuple(v.shape), str(v.dtype)) for v in vals)
            entry = self._empty.get(key)
            if entry is None:
                avals = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in vals]
                with self._function._lock:
                    entry = self._empty[key] = self._function._make(self._entry.template, avals,
                                                                    polymorphism.concrete(avals), None)
            return self._function._run(entry, vals)
        if plan is not None and not plan.accepts([v for v in vals]):
            raise ConcreteInputError(f"ConcreteFunction {self.name}: the sizes of {[tuple(v.shape) for v in vals]} break "
                            f"the shared sizes its program was traced with ({plan.groups}); call the "
                            "tapejax.function itself to trace for them")
        return self._function._run(self._entry, vals)

    def __repr__(self):
        return f"<ConcreteFunction {self.name} inputs={self._args}>"


def _collect(x, out: List[Any]) -> None:
    if isinstance(x, (Tensor, jax.Array, np.ndarray)) or hasattr(x, "_read"):
        out.append(convert_to_tensor(x))
    elif type(x) in (list, tuple):
        for e in x:
            _collect(e, out)
    elif type(x) is dict:
        for k in sorted(x):
            _collect(x[k], out)


def concrete_function(fn, args, kwargs, lead: tuple = ()) -> ConcreteFunction:
    """The ``ConcreteFunction`` of ``fn`` (a ``Function``) for ``args``/``kwargs`` (after ``lead``: a
    method's instance, which an ``input_signature`` leaves out)."""
    if fn.input_signature is not None:
        if args or kwargs:
            bind_signature(fn.input_signature, args, kwargs, fn._name, fn._method)
        args, kwargs = tuple(fn.input_signature), {}
    args = tuple(lead) + tuple(args)
    for a in tuple(args) + tuple((kwargs or {}).values()):
        if is_tensor_array(a) or is_value_spec(a) or getattr(type(a), "_tapejax_flatten", None) is not None:
            raise ValueError(f"get_concrete_function of `{fn._name}` takes Tensors and TensorSpecs only; got "
                             f"{a!r} (a TensorArray, tf.data iterator or their specs are not supported there): "
                             "call the tapejax.function itself with it (it traces once per spec).")
    try:
        params = list(inspect.signature(fn.python_function).parameters)
    except (TypeError, ValueError):
        params = []
    names = [params[i] if i < len(params) else f"arg_{i}" for i in range(len(args))]
    args_specs = tuple(_as_specs(a, n) for a, n in zip(args, names))
    kwargs_specs = {k: _as_specs(kwargs[k], k) for k in sorted(kwargs)} if kwargs else {}
    leaves: List[TensorSpec] = []
    _spec_leaves((args_specs, kwargs_specs), leaves)
    if any(s._shape is None for s in leaves):
        raise ValueError("get_concrete_function: a TensorSpec of unknown rank cannot be compiled by XLA; give "
                         "its rank (None for each unknown size)")
    specs = [s.leaf() for s in leaves]
    tpl = (template(args_specs), template(kwargs_specs) if kwargs_specs else None)
    sf = (tuple(_shape_free(a) for a in args_specs), _shape_free(kwargs_specs) if kwargs_specs else None)
    with fn._lock:
        for e in fn._poly.get(sf, ()):   # traced already (an input_signature's program): reused
            if tuple(e.specs) == tuple(specs):
                return ConcreteFunction(fn, e, args_specs, kwargs_specs, len(lead))
        plan = polymorphism.plan(specs, [False] * len(specs), example=None)
        entry = None
        if any(s.polymorphic for s in specs):
            try:
                entry = fn._make(tpl, list(plan.avals), specs, plan)
            except Exception as e:  # noqa: BLE001 - said plainly: no per-shape fallback without a shape
                raise ValueError(f"get_concrete_function: `{fn._name}` cannot be traced with symbolic sizes for "
                                 f"{[s for s in leaves]} ({type(e).__name__}: {e}); call the function with "
                                 "concrete Tensors instead (it then traces for each new shape)") from e
            if entry is None:
                raise ValueError(f"get_concrete_function: the program of `{fn._name}` cannot be exported with "
                                 "symbolic sizes (it calls back into Python, e.g. tapejax.print); call the "
                                 "function with concrete Tensors instead")
        else:   # a call that traced these specs already is reused (TF: no new trace)
            entry = next((e for e in fn._cache.values() if e.plan is None and e.template == tpl
                          and tuple(e.specs) == tuple(specs)), None)
            if entry is None:
                entry = fn._make(tpl, list(plan.avals), specs, None)
        assert entry is not None
        fn._poly.setdefault(sf, []).append(entry)
    return ConcreteFunction(fn, entry, args_specs, kwargs_specs, len(lead))


__all__ = ["ConcreteFunction", "concrete_function"]
