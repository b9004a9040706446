"""``tf.saved_model``'s constants, ``contains_saved_model`` and ``LoadOptions``.

The constants are TF's names for a SavedModel's files, tags and serving signature keys (the
strings of ``tensorflow/python/saved_model/{constants,tag_constants,signature_constants}.py``):
code that writes ``tags=[tf.saved_model.SERVING]`` or reads
``loaded.signatures[tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY]`` ports unchanged.
``contains_saved_model`` recognises both formats ``save`` writes: tapejax's (its index file)
and TF's (``saved_model.pb`` or ``.pbtxt``, ``format="tf"``).
"""
import os
from typing import Any

from .. import export_layout as layout

ASSETS_DIRECTORY = "assets"
ASSETS_KEY = "saved_model_assets"
DEBUG_DIRECTORY = "debug"
DEBUG_INFO_FILENAME_PB = "saved_model_debug_info.pb"
SAVED_MODEL_FILENAME_PB = "saved_model.pb"
SAVED_MODEL_FILENAME_PBTXT = "saved_model.pbtxt"
SAVED_MODEL_SCHEMA_VERSION = 1
VARIABLES_DIRECTORY = "variables"
VARIABLES_FILENAME = "variables"

# tags
SERVING = "serve"
TRAINING = "train"
GPU = "gpu"
TPU = "tpu"

# signature keys and method names
DEFAULT_SERVING_SIGNATURE_DEF_KEY = "serving_default"
CLASSIFY_INPUTS = "inputs"
CLASSIFY_METHOD_NAME = "tensorflow/serving/classify"
CLASSIFY_OUTPUT_CLASSES = "classes"
CLASSIFY_OUTPUT_SCORES = "scores"
PREDICT_INPUTS = "inputs"
PREDICT_METHOD_NAME = "tensorflow/serving/predict"
PREDICT_OUTPUTS = "outputs"
REGRESS_INPUTS = "inputs"
REGRESS_METHOD_NAME = "tensorflow/serving/regress"
REGRESS_OUTPUTS = "outputs"


def contains_saved_model(export_dir: Any) -> bool:
    """Whether directory ``export_dir`` holds a SavedModel: tapejax's, or TF's ``saved_model.pb``
    / ``saved_model.pbtxt`` (a file path, or a missing one: False)."""
    path = os.fspath(export_dir)
    if isinstance(path, bytes):
        path = path.decode("utf-8", "surrogateescape")
    if not os.path.isdir(path):
        return False
    return layout.is_saved_model(path) or any(
        os.path.isfile(os.path.join(path, name)) for name in (SAVED_MODEL_FILENAME_PB, SAVED_MODEL_FILENAME_PBTXT))


_POLICIES = (None, "none", "save_variable_devices", "expand_distributed_variables")


class LoadOptions:
    """``tf.saved_model.LoadOptions``: TF's loading options, kept for ``load(options=...)``.
    tapejax's loader reads every Variable from its checkpoint on the default device, so the
    options change nothing; a bad ``experimental_variable_policy`` is TF's ValueError."""

    __slots__ = ("allow_partial_checkpoint", "experimental_io_device", "experimental_skip_checkpoint",
                 "experimental_variable_policy", "experimental_load_function_aliases")

    def __init__(self, allow_partial_checkpoint: bool = False, experimental_io_device: Any = None,
                 experimental_skip_checkpoint: bool = False, experimental_variable_policy: Any = None,
                 experimental_load_function_aliases: bool = False):
        policy = getattr(experimental_variable_policy, "value", experimental_variable_policy)
        if policy not in _POLICIES:
            raise ValueError(f"Received invalid VariablePolicy value: {experimental_variable_policy}.")
        if experimental_io_device is not None and not isinstance(experimental_io_device, str):
            raise TypeError(f"`experimental_io_device` must be a device string or None; got {experimental_io_device!r}")
        self.allow_partial_checkpoint = bool(allow_partial_checkpoint)
        self.experimental_io_device = experimental_io_device
        self.experimental_skip_checkpoint = bool(experimental_skip_checkpoint)
        self.experimental_variable_policy = policy
        self.experimental_load_function_aliases = bool(experimental_load_function_aliases)


__all__ = ["ASSETS_DIRECTORY", "ASSETS_KEY", "CLASSIFY_INPUTS", "CLASSIFY_METHOD_NAME", "CLASSIFY_OUTPUT_CLASSES",
           "CLASSIFY_OUTPUT_SCORES", "DEBUG_DIRECTORY", "DEBUG_INFO_FILENAME_PB", "DEFAULT_SERVING_SIGNATURE_DEF_KEY",
           "GPU", "LoadOptions", "PREDICT_INPUTS", "PREDICT_METHOD_NAME", "PREDICT_OUTPUTS", "REGRESS_INPUTS",
           "REGRESS_METHOD_NAME", "REGRESS_OUTPUTS", "SAVED_MODEL_FILENAME_PB", "SAVED_MODEL_FILENAME_PBTXT",
           "SAVED_MODEL_SCHEMA_VERSION", "SERVING", "TPU", "TRAINING", "VARIABLES_DIRECTORY", "VARIABLES_FILENAME",
           "contains_saved_model"]
