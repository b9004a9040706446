"""``tf.keras.layers.TFSMLayer`` on the JAX backend: an endpoint of a TF SavedModel as a Keras layer.

TF 2.21's Keras 3 loads a legacy SavedModel (``tf_keras`` ``model.save(path)``, a Keras 3
``model.export(path)``, a TF Hub model) only through ``keras.layers.TFSMLayer``; Keras's own
class runs on the TensorFlow backend only.  This one has Keras's signature, endpoint rules and
errors, on JAX: TensorFlow reads the directory (``tf.saved_model.load``), the Variables the
endpoints use become the layer's Keras weights (trainable as saved, so ``fit`` and
``GradientTape`` fine-tune them), and ``call`` runs the endpoint's saved concrete function
converted by tf2jax (``train.saved_model.tf_load.FunctionConverter``; one conversion per
saved concrete function) on those weights' values, inside Keras's stateless call like any
layer's JAX code.  An endpoint that assigns Variables (``BatchNormalization`` statistics in a
training endpoint) assigns the weights; one that draws random numbers draws from the layer's
``SeedGenerator`` (seeded by ``tf.random.set_seed``), not TF's stream.  ``install`` puts the
class in ``keras.layers`` (Keras's raises NotImplementedError on JAX).
"""
from __future__ import annotations

from typing import Any

import jax
import keras
import numpy as np

from ..train.saved_model import tf_load

#: The TF ops that make tf2jax ask for a PRNG key.
_RANDOM_OPS = frozenset({"RandomStandardNormal", "RandomUniform", "RandomUniformInt"})


class TFSMLayer(keras.layers.Layer):
    """Reload a SavedModel's endpoint as a layer (Keras's ``TFSMLayer`` API): ``call_endpoint``
    (an attribute function, ``"serve"`` for a Keras 3 export, or a signature such as
    ``"serving_default"``) is ``call(inputs)``; ``call_training_endpoint``, where given, is
    ``call(inputs, training=True)``."""

    def __init__(self, filepath: Any, call_endpoint: str = "serve", call_training_endpoint: Any = None,
                 trainable: bool = True, name: Any = None, dtype: Any = None):
        tf, tf2jax = tf_load.import_tf()
        super().__init__(trainable=trainable, name=name, dtype=dtype)
        self._reloaded_obj = tf.saved_model.load(filepath)
        self.filepath = filepath
        self.call_endpoint = call_endpoint
        self.call_training_endpoint = call_training_endpoint
        endpoints = {False: self._endpoint(call_endpoint)}
        if call_training_endpoint:
            endpoints[True] = self._endpoint(call_training_endpoint)
        self._converters = {k: tf_load.FunctionConverter(
            name, tf_load.signature_function(tf, fn) if isinstance(fn, tf.types.experimental.ConcreteFunction) else fn,
            tf, tf2jax) for k, (name, fn) in endpoints.items()}
        self._by_ref: dict = {}
        trainable_vars, other_vars, random = _used_variables([fn for _, fn in endpoints.values()])
        for v in trainable_vars + other_vars:
            self._by_ref[v.ref()] = self._existing_weight(v)
        self._seed_generator = keras.random.SeedGenerator() if random else None
        self._build_at_init()

    def _endpoint(self, endpoint: str) -> tuple[str, Any]:
        """``(endpoint, its TF function)``: an attribute, else a signature (Keras's order)."""
        obj = self._reloaded_obj
        if hasattr(obj, endpoint):
            return endpoint, getattr(obj, endpoint)
        if endpoint in obj.signatures:
            return endpoint, obj.signatures[endpoint]
        else:
            raise ValueError(f"The endpoint '{endpoint}' is neither an attribute of the reloaded SavedModel, "
                             "nor an entry in the `signatures` field of the reloaded SavedModel. Select another "
                             "endpoint via the `call_endpoint` argument. Available endpoints for this "
                             f"SavedModel: {list(obj.signatures.keys())}")

    def _existing_weight(self, weight: Any) -> Any:
        variable = keras.Variable(initializer=np.asarray(weight.numpy()), trainable=bool(weight.trainable),
                                  dtype=weight.dtype.name, shape=tuple(weight.shape),
                                  name=weight.name.replace("/", "_"))   # (Keras's: no slashes in Keras names)
        self._track_variable(variable)
        return variable

    def call(self, inputs: Any, training: bool = False, **kwargs: Any) -> Any:
        converter = self._converters[bool(training) and True in self._converters]
        treedef, arrays, statics = tf_load.split_call((inputs,), kwargs, _is_array)
        conv = converter.get(treedef, [(tuple(a.shape), np.dtype(a.dtype)) for a in arrays], statics)
        variables = {k: self._by_ref[v.ref()] for k, v in conv.tf_variables.items()}
        rng = None
        if conv.random:
            if self._seed_generator is None:   # pragma: no cover - the graphs were scanned at init
                raise RuntimeError(f"endpoint `{converter.name}` draws random numbers its graph did not show")
            rng = self._seed_generator.next()   # (a raw uint32 key on JAX: what tf2jax splits)
        out, new = conv.pure({k: v.value for k, v in variables.items()}, rng, *arrays)
        for k in conv.assigned:
            variables[k].assign(new[k])
        return tf_load.ordered(out, conv.outputs)

    def get_config(self) -> dict:
        return {**super().get_config(), "filepath": self.filepath, "call_endpoint": self.call_endpoint,
                "call_training_endpoint": self.call_training_endpoint}


def _is_array(x: Any) -> bool:
    return isinstance(x, (jax.Array, np.ndarray, np.generic))


def _used_variables(functions: list) -> tuple[list, list, bool]:
    """The TF Variables the functions' saved concrete functions read, Keras's order (each
    function's trainable ones, then the others), and whether any of those graphs draws."""
    trainable: dict = {}
    other: dict = {}
    random = False
    for fn in functions:
        if hasattr(fn, "concrete_functions"):
            concretes = fn.concrete_functions
        elif hasattr(fn, "get_concrete_function"):
            concretes = [fn.get_concrete_function()]
        else:
            concretes = [fn]
        for c in concretes:
            for v in c.trainable_variables:
                trainable.setdefault(id(v), v)
            for v in c.variables:
                if id(v) not in trainable:
                    other.setdefault(id(v), v)
            gd = c.graph.as_graph_def()
            random = random or any(n.op in _RANDOM_OPS for n in gd.node) or any(
                n.op in _RANDOM_OPS for f in gd.library.function for n in f.node_def)
    return list(trainable.values()), list(other.values()), random


def install(module: Any) -> None:
    """``keras.layers.TFSMLayer`` is this class (Keras's runs on the TensorFlow backend only)."""
    module.layers.TFSMLayer = TFSMLayer


__all__ = ["TFSMLayer", "install"]
