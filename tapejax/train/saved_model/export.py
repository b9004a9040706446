"""From a ``tapejax.function`` with an ``input_signature`` to a ``jax.export`` artifact.

The exported program is pure: ``f(variables, *inputs) -> flat outputs``.  It
is traced by running the function's Python under ``jax.jit`` with every
Variable of the saved object bound to an input (``core.variable.traced_values``)
and graph mode on (as ``tapejax.function`` traces), so the Variables' values
are *arguments*, saved apart in a checkpoint, not constants baked into the
program; a ``None`` in the signature becomes a symbolic dimension
(``jax.export.symbolic_shape``), so one artifact serves every batch size; where the program
relates two inputs' first axes (TF lets ops assume unknown sizes agree), they are traced again
as one shared batch size.
Outputs are flattened with their structure recorded as JSON (``template``):
nests of dicts, lists and tuples of Tensors, or None.

A signature function must not assign Variables (serving is read-only):
``ValueError`` names the Variable.  One that draws from the global random
stream (an op with ``seed=None``: dropout) is traced again with a PRNG key as
its first input after the variables (``ExportedFunction.random``); the loaded
function passes a fresh key from the global stream at every call, so each call
draws new values, as TF's stateful random ops do.  One whose program holds a runtime check (a
``TensorArray`` index, a converted ``assert``) is traced again functionalized by checkify, with
a failure flag as its last output (``ExportedFunction.checked``; the loaded call raises).
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, NamedTuple, Optional, Sequence

import jax
import numpy as np

from ...compile.bound import BoundFunction
from ...compile.function import Function, TensorSpec
from ...core.convert import convert_to_tensor
from ...core.errors import InvalidArgumentError, UnimplementedError
from ...core.tensor import Tensor
from ...core.variable import Variable, traced_values


class ExportedFunction(NamedTuple):
    """One exported function: its serialized program and what it takes and gives."""

    name: str
    inputs: list        # [{"name", "shape" (None for any size), "dtype"}]
    outputs: Any        # the output structure (``template``)
    data: bytes         # ``jax.export.Exported.serialize()``
    random: bool = False   # takes a PRNG key first (it draws from the global random stream)
    checked: bool = False  # its last output is 1 when a runtime check of the program failed


def signature_functions(obj: Any) -> dict:
    """The ``tapejax.function``s with an ``input_signature`` reachable as attributes of ``obj``
    (methods decorated in its class, and Functions stored on it), by attribute name."""
    found = {}
    names = set(dir(type(obj))) | set(getattr(obj, "__dict__", {}))
    for name in sorted(names):
        if name.startswith("__") and name != "__call__":
            continue
        try:
            value = getattr(obj, name)
        except Exception:  # noqa: BLE001 - a property that cannot be read now is no function
            continue
        if as_function(value) is not None:
            found[name] = value
    return found


def as_function(value: Any) -> Optional[Any]:
    """``value`` if it is a tapejax.function (or one bound to an instance) with an
    input_signature, else None."""
    fn = value._fn if isinstance(value, BoundFunction) else value
    if isinstance(fn, Function) and fn.input_signature is not None:
        return value
    return None


def from_concrete(value: Any) -> Any:
    """A ``ConcreteFunction`` given as a signature (``signatures=f.get_concrete_function(spec)``, TF's
    usual spelling) as the ``tapejax.function`` of its Python with its TensorSpecs as the
    ``input_signature`` (a method's instance bound first); anything else as it is.  Not a concrete
    function of Tensors and TensorSpecs only (a Python value, a keyword argument): as it is (then
    refused as a signature)."""
    from ...compile.concrete import ConcreteFunction
    if not isinstance(value, ConcreteFunction):
        return value
    fn, args = value._function, tuple(value._args)
    py = fn.python_function
    if fn._method and args and not isinstance(args[0], TensorSpec):   # the bound instance
        method, instance, args = py, args[0], args[1:]

        def py(*a):
            return method(instance, *a)
    if value._kwargs or not all(isinstance(a, TensorSpec) for a in args):
        return value
    return Function(py, input_signature=list(args), autograph=fn._autograph)


def _python(value: Any) -> Any:
    """The Python body as ``tapejax.function`` traces it: converted by AutoGraph unless the function
    has ``autograph=False`` (``for i in tf.range(k)`` on an input becomes a loop); a method bound to
    its instance."""
    if isinstance(value, BoundFunction):
        return functools.partial(value._fn._body(), value._self)
    return value._body()


def _signature(value: Any) -> tuple:
    fn = value._fn if isinstance(value, BoundFunction) else value
    return fn.input_signature


def input_specs(value: Any) -> list:
    out = []
    for i, spec in enumerate(_signature(value)):
        if not isinstance(spec, TensorSpec):
            raise TypeError(f"input_signature entries must be tapejax.TensorSpec; got {spec!r}")
        if spec.shape is None:
            raise ValueError(f"input_signature[{i}] has an unknown rank (shape=None): an exported program needs "
                             "the rank; give a shape with None for the sizes that vary")
        out.append({"name": spec.name or (f"x_{i}" if i else "x"), "shape": list(spec.shape),
                    "dtype": spec.dtype.name})
    return out


def template(x: Any, leaves: list) -> Any:
    """The JSON structure of an output, its Tensors appended to ``leaves``."""
    if x is None:
        return {"none": True}
    if isinstance(x, dict):
        return {"dict": [[str(k), template(x[k], leaves)] for k in sorted(x, key=str)]}
    if isinstance(x, (list, tuple)):
        return {"list" if isinstance(x, list) else "tuple": [template(v, leaves) for v in x]}
    leaves.append(x)
    return {"leaf": len(leaves) - 1}


def fill(tpl: Any, leaves: Sequence[Any]) -> Any:
    """The inverse of ``template``."""
    if "none" in tpl:
        return None
    if "dict" in tpl:
        return {k: fill(v, leaves) for k, v in tpl["dict"]}
    if "list" in tpl:
        return [fill(v, leaves) for v in tpl["list"]]
    if "tuple" in tpl:
        return tuple(fill(v, leaves) for v in tpl["tuple"])
    return leaves[tpl["leaf"]]


class DrawsRandom(UnimplementedError):
    """The traced function drew from the global random stream: a tapejax SavedModel exports it
    with a key input; a TF-format export cannot (TF's stateful random ops are not JAX's)."""

    def __init__(self, name: str):
        super().__init__(None, None, f"saved_model: the function `{name}` draws from the global random "
                         "stream (a random op with seed=None, e.g. tf.nn.dropout), which the TF-format "
                         "export cannot carry: give the op a `seed`, or save a function that does not draw "
                         "(dropout only when training)")


def pure_function(value: Any, variables: Sequence[Variable], name: str, keyed: bool = False,
                  checked: bool = False):
    """``f(variable_values, *inputs) -> flat output arrays``, and a one-element list that holds
    the output template once ``f`` has been traced.  ``keyed``: ``f(variable_values, key,
    *inputs)``, the random ops with ``seed=None`` drawing from ``key`` (the caller gives a fresh
    key at every call: the loaded function draws new values each time, as TF's stateful ops);
    unkeyed, such a draw raises ``DrawsRandom``."""
    from ...ops.random import state_scope
    py = _python(value)
    out_tpl: list = []

    def pure(var_vals, *args):
        from ...autodiff.custom import graph_mode
        scope = contextlib.nullcontext()
        if keyed:
            scope, args = state_scope(args[0]), args[1:]
        with traced_values(variables, var_vals):
            with graph_mode(), scope:
                try:
                    out = py(*[Tensor(a) for a in args])
                except RuntimeError as e:
                    if "random op with seed=None" not in str(e):
                        raise
                    raise DrawsRandom(name) from None
            for v, x in zip(variables, var_vals):
                if v._val is not x:
                    raise ValueError(f"saved_model: the signature function `{name}` assigns Variable "
                                     f"'{v.name}'; exported functions must only read Variables")
        leaves: list = []
        tpl = template(out, leaves)
        out_tpl[:] = [tpl]
        return [convert_to_tensor(t)._value for t in leaves]

    if checked:
        return _with_check_flag(pure), out_tpl
    return pure, out_tpl


def _with_check_flag(pure: Any) -> Any:
    """``pure`` functionalized with checkify (its runtime checks: a TensorArray index, a converted
    ``assert``), the outputs followed by an int32 flag, 1 when a check failed (the loaded
    function raises ``InvalidArgumentError`` then, as TF's kernel or ``Assert`` would)."""
    from jax.experimental import checkify

    from ...ops.checks import CHECK_ERRORS

    def checked(*args):
        err, outs = checkify.checkify(pure, errors=CHECK_ERRORS)(*args)
        preds = [jax.numpy.any(p) for p in getattr(err, "_pred", {}).values()]
        failed = jax.numpy.any(jax.numpy.stack(preds)) if preds else jax.numpy.asarray(False)
        return [*outs, failed.astype(np.int32)]
    return checked


def _unfunctionalized_check(e: BaseException) -> bool:
    return "checkify.check which was not functionalized" in str(e)


def export_function(value: Any, variables: Sequence[Variable], name: str,
                    platforms: Optional[Sequence[str]] = None) -> ExportedFunction:
    """Trace and export ``value`` (see the module docstring)."""
    inputs = input_specs(value)
    # (a Keras model's inputs share their batch size: one symbol for their first axis)
    shared = bool(getattr(value, "_shared_batch", False))

    def attempt(one_batch: bool) -> ExportedFunction:
        try:
            return _export_with(value, variables, name, platforms, inputs, one_batch)
        except ValueError as e:   # a runtime check in the program: exported with its failure flag
            if not _unfunctionalized_check(e):
                raise
            return _export_with(value, variables, name, platforms, inputs, one_batch, checked=True)

    return with_shared_batch(attempt, inputs, shared)


def poly_dims(spec: dict, i: int, shared: bool) -> str:
    """Input ``i``'s dimensions as symbols for its ``None`` sizes (``"d0_0, 3"``); ``batch`` for a
    ``None`` first axis when the inputs share one batch size."""
    return ", ".join(("batch" if j == 0 and shared else f"d{i}_{j}") if d is None else str(d)
                     for j, d in enumerate(spec["shape"]))


def with_shared_batch(attempt: Any, inputs: list, shared: bool) -> Any:
    """``attempt(shared)``; where that fails and several inputs have a ``None`` first axis,
    ``attempt(True)``: TF traces a None size as unknown and lets ops assume two unknown sizes agree
    (``x @ w - y`` with signatures [None, 3] and [None, 1]; ``tf.gather(p, ids, batch_dims=1)``;
    a Keras ``Concatenate`` of two inputs), independent symbols cannot be broadcast, gathered or
    concatenated together (InvalidArgumentError, ValueError or TypeError at the trace), so the
    inputs' first axes are traced again as one batch size.  Where that fails too, the first error
    is raised."""
    try:
        return attempt(shared)
    except (InvalidArgumentError, ValueError, TypeError) as e:
        if shared or sum(1 for i in inputs if i["shape"] and i["shape"][0] is None) < 2:
            raise
        try:
            return attempt(True)
        except Exception:   # noqa: BLE001 - the first error is the program's
            raise e from None


def _export_with(value: Any, variables: Sequence[Variable], name: str, platforms: Optional[Sequence[str]],
                 inputs: list, shared: bool, checked: bool = False) -> ExportedFunction:
    from jax import export
    scope = export.SymbolicScope()
    arg_specs = []
    for i, spec in enumerate(inputs):
        dims = poly_dims(spec, i, shared)
        shape = export.symbolic_shape(dims, scope=scope) if dims else ()
        arg_specs.append(jax.ShapeDtypeStruct(shape, np.dtype(_np_dtype(spec["dtype"]))))
    var_specs = [jax.ShapeDtypeStruct(tuple(v._meta.shape), np.dtype(v._meta.dtype)) for v in variables]
    keyed = False
    pure, out_tpl = pure_function(value, variables, name, checked=checked)
    exported = None
    for plats in ([tuple(platforms)] if platforms else [("cpu", "cuda"), None]):
        try:
            try:
                exported = export.export(jax.jit(pure), platforms=plats)(var_specs, *arg_specs)
            except DrawsRandom:   # traced again with a key input
                from ...ops.random import get_state
                key = get_state()
                keyed = True
                pure, out_tpl = pure_function(value, variables, name, keyed=True, checked=checked)
                exported = export.export(jax.jit(pure), platforms=plats)(
                    var_specs, jax.ShapeDtypeStruct(key.shape, key.dtype), *arg_specs)
            break
        except (ValueError, NotImplementedError) as e:   # an op with no lowering for one platform
            if plats is None or platforms or _unfunctionalized_check(e):
                raise
    assert exported is not None
    try:   # with its first derivative: a loaded model can be fine-tuned (jax.vjp through the call)
        data = exported.serialize(vjp_order=1)
    except Exception:  # noqa: BLE001 - an op without a differentiable export: values only
        data = exported.serialize()
    return ExportedFunction(name, inputs, out_tpl[0], bytes(data), keyed, checked)


def _np_dtype(name: str) -> Any:
    from ...core import dtypes as _dtypes
    return _dtypes.as_dtype(name)._np


__all__ = ["DrawsRandom", "ExportedFunction", "signature_functions", "as_function", "from_concrete", "export_function", "template", "fill",
           "input_specs", "pure_function", "poly_dims", "with_shared_batch"]
