"""``saved_model.save(..., format="tf")`` / ``export_tf``: a real TensorFlow SavedModel via jax2tf.

The same pure programs as ``export`` (Variables as arguments, ``None`` sizes
symbolic) are converted with ``jax.experimental.jax2tf`` into TF functions
(an ``XlaCallModule`` op holding the StableHLO, with its gradient: TF differentiates a loaded
call, so a ``GradientTape`` fine-tunes the loaded model's Variables), wrapped in ``tf.function``s
with the same input signatures, attached to a ``tf.Module`` that holds the Variables as
``tf.Variable``s at the attribute paths of the object (``loaded.dense.w``, ``loaded.layers[0].w``,
as TF's own SavedModel of that object) and in ``jax_variables`` (export order), and saved with
``tf.saved_model.save``.  ``tf.saved_model.load`` gives an object with the same attributes and
signatures, nested objects' functions at their paths (``loaded.encoder.encode``); TF Serving reads the signatures (``serving_default`` ...) with their input names and
output dicts.  Needs
TensorFlow (the ``tf`` extra).  Where TensorFlow's StableHLO is older than JAX's (TF 2.21 with
JAX 0.11 cannot read the custom call of shape assertions), a function with ``None`` sizes is
refused before anything is written (``_runs`` finds out by one call on zeros), rather than
saved as a model that TF cannot run.
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

from .. import trackable as _tr
from . import export as _export
from .plan import _same, export_plan


def _tf():
    try:
        import tensorflow as tf
    except ImportError as e:
        raise ImportError("saved_model.save(..., format='tf') writes a TensorFlow SavedModel and needs "
                          "TensorFlow: pip install 'tapejax[tf]'") from e
    return tf


def _runs(tf: Any, t: Any, specs: Any) -> bool:
    """Does TF run ``t`` (its ``XlaCallModule`` deserialized) on zeros of ``specs`` (size 1 for
    None)?  Only a failure to read the module counts: another error is the function's own."""
    args = [tf.zeros([1 if d is None else d for d in s.shape.as_list()], s.dtype) for s in specs]
    try:
        t(*args)
    except tf.errors.InvalidArgumentError as e:
        if "Cannot deserialize computation" in str(e):
            return False
    except Exception:   # noqa: BLE001 - the function's own error (on zeros): not this check's
        pass
    return True


def _mirror(tf: Any, obj: Any, root: Any, tf_vars: dict) -> None:
    """Give ``root`` (a ``tf.Module``) the objects below ``obj`` as TF objects holding ``tf_vars``
    (by the tapejax Variable's id): a list or tuple as a list, a dict as a dict, a Variable as its
    ``tf.Variable``, any other trackable as a ``tf.Module`` with its children as attributes;
    nothing where no Variable is held."""
    seen: dict = {}

    def walk(o: Any, into: Any = None) -> Any:
        if _tr.is_value(o):
            return tf_vars.get(id(o))
        if id(o) in seen:
            return seen[id(o)]
        seen[id(o)] = None   # (a cycle back to an object being walked holds nothing more)
        every = [(name, walk(child)) for name, child in _tr.children(o)]
        kids = [(name, k) for name, k in every if k is not None]
        if isinstance(o, (list, tuple)) and getattr(o, "_fields", None) is None:
            out: Any = [k for _, k in every] if kids else None   # (indices kept)
        elif _tr.is_container(o):
            out = dict(kids) if kids else None
        else:
            out = into if into is not None else tf.Module() if kids else None
            for name, k in kids:
                try:
                    setattr(out, name, k)
                except AttributeError:   # (a name tf.Module keeps read-only: ``name``, ``variables``)
                    pass
        seen[id(o)] = out
        return out

    walk(obj, root)


def _owner(tf: Any, root: Any, path: list) -> Any:
    """The ``tf.Module`` at ``path`` below ``root`` (a nested object's function goes there, so
    ``loaded.encoder.encode`` runs as in TF's own SavedModel), made where the object holds no
    Variable; None where the path passes a list element there is no Module for."""
    obj = root
    for part in path:
        if isinstance(obj, list):
            obj = obj[int(part)] if part.isdigit() and int(part) < len(obj) else None
        elif isinstance(obj, dict):
            obj = obj.get(part)
        else:
            nxt = vars(obj).get(part)
            if nxt is None:
                nxt = tf.Module()
                setattr(obj, part, nxt)
            obj = nxt
        if not isinstance(obj, (tf.Module, list, dict)):
            return None
    return obj if isinstance(obj, tf.Module) else None


def _as_list_call(t: Any) -> Any:
    def call(xs: Any) -> Any:
        return t(*xs)
    return call


def export_tf(obj: Any, export_dir: Any, signatures: Any = None) -> None:
    """Write ``obj``'s signature functions and Variables as a TensorFlow SavedModel."""
    import os
    tf = _tf()
    from jax.experimental import jax2tf

    functions, sigs, variables, _ = export_plan(obj, signatures)
    module: Any = tf.Module()
    module.jax_variables = [tf.Variable(tf.constant(np.asarray(v.numpy())), trainable=v.trainable,
                                        name=v.name.split(":")[0].replace("/", "_")) for v in variables]
    _mirror(tf, obj, module, {id(v): t for v, t in zip(variables, module.jax_variables)})
    made: list = []

    def tf_function(fn: Any, name: str) -> Any:
        for f, t in made:
            if _same(f, fn):
                return t
        inputs = _export.input_specs(fn)
        pure, tpl = _export.pure_function(fn, variables, name)
        specs = [tf.TensorSpec(spec["shape"], tf.as_dtype(spec["dtype"]), name=spec["name"]) for spec in inputs]

        def attempt(shared: bool) -> Any:
            polys = [None] + ["(" + _export.poly_dims(spec, i, shared) + ")" for i, spec in enumerate(inputs)]
            converted = jax2tf.convert(pure, polymorphic_shapes=polys, with_gradient=True)

            def call(*args: Any) -> Any:
                flat = converted(list(module.jax_variables), *args)
                return _export.fill(tpl[0], list(flat))

            t = tf.function(call, input_signature=specs, autograph=False)
            t.get_concrete_function()   # (traced now: what the symbols cannot express fails here)
            return t

        t = _export.with_shared_batch(attempt, inputs, bool(getattr(fn, "_shared_batch", False)))
        if any(d is None for spec in inputs for d in spec["shape"]) and not _runs(tf, t, specs):
            raise RuntimeError(
                f"saved_model.save(format='tf'): TensorFlow {tf.__version__} cannot read the shape assertions "
                f"that JAX {jax.__version__} writes for the None sizes in the input_signature of {name!r} (its "
                "StableHLO is older than JAX's); give the signature concrete sizes, save with format='jax', "
                "or pair this TensorFlow with an older JAX (TF 2.21 reads JAX 0.10's)")
        made.append((fn, t))
        return t

    for attr, fn in functions.items():
        *path, last = attr.split(".")
        owner = _owner(tf, module, path)
        if owner is None:
            continue   # (a function of an object the TF module has no place for: a list element without Variables)
        t = tf_function(fn, ".".join(part.strip("_") or "call" for part in attr.split(".")))
        specs = list(t.input_signature)
        if getattr(fn, "_shared_batch", False) and len(specs) > 1:   # a Keras model: its inputs as one list
            t = tf.function(_as_list_call(t), input_signature=[specs], autograph=False)
        setattr(owner, last, t)
    tf_sigs = {}
    for sname, fn in sigs.items():
        t = tf_function(fn, sname)
        tf_sigs[sname] = t.get_concrete_function()
    tf.saved_model.save(module, os.fspath(export_dir), signatures=tf_sigs or None)


__all__ = ["export_tf"]
