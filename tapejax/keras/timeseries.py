"""``tf.keras.utils.timeseries_dataset_from_array`` as a ``tapejax.data.Dataset``.

Keras 3's function builds a *TensorFlow* ``tf.data.Dataset`` (its ``format="tf"``), whose
elements are TF EagerTensors and whose ``map`` traces the user's function with TF's symbolic
tensors: TF's time-series tutorial maps its windows by ``split_window`` (``tf.stack`` of
slices, ``set_shape``), which then fails on tapejax's ops.  This is tf_keras' function (the
same checks, window start positions, shuffle and batching) over ``tapejax.data``: the windows
are ``tf.gather``s of the data at ``tf.range(start, start + sequence_length * sampling_rate,
sampling_rate)``, the targets the rows at each window's start.  With ``shuffle`` the start
positions are permuted by NumPy's ``RandomState(seed)``, as in TF, and the batches shuffled by
``Dataset.shuffle(batch_size * 8, seed)``, whose order is tapejax's, not TF's.
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["timeseries_dataset_from_array"]


def _check(data: Any, sequence_stride: int, sampling_rate: int, start_index: int | None,
           end_index: int | None) -> None:
    """tf_keras' argument checks (ValueError, in its order)."""
    n = len(data)
    if start_index:
        if start_index < 0:
            raise ValueError(f"`start_index` must be 0 or greater. Received: start_index={start_index}")
        if start_index >= n:
            raise ValueError("`start_index` must be lower than the length of the data. Received: "
                             f"start_index={start_index}, for data of length {n}")
    if end_index:
        if start_index and end_index <= start_index:
            raise ValueError("`end_index` must be higher than `start_index`. Received: "
                             f"start_index={start_index}, and end_index={end_index} ")
        if end_index >= n:
            raise ValueError("`end_index` must be lower than the length of the data. Received: "
                             f"end_index={end_index}, for data of length {n}")
        if end_index <= 0:
            raise ValueError(f"`end_index` must be higher than 0. Received: end_index={end_index}")
    for name, value in (("sampling_rate", sampling_rate), ("sequence_stride", sequence_stride)):
        if value <= 0:
            raise ValueError(f"`{name}` must be higher than 0. Received: {name}={value}")
        if value >= n:
            raise ValueError(f"`{name}` must be lower than the length of the data. Received: "
                             f"{name}={value}, for data of length {n}")


def timeseries_dataset_from_array(data: Any, targets: Any, sequence_length: int, sequence_stride: int = 1,
                                  sampling_rate: int = 1, batch_size: int | None = 128, shuffle: bool = False,
                                  seed: int | None = None, start_index: int | None = None,
                                  end_index: int | None = None) -> Any:
    """Sliding windows over ``data`` (and ``targets[i]`` for the window starting at ``i``), batched:
    tf_keras' ``timeseries_dataset_from_array`` over ``tapejax.data`` (module docstring)."""
    import tapejax as tf

    _check(data, sequence_stride, sampling_rate, start_index, end_index)
    start_index = start_index or 0
    end_index = len(data) if end_index is None else end_index
    num_seqs = end_index - start_index - (sequence_length - 1) * sampling_rate
    if targets is not None:
        num_seqs = min(num_seqs, len(targets))
    index_dtype = "int32" if num_seqs < 2147483647 else "int64"
    start_positions = np.arange(0, num_seqs, sequence_stride, dtype=index_dtype)
    if shuffle:
        if seed is None:
            seed = int(np.random.randint(1_000_000))
        np.random.RandomState(seed).shuffle(start_positions)
    length: Any = tf.cast(sequence_length, index_dtype)
    rate: Any = tf.cast(sampling_rate, index_dtype)
    positions = tf.data.Dataset.from_tensors(start_positions).repeat()
    count = tf.data.Dataset.range(len(start_positions))

    def gathered(array: Any, indices: Any) -> Any:
        steps = tf.data.Dataset.from_tensors(array[start_index:end_index]).repeat()
        return tf.data.Dataset.zip((steps, indices)).map(lambda s, i: tf.gather(s, i))

    windows = tf.data.Dataset.zip((count, positions)).map(
        lambda i, p: tf.range(p[i], p[i] + length * rate, rate))
    dataset = gathered(data, windows)
    if targets is not None:
        starts = tf.data.Dataset.zip((count, positions)).map(lambda i, p: p[i])
        dataset = tf.data.Dataset.zip((dataset, gathered(targets, starts)))
    if batch_size is not None:
        if shuffle:
            dataset = dataset.shuffle(buffer_size=batch_size * 8, seed=seed)
        return dataset.batch(batch_size)
    return dataset.shuffle(buffer_size=1024, seed=seed) if shuffle else dataset
