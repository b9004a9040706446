"""``tapejax.saved_model.save``: a directory that runs without the Python class.

What is saved (``layout``): every ``tapejax.function`` with an
``input_signature`` found on the object (methods decorated in its class,
``__call__`` included) and every function named in ``signatures``, each as a
``jax.export`` artifact (serialized StableHLO, with its first derivative so a
loaded model can be fine-tuned); the object's Variables as a tapejax
checkpoint (``variables/``), so ``tf.train.Checkpoint(model).restore(dir)``
reads them too; and ``saved_model.json``, written last: a directory without
it is not a SavedModel, so an interrupted save is never loaded.

``signatures``: a function (it becomes ``serving_default``) or a dict
``{name: function}``; without it, the object's only function with an
``input_signature`` (if it has exactly one) is ``serving_default``, as TF.
``format="tf"`` writes a TensorFlow SavedModel instead (``tf_export``).
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any, Optional, Sequence

from ...core.errors import FailedPreconditionError
from .. import export_layout as layout
from ..checkpoint import Checkpoint
from . import export as _export
from .plan import _same, export_plan
from .tf_export import export_tf


class SaveOptions:
    """``tf.saved_model.SaveOptions``: ``platforms`` (tapejax's) chooses the platforms the
    programs are lowered for (default: CPU and CUDA, or the current one when an op has no
    CUDA lowering); TF's other options are accepted, kept as attributes and ignored.

    ``experimental_custom_gradients`` (default True): a saved function's custom gradients are in
    its artifact either way (its first derivative).  TF's False leaves them out of the SavedModel,
    but a model loaded in the process that saved it still differentiates with them (TF finds them
    in the process's gradient registry), which is what tapejax's loaded function does; loaded in
    another process, TF refuses to run such a function under a tape (LookupError: no gradient for
    IdentityN), tapejax still differentiates it."""

    def __init__(self, namespace_whitelist=None, save_debug_info=False, function_aliases=None,
                 experimental_io_device=None, experimental_variable_policy=None,
                 experimental_custom_gradients: bool = True, platforms: Optional[Sequence[str]] = None,
                 **kwargs: Any):
        self.platforms = None if platforms is None else tuple(platforms)
        self.function_aliases = function_aliases
        self.namespace_whitelist = namespace_whitelist
        self.save_debug_info = save_debug_info
        self.experimental_io_device = experimental_io_device
        self.experimental_variable_policy = experimental_variable_policy
        self.experimental_custom_gradients = experimental_custom_gradients


def save(obj: Any, export_dir: Any, signatures: Any = None, options: Optional[SaveOptions] = None,
         format: str = "jax") -> None:
    """Save ``obj``'s signature functions and Variables to ``export_dir`` (see the module docstring)."""
    if format not in ("jax", "tf"):
        raise ValueError(f"saved_model.save: `format` must be 'jax' (jax.export) or 'tf' (a TensorFlow "
                         f"SavedModel through jax2tf); got {format!r}")
    if options is not None and not isinstance(options, SaveOptions):
        raise TypeError(f"`options` must be a tapejax.saved_model.SaveOptions; got {options!r}")
    path = os.fspath(export_dir)
    if os.path.exists(path) and not os.path.isdir(path):
        raise FailedPreconditionError(None, None, f"{path} is not a directory")
    if format == "tf":
        export_tf(obj, path, signatures=signatures)
        return
    functions, sigs, variables, live = export_plan(obj, signatures)
    platforms = None if options is None else options.platforms
    # one artifact per distinct function: named by its attribute, else by its signature
    exported: list[tuple[str, Any]] = []
    attributes: dict[str, str] = {}
    for attr, fn in functions.items():
        name = next((n for n, f in exported if _same(f, fn)), None)
        if name is None:
            name = ".".join(part.strip("_") or "call" for part in attr.split("."))
            exported.append((name, fn))
        attributes[attr] = name
    sig_index = {}
    for sname, fn in sigs.items():
        name = next((n for n, f in exported if _same(f, fn)), None)
        if name is None:
            name = f"signature_{sname}"
            exported.append((name, fn))
        sig_index[sname] = name
    results = [_export.export_function(fn, variables, name, platforms) for name, fn in exported]
    if os.path.exists(layout.index_path(path)):
        os.remove(layout.index_path(path))   # (the directory is not a SavedModel until it is complete)
    shutil.rmtree(os.path.join(path, "functions"), ignore_errors=True)
    os.makedirs(os.path.join(path, "functions"), exist_ok=True)
    for r in results:
        with open(layout.function_path(path, r.name), "wb") as f:
            f.write(r.data)
    key_of = {id(v): k for k, v in live.values.items()}
    Checkpoint(root=obj).write(layout.variables_path(path))
    index = {
        "format": layout.FORMAT, "version": layout.VERSION,
        "variables": [{"key": key_of[id(v)], "trainable": v.trainable} for v in variables],
        "functions": {r.name: {"inputs": r.inputs, "outputs": r.outputs, "random": r.random,
                                  "checked": r.checked} for r in results},
        "attributes": attributes,
        "signatures": {s: {"function": n} for s, n in sig_index.items()},
    }
    tmp = layout.index_path(path) + ".tmp"
    with open(tmp, "w") as f:
        json.dump(index, f, indent=1)
    os.replace(tmp, layout.index_path(path))


__all__ = ["save", "SaveOptions", "export_plan"]
