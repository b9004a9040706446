"""``fit`` / ``evaluate`` / ``predict`` fed by a ``tapejax.data.Dataset``, as TF's Keras takes a ``tf.data.Dataset``.

Keras 3 picks a data adapter by the input's type (``keras.src.trainers.data_adapters.
get_data_adapter``) and knows TensorFlow's, torch's and grain's datasets, not tapejax's, so
``model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(32))`` raised "Unrecognized
data type".  ``DatasetAdapter`` is Keras's ``TFDatasetAdapter`` for a tapejax Dataset: each
element (a batch: ``x``, ``(x, y)`` or ``(x, y, sample_weight)`` in any nest) is handed to
Keras as NumPy arrays, ``num_batches`` is the Dataset's cardinality (``None`` when infinite or
unknown: Keras then runs until the data ends or ``steps_per_epoch``), and ``class_weight``
becomes a sample weight per element, as TF's adapter maps it.  TF's rules for a dataset input
hold: ``y`` and ``sample_weight`` must not be passed beside it (ValueError), ``shuffle`` is
ignored.

A tapejax Dataset is recognised by its class (a ``Dataset`` defined in ``tapejax.data``), as
Keras recognises TF's: this package does not import ``tapejax.data``.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import numpy as np

__all__ = ["DatasetAdapter", "install", "is_tapejax_dataset"]

_ORIG: Dict[str, Callable[..., Any]] = {}


def is_tapejax_dataset(x: Any) -> bool:
    """Is ``x`` a ``tapejax.data.Dataset`` (of any transformation's subclass)?"""
    return any(c.__name__ == "Dataset" and c.__module__.startswith("tapejax.data")
               for c in type(x).__mro__)


def _to_numpy(x: Any) -> Any:
    return x if x is None else np.asarray(x)


def _class_weighted(class_weight: Dict[int, float]) -> Callable[[Any], Any]:
    from keras.src import tree
    from keras.src.trainers.data_adapters import data_adapter_utils
    table = np.array([class_weight.get(c, 1.0) for c in range(int(max(class_weight)) + 1)], np.float32)

    def add(data):
        x, y, sw = data_adapter_utils.unpack_x_y_sample_weight(data)
        if sw is not None:
            raise ValueError("You cannot `class_weight` and `sample_weight` at the same time.")
        if tree.is_nested(y):
            raise ValueError("`class_weight` is only supported for Models with a single output.")
        y_arr = np.asarray(y)
        if y_arr.ndim >= 2 and y_arr.shape[-1] > 1:
            classes = np.argmax(y_arr, axis=-1)
        else:
            classes = np.round(y_arr.reshape(y_arr.shape[:1] if y_arr.ndim >= 2 else y_arr.shape)).astype(np.int64)
        return x, y, table[classes]
    return add


def _adapter_class():
    from keras.src import tree
    from keras.src.trainers.data_adapters.data_adapter import DataAdapter

    class DatasetAdapter(DataAdapter):
        """Keras's data adapter for a ``tapejax.data.Dataset`` (see the module docstring)."""

        def __init__(self, dataset: Any, class_weight: Optional[Dict[int, float]] = None):
            self._dataset = dataset
            self._weigh = None if class_weight is None else _class_weighted(class_weight)

        def get_numpy_iterator(self):
            for batch in self._dataset:
                batch = tree.map_structure(_to_numpy, batch, none_is_leaf=False)
                yield batch if self._weigh is None else self._weigh(batch)

        def get_jax_iterator(self):
            return self.get_numpy_iterator()

        def get_tf_dataset(self):
            raise NotImplementedError("a tapejax.data.Dataset has no tf.data form (the JAX backend does not ask for one)")

        def get_torch_dataloader(self):
            raise NotImplementedError("a tapejax.data.Dataset has no torch DataLoader form")

        @property
        def num_batches(self):
            n = int(np.asarray(self._dataset.cardinality()))
            return None if n < 0 else n

        @property
        def batch_size(self):
            first = tree.flatten(self._dataset.element_spec)[0]
            return first.shape[0] if len(first.shape) else None

        @property
        def has_partial_batch(self):
            return None

        @property
        def partial_batch_size(self):
            return None

    return DatasetAdapter


DatasetAdapter: Any = None   # the class, made when Keras is loaded (it subclasses Keras's)


def _get_data_adapter(x, y=None, sample_weight=None, batch_size=None, steps_per_epoch=None, shuffle=False,
                      class_weight=None):
    if not is_tapejax_dataset(x):
        return _ORIG["get_data_adapter"](x, y=y, sample_weight=sample_weight, batch_size=batch_size,
                                         steps_per_epoch=steps_per_epoch, shuffle=shuffle,
                                         class_weight=class_weight)
    from keras.src.trainers.data_adapters import raise_unsupported_arg
    if y is not None:
        raise_unsupported_arg("y", "the targets", "tf.data.Dataset")
    if sample_weight is not None:
        raise_unsupported_arg("sample_weights", "the sample weights", "tf.data.Dataset")
    return DatasetAdapter(x, class_weight=class_weight)


def install() -> None:
    """Let Keras's epoch iterator take a ``tapejax.data.Dataset`` (once)."""
    global DatasetAdapter
    from keras.src.trainers import data_adapters
    if _ORIG:
        return
    DatasetAdapter = _adapter_class()
    _ORIG["get_data_adapter"] = data_adapters.get_data_adapter
    setattr(data_adapters, "get_data_adapter", _get_data_adapter)
