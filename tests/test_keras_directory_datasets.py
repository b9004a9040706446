"""tapejax/keras/directory_datasets.py where TF is not the oracle (TF's elements and errors:
tests/parity/test_keras_directory_datasets.py): the datasets are ``tapejax.data`` datasets, so a
``map`` runs tapejax ops (Keras 3's own functions give TF's ``tf.data``), texts are host bytes,
and the ``tf.keras.utils`` names are these functions."""
import os

import numpy as np
import pytest

import tapejax as tf

pytest.importorskip("keras")


def _tree(root):
    from PIL import Image
    for c in ("a", "b"):
        os.makedirs(os.path.join(root, c))
        Image.fromarray(np.full((4, 6, 3), 40 if c == "a" else 200, np.uint8)).save(os.path.join(root, c, "x.png"))
        with open(os.path.join(root, c, "t.txt"), "w") as f:
            f.write(f"text of {c}")


def test_tapejax_datasets_that_map_tapejax_ops(tmp_path):
    root = str(tmp_path)
    _tree(root)
    ds = tf.keras.utils.image_dataset_from_directory(root, image_size=(2, 3), batch_size=2, shuffle=False)
    assert isinstance(ds, tf.data.Dataset) and ds.class_names == ["a", "b"]
    (x, y), = list(ds.map(lambda x, y: (tf.image.resize(x, [1, 1]) / 255.0, y)))
    np.testing.assert_allclose(x.numpy().ravel(), [40 / 255] * 3 + [200 / 255] * 3, rtol=1e-6)
    assert y.numpy().tolist() == [0, 1]
    texts = tf.keras.utils.text_dataset_from_directory(root, batch_size=None, shuffle=False)
    assert [(t, int(label)) for t, label in texts] == [(b"text of a", 0), (b"text of b", 1)]
    from tapejax.keras import directory_datasets
    assert tf.keras.utils.image_dataset_from_directory is directory_datasets.image_dataset_from_directory
    assert tf.keras.utils.text_dataset_from_directory is directory_datasets.text_dataset_from_directory
