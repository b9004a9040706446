"""``saved_model.save(..., format="tf")`` / ``export_tf``: a real TensorFlow SavedModel via jax2tf.

The same pure programs as ``export`` (Variables as arguments, ``None`` sizes
symbolic) are converted with ``jax.experimental.jax2tf`` into TF functions
(an ``XlaCallModule`` op holding the StableHLO), wrapped in ``tf.function``s with
the same input signatures, attached to a ``tf.Module`` that holds the
Variables as ``tf.Variable``s (``jax_variables``, in export order), and saved
with ``tf.saved_model.save``.  ``tf.saved_model.load`` gives an object with
the same attributes and signatures; TF Serving reads the signatures
(``serving_default`` ...) with their input names and output dicts.  Needs
TensorFlow (the ``tf`` extra).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import export as _export
from .plan import _same, export_plan


def _tf():
    try:
        import tensorflow as tf
    except ImportError as e:
        raise ImportError("saved_model.save(..., format='tf') writes a TensorFlow SavedModel and needs "
                          "TensorFlow: pip install 'tapejax[tf]'") from e
    return tf


def export_tf(obj: Any, export_dir: Any, signatures: Any = None) -> None:
    """Write ``obj``'s signature functions and Variables as a TensorFlow SavedModel."""
    import os
    tf = _tf()
    from jax.experimental import jax2tf

    functions, sigs, variables, _ = export_plan(obj, signatures)
    module: Any = tf.Module()
    module.jax_variables = [tf.Variable(tf.constant(np.asarray(v.numpy())), trainable=v.trainable,
                                        name=v.name.split(":")[0].replace("/", "_")) for v in variables]
    made: list = []

    def tf_function(fn: Any, name: str) -> Any:
        for f, t in made:
            if _same(f, fn):
                return t
        inputs = _export.input_specs(fn)
        pure, tpl = _export.pure_function(fn, variables, name)
        polys = [None] + ["(" + ", ".join(f"d{i}_{j}" if d is None else str(d)
                                          for j, d in enumerate(spec["shape"])) + ")" for i, spec in enumerate(inputs)]
        converted = jax2tf.convert(pure, polymorphic_shapes=polys, with_gradient=False)
        specs = [tf.TensorSpec(spec["shape"], tf.as_dtype(spec["dtype"]), name=spec["name"]) for spec in inputs]

        def call(*args: Any) -> Any:
            flat = converted(list(module.jax_variables), *args)
            return _export.fill(tpl[0], list(flat))

        t = tf.function(call, input_signature=specs, autograph=False)
        made.append((fn, t))
        return t

    for attr, fn in functions.items():
        setattr(module, attr, tf_function(fn, attr.strip("_") or "call"))
    tf_sigs = {}
    for sname, fn in sigs.items():
        t = tf_function(fn, sname)
        tf_sigs[sname] = t.get_concrete_function()
    tf.saved_model.save(module, os.fspath(export_dir), signatures=tf_sigs or None)


__all__ = ["export_tf"]
