"""``tf.keras.utils.image_dataset_from_directory`` / ``text_dataset_from_directory`` /
``audio_dataset_from_directory`` as ``tapejax.data.Dataset``s.

TF's image-, text- and audio-classification tutorials start with these.  Keras 3's functions build a
*TensorFlow* ``tf.data.Dataset`` (their ``format="tf"``; TensorFlow must be installed), whose
elements are TF EagerTensors and whose ``map`` traces the user's function with TF's symbolic
tensors, so the tutorials' next line (``train_ds.map(lambda x, y: (tf.image.resize(x, ...),
y))``, a ``TextVectorization`` adapted on ``train_ds.map(lambda x, y: x)``) fails on tapejax's
ops.  These are tf_keras' functions (their arguments, checks and messages) over
``tapejax.data``, with no TensorFlow: Keras 3's ``dataset_utils`` index the directory (class
subdirectories in sorted order, or ``class_names``' order, which must name them all, as in
tf_keras; files sorted within each; with ``shuffle`` the paths and labels
permuted by NumPy's ``RandomState(seed)``, as in TF) and split it (``validation_split``,
``subset``, ``"both"``); each element is read by ``tf.io.read_file`` and, for images, decoded by
``tf.io.decode_image(channels, expand_animations=False)`` and resized by
``tf.image.resize(method=interpolation)`` (``crop_to_aspect_ratio``: tf_keras'
``smart_resize``, the largest centred crop of the target's aspect ratio first); texts are cut
to ``max_length`` bytes; WAV clips are decoded by ``tf.audio.decode_wav`` (cropped or padded
to ``output_sequence_length``; without it the batches are padded to their longest clip, as
tf_keras' ``padded_batch``).  Labels are int32 (``"int"``), one-hot float32 (``"categorical"``) or
float32 ``[1]`` (``"binary"``).  With ``shuffle`` the elements are also shuffled by
``Dataset.shuffle(batch_size * 8, seed)`` (1024 without batching), whose order is tapejax's, not
TF's.  The datasets have TF's ``class_names`` and ``file_paths`` attributes.  Not done:
``audio_dataset_from_directory``'s ``sampling_rate`` (TF resamples with ``tensorflow_io``) and
``ragged=True`` (NotImplementedError naming the way round).
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["audio_dataset_from_directory", "image_dataset_from_directory", "text_dataset_from_directory"]

#: The image files tf_keras takes.
IMAGE_FORMATS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")
_INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "area", "lanczos3", "lanczos5", "gaussian", "mitchellcubic")


def _check_common(labels: Any, label_mode: Any, class_names: Any) -> tuple:
    """tf_keras' checks of ``labels`` / ``label_mode`` / ``class_names``; the labels and mode to use."""
    if labels not in ("inferred", None):
        if not isinstance(labels, (list, tuple)):
            raise ValueError("`labels` argument should be a list/tuple of integer labels, of the same size as the "
                             "number of files in the target directory. If you wish to infer the labels from the "
                             "subdirectory names in the target directory, pass `labels=\"inferred\"`. If you wish "
                             f"to get a dataset that only contains the files (no labels), pass `labels=None`. "
                             f"Received: labels={labels}")
        if class_names:
            raise ValueError(f"You can only pass `class_names` if `labels=\"inferred\"`. Received: labels={labels}, "
                             f"and class_names={class_names}")
    if label_mode not in {"int", "categorical", "binary", None}:
        raise ValueError("`label_mode` argument must be one of \"int\", \"categorical\", \"binary\", or None. "
                         f"Received: label_mode={label_mode}")
    if labels is None or label_mode is None:
        return None, None
    return labels, label_mode


def _indexed(directory: str, labels: Any, formats: tuple, class_names: Any, shuffle: bool, seed: Any,
             follow_links: bool, validation_split: Any, subset: Any, label_mode: Any) -> tuple:
    """The files, labels and class names, split: ``(class_names, [(paths, labels), ...])``."""
    from keras.src.utils import dataset_utils

    dataset_utils.check_validation_split_arg(validation_split, subset, shuffle, seed)
    chosen = None
    if labels == "inferred" and class_names:   # (tf_keras: the same set as the subdirectories)
        subdirs = sorted(d for d in os.listdir(directory)
                         if os.path.isdir(os.path.join(directory, d)) and not d.startswith("."))
        if set(class_names) != set(subdirs):
            raise ValueError("The `class_names` passed did not match the names of the subdirectories of the target "
                             f"directory. Expected: {subdirs}, but received: {class_names}")
        chosen = np.asarray([list(class_names).index(d) for d in subdirs], np.int32)
    if seed is None:
        seed = np.random.randint(1_000_000)
    paths, found, names = dataset_utils.index_directory(directory, labels, formats=formats, class_names=None,
                                                        shuffle=shuffle, seed=seed, follow_links=follow_links)
    if chosen is not None:   # (files in the subdirectories' sorted order, labelled by ``class_names``)
        found, names = chosen[np.asarray(found)], list(class_names)
    if labels is None:   # (tf_keras indexes the directory as one unnamed class)
        names = [""]
    elif labels != "inferred":   # (explicit labels: tf_keras' names are the labels themselves)
        names = sorted(set(labels))
    if label_mode == "binary" and len(names or ()) != 2:
        raise ValueError(f"When passing `label_mode=\"binary\"`, there must be exactly 2 class_names. Received: "
                         f"class_names={names}")
    subsets = ("training", "validation") if subset == "both" else (subset,)
    return seed, names, [dataset_utils.get_training_or_validation_split(paths, found, validation_split, s)
                         for s in subsets]


def _labelled(tf: Any, items: Any, labels: Any, label_mode: Any, num_classes: int) -> Any:
    if not label_mode:
        return items
    label_ds = tf.data.Dataset.from_tensor_slices(np.asarray(labels, np.int32))
    if label_mode == "binary":
        label_ds = label_ds.map(lambda x: tf.expand_dims(tf.cast(x, "float32"), axis=-1))
    elif label_mode == "categorical":
        label_ds = label_ds.map(lambda x: tf.one_hot(x, num_classes))
    return tf.data.Dataset.zip((items, label_ds))


def _loaded(tf: Any, splits: list, load: Any, label_mode: Any, names: Any, empty: str) -> list:
    """Each split's files read by ``load`` in a ``map``, zipped with their labels (ValueError
    ``empty`` for a split of no files)."""
    out = []
    for paths, found in splits:
        if not paths:
            raise ValueError(empty)
        items = tf.data.Dataset.from_tensor_slices(list(paths)).map(load, num_parallel_calls=tf.data.AUTOTUNE)
        out.append(_labelled(tf, items, found, label_mode, len(names) if names else 0))
    return out


def _finished(tf: Any, datasets: list, splits: list, names: Any, batch_size: Any, shuffle: bool, seed: Any,
              batch: Any = None) -> Any:
    """Batched by ``batch(ds, batch_size)`` (``Dataset.batch`` by default; the training split
    shuffled first), with ``class_names`` and ``file_paths``."""
    out = []
    for k, (ds, (paths, _)) in enumerate(zip(datasets, splits)):
        ds = ds.prefetch(tf.data.AUTOTUNE)
        if shuffle and k == 0:
            ds = ds.shuffle(buffer_size=batch_size * 8 if batch_size is not None else 1024, seed=seed)
        if batch_size is not None:
            ds = ds.batch(batch_size) if batch is None else batch(ds, batch_size)
        ds.class_names = names
        ds.file_paths = paths
        out.append(ds)
    return out if len(out) == 2 else out[0]


def _smart_resize(tf: Any, img: Any, size: tuple, interpolation: str) -> Any:
    """tf_keras' ``smart_resize``: the largest centred crop of ``size``'s aspect ratio, resized."""
    height, width = (int(d) for d in img.shape[:2])
    crop_h = min(height, int(np.float32(width * size[0]) / np.float32(size[1])))
    crop_w = min(width, int(np.float32(height * size[1]) / np.float32(size[0])))
    top = int(np.float32(height - crop_h) / np.float32(2))
    left = int(np.float32(width - crop_w) / np.float32(2))
    return tf.image.resize(img[top:top + crop_h, left:left + crop_w], size, method=interpolation)


def image_dataset_from_directory(directory: str, labels: Any = "inferred", label_mode: Any = "int",
                                 class_names: Any = None, color_mode: str = "rgb", batch_size: Any = 32,
                                 image_size: Any = (256, 256), shuffle: bool = True, seed: Any = None,
                                 validation_split: Any = None, subset: Any = None, interpolation: str = "bilinear",
                                 follow_links: bool = False, crop_to_aspect_ratio: bool = False) -> Any:
    """Images in class subdirectories as a batched ``tapejax.data.Dataset`` of ``(images, labels)``
    (float32 ``[batch, height, width, channels]``): tf_keras' function (module docstring)."""
    import tapejax as tf

    labels, label_mode = _check_common(labels, label_mode, class_names)
    channels = {"rgb": 3, "rgba": 4, "grayscale": 1}.get(color_mode)
    if channels is None:
        raise ValueError("`color_mode` must be one of {\"rgb\", \"rgba\", \"grayscale\"}. Received: "
                         f"color_mode={color_mode}")
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    if not isinstance(image_size, (list, tuple)) or len(image_size) != 2:
        raise ValueError(f"Invalid `image_size` value. Expected a tuple of 2 integers. Received: image_size={image_size}")
    size = (int(image_size[0]), int(image_size[1]))
    interpolation = interpolation.lower()
    if interpolation not in _INTERPOLATIONS:   # (tf_keras' ``get_interpolation``)
        raise NotImplementedError(f"Value not recognized for `interpolation`: {interpolation}. Supported values are: "
                                  f"dict_keys({list(_INTERPOLATIONS)})")
    seed, names, splits = _indexed(directory, labels, IMAGE_FORMATS, class_names, shuffle, seed, follow_links,
                                   validation_split, subset, label_mode)

    def load(path: Any) -> Any:
        img = tf.io.decode_image(tf.io.read_file(path), channels=channels, expand_animations=False)
        if crop_to_aspect_ratio:
            return _smart_resize(tf, img, size, interpolation)
        return tf.image.resize(img, size, method=interpolation)

    datasets = _loaded(tf, splits, load, label_mode, names,
                       f"No images found in directory {directory}. Allowed formats: {IMAGE_FORMATS}")
    return _finished(tf, datasets, splits, names, batch_size, shuffle, seed)


def text_dataset_from_directory(directory: str, labels: Any = "inferred", label_mode: Any = "int",
                                class_names: Any = None, batch_size: Any = 32, max_length: Any = None,
                                shuffle: bool = True, seed: Any = None, validation_split: Any = None,
                                subset: Any = None, follow_links: bool = False) -> Any:
    """``.txt`` files in class subdirectories as a batched ``tapejax.data.Dataset`` of ``(texts,
    labels)`` (texts as host bytes, TF's ``tf.string``): tf_keras' function (module docstring)."""
    import tapejax as tf

    labels, label_mode = _check_common(labels, label_mode, class_names)
    seed, names, splits = _indexed(directory, labels, (".txt",), class_names, shuffle, seed, follow_links,
                                   validation_split, subset, label_mode)

    def load(path: Any) -> Any:
        text = tf.io.read_file(path)
        return text if max_length is None else text[:max_length]

    datasets = _loaded(tf, splits, load, label_mode, names,
                       f"No text files found in directory {directory}. Allowed format: .txt")
    return _finished(tf, datasets, splits, names, batch_size, shuffle, seed)


def audio_dataset_from_directory(directory: str, labels: Any = "inferred", label_mode: Any = "int",
                                 class_names: Any = None, batch_size: Any = 32, sampling_rate: Any = None,
                                 output_sequence_length: Any = None, ragged: bool = False, shuffle: bool = True,
                                 seed: Any = None, validation_split: Any = None, subset: Any = None,
                                 follow_links: bool = False) -> Any:
    """``.wav`` files in class subdirectories as a batched ``tapejax.data.Dataset`` of ``(audio,
    labels)`` (float32 ``[batch, samples, channels]``): tf_keras' function (module docstring)."""
    import tapejax as tf

    labels, label_mode = _check_common(labels, label_mode, class_names)
    if ragged and output_sequence_length is not None:
        raise ValueError("Cannot set both `ragged` and `output_sequence_length`")
    if sampling_rate is not None:
        if not isinstance(sampling_rate, int):
            raise ValueError(f"`sampling_rate` should have an integer value. Received: sampling_rate={sampling_rate}")
        if sampling_rate <= 0:
            raise ValueError(f"`sampling_rate` should be higher than 0. Received: sampling_rate={sampling_rate}")
        raise NotImplementedError("audio_dataset_from_directory(sampling_rate=...): TF resamples with tensorflow_io, "
                                  "which tapejax does not use; leave `sampling_rate` None and resample in a `map`")
    if ragged:
        raise NotImplementedError("audio_dataset_from_directory(ragged=True): tapejax batches clips padded to the "
                                  "longest (the default) or cut to `output_sequence_length`, not as RaggedTensors")
    seed, names, splits = _indexed(directory, labels, (".wav",), class_names, shuffle, seed, follow_links,
                                   validation_split, subset, label_mode)
    length = -1 if output_sequence_length is None else int(output_sequence_length)

    def load(path: Any) -> Any:
        return tf.audio.decode_wav(tf.io.read_file(path), desired_samples=length)[0]

    def batch(ds: Any, size: int) -> Any:   # (tf_keras: clips of any length padded to the batch's longest)
        if output_sequence_length is not None:
            return ds.batch(size)
        return ds.padded_batch(size, padded_shapes=([None, None], []) if label_mode else [None, None])

    datasets = _loaded(tf, splits, load, label_mode, names,
                       f"No audio files found in directory {directory}. Allowed format(s): ('.wav',)")
    return _finished(tf, datasets, splits, names, batch_size, shuffle, seed, batch)
