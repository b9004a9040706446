"""``tapejax.saved_model.load``: a saved directory back as a callable object, in any process.

Nothing of the saved object's Python class is needed.  The loaded object
(``LoadedModel``, a ``tapejax.Module``) has the saved object graph's
attributes (nested objects, lists, and Variables holding the saved values,
trainable as they were), each exported function as an attribute
(``loaded.predict(x)``; ``loaded(x)`` for ``__call__``), and ``signatures``
(``loaded.signatures["serving_default"](x=...)`` returns a dict of outputs,
TF Serving's convention: a dict output keeps its keys, otherwise
``output_0``, ``output_1`` ...).

A call checks its arguments against the input signature (TF's TypeError
"Binding inputs ... failed" for a wrong dtype, shape or count) and runs the
exported program on the Variables' *current* values, so assigning a loaded
Variable changes the results, and the call is a tape op (``tapejax.op``), so
``GradientTape`` differentiates it with respect to the Variables (fine-tuning).
"""
from __future__ import annotations

import json
import os
from typing import Any

import jax
import numpy as np

from ...compile.function import TensorSpec
from ...core import dtypes as _dtypes
from ...core.convert import convert_to_tensor
from ...core.errors import InvalidArgumentError
from ...core.tensor import Tensor
from ...core.variable import Variable
from .. import export_layout as layout
from ..module import Module
from ..storage import OrbaxData, ReadTarget
from . import export as _export
from .constants import LoadOptions, contains_saved_model


class LoadedObject(Module):
    """An object of a loaded SavedModel: its attributes are the saved children and functions
    (``loaded.encoder.encode(x)``); callable when the saved object had an exported ``__call__``."""

    def __init__(self, name: str = "loaded_object"):
        super().__init__(name=name)
        self._call_fn = None

    def __call__(self, *args, **kwargs):
        if self._call_fn is None:
            raise TypeError("This loaded SavedModel is not callable: the saved object had no `__call__` "
                            "tapejax.function with an input_signature")
        return self._call_fn(*args, **kwargs)


class LoadedModel(LoadedObject):
    """The root object of a loaded SavedModel."""

    def __init__(self):
        super().__init__(name="loaded_model")
        self.signatures = {}


def _spec_text(shape: Any, dtype: str, name: Any) -> str:
    return f"TensorSpec(shape={tuple(shape)}, dtype=tf.{dtype}, name={name!r})"


class LoadedFunction:
    """An exported function: call it with Tensors matching its input signature."""

    def __init__(self, name: str, exported: Any, inputs: list, outputs: Any, variables: list,
                 random: bool = False, checked: bool = False):
        from ...ops.jax_op import op
        self.name = name
        self._random = random   # it takes a PRNG key first: a fresh one from the global stream per call
        self._checked = checked   # its last output flags a failed runtime check
        self._exported = exported
        self._inputs = inputs
        self._outputs = outputs
        self._variables = variables
        self.input_signature = tuple(TensorSpec(i["shape"], i["dtype"], i["name"]) for i in inputs)
        self._op = op(lambda var_vals, *args: exported.call(var_vals, *args))   # (a unique op name per load)

    def _bind(self, args: tuple, kwargs: dict) -> list:
        names = [i["name"] for i in self._inputs]
        if kwargs:
            unknown = sorted(set(kwargs) - set(names))
            if unknown or len(args) + len(kwargs) != len(names):
                missing = [n for n in names[len(args):] if n not in kwargs]
                raise TypeError(f"Binding inputs to the loaded function `{self.name}` failed: expected arguments "
                                f"{names}; got {len(args)} positional and keyword arguments {sorted(kwargs)}"
                                + (f" (unknown: {unknown})" if unknown else "")
                                + (f" (missing: {missing})" if missing else ""))
            args = tuple(args) + tuple(kwargs[n] for n in names[len(args):])
        if len(names) > 1 and len(args) == 1 and isinstance(args[0], (list, tuple)) and len(args[0]) == len(names):
            args = tuple(args[0])   # (a Keras model's inputs as one list, as its call takes them)
        if len(args) != len(names):
            raise TypeError(f"Binding inputs to the loaded function `{self.name}` failed: its signature has "
                            f"{len(names)} argument(s) ({names}); the call passed {len(args)}.")
        out = []
        for a, spec in zip(args, self._inputs):
            want = _dtypes.as_dtype(spec["dtype"])
            t = convert_to_tensor(a, dtype_hint=want) if not isinstance(a, (Tensor, Variable)) else convert_to_tensor(a)
            shape = tuple(t.shape)
            ok = t.dtype == want and len(shape) == len(spec["shape"]) and all(
                s is None or s == d for s, d in zip(spec["shape"], shape))
            if not ok:
                raise TypeError(f"Binding inputs to the loaded function `{self.name}` failed due to `Can not cast "
                                f"{_spec_text(shape, t.dtype.name, spec['name'])} to "
                                f"{_spec_text(spec['shape'], spec['dtype'], spec['name'])}`.")
            out.append(t)
        return out

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        tensors = self._bind(args, kwargs)
        if self._random:
            from ...ops.random import _next_key
            tensors = [Tensor(_next_key(None)), *tensors]
        out: Any = self._op(list(self._variables), *tensors)
        flat: list = list(out)
        if self._checked:
            flag = flat.pop()
            if int(np.asarray(convert_to_tensor(flag)._value)):
                raise InvalidArgumentError(None, None, f"A runtime check of the loaded function `{self.name}` "
                                           "failed (an index out of range, a failed assertion)")
        return _export.fill(self._outputs, flat)

    def __repr__(self) -> str:
        return f"<tapejax.saved_model loaded function {self.name}{self.input_signature}>"


class SignatureFunction:
    """A serving signature: keyword arguments by input name (or positional), a dict of outputs."""

    def __init__(self, fn: LoadedFunction):
        self._fn = fn
        tpl = fn._outputs
        if "dict" in tpl:   # (a signature's outputs by sorted name, as TF's SignatureDef map)
            self._names = sorted(k for k, _ in tpl["dict"])
        else:
            self._names = [f"output_{i}" for i in range(_count(tpl))]
        self.structured_input_signature = ((), {s.name: s for s in fn.input_signature})

    @property
    def structured_outputs(self) -> dict:
        return {n: n for n in self._names}

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        out = self._fn(*args, **kwargs)
        if isinstance(out, dict):
            return {k: out[k] for k in sorted(out)}
        leaves: list = []
        _export.template(out, leaves)
        return dict(zip(self._names, leaves))


def _count(tpl: Any) -> int:
    """The number of Tensors in an output template."""
    if "leaf" in tpl:
        return 1
    if "dict" in tpl:
        return sum(_count(v) for _, v in tpl["dict"])
    return sum(_count(v) for v in tpl.get("list", tpl.get("tuple", ())))


def _build_objects(data: OrbaxData, trainable: dict) -> LoadedModel:
    graph = data.graph
    keys = []
    for node in graph.nodes:
        for a in node.attributes:
            if a.name == "VARIABLE_VALUE":
                keys.append(a.key)
    values = dict(zip(keys, data.read([ReadTarget(k) for k in keys])))
    objs: dict[int, Any] = {0: LoadedModel()}

    def make(i: int) -> Any:
        if i in objs:
            return objs[i]
        node = graph.nodes[i]
        attr = next((a for a in node.attributes if a.name == "VARIABLE_VALUE"), None)
        if attr is not None:
            obj = Variable(np.asarray(values[attr.key]), trainable=trainable.get(attr.key, True), name=attr.full_name)
        elif node.children and all(c.name.isdigit() for c in node.children):
            obj = []
        else:
            obj = LoadedObject()
        objs[i] = obj
        return obj

    order = [0]
    seen = {0}
    while order:
        i = order.pop(0)
        parent = objs[i]
        for c in graph.nodes[i].children:
            child = make(c.node)
            if isinstance(parent, list):
                while len(parent) <= int(c.name):
                    parent.append(None)
                parent[int(c.name)] = child
            else:
                object.__setattr__(parent, c.name, child)
            if c.node not in seen:
                seen.add(c.node)
                order.append(c.node)
    objs[0]._by_key = {k: objs[n] for n, node in enumerate(graph.nodes) for a in node.attributes
                       if a.name == "VARIABLE_VALUE" for k in [a.key] if n in objs}
    return objs[0]


def load(export_dir: Any, tags: Any = None, options: Any = None) -> Any:
    """Load a directory written by ``saved_model.save`` (see the module docstring): a
    ``LoadedModel``; one TensorFlow wrote (``saved_model.pb``): ``tf_load.TFLoadedModel``.
    ``options``: a ``LoadOptions`` (accepted; see ``constants.LoadOptions``)."""
    if options is not None and not isinstance(options, LoadOptions):
        raise TypeError(f"`options` must be a tapejax.saved_model.LoadOptions or None; got {options!r}")
    path = os.fspath(export_dir)
    if not layout.is_saved_model(path) and contains_saved_model(path):
        from .tf_load import load_tf  # (TensorFlow's SavedModel: TF reads it, tf2jax converts)
        return load_tf(path, tags)
    if not layout.is_saved_model(path):
        raise OSError(f"SavedModel file does not exist at: {path}/{{{layout.INDEX}}}")
    with open(layout.index_path(path)) as f:
        index = json.load(f)
    if index.get("format") != layout.FORMAT or int(index.get("version", 0)) > layout.VERSION:
        raise OSError(f"{layout.index_path(path)} is not a tapejax SavedModel this version reads "
                      f"(format {index.get('format')!r}, version {index.get('version')!r})")
    data = OrbaxData(layout.variables_path(path))
    trainable = {v["key"]: bool(v["trainable"]) for v in index["variables"]}
    root = _build_objects(data, trainable)
    by_key = root.__dict__.pop("_by_key")
    variables = [by_key[v["key"]] for v in index["variables"]]
    functions = {}
    for name, spec in index["functions"].items():
        with open(layout.function_path(path, name), "rb") as f:
            exported = jax.export.deserialize(bytearray(f.read()))
        functions[name] = LoadedFunction(name, exported, spec["inputs"], spec["outputs"], variables,
                                         bool(spec.get("random", False)), bool(spec.get("checked", False)))
    for attr, name in index["attributes"].items():
        *path, last = attr.split(".")   # (a nested object's function: "encoder.encode")
        owner: Any = root
        for part in path:
            owner = owner[int(part)] if isinstance(owner, list) else getattr(owner, part)
        object.__setattr__(owner, "_call_fn" if last == "__call__" else last, functions[name])
    object.__setattr__(root, "signatures", {s: SignatureFunction(functions[v["function"]])
                                            for s, v in index["signatures"].items()})
    return root


__all__ = ["load", "LoadedModel", "LoadedObject", "LoadedFunction", "SignatureFunction"]
