"""``saved_model.load`` of SavedModels TensorFlow wrote (``train/saved_model/tf_load.py``): what
the parity tests (``tests/parity/test_tf_savedmodel_load.py``) cannot compare with TF.  Oracles:
TF's own loaded object (values), and the documented rules (random keys from tapejax's stream,
one conversion per concrete function, the ImportError naming the extra)."""
import os
import sys

import numpy as np
import pytest

import tapejax as tj

realtf = pytest.importorskip("tensorflow", reason="TensorFlow is not installed")
pytest.importorskip("tf2jax", reason="tf2jax is not installed")


@pytest.fixture(scope="module")
def dropout_dir(tmp_path_factory):
    """A tf.Module whose method applies dropout when ``training`` (a random op in the graph)."""
    tf = realtf

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(np.full((3, 4), 0.5, np.float32), name="w")

        @tf.function
        def __call__(self, x, training=False):   # (a Python flag, as Keras' ``training``)
            h = tf.matmul(x, self.w)
            return tf.nn.dropout(h, rate=0.5) if training else h

    net = Net()
    for training in (True, False):
        net.__call__.get_concrete_function(tf.TensorSpec([None, 3], tf.float32), training)
    path = str(tmp_path_factory.mktemp("tfsm") / "dropout")
    tf.saved_model.save(net, path)
    return path


def test_random_ops_draw_from_tapejaxs_stream(dropout_dir):
    """A loaded function with a random op takes a key from tapejax's global stream: two calls
    differ, ``tapejax.random.set_seed`` repeats them, and the inference branch is TF's."""
    m = tj.saved_model.load(dropout_dir)
    x = np.ones((4, 3), np.float32)
    tj.random.set_seed(3)
    a, b = m(x, True).numpy(), m(x, True).numpy()
    tj.random.set_seed(3)
    a2 = m(x, True).numpy()
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(a, a2)
    assert set(np.unique(a)) <= {0.0, 3.0}   # dropout keeps 1.5 scaled by 2, or drops
    np.testing.assert_allclose(m(x, False).numpy(), realtf.saved_model.load(dropout_dir)(x, False).numpy())


def test_one_conversion_per_concrete_function(dropout_dir):
    """Batch sizes the saved signature's ``None`` covers share one conversion (TF's concrete
    function); a new shape only finds it again."""
    m = tj.saved_model.load(dropout_dir)
    fn = m._call_fn
    for n in (1, 2, 5):
        m(np.ones((n, 3), np.float32), False)
    conv = fn._converter
    assert len(conv._by_form) == 3 and len(conv._by_concrete) == 1
    assert len({id(c) for c in conv._by_form.values()}) == 1 and len(fn._ops) == 1


def test_loaded_variables_are_tapejax_variables(dropout_dir):
    """The loaded Variable is a tapejax Variable: assigning it changes the next call, and a
    checkpoint of the loaded object saves it under its attribute path."""
    m = tj.saved_model.load(dropout_dir)
    assert isinstance(m.w, tj.Variable) and m.trainable_variables == (m.w,)
    m.w.assign(np.zeros((3, 4), np.float32))
    assert float(tj.reduce_sum(m(np.ones((2, 3), np.float32), False))) == 0.0
    names = [n for n, _ in tj.train.list_variables(tj.train.Checkpoint(model=m).write(
        os.path.join(os.path.dirname(dropout_dir), "ckpt")))]
    assert any(n.startswith("model/w/") for n in names)


def test_missing_tf2jax_names_the_extra(dropout_dir, monkeypatch):
    """Without tf2jax, loading a TF SavedModel raises ImportError naming the ``tf`` extra, before
    anything is read."""
    monkeypatch.setitem(sys.modules, "tf2jax", None)
    with pytest.raises(ImportError, match=r"tapejax\[tf\]"):
        tj.saved_model.load(dropout_dir)


def test_not_a_saved_model_keeps_tfs_error(tmp_path):
    """A directory with neither format's files: the OSError naming the missing file, as before."""
    with pytest.raises(OSError, match="SavedModel file does not exist"):
        tj.saved_model.load(str(tmp_path))


@pytest.fixture(scope="module")
def unbounded_dir(tmp_path_factory):
    """A tf.Module whose loop runs until the data says stop, with no ``maximum_iterations``."""
    tf = realtf

    class Grow(tf.Module):
        def __init__(self):
            super().__init__()
            self.b = tf.Variable(np.full(3, 0.25, np.float32), name="b")

        @tf.function(input_signature=[tf.TensorSpec([3], tf.float32)])
        def __call__(self, x):
            y = x
            while tf.reduce_sum(tf.abs(y)) < 8.0:
                y = y * 1.5 + self.b
            return y

    path = str(tmp_path_factory.mktemp("tfsm") / "grow")
    tf.saved_model.save(Grow(), path)
    return path


def test_data_dependent_loop_runs_but_its_gradient_is_a_documented_limit(unbounded_dir):
    """A loop whose trip count depends on the data and has no bound stays XLA's while loop: the
    call gives TF's value; reverse mode through it raises tapejax's UnboundedWhileGradientError
    (TF differentiates it: the documented limit), not a wrong number."""
    from tapejax.autodiff.gradient import UnboundedWhileGradientError
    x = np.array([0.5, -0.2, 0.3], np.float32)
    m = tj.saved_model.load(unbounded_dir)
    np.testing.assert_allclose(m(x).numpy(), realtf.saved_model.load(unbounded_dir)(x).numpy(), rtol=1e-6)
    with tj.GradientTape() as tape:
        y = tj.reduce_sum(m(tj.constant(x)))
    with pytest.raises(UnboundedWhileGradientError):
        tape.gradient(y, m.b)


def test_trip_count_of_loops():
    """``tf2jax_ops._trip_count``: a loop whose condition reads only counters started at
    constants runs at trace time (its count); one whose condition reads traced data, or a
    counter the body computes from traced data, gives -1."""
    import jax
    import jax.numpy as jnp

    from tapejax.train.saved_model.tf2jax_ops import _trip_count

    def cond(c):
        return c[0] < 4

    def body(c):
        return (c[0] + 1, jnp.tanh(c[1]))

    start = (np.array(0, np.int32), np.ones(3, np.float32))
    assert _trip_count(cond, body, start) == 4

    def traced(x):
        return _trip_count(cond, body, (np.array(1, np.int32), x)), \
            _trip_count(lambda c: jnp.sum(c[1]) < 5, body, (np.array(0, np.int32), x)), \
            _trip_count(cond, lambda c: (c[0] + jnp.sum(c[1]).astype(jnp.int32), c[1]), (np.array(0, np.int32), x))

    counts = []
    jax.make_jaxpr(lambda x: counts.extend(traced(x)) or x)(jnp.ones(3))
    assert counts == [3, -1, -1]


@pytest.fixture(scope="module")
def cond_dropout_dir(tmp_path_factory):
    """A tf.Module whose ``tf.cond`` on a tensor ``training`` flag applies dropout in one branch
    (a random op inside an ``If``)."""
    tf = realtf

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(np.arange(9, dtype=np.float32).reshape(3, 3) / 8.0, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([], tf.bool)])
        def __call__(self, x, training):
            h = tf.matmul(x, self.w) + 1.0
            return tf.cond(training, lambda: tf.nn.dropout(h, rate=0.5), lambda: h)

    path = str(tmp_path_factory.mktemp("tfsm") / "cond_dropout")
    tf.saved_model.save(Net(), path)
    return path


def test_random_op_in_a_cond_branch(cond_dropout_dir):
    """A random op inside a loaded ``tf.cond``: the inference branch gives TF's values; the
    training branch keeps or drops each value (kept ones scaled by 2) with a key from tapejax's
    stream (``set_seed`` repeats it), and its gradient is the mask's, as the output says."""
    x = np.random.RandomState(4).rand(4, 3).astype(np.float32)
    m = tj.saved_model.load(cond_dropout_dir)
    h = realtf.saved_model.load(cond_dropout_dir)(x, False).numpy()
    np.testing.assert_allclose(m(x, tj.constant(False)).numpy(), h, rtol=1e-6)
    tj.random.set_seed(5)
    with tj.GradientTape() as tape:
        y = m(tj.constant(x), tj.constant(True))
        loss = tj.reduce_sum(y)
    g = tape.gradient(loss, m.w).numpy()
    tj.random.set_seed(5)
    again = m(x, tj.constant(True)).numpy()
    out = y.numpy()
    kept = out != 0
    np.testing.assert_allclose(out[kept], 2 * h[kept], rtol=1e-6)
    assert 0 < kept.sum() < kept.size
    np.testing.assert_array_equal(out, again)
    np.testing.assert_allclose(g, x.T @ (2.0 * kept), rtol=1e-6)
