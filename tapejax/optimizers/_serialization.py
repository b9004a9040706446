"""``tf.keras.optimizers.get`` / ``serialize`` / ``deserialize`` (tf_keras 2.21's rules,
``tf_keras/src/optimizers/__init__.py``) over tapejax's optimizers.

``serialize(opt)`` is Keras' dict: ``{"module", "class_name", "config", "registered_name": None}``
(module ``keras.optimizers.legacy`` for the Keras-2 legacy classes, ``keras.optimizers`` for
the new ones).  ``deserialize(config)`` makes the optimizer back from such a
dict (or Keras' older ``{"class_name", "config"}``): a lower-case Keras name (``"adam"``,
``"sgd"`` ...) or a class name.  ``get`` takes an optimizer (returned as is), a dict
(``deserialize``) or a name (``"adam"``: the optimizer with its defaults).

Two families, as tf_keras: a name gives the new class (``_rules_v2``), a config with
``is_legacy_optimizer: True`` (or module ``keras.optimizers.legacy``) the legacy one (``_rules``).  An unknown name is
TF's ValueError (tf_keras' ``deserialize`` of an unknown ``class_name`` returns the name itself,
an accident not kept).
"""
import warnings
from typing import Any

from . import _rules
from ._base import Optimizer
from ._rules import AdamW
from ._rules_new import Adafactor, Lion
from ._rules_v2 import SGD, Adadelta, Adagrad, Adam, Adamax, Ftrl, Nadam, RMSprop, _New

__all__ = ["deserialize", "get", "register", "serialize"]

#: tf_keras' lower-case names (``all_classes`` in ``deserialize``).
_BY_NAME = {"adadelta": Adadelta, "adagrad": Adagrad, "adam": Adam, "adamw": AdamW, "adamax": Adamax,
            "experimentaladadelta": Adadelta, "experimentaladagrad": Adagrad, "experimentaladam": Adam,
            "experimentalsgd": SGD, "nadam": Nadam, "rmsprop": RMSprop, "sgd": SGD, "ftrl": Ftrl}
#: Class names Keras' object registry finds (``keras.optimizers.<ClassName>``).
_BY_CLASS = {c.__name__: c for c in (SGD, Adadelta, Adagrad, Adam, Adamax, AdamW, Ftrl, Nadam, RMSprop,
                                     Lion, Adafactor)}
_NEW = (AdamW, Lion, Adafactor, _New)
#: ``is_legacy_optimizer: True`` in a config: the legacy class of that name.
_LEGACY = {c.__name__: c for c in (_rules.SGD, _rules.Adadelta, _rules.Adagrad, _rules.Adam, _rules.Adamax,
                                   _rules.Ftrl, _rules.Nadam, _rules.RMSprop)}


def _unknown(name: Any) -> ValueError:
    return ValueError(f"Unknown optimizer: '{name}'. Please ensure you are using a "
                      "`keras.utils.custom_object_scope` and that this object is included in the scope. See "
                      "https://www.tensorflow.org/guide/keras/save_and_serialize#registering_the_custom_object "
                      "for details.")


def serialize(optimizer: Any, use_legacy_format: bool = False) -> Any:
    """``tf.keras.optimizers.serialize``: Keras' dict for ``optimizer`` (None for None)."""
    if optimizer is None:
        return None
    if not isinstance(optimizer, Optimizer):
        warnings.warn("The `keras.optimizers.serialize()` API should only be used for objects of type "
                      f"`keras.optimizers.Optimizer`. Found an instance of type {type(optimizer)}, which may "
                      "lead to improper serialization.", stacklevel=2)
        return optimizer
    cls = type(optimizer)
    config = optimizer.get_config()
    module = getattr(cls, "_KERAS_MODULE", None)
    if module is not None:   # a class Keras registers by name (``loss_scale``'s)
        return {"module": module, "class_name": cls.__name__, "config": config, "registered_name": cls.__name__}
    if use_legacy_format:
        return {"class_name": cls.__name__, "config": config}
    module = "keras.optimizers" if isinstance(optimizer, _NEW) else "keras.optimizers.legacy"
    return {"module": module, "class_name": cls.__name__, "config": config, "registered_name": None}


def deserialize(config: Any, custom_objects: Any = None, use_legacy_format: bool = False, **kwargs: Any):
    """``tf.keras.optimizers.deserialize``: the optimizer a ``serialize`` dict describes."""
    kwargs.pop("use_legacy_optimizer", None)
    if kwargs:
        raise TypeError(f"Invalid keyword arguments: {kwargs}")
    if not isinstance(config, dict):
        raise TypeError(f"Argument `config` of deserialize must be a dict with 'class_name' and 'config'; got "
                        f"{config!r}")
    name = config["class_name"]   # (KeyError, as TF, when missing)
    cls = (custom_objects or {}).get(name) or _BY_NAME.get(str(name).lower()) or _BY_CLASS.get(name)
    if cls is None:
        raise _unknown(name)
    inner = dict(config.get("config", {}))
    if (inner.pop("is_legacy_optimizer", False) or str(config.get("module", "")).endswith(".legacy")) \
            and name not in (custom_objects or {}):
        cls = _LEGACY.get(cls.__name__, cls)
    return cls.from_config(inner)


def register(cls: Any, *names: str) -> None:
    """Let ``deserialize`` make ``cls`` from the lower-case ``names`` (and from its class name)."""
    for name in names:
        _BY_NAME[name] = cls
    _BY_CLASS[cls.__name__] = cls


def get(identifier: Any, **kwargs: Any):
    """``tf.keras.optimizers.get``: an optimizer from an optimizer, a dict or a name."""
    kwargs.pop("use_legacy_optimizer", None)
    if kwargs:
        raise TypeError(f"Invalid keyword arguments: {kwargs}")
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, dict):
        return deserialize(identifier)
    if isinstance(identifier, str):
        cls = _BY_NAME.get(identifier.lower()) or _BY_CLASS.get(identifier)
        if cls is None:
            raise _unknown(identifier)
        return cls()
    raise ValueError(f"Could not interpret optimizer identifier: {identifier}")
