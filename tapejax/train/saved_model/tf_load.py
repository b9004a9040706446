"""``tapejax.saved_model.load`` of a SavedModel that TensorFlow wrote: TF reads it, tf2jax converts.

A TF SavedModel's functions are TF graphs.  TensorFlow (``tf.saved_model.load``) reads the
directory, and each function a call reaches is converted to a JAX function by tf2jax
(DeepMind's graph-to-JAX converter), once per concrete function, when it is first called:

* **Objects.**  The loaded object mirrors TF's loaded object graph: nested objects
  (``loaded.encoder.w``), lists and dicts of Variables, and functions.  Each TF Variable
  becomes one tapejax ``Variable`` (same value, dtype, name and ``trainable``; a Variable
  reached by several paths is one object).  A Keras model's ``variables`` /
  ``trainable_variables`` lists keep TF's order.
* **Calls.**  ``loaded.f(x)`` picks the saved concrete function as TF does (TF's own matching
  and its ValueError "Could not find matching concrete function"), then runs the converted
  program as one tape op (``tapejax.op``) over the arguments and the Variables' current values:
  ``GradientTape`` differentiates it with respect to the loaded Variables (fine-tuning) and
  the inputs.  A function that assigns Variables (a Keras ``BatchNormalization`` called with
  ``training=True``, a counter) assigns the tapejax Variables, as TF's loaded function does.
  A function with random ops (``Dropout`` in training) draws its key from tapejax's global
  random stream (``tapejax.random.set_seed``), so its random numbers are not TF's.
* **Signatures.**  ``loaded.signatures[name](**inputs)`` (or positionally, in TF's order)
  returns TF's dict of outputs.

TensorFlow and tf2jax are needed at load time and at each first call of a new concrete
function (the ``tf`` extra); the converted programs are JAX.  Ops tf2jax cannot convert
(lookup tables, string ops, ``py_function``) raise tf2jax's error at the first call.  Three of its
conversions are replaced (``tf2jax_ops``): a ``While`` whose trip count does not depend on data
(a Keras RNN's time steps) or that has ``maximum_iterations`` becomes a differentiable scan, so
tf_keras' ``LSTM`` / ``GRU`` load, run and fine-tune; ``TensorListSetItem`` takes a NumPy list;
an ``If`` takes a random op in a branch.
"""
from __future__ import annotations

import os
from typing import Any, Callable, NamedTuple, Optional, Sequence

import jax
import numpy as np

from ...core import dtypes as _dtypes
from ...core.convert import convert_to_tensor
from ...core.tensor import Tensor
from ...core.variable import Variable
from ..module import Module
from . import tf2jax_ops

#: TF object-graph children that are no attribute of the loaded object.
_SKIPPED_CHILDREN = frozenset({"signatures", "_self_saveable_object_factories", "keras_api",
                               "_default_save_signature"})
#: A call's array argument in its leaves of Python values (``TFLoadedFunction``).
_TENSOR = type("_TENSOR", (), {"__repr__": lambda self: "<tensor>", "__slots__": ()})()
#: Keras' variable lists, kept in TF's order (``TFLoadedObject.variables``).
_VARIABLE_LISTS = ("variables", "trainable_variables", "non_trainable_variables")


def import_tf() -> tuple[Any, Any]:
    try:
        import tensorflow as tf
        import tf2jax
    except ImportError as e:
        raise ImportError("Loading a SavedModel written by TensorFlow needs TensorFlow and tf2jax: "
                          "pip install 'tapejax[tf]'") from e
    tf2jax_ops.install()   # (its TensorList, While and If conversions, replaced)
    return tf, tf2jax


class TFLoadedObject(Module):
    """An object of a TF SavedModel loaded by tapejax: the saved children and functions as
    attributes, callable where TF's object had a ``__call__``; ``variables`` /
    ``trainable_variables`` / ``non_trainable_variables`` are the saved Keras lists (TF's
    order) where the object had them, else the attribute walk of ``tapejax.Module``."""

    def __init__(self, name: str = "loaded_object"):
        super().__init__(name=name)
        self._call_fn = None
        self._tf_lists: dict = {}

    def __call__(self, *args, **kwargs):
        if self._call_fn is None:
            raise TypeError(f"'{type(self).__name__}' object is not callable: the SavedModel's object had "
                            "no `__call__` function")
        return self._call_fn(*args, **kwargs)

    @property
    def variables(self):
        own = self.__dict__.get("_tf_lists", {}).get("variables")
        return tuple(own) if own is not None else super().variables

    @property
    def trainable_variables(self):
        own = self.__dict__.get("_tf_lists", {}).get("trainable_variables")
        return tuple(own) if own is not None else super().trainable_variables

    @property
    def non_trainable_variables(self):
        own = self.__dict__.get("_tf_lists", {}).get("non_trainable_variables")
        return tuple(own) if own is not None else super().non_trainable_variables


class TFLoadedModel(TFLoadedObject):
    """The root of a TF SavedModel loaded by tapejax: also ``signatures``, name -> signature."""

    def __init__(self):
        super().__init__(name="loaded_model")
        self.signatures = {}


class Conversion(NamedTuple):
    """One saved concrete function converted by tf2jax for one call form: ``pure(params, rng,
    *arrays) -> (outputs, {name: new value})`` on the Variables' values by tf2jax's parameter
    name and the call's array leaves (``rng`` a PRNG key where ``random``, else ignored); the TF
    Variables by parameter name; the parameters it assigns; the concrete function's output
    structure (its dicts' key order)."""
    pure: Callable[..., Any]
    tf_variables: dict
    assigned: tuple
    random: bool
    outputs: Any


class _Mirror:
    """TF's loaded objects as tapejax objects: one tapejax Variable per TF Variable."""

    def __init__(self, tf: Any, tf2jax: Any):
        self.tf, self.tf2jax = tf, tf2jax
        self.variables: dict = {}   # TF Variable's ref() -> tapejax Variable

    def variable(self, v: Any) -> Variable:
        key = v.ref()
        out = self.variables.get(key)
        if out is None:
            name = v.name[:-2] if v.name.endswith(":0") else v.name
            out = self.variables[key] = Variable(np.asarray(v.numpy()), trainable=bool(v.trainable), name=name)
        return out

    def convert(self, obj: Any, path: str, target: Optional[TFLoadedObject] = None) -> Any:
        tf = self.tf
        if isinstance(obj, tf.Variable):
            return self.variable(obj)
        if isinstance(obj, tf.types.experimental.PolymorphicFunction):
            return TFLoadedFunction(path, obj, self)
        children = _children(obj)
        if _is_list(obj):
            return [self.convert(children[str(i)], f"{path}[{i}]") for i in range(len(children))
                    if str(i) in children]
        if _is_dict(obj):
            return {k: self.convert(c, f"{path}[{k!r}]") for k, c in children.items()
                    if k not in _SKIPPED_CHILDREN}
        if isinstance(obj, tf.saved_model.Asset):
            return obj.asset_path.numpy().decode("utf-8", "surrogateescape")
        out = TFLoadedObject() if target is None else target
        for name, child in children.items():
            if name in _SKIPPED_CHILDREN:
                continue
            value = self.convert(child, f"{path}.{name}" if path else name)
            if name in _VARIABLE_LISTS and isinstance(value, list):
                out._tf_lists[name] = value
            elif name == "__call__":
                object.__setattr__(out, "_call_fn", value)
            else:
                object.__setattr__(out, name, value)
        return out


def _children(obj: Any) -> dict:
    try:
        return dict(obj._trackable_children())
    except (AttributeError, TypeError):
        return {}


def _is_list(obj: Any) -> bool:
    return type(obj).__name__ in ("ListWrapper", "_TupleWrapper") or isinstance(obj, (list, tuple))


def _is_dict(obj: Any) -> bool:
    return type(obj).__name__ == "_DictWrapper" or isinstance(obj, dict)


def _is_array(x: Any) -> bool:
    return isinstance(x, (Tensor, Variable, np.ndarray, np.generic, jax.Array))


class FunctionConverter:
    """Conversions of one TF function (a loaded ``RestoredFunction``, or a ``tf.function`` over a
    signature) by call form: the argument structure, the arrays' shapes and dtypes, the Python
    values.  TF matches each new form to a saved concrete function (its ValueError when none
    does); forms that reach the same saved function (other sizes of its ``None`` dimensions)
    share one conversion."""

    def __init__(self, name: str, restored: Any, tf: Any, tf2jax: Any):
        self.name, self._restored, self._tf, self._tf2jax = name, restored, tf, tf2jax
        self._by_form: dict = {}       # (structure, shapes and dtypes, Python values) -> Conversion
        self._by_concrete: dict = {}   # (saved function's name, structure, Python values) -> Conversion

    @property
    def function(self) -> Any:
        """The TF function converted."""
        return self._restored

    def get(self, treedef: Any, arrays: Sequence[tuple], statics: tuple) -> Conversion:
        """The conversion for a call whose leaves are ``statics`` (Python values; ``_TENSOR`` where
        an array is, ``arrays`` their ``(shape, NumPy dtype)`` in order)."""
        form = (treedef, tuple(arrays), _hashable(statics))
        conv = self._by_form.get(form)
        if conv is None:
            conv = self._by_form[form] = self._convert(treedef, arrays, statics)
        return conv

    def _convert(self, treedef: Any, arrays: Sequence[tuple], statics: tuple) -> Conversion:
        tf, tf2jax = self._tf, self._tf2jax
        it = iter(arrays)
        specs = [tf.TensorSpec(*_spec_args(tf, next(it))) if s is _TENSOR else s for s in statics]
        args, kwargs = jax.tree_util.tree_unflatten(treedef, specs)
        concrete = self._restored.get_concrete_function(*args, **kwargs)   # TF's matching and error
        key = (_callee(concrete), treedef, _hashable(statics))
        done = self._by_concrete.get(key)
        if done is not None:   # (another shape of the same saved function: its None sizes)
            return done
        try:
            with tf2jax.override_config("strict_shape_check", False):
                jax_fn, params = tf2jax.convert(_Inlining(self._restored), *args, **kwargs)
            tf_vars = _params_to_variables(concrete, params, tf)
            out = _conversion(tf2jax, jax_fn, tf_vars, treedef, statics, list(arrays), concrete.structured_outputs)
        except Exception as e:   # (tf2jax's own error, with what it was converting: a note on 3.11+)
            note = getattr(e, "add_note", None)
            if note is not None:
                note(f"(while tf2jax converted the loaded TensorFlow function `{self.name}`; "
                     "tapejax/train/saved_model/README.md lists what it does not convert)")
            raise
        self._by_concrete[key] = out
        return out


def _spec_args(tf: Any, array: tuple) -> tuple:
    shape, dtype = array   # (a symbolic size, Keras's functional build: None to TF)
    return tuple(d if isinstance(d, (int, np.integer)) else None for d in shape), tf.as_dtype(dtype)


def split_call(args: tuple, kwargs: dict, is_array: Callable[[Any], bool]) -> tuple:
    """A call's ``(treedef, array leaves, statics)``: its leaves with ``_TENSOR`` where
    ``is_array`` says an array is."""
    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs), is_leaf=is_array)
    arrays = [x for x in leaves if is_array(x)]
    statics = tuple(_TENSOR if is_array(x) else x for x in leaves)
    return treedef, arrays, statics


class TFLoadedFunction:
    """A function of a TF SavedModel: call it as TF's loaded function (positional and keyword
    arguments, TF's matching of the saved concrete functions); returns tapejax Tensors in the
    function's output structure.  Each conversion runs as one tape op over the loaded
    Variables' current values and the call's arrays."""

    def __init__(self, name: str, restored: Any, mirror: _Mirror):
        self.name = name
        self._restored = restored
        self._mirror = mirror
        self._converter = FunctionConverter(name, restored, mirror.tf, mirror.tf2jax)
        self._ops: dict = {}   # id(Conversion) -> (its tape op, the tapejax Variables by parameter name)

    @property
    def input_signature(self) -> Any:
        return self._restored.input_signature

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        treedef, arrays, statics = split_call(args, kwargs, _is_array)
        tensors = [convert_to_tensor(x) for x in arrays]
        conv = self._converter.get(treedef, [(tuple(t.shape), np.dtype(t.dtype.as_numpy_dtype)) for t in tensors],
                                   statics)
        entry = self._ops.get(id(conv))
        if entry is None:
            variables = {k: self._mirror.variable(v) for k, v in conv.tf_variables.items()}
            entry = self._ops[id(conv)] = (_tape_op(conv, self.name), variables, conv)
        op, variables, _ = entry
        extra = []
        if conv.random:
            from ...ops.random import _next_key
            extra = [Tensor(_next_key(None))]
        out, updates = op(variables, *extra, *tensors)
        for name in conv.assigned:
            variables[name].assign(updates[name])
        return ordered(out, conv.outputs)

    def __repr__(self) -> str:
        return f"<tapejax.saved_model TF function {self.name}>"


def _tape_op(conv: Conversion, name: str) -> Any:
    """``conv.pure`` as a tape op (``tapejax.op``; with its PRNG key argument only where it draws)."""
    from ...ops.jax_op import op
    pure = conv.pure

    def with_key(params: dict, rng: Any, *arrays: Any) -> Any:
        return pure(params, rng, *arrays)

    def without_key(params: dict, *arrays: Any) -> Any:
        return pure(params, None, *arrays)

    fn = with_key if conv.random else without_key
    fn.__name__ = fn.__qualname__ = name.replace(".", "_") or "call"   # (the op's name)
    return op(fn)


class _Inlining:
    """``fn`` (a ``tf.function``) whose concrete functions' graphs have their function calls
    inlined, for tf2jax, where a called function assigns a Variable: a loaded function's body
    is a call of the saved function, and tf2jax loses what a called function assigns (a
    ``BatchNormalization``'s moving statistics).  Not with custom gradients (tf2jax finds them
    by the original graph's node names): such a function that also assigns in a call gets
    tf2jax's ValueError "Some updated parameters are lost"."""

    def __init__(self, fn: Any):
        self._fn = fn

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> Any:
        concrete = self._fn.get_concrete_function(*args, **kwargs)
        gd = concrete.graph.as_graph_def()
        if not _assigns_in_calls(gd) or _has_custom_gradients(gd):
            return concrete   # (nothing to lose; or custom gradients, which tf2jax finds by node name)
        return _GraphView(concrete, _inlined_graph_def(concrete))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fn, name)


class _GraphView:
    """A concrete function (or its graph, ``graph=None``) whose ``graph.as_graph_def()`` is
    ``graph_def``; every other attribute is the concrete function's (its graph's)."""

    def __init__(self, target: Any, graph_def: Any, graph: bool = False):
        self._target, self._graph_def = target, graph_def
        if not graph:
            self.graph = _GraphView(target.graph, graph_def, graph=True)

    def as_graph_def(self, *args: Any, **kwargs: Any) -> Any:
        return self._graph_def

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


def _assigns_in_calls(gd: Any) -> bool:
    """Whether a function ``gd`` calls assigns a Variable."""
    return any(n.op.startswith(("Assign", "ResourceScatter", "ResourceApply")) and n.op != "Assert"
               for f in gd.library.function for n in f.node_def)


def _has_custom_gradients(gd: Any) -> bool:
    return any("_gradient_op_type" in n.attr for n in gd.node) or any(
        "_gradient_op_type" in n.attr for f in gd.library.function for n in f.node_def)


def _inlined_graph_def(concrete: Any) -> Any:
    """``concrete``'s GraphDef with its function calls inlined by TF's graph optimizer (control
    flow kept), and the resource ``Identity`` nodes that inlining puts between a Variable's
    handle and its reads and assignments taken out (tf2jax finds an assignment's Variable by
    the handle's own node)."""
    from tensorflow.core.framework import types_pb2
    from tensorflow.python.framework import convert_to_constants  # (TF's freezing uses the same pass)
    gd: Any = convert_to_constants._run_inline_graph_optimization(concrete, lower_control_flow=False,
                                                                  aggressive_inlining=True)
    resource = getattr(types_pb2, "DT_RESOURCE")
    alias = {n.name: n.input[0] for n in gd.node if n.op == "Identity" and n.attr["T"].type == resource}
    if not alias:
        return gd

    def source(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    kept = []
    for node in gd.node:
        if node.name in alias:
            continue
        inputs = []
        for i in node.input:
            control = i.startswith("^")
            name = i[1:] if control else i
            base = name.split(":")[0]
            if base in alias:
                if control:
                    continue   # (a control edge from a handle's Identity: the handle is always there)
                name = source(base)
            inputs.append(("^" if control else "") + name)
        del node.input[:]
        node.input.extend(inputs)
        kept.append(node)
    del gd.node[:]
    gd.node.extend(kept)
    return gd


def _callee(concrete: Any) -> Any:
    """The saved function ``concrete`` runs: a loaded function called with new shapes traces a
    wrapper per shape that only calls the saved concrete function its arguments match (one
    ``PartitionedCall``), so shapes that function's ``None`` sizes cover share a conversion."""
    calls = [n for n in concrete.graph.as_graph_def().node if n.op in ("PartitionedCall", "StatefulPartitionedCall")]
    if len(calls) == 1:
        return calls[0].attr["f"].func.name
    return concrete.name


def ordered(out: Any, template: Any) -> Any:
    """``out`` with its dicts' keys in the order of ``template``'s (TF's output structure; the
    op's outputs come back in JAX's sorted order)."""
    if isinstance(out, dict) and isinstance(template, dict) and set(out) == set(template):
        return {k: ordered(out[k], template[k]) for k in template}
    if isinstance(out, (list, tuple)) and isinstance(template, (list, tuple)) and len(out) == len(template):
        items = [ordered(o, t) for o, t in zip(out, template)]
        return type(out)(items) if not hasattr(out, "_fields") else type(out)(*items)
    return out


def _hashable(x: Any) -> Any:
    try:
        hash(x)
        return x
    except TypeError:
        return repr(x)


def _params_to_variables(concrete: Any, params: dict, tf: Any) -> dict:
    """tf2jax's parameter names -> the TF Variables they stand for.
    tf2jax names a parameter by its Variable's name, made unique in capture order with
    ``_1``, ``_2`` suffixes; the same walk over the concrete function's captures finds them."""
    by_handle = {v.handle.ref(): v for v in concrete.variables}
    n_flat = len(concrete.inputs) - len(concrete.captured_inputs)
    names: dict = {}
    out: dict = {}
    for inp, cap in zip(concrete.inputs[n_flat:], concrete.captured_inputs):
        if cap.dtype != tf.resource or cap.ref() not in by_handle:
            continue
        v = by_handle[cap.ref()]
        base = v.name.split(":")[0] if ":" in v.name else v.name
        name, k = base, 1
        while name in names:
            name, k = f"{base}_{k}", k + 1
        names[name] = v
    for name in params:
        if name not in names:
            raise ValueError(f"tf2jax's parameter {name!r} matches none of the function's Variables "
                             f"({sorted(names)}): this tf2jax version names them otherwise")
        out[name] = names[name]
    return out


def _conversion(tf2jax: Any, jax_fn: Any, tf_vars: dict, treedef: Any, statics: tuple, arrays: list,
                outputs: Any) -> Conversion:
    """``jax_fn`` (tf2jax's ``f(params, *args, rng=..., **kwargs)``) as a ``Conversion``: whether it
    draws (tf2jax's ValueError without a key) and which parameters it assigns (from the jaxpr:
    a new value that is not the parameter itself) found by tracing it once at ``arrays``' shapes."""
    slots = [i for i, s in enumerate(statics) if s is _TENSOR]

    def call(params: dict, rng: Any, *values: Any) -> Any:
        leaves = list(statics)
        for i, a in zip(slots, values):
            leaves[i] = a
        args, kwargs = jax.tree_util.tree_unflatten(treedef, leaves)
        # (TF matched the shapes to the saved function; the conversion's are one call's)
        with tf2jax.override_config("strict_shape_check", False):
            return jax_fn(params, *args, rng=rng, **kwargs)

    params = {k: jax.ShapeDtypeStruct(tuple(v.shape), np.dtype(v.dtype.as_numpy_dtype)) for k, v in tf_vars.items()}
    sample = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in arrays]
    random = False
    try:
        closed = jax.make_jaxpr(lambda p, *a: call(p, None, *a))(params, *sample)
    except ValueError as e:
        if "PRNG key required" not in str(e):
            raise
        random = True
        key = jax.ShapeDtypeStruct((2,), np.dtype(np.uint32))
        closed = jax.make_jaxpr(lambda p, k, *a: call(p, k, *a))(params, key, *sample)
    kept = _assigned(closed.jaxpr, sorted(params))

    def pure(params: dict, rng: Any, *values: Any) -> Any:
        out, new = call(params, rng, *values)
        return out, {k: new[k] for k in kept}

    return Conversion(pure, tf_vars, kept, random, outputs)


def _assigned(jaxpr: Any, names: list) -> tuple:
    """The parameters (``names``: the params dict's keys in flattening order, its first inputs)
    whose new value (the last ``len(names)`` outputs) is not the parameter itself."""
    n = len(names)
    if not n:
        return ()
    ins, outs = jaxpr.invars[:n], jaxpr.outvars[-n:]
    return tuple(name for name, i, o in zip(names, ins, outs) if o is not i)


def signature_function(tf: Any, concrete: Any) -> Any:
    """A signature's concrete function as a ``tf.function`` of its inputs by position, in the
    signature's order (what a TF signature takes positionally), with its TensorSpecs as the
    input signature: a ``tf.function`` is what tf2jax converts."""
    _, specs = concrete.structured_input_signature
    names = list(getattr(concrete, "_arg_keywords", None) or sorted(specs))

    def by_position(*args: Any) -> Any:
        return concrete(**dict(zip(names, args)))

    return tf.function(by_position, input_signature=[specs[n] for n in names], autograph=False)


class TFSignatureFunction:
    """A serving signature of a TF SavedModel: keyword arguments by input name (or positional,
    in the signature's order, as TF takes them), TF's dict of outputs."""

    def __init__(self, name: str, concrete: Any, mirror: _Mirror):
        tf = mirror.tf
        self.name = name
        _, specs = concrete.structured_input_signature
        self._names = list(getattr(concrete, "_arg_keywords", None) or sorted(specs))
        self._specs = [specs[n] for n in self._names]
        self.structured_input_signature = ((), dict(specs))
        self.structured_outputs = concrete.structured_outputs
        wrapped = signature_function(tf, concrete)
        self._fn = TFLoadedFunction(f"signatures[{name!r}]", wrapped, mirror)

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        names = self._names
        if len(args) > len(names):
            raise TypeError(f"Signature function `{self.name}` takes {len(names)} argument(s) ({names}); "
                            f"got {len(args)} positional")
        given = dict(zip(names, args))
        twice = sorted(set(given) & set(kwargs))
        if twice:
            raise TypeError(f"Signature function `{self.name}` got multiple values for {twice}")
        given.update(kwargs)
        unknown = sorted(set(given) - set(names))
        missing = [n for n in names if n not in given]
        if unknown or missing:
            raise TypeError(f"Signature function `{self.name}` expects the arguments {names}"
                            + (f"; unknown: {unknown}" if unknown else "") + (f"; missing: {missing}" if missing else ""))
        inputs = []
        for n, spec in zip(names, self._specs):
            want = _dtypes.as_dtype(spec.dtype.name)
            v = given[n]
            t = convert_to_tensor(v) if isinstance(v, (Tensor, Variable)) else convert_to_tensor(v, dtype_hint=want)
            if t.dtype != want:
                raise TypeError(f"Signature function `{self.name}`: input `{n}` must be {want.name}; got {t.dtype.name}")
            inputs.append(t)
        return self._fn(*inputs)

    def __repr__(self) -> str:
        return f"<tapejax.saved_model TF signature {self.name}>"


def load_tf(export_dir: str, tags: Any = None) -> TFLoadedModel:
    """A SavedModel that TensorFlow wrote, loaded by TF and converted (module docstring)."""
    tf, tf2jax = import_tf()
    path = os.fspath(export_dir)
    obj = tf.saved_model.load(path, tags=tags)
    mirror = _Mirror(tf, tf2jax)
    root = TFLoadedModel()
    mirror.convert(obj, "", root)
    sigs = getattr(obj, "signatures", None) or {}
    object.__setattr__(root, "signatures", {k: TFSignatureFunction(k, sigs[k], mirror) for k in sigs})
    object.__setattr__(root, "_tf_object", obj)   # (TF's functions capture its resources)
    return root


__all__ = ["load_tf", "import_tf", "TFLoadedModel", "TFLoadedObject", "TFLoadedFunction", "TFSignatureFunction",
           "Conversion", "FunctionConverter", "split_call", "signature_function", "ordered"]
