"""What a SavedModel holds of an object: its signature functions (``tapejax.function``s with an
``input_signature``; the nested objects' by dotted path, ``encoder.encode``), the signatures by name, its Variables in export order and its live object
graph (``export_plan``), shared by the jax.export format (``save``) and TF's (``tf_export``)."""
from __future__ import annotations

import collections
from typing import Any

from ...compile.function import Function, TensorSpec
from ...core.variable import Variable
from .. import graph as _g, trackable as _tr
from . import export as _export


def _check_object(obj: Any) -> None:
    if not _tr.is_trackable(obj) or _tr.is_value(obj):
        raise ValueError("Expected an object of type `Trackable`, such as `tf.Module` or a subclass of the "
                         f"`Trackable` class, for export. Got {obj!r} with type {type(obj)}.")


def _signatures(obj: Any, signatures: Any, functions: dict) -> dict:
    def check(value: Any) -> Any:
        value = _export.from_concrete(value)
        if _export.as_function(value) is None:
            raise ValueError(f"Expected a TensorFlow function for which to generate a signature, but got "
                             f"{value!r}. Only `tf.functions` with an input signature or concrete functions "
                             "can be used as a signature.")
        return value

    if signatures is None:
        return {"serving_default": next(iter(functions.values()))} if len(functions) == 1 else {}
    if isinstance(signatures, dict):
        out = {}
        for k, v in signatures.items():
            if not isinstance(k, str):
                raise ValueError(f"Signature keys must be strings; got {k!r}")
            out[k] = check(v)
        return out
    return {"serving_default": check(signatures)}


def _same(a: Any, b: Any) -> bool:
    fa, fb = getattr(a, "_fn", a), getattr(b, "_fn", b)
    return fa is fb and getattr(a, "_self", None) is getattr(b, "_self", None)


def _keras_call(obj: Any) -> Any:
    """A built Keras model with known inputs (functional, ``Sequential`` with an ``Input``) as the
    ``tapejax.function`` of its inference call over TensorSpecs of its inputs (TF saves a Keras
    model's call and serving signature that way); None for anything else."""
    inputs = getattr(obj, "inputs", None) if hasattr(obj, "_flatten_layers") else None
    if not inputs or not getattr(obj, "built", False):
        return None
    from ...core.dtypes import as_dtype
    specs = [TensorSpec(tuple(x.shape), as_dtype(x.dtype), name=getattr(x, "name", None) or f"input_{i}")
             for i, x in enumerate(inputs)]
    single = len(specs) == 1

    def call(*xs):
        return obj(xs[0] if single else list(xs), training=False)

    fn = Function(call, input_signature=specs)
    setattr(fn, "_shared_batch", True)   # (read by export.export_function: one batch size for all the inputs)
    return fn


def _as_function(fn: Any) -> Any:
    """A loaded SavedModel's function as a ``tapejax.function`` over its input signature that calls
    it (one per loaded function, so a function and a signature serving it stay one artifact)."""
    made = getattr(fn, "_resaved", None)
    if made is None:
        made = Function(lambda *xs: fn(*xs), input_signature=list(fn.input_signature))
        fn._resaved = made
    return made


def _loaded_functions(obj: Any) -> dict:
    """A loaded SavedModel object's functions by attribute, to export again (TF saves a loaded
    object with its functions and signatures)."""
    from .load import LoadedFunction, LoadedObject
    if not isinstance(obj, LoadedObject):
        return {}
    functions = {name: _as_function(v) for name, v in sorted(vars(obj).items()) if isinstance(v, LoadedFunction)}
    if obj._call_fn is not None:
        functions["__call__"] = _as_function(obj._call_fn)
    return functions


def _functions_of(obj: Any) -> dict:
    functions = _export.signature_functions(obj)
    functions.update(_loaded_functions(obj))
    return functions


def _nested_functions(root: Any) -> dict:
    """The signature functions of the objects below ``root`` (breadth first, each object once), by
    their dotted path from the root: ``{"encoder.encode": fn}`` (TF saves every tracked object's
    functions; a loaded object has them at the same paths)."""
    out: dict = {}
    seen = {id(root)}
    queue: "collections.deque[tuple[Any, tuple]]" = collections.deque([(root, ())])
    while queue:
        obj, path = queue.popleft()
        for name, child in _tr.children(obj):
            if _tr.is_value(child) or id(child) in seen:
                continue
            seen.add(id(child))
            queue.append((child, path + (name,)))
            if not _tr.is_container(child):
                for attr, fn in _functions_of(child).items():
                    out[".".join(path + (name, attr))] = fn
    return out


def export_plan(obj: Any, signatures: Any = None):
    """(functions by attribute name, signatures by name, Variables in export order, the live graph)."""
    _check_object(obj)
    functions = _functions_of(obj)
    from .load import LoadedModel
    if signatures is None and isinstance(obj, LoadedModel) and obj.signatures:
        signatures = {name: _as_function(s._fn) for name, s in obj.signatures.items()}
    if "__call__" not in functions:   # a Keras model: its call, serving_default by default
        call = _keras_call(obj)
        if call is not None:
            functions["__call__"] = call
    sigs = _signatures(obj, signatures, functions)
    functions.update(_nested_functions(obj))   # (after the default signature: only the root's serve it)
    live = _g.build(obj)
    variables = [v for v in live.values.values() if isinstance(v, Variable)]
    return functions, sigs, variables, live
