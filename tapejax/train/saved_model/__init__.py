"""``tapejax.saved_model``: TF's ``tf.saved_model`` on ``jax.export``.

``save(obj, export_dir, signatures=None, options=None, format="jax")`` writes
the object's ``tapejax.function``s that have an ``input_signature`` as
serialized StableHLO programs (``jax.export``) next to a checkpoint of its
Variables; ``load(export_dir)`` gives back a callable object in any process,
without the Python class (``load``).  ``format="tf"`` (or ``export_tf``) writes a
real TensorFlow SavedModel through ``jax2tf`` instead, for ``tf.saved_model.load``
and TF Serving (``tf_export``; needs TensorFlow).  See README.md.
"""
from .constants import (  # TF's constants, contains_saved_model, LoadOptions
    ASSETS_DIRECTORY,
    ASSETS_KEY,
    CLASSIFY_INPUTS,
    CLASSIFY_METHOD_NAME,
    CLASSIFY_OUTPUT_CLASSES,
    CLASSIFY_OUTPUT_SCORES,
    DEBUG_DIRECTORY,
    DEBUG_INFO_FILENAME_PB,
    DEFAULT_SERVING_SIGNATURE_DEF_KEY,
    GPU,
    PREDICT_INPUTS,
    PREDICT_METHOD_NAME,
    PREDICT_OUTPUTS,
    REGRESS_INPUTS,
    REGRESS_METHOD_NAME,
    REGRESS_OUTPUTS,
    SAVED_MODEL_FILENAME_PB,
    SAVED_MODEL_FILENAME_PBTXT,
    SAVED_MODEL_SCHEMA_VERSION,
    SERVING,
    TPU,
    TRAINING,
    VARIABLES_DIRECTORY,
    VARIABLES_FILENAME,
    LoadOptions,
    contains_saved_model,
)
from .load import LoadedFunction, LoadedModel, SignatureFunction, load
from .save import SaveOptions, save
from .tf_export import export_tf

__all__ = ["save", "load", "export_tf", "SaveOptions", "LoadedModel", "LoadedFunction", "SignatureFunction",
           "ASSETS_DIRECTORY", "ASSETS_KEY", "CLASSIFY_INPUTS", "CLASSIFY_METHOD_NAME",
           "CLASSIFY_OUTPUT_CLASSES", "CLASSIFY_OUTPUT_SCORES", "DEBUG_DIRECTORY", "DEBUG_INFO_FILENAME_PB",
           "DEFAULT_SERVING_SIGNATURE_DEF_KEY", "GPU", "LoadOptions", "PREDICT_INPUTS",
           "PREDICT_METHOD_NAME", "PREDICT_OUTPUTS", "REGRESS_INPUTS", "REGRESS_METHOD_NAME",
           "REGRESS_OUTPUTS", "SAVED_MODEL_FILENAME_PB", "SAVED_MODEL_FILENAME_PBTXT",
           "SAVED_MODEL_SCHEMA_VERSION", "SERVING", "TPU", "TRAINING", "VARIABLES_DIRECTORY",
           "VARIABLES_FILENAME", "contains_saved_model"]
