"""``tf.errors``' classes and codes, ``tf.saved_model``'s constants, ``contains_saved_model`` and
``LoadOptions`` under TF and tapejax."""
import os
import tempfile

from .harness import parity, raises

_ERRORS = ["AbortedError", "AlreadyExistsError", "CancelledError", "DataLossError", "DeadlineExceededError",
           "FailedPreconditionError", "InternalError", "InvalidArgumentError", "NotFoundError", "OutOfRangeError",
           "PermissionDeniedError", "ResourceExhaustedError", "UnauthenticatedError", "UnavailableError",
           "UnimplementedError", "UnknownError"]
_CODES = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
          "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
          "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"]


@parity
def test_error_classes_and_codes(tf):
    """Every class: an OpError with TF's ``error_code``, its message, node_def and op; the codes;
    OpError's own code argument; ``except`` by the base class."""
    out = {c: getattr(tf.errors, c) for c in _CODES}
    for name in _ERRORS:
        e = getattr(tf.errors, name)(None, None, "went wrong")
        out[name] = (isinstance(e, tf.errors.OpError), e.error_code, e.message, str(e), e.node_def, e.op)
    base = tf.errors.OpError(None, None, "base", tf.errors.ABORTED)
    out["OpError"] = (base.error_code, base.message)
    try:
        raise tf.errors.UnavailableError(None, None, "later")
    except tf.errors.OpError as e:
        out["caught"] = type(e).__name__
    return out


_CONSTANTS = ["ASSETS_DIRECTORY", "ASSETS_KEY", "CLASSIFY_INPUTS", "CLASSIFY_METHOD_NAME", "CLASSIFY_OUTPUT_CLASSES",
              "CLASSIFY_OUTPUT_SCORES", "DEBUG_DIRECTORY", "DEBUG_INFO_FILENAME_PB", "DEFAULT_SERVING_SIGNATURE_DEF_KEY",
              "GPU", "PREDICT_INPUTS", "PREDICT_METHOD_NAME", "PREDICT_OUTPUTS", "REGRESS_INPUTS", "REGRESS_METHOD_NAME",
              "REGRESS_OUTPUTS", "SAVED_MODEL_FILENAME_PB", "SAVED_MODEL_FILENAME_PBTXT", "SAVED_MODEL_SCHEMA_VERSION",
              "SERVING", "TPU", "TRAINING", "VARIABLES_DIRECTORY", "VARIABLES_FILENAME"]


@parity
def test_saved_model_constants_contains_and_load_options(tf):
    """The constants; ``contains_saved_model`` of a directory this side's ``save`` wrote (also as
    a ``Path``), of a missing one and of a file; ``LoadOptions``' defaults, its bad policy, and
    ``load`` taking it."""
    root = tempfile.mkdtemp(prefix="sm_parity_")
    m = tf.Module()
    m.v = tf.Variable(2.0)
    m.f = tf.function(lambda x: x * m.v, input_signature=[tf.TensorSpec([], tf.float32)])
    path = os.path.join(root, "model")
    tf.saved_model.save(m, path)
    loose = os.path.join(root, "file.txt")
    with open(loose, "w") as f:
        f.write("x")
    o = tf.saved_model.LoadOptions()
    loaded = tf.saved_model.load(path, options=tf.saved_model.LoadOptions(allow_partial_checkpoint=True))
    return ({c: getattr(tf.saved_model, c) for c in _CONSTANTS},
            tf.saved_model.contains_saved_model(path), tf.saved_model.contains_saved_model(__import__("pathlib").Path(path)),
            tf.saved_model.contains_saved_model(os.path.join(root, "missing")), tf.saved_model.contains_saved_model(loose),
            (o.allow_partial_checkpoint, o.experimental_io_device, o.experimental_skip_checkpoint,
             o.experimental_load_function_aliases),
            raises(tf.saved_model.LoadOptions, experimental_variable_policy="bad"),
            loaded.f(tf.constant(3.0)))
