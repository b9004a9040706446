"""``tapejax.saved_model``: TF's ``tf.saved_model`` on ``jax.export``.

``save(obj, export_dir, signatures=None, options=None, format="jax")`` writes
the object's ``tapejax.function``s that have an ``input_signature`` as
serialized StableHLO programs (``jax.export``) next to a checkpoint of its
Variables; ``load(export_dir)`` gives back a callable object in any process,
without the Python class (``load``).  ``format="tf"`` (or ``export_tf``) writes a
real TensorFlow SavedModel through ``jax2tf`` instead, for ``tf.saved_model.load``
and TF Serving (``tf_export``; needs TensorFlow).  See README.md.
"""
from .load import LoadedFunction, LoadedModel, SignatureFunction, load
from .save import SaveOptions, save
from .tf_export import export_tf

__all__ = ["save", "load", "export_tf", "SaveOptions", "LoadedModel", "LoadedFunction", "SignatureFunction"]
