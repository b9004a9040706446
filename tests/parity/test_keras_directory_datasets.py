"""``tf.keras.utils.image_dataset_from_directory`` / ``text_dataset_from_directory`` /
``audio_dataset_from_directory`` (``tapejax/keras/directory_datasets.py``: ``tapejax.data``
datasets) against real TensorFlow 2.21's (tf_keras, ``tf.data``): the elements,
``element_spec``, ``class_names`` and ``file_paths`` for every option (color modes, label modes,
interpolation, ``crop_to_aspect_ratio``, no batching, ``max_length``, explicit labels, clips
padded per batch or to ``output_sequence_length``), the seeded file order and the training /
validation splits, each bad argument's error class, and TF's image-classification tutorial's
first steps (the dataset mapped by a rescaling function, a classifier trained by a compiled
step).  With ``shuffle`` the element order within the training split is tapejax's
(``Dataset.shuffle``), so those elements are compared as sorted sets.
"""
import functools
import os

import numpy as np

from .data_helpers import L, softmax_classifier, spec, tmp
from .harness import parity, raises


@functools.lru_cache(maxsize=None)
def _images():
    """Class subdirectories of PNGs of several sizes (lossless: both sides decode the same pixels),
    a JPEG-named file that is skipped (not an image format TF lists? it is: a real JPEG), and a
    text file that is not an image."""
    from PIL import Image
    root = os.path.join(tmp(), "images")
    rng = np.random.RandomState(0)
    for c, cls in enumerate(("cat", "dog", "eel")):
        os.makedirs(os.path.join(root, cls))
        for i in range(3):
            h, w = 6 + 2 * i + c, 9 - i
            Image.fromarray(rng.randint(0, 256, (h, w, 3)).astype(np.uint8)).save(
                os.path.join(root, cls, f"img{i}.png"))
        with open(os.path.join(root, cls, "notes.txt"), "w") as f:
            f.write("not an image")
    return root


@functools.lru_cache(maxsize=None)
def _texts():
    root = os.path.join(tmp(), "texts")
    for c, cls in enumerate(("neg", "pos")):
        os.makedirs(os.path.join(root, cls))
        for i in range(4):
            with open(os.path.join(root, cls, f"r{i}.txt"), "w") as f:
                f.write(f"review {c}{i}: " + "good " * (i + c) + "end")
    return root


def _rel(paths, root):
    return [os.path.relpath(p, root) for p in paths]


@parity(rtol=1e-4, atol=1e-3)
def test_image_dataset_in_order(tf):
    """``shuffle=False``: the batches (float32 images resized bilinearly, int32 labels), the spec,
    the class names and the file paths (class directories sorted, files sorted, non-images
    skipped)."""
    root = _images()
    ds = tf.keras.utils.image_dataset_from_directory(root, image_size=(4, 5), batch_size=4, shuffle=False)
    return L(ds), spec(ds.element_spec), ds.class_names, _rel(ds.file_paths, root)


@parity(rtol=1e-4, atol=1e-3)
def test_image_dataset_options(tf):
    """Grayscale and RGBA, categorical / binary / no labels, nearest and area interpolation,
    ``crop_to_aspect_ratio``, no batching, explicit labels, and ``class_names`` in another order."""
    root = _images()
    f = functools.partial(tf.keras.utils.image_dataset_from_directory, root, shuffle=False, batch_size=9)
    out = []
    for kw in (dict(color_mode="grayscale", image_size=(3, 3)), dict(color_mode="rgba", image_size=(3, 3),
                                                                    label_mode="categorical"),
               dict(image_size=(2, 4), interpolation="nearest", label_mode=None),
               dict(image_size=(4, 4), interpolation="area", crop_to_aspect_ratio=True),
               dict(image_size=(5, 2), crop_to_aspect_ratio=True, interpolation="nearest"),
               dict(image_size=(2, 2), labels=[2, 0, 1, 1, 0, 2, 0, 0, 1], label_mode="int"),
               dict(image_size=(2, 2), class_names=["eel", "cat", "dog"], label_mode="categorical")):
        ds = f(**kw)
        out.append((L(ds), spec(ds.element_spec), ds.class_names))
    unbatched = tf.keras.utils.image_dataset_from_directory(root, image_size=(2, 3), batch_size=None, shuffle=False)
    out.append((L(unbatched), spec(unbatched.element_spec)))
    return out


@parity(rtol=1e-4, atol=1e-3)
def test_seeded_order_and_splits(tf):
    """``shuffle=True, seed=7``: the file order (NumPy's permutation, as TF's) and the labels;
    ``validation_split=0.34`` with ``subset="both"`` and each subset alone: the split's files, the
    validation set in order, the training set as a sorted set of (label, pixel sum)."""
    root = _images()
    kw = dict(image_size=(3, 3), seed=7, batch_size=2)
    whole = tf.keras.utils.image_dataset_from_directory(root, **kw)
    train, val = tf.keras.utils.image_dataset_from_directory(root, validation_split=0.34, subset="both", **kw)
    train_only = tf.keras.utils.image_dataset_from_directory(root, validation_split=0.34, subset="training", **kw)

    def as_set(ds):
        return sorted((int(y), round(float(np.sum(x)), 2)) for xb, yb in ds for x, y in zip(np.asarray(xb),
                                                                                             np.asarray(yb)))

    return (_rel(whole.file_paths, root), as_set(whole), _rel(train.file_paths, root), _rel(val.file_paths, root),
            as_set(train), L(val), _rel(train_only.file_paths, root), as_set(train_only))


@parity
def test_text_dataset(tf):
    """Texts as strings with int labels in order; ``max_length``; ``label_mode=None``; categorical;
    the seeded order's validation split."""
    root = _texts()
    f = functools.partial(tf.keras.utils.text_dataset_from_directory, root, shuffle=False, batch_size=3)
    out = [L(f()), L(f(max_length=9)), L(f(label_mode=None)), L(f(label_mode="categorical", batch_size=None))]
    val = tf.keras.utils.text_dataset_from_directory(root, seed=5, validation_split=0.25, subset="validation")
    return out, spec(f().element_spec), f().class_names, L(val)


@parity
def test_bad_arguments(tf):
    """Each bad argument's error class: color mode, label mode, labels of another type, class
    names with explicit labels, a binary label mode with three classes, a validation split with
    no subset, a bad subset, an image size of three, an unknown interpolation, explicit labels
    of the wrong length, class names not among the directories or not all of them, a directory of
    no images."""
    root = _images()
    f = functools.partial(tf.keras.utils.image_dataset_from_directory, root, image_size=(2, 2))
    empty = os.path.join(tmp(), "empty")
    os.makedirs(os.path.join(empty, "a"), exist_ok=True)
    return [raises(lambda: f(color_mode="cmyk")), raises(lambda: f(label_mode="sparse")),
            raises(lambda: f(labels="folders")), raises(lambda: f(labels=[0] * 9, class_names=["cat"])),
            raises(lambda: f(label_mode="binary")), raises(lambda: f(validation_split=0.2)),
            raises(lambda: f(validation_split=0.2, subset="testing", seed=1)),
            raises(lambda: f(image_size=(2, 2, 2))), raises(lambda: f(interpolation="cubic")),
            raises(lambda: f(labels=[0, 1])), raises(lambda: f(class_names=["cat", "cow"])),
            raises(lambda: f(class_names=["dog", "cat"])),
            raises(lambda: tf.keras.utils.image_dataset_from_directory(empty, image_size=(2, 2))),
            raises(lambda: tf.keras.utils.text_dataset_from_directory(root, label_mode="sparse"))]


@parity(modes=True, rtol=1e-4, atol=1e-5)
def test_image_classification_tutorial_first_steps(tf):
    """TF's image-classification tutorial, scaled down: ``image_dataset_from_directory`` with a
    validation split, ``map`` by a rescaling function, a softmax classifier trained two epochs by
    a compiled step, then its validation accuracy."""
    root = _images()
    train, val = tf.keras.utils.image_dataset_from_directory(root, image_size=(4, 4), batch_size=3, shuffle=False,
                                                             validation_split=0.34, subset="both", seed=1)
    scale = lambda x, y: (tf.cast(x, tf.float32) / 255.0, y)  # noqa: E731
    train, val = train.map(scale), val.map(scale)
    w, b, step = softmax_classifier(tf, 4 * 4 * 3, n_classes=3, lr=0.5)
    losses = [step(x, y) for _ in range(2) for x, y in train]
    correct = [tf.reduce_sum(tf.cast(tf.argmax(tf.matmul(tf.reshape(x, [-1, 48]), w) + b, axis=1,
                                               output_type=tf.int32) == y, tf.int32)) for x, y in val]
    return losses, correct, w.numpy()


@functools.lru_cache(maxsize=None)
def _clips():
    """Class subdirectories of 16-bit WAV clips of different lengths (Python's ``wave`` writes
    them), two of them stereo."""
    import wave
    root = os.path.join(tmp(), "clips")
    rng = np.random.RandomState(2)
    for c, cls in enumerate(("no", "yes")):
        os.makedirs(os.path.join(root, cls))
        for i in range(3):
            channels = 2 if (c, i) == (1, 2) or (c, i) == (0, 1) else 1
            n = 5 + 3 * i + c
            with wave.open(os.path.join(root, cls, f"c{i}.wav"), "wb") as w:
                w.setnchannels(channels)
                w.setsampwidth(2)
                w.setframerate(8000)
                w.writeframes(rng.randint(-32768, 32768, (n, channels)).astype("<i2").tobytes())
    return root


@parity
def test_audio_dataset(tf):
    """Clips padded to the longest in each batch (``padded_batch``), cut or padded to
    ``output_sequence_length``, unbatched, with categorical labels or none; the seeded split;
    ``ragged`` with a length and a non-integer ``sampling_rate``: ValueError."""
    root = _clips()
    f = functools.partial(tf.keras.utils.audio_dataset_from_directory, root, shuffle=False)
    mono = os.path.join(tmp(), "mono")
    if not os.path.isdir(mono):
        os.makedirs(os.path.join(mono, "a"))
        import shutil
        for name in ("c0.wav", "c2.wav"):
            shutil.copy(os.path.join(root, "no", name), os.path.join(mono, "a", name))
    out = [L(tf.keras.utils.audio_dataset_from_directory(mono, shuffle=False, batch_size=2)),
           L(f(batch_size=None, output_sequence_length=6)), L(f(batch_size=None, label_mode="categorical")),
           L(tf.keras.utils.audio_dataset_from_directory(mono, shuffle=False, batch_size=None, label_mode=None)),
           spec(tf.keras.utils.audio_dataset_from_directory(mono, shuffle=False).element_spec),
           f().class_names]
    train, val = tf.keras.utils.audio_dataset_from_directory(root, seed=3, validation_split=0.34, subset="both",
                                                            batch_size=None)
    out += [sorted(int(y) for _, y in train), L(val),
            raises(lambda: f(ragged=True, output_sequence_length=4)), raises(lambda: f(sampling_rate=8000.0))]
    return out
