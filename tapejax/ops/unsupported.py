"""String tensors: a TF type with no JAX representation.  The namespace exists, so
``import tapejax as tf`` scripts load, and any name in it raises one clear error
(``UnsupportedError``: an AttributeError, so ``hasattr`` feature checks say False, and a
NotImplementedError) that says what to use instead.

JAX arrays are dense and of fixed numeric dtypes: no strings (XLA has no string type).
(``tf.sparse`` / ``tf.SparseTensor`` are ``ops.sparse_tensor`` and ``ops.sparse_ops``: a
SparseTensor is three dense Tensors, as TF's; ``tf.ragged`` / ``tf.RaggedTensor`` are
``ops.ragged_tensor`` and ``ops.ragged_ops``: a RaggedTensor is dense values and row splits.)  ``tf.strings`` itself is
``tapejax.data.hostops``: its basic ops work on host strings (Python bytes, NumPy arrays of
them), and its other names raise this module's error for ``strings``.
"""
import types

from ..core.modules import new_module


class UnsupportedError(AttributeError, NotImplementedError):
    """A TF name whose type has no JAX representation (see the module docstring)."""


_WHAT = {
    "strings": ("string tensors (tf.strings)",
                "keep strings in Python or NumPy and give tapejax numbers: map them to integer ids on the host "
                "(tapejax.lookup tables, a dict, or keras.layers.StringLookup / TextVectorization, which run before the "
                "model)"),
}


def unsupported(kind: str, name: str) -> UnsupportedError:
    what, instead = _WHAT[kind]
    return UnsupportedError(f"tf.{kind}.{name}: tapejax has no {what}: JAX arrays are dense and numeric. "
                            f"Instead, {instead}.")


def _namespace(kind: str) -> types.ModuleType:
    mod = new_module(f"tapejax.{kind}", f"``tf.{kind}``: {_WHAT[kind][0]} have no JAX representation; every name "
                     "raises ``UnsupportedError`` saying what to use instead.", {}, public=())

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise unsupported(kind, name)

    mod.__dict__["__getattr__"] = __getattr__
    return mod


strings = _namespace("strings")

#: TF's top-level names for these types (``tf.as_string``), each its namespace's error.
TOP_LEVEL = {"as_string": "strings"}

__all__ = ["TOP_LEVEL", "UnsupportedError", "strings", "unsupported"]
