"""``tf.keras.utils.timeseries_dataset_from_array`` as a ``tapejax.data.Dataset``
(``tapejax/keras/timeseries.py``; round 21b of the user programs,
``tests/parity/test_user_programs21b3.py``): TF's time-series tutorial maps the windows by
``split_window`` with tapejax ops, which Keras 3's TF-made ``tf.data`` cannot run.  Expected
values are TF 2.21's (tf_keras' function)."""
import numpy as np
import pytest

import tapejax as tf

DATA = np.arange(20, dtype=np.float32).reshape(10, 2)


def _windows(ds):
    return [x.numpy().tolist() for x in ds]


def test_the_windows_are_a_tapejax_dataset_of_tensors_batched_in_order():
    """Windows of 3 over 10 rows (8 of them), batches of 3: ``[3, 3, 2]`` rows, tapejax Tensors."""
    ds = tf.keras.utils.timeseries_dataset_from_array(DATA, None, sequence_length=3, batch_size=3)
    assert isinstance(ds, tf.data.Dataset)
    batches = list(ds)
    assert all(isinstance(b, tf.Tensor) for b in batches)
    assert [b.shape.as_list() for b in batches] == [[3, 3, 2], [3, 3, 2], [2, 3, 2]]
    np.testing.assert_array_equal(np.concatenate([b.numpy() for b in batches]),
                                  np.stack([DATA[i:i + 3] for i in range(8)]))


def test_targets_stride_sampling_rate_and_the_index_bounds():
    """``sequence_stride=2``, ``sampling_rate=2``, rows 1..8 (``start_index=1, end_index=9``), unbatched:
    TF gives the windows of rows (1, 3, 5) and (3, 5, 7), with ``targets[1]`` and ``targets[3]``
    (the targets are sliced by the same bounds as the data)."""
    ds = tf.keras.utils.timeseries_dataset_from_array(DATA, np.arange(10) * 10, 3, sequence_stride=2,
                                                      sampling_rate=2, batch_size=None, start_index=1,
                                                      end_index=9)
    got = [(x.numpy().tolist(), int(y)) for x, y in ds]
    assert got == [([[2.0, 3.0], [6.0, 7.0], [10.0, 11.0]], 10), ([[6.0, 7.0], [10.0, 11.0], [14.0, 15.0]], 30)]


def test_targets_shorter_than_the_windows_limit_their_number():
    """TF: as many windows as targets when there are fewer targets than windows."""
    ds = tf.keras.utils.timeseries_dataset_from_array(DATA, np.arange(4, dtype=np.int32), 3, batch_size=10)
    (x, y), = list(ds)
    assert x.shape.as_list() == [4, 3, 2] and y.numpy().tolist() == [0, 1, 2, 3]


def test_map_by_split_window_with_tapejax_ops():
    """The tutorial's ``split_window`` (slices, ``tf.stack`` of a label column, ``set_shape``) in ``map``."""
    def split_window(features):
        labels = tf.stack([features[:, 2:, i] for i in (1,)], axis=-1)
        inputs = features[:, :2, :]
        inputs.set_shape([None, 2, None])
        labels.set_shape([None, 1, None])
        return inputs, labels

    ds = tf.keras.utils.timeseries_dataset_from_array(DATA, None, 3, batch_size=4).map(split_window)
    x, y = next(iter(ds))
    assert x.shape.as_list() == [4, 2, 2] and y.shape.as_list() == [4, 1, 1]
    np.testing.assert_array_equal(y.numpy()[:, 0, 0], DATA[2:6, 1])


def test_shuffle_permutes_the_same_windows():
    """``shuffle=True, seed=...``: the same set of windows (the order is tapejax's shuffle's), and the
    same order again for the same seed."""
    make = lambda: tf.keras.utils.timeseries_dataset_from_array(DATA, None, 3, batch_size=2, shuffle=True, seed=7)
    a, b = _windows(make().unbatch()), _windows(make().unbatch())
    assert a == b
    assert sorted(a) == _windows(tf.keras.utils.timeseries_dataset_from_array(DATA, None, 3, batch_size=None))


@pytest.mark.parametrize("kwargs", [dict(sequence_stride=0), dict(sampling_rate=10), dict(start_index=-1),
                                    dict(start_index=10), dict(start_index=4, end_index=3), dict(end_index=10)])
def test_bad_arguments_raise_value_error_as_tf(kwargs):
    with pytest.raises(ValueError):
        tf.keras.utils.timeseries_dataset_from_array(DATA, None, 3, **kwargs)
