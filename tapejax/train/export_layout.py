"""The files of a tapejax SavedModel directory (shared by ``save``, ``load`` and checkpoint restore).

::

    path/
      saved_model.json     what the directory is: format, version, signatures, functions
      functions/NAME.bin   one serialized jax.export artifact (StableHLO) per exported function
      variables/           a tapejax checkpoint (orbax) of the saved object's Variables
"""
from __future__ import annotations

import os

INDEX = "saved_model.json"
FORMAT = "tapejax-saved-model"
VERSION = 1


def is_saved_model(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, INDEX))


def index_path(path: str) -> str:
    return os.path.join(path, INDEX)


def variables_path(path: str) -> str:
    return os.path.join(path, "variables")


def function_path(path: str, name: str) -> str:
    return os.path.join(path, "functions", f"{name}.bin")


__all__ = ["INDEX", "FORMAT", "VERSION", "is_saved_model", "index_path", "variables_path", "function_path"]
